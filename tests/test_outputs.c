/* test_outputs.c - fit's side outputs (history, plot, trace, TensorBoard) get a
   checkpoint's care: a path naming a checkpoint file, another output, a
   FIFO or a directory is refused before the first step and overwrites
   nothing; a write that fails mid-run (the file size limit, as on a full
   disk) keeps the previous complete file, the training and the checkpoint;
   a resumed fit continues its history, mid-epoch too (the file the run
   that was not stopped writes); a path of any length is joined whole or
   refused naming PATH_MAX; a fit inside fit's hook on the same model is
   refused; missing directories are made as mkdir -p makes them, and a fit
   refused before its first step leaves the disk as it found it; the
   TensorBoard scalars that do not apply are left out; the plot's ticks
   are round, its loss on a log scale past a decade, its legend of line
   swatches, its XML well-formed. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, mkfifo, setrlimit; mirror.h is not the first include */
#include "alloc_count.h"
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "digits.h"
#include "files.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static mirror_dataset data;

static int notices;
static char notice_last[512];
static void logger(void *user, int level, const char *message)
{
    (void)user;
    if (level != MIRROR_LOG_NOTICE) return;
    notices++;
    snprintf(notice_last, sizeof notice_last, "%s", message);
}

/* An MLP on 8x8 digits, seed 3, deterministic: equal runs are bitwise equal. */
static mirror_model *model(mirror_strategy *s)
{
    mirror_model_desc d = model_desc(s, 1, 8, 8, 12, 3);
    d.deterministic = 1;
    d.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.0f);
    return build_model(&d, NULL, "flatten, dense 8, relu, dense 10");
}

/* 50 samples in batches of 12: 5 steps an epoch. */
static mirror_fit_desc fit_desc(size_t epochs)
{
    mirror_fit_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.validation = &data, fd.epochs = epochs, fd.batch = 12;
    fd.progress = MIRROR_PROGRESS_NONE;
    return fd;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *p;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    p = (char *)malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (p) p[n] = '\0';
    fclose(f);
    return p;
}

static int lines_of(const char *path)
{
    char *text = slurp(path), *c;
    int n = 0;
    for (c = text; c && *c; c++) n += *c == '\n';
    free(text);
    return text ? n : -1;
}

/* Whether the file holds exactly text. */
static int holds(const char *path, const char *text)
{
    char *now = slurp(path);
    int same = now && !strcmp(now, text);
    free(now);
    return same;
}

/* Files in root whose name contains part. */
static int files_with(const char *part)
{
    DIR *d = opendir(root);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL) n += strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}

/* ---- paths refused before the first step ---- */

/* fit with the output `which` (0 history, 1 plot, 2 trace, 3 TensorBoard)
   at out: refused with MIRROR_ERR_ARGUMENT, no step taken, and `keep` (a
   file) unchanged. */
static void refused(mirror_model *m, mirror_fit_desc fd, int which, const char *out, const char *keep,
                    const char *what)
{
    char *before = keep ? slurp(keep) : NULL;
    uint64_t steps = mirror_optimizer_steps(m);
    int rc;
    if (which == 0) fd.history = out;
    if (which == 1) fd.plot = out;
    if (which == 2) fd.trace = out;
    if (which == 3) fd.tensorboard = out;
    rc = mirror_fit(m, &fd, NULL);
    CHECK(rc == MIRROR_ERR_ARGUMENT && mirror_optimizer_steps(m) == steps,
          "%s: refused before the first step (rc %d: %s)", what, rc, mirror_model_error(m));
    CHECK(!keep || (before && holds(keep, before)), "%s: %s is unchanged", what, keep);
    free(before);
}

static void test_refused(void)
{
    char ckpt[256], other[300], name[300], fifo[256], dir[256], link_[256];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s);
    mirror_fit_desc fd = fit_desc(2);
    path_in(ckpt, "run.ckpt");
    fd.checkpoint = ckpt, fd.checkpoint_every = 5; /* after each epoch: run.ckpt and run.ckpt.1 */
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "a fit saving run.ckpt: %s", mirror_model_error(m));
    snprintf(name, sizeof name, "%s.1", ckpt);
    CHECK(access(name, F_OK) == 0, "run.ckpt.1 is there");

    refused(m, fd, 0, ckpt, ckpt, "history = the checkpoint");
    refused(m, fd, 2, ckpt, ckpt, "trace = the checkpoint");
    refused(m, fd, 1, name, name, "plot = run.ckpt.1, the previous checkpoint");
    snprintf(name, sizeof name, "%s/./run.ckpt.2", root);
    refused(m, fd, 0, name, NULL, "history = ./run.ckpt.2, kept by the next save (keep 3)");
    snprintf(name, sizeof name, "%s.lock", ckpt);
    refused(m, fd, 1, name, name, "plot = run.ckpt.lock");
    path_in(other, "hard.csv");
    CHECK(link(ckpt, other) == 0, "a hard link to run.ckpt");
    refused(m, fd, 0, other, ckpt, "history = a second name of the checkpoint");
    unlink(other);

    /* The TensorBoard directory, made before the first step where a save
       would then fail after the whole run: the checkpoint, a kept copy to
       come, the lock, the one a run resumed from, another output. */
    refused(m, fd, 3, ckpt, ckpt, "TensorBoard = the checkpoint");
    snprintf(name, sizeof name, "%s.2", ckpt);
    refused(m, fd, 3, name, NULL, "TensorBoard = run.ckpt.2, kept by the next save (keep 3)");
    CHECK(access(name, F_OK) != 0, "no directory made at run.ckpt.2");
    snprintf(name, sizeof name, "%s.lock", ckpt);
    refused(m, fd, 3, name, name, "TensorBoard = run.ckpt.lock");
    path_in(other, "fresh.ckpt");
    fd.checkpoint = other;
    refused(m, fd, 3, other, NULL, "TensorBoard = a checkpoint path not yet saved");
    CHECK(access(other, F_OK) != 0, "no directory made at the checkpoint's path");
    fd.checkpoint = NULL, fd.resumed_from = ckpt;
    snprintf(name, sizeof name, "%s.7", ckpt);
    refused(m, fd, 3, name, NULL, "TensorBoard = resumed_from.7");
    fd.resumed_from = NULL;
    path_in(other, "tb-or-history");
    fd.history = other;
    refused(m, fd, 3, other, NULL, "TensorBoard and history on one path");
    fd.history = NULL, fd.checkpoint = ckpt;
    CHECK(access(name, F_OK) != 0 && access(other, F_OK) != 0, "no directory made at run.ckpt.7 or the history's");

    /* The checkpoint a run resumed from, and its kept copies, whatever keep. */
    fd.checkpoint = NULL;
    fd.resumed_from = ckpt;
    refused(m, fd, 0, ckpt, ckpt, "history = resumed_from");
    snprintf(name, sizeof name, "%s.1", ckpt);
    refused(m, fd, 2, name, name, "trace = resumed_from.1");
    fd.resumed_from = NULL;

    /* Two outputs on one file. */
    path_in(other, "curves.csv");
    fd.plot = other;
    refused(m, fd, 0, other, NULL, "history and plot on one file");
    fd.plot = NULL;

    /* Not regular files: refused without opening them (a FIFO would block). */
    path_in(fifo, "fifo");
    path_in(dir, "dir");
    path_in(link_, "link.csv");
    CHECK(mkfifo(fifo, 0600) == 0 && mkdir(dir, 0700) == 0 && symlink(other, link_) == 0, "a FIFO, a directory, a link");
    alarm(60); /* a FIFO opened for writing blocks: fail rather than hang */
    refused(m, fd, 0, fifo, NULL, "history = a FIFO");
    refused(m, fd, 1, fifo, NULL, "plot = a FIFO");
    refused(m, fd, 2, fifo, NULL, "trace = a FIFO");
    refused(m, fd, 0, dir, NULL, "history = a directory");
    refused(m, fd, 1, link_, NULL, "plot = a symbolic link");
    CHECK(mirror_trace_write(m, fifo) == MIRROR_ERR_ARGUMENT, "mirror_trace_write to a FIFO: refused");
    alarm(0);

    /* What stays allowed: a name that only starts like the checkpoint's, and
       PATH.5 beyond keep 3. */
    fd.checkpoint = ckpt, fd.epochs = 3, fd.initial_epoch = 2;
    snprintf(name, sizeof name, "%s.csv", ckpt);
    snprintf(other, sizeof other, "%s.5", ckpt);
    fd.history = name, fd.plot = other;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && lines_of(name) == 2,
          "history run.ckpt.csv and plot run.ckpt.5 (keep 3) are written: %s", mirror_model_error(m));
    CHECK(files_with(".tmp-mirror-") == 0, "no temporary file is left");
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* The CRC-32 and size of a file's bytes (0 and 0 when it cannot be read). */
static uint32_t file_crc(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char buf[4096];
    uint32_t crc = 0;
    size_t n;
    *size = 0;
    if (!f) return 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) crc = mirror__crc32(crc, buf, n), *size += n;
    fclose(f);
    return crc;
}

