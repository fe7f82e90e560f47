/* gpu_info.cu - the versions a GPU run is recorded with (the GPU pack's
   header, tests/gpu/pack_run.sh): the CUDA runtime linked in, the driver,
   cuBLAS and NCCL as loaded, the GPU code built in, and every visible GPU
   with the code the driver takes for it; then one kernel of this
   program's own, launched on GPU 0 and read back, which shows that the
   pack's code runs there.

   gpu_info [--versions]: "key: value" lines; exit 0 with a GPU that ran
   the kernel; 1 without a GPU or without an NVIDIA driver (the "gpus:"
   line says which, and the runtime's reason); 2 when the kernel failed;
   3 when the driver is older than the runtime linked in (the "gpus:"
   line says which driver would do).
   gpu_info --code-for MAJOR.MINOR [CODES]: the code a GPU of that compute
   capability takes from CODES (a list such as "sm_80 sm_90 compute_90";
   default: this program's own), no GPU asked for; exit 0 when it has
   code, 1 when it has none. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifndef MIRROR_NO_NCCL
#include <nccl.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The GPU code built in: the Makefile passes the code= words of its
   -gencode flags; empty when it was built with -arch=... alone. */
#ifndef GPU_INFO_CODES
#define GPU_INFO_CODES ""
#endif

static __global__ void answer(int *p) { *p = 42; }

/* 13000 -> "13.0", as the runtime and driver encode their versions. */
static void version_line(const char *what, int v)
{
    printf("%s: %d.%d\n", what, v / 1000, v % 1000 / 10);
}

/* The code the driver takes for a GPU of compute capability cc (major * 10
   + minor) from a binary holding codes ("sm_75 sm_80 compute_120"): the
   SASS of the highest sm_XY of the GPU's major with Y at most its minor
   (sm_80's runs on 8.6 and 8.9, never on 9.0), else the PTX of the highest
   compute_XY at most cc, compiled by the driver when the program loads,
   else none. Architecture-specific codes (sm_90a) are not chosen. Writes
   the answer into out; returns 0 when there is no code for the GPU. */
static int code_for(const char *codes, int cc, char *out, size_t n)
{
    const char *p = codes;
    int sass = -1, ptx = -1;
    while (*p) {
        char *end;
        long v;
        int is_sass;
        if (*p == ' ') {
            p++;
            continue;
        }
        is_sass = !strncmp(p, "sm_", 3);
        if (!is_sass && strncmp(p, "compute_", 8)) break;
        v = strtol(p + (is_sass ? 3 : 8), &end, 10);
        if (end != p + (is_sass ? 3 : 8) && (*end == ' ' || *end == '\0') && v > 0 && v <= cc) {
            if (is_sass && v / 10 == cc / 10 && v > sass) sass = (int)v;
            if (!is_sass && v > ptx) ptx = (int)v;
        }
        p = end;
        while (*p && *p != ' ') p++;
    }
    if (sass > 0) snprintf(out, n, "sm_%d SASS", sass);
    else if (ptx > 0) snprintf(out, n, "compute_%d PTX, compiled by the driver", ptx);
    else snprintf(out, n, "none (no SASS for %d.x, no PTX at or below %d.%d)", cc / 10, cc / 10, cc % 10);
    return sass > 0 || ptx > 0;
}

/* The driver branch that the CUDA release's runtime needs. */
static const char *driver_for(int major)
{
    switch (major) {
    case 11: return "450";
    case 12: return "525";
    case 13: return "580";
    default: return NULL;
    }
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
    int runtime = 0, driver = 0, count = 0, i;
    char code[96];
    cudaError_t e;
    if (argc >= 3 && argc <= 4 && !strcmp(argv[1], "--code-for")) {
        int major = 0, minor = 0, k = 0;
        if (sscanf(argv[2], "%d.%d%n", &major, &minor, &k) != 2 || argv[2][k] || major < 1 || minor < 0 || minor > 9) {
            fprintf(stderr, "gpu_info: --code-for takes a compute capability such as 8.6, not '%s'\n", argv[2]);
            return 2;
        }
        i = code_for(argc == 4 ? argv[3] : GPU_INFO_CODES, major * 10 + minor, code, sizeof code);
        printf("code for %d.%d: %s\n", major, minor, code);
        return i ? 0 : 1;
    }
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "--versions"))) {
        fprintf(stderr, "usage: gpu_info [--versions] | gpu_info --code-for MAJOR.MINOR [CODES]\n");
        return 2;
    }
    cudaRuntimeGetVersion(&runtime);
    version_line("cuda runtime", runtime);
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (driver > 0) version_line("cuda driver", driver);
    else printf("cuda driver: none\n");
    {
        int major = 0, minor = 0, patch = 0;
        cublasGetProperty(MAJOR_VERSION, &major);
        cublasGetProperty(MINOR_VERSION, &minor);
        cublasGetProperty(PATCH_LEVEL, &patch);
        printf("cublas: %d.%d.%d\n", major, minor, patch);
    }
#ifndef MIRROR_NO_NCCL
    i = 0;
    if (ncclGetVersion(&i) == ncclSuccess) printf("nccl: %d.%d.%d\n", i / 10000, i % 10000 / 100, i % 100);
    else printf("nccl: unknown\n");
#else
    printf("nccl: none (built without NCCL)\n");
#endif
    printf("code: %s\n", GPU_INFO_CODES[0] ? GPU_INFO_CODES : "unknown (built without -gencode flags)");
    e = cudaGetDeviceCount(&count);
    /* The runtime answers "insufficient driver" with no driver at all too:
       the driver's version tells the two apart. The words are the CUDA
       trainer's (mirror__cuda_verdict), which tests/run.sh compares. */
    if (driver == 0) {
        printf("gpus: 0 (no NVIDIA driver found (the CUDA runtime finds no libcuda.so.1))\n");
        return 1;
    }
    if (driver / 1000 < runtime / 1000 || e == cudaErrorInsufficientDriver) {
        const char *need = driver_for(runtime / 1000);
        printf("gpus: unusable (the driver (CUDA %d.%d) is older than this pack's CUDA %d.%d runtime: ", driver / 1000,
               driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        if (need) printf("driver %s or newer", need);
        else printf("a driver for CUDA %d.0 or newer", runtime / 1000);
        if (driver / 1000 < runtime / 1000) printf(", or a pack built with CUDA %d", driver / 1000);
        printf(")\n");
        return 3;
    }
    if (e != cudaSuccess || count == 0) {
        printf("gpus: 0 (no NVIDIA GPU found (%s))\n", e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
        return 1;
    }
    printf("gpus: %d\n", count);
    for (i = 0; i < count; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        if (!GPU_INFO_CODES[0]) snprintf(code, sizeof code, "unknown");
        else code_for(GPU_INFO_CODES, p.major * 10 + p.minor, code, sizeof code);
        printf("gpu %d: %s, compute capability %d.%d, %.1f GiB, %d SMs, code %s\n", i, p.name, p.major, p.minor,
               (double)p.totalGlobalMem / (1 << 30), p.multiProcessorCount, code);
    }
    return kernel_runs() ? 0 : 2;
}
