/* Lab 8 - synchronous against asynchronous updates: stale gradients.

   Run:   make build/lab8_sync_async && ./build/lab8_sync_async

   What to look at: in asynchronous training (parameter servers) a worker
   pushes its gradient when done, the server applies it at once, and the
   worker reads the new weights; with W workers in turn, each gradient was
   computed on weights W - 1 updates old (its staleness). mirror trains
   synchronously; this lab simulates asynchronous workers on the host
   around a model that computes gradients (mirror_set_parameters,
   mirror_train_step, mirror_get_gradients): batches of 32, SGD at 0.1, 3
   epochs. The synchronous counterpart of 8 workers is a step of 8
   replicas on a global batch of 256 at the rate x 8 (lab 3): staleness 0.
   Both 8-worker runs end above 1 worker here; what synchronous training
   gives is not a lower loss but a result that does not depend on which
   worker was faster: one gradient a step, on the weights all replicas hold.

   What comes out: each run's loss after training, and:
      check: 8 asynchronous workers (staleness 7) end at more than twice the loss of 1 worker: ok
      check: the 8 synchronous replicas hold the same weights: ok
   Try: a rate of 0.02 (staleness then costs less), or 4 workers. */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLES 2048
#define STEPS (3 * SAMPLES / 32) /* updates of 32 samples in 3 epochs */
#define PARAMS (784 * 32 + 32 + 32 * 10 + 10)

static int failures;
static mirror_dataset d;

static void check(int held, const char *promise)
{
    printf("check: %s: %s\n", promise, held ? "ok" : "FAILED");
    if (!held) failures++;
}

static void die(const char *what)
{
    fprintf(stderr, "lab8: %s\n", what);
    exit(1);
}

/* A 784-32-10 network on `replicas` replicas, for batches up to `batch`;
   seed 1: the same initial weights on any count. */
static mirror_model *network(mirror_strategy **s, size_t replicas, size_t batch)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_model *m;
    sd.devices = "cpu";
    sd.num_replicas = replicas;
    if (mirror_strategy_create(&sd, s, &err)) die(err.message);
    md.strategy = *s;
    md.channels = 784;
    md.max_batch = batch;
    md.seed = 1;
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_dense(m, 32);
    mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) die(mirror_model_error(m));
    return m;
}

/* W workers in turn from the weights w0, each on batches of n: worker
   t % W computes the gradient of batch t on the weights it read after its
   last push; the server applies it to w at rate lr. Returns the loss. */
static double simulate(mirror_model *calc, size_t workers, size_t n, float lr, const float *w0, float *w)
{
    static float read[8][PARAMS], g[PARAMS];
    mirror_metrics got;
    size_t t, i, k;
    memcpy(w, w0, PARAMS * sizeof(float));
    for (k = 0; k < workers; k++) memcpy(read[k], w0, sizeof read[k]);
    for (t = 0; t < STEPS * 32 / n; t++) {
        mirror_batch b = {0};
        k = t % workers;
        b.x = d.x + (t * n % SAMPLES) * 784;
        b.labels = d.labels + t * n % SAMPLES;
        b.n = n;
        if (mirror_set_parameters(calc, read[k], PARAMS) || mirror_train_step(calc, &b, NULL) ||
            mirror_get_gradients(calc, 0, g, PARAMS))
            die(mirror_model_error(calc));
        for (i = 0; i < PARAMS; i++) w[i] -= lr * g[i]; /* the server's update */
        memcpy(read[k], w, sizeof read[k]);            /* the worker reads the new weights */
    }
    if (mirror_set_parameters(calc, w, PARAMS) || mirror_evaluate(calc, &d, 0, &got)) die(mirror_model_error(calc));
    return got.loss_sum / (double)got.count;
}

int main(void)
{
    mirror_error err = {0, ""};
    mirror_strategy *one, *eight;
    mirror_model *calc = network(&one, 1, 32), *sync = network(&eight, 8, 256);
    static float w0[PARAMS], w[PARAMS];
    double loss1, loss8;

    if (mirror_dataset_synthetic_digits(&d, SAMPLES, 1, &err)) die(err.message);
    if (mirror_get_parameters(calc, 0, w0, PARAMS)) die(mirror_model_error(calc)); /* the initial weights */
    loss1 = simulate(calc, 1, 32, 0.1f, w0, w);
    printf("1 worker, staleness 0 (plain SGD):    loss %.4f\n", loss1);
    loss8 = simulate(calc, 8, 32, 0.1f, w0, w);
    printf("8 workers, asynchronous, staleness 7: loss %.4f\n", loss8);
    printf("8 replicas, synchronous, batch 256:   loss %.4f\n", simulate(sync, 1, 256, 0.8f, w0, w));
    check(loss8 > 2 * loss1, "8 asynchronous workers (staleness 7) end at more than twice the loss of 1 worker");
    check(mirror_check_replicas(sync) == MIRROR_OK, "the 8 synchronous replicas hold the same weights");
    mirror_model_destroy(calc);
    mirror_model_destroy(sync);
    mirror_strategy_destroy(one);
    mirror_strategy_destroy(eight);
    mirror_dataset_free(&d);
    return failures ? 1 : 0;
}
