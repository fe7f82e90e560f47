/* options.h - the example trainer's command line, parsed and checked
   without printing or exiting: the trainer reports what options_parse
   returns, and tests/fuzz/fuzz_flags.c feeds it arbitrary argument vectors.
   Needs mirror.h's declarations. */
#ifndef EXAMPLE_OPTIONS_H
#define EXAMPLE_OPTIONS_H
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    const char *data, *model, *devices, *optimizer, *save, *resume, *precision, *loss_scale, *lr_schedule;
    const char *history, *plot, *trace; /* --history FILE.csv, --plot FILE.svg, --trace FILE.json */
    const char *shard_update;           /* --shard-update auto|on|off */
    int phases;                         /* --phases: an epoch line of the phases' times */
    size_t replicas, epochs, batch, synthetic, checkpoint_every, growth_interval, max_skips, warmup, lr_step;
    size_t accumulate; /* micro-batches of `batch` per optimizer step */
    int report_nonfinite;
    int augment;     /* --augment: flips and crops of the training images */
    size_t crop_pad; /* --crop-pad N: the crops' shift, up to N pixels (default 1) */
    int deterministic; /* --deterministic 1, --no-deterministic 0; -1: the trainer's default (CPU replicas: on) */
    int graphs;        /* --graphs: CUDA graphs */
    size_t chunk;      /* --chunk K: deterministic mode's samples per chunk */
    size_t curve_every; /* --curve-every N: a point of the curves every N steps too */
    double lr, clip_norm, dropout;
    unsigned long long seed;
    /* What the flags set in the model desc: precision, loss scaling and
       the optimizer (its kind, momentum and learning rate). */
    mirror_model_desc md;
    char why[256]; /* the usage error, when options_parse returns one */
} options;

enum {
    OPTIONS_RUN = 0,     /* o is complete and checked */
    OPTIONS_HELP = 1,    /* --help or -h */
    OPTIONS_BAD = 2,     /* a value out of its range: o->why names the flag and the value */
    OPTIONS_UNKNOWN = 3  /* an unknown flag or a flag without its value: o->why says which */
};

static void options_defaults(options *o)
{
    memset(o, 0, sizeof *o);
    o->model = "cnn", o->optimizer = "adam", o->precision = "fp32"; /* lr_schedule NULL: the model's */
    o->epochs = 3, o->synthetic = 10000, o->seed = 1, o->accumulate = 1; /* batch 0: the model's */
    o->crop_pad = (size_t)-1; /* not given: 1 */
    o->deterministic = -1;
}

/* A usage error: the flag, what it needs, what it got (cut to fit). */
static int options_bad(options *o, const char *flag, const char *needs, const char *v)
{
    snprintf(o->why, sizeof o->why, "%s needs %s, got \"%.80s%s\"", flag, needs, v, strlen(v) > 80 ? "..." : "");
    return OPTIONS_BAD;
}

/* An integer in [lo, hi], digits only: no sign, no spaces, no suffix, no
   overflow. 0 with *n set, or OPTIONS_BAD. */
static int options_int(options *o, const char *flag, const char *v, unsigned long long lo, unsigned long long hi,
                       unsigned long long *n)
{
    char *end, needs[96];
    errno = 0;
    *n = strtoull(v, &end, 10);
    if (v[0] >= '0' && v[0] <= '9' && !*end && errno != ERANGE && *n >= lo && *n <= hi) return OPTIONS_RUN;
    snprintf(needs, sizeof needs, "an integer from %llu to %llu", lo, hi);
    return options_bad(o, flag, needs, v);
}

/* A positive count that fits a size_t. */
static int options_count(options *o, const char *flag, const char *v, size_t *out)
{
    unsigned long long n;
    int rc = options_int(o, flag, v, 1, SIZE_MAX, &n);
    if (!rc) *out = (size_t)n;
    return rc;
}

/* A number in [lo, hi], written as digits (no sign, no inf or nan). */
static int options_number(options *o, const char *flag, const char *v, double lo, double hi, const char *needs,
                          double *out)
{
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    if (((v[0] >= '0' && v[0] <= '9') || v[0] == '.') && !*end && errno != ERANGE && *out >= lo && *out <= hi)
        return OPTIONS_RUN;
    return options_bad(o, flag, needs, v);
}

/* A name, a path or a list: anything but the empty string. */
static int options_text(options *o, const char *flag, const char *v, const char **out)
{
    if (!v[0]) return options_bad(o, flag, "a value", v);
    *out = v;
    return OPTIONS_RUN;
}

