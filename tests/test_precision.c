/* test_precision.c - mixed precision through whole steps on CPU replicas:
   the desc's defaults and its bad values; skip semantics (an Inf or NaN in
   one replica's shard makes every replica skip, and a skipped step changes
   nothing but the scaler's state); real fp16 overflow of a large loss
   scale and the dynamic scale finding its level; the error after too many
   skipped steps in a row; the report of the first non-finite layer and
   replica; exact resume through a checkpoint; and fp16 and bf16 training
   on the synthetic digits within one point of fp32. The conversions and
   the scaler's state machine alone are in test_half.c. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "files.h"

#include <string.h>

enum { N_IN = 64, BATCH = 12, SNAP = 8192 }; /* SNAP: floats of parameters and AdamW state */

/* 64 inputs, dense 32, relu, dense 10; Adam or SGD with momentum. */
static mirror_model *small_model(mirror_strategy *s, mirror_precision p, const mirror_loss_scale_desc *ls, int adam)
{
    mirror_model_desc md = model_desc(s, N_IN, 0, 0, BATCH, 5);
    md.precision = p;
    if (ls) md.loss_scale = *ls;
    md.optimizer = optimizer_of(adam ? MIRROR_OPT_ADAMW : MIRROR_OPT_SGD, adam ? 0.01f : 0.05f);
    return checked_model(&md, "dense 32, relu, dense 10");
}

