/* bench_fused_cuda.cu - the fused mixed-precision update on one GPU, in GB/s
   against the device-to-device copy (make bench-gpu; needs a GPU;
   bench/fused_body.h says what is measured). Default N = 256M parameters
   (6 GiB of device memory with the copy's 2 GiB); N from argv[1].
   Each timing issues the launches 10 times and waits once, so that the
   wait's own latency (tens of microseconds) stays out of the figures.
   The CPU build of the same body is bench/bench_fused.c. */
#define MIRROR_IMPLEMENTATION
#include "../mirror_cuda.h"
#include "fused_body.h"

/* The reference: cudaMemcpyAsync device to device on the replica's stream,
   where the update's kernels run. */
static void cuda_copy(void *dev, void *dst, const void *src, size_t bytes)
{
    mirror__cuda_dev *d = (mirror__cuda_dev *)dev;
    mirror__cuda_ok(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->stream), "cudaMemcpyAsync");
}

int main(int argc, char **argv) { return fused_main(argc, argv, "cuda:0", (size_t)256 << 20, 10, cuda_copy); }
