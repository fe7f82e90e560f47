/* test_optim.c - the optimizers and what shapes an update: SGD (momentum,
   Nesterov, weight decay), Adam and AdamW against double-precision
   references of the torch formulas, one update and a few steps through the
   API; learning-rate schedules (constant, step, cosine, warmup, a callback) against values
   computed by hand, applied to the parameters step by step, checked when
   a model is created, and resumed exactly from a checkpoint; gradient
   clipping by global norm against the norm and the update computed here,
   on 1 to 3 replicas, in fp32 and fp16; gradient accumulation against one
   step on all the samples, by hand and through fit; augmentation by hand
   and independent of the split. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "digits.h"
#include "files.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SIDE = 12, SAMPLES = 96, BATCH = 12 };

static mirror_dataset data;

// >>optimizers -----------------------------------------------------------------

/* torch.optim.SGD (dampening 0) in double: the first step sets buf = d_p. */
static void ref_sgd(double *w, double *buf, int t, double g, double lr, double mu, double wd, int nesterov)
{
    double d = g + wd * *w;
    if (mu != 0.0) {
        *buf = t == 0 ? d : mu * *buf + d;
        d = nesterov ? d + mu * *buf : *buf;
    }
    *w -= lr * d;
}

/* The update formulas (mirror_hd_sgd, mirror_hd_adam) against them. */
static void test_sgd(void)
{
    static const struct {
        float lr, mu, wd;
        int nesterov;
    } cfg[5] = {{0.1f, 0.0f, 0.0f, 0}, {0.05f, 0.9f, 0.0f, 0}, {0.05f, 0.9f, 0.0f, 1},
                {0.1f, 0.0f, 0.1f, 0}, {0.02f, 0.8f, 0.05f, 1}};
    static const float grads[6] = {0.5f, -1.25f, 2.0f, 0.125f, -0.75f, 1.5f};
    int ci, t;
    /* A hand-computed case: w=1, g=0.5, lr=0.1, mu=0.9 nesterov, wd=0.1:
       d = 0.6, v = 0.6, step d + 0.9 v = 1.14, w = 1 - 0.114 = 0.886. */
    {
        float w = 1.0f, v = 0.0f;
        mirror_hd_sgd(&w, &v, 0.5f, 0.1f, 0.9f, 0.1f, 1);
        CHECK(close_to(w, 0.886, 1e-7, 1e-6) && close_to(v, 0.6, 1e-7, 1e-6), "sgd hand case: w %.9g v %.9g",
              (double)w, (double)v);
    }
    for (ci = 0; ci < 5; ci++) {
        float w = 0.75f, v = 0.0f;
        double rw = 0.75, rbuf = 0.0;
        int ok = 1;
        for (t = 0; t < 6; t++) {
            mirror_hd_sgd(&w, &v, grads[t], cfg[ci].lr, cfg[ci].mu, cfg[ci].wd, cfg[ci].nesterov);
            ref_sgd(&rw, &rbuf, t, grads[t], cfg[ci].lr, cfg[ci].mu, cfg[ci].wd, cfg[ci].nesterov);
            if (!close_to(w, rw, 1e-6, 1e-5)) ok = 0;
            if (cfg[ci].mu != 0.0f && !close_to(v, rbuf, 1e-6, 1e-5)) ok = 0;
        }
        CHECK(ok, "sgd lr %g momentum %g wd %g nesterov %d: w %.9g, torch %.9g", (double)cfg[ci].lr,
              (double)cfg[ci].mu, (double)cfg[ci].wd, cfg[ci].nesterov, (double)w, rw);
    }
}

/* torch.optim.Adam / AdamW in double. */
static void ref_adam(double *w, double *m, double *v, int t, double g, double lr, double b1, double b2,
                     double eps, double wd, int decoupled)
{
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    if (decoupled)
        *w *= 1.0 - lr * wd;
    else
        g += wd * *w;
    *m = b1 * *m + (1.0 - b1) * g;
    *v = b2 * *v + (1.0 - b2) * g * g;
    *w -= lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + eps);
}

