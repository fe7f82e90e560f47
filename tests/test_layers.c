/* test_layers.c - the numerics: finite-difference gradient checks of every
   layer kind and both losses through the public API (one table of cases,
   fd_cases, with a row for every kind), the table of layer kinds whole,
   the shared math (losses, activations, pooling) against
   hand-computed values, dropout, the GEMM against a naive reference, im2col/col2im adjointness
   and maxpool on a hand-made example. Deterministic: fixed seeds only. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers.h"

// >>helpers ------------------------------------------------------------------

static uint64_t rng_state = 0x5EEDF00Dull;

static uint64_t rng_next(void) { return mirror__next(&rng_state); }

static float frand(float lo, float hi) { return uniform_in(&rng_state, lo, hi); }

/* A setup failure: counted, reported with the result line, and the end. */
static void die(const char *what, const char *detail)
{
    CHECK(0, "%s: %s", what, detail);
    exit(check_done("test_layers") | 1);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die("malloc", "out of memory");
    return p;
}

// >>finite differences ---------------------------------------------------------
/* A model, its global batch (labels or targets) and, for MSE, the same data
   as a dataset so that the loss goes through mirror_evaluate too. */

typedef struct fd_case {
    const char *name;
    mirror_strategy *s;
    mirror_model *m;
    size_t n, in, out; /* batch, input and output floats per sample */
    float *x, *targets;
    int32_t *labels;
    mirror_batch b;
    mirror_dataset ds; /* MSE: x and targets, target_dim = out (not owned) */
    int use_ds;
    int train; /* the loss of a training pass (batchnorm's batch statistics), by steps at lr 0 */
    size_t sig_cap; /* length of the kink signature (fd_signature) */
    double abs_tol, rel_tol; /* of the gradient check */
} fd_case;

/* The learning rate of the training-pass cases: 0 while the loss is
   measured, the desc's while fd_analytic takes its step. */
static float fd_rate;
static float fd_rate_fn(void *user, uint64_t step)
{
    (void)user, (void)step;
    return fd_rate;
}

/* The tolerance of a gradient check, float32 forward and central
   differences (FD_TOL: absolute, relative), and the step. */
#define FD_TOL 2e-3, 2e-2
#define FD_H 1e-3f

static int fd_agrees(const fd_case *c, double analytic, double numeric)
{
    return close_to(analytic, numeric, c->abs_tol, c->rel_tol);
}

/* The kink signature of the last forward pass (replica 0 holds the whole
   batch with cpu:1): every relu's y > 0 and every maxpool argmax. Two
   evaluations with the same signature lie in the same linear piece of every
   relu and maxpool, where the loss is smooth and differences are valid. */
static size_t fd_signature(fd_case *c, int32_t *out)
{
    mirror_model *m = c->m;
    const mirror__replica *r = &m->rep[0];
    size_t i, j, k = 0, S = r->count;
    for (i = 0; i < m->nlayers; i++) {
        const mirror__layer *l = &m->layers[i];
        size_t len = S * mirror__out_size(l);
        if (l->kind == MIRROR__RELU) {
            const float *y = (const float *)(r->acts + l->out_off);
            for (j = 0; j < len; j++, k++)
                if (out) out[k] = y[j] > 0.0f;
        } else if (l->kind == MIRROR__MAXPOOL2D) {
            const int32_t *arg = (const int32_t *)(r->acts + l->arg_off);
            for (j = 0; j < len; j++, k++)
                if (out) out[k] = arg[j];
        }
    }
    return k;
}

/* Mean loss of the batch at the current parameters; the signature into sig. */
static double fd_loss(fd_case *c, int32_t *sig)
{
    mirror_metrics met;
    int rc;
    memset(&met, 0, sizeof met);
    fd_rate = 0.0f;
    if (c->train)
        rc = mirror_train_step(c->m, &c->b, &met);
    else
        rc = c->use_ds ? mirror_evaluate(c->m, &c->ds, 0, &met) : mirror_evaluate_batch(c->m, &c->b, &met);
    if (rc || met.count != c->n) {
        fprintf(stderr, "%s: evaluation failed: %s\n", c->name, mirror_model_error(c->m));
        return NAN;
    }
    if (sig) fd_signature(c, sig);
    return met.loss_sum / (double)met.count;
}

/* Builds c->m from its layers (already added) and the data. */
static void fd_setup(fd_case *c, size_t n, int mse)
{
    mirror_model *m = c->m;
    size_t i, j;
    int rc = mirror_model_build(m);
    if (rc) die(c->name, mirror_model_error(m));
    if (m->sizes.col || m->pass.keep_cols) /* it convolves: the build's im2col path is the one checked */
        CHECK(m->pass.keep_cols == (MIRROR_CPU_KEEP_COLS > 0), "%s: the convolutions %s their im2col for backward", c->name,
              MIRROR_CPU_KEEP_COLS > 0 ? "keep" : "redo");
    c->n = n;
    c->in = m->sizes.in;
    c->out = mirror_num_outputs(m);
    c->x = (float *)xmalloc(n * c->in * sizeof(float));
    for (i = 0; i < n * c->in; i++) c->x[i] = frand(-1.0f, 1.0f);
    memset(&c->b, 0, sizeof c->b);
    c->b.x = c->x;
    c->b.n = n;
    c->b.rows = n;
    if (mse) {
        c->targets = (float *)xmalloc(n * c->out * sizeof(float));
        for (i = 0; i < n * c->out; i++) c->targets[i] = frand(-1.0f, 1.0f);
        c->b.targets = c->targets;
        memset(&c->ds, 0, sizeof c->ds);
        c->ds.x = c->x;
        c->ds.targets = c->targets;
        c->ds.count = n;
        c->ds.channels = m->desc.channels;
        c->ds.height = m->desc.height;
        c->ds.width = m->desc.width;
        c->ds.target_dim = c->out;
        c->use_ds = 1;
    } else {
        c->labels = (int32_t *)xmalloc(n * sizeof(int32_t));
        for (i = 0; i < n; i++) c->labels[i] = (int32_t)((i * 7 + 3) % c->out);
        c->b.labels = c->labels;
    }
    /* Non-zero biases, so every bias matters and the pieces are not symmetric. */
    {
        size_t np = mirror_num_parameters(m), at = 0; /* the values packed: each layer's W, then its b */
        float *p = (float *)xmalloc(np * sizeof(float));
        mirror_get_parameters(m, 0, p, np);
        for (i = 0; i < m->nlayers; at += m->layers[i].n_w + m->layers[i].n_b, i++)
            for (j = 0; j < m->layers[i].n_b; j++) p[at + m->layers[i].n_w + j] = frand(-0.2f, 0.2f);
        mirror_set_parameters(m, p, np);
        free(p);
    }
    fd_loss(c, NULL);
    c->sig_cap = fd_signature(c, NULL);
}

/* One gradient case: the input shape, the loss, the model's seed (its
   data's too), the batch, the layers (as helpers.h reads them) and the
   tolerance. With `train`, the loss is that of a training pass (batchnorm
   normalises by the batch), measured by SGD steps at a learning rate of 0;
   with `vacuity`, the case also shows that the check rejects wrong
   gradients. */
typedef struct fd_spec {
    const char *name;
    size_t c, h, w;
    mirror_loss loss;
    uint64_t seed;
    size_t batch;
    int train, vacuity;
    const char *layers;
    double abs_tol, rel_tol;
} fd_spec;

static fd_case fd_begin(const fd_spec *spec)
{
    fd_case fc;
    mirror_model_desc md;
    mirror_error err = {0, ""};
    memset(&fc, 0, sizeof fc);
    fc.name = spec->name;
    fc.abs_tol = spec->abs_tol, fc.rel_tol = spec->rel_tol;
    if (!(fc.s = new_strategy("cpu:1", 0))) die(spec->name, "strategy");
    md = model_desc(fc.s, spec->c, spec->h, spec->w, spec->batch, spec->seed);
    md.loss = spec->loss;
    md.optimizer.kind = MIRROR_OPT_SGD;
    md.optimizer.lr = 0.05f;
    if (spec->train) md.optimizer.schedule = MIRROR_LR_CALLBACK, md.optimizer.lr_fn = fd_rate_fn;
    if (!(fc.m = new_model(&md, &err, "%s", spec->layers))) die(spec->name, err.message);
    fc.train = spec->train;
    rng_state = spec->seed; /* the case's data, whatever ran before */
    return fc;
}

static void fd_end(fd_case *c)
{
    mirror_model_destroy(c->m);
    mirror_strategy_destroy(c->s);
    free(c->x);
    free(c->targets);
    free(c->labels);
}

/* The analytic gradient of the mean loss: one SGD step, then the reduced
   gradient; parameters restored afterwards. Also checks that the step's
   reported loss is the evaluated one and that SGD moved w by -lr g. */
static void fd_analytic(fd_case *c, float *g)
{
    mirror_model *m = c->m;
    size_t np = mirror_num_parameters(m), i, bad = 0;
    float *p0 = (float *)xmalloc(np * sizeof(float)), *p1 = (float *)xmalloc(np * sizeof(float));
    float lr = m->desc.optimizer.lr;
    mirror_metrics met;
    double base = fd_loss(c, NULL);
    mirror_get_parameters(m, 0, p0, np);
    fd_rate = lr;
    CHECK(mirror_train_step(m, &c->b, &met) == MIRROR_OK, "%s: train step: %s", c->name, mirror_model_error(m));
    fd_rate = 0.0f;
    CHECK(met.count == c->n, "%s: train step counted %zu of %zu samples", c->name, met.count, c->n);
    CHECK(close_to(met.loss_sum / (double)met.count, base, 1e-6, 1e-6),
          "%s: train step loss %.9g, evaluated loss %.9g", c->name, met.loss_sum / (double)met.count, base);
    mirror_get_gradients(m, 0, g, np);
    mirror_get_parameters(m, 0, p1, np);
    for (i = 0; i < np; i++)
        if (!close_to(p1[i], (double)p0[i] - (double)lr * g[i], 1e-6, 1e-6)) bad++;
    CHECK(bad == 0, "%s: %zu of %zu parameters are not w - lr g after the SGD step", c->name, bad, np);
    mirror_set_parameters(m, p0, np);
    free(p0);
    free(p1);
}

/* Central differences of the mean loss for every parameter, each taken
   inside one linear piece of the relus and maxpools: when a side crosses a
   kink, the one-sided difference on the other side; when both do, a smaller
   step. Returns how many parameters found no kink-free step. */
static size_t fd_numeric(fd_case *c, double *num)
{
    mirror_model *m = c->m;
    size_t np = mirror_num_parameters(m), i, unresolved = 0, one_sided = 0, smaller = 0;
    float *p = (float *)xmalloc(np * sizeof(float));
    int32_t *s0 = (int32_t *)xmalloc((c->sig_cap + 1) * sizeof(int32_t));
    int32_t *sp = (int32_t *)xmalloc((c->sig_cap + 1) * sizeof(int32_t));
    int32_t *sm = (int32_t *)xmalloc((c->sig_cap + 1) * sizeof(int32_t));
    size_t sig_bytes = c->sig_cap * sizeof(int32_t);
    double l0;
    mirror_get_parameters(m, 0, p, np);
    l0 = fd_loss(c, s0);
    for (i = 0; i < np; i++) {
        float w = p[i], h = FD_H;
        int tries, done = 0;
        for (tries = 0; tries < 4 && !done; tries++, h *= 0.25f) {
            float wp = w + h, wm = w - h;
            double hp = (double)wp - (double)w, hm = (double)w - (double)wm, lp, lm;
            int okp, okm;
            p[i] = wp;
            mirror_set_parameters(m, p, np);
            lp = fd_loss(c, sp);
            p[i] = wm;
            mirror_set_parameters(m, p, np);
            lm = fd_loss(c, sm);
            p[i] = w;
            okp = memcmp(sp, s0, sig_bytes) == 0;
            okm = memcmp(sm, s0, sig_bytes) == 0;
            if (okp && okm)
                num[i] = (lp - lm) / (hp + hm);
            else if (okp)
                num[i] = (lp - l0) / hp, one_sided++;
            else if (okm)
                num[i] = (l0 - lm) / hm, one_sided++;
            else
                continue;
            done = 1;
            if (tries) smaller++;
        }
        if (!done) {
            num[i] = NAN;
            unresolved++;
        }
    }
    mirror_set_parameters(m, p, np);
    printf("  %s: %zu parameters, %zu one-sided, %zu with a smaller step, %zu unresolved\n", c->name, np,
           one_sided, smaller, unresolved);
    free(p);
    free(s0);
    free(sp);
    free(sm);
    return unresolved;
}

