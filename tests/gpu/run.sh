#!/bin/sh
# tests/gpu/run.sh - make test-gpu: the CUDA backend on a real GPU. Runs the
# GPU tests, the same under compute-sanitizer (memcheck, racecheck) where it
# is installed, and the CUDA trainer; writes $BUILD/gpu-results.txt (date,
# commit, GPU, counts) for bench/RESULTS.md; ends with "N passed, N failed".
BUILD=${BUILD:-build}
CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
passed=0
failed=0
log=$BUILD/test-gpu.log
: >"$log"

check() {
    name=$1
    shift
    if "$@" >>"$log" 2>&1; then
        passed=$((passed + 1))
        echo "ok: $name"
    else
        failed=$((failed + 1))
        echo "FAILED: $name"
    fi
}

# The test program's own checks count one by one.
"$BUILD/test_cuda" >"$BUILD/test_cuda.out" 2>&1
rc=$?
cat "$BUILD/test_cuda.out"
line=$(grep -E '^test_cuda: [0-9]+ passed, [0-9]+ failed$' "$BUILD/test_cuda.out" | tail -n 1)
if [ -n "$line" ]; then
    passed=$((passed + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
    failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')))
    [ "$rc" -eq 0 ] || [ "$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')" -ne 0 ] || failed=$((failed + 1))
else
    echo "test_cuda: no result line (exit $rc)"
    failed=$((failed + 1))
fi

# The deliberate out-of-memory test and NCCL's own probing return API
# errors on purpose: memcheck reports memory errors, not those. racecheck
# sees races in shared memory only, not a missing wait between streams.
# MIRROR_TEST_SANITIZER skips the 17 GB kernel over 2^31 elements there.
sanitizer=$(command -v compute-sanitizer || echo "$CUDA_PATH/bin/compute-sanitizer")
if [ -x "$sanitizer" ]; then
    for tool in memcheck racecheck; do
        check "compute-sanitizer --tool $tool over the GPU tests" \
            env MIRROR_TEST_SANITIZER=1 "$sanitizer" --tool "$tool" --report-api-errors no --error-exitcode 99 \
            "$BUILD/test_cuda"
    done
else
    echo "compute-sanitizer not found: skipped"
fi

# Each run's output goes to a file first, then is checked (a pipe into
# grep -q would end the run early).
out=$BUILD/train-gpu.out
check "build/train_cuda trains on the GPU to a final: line" sh -c \
    "$BUILD/train_cuda --model cnn --epochs 1 --synthetic 4000 >$out 2>&1; grep -q '^strategy: .*CUDA replica' $out && grep -q '^final:' $out"
check "build/train_cuda on 4 replicas of one GPU (copy reducer)" sh -c \
    "$BUILD/train_cuda --devices cuda:0,0,0,0 --model mlp --epochs 1 --synthetic 4000 | grep -q '^final: replicas=4'"
check "build/train_cuda in fp16 on the GPU (tensor-core GEMMs, fused update)" sh -c \
    "$BUILD/train_cuda --model cnn --epochs 1 --synthetic 4000 --precision fp16 >$out 2>&1; grep -q '^strategy: .*CUDA replica' $out && grep -q '^final: .*precision=fp16' $out"
check "build/train_cuda in bf16 on 2 replicas of one GPU (16-bit copy all-reduce)" sh -c \
    "$BUILD/train_cuda --devices cuda:0,0 --model mlp --epochs 1 --synthetic 4000 --precision bf16 | grep -q '^final: replicas=2 .*precision=bf16'"

# The CUDA + MPI trainer: one process on GPU 0, and with two GPUs or more
# two processes, one GPU each, one NCCL communicator over both.
if [ -x "$BUILD/train_cuda_mpi" ] && command -v mpirun >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    check "mpirun -np 1 build/train_cuda_mpi: a CUDA replica, a final: line" sh -c \
        "timeout 300 mpirun -np 1 $BUILD/train_cuda_mpi --model cnn --epochs 1 --synthetic 4000 >$out 2>&1; grep -q '^strategy: .*CUDA replica' $out && grep -q '^final:' $out"
    if [ "${gpus:-0}" -ge 2 ]; then
        check "mpirun -np 2 build/train_cuda_mpi: a GPU per process, NCCL across them, one final: line" sh -c \
            "timeout 300 mpirun -np 2 $BUILD/train_cuda_mpi --model cnn --epochs 1 --synthetic 4000 >$out 2>&1; grep -q '^strategy: 2 replicas in 2 processes; rank 0 has CUDA replica 0 cuda:.*nccl across processes' $out && test \$(grep -c '^final:' $out) -eq 1"
    fi
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
{
    echo "date: $(date -u +%Y-%m-%d)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
    echo "gpu: ${gpu:-unknown}"
    echo "make test-gpu: $passed passed, $failed failed"
} >"$BUILD/gpu-results.txt"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
