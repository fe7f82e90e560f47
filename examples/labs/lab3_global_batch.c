/* Lab 3 - the global batch, and the learning rate that goes with it.

   Run:   make build/lab3_global_batch && ./build/lab3_global_batch

   What to look at, part 1: the same global batch of 64 on 1, 2 and 4
   replicas. Each step's gradient is the mean over the 64 samples however
   they are split (lab 2), so the runs are the same run. In deterministic
   mode (md.deterministic = 1) every sum over samples is added in one order
   whatever the split, and the weights come out bit for bit the same.

   Part 2: more replicas, each keeping its 32 samples a step, make the
   global batch grow (32 x replicas), and an epoch takes fewer steps.
   Averaged over 4 x more samples, each step's gradient is less noisy but
   there are 4 x fewer of them: the linear scaling rule (Goyal et al.,
   2017) multiplies the learning rate by the same factor.

   What comes out: a line per run (replicas, global batch, learning rate,
   steps, final training loss, largest weight difference from 1 replica):
      check: batch 64 on 2 replicas, deterministic: the weights of 1 replica, bit for bit: ok
      check: batch 64 on 4 replicas, deterministic: the weights of 1 replica, bit for bit: ok
      check: batch 128 takes 4 times fewer steps than batch 32: ok
      check: at batch 128 the scaled rate (x4) ends at a lower loss than the unscaled one: ok
   Try: md.deterministic = 0 (the weights then differ in their last digits). */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(int held, const char *promise)
{
    printf("check: %s: %s\n", promise, held ? "ok" : "FAILED");
    if (!held) failures++;
}

static void die(const char *what)
{
    fprintf(stderr, "lab3: %s\n", what);
    exit(1);
}

/* One epoch of SGD on `replicas` replicas at global batch `batch` and rate
   lr; prints its line, the weights into w (12730 floats). */
static mirror_epoch_log run(const mirror_dataset *d, size_t replicas, size_t batch, float lr, float *w, const float *w1)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_fit_desc fd = {0};
    mirror_epoch_log log;
    mirror_strategy *s;
    mirror_model *m;
    double worst = 0.0;
    size_t i;
    sd.devices = "cpu";
    sd.num_replicas = replicas;
    if (mirror_strategy_create(&sd, &s, &err)) die(err.message);
    md.strategy = s;
    md.channels = 28 * 28;
    md.max_batch = batch;
    md.seed = 1;
    md.deterministic = 1; /* chunks of 16 samples, added in one order */
    md.optimizer.kind = MIRROR_OPT_SGD;
    md.optimizer.lr = lr;
    md.optimizer.momentum = 0.9f;
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_dense(m, 16);
    mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) die(mirror_model_error(m));
    fd.train = d;
    fd.batch = batch;
    fd.progress = MIRROR_PROGRESS_NONE;
    if (mirror_fit(m, &fd, &log) || mirror_get_parameters(m, 0, w, 12730)) die(mirror_model_error(m));
    for (i = 0; w1 && i < 12730; i++) worst = fmax(worst, fabs(w[i] - w1[i]));
    printf("%8zu %6zu %6.2f %6zu %11.6f", replicas, batch, lr, log.steps, log.train_loss);
    if (w1) printf(" %13.3g", worst);
    printf("\n");
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    return log;
}

int main(void)
{
    mirror_error err = {0, ""};
    mirror_dataset d;
    mirror_epoch_log small, unscaled, scaled;
    static float w1[12730], w[12730];

    if (mirror_dataset_synthetic_digits(&d, 1920, 1, &err)) die(err.message);
    printf("replicas  batch     lr  steps  train_loss  max|w - w_1|\n");
    run(&d, 1, 64, 0.05f, w1, NULL);
    run(&d, 2, 64, 0.05f, w, w1);
    check(!memcmp(w, w1, sizeof w), "batch 64 on 2 replicas, deterministic: the weights of 1 replica, bit for bit");
    run(&d, 4, 64, 0.05f, w, w1);
    check(!memcmp(w, w1, sizeof w), "batch 64 on 4 replicas, deterministic: the weights of 1 replica, bit for bit");

    printf("\n");
    small = run(&d, 1, 32, 0.05f, w, NULL);
    unscaled = run(&d, 4, 128, 0.05f, w, NULL);
    scaled = run(&d, 4, 128, 0.2f, w, NULL);
    check(small.steps == 4 * unscaled.steps, "batch 128 takes 4 times fewer steps than batch 32");
    check(scaled.train_loss < unscaled.train_loss,
          "at batch 128 the scaled rate (x4) ends at a lower loss than the unscaled one");
    mirror_dataset_free(&d);
    return failures ? 1 : 0;
}
