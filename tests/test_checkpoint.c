/* test_checkpoint.c - checkpoints: exact resume (bitwise parameters and
   equal losses at every step), loading on another replica count, weights
   only, atomic saves that survive a failed write, the kept files, and
   hostile files (truncations at every byte, single bit flips, wrong types,
   wrong shapes, bad offsets, unknown versions, fit's epoch numbers out of
   range): an error every time and an unchanged model; and no checkpoint of
   a model holding NaN. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setrlimit; mirror.h is not the first include */
#include "alloc_count.h"
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "digits.h"
#include "files.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static mirror_dataset data;

/* A small CNN on 8x8 crops (cnn) or an MLP, seed 3. */
static mirror_precision model_precision; /* fp32 unless a test says otherwise */

static mirror_model *model(mirror_strategy *s, int cnn, mirror_optimizer_kind opt)
{
    mirror_model_desc d = model_desc(s, 1, 8, 8, 12, 3);
    d.precision = model_precision;
    d.optimizer = optimizer_of(opt, 0.0f);
    return build_model(&d, NULL, "%sflatten, dense 8, relu, dense 10", cnn ? "conv 3 3 1 1, relu, maxpool 2 2, " : "");
}


/* Step k of a fixed schedule: epochs of 50 samples in batches of 12 (the
   fifth batch has 2), shuffled by (11, epoch). Returns the step's loss sum. */
static double step(mirror_model *m, size_t k)
{
    size_t perm[50], b = k % 5;
    mirror_batch g;
    mirror_metrics out;
    mirror_permutation(perm, 50, 11, k / 5);
    memset(&g, 0, sizeof g);
    g.x = data.x, g.labels = data.labels, g.rows = 50;
    g.index = perm + b * 12, g.n = b == 4 ? 2 : 12;
    if (mirror_train_step(m, &g, &out)) return -1.0;
    return out.loss_sum;
}

static float *params(mirror_model *m, size_t r)
{
    size_t n = mirror_num_parameters(m);
    float *p = (float *)malloc(n * sizeof(float));
    mirror_get_parameters(m, r, p, n);
    return p;
}

/* 2K steps straight, against K steps, save, a new model, load, K steps. */
static void test_exact_resume(int cnn, mirror_optimizer_kind opt, size_t replicas)
{
    const size_t K = 7;
    char path[256];
    double straight[14], resumed[14];
    mirror_strategy *s = new_strategy(NULL, replicas);
    mirror_model *a = model(s, cnn, opt), *b = model(s, cnn, opt), *c = model(s, cnn, opt);
    mirror_checkpoint_info at = {0, 1, 2, 11, 0, 0, 0, 0}, got;
    size_t k, n = mirror_num_parameters(a);
    float *pa, *pc, *sa, *sc;
    int same_loss = 1;
    path_in(path, "resume.ckpt");
    for (k = 0; k < 2 * K; k++) straight[k] = step(a, k);
    for (k = 0; k < K; k++) resumed[k] = step(b, k);
    CHECK(mirror_checkpoint_save(b, path, &at, 0) == MIRROR_OK, "save: %s", mirror_model_error(b));
    CHECK(mirror_checkpoint_load(c, path, 0, &got) == MIRROR_OK, "load: %s", mirror_model_error(c));
    CHECK(got.step == K && got.epoch == 1 && got.epoch_step == 2 && got.shuffle_seed == 11,
          "the cursor comes back (step %llu, epoch %llu, epoch_step %llu, seed %llu)", (unsigned long long)got.step,
          (unsigned long long)got.epoch, (unsigned long long)got.epoch_step, (unsigned long long)got.shuffle_seed);
    CHECK(mirror_optimizer_steps(c) == K, "the optimizer's step count comes back");
    for (k = K; k < 2 * K; k++) resumed[k] = step(c, k);
    for (k = 0; k < 2 * K; k++) same_loss &= straight[k] == resumed[k];
    CHECK(same_loss, "%s %s on %zu replicas: the same loss at every one of %zu steps", cnn ? "cnn" : "mlp",
          opt == MIRROR_OPT_SGD ? "SGD" : "AdamW", replicas, 2 * K);
    pa = params(a, replicas - 1), pc = params(c, replicas - 1);
    sa = (float *)malloc((mirror_optimizer_state_size(a) + 1) * 4), sc = (float *)malloc((mirror_optimizer_state_size(a) + 1) * 4);
    mirror_get_optimizer_state(a, 0, sa, mirror_optimizer_state_size(a));
    mirror_get_optimizer_state(c, 0, sc, mirror_optimizer_state_size(c));
    CHECK(!memcmp(pa, pc, n * 4) && !memcmp(sa, sc, mirror_optimizer_state_size(a) * 4),
          "parameters and optimizer state bitwise equal to the run without the checkpoint");
    free(pa), free(pc), free(sa), free(sc);
    mirror_model_destroy(a), mirror_model_destroy(b), mirror_model_destroy(c);
    mirror_strategy_destroy(s);
}

/* fit with a checkpoint every 3 steps; resuming fit from one taken
   mid-epoch ends where the uninterrupted fit ends. */
static void test_fit_resume(void)
{
    char path[256], mid[270];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *a = model(s, 1, MIRROR_OPT_ADAMW), *b = model(s, 1, MIRROR_OPT_ADAMW);
    mirror_fit_desc fd;
    mirror_checkpoint_info at;
    float *pa, *pb;
    path_in(path, "fit.ckpt");
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 3, fd.batch = 12, fd.progress = MIRROR_PROGRESS_NONE;
    fd.checkpoint = path, fd.checkpoint_every = 3, fd.checkpoint_keep = 20;
    CHECK(mirror_fit(a, &fd, NULL) == MIRROR_OK, "fit with checkpoints: %s", mirror_model_error(a));
    /* 15 steps: saves after steps 3, 6, 9, 12, 15; PATH.3 is the one after step 6 (epoch 2, step 1). */
    snprintf(mid, sizeof mid, "%s.3", path);
    CHECK(mirror_checkpoint_load(b, mid, 0, &at) == MIRROR_OK && at.step == 6 && at.epoch == 1 && at.epoch_step == 1,
          "the checkpoint after step 6 says epoch 2, step 1 (%llu, %llu, %llu)", (unsigned long long)at.step,
          (unsigned long long)at.epoch, (unsigned long long)at.epoch_step);
    fd.checkpoint = NULL;
    fd.initial_epoch = (size_t)at.epoch, fd.initial_step = (size_t)at.epoch_step, fd.shuffle_seed = at.shuffle_seed;
    CHECK(mirror_fit(b, &fd, NULL) == MIRROR_OK, "resumed fit: %s", mirror_model_error(b));
    pa = params(a, 1), pb = params(b, 1);
    CHECK(!memcmp(pa, pb, mirror_num_parameters(a) * 4), "resumed fit ends bitwise where the straight fit ends");
    free(pa), free(pb);
    mirror_model_destroy(a), mirror_model_destroy(b);
    mirror_strategy_destroy(s);
}

/* The notices heard since the last heard_clear(), one per line. */
static char heard[4096];
static void hear(void *user, int level, const char *message)
{
    size_t n = strlen(heard);
    (void)user;
    if (level == MIRROR_LOG_NOTICE) snprintf(heard + n, sizeof heard - n, "%s\n", message);
}

/* model(s, 0, Adam) with the settings a resumed run is compared on. */
static mirror_model *tuned(mirror_strategy *s, int deterministic, size_t chunk, float lr, uint64_t seed,
                           mirror_precision precision)
{
    mirror_model_desc d = model_desc(s, 1, 8, 8, 12, seed);
    d.precision = precision, d.deterministic = deterministic, d.chunk = chunk;
    d.optimizer = optimizer_of(MIRROR_OPT_ADAM, lr);
    return build_model(&d, NULL, "flatten, dense 8, relu, dense 10");
}

/* A checkpoint loaded to go on training says in one notice every setting
   its run had otherwise (learning rate, seed, precision, deterministic
   mode, chunk, replicas outside deterministic mode); a fit that resumes it
   says so of another cut into micro-batches. Nothing is said when nothing
   differs that changes the bits. */
static void test_resume_changes(void)
{
    static const struct {
        size_t replicas;
        int deterministic;
        size_t chunk;
        float lr;
        uint64_t seed;
        mirror_precision precision;
        const char *says, *verdict;
    } cases[] = {
        {2, 1, 4, 0.01f, 3, MIRROR_PRECISION_FP32, NULL, NULL},
        {3, 1, 4, 0.01f, 3, MIRROR_PRECISION_FP32, NULL, NULL}, /* deterministic: any replica count, the same bits */
        {2, 1, 4, 0.02f, 3, MIRROR_PRECISION_FP32, "lr 0.0199999996 (the checkpoint's: 0.00999999978)",
         "no longer bitwise"},
        {2, 1, 4, 0.01f, 5, MIRROR_PRECISION_FP32, "seed 5 (the checkpoint's: 3)", "no longer bitwise"},
        {2, 1, 8, 0.01f, 3, MIRROR_PRECISION_FP32, "chunk 8 (the checkpoint's: 4)", "no longer bitwise"},
        {2, 0, 0, 0.01f, 3, MIRROR_PRECISION_FP32, "deterministic 0 (the checkpoint's: 1)", "no longer bitwise"},
        {2, 1, 4, 0.01f, 3, MIRROR_PRECISION_BF16, "precision bf16 (the checkpoint's: fp32)", "no longer bitwise"},
    };
    static const size_t splits[][3] = {{12, 1, 0}, {4, 3, 0}, {6, 2, 1}, {3, 4, 1}}; /* batch, accumulate, a notice */
    char path[256], want[100];
    mirror_strategy *s2 = new_strategy(NULL, 2), *s3 = new_strategy(NULL, 3);
    mirror_model *a = tuned(s2, 1, 4, 0.01f, 3, MIRROR_PRECISION_FP32), *b;
    mirror_fit_desc fd;
    mirror_checkpoint_info at;
    size_t i;
    path_in(path, "changes.ckpt");
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 1, fd.batch = 12, fd.progress = MIRROR_PROGRESS_NONE, fd.checkpoint = path;
    CHECK(a && mirror_fit(a, &fd, NULL) == MIRROR_OK, "resume changes: the first epoch");
    mirror_set_logger(hear, NULL);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        b = tuned(cases[i].replicas == 2 ? s2 : s3, cases[i].deterministic, cases[i].chunk, cases[i].lr,
                  cases[i].seed, cases[i].precision);
        heard[0] = '\0';
        CHECK(b && mirror_checkpoint_load(b, path, 0, NULL) == MIRROR_OK, "resume changes %zu: loads", i);
        if (!cases[i].says)
            CHECK(!heard[0], "resumed as saved: no notice (%s)", heard);
        else
            CHECK(strstr(heard, cases[i].says) && strstr(heard, cases[i].verdict) && !strchr(heard, '\n')[1],
                  "resumed otherwise: one notice with \"%s\" and \"%s\" (%s)", cases[i].says, cases[i].verdict,
                  heard);
        heard[0] = '\0';
        CHECK(b && mirror_checkpoint_load(b, path, 1, NULL) == MIRROR_OK && !heard[0],
              "weights only: no notice (%s)", heard);
        mirror_model_destroy(b);
    }
    /* outside deterministic mode the replica count changes the sums */
    {
        char other[256];
        mirror_model *c = tuned(s2, 0, 0, 0.01f, 3, MIRROR_PRECISION_FP32);
        path_in(other, "changes_nd.ckpt");
        b = tuned(s3, 0, 0, 0.01f, 3, MIRROR_PRECISION_FP32);
        CHECK(c && mirror_checkpoint_save(c, other, NULL, 1) == MIRROR_OK, "a checkpoint without deterministic mode");
        heard[0] = '\0';
        CHECK(b && mirror_checkpoint_load(b, other, 0, NULL) == MIRROR_OK &&
                  strstr(heard, "resumed with replicas 3 (the checkpoint's: 2): the run goes on, no longer bitwise"),
              "its resume on 3 replicas says so (%s)", heard);
        mirror_model_destroy(b), mirror_model_destroy(c);
    }
    /* rebuilt from the checkpoint: its settings, deterministic mode and chunk included */
    heard[0] = '\0';
    CHECK(mirror_model_from_checkpoint(s3, path, 0, &b, NULL, NULL) == MIRROR_OK &&
              mirror_model_query_desc(b).deterministic && mirror_model_query_desc(b).chunk == 4 && !heard[0],
          "mirror_model_from_checkpoint on 3 replicas: deterministic, chunks of 4, nothing to say (%s)", heard);
    mirror_model_destroy(b);
    /* the micro-batches of a resumed fit (chunks of 4): 12, 4 x 3 whole chunks; 6 x 2 cuts them elsewhere */
    fd.checkpoint = NULL, fd.epochs = 2;
    for (i = 0; i < 4; i++) {
        b = tuned(s2, 1, 4, 0.01f, 3, MIRROR_PRECISION_FP32);
        CHECK(b && mirror_checkpoint_load(b, path, 0, &at) == MIRROR_OK && at.micro_batch == 12,
              "the checkpoint keeps the micro-batch (%llu)", (unsigned long long)at.micro_batch);
        fd.initial_epoch = (size_t)at.epoch, fd.shuffle_seed = at.shuffle_seed;
        fd.batch = splits[i][0], fd.accumulate = splits[i][1];
        heard[0] = '\0';
        CHECK(b && mirror_fit(b, &fd, NULL) == MIRROR_OK, "resumed fit: %s", mirror_model_error(b));
        snprintf(want, sizeof want, "micro-batches of %zu samples where the checkpoint's run had 12", splits[i][0]);
        CHECK(!!strstr(heard, want) == (int)splits[i][2],
              "resumed in micro-batches of %zu: %s (%s)", splits[i][0], splits[i][2] ? "a notice" : "none", heard);
        mirror_model_destroy(b);
    }
    mirror_set_logger(NULL, NULL);
    mirror_model_destroy(a);
    mirror_strategy_destroy(s2), mirror_strategy_destroy(s3);
}

