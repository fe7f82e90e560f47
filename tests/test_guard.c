/* test_guard.c - nothing silent in fp32: a NaN in the data reaches the loss
   through relu and max pooling (as in PyTorch); a step whose loss or
   reduced gradient is not finite fails with MIRROR_ERR_NOT_FINITE naming
   the step, changes nothing, and leaves every replica alike and the model
   usable; fit stops at that step and keeps the good checkpoints; a learning
   rate that diverges stops within the first epoch; and a stopped fit's
   metrics do not leak into the next. 1, 2 and 3 CPU replicas. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "files.h"

#include <string.h>

enum { SIDE = 8, IN = SIDE * SIDE, BATCH = 12, STEPS = 6, BAD = 3, SNAP = 16384 };

static void quiet(void *user, int level, const char *message) { (void)user, (void)level, (void)message; }

/* 1x8x8 -> conv 4 (3x3, pad 1), relu, maxpool 2, flatten, dense 10; or
   with mse, flatten, dense 4 and mean squared error. */
static mirror_model *model(mirror_strategy *s, mirror_optimizer_kind opt, float lr, int mse)
{
    mirror_model_desc md = model_desc(s, 1, SIDE, SIDE, BATCH, 3);
    md.optimizer = optimizer_of(opt, lr);
    md.loss = mse ? MIRROR_LOSS_MSE : MIRROR_LOSS_SOFTMAX_CE;
    return checked_model(&md, mse ? "flatten, dense 4" : "conv 4 3 1 1, relu, maxpool 2 2, flatten, dense 10");
}