/* Every parameter: analytic against numeric. With `vacuity`, also shows the
   comparison rejects a gradient scaled by 1.1 and one wrong element. */
static void fd_check(fd_case *c, int vacuity)
{
    size_t np = mirror_num_parameters(c->m), i, worst = 0, scaled_bad = 0;
    float *g = (float *)xmalloc(np * sizeof(float));
    double *num = (double *)xmalloc(np * sizeof(double)), worst_err = 0.0;
    size_t unresolved;
    fd_analytic(c, g);
    unresolved = fd_numeric(c, num);
    CHECK(unresolved == 0, "%s: %zu parameters cross a relu/maxpool kink at every step size", c->name,
          unresolved);
    for (i = 0; i < np; i++) {
        double err = fabs((double)g[i] - num[i]);
        if (isnan(num[i])) continue;
        CHECK(fd_agrees(c, g[i], num[i]), "%s: parameter %zu: analytic %.6g, numeric %.6g", c->name, i,
              (double)g[i], num[i]);
        if (err > worst_err) worst_err = err, worst = i;
        if (!fd_agrees(c, 1.1 * g[i], num[i])) scaled_bad++;
    }
    printf("  %s: worst |analytic - numeric| %.3g at parameter %zu (analytic %.6g)\n", c->name, worst_err,
           worst, (double)g[worst]);
    if (vacuity) {
        size_t big = 0;
        for (i = 1; i < np; i++)
            if (fabs(g[i]) > fabs(g[big])) big = i;
        CHECK(scaled_bad > np / 4, "%s: the check rejects only %zu of %zu gradients scaled by 1.1", c->name,
              scaled_bad, np);
        CHECK(!fd_agrees(c, g[big] + 0.01 + 0.05 * fabs(g[big]), num[big]),
              "%s: the check accepts a wrong gradient at parameter %zu", c->name, big);
        printf("  %s: gradient*1.1 rejected at %zu of %zu parameters\n", c->name, scaled_bad, np);
    }
    free(g);
    free(num);
}

/* Every layer and both losses, in the stacks that reach each backward
   path: name, input c x h x w, loss, seed, batch, train, vacuity, layers, tolerance. */
#define CE MIRROR_LOSS_SOFTMAX_CE
#define MSE MIRROR_LOSS_MSE
static const fd_spec fd_cases[] = {
    /* conv(s1,p1) -> relu -> maxpool(2,2) -> flatten -> dense -> relu -> dense */
    {"cnn/ce", 2, 6, 6, CE, 11, 4, 0, 1,
     "conv 3 3 1 1, relu, maxpool 2 2, flatten, dense 5, relu, dense 4", FD_TOL},
    /* conv -> relu -> conv(k3,s2,p0; col2im with stride) -> relu ->
       overlapping maxpool(2,1) -> flatten -> dense, MSE through a dataset */
    {"cnn2/mse", 2, 7, 7, MSE, 12, 5, 0, 1,
     "conv 3 3 1 1, relu, conv 4 3 2 0, relu, maxpool 2 1, flatten, dense 3", FD_TOL},
    /* conv(k3,s2,p0) first on a non-square 7x6 input -> 3x2 */
    {"conv-s2/ce", 2, 7, 6, CE, 13, 3, 0, 0, "conv 3 3 2 0, relu, flatten, dense 3", FD_TOL},
    /* maxpool before the first weighted layer, then conv(k5,s1,p2) on 4x5 */
    {"pool-conv-k5/mse", 1, 5, 6, MSE, 14, 3, 0, 0, "maxpool 2 1, conv 2 5 1 2, relu, flatten, dense 2", FD_TOL},
    /* conv(k3,s2,p2): padding wider than the stride, on 3x5x4 */
    {"conv-s2-p2/ce", 3, 5, 4, CE, 15, 4, 0, 0, "conv 2 3 2 2, relu, conv 2 2 1 0, flatten, dense 3", FD_TOL},
    /* plain dense MLPs */
    {"mlp/ce", 7, 1, 1, CE, 16, 5, 0, 1, "dense 6, relu, dense 5, relu, dense 3", FD_TOL},
    /* the smooth activations */
    {"smooth-mlp/mse", 5, 1, 1, MSE, 18, 4, 0, 0, "dense 6, tanh, dense 5, gelu, dense 3, sigmoid", FD_TOL},
    {"smooth-cnn/ce", 2, 5, 5, CE, 19, 3, 0, 0, "conv 3 3 1 1, gelu, conv 2 3 2 0, tanh, flatten, dense 3", FD_TOL},
    /* average pooling, overlapping (2, 1) then strided (3, 2) */
    {"avgpool/ce", 2, 6, 6, CE, 20, 3, 0, 0,
     "conv 3 3 1 1, gelu, avgpool 2 1, avgpool 3 2, flatten, dense 3", FD_TOL},
    /* global average pooling of a non-square plane */
    {"global-avgpool/mse", 2, 5, 4, MSE, 21, 3, 0, 0, "conv 4 3 1 1, relu, global_avgpool, flatten, dense 2", FD_TOL},
    /* batchnorm after each convolution (BatchNorm2d) and a strided one */
    {"bn-cnn/ce", 2, 6, 6, CE, 22, 4, 1, 1,
     "conv 3 3 1 1, batchnorm, relu, conv 2 3 2 0, batchnorm, flatten, dense 3", FD_TOL},
    /* batchnorm of a flat input (BatchNorm1d) first, then between dense layers */
    {"bn-mlp/mse", 4, 1, 1, MSE, 23, 5, 1, 0, "batchnorm, dense 6, batchnorm local, tanh, dense 2", FD_TOL},
    /* residual blocks: an identity block with batchnorm inside, then a
       projecting one (4 -> 6 channels, stride 2), global pooling */
    {"resnet/ce", 2, 6, 6, CE, 24, 4, 1, 1,
     "conv 4 3 1 1, relu, "
     "residual, conv 4 3 1 1, batchnorm, relu, conv 4 3 1 1, residual_end, relu, "
     "residual, conv 6 3 2 1, gelu, residual_end, global_avgpool, flatten, dense 3", FD_TOL},
    /* a block at the input, before any weight (no input gradient through
       its shortcut), projecting 1 -> 3 channels; then an empty block (2x) */
    {"residual-first/mse", 1, 5, 5, MSE, 25, 3, 0, 0,
     "residual, conv 3 3 1 1, tanh, residual_end, residual, residual_end, flatten, dense 2", FD_TOL},
    {"mlp/mse", 4, 1, 1, MSE, 17, 4, 0, 0, "dense 5, relu, dense 2", FD_TOL},
};
#undef CE
#undef MSE

/* Every layer kind has a row: a new kind without one fails here. Dropout
   alone is checked apart (test_dropout): its masks change with the step. */
static void test_gradients(void)
{
    size_t i, k, seen[MIRROR__KINDS] = {0};
    printf("finite differences:\n");
    for (i = 0; i < sizeof fd_cases / sizeof *fd_cases; i++) {
        fd_case c = fd_begin(&fd_cases[i]);
        fd_setup(&c, fd_cases[i].batch, fd_cases[i].loss == MIRROR_LOSS_MSE);
        for (k = 0; k < c.m->nlayers; k++) seen[c.m->layers[k].kind]++;
        fd_check(&c, fd_cases[i].vacuity);
        fd_end(&c);
    }
    for (k = 1; k < MIRROR__KINDS; k++)
        CHECK(seen[k] || k == MIRROR__DROPOUT, "finite differences: layer kind %s is in no row of fd_cases",
              mirror__kinds[k].name);
}

/* The table of layer kinds: entry k is kind k (C++ takes no array
   designators: the order of the entries is the only key), and each entry
   is whole: a shape rule, its way back from the description it writes
   (as many arguments as it writes), and with parameters their tensors'
   names, W's shape and their initialisation. */
static void test_kind_table(void)
{
    size_t k, j;
    for (k = 1; k < MIRROR__KINDS; k++) {
        const mirror__kind_info *e = &mirror__kinds[k];
        mirror__layer l;
        char args[128] = "";
        size_t nargs = 0;
        int params = e->tensors[0] != NULL;
        memset(&l, 0, sizeof l);
        l.kind = (mirror__kind)k;
        if (e->describe) e->describe(&l, args, sizeof args);
        for (j = 0; args[j]; j++) nargs += args[j] == '(' || args[j] == ',';
        CHECK(e->kind == (mirror__kind)k && e->name && e->shape && e->described,
              "kind table: entry %zu is kind %d (%s), with a shape rule and a way back from its description", k,
              (int)e->kind, e->name ? e->name : "no name");
        CHECK(nargs == e->nargs, "kind table: %s writes %zu arguments (\"%s\") and reads %zu", e->name, nargs, args,
              e->nargs);
        CHECK(params == (e->tensors[1] != NULL) && params == (e->weight_shape != NULL) && params == (e->init != NULL),
              "kind table: %s names its W and b, shapes W and initialises them, or has no parameters", e->name);
        CHECK(!e->view || !e->forward, "kind table: %s is a view of its input and runs no forward", e->name);
    }
}

/* The reduced gradient is the mean over the global batch whatever the split,
   empty shards included: cpu:3 against cpu:1 on the same model and batch,
   with relu and max pooling, and with gelu, average pooling, tanh and
   sigmoid (smooth). */
static void test_gradient_replicas(int smooth)
{
    static const size_t batches[2] = {5, 2}; /* 2,2,1 and 1,1,0 */
    size_t bi;
    for (bi = 0; bi < 2; bi++) {
        mirror_strategy *s[2];
        mirror_model *m[2];
        float *g[2], *x, *t;
        size_t k, i, np = 0, n = batches[bi], bad = 0;
        mirror_batch b;
        for (k = 0; k < 2; k++) {
            mirror_model_desc md;
            if (!(s[k] = new_strategy(k ? "cpu:3" : "cpu:1", 0))) die("replicas", "strategy");
            md = model_desc(s[k], 2, 5, 5, 6, 21);
            md.loss = MIRROR_LOSS_MSE;
            m[k] = new_model(&md, NULL, smooth ? "conv 3 3 1 1, gelu, avgpool 2 1, flatten, dense 4, tanh, dense 2, sigmoid"
                                               : "conv 3 3 1 1, relu, maxpool 2 2, flatten, dense 2");
            if (!m[k]) die("replicas", "model");
            CHECK(mirror_model_build(m[k]) == MIRROR_OK, "replicas: build: %s", mirror_model_error(m[k]));
            np = mirror_num_parameters(m[k]);
            g[k] = (float *)xmalloc(np * sizeof(float));
        }
        x = (float *)xmalloc(n * 50 * sizeof(float));
        t = (float *)xmalloc(n * 2 * sizeof(float));
        for (i = 0; i < n * 50; i++) x[i] = frand(-1.0f, 1.0f);
        for (i = 0; i < n * 2; i++) t[i] = frand(-1.0f, 1.0f);
        memset(&b, 0, sizeof b);
        b.x = x;
        b.targets = t;
        b.n = b.rows = n;
        for (k = 0; k < 2; k++) {
            CHECK(mirror_train_step(m[k], &b, NULL) == MIRROR_OK, "replicas: step: %s", mirror_model_error(m[k]));
            mirror_get_gradients(m[k], k ? 2 : 0, g[k], np);
        }
        for (i = 0; i < np; i++)
            if (!close_to(g[1][i], g[0][i], 1e-6, 1e-5)) bad++;
        CHECK(bad == 0, "batch %zu%s: %zu of %zu gradients differ between cpu:3 and cpu:1", n,
              smooth ? " (gelu, tanh, sigmoid)" : "", bad, np);
        for (k = 0; k < 2; k++) {
            mirror_model_destroy(m[k]);
            mirror_strategy_destroy(s[k]);
            free(g[k]);
        }
        free(x);
        free(t);
    }
}

// >>dropout --------------------------------------------------------------------

static float zero_rate(void *user, uint64_t step)
{
    (void)user, (void)step;
    return 0.0f;
}

/* dense 6 -> relu -> dropout p -> dense 3 on 5 features, MSE; SGD with a
   learning rate of 0 (a callback), so that a step computes the training
   loss and gradient and changes nothing. */
