/* test_device_data.c - data kept in device memory (mirror_fit_desc's
   data_on_device), on CPU replicas, which gather in place by default and
   keep a copy of the data when told to: the same fit with the data on the
   device and on the host gives bitwise the same parameters, losses and
   metrics, in fp32, fp16 and bf16, with and without augmentation, on 1 and
   3 replicas (odd shards), for softmax cross-entropy and MSE; a second fit
   on the same data finds its copy, and the steps read it (a scribbled
   copy changes them); changed data are copied again; data that do not fit
   stay on the host, said once; mirror_keep_data's steps likewise. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"

#include <string.h>

#define COUNT 37 /* batches of 10: the last of 7; shards of 4, 3, 3 and 3, 2, 2 on 3 replicas */
#define VAL 13
#define SIDE 6

static size_t notices;
static char last_notice[600];
static void count_notices(void *user, int level, const char *message)
{
    (void)user;
    if (level != MIRROR_LOG_NOTICE || !strstr(message, "stay in host memory")) return;
    notices++;
    snprintf(last_notice, sizeof last_notice, "%s", message);
}

/* count samples of 2 x SIDE x SIDE in [-1, 1), labels in [0, 4) and
   targets of 4 values, from seed. */
static void make_data(mirror_dataset *ds, size_t count, uint64_t seed, float *x, int32_t *labels, float *targets)
{
    size_t i, in = 2 * SIDE * SIDE;
    for (i = 0; i < count * in; i++) x[i] = uniform_in(&seed, -1.0f, 1.0f);
    for (i = 0; i < count; i++) labels[i] = (int32_t)(mirror__next(&seed) % 4);
    for (i = 0; i < count * 4; i++) targets[i] = uniform_in(&seed, -1.0f, 1.0f);
    CHECK(mirror_dataset_from_arrays(ds, x, labels, targets, count, 2, SIDE, SIDE, 4, 4, 0, NULL) == MIRROR_OK,
          "dataset of %zu samples", count);
}

typedef struct setup {
    size_t replicas;
    mirror_precision precision;
    mirror_loss loss;
    int augment;
} setup;

static mirror_model *model_of(mirror_strategy *s, const setup *u)
{
    mirror_model_desc d = model_desc(s, 2, SIDE, SIDE, 10, 7);
    d.optimizer = optimizer_of(MIRROR_OPT_SGD, 0.05f);
    d.precision = u->precision;
    d.loss = u->loss;
    return checked_model(&d, "conv 3 3 1 1, relu, flatten, dense 4");
}

static mirror_fit_desc fit_of(const mirror_dataset *train, const mirror_dataset *val, const setup *u,
                              mirror_data_place place)
{
    mirror_fit_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.train = train, fd.validation = val;
    fd.epochs = 3, fd.batch = 10;
    fd.progress = MIRROR_PROGRESS_NONE;
    fd.augment_flip = u->augment, fd.augment_crop_pad = u->augment ? 2 : 0;
    fd.data_on_device = place;
    return fd;
}

/* Whether two fits ended alike: every parameter bit, the last epoch's
   losses and accuracies, and the evaluation of val. */
static int same_runs(mirror_model *a, mirror_model *b, const mirror_epoch_log *la, const mirror_epoch_log *lb,
                     const mirror_dataset *val)
{
    size_t n = mirror_num_parameters(a);
    float *pa = (float *)malloc(n * sizeof(float)), *pb = (float *)malloc(n * sizeof(float));
    mirror_metrics ea, eb;
    int same = pa && pb && mirror_get_parameters(a, 0, pa, n) == MIRROR_OK &&
               mirror_get_parameters(b, 0, pb, n) == MIRROR_OK && !memcmp(pa, pb, n * sizeof(float));
    same &= !memcmp(&la->train_loss, &lb->train_loss, sizeof(double)) &&
            !memcmp(&la->train_acc, &lb->train_acc, sizeof(double)) &&
            !memcmp(&la->val_loss, &lb->val_loss, sizeof(double)) &&
            !memcmp(&la->val_acc, &lb->val_acc, sizeof(double));
    same &= mirror_evaluate(a, val, 0, &ea) == MIRROR_OK && mirror_evaluate(b, val, 0, &eb) == MIRROR_OK &&
            !memcmp(&ea.loss_sum, &eb.loss_sum, sizeof(double)) && ea.correct == eb.correct;
    free(pa);
    free(pb);
    return same;
}

