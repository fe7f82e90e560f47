#!/bin/sh
# tests/pack_test.sh - make test-pack: the GPU pack (make gpu-pack, built
# first) checked on this machine, ending with "N passed, N failed" alone on
# the last line. Its programs fit any x86-64-v3 CPU and 48 MiB; gpu_info
# picks the code each GPU takes from the pack's list; its script, without a
# GPU, writes the results header and fails within 10 s saying why (no
# driver where the machine has none, else no GPU); with --cpu it runs every
# stage's logic on CPU replicas to a complete results file, from which
# tools/gpu_report.sh makes the GPU page. The script's logic on stand-ins
# for the programs (no nvcc needed) is make test's (tests/run.sh). PACK
# names the pack (build/gpu-pack), BUILD where the log and kept failures go.
BUILD=${BUILD:-build}
PACK=${PACK:-build/gpu-pack}
[ -x "$PACK/run.sh" ] || { echo "tests/pack_test.sh: no $PACK/run.sh (make gpu-pack builds it)" >&2; exit 2; }
. tests/checks.sh # check, gpu_here; a failed check's output kept in $BUILD/failures-pack/
checks_start "$BUILD/pack-test.log" "$BUILD/failures-pack"

sh tools/gpu_pack.sh --check "$PACK" >"$tmp/pack-check.out" 2>&1
check "tests/gpu/test_cuda.cu builds, in the GPU pack (make test-gpu runs it on a GPU)" test -x "$PACK/test_cuda"
check "the GPU pack's 10 programs: no AVX-512 instruction (objdump -d finds no zmm register)" \
    grep -q '^gpu-pack: 10 of 10 programs read: 0 with zmm registers' "$tmp/pack-check.out"
check "the GPU pack's programs: the CUDA runtime linked in, no libnccl needed in nonccl/" \
    grep -q '^gpu-pack: 0 with a shared CUDA runtime, 0 in nonccl/ with libnccl$' "$tmp/pack-check.out"
check "the GPU pack: at most 48 MiB" grep -q '^gpu-pack: [0-9.]* MiB in all: within 48$' "$tmp/pack-check.out"
# The SASS of the GPU's major at or below its minor, else the newest PTX
# at or below it, else none: what the driver takes from the pack.
pack_codes() {
    want="6.1 none
7.5 sm_75 SASS
8.0 sm_80 SASS
8.6 sm_80 SASS
8.7 sm_80 SASS
8.9 sm_80 SASS
9.0 sm_90 SASS
10.0 sm_100 SASS
10.3 sm_100 SASS
12.0 sm_120 SASS
12.1 sm_120 SASS
13.0 compute_120 PTX"
    echo "$want" | while read -r cc code; do
        line=$("$PACK/gpu_info" --code-for "$cc")
        rc=$?
        echo "$line (exit $rc)"
        case $line in "code for $cc: $code"*) ;; *) exit 1 ;; esac
        [ $rc -eq "$([ "$code" = none ] && echo 1 || echo 0)" ] || exit 1
    done &&
        "$PACK/gpu_info" --code-for 8.6 "sm_75 sm_80 sm_90 compute_90" | grep -q '^code for 8.6: sm_80 SASS$' &&
        "$PACK/gpu_info" --code-for 9.0 "sm_80 compute_80" | grep -q '^code for 9.0: compute_80 PTX' &&
        grep -q '^code: host x86-64-v3 (no AVX-512); device SASS for 75 80 90 [0-9 ]*+ PTX for [0-9]' "$PACK/PACK.txt"
}
check "the GPU pack's code: gpu_info --code-for 6.1 to 13.0 names the SASS or PTX the driver takes; PACK.txt lists it" \
    pack_codes
