/* hello.c - the mirror API in one page: a strategy, a model, one training
   loop written by hand, an evaluation.

   Build and run:  make && ./build/hello
   (or: cc -O2 -std=c99 examples/hello.c -o hello -lm -lpthread && ./hello) */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"

#include <stdio.h>
#include <stdlib.h>

#define SAMPLES 2000

static void die(const char *what) { fprintf(stderr, "hello: %s\n", what); exit(1); }

int main(void)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_dataset train, test;
    mirror_strategy *s;
    mirror_model *m;
    mirror_metrics got;
    size_t perm[SAMPLES], epoch, step, batch = 100;

    sd.devices = "cpu:2"; /* 2 replicas, 2 threads */
    if (mirror_strategy_create(&sd, &s, &err)) die(err.message);
    if (mirror_dataset_synthetic_digits(&train, SAMPLES, 1, &err) ||
        mirror_dataset_synthetic_digits(&test, 500, 2, &err))
        die(err.message);

    /* Layers check their shapes as they are added; build reports the first error. */
    md.strategy = s;
    md.channels = 1;
    md.height = 28;
    md.width = 28;
    md.max_batch = batch;
    md.optimizer.kind = MIRROR_OPT_ADAM;
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_flatten(m);
    mirror_dense(m, 64);
    mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) die(mirror_model_error(m));

    /* What mirror_fit does, by hand: one permutation per epoch, global batches
       of shuffled indices; each step splits the batch across the replicas. */
    for (epoch = 0; epoch < 3; epoch++) {
        mirror_metrics sum = {0.0, 0, 0};
        mirror_permutation(perm, train.count, 42, epoch);
        for (step = 0; step < train.count / batch; step++) {
            mirror_batch b = {0};
            b.x = train.x;
            b.labels = train.labels;
            b.rows = train.count;
            b.index = perm + step * batch; /* the batch's rows, in shuffled order */
            b.n = batch;
            if (mirror_train_step(m, &b, &got)) die(mirror_model_error(m));
            sum.loss_sum += got.loss_sum; /* the metrics are sums: divide by count */
            sum.correct += got.correct;
            sum.count += got.count;
        }
        printf("epoch %zu: loss %.3f, accuracy %.3f\n", epoch + 1, sum.loss_sum / (double)sum.count,
               (double)sum.correct / (double)sum.count);
    }

    if (mirror_evaluate(m, &test, 0, &got)) die(mirror_model_error(m)); /* sums over the test set */
    printf("test accuracy %.3f on %zu replicas\n", (double)got.correct / (double)got.count,
           mirror_num_replicas(s));

    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    mirror_dataset_free(&train);
    mirror_dataset_free(&test);
    return 0;
}
