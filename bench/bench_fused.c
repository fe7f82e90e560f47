/* bench_fused.c - the fused mixed-precision update on the CPU backend, in
   GB/s against memcpy (make bench-fused; bench/fused_body.h says what is
   measured). One replica, so one thread, as each CPU replica runs its own
   update. Default N = 16M parameters (about 400 MB of arena); N from argv[1].
   The GPU build of the same body is bench/bench_fused_cuda.cu. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "fused_body.h"

/* On the CPU, device memory is host memory: the reference is memcpy. */
static void cpu_copy(void *dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    memcpy(dst, src, bytes);
}

int main(int argc, char **argv) { return fused_main(argc, argv, "cpu:1", (size_t)16 << 20, 1, cpu_copy); }
