#!/bin/sh
# bench/gpu.sh - make bench-gpu: mirror and PyTorch side by side on one GPU,
# in one run: the workloads of bench_gpu.c against PyTorch's fastest mode
# (eager or CUDA graphs; torch.compile too with
# BENCH_TORCH_ARGS="--modes eager,graphs,compile", a dozen Inductor compiles:
# minutes) in each precision, the GEMM-bound MLP against cuBLAS's own GEMM
# rate, K replicas on the GPU, and the fused mixed-precision update against
# the GPU's copy bandwidth. The outputs go to BENCH_DIR (default $BUILD);
# bench/gpu_table.sh makes the table (the GPU pack's run script uses it too).
# BENCH_GPU_ARGS and BENCH_TORCH_ARGS pass arguments on (to try the report
# on a CPU: BENCH_GPU_ARGS="--quick --devices cpu:2"
# BENCH_TORCH_ARGS="cpu --quick --modes eager"; the fused update then fails).
BUILD=${BUILD:-build}
BENCH_DIR=${BENCH_DIR:-$BUILD}
export BENCH_DIR
mkdir -p "$BENCH_DIR" || exit 1
rm -f "$BENCH_DIR/bench_torch_compile.txt" # bench_torch.txt holds every mode here
"$BUILD/bench_gpu" $BENCH_GPU_ARGS >"$BENCH_DIR/bench_gpu.txt" || exit 1
if python3 -c 'import torch, numpy' 2>/dev/null; then
    python3 bench/bench_torch.py $BENCH_TORCH_ARGS >"$BENCH_DIR/bench_torch.txt" || : >"$BENCH_DIR/bench_torch.txt"
else
    echo "PyTorch not installed (pip install torch numpy): mirror's figures only"
    : >"$BENCH_DIR/bench_torch.txt"
fi
"$BUILD/bench_fused_cuda" >"$BENCH_DIR/bench_fused_cuda.txt" || fused=failed
if python3 -c 'import torch' 2>/dev/null; then
    python3 bench/bench_torch_amp.py >"$BENCH_DIR/bench_torch_amp.txt" || : >"$BENCH_DIR/bench_torch_amp.txt"
else
    : >"$BENCH_DIR/bench_torch_amp.txt"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# GPU: /'
sh bench/gpu_table.sh "$BENCH_DIR"
[ -z "${fused:-}" ] || { echo "bench_fused_cuda failed"; exit 1; }