if ! gpu_here; then
    pack_no_gpu() {
        t0=$(date +%s)
        "$PACK/run.sh" "$tmp/pack-nogpu" >"$tmp/pack-nogpu.out" 2>&1
        rc=$?
        took=$(($(date +%s) - t0))
        r=$tmp/pack-nogpu/gpu-results.txt
        # no libcuda.so.1 and no kernel module: no driver, which the CUDA
        # runtime reports as a driver too old ("insufficient")
        want="no GPU"
        ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' || [ -e /proc/driver/nvidia/version ] || want="no driver"
        echo "run.sh without a GPU: exit $rc after $took s, expecting \"$want\""
        test $rc -ne 0 && test $took -le 10 && test "$(grep -c "^$want: " "$tmp/pack-nogpu.out")" -eq 1 &&
            { [ "$want" = "no GPU" ] || grep -q '^no driver: no NVIDIA driver found (the CUDA runtime finds no libcuda\.so\.1); ' "$tmp/pack-nogpu.out"; } &&
            grep -q '^date: ' "$r" && grep -q '^commit: [0-9a-f]' "$r" && grep -q '^cublas: [0-9]' "$r" &&
            grep -q '^flavour: nccl' "$r" && grep -q "^== end: $want; " "$r" &&
            grep -q '^host memory: MIRROR_HOST_MEMORY=advisory ' "$r"
    }
    check "build/gpu-pack/run.sh without a GPU: the results header, one line saying why (no driver, or no GPU), non-zero within 10 s" pack_no_gpu
    # an ldd that finds no libnccl: the no-NCCL flavour takes over
    mkdir -p "$tmp/ldd"
    printf '#!/bin/sh\ncase $1 in */nonccl/*) ;; *) echo "\tlibnccl.so.2 => not found" ;; esac\n' >"$tmp/ldd/ldd"
    chmod +x "$tmp/ldd/ldd"
    check "build/gpu-pack/run.sh where libnccl is not found: the nonccl/ flavour, said in the results" sh -c \
        "PATH='$tmp/ldd':\$PATH '$PACK/run.sh' '$tmp/pack-nonccl' >'$tmp/pack-nonccl.out' 2>&1; grep -q '^flavour: nonccl (libnccl.so.2 not found' '$tmp/pack-nonccl/gpu-results.txt' && grep -q '^nccl: none (built without NCCL)' '$tmp/pack-nonccl/gpu-results.txt'"
fi
# On a machine that says it has 16 MiB and cannot grow (tests/fake_memory.sh,
# as root): the host memory check is active (it would refuse the smoke
# stage's trainer, 27 MiB, and more), and run.sh's MIRROR_HOST_MEMORY=advisory
# lets every stage run with a notice, as on a microVM whose MemTotal starts low.
if unshare -m true 2>/dev/null; then
    small="sh tests/fake_memory.sh 16384 fixed --"
else
    small=
    echo "the pack's --cpu run on a 16 MiB machine: skipped, unshare -m needs root (run as it is)"
fi
pack_cpu() {
    r=$tmp/pack-cpu/gpu-results.txt
    # 100 s of the 300 on an idle 2-core machine; a failure leaves its reasons in the log
    $small "$PACK/run.sh" --cpu "$tmp/pack-cpu" 300 >"$tmp/pack-cpu.out" 2>&1 ||
        { tail -20 "$tmp/pack-cpu.out"; grep -E '^(FAILED|cut)' "$r"; return 1; }
    if [ -n "$small" ]; then
        grep -rq 'more than the physical memory (16.0 MiB); going on, as host_memory (\$MIRROR_HOST_MEMORY) is advisory$' \
            "$tmp/pack-cpu/smoke" || { echo "no notice of the 16 MiB machine in $tmp/pack-cpu/smoke"; return 1; }
    fi
    for s in smoke test_cuda trainer bench sanitizer profile mpi compile; do
        grep -q "^== $s\$" "$r" || { echo "no stage $s in $r"; return 1; }
    done
    grep -qE '^== end: [0-9]+ passed, 0 failed, [0-9]+ skipped, 0 cut' "$r" &&
        test "$(grep -c '^ok: train_cuda ' "$r")" -eq 30 && test "$(grep -c '^ok: .*, bit for bit$' "$r")" -eq 12 &&
        grep -q '^ok: bench_gpu ' "$r" && grep -q '^mlp8192 ' "$r" && grep -q '^skipped: test_cuda (GPU only)' "$r" ||
        { grep -E '^(== end|FAILED|cut)' "$r"; return 1; }
}
check "build/gpu-pack/run.sh --cpu${small:+ on a 16 MiB machine}: every stage on CPU replicas, 30 trainer runs and 12 equalities, a complete results file" \
    pack_cpu
pack_report() {
    sh tools/gpu_report.sh "$tmp/pack-cpu" "$tmp/GPU.md" || return 1
    n=$(grep -cE '^(ok|FAILED|skipped|cut|peer): ' "$tmp/pack-cpu/gpu-results.txt")
    test "$n" -gt 40 && test "$(grep -cE '^\| (smoke|test_cuda|trainer|bench|sanitizer|profile|mpi|compile) \| .* \| (ok|FAILED|skipped|cut|peer) \|$' "$tmp/GPU.md")" -eq "$n" &&
        grep -q '^| commit | [0-9a-f]' "$tmp/GPU.md" && grep -q '^| verdict | .* 0 failed' "$tmp/GPU.md" &&
        grep -q '^## mirror against PyTorch' "$tmp/GPU.md" && grep -q '^mirror mlp8192 ' "$tmp/GPU.md"
}
check "tools/gpu_report.sh (make gpu-report): the --cpu results made into a page with every check and figure" pack_report

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