static void test_replicas_and_weights_only(void)
{
    char path[256];
    mirror_strategy *s2 = new_strategy(NULL, 2), *s3 = new_strategy(NULL, 3);
    mirror_model *a = model(s2, 1, MIRROR_OPT_ADAM), *b = model(s3, 1, MIRROR_OPT_ADAM), *c = model(s3, 1, MIRROR_OPT_SGD);
    size_t k, r, n = mirror_num_parameters(a);
    float *pa, *pb;
    int equal = 1;
    path_in(path, "replicas.ckpt");
    for (k = 0; k < 4; k++) step(a, k);
    mirror_checkpoint_save(a, path, NULL, 1);
    CHECK(mirror_checkpoint_load(b, path, 0, NULL) == MIRROR_OK, "a 2-replica checkpoint loads on 3 replicas");
    pa = params(a, 0);
    for (r = 0; r < 3; r++) {
        pb = params(b, r);
        equal &= !memcmp(pa, pb, n * 4);
        free(pb);
    }
    CHECK(equal, "every one of the 3 replicas holds the saved parameters");
    CHECK(step(b, 4) > 0.0, "and trains on");
    CHECK(mirror_checkpoint_load(c, path, 0, NULL) == MIRROR_ERR_SHAPE && strstr(mirror_model_error(c), "optimizer"),
          "an Adam checkpoint into an SGD model: a shape error naming the optimizer (%s)", mirror_model_error(c));
    CHECK(mirror_checkpoint_load(c, path, 1, NULL) == MIRROR_OK, "weights only: loads into the SGD model");
    pb = params(c, 2);
    CHECK(!memcmp(pa, pb, n * 4) && mirror_optimizer_steps(c) == 0, "weights only: parameters, and no step count");
    free(pa), free(pb);
    mirror_model_destroy(a), mirror_model_destroy(b), mirror_model_destroy(c);
    mirror_strategy_destroy(s2), mirror_strategy_destroy(s3);
}

static int count_files(const char *prefix)
{
    DIR *d = opendir(root);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL) /* the save lock PATH.lock stays beside PATH */
        n += !strncmp(e->d_name, prefix, strlen(prefix)) && !strstr(e->d_name, ".lock");
    if (d) closedir(d);
    return n;
}

/* keep 3: PATH is the newest, PATH.1 and PATH.2 the two before; a write
   that fails (here: the file size limit, as on a full disk) leaves them. */
static void test_durability(void)
{
    char path[256], older[270];
    mirror_strategy *s = new_strategy(NULL, 1);
    mirror_model *m = model(s, 0, MIRROR_OPT_SGD), *probe = model(s, 0, MIRROR_OPT_SGD);
    mirror_checkpoint_info at;
    struct rlimit old, tiny;
    size_t k;
    int rc;
    path_in(path, "keep.ckpt");
    for (k = 0; k < 5; k++) {
        step(m, k);
        CHECK(mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_OK, "save %zu: %s", k, mirror_model_error(m));
    }
    CHECK(count_files("keep.ckpt") == 3, "keep 3: three files (%d)", count_files("keep.ckpt"));
    snprintf(older, sizeof older, "%s.2", path);
    CHECK(mirror_checkpoint_load(probe, path, 0, &at) == MIRROR_OK && at.step == 5, "PATH is the newest (step %llu)",
          (unsigned long long)at.step);
    CHECK(mirror_checkpoint_load(probe, older, 0, &at) == MIRROR_OK && at.step == 3, "PATH.2 is two saves older");
    step(m, 5);
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old);
    tiny = old;
    tiny.rlim_cur = 200;
    setrlimit(RLIMIT_FSIZE, &tiny);
    rc = mirror_checkpoint_save(m, path, NULL, 3);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(rc == MIRROR_ERR_IO && strstr(mirror_model_error(m), "intact"),
          "a write cut short (file size limit): MIRROR_ERR_IO saying the previous checkpoint is intact (%s)",
          mirror_model_error(m));
    CHECK(mirror_checkpoint_load(probe, path, 0, &at) == MIRROR_OK && at.step == 5,
          "after the failed write PATH still loads, with the previous step (%llu)", (unsigned long long)at.step);
    CHECK(count_files("keep.ckpt") == 3, "no temporary file left behind (%d files)", count_files("keep.ckpt"));
    path_in(older, "no-such-dir/x.ckpt");
    CHECK(mirror_checkpoint_save(m, older, NULL, 3) == MIRROR_ERR_IO, "a directory that does not exist: MIRROR_ERR_IO");
    CHECK(mirror_checkpoint_save(m, NULL, NULL, 3) == MIRROR_ERR_ARGUMENT, "NULL path");
    mirror_model_destroy(m), mirror_model_destroy(probe);
    mirror_strategy_destroy(s);
}

/* ---- hostile files ---- */

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *p;
    long size;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = (unsigned char *)malloc((size_t)size + 1);
    *n = fread(p, 1, (size_t)size, f);
    fclose(f);
    return p;
}


static mirror_model *victim;
static float *victim_before;
static size_t victim_n;
static long victim_steps;

/* Loads bytes as a checkpoint: must fail with a message, change nothing, leak nothing. */
static int hostile(const unsigned char *p, size_t n, const char *what, int want)
{
    char path[256];
    float *now;
    long live = live_allocs;
    int rc, ok;
    path_in(path, "hostile.ckpt");
    write_file(path, p, n);
    rc = mirror_checkpoint_load(victim, path, 0, NULL);
    now = params(victim, 1);
    ok = rc < 0 && (!want || rc == want) && mirror_model_error(victim)[0] && !memcmp(now, victim_before, victim_n * 4) &&
         (long)mirror_optimizer_steps(victim) == victim_steps && live_allocs == live;
    if (!ok)
        fprintf(stderr, "hostile %s: rc %d (%s), want %d; unchanged %d; leaked %ld\n", what, rc,
                mirror_model_error(victim), want, !memcmp(now, victim_before, victim_n * 4), live_allocs - live);
    free(now);
    return ok;
}

/* Rewrites the header text (new_text, NUL-terminated, same or any length)
   with a correct header checksum, so that the later checks are reached. */
static unsigned char *reheader(const unsigned char *file, size_t n, const char *text, size_t *out_n)
{
    size_t hlen = 0, len = strlen(text), i;
    unsigned char *out;
    char *crc;
    for (i = 0; i < 8; i++) hlen |= (size_t)file[i] << (8 * i);
    out = (unsigned char *)malloc(8 + len + (n - 8 - hlen) + 1);
    for (i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)len >> (8 * i));
    memcpy(out + 8, text, len);
    memcpy(out + 8 + len, file + 8 + hlen, n - 8 - hlen);
    crc = strstr((char *)out + 8, "\"crc32.header\":\"");
    if (crc && crc + 24 <= (char *)out + 8 + len) {
        char hex[9];
        memcpy(crc + 16, "00000000", 8);
        snprintf(hex, sizeof hex, "%08lx", (unsigned long)mirror__crc32(0, out + 8, len));
        memcpy(crc + 16, hex, 8);
    }
    *out_n = 8 + len + (n - 8 - hlen);
    return out;
}

/* The header text with the first `from` replaced by `to`. */
static char *edit(const unsigned char *file, const char *from, const char *to)
{
    size_t hlen = 0, i;
    char *text, *at, *out;
    for (i = 0; i < 8; i++) hlen |= (size_t)file[i] << (8 * i);
    text = (char *)malloc(hlen + 1);
    memcpy(text, file + 8, hlen);
    text[hlen] = '\0';
    out = (char *)malloc(hlen + strlen(to) + 1);
    at = strstr(text, from);
    if (!at) {
        strcpy(out, text);
    } else {
        memcpy(out, text, (size_t)(at - text));
        strcpy(out + (at - text), to);
        strcat(out, at + strlen(from));
    }
    free(text);
    return out;
}