static mirror_model *dropout_model(const char *devices, float p, int with_dropout, size_t max_batch)
{
    mirror_strategy *s = new_strategy(devices, 0);
    mirror_model_desc md = model_desc(s, 5, 0, 0, max_batch, 33);
    mirror_model *m;
    md.loss = MIRROR_LOSS_MSE;
    md.optimizer.kind = MIRROR_OPT_SGD;
    md.optimizer.schedule = MIRROR_LR_CALLBACK, md.optimizer.lr_fn = zero_rate;
    if (!s) die("dropout", "strategy");
    if (with_dropout)
        m = new_model(&md, NULL, "dense 6, relu, dropout %g, dense 3", (double)p);
    else
        m = new_model(&md, NULL, "dense 6, relu, dense 3");
    if (!m) die("dropout", "model");
    mirror_strategy_destroy(s); /* released with the model */
    if (mirror_model_build(m)) die("dropout", mirror_model_error(m));
    return m;
}

/* Where value i of the parameters (packed, as the API gives them) lies in
   the parameter arena: each tensor at its offset. */
static size_t slot_of(const mirror_model *m, size_t i)
{
    size_t k;
    for (k = 0; k < m->nlayers; i -= m->layers[k].n_w + m->layers[k].n_b, k++)
        if (i < m->layers[k].n_w + m->layers[k].n_b)
            return i < m->layers[k].n_w ? m->layers[k].w_off + i : m->layers[k].b_off + i - m->layers[k].n_w;
    return i;
}

/* The training loss at step s + 1 (the mask of that step) without moving
   on: a step at rate 0, then the step count put back. */
static double train_loss_at(mirror_model *m, const mirror_batch *b, uint64_t s)
{
    mirror_metrics met;
    m->steps = s;
    if (mirror_train_step(m, b, &met)) die("dropout", mirror_model_error(m));
    m->steps = s;
    return met.loss_sum / (double)met.count;
}

