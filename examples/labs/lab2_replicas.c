/* Lab 2 - replicas, shards and the all-reduce, made visible.

   Run:   make build/lab2_replicas && ./build/lab2_replicas

   What to look at: one step of a global batch of 10 samples on 4 replicas
   (4 threads, each with its own copy of the model). mirror_shard cuts the
   batch into shards of 3, 3, 2 and 2 samples; each replica runs forward
   and backward on its shard and divides each sample's loss gradient by 10,
   the global batch, never by its shard's size. md.replica_values = 1 keeps
   each replica's own gradient and metrics from before the all-reduce (what
   TensorFlow's strategy.run returns per replica). The all-reduce sums the
   gradients, and the sum is the mean gradient of the whole batch.

   What comes out: each replica's shard, loss, samples and a few values of
   its gradient, the same for their sum (the all-reduce), then:
      check: the replicas' gradients differ (each saw other samples): ok
      check: the all-reduce is their sum, in replica order, bit for bit: ok
      check: the replicas' losses and samples add up to the step's: ok
      check: after the update every replica holds the same parameters: ok
   Lab 3 shows that 1, 2 and 4 replicas then take the same step. Try: a
   batch of 3 (an empty shard), or 2 replicas. */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <stdio.h>
#include <stdlib.h>

#define N 10 /* the global batch */

static int failures;

static void check(int held, const char *promise)
{
    printf("check: %s: %s\n", promise, held ? "ok" : "FAILED");
    if (!held) failures++;
}

static void die(const char *what)
{
    fprintf(stderr, "lab2: %s\n", what);
    exit(1);
}

/* A 784-16-10 network (12730 parameters) on `replicas` replicas, one step
   on the first N digits; the reduced gradient into g. */
static mirror_model *one_step(mirror_strategy **s, size_t replicas, const mirror_dataset *d, float *g,
                              mirror_metrics *got)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_batch b = {0};
    mirror_model *m;
    sd.devices = "cpu";
    sd.num_replicas = replicas;
    if (mirror_strategy_create(&sd, s, &err)) die(err.message);
    md.strategy = *s;
    md.channels = 28 * 28;
    md.max_batch = N;
    md.seed = 7;
    md.replica_values = 1; /* keep each replica's own gradient and metrics */
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_dense(m, 16);
    mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) die(mirror_model_error(m));
    b.x = d->x;
    b.labels = d->labels;
    b.n = N;
    if (mirror_train_step(m, &b, got) || mirror_get_gradients(m, 0, g, mirror_num_parameters(m)))
        die(mirror_model_error(m));
    return m;
}

int main(void)
{
    mirror_error err = {0, ""};
    mirror_dataset d;
    mirror_strategy *s;
    mirror_model *m;
    mirror_metrics step, mine, total = {0.0, 0, 0};
    static float reduced[13000], own[4][13000], sum[13000];
    size_t r, i, begin, count, n;
    int differ = 0, same_sum = 1;

    if (mirror_dataset_synthetic_digits(&d, 100, 3, &err)) die(err.message);
    m = one_step(&s, 4, &d, reduced, &step);
    n = mirror_num_parameters(m); /* 784 x 16 + 16 + 16 x 10 + 10 = 12730 */
    printf("replica  shard    loss_sum  samples  gradient of the last layer's first 3 weights\n");
    for (r = 0; r < 4; r++) {
        mirror_shard(N, 4, r, &begin, &count);
        if (mirror_get_replica_gradients(m, r, own[r], n) || mirror_get_replica_metrics(m, r, &mine))
            die(mirror_model_error(m));
        printf("%7zu  [%zu,%2zu)  %9.4f  %7zu  %+.6f %+.6f %+.6f\n", r, begin, begin + count, mine.loss_sum,
               mine.count, own[r][n - 170], own[r][n - 169], own[r][n - 168]);
        for (i = 0; i < n; i++) sum[i] = r == 0 ? own[r][i] : sum[i] + own[r][i];
        for (i = 0; r > 0 && i < n; i++) differ += own[r][i] != own[0][i];
        total.loss_sum += mine.loss_sum;
        total.count += mine.count;
    }
    printf("sum      [0,%d)  %9.4f  %7zu  %+.6f %+.6f %+.6f  (the all-reduce)\n", N, step.loss_sum, step.count,
           reduced[n - 170], reduced[n - 169], reduced[n - 168]);
    for (i = 0; i < n; i++) same_sum &= sum[i] == reduced[i];
    check(differ > 0, "the replicas' gradients differ (each saw other samples)");
    check(same_sum, "the all-reduce is their sum, in replica order, bit for bit");
    check(total.loss_sum == step.loss_sum && total.count == step.count,
          "the replicas' losses and samples add up to the step's");
    check(mirror_check_replicas(m) == MIRROR_OK, "after the update every replica holds the same parameters");

    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    mirror_dataset_free(&d);
    return failures ? 1 : 0;
}
