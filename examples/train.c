/* train.c - the full mirror trainer: every option of the command line
   (examples/options.h), an MLP, a CNN or a ResNet on every replica, with
   checkpoints, resume, mixed precision, augmentation, curves and traces.
   To learn the API, read the two short examples first: examples/hello.c
   (the API in one page, the training loop written by hand) and
   examples/scaling.c (one model on 1, 2 and 4 replicas, with and without
   deterministic mode).

   Build and run:   make run            (or: make && ./build/train --help;
                                         build/train_cuda is the same on GPUs)
   Fashion-MNIST:   apt install dataset-fashion-mnist
                    ./build/train --data /usr/share/datasets/fashion-mnist --model cnn --epochs 3

   Without --data it trains on mirror's built-in synthetic digits. It prints a
   progress bar on a terminal, one line per epoch, and a closing line
   "final: key=value ...". A saved model, without training:
                    ./build/train --evaluate run.ckpt           (test_loss, test_acc)
                    ./build/train --predict run.ckpt --data x.npy --out logits.npy

   Exit status: 0 done; 1 failed; 2 bad options; 3 trained and saved, with
   the final line, but --history, --plot, --trace or --tensorboard could not be written
   (a warning names it; its file holds its last complete version); 128 + N
   stopped by signal N (after saving). */
/* The CPU build compiles the library here; the CUDA build (build/train_cuda)
   links it from examples/mirror_cuda.cu, compiled by nvcc, instead. */
#ifndef TRAIN_LINKS_MIRROR
#define MIRROR_IMPLEMENTATION
#elif !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L /* lstat under -std=c99: mirror.h defines it with its implementation only */
#endif
#include "../mirror.h"
#include "models.h"
#include "options.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#ifdef MIRROR_MPI
#include <stdlib.h>
#include <unistd.h>
#endif

/* Ctrl-C and SIGTERM (what docker, Slurm, systemd and Kubernetes send):
   fit saves a checkpoint before the next step and returns; the trainer
   exits with 128 + the signal's number. */
static volatile sig_atomic_t interrupted;
static void on_signal(int sig)
{
    interrupted = sig;
}