/* One flag and its value into o. */
static int options_flag(options *o, const char *a, const char *v)
{
    unsigned long long n = 0;
    int rc;
    if (!strcmp(a, "--data")) return options_text(o, a, v, &o->data);
    if (!strcmp(a, "--model")) return options_text(o, a, v, &o->model);
    if (!strcmp(a, "--devices")) return options_text(o, a, v, &o->devices);
    if (!strcmp(a, "--optimizer")) return options_text(o, a, v, &o->optimizer);
    if (!strcmp(a, "--save")) return options_text(o, a, v, &o->save);
    if (!strcmp(a, "--resume")) return options_text(o, a, v, &o->resume);
    if (!strcmp(a, "--precision")) return options_text(o, a, v, &o->precision);
    if (!strcmp(a, "--loss-scale")) return options_text(o, a, v, &o->loss_scale);
    if (!strcmp(a, "--lr-schedule")) return options_text(o, a, v, &o->lr_schedule);
    if (!strcmp(a, "--history")) return options_text(o, a, v, &o->history);
    if (!strcmp(a, "--plot")) return options_text(o, a, v, &o->plot);
    if (!strcmp(a, "--trace")) return options_text(o, a, v, &o->trace);
    if (!strcmp(a, "--shard-update")) return options_text(o, a, v, &o->shard_update);
    if (!strcmp(a, "--lr-step")) return options_count(o, a, v, &o->lr_step);
    if (!strcmp(a, "--chunk")) return options_count(o, a, v, &o->chunk);
    if (!strcmp(a, "--curve-every")) return options_count(o, a, v, &o->curve_every);
    if (!strcmp(a, "--crop-pad")) {
        rc = options_int(o, a, v, 0, 64, &n);
        o->crop_pad = (size_t)n;
        return rc;
    }
    if (!strcmp(a, "--accumulate")) {
        rc = options_int(o, a, v, 1, 1 << 20, &n);
        o->accumulate = (size_t)n;
        return rc;
    }
    if (!strcmp(a, "--warmup")) {
        rc = options_int(o, a, v, 0, UINT32_MAX, &n);
        o->warmup = (size_t)n;
        return rc;
    }
    if (!strcmp(a, "--replicas")) return options_count(o, a, v, &o->replicas);
    if (!strcmp(a, "--epochs")) return options_count(o, a, v, &o->epochs);
    if (!strcmp(a, "--batch")) return options_count(o, a, v, &o->batch);
    if (!strcmp(a, "--synthetic")) return options_count(o, a, v, &o->synthetic);
    if (!strcmp(a, "--checkpoint-every")) return options_count(o, a, v, &o->checkpoint_every);
    /* a learning rate a float holds without becoming 0, up to the library's 1e6 */
    if (!strcmp(a, "--lr"))
        return options_number(o, a, v, FLT_MIN, 1e6, "a positive number between 1.2e-38 and 1e6", &o->lr);
    if (!strcmp(a, "--dropout"))
        return options_number(o, a, v, 0.0, 0.99, "a probability from 0 to 0.99", &o->dropout);
    if (!strcmp(a, "--clip-norm"))
        return options_number(o, a, v, FLT_MIN, FLT_MAX, "a positive number between 1.2e-38 and 3.4e38",
                              &o->clip_norm);
    if (!strcmp(a, "--seed")) {
        rc = options_int(o, a, v, 0, ULLONG_MAX, &n);
        o->seed = n;
        return rc;
    }
    if (!strcmp(a, "--growth-interval")) {
        rc = options_int(o, a, v, 1, UINT32_MAX, &n);
        o->growth_interval = (size_t)n;
        return rc;
    }
    if (!strcmp(a, "--max-skips")) {
        rc = options_int(o, a, v, 1, UINT32_MAX, &n);
        o->max_skips = (size_t)n;
        return rc;
    }
    if (!strcmp(a, "--report-nonfinite")) {
        rc = options_int(o, a, v, 0, 1, &n);
        o->report_nonfinite = (int)n;
        return rc;
    }
    snprintf(o->why, sizeof o->why, "unknown option %.80s", a);
    return OPTIONS_UNKNOWN;
}