/* The file the parameters were loaded from, which fit knows without being
   told (as it is told resumed_from): mirror_weights_source names it, and
   an output that names it is refused, the file unchanged; for a
   checkpoint its kept copies too. */
static void test_loaded_from(void)
{
    char ckpt[256], weights[256], name[300];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s), *fresh = model(s);
    mirror_fit_desc fd = fit_desc(1);
    mirror_weights_source src = mirror_model_weights_source(fresh);
    uint32_t crc;
    size_t size, now;
    FILE *in, *out;
    int c;
    CHECK(!src.path && !src.checkpoint && !src.crc32 && !src.size && !mirror_model_weights_source(NULL).path,
          "a model built from its seed, or none: no file");
    path_in(ckpt, "src.ckpt");
    fd.checkpoint = ckpt;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "a fit saving src.ckpt: %s", mirror_model_error(m));
    fd.checkpoint = NULL;
    CHECK(!mirror_model_weights_source(m).path, "saving a checkpoint is not loading one");
    crc = file_crc(ckpt, &size);
    CHECK(mirror_checkpoint_load(fresh, ckpt, 0, NULL) == MIRROR_OK, "src.ckpt loaded: %s", mirror_model_error(fresh));
    src = mirror_model_weights_source(fresh);
    CHECK(src.path && !strcmp(src.path, ckpt) && src.checkpoint == 1 && src.crc32 == crc && src.size == size && size,
          "the source: src.ckpt, a checkpoint, its CRC-32 %08lx and %zu bytes (got %s, %d, %08lx, %llu)",
          (unsigned long)crc, size, src.path ? src.path : "(none)", src.checkpoint, (unsigned long)src.crc32,
          (unsigned long long)src.size);
    {
        mirror_model *rebuilt = NULL;
        CHECK(mirror_model_from_checkpoint(s, ckpt, 0, &rebuilt, NULL, NULL) == MIRROR_OK &&
                  mirror_model_weights_source(rebuilt).checkpoint == 1 &&
                  mirror_model_weights_source(rebuilt).crc32 == crc,
              "a model rebuilt from src.ckpt has it as its source");
        mirror_model_destroy(rebuilt);
    }
    refused(fresh, fd, 0, ckpt, NULL, "history = the checkpoint loaded");
    snprintf(name, sizeof name, "%s.1", ckpt);
    refused(fresh, fd, 1, name, NULL, "plot = the loaded checkpoint's PATH.1");
    CHECK(file_crc(ckpt, &now) == crc && now == size, "src.ckpt is unchanged");

    /* A weights file (a copy of the checkpoint, read as weights), then a second name of it. */
    path_in(weights, "w.safetensors");
    in = fopen(ckpt, "rb"), out = fopen(weights, "wb");
    while (in && out && (c = getc(in)) != EOF) putc(c, out);
    if (in) fclose(in);
    if (out) fclose(out);
    CHECK(mirror_load_weights(fresh, weights, NULL) == MIRROR_OK, "w.safetensors loaded: %s",
          mirror_model_error(fresh));
    src = mirror_model_weights_source(fresh);
    CHECK(src.path && !strcmp(src.path, weights) && src.checkpoint == 0 && src.crc32 == crc && src.size == size,
          "the source: w.safetensors, weights, the same bytes");
    refused(fresh, fd, 2, weights, NULL, "trace = the weights file loaded");
    path_in(name, "w.link");
    CHECK(link(weights, name) == 0, "a hard link to w.safetensors");
    refused(fresh, fd, 0, name, NULL, "history = a second name of the weights file");
    CHECK(file_crc(weights, &now) == crc && now == size, "w.safetensors is unchanged");
    unlink(name);
    /* A weights file keeps no copies: W.1 is any file. */
    snprintf(name, sizeof name, "%s.1", weights);
    fd.history = name;
    CHECK(mirror_fit(fresh, &fd, NULL) == MIRROR_OK && lines_of(name) == 2, "history w.safetensors.1 is written: %s",
          mirror_model_error(fresh));
    /* A failed load leaves the source as it was. */
    path_in(name, "missing.safetensors");
    CHECK(mirror_load_weights(fresh, name, NULL) != MIRROR_OK && mirror_model_weights_source(fresh).path &&
              !strcmp(mirror_model_weights_source(fresh).path, weights),
          "a load that failed: the source stays w.safetensors");
    mirror_model_destroy(fresh);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* ---- predictions as a .npy file ---- */

/* The n x k floats of the .npy file at path, checked as NumPy would read
   it: magic, version 1.0, a header padded to 64 bytes ending in a newline,
   '<f4', C order, shape (n, k); NULL otherwise. */
static float *npy_floats(const char *path, size_t n, size_t k)
{
    unsigned char *p = (unsigned char *)slurp(path);
    char want[96];
    size_t hlen, size;
    float *x = NULL;
    if (!p) return NULL;
    file_crc(path, &size);
    hlen = (size_t)p[8] | (size_t)p[9] << 8;
    snprintf(want, sizeof want, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", n, k);
    if (!memcmp(p, "\x93NUMPY\x01\x00", 8) && (10 + hlen) % 64 == 0 && p[10 + hlen - 1] == '\n' &&
        !strncmp((char *)p + 10, want, strlen(want)) && size == 10 + hlen + 4 * n * k &&
        (x = (float *)malloc(4 * n * k + 1)) != NULL)
        memcpy(x, p + 10 + hlen, 4 * n * k); /* little-endian, as this host */
    free(p);
    return x;
}

/* mirror_predict_write: mirror_predict's (or mirror_predict_proba's)
   floats, bitwise, in a .npy file; never over the file the parameters
   came from (a checkpoint's kept copy and a second name of it too) nor an
   input, a directory, or past a missing directory, each refused before
   any pass with the file unchanged and no temporary file left. */
static void test_predict_write(void)
{
    char ckpt[256], out[256], input[256], name[300];
    const char *inputs[2];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s), *fresh = model(s);
    mirror_fit_desc fd = fit_desc(1);
    float want[50 * 10], *got;
    uint32_t crc;
    size_t size, now, k;
    int rc;
    path_in(ckpt, "pred.ckpt");
    fd.checkpoint = ckpt;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && mirror_checkpoint_load(fresh, ckpt, 1, NULL) == MIRROR_OK,
          "predict_write: a checkpoint saved and loaded: %s", mirror_model_error(fresh));
    crc = file_crc(ckpt, &size);
    k = mirror_num_outputs(fresh);
    path_in(out, "pred.npy");
    CHECK(mirror_predict_write(fresh, data.x, 50, 0, out, NULL) == MIRROR_OK, "predict_write: logits: %s",
          mirror_model_error(fresh));
    got = npy_floats(out, 50, k);
    CHECK(mirror_predict(fresh, data.x, 50, want) == MIRROR_OK && got && !memcmp(got, want, sizeof want),
          "predict_write: a .npy of shape (50, %zu), mirror_predict's floats bitwise", k);
    free(got);
    CHECK(mirror_predict_write(fresh, data.x, 50, 1, out, NULL) == MIRROR_OK, "predict_write: probabilities: %s",
          mirror_model_error(fresh));
    got = npy_floats(out, 50, k);
    CHECK(mirror_predict_proba(fresh, data.x, 50, want) == MIRROR_OK && got && !memcmp(got, want, sizeof want),
          "predict_write: probabilities, mirror_predict_proba's floats bitwise (replacing the logits)");
    free(got);
    path_in(input, "pred_input.bin");
    {
        FILE *f = fopen(input, "w");
        if (f) fputs("the samples' file\n", f), fclose(f);
    }
    inputs[0] = input, inputs[1] = NULL;
    path_in(name, "pred_input.link");
    CHECK(link(input, name) == 0, "predict_write: a hard link to the input");
    {
        const char *cases[5];
        char kept[300], dir[256], missing[300];
        size_t i;
        snprintf(kept, sizeof kept, "%s.lock", ckpt);
        path_in(dir, "pred_dir");
        mkdir(dir, 0700);
        snprintf(missing, sizeof missing, "%s/no/such.npy", dir);
        cases[0] = ckpt, cases[1] = kept, cases[2] = input, cases[3] = name, cases[4] = dir;
        for (i = 0; i < 5; i++) {
            rc = mirror_predict_write(fresh, data.x, 50, 0, cases[i], inputs);
            CHECK(rc == MIRROR_ERR_ARGUMENT, "predict_write onto %s: refused (rc %d: %s)", cases[i], rc,
                  mirror_model_error(fresh));
        }
        CHECK(strstr(mirror_model_error(fresh), "not a regular file") != NULL, "predict_write: a directory named so");
        rc = mirror_predict_write(fresh, data.x, 50, 0, missing, inputs);
        CHECK(rc == MIRROR_ERR_IO && strstr(mirror_model_error(fresh), "cannot write the predictions"),
              "predict_write into a missing directory: MIRROR_ERR_IO (%s)", mirror_model_error(fresh));
    }
    CHECK(file_crc(ckpt, &now) == crc && now == size && holds(input, "the samples' file\n"),
          "predict_write: the checkpoint and the input unchanged");
    CHECK(files_with(".tmp-mirror-") == 0, "predict_write: no temporary file left");
    CHECK(mirror_predict_write(NULL, data.x, 50, 0, out, NULL) == MIRROR_ERR_ARGUMENT &&
              mirror_predict_write(fresh, data.x, 50, 0, NULL, NULL) == MIRROR_ERR_ARGUMENT,
          "predict_write: a NULL model or path refused");
    unlink(name);
    mirror_model_destroy(fresh);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* ---- a failed write mid-run costs nothing but that output ---- */

