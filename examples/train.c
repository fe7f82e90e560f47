/* train.c - the mirror example trainer: an MLP or a small CNN on every replica.

   Build and run:   make run            (or: make && ./build/train --help;
                                         build/train_cuda is the same on GPUs)
   Fashion-MNIST:   apt install dataset-fashion-mnist
                    ./build/train --data /usr/share/datasets/fashion-mnist --model cnn --epochs 3

   Without --data it trains on mirror's built-in synthetic digits. It prints a
   progress bar on a terminal, one line per epoch, and a closing line
   "final: key=value ...".

   Exit status: 0 done; 1 failed; 2 bad options; 3 trained and saved, with
   the final line, but --history, --plot or --trace could not be written
   (a warning names it; its file holds its last complete version); 128 + N
   stopped by signal N (after saving). */
/* The CPU build compiles the library here; the CUDA build (build/train_cuda)
   links it from examples/mirror_cuda.cu, compiled by nvcc, instead. */
#ifndef TRAIN_LINKS_MIRROR
#define MIRROR_IMPLEMENTATION
#endif
#include "../mirror.h"
#include "models.h"
#include "options.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
               "  --data DIR          MNIST-format IDX files (plain or .gz), or CIFAR-10's binary batches\n"
               "                      (data_batch_1.bin ... test_batch.bin); default: synthetic digits\n"
               "  --synthetic N       synthetic training samples (default 10000; test set N/5)\n"
               "  --model NAME        mlp: 784-256-128-10; cnn: two conv-relu-pool blocks + dense head;\n"
               "                      cnn-bn: the cnn with SyncBatchNorm; resnet: 3 residual blocks (32-64-128),\n"
               "                      batchnorm, global average pooling (default cnn)\n"
               "  --replicas N        replicas in sync (default: one per core, or $MIRROR_DEVICES)\n"
               "  --devices LIST      device list, e.g. cpu:4\n"
               "  --epochs N          (default 3)\n"
               "  --batch N           global batch (default 64; resnet: 32); with --accumulate, the micro-batch\n"
               "  --accumulate K      K micro-batches of --batch per optimizer step, one all-reduce (default 1)\n"
               "  --lr X              learning rate (default: the optimizer's; resnet with Adam: 0.002)\n"
               "  --lr-schedule S     constant | step (x0.1 every --lr-step steps, default a third of the run)\n"
               "                      | cosine (from --lr down towards 0 over the run)\n"
               "                      (default constant; resnet: cosine)\n"
               "  --warmup N          steps of linear warmup before the schedule (default 0)\n"
               "  --clip-norm X       clip the gradient to global L2 norm X (default: no clipping)\n"
               "  --dropout P         dropout of P before each dense layer after the first (default 0)\n"
               "  --augment           flip the training images left-right and crop them shifted by up to 1 pixel\n"
               "  --crop-pad N        with --augment: shifts of up to N pixels (default 1; CIFAR-10's usual: 4)\n"
               "  --history FILE.csv  the epochs' numbers, rewritten after each epoch\n"
               "  --plot FILE.svg     loss and accuracy by epoch, training and validation, for a browser\n"
               "  --curve-every N     with --history or --plot: a point every N steps within each epoch too\n"
               "  --trace FILE.json   a timeline of the last 256 steps' phases per replica (chrome://tracing)\n"
               "  --phases            a line per epoch of each phase's time and the replicas' imbalance\n"
               "  --deterministic     bitwise the same parameters for any replica count: the default on CPU\n"
               "                      replicas (GPU replicas: off unless asked)\n"
               "  --no-deterministic  sums in each split's own order: equal within float32 rounding, a little faster\n"
               "  --chunk K           deterministic mode's chunk: K samples, whole chunks per replica (default 16)\n"
               "  --graphs            GPUs: record each replica's pass and update as CUDA graphs, replay them\n"
               "  --shard-update M    auto | on | off: each replica updates a slice and keeps its optimizer state\n"
               "                      (ZeRO stage 1; auto: on for CPU replicas, off on GPUs)\n"
               "  --optimizer NAME    sgd | momentum | adam | adamw (default adam)\n"
               "  --seed N            (default 1)\n"
               "  --save PATH         write a checkpoint to PATH at the end (and on Ctrl-C or SIGTERM)\n"
               "  --checkpoint-every N  also every N steps (needs --save)\n"
               "  --resume PATH       continue from a checkpoint; --epochs counts the total\n"
               "  --precision P       fp32 | fp16 | bf16 (mixed: fp32 master weights; default fp32)\n"
               "  --loss-scale S      dynamic (fp16's default) | none (bf16's) | a number: a static scale\n"
               "  --growth-interval N finite steps before a dynamic scale doubles (default 2000)\n"
               "  --max-skips N       fail after N skipped steps in a row (default 50)\n"
               "  --report-nonfinite 1  name the layer and replica of every skipped step (slower)\n"
               "exit status: 0 done; 1 failed; 2 bad options; 3 trained and saved, but --history, --plot or\n"
               "--trace could not be written; 128 + N stopped by signal N (after saving)\n");
}