static void test_dropout(void)
{
    float x[8 * 5], t[8 * 3], *g, *p0, *p1;
    size_t i, n, zeros = 0, others = 0, bad = 0, k;
    mirror_batch b;
    mirror_model *m, *plain, *many, *one;
    double lo, hi;
    for (i = 0; i < 100000; i++) {
        float f = mirror_hd_dropout(12345, i / 100, i % 100, 0.3f);
        zeros += f == 0.0f;
        others += f != 0.0f && f != 1.0f / 0.7f;
    }
    CHECK(zeros > 29000 && zeros < 31000 && others == 0, "p 0.3: %zu of 100000 dropped, the rest times 1/0.7", zeros);
    for (i = 0, others = 0; i < 1000; i++) others += mirror_hd_dropout(i, i, i, 0.0f) != 1.0f;
    CHECK(others == 0, "p 0: nothing dropped, nothing scaled");
    CHECK(mirror_hd_dropout_key(1, 0, 5) != mirror_hd_dropout_key(1, 0, 6) &&
              mirror_hd_dropout_key(1, 0, 5) != mirror_hd_dropout_key(1, 1, 5) &&
              mirror_hd_dropout_key(1, 0, 5) == mirror_hd_dropout_key(1, 0, 5),
          "the key changes with the step and the layer, and only with them");

    for (i = 0; i < 8 * 5; i++) x[i] = frand(-1.0f, 1.0f);
    for (i = 0; i < 8 * 3; i++) t[i] = frand(-1.0f, 1.0f);
    memset(&b, 0, sizeof b);
    b.x = x, b.targets = t, b.n = b.rows = 8;

    /* Training-mode gradients by finite differences, with the mask of step 4. */
    m = dropout_model("cpu:1", 0.5f, 1, 8);
    n = mirror_num_parameters(m);
    g = (float *)xmalloc(n * sizeof(float));
    train_loss_at(m, &b, 3);
    mirror_get_gradients(m, 0, g, n);
    for (i = 0; i < n; i++) {
        float *w = &m->rep[0].params[slot_of(m, i)], keep = *w;
        *w = keep + FD_H, hi = train_loss_at(m, &b, 3);
        *w = keep - FD_H, lo = train_loss_at(m, &b, 3);
        *w = keep;
        if (!close_to(g[i], (hi - lo) / (2.0 * FD_H), FD_TOL)) bad++;
    }
    CHECK(bad == 0, "dropout 0.5 in training: %zu of %zu gradients disagree with finite differences of the "
                    "training loss under the same mask", bad, n);
    {
        mirror_metrics ev;
        double a = train_loss_at(m, &b, 3), c = train_loss_at(m, &b, 4);
        CHECK(mirror_evaluate_batch(m, &b, &ev) == MIRROR_OK && a != ev.loss_sum / 8.0 && a != c,
              "the training loss (%g at step 4, %g at step 5) is not the evaluation's (%g): masks drop, per step", a, c,
              ev.loss_sum / 8.0);
    }

    /* Evaluation passes the input: the same outputs as the model without it. */
    plain = dropout_model("cpu:1", 0.5f, 0, 8);
    p0 = (float *)xmalloc(8 * 3 * sizeof(float)), p1 = (float *)xmalloc(8 * 3 * sizeof(float));
    mirror_get_parameters(m, 0, g, n);
    mirror_set_parameters(plain, g, n);
    CHECK(mirror_predict(m, x, 8, p0) == MIRROR_OK && mirror_predict(plain, x, 8, p1) == MIRROR_OK &&
              !memcmp(p0, p1, 8 * 3 * sizeof(float)),
          "prediction with dropout: bitwise the model without it");
    free(p0), free(p1), free(g);
    mirror_model_destroy(plain);
    mirror_model_destroy(m);

    /* Any split: 3 replicas, and 3 replicas with micro-batches of 3, 3 and 2,
       against 1 replica: the same masks, the same gradients. */
    one = dropout_model("cpu:1", 0.4f, 1, 8);
    many = dropout_model("cpu:3", 0.4f, 1, 8);
    m = dropout_model("cpu:3", 0.4f, 1, 3);
    p0 = (float *)xmalloc(n * sizeof(float)), p1 = (float *)xmalloc(n * sizeof(float));
    for (k = 0, bad = 0; k < 3; k++) {
        mirror_batch micro[3];
        mirror_train_step(one, &b, NULL), mirror_train_step(many, &b, NULL);
        for (i = 0; i < 3; i++) {
            micro[i] = b;
            micro[i].x = x + 3 * i * 5, micro[i].targets = t + 3 * i * 3, micro[i].n = i < 2 ? 3 : 2;
        }
        mirror_train_steps(m, micro, 3, NULL);
        mirror_get_gradients(one, 0, p0, n);
        mirror_get_gradients(many, 2, p1, n);
        for (i = 0; i < n; i++) bad += !close_to(p1[i], p0[i], 1e-6, 1e-5);
        mirror_get_gradients(m, 1, p1, n);
        for (i = 0; i < n; i++) bad += !close_to(p1[i], p0[i], 1e-6, 1e-5);
    }
    CHECK(bad == 0, "dropout on 3 replicas, and on 3 replicas in micro-batches: the 1-replica gradients (%zu differ)",
          bad);
    CHECK(mirror_dropout(one, 0.5f) == MIRROR_ERR_STATE, "a layer after build: state error");
    free(p0), free(p1);
    mirror_model_destroy(one);
    mirror_model_destroy(many);
    mirror_model_destroy(m);
    {
        mirror_model_desc md;
        mirror_strategy *s = NULL;
        mirror_strategy_desc sd;
        memset(&sd, 0, sizeof sd), memset(&md, 0, sizeof md);
        sd.devices = "cpu:1";
        mirror_strategy_create(&sd, &s, NULL);
        md.strategy = s, md.channels = 4;
        mirror_model_create(&md, &m, NULL);
        CHECK(mirror_dropout(m, 1.0f) == MIRROR_ERR_ARGUMENT && mirror_dropout(m, -0.1f) == MIRROR_ERR_ARGUMENT,
              "p 1 and p -0.1 are refused: %s", mirror_model_error(m));
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
}

// >>shared math ----------------------------------------------------------------

static void test_softmax_ce(void)
{
    float dz[4], z[4];
    float loss;
    int correct = -1;
    size_t j;

    /* z = (1, 2, 3), y = 2: softmax = (0.0900306, 0.2447285, 0.6652410),
       loss = log(e^1 + e^2 + e^3) - 3 = 0.4076059644 */
    {
        static const float zz[3] = {1.0f, 2.0f, 3.0f};
        static const double sm[3] = {0.09003057317038046, 0.24472847105479764, 0.6652409557748219};
        loss = mirror_hd_softmax_ce_row(zz, 3, 2, 0.25f, dz, &correct, 0);
        CHECK(close_to(loss, 0.4076059644443803, 1e-6, 1e-6), "softmax_ce (1,2,3), y=2: loss %.9g", (double)loss);
        CHECK(correct == 1, "softmax_ce (1,2,3), y=2: correct %d", correct);
        for (j = 0; j < 3; j++)
            CHECK(close_to(dz[j], 0.25 * (sm[j] - (j == 2)), 1e-7, 1e-6), "softmax_ce (1,2,3): dz[%zu] = %.9g", j,
                  (double)dz[j]);
        loss = mirror_hd_softmax_ce_row(zz, 3, 0, 1.0f, dz, &correct, 0);
        CHECK(close_to(loss, 2.4076059644443803, 1e-6, 1e-6), "softmax_ce (1,2,3), y=0: loss %.9g", (double)loss);
        CHECK(correct == 0, "softmax_ce (1,2,3), y=0: correct %d", correct);
        CHECK(close_to(dz[0], sm[0] - 1.0, 1e-7, 1e-6) && close_to(dz[1], sm[1], 1e-7, 1e-6) &&
                  close_to(dz[2], sm[2], 1e-7, 1e-6),
              "softmax_ce (1,2,3), y=0: dz %.9g %.9g %.9g", (double)dz[0], (double)dz[1], (double)dz[2]);
    }
    /* Equal logits: loss log 4, dz = (1/4 - onehot) / count. */
    for (j = 0; j < 4; j++) z[j] = 0.5f;
    loss = mirror_hd_softmax_ce_row(z, 4, 1, 0.5f, dz, &correct, 0);
    CHECK(close_to(loss, 1.3862943611198906, 1e-6, 1e-6), "softmax_ce equal logits: loss %.9g", (double)loss);
    CHECK(dz[0] == 0.125f && dz[1] == -0.375f && dz[2] == 0.125f && dz[3] == 0.125f,
          "softmax_ce equal logits: dz %g %g %g %g", (double)dz[0], (double)dz[1], (double)dz[2], (double)dz[3]);
    CHECK(correct == 0, "softmax_ce equal logits, y=1: the first maximum is 0, correct %d", correct);
    loss = mirror_hd_softmax_ce_row(z, 4, 0, 0.5f, dz, &correct, 0);
    CHECK(correct == 1, "softmax_ce equal logits, y=0: correct %d", correct);

    /* The first maximum decides: z = (1, 3, 3, 2). */
    {
        static const float zz[4] = {1.0f, 3.0f, 3.0f, 2.0f};
        int c0, c1, c2, c3;
        mirror_hd_softmax_ce_row(zz, 4, 0, 1.0f, dz, &c0, 0);
        mirror_hd_softmax_ce_row(zz, 4, 1, 1.0f, dz, &c1, 0);
        mirror_hd_softmax_ce_row(zz, 4, 2, 1.0f, dz, &c2, 0);
        mirror_hd_softmax_ce_row(zz, 4, 3, 1.0f, dz, &c3, 0);
        CHECK(c0 == 0 && c1 == 1 && c2 == 0 && c3 == 0, "softmax_ce tie (1,3,3,2): correct %d %d %d %d", c0, c1,
              c2, c3);
    }
    /* Stability: huge logits give finite, exact answers. */
    {
        static const float zz[3] = {1000.0f, -1000.0f, 0.0f};
        loss = mirror_hd_softmax_ce_row(zz, 3, 0, 1.0f, dz, &correct, 0);
        CHECK(isfinite(loss) && fabsf(loss) <= 1e-6f, "softmax_ce (1000,-1000,0), y=0: loss %g", (double)loss);
        CHECK(isfinite(dz[0]) && isfinite(dz[1]) && isfinite(dz[2]) && fabsf(dz[0]) <= 1e-6f && dz[1] == 0.0f &&
                  fabsf(dz[2]) <= 1e-6f,
              "softmax_ce (1000,-1000,0), y=0: dz %g %g %g", (double)dz[0], (double)dz[1], (double)dz[2]);
        CHECK(correct == 1, "softmax_ce (1000,-1000,0), y=0: correct %d", correct);
        loss = mirror_hd_softmax_ce_row(zz, 3, 1, 0.5f, dz, &correct, 0);
        CHECK(loss == 2000.0f, "softmax_ce (1000,-1000,0), y=1: loss %g (want 2000)", (double)loss);
        CHECK(dz[0] == 0.5f && dz[1] == -0.5f && fabsf(dz[2]) <= 1e-30f,
              "softmax_ce (1000,-1000,0), y=1: dz %g %g %g", (double)dz[0], (double)dz[1], (double)dz[2]);
        CHECK(correct == 0, "softmax_ce (1000,-1000,0), y=1: correct %d", correct);
    }
    /* Large equal logits: the loss must be exact to an ulp of the loss, not
       of |z| (zmax + log(sum) - z[y] would round at 1000, error 3e-5). */
    {
        static const float zz[2] = {1000.0f, 1000.0f}, nn[3] = {-1000.0f, -1000.0f, -1000.0f};
        loss = mirror_hd_softmax_ce_row(zz, 2, 1, 1.0f, dz, &correct, 0);
        CHECK(close_to(loss, 0.6931471805599453, 1e-7, 1e-6) && dz[0] == 0.5f && dz[1] == -0.5f,
              "softmax_ce (1000,1000): loss %g dz %g %g", (double)loss, (double)dz[0], (double)dz[1]);
        loss = mirror_hd_softmax_ce_row(nn, 3, 2, 1.0f, dz, &correct, 0);
        CHECK(close_to(loss, 1.0986122886681098, 1e-7, 1e-6) && close_to(dz[0], 1.0 / 3.0, 1e-7, 1e-6) &&
                  close_to(dz[2], -2.0 / 3.0, 1e-7, 1e-6),
              "softmax_ce (-1000 x3): loss %g dz %g %g %g", (double)loss, (double)dz[0], (double)dz[1],
              (double)dz[2]);
    }
    /* Gradient rows sum to zero; against a double reference on random rows. */
    {
        int trial, bad = 0;
        for (trial = 0; trial < 50; trial++) {
            float zz[7], d[7];
            double mx = -1e30, sum = 0.0, ref, s = 0.0;
            int32_t y = (int32_t)(rng_next() % 7);
            for (j = 0; j < 7; j++) {
                zz[j] = frand(-20.0f, 20.0f);
                if (zz[j] > mx) mx = zz[j];
            }
            for (j = 0; j < 7; j++) sum += exp(zz[j] - mx);
            ref = mx + log(sum) - zz[y];
            loss = mirror_hd_softmax_ce_row(zz, 7, y, 1.0f / 3.0f, d, &correct, 0);
            if (!close_to(loss, ref, 1e-5, 1e-5)) bad++;
            for (j = 0; j < 7; j++) {
                double dref = (exp(zz[j] - mx) / sum - (j == (size_t)y)) / 3.0;
                if (!close_to(d[j], dref, 1e-7, 1e-5)) bad++;
                s += d[j];
            }
            if (fabs(s) > 1e-6) bad++;
        }
        CHECK(bad == 0, "softmax_ce: %d mismatches against the double reference on random rows", bad);
    }
}

static void test_mse(void)
{
    static const float z[3] = {1.0f, 2.0f, 3.0f}, t[3] = {0.0f, 2.0f, 5.0f};
    float dz[3], loss;
    /* errors (1, 0, -2): loss (1 + 0 + 4) / 3; dz = 2 e / 3 * inv_count */
    loss = mirror_hd_mse_row(z, t, 3, 0.5f, dz, 0);
    CHECK(close_to(loss, 5.0 / 3.0, 1e-7, 1e-6), "mse: loss %.9g (want 5/3)", (double)loss);
    CHECK(close_to(dz[0], 1.0 / 3.0, 1e-7, 1e-6) && dz[1] == 0.0f && close_to(dz[2], -2.0 / 3.0, 1e-7, 1e-6),
          "mse: dz %.9g %.9g %.9g (want 1/3 0 -2/3)", (double)dz[0], (double)dz[1], (double)dz[2]);
    loss = mirror_hd_mse_row(z, z, 3, 1.0f, dz, 0);
    CHECK(loss == 0.0f && dz[0] == 0.0f && dz[1] == 0.0f && dz[2] == 0.0f, "mse: z == t gives loss %g",
          (double)loss);
    {
        static const float z1 = -1.5f, t1 = 2.5f;
        loss = mirror_hd_mse_row(&z1, &t1, 1, 0.25f, dz, 0);
        CHECK(loss == 16.0f && dz[0] == -2.0f, "mse d=1: loss %g (want 16), dz %g (want -2)", (double)loss,
              (double)dz[0]);
    }
}

static void test_smooth(void)
{
    CHECK(mirror_hd_tanh(0.0f) == 0.0f && close_to(mirror_hd_tanh(1.0f), 0.761594156, 1e-7, 1e-6) &&
              mirror_hd_tanh(-50.0f) == -1.0f,
          "tanh values");
    CHECK(mirror_hd_sigmoid(0.0f) == 0.5f && close_to(mirror_hd_sigmoid(2.0f), 0.880797078, 1e-7, 1e-6) &&
              mirror_hd_sigmoid(-200.0f) == 0.0f && mirror_hd_sigmoid(200.0f) == 1.0f,
          "sigmoid values, saturating without NaN");
    CHECK(mirror_hd_gelu(0.0f) == 0.0f && close_to(mirror_hd_gelu(1.0f), 0.841344746, 1e-7, 1e-6) &&
              close_to(mirror_hd_gelu(-1.0f), -0.158655254, 1e-7, 1e-6) && mirror_hd_gelu(-20.0f) == 0.0f,
          "gelu values (PyTorch's exact GELU)");
    CHECK(close_to(mirror_hd_tanh_grad(0.5f, 2.0f), 1.5, 1e-7, 1e-6) &&
              close_to(mirror_hd_sigmoid_grad(0.25f, 2.0f), 0.375, 1e-7, 1e-6) &&
              close_to(mirror_hd_gelu_grad(0.0f, 2.0f), 1.0, 1e-7, 1e-6) &&
              close_to(mirror_hd_gelu_grad(1.0f, 1.0f), 1.0833155, 1e-6, 1e-5),
          "their gradients: 1 - y^2, y (1 - y), Phi(x) + x phi(x)");
    CHECK(mirror_hd_isnan(mirror_hd_tanh(NAN)) && mirror_hd_isnan(mirror_hd_sigmoid(NAN)) &&
              mirror_hd_isnan(mirror_hd_gelu(NAN)),
          "NaN stays NaN");
}

static void test_avgpool_math(void)
{
    static const float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; /* 3 x 4 */
    static const float dy[6] = {6, 12, 18, 24, 30, 36};                 /* 2 x 3: 2x2 windows, stride 1 */
    CHECK(mirror_hd_window_mean(x, 4, 2, 2, 0, 0, 0) == 3.5f && mirror_hd_window_mean(x, 4, 2, 2, 1, 2, 0) == 9.5f &&
              mirror_hd_window_mean(x, 4, 3, 4, 0, 0, 0) == 6.5f,
          "window means: 2x2 at (0,0) and (1,2), the whole plane");
    CHECK(mirror_hd_window_mean_grad(dy, 2, 3, 2, 2, 1, 0, 0, 0) == 1.5f &&
              mirror_hd_window_mean_grad(dy, 2, 3, 2, 2, 1, 1, 1, 0) == (6 + 12 + 24 + 30) / 4.0f &&
              mirror_hd_window_mean_grad(dy, 2, 3, 2, 2, 1, 2, 3, 0) == 9.0f,
          "window gradients: a corner in one window, a centre in four, the far corner in one");
    CHECK(mirror_hd_window_mean_grad(dy, 1, 2, 2, 2, 2, 2, 0, 0) == 0.0f &&
              mirror_hd_window_mean_grad(dy, 1, 2, 2, 2, 2, 1, 3, 0) == 3.0f,
          "stride 2 (1 x 2 windows of the 3 x 4 plane): the uncovered row gets nothing, an input its window's share");
}

static void test_relu(void)
{
    CHECK(mirror_hd_relu(2.5f) == 2.5f && mirror_hd_relu(-1.0f) == 0.0f && mirror_hd_relu(0.0f) == 0.0f &&
              mirror_hd_relu(1e-30f) == 1e-30f && mirror_hd_relu(-1e30f) == 0.0f,
          "relu values");
    CHECK(mirror_hd_relu_grad(2.5f, 3.0f) == 3.0f && mirror_hd_relu_grad(0.0f, 3.0f) == 0.0f &&
              mirror_hd_relu_grad(1e-30f, -7.0f) == -7.0f,
          "relu_grad values");
}

// >>gemm ---------------------------------------------------------------------

/* One GEMM case against a double reference; A, B padding holds NaN and C's
   padding a sentinel that must survive. */
static void gemm_case(float *ws, int ta, int tb, size_t m, size_t n, size_t k, size_t pad, float alpha, float beta)
{
    size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    size_t lda = ac + pad, ldb = bc + pad, ldc = n + pad + (pad ? 1 : 0);
    size_t i, j, p, bad = 0, nan_count = 0, pad_bad = 0;
    float *a = (float *)xmalloc((ar * lda + 1) * sizeof(float));
    float *b = (float *)xmalloc((br * ldb + 1) * sizeof(float));
    float *c = (float *)xmalloc((m * ldc + 1) * sizeof(float));
    float *c0 = (float *)xmalloc((m * ldc + 1) * sizeof(float));
    double worst = 0.0;
    for (i = 0; i < ar * lda; i++) a[i] = (i % lda) < ac ? frand(-1.0f, 1.0f) : NAN;
    for (i = 0; i < br * ldb; i++) b[i] = (i % ldb) < bc ? frand(-1.0f, 1.0f) : NAN;
    for (i = 0; i < m * ldc; i++) c[i] = (i % ldc) < n ? (beta == 0.0f ? NAN : frand(-1.0f, 1.0f)) : 12345.0f;
    memcpy(c0, c, m * ldc * sizeof(float));
    mirror__sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ws, NULL);
    for (i = 0; i < m; i++) {
        for (j = 0; j < n; j++) {
            double sum = 0.0, mag = 0.0, ref, tol;
            for (p = 0; p < k; p++) {
                double av = ta ? a[p * lda + i] : a[i * lda + p], bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                sum += av * bv;
                mag += fabs(av * bv);
            }
            ref = (double)alpha * sum;
            mag *= fabs((double)alpha);
            if (beta != 0.0f) {
                ref += (double)beta * c0[i * ldc + j];
                mag += fabs((double)beta * c0[i * ldc + j]);
            }
            tol = (double)(k + 4) * FLT_EPSILON * mag + 1e-30;
            if (isnan(c[i * ldc + j])) {
                nan_count++;
            } else if (fabs(c[i * ldc + j] - ref) > tol) {
                bad++;
            }
            if (mag > 0 && fabs(c[i * ldc + j] - ref) / mag > worst) worst = fabs(c[i * ldc + j] - ref) / mag;
        }
        for (j = n; j < ldc; j++) pad_bad += c[i * ldc + j] != 12345.0f;
    }
    CHECK(bad == 0 && nan_count == 0 && pad_bad == 0,
          "sgemm ta=%d tb=%d m=%zu n=%zu k=%zu pad=%zu alpha=%g beta=%g: %zu wrong, %zu NaN, %zu padding "
          "written (worst relative error %.3g)",
          ta, tb, m, n, k, pad, (double)alpha, (double)beta, bad, nan_count, pad_bad, worst);
    free(a);
    free(b);
    free(c);
    free(c0);
}