static struct rlimit fsize_old;
static char hist_path[256];
static int hist_complete_after_3; /* at epoch 3's hook: the history the epoch before */
static unsigned failed_at[8];

static void fsize(rlim_t bytes)
{
    struct rlimit r = fsize_old;
    r.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &r);
}

/* Epoch 2: a file size limit too small for the history and the plot
   (writes then fail, as on a full disk); epoch 3 sees the failure, then
   lifts the limit. */
static int limit_hook(void *user, const mirror_epoch_log *log)
{
    (void)user;
    failed_at[log->epoch] = log->failed_outputs;
    if (log->epoch == 2) fsize(300);
    if (log->epoch == 3) {
        hist_complete_after_3 = lines_of(hist_path) == 3 && files_with(".tmp-mirror-") == 0;
        setrlimit(RLIMIT_FSIZE, &fsize_old);
    }
    return 0;
}

/* The last epoch: a limit that the trace, written when fit ends, meets. */
static int trace_hook(void *user, const mirror_epoch_log *log)
{
    if (log->epoch == log->epochs) fsize(*(rlim_t *)user);
    return 0;
}

static void test_full(void)
{
    char ckpt[256], plot[256], trace[256], *text;
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s), *probe = model(s);
    mirror_fit_desc fd = fit_desc(4);
    mirror_epoch_log last;
    mirror_checkpoint_info at;
    rlim_t tiny = 100;
    int rc;
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &fsize_old);
    path_in(ckpt, "full.ckpt");
    path_in(hist_path, "full.csv");
    path_in(plot, "full.svg");
    fd.history = hist_path, fd.plot = plot, fd.checkpoint = ckpt;
    fd.on_epoch = limit_hook;
    notices = 0;
    memset(&last, 0, sizeof last);
    rc = mirror_fit(m, &fd, &last);
    setrlimit(RLIMIT_FSIZE, &fsize_old);
    CHECK(rc == MIRROR_OK, "history and plot failing at epoch 3 of 4: fit trains on and succeeds (%s)",
          mirror_model_error(m));
    CHECK(failed_at[2] == 0 && failed_at[3] == (MIRROR_OUTPUT_HISTORY | MIRROR_OUTPUT_PLOT) && failed_at[4] == 0 &&
              last.failed_outputs == 0,
          "the epoch logs say which outputs failed (%u %u %u, last %u)", failed_at[2], failed_at[3], failed_at[4],
          last.failed_outputs);
    CHECK(notices == 2 && strstr(notice_last, "full.svg") && strstr(notice_last, "cannot write the plot"),
          "a notice names each output that failed (%d: %s)", notices, notice_last);
    CHECK(hist_complete_after_3, "after the failed write the history holds the epochs before, complete");
    text = slurp(hist_path);
    CHECK(lines_of(hist_path) == 5 && text && strstr(text, "\n4,5,50,"), "the next epoch's write succeeds: 4 rows");
    free(text);
    CHECK(mirror_optimizer_steps(m) == 20 && mirror_checkpoint_load(probe, ckpt, 0, &at) == MIRROR_OK && at.step == 20,
          "all 20 steps ran and the checkpoint of the last is saved");

    /* The trace, written when fit ends, fails; the checkpoint (of the last
       step, saved before the hook) stays. */
    path_in(trace, "full.json");
    fd = fit_desc(1);
    fd.trace = trace, fd.checkpoint = ckpt, fd.checkpoint_every = 5, fd.on_epoch = trace_hook, fd.user = &tiny;
    notices = 0;
    rc = mirror_fit(m, &fd, &last);
    setrlimit(RLIMIT_FSIZE, &fsize_old);
    CHECK(rc == MIRROR_OK && last.failed_outputs == MIRROR_OUTPUT_TRACE && strstr(notice_last, "full.json"),
          "a trace that cannot be written at the end: MIRROR_OK, failed_outputs says the trace (%d, %u: %s)", rc,
          last.failed_outputs, notice_last);
    CHECK(mirror_checkpoint_load(probe, ckpt, 0, &at) == MIRROR_OK && at.step == 25,
          "the checkpoint of the last step is saved (step %llu)", (unsigned long long)at.step);
    text = slurp(trace);
    CHECK(text && !strstr(text, "\"ph\":\"X\"") && strstr(text, "]}\n") && files_with(".tmp-mirror-") == 0,
          "the trace keeps its version from before the first step (complete, no steps); no temporary file is left");
    free(text);
    mirror_model_destroy(m), mirror_model_destroy(probe);
    mirror_strategy_destroy(s);
}

/* ---- a resumed fit continues its history ---- */

/* Column 1 to 11 of a history (without the times). */
static char *untimed(const char *path)
{
    char *text = slurp(path), *out, *o, *c;
    int comma = 0;
    if (!text) return NULL;
    out = o = (char *)malloc(strlen(text) + 1);
    for (c = text; *c; c++) {
        if (*c == '\n') comma = 0, *o++ = '\n';
        else if (*c == ',' && ++comma >= 11) continue;
        else if (comma < 11) *o++ = *c;
    }
    *o = '\0';
    free(text);
    return out;
}

/* A step hook that stops fit after the model's step 9. */
static int stop_after_9(void *user, const mirror_step_log *log)
{
    (void)user;
    return log->global_step == 9;
}