static void test_hostile(void)
{
    char path[256];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *src = model(s, 1, MIRROR_OPT_ADAM), *other;
    unsigned char *good, *bad;
    size_t n, hlen = 0, i, bit, fails;
    int all;
    static const struct {
        const char *from, *to, *what;
        int want;
    } edits[] = {
        {"\"version\":\"1\"", "\"version\":\"2\"", "an unknown version", MIRROR_ERR_UNSUPPORTED},
        {"\"format\":\"mirror\"", "\"format\":\"other\"", "another format", MIRROR_ERR_FORMAT},
        {"\"precision\":\"fp32\"", "\"precision\":\"fp64\"", "an unknown precision", MIRROR_ERR_UNSUPPORTED},
        {"\"precision\":\"fp32\"", "\"precision\":\"fp16\"", "fp16 without a scaler state", MIRROR_ERR_FORMAT},
        {"\"dtype\":\"F32\"", "\"dtype\":\"F16\"", "another dtype", MIRROR_ERR_FORMAT},
        {"\"dtype\":\"F32\"", "\"dtype\":32", "a dtype that is a number", MIRROR_ERR_FORMAT},
        {"\"shape\":[3,1,3,3]", "\"shape\":\"3,1,3,3\"", "a shape that is a string", MIRROR_ERR_FORMAT},
        {"\"shape\":[3,1,3,3]", "\"shape\":[3,1,9]", "a shape that is not the model's", MIRROR_ERR_SHAPE},
        {"\"shape\":[3,1,3,3]", "\"shape\":[-3,1,3,3]", "a negative dimension", MIRROR_ERR_FORMAT},
        {"\"data_offsets\":[0,108]", "\"data_offsets\":[0,108,4]", "three offsets", MIRROR_ERR_FORMAT},
        {"\"data_offsets\":[0,108]", "\"data_offsets\":[4,112]", "overlapping offsets", MIRROR_ERR_FORMAT},
        {"\"data_offsets\":[0,108]", "\"data_offsets\":[99999999,100000107]", "offsets past the end", MIRROR_ERR_FORMAT},
        {"\"data_offsets\":[0,108]", "\"data_offsets\":[108,0]", "offsets backwards", MIRROR_ERR_FORMAT},
        {"\"step\":\"", "\"step\":\"x", "a step that is not a number", MIRROR_ERR_FORMAT},
        {"\"model\":\"input(1,8,8)", "\"model\":\"input(1,9,8)", "another model", MIRROR_ERR_SHAPE},
        {"{\"__metadata__\"", "[\"__metadata__\"", "a header that is not an object", MIRROR_ERR_FORMAT},
        {"\"layers.0.weight\":{", "\"layers.0.weight\":{\"extra\":1,", "an unknown field", MIRROR_ERR_FORMAT},
        {"\"layers.0.weight\":{", "\"layers.9.weight\":{", "a missing tensor", MIRROR_ERR_SHAPE},
        {"\"version\":\"1\"", "\"version\":\"1\",\"version\":\"1\"", "a repeated metadata key", MIRROR_ERR_FORMAT},
        {"\"step\":\"", "\"step\":\"0", "a step with a leading zero", MIRROR_ERR_FORMAT},
        {"\"loss_scaler\":\"none\"", "\"loss_scaler\":\"magic\"", "an unknown loss scaler", MIRROR_ERR_UNSUPPORTED},
        {"\"step\":\"1\"", "\"step\":\"18446744073709551615\"", "a step of 2^64 - 1", MIRROR_ERR_FORMAT},
        {"\"epoch\":\"0\"", "\"epoch\":\"9007199254740993\"", "an epoch past 2^53", MIRROR_ERR_FORMAT},
        {"\"drop_remainder\":\"0\"", "\"drop_remainder\":\"2\"", "drop_remainder 2", MIRROR_ERR_FORMAT},
        {"\"epoch_step\":\"0\",\"shuffle_seed\":\"0\",\"batch\":\"0\",\"samples\":\"0\"",
         "\"epoch_step\":\"5\",\"shuffle_seed\":\"0\",\"batch\":\"10\",\"samples\":\"50\"",
         "epoch_step 5 of an epoch of 5 steps", MIRROR_ERR_FORMAT},
    };
    path_in(path, "good.ckpt");
    step(src, 0);
    mirror_checkpoint_save(src, path, NULL, 1);
    good = slurp(path, &n);
    for (i = 0; i < 8; i++) hlen |= (size_t)good[i] << (8 * i);
    victim = model(s, 1, MIRROR_OPT_ADAM);
    step(victim, 1), step(victim, 2);
    victim_n = mirror_num_parameters(victim);
    victim_before = params(victim, 1);
    victim_steps = (long)mirror_optimizer_steps(victim);
    CHECK(!hostile(good, n, "the good file", 0), "the good file itself loads (the harness can tell)");
    mirror_checkpoint_load(victim, path, 0, NULL); /* back to the victim's own state */
    free(victim_before);
    victim_before = params(victim, 1);
    victim_steps = (long)mirror_optimizer_steps(victim);

    for (i = 0, all = 1; i < 8 + hlen + 64 && i < n; i++) all &= hostile(good, i, "truncated", 0);
    for (; i < n; i += 97) all &= hostile(good, i, "truncated in the data", 0);
    CHECK(all, "truncated at every byte of the header and the first data, and every 97th byte after: an error");

    bad = (unsigned char *)malloc(n);
    for (bit = 0, fails = 0; bit < 8 * n; bit += bit < 8 * (8 + hlen) ? 1 : 61) {
        memcpy(bad, good, n);
        bad[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        fails += !hostile(bad, n, "bit flip", 0);
    }
    CHECK(fails == 0, "every single bit flip in the header, every 61st in the data: an error (%zu loaded)", fails);
    memcpy(bad, good, n);
    for (i = 0; i < 8; i++) bad[i] = 0xFF;
    CHECK(hostile(bad, n, "absurd header length", MIRROR_ERR_FORMAT), "an absurd header length");
    CHECK(hostile(good, 0, "empty", MIRROR_ERR_FORMAT), "an empty file");
    free(bad);

    for (i = 0; i < sizeof edits / sizeof *edits; i++) {
        char *text = edit(good, edits[i].from, edits[i].to);
        size_t m2;
        unsigned char *file = reheader(good, n, text, &m2);
        CHECK(strstr(text, edits[i].to) != NULL, "edit %s applies", edits[i].what);
        CHECK(hostile(file, m2, edits[i].what, edits[i].want), "%s: error %d", edits[i].what, edits[i].want);
        free(text), free(file);
    }
    { /* a data byte changed with its checksum left: a checksum error */
        unsigned char *file = (unsigned char *)malloc(n);
        memcpy(file, good, n);
        file[n - 1] ^= 0x40;
        CHECK(hostile(file, n, "data changed", MIRROR_ERR_CHECKSUM), "a changed tensor: MIRROR_ERR_CHECKSUM");
        memcpy(file, good, n);
        file[8 + 20] ^= 0x01;
        CHECK(hostile(file, n, "header changed", 0), "a changed header byte: an error");
        free(file);
    }
    path_in(path, "missing.ckpt");
    CHECK(mirror_checkpoint_load(victim, path, 0, NULL) == MIRROR_ERR_IO, "a missing file: MIRROR_ERR_IO");
    other = model(s, 0, MIRROR_OPT_ADAM);
    path_in(path, "good.ckpt");
    CHECK(mirror_checkpoint_load(other, path, 0, NULL) == MIRROR_ERR_SHAPE, "a checkpoint of another model: MIRROR_ERR_SHAPE");
    {
        const char *e = mirror_model_error(other), *at = strstr(e, "a checkpoint of another model: at layer 0 the "
                                                                   "checkpoint has conv2d(3,3,1,1), this model flatten "
                                                                   "(7 layers in the checkpoint, 4 in this model). To load "
                                                                   "it, build the model it describes");
        CHECK(at && strstr(at, "The checkpoint's: input(1,8,8);conv2d(3,3,1,1);relu;") &&
                  strstr(at, "; this model's: input(1,8,8);flatten;dense(8);relu;dense(10);loss(softmax_ce)"),
              "a checkpoint of another model: the first layer that differs, what to do, then both models: %s", e);
    }
    mirror_model_destroy(other);
    free(good), free(victim_before);
    mirror_model_destroy(src), mirror_model_destroy(victim);
    mirror_strategy_destroy(s);
}

/* A mixed-precision checkpoint with valid checksums and counters no run
   gives: refused, the model unchanged. */
static void test_hostile_counters(void)
{
    char path[256];
    mirror_strategy *s;
    mirror_model *src;
    unsigned char *good;
    size_t n, i;
    static const struct {
        const char *from, *to, *what;
    } edits[] = {
        {"\"optimizer_steps\":\"2\"", "\"optimizer_steps\":\"18446744073709551615\"", "Adam's t of 2^64 - 1"},
        {"\"optimizer_steps\":\"2\"", "\"optimizer_steps\":\"3\"", "more optimizer steps than steps"},
        {"\"scaler_skipped\":\"0\"", "\"scaler_skipped\":\"9\"", "more skipped steps than steps"},
        {"\"scaler_consecutive_skips\":\"0\"", "\"scaler_consecutive_skips\":\"1\"", "more skips in a row than skips"},
        {"\"loss_scale\":\"65536\"", "\"loss_scale\":\"1e-30\"", "a loss scale far below min_scale"},
        {"\"loss_scale\":\"65536\"", "\"loss_scale\":\"1e30\"", "a loss scale above max_scale"},
    };
    model_precision = MIRROR_PRECISION_FP16;
    s = new_strategy(NULL, 2);
    src = model(s, 0, MIRROR_OPT_ADAM);
    victim = model(s, 0, MIRROR_OPT_ADAM);
    model_precision = MIRROR_PRECISION_FP32;
    CHECK(src && victim, "fp16 models");
    if (!src || !victim) goto out;
    path_in(path, "fp16.ckpt");
    step(src, 0), step(src, 1);
    CHECK(mirror_checkpoint_save(src, path, NULL, 1) == MIRROR_OK, "fp16 save: %s", mirror_model_error(src));
    good = slurp(path, &n);
    step(victim, 0);
    victim_n = mirror_num_parameters(victim);
    victim_before = params(victim, 1);
    victim_steps = (long)mirror_optimizer_steps(victim);
    CHECK(!hostile(good, n, "the good fp16 file", 0), "the good fp16 file itself loads (the harness can tell)");
    mirror_checkpoint_load(victim, path, 0, NULL);
    free(victim_before);
    victim_before = params(victim, 1);
    victim_steps = (long)mirror_optimizer_steps(victim);
    for (i = 0; i < sizeof edits / sizeof *edits; i++) {
        char *text = edit(good, edits[i].from, edits[i].to);
        size_t m2;
        unsigned char *file = reheader(good, n, text, &m2);
        CHECK(strstr(text, edits[i].to) != NULL, "edit %s applies", edits[i].what);
        CHECK(hostile(file, m2, edits[i].what, MIRROR_ERR_FORMAT), "%s: MIRROR_ERR_FORMAT", edits[i].what);
        free(text), free(file);
    }
    free(good), free(victim_before);
out:
    mirror_model_destroy(src), mirror_model_destroy(victim);
    mirror_strategy_destroy(s);
}

/* fit's running numbers of the epoch a checkpoint was saved in (after
   step 4 of 5 here: 48 samples) in the range a run gives them, or the
   file is refused: a history resumed from them would show numbers no
   run had. */
static void test_hostile_epoch_sums(void)
{
    char path[256], mid[270];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *src = model(s, 0, MIRROR_OPT_ADAM);
    mirror_fit_desc fd;
    unsigned char *good;
    size_t n, i;
    static const struct {
        const char *from, *to, *what;
    } edits[] = {
        {"\"epoch_samples\":\"48\"", "\"epoch_samples\":\"51\"", "more samples than the data"},
        {"\"epoch_samples\":\"48\"", "\"epoch_samples\":\"0\"", "no samples after 4 steps"},
        {"\"epoch_correct\":\"", "\"epoch_correct\":\"9", "more correct than samples"},
        {"\"epoch_skipped\":\"0\"", "\"epoch_skipped\":\"5\"", "more skipped steps than steps"},
        {"\"epoch_loss_sum\":\"", "\"epoch_loss_sum\":\"-", "a negative loss sum"},
        {"\"epoch_loss_sum\":\"", "\"epoch_loss_sum\":\"x", "a loss sum that is not a number"},
        {"\"epoch_loss_sum\":\"", "\"epoch_loss_sum\":\"nan\",\"x\":\"", "a loss sum of NaN"},
        {"\"epoch_seconds\":\"", "\"epoch_seconds\":\"-", "a negative time"},
        {"\"epoch_step\":\"4\"", "\"epoch_step\":\"0\"", "an epoch's numbers at its start"},
    };
    path_in(path, "sums.ckpt");
    snprintf(mid, sizeof mid, "%s.1", path);
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 1, fd.batch = 12, fd.progress = MIRROR_PROGRESS_NONE;
    fd.checkpoint = path, fd.checkpoint_every = 2; /* after steps 2, 4 and 5: PATH.1 after step 4 */
    CHECK(mirror_fit(src, &fd, NULL) == MIRROR_OK, "fit: %s", mirror_model_error(src));
    good = slurp(mid, &n);
    CHECK(good && strstr((const char *)good + 8, "\"epoch_samples\":\"48\""), "the epoch's numbers are kept");
    victim = model(s, 0, MIRROR_OPT_ADAM);
    victim_n = mirror_num_parameters(victim);
    victim_before = params(victim, 1);
    victim_steps = (long)mirror_optimizer_steps(victim);
    CHECK(good && !hostile(good, n, "the good file", 0), "the good file itself loads (the harness can tell)");
    mirror_model_destroy(victim);
    victim = model(s, 0, MIRROR_OPT_ADAM);
    free(victim_before);
    victim_before = params(victim, 1);
    for (i = 0; good && i < sizeof edits / sizeof *edits; i++) {
        char *text = edit(good, edits[i].from, edits[i].to);
        size_t m2;
        unsigned char *file = reheader(good, n, text, &m2);
        CHECK(strstr(text, edits[i].to) != NULL, "edit %s applies", edits[i].what);
        CHECK(hostile(file, m2, edits[i].what, MIRROR_ERR_FORMAT), "%s: MIRROR_ERR_FORMAT", edits[i].what);
        free(text), free(file);
    }
    free(good), free(victim_before);
    mirror_model_destroy(src), mirror_model_destroy(victim);
    mirror_strategy_destroy(s);
}

/* file (n bytes) with element `at` of tensor `name` set to v, that tensor's
   checksum and the header's made right again: a crafted checkpoint that
   only its values give away. */
static unsigned char *set_value(const unsigned char *file, size_t n, const char *name, size_t at, float v,
                                size_t *out_n)
{
    mirror__header h;
    const mirror__entry *t;
    size_t hlen = 0, i;
    unsigned char *copy = (unsigned char *)malloc(n), *out = NULL;
    char key[128], *text = NULL, *crc;
    for (i = 0; i < 8; i++) hlen |= (size_t)file[i] << (8 * i);
    memcpy(copy, file, n);
    if (mirror__parse_header((const char *)file + 8, hlen, &h) && (t = mirror__find_tensor(&h, name)) != NULL &&
        at < t->count) {
        memcpy(copy + 8 + hlen + t->begin + 4 * at, &v, 4);
        snprintf(key, sizeof key, "\"crc32.%s\":\"", name);
        text = edit(copy, "", ""); /* the header's text */
        if ((crc = strstr(text, key)) != NULL) {
            char hex[9];
            snprintf(hex, sizeof hex, "%08lx",
                     (unsigned long)mirror__crc32(0, copy + 8 + hlen + t->begin, (size_t)(t->end - t->begin)));
            memcpy(crc + strlen(key), hex, 8);
            out = reheader(copy, n, text, out_n);
        }
    }
    mirror__header_free(&h);
    free(copy), free(text);
    return out;
}

static mirror_model *bn_model(mirror_strategy *s, uint64_t seed);

/* Optimizer state and parameters no run gives, in a checkpoint whose
   checksums are right: refused, naming the tensor and the element, the
   model unchanged. */
static void test_hostile_values(void)
{
    char path[256];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *src = model(s, 1, MIRROR_OPT_ADAM);
    unsigned char *good, *file;
    size_t n, fn, i;
    float inf = mirror_hd_float(0x7f800000u), nan = mirror_hd_float(0x7fc00000u);
    static const struct {
        const char *name;
        size_t at;
        int value; /* 0: +Inf, 1: NaN, 2: -1e-3, 3: -Inf */
        const char *says;
    } cases[] = {
        {"optimizer.v", 0, 0, "tensor optimizer.v: element 0 is infinite"},
        {"optimizer.v", 5, 2, "tensor optimizer.v: element 5 is negative"},
        {"optimizer.m", 2, 1, "tensor optimizer.m: element 2 is NaN"},
        {"optimizer.m", 1, 3, "tensor optimizer.m: element 1 is infinite"},
        {"layers.0.weight", 1, 1, "tensor layers.0.weight: element 1 is NaN"},
        {"layers.6.bias", 9, 0, "tensor layers.6.bias: element 9 is infinite"},
    };
    path_in(path, "values.ckpt");
    step(src, 0), step(src, 1);
    CHECK(mirror_checkpoint_save(src, path, NULL, 1) == MIRROR_OK, "values: save: %s", mirror_model_error(src));
    good = slurp(path, &n);
    victim = model(s, 1, MIRROR_OPT_ADAM);
    step(victim, 3);
    victim_n = mirror_num_parameters(victim);
    victim_before = params(victim, 1);
    victim_steps = (long)mirror_optimizer_steps(victim);
    CHECK(!hostile(good, n, "the good file", 0), "values: the good file loads (the harness can tell)");
    mirror_checkpoint_load(victim, path, 0, NULL);
    free(victim_before), victim_before = params(victim, 1);
    victim_steps = (long)mirror_optimizer_steps(victim);
    for (i = 0; i < sizeof cases / sizeof *cases; i++) {
        float v = cases[i].value == 0 ? inf : cases[i].value == 1 ? nan : cases[i].value == 2 ? -1e-3f : -inf;
        file = set_value(good, n, cases[i].name, cases[i].at, v, &fn);
        CHECK(file && hostile(file, fn, cases[i].says, MIRROR_ERR_FORMAT) &&
                  strstr(mirror_model_error(victim), cases[i].says),
              "values: %s: refused (%s)", cases[i].says, mirror_model_error(victim));
        free(file);
    }
    { /* optimizer state at step 0: no step has made any; the same file at step 2 loads */
        char *text = edit(good, "\"step\":\"2\"", "\"step\":\"0\"");
        file = reheader(good, n, text, &fn);
        CHECK(strstr(text, "\"step\":\"0\"") && hostile(file, fn, "state at step 0", MIRROR_ERR_FORMAT) &&
                  strstr(mirror_model_error(victim), "not zero at optimizer step 0"),
              "values: Adam's state at step 0: refused (%s)", mirror_model_error(victim));
        free(text), free(file);
    }
    { /* a checkpoint's running variance below zero */
        mirror_model *bn = bn_model(s, 5), *bn2 = bn_model(s, 6);
        unsigned char *bytes;
        size_t bn_n;
        int rc;
        step(bn, 0);
        path_in(path, "bn-values.ckpt");
        CHECK(mirror_checkpoint_save(bn, path, NULL, 1) == MIRROR_OK, "values: a BatchNorm checkpoint");
        bytes = slurp(path, &bn_n);
        file = set_value(bytes, bn_n, "layers.1.running_var", 2, -0.5f, &fn);
        path_in(path, "bn-crafted.ckpt");
        if (file) write_file(path, file, fn);
        rc = mirror_checkpoint_load(bn2, path, 1, NULL);
        CHECK(file && rc == MIRROR_ERR_FORMAT &&
                  strstr(mirror_model_error(bn2), "tensor layers.1.running_var: element 2 is negative"),
              "values: a negative running variance, weights only: refused (%s)", mirror_model_error(bn2));
        free(file), free(bytes);
        mirror_model_destroy(bn), mirror_model_destroy(bn2);
    }
    free(good), free(victim_before);
    mirror_model_destroy(src), mirror_model_destroy(victim);
    mirror_strategy_destroy(s);
}

/* Inputs that are not files, or inflate without end: a FIFO with no writer
   (open() would block for ever), /dev/zero, and gzip bombs as a checkpoint
   and as an IDX file. Each is refused at once; alarm() fails the test if
   one hangs. */
static void test_not_files(void)
{
    char fifo[256], bomb[256], img[256], lab[256];
    mirror_strategy *s = new_strategy(NULL, 1);
    mirror_model *m = model(s, 0, MIRROR_OPT_ADAM);
    mirror_dataset ds;
    mirror_error err = {0, ""};
    unsigned char *zeros = (unsigned char *)calloc(1, (size_t)80 << 20);
    float *before;
    double t0;
    int rc;
    CHECK(m && zeros, "a model and 80 MB of zeros");
    if (!m || !zeros) goto out;
    before = params(m, 0);
    alarm(300); /* generous: valgrind runs this too */
    path_in(fifo, "fifo");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    rc = mirror_checkpoint_load(m, fifo, 0, NULL);
    CHECK(rc == MIRROR_ERR_IO && strstr(mirror_model_error(m), "a FIFO"), "a FIFO as a checkpoint: %s",
          mirror_model_error(m));
    memset(&ds, 0, sizeof ds);
    rc = mirror_dataset_load_idx(&ds, fifo, fifo, 10, &err);
    CHECK(rc == MIRROR_ERR_IO && strstr(err.message, "not a regular file") && !ds.x, "a FIFO as IDX data: %s",
          err.message);
    rc = mirror_checkpoint_load(m, "/dev/zero", 0, NULL);
    CHECK(rc == MIRROR_ERR_IO && strstr(mirror_model_error(m), "device"), "/dev/zero as a checkpoint: %s",
          mirror_model_error(m));
    rc = mirror_checkpoint_load(m, root, 0, NULL);
    CHECK(rc == MIRROR_ERR_IO && strstr(mirror_model_error(m), "a directory"), "a directory as a checkpoint: %s",
          mirror_model_error(m));
#ifdef MIRROR_ZLIB
    path_in(bomb, "bomb.ckpt.gz");
    CHECK(write_gz(bomb, zeros, (size_t)80 << 20), "a 80 MB gzip bomb");
    t0 = mirror__now();
    rc = mirror_checkpoint_load(m, bomb, 0, NULL);
    CHECK(rc == MIRROR_ERR_FORMAT && strstr(mirror_model_error(m), "more than"),
          "a gzip bomb as a checkpoint: refused at this model's bound (%s), in %.2f s", mirror_model_error(m),
          mirror__now() - t0);
    /* an IDX file whose header declares 2 images of 4x4 and inflates to 80 MB */
    zeros[2] = 0x08, zeros[3] = 3, zeros[7] = 2, zeros[11] = 4, zeros[15] = 4;
    path_in(img, "bomb-images.gz"), path_in(lab, "bomb-labels.gz");
    CHECK(write_gz(img, zeros, (size_t)80 << 20), "an IDX bomb");
    memset(zeros, 0, 16);
    zeros[2] = 0x08, zeros[3] = 1, zeros[7] = 2;
    CHECK(write_gz(lab, zeros, 10), "its labels");
    t0 = mirror__now();
    rc = mirror_dataset_load_idx(&ds, img, lab, 10, &err);
    CHECK(rc == MIRROR_ERR_FORMAT && strstr(err.message, "header declares") && !ds.x,
          "a gzip bomb as IDX images: refused at the 52 bytes its header declares (%s), in %.2f s", err.message,
          mirror__now() - t0);
#else
    (void)bomb, (void)img, (void)lab, (void)t0;
#endif
    {
        float *now = params(m, 0);
        CHECK(!memcmp(now, before, mirror_num_parameters(m) * sizeof(float)), "the model unchanged by all of them");
        free(now);
    }
    alarm(0);
    free(before);
out:
    free(zeros);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

static int stop_after_first_epoch(void *user, const mirror_epoch_log *log)
{
    (void)user;
    return log->epoch == 1;
}

/* Edge cases: a seed of 2^64 - 1, 40 weighted layers, keep of SIZE_MAX,
   stops from the hook and from the flag, the schedule in the cursor. */
static void test_edges(void)
{
    char path[256];
    mirror_strategy *s = new_strategy(NULL, 1);
    mirror_model *m = model(s, 0, MIRROR_OPT_ADAM), *deep = NULL;
    mirror_model_desc d;
    mirror_checkpoint_info at, got;
    mirror_fit_desc fd;
    volatile sig_atomic_t stop = 0;
    size_t i;
    path_in(path, "edges.ckpt");
    memset(&at, 0, sizeof at);
    at.shuffle_seed = UINT64_MAX, at.batch = 12, at.samples = 50;
    CHECK(mirror_checkpoint_save(m, path, &at, 0) == MIRROR_OK && mirror_checkpoint_load(m, path, 0, &got) == MIRROR_OK &&
              got.shuffle_seed == UINT64_MAX && got.batch == 12 && got.samples == 50,
          "a shuffle seed of 2^64 - 1 and the schedule come back");
    CHECK(mirror_checkpoint_save(m, path, NULL, (size_t)-1) == MIRROR_OK &&
              mirror_checkpoint_save(m, path, NULL, (size_t)-1) == MIRROR_OK,
          "keep SIZE_MAX: saves without walking 2^64 names");
    memset(&d, 0, sizeof d);
    d.strategy = s, d.channels = 4, d.optimizer.kind = MIRROR_OPT_ADAM;
    mirror_model_create(&d, &deep, NULL);
    for (i = 0; i < 40; i++) mirror_dense(deep, 4);
    mirror_model_build(deep);
    path_in(path, "deep.ckpt");
    CHECK(mirror_checkpoint_save(deep, path, NULL, 1) == MIRROR_OK && mirror_checkpoint_load(deep, path, 0, NULL) == MIRROR_OK,
          "40 weighted layers with Adam: saves and loads (%s)", mirror_model_error(deep));
    mirror_model_destroy(deep);

    path_in(path, "stop.ckpt");
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 3, fd.batch = 12, fd.progress = MIRROR_PROGRESS_NONE;
    fd.checkpoint = path, fd.on_epoch = stop_after_first_epoch;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_STOPPED && mirror_checkpoint_load(m, path, 0, &got) == MIRROR_OK &&
              got.epoch == 1 && got.epoch_step == 0,
          "stopped by the epoch hook: a checkpoint at epoch 2, step 0 (%llu, %llu)", (unsigned long long)got.epoch,
          (unsigned long long)got.epoch_step);
    fd.on_epoch = NULL, fd.stop = &stop, stop = 1;
    fd.initial_epoch = 1, fd.initial_step = 2;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_STOPPED && mirror_checkpoint_load(m, path, 0, &got) == MIRROR_OK &&
              got.epoch == 1 && got.epoch_step == 2 && got.step == mirror_optimizer_steps(m),
          "stopped by the flag before any step: the cursor it started from, no step taken");
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* Writes n bytes to a new file at `name`. */
static void put_file(const char *name, const char *bytes, size_t n)
{
    FILE *f = fopen(name, "wb");
    if (f) fwrite(bytes, 1, n, f), fclose(f);
}

/* The epoch hook of a fit that saves to another path: saves to `path`
   too, keeping the result. */
typedef struct hook_save {
    mirror_model *m;
    const char *path;
    int rc;
} hook_save;

static int save_in_hook(void *user, const mirror_epoch_log *log)
{
    hook_save *h = (hook_save *)user;
    (void)log;
    h->rc = mirror_checkpoint_save(h->m, h->path, NULL, 3);
    return 0;
}

/* Whether every name of names[n] is a file beside path (suffix appended). */
static int all_there(const char *path, const char *const *suffixes, size_t n, int want)
{
    char name[400];
    size_t i;
    for (i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s%s", path, suffixes[i]);
        if ((access(name, F_OK) == 0) != want) {
            fprintf(stderr, "  %s is %s\n", name, want ? "gone" : "still there");
            return 0;
        }
    }
    return 1;
}

/* What a save may replace, which temporary files it may remove, two
   processes saving to one path, and fit finding a bad path before its
   first step. */
static void test_targets(void)
{
    char path[256], other[300], name[400], lock[300];
    mirror_strategy *s = new_strategy(NULL, 1);
    mirror_model *m = model(s, 0, MIRROR_OPT_SGD);
    mirror_fit_desc fd;
    struct stat st;
    int rc, to_child[2], from_child[2];
    pid_t pid;
    char c = 0;
    static const char ours[] = "\x10\0\0\0\0\0\0\0{\"__metadata__\":{\"format\":\"mirror\",";

    /* Non-regular targets: refused, left as they are. */
    path_in(path, "fifo.ckpt");
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    rc = mirror_checkpoint_save(m, path, NULL, 3);
    CHECK(rc == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "not a regular file") &&
              stat(path, &st) == 0 && S_ISFIFO(st.st_mode),
          "a save onto a FIFO is refused and the FIFO stays (%s)", mirror_model_error(m));
    path_in(path, "dir.ckpt");
    CHECK(mkdir(path, 0700) == 0 && mirror_checkpoint_save(m, path, NULL, 1) == MIRROR_ERR_ARGUMENT,
          "a save onto a directory is refused (%s)", mirror_model_error(m));
    path_in(path, "link.ckpt");
    path_in(other, "elsewhere");
    put_file(other, "x", 1);
    CHECK(symlink(other, path) == 0 && mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_ERR_ARGUMENT &&
              lstat(path, &st) == 0 && S_ISLNK(st.st_mode),
          "a save onto a symbolic link is refused and the link stays (%s)", mirror_model_error(m));
    path_in(path, "rot.ckpt");
    CHECK(mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_OK, "a first save: %s", mirror_model_error(m));
    snprintf(other, sizeof other, "%s.1", path);
    CHECK(mkfifo(other, 0600) == 0 && mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_ERR_ARGUMENT &&
              strstr(mirror_model_error(m), ".1"),
          "a FIFO where the rotation would rename PATH.1: refused (%s)", mirror_model_error(m));

    /* A user's file where a save would replace it or rotate it away (an
       empty one too): refused, named, left as it was; PATH.N beyond keep
       is never touched; a checkpoint cut short after its first bytes is
       still this library's. */
    {
        mirror_fit_desc nf;
        unsigned char *a0, *a1, *now;
        size_t n0, n1, n;
        path_in(path, "notes.txt");
        put_file(path, "notes\n", 6);
        rc = mirror_checkpoint_save(m, path, NULL, 3);
        now = slurp(path, &n);
        CHECK(rc == MIRROR_ERR_ARGUMENT &&
                  strstr(mirror_model_error(m), "notes.txt exists and is not a mirror checkpoint") && now && n == 6 &&
                  !memcmp(now, "notes\n", 6),
              "a save onto a user's notes.txt: refused, naming it, the file intact (%s)", mirror_model_error(m));
        free(now);
        memset(&nf, 0, sizeof nf);
        nf.train = &data, nf.epochs = 2, nf.batch = 12, nf.progress = MIRROR_PROGRESS_NONE;
        nf.checkpoint = path, nf.checkpoint_every = 1;
        {
            mirror_model *fresh = model(s, 0, MIRROR_OPT_SGD); /* m stays untrained for what follows */
            rc = mirror_fit(fresh, &nf, NULL);
            now = slurp(path, &n);
            snprintf(name, sizeof name, "%s.1", path);
            CHECK(rc == MIRROR_ERR_ARGUMENT && mirror_optimizer_steps(fresh) == 0 && now && n == 6 &&
                      access(name, F_OK) != 0,
                  "fit saving every step to notes.txt: refused before the first step, nothing rotated (%s)",
                  mirror_model_error(fresh));
            free(now);
            mirror_model_destroy(fresh);
        }
        path_in(path, "empty.ckpt");
        put_file(path, "", 0);
        CHECK(mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_ERR_ARGUMENT &&
                  strstr(mirror_model_error(m), "it is empty") && stat(path, &st) == 0 && st.st_size == 0,
              "a save onto an empty file: refused, the file left (%s)", mirror_model_error(m));
        path_in(path, "kept.ckpt");
        CHECK(mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_OK &&
                  mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_OK,
              "two saves: PATH and PATH.1 (%s)", mirror_model_error(m));
        snprintf(name, sizeof name, "%s.2", path);
        put_file(name, "notes\n", 6);
        snprintf(other, sizeof other, "%s.1", path);
        a0 = slurp(path, &n0), a1 = slurp(other, &n1);
        rc = mirror_checkpoint_save(m, path, NULL, 3);
        now = slurp(name, &n);
        CHECK(rc == MIRROR_ERR_ARGUMENT &&
                  strstr(mirror_model_error(m), "kept.ckpt.2 exists and is not a mirror checkpoint") && now && n == 6,
              "a user's file at PATH.2, which the rotation would replace (keep 3): refused, the file intact (%s)",
              mirror_model_error(m));
        free(now);
        now = slurp(path, &n);
        CHECK(now && a0 && n == n0 && !memcmp(now, a0, n), "PATH unchanged by the refused save");
        free(now);
        now = slurp(other, &n);
        CHECK(now && a1 && n == n1 && !memcmp(now, a1, n), "PATH.1 unchanged by the refused save");
        free(now), free(a0), free(a1);
        rc = mirror_checkpoint_save(m, path, NULL, 2);
        now = slurp(name, &n);
        CHECK(rc == MIRROR_OK && now && n == 6,
              "keep 2: the save goes ahead, the user's PATH.2 beyond it untouched (%s)", mirror_model_error(m));
        free(now);
        put_file(other, "notes\n", 6);
        CHECK(mirror_checkpoint_save(m, path, NULL, 2) == MIRROR_ERR_ARGUMENT &&
                  strstr(mirror_model_error(m), "kept.ckpt.1 exists"),
              "a user's file at PATH.1, which the rotation would move away: refused (%s)", mirror_model_error(m));
        unlink(other);
        a0 = slurp(path, &n0);
        path_in(path, "cut.ckpt");
        put_file(path, (const char *)a0, a0 && n0 > 100 ? 100 : 0);
        free(a0);
        CHECK(mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_OK &&
                  mirror_checkpoint_load(m, path, 0, NULL) == MIRROR_OK,
              "a checkpoint cut short after its first 100 bytes: replaced (%s)", mirror_model_error(m));
    }

    /* Temporary files: a save removes those its name pattern gives, as a
       crash leaves them, whatever they hold; never a user's file, whatever
       it holds (a checkpoint's start, nothing) or however close its name. */
    {
        static const char *const users[] = {
            ".tmp.notes", ".tmp.backup", ".tmp.epoch1", ".tmp.EMPTY1", ".tmp.Ab3dE9",
            ".tmp-mirror-", ".tmp-mirror-0000abcd-0123456789abcdeF", ".tmp-mirror-0000abcd-0123456789abcde",
            ".tmp-mirror-0000abcd-0123456789abcdef0", ".tmp-mirror-0000abcd_0123456789abcdef",
            ".tmp-mirror-0000abcd-0123456789abcdef.txt", ".x.tmp-mirror-0000abcd-0123456789abcdef",
            ".3.tmp-mirror-00001234-00000000deadbeef", ".12.tmp-mirror-00001234-00000000deadbeef", /* not PATH's rotation */
            ".0.tmp-mirror-0000abcd-0123456789abcdef", "-tmp-mirror-0000abcd-0123456789abcdef"};
        static const char *const stale[] = {".tmp-mirror-0000abcd-0123456789abcdef",
                                            ".tmp-mirror-ffffffff-fedcba9876543210",
                                            ".1.tmp-mirror-00001234-00000000deadbeef",
                                            ".2.tmp-mirror-00001234-00000000deadbeef"};
        size_t i;
        DIR *d;
        struct dirent *e;
        int made = 0;
        path_in(path, "tmp.ckpt");
        for (i = 0; i < sizeof users / sizeof *users; i++) {
            snprintf(name, sizeof name, "%s%s", path, users[i]);
            if (i == 1 || i == 4 || i == 7) put_file(name, ours, sizeof ours - 1); /* a checkpoint's start */
            else if (i == 3) put_file(name, "", 0);
            else put_file(name, "a user's file", 13);
        }
        for (i = 0; i < sizeof stale / sizeof *stale; i++) {
            snprintf(name, sizeof name, "%s%s", path, stale[i]);
            put_file(name, i ? "" : "not a checkpoint at all", i ? 0 : 23);
        }
        snprintf(name, sizeof name, "%s.tmp-mirror-00000001-0000000000000001", path);
        CHECK(mkdir(name, 0700) == 0, "a directory with a temporary file's name");
        CHECK(mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_OK, "save beside temporary files: %s",
              mirror_model_error(m));
        CHECK(all_there(path, users, sizeof users / sizeof *users, 1),
              "a save leaves every user's file beside it (.tmp.backup, .tmp.epoch1, an empty .tmp.EMPTY1, names "
              "close to a temporary file's, those of PATH.3 and PATH.12, another run's when 3 are kept)");
        CHECK(all_there(path, stale, sizeof stale / sizeof *stale, 0),
              "a save removes the temporary files a crashed save left (PATH.tmp-mirror-PID-RANDOM, and a "
              "rotation's PATH.N.tmp-mirror-..), whatever they hold");
        CHECK(access(name, F_OK) == 0 && rmdir(name) == 0, "a directory of that name is left alone");
        /* the save's own temporary file has the pattern and is gone */
        CHECK(mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_OK, "a second save: %s", mirror_model_error(m));
        if ((d = opendir(root)) != NULL) {
            while ((e = readdir(d)) != NULL)
                made += !strncmp(e->d_name, "tmp.ckpt", 8) && mirror__is_our_tmp(e->d_name + 8, 3);
            closedir(d);
        }
        CHECK(made == 0, "no temporary file is left after a save (%d)", made);
        {
            char made_name[400];
            int fd = mirror__make_tmp(path, 0600, made_name, sizeof made_name);
            CHECK(fd >= 0 && mirror__is_our_tmp(made_name + strlen(path), 3) &&
                      strlen(made_name) == strlen(path) + strlen(".tmp-mirror-") + 25,
                  "a temporary file's name has the pattern a save removes: %s", made_name);
            if (fd >= 0) close(fd), unlink(made_name);
        }
    }

    /* Another process holding the path's lock: a clear error, then a save once it lets go. */
    snprintf(lock, sizeof lock, "%s.lock", path);
    CHECK(pipe(to_child) == 0 && pipe(from_child) == 0, "pipes");
    fflush(NULL);
    if ((pid = fork()) == 0) {
        struct flock fl;
        int fd = open(lock, O_RDWR | O_CREAT, 0644);
        memset(&fl, 0, sizeof fl);
        fl.l_type = F_WRLCK, fl.l_whence = SEEK_SET;
        c = fd >= 0 && fcntl(fd, F_SETLK, &fl) == 0 ? 'L' : 'E';
        if (write(from_child[1], &c, 1) != 1 || read(to_child[0], &c, 1) != 1) _exit(1);
        _exit(0);
    }
    CHECK(pid > 0 && read(from_child[0], &c, 1) == 1 && c == 'L', "the other process holds the lock");
    rc = mirror_checkpoint_save(m, path, NULL, 3);
    CHECK(rc == MIRROR_ERR_IO && strstr(mirror_model_error(m), "another process"),
          "a save while another process saves to the path: MIRROR_ERR_IO naming it (%s)", mirror_model_error(m));
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 1, fd.batch = 12, fd.progress = MIRROR_PROGRESS_NONE;
    {
        /* fit holds its own path's lock; its hook saving elsewhere takes that
           path's lock (so never removes files under another saver) */
        hook_save h;
        mirror_model *m2 = model(s, 0, MIRROR_OPT_SGD);
        h.m = m2, h.path = path, h.rc = 1;
        path_in(other, "hooked.ckpt");
        fd.checkpoint = other, fd.on_epoch = save_in_hook, fd.user = &h;
        rc = mirror_fit(m2, &fd, NULL);
        CHECK(rc == MIRROR_OK && h.rc == MIRROR_ERR_IO,
              "fit saving to one path, its hook to a path another process holds: the hook's save is refused "
              "(fit %d, hook %d: %s)", rc, h.rc, mirror_model_error(m2));
        h.path = other, h.rc = 1;
        rc = mirror_fit(m2, &fd, NULL);
        CHECK(rc == MIRROR_OK && h.rc == MIRROR_OK, "the hook saving to fit's own path: saved (fit %d, hook %d)",
              rc, h.rc);
        mirror_model_destroy(m2);
        fd.on_epoch = NULL, fd.user = NULL;
    }
    fd.checkpoint = path;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_IO && mirror_optimizer_steps(m) == 0,
          "fit whose checkpoint path another process holds: fails before its first step (%s)", mirror_model_error(m));
    if (write(to_child[1], "x", 1) != 1) c = 0;
    waitpid(pid, NULL, 0);
    close(to_child[0]), close(to_child[1]), close(from_child[0]), close(from_child[1]);
    CHECK(mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_OK, "once it exits the save goes ahead: %s",
          mirror_model_error(m));

    /* fit: a path that cannot be written fails at once, not after the
       training; a directory that is missing is made, as mkdir -p makes it. */
    path_in(path, "elsewhere/run.ckpt");
    fd.checkpoint = path;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_ARGUMENT && mirror_optimizer_steps(m) == 0 &&
              strstr(mirror_model_error(m), "elsewhere is a file, not a directory"),
          "fit with a checkpoint below a file fails before its first step, naming it (%s)", mirror_model_error(m));
    path_in(path, "fifo.ckpt");
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_ARGUMENT && mirror_optimizer_steps(m) == 0,
          "fit with a FIFO as its checkpoint fails before its first step (%s)", mirror_model_error(m));
    path_in(path, "fit.ckpt");
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && mirror_optimizer_steps(m) == 5 && access(path, F_OK) == 0,
          "fit with a good path trains and saves: %s", mirror_model_error(m));
    path_in(path, "no-such-dir/below/run.ckpt");
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK && mirror_optimizer_steps(m) == 10 && access(path, F_OK) == 0,
          "fit with a checkpoint in missing directories: made, trained and saved (%s)", mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* A model of every layer kind, AdamW with a cosine schedule, in fp32 and
   in fp16: rebuilt from its checkpoint alone on another replica count,
   it predicts bitwise alike and goes on at the same step and rate; on the
   same replica count its next steps are bitwise the original's. Crafted
   descriptions are refused with a message, leaking nothing. */