static void test_gemm(void)
{
    static const size_t sizes[][3] = {
        {1, 1, 1},    {7, 33, 1},  {1, 300, 7},   {33, 7, 300},  {130, 33, 7}, {7, 130, 300},
        {130, 7, 33}, {300, 1, 33}, {33, 130, 1}, {130, 33, 300}, {1, 1, 300}, {300, 7, 130},
        {2, 2100, 5}, {3, 2100, 260}, /* n > NC */
    };
    static const float alphas[3] = {1.0f, -0.75f, 2.5f}, betas[3] = {0.0f, 1.0f, 0.5f};
    float *ws = (float *)xmalloc(MIRROR__GEMM_WORKSPACE * sizeof(float));
    size_t si, cases = 0;
    int t;
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (t = 0; t < 4; t++, cases++)
            gemm_case(ws, t >> 1, t & 1, sizes[si][0], sizes[si][1], sizes[si][2], (si + (size_t)t) % 3 == 0 ? 0 : 3,
                      alphas[cases % 3], betas[(cases / 3 + si) % 3]);
    /* Every beta with every transpose on a size that crosses MC and KC. */
    for (si = 0; si < 3; si++)
        for (t = 0; t < 4; t++) gemm_case(ws, t >> 1, t & 1, 121, 17, 257, 2, 1.0f, betas[si]);
    /* k = 0: C = beta C (NaN cleared when beta = 0); alpha = 0 likewise. */
    for (si = 0; si < 3; si++) {
        gemm_case(ws, 0, 0, 5, 9, 0, 1, 1.0f, betas[si]);
        gemm_case(ws, 1, 1, 7, 3, 0, 0, -2.0f, betas[si]);
        gemm_case(ws, 0, 1, 6, 4, 3, 2, 0.0f, betas[si]);
    }
    /* m = 0 or n = 0: nothing is written. */
    {
        float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4}, c[4] = {7, 7, 7, 7};
        mirror__sgemm(0, 0, 0, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2, ws, NULL);
        mirror__sgemm(0, 0, 2, 0, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2, ws, NULL);
        CHECK(c[0] == 7 && c[1] == 7 && c[2] == 7 && c[3] == 7, "sgemm m=0 / n=0 wrote C");
    }
    /* A hand case: [1 2; 3 4] [5 6; 7 8] = [19 22; 43 50]; 2 * that - C. */
    {
        float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {1, 1, 1, 1};
        mirror__sgemm(0, 0, 2, 2, 2, 2.0f, a, 2, b, 2, -1.0f, c, 2, ws, NULL);
        CHECK(c[0] == 37 && c[1] == 43 && c[2] == 85 && c[3] == 99, "sgemm 2x2 hand case: %g %g %g %g",
              (double)c[0], (double)c[1], (double)c[2], (double)c[3]);
        c[0] = c[1] = c[2] = c[3] = 0;
        /* A^T B^T = (B A)^T: B A = [23 34; 31 46] */
        mirror__sgemm(1, 1, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2, ws, NULL);
        CHECK(c[0] == 23 && c[1] == 31 && c[2] == 34 && c[3] == 46, "sgemm 2x2 A^T B^T: %g %g %g %g", (double)c[0],
              (double)c[1], (double)c[2], (double)c[3]);
    }
    free(ws);
}

/* A layer's forward in one GEMM (the bias, per column as a dense layer's
   or per row as a convolution's, and the relu after it as the epilogue)
   gives the bits of the GEMM, bias_add and relu_forward one after the
   other: on shapes that take the transposed route, cross KC (the epilogue
   comes with the last block of the depth) and MC, and with C holding NaN
   before (overwritten) and a NaN bias (kept by the relu). */
static void test_gemm_bias(void)
{
    static const size_t sizes[][3] = {{1, 1, 1}, {7, 33, 1},    {1, 300, 7},   {33, 7, 300}, {130, 33, 7},
                                      {64, 10, 128}, {121, 17, 600}, {9, 130, 257}, {300, 7, 0}};
    const mirror__backend *be = &mirror__cpu_backend;
    size_t workspace, si;
    void *dev = be->open(NULL, 0, &workspace, NULL);
    int t, relu;
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (t = 0; t < 8; t++)
            for (relu = 0; relu < 2; relu++) {
                int ta = (t >> 1) & 1, tb = t & 1, per_row = t >> 2;
                size_t m = sizes[si][0], n = sizes[si][1], k = sizes[si][2], i, differ = 0, nb = per_row ? m : n;
                float *a = (float *)xmalloc((m * k + 1) * sizeof(float)), *b = (float *)xmalloc((k * n + 1) * sizeof(float));
                float *bias = (float *)xmalloc(nb * sizeof(float)), *want = (float *)xmalloc(m * n * sizeof(float));
                float *got = (float *)xmalloc(m * n * sizeof(float));
                for (i = 0; i < m * k; i++) a[i] = frand(-1.0f, 1.0f);
                for (i = 0; i < k * n; i++) b[i] = frand(-1.0f, 1.0f);
                for (i = 0; i < nb; i++) bias[i] = i == 1 ? NAN : frand(-1.0f, 1.0f);
                for (i = 0; i < m * n; i++) want[i] = got[i] = NAN;
                be->gemm(dev, ta, tb, m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, want, n, 0);
                if (per_row) be->bias_add(dev, want, bias, 1, m, n);
                else be->bias_add(dev, want, bias, m, n, 1);
                if (relu) be->relu_forward(dev, want, want, m * n);
                be->gemm_bias(dev, ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, bias, per_row, relu, got, n);
                for (i = 0; i < m * n; i++) differ += memcmp(&want[i], &got[i], sizeof(float)) != 0;
                CHECK(differ == 0 && (nb < 2 || isnan(got[per_row ? n : 1])),
                      "gemm_bias ta=%d tb=%d m=%zu n=%zu k=%zu per_row=%d relu=%d: %zu elements differ from gemm, "
                      "bias_add%s",
                      ta, tb, m, n, k, per_row, relu, differ, relu ? ", relu" : "");
                free(a), free(b), free(bias), free(want), free(got);
            }
    be->close(dev);
}

/* 16-bit storage on CPU replicas: with set_precision fp16 or bf16 each op
   reads and writes 16-bit buffers, and gives the bits of its fp32 loop on
   the operands widened, its results narrowed once (what a GPU kernel that
   loads and stores 16 bits computes). Checked op by op against a device
   in fp32 fed the widened values; a GEMM's weight gradient (grad) stays
   fp32. */
static uint16_t *narrowed(const float *x, size_t n, int f)
{
    uint16_t *h = (uint16_t *)xmalloc(n * sizeof(uint16_t));
    size_t i;
    for (i = 0; i < n; i++) h[i] = mirror_hd_narrow(x[i], f);
    return h;
}

static float *widened(const uint16_t *h, size_t n, int f)
{
    float *x = (float *)xmalloc(n * sizeof(float));
    size_t i;
    for (i = 0; i < n; i++) x[i] = mirror_hd_widen(h[i], f);
    return x;
}

/* Whether 16-bit got holds want (fp32) narrowed, bit for bit. */
static int holds(const uint16_t *got, const float *want, size_t n, int f)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (got[i] != mirror_hd_narrow(want[i], f)) return 0;
    return 1;
}

static void test_storage16(void)
{
    static const int formats[2] = {MIRROR_PRECISION_FP16, MIRROR_PRECISION_BF16};
    const mirror__backend *be = &mirror__cpu_backend;
    const size_t ns = 2, c = 3, h = 6, w = 5, k = 3, hw = h * w, nx = ns * c * hw, ncol = c * k * k * ns * hw;
    const size_t m = 13, n = 11, kk = 40;
    size_t ws, fi, i;
    void *d16 = be->open(NULL, 0, &ws, NULL), *d32 = be->open(NULL, 0, &ws, NULL);
    for (fi = 0; fi < 2; fi++) {
        int f = formats[fi];
        float *xf = (float *)xmalloc(nx * 4), *af = (float *)xmalloc(m * kk * 4), *bf = (float *)xmalloc(kk * n * 4);
        float *want = (float *)xmalloc(ncol * 4), *g32 = (float *)xmalloc(kk * n * 4), *gw = (float *)xmalloc(kk * n * 4);
        float *loss = (float *)xmalloc(m * 4), *loss16 = (float *)xmalloc(m * 4);
        int32_t *labels = (int32_t *)xmalloc(m * 4), *ok = (int32_t *)xmalloc(m * 4), *arg = (int32_t *)xmalloc(nx * 4);
        uint16_t *x16, *a16, *b16, *out = (uint16_t *)xmalloc(ncol * 2), *col16;
        float *x, *a, *b, *col;
        for (i = 0; i < nx; i++) xf[i] = frand(-2.0f, 2.0f);
        for (i = 0; i < m * kk; i++) af[i] = frand(-1.0f, 1.0f);
        for (i = 0; i < kk * n; i++) bf[i] = frand(-1.0f, 1.0f);
        for (i = 0; i < m; i++) labels[i] = (int32_t)(i % n);
        x16 = narrowed(xf, nx, f), a16 = narrowed(af, m * kk, f), b16 = narrowed(bf, kk * n, f);
        x = widened(x16, nx, f), a = widened(a16, m * kk, f), b = widened(b16, kk * n, f);
        CHECK(be->set_precision(d16, f, ncol) == MIRROR_OK, "%s storage: set_precision", mirror_precision_name(f));
        be->gemm(d32, 0, 1, m, n, kk, 1.0f, a, kk, b, kk, 0.0f, want, n, 0);
        be->gemm(d16, 0, 1, m, n, kk, 1.0f, a16, kk, b16, kk, 0.0f, out, n, 0);
        /* bf16 GEMMs on vdpbf16ps add their products in pairs: test_gemm_bf16 */
        CHECK(holds(out, want, m * n, f) || (f == MIRROR_PRECISION_BF16 && MIRROR__DPBF16),
              "%s gemm: a 16-bit C rounded once", mirror_precision_name(f));
        if (!(f == MIRROR_PRECISION_BF16 && MIRROR__DPBF16)) { /* a weight gradient: 16-bit operands (out, the 16-bit C, as B), an fp32 C that beta 1 adds to */
            float *y = widened(out, m * n, f);
            for (i = 0; i < kk * n; i++) g32[i] = gw[i] = 0.5f;
            be->gemm(d32, 1, 0, kk, n, m, 1.0f, a, kk, y, n, 1.0f, g32, n, 1);
            be->gemm(d16, 1, 0, kk, n, m, 1.0f, a16, kk, out, n, 1.0f, gw, n, 1);
            CHECK(!memcmp(g32, gw, kk * n * 4), "%s gemm: an fp32 weight gradient (grad) from 16-bit operands",
                  mirror_precision_name(f));
            free(y);
        }
        be->relu_forward(d32, want, x, nx), be->relu_forward(d16, out, x16, nx);
        CHECK(holds(out, want, nx, f), "%s relu_forward", mirror_precision_name(f));
        be->im2col(d32, want, x, ns, c, h, w, k, 1, 1, h, w), be->im2col(d16, out, x16, ns, c, h, w, k, 1, 1, h, w);
        CHECK(holds(out, want, ncol, f), "%s im2col", mirror_precision_name(f));
        /* the general path, which moves the 16-bit values too: stride 2 and
           pad 1 (3 x 3 outputs), then k 2 without padding (5 x 4) */
        be->im2col(d32, want, x, ns, c, h, w, k, 2, 1, 3, 3), be->im2col(d16, out, x16, ns, c, h, w, k, 2, 1, 3, 3);
        CHECK(holds(out, want, c * k * k * ns * 3 * 3, f), "%s im2col, stride 2", mirror_precision_name(f));
        be->im2col(d32, want, x, ns, c, h, w, 2, 1, 0, 5, 4), be->im2col(d16, out, x16, ns, c, h, w, 2, 1, 0, 5, 4);
        CHECK(holds(out, want, c * 2 * 2 * ns * 5 * 4, f), "%s im2col, k 2", mirror_precision_name(f));
        be->im2col(d32, want, x, ns, c, h, w, k, 1, 1, h, w), be->im2col(d16, out, x16, ns, c, h, w, k, 1, 1, h, w);
        col16 = out, out = (uint16_t *)xmalloc(ncol * 2), col = widened(col16, ncol, f);
        be->col2im(d32, want, col, ns, c, h, w, k, 1, 1, h, w), be->col2im(d16, out, col16, ns, c, h, w, k, 1, 1, h, w);
        CHECK(holds(out, want, nx, f), "%s col2im: the sums in fp32, rounded once", mirror_precision_name(f));
        be->maxpool_forward(d32, want, arg, x, ns * c, h, w, 2, 2, 3, 2);
        be->maxpool_forward(d16, out, arg, x16, ns * c, h, w, 2, 2, 3, 2);
        CHECK(holds(out, want, ns * c * 6, f), "%s maxpool_forward", mirror_precision_name(f));
        be->maxpool_backward(d32, want, arg, x, ns * c, h, w, 2, 2, 3, 2);
        be->maxpool_backward(d16, out, arg, x16, ns * c, h, w, 2, 2, 3, 2);
        CHECK(holds(out, want, nx, f), "%s maxpool_backward", mirror_precision_name(f));
        /* with the relu's gradient (x's values as dy, and from the 8th on as y: some negative) */
        be->maxpool_relu_backward(d32, want, arg, x, x + 7, ns * c, h, w, 3, 2);
        be->maxpool_relu_backward(d16, out, arg, x16, x16 + 7, ns * c, h, w, 3, 2);
        CHECK(holds(out, want, nx, f), "%s maxpool_relu_backward", mirror_precision_name(f));
        be->permute(d32, want, x, ns, c, hw), be->permute(d16, out, x16, ns, c, hw);
        CHECK(holds(out, want, nx, f), "%s permute: 16-bit values moved", mirror_precision_name(f));
        be->softmax_ce(d32, want, loss, ok, a, labels, m, n, 0.25f, NULL);
        be->softmax_ce(d16, out, loss16, ok, a16, labels, m, n, 0.25f, NULL);
        CHECK(holds(out, want, m * n, f) && !memcmp(loss, loss16, m * 4), "%s softmax_ce: fp32 losses, 16-bit gradient",
              mirror_precision_name(f));
        be->set_precision(d16, MIRROR_PRECISION_FP32, 0);
        free(xf), free(af), free(bf), free(want), free(g32), free(gw), free(loss), free(loss16), free(labels), free(ok);
        free(arg), free(x16), free(a16), free(b16), free(out), free(col16), free(x), free(a), free(b), free(col);
    }
    be->close(d16), be->close(d32);
}