static void test_resume(void)
{
    char ckpt[256], mid[270], straight[256], resumed[256], plain[256], *a, *b;
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s), *r = model(s), *q = model(s);
    mirror_fit_desc fd = fit_desc(4);
    mirror_checkpoint_info at;
    path_in(ckpt, "resume.ckpt");
    path_in(straight, "straight.csv");
    path_in(resumed, "resumed.csv");
    fd.history = straight;
    CHECK(mirror_fit(q, &fd, NULL) == MIRROR_OK, "4 epochs straight: %s", mirror_model_error(q));

    /* 2 epochs, saved; resumed for epochs 3 and 4 into the same history. */
    fd.epochs = 2, fd.history = resumed, fd.checkpoint = ckpt;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && lines_of(resumed) == 3, "2 epochs: %s", mirror_model_error(m));
    CHECK(mirror_checkpoint_load(r, ckpt, 0, &at) == MIRROR_OK && at.epoch == 2 && at.epoch_step == 0, "loaded");
    fd = fit_desc(4);
    fd.history = resumed, fd.resumed_from = ckpt;
    fd.initial_epoch = (size_t)at.epoch, fd.shuffle_seed = at.shuffle_seed;
    notices = 0;
    CHECK(mirror_fit(r, &fd, NULL) == MIRROR_OK && notices == 0, "resumed to 4 epochs: %s", mirror_model_error(r));
    a = untimed(straight), b = untimed(resumed);
    CHECK(a && b && lines_of(resumed) == 5 && !strcmp(a, b),
          "the resumed history holds the whole run: the straight run's rows, times aside\n%s---\n%s", a ? a : "",
          b ? b : "");
    free(a), free(b);

    /* Resumed mid-epoch with points within the epochs: the whole run's
       history, the rows before the checkpoint kept and the epoch's row
       over all of its steps, as the run that was not stopped has it. */
    mirror_model_destroy(m), mirror_model_destroy(r);
    m = model(s), r = model(s);
    fd = fit_desc(3);
    fd.history = resumed, fd.curve_every = 2, fd.checkpoint = ckpt, fd.checkpoint_every = 7, fd.checkpoint_keep = 5;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && lines_of(resumed) == 1 + 3 * 3, "3 epochs, points every 2 steps");
    a = untimed(resumed);
    snprintf(mid, sizeof mid, "%s.2", ckpt); /* saved after step 7: epoch 2, step 2 */
    CHECK(mirror_checkpoint_load(r, mid, 0, &at) == MIRROR_OK && at.epoch == 1 && at.epoch_step == 2, "mid-epoch 2");
    fd.checkpoint = NULL;
    fd.initial_epoch = (size_t)at.epoch, fd.initial_step = (size_t)at.epoch_step, fd.shuffle_seed = at.shuffle_seed;
    notices = 0;
    CHECK(mirror_fit(r, &fd, NULL) == MIRROR_OK && notices == 0, "resumed mid-epoch: %s", mirror_model_error(r));
    b = untimed(resumed);
    CHECK(a && b && strstr(a, "\n1.2,1,12,") && strstr(a, "\n2,5,50,") && !strcmp(a, b),
          "resumed mid-epoch, the history is the whole run's, times aside:\n%s---\n%s", a ? a : "", b ? b : "");
    free(b);

    /* A run stopped after step 9 (its history rewritten at that save, up to
       step 8), resumed from the checkpoint after step 7: the point after
       step 6 is kept, the one after step 8 goes, as the run redoes it. */
    mirror_model_destroy(m), mirror_model_destroy(r);
    m = model(s), r = model(s);
    fd = fit_desc(3);
    fd.history = resumed, fd.curve_every = 2, fd.checkpoint = ckpt, fd.checkpoint_every = 7, fd.checkpoint_keep = 5;
    fd.on_step = stop_after_9, fd.log_every = 1;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_STOPPED && lines_of(resumed) == 1 + 5,
          "stopped after step 9: the history holds the points up to it (%d lines)", lines_of(resumed));
    snprintf(mid, sizeof mid, "%s.1", ckpt);
    CHECK(mirror_checkpoint_load(r, mid, 0, &at) == MIRROR_OK && at.step == 7 && at.epoch_step == 2, "after step 7");
    fd.checkpoint = NULL, fd.on_step = NULL, fd.log_every = 0;
    fd.initial_epoch = (size_t)at.epoch, fd.initial_step = (size_t)at.epoch_step, fd.shuffle_seed = at.shuffle_seed;
    CHECK(mirror_fit(r, &fd, NULL) == MIRROR_OK, "resumed: %s", mirror_model_error(r));
    b = untimed(resumed);
    CHECK(a && b && !strcmp(a, b), "stopped, resumed: the whole run's history, times aside:\n%s---\n%s", a ? a : "",
          b ? b : "");
    free(a), free(b);

    /* A checkpoint saved mid-epoch outside fit keeps no epoch numbers: the
       epoch's row counts the steps after it (26 samples of 50), and a
       notice says so. */
    mirror_model_destroy(r);
    r = model(s);
    snprintf(mid, sizeof mid, "%s.1", ckpt);
    path_in(plain, "plain.ckpt");
    CHECK(mirror_checkpoint_load(r, mid, 0, &at) == MIRROR_OK &&
              mirror_checkpoint_save(r, plain, &at, 0) == MIRROR_OK &&
              mirror_checkpoint_load(r, plain, 0, &at) == MIRROR_OK,
          "saved again outside fit: %s", mirror_model_error(r));
    notices = 0;
    CHECK(mirror_fit(r, &fd, NULL) == MIRROR_OK && notices == 1 && strstr(notice_last, "last 3 steps only"),
          "resumed without the epoch's numbers: a notice (%s)", notice_last);
    a = slurp(resumed);
    CHECK(a && strstr(a, "\n2,5,26,"), "and the epoch's row counts its last 3 steps:\n%s", a ? a : "");
    free(a);

    /* A history that fit did not write, or none: a fresh one, with a notice. */
    write_file(resumed, (const unsigned char *)"not,a,history\n", 14);
    CHECK(mirror_checkpoint_load(r, mid, 0, &at) == MIRROR_OK, "loaded again");
    notices = 0;
    CHECK(mirror_fit(r, &fd, NULL) == MIRROR_OK, "resumed over a file that is not a history: %s", mirror_model_error(r));
    CHECK(notices == 1 && strstr(notice_last, "not a history") && lines_of(resumed) == 1 + 5,
          "a notice, and a new history of the resumed epochs (%d lines: %s)", lines_of(resumed), notice_last);
    unlink(resumed);
    CHECK(mirror_checkpoint_load(r, mid, 0, &at) == MIRROR_OK, "loaded again");
    notices = 0;
    CHECK(mirror_fit(r, &fd, NULL) == MIRROR_OK && notices == 1 && strstr(notice_last, "no history"),
          "resumed with no history at the path: a notice (%s)", notice_last);
    mirror_model_destroy(m), mirror_model_destroy(r), mirror_model_destroy(q);
    mirror_strategy_destroy(s);
}

/* Column k (from 0) of the first row of text that starts with row (its
   newline included); -1 where there is none. */
static double column(const char *text, const char *row, int k)
{
    const char *p = strstr(text, row);
    int i;
    if (!p) return -1.0;
    for (p++, i = 0; i < k; i++)
        if (!(p = strchr(p, ','))) return -1.0;
        else p++;
    return atof(p);
}

/* fp16 from a loss scale that overflows at first: the steps skipped
   before a mid-epoch checkpoint count in the resumed epoch's row too. */
static void test_resume_skipped(void)
{
    char ckpt[256], mid[270], hist[256], *a, *b;
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model_desc d = model_desc(s, 1, 8, 8, 12, 3);
    mirror_model *m, *r;
    mirror_fit_desc fd = fit_desc(2);
    mirror_checkpoint_info at;
    d.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.0f);
    d.precision = MIRROR_PRECISION_FP16, d.loss_scale.init_scale = 16777216.0f;
    m = build_model(&d, NULL, "flatten, dense 8, relu, dense 10");
    r = build_model(&d, NULL, "flatten, dense 8, relu, dense 10");
    path_in(ckpt, "skipped.ckpt");
    path_in(hist, "skipped.csv");
    fd.history = hist, fd.curve_every = 2, fd.checkpoint = ckpt, fd.checkpoint_every = 4, fd.checkpoint_keep = 5;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "fp16, 2 epochs: %s", mirror_model_error(m));
    a = untimed(hist);
    snprintf(mid, sizeof mid, "%s.2", ckpt); /* after step 4 of epoch 1 */
    CHECK(mirror_checkpoint_load(r, mid, 0, &at) == MIRROR_OK && at.epoch == 0 && at.epoch_step == 4, "after step 4");
    fd.checkpoint = NULL, fd.initial_epoch = 0, fd.initial_step = 4, fd.shuffle_seed = at.shuffle_seed;
    CHECK(mirror_fit(r, &fd, NULL) == MIRROR_OK, "resumed: %s", mirror_model_error(r));
    b = untimed(hist);
    CHECK(a && b && !strcmp(a, b), "fp16 resumed mid-epoch: the whole run's history, skipped steps too:\n%s---\n%s",
          a ? a : "", b ? b : "");
    CHECK(a && column(a, "\n1,5,50,", 10) > 0, "steps were skipped in epoch 1 (%g)",
          a ? column(a, "\n1,5,50,", 10) : -1.0);
    free(a), free(b);
    mirror_model_destroy(m), mirror_model_destroy(r);
    mirror_strategy_destroy(s);
}

/* ---- TensorBoard's event files ---- */

/* An Event as far as fit writes them. */
typedef struct tb_event {
    uint64_t step;
    int start;     /* a SessionLog START */
    char version[32];
    size_t n;      /* the summary's values */
    char tag[12][32];
    float value[12];
} tb_event;

