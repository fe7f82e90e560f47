/* options.h - the example trainer's command line, parsed and checked
   without printing or exiting, straight into the library's descs (strategy,
   model, fit) where a flag has a field there: the trainer reports what
   options_parse returns, and tests/fuzz/fuzz_flags.c feeds it arbitrary
   argument vectors. Needs mirror.h's declarations. */
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
    /* The library's descs, filled as far as the flags go; the trainer adds
       what the strategy, the data and a checkpoint decide. */
    mirror_strategy_desc sd; /* --devices, --replicas */
    mirror_model_desc md;    /* --seed; the optimizer (its kind, momentum, rate, schedule,
                                warmup, clipping), precision, loss scaling, --deterministic,
                                --chunk, --graphs, --shard-update */
    mirror_fit_desc fd;      /* --epochs, --batch, --accumulate, --save (checkpoint),
                                --checkpoint-every, --resume (resumed_from), --history, --plot,
                                --curve-every, --trace, --tensorboard, --phases, --progress, --augment,
                                --crop-pad, --data-on-device */
    /* The flags that are no desc's field, as given: names, the data, and
       the numbers that options_check turns into the descs' */
    const char *data, *model, *optimizer, *precision, *loss_scale, *lr_schedule;
    const char *shard_update; /* --shard-update auto|on|off */
    const char *data_on_device; /* --data-on-device auto|on|off */
    const char *init_weights; /* --init-weights FILE: parameters from a safetensors file (mirror_load_weights) */
    const char *progress;     /* --progress bar|lines|none */
    /* --evaluate CKPT, --predict CKPT (with --out FILE.npy and
       --probabilities): a checkpoint's model, no training */
    const char *evaluate, *predict, *out;
    int probabilities;
    size_t synthetic, lr_step;
    int deterministic; /* --deterministic 1, --no-deterministic 0; -1: the trainer's default (CPU replicas: on) */
    double lr, clip_norm, dropout; /* dropout -1: not given (a --resume's checkpoint tells, else 0) */
    double val_split; /* --val-split F: the validation set's share of the training data; 0: none */
    char why[512]; /* the usage error, when options_parse returns one: each value in it cut to 80 bytes, with "..." */
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
    o->model = NULL; /* "cnn", or with --resume the checkpoint's (the trainer sets it) */
    o->dropout = -1.0;
    o->optimizer = "adam";
    o->precision = "fp32"; /* lr_schedule NULL: the model's */
    o->fd.epochs = 3;
    o->synthetic = 10000;
    o->md.seed = 1;
    o->fd.accumulate = 1; /* batch 0: the model's */
    o->fd.augment_crop_pad = (size_t)-1; /* not given: 1 with --augment */
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

/* An integer in [lo, hi] into a size_t. */
static int options_size(options *o, const char *flag, const char *v, unsigned long long lo, unsigned long long hi,
                        size_t *out)
{
    unsigned long long n;
    int rc = options_int(o, flag, v, lo, hi, &n);
    if (!rc) *out = (size_t)n;
    return rc;
}