/* The same fit, twice, with the data on the host and on the device, in
   every setting; then a second fit on the same data, which finds them. */
static void test_same_bits(const mirror_dataset *train, const mirror_dataset *val)
{
    static const mirror_precision precisions[3] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16, MIRROR_PRECISION_BF16};
    static const size_t replicas[2] = {1, 3};
    size_t p, r, l, a;
    for (r = 0; r < 2; r++) {
        mirror_strategy *s = checked_strategy("cpu", replicas[r]);
        for (p = 0; p < 3; p++)
            for (l = 0; l < 2; l++)
                for (a = 0; a < 2; a++) {
                    setup u = {replicas[r], precisions[p], l ? MIRROR_LOSS_MSE : MIRROR_LOSS_SOFTMAX_CE, (int)a};
                    mirror_model *host = model_of(s, &u), *dev = model_of(s, &u);
                    mirror_fit_desc fh = fit_of(train, val, &u, MIRROR_DATA_OFF);
                    mirror_fit_desc fv = fit_of(train, val, &u, MIRROR_DATA_ON);
                    mirror_epoch_log lh, lv;
                    void *copy;
                    char what[128];
                    snprintf(what, sizeof what, "%zu replicas, %s, %s, %s", u.replicas,
                             mirror_precision_name(u.precision), l ? "MSE" : "softmax CE",
                             a ? "flip and crop pad 2" : "no augmentation");
                    if (!host || !dev) continue;
                    CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK, "%s: fit on the host: %s", what,
                          mirror_model_error(host));
                    CHECK(mirror_fit(dev, &fv, &lv) == MIRROR_OK, "%s: fit on the device: %s", what,
                          mirror_model_error(dev));
                    CHECK(!host->resident.sets[0].dev && !host->resident.sets[1].dev, "%s: off: nothing kept on the device", what);
                    CHECK(dev->resident.sets[0].dev && dev->resident.sets[1].dev && dev->resident.sets[0].dev[0] != train->x,
                          "%s: on: the training and validation sets kept on the device, as copies", what);
                    CHECK(same_runs(host, dev, &lh, &lv, val), "%s: the same bits with the data on the device", what);
                    CHECK(u.replicas == 1 || (dev->resident.sets[0].dev && dev->resident.sets[0].dev[4] == dev->resident.sets[0].dev[0]),
                          "%s: replicas on one device (CPU replicas: the host) share one copy", what);
                    /* a second fit on the same data: the same copy, the same bits */
                    copy = dev->resident.sets[0].dev ? dev->resident.sets[0].dev[0] : NULL;
                    fh.initial_epoch = fv.initial_epoch = 3, fh.epochs = fv.epochs = 5;
                    CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK,
                          "%s: second fits: %s %s", what, mirror_model_error(host), mirror_model_error(dev));
                    CHECK(dev->resident.sets[0].dev && dev->resident.sets[0].dev[0] == copy, "%s: the second fit found its copy", what);
                    CHECK(same_runs(host, dev, &lh, &lv, val), "%s: the same bits after a second fit", what);
                    mirror_model_destroy(host);
                    mirror_model_destroy(dev);
                }
        mirror_strategy_destroy(s);
    }
}

/* The steps read the copy: scribbled over (CPU replicas: host memory),
   the second fit, which finds it, trains on what it holds now. */