static uint64_t varint(const unsigned char **p, const unsigned char *end)
{
    uint64_t v = 0;
    int shift = 0;
    while (*p < end && shift < 64) {
        v |= (uint64_t)(**p & 0x7F) << shift, shift += 7;
        if (!(*(*p)++ & 0x80)) break;
    }
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One Event's fields (the others skipped, as a reader of protocol buffers does). */
static void tb_decode(const unsigned char *p, const unsigned char *end, tb_event *e)
{
    memset(e, 0, sizeof *e);
    while (p < end) {
        uint64_t key = varint(&p, end), len;
        const unsigned char *q;
        if ((key & 7) == 0) { /* a varint: the step */
            uint64_t v = varint(&p, end);
            if (key >> 3 == 2) e->step = v;
            continue;
        }
        if ((key & 7) == 1 || (key & 7) == 5) { /* wall_time, or anything fixed */
            p += (key & 7) == 1 ? 8 : 4;
            continue;
        }
        len = varint(&p, end), q = p, p += len;
        if (p > end) break;
        if (key >> 3 == 3) snprintf(e->version, sizeof e->version, "%.*s", (int)len, (const char *)q);
        if (key >> 3 == 7) e->start = len == 2 && q[0] == 0x08 && q[1] == 0x01; /* session_log: START */
        while (key >> 3 == 5 && q < p && e->n < 12) { /* Summary: Values */
            const unsigned char *v, *vend;
            uint64_t size;
            varint(&q, p);
            size = varint(&q, p);
            vend = q + size;
            for (v = q; v < vend;) {
                uint64_t k = varint(&v, vend);
                if (k == (1 << 3 | 2)) {
                    uint64_t n = varint(&v, vend);
                    snprintf(e->tag[e->n], sizeof e->tag[0], "%.*s", (int)n, (const char *)v);
                    v += n;
                } else if (k == (2 << 3 | 5)) {
                    uint32_t bits = le32(v);
                    memcpy(&e->value[e->n], &bits, 4);
                    v += 4;
                } else {
                    break;
                }
            }
            e->n++, q = vend;
        }
    }
}

/* The events of the file at path into ev (at most max); -1 when a record's
   framing is broken: a length or data CRC-32C that does not match (masked
   as TFRecord masks them), or a record cut short. */
static int tb_read(const char *path, tb_event *ev, int max)
{
    FILE *f = fopen(path, "rb");
    unsigned char head[12], data[2048], tail[4];
    int n = 0;
    if (!f) return -1;
    while (fread(head, 1, 12, f) == 12) {
        uint64_t len = (uint64_t)le32(head) | (uint64_t)le32(head + 4) << 32;
        if (le32(head + 8) != mirror__masked_crc32c(head, 8) || len > sizeof data || fread(data, 1, len, f) != len ||
            fread(tail, 1, 4, f) != 4 || le32(tail) != mirror__masked_crc32c(data, len) || n == max) {
            fclose(f);
            return -1;
        }
        tb_decode(data, data + len, &ev[n++]);
    }
    if (!feof(f)) n = -1; /* a record cut short in its first 12 bytes */
    fclose(f);
    return n;
}

/* The value of tag in e, NAN when it has none. */
static double tb_value(const tb_event *e, const char *tag)
{
    size_t i;
    for (i = 0; i < e->n; i++)
        if (!strcmp(e->tag[i], tag)) return e->value[i];
    return NAN;
}

/* The path of the k-th event file (by name, as TensorBoard reads them) in dir; 0 when there is none. */
static int tb_file(const char *dir, int k, char *path, size_t size)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort), i, found = 0, seen = 0;
    for (i = 0; i < n; i++) {
        if (strstr(names[i]->d_name, "tfevents") && seen++ == k && !found)
            found = 1, snprintf(path, size, "%s/%s", dir, names[i]->d_name);
        free(names[i]);
    }
    if (n >= 0) free(names);
    return found;
}

static char tb_dir[256];

/* The scalars that apply where they apply: fp16 (a loss scale, steps it may
   skip) with clipping (the gradient's norm computed): all three at each
   point, as the history holds them. */
static void tb_applies(const char *dir)
{
    char sub[300], hist[256], file[600], *csv, *row;
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model_desc d = model_desc(s, 1, 8, 8, 12, 3);
    mirror_fit_desc fd = fit_desc(1);
    mirror_model *m;
    tb_event ev[16];
    int n, i, same = 1;
    d.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.0f);
    d.optimizer.clip_norm = 0.5f;
    d.precision = MIRROR_PRECISION_FP16;
    m = build_model(&d, NULL, "flatten, dense 8, relu, dense 10");
    snprintf(sub, sizeof sub, "%s/fp16", dir);
    path_in(hist, "tb16.csv");
    fd.tensorboard = sub, fd.history = hist;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "fp16, clipped: %s", mirror_model_error(m));
    n = tb_file(sub, 0, file, sizeof file) ? tb_read(file, ev, 16) : -1;
    csv = slurp(hist);
    row = csv ? strchr(csv, '\n') : NULL;
    for (i = 0; row && row[1] && n == 3 && i < 1; i++, row = strchr(row + 1, '\n')) {
        double v[13];
        char *at = row + 1;
        int k;
        for (k = 0; k < 13; k++) v[k] = strtod(at, &at), at++;
        same = v[8] > 0 && (float)v[8] == (float)tb_value(&ev[2], "grad_norm") && v[9] > 1 &&
               (float)v[9] == (float)tb_value(&ev[2], "loss_scale") &&
               (float)v[10] == (float)tb_value(&ev[2], "skipped_steps");
    }
    CHECK(n == 3 && i == 1 && same, "fp16 with clipping: grad_norm, loss_scale and skipped_steps, the history's (%d)",
          n);
    free(csv);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* Epoch 1: a file size limit just past the event file (its next record
   then fails part-written, as on a full disk); epoch 2 sees the failure
   and lifts it. */
static int tb_limit_hook(void *user, const mirror_epoch_log *log)
{
    char path[600];
    struct stat st;
    (void)user;
    failed_at[log->epoch] = log->failed_outputs;
    if (log->epoch == 1 && tb_file(tb_dir, 0, path, sizeof path) && stat(path, &st) == 0) fsize((rlim_t)st.st_size + 10);
    if (log->epoch == 2) setrlimit(RLIMIT_FSIZE, &fsize_old);
    return 0;
}

static void test_tensorboard(void)
{
    char hist[256], file[600], notdir[256], *csv, *row;
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s);
    mirror_fit_desc fd = fit_desc(2);
    tb_event ev[16];
    int n, i, same = 1;
    uint64_t steps;
    CHECK(mirror__crc(0x82F63B78u, 0, (const unsigned char *)"123456789", 9) == 0xE3069283u,
          "CRC-32C of \"123456789\": e3069283");
    path_in(tb_dir, "tb"), path_in(hist, "tb.csv");
    fd.tensorboard = tb_dir, fd.history = hist, fd.curve_every = 2;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "fit with TensorBoard events: %s", mirror_model_error(m));
    n = tb_file(tb_dir, 0, file, sizeof file) ? tb_read(file, ev, 16) : -1;
    CHECK(n == 2 + 6 && !strcmp(ev[0].version, "brain.Event:2") && ev[1].start && ev[1].step == 1,
          "the directory made, one file of whole records: the version, a session's start at step 1, 6 points (%d)", n);
    /* Every number of the history's rows (epochs 0.4, 0.8, 1, 1.4, 1.8, 2) at its step. */
    csv = slurp(hist);
    for (i = 0, row = csv ? strchr(csv, '\n') : NULL; row && row[1] && i < 6 && n == 8; i++, row = strchr(row + 1, '\n')) {
        double x, loss, acc, vloss = NAN, vacc = NAN, lr, norm, scale, sec, speed;
        unsigned long long skipped;
        size_t steps_in, samples;
        const tb_event *e = &ev[2 + i];
        char *at = row + 1;
        x = strtod(at, &at), steps_in = strtoul(at + 1, &at, 10), samples = strtoul(at + 1, &at, 10);
        loss = strtod(at + 1, &at), acc = strtod(at + 1, &at);
        if (at[1] != ',') vloss = strtod(at + 1, &at), vacc = strtod(at + 1, &at);
        else at += 2; /* no validation numbers: ",," */
        lr = strtod(at + 1, &at), norm = strtod(at + 1, &at), scale = strtod(at + 1, &at);
        skipped = strtoull(at + 1, &at, 10), sec = strtod(at + 1, &at), speed = strtod(at + 1, &at);
        (void)samples, (void)sec, (void)norm, (void)scale, (void)skipped;
        same &= e->step == (uint64_t)(ceil(x) - 1) * 5 + steps_in && (float)x == (float)tb_value(e, "epoch") &&
                (float)loss == (float)tb_value(e, "loss/train") && (float)acc == (float)tb_value(e, "accuracy/train") &&
                (isnan(vloss) ? isnan(tb_value(e, "loss/validation")) && isnan(tb_value(e, "accuracy/validation"))
                              : (float)vloss == (float)tb_value(e, "loss/validation") &&
                                    (float)vacc == (float)tb_value(e, "accuracy/validation")) &&
                (float)lr == (float)tb_value(e, "learning_rate") &&
                /* fp32, no clipping: none of these applies, and none is written */
                isnan(tb_value(e, "grad_norm")) && isnan(tb_value(e, "loss_scale")) &&
                isnan(tb_value(e, "skipped_steps")) &&
                fabs(speed - tb_value(e, "samples_per_s")) <= 0.05 + 1e-7 * speed; /* %.1f there, a float here */
    }
    CHECK(i == 6 && same, "each history row's numbers, as floats, at its step, and no grad_norm, loss_scale or "
          "skipped_steps in fp32 without clipping (%d rows)", i);
    free(csv);
    tb_applies(tb_dir);

    /* A second fit: a file of its own, whose session starts after the model's step. */
    steps = mirror_optimizer_steps(m);
    fd.history = NULL, fd.curve_every = 0, fd.epochs = 1;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "a second fit: %s", mirror_model_error(m));
    n = tb_file(tb_dir, 1, file, sizeof file) ? tb_read(file, ev, 16) : -1;
    CHECK(n == 3 && ev[1].start && ev[1].step == steps + 1 && ev[2].step == steps + 5 && tb_value(&ev[2], "epoch") == 1,
          "a second fit: a second file, its session starting at step %llu (%d events)", (unsigned long long)steps + 1,
          n);

    /* A write that fails mid-run: a notice, the bit, whole records; the next write goes on. */
    remove_tree(tb_dir);
    fd = fit_desc(3);
    fd.tensorboard = tb_dir, fd.on_epoch = tb_limit_hook;
    notices = 0;
    memset(failed_at, 0, sizeof failed_at);
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "events failing at epoch 2 of 3: fit succeeds: %s",
          mirror_model_error(m));
    setrlimit(RLIMIT_FSIZE, &fsize_old);
    n = tb_file(tb_dir, 0, file, sizeof file) ? tb_read(file, ev, 16) : -1;
    CHECK(failed_at[1] == 0 && failed_at[2] == MIRROR_OUTPUT_TENSORBOARD && failed_at[3] == 0 && notices == 1 &&
              strstr(notice_last, "TensorBoard"),
          "the failure in the epoch log and one notice (%u %u %u; %d: %s)", failed_at[1], failed_at[2], failed_at[3],
          notices, notice_last);
    CHECK(n == 4 && tb_value(&ev[2], "epoch") == 1 && tb_value(&ev[3], "epoch") == 3,
          "the part-written record cut away: whole records, epochs 1 and 3 (%d)", n);

    /* Refused before the first step. */
    steps = mirror_optimizer_steps(m);
    path_in(notdir, "tb-file");
    write_file(notdir, (const unsigned char *)"x", 1);
    fd = fit_desc(1);
    fd.tensorboard = notdir;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "not a directory") &&
              mirror_optimizer_steps(m) == steps,
          "a TensorBoard directory that is a file: refused before the first step (%s)", mirror_model_error(m));
    snprintf(file, sizeof file, "%s/below", notdir);
    fd.tensorboard = file;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_ARGUMENT &&
              strstr(mirror_model_error(m), "is a file, not a directory") && mirror_optimizer_steps(m) == steps,
          "a TensorBoard directory below a file: refused before the first step, naming the file (%s)",
          mirror_model_error(m));
    path_in(notdir, "no-such/runs/cnn");
    fd.tensorboard = notdir;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && tb_file(notdir, 0, file, sizeof file),
          "a TensorBoard directory whose parents are missing: made, as mkdir -p makes it (%s)", mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* ---- missing directories made, as mkdir -p; a refused fit leaves nothing ---- */

