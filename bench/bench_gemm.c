/* bench_gemm.c - the built-in GEMM against OpenBLAS sgemm (one thread) at
   the shapes the example models run, side by side in one run.

   Build and run:  make bench   (needs libopenblas-dev)
   Prints the compiler, its flags and the GEMM's vector ISA, then GFLOP/s
   per shape (median of 9 timings) and the ratio built-in / OpenBLAS.

   bench_gemm --guard R: a short run (3 timings of about 20 ms) that exits
   1 when the built-in GEMM is below R x OpenBLAS at any layer shape. CI
   runs it with R = 0.3: a guard against a collapse of the kernel (a
   compiler that stops vectorising it), measured as a ratio in one run. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BENCH_CFLAGS
#define BENCH_CFLAGS "(not given)"
#endif
#if defined(__clang__)
#define BENCH_CC "clang " __clang_version__
#elif defined(__GNUC__)
#define BENCH_CC "gcc " __VERSION__
#else
#define BENCH_CC "an unknown compiler"
#endif

void openblas_set_num_threads(int);

typedef struct shape {
    const char *what;
    int ta, tb;
    size_t m, n, k;
} shape;

/* Per-replica shapes with a global batch of 64 on 2 replicas (shard 32):
   the MLP 784-256-128-10 and the CNN's per-sample convolutions. */
static const shape shapes[] = {
    {"mlp dense1 forward   x.W^T", 0, 1, 32, 256, 784},
    {"mlp dense1 dW        d^T.x", 1, 0, 256, 784, 32},
    {"mlp dense2 dx        d.W  ", 0, 0, 32, 256, 128},
    {"cnn conv1 forward    W.col", 0, 0, 16, 784, 9},
    {"cnn conv1 dW         d.col^T", 0, 1, 16, 9, 784},
    {"cnn conv2 forward    W.col", 0, 0, 32, 196, 144},
    {"cnn conv2 dW         d.col^T", 0, 1, 32, 144, 196},
    {"cnn conv2 dcol       W^T.d", 1, 0, 144, 196, 32},
    {"cnn dense forward    x.W^T", 0, 1, 32, 128, 1568},
    {"square 512                ", 0, 0, 512, 512, 512},
};

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    double guard = argc == 3 && !strcmp(argv[1], "--guard") ? atof(argv[2]) : 0.0;
    size_t timings = guard > 0.0 ? 3 : 9, below = 0, nshapes = sizeof shapes / sizeof *shapes;
    float *a = (float *)malloc(1024 * 1024 * sizeof(float)), *b = (float *)malloc(1024 * 1024 * sizeof(float));
    float *c = (float *)malloc(1024 * 1024 * sizeof(float)), *ws = (float *)malloc(MIRROR__GEMM_WORKSPACE * sizeof(float));
    uint64_t rng = 1;
    size_t i, s;
    double ratios[sizeof shapes / sizeof *shapes];
    if (argc > 1 && guard <= 0.0) {
        fprintf(stderr, "usage: bench_gemm [--guard RATIO]\n");
        return 2;
    }
    openblas_set_num_threads(1);
    printf("compiler: %s\nflags: %s\nbuilt-in GEMM: %s vectors of %d floats, %dx%d register tile\n", BENCH_CC,
           BENCH_CFLAGS, MIRROR__ISA, MIRROR__VL, MIRROR__MR, MIRROR__NR);
    for (i = 0; i < 1024 * 1024; i++) a[i] = mirror__uniform(&rng) - 0.5f, b[i] = mirror__uniform(&rng) - 0.5f;
    printf("%-30s %7s %7s %7s %12s %12s %6s\n", "shape (one thread)", "m", "n", "k", "built-in", "OpenBLAS", "ratio");
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const shape *sh = &shapes[s];
        size_t lda = sh->ta ? sh->m : sh->k, ldb = sh->tb ? sh->k : sh->n, rep, reps, lib;
        double flops = 2.0 * (double)sh->m * (double)sh->n * (double)sh->k, gflops[2];
        reps = (size_t)((guard > 0.0 ? 1e9 : 5e9) / flops) + 1; /* 0.1 s per timing at 50 GFLOP/s */
        for (lib = 0; lib < 2; lib++) {
            double t[9];
            size_t k;
            for (k = 0; k < timings; k++) {
                double t0 = mirror__now();
                for (rep = 0; rep < reps; rep++) {
                    if (lib == 0)
                        mirror__sgemm_builtin(sh->ta, sh->tb, sh->m, sh->n, sh->k, 1.0f, a, lda, b, ldb, 0.0f, c,
                                              sh->n, ws, NULL);
                    else
                        cblas_sgemm(CblasRowMajor, sh->ta ? CblasTrans : CblasNoTrans,
                                    sh->tb ? CblasTrans : CblasNoTrans, (int)sh->m, (int)sh->n, (int)sh->k, 1.0f, a,
                                    (int)lda, b, (int)ldb, 0.0f, c, (int)sh->n);
                }
                t[k] = mirror__now() - t0;
            }
            qsort(t, timings, sizeof *t, cmp);
            gflops[lib] = flops * (double)reps / t[timings / 2] * 1e-9;
        }
        ratios[s] = gflops[0] / gflops[1];
        if (ratios[s] < guard && s + 1 < nshapes) below++; /* the layer shapes, not square 512 */
        printf("%-30s %7zu %7zu %7zu %7.1f GF/s %7.1f GF/s %5.2fx\n", sh->what, sh->m, sh->n, sh->k, gflops[0],
               gflops[1], ratios[s]);
    }
    qsort(ratios, nshapes - 1, sizeof *ratios, cmp);
    printf("median ratio built-in / OpenBLAS over the layer shapes: %.2fx\n",
           nshapes % 2 ? 0.5 * (ratios[nshapes / 2 - 1] + ratios[nshapes / 2]) : ratios[(nshapes - 1) / 2]);
    free(a), free(b), free(c), free(ws);
    if (guard > 0.0) {
        printf("guard: %zu layer shapes below %.2fx OpenBLAS\n", below, guard);
        return below ? 1 : 0;
    }
    return 0;
}