static void test_copy_is_read(const mirror_dataset *train, const mirror_dataset *val)
{
    mirror_strategy *s = checked_strategy("cpu", 3);
    setup u = {3, MIRROR_PRECISION_FP32, MIRROR_LOSS_SOFTMAX_CE, 0};
    mirror_model *host = model_of(s, &u), *dev = model_of(s, &u);
    mirror_fit_desc fh = fit_of(train, val, &u, MIRROR_DATA_OFF), fv = fit_of(train, val, &u, MIRROR_DATA_ON);
    mirror_epoch_log lh, lv;
    if (host && dev) {
        fh.epochs = fv.epochs = 1;
        CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK, "first fits");
        CHECK(same_runs(host, dev, &lh, &lv, val), "the same bits before the scribble");
        if (dev->resident.sets[0].dev) memset(dev->resident.sets[0].dev[0], 0, train->count * 2 * SIDE * SIDE * sizeof(float));
        fh.initial_epoch = fv.initial_epoch = 1, fh.epochs = fv.epochs = 2;
        CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK, "second fits");
        CHECK(!same_runs(host, dev, &lh, &lv, val), "the second fit read the copy, zeros now");
    }
    mirror_model_destroy(host);
    mirror_model_destroy(dev);
    mirror_strategy_destroy(s);
}

/* One copy for each role, training and evaluation: a fit validating on
   its training set reads the one copy; a set evaluated before and then
   trained on moves to training's place, not copied again. */
static void test_roles(const mirror_dataset *a, const mirror_dataset *b)
{
    mirror_strategy *s = checked_strategy("cpu", 3);
    setup u = {3, MIRROR_PRECISION_FP32, MIRROR_LOSS_SOFTMAX_CE, 1};
    mirror_model *host = model_of(s, &u), *dev = model_of(s, &u);
    mirror_fit_desc fh = fit_of(a, a, &u, MIRROR_DATA_OFF), fv = fit_of(a, a, &u, MIRROR_DATA_ON);
    mirror_epoch_log lh, lv;
    void *copy;
    if (host && dev) {
        fh.epochs = fv.epochs = 1;
        CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK,
              "validating on the training set");
        CHECK(dev->resident.sets[0].dev && !dev->resident.sets[1].dev, "one copy for both");
        CHECK(same_runs(host, dev, &lh, &lv, b), "the same bits validating on the training set");
        fh.train = fv.train = b, fh.initial_epoch = fv.initial_epoch = 1, fh.epochs = fv.epochs = 2;
        CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK, "b, validated on a");
        copy = dev->resident.sets[1].dev ? dev->resident.sets[1].dev[0] : NULL;
        fh.train = fv.train = a, fh.validation = fv.validation = b;
        fh.initial_epoch = fv.initial_epoch = 2, fh.epochs = fv.epochs = 3;
        CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK, "a, validated on b");
        CHECK(copy && dev->resident.sets[0].dev && dev->resident.sets[0].dev[0] == copy && dev->resident.sets[1].dev &&
                  dev->resident.sets[1].dev[0] != copy,
              "a's copy moved from evaluation's place to training's");
        CHECK(lv.data_on_device == 1 && lh.data_on_device == 0, "the epoch logs say where the data lived");
        CHECK(same_runs(host, dev, &lh, &lv, b), "the same bits after the move");
    }
    mirror_model_destroy(host);
    mirror_model_destroy(dev);
    mirror_strategy_destroy(s);
}

/* mirror_keep_data: steps on batches over the kept arrays (shuffled by an
   index) give the bits of the host's gather; ds NULL ends it. */