/* Deterministic inputs in [-1, 1] and labels for `steps` batches. */
static void make_data(float *x, int32_t *y, size_t rows, uint64_t seed)
{
    size_t i;
    for (i = 0; i < rows * N_IN; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((seed >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (i = 0; i < rows; i++) y[i] = (int32_t)((i * 7 + 3) % 10);
}

static int step(mirror_model *m, const float *x, const int32_t *y)
{
    mirror_batch b;
    mirror_metrics out;
    memset(&b, 0, sizeof b);
    b.x = x;
    b.labels = y;
    b.n = BATCH;
    return mirror_train_step(m, &b, &out);
}

/* Replica r's parameters and optimizer state, concatenated into buf. */
static size_t snapshot(mirror_model *m, size_t r, float *buf)
{
    size_t np = mirror_num_parameters(m), ns = mirror_optimizer_state_size(m);
    mirror_get_parameters(m, r, buf, np);
    mirror_get_optimizer_state(m, r, buf + np, ns);
    return np + ns;
}

static int same_replicas(mirror_model *m, size_t replicas, float *a, float *b)
{
    size_t r, n = snapshot(m, 0, a);
    int same = 1;
    for (r = 1; r < replicas; r++) {
        snapshot(m, r, b);
        same &= memcmp(a, b, n * sizeof(float)) == 0;
    }
    return same;
}

static void test_desc(mirror_strategy *s)
{
    mirror_model_desc md, q;
    mirror_model *m = NULL;
    mirror_error err = {0, ""};
    mirror_loss_scale_state st;
    struct {
        mirror_precision p;
        mirror_loss_scale_desc ls;
        const char *what;
    } bad[] = {
        {(mirror_precision)7, {MIRROR_SCALE_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 0}, "an unknown precision"},
        {MIRROR_PRECISION_FP32, {MIRROR_SCALE_DYNAMIC, 0, 0, 0, 0, 0, 0, 0, 0}, "a scaler in fp32"},
        {MIRROR_PRECISION_FP16, {(mirror_loss_scaling)9, 0, 0, 0, 0, 0, 0, 0, 0}, "an unknown scaling"},
        {MIRROR_PRECISION_FP16, {MIRROR_SCALE_DYNAMIC, 0, 1.0f, 0, 0, 0, 0, 0, 0}, "growth 1"},
        {MIRROR_PRECISION_FP16, {MIRROR_SCALE_DYNAMIC, 0, 0, 1.0f, 0, 0, 0, 0, 0}, "backoff 1"},
        {MIRROR_PRECISION_FP16, {MIRROR_SCALE_DYNAMIC, 0, 0, -0.5f, 0, 0, 0, 0, 0}, "backoff -0.5"},
        {MIRROR_PRECISION_FP16, {MIRROR_SCALE_DYNAMIC, 0, 0, 0, 0, 8.0f, 4.0f, 0, 0}, "min above max"},
        {MIRROR_PRECISION_FP16, {MIRROR_SCALE_DYNAMIC, 1e9f, 0, 0, 0, 0, 0, 0, 0}, "init above max"},
        {MIRROR_PRECISION_FP16, {MIRROR_SCALE_DYNAMIC, 0.5f, 0, 0, 0, 0, 0, 0, 0}, "init below min"},
        {MIRROR_PRECISION_FP16, {MIRROR_SCALE_STATIC, -3.0f, 0, 0, 0, 0, 0, 0, 0}, "a negative static scale"},
        {MIRROR_PRECISION_FP16, {MIRROR_SCALE_STATIC, 1e-30f, 0, 0, 0, 0, 0, 0, 0}, "a static scale below min"},
        {MIRROR_PRECISION_BF16, {MIRROR_SCALE_NONE, 4.0f, 0, 0, 0, 0, 0, 0, 0}, "none with a scale"},
        {MIRROR_PRECISION_FP16, {MIRROR_SCALE_DYNAMIC, 0, 0, 0, 0, NAN, 0, 0, 0}, "a NaN minimum"},
    };
    size_t i;
    memset(&md, 0, sizeof md);
    md.strategy = s;
    md.channels = N_IN;
    for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        md.precision = bad[i].p;
        md.loss_scale = bad[i].ls;
        err.message[0] = '\0';
        CHECK(mirror_model_create(&md, &m, &err) == MIRROR_ERR_ARGUMENT && !m && err.message[0],
              "%s is refused with a message (%s)", bad[i].what, err.message);
    }

    memset(&md.loss_scale, 0, sizeof md.loss_scale);
    md.precision = MIRROR_PRECISION_FP16;
    CHECK(mirror_model_create(&md, &m, &err) == MIRROR_OK, "fp16 model: %s", err.message);
    q = mirror_model_query_desc(m);
    CHECK(q.loss_scale.kind == MIRROR_SCALE_DYNAMIC && q.loss_scale.init_scale == 65536.0f &&
              q.loss_scale.growth_factor == 2.0f && q.loss_scale.backoff_factor == 0.5f &&
              q.loss_scale.growth_interval == 2000 && q.loss_scale.min_scale == 1.0f &&
              q.loss_scale.max_scale == 16777216.0f && q.loss_scale.max_consecutive_skips == 50,
          "fp16 defaults: dynamic, 65536, x2 after 2000, x0.5, [1, 2^24], 50 skips");
    CHECK(mirror_loss_scale_get(m, &st) == MIRROR_ERR_STATE, "the scaler before build: a state error");
    mirror_dense(m, 10);
    CHECK(mirror_model_build(m) == MIRROR_OK, "build: %s", mirror_model_error(m));
    CHECK(mirror_loss_scale_get(m, &st) == MIRROR_OK && st.scale == 65536.0f && st.applied == 0 && st.skipped == 0,
          "a fresh scaler: scale %g, %llu applied", (double)st.scale, (unsigned long long)st.applied);
    CHECK(mirror_loss_scale_get(m, NULL) == MIRROR_ERR_ARGUMENT, "NULL out");
    {
        mirror_memory_report rep;
        CHECK(mirror_memory_report_get(m, 0, &rep) == MIRROR_OK && rep.parameters == 650 * 6 &&
                  rep.gradients == 650 * 6,
              "memory: masters + the 16-bit copy the layers read (%zu), gradients fp32 + 16-bit (%zu)", rep.parameters,
              rep.gradients);
    }
    mirror_model_destroy(m);

    md.precision = MIRROR_PRECISION_BF16;
    CHECK(mirror_model_create(&md, &m, &err) == MIRROR_OK, "bf16 model: %s", err.message);
    q = mirror_model_query_desc(m);
    CHECK(q.loss_scale.kind == MIRROR_SCALE_NONE && q.loss_scale.init_scale == 1.0f, "bf16 defaults: no scaling");
    mirror_model_destroy(m);

    md.precision = MIRROR_PRECISION_FP32;
    CHECK(mirror_model_create(&md, &m, &err) == MIRROR_OK, "fp32 model: %s", err.message);
    mirror_dense(m, 10);
    mirror_model_build(m);
    CHECK(mirror_loss_scale_get(m, &st) == MIRROR_ERR_STATE, "an fp32 model has no scaler");
    mirror_model_destroy(m);
    CHECK(!strcmp(mirror_precision_name(MIRROR_PRECISION_BF16), "bf16") &&
              !strcmp(mirror_loss_scaling_name(MIRROR_SCALE_STATIC), "static"),
          "names");
}

/* Batch `bad` (of `total`) carries `poison` in sample 5, which is replica
   1's shard on 3 replicas (shards 0-3, 4-7, 8-11). The run must skip that
   step on every replica and change nothing else; with a static scale the
   rest of the run then equals a control run that never saw that batch. */
static void test_skip(mirror_strategy *s3, mirror_precision p, float poison, int adam)
{
    enum { STEPS = 6, BAD = 3 };
    mirror_loss_scale_desc stat = {MIRROR_SCALE_STATIC, 1024.0f, 0, 0, 0, 0, 0, 0, 0};
    mirror_loss_scale_desc dyn = {MIRROR_SCALE_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 0};
    mirror_model *run, *control, *dynamic;
    static float x[STEPS][BATCH * N_IN], a[SNAP], b[SNAP], before[SNAP];
    static int32_t y[STEPS][BATCH];
    mirror_loss_scale_state st, st0;
    size_t i, n;
    const char *name = mirror_precision_name(p);
    for (i = 0; i < STEPS; i++) make_data(x[i], y[i], BATCH, 100 + i);
    x[BAD][5 * N_IN + 17] = poison;

    if (p == MIRROR_PRECISION_BF16) stat.init_scale = 1.0f, stat.kind = MIRROR_SCALE_NONE;
    run = small_model(s3, p, &stat, adam);
    control = small_model(s3, p, &stat, adam);
    dynamic = small_model(s3, p, &dyn, adam);
    if (!run || !control || !dynamic) goto out;
    for (i = 0; i < STEPS; i++) {
        if (i == BAD) {
            n = snapshot(run, 0, before);
            mirror_loss_scale_get(dynamic, &st0);
            CHECK(step(run, x[i], y[i]) == MIRROR_OK, "%s: a skipped step is not an error", name);
            CHECK(step(dynamic, x[i], y[i]) == MIRROR_OK, "%s: dynamic", name);
            snapshot(run, 0, a);
            CHECK(memcmp(a, before, n * sizeof(float)) == 0,
                  "%s: the skipped step left parameters and optimizer state bitwise unchanged", name);
            CHECK(same_replicas(run, 3, a, b), "%s: every replica skipped alike", name);
            CHECK(mirror_loss_scale_get(run, &st) == MIRROR_OK && st.skipped == 1 && st.last_skipped &&
                      st.consecutive_skips == 1 && st.applied == BAD && mirror_optimizer_steps(run) == BAD,
                  "%s: the scaler counted the skip (skipped %llu, applied %llu)", name,
                  (unsigned long long)st.skipped, (unsigned long long)st.applied);
            CHECK(st.scale == stat.init_scale, "%s: a static scale stays %g (%g)", name, (double)stat.init_scale,
                  (double)st.scale);
            mirror_loss_scale_get(dynamic, &st);
            CHECK(st.skipped == 1 && st.scale == st0.scale * (p == MIRROR_PRECISION_FP16 ? 0.5f : 1.0f),
                  "%s: the dynamic scaler went %g -> %g", name, (double)st0.scale, (double)st.scale);
            continue;
        }
        CHECK(step(run, x[i], y[i]) == MIRROR_OK && step(control, x[i], y[i]) == MIRROR_OK &&
                  step(dynamic, x[i], y[i]) == MIRROR_OK,
              "%s: step %zu", name, i);
    }
    n = snapshot(run, 0, a);
    snapshot(control, 0, b);
    CHECK(memcmp(a, b, n * sizeof(float)) == 0, "%s %s: the run equals the control run that skipped the step",
          name, adam ? "AdamW" : "SGD momentum");
    CHECK(mirror_optimizer_steps(run) == STEPS - 1 && mirror_optimizer_steps(control) == STEPS - 1,
          "%s: %d optimizer steps in both", name, STEPS - 1);
    CHECK(same_replicas(run, 3, a, b) && same_replicas(dynamic, 3, a, b), "%s: replicas bitwise equal", name);
    mirror_loss_scale_get(run, &st);
    CHECK(st.consecutive_skips == 0 && !st.last_skipped && st.skipped == 1, "%s: finite steps reset the run", name);
out:
    mirror_model_destroy(run);
    mirror_model_destroy(control);
    mirror_model_destroy(dynamic);
}

/* A scale too large for fp16: the scaled loss gradient itself overflows,
   the dynamic scaler backs off to a working level and training goes on. */
static void test_overflow(mirror_strategy *s)
{
    mirror_loss_scale_desc ls = {MIRROR_SCALE_DYNAMIC, 16777216.0f, 0, 0, 3, 0, 0, 0, 0};
    static float x[BATCH * N_IN];
    static int32_t y[BATCH];
    mirror_loss_scale_state st;
    mirror_model *m = small_model(s, MIRROR_PRECISION_FP16, &ls, 1);
    size_t i;
    int ok = 1;
    if (!m) return;
    make_data(x, y, BATCH, 7);
    for (i = 0; i < 30; i++) ok &= step(m, x, y) == MIRROR_OK;
    CHECK(ok, "30 steps");
    mirror_loss_scale_get(m, &st);
    /* |dz| <= 2^24 / 12 > 65504: skips until the scale is at most 2^19 */
    CHECK(st.skipped >= 5 && st.applied == 30 - st.skipped && st.scale >= 1.0f && st.scale <= 16777216.0f,
          "fp16 overflow at 2^24: %llu skipped, %llu applied, scale now %g", (unsigned long long)st.skipped,
          (unsigned long long)st.applied, (double)st.scale);
    printf("fp16 at an initial scale of 2^24: %llu of 30 steps skipped, scale settled at %g\n",
           (unsigned long long)st.skipped, (double)st.scale);
    mirror_model_destroy(m);
}

/* A static scale that always overflows: the error comes at the
   max_consecutive_skips-th step, not before, and the parameters are still
   the initial ones. */
static void test_too_many_skips(mirror_strategy *s)
{
    mirror_loss_scale_desc ls = {MIRROR_SCALE_STATIC, 1e9f, 0, 0, 0, 0, 0, 7, 0};
    static float x[BATCH * N_IN], init[SNAP], now[SNAP];
    static int32_t y[BATCH];
    mirror_model *m = small_model(s, MIRROR_PRECISION_FP16, &ls, 1);
    size_t i, n;
    int rc = MIRROR_OK;
    if (!m) return;
    make_data(x, y, BATCH, 9);
    n = snapshot(m, 0, init);
    for (i = 0; i < 7 && rc == MIRROR_OK; i++) rc = step(m, x, y);
    CHECK(rc == MIRROR_ERR_NOT_FINITE && i == 7, "the 7th skipped step in a row fails (step %zu, %s)", i,
          mirror_result_string(rc));
    CHECK(strstr(mirror_model_error(m), "7 steps") != NULL, "the message counts them: %s", mirror_model_error(m));
    snapshot(m, 0, now);
    CHECK(memcmp(init, now, n * sizeof(float)) == 0, "nothing was trained, nothing lost");
    CHECK(step(m, x, y) == MIRROR_ERR_NOT_FINITE, "the model stays usable and keeps saying so");
    mirror_model_destroy(m);

    /* fit with the largest limit (checks the scaler every 2^31 + 1 steps),
       shorter than it: a run that skipped every step is no success, and
       saves no checkpoint */
    ls.max_consecutive_skips = UINT32_MAX;
    if ((m = small_model(s, MIRROR_PRECISION_FP16, &ls, 1))) {
        mirror_dataset ds;
        mirror_fit_desc fd;
        char path[64];
        snprintf(path, sizeof path, "/tmp/mirror_test_precision_%ld.ckpt", (long)getpid());
        memset(&ds, 0, sizeof ds);
        ds.x = x, ds.labels = y, ds.count = BATCH, ds.channels = N_IN, ds.height = ds.width = 1;
        memset(&fd, 0, sizeof fd);
        fd.train = &ds;
        fd.epochs = 3;
        fd.batch = 4;
        fd.progress = MIRROR_PROGRESS_NONE;
        fd.checkpoint = path;
        rc = mirror_fit(m, &fd, NULL);
        CHECK(rc == MIRROR_ERR_NOT_FINITE && strstr(mirror_model_error(m), "all 9 steps were skipped") &&
                  strstr(mirror_model_error(m), "lower the static scale"),
              "fit with max_consecutive_skips UINT32_MAX that skips every step fails: %s", mirror_model_error(m));
        CHECK(access(path, F_OK) != 0, "and leaves no checkpoint");
        snapshot(m, 0, now);
        CHECK(memcmp(init, now, n * sizeof(float)) == 0, "nothing was trained");
        remove(path);
        strcat(path, ".lock");
        remove(path);
        mirror_model_destroy(m);
    }
}

/* mirror_get_gradients in fp16: the reduced gradient, unscaled, close to
   the fp32 model's on the same first batch. */
static void test_gradients(mirror_strategy *s2)
{
    static float x[BATCH * N_IN], g32[SNAP], g16[SNAP];
    static int32_t y[BATCH];
    mirror_model *a = small_model(s2, MIRROR_PRECISION_FP32, NULL, 1);
    mirror_model *b = small_model(s2, MIRROR_PRECISION_FP16, NULL, 1);
    size_t i, n;
    float most = 0.0f, err = 0.0f;
    if (!a || !b) goto out;
    make_data(x, y, BATCH, 13);
    step(a, x, y);
    step(b, x, y);
    n = mirror_num_parameters(a);
    CHECK(mirror_get_gradients(a, 0, g32, n) == MIRROR_OK && mirror_get_gradients(b, 1, g16, n) == MIRROR_OK,
          "gradients: %s", mirror_model_error(b));
    for (i = 0; i < n; i++) {
        most = fmaxf(most, fabsf(g32[i]));
        err = fmaxf(err, fabsf(g32[i] - g16[i]));
    }
    CHECK(most > 0.0f && err <= 1e-2f * most, "fp16 gradient within 1%% of the largest fp32 one (%g of %g)",
          (double)err, (double)most);
out:
    mirror_model_destroy(a);
    mirror_model_destroy(b);
}

static char logged[512];
static void capture(void *user, int level, const char *message)
{
    (void)user;
    if (level == MIRROR_LOG_NOTICE) snprintf(logged, sizeof logged, "%s", message);
}

static void test_report(mirror_strategy *s3)
{
    mirror_loss_scale_desc ls = {MIRROR_SCALE_DYNAMIC, 0, 0, 0, 0, 0, 0, 0, 1};
    static float x[BATCH * N_IN];
    static int32_t y[BATCH];
    mirror_model *m = small_model(s3, MIRROR_PRECISION_FP16, &ls, 1);
    if (!m) return;
    make_data(x, y, BATCH, 11);
    mirror_set_logger(capture, NULL);
    CHECK(step(m, x, y) == MIRROR_OK && !logged[0], "a finite step reports nothing (%s)", logged);
    x[9 * N_IN] = 1e6f; /* replica 2's shard; beyond fp16's 65504 */
    CHECK(step(m, x, y) == MIRROR_OK, "a skipped step");
    CHECK(strstr(logged, "layer 2 (dense) on replica 2") && strstr(logged, "65536 -> 32768"),
          "the report names the layer nearest the loss and the replica: %s", logged);
    mirror_set_logger(NULL, NULL);
    mirror_model_destroy(m);
}

/* K steps, save, a fresh model loads, K steps: the same as 2K straight,
   scaler included. (The same replica count: in 16 bits each replica's own
   gradient is rounded before the sum, so another count rounds otherwise.) */
static void test_resume(mirror_strategy *s2)
{
    enum { K = 5 };
    mirror_loss_scale_desc ls = {MIRROR_SCALE_DYNAMIC, 0, 0, 0, 2, 0, 0, 0, 0};
    static float x[2 * K][BATCH * N_IN], a[SNAP], b[SNAP];
    static int32_t y[2 * K][BATCH];
    mirror_model *straight = small_model(s2, MIRROR_PRECISION_FP16, &ls, 1);
    mirror_model *first = small_model(s2, MIRROR_PRECISION_FP16, &ls, 1);
    mirror_model *second = small_model(s2, MIRROR_PRECISION_FP16, &ls, 1);
    mirror_loss_scale_state sa, sb;
    char path[256];
    size_t i, n;
    if (!straight || !first || !second || !make_root("test_precision")) goto out;
    for (i = 0; i < 2 * K; i++) make_data(x[i], y[i], BATCH, 300 + i);
    x[2][0] = 1e6f; /* one skip on the way */
    for (i = 0; i < 2 * K; i++) step(straight, x[i], y[i]);
    for (i = 0; i < K; i++) step(first, x[i], y[i]);
    CHECK(mirror_checkpoint_save(first, path_in(path, "ck"), NULL, 1) == MIRROR_OK, "save: %s",
          mirror_model_error(first));
    CHECK(mirror_checkpoint_load(second, path, 0, NULL) == MIRROR_OK, "load: %s", mirror_model_error(second));
    for (i = K; i < 2 * K; i++) step(second, x[i], y[i]);
    n = snapshot(straight, 0, a);
    snapshot(second, 0, b);
    CHECK(memcmp(a, b, n * sizeof(float)) == 0, "fp16 resume: bitwise the uninterrupted run");
    mirror_loss_scale_get(straight, &sa);
    mirror_loss_scale_get(second, &sb);
    CHECK(sa.scale == sb.scale && sa.skipped >= 1 && sa.skipped == sb.skipped && sa.applied == sb.applied &&
              sa.good_steps == sb.good_steps,
          "the scaler resumed too: scale %g/%g, skipped %llu/%llu", (double)sa.scale, (double)sb.scale,
          (unsigned long long)sa.skipped, (unsigned long long)sb.skipped);
    remove_tree(root);
out:
    mirror_model_destroy(straight);
    mirror_model_destroy(first);
    mirror_model_destroy(second);
}

/* fp16 and bf16 against fp32 on the synthetic digits: the same model,
   seed and batches; test accuracy within one point. */
static void test_accuracy(mirror_strategy *s2)
{
    static const mirror_precision modes[] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16, MIRROR_PRECISION_BF16};
    mirror_dataset train, test;
    double acc[3];
    size_t i;
    mirror_dataset_synthetic_digits(&train, 3000, 1, NULL);
    mirror_dataset_synthetic_digits(&test, 1000, 2, NULL);
    for (i = 0; i < 3; i++) {
        mirror_model_desc md = model_desc(s2, 1, 28, 28, 50, 1);
        mirror_model *m;
        mirror_fit_desc fd;
        mirror_metrics ev;
        md.precision = modes[i];
        md.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.0f);
        acc[i] = -1.0;
        memset(&fd, 0, sizeof fd);
        fd.train = &train;
        fd.epochs = 3;
        fd.batch = 50;
        fd.progress = MIRROR_PROGRESS_NONE;
        m = build_model(&md, NULL, "flatten, dense 64, relu, dense 10");
        if (m && mirror_fit(m, &fd, NULL) == MIRROR_OK && mirror_evaluate(m, &test, 0, &ev) == MIRROR_OK)
            acc[i] = (double)ev.correct / (double)ev.count;
        mirror_model_destroy(m);
    }
    printf("synthetic digits, test accuracy after 3 epochs: fp32 %.3f, fp16 %.3f, bf16 %.3f\n", acc[0], acc[1],
           acc[2]);
    CHECK(acc[0] >= 0.9, "fp32 learns (%.3f)", acc[0]);
    CHECK(acc[1] >= acc[0] - 0.01, "fp16 within 1 point of fp32 (%.3f vs %.3f)", acc[1], acc[0]);
    CHECK(acc[2] >= acc[0] - 0.01, "bf16 within 1 point of fp32 (%.3f vs %.3f)", acc[2], acc[0]);
    mirror_dataset_free(&train);
    mirror_dataset_free(&test);
}