/* Entries of dir, . and .. aside (-1: it cannot be read). */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void test_made_dirs(void)
{
    char top[256], ckpt[300], lock[310], hist[300], plot[300], trace[300], tb[300], blocker[300], below[320];
    char *saved;
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s);
    mirror_fit_desc fd = fit_desc(1);
    uint64_t steps;
    struct stat st;
    mode_t mask;
    int rc;
    path_in(top, "fresh");
    snprintf(ckpt, sizeof ckpt, "%s/ck/a/run.ckpt", top), snprintf(lock, sizeof lock, "%s.lock", ckpt);
    snprintf(hist, sizeof hist, "%s/h//h.csv", top), snprintf(plot, sizeof plot, "%s/p.svg", top);
    snprintf(trace, sizeof trace, "%s/t/t.json", top), snprintf(tb, sizeof tb, "%s/runs/cnn/", top);
    fd.checkpoint = ckpt, fd.history = hist, fd.plot = plot, fd.trace = trace, fd.tensorboard = tb;
    mask = umask(002);
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && stat(ckpt, &st) == 0 && lines_of(hist) == 2 &&
              stat(plot, &st) == 0 && stat(trace, &st) == 0 && tb_file(tb, 0, below, sizeof below),
          "each output in folders that are missing, the TensorBoard directory's parents too: made as mkdir -p (%s)",
          mirror_model_error(m));
    /* modes as fopen and mkdir give them, less the umask (002 here) */
    CHECK(stat(ckpt, &st) == 0 && (st.st_mode & 0777) == 0664 && stat(lock, &st) == 0 && (st.st_mode & 0777) == 0664 &&
              stat(hist, &st) == 0 && (st.st_mode & 0777) == 0664 && stat(below, &st) == 0 &&
              (st.st_mode & 0777) == 0664 && stat(tb, &st) == 0 && (st.st_mode & 0777) == 0775 &&
              stat(ckpt, &st) == 0 && (st.st_mode & 0777) == 0664,
          "umask 002: the checkpoint, its lock, the history and the event file 0664, the directories made 0775");
    umask(mask);

    /* Refused once the disk is being written (the checkpoint's lock taken,
       the history, plot and trace staged): what it made is gone, what was
       there is as it was, PATH.lock included. */
    remove_tree(top);
    path_in(blocker, "fresh/blocker");
    CHECK(mkdir(top, 0777) == 0 && write_file(blocker, (const unsigned char *)"x", 1) &&
              write_file(plot, (const unsigned char *)"old plot", 8),
          "a folder holding a file and an old plot");
    snprintf(below, sizeof below, "%s/tb", blocker);
    fd.tensorboard = below;
    steps = mirror_optimizer_steps(m);
    rc = mirror_fit(m, &fd, NULL);
    CHECK(rc == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "blocker is a file, not a directory") &&
              mirror_optimizer_steps(m) == steps,
          "a TensorBoard directory below a file: refused before the first step, naming the file (%s)",
          mirror_model_error(m));
    CHECK(entries(top) == 2 && holds(plot, "old plot") && holds(blocker, "x"),
          "nothing left of it: no directory, lock, staged or event file, the old plot unchanged (%d entries)",
          entries(top));
    fd.tensorboard = tb;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && access(lock, F_OK) == 0 && (saved = slurp(ckpt)) != NULL,
          "a fit that saves: %s", mirror_model_error(m));
    fd.tensorboard = below;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_ARGUMENT && access(lock, F_OK) == 0 && holds(ckpt, saved) &&
              tb_file(tb, 0, below, sizeof below) && !tb_file(tb, 1, below, sizeof below),
          "refused again: the PATH.lock and checkpoint there before stay, no event file added");
    free(saved);

    /* Refused by a check: nothing is made at all. */
    remove_tree(top);
    fd.tensorboard = tb, fd.plot = hist;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_ARGUMENT && access(top, F_OK) != 0,
          "history and plot on one path: refused before any directory is made (%s)", mirror_model_error(m));
    fd.plot = plot;

    /* No permission (root has every one: not tested as root). */
    if (geteuid() != 0) {
        CHECK(mkdir(top, 0500) == 0, "a folder without write permission");
        rc = mirror_fit(m, &fd, NULL);
        CHECK(rc == MIRROR_ERR_IO && strstr(mirror_model_error(m), "cannot be made") &&
                  strstr(mirror_model_error(m), strerror(EACCES)),
              "a directory that cannot be made: MIRROR_ERR_IO, the system's reason (%s)", mirror_model_error(m));
        chmod(top, 0700);
        CHECK(entries(top) == 0, "nothing left in it");
    }
    remove_tree(top);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* ---- the plot: round ticks, a log scale for a loss that spans a decade, line swatches ---- */

/* Whether text is well-formed XML as the plot writes it: one root element,
   every element closed in order, every attribute quoted, no '<' or '&' in
   a value, no '<' loose in the text. */
static int well_formed(const char *text)
{
    const char *open[64], *p = text, *q;
    size_t len[64], n;
    int depth = 0, roots = 0;
    while ((p = strchr(p, '<')) != NULL) {
        int closing = p[1] == '/';
        const char *name = p + 1 + closing;
        for (q = name; isalnum((unsigned char)*q) || *q == '-'; q++) {}
        n = (size_t)(q - name);
        if (!n) return 0;
        if (closing) {
            if (!depth || len[depth - 1] != n || strncmp(open[depth - 1], name, n) || *q != '>') return 0;
            depth--, p = q + 1;
            continue;
        }
        for (;;) {
            while (*q == ' ' || *q == '\n') q++;
            if (*q == '>' || (q[0] == '/' && q[1] == '>')) break;
            while (isalnum((unsigned char)*q) || *q == '-' || *q == ':') q++;
            if (q[0] != '=' || q[1] != '"') return 0;
            for (q += 2; *q && *q != '"'; q++)
                if (*q == '<' || *q == '&') return 0;
            if (!*q++) return 0;
        }
        roots += depth == 0;
        if (*q == '>') {
            if (depth == 64) return 0;
            open[depth] = name, len[depth++] = n, q++;
        } else {
            q += 2;
        }
        p = q;
        for (q = p; *q && *q != '<'; q++)
            if (*q == '>' || *q == '&') return 0;
    }
    return depth == 0 && roots == 1;
}