static void test_keep_data(const mirror_dataset *train, const mirror_dataset *val)
{
    mirror_strategy *s = checked_strategy("cpu", 3);
    setup u = {3, MIRROR_PRECISION_BF16, MIRROR_LOSS_MSE, 0};
    mirror_model *host = model_of(s, &u), *dev = model_of(s, &u);
    mirror_epoch_log none;
    mirror_metrics mh, mv;
    size_t perm[COUNT], k;
    int on = -1, same = 1;
    mirror_batch b;
    if (!host || !dev) return;
    memset(&none, 0, sizeof none);
    mirror_permutation(perm, COUNT, 5, 0);
    memset(&b, 0, sizeof b);
    b.x = train->x, b.targets = train->targets, b.labels = train->labels, b.rows = COUNT, b.n = 9;
    CHECK(mirror_keep_data(dev, train, MIRROR_DATA_AUTO, &on) == MIRROR_OK && on == 0 && !dev->resident.kept,
          "auto on CPU replicas: no copy (%d)", on);
    CHECK(mirror_keep_data(dev, train, MIRROR_DATA_ON, &on) == MIRROR_OK && on == 1 && dev->resident.kept,
          "on: a copy (%d)", on);
    for (k = 0; k < 4; k++) {
        b.index = perm + 9 * k;
        same &= mirror_train_step(host, &b, &mh) == MIRROR_OK && mirror_train_step(dev, &b, &mv) == MIRROR_OK &&
                !memcmp(&mh.loss_sum, &mv.loss_sum, sizeof(double));
    }
    CHECK(same, "4 steps on the kept data: the host's losses, bit for bit");
    b.index = NULL, b.n = COUNT;
    CHECK(mirror_evaluate_batch(host, &b, &mh) == MIRROR_OK && mirror_evaluate_batch(dev, &b, &mv) == MIRROR_OK &&
              !memcmp(&mh.loss_sum, &mv.loss_sum, sizeof(double)),
          "evaluate_batch on the kept data: the host's loss");
    CHECK(same_runs(host, dev, &none, &none, val), "the same parameters after the steps");
    if (dev->resident.kept) memset(dev->resident.kept->dev[0], 0, COUNT * 2 * SIDE * SIDE * sizeof(uint16_t));
    CHECK(mirror_evaluate_batch(host, &b, &mh) == MIRROR_OK && mirror_evaluate_batch(dev, &b, &mv) == MIRROR_OK &&
              mh.loss_sum != mv.loss_sum,
          "the steps read the copy (scribbled over: another loss)");
    CHECK(mirror_keep_data(dev, NULL, MIRROR_DATA_ON, &on) == MIRROR_OK && on == 0 && !dev->resident.kept,
          "ds NULL: the host gathers again");
    CHECK(mirror_keep_data(dev, train, (mirror_data_place)-1, NULL) == MIRROR_ERR_ARGUMENT, "an unknown place: %s",
          mirror_model_error(dev));
    CHECK(mirror_keep_data(NULL, train, MIRROR_DATA_ON, NULL) != MIRROR_OK, "no model");
    mirror_model_destroy(host);
    mirror_model_destroy(dev);
    mirror_strategy_destroy(s);
}

/* Changed data are copied again; data that do not fit stay on the host
   (a notice, once a set), with the same bits. */
