#!/bin/sh
# tests/gpu/run.sh - make test-gpu: the GPU pack's script
# (tests/gpu/pack_run.sh) on this build's programs, so that a GPU machine
# with the tree and one with only build/gpu-pack run the same checks: the
# smoke test, test_cuda, the trainer's modes and their equalities,
# compute-sanitizer over the operation tests, and the CUDA + MPI trainer
# where it is built and mpirun is; the benchmarks stay in make bench-gpu.
# One deadline (GPU_SECONDS, default 900); the results go to
# $BUILD/gpu-run/gpu-results.txt (make gpu-report RESULTS=$BUILD/gpu-run).
# Ends with "N passed, N failed"; on a machine with no GPU at all (the
# driver lists none and the CUDA runtime counts none), one line that says
# so in the words of gpu_info and the CUDA trainer ("no NVIDIA driver
# found" where the runtime finds no driver, though it answers "insufficient
# driver" then too), and exit 0. A GPU the driver
# lists but the programs cannot use (a driver older than the runtime, say)
# runs, and fails, saying which driver would do.
BUILD=${BUILD:-build}
if ! { nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1; }; then
    info=$(timeout 20 "$BUILD/gpu_info" 2>&1)
    if [ $? -eq 1 ] && echo "$info" | grep -q '^gpus: 0'; then
        echo "make test-gpu: skipped, $(echo "$info" | sed -n 's/^gpus: 0 (\(.*\))$/\1/p')"
        exit 0
    fi
fi
GPU_BIN=$BUILD GPU_SCRIPTS=bench GPU_SKIP="bench compile ${GPU_SKIP:-}" \
    sh tests/gpu/pack_run.sh "$BUILD/gpu-run" "${GPU_SECONDS:-900}"
rc=$?
end=$(sed -n 's/^== end: //p' "$BUILD/gpu-run/gpu-results.txt" 2>/dev/null)
p=$(echo "$end" | sed -n 's/^[^0-9]*\([0-9]*\) passed.*/\1/p')
f=$(echo "$end" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
[ "$rc" -eq 0 ] || [ "${f:-0}" -ne 0 ] || f=1 # no GPU, or the script cut short
echo "${p:-0} passed, ${f:-0} failed"
[ "$rc" -eq 0 ]