/* Whether v is 1, 2 or 5 times a power of ten. */
static int round125(double v)
{
    double e = floor(log10(v) + 1e-9), f = v / pow(10.0, e);
    return v > 0 && (fabs(f - 1) < 1e-6 || fabs(f - 2) < 1e-6 || fabs(f - 5) < 1e-6 || fabs(f - 10) < 1e-5);
}

/* The value ticks of the panel that starts at svg (up to the next panel):
   round (linear: a 1-2-5 step apart, each a multiple of it; log: each 1, 2
   or 5 times a power of ten), 3 to 12 of them, from at most lo to at least
   hi; *log: whether the axis says it is a log scale. */
static int ticks_round(const char *svg, double lo, double hi, int *log_scale, int *count)
{
    const char *end = strstr(svg + 1, "<g "), *at = svg, *label = strstr(svg, "class=\"ylabel\"");
    double v[32], step;
    int n = 0, i, ok = 1;
    if (!end) end = svg + strlen(svg);
    *log_scale = label && label < end && strstr(label, "(log scale)") &&
                 strstr(label, "(log scale)") < strstr(label, "</text>");
    while ((at = strstr(at, "class=\"ytick\"")) != NULL && at < end && n < 32) {
        at = strchr(at, '>') + 1;
        v[n++] = strtod(at, NULL);
    }
    *count = n;
    if (n < 3 || n > 12 || v[0] > lo + 1e-12 || v[n - 1] < hi - 1e-12) return 0;
    step = v[1] - v[0];
    for (i = 0; i < n; i++)
        ok &= *log_scale ? round125(v[i]) && (i == 0 || v[i] > v[i - 1])
                         : round125(step) && fabs(v[i] - v[0] - i * step) < 1e-6 * step &&
                               fabs(v[i] / step - floor(v[i] / step + 0.5)) < 1e-6;
    return ok;
}

static int count_of(const char *text, const char *part)
{
    int n = 0;
    for (; text && (text = strstr(text, part)) != NULL; text++) n++;
    return n;
}

static void test_plot(void)
{
    static const double linear[5] = {0.4069, 0.3948, 0.3851, 0.3790, 0.3748}, wide[5] = {2.3, 0.9, 0.3, 0.1, 0.05};
    mirror__curve_point pts[5];
    char path[256], *svg, *acc;
    int i, log_scale, n, ok;
    path_in(path, "plot.svg");
    memset(pts, 0, sizeof pts);
    for (i = 0; i < 5; i++) {
        pts[i].x = i + 1, pts[i].log.epoch = (size_t)i + 1, pts[i].log.epochs = 5;
        pts[i].log.train_loss = linear[i], pts[i].log.val_loss = linear[i] + 0.01;
        pts[i].log.train_acc = 0.8 + 0.02 * i, pts[i].log.val_acc = 0.79 + 0.02 * i;
    }
    CHECK(mirror__write_plot(path, pts, 5, 1, NULL) && (svg = slurp(path)) != NULL, "a plot of 5 epochs");
    acc = strstr(svg, "<g transform=\"translate(420");
    CHECK(well_formed(svg) && !strncmp(svg, "<svg ", 5), "well-formed XML, an <svg> element");
    ok = ticks_round(strstr(svg, "<g "), 0.3748, 0.4169, &log_scale, &n);
    CHECK(ok && !log_scale && !strstr(svg, ">0.4069<"),
          "loss 0.3748 to 0.4169 (1.1x): linear, %d ticks at a round step, none at the data's extremes", n);
    ok = acc && ticks_round(acc, 0.79, 0.88, &log_scale, &n);
    CHECK(ok && !log_scale, "accuracy: linear, %d round ticks", n);
    CHECK(count_of(svg, "class=\"swatch\"") == 4 && count_of(svg, "<line class=\"swatch\" ") == 4 &&
              count_of(svg, "stroke=\"#e6550d\" stroke-width=\"2\" stroke-dasharray=\"6,4\"") == 4 &&
              count_of(svg, "stroke=\"#3182bd\" stroke-width=\"2\"") == 4 &&
              count_of(svg, "stroke=\"#3182bd\" stroke-width=\"2\" stroke-dasharray") == 0,
          "a line swatch for each series in each panel, in its colour and dashes: validation's dashed, training's "
          "solid, as their lines");
    free(svg);

    for (i = 0; i < 5; i++) pts[i].log.train_loss = wide[i], pts[i].log.val_loss = -1.0;
    CHECK(mirror__write_plot(path, pts, 5, 0, NULL) && (svg = slurp(path)) != NULL && well_formed(svg),
          "a plot of a loss from 2.3 to 0.05, without validation");
    ok = ticks_round(strstr(svg, "<g "), 0.05, 2.3, &log_scale, &n);
    CHECK(ok && log_scale, "a loss spanning 46x: a log scale, said on the axis, %d ticks at 1, 2 and 5 x 10^k", n);
    CHECK(count_of(svg, "class=\"swatch\"") == 1 && !strstr(svg, "validation") && !strstr(svg, "dasharray"),
          "one swatch, training's, without validation");
    free(svg);

    for (i = 0; i < 5; i++) pts[i].log.train_loss = 1.0 - 0.2 * i;
    pts[4].log.train_loss = 0.1; /* 1 to 0.1: a decade, not more */
    CHECK(mirror__write_plot(path, pts, 5, 0, NULL) && (svg = slurp(path)) != NULL &&
              ticks_round(strstr(svg, "<g "), 0.1, 1.0, &log_scale, &n) && !log_scale,
          "a loss spanning exactly 10x: linear, round ticks (%d)", n);
    free(svg);
    pts[4].log.train_loss = 0.099;
    CHECK(mirror__write_plot(path, pts, 5, 0, NULL) && (svg = slurp(path)) != NULL &&
              ticks_round(strstr(svg, "<g "), 0.099, 1.0, &log_scale, &n) && log_scale,
          "a loss spanning 10.1x: a log scale (%d ticks)", n);
    free(svg);
    unlink(path);
}

/* ---- paths of any length: joined whole, or refused naming the limit ---- */

/* root/xxx.../xxx... made as nested directories of the letter x, `length`
   bytes in all, into out; 0 on failure. */
static int deep_dir(char *out, size_t length, char x)
{
    size_t n = strlen(root);
    strcpy(out, root);
    while (n < length) {
        size_t left = length - n, part = left > 201 ? (left - 201 == 1 ? 199 : 200) : left - 1;
        out[n++] = '/';
        memset(out + n, x, part), n += part, out[n] = '\0';
        if (mkdir(out, 0700) != 0 && errno != EEXIST) return 0;
    }
    return 1;
}

/* Two 2x2 images of MNIST's IDX files in dir. */
static int put_mnist(const char *dir)
{
    static const unsigned char img[24] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8};
    static const unsigned char lab[10] = {0, 0, 8, 1, 0, 0, 0, 2, 3, 7};
    static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                         "t10k-labels-idx1-ubyte"};
    static char path[4400];
    int i, ok = 1;
    for (i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        ok &= write_file(path, i % 2 ? lab : img, i % 2 ? sizeof lab : sizeof img);
    }
    return ok;
}

/* Whether the last error names the limit of a path's length. */
static int names_limit(const char *message)
{
    char limit[64];
    snprintf(limit, sizeof limit, "limit of %d bytes for a path (PATH_MAX)", MIRROR__PATH_MAX - 1);
    return strstr(message, limit) != NULL;
}

/* A directory of 1300 bytes holds every output at its full name (the
   event file's too, which a fixed buffer once cut to "events.out.tfeven"),
   and MNIST's files; one of 4000 bytes holds a checkpoint, while what would
   pass PATH_MAX with the names joined to it is refused before the first
   step, naming the limit. */