static void test_changed_and_too_big(mirror_dataset *train, const mirror_dataset *val)
{
    mirror_strategy *s = checked_strategy("cpu", 3);
    setup u = {3, MIRROR_PRECISION_FP16, MIRROR_LOSS_SOFTMAX_CE, 1};
    mirror_model *host = model_of(s, &u), *dev = model_of(s, &u);
    mirror_fit_desc fh = fit_of(train, val, &u, MIRROR_DATA_OFF), fv = fit_of(train, val, &u, MIRROR_DATA_ON);
    mirror_epoch_log lh, lv;
    uint64_t hash;
    float kept;
    if (!host || !dev) return;
    fh.epochs = fv.epochs = 1;
    CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK, "first fits");
    hash = dev->resident.sets[0].hash;
    kept = train->x[5];
    train->x[5] = 0.25f; /* the same arrays, other contents */
    fh.initial_epoch = fv.initial_epoch = 1, fh.epochs = fv.epochs = 2;
    CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK, "fits on changed data");
    CHECK(dev->resident.sets[0].dev && dev->resident.sets[0].hash != hash, "changed data copied again");
    CHECK(same_runs(host, dev, &lh, &lv, val), "the same bits on changed data");
    train->x[5] = kept;

    /* Too big: 4 KiB of free memory. In fp16 the training set takes 16 KiB
       (5.2 KiB of 16-bit x, its labels and the fp32 scratch it is narrowed
       through), the validation set 5.5 KiB. */
    mirror_model_destroy(host);
    mirror_model_destroy(dev);
    host = model_of(s, &u), dev = model_of(s, &u);
    if (!host || !dev) return;
    mirror_set_logger(count_notices, NULL);
    mirror__cpu_free_bytes = 4096;
    fh.initial_epoch = fv.initial_epoch = 0, fh.epochs = fv.epochs = 3;
    CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK, "fits that do not fit");
    CHECK(!dev->resident.sets[0].dev && !dev->resident.sets[1].dev, "data beyond the free memory stay on the host");
    CHECK(notices == 2, "one notice for each set (%zu): %s", notices, last_notice);
    CHECK(strstr(last_notice, "MiB free") != NULL, "the notice says what was free: %s", last_notice);
    CHECK(same_runs(host, dev, &lh, &lv, val), "the same bits with the data on the host");
    fh.initial_epoch = fv.initial_epoch = 3, fh.epochs = fv.epochs = 4;
    CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK, "again");
    CHECK(notices == 2, "said once for a set (%zu notices)", notices);
    /* 8 KiB: the validation set, refused before, fits now; the training set, changed, does not */
    mirror__cpu_free_bytes = 8192;
    train->x[5] = 0.5f;
    fh.initial_epoch = fv.initial_epoch = 4, fh.epochs = fv.epochs = 5;
    CHECK(mirror_fit(host, &fh, &lh) == MIRROR_OK && mirror_fit(dev, &fv, &lv) == MIRROR_OK, "fits that half fit");
    CHECK(!dev->resident.sets[0].dev && dev->resident.sets[1].dev, "in 8 KiB the validation set fits, the training set does not");
    CHECK(notices == 3, "a notice for the changed training set (%zu)", notices);
    CHECK(same_runs(host, dev, &lh, &lv, val), "the same bits, the validation data on the device");
    mirror__cpu_free_bytes = 0;
    mirror_set_logger(NULL, NULL);
    train->x[5] = kept;

    /* a misuse: an unknown place */
    fv.data_on_device = (mirror_data_place)7;
    CHECK(mirror_fit(dev, &fv, &lv) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(dev), "data_on_device"),
          "an unknown data_on_device is refused: %s", mirror_model_error(dev));
    /* the default on CPU replicas: gathered in place, no copy */
    mirror_model_destroy(dev);
    dev = model_of(s, &u);
    fv.data_on_device = MIRROR_DATA_AUTO, fv.initial_epoch = 0, fv.epochs = 1;
    CHECK(dev && mirror_fit(dev, &fv, &lv) == MIRROR_OK && !dev->resident.sets[0].dev && !dev->resident.sets[1].dev,
          "CPU replicas by default: no copy");
    mirror_model_destroy(host);
    mirror_model_destroy(dev);
    mirror_strategy_destroy(s);
}

int main(void)
{
    static float x[COUNT * 2 * SIDE * SIDE], vx[VAL * 2 * SIDE * SIDE], t[COUNT * 4], vt[VAL * 4];
    static int32_t y[COUNT], vy[VAL];
    mirror_dataset train, val;
    make_data(&train, COUNT, 11, x, y, t);
    make_data(&val, VAL, 12, vx, vy, vt);
    test_same_bits(&train, &val);
    test_copy_is_read(&train, &val);
    test_keep_data(&train, &val);
    test_roles(&train, &val);
    test_changed_and_too_big(&train, &val);
    mirror_dataset_free(&train);
    mirror_dataset_free(&val);
    return check_done("test_device_data");
}
