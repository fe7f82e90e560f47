/* test_norm.c - batch normalisation and residual blocks beyond their
   gradients (test_layers checks those by finite differences): SyncBatchNorm
   on 1 to 4 replicas, uneven and empty shards, against one replica; the
   local mode alike on one replica and split-dependent on several; the
   running statistics and evaluation against values worked out here; a
   failed step that leaves them as they were; checkpoints and a model
   rebuilt from one; mixed precision; deterministic mode against the mode
   without it, step by step (they part only at a relu's tie); fit with
   batchnorm, dropout and augmentation on 1, 2 and 3 replicas; and every
   misuse refused. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "digits.h"
#include "files.h"
#include "resnet_case.h"

#include <math.h>
#include <string.h>

enum { SIDE = 12, SAMPLES = 96 };

static mirror_dataset data;

static float zero_rate(void *user, uint64_t step)
{
    (void)user, (void)step;
    return 0.0f;
}

/* Deterministic mode's chunk for the models made next (0: off). */
static size_t det_chunk;

/* A small ResNet over the 12x12 digits: conv, batchnorm, relu, an
   identity block with batchnorm inside, a projecting block (8 -> 12
   channels, stride 2), optional dropout, global pooling, dense 10. */
static mirror_model *resnet(mirror_strategy *s, mirror_batchnorm_mode mode, float dropout, mirror_precision precision,
                            int lr_zero)
{
    const char *bn = mode == MIRROR_BN_LOCAL ? "batchnorm local" : "batchnorm";
    char drop[32] = "";
    mirror_model_desc md = model_desc(s, 1, SIDE, SIDE, 32, 4);
    md.precision = precision;
    md.deterministic = det_chunk > 0, md.chunk = det_chunk;
    md.optimizer = optimizer_of(MIRROR_OPT_SGD, 0.05f);
    if (lr_zero) md.optimizer.schedule = MIRROR_LR_CALLBACK, md.optimizer.lr_fn = zero_rate;
    if (dropout > 0.0f) snprintf(drop, sizeof drop, "dropout %g, ", (double)dropout);
    return build_model(&md, NULL,
                       "conv 8 3 1 1, %s, relu, "
                       "residual, conv 8 3 1 1, %s, relu, conv 8 3 1 1, %s, residual_end, relu, "
                       "residual, conv 12 3 2 1, %s, relu, residual_end, relu, "
                       "global_avgpool, flatten, %sdense 10",
                       bn, bn, bn, bn, drop);
}

static mirror_batch batch_of(size_t first, size_t n)
{
    mirror_batch b;
    memset(&b, 0, sizeof b);
    b.x = data.x + first * SIDE * SIDE;
    b.labels = data.labels + first;
    b.n = n;
    return b;
}

static float *params_of(mirror_model *m, size_t replica)
{
    size_t n = mirror_num_parameters(m);
    float *p = (float *)malloc(n * sizeof(float));
    if (p) mirror_get_parameters(m, replica, p, n);
    return p;
}

/* The largest |a - b| relative to 1 + |b| over two models' parameters,
   or their running statistics. */
