/* helpers.h - the tests' strategies and small models. Include after mirror.h
   and check.h. A model is a desc (model_desc, optimizer_of) and a layer
   list in words (add_layers), e.g.
       mirror_model_desc d = model_desc(s, 1, 8, 8, 12, 3);
       d.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.01f);
       m = build_model(&d, NULL, "conv 4 3 1 1, relu, maxpool 2 2, flatten, dense %d", CLASSES);
   The layers, each with the arguments of its mirror_ function:
       dense UNITS, conv FILTERS KERNEL STRIDE PAD, maxpool WINDOW STRIDE,
       avgpool WINDOW STRIDE, global_avgpool, flatten, dropout P,
       batchnorm (sync) or batchnorm local, relu, gelu, tanh, sigmoid,
       residual, residual_end. */
#ifndef HELPERS_H
#define HELPERS_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __GNUC__
#define HELPERS_UNUSED __attribute__((unused))
#define HELPERS_FORMAT(f, a) __attribute__((format(printf, f, a)))
#else
#define HELPERS_UNUSED
#define HELPERS_FORMAT(f, a)
#endif

/* |a - b| within abs_tol + rel_tol |b|. */
HELPERS_UNUSED static int close_to(double a, double b, double abs_tol, double rel_tol)
{
    return fabs(a - b) <= abs_tol + rel_tol * fabs(b);
}

/* Uniform in [lo, hi), from the library's generator (splitmix64) at *state. */
HELPERS_UNUSED static float uniform_in(uint64_t *state, float lo, float hi)
{
    return lo + (hi - lo) * mirror__uniform(state);
}

/* Whether a dataset is empty, every field zero (as a failed load leaves it). */
HELPERS_UNUSED static int zeroed(const mirror_dataset *ds)
{
    return !ds->x && !ds->labels && !ds->targets && !ds->count && !ds->channels && !ds->height &&
           !ds->width && !ds->num_classes && !ds->target_dim;
}

/* `replicas` replicas on `devices` (NULL: the default, as
   mirror_strategy_create reads it; 0 replicas: as many as devices gives),
   all-reducing with `reducer` (MIRROR_REDUCER_DEFAULT: the default);
   NULL, and *err filled, when creating fails. */
HELPERS_UNUSED static mirror_strategy *strategy_with(const char *devices, size_t replicas, mirror_reducer reducer,
                                                     mirror_error *err)
{
    mirror_strategy_desc d;
    mirror_strategy *s = NULL;
    memset(&d, 0, sizeof d);
    d.devices = devices;
    d.num_replicas = replicas;
    d.reducer = reducer;
    return mirror_strategy_create(&d, &s, err) == MIRROR_OK ? s : NULL;
}

/* strategy_with the default reducer. */
HELPERS_UNUSED static mirror_strategy *new_strategy(const char *devices, size_t replicas)
{
    return strategy_with(devices, replicas, MIRROR_REDUCER_DEFAULT, NULL);
}

/* new_strategy, and one check that it was made. */
HELPERS_UNUSED static mirror_strategy *checked_strategy(const char *devices, size_t replicas)
{
    mirror_error err = {0, ""};
    mirror_strategy *s = strategy_with(devices, replicas, MIRROR_REDUCER_DEFAULT, &err);
    CHECK(s != NULL, "strategy \"%s\" of %zu replicas: %s", devices ? devices : "(default)", replicas, err.message);
    return s;
}

/* A desc for inputs of channels x height x width (0: 1), the rest zero:
   fp32, softmax cross-entropy, SGD at the default rate, no momentum. */
HELPERS_UNUSED static mirror_model_desc model_desc(mirror_strategy *s, size_t channels, size_t height, size_t width,
                                                   size_t max_batch, uint64_t seed)
{
    mirror_model_desc d;
    memset(&d, 0, sizeof d);
    d.strategy = s;
    d.channels = channels, d.height = height, d.width = width;
    d.max_batch = max_batch;
    d.seed = seed;
    return d;
}

/* The tests' usual optimizer: `kind` at rate lr (0: its default), SGD with
   momentum 0.9, the rest the defaults. */
HELPERS_UNUSED static mirror_optimizer_desc optimizer_of(mirror_optimizer_kind kind, float lr)
{
    mirror_optimizer_desc o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.lr = lr;
    o.momentum = kind == MIRROR_OPT_SGD ? 0.9f : 0.0f;
    return o;
}

/* Adds the layers that `layers` names, separated by commas, after printf
   formatting. An unknown word is a mistake in the test: it aborts. */