static void catch_signals(void)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    /* A reader that goes away (train | head) must not end the run: writes
       to the closed pipe fail with EPIPE instead, and training goes on.
       Set before the first line is written (each is flushed at once). */
    signal(SIGPIPE, SIG_IGN);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: train [options]\n"
               "  --data DIR          MNIST-format IDX files (plain or .gz), or CIFAR-10's binary batches\n"
               "                      (data_batch_1.bin ... test_batch.bin); default: synthetic digits\n"
               "  --synthetic N       synthetic training samples (default 10000; test set N/5)\n"
               "  --val-split F       validate each epoch on the last F of the training samples (0 < F < 1;\n"
               "                      shuffled once by --seed, never trained on); the test set then gives the\n"
               "                      final line alone (default: each epoch's test_* numbers are the test set's)\n"
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
               "  --curve-every N     with --history, --plot or --tensorboard: a point every N steps within each\n"
               "                      epoch too\n"
               "  --trace FILE.json   a timeline of the last 256 steps' phases per replica (chrome://tracing)\n"
               "  --tensorboard DIR   TensorBoard's event files of the curves in DIR (tensorboard --logdir DIR)\n");
    fprintf(f, /* in two: C99 promises string literals of 4095 characters */
               "  --phases            a line per epoch of each phase's time and the replicas' imbalance\n"
               "  --progress P        bar | lines | none (default: a bar on a terminal, lines otherwise and\n"
               "                      under mpirun)\n"
               "  --deterministic     bitwise the same parameters for any replica count: the default on CPU\n"
               "                      replicas (GPU replicas: off unless asked)\n"
               "  --no-deterministic  sums in each split's own order: equal within float32 rounding, a little faster\n"
               "  --chunk K           deterministic mode's chunk: K samples, whole chunks per replica (default 16)\n"
               "  --graphs            GPUs: record each replica's pass and update as CUDA graphs, replay them\n"
               "  --data-on-device M  auto | on | off: keep the data in each replica's device memory, uploaded once,\n"
               "                      and send a step's row indices alone (auto: GPUs, where the data fit; CPU\n"
               "                      replicas gather in place; on: CPU replicas too, a copy)\n"
               "  --shard-update M    auto | on | off: each replica updates a slice and keeps its optimizer state\n"
               "                      (ZeRO stage 1; auto: on for CPU replicas, off on GPUs); on, with CPU\n"
               "                      replicas under mpirun: across the processes too (see tools/reference.md)\n"
               "  --optimizer NAME    sgd | momentum | adam | adamw (default adam)\n"
               "  --seed N            (default 1)\n"
               "  --save PATH         write a checkpoint to PATH at the end (and on Ctrl-C or SIGTERM), the two\n"
               "                      before it kept as PATH.1, PATH.2; a file there that is not one is refused\n"
               "  --checkpoint-every N  also every N steps (needs --save)\n"
               "  --resume PATH       continue from a checkpoint, its model (--model, if given, must be it);\n"
               "                      --epochs counts the total, the checkpoint's epochs included\n"
               "  --evaluate CKPT     no training: the checkpoint's model (its architecture, settings and\n"
               "                      weights) on the test set of --data DIR (or of the synthetic digits):\n"
               "                      its test_loss and test_acc\n"
               "  --predict CKPT      no training: the checkpoint's model's outputs for every sample of --data\n"
               "                      (a .npy file of samples, or a DIR's test set) into --out FILE.npy\n"
               "  --out FILE.npy      --predict's outputs: float32, a row per sample, in order (logits by default)\n"
               "  --probabilities     --predict: softmax probabilities instead of logits\n"
               "  --init-weights FILE start from the weights of a safetensors file (a state_dict saved from\n"
               "                      PyTorch, a checkpoint rewritten by another tool): optimizer and step afresh\n"
               "  --precision P       fp32 | fp16 | bf16 (mixed: fp32 master weights; default fp32)\n"
               "  --loss-scale S      dynamic (fp16's default) | none (bf16's) | a number: a static scale\n"
               "  --growth-interval N finite steps before a dynamic scale doubles (default 2000)\n"
               "  --max-skips N       fail after N skipped steps in a row (default 50)\n"
               "  --report-nonfinite 1  name the layer and replica of every skipped step (slower)\n"
               "exit status: 0 done; 1 failed; 2 bad options; 3 trained and saved, but --history, --plot,\n"
               "--trace or --tensorboard could not be written; 128 + N stopped by signal N (after saving)\n");
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

/* DIR/NAME in memory of its own: a path is never cut short (a cut one
   could name another directory's files). NULL: out of memory. */
static char *joined(const char *dir, const char *name)
{
    size_t size = strlen(dir) + strlen(name) + 2;
    char *path = (char *)malloc(size);
    if (path) snprintf(path, size, "%s/%s", dir, name);
    return path;
}

/* Whether DIR/NAME is there, whatever it is (a link to nothing too: the
   loader then says what is wrong with it). */
static int there(const char *dir, const char *name)
{
    char *path = joined(dir, name);
    struct stat st;
    int found = path && lstat(path, &st) == 0;
    free(path);
    return found;
}

/* --data DIR: CIFAR-10's binary batches when DIR holds data_batch_1.bin
   (data_batch_1.bin ... data_batch_5.bin for training, test_batch.bin for
   the test), else MNIST's IDX files; a directory with neither's first file
   gets a message naming both. train NULL: the test set alone. */