/* The GEMM on bf16 operands through vdpbf16ps (where the build targets
   AVX512_BF16): mirror_hd_dot_bf16 is the instruction, lane by lane, on
   values of every kind (random bits: subnormals, Inf, NaN); and every
   element of a GEMM, through the CPU backend in bf16 storage, is its chain
   of pairs block by block (the depth cut as the GEMM cuts it), in shapes
   around the tile, the blocks and an odd depth, transposed or not: an fp32
   weight gradient with beta 0 and 1, a 16-bit C rounded once, and
   gemm_bias's epilogue. */
#if MIRROR__DPBF16
static float bf16_chain(const uint16_t *a, size_t ars, size_t acs, const uint16_t *b, size_t brs, size_t bcs, size_t i,
                        size_t j, size_t p0, size_t end)
{
    float sum = 0.0f;
    size_t p;
    for (p = p0; p < end; p += 2) {
        uint16_t a1 = p + 1 < end ? a[i * ars + (p + 1) * acs] : 0, b1 = p + 1 < end ? b[(p + 1) * brs + j * bcs] : 0;
        sum = mirror_hd_dot_bf16(sum, a[i * ars + p * acs], a1, b[p * brs + j * bcs], b1);
    }
    return sum;
}

/* Element (i, j) of C = op(A) op(B) + beta c (alpha 1), then bias and relu
   (bias NULL: none), as the blocked GEMM adds it up. */
static float bf16_element(int ta, int tb, size_t k, const uint16_t *a, size_t lda, const uint16_t *b, size_t ldb,
                          float beta, float c, const float *bias, int relu, size_t i, size_t j)
{
    size_t ars = ta ? 1 : lda, acs = ta ? lda : 1, brs = tb ? 1 : ldb, bcs = tb ? ldb : 1, pc;
    size_t blocks = (k + MIRROR_GEMM_KC - 1) / MIRROR_GEMM_KC, kstep = (k + blocks - 1) / blocks;
    kstep += kstep & 1;
    for (pc = 0; pc < k; pc += kstep) {
        float sum = bf16_chain(a, ars, acs, b, brs, bcs, i, j, pc, MIRROR__MIN(k, pc + kstep));
        c = pc == 0 && beta == 0.0f ? sum : c + sum;
    }
    if (bias) c += *bias;
    return relu ? mirror_hd_relu(c) : c;
}

static void test_gemm_bf16(void)
{
    static const size_t sizes[][3] = {{1, 1, 1}, {13, 11, 40}, {8, 32, 9}, {17, 45, 257}, {130, 37, 7},
                                      {3, 2100, 3}, {9, 33, 600}};
    const mirror__backend *be = &mirror__cpu_backend;
    size_t ws, si, i, bad = 0;
    void *dev = be->open(NULL, 0, &ws, NULL);
    int t;
    for (i = 0; i < 100000; i += 16) { /* the instruction against the shared function */
        uint16_t x[32], y[32];
        float acc[16], got[16];
        size_t l;
        __m512bh vx, vy;
        for (l = 0; l < 32; l++) x[l] = (uint16_t)(rand() & 0xffff), y[l] = (uint16_t)(rand() & 0xffff);
        for (l = 0; l < 16; l++) acc[l] = i % 32 ? frand(-4.0f, 4.0f) : mirror_hd_float((uint32_t)rand() * 2u + 1u);
        memcpy(&vx, x, sizeof vx), memcpy(&vy, y, sizeof vy);
        _mm512_storeu_ps(got, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), vx, vy));
        for (l = 0; l < 16; l++) {
            float want = mirror_hd_dot_bf16(acc[l], x[2 * l], x[2 * l + 1], y[2 * l], y[2 * l + 1]);
            bad += mirror_hd_bits(want) != mirror_hd_bits(got[l]) && !(mirror_hd_isnan(want) && mirror_hd_isnan(got[l]));
        }
    }
    CHECK(bad == 0, "mirror_hd_dot_bf16: %zu of 100000 lanes differ from vdpbf16ps", bad);
    CHECK(be->set_precision(dev, MIRROR_PRECISION_BF16, 2100 * 600) == MIRROR_OK, "bf16 gemm: set_precision");
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (t = 0; t < 8; t++) {
            int ta = t & 1, tb = (t >> 1) & 1, bias_relu = t >> 2;
            size_t m = sizes[si][0], n = sizes[si][1], k = sizes[si][2], j, lda = ta ? m : k, ldb = tb ? k : n, differ = 0;
            uint16_t *a = (uint16_t *)xmalloc(m * k * 2), *b = (uint16_t *)xmalloc(k * n * 2), *c16, *bias16;
            float *c = (float *)xmalloc(m * n * 4), *c0 = (float *)xmalloc(m * n * 4), *bias = (float *)xmalloc(m * 4);
            float beta = (float)(t & 1);
            c16 = (uint16_t *)xmalloc(m * n * 2), bias16 = (uint16_t *)xmalloc(m * 2);
            for (i = 0; i < m * k; i++) a[i] = mirror_hd_bf16_from_f32(frand(-1.0f, 1.0f));
            for (i = 0; i < k * n; i++) b[i] = mirror_hd_bf16_from_f32(frand(-1.0f, 1.0f));
            for (i = 0; i < m; i++) bias16[i] = mirror_hd_bf16_from_f32(frand(-1.0f, 1.0f)), bias[i] = mirror_hd_f32_from_bf16(bias16[i]);
            for (i = 0; i < m * n; i++) c[i] = c0[i] = beta != 0.0f ? frand(-1.0f, 1.0f) : NAN;
            if (bias_relu) {
                be->gemm_bias(dev, ta, tb, m, n, k, a, lda, b, ldb, bias16, 1, t & 1, c16, n);
            } else {
                be->gemm(dev, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n, 1);
                if (beta == 0.0f) be->gemm(dev, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c16, n, 0); /* 16-bit C */
            }
            for (i = 0; i < m; i++)
                for (j = 0; j < n; j++) {
                    float want = bf16_element(ta, tb, k, a, lda, b, ldb, bias_relu ? 0.0f : beta, c0[i * n + j],
                                              bias_relu ? &bias[i] : NULL, bias_relu && (t & 1), i, j);
                    if (bias_relu || beta == 0.0f) differ += c16[i * n + j] != mirror_hd_bf16_from_f32(want);
                    if (!bias_relu) differ += mirror_hd_bits(c[i * n + j]) != mirror_hd_bits(want);
                }
            CHECK(differ == 0, "bf16 %s ta=%d tb=%d m=%zu n=%zu k=%zu beta=%g: %zu elements differ from the pairs' chains",
                  bias_relu ? "gemm_bias" : "gemm", ta, tb, m, n, k, (double)beta, differ);
            free(a), free(b), free(c), free(c0), free(bias), free(c16), free(bias16);
        }
    be->set_precision(dev, MIRROR_PRECISION_FP32, 0);
    be->close(dev);
}
#else
static void test_gemm_bf16(void)
{
    printf("bf16 gemm: this build has no vdpbf16ps (AVX512_BF16): bf16 operands are widened to fp32\n");
}
#endif

// >>im2col and maxpool ----------------------------------------------------------

/* im2col and col2im over n samples: sample s fills columns s*hw.. of every
   row, exactly as its own im2col would; permute swaps the first two axes. */
static void test_batched_im2col(void)
{
    const size_t n = 3, C = 2, H = 6, W = 5, k = 3, st = 2, p = 1;
    const size_t ho = (H + 2 * p - k) / st + 1, wo = (W + 2 * p - k) / st + 1, hw = ho * wo;
    const size_t nx = C * H * W, rows = C * k * k;
    float *x = (float *)xmalloc(n * nx * sizeof(float)), *col = (float *)xmalloc(rows * n * hw * sizeof(float));
    float *one = (float *)xmalloc(rows * hw * sizeof(float)), *back = (float *)xmalloc(n * nx * sizeof(float));
    float *back1 = (float *)xmalloc(nx * sizeof(float)), *src = (float *)xmalloc(24 * sizeof(float));
    float dst[24];
    size_t s, r, i, wrong = 0;
    for (i = 0; i < n * nx; i++) x[i] = frand(-1.0f, 1.0f);
    mirror__cpu_im2col(NULL, col, x, n, C, H, W, k, st, p, ho, wo);
    for (s = 0; s < n; s++) {
        mirror__cpu_im2col(NULL, one, x + s * nx, 1, C, H, W, k, st, p, ho, wo);
        for (r = 0; r < rows; r++) wrong += memcmp(col + (r * n + s) * hw, one + r * hw, hw * sizeof(float)) != 0;
    }
    CHECK(wrong == 0, "im2col of 3 samples: each sample's columns equal its own im2col (%zu rows differ)", wrong);
    mirror__cpu_col2im(NULL, back, col, n, C, H, W, k, st, p, ho, wo);
    for (s = 0, wrong = 0; s < n; s++) {
        for (r = 0; r < rows; r++) memcpy(one + r * hw, col + (r * n + s) * hw, hw * sizeof(float));
        mirror__cpu_col2im(NULL, back1, one, 1, C, H, W, k, st, p, ho, wo);
        wrong += memcmp(back + s * nx, back1, nx * sizeof(float)) != 0;
    }
    CHECK(wrong == 0, "col2im of 3 samples equals the per-sample col2im, bitwise (%zu samples differ)", wrong);
    for (i = 0; i < 24; i++) src[i] = (float)i; /* [2][3][4] */
    mirror__cpu_permute(NULL, dst, src, 2, 3, 4);
    for (i = 0, wrong = 0; i < 24; i++) wrong += dst[i] != src[((i / 4 % 2) * 3 + i / 8) * 4 + i % 4];
    CHECK(wrong == 0 && dst[4] == 12.0f, "permute [2][3][4] -> [3][2][4] (%zu wrong)", wrong);
    free(x), free(col), free(one), free(back), free(back1), free(src);
}

/* The GPU's index arithmetic on the CPU: the divisor against the division
   operator, and the layout kernels' per-element functions against the CPU
   backend's loops, bit for bit. */
