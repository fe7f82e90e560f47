/* test_replicas.c - the invariants of synchronous data parallelism:
   N replicas equal one replica (bitwise in deterministic mode), replicas
   stay bitwise equal, runs are deterministic, the reducer adds correctly,
   a step allocates nothing. */
#define _POSIX_C_SOURCE 200809L /* mirror.h is not the first include here */
#include "alloc_count.h"
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "digits.h"
#include "files.h"

#include <math.h>
#include <string.h>

/* What model_with sets beside its arguments (test_shard_modes). */
static mirror_shard_update shard_mode = MIRROR_SHARD_AUTO;
static float clip_norm = 0.0f;
static int replica_values = 0;

/* A small CNN or MLP on 12x12 crops of synthetic digits; chunk > 0:
   deterministic mode with chunks of that many samples. */
static mirror_model *model_with(mirror_strategy *s, int cnn, mirror_optimizer_kind opt, size_t max_batch, size_t chunk,
                                mirror_precision precision)
{
    mirror_model_desc d = model_desc(s, 1, 12, 12, max_batch, 7);
    d.deterministic = chunk > 0, d.chunk = chunk;
    d.precision = precision;
    d.optimizer = optimizer_of(opt, opt == MIRROR_OPT_SGD ? 0.05f : 0.002f);
    d.optimizer.nesterov = opt == MIRROR_OPT_SGD;
    d.optimizer.weight_decay = 1e-3f;
    d.optimizer.clip_norm = clip_norm;
    d.shard_update = shard_mode;
    d.replica_values = replica_values;
    return build_model(&d, NULL, "%sflatten, dense 16, relu, dense 10",
                       cnn ? "conv 4 3 1 1, relu, maxpool 2 2, conv 6 3 2 1, relu, " : "");
}

static mirror_model *model(mirror_strategy *s, int cnn, mirror_optimizer_kind opt, size_t max_batch)
{
    return model_with(s, cnn, opt, max_batch, 0, MIRROR_PRECISION_FP32);
}

/* 95 samples of 12x12: crops of synthetic digits, so an epoch of batch 10
   ends with a partial batch of 5. */
static mirror_dataset data;

/* One training step on batch `step` of the epoch order (seed 11). */
static int step(mirror_model *m, size_t k, size_t batch, size_t *perm)
{
    size_t per_epoch = mirror_num_batches(data.count, batch, 0), b = k % per_epoch;
    mirror_batch g;
    memset(&g, 0, sizeof g);
    if (b == 0) mirror_permutation(perm, data.count, 11, k / per_epoch);
    g.x = data.x, g.labels = data.labels, g.rows = data.count;
    g.index = perm + b * batch;
    g.n = b * batch + batch <= data.count ? batch : data.count - b * batch;
    return mirror_train_step(m, &g, NULL);
}

static float *params_of(mirror_model *m, size_t r)
{
    size_t n = mirror_num_parameters(m);
    float *p = (float *)malloc(n * sizeof(float));
    mirror_get_parameters(m, r, p, n);
    return p;
}

static float *state_of(mirror_model *m, size_t r)
{
    size_t n = mirror_optimizer_state_size(m);
    float *p = (float *)malloc((n ? n : 1) * sizeof(float));
    mirror_get_optimizer_state(m, r, p, n);
    return p;
}

/* Replicas of m hold bitwise-equal parameters and optimizer state. */
static int replicas_equal(mirror_model *m, size_t replicas)
{
    size_t r, np = mirror_num_parameters(m), ns = mirror_optimizer_state_size(m);
    float *p0 = params_of(m, 0), *s0 = state_of(m, 0);
    int same = 1;
    for (r = 1; r < replicas; r++) {
        float *p = params_of(m, r), *s = state_of(m, r);
        same &= !memcmp(p0, p, np * sizeof(float)) && !memcmp(s0, s, ns * sizeof(float));
        free(p);
        free(s);
    }
    free(p0);
    free(s0);
    return same;
}

static void test_all_reduce(void)
{
    static const size_t lengths[] = {0, 1, 7, 511, 512, 513, 4099};
    size_t R, li, r, i;
    for (R = 1; R <= 4; R++) {
        mirror_strategy *s = new_strategy("cpu", R);
        for (li = 0; li < sizeof lengths / sizeof *lengths; li++) {
            size_t n = lengths[li];
            float *bufs[4];
            int ok = 1, bok = 1;
            for (r = 0; r < R; r++) {
                bufs[r] = (float *)malloc((n ? n : 1) * sizeof(float));
                for (i = 0; i < n; i++) bufs[r][i] = (float)(r + 1) + 0.25f * (float)(i % 8);
            }
            CHECK(mirror_all_reduce_sum(s, bufs, n) == MIRROR_OK, "all-reduce R=%zu n=%zu", R, n);
            for (r = 0; r < R; r++)
                for (i = 0; i < n; i++)
                    ok &= bufs[r][i] == (float)(R * (R + 1) / 2) + 0.25f * (float)(R * (i % 8));
            CHECK(ok, "all-reduce of r+1 over %zu replicas, %zu elements: every buffer holds the sum", R, n);
            for (i = 0; i < n; i++) bufs[R - 1][i] = -(float)i;
            CHECK(mirror_broadcast(s, bufs, n, R - 1) == MIRROR_OK, "broadcast");
            for (r = 0; r < R; r++)
                for (i = 0; i < n; i++) bok &= bufs[r][i] == -(float)i;
            CHECK(bok, "broadcast from the last replica, R=%zu n=%zu", R, n);
            for (r = 0; r < R; r++) free(bufs[r]);
        }
        CHECK(mirror_all_reduce_sum(s, NULL, 4) == MIRROR_ERR_ARGUMENT, "NULL buffers are an error");
        CHECK(mirror_broadcast(s, NULL, 0, R) == MIRROR_ERR_ARGUMENT, "root out of range is an error");
        mirror_strategy_destroy(s);
    }
}

/* Invariant 1 and 2: N replicas give the parameters of one (within 1e-5 abs
   + 1e-5 rel after 20 steps), and replicas are bitwise equal after every step. */
