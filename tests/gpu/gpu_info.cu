/* gpu_info.cu - the versions a GPU run is recorded with (the GPU pack's
   header, tests/gpu/pack_run.sh): the CUDA runtime linked in, the driver,
   cuBLAS and NCCL as loaded, and every visible GPU; then one kernel of
   this program's own, launched on GPU 0 and read back, which shows that
   the pack's code (sm_90 SASS, or its PTX compiled by the driver) runs.

   gpu_info [--versions]: "key: value" lines; exit 0 with a GPU that ran
   the kernel, 1 without a GPU (the runtime's reason on the "gpus:" line),
   2 when the kernel failed. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifndef MIRROR_NO_NCCL
#include <nccl.h>
#endif
#include <stdio.h>
#include <string.h>

static __global__ void answer(int *p) { *p = 42; }

/* 13000 -> "13.0", as the runtime and driver encode their versions. */
static void version_line(const char *what, int v)
{
    printf("%s: %d.%d\n", what, v / 1000, v % 1000 / 10);
}

/* One launch and a read-back on GPU 0; the code the driver took for it. */
static int kernel_runs(void)
{
    cudaFuncAttributes fa;
    int *d = NULL, h = 0;
    cudaError_t e = cudaFuncGetAttributes(&fa, answer);
    if (e == cudaSuccess) e = cudaMalloc((void **)&d, sizeof h);
    if (e == cudaSuccess) {
        answer<<<1, 1>>>(d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (e != cudaSuccess || h != 42) {
        printf("kernel: FAILED (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "wrong value read back");
        return 0;
    }
    printf("kernel: ran on GPU 0 (binary sm_%d, PTX %d)\n", fa.binaryVersion, fa.ptxVersion);
    return 1;
}

int main(int argc, char **argv)
{
    int v = 0, count = 0, i;
    cudaError_t e;
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "--versions"))) {
        fprintf(stderr, "usage: gpu_info [--versions]\n");
        return 2;
    }
    cudaRuntimeGetVersion(&v);
    version_line("cuda runtime", v);
    v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) version_line("cuda driver", v);
    else printf("cuda driver: none\n");
    {
        int major = 0, minor = 0, patch = 0;
        cublasGetProperty(MAJOR_VERSION, &major);
        cublasGetProperty(MINOR_VERSION, &minor);
        cublasGetProperty(PATCH_LEVEL, &patch);
        printf("cublas: %d.%d.%d\n", major, minor, patch);
    }
#ifndef MIRROR_NO_NCCL
    v = 0;
    if (ncclGetVersion(&v) == ncclSuccess) printf("nccl: %d.%d.%d\n", v / 10000, v % 10000 / 100, v % 100);
    else printf("nccl: unknown\n");
#else
    printf("nccl: none (built without NCCL)\n");
#endif
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("gpus: 0 (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
        return 1;
    }
    printf("gpus: %d\n", count);
    for (i = 0; i < count; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        printf("gpu %d: %s, compute capability %d.%d, %.1f GiB, %d SMs\n", i, p.name, p.major, p.minor,
               (double)p.totalGlobalMem / (1 << 30), p.multiProcessorCount);
    }
    return kernel_runs() ? 0 : 2;
}