HELPERS_UNUSED static void add_layers_v(mirror_model *m, const char *layers, va_list ap)
{
    char text[512], *at, *next;
    vsnprintf(text, sizeof text, layers, ap);
    for (at = text; at; at = next) {
        char name[32] = "";
        double a[4] = {0, 0, 0, 0};
        int n;
        if ((next = strchr(at, ',')) != NULL) *next++ = '\0';
        n = sscanf(at, " %31[a-z_0-9] %lf %lf %lf %lf", name, &a[0], &a[1], &a[2], &a[3]);
        if (n < 1) continue;
        if (!strcmp(name, "dense") && n == 2) mirror_dense(m, (size_t)a[0]);
        else if (!strcmp(name, "conv") && n == 5) mirror_conv2d(m, (size_t)a[0], (size_t)a[1], (size_t)a[2], (size_t)a[3]);
        else if (!strcmp(name, "maxpool") && n == 3) mirror_maxpool2d(m, (size_t)a[0], (size_t)a[1]);
        else if (!strcmp(name, "avgpool") && n == 3) mirror_avgpool2d(m, (size_t)a[0], (size_t)a[1]);
        else if (!strcmp(name, "global_avgpool") && n == 1) mirror_global_avgpool(m);
        else if (!strcmp(name, "flatten") && n == 1) mirror_flatten(m);
        else if (!strcmp(name, "dropout") && n == 2) mirror_dropout(m, (float)a[0]);
        else if (!strcmp(name, "batchnorm") && n == 1) mirror_batchnorm(m, strstr(at, "local") ? MIRROR_BN_LOCAL : MIRROR_BN_SYNC);
        else if (!strcmp(name, "relu") && n == 1) mirror_relu(m);
        else if (!strcmp(name, "gelu") && n == 1) mirror_gelu(m);
        else if (!strcmp(name, "tanh") && n == 1) mirror_tanh(m);
        else if (!strcmp(name, "sigmoid") && n == 1) mirror_sigmoid(m);
        else if (!strcmp(name, "residual") && n == 1) mirror_residual(m);
        else if (!strcmp(name, "residual_end") && n == 1) mirror_residual_end(m);
        else {
            fprintf(stderr, "helpers.h: no layer \"%s\"\n", at);
            abort();
        }
    }
}

HELPERS_UNUSED HELPERS_FORMAT(2, 3) static void add_layers(mirror_model *m, const char *layers, ...)
{
    va_list ap;
    va_start(ap, layers);
    add_layers_v(m, layers, ap);
    va_end(ap);
}

/* A model of desc d with the layers, not yet built; NULL when creating
   fails (the reason in err when given). */
HELPERS_UNUSED static mirror_model *new_model_v(const mirror_model_desc *d, mirror_error *err, const char *layers, va_list ap)
{
    mirror_model *m = NULL;
    if (mirror_model_create(d, &m, err) != MIRROR_OK) return NULL;
    add_layers_v(m, layers, ap);
    return m;
}

HELPERS_UNUSED HELPERS_FORMAT(3, 4) static mirror_model *new_model(const mirror_model_desc *d, mirror_error *err,
                                                                  const char *layers, ...)
{
    mirror_model *m;
    va_list ap;
    va_start(ap, layers);
    m = new_model_v(d, err, layers, ap);
    va_end(ap);
    return m;
}

/* m built; NULL, with nothing left allocated, when m is NULL or its build fails. */
HELPERS_UNUSED static mirror_model *built(mirror_model *m)
{
    if (m && mirror_model_build(m) != MIRROR_OK) {
        mirror_model_destroy(m);
        return NULL;
    }
    return m;
}

/* new_model, built: build_model(&desc, err, "layers", ...). */
#define build_model(...) built(new_model(__VA_ARGS__))

/* build_model as checks: a failed create fails one (and gives NULL); the
   build is one check, and the model comes back either way. */
HELPERS_UNUSED HELPERS_FORMAT(2, 3) static mirror_model *checked_model(const mirror_model_desc *d, const char *layers,
                                                                      ...)
{
    mirror_model *m = NULL;
    mirror_error err = {0, ""};
    va_list ap;
    if (mirror_model_create(d, &m, &err) != MIRROR_OK) {
        CHECK(0, "model: %s", err.message);
        return NULL;
    }
    va_start(ap, layers);
    add_layers_v(m, layers, ap);
    va_end(ap);
    CHECK(mirror_model_build(m) == MIRROR_OK, "build: %s", mirror_model_error(m));
    return m;
}
#endif