static mirror_model *every_layer(mirror_strategy *s, mirror_precision precision)
{
    mirror_model_desc d = model_desc(s, 1, 8, 8, 12, 77);
    d.precision = precision;
    d.optimizer = optimizer_of(MIRROR_OPT_ADAMW, 0.004f);
    d.optimizer.schedule = MIRROR_LR_COSINE, d.optimizer.warmup = 2, d.optimizer.total_steps = 30;
    d.optimizer.min_lr = 0.0001f;
    return build_model(&d, NULL,
                       "conv 4 3 1 1, gelu, maxpool 2 1, conv 4 3 1 0, tanh, avgpool 2 2, global_avgpool, flatten, "
                       "dropout 0.25, dense 8, sigmoid, dense 10, relu");
}

static void test_from_checkpoint(mirror_precision precision)
{
    const char *name = mirror_precision_name(precision);
    char path[256];
    mirror_strategy *s2 = new_strategy(NULL, 2), *s3 = new_strategy(NULL, 3);
    mirror_model *a = every_layer(s2, precision), *b = NULL, *c = NULL;
    mirror_checkpoint_info at;
    mirror_error err = {0, ""};
    float ya[50 * 10], yb[50 * 10], *pa = NULL, *pc = NULL;
    size_t k, n;
    if (!a) {
        CHECK(0, "%s: the model of every layer", name);
        goto out;
    }
    for (k = 0; k < 6; k++) step(a, k);
    path_in(path, "every.ckpt");
    CHECK(mirror_checkpoint_save(a, path, NULL, 1) == MIRROR_OK, "%s: save: %s", name, mirror_model_error(a));
    CHECK(mirror_model_from_checkpoint(s3, path, 0, &b, &at, &err) == MIRROR_OK && b, "%s: rebuilt on 3 replicas: %s",
          name, err.message);
    if (!b) goto out;
    n = mirror_num_parameters(a);
    CHECK(mirror_num_parameters(b) == n && mirror_model_query_desc(b).max_batch == 256 &&
              mirror_model_query_desc(b).precision == precision && at.step == 6 &&
              mirror_optimizer_steps(b) == mirror_optimizer_steps(a) && mirror_current_lr(b) == mirror_current_lr(a),
          "%s: the same parameters count, precision, step (%llu) and next rate (%g, %g)", name,
          (unsigned long long)at.step, (double)mirror_current_lr(b), (double)mirror_current_lr(a));
    CHECK(mirror_predict(a, data.x, 50, ya) == MIRROR_OK && mirror_predict(b, data.x, 50, yb) == MIRROR_OK &&
              !memcmp(ya, yb, sizeof ya),
          "%s: predictions bitwise alike", name);
    CHECK(mirror_model_from_checkpoint(s2, path, 12, &c, NULL, &err) == MIRROR_OK, "%s: rebuilt on 2 replicas", name);
    for (k = 6; c && k < 10; k++) step(a, k), step(c, k);
    pa = params(a, 0);
    pc = c ? params(c, 1) : NULL;
    CHECK(pc && !memcmp(pa, pc, n * sizeof(float)), "%s: 4 more steps on both: bitwise the same parameters", name);
out:
    free(pa), free(pc);
    mirror_model_destroy(a), mirror_model_destroy(b), mirror_model_destroy(c);
    mirror_strategy_destroy(s2), mirror_strategy_destroy(s3);
}