static void test_equivalence(int cnn, mirror_optimizer_kind opt)
{
    const char *name = opt == MIRROR_OPT_SGD ? "SGD" : "AdamW";
    size_t perm[95], R, k, i, n;
    float *ref = NULL;
    for (R = 1; R <= 4; R++) {
        mirror_strategy *s = new_strategy("cpu", R);
        mirror_model *m = model(s, cnn, opt, 10);
        float *p;
        double worst = 0.0;
        int equal = 1;
        CHECK(m != NULL, "model builds");
        if (!m) return;
        n = mirror_num_parameters(m);
        CHECK(replicas_equal(m, R), "initial parameters equal on %zu replicas", R);
        for (k = 0; k < 20; k++) {
            CHECK(step(m, k, 10, perm) == MIRROR_OK, "step %zu: %s", k, mirror_model_error(m));
            equal &= replicas_equal(m, R);
        }
        CHECK(equal, "%s %s: %zu replicas bitwise equal after every one of 20 steps", cnn ? "cnn" : "mlp",
              name, R);
        p = params_of(m, 0);
        if (!ref) {
            ref = p;
        } else {
            for (i = 0; i < n; i++) {
                double d = fabs((double)p[i] - ref[i]) - 1e-5 * fabs(ref[i]);
                if (d > worst) worst = d;
            }
            CHECK(worst <= 1e-5, "%s %s: %zu replicas vs 1 after 20 steps: excess %.3g over 1e-5 + 1e-5 rel",
                  cnn ? "cnn" : "mlp", name, R, worst);
            free(p);
        }
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
    free(ref);
}

/* Invariant 3: same seed, same replica count, bitwise identical runs. */
static void test_determinism(void)
{
    size_t perm[95], k, run;
    float *p[2];
    mirror_metrics met[2];
    for (run = 0; run < 2; run++) {
        mirror_strategy *s = new_strategy("cpu", 3);
        mirror_model *m = model(s, 1, MIRROR_OPT_ADAMW, 10);
        for (k = 0; k < 12; k++) step(m, k, 10, perm);
        p[run] = params_of(m, 1);
        mirror_evaluate(m, &data, 0, &met[run]);
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
    CHECK(!memcmp(p[0], p[1], 4 * 10), "two runs give bitwise equal parameters");
    CHECK(met[0].loss_sum == met[1].loss_sum && met[0].correct == met[1].correct, "and equal metrics");
    free(p[0]);
    free(p[1]);
}

/* Sharding keeps every sample: a batch smaller than the replica count
   (empty shards), and evaluate/predict agree across replica counts. */
static void test_small_batches_and_predict(void)
{
    size_t R, perm[95], i, out;
    float *pred[2] = {NULL, NULL};
    mirror_metrics ev[2];
    for (R = 1; R <= 4; R += 3) {
        mirror_strategy *s = new_strategy("cpu", R);
        mirror_model *m = model(s, 1, MIRROR_OPT_SGD, 8);
        mirror_batch b;
        mirror_metrics got;
        size_t idx = R == 1 ? 0 : 1, arg, correct = 0;
        memset(&b, 0, sizeof b);
        mirror_permutation(perm, 95, 5, 0);
        b.x = data.x, b.labels = data.labels, b.rows = 95, b.index = perm, b.n = 2;
        CHECK(mirror_train_step(m, &b, &got) == MIRROR_OK && got.count == 2,
              "a batch of 2 on %zu replicas (empty shards) trains and counts 2 samples", R);
        out = mirror_num_outputs(m);
        pred[idx] = (float *)malloc(95 * out * sizeof(float));
        CHECK(mirror_predict(m, data.x, 95, pred[idx]) == MIRROR_OK, "predict");
        CHECK(mirror_evaluate(m, &data, 0, &ev[idx]) == MIRROR_OK && ev[idx].count == 95, "evaluate counts all");
        for (i = 0; i < 95; i++) {
            size_t j;
            for (arg = 0, j = 1; j < out; j++)
                if (pred[idx][i * out + j] > pred[idx][i * out + arg]) arg = j;
            correct += (int32_t)arg == data.labels[i];
        }
        CHECK(correct == ev[idx].correct, "argmax of predict matches evaluate's correct count (%zu vs %zu)",
              correct, ev[idx].correct);
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
    {
        double worst = 0.0;
        for (i = 0; i < 95 * 10; i++) worst = fmax(worst, fabs((double)pred[0][i] - pred[1][i]));
        CHECK(worst < 1e-5, "predictions on 1 and 4 replicas agree (max difference %.3g)", worst);
        CHECK(fabs(ev[0].loss_sum - ev[1].loss_sum) < 1e-4 * fabs(ev[0].loss_sum),
              "evaluation loss agrees across replica counts");
    }
    free(pred[0]);
    free(pred[1]);
}

/* Replica 0's parameters and optimizer state: equal to ref's bit for bit
   (ref NULL: they become ref). */
static int same_as(mirror_model *m, float **ref)
{
    size_t np = mirror_num_parameters(m), ns = mirror_optimizer_state_size(m);
    float *p = params_of(m, 0), *st = state_of(m, 0), *both = (float *)malloc((np + ns + 1) * sizeof(float));
    int same = 1;
    memcpy(both, p, np * sizeof(float));
    memcpy(both + np, st, ns * sizeof(float));
    free(p), free(st);
    if (!*ref) {
        *ref = both;
        return 1;
    }
    same = !memcmp(both, *ref, (np + ns) * sizeof(float));
    free(both);
    return same;
}

/* Deterministic mode: 1, 2, 3 and 4 replicas give the same parameters and
   optimizer state bit for bit, after 25 steps of batch 10 over 95
   samples (every third step a final partial batch of 5), with chunks of
   3 (shards of 6, 3, 3 and 0 + 1 samples: uneven, one empty) and of 16
   (the whole batch one chunk, on the first replica). */
static void test_deterministic(int cnn, mirror_optimizer_kind opt, mirror_precision precision, size_t chunk)
{
    const char *name = opt == MIRROR_OPT_SGD ? "SGD" : "AdamW";
    size_t perm[95], R, k;
    float *ref = NULL;
    for (R = 1; R <= 4; R++) {
        mirror_strategy *s = new_strategy("cpu", R);
        mirror_model *m = model_with(s, cnn, opt, 10, chunk, precision);
        int ok = m != NULL, equal = 1;
        for (k = 0; ok && k < 25; k++) {
            ok = step(m, k, 10, perm) == MIRROR_OK;
            equal &= replicas_equal(m, R);
        }
        CHECK(ok && equal, "deterministic %s %s %s, chunk %zu, %zu replicas: 25 steps, replicas equal after each: %s",
              cnn ? "cnn" : "mlp", name, mirror_precision_name(precision), chunk, R, m ? mirror_model_error(m) : "");
        if (ok)
            CHECK(same_as(m, &ref), "deterministic %s %s %s, chunk %zu: %zu replicas give 1 replica's parameters and "
                                    "optimizer state, bit for bit",
                  cnn ? "cnn" : "mlp", name, mirror_precision_name(precision), chunk, R);
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
    if (ref && precision == MIRROR_PRECISION_FP32) { /* the chunks' sums are the batch's, in another order */
        mirror_strategy *s = new_strategy("cpu", 1);
        mirror_model *m = model_with(s, cnn, opt, 10, 0, precision);
        size_t i, n = m ? mirror_num_parameters(m) : 0;
        double worst = 0.0;
        for (k = 0; m && k < 25; k++) step(m, k, 10, perm);
        if (m) {
            float *p = params_of(m, 0);
            for (i = 0; i < n; i++) {
                double d = fabs((double)p[i] - ref[i]) - 1e-4 * fabs((double)p[i]);
                if (d > worst) worst = d;
            }
            free(p);
        }
        CHECK(m && worst <= 1e-4, "deterministic %s %s, chunk %zu: 25 steps within 1e-4 + 1e-4 relative of the same "
              "steps without it (excess %.3g)", cnn ? "cnn" : "mlp", name, chunk, worst);
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
    free(ref);
}

/* mirror_model_shard answers with the rows each replica took in the last
   step: whole chunks in deterministic mode (64 samples in chunks of 16 on
   3 replicas: 32, 16, 16), the even split otherwise (22, 21, 21). */
static void test_model_shard(void)
{
    static const size_t whole_chunks[3] = {32, 16, 16}, even[3] = {22, 21, 21};
    size_t perm[95], chunk;
    for (chunk = 0; chunk <= 16; chunk += 16) {
        mirror_strategy *s = new_strategy("cpu", 3);
        mirror_model *m = model_with(s, 0, MIRROR_OPT_SGD, 64, chunk, MIRROR_PRECISION_FP32);
        const size_t *want = chunk ? whole_chunks : even;
        size_t r, begin = 0, count = 0, next = 0;
        int same = m && step(m, 0, 64, perm) == MIRROR_OK;
        for (r = 0; same && r < 3; r++) {
            same = mirror_model_shard(m, 64, r, &begin, &count) == MIRROR_OK && begin == next && count == want[r] &&
                   begin == m->rep[r].begin && count == m->rep[r].count;
            next = begin + count;
        }
        CHECK(same, "mirror_model_shard, %s: 64 samples on 3 replicas as the step took them (%zu, %zu, %zu)",
              chunk ? "deterministic mode, chunks of 16" : "default mode", want[0], want[1], want[2]);
        CHECK(m && mirror_model_shard(m, 64, 3, &begin, &count) == MIRROR_ERR_ARGUMENT,
              "mirror_model_shard: replica 3 of 3 is refused");
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
}

/* Deterministic mode: two micro-batches of 5 accumulated are one step of
   10, bit for bit (chunks of 5), on 1 and 3 replicas; a checkpoint of 2
   replicas resumed on 3 goes on as 1 replica uninterrupted; evaluation
   agrees to the rounding of its double sums; bad settings are refused. */
static void test_deterministic_more(void)
{
    size_t perm[95], R, k, j;
    float *ref = NULL;
    char path[256];
    mirror_metrics ev[2];
    for (R = 1; R <= 3; R += 2) {
        mirror_strategy *s = new_strategy("cpu", R);
        mirror_model *whole = model_with(s, 1, MIRROR_OPT_ADAMW, 10, 5, MIRROR_PRECISION_FP32);
        mirror_model *parts = model_with(s, 1, MIRROR_OPT_ADAMW, 10, 5, MIRROR_PRECISION_FP32);
        int ok = whole && parts;
        mirror_permutation(perm, 95, 3, 0);
        for (k = 0; ok && k < 9; k++) {
            mirror_batch b[2];
            memset(b, 0, sizeof b);
            for (j = 0; j < 2; j++) {
                b[j].x = data.x, b[j].labels = data.labels, b[j].rows = 95;
                b[j].index = perm + 10 * k + 5 * j, b[j].n = 5;
            }
            ok = mirror_train_steps(parts, b, 2, NULL) == MIRROR_OK;
            b[0].n = 10;
            ok = ok && mirror_train_step(whole, &b[0], NULL) == MIRROR_OK;
        }
        CHECK(ok && same_as(whole, &ref) && same_as(parts, &ref),
              "deterministic, %zu replicas: 9 steps of 2 accumulated micro-batches of 5 = 9 steps of 10, bit for bit "
              "(and the same on 1 and 3 replicas)",
              R);
        mirror_model_destroy(whole), mirror_model_destroy(parts);
        mirror_strategy_destroy(s);
    }
    free(ref);
    ref = NULL;
    path_in(path, "det.ckpt");
    for (R = 1; R <= 3; R++) { /* 1: 16 steps; 2: 8 steps, saved; 3: loaded, 8 more */
        mirror_strategy *s = new_strategy("cpu", R);
        mirror_model *m = model_with(s, 0, MIRROR_OPT_ADAMW, 10, 3, MIRROR_PRECISION_FP32);
        int ok = m != NULL;
        if (ok && R == 3) ok = mirror_checkpoint_load(m, path, 0, NULL) == MIRROR_OK;
        for (k = R == 3 ? 8 : 0; ok && k < (R == 2 ? 8u : 16u); k++) ok = step(m, k, 10, perm) == MIRROR_OK;
        if (ok && R == 2) ok = mirror_checkpoint_save(m, path, NULL, 0) == MIRROR_OK;
        if (R != 2) CHECK(ok && same_as(m, &ref), "deterministic: saved on 2 replicas after 8 steps, resumed on 3 for 8 "
                                                  "more: 1 replica's 16 steps, bit for bit (%s)",
                          m ? mirror_model_error(m) : "no model");
        if (R != 2) CHECK(mirror_evaluate(m, &data, 0, &ev[R / 3]) == MIRROR_OK, "evaluate");
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
    CHECK(ev[0].correct == ev[1].correct && fabs(ev[0].loss_sum - ev[1].loss_sum) <= 1e-12 * ev[0].loss_sum,
          "deterministic: evaluation on 1 and 3 replicas: the same count correct, the loss sums within 1e-12 "
          "(%.17g, %.17g)",
          ev[0].loss_sum, ev[1].loss_sum);
    free(ref);
    {
        mirror_strategy *s = new_strategy("cpu", 2);
        mirror_model_desc d;
        mirror_model *m = NULL;
        memset(&d, 0, sizeof d);
        d.strategy = s, d.channels = 4;
        d.deterministic = 2;
        CHECK(mirror_model_create(&d, &m, NULL) == MIRROR_ERR_ARGUMENT && !m, "deterministic 2 is refused");
        d.deterministic = 1, d.chunk = ((size_t)1 << 24) + 1;
        CHECK(mirror_model_create(&d, &m, NULL) == MIRROR_ERR_ARGUMENT && !m, "a chunk of 2^24 + 1 samples is refused");
        d.chunk = 0;
        CHECK(mirror_model_create(&d, &m, NULL) == MIRROR_OK && mirror_model_query_desc(m).chunk == 16,
              "deterministic mode's chunk is 16 by default");
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
}

/* The steady-state step allocates nothing; the arenas are sized for the
   largest shard and reported. */
static void test_pool(void)
{
    size_t perm[95], k;
    long before, live = live_allocs;
    mirror_memory_report one, two;
    mirror_strategy *s1 = new_strategy("cpu", 1), *s2 = new_strategy("cpu", 2);
    mirror_model *m1 = model(s1, 1, MIRROR_OPT_ADAM, 10), *m2 = model(s2, 1, MIRROR_OPT_ADAM, 10);
    mirror_metrics met;
    mirror_batch b;
    step(m2, 0, 10, perm);
    before = total_allocs;
    for (k = 1; k < 8; k++) step(m2, k, 10, perm);
    memset(&b, 0, sizeof b);
    b.x = data.x, b.labels = data.labels, b.n = 10;
    mirror_evaluate_batch(m2, &b, &met);
    CHECK(total_allocs == before, "7 steps and an evaluation allocated %ld times (want 0)", total_allocs - before);
    CHECK(mirror_memory_report_get(m1, 0, &one) == MIRROR_OK && mirror_memory_report_get(m2, 1, &two) == MIRROR_OK,
          "memory report");
    CHECK(one.parameters == 4 * m1->nslots && m1->nslots >= mirror_num_parameters(m1) && one.gradients == one.parameters &&
              one.optimizer == 2 * one.parameters,
          "parameter, gradient and Adam state arenas: %zu %zu %zu bytes", one.parameters, one.gradients,
          one.optimizer);
    CHECK(two.activations < one.activations, "2 replicas: smaller activation arenas (%zu < %zu bytes)",
          two.activations, one.activations);
    mirror_model_destroy(m1);
    mirror_model_destroy(m2);
    mirror_strategy_destroy(s1);
    mirror_strategy_destroy(s2);
    CHECK(live_allocs == live, "destroy freed every allocation (%ld left)", live_allocs - live);
}

/* Metrics left on the device (out NULL) and taken later equal the ones
   read back at every step. */
static void test_deferred_metrics(void)
{
    size_t perm[95], k;
    mirror_strategy *s = new_strategy("cpu", 3);
    mirror_model *now = model(s, 1, MIRROR_OPT_SGD, 10), *later = model(s, 1, MIRROR_OPT_SGD, 10);
    mirror_metrics sum = {0.0, 0, 0}, one, taken, empty;
    mirror_batch b;
    for (k = 0; k < 10; k++) {
        memset(&b, 0, sizeof b);
        if (k == 0) mirror_permutation(perm, data.count, 11, 0);
        b.x = data.x, b.labels = data.labels, b.rows = data.count;
        b.index = perm + k * 10, b.n = k == 9 ? 5 : 10;
        mirror_train_step(now, &b, &one);
        sum.loss_sum += one.loss_sum, sum.correct += one.correct, sum.count += one.count;
        CHECK(mirror_train_step(later, &b, NULL) == MIRROR_OK, "step without metrics");
    }
    CHECK(mirror_take_metrics(later, &taken) == MIRROR_OK, "take metrics");
    CHECK(taken.count == 95 && taken.correct == sum.correct && fabs(taken.loss_sum - sum.loss_sum) <= 1e-9 * sum.loss_sum,
          "taken metrics (%zu samples, %zu correct, loss %.9g) equal the per-step ones (%zu, %zu, %.9g)",
          taken.count, taken.correct, taken.loss_sum, sum.count, sum.correct, sum.loss_sum);
    CHECK(mirror_take_metrics(later, &empty) == MIRROR_OK && empty.count == 0 && empty.loss_sum == 0.0,
          "a second take is empty");
    mirror_model_destroy(now);
    mirror_model_destroy(later);
    mirror_strategy_destroy(s);
}

/* replica_values: the replicas' own gradients, read before the all-reduce,
   add up to the reduced one: in fp32 their float sum in replica order is it
   bit for bit (the CPU reducer's additions), in deterministic mode (its
   chunks added per replica first) and fp16 within rounding. Each replica's
   differs from the others', their metrics add up to the step's, with
   accumulation over the micro-batches; the rest (when off, a bad replica,
   memory) in test_replica_values_api. */
static void check_replica_values(mirror_model *m, size_t R, const mirror_metrics *step, double tol, const char *what)
{
    size_t n = mirror_num_parameters(m), r, i, bad = 0, differ = 0;
    float *reduced = (float *)malloc(n * sizeof(float)), *sum = (float *)calloc(n, sizeof(float));
    float *own = (float *)malloc(n * sizeof(float)), *first = (float *)malloc(n * sizeof(float));
    mirror_metrics total = {0.0, 0, 0}, one;
    double scale = 0.0;
    CHECK(mirror_get_gradients(m, 0, reduced, n) == MIRROR_OK, "%s: the reduced gradient", what);
    for (r = 0; r < R; r++) {
        CHECK(mirror_get_replica_gradients(m, r, own, n) == MIRROR_OK, "%s: replica %zu's gradient: %s", what, r,
              mirror_model_error(m));
        CHECK(mirror_get_replica_metrics(m, r, &one) == MIRROR_OK, "%s: replica %zu's metrics", what, r);
        for (i = 0; i < n; i++) {
            sum[i] = r == 0 ? own[i] : sum[i] + own[i];
            if (r == 0) first[i] = own[i];
            if (r > 0 && own[i] != first[i]) differ++;
        }
        total.loss_sum += one.loss_sum;
        total.correct += one.correct;
        total.count += one.count;
    }
    for (i = 0; i < n; i++) scale = fmax(scale, fabs((double)reduced[i]));
    for (i = 0; i < n; i++)
        if (tol == 0.0 ? sum[i] != reduced[i] : !close_to(sum[i], reduced[i], tol * scale, tol)) bad++;
    CHECK(scale > 0.0 && bad == 0, "%s on %zu replicas: %zu of %zu sums of the replicas' gradients differ from the "
          "reduced gradient (tolerance %g)", what, R, bad, n, tol);
    CHECK(R == 1 || differ > n / 2, "%s on %zu replicas: replica 1's gradient differs from replica 0's in %zu of %zu "
          "values", what, R, differ, n);
    CHECK(total.count == step->count && total.correct == step->correct && total.loss_sum == step->loss_sum,
          "%s on %zu replicas: the replicas' metrics (%zu, %zu, %.17g) add up to the step's (%zu, %zu, %.17g)", what,
          R, total.count, total.correct, total.loss_sum, step->count, step->correct, step->loss_sum);
    free(reduced);
    free(sum);
    free(own);
    free(first);
}

static void test_replica_values(void)
{
    size_t perm[95], R, k, i, begin, count;
    mirror_batch b[2];
    mirror_metrics got, one;
    mirror_permutation(perm, data.count, 11, 0);
    for (k = 0; k < 2; k++) {
        memset(&b[k], 0, sizeof b[k]);
        b[k].x = data.x;
        b[k].labels = data.labels;
        b[k].rows = data.count;
        b[k].index = perm + 12 * k;
        b[k].n = 12;
    }
    replica_values = 1;
    for (R = 1; R <= 4; R++) {
        mirror_strategy *s = new_strategy("cpu", R);
        mirror_model *cnn = model(s, 1, MIRROR_OPT_SGD, 12);
        mirror_model *det = model_with(s, 0, MIRROR_OPT_ADAMW, 12, 3, MIRROR_PRECISION_FP32);
        mirror_model *half = model_with(s, 1, MIRROR_OPT_SGD, 12, 0, MIRROR_PRECISION_FP16);
        for (k = 0; k < 3; k++) { /* a few steps: the gradients of trained parameters */
            CHECK(mirror_train_step(cnn, &b[k % 2], &got) == MIRROR_OK, "cnn step: %s", mirror_model_error(cnn));
            CHECK(mirror_train_step(det, &b[k % 2], &got) == MIRROR_OK, "deterministic step");
            CHECK(mirror_train_step(half, &b[k % 2], &got) == MIRROR_OK, "fp16 step");
        }
        CHECK(mirror_train_step(cnn, &b[0], &got) == MIRROR_OK, "cnn step");
        check_replica_values(cnn, R, &got, 0.0, "fp32");
        for (i = 0; i < R; i++) { /* each replica's metrics are its shard's */
            mirror_shard(12, R, i, &begin, &count);
            CHECK(mirror_get_replica_metrics(cnn, i, &one) == MIRROR_OK && one.count == count,
                  "replica %zu of %zu: %zu samples, its shard %zu", i, R, one.count, count);
        }
        CHECK(mirror_train_steps(cnn, b, 2, &got) == MIRROR_OK, "accumulation");
        CHECK(got.count == 24, "an accumulated step of 24 samples (%zu)", got.count);
        check_replica_values(cnn, R, &got, 0.0, "fp32, accumulated");
        CHECK(mirror_train_step(det, &b[1], &got) == MIRROR_OK, "deterministic step");
        check_replica_values(det, R, &got, 1e-5, "deterministic");
        CHECK(mirror_train_steps(det, b, 2, &got) == MIRROR_OK, "deterministic accumulation");
        check_replica_values(det, R, &got, 1e-5, "deterministic, accumulated");
        CHECK(mirror_train_step(half, &b[1], &got) == MIRROR_OK, "fp16 step");
        check_replica_values(half, R, &got, 4e-3, "fp16");
        mirror_model_destroy(cnn);
        mirror_model_destroy(det);
        mirror_model_destroy(half);
        mirror_strategy_destroy(s);
    }
    replica_values = 0;
}

/* Off, the model keeps nothing and the calls say so; on, three allocations
   at build and none in a step; metrics left on the device (a step without
   out) are read all the same; a bad replica, size or pointer is refused. */
static void test_replica_values_api(void)
{
    size_t perm[95], n;
    long before, off_allocs, on_allocs;
    mirror_strategy *s = new_strategy("cpu", 2);
    mirror_model *off, *on;
    mirror_metrics got, one, two;
    mirror_batch b;
    float *g;
    mirror_permutation(perm, data.count, 11, 0);
    memset(&b, 0, sizeof b);
    b.x = data.x;
    b.labels = data.labels;
    b.rows = data.count;
    b.index = perm;
    b.n = 12;
    before = total_allocs;
    off = model(s, 1, MIRROR_OPT_SGD, 12);
    off_allocs = total_allocs - before;
    replica_values = 1;
    before = total_allocs;
    on = model(s, 1, MIRROR_OPT_SGD, 12);
    on_allocs = total_allocs - before;
    replica_values = 0;
    CHECK(on_allocs == off_allocs + 3, "replica_values takes 3 allocations at build (%ld against %ld off)", on_allocs,
          off_allocs);
    n = mirror_num_parameters(on);
    g = (float *)malloc(n * sizeof(float));
    CHECK(mirror_get_replica_gradients(on, 1, g, n) == MIRROR_OK && g[0] == 0.0f && g[n - 1] == 0.0f,
          "zeros before the first step");
    before = total_allocs;
    CHECK(mirror_train_step(off, &b, &got) == MIRROR_OK && mirror_train_step(on, &b, NULL) == MIRROR_OK, "steps");
    CHECK(total_allocs == before, "a step allocates nothing, on or off (%ld allocations)", total_allocs - before);
    CHECK(mirror_take_metrics(on, &got) == MIRROR_OK, "take the metrics");
    CHECK(mirror_get_replica_metrics(on, 0, &one) == MIRROR_OK && mirror_get_replica_metrics(on, 1, &two) == MIRROR_OK,
          "the replicas' metrics");
    CHECK(one.count == 6 && two.count == 6 && one.correct + two.correct == got.correct &&
              close_to(one.loss_sum + two.loss_sum, got.loss_sum, 0.0, 1e-12),
          "metrics left on the device: the replicas' (%zu + %zu samples, loss %.9g) add up to the step's (%zu, %.9g)",
          one.count, two.count, one.loss_sum + two.loss_sum, got.count, got.loss_sum);
    CHECK(mirror_get_replica_gradients(off, 0, g, n) == MIRROR_ERR_STATE &&
              strstr(mirror_model_error(off), "replica_values") != NULL,
          "off: mirror_get_replica_gradients is an error that names the field (%s)", mirror_model_error(off));
    CHECK(mirror_get_replica_metrics(off, 0, &one) == MIRROR_ERR_STATE, "off: mirror_get_replica_metrics too");
    CHECK(mirror_get_replica_gradients(on, 2, g, n) == MIRROR_ERR_ARGUMENT &&
              strstr(mirror_model_error(on), "replica 2 of 2") != NULL,
          "replica 2 of 2: %s", mirror_model_error(on));
    CHECK(mirror_get_replica_metrics(on, 2, &one) == MIRROR_ERR_ARGUMENT, "replica 2 of 2: metrics");
    CHECK(mirror_get_replica_gradients(on, 0, g, n - 1) == MIRROR_ERR_ARGUMENT, "a dst of the wrong size");
    CHECK(mirror_get_replica_gradients(on, 0, NULL, n) == MIRROR_ERR_ARGUMENT, "a NULL dst");
    CHECK(mirror_get_replica_metrics(on, 0, NULL) == MIRROR_ERR_ARGUMENT, "a NULL out");
    CHECK(mirror_get_replica_gradients(NULL, 0, g, n) == MIRROR_ERR_ARGUMENT, "a NULL model");
    free(g);
    mirror_model_destroy(off);
    mirror_model_destroy(on);
    mirror_strategy_destroy(s);
}

/* The sharded update (each replica updates one slice of the parameters and
   copies it to the others) is the shared math's Adam applied once to every
   parameter: checked against mirror_hd_adam on the host (within 1e-6: the
   library's vectorised loop may fuse other multiply-adds than this scalar
   one; a skipped or repeated update moves a weight by about lr = 1e-3),
   for replica counts that cut the parameters into uneven slices, and for
   more replicas than parameters (empty slices). The replicas stay bitwise
   equal (test_equivalence). */
static void test_sharded_update(void)
{
    static const size_t counts[] = {2, 3, 5};
    size_t c, k, i, r;
    for (c = 0; c < sizeof counts / sizeof *counts; c++) {
        size_t R = counts[c], perm[95];
        mirror_strategy *s = new_strategy("cpu", R);
        mirror_model *big = model(s, 1, MIRROR_OPT_ADAMW, 10), *tiny = NULL, *m;
        mirror_model_desc d;
        memset(&d, 0, sizeof d);
        d.strategy = s, d.channels = 1, d.height = 1, d.width = 1, d.max_batch = 8;
        d.optimizer.kind = MIRROR_OPT_ADAM, d.optimizer.weight_decay = 0.01f;
        mirror_model_create(&d, &tiny, NULL);
        mirror_dense(tiny, 2);
        CHECK(mirror_model_build(tiny) == MIRROR_OK && mirror_num_parameters(tiny) == 4, "a 4-parameter model");
        for (k = 0, m = big; k < 2; k++, m = tiny) {
            size_t np = mirror_num_parameters(m);
            float *before = params_of(m, 0), *st = state_of(m, 0), *g = (float *)malloc(np * sizeof(float));
            const mirror_model_desc q = mirror_model_query_desc(m);
            const mirror_optimizer_desc *o = &q.optimizer;
            float bc1, bc2_sqrt;
            int32_t labels[7] = {0, 1, 1, 0, 1, 0, 0};
            double worst = 0.0;
            for (i = 0; i < 3; i++) {
                free(before), free(st);
                before = params_of(m, 0), st = state_of(m, 0);
                if (m == big) {
                    CHECK(step(m, i, 10, perm) == MIRROR_OK, "step: %s", mirror_model_error(m));
                } else {
                    mirror_batch b;
                    memset(&b, 0, sizeof b);
                    b.x = data.x, b.labels = labels, b.rows = 7, b.n = 7;
                    CHECK(mirror_train_step(m, &b, NULL) == MIRROR_OK, "tiny step: %s", mirror_model_error(m));
                }
            }
            mirror_get_gradients(m, R - 1, g, np);
            mirror_hd_adam_bias(o->beta1, o->beta2, mirror_optimizer_steps(m), &bc1, &bc2_sqrt);
            for (i = 0; i < np; i++)
                mirror_hd_adam(&before[i], &st[i], &st[np + i], g[i], o->lr, o->beta1, o->beta2, o->eps,
                               o->weight_decay, o->kind == MIRROR_OPT_ADAMW, bc1, bc2_sqrt);
            for (r = 0; r < R; r++) {
                float *after = params_of(m, r), *st_after = state_of(m, r);
                for (i = 0; i < np; i++) {
                    worst = fmax(worst, fabs(after[i] - before[i]) / (1e-6 + 1e-6 * fabs(before[i])));
                    worst = fmax(worst, fabs(st_after[i] - st[i]) / (1e-6 + 1e-6 * fabs(st[i])));
                    worst = fmax(worst, fabs(st_after[np + i] - st[np + i]) / (1e-6 + 1e-6 * fabs(st[np + i])));
                }
                free(after), free(st_after);
            }
            CHECK(worst <= 1.0, "%zu replicas, %zu parameters: the sharded update is mirror_hd_adam on every "
                                "parameter of every replica (worst %.3g of the tolerance)", R, np, worst);
            free(before), free(st), free(g);
        }
        mirror_model_destroy(big);
        mirror_model_destroy(tiny);
        mirror_strategy_destroy(s);
    }
}

/* The worst |a - b| / (tol + tol |b|) over n values (0: equal bits). */
static double excess(const float *a, const float *b, size_t n, double tol)
{
    size_t i;
    double worst = memcmp(a, b, n * sizeof(float)) ? 1e-30 : 0.0;
    for (i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / (tol + tol * fabs((double)b[i])));
    return worst;
}

/* The sharded update (the default on CPU replicas; built with
   MIRROR_CPU_SHARED_UPDATE=0, the one GPUs take: reduce-scatter, the
   slices' verdict, all-gather) against every replica updating everything
   (MIRROR_SHARD_OFF): the same parameters and optimizer state, bit for
   bit, over 12 steps that end an epoch on a partial batch, in fp32, fp16
   and bf16, with SGD and AdamW. With clipping the norm adds its squares
   in another order, so within 1e-5 (deterministic mode: bit for bit for
   any replica count). Then where the state lives, and a setting out of
   range. */
static void test_shard_modes(void)
{
    static const mirror_precision precisions[] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16,
                                                  MIRROR_PRECISION_BF16};
    static const mirror_optimizer_kind opts[] = {MIRROR_OPT_SGD, MIRROR_OPT_ADAMW};
    size_t R, pi, oi, c, k, r, perm[95];
    for (R = 2; R <= 3; R++) {
        mirror_strategy *s = new_strategy("cpu", R);
        for (pi = 0; pi < 3; pi++)
            for (oi = 0; oi < 2; oi++)
                for (c = 0; c < 2; c++) {
                    mirror_model *m[2];
                    int ok = 1, cnn = pi == 0 && oi == 1;
                    double worst;
                    float *p[2], *st[2];
                    clip_norm = c ? 0.05f : 0.0f;
                    shard_mode = MIRROR_SHARD_AUTO;
                    m[0] = model_with(s, cnn, opts[oi], 10, 0, precisions[pi]);
                    shard_mode = MIRROR_SHARD_OFF;
                    m[1] = model_with(s, cnn, opts[oi], 10, 0, precisions[pi]);
                    shard_mode = MIRROR_SHARD_AUTO;
                    clip_norm = 0.0f;
                    if (!m[0] || !m[1]) {
                        CHECK(0, "shard modes: build");
                        mirror_model_destroy(m[0]), mirror_model_destroy(m[1]);
                        continue;
                    }
                    for (k = 0; ok && k < 12; k++)
                        ok = step(m[0], k, 10, perm) == MIRROR_OK && step(m[1], k, 10, perm) == MIRROR_OK;
                    CHECK(ok && replicas_equal(m[0], R) && mirror_check_replicas(m[0]) == MIRROR_OK,
                          "sharded, %zu replicas: 12 steps, replicas equal: %s", R, mirror_model_error(m[0]));
                    for (k = 0; k < 2; k++) p[k] = params_of(m[k], R - 1), st[k] = state_of(m[k], R - 1);
                    worst = fmax(excess(p[0], p[1], mirror_num_parameters(m[0]), 1e-5),
                                 excess(st[0], st[1], mirror_optimizer_state_size(m[0]), 1e-5));
                    CHECK(c ? worst <= 1.0 : worst == 0.0,
                          "%s %s %s%s, %zu replicas: the sharded update gives the parameters and state of the "
                          "unsharded one %s (worst %.3g of 1e-5)",
                          cnn ? "cnn" : "mlp", opts[oi] == MIRROR_OPT_SGD ? "SGD" : "AdamW",
                          mirror_precision_name(precisions[pi]), c ? ", clipped" : "", R,
                          c ? "within 1e-5" : "bit for bit", worst);
                    for (k = 0; k < 2; k++) free(p[k]), free(st[k]);
                    mirror_model_destroy(m[0]), mirror_model_destroy(m[1]);
                }
        { /* where the optimizer state lives */
            mirror_model *on, *off;
            mirror_memory_report a, b;
            size_t sum = 0, most = 0, whole;
            shard_mode = MIRROR_SHARD_ON;
            on = model(s, 1, MIRROR_OPT_ADAMW, 10);
            shard_mode = MIRROR_SHARD_OFF;
            off = model(s, 1, MIRROR_OPT_ADAMW, 10);
            shard_mode = MIRROR_SHARD_AUTO;
            CHECK(on && off, "shard modes: build");
            for (r = 0; on && off && r < R; r++) {
                mirror_memory_report_get(on, r, &a);
                mirror_memory_report_get(off, r, &b);
                CHECK(b.optimizer == off->sizes.nstate * sizeof(float), "unsharded: every replica holds the whole state "
                      "(%zu bytes)", b.optimizer);
                sum += a.optimizer, most = a.optimizer > most ? a.optimizer : most;
            }
            whole = off ? off->sizes.nstate * sizeof(float) : 0; /* the arena's, padding included */
#if MIRROR_CPU_SHARED_UPDATE
            CHECK(sum == whole && most == whole, "sharded on shared memory: one state, on replica 0 (%zu bytes of "
                  "%zu)", sum, whole);
#else
            CHECK(most * R == sum && sum >= whole && sum < whole + 2 * R * MIRROR_CPU_PARAM_ALIGN * sizeof(float),
                  "sharded across devices: each of %zu replicas holds 1/%zu of the state (%zu bytes each, %zu in "
                  "all, %zu without padding)", R, R, most, sum, whole);
#endif
            mirror_model_destroy(on), mirror_model_destroy(off);
        }
        mirror_strategy_destroy(s);
    }
    for (pi = 0; pi < 2; pi++) { /* deterministic mode with clipping: the norm of the whole gradient */
        float *ref = NULL;
        for (R = 1; R <= 3; R++) {
            mirror_strategy *s = new_strategy("cpu", R);
            mirror_model *m;
            int ok = 1;
            clip_norm = 0.05f;
            m = model_with(s, 0, MIRROR_OPT_ADAMW, 10, 5, precisions[pi]);
            clip_norm = 0.0f;
            for (k = 0; m && ok && k < 12; k++) ok = step(m, k, 10, perm) == MIRROR_OK;
            CHECK(m && ok && same_as(m, &ref), "deterministic %s, clipped, sharded: %zu replicas give 1 replica's "
                  "parameters and state bit for bit", mirror_precision_name(precisions[pi]), R);
            mirror_model_destroy(m);
            mirror_strategy_destroy(s);
        }
        free(ref);
    }
    {
        mirror_model_desc d;
        mirror_model *m = NULL;
        mirror_error e;
        memset(&d, 0, sizeof d);
        d.strategy = new_strategy("cpu", 2), d.channels = 4;
        d.shard_update = (mirror_shard_update)7;
        CHECK(mirror_model_create(&d, &m, &e) == MIRROR_ERR_ARGUMENT && !m && strstr(e.message, "shard_update"),
              "shard_update 7 is refused: %s", e.message);
        mirror_strategy_destroy(d.strategy);
    }
}

/* An MLP with dropout for test_graphs, AdamW (SGD with momentum: sgd) with
   warmup and a cosine schedule (a learning rate and bias corrections of
   their own every step), every replica updating everything. */
static mirror_model *dropout_model(mirror_strategy *s, mirror_precision precision, int graphs, int sgd)
{
    mirror_model_desc d = model_desc(s, 1, 12, 12, 10, 3);
    d.optimizer = optimizer_of(sgd ? MIRROR_OPT_SGD : MIRROR_OPT_ADAMW, 0.0f);
    d.optimizer.schedule = MIRROR_LR_COSINE, d.optimizer.warmup = 3, d.optimizer.total_steps = 40;
    d.precision = precision, d.graphs = graphs, d.shard_update = MIRROR_SHARD_OFF;
    return build_model(&d, NULL, "flatten, dense 24, relu, dropout 0.3, dense 10");
}

/* 42 steps: 12 of batches of 10 over 95 samples (a partial batch of 5
   ends the epoch), 6 more with their metrics read at once, 12 of four
   micro-batches of 5 accumulated (the second and fourth alike but for
   their first row), then 12 that take turns: a batch of 5, and four
   micro-batches of 5 (whose first pass differs from that batch's in the
   loss's divisor alone). Each kind's passes come often enough to be
   replayed. Sums the losses read into *loss, then those the device kept
   (mirror_take_metrics). */
static int graph_steps(mirror_model *m, double *loss)
{
    size_t perm[95], k, j, per_epoch = mirror_num_batches(95, 10, 0);
    mirror_metrics kept;
    for (k = 0; k < 42; k++) {
        size_t b = k % per_epoch;
        mirror_batch g[4];
        mirror_metrics met;
        int rc, now = k >= 12 && k < 18;
        memset(g, 0, sizeof g);
        memset(&met, 0, sizeof met);
        if (b == 0) mirror_permutation(perm, 95, 11, k / per_epoch);
        g[0].x = data.x, g[0].labels = data.labels, g[0].rows = data.count, g[0].index = perm + b * 10;
        g[0].n = b * 10 + 10 <= 95 ? 10 : 95 - b * 10;
        if (k >= 30 && k % 2 == 0) {
            g[0].n = 5;
            rc = mirror_train_step(m, &g[0], NULL);
        } else if (k >= 18) {
            g[0].index = perm + b * 10 % 75;
            for (j = 0; j < 4; j++) g[j] = g[0], g[j].n = 5, g[j].index = g[0].index + 5 * j;
            rc = mirror_train_steps(m, g, 4, now ? &met : NULL);
        } else {
            rc = mirror_train_step(m, &g[0], now ? &met : NULL);
        }
        if (rc) return rc;
        if (now) *loss += met.loss_sum;
    }
    if (mirror_take_metrics(m, &kept)) return MIRROR_ERR_STATE;
    *loss += kept.loss_sum * 1e3 + (double)kept.correct;
    return MIRROR_OK;
}

/* desc.graphs: the training passes and updates recorded once per key and
   replayed (built with MIRROR_CPU_GRAPHS=1, CPU replicas emulate that: a
   replay queues the work again as the host held it at capture, so a value
   read from the host's state where it should come from the device shows)
   give the parameters, state and losses of the work queued as usual, bit
   for bit, with dropout, partial batches, accumulation, metrics read at
   once and a learning rate that changes every step, on 1 to 3 replicas
   in fp32 and fp16, with AdamW and SGD. A model with batchnorm runs
   without. */
/* The update's plan, chosen at build: each mode's steps (the table at
   mirror__update_plan). The sliced_ build shards CPU replicas' update as
   GPUs' (across devices) instead of on the host. */
static void test_plan(void)
{
    static const char *const names[] = {"one replica", "sharding off", "fp32 sharded", "fp16 sharded",
                                        "deterministic sharded"};
    mirror_strategy *s1 = new_strategy("cpu", 1), *s2 = new_strategy("cpu", 2);
    int host = MIRROR_CPU_SHARED_UPDATE;
    size_t i;
    for (i = 0; s1 && s2 && i < 5; i++) {
        const mirror__update_plan *p;
        mirror_model *m;
        int ok, sliced;
        shard_mode = i == 1 ? MIRROR_SHARD_OFF : MIRROR_SHARD_AUTO;
        m = model_with(i ? s2 : s1, 0, MIRROR_OPT_ADAMW, 10, i == 4 ? 3 : 0,
                       i == 3 ? MIRROR_PRECISION_FP16 : MIRROR_PRECISION_FP32);
        shard_mode = MIRROR_SHARD_AUTO;
        if (!m) {
            CHECK(0, "plan: build");
            continue;
        }
        p = &m->plan;
        sliced = p->check == mirror__slices_check && p->update == mirror__slices_update &&
                 p->gather == mirror__slices_gather;
        if (i < 2)
            ok = p->reduce == mirror__reduce_all && p->check == mirror__step_none &&
                 p->update == mirror__plain_update && p->gather == mirror__step_none;
        else if (!host)
            ok = sliced && p->reduce == (i == 4 ? mirror__reduce_chunks : mirror__reduce_slices);
        else
            ok = p->reduce == (i == 2 ? mirror__reduce_none : i == 3 ? mirror__reduce_all : mirror__reduce_chunks) &&
                 p->check == (i == 2 ? mirror__host_sum_check : mirror__host_check) &&
                 p->update == mirror__host_update_step && p->gather == mirror__step_none;
        CHECK(ok && p->each == (i == 4) && p->in_check == (host && i == 2),
              "plan, %s (%s): its reduce, check, update and gather steps, reduced %s, the check %s the sum", names[i],
              host ? "on the host" : "across devices", p->each ? "after every micro-batch" : "after the last",
              p->in_check ? "making" : "after");
        mirror_model_destroy(m);
    }
    mirror_strategy_destroy(s1), mirror_strategy_destroy(s2);
}

static void test_graphs(void)
{
    static const mirror_precision precisions[2] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16};
    size_t R, pi, r, k, replayed, with_metrics, accumulated, updates;
    for (R = 1; R <= 3; R++) {
        mirror_strategy *s = new_strategy("cpu", R);
        for (pi = 0; pi < 4; pi++) {
            mirror_model *on = dropout_model(s, precisions[pi % 2], 1, pi >= 2);
            mirror_model *off = dropout_model(s, precisions[pi % 2], 0, pi >= 2);
            double loss[2] = {0.0, 0.0};
            float *p[2], *st[2];
            int ok = on && off && graph_steps(on, &loss[0]) == MIRROR_OK && graph_steps(off, &loss[1]) == MIRROR_OK;
            CHECK(ok, "graphs, %zu replicas: 30 steps: %s", R, on ? mirror_model_error(on) : "no model");
            if (!ok) {
                mirror_model_destroy(on), mirror_model_destroy(off);
                continue;
            }
            for (k = 0; k < 2; k++) p[k] = params_of(k ? off : on, R - 1), st[k] = state_of(k ? off : on, R - 1);
            CHECK(!memcmp(p[0], p[1], mirror_num_parameters(on) * sizeof(float)) &&
                      !memcmp(st[0], st[1], mirror_optimizer_state_size(on) * sizeof(float)) && loss[0] == loss[1] &&
                      replicas_equal(on, R),
                  "graphs %s %s, %zu replicas: the parameters, state and losses of the work as queued, bit for bit",
                  mirror_precision_name(precisions[pi % 2]), pi >= 2 ? "SGD" : "AdamW", R);
            for (r = 0, replayed = with_metrics = accumulated = updates = 0; r < R; r++)
                for (k = 0; k < MIRROR__GRAPHS; k++) {
                    const mirror__graph *g = &on->rep[r].graph[k];
                    replayed += g->graph != NULL; /* recorded: every visit of its key since is a replay */
                    with_metrics += g->graph != NULL && g->metrics_now;
                    accumulated += g->graph != NULL && g->accumulate;
                    updates += g->graph != NULL && g->kind == MIRROR__UPDATE_GRAPH;
                }
            CHECK(on->pass.graphs == MIRROR_CPU_GRAPHS &&
                      (replayed > 0 && with_metrics > 0 && accumulated > 0 && updates == R) == MIRROR_CPU_GRAPHS,
                  "graphs %s, %zu replicas: in use %d; graphs %zu, with metrics %zu, accumulating %zu, updates %zu "
                  "(emulated: %d)", mirror_precision_name(precisions[pi % 2]), R, on->pass.graphs, replayed, with_metrics,
                  accumulated, updates, MIRROR_CPU_GRAPHS);
            for (k = 0; k < 2; k++) free(p[k]), free(st[k]);
            mirror_model_destroy(on), mirror_model_destroy(off);
        }
        mirror_strategy_destroy(s);
    }
    {
        mirror_strategy *s = new_strategy("cpu", 2);
        mirror_model_desc d;
        mirror_model *m = NULL;
        mirror_error e;
        memset(&d, 0, sizeof d);
        d.strategy = s, d.channels = 4, d.max_batch = 8, d.graphs = 2;
        CHECK(mirror_model_create(&d, &m, &e) == MIRROR_ERR_ARGUMENT && strstr(e.message, "graphs"),
              "graphs 2 is refused: %s", e.message);
        d.graphs = 1;
        mirror_model_create(&d, &m, NULL);
        mirror_dense(m, 4), mirror_batchnorm(m, MIRROR_BN_SYNC), mirror_dense(m, 3);
        CHECK(m && mirror_model_build(m) == MIRROR_OK && !m->pass.graphs, "graphs: a model with batchnorm runs without");
        CHECK(mirror_model_query_desc(m).graphs == 0, "and its desc says they are not in use");
        mirror_model_destroy(m);
        /* where the replicas record none: off, and the desc says so */
        m = NULL;
        mirror_model_create(&d, &m, NULL);
        mirror_dense(m, 4), mirror_relu(m), mirror_dense(m, 3);
        CHECK(m && mirror_model_build(m) == MIRROR_OK && mirror_model_query_desc(m).graphs == m->pass.graphs &&
                  m->pass.graphs == MIRROR_CPU_GRAPHS,
              "graphs on CPU replicas: in use %d, the desc says %d (emulated: %d)", m ? m->pass.graphs : -1,
              mirror_model_query_desc(m).graphs, MIRROR_CPU_GRAPHS);
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
}

/* mirror_check_replicas: equal replicas pass, in fit too; one parameter of
   replica 2 changed by hand is found and named. One process here; tests/mpi
   checks it across processes. */
/* The hash that replicas and processes compare tells every byte: one
   changed anywhere in 1 to 100 bytes (each length's tail after the
   32-byte blocks too) changes it. */
static void test_hash(void)
{
    unsigned char b[100];
    size_t n, k, missed = 0, first_n = 0, first_k = 0;
    uint64_t h;
    for (k = 0; k < sizeof b; k++) b[k] = (unsigned char)(k * 37 + 11);
    for (n = 1; n <= sizeof b; n++) {
        h = mirror__hash(7, b, n);
        for (k = 0; k < n; k++) {
            b[k] ^= 0x40;
            if (mirror__hash(7, b, n) == h && !missed++) first_n = n, first_k = k;
            b[k] ^= 0x40;
        }
    }
    CHECK(missed == 0, "a changed byte changes the hash (%zu missed, the first: byte %zu of %zu)", missed, first_k,
          first_n);
}

static void test_check_replicas(void)
{
    mirror_strategy *s = new_strategy("cpu", 3);
    mirror_model *m = model(s, 0, MIRROR_OPT_ADAM, 24);
    mirror_process_info info = mirror_strategy_process(s);
    mirror_fit_desc fd;
    if (!m) return;
    CHECK(info.rank == 0 && info.processes == 1 && info.local_replicas == 3 && info.first_replica == 0,
          "one process: rank 0 of 1, its 3 replicas from replica 0");
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 1, fd.batch = 24, fd.progress = MIRROR_PROGRESS_NONE;
    fd.check_replicas_every = 2;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "fit checking the replicas every 2 steps: %s", mirror_model_error(m));
    m->rep[2].params[3] += 1.0f;
    CHECK(mirror_check_replicas(m) == MIRROR_ERR_REPLICAS &&
              strstr(mirror_model_error(m), "replica 2 (rank 0, its replica 2) holds other parameters"),
          "a changed replica is named: %s", mirror_model_error(m));
    CHECK(mirror_agree(s, MIRROR_ERR_IO, NULL) == MIRROR_ERR_IO && mirror_agree(s, MIRROR_OK, NULL) == MIRROR_OK,
          "mirror_agree in one process: the result as it is");
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* The bucketed all-reduce, on a CPU replica through a backend that records
   what reduce_bucket is handed (the CPU's own sums need no buckets): every
   bucket once a step, the top first, together the whole arena, each handed
   over only once its gradient is final (a copy taken then equals the
   gradient at the end of the step's backward), and only in the step's last
   micro-batch. A batchnorm layer makes backward pause on the way. */
static struct {
    mirror_model *m;
    size_t calls, done, lo[MIRROR__MAX_LAYERS], n[MIRROR__MAX_LAYERS];
    int format[MIRROR__MAX_LAYERS];
    void *copy[MIRROR__MAX_LAYERS];
} rec;

static void record_bucket(void *dev, void *buf, size_t n, int format)
{
    mirror__replica *r = &rec.m->rep[0];
    size_t k = rec.calls++, size = format ? sizeof(uint16_t) : sizeof(float);
    (void)dev;
    if (k >= MIRROR__MAX_LAYERS) return;
    rec.lo[k] = format ? (size_t)((uint16_t *)buf - r->grad16) : (size_t)((float *)buf - r->grads);
    rec.n[k] = n, rec.format[k] = format;
    if ((rec.copy[k] = malloc(n * size + 1)) != NULL) memcpy(rec.copy[k], buf, n * size);
}

static void record_done(void *dev)
{
    (void)dev;
    rec.done++;
}

static void forget_buckets(void)
{
    size_t k;
    for (k = 0; k < MIRROR__MAX_LAYERS; k++) free(rec.copy[k]), rec.copy[k] = NULL;
    rec.calls = rec.done = 0;
}

static void test_buckets(void)
{
    static const mirror_precision precisions[2] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16};
    mirror__backend be = mirror__cpu_backend;
    size_t p, k, i, perm[95];
    be.reduce_bucket = record_bucket, be.buckets_done = record_done;
    for (p = 0; p < 2; p++) {
        mirror_strategy *s = new_strategy("cpu", 1);
        mirror_model_desc d;
        mirror_model *m = NULL;
        mirror_batch micro[2];
        size_t weighted = 0, wrong = 0, late = 0;
        memset(&d, 0, sizeof d);
        d.strategy = s, d.precision = precisions[p], d.channels = 1, d.height = 12, d.width = 12, d.max_batch = 10;
        d.optimizer.kind = MIRROR_OPT_ADAM;
        if (!s || mirror_model_create(&d, &m, NULL)) {
            CHECK(0, "buckets: the model");
            mirror_strategy_destroy(s);
            continue;
        }
        mirror_conv2d(m, 4, 3, 1, 1), mirror_batchnorm(m, MIRROR_BN_SYNC), mirror_relu(m), mirror_maxpool2d(m, 2, 2);
        mirror_flatten(m), mirror_dense(m, 16), mirror_relu(m), mirror_dense(m, 10);
        CHECK(mirror_model_build(m) == MIRROR_OK, "buckets: build: %s", mirror_model_error(m));
        CHECK(!m->buckets.on && m->buckets.n == 1 && m->buckets.lo[0] == 0 && m->buckets.hi[0] == m->nslots,
              "a CPU strategy sums after backward; a model under 25 MB is one bucket");
        for (i = 0; i < m->nlayers; i++) weighted += m->layers[i].n_w > 0;
        mirror__plan_buckets(m, 1);
        CHECK(m->buckets.n == weighted && m->buckets.hi[0] == m->nslots && m->buckets.lo[m->buckets.n - 1] == 0,
              "buckets of at least 1 byte: one a weighted layer (%zu of %zu), from the arena's top to 0", m->buckets.n,
              weighted);
        m->be = &be, m->buckets.on = 1, rec.m = m;
        CHECK(step(m, 0, 10, perm) == MIRROR_OK && rec.calls == m->buckets.n && rec.done == 1,
              "%s: one step hands over %zu buckets (want %zu), then waits for them once (%zu)",
              mirror_precision_name(precisions[p]), rec.calls, m->buckets.n, rec.done);
        for (k = 0; k < rec.calls && k < m->buckets.n; k++) {
            const void *now = m->format ? (const void *)(m->rep[0].grad16 + rec.lo[k]) : m->rep[0].grads + rec.lo[k];
            wrong += rec.lo[k] != m->buckets.lo[k] || rec.n[k] != m->buckets.hi[k] - m->buckets.lo[k] ||
                     rec.format[k] != m->format || (k && m->buckets.hi[k] != m->buckets.lo[k - 1]);
            late += !rec.copy[k] || memcmp(rec.copy[k], now, rec.n[k] * (m->format ? 2 : 4)) != 0;
        }
        CHECK(wrong == 0 && late == 0,
              "%s: the buckets top first, back to back, in the model's format (%zu wrong); each final when handed "
              "over (%zu changed after)", mirror_precision_name(precisions[p]), wrong, late);
        forget_buckets();
        memset(micro, 0, sizeof micro);
        for (i = 0; i < 2; i++)
            micro[i].x = data.x, micro[i].labels = data.labels, micro[i].rows = data.count, micro[i].index = perm + 5 * i,
            micro[i].n = 5;
        CHECK(mirror_train_steps(m, micro, 2, NULL) == MIRROR_OK && rec.calls == m->buckets.n && rec.done == 1,
              "%s: two micro-batches: the buckets once, in the last (%zu handed over)",
              mirror_precision_name(precisions[p]), rec.calls);
        forget_buckets();
        m->be = &mirror__cpu_backend;
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
}

/* The input goes up as gathered, in fp32, and in mixed precision the
   device narrows it into the 16-bit input the layers read, once the slot's
   uploads are the compute's (the host gathers, the GPU converts): on a CPU
   replica through a backend that logs the input's upload and the narrows
   that read an input slot. */
static struct {
    mirror_model *m;
    size_t bytes, narrowed, staged, staged_before;
    const float *host;
    const void *into;
    int format;
} up;

static int input_slot(const void *p)
{
    return p == up.m->rep[0].in_x[0] || p == up.m->rep[0].in_x[1];
}

static void log_upload(void *dev, void *dst, const void *host, size_t bytes)
{
    if (input_slot(dst)) up.bytes = bytes, up.host = (const float *)host;
    mirror__cpu_backend.upload_staged(dev, dst, host, bytes);
}

static void log_staged(void *dev, int slot)
{
    up.staged++;
    mirror__cpu_backend.staged(dev, slot);
}

static void log_narrow(void *dev, uint16_t *dst, const float *src, size_t n, int format)
{
    if (input_slot(src)) up.narrowed += n, up.into = dst, up.format = format, up.staged_before = up.staged;
    mirror__cpu_backend.narrow(dev, dst, src, n, format);
}

static void test_input_upload(void)
{
    static const mirror_precision precisions[3] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16,
                                                   MIRROR_PRECISION_BF16};
    mirror__backend be = mirror__cpu_backend;
    size_t p, perm[95];
    be.upload_staged = log_upload, be.staged = log_staged, be.narrow = log_narrow;
    for (p = 0; p < 3; p++) {
        const char *name = mirror_precision_name(precisions[p]);
        mirror_strategy *s = new_strategy("cpu", 1);
        mirror_model *m = s ? model_with(s, 1, MIRROR_OPT_ADAM, 10, 0, precisions[p]) : NULL;
        size_t i, j, in, wrong_rows = 0, wrong_narrow = 0;
        if (!m) {
            CHECK(0, "input upload, %s: the model", name);
            mirror_strategy_destroy(s);
            continue;
        }
        in = m->sizes.in;
        memset(&up, 0, sizeof up);
        up.m = m, m->be = &be;
        CHECK(step(m, 0, 10, perm) == MIRROR_OK, "input upload, %s: a step", name);
        CHECK(up.bytes == 10 * in * sizeof(float), "%s: the input goes up in fp32 (%zu bytes, want %zu)", name,
              up.bytes, 10 * in * sizeof(float));
        for (i = 0; up.host && i < 10; i++)
            wrong_rows += memcmp(up.host + i * in, data.x + perm[i] * in, in * sizeof(float)) != 0;
        CHECK(up.host && wrong_rows == 0, "%s: the shard's rows as gathered, in the batch's order (%zu wrong)", name,
              wrong_rows);
        if (!m->format) {
            CHECK(up.narrowed == 0 && m->rep[0].input == m->rep[0].in_x[m->rep[0].slot],
                  "fp32: nothing narrowed; the layers read the slot itself");
        } else {
            const uint16_t *x16 = (const uint16_t *)m->rep[0].input;
            for (i = 0; i < 10; i++)
                for (j = 0; j < in; j++)
                    wrong_narrow += x16[i * in + j] != mirror_hd_narrow(data.x[perm[i] * in + j], m->format);
            CHECK(up.narrowed == 10 * in && up.into == m->rep[0].input && up.format == m->format &&
                      up.staged_before == up.staged && up.staged > 0,
                  "%s: the device narrows the slot into the layers' input (%zu values, want %zu), after the slot is "
                  "handed to the compute", name, up.narrowed, 10 * in);
            CHECK(wrong_narrow == 0, "%s: the layers' input is the rows narrowed (%zu values differ)", name,
                  wrong_narrow);
        }
        m->be = &mirror__cpu_backend;
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
}

/* A relu right after a dense layer rides on its GEMM (the epilogue) and
   writes over its output: the same bits as the two layers apart (a flatten
   between them, a view, keeps them apart), with one activation buffer
   fewer; in fp32 and in mixed precision, with dropout (its masks hashed
   from the layer's index, so both models have a dropout at the same
   place), and in a prediction. */
static void test_fused_relu(void)
{
    static const mirror_precision precisions[] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16, MIRROR_PRECISION_BF16};
    mirror_strategy *s = new_strategy("cpu", 2);
    size_t pi, k, perm[95];
    for (pi = 0; pi < 3; pi++) {
        mirror_model *m[2] = {NULL, NULL};
        mirror_memory_report rep[2];
        float *p[2], out[2][3 * 10];
        int v, ok = 1;
        for (v = 0; v < 2; v++) {
            mirror_model_desc d;
            memset(&d, 0, sizeof d);
            d.strategy = s, d.precision = precisions[pi], d.seed = 5;
            d.init = MIRROR_INIT_HE; /* the flatten apart would make the default Glorot's */
            d.channels = 1, d.height = 12, d.width = 12, d.max_batch = 10;
            d.optimizer.kind = MIRROR_OPT_ADAMW, d.optimizer.lr = 0.01f;
            ok &= mirror_model_create(&d, &m[v], NULL) == MIRROR_OK;
            if (!ok) break;
            mirror_flatten(m[v]), mirror_dense(m[v], 16);
            if (v) mirror_flatten(m[v]); /* apart */
            mirror_relu(m[v]);
            if (!v) mirror_flatten(m[v]); /* the dropout at the same index */
            mirror_dropout(m[v], 0.25f), mirror_dense(m[v], 10);
            ok &= mirror_model_build(m[v]) == MIRROR_OK && mirror_memory_report_get(m[v], 0, &rep[v]) == MIRROR_OK;
            for (k = 0; ok && k < 12; k++) ok &= step(m[v], k, 10, perm) == MIRROR_OK;
            ok &= ok && mirror_predict(m[v], data.x, 3, out[v]) == MIRROR_OK;
        }
        CHECK(ok, "fused relu, %s: models build and train", mirror_precision_name(precisions[pi]));
        if (ok) {
            size_t n = mirror_num_parameters(m[0]);
            p[0] = params_of(m[0], 0), p[1] = params_of(m[1], 1);
            CHECK(m[0]->layers[1].fused && !m[1]->layers[1].fused && n == mirror_num_parameters(m[1]) &&
                      !memcmp(p[0], p[1], n * sizeof(float)) && !memcmp(out[0], out[1], sizeof out[0]) &&
                      rep[0].activations < rep[1].activations,
                  "fused relu, %s: dense-relu as one GEMM gives the bits of the two apart (parameters after 12 steps, "
                  "predictions) with fewer activation bytes (%zu, %zu apart)",
                  mirror_precision_name(precisions[pi]), rep[0].activations, rep[1].activations);
            free(p[0]), free(p[1]);
        }
        mirror_model_destroy(m[0]), mirror_model_destroy(m[1]);
    }
    mirror_strategy_destroy(s);
}

/* Replica threads that wait longer than their spin budget sleep: a
   pause of 100 ms between steps costs the process almost no CPU time
   (a helper that went on spinning would take nearly all of it), and the
   step after the pause runs as usual. */
static void test_idle_threads(void)
{
    mirror_strategy *s = new_strategy("cpu", 2);
    mirror_model *m = model(s, 0, MIRROR_OPT_ADAM, 10);
    struct timespec nap = {0, 100000000}, t0, t1;
    size_t perm[95];
    double used;
    if (!m) return;
    CHECK(step(m, 0, 10, perm) == MIRROR_OK, "a step before the pause: %s", mirror_model_error(m));
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    nanosleep(&nap, NULL);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    used = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK(used < 0.02, "2 replicas idle for 100 ms take %.1f ms of CPU (they must sleep)", used * 1e3);
    CHECK(step(m, 1, 10, perm) == MIRROR_OK && mirror_check_replicas(m) == MIRROR_OK,
          "a step after the pause: %s", mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* The keys deterministic mode's GEMMs choose their algorithms by (a GPU's
   cuBLASLt plans): a backend laid out as the GPU's (arenas from 256-byte
   boundaries, parameters at 64 floats, the GEMMs a chunk at a time)
   records each dense layer's gemm_bias with the alignments of A, B and C
   that mirror__gemm_key_align gives under the model's gemm_align. */
typedef struct gemm_key {
    size_t layer, row, rows; /* the global batch's rows [row, row + rows) */
    uint32_t key[3], own[3];
} gemm_key;

static struct {
    mirror_model *m;
    void *dev[8];
    size_t cap[8], ndev, n, wrong, got[4], lost[4]; /* got, lost: each replica's own (its thread's) */
    gemm_key k[128], mine[4][32];
} keys;

static void *keys_alloc(void *dev, size_t bytes)
{
    void *p = NULL;
    (void)dev;
    if (posix_memalign(&p, 256, bytes ? bytes : 1)) return NULL;
    return memset(p, 0, bytes ? bytes : 1);
}

static void keys_release(void *dev, void *p) { (void)dev, free(p); }

static void keys_align(void *dev, size_t bytes)
{
    if (keys.ndev < 8) keys.dev[keys.ndev] = dev, keys.cap[keys.ndev++] = bytes;
}

static void keys_gemm_bias(void *dev, int ta, int tb, size_t m, size_t n, size_t k, const void *a, size_t lda,
                           const void *b, size_t ldb, const void *bias, int per_row, int relu, void *c, size_t ldc)
{
    mirror_model *M = keys.m;
    size_t r, i, d;
    mirror__cpu_backend.gemm_bias(dev, ta, tb, m, n, k, a, lda, b, ldb, bias, per_row, relu, c, ldc);
    if (!M || per_row || !bias) return; /* a convolution's: no cuBLASLt */
    for (d = 0; d < keys.ndev && keys.dev[d] != dev; d++) continue;
    for (r = 0; r < M->s->replicas && M->rep[r].dev != dev; r++) continue;
    if (r >= 4) return;
    for (i = 0; d < keys.ndev && i < M->nlayers; i++) {
        const mirror__layer *l = &M->layers[i];
        const mirror__replica *p = &M->rep[r];
        gemm_key *g = &keys.mine[r][keys.got[r]];
        if (l->kind != MIRROR__DENSE || b != mirror__el(M, p->weights, l->w_off)) continue;
        if (keys.got[r] == sizeof keys.mine[r] / sizeof *keys.mine[r]) break;
        g->layer = i, g->rows = m;
        g->row = p->begin +
                 (size_t)((const char *)a - (const char *)mirror__layer_input(M, p, i)) / (l->c * mirror__esize(M));
        g->key[0] = mirror__gemm_key_align(a, keys.cap[d]), g->own[0] = mirror__align_of(a);
        g->key[1] = mirror__gemm_key_align(b, keys.cap[d]), g->own[1] = mirror__align_of(b);
        g->key[2] = mirror__gemm_key_align(c, keys.cap[d]), g->own[2] = mirror__align_of(c);
        keys.got[r]++;
        return;
    }
    keys.lost[r]++;
}

static int key_order(const void *x, const void *y)
{
    const gemm_key *a = (const gemm_key *)x, *b = (const gemm_key *)y;
    return a->layer != b->layer ? (a->layer < b->layer ? -1 : 1) : a->row < b->row ? -1 : a->row > b->row;
}

/* In deterministic mode every dense GEMM of a chunk is keyed alike on 1,
   2, 3 and 4 replicas: a step of 53 samples (the last chunk short) in
   chunks of 16 and of 5, through layers of 144, 16 and 10 values, in fp32
   and fp16. The chunks' own alignments do differ between the counts (so
   that the keys' sameness means something); the keys never exceed them. */
static void test_gemm_keys(void)
{
    static const mirror_precision precisions[2] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16};
    static const size_t chunks[2] = {16, 5};
    mirror__backend be = mirror__cpu_backend;
    gemm_key one[128];
    size_t p, c, R, i, n1 = 0, moved = 0, perm[95];
    be.alloc = keys_alloc, be.release = keys_release, be.gemm_bias = keys_gemm_bias, be.gemm_align = keys_align;
    be.param_align = 64, be.gemm_rows_free = 0;
    for (p = 0; p < 2; p++)
        for (c = 0; c < 2; c++)
            for (R = 1; R <= 4; R++) {
                mirror_strategy *s = new_strategy("cpu", R);
                mirror_model *m = NULL;
                const char *what = mirror_precision_name(precisions[p]);
                size_t differ = 0, over = 0, caps = 0, stray = 0, q;
                memset(&keys, 0, sizeof keys);
                if (s) s->backend = &be;
                if (!s || !(m = model_with(s, 0, MIRROR_OPT_ADAM, 53, chunks[c], precisions[p]))) {
                    CHECK(0, "gemm keys: the model");
                    mirror_strategy_destroy(s);
                    continue;
                }
                keys.m = m;
                CHECK(step(m, 0, 53, perm) == MIRROR_OK, "gemm keys: the step: %s", mirror_model_error(m));
                for (i = 0; i < R; i++) {
                    memcpy(keys.k + keys.n, keys.mine[i], keys.got[i] * sizeof *keys.k);
                    keys.n += keys.got[i], keys.wrong += keys.lost[i];
                }
                qsort(keys.k, keys.n, sizeof *keys.k, key_order);
                for (i = 0; i < keys.ndev; i++) caps += keys.cap[i] != keys.cap[0] || !keys.cap[0];
                for (i = 0; i < R; i++) /* a weight gradient GEMM's C: cuBLAS picks by its alignment too */
                    for (q = 0; q < m->rep[i].nchunks; q++)
                        stray += (uintptr_t)mirror__chunk_grads(m, &m->rep[i], q) % 256 != 0;
                CHECK(stray == 0, "gemm keys, %s, chunks of %zu, %zu replicas: every chunk's gradient arena at 256 "
                      "bytes, as the first (%zu not)", what, chunks[c], R, stray);
                for (i = 0; i < keys.n; i++)
                    over += keys.k[i].key[0] > keys.k[i].own[0] || keys.k[i].key[1] > keys.k[i].own[1] ||
                            keys.k[i].key[2] > keys.k[i].own[2];
                if (R == 1) memcpy(one, keys.k, keys.n * sizeof *keys.k), n1 = keys.n;
                for (i = 0; R > 1 && i < keys.n && keys.n == n1; i++) {
                    differ += one[i].layer != keys.k[i].layer || one[i].row != keys.k[i].row ||
                              one[i].rows != keys.k[i].rows || memcmp(one[i].key, keys.k[i].key, sizeof one[i].key);
                    moved += memcmp(one[i].own, keys.k[i].own, sizeof one[i].own) != 0;
                }
                CHECK(keys.ndev == R && caps == 0 && keys.wrong == 0 && keys.n == 2 * ((53 + chunks[c] - 1) / chunks[c]),
                      "gemm keys, %s, chunks of %zu, %zu replicas: each replica told one alignment (%zu of %zu, %zu "
                      "apart), each chunk's dense GEMMs recorded (%zu, %zu unplaced)", what, chunks[c], R, keys.ndev,
                      R, caps, keys.n, keys.wrong);
                CHECK(keys.n == n1 && differ == 0 && over == 0,
                      "gemm keys, %s, chunks of %zu: %zu replicas key %zu of %zu GEMMs otherwise than one replica "
                      "(%zu keyed above their operands' alignment)", what, chunks[c], R, differ, keys.n, over);
                keys.m = NULL;
                mirror_model_destroy(m);
                mirror_strategy_destroy(s);
            }
    CHECK(moved > 0, "gemm keys: the chunks' own alignments differ between replica counts (%zu GEMMs)", moved);
}

int main(void)
{
    if (!make_root("replicas")) return 1;
    small_digits(&data, 95, 3, 12, 2);
    test_deterministic(1, MIRROR_OPT_SGD, MIRROR_PRECISION_FP32, 3);
    test_deterministic(1, MIRROR_OPT_ADAMW, MIRROR_PRECISION_FP32, 3);
    test_deterministic(0, MIRROR_OPT_ADAMW, MIRROR_PRECISION_FP32, 3);
    test_deterministic(0, MIRROR_OPT_SGD, MIRROR_PRECISION_FP32, 16);
    test_deterministic(1, MIRROR_OPT_ADAMW, MIRROR_PRECISION_BF16, 3);
    test_deterministic(0, MIRROR_OPT_SGD, MIRROR_PRECISION_FP16, 3);
    test_deterministic_more();
    test_model_shard();
    test_hash();
    test_check_replicas();
    test_all_reduce();
    test_equivalence(1, MIRROR_OPT_SGD);
    test_equivalence(1, MIRROR_OPT_ADAMW);
    test_equivalence(0, MIRROR_OPT_ADAMW);
    test_determinism();
    test_sharded_update();
    test_shard_modes();
    test_plan();
    test_graphs();
    test_small_batches_and_predict();
    test_pool();
    test_deferred_metrics();
    test_replica_values();
    test_replica_values_api();
    test_buckets();
    test_input_upload();
    test_fused_relu();
    test_gemm_keys();
    test_idle_threads();
    mirror_dataset_free(&data);
    remove_tree(root);
    return check_done("test_replicas");
}
