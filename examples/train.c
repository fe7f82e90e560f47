/* train.c - the mirror example trainer: an MLP or a small CNN on every replica.

   Build and run:   make run            (or: make && ./build/train --help;
                                         build/train_cuda is the same on GPUs)
   Fashion-MNIST:   apt install dataset-fashion-mnist
                    ./build/train --data /usr/share/datasets/fashion-mnist --model cnn --epochs 3

   Without --data it trains on mirror's built-in synthetic digits. It prints a
   progress bar on a terminal, one line per epoch, and a closing line
   "final: key=value ...". */
/* The CPU build compiles the library here; the CUDA build (build/train_cuda)
   links it from examples/mirror_cuda.cu, compiled by nvcc, instead. */
#ifndef TRAIN_LINKS_MIRROR
#define MIRROR_IMPLEMENTATION
#endif
#include "../mirror.h"
#include "models.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    const char *data, *model, *devices, *optimizer, *save, *resume, *precision, *loss_scale;
    size_t replicas, epochs, batch, synthetic, checkpoint_every, growth_interval, max_skips;
    int report_nonfinite;
    double lr;
    unsigned long long seed;
} options;

/* Ctrl-C and SIGTERM (what docker, Slurm, systemd and Kubernetes send):
   fit saves a checkpoint before the next step and returns; the trainer
   exits with 128 + the signal's number. */
static volatile sig_atomic_t interrupted;
static void on_signal(int sig)
{
    interrupted = sig;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: train [options]\n"
               "  --data DIR          MNIST-format IDX files (plain or .gz); default: synthetic digits\n"
               "  --synthetic N       synthetic training samples (default 10000; test set N/5)\n"
               "  --model mlp|cnn     784-256-128-10 MLP, or two conv-relu-pool blocks + dense head (cnn)\n"
               "  --replicas N        replicas in sync (default: one per core, or $MIRROR_DEVICES)\n"
               "  --devices LIST      device list, e.g. cpu:4\n"
               "  --epochs N          (default 3)\n"
               "  --batch N           global batch (default 64)\n"
               "  --lr X              learning rate (default: the optimizer's)\n"
               "  --optimizer NAME    sgd | momentum | adam | adamw (default adam)\n"
               "  --seed N            (default 1)\n"
               "  --save PATH         write a checkpoint to PATH at the end (and on Ctrl-C or SIGTERM)\n"
               "  --checkpoint-every N  also every N steps (needs --save)\n"
               "  --resume PATH       continue from a checkpoint; --epochs counts the total\n"
               "  --precision P       fp32 | fp16 | bf16 (mixed: fp32 master weights; default fp32)\n"
               "  --loss-scale S      dynamic (fp16's default) | none (bf16's) | a number: a static scale\n"
               "  --growth-interval N finite steps before a dynamic scale doubles (default 2000)\n"
               "  --max-skips N       fail after N skipped steps in a row (default 50)\n"
               "  --report-nonfinite 1  name the layer and replica of every skipped step (slower)\n");
}

/* A usage error: the flag, what it needs, what it got; exit 2 (an example may exit). */
static void bad_value(const char *flag, const char *needs, const char *v)
{
    fprintf(stderr, "train: %s needs %s, got \"%s\"\n", flag, needs, v);
    exit(2);
}

/* An integer in [lo, hi], digits only: no sign, no spaces, no suffix, no overflow. */
static size_t int_arg(const char *flag, const char *v, unsigned long long lo, unsigned long long hi)
{
    char *end, needs[96];
    unsigned long long n;
    errno = 0;
    n = strtoull(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno == ERANGE || n < lo || n > hi) {
        snprintf(needs, sizeof needs, "an integer from %llu to %llu", lo, hi);
        bad_value(flag, needs, v);
    }
    return (size_t)n;
}

/* A positive count that fits a size_t. */
static size_t count_arg(const char *flag, const char *v) { return int_arg(flag, v, 1, SIZE_MAX); }

/* A finite positive number that a float holds without becoming 0 or
   infinite (1e-50 is not a learning rate of 0). */
static double positive_arg(const char *flag, const char *v)
{
    char *end;
    double x;
    errno = 0;
    x = strtod(v, &end);
    if (!((v[0] >= '0' && v[0] <= '9') || v[0] == '.') || *end || errno == ERANGE || !(x >= FLT_MIN && x <= FLT_MAX))
        bad_value(flag, "a positive number between 1.2e-38 and 3.4e38", v);
    return x;
}

