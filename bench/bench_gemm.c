/* bench_gemm.c - the built-in GEMM against OpenBLAS sgemm (one thread) at
   the shapes the example models run, side by side in one run.

   Build and run:  make bench   (needs libopenblas-dev)
   Prints GFLOP/s per shape (median of 9 timings), and the ratio built-in / OpenBLAS. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(void)
{
    float *a = (float *)malloc(1024 * 1024 * sizeof(float)), *b = (float *)malloc(1024 * 1024 * sizeof(float));
    float *c = (float *)malloc(1024 * 1024 * sizeof(float)), *ws = (float *)malloc(MIRROR__GEMM_WORKSPACE * sizeof(float));
    uint64_t rng = 1;
    size_t i, s;
    double ratios[sizeof shapes / sizeof *shapes];
    openblas_set_num_threads(1);
    for (i = 0; i < 1024 * 1024; i++) a[i] = mirror__uniform(&rng) - 0.5f, b[i] = mirror__uniform(&rng) - 0.5f;
    printf("%-30s %7s %7s %7s %12s %12s %6s\n", "shape (one thread)", "m", "n", "k", "built-in", "OpenBLAS", "ratio");
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const shape *sh = &shapes[s];
        size_t lda = sh->ta ? sh->m : sh->k, ldb = sh->tb ? sh->k : sh->n, rep, reps, lib;
        double flops = 2.0 * (double)sh->m * (double)sh->n * (double)sh->k, gflops[2];
        reps = (size_t)(2e8 / flops) + 1; /* about 0.1 s per timing at 2 GFLOP/s */
        for (lib = 0; lib < 2; lib++) {
            double t[9];
            size_t k;
            for (k = 0; k < 9; k++) {
                double t0 = mirror__now();
                for (rep = 0; rep < reps; rep++) {
                    if (lib == 0)
                        mirror__sgemm_builtin(sh->ta, sh->tb, sh->m, sh->n, sh->k, 1.0f, a, lda, b, ldb, 0.0f, c,
                                              sh->n, ws);
                    else
                        cblas_sgemm(CblasRowMajor, sh->ta ? CblasTrans : CblasNoTrans,
                                    sh->tb ? CblasTrans : CblasNoTrans, (int)sh->m, (int)sh->n, (int)sh->k, 1.0f, a,
                                    (int)lda, b, (int)ldb, 0.0f, c, (int)sh->n);
                }
                t[k] = mirror__now() - t0;
            }
            qsort(t, 9, sizeof *t, cmp);
            gflops[lib] = flops * (double)reps / t[4] * 1e-9;
        }
        ratios[s] = gflops[0] / gflops[1];
        printf("%-30s %7zu %7zu %7zu %7.1f GF/s %7.1f GF/s %5.2fx\n", sh->what, sh->m, sh->n, sh->k, gflops[0],
               gflops[1], ratios[s]);
    }
    qsort(ratios, sizeof shapes / sizeof *shapes, sizeof *ratios, cmp);
    printf("median ratio built-in / OpenBLAS: %.2fx\n", ratios[sizeof shapes / sizeof *shapes / 2]);
    free(a), free(b), free(c), free(ws);
    return 0;
}
