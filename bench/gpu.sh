#!/bin/sh
# bench/gpu.sh - make bench-gpu: mirror and PyTorch side by side on one GPU,
# in one run: the workloads of bench_gpu.c against PyTorch's fastest mode
# (eager, CUDA graphs or torch.compile) in each precision, the GEMM-bound
# MLP against cuBLAS's own GEMM rate, K replicas on the GPU, and the fused
# mixed-precision update against the GPU's copy bandwidth.
# BENCH_GPU_ARGS and BENCH_TORCH_ARGS pass arguments on (to try the report
# on a CPU: BENCH_GPU_ARGS="--quick --devices cpu:2"
# BENCH_TORCH_ARGS="cpu --quick --modes eager"; the fused update then fails).
BUILD=${BUILD:-build}
"$BUILD/bench_gpu" $BENCH_GPU_ARGS >"$BUILD/bench_gpu.txt" || exit 1
if python3 -c 'import torch, numpy' 2>/dev/null; then
    python3 bench/bench_torch.py $BENCH_TORCH_ARGS >"$BUILD/bench_torch.txt" || : >"$BUILD/bench_torch.txt"
else
    echo "PyTorch not installed (pip install torch numpy): mirror's figures only"
    : >"$BUILD/bench_torch.txt"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# GPU: /'
grep -h '^#' "$BUILD/bench_gpu.txt" "$BUILD/bench_torch.txt"
# mirror's fp32 is strict: against torch fp32 (TF32 off); torch's TF32 is
# shown beside it. mirror fp16 against torch AMP. "best" is torch's fastest
# mode, mirror's its faster of eager and graphs; the ratio is mirror / best,
# in samples per second.
cat "$BUILD/bench_gpu.txt" "$BUILD/bench_torch.txt" | awk '
    $1 == "mirror" { k = $2 " " $4; if ($5 > m[k]) { m[k] = $5; tf[k] = $7; mm[k] = $8 }
                     batch[$2] = $3; if (!seen[$2]++) order[n++] = $2 }
    $1 == "torch" { k = $2 " " $4; if ($6 > best[k]) { best[k] = $6; mode[k] = $5; ttf[k] = $8 } }
    $1 == "cublas" { blas[$2] = $3 }
    END {
        printf "%-8s %5s | %10s %10s %-8s %6s | %10s %-8s | %10s %10s %-8s %6s\n", "workload", "batch",
               "mirror fp32", "torch fp32", "(mode)", "ratio", "torch tf32", "(mode)", "mirror fp16", "torch amp",
               "(mode)", "ratio"
        for (i = 0; i < n; i++) {
            w = order[i]
            printf "%-8s %5s | %10s %10s %-8s %6s | %10s %-8s | %10s %10s %-8s %6s\n", w, batch[w],
                   m[w " fp32"], (best[w " fp32"] ? best[w " fp32"] : "-"), mode[w " fp32"],
                   (best[w " fp32"] ? sprintf("%.2fx", m[w " fp32"] / best[w " fp32"]) : "-"),
                   (best[w " tf32"] ? best[w " tf32"] : "-"), mode[w " tf32"],
                   m[w " fp16"], (best[w " amp"] ? best[w " amp"] : "-"), mode[w " amp"],
                   (best[w " amp"] ? sprintf("%.2fx", m[w " fp16"] / best[w " amp"]) : "-")
        }
        printf "mirror, the faster of eager and graphs:"
        for (i = 0; i < n; i++) printf " %s %s/%s", order[i], mm[order[i] " fp32"], mm[order[i] " fp16"]
        printf "\n"
        print "GEMM-bound mlp8192, TFLOP/s (6 x batch x parameters a step) against cuBLAS at 8192^3:"
        split("fp32 fp16", p, " ")
        for (j = 1; j <= 2; j++) {
            b = blas[p[j] == "fp16" ? "amp" : "fp32"]
            printf "  %s: mirror %s, torch %s, cuBLAS GEMM %s%s\n", p[j], tf["mlp8192 " p[j]],
                   (ttf["mlp8192 " (p[j] == "fp16" ? "amp" : "fp32")] ? ttf["mlp8192 " (p[j] == "fp16" ? "amp" : "fp32")] : "-"),
                   (b ? b : "-"), (b ? sprintf(" (mirror at %.0f%% of it)", 100 * tf["mlp8192 " p[j]] / b) : "")
        }
        if (blas["tf32"]) printf "  cuBLAS GEMM in TF32: %s\n", blas["tf32"]
    }'
echo "step time of the CNN at global batch 512 on one GPU:"
grep '^replicas' "$BUILD/bench_gpu.txt" | awk '{ printf "  %s replica(s): %s ms, sharded update %s ms\n", $2, $3, $4 }'

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