/* With several processes (build/train_mpi under mpirun) rank 0 speaks for
   all: the others print only failures of their own. */
static mirror_process_info where = {0, 1, 0, 0, 0};

static void say(const char *fmt, ...)
{
    va_list ap;
    if (where.rank != 0) return;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout); /* at once, also into a pipe or a file */
}

static void complain(int rc, const char *message)
{
    if (where.rank != 0 && (rc == MIRROR_ERR_PEER || rc == MIRROR_ERR_TIMEOUT)) return; /* rank 0 says it */
    if (where.processes > 1)
        fprintf(stderr, "train (rank %zu): %s\n", where.rank, message);
    else
        fprintf(stderr, "train: %s\n", message);
}

/* Whether DIR/NAME is there, whatever it is (a link to nothing too: the
   loader then says what is wrong with it). */
static int there(const char *dir, const char *name)
{
    char path[1100];
    struct stat st;
    snprintf(path, sizeof path, "%.1000s/%s", dir, name);
    return lstat(path, &st) == 0;
}

/* --data DIR: CIFAR-10's binary batches when DIR holds data_batch_1.bin
   (data_batch_1.bin ... data_batch_5.bin for training, test_batch.bin for
   the test), else MNIST's IDX files; a directory with neither's first file
   gets a message naming both. */
static int load_dir(const char *dir, mirror_dataset *train, mirror_dataset *test, mirror_error *err)
{
    char paths[6][1100];
    const char *batches[5];
    struct stat st;
    int i, rc;
    snprintf(paths[0], sizeof paths[0], "%.1000s/data_batch_1.bin", dir);
    if (!there(dir, "data_batch_1.bin")) {
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && !there(dir, "train-images-idx3-ubyte") &&
            !there(dir, "train-images-idx3-ubyte.gz")) {
            err->code = MIRROR_ERR_IO;
            snprintf(err->message, sizeof err->message,
                     "%.80s: neither MNIST's IDX files (train-images-idx3-ubyte[.gz] ...) nor CIFAR-10's binary "
                     "batches (data_batch_1.bin ... data_batch_5.bin, test_batch.bin) are there",
                     dir);
            return err->code;
        }
        return mirror_dataset_load_mnist(train, test, dir, err);
    }
    for (i = 0; i < 5; i++) {
        snprintf(paths[i], sizeof paths[i], "%.1000s/data_batch_%d.bin", dir, i + 1);
        batches[i] = paths[i];
    }
    snprintf(paths[5], sizeof paths[5], "%.1000s/test_batch.bin", dir);
    if ((rc = mirror_dataset_load_cifar10(train, batches, 5, err))) return rc;
    batches[0] = paths[5];
    if ((rc = mirror_dataset_load_cifar10(test, batches, 1, err))) mirror_dataset_free(train);
    return rc;
}

/* The schedule's step counts, from the run's steps in all: an epoch's
   times the epochs, or SIZE_MAX where that overflows (a run no one ends;
   its rate then barely moves, as over any very long run). */
