/* bench_train.c - training throughput of the example MLP and CNN with 1 and
   2 CPU replicas, side by side in one run, and where a step's time goes.

   Build and run:  make bench
   Each configuration trains one pass over the same 2560 synthetic digits
   (40 global batches of 64, or 10 of 256); the configurations take turns,
   7 rounds; medians reported. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#define EXAMPLE_BENCH_MODEL /* the benchmarks' model too */
#include "../examples/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLES 2560
#define ROUNDS 7


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
        mirror_batch b;
        memset(&b, 0, sizeof b);
        b.x = ds->x, b.labels = ds->labels, b.rows = ds->count;
        b.index = perm + k * batch, b.n = batch;
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
    size_t perm[SAMPLES], cnn, r, round, n, bi;
    double t[2][2][2][ROUNDS], fwd[2][ROUNDS], reduce[ROUNDS];
    mirror_strategy_desc sd = {"cpu:1", 0, MIRROR_REDUCER_DEFAULT};
    float *bufs[2];

    mirror_dataset_synthetic_digits(&ds, SAMPLES, 1, NULL);
    mirror_permutation(perm, SAMPLES, 1, 0);
    mirror_strategy_create(&sd, &s[0], NULL);
    sd.devices = "cpu:2";
    mirror_strategy_create(&sd, &s[1], NULL);
    for (bi = 0; bi < 2; bi++)
        for (cnn = 0; cnn < 2; cnn++)
            for (r = 0; r < 2; r++) {
                m[bi][cnn][r] = example_bench_model(s[r], cnn ? "cnn" : "mlp", batches[bi]);
                if (!m[bi][cnn][r]) return 1;
            }
    n = mirror_num_parameters(m[0][1][1]);
    bufs[0] = (float *)calloc(n, sizeof(float));
    bufs[1] = (float *)calloc(n, sizeof(float));

    for (round = 0; round < ROUNDS; round++) {
        for (bi = 0; bi < 2; bi++)
            for (cnn = 0; cnn < 2; cnn++)
                for (r = 0; r < 2; r++) t[bi][cnn][r][round] = run(m[bi][cnn][r], &ds, perm, batches[bi], 0);
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

    for (bi = 0; bi < 2; bi++)
        for (cnn = 0; cnn < 2; cnn++)
            for (r = 0; r < 2; r++) mirror_model_destroy(m[bi][cnn][r]);
    mirror_strategy_destroy(s[0]);
    mirror_strategy_destroy(s[1]);
    mirror_dataset_free(&ds);
    free(bufs[0]), free(bufs[1]);
    return 0;
}
