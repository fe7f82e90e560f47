/* bench_gpu.c - training throughput on one GPU (make bench-gpu; needs a GPU).
   The MLP at global batch 128 and the CNN at 256, the models of
   examples/train.c, fp32, Adam; then the step time with 1, 2 and 4 replicas
   on one GPU at a fixed global batch of 256. Medians of 7 timings of 50
   steps. Writes the synthetic digits to build/bench_digits.bin for
   bench/bench_torch.py, which trains the same models on the same data.
   Output lines: "mirror <model> <batch> <samples/s>" and
   "replicas <n> <ms per step>". */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c99 */
#include "../mirror.h"
#define EXAMPLE_BENCH_MODEL /* the benchmarks' model too */
#include "../examples/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STEPS 50
#define ROUNDS 7

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}


/* Median seconds per STEPS steps; the last step's metrics are read, which
   waits for the GPU to finish them all. */
static double time_steps(mirror_model *m, const mirror_dataset *ds, size_t batch)
{
    double t[ROUNDS];
    size_t round, k;
    mirror_metrics out;
    for (round = 0; round <= ROUNDS; round++) { /* round 0 warms up */
        double t0 = now();
        for (k = 0; k < STEPS; k++) {
            mirror_batch b = example_bench_batch(ds, NULL, batch);
            b.x += (k % (ds->count / batch)) * batch * 784, b.labels += (k % (ds->count / batch)) * batch;
            if (mirror_train_step(m, &b, k + 1 == STEPS ? &out : NULL)) {
                fprintf(stderr, "bench_gpu: %s\n", mirror_model_error(m));
                exit(1);
            }
        }
        if (round) t[round - 1] = now() - t0;
    }
    qsort(t, ROUNDS, sizeof *t, cmp);
    return t[ROUNDS / 2];
}

static mirror_strategy *strategy(const char *devices)
{
    mirror_strategy_desc d;
    mirror_strategy *s = NULL;
    mirror_error err = {0, ""};
    memset(&d, 0, sizeof d);
    d.devices = devices;
    if (mirror_strategy_create(&d, &s, &err)) {
        fprintf(stderr, "bench_gpu: %s\n", err.message);
        exit(1);
    }
    return s;
}

int main(void)
{
    static const char *const lists[3] = {"cuda:0", "cuda:0,0", "cuda:0,0,0,0"};
    mirror_dataset ds;
    mirror_strategy *s = strategy("cuda:0");
    FILE *f;
    size_t i;
    mirror_dataset_synthetic_digits(&ds, 256 * 8, 1, NULL);
    if ((f = fopen("build/bench_digits.bin", "wb")) != NULL) { /* count, then x, then int32 labels */
        int32_t n = (int32_t)ds.count;
        fwrite(&n, 4, 1, f);
        fwrite(ds.x, 4, ds.count * 784, f);
        fwrite(ds.labels, 4, ds.count, f);
        fclose(f);
    }
    printf("# %s\n", mirror_strategy_describe(s));
    for (i = 0; i < 2; i++) {
        size_t batch = i ? 256 : 128;
        mirror_model *m = example_bench_model(s, i ? "cnn" : "mlp", batch);
        if (!m) return 1;
        printf("mirror %s %zu %.0f\n", i ? "cnn" : "mlp", batch, STEPS * batch / time_steps(m, &ds, batch));
        mirror_model_destroy(m);
    }
    mirror_strategy_destroy(s);
    for (i = 0; i < 3; i++) {
        mirror_strategy *r = strategy(lists[i]);
        mirror_model *m = example_bench_model(r, "cnn", 256);
        if (!m) return 1;
        printf("replicas %zu %.3f\n", mirror_num_replicas(r), 1e3 * time_steps(m, &ds, 256) / STEPS);
        mirror_model_destroy(m);
        mirror_strategy_destroy(r);
    }
    mirror_dataset_free(&ds);
    return 0;
}