static void test_layout_math(void)
{
    static const size_t shapes[][7] = {
        /* n, C, H, W, k, stride, pad */
        {1, 1, 5, 5, 3, 1, 1}, {3, 2, 6, 5, 3, 2, 1}, {2, 3, 7, 9, 5, 3, 2}, {4, 1, 4, 4, 1, 1, 0},
        {2, 2, 8, 8, 2, 2, 0}, {1, 4, 3, 3, 3, 1, 2}, {3, 1, 28, 28, 5, 1, 2}, {2, 2, 9, 7, 4, 3, 1},
        /* the example CNN's convolutions and poolings; a row, a column; a
           plane whose edges are too many for the flat path of same convolutions */
        {2, 16, 14, 14, 3, 1, 1}, {3, 2, 28, 28, 2, 2, 0}, {2, 4, 14, 14, 2, 2, 0}, {1, 2, 7, 9, 2, 2, 0},
        {1, 1, 3, 5, 2, 2, 0}, {1, 2, 1, 9, 3, 1, 1}, {2, 3, 3, 1, 3, 1, 1}, {1, 1, 70, 70, 9, 1, 4},
        {1, 1, 40, 40, 9, 1, 4}, {1, 1, 600, 3, 2, 2, 0},
        /* rows of 35 windows (more than a vector's 16), the last one left out */
        {1, 2, 6, 71, 2, 2, 0},
    };
    size_t t, i, wrong = 0, tried = 0;
    for (t = 0; t < 1500; t++) {
        uint64_t d = t < 300 ? t + 1 : t < 426 ? ((uint64_t)1 << ((t - 300) / 2 + 1)) + (t % 2 ? 1 : 0) - (t % 4 == 2)
                         : t < 1000 ? rng_next() >> (rng_next() % 64) | 1 : rng_next();
        mirror_hd_divisor v = mirror_hd_divisor_of(d ? d : 1);
        uint64_t edge[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, UINT64_MAX, UINT64_MAX - 1,
                           UINT64_MAX / d * d, UINT64_MAX / d * d - 1};
        for (i = 0; i < 40; i++) {
            uint64_t n = i < sizeof edge / sizeof *edge ? edge[i] : i % 2 ? rng_next() : rng_next() >> (rng_next() % 64), q;
            uint64_t r = mirror_hd_divmod(v, n, &q);
            wrong += q != n / d || r != n % d;
            tried++;
        }
    }
    {
        uint64_t q, r = mirror_hd_divmod(mirror_hd_divisor_of(0), 7, &q);
        CHECK(q == 7 && r == 0, "a divisor of 0 is taken as 1");
    }
    CHECK(wrong == 0, "n / d and n %% d by multiply-high: %zu of %zu 64-bit cases wrong (every d up to 300, "
          "powers of two and their neighbours, random)", wrong, tried);
    for (t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        size_t n = shapes[t][0], C = shapes[t][1], H = shapes[t][2], W = shapes[t][3], k = shapes[t][4];
        size_t st = shapes[t][5], p = shapes[t][6], ho = (H + 2 * p - k) / st + 1, wo = (W + 2 * p - k) / st + 1;
        size_t nx = n * C * H * W, ncol = C * k * k * n * ho * wo, col_wrong = 0, back_wrong = 0;
        float *x = (float *)xmalloc(nx * sizeof(float)), *col = (float *)xmalloc(ncol * sizeof(float));
        float *back = (float *)xmalloc(nx * sizeof(float));
        mirror_hd_conv_shape g = mirror_hd_conv_shape_of(n, C, H, W, k, st, p, ho, wo);
        for (i = 0; i < nx; i++) x[i] = frand(-1.0f, 1.0f);
        mirror__cpu_im2col(NULL, col, x, n, C, H, W, k, st, p, ho, wo);
        for (i = 0; i < ncol; i++) col_wrong += mirror_hd_bits(mirror_hd_im2col_at(&g, x, i, 0)) != mirror_hd_bits(col[i]);
        for (i = 0; i < ncol; i++) col[i] = frand(-1.0f, 1.0f);
        mirror__cpu_col2im(NULL, back, col, n, C, H, W, k, st, p, ho, wo);
        for (i = 0; i < nx; i++) back_wrong += mirror_hd_bits(mirror_hd_col2im_at(&g, col, i, 0)) != mirror_hd_bits(back[i]);
        CHECK(col_wrong == 0 && back_wrong == 0,
              "%zu x %zux%zux%zu, k %zu stride %zu pad %zu: im2col and col2im element by element equal the CPU "
              "backend's, bitwise (%zu and %zu differ)", n, C, H, W, k, st, p, col_wrong, back_wrong);
        if (k > 1 && k <= H && k <= W && !p) { /* max pooling of the same planes */
            size_t planes = n * C, po = ho * wo, pool_wrong = 0, at;
            float *y = (float *)xmalloc(planes * po * sizeof(float)), *dy = (float *)xmalloc(planes * po * sizeof(float));
            int32_t *arg = (int32_t *)xmalloc(planes * po * sizeof(int32_t));
            for (i = 0; i < planes * po; i++) dy[i] = frand(-1.0f, 1.0f);
            for (i = 0; i < nx; i++) x[i] = (float)(rng_next() % 3) - 1.0f; /* ties in most windows */
            mirror__cpu_maxpool_forward(NULL, y, arg, x, planes, H, W, k, st, ho, wo);
            for (i = 0; i < planes * po; i++) {
                size_t corner = i / po * H * W + i % po / wo * st * W + i % wo * st;
                float top = mirror_hd_window_max(x + corner, W, k, &at, 0);
                pool_wrong += mirror_hd_bits(top) != mirror_hd_bits(y[i]) || corner % (H * W) + at != (size_t)arg[i];
            }
            CHECK(pool_wrong == 0, "max pooling %zux%zu, k %zu stride %zu: each window's maximum and its first "
                  "place equal mirror_hd_window_max's (%zu differ)", H, W, k, st, pool_wrong);
            mirror__cpu_maxpool_backward(NULL, back, arg, dy, planes, H, W, k, st, ho, wo);
            for (i = 0; i < planes; i++)
                for (at = 0; at < H * W; at++) {
                    float got = mirror_hd_maxpool_grad_at(dy + i * po, arg + i * po, at, at / W, at % W, k,
                                                          mirror_hd_divisor_of(st), ho, wo, 0);
                    pool_wrong += mirror_hd_bits(got) != mirror_hd_bits(back[i * H * W + at]);
                }
            CHECK(pool_wrong == 0, "max pooling %zux%zu, k %zu stride %zu: the gradient gathered per pixel equals "
                  "the CPU backend's scatter, bitwise (%zu differ)", H, W, k, st, pool_wrong);
            if (k <= st) { /* no window overlaps another: the relu below may ride along */
                float *fused = (float *)xmalloc(nx * sizeof(float));
                for (i = 0; i < planes * po; i++) dy[i] = i % 7 ? frand(-1.0f, 1.0f) : i % 2 ? -0.0f : NAN;
                mirror__cpu_maxpool_backward(NULL, back, arg, dy, planes, H, W, k, st, ho, wo);
                mirror__cpu_relu_backward(NULL, back, x, nx);
                mirror__cpu_maxpool_relu_backward(NULL, fused, arg, dy, y, planes, H, W, ho, wo);
                for (i = 0, pool_wrong = 0; i < nx; i++) pool_wrong += mirror_hd_bits(fused[i]) != mirror_hd_bits(back[i]);
                CHECK(pool_wrong == 0, "max pooling %zux%zu, k %zu stride %zu, and the relu before it: one pass "
                      "equals the two, bitwise, with -0 and NaN among the gradients (%zu differ)", H, W, k, st,
                      pool_wrong);
                free(fused);
            }
            free(y), free(dy), free(arg);
        }
        free(x), free(col), free(back);
    }
}

static void test_im2col(void)
{
    static const size_t shapes[][6] = {
        /* C, H, W, k, stride, pad */
        {1, 5, 5, 3, 1, 1}, {2, 6, 7, 3, 2, 0}, {3, 7, 5, 2, 2, 1}, {2, 4, 4, 4, 1, 3},
        {1, 1, 1, 1, 1, 0}, {2, 8, 6, 5, 3, 2}, {1, 3, 9, 3, 2, 2}, {4, 6, 6, 1, 2, 0},
    };
    size_t si;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        size_t C = shapes[si][0], H = shapes[si][1], W = shapes[si][2], k = shapes[si][3], s = shapes[si][4],
               p = shapes[si][5];
        size_t ho = (H + 2 * p - k) / s + 1, wo = (W + 2 * p - k) / s + 1, nx = C * H * W, nc = C * k * k * ho * wo;
        size_t i, zeros = 0, expect_zeros = 0, ch, ki, kj, oy, ox;
        float *x = (float *)xmalloc(nx * sizeof(float)), *col = (float *)xmalloc(nc * sizeof(float));
        float *c = (float *)xmalloc(nc * sizeof(float)), *xb = (float *)xmalloc(nx * sizeof(float));
        double lhs = 0.0, rhs = 0.0, mag = 0.0;
        for (i = 0; i < nx; i++) x[i] = frand(0.5f, 1.5f); /* never zero: counts the padding taps */
        for (i = 0; i < nc; i++) c[i] = frand(-1.0f, 1.0f);
        for (i = 0; i < nx; i++) xb[i] = NAN; /* col2im must overwrite, not accumulate */
        mirror__cpu_im2col(NULL, col, x, 1, C, H, W, k, s, p, ho, wo);
        mirror__cpu_col2im(NULL, xb, c, 1, C, H, W, k, s, p, ho, wo);
        for (i = 0; i < nc; i++) {
            lhs += (double)col[i] * c[i];
            mag += fabs((double)col[i] * c[i]);
            zeros += col[i] == 0.0f;
        }
        for (i = 0; i < nx; i++) rhs += (double)x[i] * xb[i];
        CHECK(fabs(lhs - rhs) <= 1e-5 * mag + 1e-12,
              "im2col/col2im C=%zu H=%zu W=%zu k=%zu s=%zu p=%zu: <im2col x, c> %.9g, <x, col2im c> %.9g", C, H,
              W, k, s, p, lhs, rhs);
        /* im2col against the definition, element by element */
        {
            size_t wrong = 0;
            const float *q = col;
            for (ch = 0; ch < C; ch++)
                for (ki = 0; ki < k; ki++)
                    for (kj = 0; kj < k; kj++)
                        for (oy = 0; oy < ho; oy++)
                            for (ox = 0; ox < wo; ox++, q++) {
                                long iy = (long)(oy * s + ki) - (long)p, ix = (long)(ox * s + kj) - (long)p;
                                int in = iy >= 0 && iy < (long)H && ix >= 0 && ix < (long)W;
                                float want = in ? x[(ch * H + (size_t)iy) * W + (size_t)ix] : 0.0f;
                                expect_zeros += !in;
                                wrong += *q != want;
                            }
            CHECK(wrong == 0 && zeros == expect_zeros,
                  "im2col C=%zu H=%zu W=%zu k=%zu s=%zu p=%zu: %zu wrong, %zu zeros (want %zu)", C, H, W, k, s, p,
                  wrong, zeros, expect_zeros);
        }
        free(x);
        free(col);
        free(c);
        free(xb);
    }
    /* Hand case: x = 1..9 as 3x3, k = 2, s = 1, p = 0: rows (0,0) (0,1) (1,0) (1,1). */
    {
        static const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        static const float want[16] = {1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9};
        static const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
        static const float cover[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1}; /* taps per pixel */
        float col[16], back[9];
        mirror__cpu_im2col(NULL, col, x, 1, 1, 3, 3, 2, 1, 0, 2, 2);
        CHECK(memcmp(col, want, sizeof want) == 0, "im2col 3x3 k2 hand case");
        mirror__cpu_col2im(NULL, back, ones, 1, 1, 3, 3, 2, 1, 0, 2, 2);
        CHECK(memcmp(back, cover, sizeof cover) == 0, "col2im 3x3 k2 of ones counts the taps");
    }
    /* Hand case with padding: x 2x2 = (1 2; 3 4), k = 3, s = 1, p = 1: the
       centre tap row is x itself, the corner tap (0,0) sees (0 0; 0 1). */
    {
        static const float x[4] = {1, 2, 3, 4};
        float col[9 * 4];
        mirror__cpu_im2col(NULL, col, x, 1, 1, 2, 2, 3, 1, 1, 2, 2);
        CHECK(col[16] == 1 && col[17] == 2 && col[18] == 3 && col[19] == 4, "im2col padded: centre tap %g %g %g %g",
              (double)col[16], (double)col[17], (double)col[18], (double)col[19]);
        CHECK(col[0] == 0 && col[1] == 0 && col[2] == 0 && col[3] == 1, "im2col padded: corner tap %g %g %g %g",
              (double)col[0], (double)col[1], (double)col[2], (double)col[3]);
    }
}