static void make_data(float *x, int32_t *y, size_t rows, uint64_t seed)
{
    size_t i;
    for (i = 0; i < rows * IN; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((seed >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (i = 0; y && i < rows; i++) y[i] = (int32_t)((i * 7 + 3) % 10);
}

static int step(mirror_model *m, const float *x, const int32_t *y, const float *t, mirror_metrics *out)
{
    mirror_batch b;
    memset(&b, 0, sizeof b);
    b.x = x, b.labels = y, b.targets = t, b.n = BATCH;
    return mirror_train_step(m, &b, out);
}

/* Replica r's parameters and optimizer state, concatenated into buf. */
static size_t snapshot(mirror_model *m, size_t r, float *buf)
{
    size_t np = mirror_num_parameters(m), ns = mirror_optimizer_state_size(m);
    mirror_get_parameters(m, r, buf, np);
    mirror_get_optimizer_state(m, r, buf + np, ns);
    return np + ns;
}

static int same_replicas(mirror_model *m, size_t replicas, const float *want)
{
    static float got[SNAP];
    size_t r, n = 0;
    int same = 1;
    for (r = 0; r < replicas; r++) {
        n = snapshot(m, r, got);
        same &= memcmp(want, got, n * sizeof(float)) == 0;
    }
    return same;
}

/* The layers on their own: relu and max pooling keep a NaN, as torch does. */
static void test_layers_keep_nan(void)
{
    const float x[8] = {1.0f, NAN, 3.0f, 2.0f, -1.0f, -2.0f, 5.0f, NAN};
    float y[2], out = 0.0f;
    int32_t arg[2];
    CHECK(isnan(mirror_hd_relu(NAN)) && mirror_hd_relu(-0.0f) == 0.0f && mirror_hd_relu(-1.0f) == 0.0f &&
              mirror_hd_relu(2.0f) == 2.0f,
          "relu(NaN) is NaN, relu of a negative is 0");
    {
        /* bit for bit, as the GPU's relu must match it: a NaN's sign and
           payload kept, -0, -Inf and a negative subnormal to +0 */
        static const uint32_t kept[6] = {0x7fc00001u, 0xffc00000u, 0xff800001u, 0x7f800000u, 0x00000001u, 0u};
        static const uint32_t zeroed[4] = {0x80000000u, 0xff800000u, 0x80000001u, 0xbf800000u};
        int i, ok = 1;
        for (i = 0; i < 6; i++) ok &= mirror_hd_bits(mirror_hd_relu(mirror_hd_float(kept[i]))) == kept[i];
        for (i = 0; i < 4; i++) ok &= mirror_hd_bits(mirror_hd_relu(mirror_hd_float(zeroed[i]))) == 0u;
        CHECK(ok, "relu on the bits: NaNs, +Inf, +0 and positive subnormals kept; -0, -Inf, negatives to +0");
    }
    CHECK(mirror_hd_relu_grad(NAN, 0.5f) == 0.5f && mirror_hd_relu_grad(0.0f, 0.5f) == 0.0f,
          "relu's gradient passes where the output is NaN (torch's threshold_backward)");
    /* two planes of 2x2, window 2: [1 NaN; 3 2] and [-1 -2; 5 NaN] */
    mirror__cpu_backend.maxpool_forward(NULL, y, arg, x, 2, 2, 2, 2, 2, 1, 1);
    CHECK(isnan(y[0]) && arg[0] == 1 && isnan(y[1]) && arg[1] == 3,
          "maxpool: a window with a NaN gives NaN at the NaN (%g at %d, %g at %d)", (double)y[0], (int)arg[0],
          (double)y[1], (int)arg[1]);
    mirror__cpu_backend.maxpool_forward(NULL, y, arg, x + 2, 1, 2, 2, 2, 2, 1, 1);
    CHECK(y[0] == 3.0f && arg[0] == 0, "maxpool without a NaN: the maximum (%g at %d)", (double)y[0], (int)arg[0]);
    { /* a plane of 2 x 41: 20 windows, more than a vector's; a NaN in window 18's second row, one in the last
         column, which no window reads */
        float wide[82], wy[20];
        int32_t warg[20];
        size_t i, wrong = 0;
        for (i = 0; i < 82; i++) wide[i] = (float)(i % 41);
        wide[41 + 37] = NAN, wide[40] = NAN;
        mirror__cpu_backend.maxpool_forward(NULL, wy, warg, wide, 1, 2, 41, 2, 2, 1, 20);
        for (i = 0; i < 20; i++)
            wrong += i == 18 ? !isnan(wy[i]) || warg[i] != 41 + 37
                             : wy[i] != (float)(2 * i + 1) || warg[i] != (int32_t)(2 * i + 1);
        CHECK(wrong == 0, "maxpool of 20 windows in a row: NaN only in the window that holds one (%zu wrong)", wrong);
    }
    CHECK(isnan(mirror_hd_mse_row(&x[1], &x[0], 1, 1.0f, &out, 0)) && isnan(out), "MSE of a NaN: NaN loss and gradient");
    {
        const float z[2] = {3e19f, 0.0f}, t[2] = {-3e19f, 0.0f};
        float dz[2];
        float loss = mirror_hd_mse_row(z, t, 2, 1.0f, dz, 0);
        CHECK(isinf(loss) && isnan(dz[0]) && isnan(dz[1]),
              "an MSE loss that overflows makes its row's gradient NaN (loss %g)", (double)loss);
    }
}

/* One poisoned step among good ones, on R replicas: it fails, names its
   step, changes nothing; the next good steps go on from there and match a
   run that never saw the bad batch. */
static void test_bad_step(size_t replicas, mirror_optimizer_kind opt, float poison, int mse)
{
    static float x[STEPS][BATCH * IN], t[STEPS][IN], before[SNAP], a[SNAP], b[SNAP];
    static int32_t y[STEPS][BATCH];
    mirror_strategy *s = checked_strategy("cpu", replicas);
    mirror_model *run = s ? model(s, opt, 0.01f, mse) : NULL, *control = s ? model(s, opt, 0.01f, mse) : NULL;
    const char *what = mse ? "MSE" : opt == MIRROR_OPT_SGD ? "CNN, SGD" : "CNN, Adam";
    mirror_metrics out;
    char want[64];
    size_t i, n;
    int rc;
    for (i = 0; i < STEPS; i++) {
        make_data(x[i], y[i], BATCH, 40 + i);
        make_data(t[i], NULL, 1, 90 + i); /* BATCH x 4 targets */
    }
    if (mse) /* a target so far off that the loss overflows, its gradient not */
        t[BAD][4 * 4 + 1] = poison;
    else
        x[BAD][(BATCH - 1) * IN + 27] = poison; /* in the last replica's shard */
    if (!run || !control) goto out;
    for (i = 0; i < STEPS; i++) {
        if (i != BAD) {
            CHECK(step(run, x[i], y[i], t[i], NULL) == MIRROR_OK && step(control, x[i], y[i], t[i], &out) == MIRROR_OK,
                  "%s, %zu replicas: step %zu: %s", what, replicas, i + 1, mirror_model_error(run));
            continue;
        }
        n = snapshot(run, 0, before);
        rc = step(run, x[i], y[i], t[i], i % 2 ? &out : NULL);
        snprintf(want, sizeof want, "step %d:", BAD + 1);
        CHECK(rc == MIRROR_ERR_NOT_FINITE && strstr(mirror_model_error(run), want),
              "%s, %zu replicas: the poisoned step fails naming itself (%s: %s)", what, replicas,
              mirror_result_string(rc), mirror_model_error(run));
        CHECK(same_replicas(run, replicas, before), "%s, %zu replicas: nothing of the step applied, on any replica",
              what, replicas);
        CHECK(mirror_optimizer_steps(run) == BAD, "%s: the step is not counted (%llu)", what,
              (unsigned long long)mirror_optimizer_steps(run));
    }
    n = snapshot(run, 0, a);
    snapshot(control, 0, b);
    CHECK(memcmp(a, b, n * sizeof(float)) == 0 && same_replicas(run, replicas, a),
          "%s, %zu replicas: the run goes on from the last finite step, equal to a run without the bad batch", what,
          replicas);
    CHECK(mirror_optimizer_steps(run) == STEPS - 1, "%s: %d steps counted", what, STEPS - 1);
out:
    mirror_model_destroy(run);
    mirror_model_destroy(control);
    mirror_strategy_destroy(s);
}

static mirror_dataset dataset(size_t count, uint64_t seed)
{
    mirror_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.x = (float *)MIRROR_MALLOC(count * IN * sizeof(float));
    ds.labels = (int32_t *)MIRROR_MALLOC(count * sizeof(int32_t));
    if (ds.x && ds.labels) make_data(ds.x, ds.labels, count, seed);
    ds.count = count, ds.channels = 1, ds.height = ds.width = SIDE, ds.num_classes = 10;
    return ds;
}

/* A quiet fit over ds in batches of BATCH for `epochs`. */
static mirror_fit_desc fit_desc(const mirror_dataset *ds, size_t epochs)
{
    mirror_fit_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.train = ds;
    fd.epochs = epochs;
    fd.batch = BATCH;
    fd.progress = MIRROR_PROGRESS_NONE;
    return fd;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int same_file(const char *a, const char *b)
{
    unsigned char *p = NULL, *q = NULL;
    size_t n = 0, k = 0;
    int same = mirror__read_file(a, 1 << 20, NULL, &p, &n, NULL) == MIRROR_OK &&
               mirror__read_file(b, 1 << 20, NULL, &q, &k, NULL) == MIRROR_OK &&
               n == k && memcmp(p, q, n) == 0;
    MIRROR_FREE(p);
    MIRROR_FREE(q);
    return same;
}

/* fit over data with one NaN sample: stops at the step that meets it, with
   the checkpoints of the good steps intact; and a learning rate that
   diverges stops in the first epoch instead of training NaN for epochs. */
static void test_fit(size_t replicas)
{
    static float before[SNAP];
    mirror_strategy *s = checked_strategy("cpu", replicas);
    mirror_model *m = s ? model(s, MIRROR_OPT_ADAM, 0.001f, 0) : NULL;
    mirror_dataset ds = dataset(96, 7);
    mirror_fit_desc fd;
    mirror_epoch_log log;
    size_t perm[96], bad_step = 0;
    char ckpt[256], p1[256], p2[256], copy[256], msg[300];
    int rc;
    if (!m || !ds.x || !ds.labels) goto out;
    /* a sample that the 6th step of the first epoch reads */
    mirror_permutation(perm, ds.count, 3, 0);
    ds.x[perm[5 * BATCH + 5] * IN + 9] = NAN;
    bad_step = 6;
    path_in(ckpt, "fit.ckpt"), path_in(p1, "fit.ckpt.1"), path_in(p2, "fit.ckpt.2"), path_in(copy, "copy");
    fd = fit_desc(&ds, 4);
    fd.checkpoint = ckpt;
    fd.checkpoint_every = 1; /* every step: the good ones must survive */
    fd.checkpoint_keep = 3;
    fd.shuffle_seed = 3;
    rc = mirror_fit(m, &fd, &log);
    snprintf(msg, sizeof msg, "step %zu:", bad_step);
    CHECK(rc == MIRROR_ERR_NOT_FINITE && strstr(mirror_model_error(m), msg),
          "%zu replicas: fit stops at step %zu: %s: %s", replicas, bad_step, mirror_result_string(rc),
          mirror_model_error(m));
    CHECK(mirror_optimizer_steps(m) == bad_step - 1, "fit ran %zu good steps (%llu)", bad_step - 1,
          (unsigned long long)mirror_optimizer_steps(m));
    /* the newest checkpoint holds the last finite step, and saving the model
       now gives the same parameters */
    {
        mirror_checkpoint_info info = {0, 0, 0, 0, 0, 0, 0, 0};
        mirror_model *back = model(s, MIRROR_OPT_ADAM, 0.001f, 0);
        size_t n = snapshot(m, 0, before);
        static float got[SNAP];
        CHECK(back && mirror_checkpoint_load(back, ckpt, 0, &info) == MIRROR_OK && info.step == bad_step - 1,
              "the newest checkpoint is step %zu (%llu)", bad_step - 1, (unsigned long long)info.step);
        if (back) snapshot(back, 0, got);
        CHECK(back && memcmp(got, before, n * sizeof(float)) == 0, "and holds the parameters of that step");
        mirror_model_destroy(back);
    }
    CHECK(file_size(p1) > 0 && file_size(p2) > 0 && file_size(path_in(copy, "fit.ckpt.3")) < 0,
          "the older good checkpoints are kept, keep = 3");
    /* a second fit from here stops at the same sample again, saving nothing */
    {
        path_in(copy, "copy");
        mirror__copy_file(ckpt, copy, msg, sizeof msg);
        fd.initial_step = 5;
        rc = mirror_fit(m, &fd, NULL);
        CHECK(rc == MIRROR_ERR_NOT_FINITE && same_file(ckpt, copy), "fit again: the same stop, the checkpoint untouched");
    }
    mirror_model_destroy(m);

    /* divergence: SGD at a learning rate of 1e6 */
    m = model(s, MIRROR_OPT_SGD, 1e6f, 0);
    ds.x[perm[5 * BATCH + 5] * IN + 9] = 0.5f;
    fd = fit_desc(&ds, 50);
    rc = m ? mirror_fit(m, &fd, &log) : MIRROR_ERR_STATE;
    CHECK(rc == MIRROR_ERR_NOT_FINITE && mirror_optimizer_steps(m) < 96 / BATCH,
          "%zu replicas: lr 1e6 stops within the first epoch (%s after %llu steps)", replicas, mirror_result_string(rc),
          m ? (unsigned long long)mirror_optimizer_steps(m) : 0ull);
out:
    mirror_model_destroy(m);
    mirror_dataset_free(&ds);
    mirror_strategy_destroy(s);
}

/* Stops fit from its epoch hook. */
static int stop_now(void *user, const mirror_epoch_log *log)
{
    (void)user, (void)log;
    return 1;
}

/* A fit that fails mid-epoch leaves the metrics of its last steps on the
   device: the next fit's first epoch counts its own samples only. Steps
   run by hand before a fit are not its metrics either, and fit leaves
   none behind. */
static void test_metrics_do_not_leak(void)
{
    static float x[BATCH * IN];
    static int32_t y[BATCH];
    mirror_strategy *s = checked_strategy("cpu", 2);
    mirror_model *m = s ? model(s, MIRROR_OPT_ADAM, 0.001f, 0) : NULL;
    mirror_dataset ds = dataset(60, 11);
    mirror_fit_desc fd;
    mirror_epoch_log log;
    mirror_metrics taken;
    size_t perm[60];
    float kept;
    if (!m || !ds.x) goto out;
    make_data(x, y, BATCH, 5);
    CHECK(step(m, x, y, NULL, NULL) == MIRROR_OK, "a step by hand, its metrics left on the device");
    fd = fit_desc(&ds, 1);
    fd.on_epoch = stop_now;
    CHECK(mirror_fit(m, &fd, &log) == MIRROR_ERR_STOPPED && log.samples == 60,
          "fit counts its own 60 samples, not the step before it (%zu)", log.samples);
    /* a fit that fails at its 4th step, after 3 whose metrics stay behind */
    fd.on_epoch = NULL;
    fd.epochs = 2;
    fd.initial_epoch = 1;
    mirror_permutation(perm, ds.count, mirror_model_query_desc(m).seed, 1);
    kept = ds.x[perm[3 * BATCH] * IN];
    ds.x[perm[3 * BATCH] * IN] = NAN;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_NOT_FINITE, "a fit failing mid-epoch: %s", mirror_model_error(m));
    ds.x[perm[3 * BATCH] * IN] = kept;
    CHECK(mirror_fit(m, &fd, &log) == MIRROR_OK && log.samples == 60,
          "the next fit's epoch counts 60 samples, not 96 (%zu)", log.samples);
    CHECK(mirror_take_metrics(m, &taken) == MIRROR_OK && taken.count == 0 && taken.loss_sum == 0.0,
          "and leaves no metrics behind for a later take (%zu samples)", taken.count);
out:
    mirror_model_destroy(m);
    mirror_dataset_free(&ds);
    mirror_strategy_destroy(s);
}

static char heard[256];

static void hear(void *user, int level, const char *message)
{
    (void)user;
    if (level == MIRROR_LOG_NOTICE) snprintf(heard, sizeof heard, "%s", message);
}

/* A validation set with a NaN sample: training goes on (the training
   data are finite), and the epoch line shows val_loss nan instead of
   dropping the validation columns, with a notice saying why. */
static void test_nan_validation(void)
{
    mirror_strategy *s = checked_strategy("cpu", 2);
    mirror_model *m = s ? model(s, MIRROR_OPT_ADAM, 0.001f, 0) : NULL;
    mirror_dataset ds = dataset(48, 13), val = dataset(24, 17);
    mirror_fit_desc fd;
    mirror_epoch_log log;
    char path[256], line[512] = "";
    FILE *f;
    int out = dup(fileno(stdout)), rc;
    if (!m || !ds.x || !val.x || out < 0) goto out;
    val.x[5 * IN + 9] = NAN;
    fd = fit_desc(&ds, 1);
    fd.validation = &val;
    fd.progress = MIRROR_PROGRESS_LINES;
    fflush(stdout);
    f = freopen(path_in(path, "epoch.txt"), "w", stdout);
    mirror_set_logger(hear, NULL);
    rc = mirror_fit(m, &fd, &log);
    mirror_set_logger(quiet, NULL);
    fflush(stdout);
    dup2(out, fileno(stdout)); /* stdout back where it was */
    if (f && (f = fopen(path, "r")) != NULL) {
        if (!fgets(line, sizeof line, f)) line[0] = '\0';
        fclose(f);
    }
    CHECK(rc == MIRROR_OK && log.val_loss != log.val_loss, "fit ends, its validation loss NaN: %s",
          mirror_model_error(m));
    CHECK(strstr(line, "val_loss nan  val_acc ") != NULL, "the epoch line shows val_loss nan: %s", line);
    CHECK(strstr(heard, "epoch 1: the validation loss is not finite") != NULL, "and a notice says why: %s", heard);
out:
    if (out >= 0) close(out);
    mirror_model_destroy(m);
    mirror_dataset_free(&ds);
    mirror_dataset_free(&val);
    mirror_strategy_destroy(s);
}

int main(void)
{
    size_t r;
    mirror_set_logger(quiet, NULL);
    if (!make_root("guard")) return 1;
    test_layers_keep_nan();
    for (r = 1; r <= 3; r++) {
        test_bad_step(r, MIRROR_OPT_ADAM, NAN, 0);
        test_bad_step(r, MIRROR_OPT_SGD, INFINITY, 0);
        test_bad_step(r, MIRROR_OPT_SGD, 1e20f, 1);
    }
    test_fit(1);
    test_fit(2);
    test_metrics_do_not_leak();
    test_nan_validation();
    remove_tree(root);
    return check_done("test_guard");
}