static void parse(int argc, char **argv, options *o)
{
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!v) {
            fprintf(stderr, "train: %s needs a value (or is unknown)\n", a);
            usage(stderr);
            exit(2);
        }
        i++;
        if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--devices")) o->devices = v;
        else if (!strcmp(a, "--optimizer")) o->optimizer = v;
        else if (!strcmp(a, "--replicas")) o->replicas = count_arg(a, v);
        else if (!strcmp(a, "--epochs")) o->epochs = count_arg(a, v);
        else if (!strcmp(a, "--batch")) o->batch = count_arg(a, v);
        else if (!strcmp(a, "--synthetic")) o->synthetic = count_arg(a, v);
        else if (!strcmp(a, "--seed")) o->seed = int_arg(a, v, 0, ULLONG_MAX);
        else if (!strcmp(a, "--save")) o->save = v;
        else if (!strcmp(a, "--resume")) o->resume = v;
        else if (!strcmp(a, "--checkpoint-every")) o->checkpoint_every = count_arg(a, v);
        else if (!strcmp(a, "--lr")) o->lr = positive_arg(a, v);
        else if (!strcmp(a, "--precision")) o->precision = v;
        else if (!strcmp(a, "--loss-scale")) o->loss_scale = v;
        else if (!strcmp(a, "--growth-interval")) o->growth_interval = int_arg(a, v, 1, UINT32_MAX);
        else if (!strcmp(a, "--max-skips")) o->max_skips = int_arg(a, v, 1, UINT32_MAX);
        else if (!strcmp(a, "--report-nonfinite")) o->report_nonfinite = (int)int_arg(a, v, 0, 1);
        else {
            fprintf(stderr, "train: unknown option %s\n", a);
            usage(stderr);
            exit(2);
        }
    }
}

/* --precision and the scaler's flags into the model desc; 0, or 2 with a message. */
static int precision_args(const options *o, mirror_model_desc *md)
{
    mirror_loss_scale_desc *ls = &md->loss_scale;
    char *end;
    if (!strcmp(o->precision, "fp16")) md->precision = MIRROR_PRECISION_FP16;
    else if (!strcmp(o->precision, "bf16")) md->precision = MIRROR_PRECISION_BF16;
    else if (strcmp(o->precision, "fp32")) {
        fprintf(stderr, "train: --precision must be fp32, fp16 or bf16, got \"%s\"\n", o->precision);
        return 2;
    }
    ls->growth_interval = (uint32_t)o->growth_interval;
    ls->max_consecutive_skips = (uint32_t)o->max_skips;
    ls->report_nonfinite = o->report_nonfinite;
    if (!o->loss_scale) return 0;
    if (!strcmp(o->loss_scale, "dynamic")) ls->kind = MIRROR_SCALE_DYNAMIC;
    else if (!strcmp(o->loss_scale, "none")) ls->kind = MIRROR_SCALE_NONE;
    else {
        double x;
        ls->kind = MIRROR_SCALE_STATIC;
        errno = 0;
        x = strtod(o->loss_scale, &end);
        /* below 1 (the scaler's min_scale) the gradients underflow to zero */
        if (o->loss_scale[0] < '0' || o->loss_scale[0] > '9' || *end || errno == ERANGE || !(x >= 1.0 && x <= 1e30)) {
            fprintf(stderr, "train: --loss-scale must be dynamic, none or a number from 1 to 1e30, got \"%s\"\n",
                    o->loss_scale);
            return 2;
        }
        ls->init_scale = (float)x;
    }
    return 0;
}

/* The per-epoch hook: sums the training time and samples for the final line. */
typedef struct totals {
    double seconds;
    size_t samples;
} totals;

static int on_epoch(void *user, const mirror_epoch_log *log)
{
    totals *t = (totals *)user;
    t->seconds += log->seconds;
    t->samples += log->samples;
    return 0;
}

static mirror_optimizer_kind optimizer_kind(const char *name, float *momentum)
{
    *momentum = 0.0f;
    if (!strcmp(name, "sgd")) return MIRROR_OPT_SGD;
    if (!strcmp(name, "momentum")) {
        *momentum = 0.9f;
        return MIRROR_OPT_SGD;
    }
    if (!strcmp(name, "adam")) return MIRROR_OPT_ADAM;
    if (!strcmp(name, "adamw")) return MIRROR_OPT_ADAMW;
    fprintf(stderr, "train: --optimizer must be sgd, momentum, adam or adamw, got \"%s\"\n", name);
    exit(2);
}

