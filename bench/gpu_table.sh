#!/bin/sh
# bench/gpu_table.sh DIR - mirror against PyTorch on one GPU, from the
# benchmarks' outputs in DIR: bench_gpu.txt, bench_torch.txt (and
# bench_torch_compile.txt, torch.compile's), bench_fused_cuda.txt and
# bench_torch_amp.txt. Used by make bench-gpu (bench/gpu.sh) and by the GPU
# pack's run script; a missing file leaves its columns at "-".
dir=${1:?usage: bench/gpu_table.sh DIR}
gpu=$dir/bench_gpu.txt
torch="$dir/bench_torch.txt $dir/bench_torch_compile.txt"
fused=$dir/bench_fused_cuda.txt
amp=$dir/bench_torch_amp.txt
grep -h '^#' "$gpu" $torch 2>/dev/null
# mirror's fp32 is strict: against torch fp32 (TF32 off); torch's TF32 is
# shown beside it. mirror fp16 against torch AMP. "best" is torch's fastest
# mode, mirror's its faster of eager and graphs; the ratio is mirror / best,
# in samples per second.
cat "$gpu" $torch 2>/dev/null | awk '
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
            printf "  %s: mirror %s, torch %s, cuBLAS GEMM %s%s\n", p[j], (tf["mlp8192 " p[j]] != "" ? tf["mlp8192 " p[j]] : "-"),
                   (ttf["mlp8192 " (p[j] == "fp16" ? "amp" : "fp32")] ? ttf["mlp8192 " (p[j] == "fp16" ? "amp" : "fp32")] : "-"),
                   (b ? b : "-"), (b && tf["mlp8192 " p[j]] != "" ? sprintf(" (mirror at %.0f%% of it)", 100 * tf["mlp8192 " p[j]] / b) : "")
        }
        if (blas["tf32"]) printf "  cuBLAS GEMM in TF32: %s\n", blas["tf32"]
    }'
batch=$(awk '$1 == "mirror" && $2 == "cnn" { print $3; exit }' "$gpu" 2>/dev/null)
echo "step time of the CNN at global batch ${batch:-512}, K replicas of one device:"
grep '^replicas' "$gpu" 2>/dev/null | awk '{ printf "  %s replica(s): %s ms, sharded update %s ms\n", $2, $3, $4 }'

# The fused mixed-precision update (bench_fused_cuda) in GB/s against the
# GPU's copy, then PyTorch's AMP update on as many parameters.
echo "fused mixed-precision update (what, B/param, ms, GB/s, fraction of the copy's GB/s):"
cat "$fused" "$amp" 2>/dev/null
m=$(grep '^fused check+adam_mixed+scaler_update ' "$fused" 2>/dev/null | awk '{ print $4 }')
t=$(grep '^torch_amp amp_step ' "$amp" 2>/dev/null | awk '{ print $4 }')
awk -v m="$m" -v t="$t" 'BEGIN { printf "AMP step with AdamW: mirror %s ms, torch %s ms%s\n", (m == "" ? "-" : m),
    (t == "" ? "-" : t), (t == "" || m == "" || m == 0 ? "" : sprintf(" (torch / mirror %.2fx)", t / m)) }'