/* A positive count that fits a size_t. */
static int options_count(options *o, const char *flag, const char *v, size_t *out)
{
    return options_size(o, flag, v, 1, SIZE_MAX, out);
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

/* One flag and its value into o: into its desc's field where it has one. */
static int options_flag(options *o, const char *a, const char *v)
{
    mirror_model_desc *md = &o->md;
    mirror_fit_desc *fd = &o->fd;
    unsigned long long n = 0;
    int rc;
    if (!strcmp(a, "--data")) return options_text(o, a, v, &o->data);
    if (!strcmp(a, "--model")) return options_text(o, a, v, &o->model);
    if (!strcmp(a, "--devices")) return options_text(o, a, v, &o->sd.devices);
    if (!strcmp(a, "--optimizer")) return options_text(o, a, v, &o->optimizer);
    if (!strcmp(a, "--save")) return options_text(o, a, v, &fd->checkpoint);
    if (!strcmp(a, "--resume")) return options_text(o, a, v, &fd->resumed_from); /* the outputs must not overwrite it */
    if (!strcmp(a, "--evaluate")) return options_text(o, a, v, &o->evaluate);
    if (!strcmp(a, "--predict")) return options_text(o, a, v, &o->predict);
    if (!strcmp(a, "--out")) return options_text(o, a, v, &o->out);
    if (!strcmp(a, "--init-weights")) return options_text(o, a, v, &o->init_weights);
    if (!strcmp(a, "--precision")) return options_text(o, a, v, &o->precision);
    if (!strcmp(a, "--loss-scale")) return options_text(o, a, v, &o->loss_scale);
    if (!strcmp(a, "--lr-schedule")) return options_text(o, a, v, &o->lr_schedule);
    if (!strcmp(a, "--history")) return options_text(o, a, v, &fd->history);
    if (!strcmp(a, "--plot")) return options_text(o, a, v, &fd->plot);
    if (!strcmp(a, "--trace")) return options_text(o, a, v, &fd->trace);
    if (!strcmp(a, "--tensorboard")) return options_text(o, a, v, &fd->tensorboard);
    if (!strcmp(a, "--shard-update")) return options_text(o, a, v, &o->shard_update);
    if (!strcmp(a, "--data-on-device")) return options_text(o, a, v, &o->data_on_device);
    if (!strcmp(a, "--progress")) return options_text(o, a, v, &o->progress);
    if (!strcmp(a, "--lr-step")) return options_count(o, a, v, &o->lr_step);
    if (!strcmp(a, "--chunk")) return options_count(o, a, v, &md->chunk);
    if (!strcmp(a, "--curve-every")) return options_count(o, a, v, &fd->curve_every);
    if (!strcmp(a, "--crop-pad")) return options_size(o, a, v, 0, 64, &fd->augment_crop_pad);
    if (!strcmp(a, "--accumulate")) return options_size(o, a, v, 1, 1 << 20, &fd->accumulate);
    if (!strcmp(a, "--warmup")) {
        rc = options_int(o, a, v, 0, UINT32_MAX, &n);
        md->optimizer.warmup = n;
        return rc;
    }
    if (!strcmp(a, "--replicas")) return options_count(o, a, v, &o->sd.num_replicas);
    if (!strcmp(a, "--epochs")) return options_count(o, a, v, &fd->epochs);
    if (!strcmp(a, "--batch")) return options_count(o, a, v, &fd->batch);
    if (!strcmp(a, "--synthetic")) return options_count(o, a, v, &o->synthetic);
    if (!strcmp(a, "--checkpoint-every")) return options_count(o, a, v, &fd->checkpoint_every);
    /* a learning rate a float holds without becoming 0, up to the library's 1e6 */
    if (!strcmp(a, "--lr"))
        return options_number(o, a, v, FLT_MIN, 1e6, "a positive number between 1.2e-38 and 1e6", &o->lr);
    if (!strcmp(a, "--dropout"))
        return options_number(o, a, v, 0.0, 0.99, "a probability from 0 to 0.99", &o->dropout);
    if (!strcmp(a, "--val-split")) { /* both parts need samples: 0 and 1 are no split */
        if ((rc = options_number(o, a, v, 0.0, 1.0, "a fraction between 0 and 1, both excluded", &o->val_split)))
            return rc;
        return o->val_split > 0.0 && o->val_split < 1.0
                   ? OPTIONS_RUN
                   : options_bad(o, a, "a fraction between 0 and 1, both excluded", v);
    }
    if (!strcmp(a, "--clip-norm"))
        return options_number(o, a, v, FLT_MIN, FLT_MAX, "a positive number between 1.2e-38 and 3.4e38",
                              &o->clip_norm);
    if (!strcmp(a, "--seed")) {
        rc = options_int(o, a, v, 0, ULLONG_MAX, &n);
        md->seed = n;
        return rc;
    }
    if (!strcmp(a, "--growth-interval")) {
        rc = options_int(o, a, v, 1, UINT32_MAX, &n);
        md->loss_scale.growth_interval = (uint32_t)n;
        return rc;
    }
    if (!strcmp(a, "--max-skips")) {
        rc = options_int(o, a, v, 1, UINT32_MAX, &n);
        md->loss_scale.max_consecutive_skips = (uint32_t)n;
        return rc;
    }
    if (!strcmp(a, "--report-nonfinite")) {
        rc = options_int(o, a, v, 0, 1, &n);
        md->loss_scale.report_nonfinite = (int)n;
        return rc;
    }
    snprintf(o->why, sizeof o->why, "unknown option %.80s%s", a, strlen(a) > 80 ? "..." : "");
    return OPTIONS_UNKNOWN;
}

/* --evaluate and --predict: a checkpoint's model (its architecture and
   settings), so no --model, and no training to resume or save. */
static int options_infer(options *o)
{
    const char *clash = NULL;
    if (o->out && !o->predict) clash = "--out needs --predict";
    else if (o->probabilities && !o->predict) clash = "--probabilities needs --predict";
    else if (!o->evaluate && !o->predict) return OPTIONS_RUN;
    else if (o->evaluate && o->predict) clash = "--evaluate and --predict: one at a time";
    else if (o->predict && !o->out) clash = "--predict needs --out FILE.npy, where its outputs go";
    else if (o->predict && !o->data) clash = "--predict needs --data, the samples to predict";
    else if (o->model) clash = "--evaluate and --predict take the model from the checkpoint: no --model";
    else if (o->fd.resumed_from || o->init_weights || o->fd.checkpoint || o->val_split > 0.0)
        clash = "--evaluate and --predict train nothing: not with --resume, --init-weights, --save or --val-split";
    if (!clash) return OPTIONS_RUN;
    snprintf(o->why, sizeof o->why, "%s", clash);
    return OPTIONS_BAD;
}

/* The names and the flags that go together, into the descs. */
static int options_check(options *o)
{
    mirror_model_desc *md = &o->md;
    mirror_fit_desc *fd = &o->fd;
    mirror_loss_scale_desc *ls = &md->loss_scale;
    double scale;
    int rc, resnet, infer = o->evaluate || o->predict;
    if ((rc = options_infer(o))) return rc;
    if (!o->model) o->model = "cnn";
    if (o->dropout < 0.0) o->dropout = 0.0;
    if (strcmp(o->model, "mlp") && strcmp(o->model, "cnn") && strcmp(o->model, "cnn-bn") && strcmp(o->model, "resnet"))
        return options_bad(o, "--model", "mlp, cnn, cnn-bn or resnet", o->model);
    if (!strcmp(o->optimizer, "sgd")) md->optimizer.kind = MIRROR_OPT_SGD;
    else if (!strcmp(o->optimizer, "momentum")) {
        md->optimizer.kind = MIRROR_OPT_SGD;
        md->optimizer.momentum = 0.9f;
    }
    else if (!strcmp(o->optimizer, "adam")) md->optimizer.kind = MIRROR_OPT_ADAM;
    else if (!strcmp(o->optimizer, "adamw")) md->optimizer.kind = MIRROR_OPT_ADAMW;
    else return options_bad(o, "--optimizer", "sgd, momentum, adam or adamw", o->optimizer);
    /* The resnet's recipe, where the flags do not say otherwise: batches
       of 32, Adam at 2e-3 with a cosine schedule (5 epochs of
       Fashion-MNIST: 0.925, bench/RESULTS.md); the others: batches of 64. */
    resnet = !strcmp(o->model, "resnet");
    if (!fd->batch && !infer) fd->batch = resnet ? 32 : 64; /* inference: 0, the library's 256 */
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
    if (!strcmp(o->precision, "fp16")) md->precision = MIRROR_PRECISION_FP16;
    else if (!strcmp(o->precision, "bf16")) md->precision = MIRROR_PRECISION_BF16;
    else if (strcmp(o->precision, "fp32")) return options_bad(o, "--precision", "fp32, fp16 or bf16", o->precision);
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
    if (fd->augment_crop_pad != (size_t)-1 && !fd->augment_flip) {
        snprintf(o->why, sizeof o->why, "--crop-pad needs --augment");
        return OPTIONS_BAD;
    }
    if (fd->augment_crop_pad == (size_t)-1) fd->augment_crop_pad = fd->augment_flip ? 1 : 0;
    if (md->chunk && !o->deterministic) {
        snprintf(o->why, sizeof o->why, "--chunk is deterministic mode's: not with --no-deterministic");
        return OPTIONS_BAD;
    }
    md->deterministic = o->deterministic == 1; /* the default (-1) is the trainer's to settle */
    if (!o->shard_update || !strcmp(o->shard_update, "auto")) md->shard_update = MIRROR_SHARD_AUTO;
    else if (!strcmp(o->shard_update, "on")) md->shard_update = MIRROR_SHARD_ON;
    else if (!strcmp(o->shard_update, "off")) md->shard_update = MIRROR_SHARD_OFF;
    else return options_bad(o, "--shard-update", "auto, on or off", o->shard_update);
    if (!o->data_on_device || !strcmp(o->data_on_device, "auto")) fd->data_on_device = MIRROR_DATA_AUTO;
    else if (!strcmp(o->data_on_device, "on")) fd->data_on_device = MIRROR_DATA_ON;
    else if (!strcmp(o->data_on_device, "off")) fd->data_on_device = MIRROR_DATA_OFF;
    else return options_bad(o, "--data-on-device", "auto, on or off", o->data_on_device);
    if (!o->progress) fd->progress = MIRROR_PROGRESS_AUTO;
    else if (!strcmp(o->progress, "bar")) fd->progress = MIRROR_PROGRESS_BAR;
    else if (!strcmp(o->progress, "lines")) fd->progress = MIRROR_PROGRESS_LINES;
    else if (!strcmp(o->progress, "none")) fd->progress = MIRROR_PROGRESS_NONE;
    else return options_bad(o, "--progress", "bar, lines or none", o->progress);
    if (fd->checkpoint_every && !fd->checkpoint) {
        snprintf(o->why, sizeof o->why, "--checkpoint-every needs --save PATH");
        return OPTIONS_BAD;
    }
    if (o->init_weights && fd->resumed_from) {
        snprintf(o->why, sizeof o->why, "--init-weights starts a run from weights, --resume goes on with one: not both");
        return OPTIONS_BAD;
    }
    return OPTIONS_RUN;
}

/* argv[1..argc-1] into o (defaults first), each flag on its own:
   OPTIONS_RUN, or what stopped it. options_check then takes them together
   (the trainer first finds a --resume checkpoint's model). */
static int options_read(int argc, char **argv, options *o)
{
    int i, rc;
    options_defaults(o);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return OPTIONS_HELP;
        if (!strcmp(a, "--augment")) { /* the flags without a value */
            o->fd.augment_flip = 1;
            continue;
        }
        if (!strcmp(a, "--deterministic") || !strcmp(a, "--no-deterministic")) {
            o->deterministic = a[2] == 'd';
            continue;
        }
        if (!strcmp(a, "--phases")) {
            o->fd.phases = 1;
            continue;
        }
        if (!strcmp(a, "--graphs")) {
            o->md.graphs = 1;
            continue;
        }
        if (!strcmp(a, "--probabilities")) {
            o->probabilities = 1;
            continue;
        }
        if (i + 1 >= argc) {
            snprintf(o->why, sizeof o->why, "%.80s%s needs a value (or is unknown)", a, strlen(a) > 80 ? "..." : "");
            return OPTIONS_UNKNOWN;
        }
        if ((rc = options_flag(o, a, argv[++i]))) return rc;
    }
    return OPTIONS_RUN;
}

/* options_read and options_check: the whole command line into o (inline:
   the trainer calls the two itself). */
static inline int options_parse(int argc, char **argv, options *o)
{
    int rc = options_read(argc, argv, o);
    return rc ? rc : options_check(o);
}
#endif