static void test_adam(void)
{
    static const struct {
        float lr, b1, b2, eps, wd;
        int decoupled;
    } cfg[5] = {{0.001f, 0.9f, 0.999f, 1e-8f, 0.0f, 0},   {0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 0},
                {0.01f, 0.9f, 0.999f, 1e-8f, 0.01f, 1},  {0.05f, 0.8f, 0.99f, 1e-6f, 0.5f, 1},
                {0.003f, 0.5f, 0.9f, 1e-3f, 0.0f, 1}};
    static const float grads[8] = {0.5f, -0.25f, 1.5f, 0.0f, -2.0f, 0.001f, 0.75f, -0.125f};
    int ci, t;
    /* Hand case, first step of Adam: m = 0.1 g, v = 0.001 g^2, bc1 = 0.1,
       bc2_sqrt = sqrt(0.001): the step is lr * g / (|g| + eps') = lr sign(g). */
    {
        float w = 1.0f, m = 0.0f, v = 0.0f;
        mirror_hd_adam(&w, &m, &v, 0.5f, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 0.1f, sqrtf(0.001f));
        CHECK(close_to(w, 0.99, 1e-6, 0) && close_to(m, 0.05, 1e-8, 1e-6) && close_to(v, 0.00025, 1e-10, 1e-4), /* 1 - 0.999f = 0.000999987 */
              "adam hand case: w %.9g m %.9g v %.9g", (double)w, (double)m, (double)v);
        w = 2.0f, m = 0.0f, v = 0.0f;
        /* AdamW: w = 2 (1 - 0.01 * 0.5) = 1.99, then - 0.01 sign(g) */
        mirror_hd_adam(&w, &m, &v, -0.5f, 0.01f, 0.9f, 0.999f, 1e-8f, 0.5f, 1, 0.1f, sqrtf(0.001f));
        CHECK(close_to(w, 2.0, 1e-6, 0) && close_to(m, -0.05, 1e-8, 1e-6),
              "adamw hand case: w %.9g (want 1.99 + 0.01) m %.9g", (double)w, (double)m);
    }
    for (ci = 0; ci < 5; ci++) {
        float w = -0.6f, m = 0.0f, v = 0.0f;
        double rw = -0.6, rm = 0.0, rv = 0.0;
        int ok = 1;
        for (t = 1; t <= 8; t++) {
            float bc1 = (float)(1.0 - pow((double)cfg[ci].b1, t));
            float bc2s = (float)sqrt(1.0 - pow((double)cfg[ci].b2, t));
            mirror_hd_adam(&w, &m, &v, grads[t - 1], cfg[ci].lr, cfg[ci].b1, cfg[ci].b2, cfg[ci].eps, cfg[ci].wd,
                           cfg[ci].decoupled, bc1, bc2s);
            ref_adam(&rw, &rm, &rv, t, grads[t - 1], cfg[ci].lr, cfg[ci].b1, cfg[ci].b2, cfg[ci].eps,
                     cfg[ci].wd, cfg[ci].decoupled);
            if (!close_to(w, rw, 1e-6, 1e-5) || !close_to(m, rm, 1e-8, 1e-5) || !close_to(v, rv, 1e-10, 1e-5))
                ok = 0;
        }
        CHECK(ok, "%s lr %g betas %g %g eps %g wd %g: w %.9g, torch %.9g", cfg[ci].decoupled ? "adamw" : "adam",
              (double)cfg[ci].lr, (double)cfg[ci].b1, (double)cfg[ci].b2, (double)cfg[ci].eps, (double)cfg[ci].wd,
              (double)w, rw);
    }
}

/* Through the public API: a few steps of each optimizer against the torch
   formulas in double, fed with the gradients the steps report. */
