/* bench_train.c - training throughput of the example MLP and CNN with 1 and
   2 CPU replicas, side by side in one run, and where a step's time goes.

   Build and run:  make bench
   Each configuration trains the same 40 global batches of 64 synthetic
   digits; the four configurations take turns, 7 rounds; medians reported. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 40
#define BATCH 64
#define ROUNDS 7

static mirror_model *make(mirror_strategy *s, int cnn)
{
    mirror_model_desc d;
    mirror_model *m = NULL;
    memset(&d, 0, sizeof d);
    d.strategy = s;
    d.channels = 1, d.height = 28, d.width = 28;
    d.max_batch = BATCH;
    d.optimizer.kind = MIRROR_OPT_ADAM;
    mirror_model_create(&d, &m, NULL);
    if (cnn) { /* as examples/train.c --model cnn */
        mirror_conv2d(m, 16, 3, 1, 1), mirror_relu(m), mirror_maxpool2d(m, 2, 2);
        mirror_conv2d(m, 32, 3, 1, 1), mirror_relu(m), mirror_maxpool2d(m, 2, 2);
        mirror_flatten(m), mirror_dense(m, 128), mirror_relu(m), mirror_dense(m, 10);
    } else {
        mirror_flatten(m), mirror_dense(m, 256), mirror_relu(m), mirror_dense(m, 128), mirror_relu(m);
        mirror_dense(m, 10);
    }
    if (mirror_model_build(m)) {
        fprintf(stderr, "bench_train: %s\n", mirror_model_error(m));
        exit(1);
    }
    return m;
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

/* Seconds for STEPS training steps (or forward-only evaluations). */
static double run(mirror_model *m, const mirror_dataset *ds, const size_t *perm, int forward_only)
{
    double t0 = mirror__now();
    size_t k;
    for (k = 0; k < STEPS; k++) {
        mirror_batch b;
        memset(&b, 0, sizeof b);
        b.x = ds->x, b.labels = ds->labels, b.rows = ds->count;
        b.index = perm + k * BATCH, b.n = BATCH;
        if (forward_only) mirror_evaluate_batch(m, &b, NULL);
        else mirror_train_step(m, &b, NULL);
    }
    return mirror__now() - t0;
}

int main(void)
{
    mirror_dataset ds;
    mirror_strategy *s[2];
    mirror_model *m[2][2];
    size_t perm[STEPS * BATCH], cnn, r, round, n;
    double t[2][2][ROUNDS], fwd[2][ROUNDS], reduce[ROUNDS];
    mirror_strategy_desc sd = {"cpu:1", 0};
    float *bufs[2];

    mirror_dataset_synthetic_digits(&ds, STEPS * BATCH, 1, NULL);
    mirror_permutation(perm, STEPS * BATCH, 1, 0);
    mirror_strategy_create(&sd, &s[0], NULL);
    sd.devices = "cpu:2";
    mirror_strategy_create(&sd, &s[1], NULL);
    for (cnn = 0; cnn < 2; cnn++)
        for (r = 0; r < 2; r++) m[cnn][r] = make(s[r], (int)cnn);
    n = mirror_num_parameters(m[1][1]);
    bufs[0] = (float *)calloc(n, sizeof(float));
    bufs[1] = (float *)calloc(n, sizeof(float));

    for (round = 0; round < ROUNDS; round++) {
        for (cnn = 0; cnn < 2; cnn++)
            for (r = 0; r < 2; r++) t[cnn][r][round] = run(m[cnn][r], &ds, perm, 0);
        for (cnn = 0; cnn < 2; cnn++) fwd[cnn][round] = run(m[cnn][0], &ds, perm, 1);
        {
            double t0 = mirror__now();
            size_t k;
            for (k = 0; k < STEPS; k++) mirror_all_reduce_sum(s[1], bufs, n);
            reduce[round] = mirror__now() - t0;
        }
    }

    printf("training throughput, global batch %d, Adam, %d steps per timing, median of %d (samples/s)\n", BATCH,
           STEPS, ROUNDS);
    printf("%-6s %12s %12s %9s\n", "model", "1 replica", "2 replicas", "speedup");
    for (cnn = 0; cnn < 2; cnn++) {
        double one = STEPS * BATCH / median(t[cnn][0], ROUNDS), two = STEPS * BATCH / median(t[cnn][1], ROUNDS);
        printf("%-6s %12.0f %12.0f %8.2fx\n", cnn ? "cnn" : "mlp", one, two, two / one);
    }
    printf("\nwhere a 1-replica step goes (ms per step, medians)\n");
    for (cnn = 0; cnn < 2; cnn++) {
        double step = 1e3 * median(t[cnn][0], ROUNDS) / STEPS, f = 1e3 * median(fwd[cnn], ROUNDS) / STEPS;
        printf("%-6s step %.3f  forward+loss %.3f (%.0f%%)  backward+update %.3f (%.0f%%)\n", cnn ? "cnn" : "mlp", step,
               f, 100 * f / step, step - f, 100 * (step - f) / step);
    }
    printf("all-reduce of the CNN gradients (%zu floats) over 2 replicas: %.3f ms\n", n,
           1e3 * median(reduce, ROUNDS) / STEPS);

    for (cnn = 0; cnn < 2; cnn++)
        for (r = 0; r < 2; r++) mirror_model_destroy(m[cnn][r]);
    mirror_strategy_destroy(s[0]);
    mirror_strategy_destroy(s[1]);
    mirror_dataset_free(&ds);
    free(bufs[0]), free(bufs[1]);
    return 0;
}