static void test_long_paths(void)
{
    static char dir[4200], ckpt[4300], name[4400], hist[4300], plot[4300], trace[4300], tb[4300], file[4600];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s);
    mirror_fit_desc fd = fit_desc(2);
    mirror_dataset tr, te;
    mirror_error err = {0, ""};
    tb_event ev[8];
    struct dirent *e;
    char tail[64];
    uint64_t steps;
    int rc, events = 0, whole = 0, n = -1;
    DIR *d;

    CHECK(deep_dir(dir, 1300, 'a') && strlen(dir) == 1300, "a directory 1300 bytes long");
    snprintf(ckpt, sizeof ckpt, "%s/run.ckpt", dir), snprintf(hist, sizeof hist, "%s/h.csv", dir);
    snprintf(plot, sizeof plot, "%s/c.svg", dir), snprintf(trace, sizeof trace, "%s/t.json", dir);
    snprintf(tb, sizeof tb, "%s/tb", dir);
    fd.checkpoint = ckpt, fd.checkpoint_every = 5, fd.history = hist, fd.plot = plot, fd.trace = trace;
    fd.tensorboard = tb;
    rc = mirror_fit(m, &fd, NULL);
    snprintf(name, sizeof name, "%s.1", ckpt);
    CHECK(rc == MIRROR_OK && access(ckpt, F_OK) == 0 && access(name, F_OK) == 0 && lines_of(hist) == 3 &&
              access(plot, F_OK) == 0 && access(trace, F_OK) == 0,
          "1300 bytes: the checkpoint, its kept copy, the history, the plot and the trace (%s)", mirror_model_error(m));
    snprintf(tail, sizeof tail, ".%ld.0", (long)getpid());
    if ((d = opendir(tb)) != NULL) {
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                size_t len = strlen(e->d_name);
                events++;
                whole = !strncmp(e->d_name, "events.out.tfevents.", 20) && len > strlen(tail) &&
                        !strcmp(e->d_name + len - strlen(tail), tail);
                snprintf(file, sizeof file, "%s/%s", tb, e->d_name);
            }
        closedir(d);
    }
    if (events == 1) n = tb_read(file, ev, 8);
    CHECK(events == 1 && whole && n >= 4 && !strcmp(ev[0].version, "brain.Event:2"),
          "1300 bytes: one event file, named events.out.tfevents.TIME.HOST%s in full, of whole records (%d files, "
          "%d events)", tail, events, n);
    /* a resumed run's kept copy found by name at that length */
    fd = fit_desc(1);
    fd.resumed_from = ckpt;
    refused(m, fd, 0, name, name, "1300 bytes: history = resumed_from.1");
    CHECK(put_mnist(dir) && mirror_dataset_load_mnist(&tr, &te, dir, &err) == MIRROR_OK && tr.count == 2 &&
              te.count == 2,
          "1300 bytes: MNIST's files load (%s)", err.message);
    mirror_dataset_free(&tr), mirror_dataset_free(&te);

    /* Near PATH_MAX: 4000 bytes and the names beside them fit; more do not. */
    CHECK(deep_dir(dir, 4000, 'b') && strlen(dir) == 4000, "a directory 4000 bytes long");
    snprintf(ckpt, sizeof ckpt, "%s/run.ckpt", dir), snprintf(hist, sizeof hist, "%s/h.csv", dir);
    snprintf(tb, sizeof tb, "%s/tb", dir);
    fd = fit_desc(2);
    fd.checkpoint = ckpt, fd.checkpoint_every = 5, fd.history = hist;
    rc = mirror_fit(m, &fd, NULL);
    snprintf(name, sizeof name, "%s.1", ckpt);
    CHECK(rc == MIRROR_OK && access(ckpt, F_OK) == 0 && access(name, F_OK) == 0 && lines_of(hist) == 3,
          "4000 bytes: the checkpoint, its kept copy and the history (%s)", mirror_model_error(m));
    CHECK(put_mnist(dir) && mirror_dataset_load_mnist(&tr, &te, dir, &err) == MIRROR_OK && tr.count == 2,
          "4000 bytes: MNIST's files load (%s)", err.message);
    mirror_dataset_free(&tr), mirror_dataset_free(&te);
    steps = mirror_optimizer_steps(m);
    fd.tensorboard = tb;
    rc = mirror_fit(m, &fd, NULL);
    CHECK(rc == MIRROR_ERR_ARGUMENT && names_limit(mirror_model_error(m)) && mirror_optimizer_steps(m) == steps &&
              access(tb, F_OK) != 0,
          "4000 bytes: a TensorBoard directory whose event file's name would pass PATH_MAX: refused before the first "
          "step, naming the limit, nothing made (%s)", mirror_model_error(m));
    memset(name, 0, sizeof name);
    snprintf(name, sizeof name, "%s/", dir);
    memset(name + 4001, 'c', 4060 - 4001); /* 4060 bytes: its temporary files' names would not fit */
    fd.tensorboard = NULL, fd.checkpoint = name;
    rc = mirror_fit(m, &fd, NULL);
    CHECK(rc == MIRROR_ERR_ARGUMENT && names_limit(mirror_model_error(m)) && mirror_optimizer_steps(m) == steps,
          "4060 bytes: a checkpoint path refused by fit before the first step, naming the limit (%s)",
          mirror_model_error(m));
    CHECK(mirror_checkpoint_save(m, name, NULL, 3) == MIRROR_ERR_ARGUMENT && names_limit(mirror_model_error(m)) &&
              access(name, F_OK) != 0,
          "4060 bytes: mirror_checkpoint_save refuses it, naming the limit (%s)", mirror_model_error(m));
    fd.checkpoint = NULL, fd.history = name;
    rc = mirror_fit(m, &fd, NULL);
    CHECK(rc == MIRROR_ERR_ARGUMENT && names_limit(mirror_model_error(m)) && mirror_optimizer_steps(m) == steps,
          "4060 bytes: a history refused, naming the limit (%s)", mirror_model_error(m));
    CHECK(deep_dir(dir, 4080, 'd') &&
              mirror_dataset_load_mnist(&tr, &te, dir, &err) == MIRROR_ERR_ARGUMENT && names_limit(err.message),
          "4080 bytes: MNIST's directory refused, naming the limit (%s)", err.message);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* ---- calls from inside fit's hook ---- */

typedef struct nested {
    mirror_model *m;
    const mirror_fit_desc *fd;
    const char *ckpt;
    int fit_rc, load_rc, weights_rc;
} nested;

static int nesting_hook(void *user, const mirror_epoch_log *log)
{
    nested *n = (nested *)user;
    if (log->epoch != 1) return 0;
    n->fit_rc = mirror_fit(n->m, n->fd, NULL);
    n->load_rc = mirror_checkpoint_load(n->m, n->ckpt, 0, NULL);
    n->weights_rc = mirror_checkpoint_load(n->m, n->ckpt, 1, NULL);
    mirror_model_destroy(n->m); /* refused: the fit goes on in this model */
    return 0;
}

static void test_nested(void)
{
    char ckpt[256];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s), *plain = model(s);
    mirror_fit_desc fd = fit_desc(3), inner = fit_desc(1);
    nested n;
    size_t count = mirror_num_parameters(m);
    float *pm = (float *)malloc(count * sizeof(float)), *pp = (float *)malloc(count * sizeof(float));
    path_in(ckpt, "nested.ckpt");
    fd.augment_flip = 1, fd.augment_crop_pad = 1;
    CHECK(mirror_fit(plain, &fd, NULL) == MIRROR_OK, "a fit with augmentation: %s", mirror_model_error(plain));
    CHECK(mirror_checkpoint_save(plain, ckpt, NULL, 1) == MIRROR_OK, "its checkpoint");
    mirror_model_destroy(plain);
    plain = model(s);
    CHECK(mirror_fit(plain, &fd, NULL) == MIRROR_OK, "again, without a hook");
    n.m = m, n.fd = &inner, n.ckpt = ckpt, n.fit_rc = n.load_rc = n.weights_rc = 1;
    fd.on_epoch = nesting_hook, fd.user = &n;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "the fit whose hook calls into the model: %s", mirror_model_error(m));
    CHECK(n.fit_rc == MIRROR_ERR_STATE, "mirror_fit inside fit's hook on the same model: MIRROR_ERR_STATE (%d)",
          n.fit_rc);
    CHECK(n.load_rc == MIRROR_ERR_STATE, "a whole checkpoint loaded inside fit: MIRROR_ERR_STATE (%d)", n.load_rc);
    CHECK(n.weights_rc == MIRROR_OK, "its weights only: loaded (%d)", n.weights_rc);
    /* The weights loaded at epoch 1 end differ from the plain run's there; without them the runs match. */
    mirror_model_destroy(m);
    m = model(s);
    n.m = m, n.ckpt = "/nonexistent/x.ckpt";
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && n.fit_rc == MIRROR_ERR_STATE, "again, loading nothing");
    mirror_get_parameters(m, 1, pm, count);
    mirror_get_parameters(plain, 1, pp, count);
    CHECK(!memcmp(pm, pp, count * sizeof(float)),
          "the outer fit ends bitwise where a fit without the nested calls ends (augmentation kept)");
    free(pm), free(pp);
    mirror_model_destroy(m), mirror_model_destroy(plain);
    mirror_strategy_destroy(s);
}

int main(void)
{
    long live;
    if (!make_root("test_outputs")) return 1;
    mirror_set_logger(logger, NULL);
    small_digits(&data, 50, 5, 8, 3);
    live = live_allocs;
    test_refused();
    test_loaded_from();
    test_predict_write();
    test_full();
    test_resume();
    test_resume_skipped();
    test_tensorboard();
    test_made_dirs();
    test_plot();
    test_long_paths();
    test_nested();
    CHECK(live_allocs == live, "nothing leaked (%ld)", live_allocs - live);
    mirror_dataset_free(&data);
    remove_tree(root);
    return check_done("test_outputs");
}
