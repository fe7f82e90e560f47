/* Lab 5 - gradient accumulation: a large batch in the memory of a small one.

   Run:   make build/lab5_accumulation && ./build/lab5_accumulation

   What to look at: mirror_train_steps(m, micro, 4, ...) runs forward and
   backward on 4 micro-batches of 64 in turn, adding their gradients on
   every replica without communication (DDP's no_sync), then one all-reduce
   and one update: one step of 256 samples, each gradient divided by 256.
   The model's arenas are sized for 64 samples (md.max_batch), not 256. In
   deterministic mode, with micro-batches of whole chunks (64 = 4 chunks of
   16), the sums are the same additions in the same order as one batch of
   256: the same weights, bit for bit. In the default mode they agree
   within float32 rounding. Batch normalisation would break the equality:
   its statistics are those of each micro-batch (the model here has none).

   What comes out: the weights' largest difference and the activation
   memory of a replica in each mode, and:
      check: deterministic: 4 x 64 ends where 256 ends, bit for bit: ok
      check: default mode: 4 x 64 ends where 256 ends, within 1e-5 of the largest weight: ok
      check: one optimizer step per 4 micro-batches: ok
      check: a replica's activation arena is smaller for micro-batches of 64: ok
   Try: micro-batches of 40 (not whole chunks) in deterministic mode. */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 6

static int failures;

static void check(int held, const char *promise)
{
    printf("check: %s: %s\n", promise, held ? "ok" : "FAILED");
    if (!held) failures++;
}

static void die(const char *what)
{
    fprintf(stderr, "lab5: %s\n", what);
    exit(1);
}

/* STEPS steps of 256 samples on 2 replicas, in k micro-batches of 256 / k;
   the weights into w, a replica's activation bytes into *acts. */
static void run(const mirror_dataset *d, int deterministic, size_t k, float *w, size_t *acts, uint64_t *steps)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_memory_report mem;
    mirror_batch micro[4];
    mirror_strategy *s;
    mirror_model *m;
    size_t step, j, n = 256 / k;
    sd.devices = "cpu:2";
    if (mirror_strategy_create(&sd, &s, &err)) die(err.message);
    md.strategy = s;
    md.channels = 28 * 28;
    md.max_batch = n; /* the arenas hold one micro-batch */
    md.deterministic = deterministic;
    md.optimizer.kind = MIRROR_OPT_SGD;
    md.optimizer.lr = 0.1f;
    md.optimizer.momentum = 0.9f;
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_dense(m, 16);
    mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) die(mirror_model_error(m));
    for (step = 0; step < STEPS; step++) {
        for (j = 0; j < k; j++) { /* micro-batch j: samples 256 step + n j ... */
            memset(&micro[j], 0, sizeof micro[j]);
            micro[j].x = d->x + (256 * step + n * j) * 784;
            micro[j].labels = d->labels + 256 * step + n * j;
            micro[j].n = n;
        }
        if (mirror_train_steps(m, micro, k, NULL)) die(mirror_model_error(m));
    }
    if (mirror_get_parameters(m, 0, w, 12730) || mirror_memory_report_get(m, 0, &mem)) die(mirror_model_error(m));
    *acts = mem.activations;
    *steps = mirror_optimizer_steps(m);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

int main(void)
{
    mirror_error err = {0, ""};
    mirror_dataset d;
    static float big[12730], accumulated[12730];
    size_t acts_big, acts_micro, i;
    uint64_t steps_big, steps_micro;
    double worst, largest;
    int det;

    if (mirror_dataset_synthetic_digits(&d, 256 * STEPS, 1, &err)) die(err.message);
    for (det = 1; det >= 0; det--) {
        run(&d, det, 1, big, &acts_big, &steps_big);
        run(&d, det, 4, accumulated, &acts_micro, &steps_micro);
        worst = 0.0;
        largest = 0.0;
        for (i = 0; i < 12730; i++) {
            worst = fmax(worst, fabs(big[i] - accumulated[i]));
            largest = fmax(largest, fabs(big[i]));
        }
        printf("%s: max |w(256) - w(4 x 64)| = %.3g; activations %zu bytes a replica at 256, %zu at 64\n",
               det ? "deterministic" : "default mode", worst, acts_big, acts_micro);
        if (det) check(!memcmp(big, accumulated, sizeof big), "deterministic: 4 x 64 ends where 256 ends, bit for bit");
    }
    check(worst <= 1e-5 * largest, "default mode: 4 x 64 ends where 256 ends, within 1e-5 of the largest weight");
    check(steps_big == STEPS && steps_micro == STEPS, "one optimizer step per 4 micro-batches");
    check(acts_micro < acts_big, "a replica's activation arena is smaller for micro-batches of 64");
    mirror_dataset_free(&d);
    return failures ? 1 : 0;
}