static void schedule_steps(mirror_optimizer_desc *opt, const options *o, size_t per_epoch)
{
    size_t total = per_epoch && o->epochs > SIZE_MAX / per_epoch ? SIZE_MAX : per_epoch * o->epochs;
    if (opt->schedule == MIRROR_LR_STEP) opt->step_size = o->lr_step ? o->lr_step : total / 3 ? total / 3 : 1;
    if (opt->schedule == MIRROR_LR_COSINE) opt->total_steps = total > o->warmup ? total : o->warmup + 1;
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

/* Side outputs whose last write failed (the model is saved all the same):
   a warning for each, and exit status 3, so that a script can tell. */
static int warn_outputs(unsigned failed, const options *o)
{
    static const unsigned bits[3] = {MIRROR_OUTPUT_HISTORY, MIRROR_OUTPUT_PLOT, MIRROR_OUTPUT_TRACE};
    const char *names[3] = {"history", "plot", "trace"}, *paths[3];
    int i;
    paths[0] = o->history, paths[1] = o->plot, paths[2] = o->trace;
    for (i = 0; i < 3; i++)
        if (failed & bits[i])
            fprintf(stderr, "train: warning: the %s %s could not be written; it holds an earlier version\n", names[i],
                    paths[i]);
    return failed ? 3 : 0;
}

int main(int argc, char **argv)
{
    options o;
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
    int rc, unsaved = 0; /* 3: a side output was not written */

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    /* A reader that goes away (train | head) must not end the run: writes
       to the closed pipe fail with EPIPE instead, and training goes on.
       Set before the first line is written (each is flushed at once). */
    signal(SIGPIPE, SIG_IGN);
    switch (options_parse(argc, argv, &o)) {
    case OPTIONS_RUN: break;
    case OPTIONS_HELP: usage(stdout); return 0;
    case OPTIONS_UNKNOWN: fprintf(stderr, "train: %s\n", o.why); usage(stderr); return 2;
    default: fprintf(stderr, "train: %s\n", o.why); return 2;
    }
    memset(&at, 0, sizeof at);
    md = o.md;
    /* The strategy first: with MPI it joins the processes, which then agree
       on the data (one that cannot load it fails them all, no hang). */
    memset(&sd, 0, sizeof sd);
    sd.devices = o.devices;
    sd.num_replicas = o.replicas; /* with MPI: this process's */
    if ((rc = mirror_strategy_create(&sd, &s, &err))) {
        complain(rc, err.message);
        goto out;
    }
    where = mirror_strategy_process(s);
    if (o.data)
        rc = load_dir(o.data, &train, &test, &err);
    else if ((rc = mirror_dataset_synthetic_digits(&train, o.synthetic, o.seed, &err)) == MIRROR_OK)
        rc = mirror_dataset_synthetic_digits(&test, o.synthetic / 5 + 1, o.seed + 7919, &err);
    if ((rc = mirror_agree(s, rc, &err))) {
        complain(rc, err.message);
        goto out;
    }
    say("data: %s, %zu train and %zu test samples of %zux%zu\n", o.data ? o.data : "synthetic digits", train.count,
        test.count, train.height, train.width);
    say("strategy: %s\n", mirror_strategy_describe(s));

    /* a batch beyond the data would size every arena for samples that never come */
    if (o.batch > train.count) {
        if (where.rank == 0)
            fprintf(stderr, "train: --batch %zu is more than the %zu training samples: batches of %zu\n", o.batch,
                    train.count, train.count);
        o.batch = train.count;
    }
    /* and so would micro-batches beyond it: the step takes the data once */
    if (o.accumulate > 1 && o.batch * o.accumulate > train.count) {
        size_t fits = (train.count + o.batch - 1) / o.batch;
        if (where.rank == 0)
            fprintf(stderr,
                    "train: --accumulate %zu of --batch %zu is more than the %zu training samples: one step of %zu "
                    "micro-batches an epoch\n",
                    o.accumulate, o.batch, train.count, fits);
        o.accumulate = fits;
    }
    schedule_steps(&md.optimizer, &o, mirror_num_batches(train.count, o.batch * o.accumulate, 0));
    md.strategy = s;
    /* Deterministic unless asked otherwise, where it runs: CPU replicas.
       (It costs the CNN a few percent; bench/RESULTS.md.) */
    if (o.deterministic < 0) md.deterministic = !strncmp(mirror_strategy_query_desc(s).devices, "cpu", 3);
    md.channels = train.channels, md.height = train.height, md.width = train.width;
    md.max_batch = o.batch;
    md.seed = o.seed;
    if ((rc = mirror_model_create(&md, &m, &err))) {
        complain(rc, err.message);
        goto out;
    }
    if ((rc = example_model(m, o.model, (float)o.dropout))) {
        complain(rc, mirror_model_error(m));
        goto out;
    }
    md = mirror_model_query_desc(m);
    say("model: %s, %zu parameters, optimizer %s (lr %g, %s), global batch %zu, precision %s", o.model,
        mirror_num_parameters(m), o.optimizer, (double)md.optimizer.lr, o.lr_schedule, o.batch, o.precision);
    if (md.precision != MIRROR_PRECISION_FP32)
        say(", loss scaling %s (%g)", mirror_loss_scaling_name(md.loss_scale.kind), (double)md.loss_scale.init_scale);
    if (md.deterministic) say(", deterministic (chunks of %zu samples)", md.chunk);
    if (md.shard_update == MIRROR_SHARD_ON) say(", sharded update");
    if (md.graphs) say(", graphs");
    if (md.shard_update == MIRROR_SHARD_OFF) say(", unsharded update");
    say("\n");

    if (o.resume) {
        if ((rc = mirror_checkpoint_load(m, o.resume, 0, &at))) {
            complain(rc, mirror_model_error(m));
            goto out;
        }
        say("resume: %s, step %llu, epoch %llu step %llu\n", o.resume, (unsigned long long)at.step,
            (unsigned long long)at.epoch + 1, (unsigned long long)at.epoch_step);
        if (at.batch && (at.batch != o.batch * o.accumulate || at.samples != train.count || at.drop_remainder)) {
            if (where.rank == 0)
                fprintf(stderr,
                        "train: the checkpoint counts batches of %llu over %llu samples; this run has %zu over %zu\n",
                        (unsigned long long)at.batch, (unsigned long long)at.samples, o.batch * o.accumulate,
                        train.count);
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
    fd.accumulate = o.accumulate;
    fd.history = o.history;
    fd.plot = o.plot;
    fd.curve_every = o.curve_every;
    fd.trace = o.trace;
    fd.phases = o.phases;
    fd.augment_flip = o.augment;
    fd.augment_crop_pad = o.augment ? o.crop_pad : 0;
    fd.on_epoch = on_epoch;
    fd.user = &sums;
    fd.checkpoint = o.save;
    fd.checkpoint_every = o.checkpoint_every;
    fd.resumed_from = o.resume; /* the outputs must not overwrite it */
    fd.stop = &interrupted;
    if (at.epoch >= o.epochs) {
        say("the checkpoint has trained %llu epochs already; --epochs is %zu\n", (unsigned long long)at.epoch,
            o.epochs);
        goto out;
    }
    if ((rc = mirror_fit(m, &fd, &log))) {
        complain(rc, mirror_model_error(m));
        if (rc == MIRROR_ERR_STOPPED && interrupted) rc = 128 + interrupted;
        goto out;
    }
    say("final: replicas=%zu epochs=%zu model=%s train_loss=%.4f train_acc=%.4f test_loss=%.4f "
        "test_acc=%.4f samples_per_s=%.0f seconds=%.1f precision=%s",
        mirror_num_replicas(s), o.epochs, o.model, log.train_loss, log.train_acc, log.val_loss, log.val_acc,
        sums.seconds > 0 ? (double)sums.samples / sums.seconds : 0.0, log.elapsed, o.precision);
    if (md.precision != MIRROR_PRECISION_FP32 && mirror_loss_scale_get(m, &scaler) == MIRROR_OK)
        say(" loss_scale=%g skipped=%llu", (double)scaler.scale, (unsigned long long)scaler.skipped);
    say("\n");
    unsaved = warn_outputs(log.failed_outputs, &o);
out:
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    mirror_dataset_free(&train);
    mirror_dataset_free(&test);
    return rc > 128 ? rc : rc ? 1 : unsaved;
}