static int load_dir(const char *dir, mirror_dataset *train, mirror_dataset *test, mirror_error *err)
{
    static const char *const names[6] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                         "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
    char *paths[6];
    const char *batches[5];
    struct stat st;
    int i, rc = MIRROR_OK;
    if (!there(dir, names[0])) {
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && !there(dir, "train-images-idx3-ubyte") &&
            !there(dir, "train-images-idx3-ubyte.gz")) {
            err->code = MIRROR_ERR_IO;
            snprintf(err->message, sizeof err->message,
                     "%.200s%s: neither MNIST's IDX files (train-images-idx3-ubyte[.gz] ...) nor CIFAR-10's binary "
                     "batches (data_batch_1.bin ... data_batch_5.bin, test_batch.bin) are there",
                     dir, strlen(dir) > 200 ? "..." : "");
            return err->code;
        }
        return mirror_dataset_load_mnist(train, test, dir, err);
    }
    for (i = 0; i < 6; i++)
        if (!(paths[i] = joined(dir, names[i]))) rc = MIRROR_ERR_NO_MEMORY;
    if (rc) {
        err->code = rc;
        snprintf(err->message, sizeof err->message, "out of memory");
    } else {
        for (i = 0; i < 5; i++) batches[i] = paths[i];
        if (!train || (rc = mirror_dataset_load_cifar10(train, batches, 5, err)) == MIRROR_OK) {
            batches[0] = paths[5];
            if ((rc = mirror_dataset_load_cifar10(test, batches, 1, err))) mirror_dataset_free(train);
        }
    }
    for (i = 0; i < 6; i++) free(paths[i]);
    return rc;
}

/* The schedule's step counts, from the run's steps in all: an epoch's
   times the epochs, or SIZE_MAX where that overflows (a run no one ends;
   its rate then barely moves, as over any very long run). */
