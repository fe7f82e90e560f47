/* bench_train.c - training throughput of the example MLP and CNN with 1 and
   2 CPU replicas, side by side in one run, where a step's time goes, and
   what deterministic mode costs in time and memory.

   Build and run:  make bench
   Each configuration trains one pass over the same 2560 synthetic digits
   (40 global batches of 64, or 10 of 256); the configurations take turns,
   7 rounds; medians reported. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#define EXAMPLE_BENCH_MODEL /* the benchmarks' model too */
#include "../examples/models.h"
#include "fma_chains.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLES 2560
#define ROUNDS 7


/* The GEMMs of one training step, recorded through a copy of the CPU
   backend whose gemm and gemm_bias note each call before it runs, then
   replayed alone on the same buffers: the FLOP rate a step's GEMMs reach
   by themselves (a dense layer's with its bias and relu, as in the step). */
typedef struct {
    int ta, tb, per_row, relu, grad;
    size_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const void *a, *b, *bias; /* bias: a gemm_bias call */
    void *c;
    void *dev;
} gemm_call;

#define MAX_CALLS 4096
static gemm_call calls[MAX_CALLS];
static size_t ncalls;
static int recording;
static mirror__backend recorder;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void record(const gemm_call *g)
{
    pthread_mutex_lock(&lock); /* the replicas' threads record at once */
    if (recording && ncalls < MAX_CALLS) calls[ncalls++] = *g;
    pthread_mutex_unlock(&lock);
}

static void recording_gemm(void *dev, int ta, int tb, size_t m, size_t n, size_t k, float alpha, const void *a,
                           size_t lda, const void *b, size_t ldb, float beta, void *c, size_t ldc, int grad)
{
    gemm_call g;
    g.ta = ta, g.tb = tb, g.per_row = 0, g.relu = 0, g.grad = grad;
    g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc;
    g.alpha = alpha, g.beta = beta, g.a = a, g.b = b, g.bias = NULL, g.c = c, g.dev = dev;
    record(&g);
    mirror__cpu_backend.gemm(dev, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, grad);
}

static void recording_gemm_bias(void *dev, int ta, int tb, size_t m, size_t n, size_t k, const void *a, size_t lda,
                                const void *b, size_t ldb, const void *bias, int per_row, int relu, void *c,
                                size_t ldc)
{
    gemm_call g;
    g.ta = ta, g.tb = tb, g.per_row = per_row, g.relu = relu, g.grad = 0, g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc;
    g.alpha = 1.0f, g.beta = 0.0f, g.a = a, g.b = b, g.bias = bias, g.c = c, g.dev = dev;
    record(&g);
    mirror__cpu_backend.gemm_bias(dev, ta, tb, m, n, k, a, lda, b, ldb, bias, per_row, relu, c, ldc);
}

/* Seconds for one replay of the recorded GEMMs; *flops gets their count. */
static double replay(double *flops)
{
    double t0 = mirror__now();
    size_t i;
    *flops = 0.0;
    for (i = 0; i < ncalls; i++) {
        const gemm_call *g = &calls[i];
        if (g->bias)
            mirror__cpu_backend.gemm_bias(g->dev, g->ta, g->tb, g->m, g->n, g->k, g->a, g->lda, g->b, g->ldb, g->bias,
                                          g->per_row, g->relu, g->c, g->ldc);
        else
            mirror__cpu_backend.gemm(g->dev, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b, g->ldb,
                                     g->beta, g->c, g->ldc, g->grad);
        *flops += 2.0 * (double)g->m * (double)g->n * (double)g->k;
    }
    return mirror__now() - t0;
}