/* mirror_checkpoint_describe: the description the header stores, read
   without building anything; a buffer too small is refused, not cut; a
   header changed after the save (its checksum) and a file that is not a
   checkpoint are refused. */
static void test_checkpoint_describe(void)
{
    static const char want_head[] = "input(1,8,8);conv2d(4,3,1,1);gelu;maxpool2d(2,1);conv2d(4,3,1,0);tanh;";
    static const char want_tail[] = ";dropout(0.25);dense(8);sigmoid;dense(10);relu;loss(softmax_ce)";
    char path[256], other[256], desc[4096], small[16] = "unchanged";
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = every_layer(s, MIRROR_PRECISION_FP32);
    mirror_error err = {0, ""};
    unsigned char *file;
    char *at;
    size_t n, len;
    path_in(path, "described.ckpt");
    CHECK(m && mirror_checkpoint_save(m, path, NULL, 1) == MIRROR_OK, "describe: a checkpoint saved");
    CHECK(mirror_checkpoint_describe(path, desc, sizeof desc, &err) == MIRROR_OK, "describe: %s", err.message);
    len = strlen(desc);
    CHECK(!strncmp(desc, want_head, strlen(want_head)) && len > strlen(want_tail) &&
              !strcmp(desc + len - strlen(want_tail), want_tail),
          "describe: the model's layers, input to loss: %s", desc);
    CHECK(mirror_checkpoint_describe(path, small, sizeof small, &err) == MIRROR_ERR_ARGUMENT && small[0] == '\0' &&
              strstr(err.message, "buf holds 16"),
          "describe: a buffer of 16 bytes refused, nothing cut into it: %s", err.message);
    file = slurp(path, &n);
    at = strstr((char *)file + 8, "gelu");
    CHECK(at != NULL, "describe: the header names gelu");
    if (at) memcpy(at, "relu", 4); /* the same length: only the checksum can tell */
    path_in(other, "described_changed.ckpt");
    put_file(other, (const char *)file, n);
    CHECK(mirror_checkpoint_describe(other, desc, sizeof desc, &err) == MIRROR_ERR_CHECKSUM &&
              strstr(err.message, "checksum"),
          "describe: a header changed after the save refused by its checksum: %s", err.message);
    put_file(other, "not a checkpoint at all", 23);
    CHECK(mirror_checkpoint_describe(other, desc, sizeof desc, &err) == MIRROR_ERR_FORMAT,
          "describe: a file that is no checkpoint refused: %s", err.message);
    CHECK(mirror_checkpoint_describe(NULL, desc, sizeof desc, &err) == MIRROR_ERR_ARGUMENT &&
              mirror_checkpoint_describe(path, NULL, 0, &err) == MIRROR_ERR_ARGUMENT,
          "describe: NULL arguments refused");
    free(file);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* A checkpoint's header that describes a large model in a small file, as
   a crafted file can: refused before the model is built, with nothing of
   the model's size allocated (the largest allocation under 1 MiB, where
   the parameters alone would take 16 MiB to 1 GiB a copy). The header's
   checksum comes first, then the file's size against the tensors the
   description implies; a description whose parameters the file holds but
   whose activations would not fit is refused by the build's memory check,
   which comes before the build allocates. */
