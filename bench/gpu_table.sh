#!/bin/sh
# bench/gpu_table.sh DIR - mirror against PyTorch on one GPU, from the
# benchmarks' outputs in DIR: bench_gpu.txt, bench_torch.txt (and
# bench_torch_compile.txt, torch.compile's), bench_fused_cuda.txt and
# bench_torch_amp.txt. Used by make bench-gpu (bench/gpu.sh) and by the GPU
# pack's run script; a missing file leaves its columns at "-". Two tables,
# a row for each workload and where its data lived (the small MLP twice on
# a GPU: data=device and data=host): fp32, torch's TF32 and fp16; then bf16
# and the mode of mirror's figures. Then the GEMM-bound MLP against cuBLAS
# in each precision, K replicas, and the fused mixed-precision update.
dir=${1:?usage: bench/gpu_table.sh DIR}
gpu=$dir/bench_gpu.txt
torch="$dir/bench_torch.txt $dir/bench_torch_compile.txt"
fused=$dir/bench_fused_cuda.txt
amp=$dir/bench_torch_amp.txt
grep -h '^#' "$gpu" $torch 2>/dev/null
# A row is a workload with its data where they lived (data=device, or
# data=host: the batch gathered on the host and uploaded each step).
# mirror's fp32 is strict: against torch fp32 (TF32 off); torch's TF32 is
# shown beside it. mirror fp16 against torch amp (autocast to fp16), bf16
# against amp-bf16, in a second table. "best" is torch's fastest mode,
# mirror's its faster of eager and graphs; the ratio is mirror / best, in
# samples per second.
cat "$gpu" $torch 2>/dev/null | awk '
    function where(f) { return f ~ /^data=/ ? substr(f, 6) : "device" }
    function ratio(a, b) { return b && a != "" ? sprintf("%.2fx", a / b) : "-" }
    function show(v) { return v != "" ? v : "-" }
    $1 == "mirror" { r = $2 " " where($9); k = r " " $4
                     if ($5 > m[k]) { m[k] = $5; tf[k] = $7; mm[k] = $8 }
                     batch[r] = $3; if (!seen[r]++) order[n++] = r; if (!($2 in at)) at[$2] = where($9) }
    $1 == "torch" { k = $2 " " where($9) " " $4; if ($6 > best[k]) { best[k] = $6; mode[k] = $5; ttf[k] = $8 } }
    $1 == "cublas" { blas[$2] = $3 }
    END {
        f = "%-8s %5s %-6s | %10s %10s %-7s %6s | %10s %-7s | %10s %10s %-7s %6s\n"
        printf f, "workload", "batch", "data", "mirror fp32", "torch fp32", "(mode)", "ratio", "torch tf32", "(mode)",
               "mirror fp16", "torch amp", "(mode)", "ratio"
        for (i = 0; i < n; i++) {
            r = order[i]; split(r, w, " ")
            printf f, w[1], batch[r], w[2], show(m[r " fp32"]), show(best[r " fp32"]), mode[r " fp32"],
                   ratio(m[r " fp32"], best[r " fp32"]), show(best[r " tf32"]), mode[r " tf32"],
                   show(m[r " fp16"]), show(best[r " amp"]), mode[r " amp"], ratio(m[r " fp16"], best[r " amp"])
        }
        # then bf16, against torch and against fp16, and the modes of the mirror figures
        f = "%-8s %5s %-6s | %10s %10s %-7s %6s | %-10s %6s %6s | %s\n"
        printf f, "workload", "batch", "data", "mirror bf16", "torch bf16", "(mode)", "ratio", "bf16/fp16:", "mirror",
               "torch", "mirror fp32/fp16/bf16 (mode)"
        for (i = 0; i < n; i++) {
            r = order[i]; split(r, w, " ")
            printf f, w[1], batch[r], w[2], show(m[r " bf16"]), show(best[r " amp-bf16"]), mode[r " amp-bf16"],
                   ratio(m[r " bf16"], best[r " amp-bf16"]), "", ratio(m[r " bf16"], m[r " fp16"]),
                   ratio(best[r " amp-bf16"], best[r " amp"]), show(mm[r " fp32"]) "/" show(mm[r " fp16"]) "/" show(mm[r " bf16"])
        }
        print "GEMM-bound mlp8192, TFLOP/s (6 x batch x parameters a step) against cuBLAS at 8192^3:"
        split("fp32 fp16 bf16", p, " "); split("fp32 amp amp-bf16", tp, " ")
        r = "mlp8192 " at["mlp8192"]
        for (j = 1; j <= 3; j++) {
            b = blas[tp[j]]; t = tf[r " " p[j]]
            printf "  %s: mirror %s, torch %s, cuBLAS GEMM %s%s\n", p[j], show(t), (ttf[r " " tp[j]] ? ttf[r " " tp[j]] : "-"),
                   (b ? b : "-"), (b && t != "" ? sprintf(" (mirror at %.0f%% of it)", 100 * t / b) : "")
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