/* The names and the flags that go together, into o->md. */
static int options_check(options *o)
{
    mirror_model_desc *md = &o->md;
    mirror_loss_scale_desc *ls = &md->loss_scale;
    double scale;
    int rc, resnet;
    if (strcmp(o->model, "mlp") && strcmp(o->model, "cnn") && strcmp(o->model, "cnn-bn") && strcmp(o->model, "resnet"))
        return options_bad(o, "--model", "mlp, cnn, cnn-bn or resnet", o->model);
    if (!strcmp(o->optimizer, "sgd")) md->optimizer.kind = MIRROR_OPT_SGD;
    else if (!strcmp(o->optimizer, "momentum")) md->optimizer.kind = MIRROR_OPT_SGD, md->optimizer.momentum = 0.9f;
    else if (!strcmp(o->optimizer, "adam")) md->optimizer.kind = MIRROR_OPT_ADAM;
    else if (!strcmp(o->optimizer, "adamw")) md->optimizer.kind = MIRROR_OPT_ADAMW;
    else return options_bad(o, "--optimizer", "sgd, momentum, adam or adamw", o->optimizer);
    /* The resnet's recipe, where the flags do not say otherwise: batches
       of 32, Adam at 2e-3 with a cosine schedule (5 epochs of
       Fashion-MNIST: 0.925, bench/RESULTS.md); the others: batches of 64. */
    resnet = !strcmp(o->model, "resnet");
    if (!o->batch) o->batch = resnet ? 32 : 64;
    if (!o->lr_schedule) o->lr_schedule = resnet ? "cosine" : "constant";
    md->optimizer.lr = (float)o->lr;
    if (resnet && o->lr == 0.0 && md->optimizer.kind != MIRROR_OPT_SGD) md->optimizer.lr = 0.002f;
    md->optimizer.clip_norm = (float)o->clip_norm;
    /* the schedule's step counts come from the data: the trainer sets them */
    if (!strcmp(o->lr_schedule, "step")) md->optimizer.schedule = MIRROR_LR_STEP;
    else if (!strcmp(o->lr_schedule, "cosine")) md->optimizer.schedule = MIRROR_LR_COSINE;
    else if (strcmp(o->lr_schedule, "constant")) return options_bad(o, "--lr-schedule", "constant, step or cosine", o->lr_schedule);
    if (o->lr_step && md->optimizer.schedule != MIRROR_LR_STEP) {
        snprintf(o->why, sizeof o->why, "--lr-step needs --lr-schedule step");
        return OPTIONS_BAD;
    }
    md->optimizer.warmup = o->warmup;
    if (!strcmp(o->precision, "fp16")) md->precision = MIRROR_PRECISION_FP16;
    else if (!strcmp(o->precision, "bf16")) md->precision = MIRROR_PRECISION_BF16;
    else if (strcmp(o->precision, "fp32")) return options_bad(o, "--precision", "fp32, fp16 or bf16", o->precision);
    ls->growth_interval = (uint32_t)o->growth_interval;
    ls->max_consecutive_skips = (uint32_t)o->max_skips;
    ls->report_nonfinite = o->report_nonfinite;
    if (!o->loss_scale) ls->kind = MIRROR_SCALE_DEFAULT;
    else if (!strcmp(o->loss_scale, "dynamic")) ls->kind = MIRROR_SCALE_DYNAMIC;
    else if (!strcmp(o->loss_scale, "none")) ls->kind = MIRROR_SCALE_NONE;
    else { /* below 1 (the scaler's min_scale) the gradients underflow to zero */
        if ((rc = options_number(o, "--loss-scale", o->loss_scale, 1.0, 1e30,
                                 "dynamic, none or a number from 1 to 1e30", &scale)))
            return rc;
        ls->kind = MIRROR_SCALE_STATIC;
        ls->init_scale = (float)scale;
    }
    if (o->crop_pad != (size_t)-1 && !o->augment) {
        snprintf(o->why, sizeof o->why, "--crop-pad needs --augment");
        return OPTIONS_BAD;
    }
    if (o->crop_pad == (size_t)-1) o->crop_pad = 1;
    if (o->chunk && !o->deterministic) {
        snprintf(o->why, sizeof o->why, "--chunk is deterministic mode's: not with --no-deterministic");
        return OPTIONS_BAD;
    }
    md->deterministic = o->deterministic == 1; /* the default (-1) is the trainer's to settle */
    md->graphs = o->graphs;
    if (!o->shard_update || !strcmp(o->shard_update, "auto")) md->shard_update = MIRROR_SHARD_AUTO;
    else if (!strcmp(o->shard_update, "on")) md->shard_update = MIRROR_SHARD_ON;
    else if (!strcmp(o->shard_update, "off")) md->shard_update = MIRROR_SHARD_OFF;
    else return options_bad(o, "--shard-update", "auto, on or off", o->shard_update);
    md->chunk = o->chunk;
    if (o->checkpoint_every && !o->save) {
        snprintf(o->why, sizeof o->why, "--checkpoint-every needs --save PATH");
        return OPTIONS_BAD;
    }
    return OPTIONS_RUN;
}

/* argv[1..argc-1] into o (defaults first): OPTIONS_RUN, or what stopped it. */
static int options_parse(int argc, char **argv, options *o)
{
    int i, rc;
    options_defaults(o);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return OPTIONS_HELP;
        if (!strcmp(a, "--augment")) { /* the flags without a value */
            o->augment = 1;
            continue;
        }
        if (!strcmp(a, "--deterministic") || !strcmp(a, "--no-deterministic")) {
            o->deterministic = a[2] == 'd';
            continue;
        }
        if (!strcmp(a, "--phases")) {
            o->phases = 1;
            continue;
        }
        if (!strcmp(a, "--graphs")) {
            o->graphs = 1;
            continue;
        }
        if (i + 1 >= argc) {
            snprintf(o->why, sizeof o->why, "%.80s needs a value (or is unknown)", a);
            return OPTIONS_UNKNOWN;
        }
        if ((rc = options_flag(o, a, argv[++i]))) return rc;
    }
    return options_check(o);
}
#endif