static double apart_floats(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

static double apart(mirror_model *a, mirror_model *b)
{
    float *pa = params_of(a, 0), *pb = params_of(b, 0);
    double d = pa && pb ? apart_floats(pa, pb, mirror_num_parameters(a)) : INFINITY;
    free(pa), free(pb);
    return d;
}

/* SyncBatchNorm: the gradient, the running statistics and the evaluation
   of 2, 3 and 4 replicas against one replica's, with batches that split
   unevenly (7) and leave a replica empty (3 on 4). */
static void test_sync(void)
{
    static const size_t batches[2] = {7, 3};
    mirror_strategy *s1 = checked_strategy("cpu", 1);
    size_t bi, r, np = 0;
    float *g1 = NULL, *gr = NULL;
    for (r = 2; r <= 4; r++) {
        mirror_strategy *s = checked_strategy("cpu", r);
        mirror_model *m = resnet(s, MIRROR_BN_SYNC, 0.0f, MIRROR_PRECISION_FP32, 0);
        mirror_model *one = resnet(s1, MIRROR_BN_SYNC, 0.0f, MIRROR_PRECISION_FP32, 0);
        if (!m || !one) {
            CHECK(0, "model of %zu replicas", r);
            mirror_model_destroy(m), mirror_model_destroy(one), mirror_strategy_destroy(s);
            continue;
        }
        np = mirror_num_parameters(one);
        g1 = (float *)realloc(g1, np * sizeof(float)), gr = (float *)realloc(gr, np * sizeof(float));
        for (bi = 0; bi < 2 && g1 && gr; bi++) {
            mirror_batch b = batch_of(10 * bi, batches[bi]);
            mirror_metrics e1 = {0.0, 0, 0}, er = {0.0, 0, 0};
            CHECK(mirror_train_step(one, &b, NULL) == MIRROR_OK && mirror_train_step(m, &b, NULL) == MIRROR_OK,
                  "steps: %s %s", mirror_model_error(one), mirror_model_error(m));
            mirror_get_gradients(one, 0, g1, np);
            mirror_get_gradients(m, r - 1, gr, np);
            CHECK(apart_floats(gr, g1, np) <= 1e-5, "%zu replicas, batch %zu: the gradient of one replica (%.2g apart)",
                  r, batches[bi], apart_floats(gr, g1, np));
            CHECK(apart_floats(m->bn.running, one->bn.running, one->bn.nrunning) <= 1e-6,
                  "%zu replicas, batch %zu: the running statistics of one replica (%.2g apart)", r, batches[bi],
                  apart_floats(m->bn.running, one->bn.running, one->bn.nrunning));
            b = batch_of(40, 20);
            CHECK(mirror_evaluate_batch(one, &b, &e1) == MIRROR_OK && mirror_evaluate_batch(m, &b, &er) == MIRROR_OK &&
                      fabs(e1.loss_sum - er.loss_sum) <= 1e-5 * (1.0 + fabs(e1.loss_sum)),
                  "%zu replicas: evaluation by the running statistics, as one replica (%.9g, %.9g)", r, er.loss_sum,
                  e1.loss_sum);
        }
        mirror_model_destroy(m), mirror_model_destroy(one);
        mirror_strategy_destroy(s);
    }
    free(g1), free(gr);
    mirror_strategy_destroy(s1);
}

/* The local mode: on one replica the synchronised layer's bits; on three
   each replica's shard alone, so another gradient (the dependence on the
   split the manual states), while the running statistics still follow the
   global batch and stay equal on every replica. */
static void test_local(void)
{
    mirror_strategy *s1 = checked_strategy("cpu", 1), *s3 = checked_strategy("cpu", 3);
    mirror_model *sync = resnet(s1, MIRROR_BN_SYNC, 0.0f, MIRROR_PRECISION_FP32, 0);
    mirror_model *local = resnet(s1, MIRROR_BN_LOCAL, 0.0f, MIRROR_PRECISION_FP32, 0);
    mirror_model *local3 = resnet(s3, MIRROR_BN_LOCAL, 0.0f, MIRROR_PRECISION_FP32, 0);
    mirror_batch b = batch_of(0, 12);
    size_t np;
    float *ga, *gb;
    if (!sync || !local || !local3) {
        CHECK(0, "models");
        goto out;
    }
    np = mirror_num_parameters(sync);
    ga = (float *)malloc(np * sizeof(float)), gb = (float *)malloc(np * sizeof(float));
    CHECK(mirror_train_step(sync, &b, NULL) == MIRROR_OK && mirror_train_step(local, &b, NULL) == MIRROR_OK &&
              mirror_train_step(local3, &b, NULL) == MIRROR_OK,
          "steps");
    mirror_get_gradients(sync, 0, ga, np);
    mirror_get_gradients(local, 0, gb, np);
    CHECK(memcmp(ga, gb, np * sizeof(float)) == 0 && memcmp(sync->bn.running, local->bn.running, sync->bn.nrunning * 4) == 0,
          "local on one replica: the synchronised gradient and running statistics, bit for bit");
    mirror_get_gradients(local3, 0, gb, np);
    CHECK(apart_floats(gb, ga, np) > 1e-3, "local on 3 replicas: each shard's own statistics, another gradient (%.2g)",
          apart_floats(gb, ga, np));
    CHECK(apart_floats(local3->bn.running, sync->bn.running, 16) <= 1e-6,
          "local on 3 replicas: the first layer's running statistics are the global batch's (%.2g)",
          apart_floats(local3->bn.running, sync->bn.running, 16));
    CHECK(mirror_check_replicas(local3) == MIRROR_OK, "local on 3 replicas: the replicas stay equal: %s",
          mirror_model_error(local3));
    free(ga), free(gb);
out:
    mirror_model_destroy(sync), mirror_model_destroy(local), mirror_model_destroy(local3);
    mirror_strategy_destroy(s1), mirror_strategy_destroy(s3);
}

/* One batchnorm layer on 3 features, MSE: a step at lr 0 moves the running
   statistics to 0.9 r + 0.1 batch (unbiased variance), worked out here;
   prediction then normalises by them; a step on a NaN sample fails and
   leaves them as they were. */
static void test_running(void)
{
    static const float x[4][3] = {{1, -2, 0.5f}, {3, 0, 0.5f}, {-1, 4, 0.5f}, {5, 2, 0.5f}};
    float t[4][3], y[4][3], mean[3], var[3], before[6], bad[4][3];
    mirror_strategy *s = checked_strategy("cpu", 2);
    mirror_model_desc md;
    mirror_model *m = NULL;
    mirror_batch b;
    size_t i, c, wrong = 0;
    memset(&md, 0, sizeof md);
    memset(t, 0, sizeof t);
    md.strategy = s;
    md.channels = 3, md.height = md.width = 1;
    md.max_batch = 4;
    md.loss = MIRROR_LOSS_MSE;
    md.optimizer.kind = MIRROR_OPT_SGD;
    md.optimizer.schedule = MIRROR_LR_CALLBACK, md.optimizer.lr_fn = zero_rate;
    if (mirror_model_create(&md, &m, NULL) || mirror_batchnorm(m, MIRROR_BN_SYNC) || mirror_model_build(m)) {
        CHECK(0, "model");
        goto out;
    }
    memset(&b, 0, sizeof b);
    b.x = &x[0][0], b.targets = &t[0][0], b.n = 4;
    CHECK(mirror_train_step(m, &b, NULL) == MIRROR_OK, "step: %s", mirror_model_error(m));
    for (c = 0; c < 3; c++) {
        double sum = 0.0, sq = 0.0;
        for (i = 0; i < 4; i++) sum += x[i][c];
        for (i = 0; i < 4; i++) sq += (x[i][c] - sum / 4) * (x[i][c] - sum / 4);
        mean[c] = (float)(0.1 * sum / 4), var[c] = (float)(0.9 + 0.1 * sq / 3);
        if (fabsf(m->bn.running[c] - mean[c]) > 1e-6f || fabsf(m->bn.running[3 + c] - var[c]) > 1e-6f) wrong++;
    }
    CHECK(wrong == 0, "running mean and variance after one step: 0.9 r + 0.1 batch (mean %g %g %g, var %g %g %g)",
          (double)m->bn.running[0], (double)m->bn.running[1], (double)m->bn.running[2], (double)m->bn.running[3],
          (double)m->bn.running[4], (double)m->bn.running[5]);
    CHECK(mirror_predict(m, &x[0][0], 4, &y[0][0]) == MIRROR_OK, "predict: %s", mirror_model_error(m));
    for (wrong = 0, i = 0; i < 4; i++)
        for (c = 0; c < 3; c++)
            if (fabsf(y[i][c] - (x[i][c] - mean[c]) / sqrtf(var[c] + 1e-5f)) > 1e-5f) wrong++;
    CHECK(wrong == 0, "prediction normalises by the running statistics (y[0] = %g %g %g)", (double)y[0][0],
          (double)y[0][1], (double)y[0][2]);
    memcpy(before, m->bn.running, sizeof before);
    memcpy(bad, x, sizeof bad);
    bad[2][1] = NAN;
    b.x = &bad[0][0];
    CHECK(mirror_train_step(m, &b, NULL) == MIRROR_ERR_NOT_FINITE && memcmp(before, m->bn.running, sizeof before) == 0,
          "a NaN sample: the step fails and the running statistics stay as they were");
    CHECK(mirror_predict(m, &x[0][0], 4, &t[0][0]) == MIRROR_OK && memcmp(t, y, sizeof y) == 0,
          "and prediction still normalises by them");
out:
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* A checkpoint keeps gamma, beta and the running statistics: a model of
   the same layers that loads it, and one rebuilt from it, predict the same
   bits; resuming from it continues as the model that wrote it. */
static void test_checkpoint(void)
{
    mirror_strategy *s2 = checked_strategy("cpu", 2), *s3 = checked_strategy("cpu", 3);
    mirror_model *a = resnet(s2, MIRROR_BN_SYNC, 0.0f, MIRROR_PRECISION_FP32, 0);
    mirror_model *b = resnet(s3, MIRROR_BN_SYNC, 0.0f, MIRROR_PRECISION_FP32, 0), *c = NULL;
    float *pa = (float *)malloc(20 * 10 * sizeof(float)), *pb = (float *)malloc(20 * 10 * sizeof(float));
    char path[256];
    size_t k;
    if (!a || !b || !pa || !pb) {
        CHECK(0, "models");
        goto out;
    }
    path_in(path, "resnet.ckpt");
    for (k = 0; k < 4; k++) {
        mirror_batch bt = batch_of(8 * k, 8);
        CHECK(mirror_train_step(a, &bt, NULL) == MIRROR_OK, "step %zu", k);
    }
    CHECK(mirror_checkpoint_save(a, path, NULL, 0) == MIRROR_OK, "save: %s", mirror_model_error(a));
    CHECK(mirror_checkpoint_load(b, path, 0, NULL) == MIRROR_OK && memcmp(a->bn.running, b->bn.running, a->bn.nrunning * 4) == 0,
          "load: the running statistics, bit for bit: %s", mirror_model_error(b));
    CHECK(mirror_predict(a, data.x + 50 * SIDE * SIDE, 20, pa) == MIRROR_OK &&
              mirror_predict(b, data.x + 50 * SIDE * SIDE, 20, pb) == MIRROR_OK &&
              memcmp(pa, pb, 200 * sizeof(float)) == 0,
          "loaded on 3 replicas: the same predictions, bit for bit");
    CHECK(mirror_model_from_checkpoint(s2, path, 16, &c, NULL, NULL) == MIRROR_OK && c &&
              mirror_predict(c, data.x + 50 * SIDE * SIDE, 20, pb) == MIRROR_OK &&
              memcmp(pa, pb, 200 * sizeof(float)) == 0,
          "rebuilt from the checkpoint: batchnorm and residual blocks, the same predictions");
    for (k = 4; k < 7; k++) {
        mirror_batch bt = batch_of(8 * k, 8);
        CHECK(mirror_train_step(a, &bt, NULL) == MIRROR_OK && mirror_train_step(b, &bt, NULL) == MIRROR_OK, "step %zu", k);
    }
    CHECK(apart(a, b) <= 1e-5 && apart_floats(a->bn.running, b->bn.running, a->bn.nrunning) <= 1e-6,
          "resumed on 3 replicas: three more steps as the model that saved it (%.2g)", apart(a, b));
out:
    free(pa), free(pb);
    mirror_model_destroy(a), mirror_model_destroy(b), mirror_model_destroy(c);
    mirror_strategy_destroy(s2), mirror_strategy_destroy(s3);
}

/* Deterministic mode: the ResNet with SyncBatchNorm and dropout on 1, 2,
   3 and 4 replicas, batches of 13 in chunks of 4 (shards of 8 + 4 + 1,
   uneven and one empty): the parameters, the running statistics and the
   predictions bit for bit those of one replica. */
static void test_deterministic(void)
{
    float *ref = NULL, *run = NULL, *pred = NULL;
    size_t r, k, np = 0;
    det_chunk = 4;
    for (r = 1; r <= 4; r++) {
        mirror_strategy *s = checked_strategy("cpu", r);
        mirror_model *m = resnet(s, MIRROR_BN_SYNC, 0.2f, MIRROR_PRECISION_FP32, 0);
        float *p, *out = (float *)malloc(20 * 10 * sizeof(float));
        int ok = m != NULL && out != NULL;
        for (k = 0; ok && k < 6; k++) {
            mirror_batch b = batch_of(13 * k, 13);
            ok = mirror_train_step(m, &b, NULL) == MIRROR_OK;
        }
        ok = ok && mirror_predict(m, data.x + 70 * SIDE * SIDE, 20, out) == MIRROR_OK;
        CHECK(ok, "deterministic resnet on %zu replicas: 6 steps and a prediction", r);
        if (ok) {
            np = mirror_num_parameters(m);
            p = params_of(m, 0);
            if (!ref) {
                ref = p, run = (float *)malloc(m->bn.nrunning * sizeof(float)), pred = out, out = NULL;
                if (run) memcpy(run, m->bn.running, m->bn.nrunning * sizeof(float));
            } else {
                CHECK(p && !memcmp(p, ref, np * sizeof(float)) && run &&
                          !memcmp(m->bn.running, run, m->bn.nrunning * sizeof(float)) &&
                          !memcmp(out, pred, 200 * sizeof(float)),
                      "deterministic resnet (SyncBatchNorm, dropout): %zu replicas give 1 replica's parameters, "
                      "running statistics and predictions, bit for bit",
                      r);
                free(p);
            }
        }
        free(out);
        mirror_model_destroy(m);
        mirror_strategy_destroy(s);
    }
    det_chunk = 0;
    free(ref), free(run), free(pred);
}

/* Deterministic mode against the mode without it, step by step, on a
   ResNet as one is trained: conv 8, batchnorm, relu; an identity block and
   a projecting one (8 -> 16 channels, stride 2) of conv, batchnorm, relu;
   global pooling, dense 10; SGD with Nesterov momentum 0.9, weight decay
   1e-4, rate 0.05; 20 steps of 50 samples, the last two 49 and 2. The two
   modes compute the same formulas and add them up in other orders (the
   weight gradients chunk by chunk or sample by sample, the replicas'
   sums), so they agree within float32 rounding, until a relu's input that
   lies within rounding of 0 falls on one side in one mode and on the
   other in the other: its gradient then passes in one and not in the
   other (torch's rule alike, mirror_hd_relu_grad), and from that step on
   the runs part by far more than rounding. On these digits (seed 23;
   make's -O3 -march=native on an x86-64 with AVX2 and FMA) 1 replica's run
   meets one at step 17 in the identity block's relu (6.2e-8 there, -1.8e-8
   in deterministic mode, -7.3e-8 in float64) and 2 and 3 replicas one at
   step 9 (-3.6e-8 and -9.3e-8, 9.4e-8 in float64): after 20 steps they end
   3e-5 and 5.4e-4 from float64's parameters, and deterministic mode,
   which meets none, within 1.1e-7 (tests/interop/test_resnet.py). Which
   run meets a tie, and where, depends on the order of its sums, so on the
   compiler and the CPU: each step checks that no relu's input changes sign
   unless it is within 1e-5 of 0 in both runs, and, until one has, that the
   parameters agree within 2e-6. */
static void test_modes(void)
{
    mirror_dataset set;
    float *za = (float *)malloc(RESNET_RELUS * sizeof(float)), *zb = (float *)malloc(RESNET_RELUS * sizeof(float));
    size_t R;
    small_digits(&set, RESNET_SAMPLES, 23, RESNET_SIDE, 2);
    for (R = 1; R <= 3 && za && zb; R++) {
        mirror_strategy *s = checked_strategy("cpu", R), *s1 = checked_strategy("cpu", 1);
        mirror_model *a = resnet_model(s, 0, NULL), *b = resnet_model(s1, 16, NULL);
        size_t k, i, n, first = 0, nz = 0, split = 0;
        double worst = 0.0, tie = 0.0;
        int ok = a && b;
        for (k = 0; ok && !split && k < RESNET_STEPS; k++, first += n) {
            mirror_batch batch;
            n = resnet_rows(k);
            memset(&batch, 0, sizeof batch);
            batch.x = set.x + first * RESNET_SIDE * RESNET_SIDE, batch.labels = set.labels + first, batch.n = n;
            ok = mirror_train_step(a, &batch, NULL) == MIRROR_OK && mirror_train_step(b, &batch, NULL) == MIRROR_OK &&
                 (nz = resnet_relu_inputs(a, za)) > 0 && resnet_relu_inputs(b, zb) == nz;
            for (i = 0; ok && i < nz; i++) /* where the runs' relus go different ways, this step's gradients part */
                if ((za[i] > 0.0f) != (zb[i] > 0.0f)) {
                    double far = MIRROR__MAX(fabs((double)za[i]), fabs((double)zb[i]));
                    split = k + 1;
                    if (!(far <= tie)) tie = far;
                }
            if (ok && !split && !(apart(a, b) <= worst)) worst = apart(a, b);
        }
        CHECK(ok, "%zu replicas and deterministic mode: the steps (%s; %s)", R, a ? mirror_model_error(a) : "no model",
              b ? mirror_model_error(b) : "no model");
        CHECK(worst <= 2e-6 && tie <= 1e-5,
              "%zu replicas against deterministic mode: within %.2g of its parameters over %zu steps, then %s%.2g "
              "from 0 (a relu's tie within rounding, within 1e-5)",
              R, worst, split ? split - 1 : (size_t)RESNET_STEPS, split ? "a relu's input of opposite sign, " : "no split, ",
              tie);
        mirror_model_destroy(a), mirror_model_destroy(b);
        mirror_strategy_destroy(s), mirror_strategy_destroy(s1);
    }
    CHECK(za && zb, "memory for the relus' inputs");
    free(za), free(zb);
    mirror_dataset_free(&set);
}

/* fit with SyncBatchNorm, dropout and augmentation ends with the same loss
   and parameters on 1, 2 and 3 replicas (within 1e-4); in fp16 and bf16 a
   batchnorm ResNet trains as in fp32 (the loss falls alike: after 12
   epochs, from a chance loss of 2.30, six seeds built at -O1 and at -O3
   ended at 1.0 to 1.46 in fp32, and fp16 and bf16 within 0.002 to 0.034
   of fp32, once 0.109: the bound is 0.15). */
static void test_fit(void)
{
    mirror_strategy *s[3];
    mirror_model *m[3];
    mirror_epoch_log log[3];
    mirror_fit_desc fd;
    size_t r;
    int p;
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 2, fd.batch = 16, fd.progress = MIRROR_PROGRESS_NONE;
    fd.augment_flip = 1, fd.augment_crop_pad = 2;
    for (r = 0; r < 3; r++) {
        s[r] = checked_strategy("cpu", r + 1);
        m[r] = resnet(s[r], MIRROR_BN_SYNC, 0.3f, MIRROR_PRECISION_FP32, 0);
        CHECK(m[r] && mirror_fit(m[r], &fd, &log[r]) == MIRROR_OK, "fit on %zu replicas: %s", r + 1,
              m[r] ? mirror_model_error(m[r]) : "no model");
    }
    for (r = 1; r < 3 && m[0] && m[r]; r++)
        CHECK(fabs(log[r].train_loss - log[0].train_loss) <= 1e-4 && apart(m[r], m[0]) <= 1e-4,
              "%zu replicas: the loss of one (%.7f, %.7f), parameters within 1e-4 (%.2g)", r + 1, log[r].train_loss,
              log[0].train_loss, apart(m[r], m[0]));
    for (r = 0; r < 3; r++) mirror_model_destroy(m[r]), mirror_strategy_destroy(s[r]);
    fd.augment_flip = 0, fd.augment_crop_pad = 0, fd.epochs = 12;
    for (p = 0; p < 3; p++) {
        static const mirror_precision precisions[3] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16,
                                                       MIRROR_PRECISION_BF16};
        static double fp32_loss;
        mirror_strategy *s2 = checked_strategy("cpu", 2);
        mirror_model *h = resnet(s2, MIRROR_BN_SYNC, 0.0f, precisions[p], 0);
        mirror_epoch_log last;
        memset(&last, 0, sizeof last);
        CHECK(h && mirror_fit(h, &fd, &last) == MIRROR_OK, "%s fit: %s", mirror_precision_name(precisions[p]),
              h ? mirror_model_error(h) : "no model");
        if (!p) fp32_loss = last.train_loss;
        CHECK(last.train_loss < 0.7 * 2.302585 /* ln 10: chance */ && fabs(last.train_loss - fp32_loss) < 0.15,
              "%s: the batchnorm ResNet trains as in fp32 (loss %.4f after 12 epochs, fp32 %.4f)",
              mirror_precision_name(precisions[p]), last.train_loss, fp32_loss);
        mirror_model_destroy(h);
        mirror_strategy_destroy(s2);
    }
}

/* Normal deviates from a fixed xorshift (Box-Muller): the offset data. */
static uint64_t normal_state = 88172645463325252ull;
static double uniform_open(void)
{
    normal_state ^= normal_state << 13, normal_state ^= normal_state >> 7, normal_state ^= normal_state << 17;
    return ((double)(normal_state >> 11) + 0.5) / 9007199254740992.0;
}
static double normal(void) { return sqrt(-2.0 * log(uniform_open())) * cos(6.283185307179586 * uniform_open()); }

enum { OF = 6, OD = 3, OB = 16 }; /* features, outputs, batch */

/* In float64: batchnorm by the statistics of each shard (rows [begin[k],
   begin[k] + count[k])), then the dense layer and MSE, at parameters p:
   the loss sum. */
static double offset_loss(float x[OB][OF], float t[OB][OD], const float *p, const mirror__layer *bn,
                          const mirror__layer *dense, const size_t *begin, const size_t *count, size_t shards)
{
    double y[OB][OF], loss = 0.0;
    size_t k, i, j, c;
    for (k = 0; k < shards; k++)
        for (c = 0; c < OF; c++) {
            size_t lo = begin[k], hi = begin[k] + count[k];
            double sum = 0.0, m2 = 0.0, mean;
            for (i = lo; i < hi; i++) sum += x[i][c];
            mean = sum / (double)count[k];
            for (i = lo; i < hi; i++) m2 += (x[i][c] - mean) * (x[i][c] - mean);
            for (i = lo; i < hi; i++)
                y[i][c] = p[bn->w_off + c] * (x[i][c] - mean) / sqrt(m2 / (double)count[k] + 1e-5) + p[bn->b_off + c];
        }
    for (i = 0; i < OB; i++)
        for (j = 0; j < OD; j++) {
            double z = p[dense->b_off + j];
            for (c = 0; c < OF; c++) z += p[dense->w_off + j * OF + c] * y[i][c];
            loss += (z - t[i][j]) * (z - t[i][j]) / OD;
        }
    return loss;
}

/* Batchnorm on raw features of a large mean (BatchNorm1d first): mean 20
   and 100, deviation 1, then dense, MSE; momentum 1, so the running
   variance is the batch's unbiased variance. A step's loss within 1e-6 and
   the running variance within 5e-7 of float64 worked out here (from
   E[x^2] - E[x]^2 of float32 squares the variance was 3e-6 and 1e-4 off,
   the loss up to 6e-5), on 1 and 3 replicas, synchronised and local (each
   shard's statistics), and in deterministic mode, where 3 replicas give 1
   replica's bits. */
static void test_offset(void)
{
    static const struct {
        size_t replicas, chunk;
        int local;
    } runs[6] = {{1, 0, 0}, {3, 0, 0}, {3, 0, 1}, {1, 4, 0}, {3, 4, 0}, {2, 4, 1}};
    static const double means[2] = {20.0, 100.0};
    float x[OB][OF], t[OB][OD], p[OF * 2 + OF * OD + OD], det[2][OF * 2 + OF * OD + OD + 2 * OF];
    size_t mi, ri, i, j;
    for (mi = 0; mi < 2; mi++) {
        for (i = 0; i < OB; i++) {
            for (j = 0; j < OF; j++) x[i][j] = (float)(means[mi] + normal());
            for (j = 0; j < OD; j++) t[i][j] = (float)normal();
        }
        for (ri = 0; ri < 6; ri++) {
            mirror_strategy *s = checked_strategy("cpu", runs[ri].replicas);
            mirror_model_desc md;
            mirror_model *m = NULL;
            mirror_metrics met;
            mirror_batch b;
            size_t begin[3] = {0, 0, 0}, count[3] = {OB, 0, 0}, shards = 1, g, c0, nc, np;
            double ref, var_worst = 0.0;
            memset(&md, 0, sizeof md);
            md.strategy = s;
            md.channels = OF, md.height = md.width = 1;
            md.max_batch = OB;
            md.loss = MIRROR_LOSS_MSE;
            md.seed = 3;
            md.deterministic = runs[ri].chunk > 0, md.chunk = runs[ri].chunk;
            md.optimizer.kind = MIRROR_OPT_SGD;
            md.optimizer.lr = 0.1f;
            if (mirror_model_create(&md, &m, NULL) || mirror__batchnorm(m, 1.0f, 1e-5f, runs[ri].local) ||
                mirror_dense(m, OD) || mirror_model_build(m)) {
                CHECK(0, "offset model: %s", mirror_model_error(m));
                mirror_model_destroy(m), mirror_strategy_destroy(s);
                continue;
            }
            np = mirror_num_parameters(m);
            mirror_get_parameters(m, 0, p, np);
            for (g = 0; runs[ri].local && g < runs[ri].replicas; g++)
                mirror__rows_of(m, OB, g, &begin[g], &count[g], &c0, &nc), shards = runs[ri].replicas;
            ref = offset_loss(x, t, p, &m->layers[0], &m->layers[1], begin, count, shards);
            memset(&b, 0, sizeof b);
            b.x = &x[0][0], b.targets = &t[0][0], b.n = OB;
            CHECK(mirror_train_step(m, &b, &met) == MIRROR_OK, "offset step: %s", mirror_model_error(m));
            for (j = 0; j < OF; j++) {
                double sum = 0.0, m2 = 0.0, d;
                for (i = 0; i < OB; i++) sum += x[i][j];
                for (i = 0; i < OB; i++) m2 += (x[i][j] - sum / OB) * (x[i][j] - sum / OB);
                d = fabs(m->bn.running[OF + j] - m2 / (OB - 1)) / (m2 / (OB - 1));
                if (!(d <= var_worst)) var_worst = d;
            }
            CHECK(fabs(met.loss_sum - ref) <= 1e-6 * ref && var_worst <= 5e-7,
                  "mean %g, %zu replicas%s%s: the loss %.9g of float64's %.9g (%.2g apart), the running variance "
                  "within %.2g",
                  means[mi], runs[ri].replicas, runs[ri].local ? ", local" : "",
                  runs[ri].chunk ? ", deterministic" : "",
                  met.loss_sum, ref, fabs(met.loss_sum - ref) / ref, var_worst);
            if (runs[ri].chunk && !runs[ri].local) { /* the parameters after the step, the running statistics */
                float *keep = det[runs[ri].replicas > 1];
                mirror_get_parameters(m, 0, keep, np);
                memcpy(keep + np, m->bn.running, 2 * OF * sizeof(float));
                if (runs[ri].replicas > 1)
                    CHECK(!memcmp(det[0], det[1], sizeof det[0]),
                          "mean %g, deterministic: 3 replicas give 1 replica's parameters and running statistics, "
                          "bit for bit",
                          means[mi]);
            }
            mirror_model_destroy(m);
            mirror_strategy_destroy(s);
        }
    }
}

/* A batchnorm layer over one value per channel (a flat input of one
   sample: the global batch, or a replica's shard in local mode) would
   output beta whatever the input: the step is refused with a message and
   changes nothing, as fit is before its first step where the last batch
   is that one; a plane of more values (BatchNorm2d) on one sample and an
   empty shard are fine. */
static void test_one_value(void)
{
    float x[5][4], t[5][2], p0[64], p1[64], run[8];
    mirror_strategy *s1 = checked_strategy("cpu", 1), *s2 = checked_strategy("cpu", 2);
    mirror_model *sync = NULL, *local = NULL, *conv = NULL;
    mirror_model_desc md;
    mirror_dataset ds;
    mirror_fit_desc fd;
    mirror_batch b;
    size_t i, np;
    for (i = 0; i < 20; i++) (&x[0][0])[i] = (float)normal();
    for (i = 0; i < 10; i++) (&t[0][0])[i] = (float)normal();
    memset(&md, 0, sizeof md);
    md.channels = 4, md.height = md.width = 1;
    md.max_batch = 5;
    md.loss = MIRROR_LOSS_MSE;
    md.optimizer.kind = MIRROR_OPT_SGD, md.optimizer.lr = 0.1f;
    md.strategy = s1;
    if (mirror_model_create(&md, &sync, NULL) || mirror_batchnorm(sync, MIRROR_BN_SYNC) || mirror_dense(sync, 2) ||
        mirror_model_build(sync)) {
        CHECK(0, "model: %s", mirror_model_error(sync));
        goto out;
    }
    md.strategy = s2;
    if (mirror_model_create(&md, &local, NULL) || mirror_batchnorm(local, MIRROR_BN_LOCAL) ||
        mirror_dense(local, 2) || mirror_model_build(local)) {
        CHECK(0, "model: %s", mirror_model_error(local));
        goto out;
    }
    memset(&b, 0, sizeof b);
    b.x = &x[0][0], b.targets = &t[0][0], b.n = 1;
    np = mirror_num_parameters(sync);
    mirror_get_parameters(sync, 0, p0, np);
    memcpy(run, sync->bn.running, sizeof run);
    CHECK(mirror_train_step(sync, &b, NULL) == MIRROR_ERR_ARGUMENT &&
              strstr(mirror_model_error(sync), "single value per channel"),
          "synchronised, a batch of 1: refused: %s", mirror_model_error(sync));
    mirror_get_parameters(sync, 0, p1, np);
    CHECK(!memcmp(p0, p1, np * sizeof(float)) && !memcmp(run, sync->bn.running, sizeof run) && sync->steps == 0,
          "and nothing changed");
    b.n = 2;
    CHECK(mirror_train_step(sync, &b, NULL) == MIRROR_OK, "a batch of 2: %s", mirror_model_error(sync));
    b.n = 3; /* shards of 2 and 1 */
    mirror_get_parameters(local, 0, p0, np);
    CHECK(mirror_train_step(local, &b, NULL) == MIRROR_ERR_ARGUMENT &&
              strstr(mirror_model_error(local), "replica 1 a shard of 1 sample") &&
              strstr(mirror_model_error(local), "MIRROR_BN_LOCAL"),
          "local on 2 replicas, a batch of 3: refused: %s", mirror_model_error(local));
    mirror_get_parameters(local, 0, p1, np);
    CHECK(!memcmp(p0, p1, np * sizeof(float)) && local->steps == 0, "and nothing changed");
    b.n = 4;
    CHECK(mirror_train_step(local, &b, NULL) == MIRROR_OK, "a batch of 4: %s", mirror_model_error(local));
    memset(&ds, 0, sizeof ds);
    ds.x = &x[0][0], ds.targets = &t[0][0], ds.count = 5, ds.channels = 4, ds.height = ds.width = 1, ds.target_dim = 2;
    memset(&fd, 0, sizeof fd);
    fd.train = &ds, fd.batch = 2, fd.progress = MIRROR_PROGRESS_NONE;
    mirror_get_parameters(sync, 0, p0, np);
    CHECK(mirror_fit(sync, &fd, NULL) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(sync), "last batch"),
          "fit, 5 samples in batches of 2: refused before the first step: %s", mirror_model_error(sync));
    mirror_get_parameters(sync, 0, p1, np);
    CHECK(!memcmp(p0, p1, np * sizeof(float)), "and nothing changed");
    fd.drop_remainder = 1;
    CHECK(mirror_fit(sync, &fd, NULL) == MIRROR_OK, "with drop_remainder: %s", mirror_model_error(sync));
    md.strategy = s2, md.channels = 1, md.height = md.width = 2, md.max_batch = 1;
    if (mirror_model_create(&md, &conv, NULL) || mirror_batchnorm(conv, MIRROR_BN_LOCAL) || mirror_flatten(conv) ||
        mirror_dense(conv, 2) || mirror_model_build(conv)) {
        CHECK(0, "model: %s", mirror_model_error(conv));
        goto out;
    }
    b.n = 1;
    CHECK(mirror_train_step(conv, &b, NULL) == MIRROR_OK,
          "a plane of 4 values, one sample on 2 replicas (one shard empty): trains: %s", mirror_model_error(conv));
out:
    mirror_model_destroy(sync), mirror_model_destroy(local), mirror_model_destroy(conv);
    mirror_strategy_destroy(s1), mirror_strategy_destroy(s2);
}