static void test_optimizer_steps(void)
{
    static const mirror_optimizer_kind kinds[4] = {MIRROR_OPT_SGD, MIRROR_OPT_SGD, MIRROR_OPT_ADAM,
                                                   MIRROR_OPT_ADAMW};
    int ki;
    uint64_t data_state = 0x5EEDF00Dull;
    for (ki = 0; ki < 4; ki++) {
        mirror_strategy *s = new_strategy("cpu:1", 0);
        mirror_model_desc md = model_desc(s, 5, 0, 0, 4, 31);
        mirror_model *m;
        mirror_batch b;
        mirror_optimizer_desc o;
        float x[4 * 5], t[4 * 2], *g, *p;
        double *rw, *rm, *rv;
        size_t np, i, bad = 0, state_bad = 0;
        int step;
        md.loss = MIRROR_LOSS_MSE;
        md.optimizer.kind = kinds[ki];
        if (ki == 0) {
            md.optimizer.lr = 0.1f;
        } else if (ki == 1) {
            md.optimizer.lr = 0.05f, md.optimizer.momentum = 0.9f, md.optimizer.nesterov = 1;
            md.optimizer.weight_decay = 0.01f;
        } else if (ki == 2) {
            md.optimizer.lr = 0.01f, md.optimizer.weight_decay = 0.05f;
        } /* AdamW: the defaults, lr 0.001 and weight decay 0.01 */
        if (!s || !(m = new_model(&md, NULL, "dense 3, relu, dense 2"))) {
            CHECK(0, "optimizer steps: a strategy and a model");
            mirror_strategy_destroy(s);
            return;
        }
        CHECK(mirror_model_build(m) == MIRROR_OK, "optimizer steps: build: %s", mirror_model_error(m));
        o = mirror_model_query_desc(m).optimizer;
        np = mirror_num_parameters(m);
        g = (float *)calloc(np, sizeof(float));
        p = (float *)calloc(np, sizeof(float));
        rw = (double *)calloc(np, sizeof(double));
        rm = (double *)calloc(np, sizeof(double));
        rv = (double *)calloc(np, sizeof(double));
        if (!g || !p || !rw || !rm || !rv) abort();
        for (i = 0; i < 20; i++) x[i] = uniform_in(&data_state, -1.0f, 1.0f);
        for (i = 0; i < 8; i++) t[i] = uniform_in(&data_state, -1.0f, 1.0f);
        memset(&b, 0, sizeof b);
        b.x = x;
        b.targets = t;
        b.n = b.rows = 4;
        mirror_get_parameters(m, 0, p, np);
        for (i = 0; i < np; i++) rw[i] = p[i];
        for (step = 1; step <= 3; step++) {
            mirror_train_step(m, &b, NULL);
            mirror_get_gradients(m, 0, g, np);
            mirror_get_parameters(m, 0, p, np);
            for (i = 0; i < np; i++) {
                if (o.kind == MIRROR_OPT_SGD)
                    ref_sgd(&rw[i], &rm[i], step - 1, g[i], o.lr, o.momentum, o.weight_decay, o.nesterov);
                else
                    ref_adam(&rw[i], &rm[i], &rv[i], step, g[i], o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                             o.kind == MIRROR_OPT_ADAMW);
                if (!close_to(p[i], rw[i], 1e-6, 1e-5)) bad++;
            }
        }
        CHECK(bad == 0, "optimizer kind %d (lr %g): %zu parameter updates differ from torch over 3 steps", (int)o.kind,
              (double)o.lr, bad);
        CHECK(mirror_optimizer_steps(m) == 3, "optimizer kind %d: %llu steps", (int)o.kind,
              (unsigned long long)mirror_optimizer_steps(m));
        {
            size_t ns = mirror_optimizer_state_size(m);
            float *st = (float *)malloc((ns ? ns : 1) * sizeof(float));
            if (!st) abort();
            mirror_get_optimizer_state(m, 0, st, ns);
            if (o.kind == MIRROR_OPT_SGD && o.momentum == 0.0f)
                state_bad = ns != 0;
            else if (o.kind == MIRROR_OPT_SGD)
                for (i = 0; i < np; i++) state_bad += !close_to(st[i], rm[i], 1e-6, 1e-5);
            else
                for (i = 0; i < np; i++)
                    state_bad += !close_to(st[i], rm[i], 1e-7, 1e-5) + !close_to(st[np + i], rv[i], 1e-9, 1e-5);
            CHECK(state_bad == 0, "optimizer kind %d: %zu state entries differ from torch", (int)o.kind, state_bad);
            free(st);
        }
        free(g);
        free(p);
        free(rw);
        free(rm);
        free(rv);
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
}

// >>schedules, clipping, accumulation -------------------------------------------


/* flatten, dense 16, relu, dense 10 over 12x12 digits, with the optimizer o,
   in `precision`. */
static mirror_model *model_in(mirror_strategy *s, const mirror_optimizer_desc *o, mirror_precision precision,
                              mirror_error *err)
{
    mirror_model_desc md = model_desc(s, 1, SIDE, SIDE, BATCH, 9);
    md.precision = precision;
    md.optimizer = *o;
    return build_model(&md, err, "flatten, dense 16, relu, dense 10");
}

static mirror_model *model(mirror_strategy *s, const mirror_optimizer_desc *o, mirror_error *err)
{
    return model_in(s, o, MIRROR_PRECISION_FP32, err);
}

/* Step k: samples [12k, 12k + 12) of the data (mod its size). */
static int step(mirror_model *m, size_t k)
{
    mirror_batch b;
    memset(&b, 0, sizeof b);
    b.x = data.x + (k * BATCH % SAMPLES) * SIDE * SIDE;
    b.labels = data.labels + k * BATCH % SAMPLES;
    b.n = BATCH;
    return mirror_train_step(m, &b, NULL);
}

static int near(double a, double b) { return fabs(a - b) <= 1e-6 * (1.0 + fabs(b)); }

/* The shared formula against rates worked out by hand. */
static void test_formula(void)
{
    /* cosine from 1 to 0 over steps 3..6 after a warmup of 2: T = 4 */
    static const double cosine[] = {0.5, 1.0, 1.0, 0.853553390593, 0.5, 0.146446609407, 0.0, 0.0};
    uint64_t s;
    int ok = 1;
    for (s = 1; s <= 8; s++) ok &= near(mirror_hd_schedule_lr(MIRROR_LR_CONSTANT, 0.1f, s, 0, 0, 0, 0, 0, 0), 0.1);
    CHECK(ok, "constant: 0.1 at every step");
    for (s = 1; s <= 8; s++)
        ok &= near(mirror_hd_schedule_lr(MIRROR_LR_CONSTANT, 0.1f, s, 4, 0, 0, 0, 0, 0), s <= 4 ? 0.1 * s / 4 : 0.1);
    CHECK(ok, "a warmup of 4: 0.025, 0.05, 0.075, 0.1, then 0.1");
    for (s = 1; s <= 10; s++)
        ok &= near(mirror_hd_schedule_lr(MIRROR_LR_STEP, 1.0f, s, 0, 3, 0.5f, 0, 0, 0), pow(0.5, (double)((s - 1) / 3)));
    CHECK(ok, "step decay by 0.5 every 3 steps: 1, 1, 1, 0.5, 0.5, 0.5, 0.25, ...");
    for (s = 1; s <= 8; s++) ok &= near(mirror_hd_schedule_lr(MIRROR_LR_COSINE, 1.0f, s, 2, 0, 0, 6, 0, 0), cosine[s - 1]);
    CHECK(ok, "cosine to 0 after 6 steps with a warmup of 2: 0.5, 1, 1, 0.854, 0.5, 0.146, 0, 0");
    ok = near(mirror_hd_schedule_lr(MIRROR_LR_COSINE, 1.0f, 2, 0, 0, 0, 2, 0.25f, 0), 0.25 + 0.75 * 0.5);
    CHECK(ok, "cosine to min_lr 0.25: halfway at 0.625");
    ok = near(mirror_hd_schedule_lr(MIRROR_LR_CALLBACK, 1.0f, 3, 4, 0, 0, 0, 0, 0.2f), 0.2 * 3 / 4);
    CHECK(ok, "a callback's rate, under the warmup's ramp");
}

static float one_over_step(void *user, uint64_t s)
{
    (void)user;
    return 0.5f / (float)s;
}

static float nan_at_three(void *user, uint64_t s)
{
    (void)user;
    return s == 3 ? NAN : 0.01f;
}

/* Plain SGD (no momentum, no decay): every parameter moves by exactly
   -lr_s times the reduced gradient of step s, for the rate the schedule
   gives at s and mirror_current_lr announced before the step. */
static void test_applied(size_t replicas, mirror_lr_schedule kind)
{
    mirror_strategy *s = checked_strategy("cpu", replicas);
    mirror_optimizer_desc o;
    mirror_model *m;
    float *before, *after, *g;
    size_t n, i, k;
    int ok = 1, announced = 1;
    memset(&o, 0, sizeof o);
    o.kind = MIRROR_OPT_SGD, o.lr = 0.2f, o.schedule = kind, o.warmup = 2;
    o.step_size = 2, o.gamma = 0.5f, o.total_steps = 7, o.min_lr = 0.01f, o.lr_fn = one_over_step;
    if (!(m = model(s, &o, NULL))) {
        CHECK(0, "model");
        mirror_strategy_destroy(s);
        return;
    }
    n = mirror_num_parameters(m);
    before = (float *)malloc(n * sizeof(float)), after = (float *)malloc(n * sizeof(float));
    g = (float *)malloc(n * sizeof(float));
    for (k = 0; k < 9; k++) {
        float want = mirror_hd_schedule_lr((int)kind, 0.2f, k + 1, 2, 2, 0.5f, 7, 0.01f, 0.5f / (float)(k + 1));
        announced &= mirror_current_lr(m) == want;
        mirror_get_parameters(m, 0, before, n);
        ok &= step(m, k) == MIRROR_OK;
        mirror_get_parameters(m, replicas - 1, after, n);
        mirror_get_gradients(m, 0, g, n);
        for (i = 0; i < n; i++) ok &= fabsf((before[i] - after[i]) - want * g[i]) <= 1e-6f * (1.0f + fabsf(before[i]));
    }
    CHECK(announced, "schedule %d, %zu replicas: mirror_current_lr announces each step's rate", (int)kind, replicas);
    CHECK(ok, "schedule %d, %zu replicas: 9 steps, each moves the parameters by its rate times the gradient",
          (int)kind, replicas);
    free(before), free(after), free(g);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* Plain SGD with clipping at clip_norm: after each step the norm mirror
   reports is the norm of the reduced gradient computed here, and every
   parameter moved by lr * min(1, clip_norm / (norm + 1e-6)) * g. fp16: the
   norm of the unscaled gradient (mirror_get_gradients unscales). */
static void test_clip(size_t replicas, mirror_precision precision, float clip_norm)
{
    mirror_strategy *s = checked_strategy("cpu", replicas);
    mirror_optimizer_desc o;
    mirror_model *m;
    float *before, *after, *g;
    size_t n, i, k;
    int norms = 1, moved = 1, clipped = 0;
    memset(&o, 0, sizeof o);
    o.kind = MIRROR_OPT_SGD, o.lr = 0.5f, o.clip_norm = clip_norm;
    if (!(m = model_in(s, &o, precision, NULL))) {
        CHECK(0, "model");
        mirror_strategy_destroy(s);
        return;
    }
    n = mirror_num_parameters(m);
    before = (float *)malloc(n * sizeof(float)), after = (float *)malloc(n * sizeof(float));
    g = (float *)malloc(n * sizeof(float));
    for (k = 0; k < 6; k++) {
        double sum = 0.0, norm;
        float c;
        mirror_get_parameters(m, 0, before, n);
        if (step(m, k) != MIRROR_OK) moved = 0;
        mirror_get_parameters(m, replicas - 1, after, n);
        mirror_get_gradients(m, 0, g, n);
        for (i = 0; i < n; i++) sum += (double)g[i] * g[i];
        norm = sqrt(sum);
        norms &= fabs(mirror_last_grad_norm(m) - norm) <= 1e-5 * norm;
        c = mirror_hd_clip_factor((float)norm, clip_norm);
        clipped += c < 1.0f;
        for (i = 0; i < n; i++) {
            float want = before[i] - 0.5f * (g[i] * c);
            float tol = precision == MIRROR_PRECISION_FP32 ? 1e-6f : 1e-3f; /* fp16: the clipped unscale rounds */
            moved &= fabsf(after[i] - want) <= tol * (1.0f + fabsf(want));
        }
    }
    CHECK(norms, "%s, %zu replicas, clip %g: the reported norm is the reduced gradient's (last %g)",
          mirror_precision_name(precision), replicas, (double)clip_norm, (double)mirror_last_grad_norm(m));
    CHECK(moved, "%s, %zu replicas, clip %g: each step moved the parameters by lr * min(1, clip / norm) * g",
          mirror_precision_name(precision), replicas, (double)clip_norm);
    CHECK(clip_norm > 1.0f ? clipped == 0 : clipped == 6, "clip %g: %d of 6 steps clipped", (double)clip_norm,
          clipped);
    CHECK(mirror_check_replicas(m) == MIRROR_OK, "the replicas agree: %s", mirror_model_error(m));
    free(before), free(after), free(g);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* The largest difference between the parameters of a and b, relative. */
static double apart(mirror_model *a, mirror_model *b)
{
    size_t n = mirror_num_parameters(a), i;
    float *pa = (float *)malloc(n * sizeof(float)), *pb = (float *)malloc(n * sizeof(float));
    double worst = 0.0;
    mirror_get_parameters(a, 0, pa, n), mirror_get_parameters(b, 0, pb, n);
    for (i = 0; i < n; i++) {
        double d = fabs((double)pa[i] - pb[i]) / (1.0 + fabs((double)pb[i]));
        if (d > worst) worst = d;
    }
    free(pa), free(pb);
    return worst;
}

static mirror_model *adam_model(mirror_strategy *s, size_t max_batch)
{
    mirror_model_desc md = model_desc(s, 1, SIDE, SIDE, max_batch, 4);
    md.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.003f);
    return build_model(&md, NULL, "conv 4 3 1 1, relu, maxpool 2 2, flatten, dense 16, relu, dense 10");
}

/* 10 steps of mirror_train_steps over micro-batches of 10, 7, 13 and 2
   samples (uneven, some smaller than the replicas) against 10 steps of one
   batch of the same 32 samples: the same parameters within float32
   rounding, the same metrics; a model of max_batch 13 does what needs 32. */
static void test_accumulate(size_t replicas)
{
    static const size_t sizes[4] = {10, 7, 13, 2};
    mirror_strategy *s = checked_strategy("cpu", replicas);
    mirror_model *big = adam_model(s, 32), *small = adam_model(s, 13);
    mirror_batch micro[4], all;
    mirror_metrics mb, ms;
    size_t k, j, at;
    int ok = 1;
    if (!big || !small) {
        CHECK(0, "models");
        goto out;
    }
    for (k = 0; k < 10; k++) {
        size_t first = (k * 32) % (SAMPLES - 32);
        memset(&all, 0, sizeof all);
        all.x = data.x + first * SIDE * SIDE, all.labels = data.labels + first, all.n = 32;
        for (j = 0, at = first; j < 4; at += sizes[j], j++) {
            memset(&micro[j], 0, sizeof micro[j]);
            micro[j].x = data.x + at * SIDE * SIDE, micro[j].labels = data.labels + at, micro[j].n = sizes[j];
        }
        ok &= mirror_train_step(big, &all, &mb) == MIRROR_OK && mirror_train_steps(small, micro, 4, &ms) == MIRROR_OK;
        ok &= ms.count == 32 && ms.correct == mb.correct && fabs(ms.loss_sum - mb.loss_sum) <= 1e-4 * mb.loss_sum;
    }
    CHECK(ok, "%zu replicas: 10 steps of 4 accumulated micro-batches: the metrics of one batch of 32 (%s)", replicas,
          mirror_model_error(small));
    CHECK(apart(small, big) <= 1e-5, "%zu replicas: parameters within 1e-5 of the large batch's (%.2g apart)", replicas,
          apart(small, big));
    CHECK(mirror_optimizer_steps(small) == 10 && mirror_check_replicas(small) == MIRROR_OK,
          "10 optimizer steps, the replicas equal");
    micro[1].n = 14;
    CHECK(mirror_train_steps(small, micro, 4, NULL) == MIRROR_ERR_CAPACITY, "a micro-batch beyond max_batch");
    micro[1].n = 0;
    CHECK(mirror_train_steps(small, micro, 4, NULL) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(small), "batch 1"),
          "an empty micro-batch: %s", mirror_model_error(small));
    CHECK(mirror_train_steps(small, micro, 0, NULL) == MIRROR_ERR_ARGUMENT && mirror_optimizer_steps(small) == 10,
          "no micro-batch; none of the refused calls took a step");
out:
    mirror_model_destroy(big);
    mirror_model_destroy(small);
    mirror_strategy_destroy(s);
}

/* fit with micro-batches of 8, accumulate 4, against fit with batches of
   32: the same steps and samples per epoch, parameters within rounding,
   and a checkpoint cursor that counts samples per optimizer step. */
static void test_fit_accumulate(void)
{
    mirror_strategy *s = checked_strategy("cpu", 2);
    mirror_model *big = adam_model(s, 32), *small = adam_model(s, 8);
    mirror_fit_desc fd;
    mirror_epoch_log lb, ls;
    mirror_checkpoint_info at;
    char path[256];
    if (!big || !small) {
        CHECK(0, "models");
        goto out;
    }
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 2, fd.batch = 32, fd.progress = MIRROR_PROGRESS_NONE;
    CHECK(mirror_fit(big, &fd, &lb) == MIRROR_OK, "fit, batch 32");
    fd.batch = 8, fd.accumulate = 4;
    fd.checkpoint = path_in(path, "accumulate.ckpt");
    CHECK(mirror_fit(small, &fd, &ls) == MIRROR_OK, "fit, batch 8, accumulate 4: %s", mirror_model_error(small));
    CHECK(ls.steps == lb.steps && ls.steps == 3 && ls.samples == SAMPLES && mirror_optimizer_steps(small) == 6,
          "3 steps of 32 samples an epoch either way (%zu steps, %zu samples)", ls.steps, ls.samples);
    CHECK(fabs(ls.train_loss - lb.train_loss) <= 1e-5 && apart(small, big) <= 1e-5,
          "the same loss (%.6f, %.6f) and parameters within 1e-5 (%.2g)", ls.train_loss, lb.train_loss,
          apart(small, big));
    CHECK(mirror_checkpoint_load(small, path, 0, &at) == MIRROR_OK && at.batch == 32 && at.epoch == 2,
          "the checkpoint's cursor counts 32 samples a step (%llu)", (unsigned long long)at.batch);
out:
    mirror_model_destroy(big);
    mirror_model_destroy(small);
    mirror_strategy_destroy(s);
}

/* Augmentation: the shared crop and flip on a plane worked by hand; the
   draws cover the shifts and both flips; fit with augmentation on 1 and 3
   replicas ends alike, unlike fit without it, and its validation sees the
   samples as they are. */
static void test_augment(void)
{
    static const float plane[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; /* 3 x 4 */
    mirror_strategy *s1 = checked_strategy("cpu", 1), *s3 = checked_strategy("cpu", 3);
    mirror_model *a = adam_model(s1, 16), *b = adam_model(s3, 16), *c = adam_model(s1, 16);
    mirror_fit_desc fd;
    mirror_epoch_log la, lb, lc;
    mirror_metrics ev;
    long dy, dx, lo = 0, hi = 0;
    int flipped, flips = 0, ok = 1;
    size_t row;
    CHECK(mirror_hd_augment_pixel(plane, 3, 4, 0, 0, 0, 0, 0) == 1 && mirror_hd_augment_pixel(plane, 3, 4, 0, 0, 0, 0, 1) == 4 &&
              mirror_hd_augment_pixel(plane, 3, 4, 1, 1, 1, 1, 0) == 11 &&
              mirror_hd_augment_pixel(plane, 3, 4, 2, 3, 1, 0, 0) == 0 &&
              mirror_hd_augment_pixel(plane, 3, 4, 0, 0, -1, 0, 0) == 0 &&
              mirror_hd_augment_pixel(plane, 3, 4, 1, 0, 0, 1, 1) == 0 &&
              mirror_hd_augment_pixel(plane, 3, 4, 1, 1, 0, -1, 1) == 6,
          "crop and flip by hand: the flip mirrors, a shift reads its neighbour, the padding is 0");
    for (row = 0; row < 4000; row++) {
        mirror_hd_augment_draw(12345, row, 2, 1, &dy, &dx, &flipped);
        ok &= dy >= -2 && dy <= 2 && dx >= -2 && dx <= 2;
        lo += dy == -2, hi += dx == 2, flips += flipped;
    }
    CHECK(ok && lo > 600 && hi > 600 && flips > 1800 && flips < 2200,
          "4000 draws, pad 2: shifts in [-2, 2], each end about a fifth (%ld, %ld), half flipped (%d)", lo, hi, flips);
    mirror_hd_augment_draw(12345, 7, 0, 0, &dy, &dx, &flipped);
    CHECK(dy == 0 && dx == 0 && !flipped, "pad 0 and no flip: the sample as it is");
    if (!a || !b || !c) {
        CHECK(0, "models");
        goto out;
    }
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.validation = &data, fd.epochs = 2, fd.batch = 16, fd.progress = MIRROR_PROGRESS_NONE;
    fd.augment_flip = 1, fd.augment_crop_pad = 2;
    CHECK(mirror_fit(a, &fd, &la) == MIRROR_OK && mirror_fit(b, &fd, &lb) == MIRROR_OK, "fit with augmentation: %s",
          mirror_model_error(b));
    CHECK(apart(a, b) <= 1e-5 && fabs(la.train_loss - lb.train_loss) <= 1e-5,
          "1 and 3 replicas with augmentation: the same parameters within 1e-5 (%.2g apart)", apart(a, b));
    CHECK(mirror_evaluate(a, &data, 16, &ev) == MIRROR_OK && fabs(ev.loss_sum / (double)ev.count - la.val_loss) < 1e-9,
          "fit's validation loss is that of the samples as they are (%g, %g)", la.val_loss,
          ev.loss_sum / (double)ev.count);
    fd.augment_flip = 0, fd.augment_crop_pad = 0;
    CHECK(mirror_fit(c, &fd, &lc) == MIRROR_OK && apart(a, c) > 1e-3, "without augmentation: other parameters (%.2g)",
          apart(a, c));
    fd.augment_crop_pad = 100;
    CHECK(mirror_fit(c, &fd, NULL) == MIRROR_ERR_ARGUMENT, "a crop padding beyond the image is refused");
out:
    mirror_model_destroy(a), mirror_model_destroy(b), mirror_model_destroy(c);
    mirror_strategy_destroy(s1), mirror_strategy_destroy(s3);
}

/* fit's per-step callback: every log_every steps, with the epoch's running
   numbers; a non-zero return stops fit before the next step. */
static size_t step_calls, step_last, stop_at;

static int on_step(void *user, const mirror_step_log *log)
{
    (void)user;
    step_calls++;
    if (log->step != step_last + 3 && log->step != 3) step_last = (size_t)-1; /* not every 3rd */
    else step_last = log->step;
    return stop_at && log->global_step >= stop_at;
}

static void test_on_step(void)
{
    mirror_strategy *s = checked_strategy("cpu", 2);
    mirror_model *m = adam_model(s, 16);
    mirror_fit_desc fd;
    if (!m) {
        CHECK(0, "model");
        goto out;
    }
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 2, fd.batch = 16, fd.progress = MIRROR_PROGRESS_NONE;
    fd.on_step = on_step, fd.log_every = 3;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && step_calls == 4 && step_last == 6,
          "6 steps an epoch, every 3rd: 2 calls an epoch, at steps 3 and 6 (%zu calls, last %zu)", step_calls, step_last);
    stop_at = 16, step_calls = 0;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_STOPPED && mirror_optimizer_steps(m) == 18,
          "a callback that returns 1 at step 18 stops fit there (%llu steps)",
          (unsigned long long)mirror_optimizer_steps(m));
out:
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* Timing: phase times from a ring of the last steps, bounded; a trace of
   them; off costs nothing and records nothing. */
static void test_timing(void)
{
    mirror_strategy *s = checked_strategy("cpu", 2);
    mirror_model *m = adam_model(s, 16);
    mirror_phase_times pt, r1;
    mirror_fit_desc fd;
    char path[256], *text = NULL;
    FILE *f;
    size_t k, spans = 0;
    long size;
    int p, positive = 1, even = 1;
    if (!m) {
        CHECK(0, "model");
        goto out;
    }
    for (k = 0; k < 3; k++) step(m, k);
    CHECK(mirror_phase_times_get(m, (size_t)-1, &pt) == MIRROR_OK && pt.steps == 0 && m->trace.count == 0,
          "timing off: nothing recorded");
    CHECK(mirror_timing(m, 4) == MIRROR_OK, "timing on, 4 steps kept: %s", mirror_model_error(m));
    for (k = 0; k < 10; k++) step(m, k);
    CHECK(m->trace.count == 4 * 2 * MIRROR_PHASE_COUNT, "10 steps, 4 kept: %zu spans of 40", m->trace.count);
    CHECK(mirror_phase_times_get(m, (size_t)-1, &pt) == MIRROR_OK && pt.steps == 4 &&
              mirror_phase_times_get(m, 1, &r1) == MIRROR_OK,
          "phase times over the 4 kept steps (%zu)", pt.steps);
    for (p = 0; p < MIRROR_PHASE_COUNT; p++) {
        positive &= pt.seconds[p] > 0.0 && r1.seconds[p] > 0.0;
        even &= pt.imbalance[p] >= 1.0 - 1e-12;
    }
    CHECK(positive && even, "every phase took time on each replica, and the slowest is at least the mean "
                            "(forward %.3g ms, imbalance %.3g)", 1e3 * pt.seconds[MIRROR_PHASE_FORWARD],
          pt.imbalance[MIRROR_PHASE_FORWARD]);
    CHECK(mirror_phase_times_get(m, 2, &pt) == MIRROR_ERR_ARGUMENT, "replica 2 of 2 is refused");
    path_in(path, "trace.json");
    CHECK(mirror_trace_write(m, path) == MIRROR_OK, "the trace written: %s", mirror_model_error(m));
    if ((f = fopen(path, "rb")) != NULL) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, 0, SEEK_SET);
        text = (char *)calloc((size_t)size + 1, 1);
        if (text && fread(text, 1, (size_t)size, f) != (size_t)size) text[0] = '\0';
        fclose(f);
    }
    for (k = 0; text && text[k]; k++) spans += !strncmp(text + k, "\"ph\":\"X\"", 8);
    CHECK(text && !strncmp(text, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 39) && strstr(text, "\"replica 1\"") &&
              strstr(text, "\"name\":\"all-reduce\"") && strstr(text, "\"step\":13") && spans == 40 &&
              !strcmp(text + strlen(text) - 3, "]}\n"),
          "a Chrome trace: 40 spans on two replica tracks, steps up to 13");
    free(text);
    CHECK(mirror_timing(m, 0) == MIRROR_OK && m->trace.count == 0 && !m->trace.spans, "timing off again: the ring freed");
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 1, fd.batch = 16, fd.progress = MIRROR_PROGRESS_NONE;
    fd.trace = path_in(path, "fit-trace.json");
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && access(path, F_OK) == 0 && !m->trace.steps,
          "fit writes its trace and leaves timing as it found it: %s", mirror_model_error(m));
    {
        char below[300];
        FILE *f = fopen(path_in(path, "a-file"), "w"); /* a directory that cannot be made: below a file */
        if (f) fclose(f);
        snprintf(below, sizeof below, "%s/t.json", path);
        fd.trace = below;
        CHECK(f && mirror_fit(m, &fd, NULL) == MIRROR_ERR_ARGUMENT && mirror_optimizer_steps(m) == 19,
              "a trace that cannot be written (below a file) fails before the first step: %s", mirror_model_error(m));
    }
