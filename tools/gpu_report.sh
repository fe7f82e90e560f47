#!/bin/sh
# tools/gpu_report.sh RESULTS [GPU_MD] - make gpu-report: a GPU run's results
# folder (what build/gpu-pack/run.sh OUTDIR wrote, brought back) made into
# bench/GPU.md (or GPU_MD): the date, commit, GPU, driver and library
# versions, every check with its result, the table of mirror against
# PyTorch and every figure the benchmarks printed. A run cut short says so.
set -u
dir=${1:?usage: tools/gpu_report.sh RESULTS [GPU_MD]}
md=${2:-bench/GPU.md}
res=$dir/gpu-results.txt
if [ ! -s "$res" ]; then
    echo "gpu-report: no $res" >&2
    exit 1
fi
tmp=$md.tmp.$$
trap 'rm -f "$tmp"' EXIT
awk -v src="$res" '
    BEGIN { n = nd = nt = nsmi = ngpu = 0 }
    function cell(s) { gsub(/\|/, "\\|", s); return s }
    function row(k, v) { if (v != "") printf "| %s | %s |\n", k, cell(v) }
    function value(line) { sub(/^[^:]*: /, "", line); return line }
    /^== / {
        if ($0 ~ /^== end: /) { end = substr($0, 9); next }
        stage = substr($0, 4); staged = 1; next
    }
    !staged {
        key = $0; sub(/: .*/, "", key)
        if (key == "nvidia-smi") smi[nsmi++] = value($0)
        else if (key ~ /^gpu [0-9]+$/) gpu[ngpu++] = value($0)
        else if (!(key in head)) head[key] = value($0)
        next
    }
    /^(ok|FAILED|skipped|cut|peer): / {
        kind = $1; sub(/:$/, "", kind)
        check[n] = value($0); result[n] = kind; where[n++] = stage
        count[kind]++
        next
    }
    stage == "test_cuda" && /^test_cuda: [0-9]+ passed, [0-9]+ failed/ {
        check[n] = "test_cuda: its own checks"; result[n] = $0; sub(/^test_cuda: /, "", result[n]); where[n++] = stage
        next
    }
    stage == "test_cuda" && /^  / { detail[nd++] = substr($0, 3); next }
    /^torch: / { head["torch"] = value($0); next }
    stage == "bench" || stage == "compile" {
        if ($0 == "the table again, with torch.compile:") { nt = 0; compiled = 1; next }
        table[nt++] = $0
    }
    END {
        print "# GPU results"
        print ""
        print "The GPU pack'"'"'s last run (`build/gpu-pack/run.sh OUTDIR SECONDS`, see tools/reference.md), made into"
        print "this page by `make gpu-report RESULTS=OUTDIR` from its `gpu-results.txt`."
        if (head["mode"] ~ /^cpu/)
            print "This run used CPU replicas (`run.sh --cpu`): it shows the checks'"'"' logic, not a GPU'"'"'s figures."
        print ""
        print "| | |"
        print "| --- | --- |"
        row("date", head["date"])
        row("commit", head["commit"])
        row("pack built", head["pack"])
        for (i = 0; i < nsmi; i++) {
            split(smi[i], f, ", ")
            if (f[2] != "") { row("GPU (nvidia-smi)", f[1] ", " f[3]); row("driver", f[2]) }
            else row("nvidia-smi", smi[i])
        }
        for (i = 0; i < ngpu; i++) row("GPU " i, gpu[i])
        row("GPUs", head["gpus"])
        row("CUDA driver API", head["cuda driver"])
        row("CUDA runtime (linked in)", head["cuda runtime"])
        row("cuBLAS", head["cublas"])
        row("NCCL", head["nccl"])
        row("GPU code in the pack", head["code"])
        row("flavour", head["flavour"])
        row("libraries", head["libraries"])
        row("missing", head["missing"])
        row("kernel", head["kernel"])
        row("PyTorch", head["torch"])
        row("host", head["host"])
        row("mode", head["mode"])
        row("deadline", head["deadline"] != "" ? head["deadline"] : "")
        row("host memory", head["host memory"])
        row("no driver", head["no driver"])
        row("no GPU", head["no GPU"])
        row("driver too old", head["driver too old"])
        row("no code", head["no code"])
        row("cannot start", head["cannot start the pack'"'"'s programs"])
        if (end != "") row("verdict", end)
        else row("verdict", "cut short: the results end before their closing line")
        print ""
        print "## Checks"
        print ""
        if (n == 0) print "None ran."
        else {
            printf "%d ok, %d failed, %d skipped, %d cut by the deadline, %d failures of a peer (PyTorch, compute-sanitizer; not counted as mirror'"'"'s); test_cuda'"'"'s own checks are one row.\n\n",
                count["ok"], count["FAILED"], count["skipped"], count["cut"], count["peer"]
            print "| stage | check | result |"
            print "| --- | --- | --- |"
            for (i = 0; i < n; i++) printf "| %s | %s | %s |\n", where[i], cell(check[i]), cell(result[i])
        }
        if (nd) {
            print ""
            print "test_cuda'"'"'s failed checks:"
            print ""
            print "```text"
            for (i = 0; i < nd; i++) print detail[i]
            print "```"
        }
        if (nt) {
            print ""
            print "## mirror against PyTorch" (compiled ? " (torch.compile included)" : "")
            print ""
            print "Samples per second; the ratio is mirror / PyTorch'"'"'s fastest mode (bench/gpu_table.sh)."
            print ""
            print "```text"
            for (i = 0; i < nt; i++) print table[i]
            print "```"
        }
    }' "$res" >"$tmp" || exit 1
# Every figure as printed, where the benchmarks' outputs came back too.
raw=
for f in bench_gpu.txt bench_torch.txt bench_torch_compile.txt bench_fused_cuda.txt bench_torch_amp.txt profile-phases.txt \
    profile-ncu.txt profile-torch.txt; do
    [ -s "$dir/$f" ] && raw="$raw $f"
done
if [ -n "$raw" ]; then
    {
        echo ""
        echo "## Every figure"
        echo ""
        echo "The benchmarks' own lines: \`mirror <workload> <batch> <precision> <samples/s> <ms/step> <TFLOP/s>"
        echo "<mode> data=<device|host>\`, \`replicas <K> <ms/step> <ms/step sharded> data=<device|host>\`,"
        echo "\`torch <workload> <batch> <precision> <mode> <samples/s> <ms/step> <TFLOP/s> data=<device|host>\`"
        echo "(data: where the training data lived), \`cublas <precision> <TFLOP/s>\`, and the fused update's"
        echo "\`<what> <B/param> <ms> <GB/s> <of copy>\`."
        for f in $raw; do
            echo ""
            echo "$f:"
            echo ""
            echo '```text'
            grep -v '^[[:space:]]*$' "$dir/$f"
            echo '```'
        done
    } >>"$tmp"
fi
mv "$tmp" "$md" || exit 1
trap - EXIT
echo "gpu-report: $md from $res"