/* Misuse: every one refused with its error, the model usable or its
   first error kept. */
static void test_refused(void)
{
    mirror_strategy *s = checked_strategy("cpu", 1);
    mirror_model_desc md;
    mirror_model *m = NULL;
    memset(&md, 0, sizeof md);
    md.strategy = s;
    md.channels = 2, md.height = md.width = 5;
    md.max_batch = 4;
    CHECK(mirror_model_create(&md, &m, NULL) == MIRROR_OK, "model");
    CHECK(mirror_residual_end(m) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "no residual block is open"),
          "residual_end with no block open: %s", mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_model_create(&md, &m, NULL);
    CHECK(mirror_residual(m) == MIRROR_OK && mirror_residual(m) == MIRROR_ERR_ARGUMENT &&
              strstr(mirror_model_error(m), "do not nest"),
          "a block inside a block: %s", mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_model_create(&md, &m, NULL);
    mirror_residual(m), mirror_conv2d(m, 3, 3, 1, 1);
    CHECK(mirror_model_build(m) == MIRROR_ERR_STATE && strstr(mirror_model_error(m), "not closed"),
          "a block never closed: %s", mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_model_create(&md, &m, NULL);
    mirror_residual(m), mirror_conv2d(m, 3, 3, 1, 2); /* 5x5 -> 7x7: no stride reaches it */
    CHECK(mirror_residual_end(m) == MIRROR_ERR_SHAPE && strstr(mirror_model_error(m), "cannot be projected"),
          "a block whose output is larger than its input: %s", mirror_model_error(m));
    CHECK(mirror_model_build(m) == MIRROR_ERR_SHAPE, "and build returns that first error");
    mirror_model_destroy(m);
    mirror_model_create(&md, &m, NULL);
    CHECK(mirror_batchnorm(m, (mirror_batchnorm_mode)7) == MIRROR_ERR_ARGUMENT, "an unknown batchnorm mode");
    mirror_model_destroy(m);
    CHECK(mirror_batchnorm(NULL, MIRROR_BN_SYNC) == MIRROR_ERR_ARGUMENT && mirror_residual(NULL) == MIRROR_ERR_ARGUMENT &&
              mirror_residual_end(NULL) == MIRROR_ERR_ARGUMENT,
          "a NULL model");
    mirror_strategy_destroy(s);
}

int main(void)
{
    if (!make_root("norm")) return 1;
    small_digits(&data, SAMPLES, 5, SIDE, 2);
    test_sync();
    test_local();
    test_running();
    test_checkpoint();
    test_deterministic();
    test_modes();
    test_offset();
    test_one_value();
    test_fit();
    test_refused();
    mirror_dataset_free(&data);
    remove_tree(root);
    return check_done("test_norm");
}