int main(int argc, char **argv)
{
    options o = {NULL, "cnn", NULL, "adam", NULL, NULL, "fp32", NULL, 0, 3, 64, 10000, 0, 0, 0, 0, 0.0, 1};
    mirror_checkpoint_info at;
    mirror_error err = {0, ""};
    mirror_strategy_desc sd;
    mirror_model_desc md;
    mirror_fit_desc fd;
    mirror_dataset train = {0}, test = {0};
    mirror_strategy *s = NULL;
    mirror_model *m = NULL;
    mirror_epoch_log log;
    mirror_loss_scale_state scaler;
    totals sums = {0.0, 0};
    int rc;

    parse(argc, argv, &o);
    memset(&at, 0, sizeof at);
    if (o.checkpoint_every && !o.save) {
        fprintf(stderr, "train: --checkpoint-every needs --save PATH\n");
        return 2;
    }
    memset(&md, 0, sizeof md);
    if (precision_args(&o, &md)) return 2;
    if (o.data)
        rc = mirror_dataset_load_mnist(&train, &test, o.data, &err);
    else if ((rc = mirror_dataset_synthetic_digits(&train, o.synthetic, o.seed, &err)) == MIRROR_OK)
        rc = mirror_dataset_synthetic_digits(&test, o.synthetic / 5 + 1, o.seed + 7919, &err);
    memset(&sd, 0, sizeof sd);
    sd.devices = o.devices;
    sd.num_replicas = o.replicas;
    if (rc || (rc = mirror_strategy_create(&sd, &s, &err))) {
        fprintf(stderr, "train: %s\n", err.message);
        goto out;
    }
    printf("data: %s, %zu train and %zu test samples of %zux%zu\n", o.data ? o.data : "synthetic digits",
           train.count, test.count, train.height, train.width);
    printf("strategy: %s\n", mirror_strategy_describe(s));

    /* a batch beyond the data would size every arena for samples that never come */
    if (o.batch > train.count) {
        fprintf(stderr, "train: --batch %zu is more than the %zu training samples: batches of %zu\n", o.batch,
                train.count, train.count);
        o.batch = train.count;
    }
    md.strategy = s;
    md.channels = train.channels, md.height = train.height, md.width = train.width;
    md.max_batch = o.batch;
    md.seed = o.seed;
    md.optimizer.kind = optimizer_kind(o.optimizer, &md.optimizer.momentum);
    md.optimizer.lr = (float)o.lr;
    if ((rc = mirror_model_create(&md, &m, &err))) {
        fprintf(stderr, "train: %s\n", err.message);
        goto out;
    }
    if ((rc = example_model(m, o.model))) {
        if (strcmp(o.model, "mlp") && strcmp(o.model, "cnn"))
            fprintf(stderr, "train: --model must be mlp or cnn, got \"%s\"\n", o.model);
        else
            fprintf(stderr, "train: %s\n", mirror_model_error(m));
        goto out;
    }
    md = mirror_model_query_desc(m);
    printf("model: %s, %zu parameters, optimizer %s, global batch %zu, precision %s", o.model,
           mirror_num_parameters(m), o.optimizer, o.batch, o.precision);
    if (md.precision != MIRROR_PRECISION_FP32)
        printf(", loss scaling %s (%g)", mirror_loss_scaling_name(md.loss_scale.kind), (double)md.loss_scale.init_scale);
    printf("\n");

    if (o.resume) {
        if ((rc = mirror_checkpoint_load(m, o.resume, 0, &at))) {
            fprintf(stderr, "train: %s\n", mirror_model_error(m));
            goto out;
        }
        printf("resume: %s, step %llu, epoch %llu step %llu\n", o.resume, (unsigned long long)at.step,
               (unsigned long long)at.epoch + 1, (unsigned long long)at.epoch_step);
        if (at.batch && (at.batch != o.batch || at.samples != train.count || at.drop_remainder)) {
            fprintf(stderr, "train: the checkpoint counts batches of %llu over %llu samples; this run has %zu over %zu\n",
                    (unsigned long long)at.batch, (unsigned long long)at.samples, o.batch, train.count);
            rc = 1;
            goto out;
        }
    }

    memset(&fd, 0, sizeof fd);
    fd.train = &train;
    fd.validation = &test;
    fd.epochs = o.epochs;
    fd.initial_epoch = (size_t)at.epoch;
    fd.initial_step = (size_t)at.epoch_step;
    fd.shuffle_seed = at.shuffle_seed;
    fd.batch = o.batch;
    fd.on_epoch = on_epoch;
    fd.user = &sums;
    fd.checkpoint = o.save;
    fd.checkpoint_every = o.checkpoint_every;
    fd.stop = &interrupted;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    /* A reader that goes away (train | head) must not end the run: writes
       to the closed pipe fail with EPIPE instead, and training goes on. */
    signal(SIGPIPE, SIG_IGN);
    if (at.epoch >= o.epochs) {
        printf("the checkpoint has trained %llu epochs already; --epochs is %zu\n", (unsigned long long)at.epoch,
               o.epochs);
        goto out;
    }
    if ((rc = mirror_fit(m, &fd, &log))) {
        fprintf(stderr, "train: %s\n", mirror_model_error(m));
        if (rc == MIRROR_ERR_STOPPED && interrupted) rc = 128 + interrupted;
        goto out;
    }
    printf("final: replicas=%zu epochs=%zu model=%s train_loss=%.4f train_acc=%.4f test_loss=%.4f "
           "test_acc=%.4f samples_per_s=%.0f seconds=%.1f precision=%s",
           mirror_num_replicas(s), o.epochs, o.model, log.train_loss, log.train_acc,
           log.val_loss, log.val_acc,
           sums.seconds > 0 ? (double)sums.samples / sums.seconds : 0.0, log.elapsed, o.precision);
    if (md.precision != MIRROR_PRECISION_FP32 && mirror_loss_scale_get(m, &scaler) == MIRROR_OK)
        printf(" loss_scale=%g skipped=%llu", (double)scaler.scale, (unsigned long long)scaler.skipped);
    printf("\n");
out:
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    mirror_dataset_free(&train);
    mirror_dataset_free(&test);
    return rc > 128 ? rc : rc ? 1 : 0;
}