static void test_maxpool(void)
{
    /* Plane 0, 4x4, window 2 stride 2: maxima 5 (offset 1), 8 (6), 9 (8), 4 (15).
       Plane 1: all equal, so the first element of each window wins. */
    static const float x[32] = {1, 5, 2, 0, 3, 4, 8, 7, 9, 0, 1, 1, 2, 6, 3, 4,
                                7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7};
    static const float want_y[8] = {5, 8, 9, 4, 7, 7, 7, 7};
    static const int32_t want_arg[8] = {1, 6, 8, 15, 0, 2, 8, 10};
    static const float dy[8] = {0.1f, 0.2f, 0.3f, 0.4f, 1, 2, 3, 4};
    float y[8], dx[32];
    int32_t arg[8];
    size_t i, wrong = 0;
    mirror__cpu_maxpool_forward(NULL, y, arg, x, 2, 4, 4, 2, 2, 2, 2);
    CHECK(memcmp(y, want_y, sizeof y) == 0, "maxpool forward values %g %g %g %g", (double)y[0], (double)y[1],
          (double)y[2], (double)y[3]);
    CHECK(memcmp(arg, want_arg, sizeof arg) == 0, "maxpool argmax %d %d %d %d | %d %d %d %d", arg[0], arg[1], arg[2],
          arg[3], arg[4], arg[5], arg[6], arg[7]);
    for (i = 0; i < 32; i++) dx[i] = NAN;
    mirror__cpu_maxpool_backward(NULL, dx, arg, dy, 2, 4, 4, 2, 2, 2, 2);
    for (i = 0; i < 32; i++) {
        float want = 0.0f;
        size_t j;
        for (j = 0; j < 8; j++)
            if ((size_t)want_arg[j] + (j / 4) * 16 == i) want = dy[j];
        wrong += dx[i] != want;
    }
    CHECK(wrong == 0, "maxpool backward: %zu elements wrong", wrong);

    /* Overlapping windows (k 2, stride 1) all holding the centre 9: the
       backward sums every window's gradient into it. */
    {
        static const float x3[9] = {1, 2, 3, 4, 9, 5, 6, 7, 8};
        static const float dy3[4] = {1, 2, 3, 4};
        float y3[4], dx3[9];
        int32_t a3[4];
        mirror__cpu_maxpool_forward(NULL, y3, a3, x3, 1, 3, 3, 2, 1, 2, 2);
        CHECK(y3[0] == 9 && y3[1] == 9 && y3[2] == 9 && y3[3] == 9 && a3[0] == 4 && a3[1] == 4 && a3[2] == 4 &&
                  a3[3] == 4,
              "maxpool overlapping forward");
        mirror__cpu_maxpool_backward(NULL, dx3, a3, dy3, 1, 3, 3, 2, 1, 2, 2);
        wrong = 0;
        for (i = 0; i < 9; i++) wrong += dx3[i] != (i == 4 ? 10.0f : 0.0f);
        CHECK(wrong == 0, "maxpool overlapping backward: centre %g (want 10)", (double)dx3[4]);
    }
    /* Window 3 stride 2 on 5x5 negatives: the maximum is the least negative. */
    {
        float x5[25], y5[4];
        int32_t a5[4];
        for (i = 0; i < 25; i++) x5[i] = -1.0f - (float)i;
        x5[12] = -0.5f; /* shared by all four windows */
        mirror__cpu_maxpool_forward(NULL, y5, a5, x5, 1, 5, 5, 3, 2, 2, 2);
        CHECK(a5[0] == 12 && a5[1] == 12 && a5[2] == 12 && a5[3] == 12 && y5[0] == -0.5f,
              "maxpool k3 s2 negatives: argmax %d %d %d %d", a5[0], a5[1], a5[2], a5[3]);
    }
}

/* A convolution's bias gradient, four channels' sums side by side, is
   each channel's mirror__sum added in row order: the same bits, for
   channel counts around the blocks of four and planes around the lanes. */
static void test_bias_grad(void)
{
    static const size_t channels[] = {1, 3, 4, 7, 16}, inners[] = {2, 7, 8, 13, 196, 784};
    size_t ci, ii, r, c, rows = 3;
    float *dy = (float *)xmalloc(rows * 16 * 784 * sizeof(float)), db[16], want[16];
    for (r = 0; r < rows * 16 * 784; r++) dy[r] = frand(-1.0f, 1.0f);
    for (ci = 0; ci < sizeof channels / sizeof *channels; ci++)
        for (ii = 0; ii < sizeof inners / sizeof *inners; ii++) {
            size_t C = channels[ci], n = inners[ii];
            for (c = 0; c < C; c++) db[c] = want[c] = 0.5f;
            mirror__f32_bias_grad(NULL, db, dy, rows, C, n);
            for (r = 0; r < rows; r++)
                for (c = 0; c < C; c++) want[c] += mirror__sum(dy + (r * C + c) * n, n);
            CHECK(!memcmp(db, want, C * sizeof(float)), "bias gradient: %zu channels of %zu: not each channel's sum",
                  C, n);
        }
    free(dy);
}

/* A step's metrics (the backend's accumulate): the same bits as float64
   lanes written out here, lane j the rows j, j + 256, ..., then pairs
   halving (lane i + half onto lane i), added onto what acc held; within
   n ulps of a long double row-order sum; correct summed exactly or, NULL,
   left alone. From empty to thousands of rows, across the lanes' edges,
   losses from 2^-31 to 2^30, so that another order shows in the bits. */
static void test_accumulate(void)
{
    enum { L = 256 };
    static const size_t sizes[] = {0, 1, 2, L - 1, L, L + 1, 2 * L + 3, 4099, 8192};
    const mirror__backend *be = &mirror__cpu_backend;
    uint64_t state = 0xACC0ull;
    size_t si, r, n = 8192, j, half;
    float *loss = (float *)xmalloc(n * sizeof(float));
    int32_t *correct = (int32_t *)xmalloc(n * sizeof(int32_t));
    for (r = 0; r < n; r++)
        loss[r] = ldexpf(uniform_in(&state, 0.5f, 1.0f), (int)(mirror__next(&state) % 61) - 30),
        correct[r] = (int32_t)(mirror__next(&state) & 1);
    CHECK(MIRROR_HD_LANES == L, "accumulate: %d lanes, as this test's reference", (int)MIRROR_HD_LANES);
    for (si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t rows = sizes[si], right = 0;
        double lane[L], acc[2] = {0.25, 3.0}, bare[2] = {0.25, 7.0}, want;
        long double plain = 0.0L;
        for (j = 0; j < L; j++) lane[j] = 0.0;
        for (r = 0; r < rows; r++) lane[r % L] += (double)loss[r], plain += (long double)loss[r], right += (size_t)correct[r];
        for (half = L / 2; half > 0; half /= 2)
            for (j = 0; j < half; j++) lane[j] += lane[j + half];
        want = 0.25 + lane[0];
        be->accumulate(NULL, acc, loss, correct, rows);
        be->accumulate(NULL, bare, loss, NULL, rows);
        CHECK(!memcmp(&acc[0], &want, sizeof want) && !memcmp(&bare[0], &want, sizeof want),
              "accumulate, %zu rows: %.17g and %.17g (correct NULL), want the lanes' %.17g", rows, acc[0], bare[0],
              want);
        CHECK(fabsl((long double)acc[0] - 0.25L - plain) <= (long double)(rows + 1) * DBL_EPSILON * (plain + 1.0L),
              "accumulate, %zu rows: %.17g within rounding of the plain sum %.17Lg", rows, acc[0] - 0.25, plain);
        CHECK(acc[1] == 3.0 + (double)right && bare[1] == 7.0,
              "accumulate, %zu rows: correct %.1f (want %zu), NULL leaves its sum (%.1f)", rows, acc[1] - 3.0, right,
              bare[1]);
    }
    free(loss), free(correct);
}

// >>row groups -----------------------------------------------------------------

/* One run of test_row_groups: three Adam steps on `batch`, then the
   evaluation's loss sum into *loss; the parameters into params (room for
   np), their count returned. groups:
   0 the layers one by one over the shard, else the row-wise prefix in
   groups of `groups` units (a unit: a convolution chunk, in deterministic
   mode a chunk). The prefix's layers into *prefix. */
static size_t grouped_run(const char *layers, const char *devices, int det, mirror_precision precision, size_t groups,
                          const mirror_batch *batch, float *params, size_t np, double *loss, size_t *prefix)
{
    mirror_strategy *s = new_strategy(devices, 0);
    mirror_model_desc md;
    mirror_model *m;
    mirror_metrics met;
    int k;
    if (!s) die("row groups", "strategy");
    md = model_desc(s, 2, 8, 8, batch->n, 41);
    md.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.01f);
    md.deterministic = det, md.chunk = det ? 2 : 0;
    md.precision = precision;
    if (!(m = build_model(&md, NULL, "%s", layers))) die("row groups", "model");
    *prefix = m->pass.group_layers;
    if (groups)
        m->pass.group_rows = groups * (m->plan.chunk ? m->plan.chunk : mirror__conv_chunk(m));
    else
        m->pass.group_layers = 0;
    for (k = 0; k < 3; k++)
        CHECK(mirror_train_step(m, batch, NULL) == MIRROR_OK, "row groups: step: %s", mirror_model_error(m));
    CHECK(mirror_evaluate_batch(m, batch, &met) == MIRROR_OK, "row groups: evaluate: %s", mirror_model_error(m));
    *loss = met.loss_sum;
    np = mirror_num_parameters(m) < np ? mirror_num_parameters(m) : 0;
    CHECK(np > 0 && mirror_get_parameters(m, 0, params, np) == MIRROR_OK, "row groups: parameters");
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    return np;
}

/* The row-wise prefix a group of rows at a time (mirror__plan_groups)
   gives the bits of the layers one by one: the parameters after three
   steps and an evaluation's loss, with groups of one unit and of two (the
   last one short), on 1 and 2 replicas, in and out of deterministic mode,
   in fp32 and bf16; and the prefix is what it should be. */
static void test_row_groups(void)
{
    static const struct {
        const char *layers;
        size_t prefix;
    } models[] = {
        {"conv 4 3 1 1, relu, maxpool 2 2, conv 6 3 1 1, relu, maxpool 2 2, flatten, dense 3", 7},
        {"conv 3 3 1 1, gelu, avgpool 2 1, conv 2 1 1 0, tanh, maxpool 3 2, sigmoid, flatten, dense 4, relu, dense 3", 8},
        {"conv 3 3 2 1, relu, global_avgpool, flatten, dense 3", 4},
        {"conv 4 3 1 1, batchnorm, relu, maxpool 2 2, flatten, dense 3", 0}, /* one layer before the batchnorm */
    };
    enum { N = 11 };
    float x[N * 128], *want, *got;
    int32_t labels[N];
    mirror_batch b;
    size_t mi, i, prefix;
    for (i = 0; i < N * 128; i++) x[i] = frand(-1.0f, 1.0f);
    for (i = 0; i < N; i++) labels[i] = (int32_t)(i % 3);
    memset(&b, 0, sizeof b);
    b.x = x, b.labels = labels, b.n = b.rows = N;
    want = (float *)xmalloc(4096 * sizeof(float));
    got = (float *)xmalloc(4096 * sizeof(float));
    for (mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        int det, p;
        size_t devices;
        for (det = 0; det < 2; det++)
            for (p = 0; p < 2; p++)
                for (devices = 1; devices <= 2; devices++) {
                    mirror_precision precision = p ? MIRROR_PRECISION_BF16 : MIRROR_PRECISION_FP32;
                    const char *dev = devices == 1 ? "cpu:1" : "cpu:2";
                    double want_loss, got_loss;
                    size_t groups, np = grouped_run(models[mi].layers, dev, det, precision, 0, &b, want, 4096,
                                                    &want_loss, &prefix), same;
                    CHECK(prefix == models[mi].prefix, "row groups: %s: a prefix of %zu layers, not %zu",
                          models[mi].layers, prefix, models[mi].prefix);
                    for (groups = 1; groups <= 2; groups++) {
                        grouped_run(models[mi].layers, dev, det, precision, groups, &b, got, 4096, &got_loss, &prefix);
                        for (same = 0; same < np && !memcmp(&want[same], &got[same], sizeof(float));) same++;
                        CHECK(same == np && want_loss == got_loss,
                              "row groups: %s on %s%s%s, groups of %zu: parameter %zu of %zu or the loss differs",
                              models[mi].layers, dev, det ? ", deterministic" : "", p ? ", bf16" : "", groups, same,
                              np);
                    }
                }
    }
    free(want);
    free(got);
}

int main(void)
{
    test_softmax_ce();
    test_mse();
    test_relu();
    test_smooth();
    test_avgpool_math();
    test_gemm();
    test_gemm_bias();
    test_storage16();
    test_gemm_bf16();
    test_im2col();
    test_batched_im2col();
    test_maxpool();
    test_kind_table();
    test_gradients();
    test_gradient_replicas(0);
    test_gradient_replicas(1);
    test_dropout();
    test_bias_grad();
    test_accumulate();
    test_row_groups();
    test_layout_math(); /* last: it draws from the generator the others' data comes from */
    return check_done("test_layers");
}
