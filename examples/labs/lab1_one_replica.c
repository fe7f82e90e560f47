/* Lab 1 - one replica: the training step that the next labs split.

   Run:   make build/lab1_one_replica && ./build/lab1_one_replica
   (or:   cc -O2 -std=c99 examples/labs/lab1_one_replica.c -o lab1 -lm -lpthread)

   What to look at: the loop in main is the whole of training. Each epoch
   shuffles the data (mirror_permutation gives the same order for the same
   seed and epoch, on any machine), cuts it into batches, and each
   mirror_train_step runs forward, the loss, backward and one SGD update.
   The loss gradient of every sample is divided by the batch size, so the
   gradient of a step is the mean over its batch. There is one replica
   (sd.devices = "cpu:1"): one copy of the model, one thread. Labs 2 to 7
   split this same step across replicas and processes.

   What comes out: the loss and accuracy of each epoch (they depend on the
   machine's rounding, so no digits are promised), then:
      check: one optimizer step per batch, 20 an epoch: ok
      check: the loss fell in every epoch: ok
      check: the test accuracy is at least 5 times chance (0.1): ok
   Try: another learning rate (md.optimizer.lr), another batch. */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <stdio.h>
#include <stdlib.h>

#define SAMPLES 2000
#define BATCH 100
#define EPOCHS 4

static int failures;

/* Prints one promise of the handout and whether it held. */
static void check(int held, const char *promise)
{
    printf("check: %s: %s\n", promise, held ? "ok" : "FAILED");
    if (!held) failures++;
}

static void die(const char *what)
{
    fprintf(stderr, "lab1: %s\n", what);
    exit(1);
}

int main(void)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_dataset train, test;
    mirror_strategy *s;
    mirror_model *m;
    mirror_metrics got;
    static size_t perm[SAMPLES];
    double last_loss = 1e30;
    size_t epoch, step;
    int fell = 1;

    sd.devices = "cpu:1";
    if (mirror_strategy_create(&sd, &s, &err)) die(err.message);
    if (mirror_dataset_synthetic_digits(&train, SAMPLES, 1, &err)) die(err.message);
    if (mirror_dataset_synthetic_digits(&test, 500, 2, &err)) die(err.message);

    md.strategy = s;
    md.channels = 1;
    md.height = 28;
    md.width = 28;
    md.max_batch = BATCH;
    md.optimizer.kind = MIRROR_OPT_SGD;
    md.optimizer.lr = 0.1f;
    md.optimizer.momentum = 0.9f;
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_flatten(m);
    mirror_dense(m, 64);
    mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) die(mirror_model_error(m));

    for (epoch = 0; epoch < EPOCHS; epoch++) {
        mirror_metrics sum = {0.0, 0, 0};
        mirror_permutation(perm, SAMPLES, 42, epoch);
        for (step = 0; step < SAMPLES / BATCH; step++) {
            mirror_batch b = {0};
            b.x = train.x;
            b.labels = train.labels;
            b.rows = SAMPLES;
            b.index = perm + step * BATCH; /* the batch: BATCH shuffled samples */
            b.n = BATCH;
            if (mirror_train_step(m, &b, &got)) die(mirror_model_error(m));
            sum.loss_sum += got.loss_sum;
            sum.correct += got.correct;
            sum.count += got.count;
        }
        printf("epoch %zu: loss %.4f, accuracy %.4f\n", epoch + 1, sum.loss_sum / (double)sum.count,
               (double)sum.correct / (double)sum.count);
        if (sum.loss_sum / (double)sum.count >= last_loss) fell = 0;
        last_loss = sum.loss_sum / (double)sum.count;
    }
    if (mirror_evaluate(m, &test, 0, &got)) die(mirror_model_error(m));
    printf("test accuracy %.4f\n", (double)got.correct / (double)got.count);

    check(mirror_optimizer_steps(m) == EPOCHS * (SAMPLES / BATCH), "one optimizer step per batch, 20 an epoch");
    check(fell, "the loss fell in every epoch");
    check((double)got.correct / (double)got.count >= 0.5, "the test accuracy is at least 5 times chance (0.1)");

    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    mirror_dataset_free(&train);
    mirror_dataset_free(&test);
    return failures ? 1 : 0;
}