/* The layers read the 16-bit working copy itself, which the optimizer's
   own pass writes: after steps (one skipped) it is the masters narrowed,
   on every replica, for SGD and AdamW in fp16 and bf16. And a mixed
   model's buffers are 16-bit: the memory report counts 6 bytes a
   parameter slot (the masters and the copy) and fewer activation bytes
   than the same model in fp32. */
static void test_view(mirror_strategy *s3)
{
    static float x[BATCH * N_IN];
    static int32_t y[BATCH];
    static float masters[4096];
    size_t p, adam, r, i, k, stale;
    mirror_model *m32 = small_model(s3, MIRROR_PRECISION_FP32, NULL, 0);
    mirror_memory_report rep32, rep;
    CHECK(m32 && mirror_memory_report_get(m32, 0, &rep32) == MIRROR_OK, "fp32 model's memory report");
    for (p = 0; p < 2; p++)
        for (adam = 0; adam < 2; adam++) {
            mirror_precision prec = p ? MIRROR_PRECISION_BF16 : MIRROR_PRECISION_FP16;
            mirror_model *m = small_model(s3, prec, NULL, (int)adam);
            if (!m) continue;
            CHECK(m->nslots <= 4096, "the model fits the test's buffer");
            for (k = 0, stale = 0; k < 4 && m->nslots <= 4096; k++) {
                make_data(x, y, BATCH, 40 + k);
                if (k == 2) x[5] = NAN; /* a skipped step */
                CHECK(step(m, x, y) == MIRROR_OK || k == 2, "%s step %zu", mirror_precision_name(prec), k);
                for (r = 0; r < mirror_num_replicas(s3); r++) {
                    /* the masters as the API sees them (sharded across devices: each slice from its owner) */
                    mirror__download_arena(m, r, masters, MIRROR__PARAMS);
                    stale += m->rep[r].weights != (void *)m->rep[r].work16;
                    for (i = 0; i < m->nslots; i++)
                        stale += m->rep[r].work16[i] != mirror_hd_narrow(masters[i], m->format);
                }
            }
            CHECK(stale == 0, "%s %s: the layers read the working copy, the masters narrowed, after each of 4 steps, "
                  "one skipped (%zu differ)", mirror_precision_name(prec), adam ? "AdamW" : "SGD", stale);
            CHECK(m32 && mirror_memory_report_get(m, 0, &rep) == MIRROR_OK && rep.parameters == 6 * m->nslots &&
                      rep.activations < rep32.activations,
                  "%s: parameters 6 bytes a slot (%zu for %zu), activations in 16 bits (%zu bytes, fp32 %zu)",
                  mirror_precision_name(prec), rep.parameters, m->nslots, rep.activations, rep32.activations);
            mirror_model_destroy(m);
        }
    mirror_model_destroy(m32);
}

int main(void)
{
    mirror_strategy *s1 = checked_strategy("cpu:1", 0), *s2 = checked_strategy("cpu:2", 0), *s3 = checked_strategy("cpu:3", 0);
    if (s1 && s2 && s3) {
        test_desc(s1);
        test_skip(s3, MIRROR_PRECISION_FP16, 1e6f, 1);     /* overflows fp16 storage */
        test_skip(s3, MIRROR_PRECISION_FP16, NAN, 0);
        test_skip(s3, MIRROR_PRECISION_BF16, INFINITY, 1);
        test_skip(s3, MIRROR_PRECISION_BF16, NAN, 0);
        test_gradients(s2);
        test_overflow(s2);
        test_too_many_skips(s2);
        test_report(s3);
        test_resume(s2);
        test_accuracy(s2);
        test_view(s3);
    }
    mirror_strategy_destroy(s1);
    mirror_strategy_destroy(s2);
    mirror_strategy_destroy(s3);
    return check_done("test_precision");
}
