#!/bin/sh
# bench/gpu.sh - make bench-gpu: mirror and PyTorch side by side on one GPU,
# in one run, then mirror's step time with 1, 2 and 4 replicas on the GPU.
BUILD=${BUILD:-build}
"$BUILD/bench_gpu" >"$BUILD/bench_gpu.txt" || exit 1
if python3 -c 'import torch, numpy' 2>/dev/null; then
    python3 bench/bench_torch.py >"$BUILD/bench_torch.txt" || : >"$BUILD/bench_torch.txt"
else
    echo "PyTorch not installed (pip install torch numpy): mirror's figures only"
    : >"$BUILD/bench_torch.txt"
fi
grep '^#' "$BUILD/bench_gpu.txt" "$BUILD/bench_torch.txt" | cut -d: -f2-
# torch strict: fp32 and the batch uploaded each step, as mirror does;
# torch tuned: cuDNN TF32 and the data on the GPU (bench_torch.py).
printf '%-6s %6s %12s %12s %8s %12s %8s\n' model batch "mirror (/s)" "strict (/s)" ratio "tuned (/s)" ratio
for key in "mlp 128" "cnn 256"; do
    m=$(grep "^mirror $key " "$BUILD/bench_gpu.txt" | awk '{print $4}')
    t=$(grep "^torch $key .* strict$" "$BUILD/bench_torch.txt" | awk '{print $4}')
    u=$(grep "^torch $key .* tuned$" "$BUILD/bench_torch.txt" | awk '{print $4}')
    awk -v k="$key" -v m="$m" -v t="$t" -v u="$u" 'BEGIN { split(k, a, " ");
        printf "%-6s %6s %12s %12s %8s %12s %8s\n", a[1], a[2], m, (t == "" ? "-" : t),
            (t == "" ? "-" : sprintf("%.2fx", m / t)), (u == "" ? "-" : u), (u == "" ? "-" : sprintf("%.2fx", m / u)) }'
done
echo "step time of the CNN at global batch 256 on one GPU:"
grep '^replicas' "$BUILD/bench_gpu.txt" | awk '{ printf "  %s replica(s): %s ms\n", $2, $3 }'

# The fused mixed-precision update (bench_fused_cuda, 256M parameters) in GB/s
# against the GPU's copy, then PyTorch's AMP update on as many parameters.
"$BUILD/bench_fused_cuda" >"$BUILD/bench_fused_cuda.txt" || exit 1
if python3 -c 'import torch' 2>/dev/null; then
    python3 bench/bench_torch_amp.py >"$BUILD/bench_torch_amp.txt" || : >"$BUILD/bench_torch_amp.txt"
else
    : >"$BUILD/bench_torch_amp.txt"
fi
echo "fused mixed-precision update (what, B/param, ms, GB/s, fraction of the copy's GB/s):"
cat "$BUILD/bench_fused_cuda.txt" "$BUILD/bench_torch_amp.txt"
m=$(grep '^fused check+adam_mixed+scaler_update ' "$BUILD/bench_fused_cuda.txt" | awk '{print $4}')
t=$(grep '^torch_amp amp_step ' "$BUILD/bench_torch_amp.txt" | awk '{print $4}')
awk -v m="$m" -v t="$t" 'BEGIN { printf "AMP step with AdamW: mirror %s ms, torch %s ms%s\n", m, (t == "" ? "-" : t),
    (t == "" ? "" : sprintf(" (torch / mirror %.2fx)", t / m)) }'