/* One core's peak in GFLOP/s. */
static double fma_peak(void)
{
    size_t rounds = 20000000 / (MIRROR__MR * MIRROR__NV);
    return BENCH_FMA_FLOPS * (double)rounds / bench_fma_seconds(rounds) * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

/* Seconds for one pass of training steps (or forward-only evaluations). */
static double run(mirror_model *m, const mirror_dataset *ds, const size_t *perm, size_t batch, int forward_only)
{
    double t0 = mirror__now();
    size_t k;
    for (k = 0; k < SAMPLES / batch; k++) {
        mirror_batch b = example_bench_batch(ds, perm + k * batch, batch);
        if (forward_only) mirror_evaluate_batch(m, &b, NULL);
        else mirror_train_step(m, &b, NULL);
    }
    return mirror__now() - t0;
}

int main(void)
{
    static const size_t batches[2] = {64, 256};
    mirror_dataset ds;
    mirror_strategy *s[2];
    mirror_model *m[2][2][2]; /* [batch][cnn][replicas - 1] */
    mirror_model *det[2][2];  /* [batch][cnn]: 2 replicas, deterministic mode */
    size_t perm[SAMPLES], cnn, r, round, n, bi;
    double t[2][2][2][ROUNDS], td[2][2][ROUNDS], fwd[2][ROUNDS], reduce[ROUNDS];
    mirror_strategy_desc sd = {0}; /* "cpu:1", then "cpu:2" */
    float *bufs[2];
    double peak;

    mirror_dataset_synthetic_digits(&ds, SAMPLES, 1, NULL);
    mirror_permutation(perm, SAMPLES, 1, 0);
    sd.devices = "cpu:1";
    mirror_strategy_create(&sd, &s[0], NULL);
    sd.devices = "cpu:2";
    mirror_strategy_create(&sd, &s[1], NULL);
    for (bi = 0; bi < 2; bi++)
        for (cnn = 0; cnn < 2; cnn++)
            for (r = 0; r < 2; r++) {
                m[bi][cnn][r] = example_bench_model(s[r], cnn ? "cnn" : "mlp", batches[bi]);
                if (!m[bi][cnn][r]) return 1;
                if (r == 1 && !(det[bi][cnn] = example_bench_model_with(s[r], cnn ? "cnn" : "mlp", batches[bi], 16,
                                                                    MIRROR_SHARD_AUTO, MIRROR_PRECISION_FP32)))
                    return 1;
            }
    n = mirror_num_parameters(m[0][1][1]);
    bufs[0] = (float *)calloc(n, sizeof(float));
    bufs[1] = (float *)calloc(n, sizeof(float));

    for (round = 0; round < ROUNDS; round++) {
        for (bi = 0; bi < 2; bi++)
            for (cnn = 0; cnn < 2; cnn++)
                for (r = 0; r < 2; r++) {
                    t[bi][cnn][r][round] = run(m[bi][cnn][r], &ds, perm, batches[bi], 0);
                    if (r == 1) td[bi][cnn][round] = run(det[bi][cnn], &ds, perm, batches[bi], 0);
                }
        for (cnn = 0; cnn < 2; cnn++) fwd[cnn][round] = run(m[0][cnn][0], &ds, perm, 64, 1);
        {
            double t0 = mirror__now();
            size_t k;
            for (k = 0; k < 40; k++) mirror_all_reduce_sum(s[1], bufs, n);
            reduce[round] = (mirror__now() - t0) / 40;
        }
    }

    printf("training throughput, Adam, one pass over %d samples per timing, median of %d (samples/s)\n", SAMPLES,
           ROUNDS);
    printf("%-6s %6s %12s %12s %9s\n", "model", "batch", "1 replica", "2 replicas", "speedup");
    for (cnn = 0; cnn < 2; cnn++)
        for (bi = 0; bi < 2; bi++) {
            double one = SAMPLES / median(t[bi][cnn][0], ROUNDS), two = SAMPLES / median(t[bi][cnn][1], ROUNDS);
            printf("%-6s %6zu %12.0f %12.0f %8.2fx\n", cnn ? "cnn" : "mlp", batches[bi], one, two, two / one);
        }
    printf("\nwhere a 1-replica step of batch 64 goes (ms per step, medians)\n");
    for (cnn = 0; cnn < 2; cnn++) {
        double step = 1e3 * median(t[0][cnn][0], ROUNDS) / (SAMPLES / 64), f = 1e3 * median(fwd[cnn], ROUNDS) / (SAMPLES / 64);
        printf("%-6s step %.3f  forward+loss %.3f (%.0f%%)  backward+update %.3f (%.0f%%)\n", cnn ? "cnn" : "mlp", step,
               f, 100 * f / step, step - f, 100 * (step - f) / step);
    }
    printf("all-reduce of the CNN gradients (%zu floats) over 2 replicas: %.3f ms\n", n, 1e3 * median(reduce, ROUNDS));
    printf("\ndeterministic mode (chunks of 16 samples) on 2 replicas, against the default (samples/s, medians;\n"
           "memory: the gradient arenas of one replica)\n");
    printf("%-6s %6s %12s %14s %7s %14s %14s\n", "model", "batch", "default", "deterministic", "ratio", "grads default",
           "deterministic");
    for (cnn = 0; cnn < 2; cnn++)
        for (bi = 0; bi < 2; bi++) {
            double a = SAMPLES / median(t[bi][cnn][1], ROUNDS), b = SAMPLES / median(td[bi][cnn], ROUNDS);
            mirror_memory_report ma = {0, 0, 0, 0}, mb = {0, 0, 0, 0};
            mirror_memory_report_get(m[bi][cnn][1], 0, &ma);
            mirror_memory_report_get(det[bi][cnn], 0, &mb);
            printf("%-6s %6zu %12.0f %14.0f %6.2fx %11.2f MB %11.2f MB\n", cnn ? "cnn" : "mlp", batches[bi], a, b, b / a,
                   ma.gradients / 1e6, mb.gradients / 1e6);
        }

    /* The GEMMs of a 1-replica step of batch 64, and of a 2-replica step
       of batch 256, replayed alone: the step's FLOP rate against theirs. */
    peak = fma_peak();
    printf("\nthe step's FLOP rate against its GEMMs' alone (FLOPs of the GEMMs, medians)\n");
    printf("%-6s %6s %8s %12s %12s %12s %7s %12s\n", "model", "batch", "replicas", "MFLOP/step", "step",
           "GEMMs alone", "ratio", "of FMA peak");
    for (cnn = 0; cnn < 2; cnn++)
        for (bi = 0; bi < 2; bi++) {
            mirror_model *mm = m[bi][cnn][bi]; /* batch 64: 1 replica; batch 256: 2 */
            size_t reps = bi + 1, k;
            double flops = 0.0, g[ROUNDS], step = median(t[bi][cnn][bi], ROUNDS) / (SAMPLES / batches[bi]);
            mirror_batch b = example_bench_batch(&ds, perm, batches[bi]);
            recorder = mirror__cpu_backend;
            recorder.gemm = recording_gemm;
            recorder.gemm_bias = recording_gemm_bias;
            mm->be = &recorder;
            recording = 1, ncalls = 0;
            mirror_train_step(mm, &b, NULL);
            recording = 0;
            mm->be = &mirror__cpu_backend;
            /* The replicas' GEMMs, one replica's after the other's: a
               replica's share is its calls' time, on one core each. */
            for (k = 0; k < ROUNDS; k++) g[k] = replay(&flops) / (double)reps;
            printf("%-6s %6zu %8zu %12.2f %7.1f GF/s %7.1f GF/s %6.0f%% %11.0f%%\n", cnn ? "cnn" : "mlp", batches[bi],
                   reps, flops * 1e-6, flops / step * 1e-9, flops / median(g, ROUNDS) / (double)reps * 1e-9,
                   100.0 * median(g, ROUNDS) / step, 100.0 * flops / step * 1e-9 / (peak * (double)reps));
        }
    printf("FMA peak of one core (%s, %dx%d chains): %.1f GFLOP/s\n", MIRROR__ISA, MIRROR__MR, MIRROR__NV, peak);

    for (bi = 0; bi < 2; bi++)
        for (cnn = 0; cnn < 2; cnn++) {
            for (r = 0; r < 2; r++) mirror_model_destroy(m[bi][cnn][r]);
            mirror_model_destroy(det[bi][cnn]);
        }
    mirror_strategy_destroy(s[0]);
    mirror_strategy_destroy(s[1]);
    mirror_dataset_free(&ds);
    free(bufs[0]), free(bufs[1]);
    return 0;
}