out:
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* Bad schedules are refused when the model is created; a callback's bad
   rate fails its step and changes nothing. */
static void test_refused(void)
{
    mirror_strategy *s = checked_strategy("cpu", 2);
    mirror_optimizer_desc o;
    mirror_error err = {0, ""};
    mirror_model *m;
    float *before, *after;
    size_t n;
    memset(&o, 0, sizeof o);
    o.kind = MIRROR_OPT_ADAM, o.schedule = MIRROR_LR_STEP;
    CHECK(!model(s, &o, &err) && err.code == MIRROR_ERR_ARGUMENT && strstr(err.message, "step_size"),
          "step decay without step_size: %s", err.message);
    o.step_size = 10, o.gamma = 1.5f;
    CHECK(!model(s, &o, &err) && strstr(err.message, "gamma"), "a gamma above 1: %s", err.message);
    o.schedule = MIRROR_LR_COSINE, o.warmup = 10, o.total_steps = 10;
    CHECK(!model(s, &o, &err) && strstr(err.message, "total_steps"), "cosine ending inside the warmup: %s",
          err.message);
    o.total_steps = 20, o.lr = 0.01f, o.min_lr = 0.1f;
    CHECK(!model(s, &o, &err) && strstr(err.message, "min_lr"), "a min_lr above lr: %s", err.message);
    o.schedule = MIRROR_LR_CALLBACK;
    CHECK(!model(s, &o, &err) && strstr(err.message, "lr_fn"), "a callback schedule without a callback: %s",
          err.message);
    o.schedule = MIRROR_LR_CONSTANT, o.clip_norm = -1.0f;
    CHECK(!model(s, &o, &err) && strstr(err.message, "clip_norm"), "a negative clip_norm: %s", err.message);
    o.clip_norm = 0.0f;
    o.schedule = (mirror_lr_schedule)9;
    CHECK(!model(s, &o, &err) && strstr(err.message, "unknown schedule"), "an unknown schedule: %s", err.message);
    o.schedule = MIRROR_LR_CALLBACK, o.lr_fn = nan_at_three, o.warmup = 0;
    m = model(s, &o, &err);
    CHECK(m != NULL, "a callback schedule: %s", err.message);
    if (m) {
        n = mirror_num_parameters(m);
        before = (float *)malloc(n * sizeof(float)), after = (float *)malloc(n * sizeof(float));
        CHECK(step(m, 0) == MIRROR_OK && step(m, 1) == MIRROR_OK, "steps 1 and 2");
        mirror_get_parameters(m, 0, before, n);
        CHECK(step(m, 2) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "step 3: the learning-rate callback"),
              "a NaN rate fails step 3: %s", mirror_model_error(m));
        mirror_get_parameters(m, 1, after, n);
        CHECK(!memcmp(before, after, n * sizeof(float)) && mirror_optimizer_steps(m) == 2,
              "and changes nothing: 2 steps, the same parameters");
        free(before), free(after);
        mirror_model_destroy(m);
    }
    mirror_strategy_destroy(s);
}

