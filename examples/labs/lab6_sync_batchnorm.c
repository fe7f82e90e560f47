/* Lab 6 - SyncBatchNorm: batch statistics over the global batch.

   Run:   make build/lab6_sync_batchnorm && ./build/lab6_sync_batchnorm

   What to look at: batch normalisation normalises each channel by the
   mean and variance of the batch. Which batch? With MIRROR_BN_SYNC (the
   default, PyTorch's SyncBatchNorm) the replicas combine their sums at
   every batchnorm layer, forward and backward: the statistics are those of
   the global batch, and 4 replicas compute what 1 computes. With
   MIRROR_BN_LOCAL each replica normalises its own shard (BatchNorm under
   DDP without SyncBatchNorm): a shard of 8 has other statistics than the
   batch of 32, and the result depends on the split. A small CNN (conv -
   batchnorm - relu - maxpool - dense), 8 steps on 1 and on 4 replicas.

   What comes out: each mode's largest weight difference from 1 replica:
      check: sync, deterministic: 4 replicas give the weights of 1, bit for bit: ok
      check: sync, default mode: 4 replicas give the weights of 1 within 1e-5 of the largest: ok
      check: local: 4 replicas move the weights 100 times further from 1 replica's than sync does: ok
   Try: 2 replicas in local mode (shards of 16: closer to the batch). */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARAMS (4 * 9 + 4 + 2 * 4 + 10 * 4 * 14 * 14 + 10) /* conv, batchnorm, dense: 7898 */

static int failures;

static void check(int held, const char *promise)
{
    printf("check: %s: %s\n", promise, held ? "ok" : "FAILED");
    if (!held) failures++;
}

static void die(const char *what)
{
    fprintf(stderr, "lab6: %s\n", what);
    exit(1);
}

/* 8 steps of batch 32 on `replicas` replicas; the weights into w. */
static void run(const mirror_dataset *d, size_t replicas, mirror_batchnorm_mode mode, int deterministic, float *w)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_strategy *s;
    mirror_model *m;
    size_t step;
    sd.devices = "cpu";
    sd.num_replicas = replicas;
    if (mirror_strategy_create(&sd, &s, &err)) die(err.message);
    md.strategy = s;
    md.channels = 1;
    md.height = 28;
    md.width = 28;
    md.max_batch = 32;
    md.deterministic = deterministic;
    md.chunk = 8; /* deterministic mode: a chunk of 8 samples for each of 4 replicas */
    md.optimizer.kind = MIRROR_OPT_SGD;
    md.optimizer.lr = 0.05f;
    md.optimizer.momentum = 0.9f;
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_conv2d(m, 4, 3, 1, 1);
    mirror_batchnorm(m, mode);
    mirror_relu(m);
    mirror_maxpool2d(m, 2, 2);
    mirror_flatten(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) die(mirror_model_error(m));
    for (step = 0; step < 8; step++) {
        mirror_batch b = {0};
        b.x = d->x + step * 32 * 784;
        b.labels = d->labels + step * 32;
        b.n = 32;
        if (mirror_train_step(m, &b, NULL)) die(mirror_model_error(m));
    }
    if (mirror_get_parameters(m, 0, w, PARAMS)) die(mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* The largest |a - b|, and the largest |b| into *largest. */
static double distance(const float *a, const float *b, double *largest)
{
    double worst = 0.0;
    size_t i;
    *largest = 0.0;
    for (i = 0; i < PARAMS; i++) {
        worst = fmax(worst, fabs(a[i] - b[i]));
        *largest = fmax(*largest, fabs(b[i]));
    }
    return worst;
}

int main(void)
{
    mirror_error err = {0, ""};
    mirror_dataset d;
    static float one[PARAMS], four[PARAMS];
    double largest, sync, local;

    if (mirror_dataset_synthetic_digits(&d, 256, 1, &err)) die(err.message);
    run(&d, 1, MIRROR_BN_SYNC, 1, one);
    run(&d, 4, MIRROR_BN_SYNC, 1, four);
    printf("sync, deterministic:  max |w(4) - w(1)| = %.3g\n", distance(four, one, &largest));
    check(!memcmp(one, four, sizeof one), "sync, deterministic: 4 replicas give the weights of 1, bit for bit");
    run(&d, 1, MIRROR_BN_SYNC, 0, one);
    run(&d, 4, MIRROR_BN_SYNC, 0, four);
    printf("sync, default mode:   max |w(4) - w(1)| = %.3g\n", sync = distance(four, one, &largest));
    check(sync <= 1e-5 * largest, "sync, default mode: 4 replicas give the weights of 1 within 1e-5 of the largest");
    run(&d, 4, MIRROR_BN_LOCAL, 0, four);
    printf("local, default mode:  max |w(4) - w(1)| = %.3g\n", local = distance(four, one, &largest));
    check(local > 100 * sync, "local: 4 replicas move the weights 100 times further from 1 replica's than sync does");
    mirror_dataset_free(&d);
    return failures ? 1 : 0;
}