static void test_from_checkpoint_small_file(void)
{
    static const struct {
        const char *model, *tail;
        int crc;
        size_t data;
        const char *says;
    } cases[] = {
        /* the 156-byte file of a header and nothing else: 268 million parameters */
        {"input(1,1,4096);flatten;dense(65536);relu;dense(10);loss(softmax_ce)", "", 0, 0, "no header checksum"},
        {"input(1,1,1024);flatten;dense(4096);relu;dense(10);loss(softmax_ce)", ",\"crc32.header\":\"00000000\"", 0, 0,
         "the header's checksum is 00000000"},
        {"input(1,1,1024);flatten;dense(4096);relu;dense(10);loss(softmax_ce)", ",\"crc32.header\":\"00000000\"", 1, 0,
         "0 bytes of tensors where the model its header describes needs 50872440 (4239370 parameters"},
        {"input(1,1,1024);flatten;dense(4096);relu;dense(10);loss(softmax_ce)", ",\"crc32.header\":\"00000000\"", 1,
         4096, "4096 bytes of tensors where"},
        /* 170 parameters and 256 x 2^28 activations: the file is right, the memory check refuses */
        {"input(1,4096,4096);conv2d(16,1,1,0);global_avgpool;flatten;dense(10);loss(softmax_ce)",
         ",\"crc32.header\":\"00000000\"", 1, 4 * 3 * 202, "of host memory"},
    };
    char path[256], text[512];
    mirror_strategy_desc sd;
    mirror_strategy *s = NULL;
    mirror_model *m;
    mirror_error err;
    size_t i, k, n;
    unsigned char head[8] = {2, 0, 0, 0, 0, 0, 0, 0}, *file;
    double t0;
    long live;
    memset(&sd, 0, sizeof sd);
    sd.devices = "cpu:2", sd.host_memory = "1G"; /* the memory check's answer, whatever the machine */
    CHECK(mirror_strategy_create(&sd, &s, NULL) == MIRROR_OK, "a strategy of 2 replicas");
    path_in(path, "small.ckpt");
    for (i = 0; s && i < sizeof cases / sizeof *cases; i++) {
        unsigned char *bare = (unsigned char *)calloc(1, 10 + cases[i].data);
        n = (size_t)snprintf(text, sizeof text,
                             "{\"__metadata__\":{\"format\":\"mirror\",\"version\":\"1\",\"model\":\"%s\","
                             "\"optimizer\":\"adam\"%s}}",
                             cases[i].model, cases[i].tail);
        memcpy(bare, head, 8), memcpy(bare + 8, "{}", 2); /* a 2-byte header, then the data */
        if (cases[i].crc) {
            file = reheader(bare, 10 + cases[i].data, text, &n);
        } else { /* the header as it is */
            file = (unsigned char *)calloc(1, 8 + n + cases[i].data);
            for (k = 0; k < 8; k++) file[k] = (unsigned char)((uint64_t)n >> (8 * k));
            memcpy(file + 8, text, n);
            n += 8 + cases[i].data;
        }
        write_file(path, file, n);
        memset(&err, 0, sizeof err);
        live = live_allocs, largest_alloc = 0, t0 = mirror__now();
        m = NULL;
        CHECK(mirror_model_from_checkpoint(s, path, 0, &m, NULL, &err) < 0 && !m &&
                  strstr(err.message, cases[i].says) && live_allocs == live && largest_alloc < ((size_t)1 << 20),
              "a file of %zu bytes describing %s: refused in %.3f s, the largest allocation %zu bytes: %s", n,
              cases[i].model, mirror__now() - t0, largest_alloc, err.message);
        mirror_model_destroy(m);
        free(bare), free(file);
    }
    mirror_strategy_destroy(s);
}

static void test_from_checkpoint_refused(void)
{
    static const struct {
        const char *from, *to, *says;
    } cases[] = {
        {"input(1,8,8)", "input(0,8,8)", "input out of range"},
        {"input(1,8,8)", "input(1,8)", "no model description"},
        {";dense(10)", ";dense(10,3)", "unknown layer \"dense\" with 2"},
        {";dense(10)", ";lstm(10)", "unknown layer \"lstm\""},
        {";dense(10)", ";dense(1e99)", "out of range"},
        {";dense(10)", ";dense(-1)", "malformed"},
        {";loss(softmax_ce)", "", "no loss"},
        {";loss(softmax_ce)", ";loss(softmax_ce);relu", "layers after the loss"},
        {";conv2d(4,3,1,1)", ";conv2d(4,3,0,1)", "stride"},
        {"\"optimizer\":\"adamw\"", "\"optimizer\":\"lamb\"", "unknown optimizer"},
    };
    char path[256];
    mirror_strategy *s = new_strategy(NULL, 1);
    mirror_model *a = every_layer(s, MIRROR_PRECISION_FP32), *b;
    mirror_error err;
    unsigned char *good, *bad;
    size_t n, m, i;
    long live;
    path_in(path, "every.ckpt");
    if (!a || mirror_checkpoint_save(a, path, NULL, 1)) {
        CHECK(0, "a checkpoint to edit");
        goto out;
    }
    good = slurp(path, &n);
    for (i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *text = edit(good, cases[i].from, cases[i].to);
        int rc;
        bad = reheader(good, n, text, &m);
        path_in(path, "crafted.ckpt");
        write_file(path, bad, m);
        memset(&err, 0, sizeof err);
        live = live_allocs;
        b = (mirror_model *)&err; /* not NULL before the call */
        rc = mirror_model_from_checkpoint(s, path, 0, &b, NULL, &err);
        CHECK(rc < 0 && !b && strstr(err.message, cases[i].says) && live_allocs == live,
              "\"%s\" for \"%s\": refused (%d), saying \"%s\": %s", cases[i].to, cases[i].from, rc, cases[i].says,
              err.message);
        free(text), free(bad);
    }
    free(good);
    CHECK(mirror_model_from_checkpoint(s, "no/such.ckpt", 0, &b, NULL, &err) == MIRROR_ERR_IO && !b,
          "a missing file: %s", err.message);
    CHECK(mirror_model_from_checkpoint(s, path, 0, NULL, NULL, &err) == MIRROR_ERR_ARGUMENT, "out NULL");
out:
    mirror_model_destroy(a);
    mirror_strategy_destroy(s);
}

/* ---- weights from another program (mirror_load_weights) ---- */

/* One tensor of a safetensors file the tests write: values as floats,
   stored in dtype (F32, F64, F16, BF16, I32 or I64). */
typedef struct weight {
    char name[64];
    const char *dtype;
    size_t shape[4], rank, count;
    const float *v;
} weight;

static size_t dtype_bytes(const char *dtype)
{
    return !strcmp(dtype, "F64") || !strcmp(dtype, "I64") ? 8 : !strcmp(dtype, "F32") || !strcmp(dtype, "I32") ? 4 : 2;
}

/* The file of t[0..nt) as safetensors.torch.save_file lays it out (no
   metadata, the header padded with spaces); *size gets its length. */
static unsigned char *safetensors_of(const weight *t, size_t nt, size_t *size)
{
    char *header = (char *)malloc(64 + nt * 256);
    size_t len, data = 0, i, j, at;
    unsigned char *out;
    len = (size_t)sprintf(header, "{");
    for (i = 0; i < nt; i++) {
        len += (size_t)sprintf(header + len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t[i].name, t[i].dtype);
        for (j = 0; j < t[i].rank; j++) len += (size_t)sprintf(header + len, j ? ",%zu" : "%zu", t[i].shape[j]);
        len += (size_t)sprintf(header + len, "],\"data_offsets\":[%zu,%zu]}", data, data + t[i].count * dtype_bytes(t[i].dtype));
        data += t[i].count * dtype_bytes(t[i].dtype);
    }
    len += (size_t)sprintf(header + len, "}");
    while (len % 8) header[len++] = ' ';
    out = (unsigned char *)malloc(8 + len + data + 1);
    for (i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)len >> (8 * i));
    memcpy(out + 8, header, len);
    for (i = 0, at = 8 + len; i < nt; i++)
        for (j = 0; j < t[i].count; j++, at += dtype_bytes(t[i].dtype)) {
            float f = t[i].v ? t[i].v[j] : 0.0f;
            double d = f;
            int32_t i32 = (int32_t)f;
            int64_t i64 = (int64_t)f;
            uint16_t h = t[i].dtype[0] == 'B' ? mirror_hd_bf16_from_f32(f) : mirror_hd_f16_from_f32(f);
            const void *src = t[i].dtype[0] == 'I' ? (t[i].dtype[1] == '3' ? (const void *)&i32 : (const void *)&i64)
                              : t[i].dtype[1] == '6' ? (const void *)&d
                              : t[i].dtype[1] == '3' ? (const void *)&f
                                                     : (const void *)&h;
            memcpy(out + at, src, dtype_bytes(t[i].dtype));
        }
    free(header);
    *size = at;
    return out;
}

/* The tensors of the checkpoint file ckpt (n bytes) into t (at most 64),
   their values pointing into it; returns how many. */
static size_t weights_of(const unsigned char *ckpt, size_t n, weight *t)
{
    mirror__header h;
    size_t hlen = 0, i, nt = 0;
    for (i = 0; i < 8; i++) hlen |= (size_t)ckpt[i] << (8 * i);
    if (n > 8 + hlen && mirror__parse_header((const char *)ckpt + 8, hlen, &h))
        for (i = 0; i < h.nt && nt < 64; i++, nt++) {
            snprintf(t[nt].name, sizeof t[nt].name, "%s", h.t[i].name);
            t[nt].dtype = "F32";
            memcpy(t[nt].shape, h.t[i].shape, sizeof t[nt].shape);
            t[nt].rank = h.t[i].rank, t[nt].count = h.t[i].count;
            t[nt].v = (const float *)(ckpt + 8 + hlen + h.t[i].begin); /* 8-byte aligned: 8 + hlen is a multiple of 8 */
        }
    mirror__header_free(&h);
    return nt;
}

/* The index of tensor name among t[0..nt); nt when it is not there. */
static size_t weight_at(const weight *t, size_t nt, const char *name)
{
    size_t j;
    for (j = 0; j < nt && strcmp(t[j].name, name); j++) {}
    return j;
}

/* A tensor no model of these tests has: head.weight, 3 floats of values. */
static void head_weight(weight *w, const float *values)
{
    snprintf(w->name, sizeof w->name, "head.weight"), w->dtype = "F32", w->rank = 1;
    w->shape[0] = w->count = 3, w->v = values;
}

/* A model with every kind of tensor: convolutions, BatchNorm's four, a
   residual block's projection, a dense layer; seed picks its start. */
static mirror_model *bn_model(mirror_strategy *s, uint64_t seed)
{
    mirror_model_desc d = model_desc(s, 1, 8, 8, 12, seed);
    d.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.01f);
    return build_model(&d, NULL,
                       "conv 4 3 1 1, batchnorm, relu, residual, conv 6 3 2 1, batchnorm, relu, conv 6 3 1 1, "
                       "residual_end, relu, flatten, dense 10");
}

/* Loading file (n bytes) into victim must fail with want and a message
   holding each of says (NULL-terminated), and change nothing. */
static int refused(const unsigned char *file, size_t n, int want, const char *const *says)
{
    char path[256];
    float *now;
    long live = live_allocs;
    mirror_error err = {0, ""};
    int rc, ok;
    path_in(path, "refused.safetensors");
    write_file(path, file, n);
    rc = mirror_load_weights(victim, path, &err);
    now = params(victim, 1);
    ok = rc < 0 && (!want || rc == want) && err.code == rc && !strcmp(err.message, mirror_model_error(victim)) &&
         !memcmp(now, victim_before, victim_n * 4) && (long)mirror_optimizer_steps(victim) == victim_steps &&
         live_allocs == live;
    for (; says && *says; says++) ok &= strstr(err.message, *says) != NULL;
    if (!ok)
        fprintf(stderr, "refused: rc %d (%s), want %d; unchanged %d; leaked %ld\n", rc, err.message, want,
                !memcmp(now, victim_before, victim_n * 4), live_allocs - live);
    free(now);
    return ok;
}

/* file (n bytes) with the first `from` of its header replaced by `to`. */
static unsigned char *rewritten(const unsigned char *file, size_t n, const char *from, const char *to, size_t *out_n)
{
    char *text = edit(file, from, to);
    unsigned char *out = reheader(file, n, text, out_n);
    free(text);
    return out;
}

/* Valid safetensors files that carry what mirror_load_weights does not use
   (JSON escapes, long values, many keys, long names, many tensors passed
   over) load; the limits this reader has are named when hit. t: the F32
   tensors of a checkpoint of src's model, which victim has. */