static void schedule_steps(options *o, size_t per_epoch)
{
    mirror_optimizer_desc *opt = &o->md.optimizer;
    size_t epochs = o->fd.epochs, total = per_epoch && epochs > SIZE_MAX / per_epoch ? SIZE_MAX : per_epoch * epochs;
    if (opt->schedule == MIRROR_LR_STEP) opt->step_size = o->lr_step ? o->lr_step : total / 3 ? total / 3 : 1;
    if (opt->schedule == MIRROR_LR_COSINE) opt->total_steps = total > opt->warmup ? total : opt->warmup + 1;
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
static int warn_outputs(unsigned failed, const mirror_fit_desc *fd)
{
    static const unsigned bits[4] = {MIRROR_OUTPUT_HISTORY, MIRROR_OUTPUT_PLOT, MIRROR_OUTPUT_TRACE,
                                     MIRROR_OUTPUT_TENSORBOARD};
    static const char *const names[4] = {"history", "plot", "trace", "TensorBoard events in"};
    static const char *const kept[4] = {"it holds an earlier version", "it holds an earlier version",
                                        "it holds an earlier version", "its file holds the points before"};
    const char *paths[4];
    int i;
    paths[0] = fd->history;
    paths[1] = fd->plot;
    paths[2] = fd->trace;
    paths[3] = fd->tensorboard;
    for (i = 0; i < 4; i++)
        if (failed & bits[i])
            fprintf(stderr, "train: warning: the %s %s could not be written; %s\n", names[i], paths[i], kept[i]);
    return failed ? 3 : 0;
}

/* A run: its options (the descs among them), what it makes on the way,
   and its last epoch's log. */
typedef struct run {
    options o;
    mirror_error err;
    mirror_strategy *s;
    mirror_dataset train, val, test; /* val: --val-split's, else empty */
    mirror_model *m;
    mirror_checkpoint_info at; /* where a resumed run starts; all zero for a fresh one */
    totals sums;
    mirror_epoch_log log;
} run;

/* --resume PATH: the model the checkpoint holds, told by its description
   (mirror_checkpoint_describe) among the trainer's own, and its dropout;
   the load then checks every layer. A --model or --dropout that is not
   the checkpoint's is refused here, by name. 0, or 1 (the exit status)
   with a message. */
static int model_of_checkpoint(options *o)
{
    static char desc[16384];
    const char *path = o->fd.resumed_from, *kind, *drop;
    mirror_error err = {0, ""};
    double p;
    if (!path) return 0;
    if (mirror_checkpoint_describe(path, desc, sizeof desc, &err)) {
        fprintf(stderr, "train: %s\n", err.message);
        return 1;
    }
    kind = strstr(desc, ";residual") ? "resnet" : strstr(desc, ";batchnorm") ? "cnn-bn"
         : strstr(desc, ";conv2d")   ? "cnn"    : "mlp";
    if (o->model && strcmp(o->model, kind)) {
        fprintf(stderr, "train: leave --model out to resume %s with its own model: --model %s is not the one it holds "
                        "(%s)\n", path, o->model, desc);
        return 1;
    }
    o->model = kind;
    p = (drop = strstr(desc, ";dropout(")) ? strtod(drop + 9, NULL) : 0.0;
    if (o->dropout >= 0.0 && (float)o->dropout != (float)p) {
        fprintf(stderr, "train: leave --dropout out to resume %s with its own: --dropout %g is not its %g\n", path,
                o->dropout, p);
        return 1;
    }
    o->dropout = p;
    return 0;
}

/* The command line into o: -1 to run, else the exit status (--help: 0,
   a usage error: 2; 1: a --resume checkpoint that cannot be read). */
static int read_options(int argc, char **argv, options *o)
{
    options first;
    int rc = options_read(argc, argv, o);
    if (rc == OPTIONS_RUN) { /* a usage error before the checkpoint is read: exit 2 whatever the file */
        first = *o;
        if ((rc = options_check(&first)) == OPTIONS_RUN && !(o->evaluate || o->predict) && model_of_checkpoint(o))
            return 1;
        if (rc == OPTIONS_RUN) rc = options_check(o);
        else memcpy(o->why, first.why, sizeof o->why);
    }
    switch (rc) {
    case OPTIONS_RUN: return -1;
    case OPTIONS_HELP: usage(stdout); return 0;
    case OPTIONS_UNKNOWN: fprintf(stderr, "train: %s\n", o->why); usage(stderr); return 2;
    default: fprintf(stderr, "train: %s\n", o->why); return 2;
    }
}

#ifdef MIRROR_MPI
/* Open MPI's MPI_Init waits for every process of the job, with no
   deadline: a process that ended before it joined (a bad option, --help)
   would leave the others waiting for ever. The join gets the strategy's
   timeout here ($MIRROR_TIMEOUT, else 300 s), after which SIGALRM ends
   this process with a message (the library itself never exits), and
   mpirun the job. */
static void on_join_timeout(int sig)
{
    static const char why[] = "train: the other processes did not join within the timeout ($MIRROR_TIMEOUT, else "
                              "300 s): one of them ended or failed before it started\n";
    ssize_t written = write(2, why, sizeof why - 1);
    (void)sig, (void)written;
    _exit(1);
}

static void join_deadline(int on)
{
    const char *env = getenv("MIRROR_TIMEOUT");
    double t = env ? strtod(env, NULL) : 0.0;
    if (!on) {
        alarm(0);
        return;
    }
    signal(SIGALRM, on_join_timeout);
    alarm(t > 0.0 && t < 1e6 ? (unsigned)t + 1 : 301);
}
#else
static void join_deadline(int on) { (void)on; }
#endif

/* The strategy first: with MPI it joins the processes, which then agree
   on the data (one that cannot load it fails them all, no hang). */
static int start_strategy(run *r)
{
    int rc;
    join_deadline(1);
    rc = mirror_strategy_create(&r->o.sd, &r->s, &r->err); /* with MPI: this process's replicas */
    join_deadline(0);
    if (rc) {
        complain(rc, r->err.message);
        return rc;
    }
    where = mirror_strategy_process(r->s);
    return 0;
}

/* --val-split F: the last F of the training samples (at least one, and
   one left to train on) in a permutation of the seed's, fixed for the
   run and its resumes, become the validation set: mirror_dataset_split,
   the rest staying the training set in the permutation's order (fit
   shuffles it each epoch as any other). The same split for any replica
   or process count: every process makes it alike. */
static int split_validation(run *r)
{
    mirror_dataset all = r->train;
    size_t val = (size_t)((double)all.count * r->o.val_split);
    int rc;
    if (!r->o.val_split) return MIRROR_OK;
    if (!val) val = 1;
    memset(&r->train, 0, sizeof r->train);
    rc = mirror_dataset_split(&all, val, r->o.md.seed ^ 0x76616c69ull /* "vali" */, &r->train, &r->val, &r->err);
    mirror_dataset_free(&all);
    return rc;
}

/* The synthetic digits' test set: a fifth of the training samples' count
   (at least one), from a seed of its own. */
static size_t synthetic_test_count(size_t train) { return train / 5 ? train / 5 : 1; }

/* --data DIR, or the synthetic digits (a test set of a fifth); with
   --val-split, the validation set cut from the training samples. */
static int load_data(run *r)
{
    const options *o = &r->o;
    int rc;
    if (o->data)
        rc = load_dir(o->data, &r->train, &r->test, &r->err);
    else if ((rc = mirror_dataset_synthetic_digits(&r->train, o->synthetic, o->md.seed, &r->err)) == MIRROR_OK)
        rc = mirror_dataset_synthetic_digits(&r->test, synthetic_test_count(o->synthetic), o->md.seed + 7919, &r->err);
    if (rc == MIRROR_OK) rc = split_validation(r);
    if ((rc = mirror_agree(r->s, rc, &r->err))) {
        complain(rc, r->err.message);
        return rc;
    }
    if (o->val_split)
        say("data: %s, %zu train, %zu validation (--val-split %g of the training samples) and %zu test samples of "
            "%zux%zu\n",
            o->data ? o->data : "synthetic digits", r->train.count, r->val.count, o->val_split, r->test.count,
            r->train.height, r->train.width);
    else
        say("data: %s, %zu train and %zu test samples of %zux%zu\n", o->data ? o->data : "synthetic digits",
            r->train.count, r->test.count, r->train.height, r->train.width);
    say("strategy: %s\n", mirror_strategy_describe(r->s));
    return 0;
}

/* The batch and the micro-batches cut to the data, with a notice. */
static void fit_batch_to_data(mirror_fit_desc *fd, size_t samples)
{
    /* a batch beyond the data would size every arena for samples that never come */
    if (fd->batch > samples) {
        if (where.rank == 0)
            fprintf(stderr, "train: --batch %zu is more than the %zu training samples: batches of %zu\n", fd->batch,
                    samples, samples);
        fd->batch = samples;
    }
    /* and so would micro-batches beyond it: the step takes the data once */
    if (fd->accumulate > 1 && fd->batch * fd->accumulate > samples) {
        size_t fits = (samples + fd->batch - 1) / fd->batch;
        if (where.rank == 0)
            fprintf(stderr,
                    "train: --accumulate %zu of --batch %zu is more than the %zu training samples: one step of %zu "
                    "micro-batches an epoch\n",
                    fd->accumulate, fd->batch, samples, fits);
        fd->accumulate = fits;
    }
}

/* Accumulation ends where one big batch ends, except in batchnorm layers:
   their statistics are each micro-batch's, not the step's. */
static void warn_batchnorm_accumulation(const options *o)
{
    int batchnorm = !strcmp(o->model, "cnn-bn") || !strcmp(o->model, "resnet");
    if (!batchnorm || o->fd.accumulate < 2 || where.rank != 0) return;
    fprintf(stderr,
            "train: --accumulate %zu with the batchnorm layers of %s: each micro-batch of %zu normalises with its own "
            "statistics, so the run does not end where --batch %zu would\n",
            o->fd.accumulate, o->model, o->fd.batch, o->fd.batch * o->fd.accumulate);
}

/* The model line: the model as built, with what the library settled. */
static void describe_model(const run *r)
{
    const options *o = &r->o;
    mirror_model_desc md = mirror_model_query_desc(r->m);
    say("model: %s, %zu parameters, optimizer %s (lr %g, %s), global batch %zu, precision %s", o->model,
        mirror_num_parameters(r->m), o->optimizer, (double)md.optimizer.lr, o->lr_schedule, o->fd.batch,
        o->precision);
    if (md.precision != MIRROR_PRECISION_FP32)
        say(", loss scaling %s (%g)", mirror_loss_scaling_name(md.loss_scale.kind), (double)md.loss_scale.init_scale);
    if (md.deterministic) say(", deterministic (chunks of %zu samples)", md.chunk);
    if (md.shard_update == MIRROR_SHARD_ON)
        say(", sharded update%s", mirror_strategy_process(md.strategy).processes > 1 ? " across processes" : "");
    if (md.graphs) say(", graphs");
    if (md.shard_update == MIRROR_SHARD_OFF) say(", unsharded update");
    say("\n");
}

/* The model desc completed from the strategy and the data, the model
   created and its layers added (examples/models.h). */
static int build_model(run *r)
{
    options *o = &r->o;
    mirror_model_desc *md = &o->md;
    int rc;
    schedule_steps(o, mirror_num_batches(r->train.count, o->fd.batch * o->fd.accumulate, 0));
    md->strategy = r->s;
    /* Deterministic unless asked otherwise, where it runs: CPU replicas.
       (It costs the CNN a few percent; bench/RESULTS.md.) */
    if (o->deterministic < 0) md->deterministic = !strncmp(mirror_strategy_query_desc(r->s).devices, "cpu", 3);
    md->channels = r->train.channels;
    md->height = r->train.height;
    md->width = r->train.width;
    md->max_batch = o->fd.batch;
    if ((rc = mirror_model_create(md, &r->m, &r->err))) {
        complain(rc, r->err.message);
        return rc;
    }
    if ((rc = example_model(r->m, o->model, (float)o->dropout))) {
        complain(rc, mirror_model_error(r->m));
        return rc;
    }
    describe_model(r);
    return 0;
}

/* --resume PATH: the checkpoint's parameters and place in the run; one
   that counts other batches than this run's is refused. --init-weights
   FILE: the parameters alone, from any safetensors file of the model's
   tensors; the run starts at its beginning. */
static int resume(run *r)
{
    const mirror_fit_desc *fd = &r->o.fd;
    mirror_checkpoint_info *at = &r->at;
    mirror_error err;
    int rc;
    if (r->o.init_weights) {
        if ((rc = mirror_load_weights(r->m, r->o.init_weights, &err))) complain(rc, err.message);
        else say("init-weights: %s\n", r->o.init_weights);
        return rc;
    }
    if (!fd->resumed_from) return 0;
    if ((rc = mirror_checkpoint_load(r->m, fd->resumed_from, 0, at))) {
        complain(rc, mirror_model_error(r->m));
        if (rc == MIRROR_ERR_SHAPE && where.rank == 0) /* the layers told one of the trainer's models, wrongly */
            fprintf(stderr, "train: %s holds a model the trainer does not build (mlp, cnn, cnn-bn, resnet): "
                            "--evaluate and --predict take any checkpoint's\n", fd->resumed_from);
        return rc;
    }
    say("resume: %s, step %llu, epoch %llu step %llu\n", fd->resumed_from, (unsigned long long)at->step,
        (unsigned long long)at->epoch + 1, (unsigned long long)at->epoch_step);
    if (at->batch && (at->batch != fd->batch * fd->accumulate || at->samples != r->train.count || at->drop_remainder)) {
        if (where.rank == 0)
            fprintf(stderr,
                    "train: the checkpoint counts batches of %llu over %llu samples; this run has %zu over %zu%s\n",
                    (unsigned long long)at->batch, (unsigned long long)at->samples, fd->batch * fd->accumulate,
                    r->train.count,
                    at->samples != r->train.count ? " (the same --data, --synthetic and --val-split as the "
                                                    "checkpoint's run give its training samples)"
                                                  : "");
        return 1;
    }
    if (r->o.val_split && at->shuffle_seed != r->o.md.seed) { /* the split is the seed's */
        if (where.rank == 0)
            fprintf(stderr,
                    "train: resume with --seed %llu: --val-split takes its validation samples by the seed, and "
                    "with --seed %llu they would be samples the checkpoint's run trained on\n",
                    (unsigned long long)at->shuffle_seed, (unsigned long long)r->o.md.seed);
        return 1;
    }
    return 0;
}

/* A checkpoint that has trained every epoch asked for leaves nothing to
   do: said on stderr (the run has no final: line) with what would train
   more, and exit 0, as the run that trained them ended: resuming a
   finished run again (a job requeued after its end) is no failure. */
static int trained_already(const run *r)
{
    unsigned long long done = r->at.epoch;
    if (done < r->o.fd.epochs) return 0;
    if (where.rank == 0)
        fprintf(stderr,
                "train: nothing to train: %s has trained %llu epoch%s and --epochs is %zu (--epochs counts every "
                "epoch, the checkpoint's included: --epochs %llu trains one more; --evaluate %s gives its numbers)\n",
                r->o.fd.resumed_from, done, done == 1 ? "" : "s", r->o.fd.epochs, done + 1, r->o.fd.resumed_from);
    return 1;
}

/* mirror_fit from where the checkpoint left off (or the start) to
   --epochs; 128 + N when signal N stopped it. */
static int fit(run *r)
{
    mirror_fit_desc *fd = &r->o.fd;
    int rc;
    fd->train = &r->train;
    fd->validation = r->o.val_split ? &r->val : &r->test; /* without --val-split, as Keras' validation_data */
    fd->validation_name = r->o.val_split ? "val" : "test";
    fd->initial_epoch = (size_t)r->at.epoch; /* a resumed run: where the checkpoint left it */
    fd->initial_step = (size_t)r->at.epoch_step;
    fd->shuffle_seed = r->at.shuffle_seed;
    fd->on_epoch = on_epoch;
    fd->user = &r->sums;
    fd->stop = &interrupted;
    if ((rc = mirror_fit(r->m, fd, &r->log))) {
        complain(rc, mirror_model_error(r->m));
        if (rc == MIRROR_ERR_STOPPED && interrupted) rc = 128 + interrupted;
    }
    return rc;
}

/* The final line, then a warning for each side output not written: 3 if
   any, else 0 (1: the test set's evaluation failed). train_* are the last
   epoch's running means as it trained; with --val-split, val_* the
   validation set's after it and test_* the test set's, evaluated here
   once; without, test_* are the last epoch's validation, on the test set. */
static int report(run *r)
{
    const options *o = &r->o;
    const mirror_epoch_log *log = &r->log;
    mirror_loss_scale_state scaler;
    mirror_metrics test = {0.0, 0, 0};
    double test_loss = log->val_loss, test_acc = log->val_acc;
    int rc;
    if (o->val_split) {
        if ((rc = mirror_evaluate(r->m, &r->test, o->fd.batch, &test))) {
            complain(rc, mirror_model_error(r->m));
            return 1;
        }
        test_loss = test.count ? test.loss_sum / (double)test.count : 0.0;
        test_acc = test.count ? (double)test.correct / (double)test.count : 0.0;
    }
    say("final: replicas=%zu epochs=%zu model=%s train_loss=%.4f train_acc=%.4f ", mirror_num_replicas(r->s),
        o->fd.epochs, o->model, log->train_loss, log->train_acc);
    if (o->val_split) say("val_loss=%.4f val_acc=%.4f ", log->val_loss, log->val_acc);
    say("test_loss=%.4f test_acc=%.4f samples_per_s=%.0f seconds=%.1f precision=%s", test_loss, test_acc,
        r->sums.seconds > 0 ? (double)r->sums.samples / r->sums.seconds : 0.0, log->elapsed, o->precision);
    if (mirror_model_query_desc(r->m).precision != MIRROR_PRECISION_FP32 &&
        mirror_loss_scale_get(r->m, &scaler) == MIRROR_OK)
        say(" loss_scale=%g skipped=%llu", (double)scaler.scale, (unsigned long long)scaler.skipped);
    say(" data=%s\n", log->data_on_device ? "device" : "host"); /* where the training data lived */
    return warn_outputs(log->failed_outputs, &o->fd);
}

static void end_run(run *r)
{
    mirror_model_destroy(r->m);
    mirror_strategy_destroy(r->s);
    mirror_dataset_free(&r->train);
    mirror_dataset_free(&r->val);
    mirror_dataset_free(&r->test);
}

/* --evaluate and --predict's samples: --data's (a directory's test set,
   or for --predict a .npy file of samples), else the synthetic test set
   that a run of the same --synthetic and --seed tests on. */
static int load_samples(run *r)
{
    const options *o = &r->o;
    struct stat st;
    int rc, dir = o->data && stat(o->data, &st) == 0 && S_ISDIR(st.st_mode);
    if (!o->data) {
        rc = mirror_dataset_synthetic_digits(&r->test, synthetic_test_count(o->synthetic), o->md.seed + 7919, &r->err);
    } else if (dir) {
        rc = load_dir(o->data, NULL, &r->test, &r->err);
    } else if (o->predict) {
        rc = mirror_dataset_load_npy(&r->test, o->data, NULL, &r->err);
    } else {
        r->err.code = rc = MIRROR_ERR_ARGUMENT;
        snprintf(r->err.message, sizeof r->err.message,
                 "--evaluate --data %.80s: not a directory; --evaluate takes one of MNIST's or CIFAR-10's files "
                 "(their test set, labelled)",
                 o->data);
    }
    if ((rc = mirror_agree(r->s, rc, &r->err))) {
        complain(rc, r->err.message);
        return rc;
    }
    say("data: %s, %zu %s of %zux%zux%zu\n", o->data ? o->data : "synthetic digits", r->test.count,
        o->data && !dir ? "samples" : "test samples", r->test.channels, r->test.height, r->test.width);
    say("strategy: %s\n", mirror_strategy_describe(r->s));
    return 0;
}

/* --evaluate CKPT or --predict CKPT: the model the checkpoint holds,
   rebuilt (mirror_model_from_checkpoint), on the samples; no training.
   Its evaluation's line names the set; --predict's outputs go to --out
   (mirror_predict_write: never over the checkpoint or the data). */
static int infer(run *r)
{
    const options *o = &r->o;
    const char *ckpt = o->evaluate ? o->evaluate : o->predict, *inputs[2];
    mirror_metrics got = {0.0, 0, 0};
    mirror_model_desc md;
    int rc;
    if ((rc = start_strategy(r)) || (rc = load_samples(r))) return rc;
    if ((rc = mirror_model_from_checkpoint(r->s, ckpt, o->fd.batch, &r->m, &r->at, &r->err))) {
        complain(rc, r->err.message);
        return rc;
    }
    md = mirror_model_query_desc(r->m);
    say("model: %s, step %llu, %zu parameters, %zu outputs, precision %s\n", ckpt, (unsigned long long)r->at.step,
        mirror_num_parameters(r->m), mirror_num_outputs(r->m), mirror_precision_name(md.precision));
    if (o->predict) {
        inputs[0] = o->data;
        inputs[1] = NULL;
        if ((rc = mirror_predict_write(r->m, r->test.x, r->test.count, o->probabilities, o->out, inputs))) {
            complain(rc, mirror_model_error(r->m));
            return rc;
        }
        say("predict: %zu samples, %s of %zu classes, into %s\n", r->test.count,
            o->probabilities ? "probabilities" : "logits", mirror_num_outputs(r->m), o->out);
        return 0;
    }
    if ((rc = mirror_evaluate(r->m, &r->test, 0, &got))) {
        complain(rc, mirror_model_error(r->m));
        return rc;
    }
    say("evaluate: set=test samples=%zu test_loss=%.4f", got.count, got.count ? got.loss_sum / (double)got.count : 0.0);
    if (md.loss == MIRROR_LOSS_SOFTMAX_CE) /* an accuracy of classes: not of an MSE model's */
        say(" test_acc=%.4f", got.count ? (double)got.correct / (double)got.count : 0.0);
    say("\n");
    return 0;
}

/* The trainer in steps: the options, the strategy, the data, the model,
   a checkpoint to resume from, the training, the final line. */
int main(int argc, char **argv)
{
    run r = {0}; /* no strategy, data or model yet */
    int rc, unsaved = 0; /* 3: a side output was not written */
    catch_signals();
    if ((rc = read_options(argc, argv, &r.o)) >= 0) return rc; /* --help, or a usage error */
    if (r.o.evaluate || r.o.predict) {
        rc = infer(&r);
        goto out;
    }
    if ((rc = start_strategy(&r)) || (rc = load_data(&r))) goto out;
    fit_batch_to_data(&r.o.fd, r.train.count);
    warn_batchnorm_accumulation(&r.o);
    if ((rc = build_model(&r)) || (rc = resume(&r)) || trained_already(&r)) goto out;
    if ((rc = fit(&r))) goto out;
    unsaved = report(&r);
out:
    end_run(&r);
    return rc > 128 ? rc : rc ? 1 : unsaved;
}