/* A cosine schedule with a warmup through a checkpoint: 5 + 7 steps end
   bitwise where 12 straight steps end, and fit logs the last rate. */
static void test_resume(void)
{
    mirror_strategy *s = checked_strategy("cpu", 2);
    mirror_optimizer_desc o;
    mirror_model *a, *b;
    mirror_fit_desc fd;
    mirror_epoch_log log;
    char path[256];
    float *pa, *pb;
    size_t n, k;
    memset(&o, 0, sizeof o);
    o.kind = MIRROR_OPT_ADAM, o.lr = 0.01f, o.schedule = MIRROR_LR_COSINE, o.warmup = 3, o.total_steps = 12;
    a = model(s, &o, NULL), b = model(s, &o, NULL);
    if (!a || !b) {
        CHECK(0, "models");
        goto out;
    }
    n = mirror_num_parameters(a);
    for (k = 0; k < 12; k++) step(a, k);
    for (k = 0; k < 5; k++) step(b, k);
    path_in(path, "cosine.ckpt");
    CHECK(mirror_checkpoint_save(b, path, NULL, 1) == MIRROR_OK, "save after 5 steps: %s", mirror_model_error(b));
    mirror_model_destroy(b);
    b = model(s, &o, NULL);
    CHECK(b && mirror_checkpoint_load(b, path, 0, NULL) == MIRROR_OK &&
              mirror_current_lr(b) == mirror_hd_schedule_lr(MIRROR_LR_COSINE, 0.01f, 6, 3, 0, 0.1f, 12, 0, 0),
          "loaded: step 6's rate is next");
    for (k = 5; b && k < 12; k++) step(b, k);
    pa = (float *)malloc(n * sizeof(float)), pb = (float *)malloc(n * sizeof(float));
    mirror_get_parameters(a, 0, pa, n);
    if (b) mirror_get_parameters(b, 0, pb, n);
    CHECK(b && !memcmp(pa, pb, n * sizeof(float)), "5 steps, a checkpoint, 7 steps: bitwise the 12 straight steps");
    free(pa), free(pb);
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 1, fd.batch = BATCH, fd.progress = MIRROR_PROGRESS_NONE;
    CHECK(b && mirror_fit(b, &fd, &log) == MIRROR_OK &&
              log.lr == mirror_hd_schedule_lr(MIRROR_LR_COSINE, 0.01f, 20, 3, 0, 0.1f, 12, 0, 0),
          "fit's log: the rate of its last step (step 20: min_lr %g)", log.lr);
out:
    mirror_model_destroy(a);
    mirror_model_destroy(b);
    mirror_strategy_destroy(s);
}

int main(void)
{
    size_t r;
    if (!make_root("optim")) return 1;
    small_digits(&data, SAMPLES, 5, SIDE, 2);
    test_sgd();
    test_adam();
    test_optimizer_steps();
    test_formula();
    for (r = 1; r <= 3; r++) {
        test_applied(r, MIRROR_LR_STEP);
        test_applied(r, MIRROR_LR_COSINE);
        test_applied(r, MIRROR_LR_CALLBACK);
    }
    for (r = 1; r <= 3; r++) {
        test_clip(r, MIRROR_PRECISION_FP32, 0.05f);
        test_clip(r, MIRROR_PRECISION_FP32, 100.0f);
        test_clip(r, MIRROR_PRECISION_FP16, 0.05f);
    }
    for (r = 1; r <= 3; r++) test_accumulate(r);
    test_fit_accumulate();
    test_augment();
    test_on_step();
    test_timing();
    test_refused();
    test_resume();
    mirror_dataset_free(&data);
    remove_tree(root);
    return check_done("test_optim");
}