static void test_weights_json(const weight *t, size_t nt, mirror_model *src)
{
    static const struct {
        const char *from, *to, *what;
    } fine[] = {
        {"{",
         "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"two\\nlines, \\\"quoted\\\", a tab\\t, \\/ \\\\ \\b\\f\\r "
         "\\u00e9 \\u20ac \\ud83d\\ude00\"},",
         "a value with every JSON escape"},
        {"{", "{\"__metadata__\":{\"k\\u00e9y\\n\":\"v\"},", "a key with escapes"},
        {"\"layers.0.weight\"", "\"layers.0.w\\u0065ight\"", "a tensor name spelt with an escape"},
        {"{", "{\"__metadata__\":{},", "an empty __metadata__"},
        {"{", "{ \"__metadata__\" : { \"a\" : \"b\" } ,\n\t", "whitespace around every token"},
    };
    static const struct {
        const char *from, *to, *says;
    } limits[] = {
        {"{", "{\"__metadata__\":{\"a\":\"x\\u0000y\"},", "a \\u0000 in a string, which this library cannot hold"},
        {"{", "{\"__metadata__\":{\"a\":1},", "a metadata value that is not a string"},
        {"{", "{\"__metadata__\":{\"a\":\"\\ud83d\"},", "a high surrogate not followed by a low one"},
        {"{", "{\"__metadata__\":{\"a\":\"\\ude00\"},", "a lone low surrogate"},
        {"{", "{\"__metadata__\":{\"a\":\"\\x\"},", "an unknown escape"},
        {"{", "{\"__metadata__\":{\"a\":\"b\",\"a\":\"c\"},", "a metadata key given twice: \"a\""},
        {"\"layers.0.bias\"", "\"layers.0.w\\u0065ight\"", "a tensor given twice: \"layers.0.weight\""},
        {"\"shape\":[4,1,3,3]", "\"shape\":[1099511627776,1099511627776]", "more than 2^60 elements"},
        {"\"shape\":[4,1,3,3]", "\"shape\":[4,1,3,3,1]", "[4, 1, 3, 3, ...] (rank 5) in the file"},
        {"\"dtype\":\"F32\",", "\"dtype\":\"F32\",\"extra\":[1],", "an unknown field"},
    };
    char path[256];
    mirror_error err = {0, ""};
    mirror__text to = {NULL, 0, 0, 0};
    unsigned char *plain, *file;
    float *want = params(src, 0), *now;
    size_t n, fn, i, k;
    plain = safetensors_of(t, nt, &n);
    path_in(path, "json.safetensors");
    for (i = 0; i < sizeof fine / sizeof *fine + 5; i++) {
        const char *what = i < sizeof fine / sizeof *fine ? fine[i].what : NULL, *from = "{";
        to.len = 0;
        if (what) {
            from = fine[i].from, mirror__printf(&to, "%s", fine[i].to);
        } else if (i == sizeof fine / sizeof *fine) { /* a value of 10000 bytes */
            what = "a value of 10000 bytes";
            mirror__printf(&to, "{\"__metadata__\":{\"long\":\"");
            for (k = 0; k < 1000; k++) mirror__printf(&to, "%s", k % 2 ? "0123456789" : "\\\\23456789");
            mirror__printf(&to, "\"},");
        } else if (i == sizeof fine / sizeof *fine + 1) {
            what = "1000 metadata keys";
            mirror__printf(&to, "{\"__metadata__\":{");
            for (k = 0; k < 1000; k++) mirror__printf(&to, "%s\"key%zu\":\"value %zu\"", k ? "," : "", k, k);
            mirror__printf(&to, "},");
        } else if (i == sizeof fine / sizeof *fine + 2) {
            what = "a name of 200 characters passed over (a batch count)";
            mirror__printf(&to, "{\"");
            for (k = 0; k < 180; k++) mirror__printf(&to, "%c", 'a' + (int)(k % 26));
            mirror__printf(&to, ".num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,0]},");
        } else if (i == sizeof fine / sizeof *fine + 3) {
            what = "400 tensors passed over (optimizer state)";
            mirror__printf(&to, "{");
            for (k = 0; k < 400; k++)
                mirror__printf(&to, "\"optimizer.extra.%zu\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},",
                               k);
        } else {
            what = "a key of 5000 characters";
            mirror__printf(&to, "{\"__metadata__\":{\"");
            for (k = 0; k < 5000; k++) mirror__printf(&to, "k");
            mirror__printf(&to, "\":\"v\"},");
        }
        file = rewritten(plain, n, from, to.p, &fn);
        write_file(path, file, fn);
        now = NULL;
        CHECK(!to.failed && mirror_load_weights(victim, path, &err) == MIRROR_OK &&
                  !memcmp(now = params(victim, 1), want, victim_n * sizeof(float)),
              "load weights: %s: loads (%s)", what, err.message);
        free(now), free(file);
    }
    { /* each allocation of a load of 1000 keys and 400 tensors failing in turn: an error and nothing leaked */
        long live;
        int rc = MIRROR_ERR_NO_MEMORY, clean = 1;
        to.len = 0;
        mirror__printf(&to, "{\"__metadata__\":{");
        for (k = 0; k < 1000; k++) mirror__printf(&to, "%s\"key%zu\":\"value %zu\"", k ? "," : "", k, k);
        mirror__printf(&to, "},");
        for (k = 0; k < 400; k++)
            mirror__printf(&to, "\"optimizer.extra.%zu\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},", k);
        file = rewritten(plain, n, "{", to.p, &fn);
        write_file(path, file, fn);
        for (k = 0; k < 1000 && rc == MIRROR_ERR_NO_MEMORY; k++) {
            live = live_allocs, allocs_before_failure = (long)k;
            rc = mirror_load_weights(victim, path, &err);
            allocs_before_failure = -1;
            clean &= live_allocs == live && (rc == MIRROR_OK || rc == MIRROR_ERR_NO_MEMORY);
        }
        CHECK(rc == MIRROR_OK && clean, "load weights: each of its %zu allocations failing in turn: out of memory, "
              "nothing leaked, then it loads (%s)", k - 1, err.message);
        free(file);
    }
    free(victim_before), victim_before = params(victim, 1);
    victim_steps = (long)mirror_optimizer_steps(victim);
    for (i = 0; i < sizeof limits / sizeof *limits; i++) {
        const char *says[2];
        says[0] = limits[i].says, says[1] = NULL;
        file = rewritten(plain, n, limits[i].from, limits[i].to, &fn);
        CHECK(refused(file, fn, 0, says), "load weights: %s: refused, saying \"%s\"", limits[i].to, limits[i].says);
        free(file);
    }
    { /* a header longer than this reader reads: 64 MiB and 8 bytes of spaces, then the tensors */
        static const char *const says[] = {"this library reads headers of up to 64 MiB", NULL};
        size_t len = ((size_t)1 << 26) + 8, hlen = 0;
        for (k = 0; k < 8; k++) hlen |= (size_t)plain[k] << (8 * k);
        file = (unsigned char *)malloc(8 + len + n);
        for (k = 0; k < 8; k++) file[k] = (unsigned char)((uint64_t)len >> (8 * k));
        memset(file + 8, ' ', len);
        memcpy(file + 8, plain + 8, hlen);
        memcpy(file + 8 + len, plain + 8 + hlen, n - 8 - hlen);
        CHECK(refused(file, 8 + len + n - 8 - hlen, MIRROR_ERR_UNSUPPORTED, says),
              "load weights: a header over 64 MiB: refused, naming the limit");
        free(file);
    }
    free(to.p), free(plain), free(want);
}

static void test_load_weights(void)
{
    char path[256], wpath[256];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *src = bn_model(s, 5), *fresh = bn_model(s, 9);
    weight t[64], u[66];
    unsigned char *ckpt, *file;
    size_t n, nt, fn, i, j, cut, hlen = 0;
    float ys[50 * 10], yv[50 * 10], *ps, *pv, nan = mirror_hd_float(0x7fc00000u), big = 3e38f;
    mirror_error err = {0, ""};
    int all;
    static const char *const formats[] = {"F32", "F64", "F16", "BF16"};
    victim = bn_model(s, 7);
    victim_before = NULL; /* test_hostile's, freed */
    if (!src || !fresh || !victim) {
        CHECK(0, "load weights: the models");
        return;
    }
    for (i = 0; i < 5; i++) step(src, i);
    for (i = 0; i < 3; i++) step(victim, i);
    path_in(path, "source.ckpt");
    CHECK(mirror_checkpoint_save(src, path, NULL, 1) == MIRROR_OK, "load weights: save: %s", mirror_model_error(src));
    ckpt = slurp(path, &n);
    nt = weights_of(ckpt, n, t);
    CHECK(nt == 20, "load weights: the checkpoint's 18 tensors and Adam's 2 (%zu)", nt);

    /* A checkpoint itself: the parameters, the running statistics (the
       predictions) and a fresh optimizer, as a model loaded without training. */
    CHECK(mirror_load_weights(victim, path, &err) == MIRROR_OK, "load weights: a checkpoint: %s", err.message);
    CHECK(mirror_load_weights(fresh, path, &err) == MIRROR_OK, "load weights: into a fresh model: %s", err.message);
    ps = params(src, 0), pv = params(victim, 1);
    victim_n = mirror_num_parameters(victim);
    CHECK(!memcmp(ps, pv, victim_n * sizeof(float)), "load weights: the parameters bitwise, on every replica");
    CHECK(mirror_predict(src, data.x, 50, ys) == MIRROR_OK && mirror_predict(victim, data.x, 50, yv) == MIRROR_OK &&
              !memcmp(ys, yv, sizeof ys),
          "load weights: BatchNorm's running statistics (the predictions bitwise)");
    CHECK(mirror_optimizer_steps(victim) == 0, "load weights: the step count starts afresh");
    step(victim, 0), step(fresh, 0);
    free(pv), pv = params(victim, 0);
    free(ps), ps = params(fresh, 1);
    CHECK(!memcmp(ps, pv, victim_n * sizeof(float)),
          "load weights: the optimizer state starts afresh (a step as a fresh model's after the same load)");

    /* As another program writes them: each float format, nn.Sequential's
       names, PyTorch's batch counts and a checkpoint's optimizer passed over. */
    for (i = 0; i < sizeof formats / sizeof *formats; i++) {
        float *want = (float *)malloc(victim_n * sizeof(float)), *w = want;
        memcpy(u, t, nt * sizeof *t);
        for (j = 0; j < nt; j++) {
            if (strncmp(u[j].name, "optimizer.", 10)) u[j].dtype = formats[i];
            if (i % 2 && !strncmp(u[j].name, "layers.", 7)) memmove(u[j].name, u[j].name + 7, strlen(u[j].name) - 6);
        }
        u[nt] = t[0], u[nt].dtype = "I64", u[nt].rank = 0, u[nt].count = 1, u[nt].v = &big;
        snprintf(u[nt].name, sizeof u[nt].name, "%s1.num_batches_tracked", i % 2 ? "" : "layers.");
        file = safetensors_of(u, nt + 1, &fn);
        path_in(wpath, "converted.safetensors");
        write_file(wpath, file, fn);
        CHECK(mirror_load_weights(victim, wpath, &err) == MIRROR_OK, "load weights: %s%s: %s", formats[i],
              i % 2 ? ", nn.Sequential's names" : "", err.message);
        for (j = 0; j < nt; j++) /* parameters in layer order: weight, bias */
            if (!strstr(t[j].name, "running_") && strncmp(t[j].name, "optimizer.", 10))
                for (cut = 0; cut < t[j].count; cut++, w++)
                    *w = i < 2    ? t[j].v[cut]
                         : i == 2 ? mirror_hd_f32_from_f16(mirror_hd_f16_from_f32(t[j].v[cut]))
                                  : mirror_hd_f32_from_bf16(mirror_hd_bf16_from_f32(t[j].v[cut]));
        free(pv), pv = params(victim, 1);
        CHECK(w - want == (ptrdiff_t)victim_n && !memcmp(want, pv, victim_n * sizeof(float)),
              "load weights: %s: each value converted exactly as the format holds it", formats[i]);
        free(want), free(file);
    }

    /* Refused, naming the tensor, the model unchanged. */
    free(victim_before), victim_before = params(victim, 1);
    victim_steps = (long)mirror_optimizer_steps(victim);
    {
        static const char *const shape[] = {"layers.0.weight", "[4, 9]", "[4, 1, 3, 3]", NULL};
        static const char *const missing[] = {"1 of this model's tensors is missing (layers.<i>.<what> or <i>.<what>): "
                                              "11.bias", NULL};
        static const char *const extra[] = {"1 of the file's tensors has a name this model does not know: head.weight. "
                                            "mirror reads its own names", NULL};
        static const char *const dtype[] = {"layers.1.running_var: dtype I32", NULL};
        static const char *const nans[] = {"layers.11.weight: element 3 is NaN", NULL};
        static const char *const inf[] = {"layers.4.weight: element 0 is infinite as a float", NULL};
        static const char *const two[] = {"layers.0.weight", "head.weight", NULL};
        float bad[1024];
        memcpy(u, t, nt * sizeof *t);
        u[0].shape[1] = 9, u[0].rank = 2;
        file = safetensors_of(u, nt, &fn);
        CHECK(refused(file, fn, MIRROR_ERR_SHAPE, shape), "load weights: another shape: named, with both shapes");
        free(file);
        memcpy(u, t, nt * sizeof *t);
        head_weight(&u[nt], t[0].v);
        u[0].shape[1] = 9, u[0].rank = 2;
        file = safetensors_of(u, nt + 1, &fn);
        CHECK(refused(file, fn, MIRROR_ERR_SHAPE, two), "load weights: two problems: both named");
        free(file);
        j = weight_at(t, nt, "layers.11.bias");
        memcpy(u, t, nt * sizeof *t);
        u[j] = u[nt - 1];
        file = safetensors_of(u, nt - 1, &fn);
        CHECK(j < nt && refused(file, fn, MIRROR_ERR_SHAPE, missing), "load weights: a tensor missing: named");
        free(file);
        memcpy(u, t, nt * sizeof *t);
        head_weight(&u[nt], t[0].v);
        file = safetensors_of(u, nt + 1, &fn);
        CHECK(refused(file, fn, MIRROR_ERR_SHAPE, extra), "load weights: a tensor with no place: named");
        free(file);
        j = weight_at(t, nt, "layers.1.running_var");
        memcpy(u, t, nt * sizeof *t);
        if (j < nt) u[j].dtype = "I32";
        file = safetensors_of(u, nt, &fn);
        CHECK(refused(file, fn, MIRROR_ERR_SHAPE, dtype), "load weights: an integer dtype: named");
        free(file);
        j = weight_at(t, nt, "layers.11.weight");
        memcpy(u, t, nt * sizeof *t);
        if (j < nt && u[j].count <= 1024) memcpy(bad, u[j].v, u[j].count * sizeof(float)), bad[3] = nan, u[j].v = bad;
        file = safetensors_of(u, nt, &fn);
        CHECK(refused(file, fn, MIRROR_ERR_SHAPE, nans), "load weights: a NaN: named, with its place");
        free(file);
        j = weight_at(t, nt, "layers.4.weight");
        memcpy(u, t, nt * sizeof *t);
        if (j < nt) u[j].dtype = "F64";
        file = safetensors_of(u, nt, &fn);
        for (i = 0, hlen = 0; i < 8; i++) hlen |= (size_t)file[i] << (8 * i);
        { /* the first F64 element beyond a float's range */
            double huge = 1e300;
            char *at = strstr((char *)file + 8, "\"layers.4.weight\"");
            size_t begin = at ? strtoul(strstr(at, "data_offsets\":[") + 15, NULL, 10) : 0;
            memcpy(file + 8 + hlen + begin, &huge, 8);
        }
        CHECK(refused(file, fn, MIRROR_ERR_SHAPE, inf), "load weights: an F64 beyond a float's range: named");
        free(file);
        memcpy(u, t, nt * sizeof *t);
        file = safetensors_of(u, nt, &fn);
        for (i = 0, hlen = 0; i < 8; i++) hlen |= (size_t)file[i] << (8 * i);
        for (cut = 0, all = 1; cut < fn; cut += cut < 8 + hlen + 16 ? 1 : 53) all &= refused(file, cut, 0, NULL);
        CHECK(all, "load weights: cut short at every byte of the header and every 53rd after: refused");
        free(file);
        path_in(wpath, "no-such.safetensors");
        CHECK(mirror_load_weights(victim, wpath, &err) == MIRROR_ERR_IO && err.message[0],
              "load weights: a missing file: MIRROR_ERR_IO");
        CHECK(mirror_load_weights(victim, NULL, NULL) == MIRROR_ERR_ARGUMENT, "load weights: no path");
        CHECK(mirror_load_weights(NULL, wpath, &err) == MIRROR_ERR_ARGUMENT, "load weights: no model");
    }

    /* A checkpoint another program rewrote (its header anew): the load says
       so in words and where its weights go; they load. */
    {
        char *text = edit(ckpt, "\"format\":\"mirror\"", "\"format\": \"mirror\"");
        size_t m2;
        unsigned char *rewritten;
        char *crc;
        crc = strstr(text, "\"crc32.header\":\"");
        rewritten = reheader(ckpt, n, text, &m2); /* a fresh checksum: then one digit changed */
        if (crc) rewritten[8 + (size_t)(crc - text) + 16] ^= 1;
        path_in(wpath, "rewritten.ckpt");
        write_file(wpath, rewritten, m2);
        CHECK(mirror_checkpoint_load(victim, wpath, 0, NULL) == MIRROR_ERR_CHECKSUM &&
                  strstr(mirror_model_error(victim), "written or changed by another program") &&
                  strstr(mirror_model_error(victim), "mirror_load_weights"),
              "a rewritten checkpoint: says so in words (%s)", mirror_model_error(victim));
        CHECK(mirror_load_weights(victim, wpath, &err) == MIRROR_OK, "a rewritten checkpoint: its weights load: %s",
              err.message);
        free(text), free(rewritten);
    }
    { /* a model without BatchNorm: no running statistics at all */
        mirror_model *a = model(s, 1, MIRROR_OPT_ADAM), *b = model(s, 1, MIRROR_OPT_ADAM);
        float *pa, *pb;
        step(a, 0);
        path_in(wpath, "plain.ckpt");
        all = mirror_checkpoint_save(a, wpath, NULL, 1) == MIRROR_OK && mirror_load_weights(b, wpath, &err) == MIRROR_OK;
        pa = params(a, 0), pb = params(b, 1);
        CHECK(all && !memcmp(pa, pb, mirror_num_parameters(a) * sizeof(float)),
              "load weights: a model without BatchNorm: %s", err.message);
        free(pa), free(pb);
        mirror_model_destroy(a), mirror_model_destroy(b);
    }
    test_weights_json(t, nt, src);
    free(ckpt), free(ps), free(pv), free(victim_before);
    mirror_model_destroy(src), mirror_model_destroy(fresh), mirror_model_destroy(victim);
    mirror_strategy_destroy(s);
}

/* An update that makes NaN of a finite gradient: Adam with beta2 = 1 (which
   mirror_model_create refuses; set here behind its back), where every
   update is 0/0 after fp32's guard has passed the gradient. No checkpoint
   of it is saved, by fit (after a step, or at its end) or by hand:
   MIRROR_ERR_NOT_FINITE names the tensor, and the checkpoint before stays
   as it was, nothing rotated. */
static void test_not_finite_save(void)
{
    char path[256], one[270], fresh[256];
    mirror_strategy *s = new_strategy(NULL, 2);
    mirror_model *m = model(s, 0, MIRROR_OPT_ADAM), *f = model(s, 0, MIRROR_OPT_ADAM);
    mirror_dataset few = data;
    mirror_fit_desc fd;
    unsigned char *before, *after;
    size_t nb = 0, na = 0;
    int rc;
    path_in(path, "nan.ckpt");
    path_in(fresh, "nan-fresh.ckpt");
    snprintf(one, sizeof one, "%s.1", path);
    CHECK(mirror_checkpoint_save(m, path, NULL, 0) == MIRROR_OK, "the initial parameters saved");
    before = slurp(path, &nb);
    m->desc.optimizer.beta2 = 1.0f; /* the first update divides a zero second moment by sqrt(1 - 1^1) */
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 1, fd.batch = 12, fd.progress = MIRROR_PROGRESS_NONE, fd.checkpoint = path;
    fd.checkpoint_every = 1; /* a save right after the update */
    rc = mirror_fit(m, &fd, NULL);
    CHECK(rc == MIRROR_ERR_NOT_FINITE && strstr(mirror_model_error(m), "tensor layers.1.weight holds") &&
              strstr(mirror_model_error(m), "nan"),
          "a save after an update that made NaN: refused, naming the tensor (%d: %s)", rc, mirror_model_error(m));
    after = slurp(path, &na);
    CHECK(before && after && na == nb && !memcmp(before, after, nb) && access(one, F_OK) != 0,
          "the checkpoint before is intact, nothing rotated");
    free(before), free(after);

    /* One step, the fit's last: the save at its end. */
    f->desc.optimizer.beta2 = 1.0f;
    few.count = 12;
    fd.train = &few, fd.checkpoint_every = 0, fd.checkpoint = fresh;
    rc = mirror_fit(f, &fd, NULL);
    CHECK(rc == MIRROR_ERR_NOT_FINITE && access(fresh, F_OK) != 0,
          "a fit whose last update made NaN fails and saves nothing (%d: %s)", rc, mirror_model_error(f));
    rc = mirror_checkpoint_save(f, fresh, NULL, 0);
    CHECK(rc == MIRROR_ERR_NOT_FINITE && access(fresh, F_OK) != 0 && strstr(mirror_model_error(f), "layers.1.weight"),
          "mirror_checkpoint_save refuses it too (%d: %s)", rc, mirror_model_error(f));
    mirror_model_destroy(m), mirror_model_destroy(f);
    mirror_strategy_destroy(s);
}

/* A checkpoint's files are made 0666 less the umask, as fopen makes a
   file: a checkpoint is data to share, and the umask says with whom. */
static void test_file_mode(void)
{
    static const mode_t masks[3] = {022, 077, 002};
    char path[256], kept[270], lock[270];
    mirror_strategy *s = new_strategy(NULL, 1);
    mirror_model *m = model(s, 0, MIRROR_OPT_SGD);
    struct stat st, sk, sl;
    mode_t old = umask(022), want;
    int i;
    path_in(path, "mode.ckpt");
    snprintf(kept, sizeof kept, "%s.1", path), snprintf(lock, sizeof lock, "%s.lock", path);
    for (i = 0; i < 3; i++) {
        umask(masks[i]), want = 0666 & ~masks[i];
        unlink(path), unlink(kept), unlink(lock);
        CHECK(mirror_checkpoint_save(m, path, NULL, 3) == MIRROR_OK && mirror_checkpoint_save(m, path, NULL, 3) == 0 &&
                  stat(path, &st) == 0 && stat(kept, &sk) == 0 && stat(lock, &sl) == 0 && (st.st_mode & 0777) == want &&
                  (sk.st_mode & 0777) == want && (sl.st_mode & 0777) == want,
              "umask %03o: the checkpoint, PATH.1 and PATH.lock are %03o (%03o %03o %03o)", (unsigned)masks[i],
              (unsigned)want, (unsigned)(st.st_mode & 0777), (unsigned)(sk.st_mode & 0777),
              (unsigned)(sl.st_mode & 0777));
    }
    umask(old);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* dir/name under a directory of about `deep` bytes (components of 200),
   made; NULL when the system refuses. */
static char *deep_path(size_t deep, const char *name)
{
    char *p = (char *)malloc(deep + 300), part[201];
    memset(part, 'd', 200), part[200] = '\0';
    strcpy(p, root);
    while (strlen(p) + 201 <= deep) {
        strcat(p, "/"), strcat(p, part);
        if (mkdir(p, 0700) != 0 && access(p, F_OK) != 0) return free(p), (char *)NULL;
    }
    strcat(p, "/"), strcat(p, name);
    return p;
}

/* Whether message is whole: shorter than mirror_error's buffer, so that
   nothing was cut at its end, and ending with end. */
static int whole(const char *message, const char *end)
{
    size_t n = strlen(message), e = strlen(end);
    return n < sizeof(((mirror_error *)0)->message) - 1 && n >= e && !strcmp(message + n - e, end);
}

/* A model of 62 layers (flatten, 30 dense-relu pairs, dense 10), after
   `first` (a layer list, may be ""): a description of over 500 bytes. */
static mirror_model *hundred_layers(const mirror_model_desc *d, const char *first)
{
    mirror_model *m = NULL;
    size_t i;
    if (*first) m = new_model(d, NULL, "%s", first);
    else if (mirror_model_create(d, &m, NULL)) m = NULL;
    if (!m) return NULL;
    mirror_flatten(m);
    for (i = 0; i < 30; i++) mirror_dense(m, 100), mirror_relu(m);
    mirror_dense(m, 10);
    return built(m);
}

/* The longest messages of a load: a path of 3000 bytes, models of 62
   layers, a weights file whose every list runs over. Each is
   whole; the path and the descriptions are cut inside themselves, the
   file's name, what went wrong and what to do all there, in that order. */
static void test_long_messages(void)
{
    char *ckpt = deep_path(3000, "run-with-a-long-name.ckpt"),
         *wpath = deep_path(3000, "pytorch-module.safetensors"), shortp[256];
    mirror_strategy *s = new_strategy(NULL, 1);
    mirror_model_desc d = model_desc(s, 1, 8, 8, 12, 3);
    mirror_model *a, *b, *v = bn_model(s, 7);
    mirror_error err = {0, ""};
    weight t[64], u[64];
    unsigned char *bytes = NULL, *file;
    size_t i, n, nt, fn;
    const char *e;
    if (!ckpt || !wpath || !v) {
        CHECK(0, "long messages: a directory of 3000 bytes (%s) and a model", ckpt ? "made" : "refused");
        free(ckpt), free(wpath), mirror_model_destroy(v), mirror_strategy_destroy(s);
        return;
    }
    d.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.01f);
    a = hundred_layers(&d, "");
    b = hundred_layers(&d, "relu");
    path_in(shortp, "long.ckpt");
    CHECK(a && b && mirror_checkpoint_save(a, shortp, NULL, 1) == MIRROR_OK && (bytes = slurp(shortp, &n)) &&
              write_file(ckpt, bytes, n),
          "long messages: a checkpoint of 62 layers at a path of 3000 bytes");
    free(bytes);
    CHECK(b && mirror_checkpoint_load(b, ckpt, 0, NULL) == MIRROR_ERR_SHAPE, "long messages: another model's: refused");
    e = b ? mirror_model_error(b) : "";
    CHECK(whole(e, "dense(100);relu;dense(10);loss(softmax_ce)") && !strncmp(e, root, strlen(root)) &&
              strstr(e, "d...d") && strstr(e, "d/run-with-a-long-name.ckpt: a checkpoint of another model: at layer 0 "
                                           "the checkpoint has flatten, this model relu (62 layers in the checkpoint, "
                                           "63 in this model). To load it, build the model it describes") &&
              strstr(e, "The checkpoint's: input(1,8,8);flatten;dense(100);relu;") && strstr(e, "...") &&
              strstr(e, "; this model's: input(1,8,8);relu;flatten;dense(100);"),
          "long messages: another model's checkpoint at a long path: whole, the path and both models cut inside "
          "(%zu bytes): %s", strlen(e), e);
    {
        const char *p = strstr(e, "The checkpoint's: "), *q = p ? strstr(p, "; this model's: ") : NULL;
        CHECK(p && q && q - p - 18 == 500 && strstr(p, "...") < q, "long messages: the checkpoint's model cut to 500 bytes");
    }

    /* A module's own names, three of them mirror's but of another shape. */
    path_in(shortp, "long-weights.ckpt");
    bytes = NULL;
    CHECK(mirror_checkpoint_save(v, shortp, NULL, 1) == MIRROR_OK && (bytes = slurp(shortp, &n)),
          "long messages: a checkpoint of every kind of tensor");
    nt = weights_of(bytes, n, t);
    for (i = fn = 0; i < nt; i++)
        if (strncmp(t[i].name, "optimizer.", 10)) u[fn++] = t[i];
    for (i = 0; i < fn; i++)
        if (i < 3)
            u[i].shape[1] = u[i].count / u[i].shape[0], u[i].rank = 2;
        else
            snprintf(u[i].name, sizeof u[i].name, "features.stage%u.residual_block_with_a_long_name.%.12s",
                     (unsigned)i % 100, strrchr(t[i].name, '.') + 1);
    file = safetensors_of(u, fn, &n);
    CHECK(write_file(wpath, file, n) && mirror_load_weights(v, wpath, &err) == MIRROR_ERR_SHAPE,
          "long messages: a module's own names: refused");
    e = err.message;
    {
        const char *names = strstr(e, "pytorch-module.safetensors: 15 of the file's tensors have names this model "
                                      "does not know: features.stage"),
                   *advice = strstr(e, "_name.running_var (and 12 more). mirror reads its own names (layers.0.weight) "
                                       "or those of an nn.Sequential's state_dict, which number the layers in order "
                                       "(0.weight, 3.bias): rename the tensors"),
                   *missing = strstr(e, ". 15 of this model's tensors are missing (layers.<i>.<what> or <i>.<what>): "
                                        "1.bias, 1.running_mean, 1.running_var (and 12 more). tensor layers.0.weight: "
                                        "shape [4, 9] in the file, [4, 1, 3, 3] in this model; tensor layers.0.bias: ");
        CHECK(whole(e, "in this model") && !strncmp(e, root, strlen(root)) && strstr(e, "d...d") && names &&
                  advice && missing && names < advice && advice < missing,
              "long messages: a module's names at a long path: whole, the path cut inside, the names and what to "
              "do first, then the tensors missing and the shapes, each list cut to 3 (%zu bytes): %s", strlen(e), e);
    }
    free(bytes), free(file), free(ckpt), free(wpath);
    mirror_model_destroy(a), mirror_model_destroy(b), mirror_model_destroy(v);
    mirror_strategy_destroy(s);
}

int main(void)
{
    if (!make_root("test_checkpoint")) return 1;
    small_digits(&data, 50, 5, 8, 3);
    test_exact_resume(1, MIRROR_OPT_ADAMW, 2);
    test_exact_resume(0, MIRROR_OPT_SGD, 3);
    test_fit_resume();
    test_not_finite_save();
    test_resume_changes();
    test_replicas_and_weights_only();
    test_durability();
    test_hostile();
    test_hostile_counters();
    test_hostile_epoch_sums();
    test_hostile_values();
    test_not_files();
    test_edges();
    test_targets();
    test_file_mode();
    test_from_checkpoint(MIRROR_PRECISION_FP32);
    test_from_checkpoint(MIRROR_PRECISION_FP16);
    test_from_checkpoint_refused();
    test_from_checkpoint_small_file();
    test_checkpoint_describe();
    test_load_weights();
    test_long_messages();
    mirror_dataset_free(&data);
    remove_tree(root);
    return check_done("test_checkpoint");
}
