/* test_api.c - API misuse: every bad call returns an error (with a message)
   and never crashes, a failed call leaves its objects usable and unchanged,
   the defaults of the manual's DESC DEFAULTS table are applied, result
   codes are named, the logger sees errors, every optimizer and loss-scale
   bound holds at its edge, and nothing leaks. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, sysconf; mirror.h is not the first include */
#include "alloc_count.h"
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* A pointer that no call may leave behind in an out parameter. */
static char sentinel_byte;
#define SENTINEL ((void *)&sentinel_byte)

// >>logger ---------------------------------------------------------------------

static int log_errors, log_notices, log_user_ok;
static char log_last[sizeof ((mirror_error *)0)->message];
static void test_logger(void *user, int level, const char *message)
{
    log_user_ok = user == (void *)&log_errors;
    if (level == MIRROR_LOG_ERROR) log_errors++;
    if (level == MIRROR_LOG_NOTICE) log_notices++;
    snprintf(log_last, sizeof log_last, "%s", message);
}

// >>strategy ---------------------------------------------------------------------

/* mirror_strategy_create(devices, replicas) must fail with want; the message
   must contain mention when given. */
static void expect_strategy_fail(const char *devices, size_t replicas, int want, const char *mention)
{
    mirror_strategy_desc d;
    mirror_strategy *s = (mirror_strategy *)SENTINEL;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc;
    memset(&d, 0, sizeof d);
    d.devices = devices;
    d.num_replicas = replicas;
    rc = mirror_strategy_create(&d, &s, &err);
    CHECK(rc == want, "devices \"%s\", num_replicas %zu: got %d (%s), want %s", devices ? devices : "(NULL)",
          replicas, rc, mirror_result_string(rc), mirror_result_string(want));
    CHECK(s == NULL, "devices \"%s\": *out is NULL after the failure", devices ? devices : "(NULL)");
    CHECK(err.code == rc && err.message[0], "devices \"%s\": err gets the code and a message",
          devices ? devices : "(NULL)");
    if (mention)
        CHECK(strstr(err.message, mention) != NULL, "the message \"%s\" mentions %s", err.message, mention);
    CHECK(live_allocs == live, "devices \"%s\": nothing leaked", devices ? devices : "(NULL)");
    if (rc == MIRROR_OK && s != SENTINEL) mirror_strategy_destroy(s);
}

static void test_strategy(void)
{
    static const char *const bad[] = {"gpu", "cpu:0", "cpu:x", "cpu:4x", "cpu:99999", "cpu:4097",
                                      "cpu:", "cpu:-1", "cpu:+2", "cpu: 2", "cpu:2 ", "cpux", "CPU:2",
                                      "cpu:18446744073709551617", " cpu", "tpu:0"};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    size_t want_default = cores > 0 ? (size_t)cores : 1, i;
    mirror_strategy_desc d, q;
    mirror_strategy *s = (mirror_strategy *)SENTINEL;
    mirror_error err = {0, ""};
    char want_devices[32];

    unsetenv("MIRROR_DEVICES");
    CHECK(mirror_strategy_create(NULL, NULL, &err) == MIRROR_ERR_ARGUMENT && err.code == MIRROR_ERR_ARGUMENT &&
              err.message[0],
          "NULL out is an argument error");
    CHECK(mirror_strategy_create(NULL, NULL, NULL) == MIRROR_ERR_ARGUMENT, "NULL out, NULL err");

    for (i = 0; i < sizeof bad / sizeof *bad; i++) expect_strategy_fail(bad[i], 0, MIRROR_ERR_ARGUMENT, bad[i]);
    expect_strategy_fail("cpu:1,1", 0, MIRROR_ERR_ARGUMENT, "\",1\" after the replica count");
    expect_strategy_fail("cpu:4x", 0, MIRROR_ERR_ARGUMENT, "\"x\" after the replica count");
    expect_strategy_fail("cpu:4097", 0, MIRROR_ERR_ARGUMENT, "4097 replicas: the replica count must be 1 to 4096");
    expect_strategy_fail("cuda:0", 0, MIRROR_ERR_UNSUPPORTED, "CUDA");
    expect_strategy_fail("cuda", 0, MIRROR_ERR_UNSUPPORTED, "CUDA");
    expect_strategy_fail("cpu:3", 2, MIRROR_ERR_ARGUMENT, NULL);
    expect_strategy_fail("cpu:1", 4, MIRROR_ERR_ARGUMENT, NULL);
    expect_strategy_fail(NULL, 5000, MIRROR_ERR_ARGUMENT, NULL);
    expect_strategy_fail("cpu", (size_t)-1, MIRROR_ERR_ARGUMENT, NULL);

    s = new_strategy("cpu:3", 3);
    CHECK(s && mirror_num_replicas(s) == 3, "\"cpu:3\" with num_replicas 3 agrees: 3 replicas");
    mirror_strategy_destroy(s);
    s = new_strategy(NULL, 3);
    CHECK(s && mirror_num_replicas(s) == 3, "num_replicas 3 alone gives 3 replicas");
    q = mirror_strategy_query_desc(s);
    CHECK(q.devices && !strcmp(q.devices, "cpu:3") && q.num_replicas == 3, "query_desc: \"%s\", %zu",
          q.devices ? q.devices : "(NULL)", q.num_replicas);
    CHECK(mirror_strategy_describe(s)[0] != '\0', "describe: \"%s\"", mirror_strategy_describe(s));
    mirror_strategy_destroy(s);
    s = new_strategy("cpu", 2);
    CHECK(s && mirror_num_replicas(s) == 2, "\"cpu\" with num_replicas 2 gives 2");
    mirror_strategy_destroy(s);

    /* The default: one replica per online core, "cpu:N". */
    memset(&d, 0, sizeof d);
    s = (mirror_strategy *)SENTINEL;
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_OK, "zero desc: %s", err.message);
    snprintf(want_devices, sizeof want_devices, "cpu:%zu", want_default);
    q = mirror_strategy_query_desc(s);
    CHECK(mirror_num_replicas(s) == want_default && q.num_replicas == want_default,
          "the default is the %zu online cores (got %zu)", want_default, mirror_num_replicas(s));
    CHECK(q.devices && !strcmp(q.devices, want_devices), "query_desc fills devices \"%s\" (got \"%s\")",
          want_devices, q.devices ? q.devices : "(NULL)");
    mirror_strategy_destroy(s);
    s = (mirror_strategy *)SENTINEL;
    CHECK(mirror_strategy_create(NULL, &s, &err) == MIRROR_OK && mirror_num_replicas(s) == want_default,
          "NULL desc: the defaults");
    mirror_strategy_destroy(s);
    s = new_strategy("", 0);
    CHECK(s && mirror_num_replicas(s) == want_default, "an empty device list is the default");
    mirror_strategy_destroy(s);

    /* MIRROR_DEVICES when desc.devices is NULL. */
    setenv("MIRROR_DEVICES", "cpu:2", 1);
    s = (mirror_strategy *)SENTINEL;
    CHECK(mirror_strategy_create(NULL, &s, &err) == MIRROR_OK && mirror_num_replicas(s) == 2,
          "MIRROR_DEVICES=cpu:2, NULL desc: 2 replicas");
    q = mirror_strategy_query_desc(s);
    CHECK(q.devices && !strcmp(q.devices, "cpu:2") && q.num_replicas == 2, "query_desc reports \"cpu:2\", 2");
    mirror_strategy_destroy(s);
    s = new_strategy(NULL, 0);
    CHECK(s && mirror_num_replicas(s) == 2, "MIRROR_DEVICES=cpu:2, zero desc: 2 replicas");
    mirror_strategy_destroy(s);
    s = new_strategy("cpu:1", 0);
    CHECK(s && mirror_num_replicas(s) == 1, "desc.devices \"cpu:1\" wins over MIRROR_DEVICES");
    mirror_strategy_destroy(s);
    s = new_strategy(NULL, 3); /* an explicit count wins over the environment */
    CHECK(s && mirror_num_replicas(s) == 3, "num_replicas 3 wins over MIRROR_DEVICES=cpu:2");
    mirror_strategy_destroy(s);
    setenv("MIRROR_DEVICES", "bogus", 1);
    expect_strategy_fail(NULL, 0, MIRROR_ERR_ARGUMENT, "bogus");
    s = new_strategy("cpu:2", 0);
    CHECK(s && mirror_num_replicas(s) == 2, "a bad MIRROR_DEVICES is ignored when desc.devices is set");
    mirror_strategy_destroy(s);
    setenv("MIRROR_DEVICES", "cuda:0", 1);
    expect_strategy_fail(NULL, 0, MIRROR_ERR_UNSUPPORTED, "CUDA");
    setenv("MIRROR_DEVICES", "", 1);
    s = new_strategy(NULL, 0);
    CHECK(s && mirror_num_replicas(s) == want_default, "an empty MIRROR_DEVICES is the default");
    mirror_strategy_destroy(s);
    unsetenv("MIRROR_DEVICES");

    /* NULL strategy to every strategy function. */
    q = mirror_strategy_query_desc(NULL);
    CHECK(q.devices == NULL && q.num_replicas == 0, "query_desc(NULL) is zero");
    CHECK(mirror_num_replicas(NULL) == 0, "num_replicas(NULL) is 0");
    CHECK(mirror_strategy_describe(NULL) != NULL, "describe(NULL) is a string");
    {
        float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
        float *bufs[2], *holes[2];
        bufs[0] = a, bufs[1] = b, holes[0] = a, holes[1] = NULL;
        CHECK(mirror_all_reduce_sum(NULL, bufs, 4) == MIRROR_ERR_ARGUMENT, "all-reduce on a NULL strategy");
        CHECK(mirror_broadcast(NULL, bufs, 4, 0) == MIRROR_ERR_ARGUMENT, "broadcast on a NULL strategy");
        s = new_strategy("cpu:2", 0);
        CHECK(mirror_all_reduce_sum(s, NULL, 4) == MIRROR_ERR_ARGUMENT, "all-reduce of NULL buffers");
        CHECK(mirror_all_reduce_sum(s, holes, 4) == MIRROR_ERR_ARGUMENT && a[0] == 1.0f,
              "all-reduce with bufs[1] NULL: an error, nothing changed");
        CHECK(mirror_broadcast(s, bufs, 4, 2) == MIRROR_ERR_ARGUMENT && b[0] == 5.0f,
              "broadcast from root 2 of 2: an error, nothing changed");
        CHECK(mirror_all_reduce_sum(s, bufs, 4) == MIRROR_OK && a[0] == 6.0f && b[3] == 12.0f,
              "the strategy still reduces");
        mirror_strategy_destroy(s);
    }
}

// >>model creation -----------------------------------------------------------------

static mirror_model_desc base_desc(mirror_strategy *s)
{
    return model_desc(s, 4, 0, 0, 0, 0);
}

static void expect_create_fail(const char *what, const mirror_model_desc *d)
{
    mirror_model *m = (mirror_model *)SENTINEL;
    mirror_error err = {0, ""};
    long live = live_allocs;
    int rc = mirror_model_create(d, &m, &err);
    CHECK(rc == MIRROR_ERR_ARGUMENT, "%s: got %d (%s), want an argument error", what, rc, mirror_result_string(rc));
    CHECK(m == NULL, "%s: *out is NULL", what);
    CHECK(err.code == rc && err.message[0], "%s: err gets the code and a message", what);
    CHECK(live_allocs == live, "%s: nothing leaked", what);
    if (rc == MIRROR_OK && m != SENTINEL) mirror_model_destroy(m);
}

static void test_model_create(mirror_strategy *s)
{
    mirror_model_desc d;
    mirror_model *m;
    mirror_error err = {0, ""};

    d = base_desc(s);
    CHECK(mirror_model_create(&d, NULL, &err) == MIRROR_ERR_ARGUMENT && err.message[0], "NULL out");
    CHECK(mirror_model_create(&d, NULL, NULL) == MIRROR_ERR_ARGUMENT, "NULL out, NULL err");
    expect_create_fail("NULL desc", NULL);
    d.strategy = NULL;
    expect_create_fail("NULL strategy", &d);
    d = base_desc(s);
    d.channels = 0;
    expect_create_fail("channels 0", &d);
    d = base_desc(s);
    d.channels = (size_t)-1, d.height = 2;
    expect_create_fail("channels SIZE_MAX x height 2 (overflows)", &d);
    d = base_desc(s);
    d.channels = 1, d.height = (size_t)-1, d.width = (size_t)-1;
    expect_create_fail("height and width SIZE_MAX", &d);
    d = base_desc(s);
    d.channels = (size_t)1 << 20, d.height = (size_t)1 << 10;
    expect_create_fail("a 2^30-float input", &d);
    d = base_desc(s);
    d.channels = (size_t)1 << 16, d.height = (size_t)1 << 16, d.width = (size_t)1 << 16;
    expect_create_fail("65536^3 input (2^48 floats)", &d);
    d = base_desc(s);
    d.max_batch = ((size_t)1 << 24) + 1;
    expect_create_fail("max_batch 2^24 + 1", &d);
    d.max_batch = (size_t)-1;
    expect_create_fail("max_batch SIZE_MAX", &d);

    d = base_desc(s);
    d.loss = (mirror_loss)3;
    expect_create_fail("loss 3 (unknown)", &d);
    d.loss = (mirror_loss)-1;
    expect_create_fail("loss -1 (unknown)", &d);
    d = base_desc(s);
    d.init = (mirror_init)3;
    expect_create_fail("init 3 (unknown)", &d);
    d = base_desc(s);
    d.optimizer.kind = (mirror_optimizer_kind)4;
    expect_create_fail("optimizer kind 4 (unknown)", &d);
    d.optimizer.kind = (mirror_optimizer_kind)-1;
    expect_create_fail("optimizer kind -1 (unknown)", &d);

    d = base_desc(s);
    d.optimizer.lr = -0.01f;
    expect_create_fail("negative lr", &d);
    d.optimizer.lr = NAN;
    expect_create_fail("NaN lr", &d);
    d.optimizer.lr = INFINITY;
    expect_create_fail("infinite lr", &d);
    d = base_desc(s);
    d.optimizer.momentum = 1.5f;
    expect_create_fail("momentum 1.5", &d);
    d.optimizer.momentum = -0.1f;
    expect_create_fail("momentum -0.1", &d);
    d.optimizer.momentum = NAN;
    expect_create_fail("NaN momentum", &d);
    d = base_desc(s);
    d.optimizer.nesterov = 1;
    expect_create_fail("nesterov without momentum", &d);
    d = base_desc(s);
    d.optimizer.weight_decay = -1e-4f;
    expect_create_fail("negative weight decay", &d);
    d = base_desc(s);
    d.optimizer.kind = MIRROR_OPT_ADAM;
    d.optimizer.beta1 = 1.0f;
    expect_create_fail("Adam beta1 1.0", &d);
    d.optimizer.beta1 = -0.5f;
    expect_create_fail("Adam beta1 -0.5", &d);
    d.optimizer.beta1 = 0.0f, d.optimizer.beta2 = 1.5f;
    expect_create_fail("Adam beta2 1.5", &d);
    d.optimizer.beta2 = 0.0f, d.optimizer.eps = -1e-8f;
    expect_create_fail("Adam negative eps", &d);
    d.optimizer.eps = NAN;
    expect_create_fail("Adam NaN eps", &d);

    /* Good values near the edges are accepted. */
    d = base_desc(s);
    d.optimizer.momentum = 1.0f, d.optimizer.nesterov = 1;
    m = NULL;
    CHECK(mirror_model_create(&d, &m, &err) == MIRROR_OK && m, "momentum 1 with nesterov is accepted");
    mirror_model_destroy(m);
    d = base_desc(s);
    d.max_batch = (size_t)1 << 24;
    m = NULL;
    CHECK(mirror_model_create(&d, &m, &err) == MIRROR_OK && m, "max_batch 2^24 is accepted (nothing allocated yet)");
    mirror_model_destroy(m);
}

/* mirror_model_query_desc: every default of the manual's DESC DEFAULTS. */
static void test_model_defaults(mirror_strategy *s)
{
    mirror_model_desc d = base_desc(s), q;
    mirror_model *m = NULL;
    mirror_error err = {0, ""};

    CHECK(mirror_model_create(&d, &m, &err) == MIRROR_OK, "zero desc with 4 channels: %s", err.message);
    q = mirror_model_query_desc(m);
    CHECK(q.strategy == s && q.channels == 4, "strategy and channels are kept");
    CHECK(q.height == 1 && q.width == 1, "height and width 0 mean 1 (got %zu, %zu)", q.height, q.width);
    CHECK(q.max_batch == 256, "max_batch defaults to 256 (got %zu)", q.max_batch);
    CHECK(q.loss == MIRROR_LOSS_SOFTMAX_CE, "loss defaults to softmax cross-entropy (got %d)", (int)q.loss);
    CHECK(q.seed == 0, "seed 0 stays 0");
    CHECK(q.optimizer.kind == MIRROR_OPT_SGD, "the optimizer defaults to SGD (got %d)", (int)q.optimizer.kind);
    CHECK(q.optimizer.lr == 0.01f, "SGD lr defaults to 0.01 (got %g)", (double)q.optimizer.lr);
    CHECK(q.optimizer.beta1 == 0.9f && q.optimizer.beta2 == 0.999f, "betas default to 0.9, 0.999 (got %g, %g)",
          (double)q.optimizer.beta1, (double)q.optimizer.beta2);
    CHECK(q.optimizer.eps == 1e-8f, "eps defaults to 1e-8 (got %g)", (double)q.optimizer.eps);
    CHECK(q.optimizer.weight_decay == 0.0f, "SGD weight decay defaults to 0");
    CHECK(q.optimizer.momentum == 0.0f && q.optimizer.nesterov == 0, "momentum 0, nesterov 0");
    CHECK(q.replica_values == 0, "replica_values defaults to 0: no replica keeps its own values");
    mirror_model_destroy(m);

    d.optimizer.kind = MIRROR_OPT_ADAM;
    m = NULL;
    CHECK(mirror_model_create(&d, &m, &err) == MIRROR_OK, "Adam: %s", err.message);
    q = mirror_model_query_desc(m);
    CHECK(q.optimizer.lr == 0.001f, "Adam lr defaults to 0.001 (got %g)", (double)q.optimizer.lr);
    CHECK(q.optimizer.beta1 == 0.9f && q.optimizer.beta2 == 0.999f && q.optimizer.eps == 1e-8f,
          "Adam betas 0.9, 0.999, eps 1e-8");
    CHECK(q.optimizer.weight_decay == 0.0f, "Adam weight decay defaults to 0 (got %g)",
          (double)q.optimizer.weight_decay);
    mirror_model_destroy(m);

    d.optimizer.kind = MIRROR_OPT_ADAMW;
    m = NULL;
    CHECK(mirror_model_create(&d, &m, &err) == MIRROR_OK, "AdamW: %s", err.message);
    q = mirror_model_query_desc(m);
    CHECK(q.optimizer.lr == 0.001f, "AdamW lr defaults to 0.001 (got %g)", (double)q.optimizer.lr);
    CHECK(q.optimizer.weight_decay == 0.01f, "AdamW weight decay defaults to 0.01 (got %g)",
          (double)q.optimizer.weight_decay);
    CHECK(q.optimizer.beta1 == 0.9f && q.optimizer.beta2 == 0.999f && q.optimizer.eps == 1e-8f,
          "AdamW betas 0.9, 0.999, eps 1e-8");
    mirror_model_destroy(m);

    /* Values given are kept. */
    d = base_desc(s);
    d.height = 5, d.width = 3, d.max_batch = 7, d.loss = MIRROR_LOSS_MSE, d.seed = 99;
    d.optimizer.lr = 0.5f, d.optimizer.momentum = 0.8f, d.optimizer.weight_decay = 0.125f;
    m = NULL;
    CHECK(mirror_model_create(&d, &m, &err) == MIRROR_OK, "explicit desc: %s", err.message);
    q = mirror_model_query_desc(m);
    CHECK(q.height == 5 && q.width == 3 && q.max_batch == 7 && q.loss == MIRROR_LOSS_MSE && q.seed == 99 &&
              q.optimizer.lr == 0.5f && q.optimizer.momentum == 0.8f && q.optimizer.weight_decay == 0.125f,
          "explicit values are kept");
    mirror_model_destroy(m);
    q = mirror_model_query_desc(NULL);
    CHECK(q.strategy == NULL && q.channels == 0 && q.max_batch == 0, "query_desc(NULL) is zero");
}

// >>layers ----------------------------------------------------------------------------

/* A model of c x h x w inputs (no layers yet). */
static mirror_model *empty_model(mirror_strategy *s, size_t c, size_t h, size_t w)
{
    mirror_model_desc d = model_desc(s, c, h, w, 8, 5);
    mirror_model *m = NULL;
    mirror_model_create(&d, &m, NULL);
    return m;
}

/* rc, the model's error and build agree on a failed layer call. */
static void layer_failed(mirror_model *m, const char *what, int rc, int want)
{
    CHECK(rc == want, "%s: got %d (%s), want %s", what, rc, mirror_result_string(rc), mirror_result_string(want));
    CHECK(mirror_model_error(m)[0] != '\0', "%s: the model records a message", what);
    CHECK(mirror_model_build(m) == want, "%s: build returns the first error", what);
    CHECK(mirror_num_parameters(m) == 0, "%s: the model is not built", what);
}

static float X[16 * 4];
static int32_t Y[16];
static float T[16 * 3];

static mirror_batch batch_of(size_t n)
{
    mirror_batch b;
    memset(&b, 0, sizeof b);
    b.x = X, b.labels = Y, b.targets = T, b.rows = 16, b.n = n;
    return b;
}

static void test_layers(mirror_strategy *s)
{
    mirror_model *m;
    int rc, i;
    long live = live_allocs;

    /* Dense on a non-flat input: a sticky shape error naming flatten. */
    m = empty_model(s, 1, 4, 4);
    rc = mirror_dense(m, 3);
    CHECK(rc == MIRROR_ERR_SHAPE, "dense on 1x4x4: got %d, want a shape error", rc);
    CHECK(strstr(mirror_model_error(m), "flatten") != NULL, "the message mentions flatten: \"%s\"",
          mirror_model_error(m));
    CHECK(mirror_flatten(m) == MIRROR_ERR_SHAPE && mirror_relu(m) == MIRROR_ERR_SHAPE &&
              mirror_dense(m, 2) == MIRROR_ERR_SHAPE,
          "the error is sticky: later layer calls return it");
    CHECK(mirror_model_build(m) == MIRROR_ERR_SHAPE, "build returns the sticky error");
    CHECK(strstr(mirror_model_error(m), "flatten") != NULL, "and the message still names flatten: \"%s\"",
          mirror_model_error(m));
    CHECK(mirror_train_step(m, NULL, NULL) != MIRROR_OK, "an unbuilt model does not train");
    mirror_model_destroy(m);

    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d kernel 7 on 4x4 padded by 1", mirror_conv2d(m, 2, 7, 1, 1), MIRROR_ERR_SHAPE);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d kernel 5 on 4x4 unpadded", mirror_conv2d(m, 2, 5, 1, 0), MIRROR_ERR_SHAPE);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d padding 3 with kernel 3", mirror_conv2d(m, 2, 3, 1, 3), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d padding 4 with kernel 3", mirror_conv2d(m, 2, 3, 1, 4), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d padding SIZE_MAX", mirror_conv2d(m, 2, 3, 1, (size_t)-1), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d padding SIZE_MAX/2 + 1", mirror_conv2d(m, 2, 3, 1, (size_t)-1 / 2 + 1),
                 MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "maxpool2d window 5 on 4x4", mirror_maxpool2d(m, 5, 1), MIRROR_ERR_SHAPE);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    mirror_conv2d(m, 2, 3, 1, 0); /* 2x2 */
    layer_failed(m, "maxpool2d window 3 on the 2x2 output of a conv", mirror_maxpool2d(m, 3, 3), MIRROR_ERR_SHAPE);
    mirror_model_destroy(m);

    m = empty_model(s, 4, 1, 1);
    layer_failed(m, "dense with 0 units", mirror_dense(m, 0), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 4, 1, 1);
    layer_failed(m, "dense with 2^24 + 1 units", mirror_dense(m, ((size_t)1 << 24) + 1), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d with 0 filters", mirror_conv2d(m, 0, 3, 1, 1), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d with kernel 0", mirror_conv2d(m, 2, 0, 1, 0), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d with stride 0", mirror_conv2d(m, 2, 3, 0, 1), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "conv2d with kernel 65", mirror_conv2d(m, 2, 65, 1, 40), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "maxpool2d with window 0", mirror_maxpool2d(m, 0, 1), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);
    m = empty_model(s, 1, 4, 4);
    layer_failed(m, "maxpool2d with stride 0", mirror_maxpool2d(m, 2, 0), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);

    /* More than 64 layers. */
    m = empty_model(s, 4, 1, 1);
    for (rc = MIRROR_OK, i = 0; i < 64; i++) rc |= mirror_relu(m);
    CHECK(rc == MIRROR_OK, "64 layers are accepted");
    layer_failed(m, "a 65th layer", mirror_relu(m), MIRROR_ERR_ARGUMENT);
    mirror_model_destroy(m);

    /* Build with no layers, then the model is still usable. */
    m = empty_model(s, 4, 1, 1);
    CHECK(mirror_model_build(m) == MIRROR_ERR_STATE && mirror_model_error(m)[0], "build with no layers: state error");
    CHECK(mirror_dense(m, 3) == MIRROR_OK && mirror_model_build(m) == MIRROR_OK,
          "after that failure, layers can be added and the model builds");
    mirror_model_destroy(m);

    /* Softmax CE with one output, then fixed. */
    m = empty_model(s, 4, 1, 1);
    mirror_dense(m, 1);
    CHECK(mirror_model_build(m) == MIRROR_ERR_SHAPE && mirror_model_error(m)[0],
          "softmax cross-entropy with 1 output: shape error at build (\"%s\")", mirror_model_error(m));
    CHECK(mirror_num_parameters(m) == 0, "and the model is not built");
    CHECK(mirror_dense(m, 2) == MIRROR_OK && mirror_model_build(m) == MIRROR_OK && mirror_num_outputs(m) == 2,
          "the failed build left the model usable: another dense(2) and it builds (%s)", mirror_model_error(m));
    mirror_model_destroy(m);

    /* After build: adding a layer and building again are state errors, and
       the model still trains. */
    m = empty_model(s, 4, 1, 1);
    mirror_dense(m, 5), mirror_relu(m), mirror_dense(m, 3);
    CHECK(mirror_model_build(m) == MIRROR_OK, "dense-relu-dense builds: %s", mirror_model_error(m));
    {
        size_t np = mirror_num_parameters(m);
        mirror_batch b = batch_of(8);
        char before[1024], after[1024];
        mirror_model_summary(m, before, sizeof before);
        CHECK(mirror_dense(m, 4) == MIRROR_ERR_STATE, "dense after build: state error");
        CHECK(mirror_relu(m) == MIRROR_ERR_STATE && mirror_flatten(m) == MIRROR_ERR_STATE &&
                  mirror_conv2d(m, 1, 1, 1, 0) == MIRROR_ERR_STATE && mirror_maxpool2d(m, 1, 1) == MIRROR_ERR_STATE,
              "every layer after build: state error");
        CHECK(mirror_model_build(m) == MIRROR_ERR_STATE && mirror_model_error(m)[0], "build twice: state error");
        mirror_model_summary(m, after, sizeof after);
        CHECK(mirror_num_parameters(m) == np && mirror_num_outputs(m) == 3 && !strcmp(before, after),
              "the model is unchanged");
        CHECK(mirror_train_step(m, &b, NULL) == MIRROR_OK, "and still trains: %s", mirror_model_error(m));
    }
    CHECK(mirror_model_summary(m, NULL, 10) == MIRROR_ERR_ARGUMENT, "summary into NULL");
    {
        char tiny[4] = "abc";
        CHECK(mirror_model_summary(m, tiny, 0) == MIRROR_ERR_ARGUMENT && tiny[0] == 'a', "summary into 0 bytes");
        char whole[1024], cut[40], want[80];
        size_t len;
        CHECK(mirror_model_summary(m, tiny, sizeof tiny) == MIRROR_ERR_CAPACITY && strlen(tiny) < sizeof tiny,
              "summary into 4 bytes: capacity error, terminated");
        CHECK(mirror_model_summary(m, whole, sizeof whole) == MIRROR_OK && strlen(whole) > sizeof cut,
              "the whole summary: %s", mirror_model_error(m));
        snprintf(want, sizeof want, "\ntotal  %zu params, %zu bytes in fp32\n", mirror_num_parameters(m),
                 4 * mirror_num_parameters(m));
        CHECK(strstr(whole, want) && strlen(whole) < 128 * 4, "a total line, within the documented 128 bytes a line:\n%s",
              whole);
        snprintf(want, sizeof want, "needs %zu bytes and buf holds %zu", strlen(whole) + 1, sizeof cut);
        CHECK(mirror_model_summary(m, cut, sizeof cut) == MIRROR_ERR_CAPACITY && strstr(mirror_model_error(m), want) &&
                  !strncmp(cut, whole, sizeof cut - 1) && strlen(cut) == sizeof cut - 1,
              "a short buf: its own error in the model (\"%s\", wanted \"%s\"), the start of the summary", mirror_model_error(m),
              want);
        len = strlen(whole);
        snprintf(want, sizeof want, "needs %zu bytes", len + 1);
        CHECK(mirror_model_summary(m, whole, len) == MIRROR_ERR_CAPACITY && strstr(mirror_model_error(m), want),
              "one byte short (no room for the terminator): %s", mirror_model_error(m));
        CHECK(mirror_model_summary(m, whole, len + 1) == MIRROR_OK && strlen(whole) == len,
              "exactly the size it said: fits");
        {
            const char *line = whole, *arrow = strstr(whole, " -> ");
            long column = arrow ? arrow - whole : -1;
            int aligned = arrow != NULL;
            for (; aligned && strncmp(line, "total", 5); line = strchr(line, '\n') + 1)
                aligned = strstr(line, " -> ") - line == column;
            CHECK(aligned, "the summary's columns line up:\n%s", whole);
        }
        {
            FILE *f = tmpfile();
            char printed[1024] = "";
            size_t got = 0;
            CHECK(f && mirror_model_print_summary(m, f) == MIRROR_OK, "print_summary to a stream: %s",
                  mirror_model_error(m));
            if (f) {
                rewind(f);
                got = fread(printed, 1, sizeof printed - 1, f);
                printed[got] = '\0';
                fclose(f);
            }
            CHECK(!strcmp(printed, whole), "print_summary writes the summary:\n%s", printed);
            CHECK(mirror_model_print_summary(m, NULL) == MIRROR_ERR_ARGUMENT &&
                      mirror_model_print_summary(NULL, stdout) == MIRROR_ERR_ARGUMENT,
                  "print_summary to NULL, of NULL: argument errors");
        }
    }
    mirror_model_destroy(m);

    /* NULL model to every model function. */
    CHECK(mirror_dense(NULL, 3) == MIRROR_ERR_ARGUMENT, "mirror_dense(NULL, 3)");
    CHECK(mirror_conv2d(NULL, 2, 3, 1, 1) == MIRROR_ERR_ARGUMENT, "mirror_conv2d(NULL, ...)");
    CHECK(mirror_relu(NULL) == MIRROR_ERR_ARGUMENT, "mirror_relu(NULL)");
    CHECK(mirror_maxpool2d(NULL, 2, 2) == MIRROR_ERR_ARGUMENT, "mirror_maxpool2d(NULL, ...)");
    CHECK(mirror_flatten(NULL) == MIRROR_ERR_ARGUMENT, "mirror_flatten(NULL)");
    CHECK(mirror_model_build(NULL) == MIRROR_ERR_ARGUMENT, "mirror_model_build(NULL)");
    CHECK(mirror_model_error(NULL) != NULL && mirror_model_error(NULL)[0], "mirror_model_error(NULL) is a message");
    CHECK(mirror_num_parameters(NULL) == 0 && mirror_optimizer_state_size(NULL) == 0 &&
              mirror_num_outputs(NULL) == 0 && mirror_optimizer_steps(NULL) == 0,
          "the size queries of NULL are 0");
    {
        char buf[64];
        float f[4];
        mirror_batch b = batch_of(2);
        mirror_metrics met;
        mirror_memory_report rep;
        mirror_fit_desc fd;
        mirror_dataset ds;
        memset(&fd, 0, sizeof fd);
        memset(&ds, 0, sizeof ds);
        fd.train = &ds;
        CHECK(mirror_model_summary(NULL, buf, sizeof buf) == MIRROR_ERR_ARGUMENT, "summary(NULL)");
        CHECK(mirror_get_parameters(NULL, 0, f, 4) == MIRROR_ERR_ARGUMENT &&
                  mirror_get_gradients(NULL, 0, f, 4) == MIRROR_ERR_ARGUMENT &&
                  mirror_get_optimizer_state(NULL, 0, f, 4) == MIRROR_ERR_ARGUMENT &&
                  mirror_set_parameters(NULL, f, 4) == MIRROR_ERR_ARGUMENT,
              "get/set parameters of NULL");
        CHECK(mirror_memory_report_get(NULL, 0, &rep) == MIRROR_ERR_ARGUMENT, "memory report of NULL");
        CHECK(mirror_train_step(NULL, &b, &met) == MIRROR_ERR_ARGUMENT, "train_step(NULL)");
        CHECK(mirror_evaluate_batch(NULL, &b, &met) == MIRROR_ERR_ARGUMENT, "evaluate_batch(NULL)");
        CHECK(mirror_predict(NULL, X, 2, f) == MIRROR_ERR_ARGUMENT, "predict(NULL)");
        CHECK(mirror_fit(NULL, &fd, NULL) == MIRROR_ERR_ARGUMENT, "fit(NULL)");
        CHECK(mirror_evaluate(NULL, &ds, 0, &met) == MIRROR_ERR_ARGUMENT, "evaluate(NULL)");
    }
    CHECK(live_allocs == live, "the layer tests freed everything (%ld left)", live_allocs - live);
}

// >>steps --------------------------------------------------------------------------

/* dense(5)-relu-dense(3) on 4 features; SGD with momentum, so a step
   changes both the parameters and the optimizer state. */
static mirror_model *small_model(mirror_strategy *s, mirror_loss loss)
{
    mirror_model_desc d = model_desc(s, 4, 0, 0, 8, 5);
    d.loss = loss;
    d.optimizer = optimizer_of(MIRROR_OPT_SGD, 0.1f);
    return build_model(&d, NULL, "dense 5, relu, dense 3");
}

#define MAXP 64
typedef struct snapshot {
    float p[4][MAXP], st[MAXP]; /* every replica's parameters; replica 0's state */
    uint64_t steps;
} snapshot;

static void take(mirror_model *m, snapshot *s)
{
    size_t r, R = mirror_num_replicas(mirror_model_query_desc(m).strategy);
    memset(s, 0, sizeof *s);
    for (r = 0; r < R && r < 4; r++) mirror_get_parameters(m, r, s->p[r], mirror_num_parameters(m));
    mirror_get_optimizer_state(m, 0, s->st, mirror_optimizer_state_size(m));
    s->steps = mirror_optimizer_steps(m);
}

static int same(const snapshot *a, const snapshot *b)
{
    return !memcmp(a, b, sizeof *a);
}

/* A failed call (rc, want) on m: an error with a message, nothing changed,
   and a valid step afterwards trains. */
static void after_failure(mirror_model *m, const snapshot *before, const char *what, int rc, int want)
{
    snapshot now;
    mirror_batch good = batch_of(6);
    mirror_metrics met;
    CHECK(rc == want, "%s: got %d (%s), want %s", what, rc, mirror_result_string(rc), mirror_result_string(want));
    CHECK(mirror_model_error(m)[0] != '\0', "%s: the model records a message", what);
    take(m, &now);
    CHECK(same(before, &now), "%s: parameters, optimizer state and step count unchanged", what);
    CHECK(mirror_train_step(m, &good, &met) == MIRROR_OK && met.count == 6,
          "%s: a valid step afterwards succeeds (%s)", what, mirror_model_error(m));
    take(m, &now);
    CHECK(!same(before, &now) && now.steps == before->steps + 1, "%s: and changes the parameters", what);
}

static void test_steps(mirror_strategy *s3)
{
    mirror_model *m = small_model(s3, MIRROR_LOSS_SOFTMAX_CE), *u;
    mirror_model_desc d = base_desc(s3);
    mirror_batch b;
    snapshot before;
    size_t np, idx[8], i;
    int32_t labels[16];
    float buf[MAXP + 1], out[8 * 3];
    long live;

    CHECK(m != NULL, "the small model builds");
    if (!m) return;
    np = mirror_num_parameters(m);
    CHECK(np == 4 * 5 + 5 + 5 * 3 + 3 && np <= MAXP, "43 parameters (got %zu)", np);
    CHECK(mirror_optimizer_state_size(m) == np, "SGD with momentum keeps one buffer");

    /* An unbuilt model: every step and query is a state error. */
    d.max_batch = 8;
    CHECK(mirror_model_create(&d, &u, NULL) == MIRROR_OK, "an unbuilt model");
    mirror_dense(u, 3);
    b = batch_of(4);
    CHECK(mirror_train_step(u, &b, NULL) == MIRROR_ERR_STATE && mirror_model_error(u)[0],
          "train_step before build: state error");
    CHECK(mirror_evaluate_batch(u, &b, NULL) == MIRROR_ERR_STATE, "evaluate_batch before build");
    CHECK(mirror_predict(u, X, 4, out) == MIRROR_ERR_STATE, "predict before build");
    CHECK(mirror_get_parameters(u, 0, buf, 0) == MIRROR_ERR_STATE, "get_parameters before build");
    CHECK(mirror_set_parameters(u, buf, 0) == MIRROR_ERR_STATE, "set_parameters before build");
    {
        mirror_memory_report rep;
        mirror_fit_desc fd;
        mirror_dataset ds;
        memset(&ds, 0, sizeof ds);
        ds.x = X, ds.labels = Y, ds.count = 16, ds.channels = 4, ds.height = 1, ds.width = 1, ds.num_classes = 3;
        memset(&fd, 0, sizeof fd);
        fd.train = &ds;
        fd.progress = MIRROR_PROGRESS_NONE;
        CHECK(mirror_fit(u, &fd, NULL) == MIRROR_ERR_STATE, "fit before build");
        CHECK(mirror_evaluate(u, &ds, 0, NULL) == MIRROR_ERR_STATE, "evaluate before build");
        CHECK(mirror_memory_report_get(u, 0, &rep) == MIRROR_ERR_ARGUMENT, "memory report before build");
    }
    CHECK(mirror_model_build(u) == MIRROR_OK, "it builds after all those errors: %s", mirror_model_error(u));
    b = batch_of(4);
    CHECK(mirror_train_step(u, &b, NULL) == MIRROR_OK, "and trains");
    mirror_model_destroy(u);

    /* Bad batches on a built model. */
    b = batch_of(4);
    CHECK(mirror_train_step(m, &b, NULL) == MIRROR_OK, "a first valid step: %s", mirror_model_error(m));
    live = live_allocs;

    take(m, &before);
    after_failure(m, &before, "NULL batch", mirror_train_step(m, NULL, NULL), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    b = batch_of(0);
    after_failure(m, &before, "n = 0", mirror_train_step(m, &b, NULL), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    b = batch_of(9);
    after_failure(m, &before, "n = 9 > max_batch 8", mirror_train_step(m, &b, NULL), MIRROR_ERR_CAPACITY);
    take(m, &before);
    b = batch_of(16);
    after_failure(m, &before, "n = 16 > max_batch 8", mirror_train_step(m, &b, NULL), MIRROR_ERR_CAPACITY);
    take(m, &before);
    b = batch_of(4);
    b.x = NULL;
    after_failure(m, &before, "NULL x", mirror_train_step(m, &b, NULL), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    b = batch_of(4);
    b.labels = NULL;
    after_failure(m, &before, "NULL labels with softmax cross-entropy", mirror_train_step(m, &b, NULL),
                  MIRROR_ERR_ARGUMENT);

    /* Labels out of range: the message names the sample. */
    memcpy(labels, Y, sizeof labels);
    labels[2] = -1;
    take(m, &before);
    b = batch_of(6);
    b.labels = labels;
    after_failure(m, &before, "label -1 at sample 2", mirror_train_step(m, &b, NULL), MIRROR_ERR_LABEL);
    take(m, &before);
    CHECK(mirror_train_step(m, &b, NULL) == MIRROR_ERR_LABEL && strstr(mirror_model_error(m), "sample 2"),
          "label -1: the message names sample 2: \"%s\"", mirror_model_error(m));
    labels[2] = Y[2];
    labels[5] = 3;
    CHECK(mirror_train_step(m, &b, NULL) == MIRROR_ERR_LABEL && strstr(mirror_model_error(m), "sample 5"),
          "label 3 of 3 classes: the message names sample 5: \"%s\"", mirror_model_error(m));
    labels[5] = INT32_MIN;
    CHECK(mirror_train_step(m, &b, NULL) == MIRROR_ERR_LABEL, "label INT32_MIN");
    labels[5] = INT32_MAX;
    after_failure(m, &before, "label INT32_MAX at sample 5", mirror_train_step(m, &b, NULL), MIRROR_ERR_LABEL);
    labels[5] = Y[5];
    labels[11] = 7; /* a row the index selects as sample 3 */
    for (i = 0; i < 8; i++) idx[i] = (i * 5 + 3) % 16;
    idx[3] = 11;
    b = batch_of(8);
    b.labels = labels;
    b.index = idx;
    take(m, &before);
    {
        int rc = mirror_train_step(m, &b, NULL);
        CHECK(rc == MIRROR_ERR_LABEL && strstr(mirror_model_error(m), "sample 3"),
              "through an index, row 11 as sample 3: label error naming sample 3: \"%s\"", mirror_model_error(m));
        after_failure(m, &before, "a bad label through the index", rc, MIRROR_ERR_LABEL);
    }
    labels[11] = Y[11];
    CHECK(mirror_evaluate_batch(m, &b, NULL) == MIRROR_OK, "the same indexed batch with good labels evaluates");

    /* Index entries outside the rows. */
    idx[7] = 16;
    take(m, &before);
    after_failure(m, &before, "index[7] = 16 of 16 rows", mirror_train_step(m, &b, NULL), MIRROR_ERR_ARGUMENT);
    idx[7] = (size_t)-1;
    take(m, &before);
    after_failure(m, &before, "index[7] = SIZE_MAX", mirror_train_step(m, &b, NULL), MIRROR_ERR_ARGUMENT);
    idx[7] = 0;
    b.rows = 0;
    take(m, &before);
    after_failure(m, &before, "an index with rows 0", mirror_train_step(m, &b, NULL), MIRROR_ERR_ARGUMENT);
    b.rows = 16;
    take(m, &before);
    CHECK(mirror_evaluate_batch(m, NULL, NULL) == MIRROR_ERR_ARGUMENT, "evaluate_batch(NULL batch)");
    labels[0] = -5;
    b.labels = labels;
    b.index = NULL;
    after_failure(m, &before, "evaluate_batch with label -5", mirror_evaluate_batch(m, &b, NULL), MIRROR_ERR_LABEL);
    labels[0] = Y[0];

    /* get / set parameters. */
    take(m, &before);
    after_failure(m, &before, "get_parameters n - 1", mirror_get_parameters(m, 0, buf, np - 1), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "get_parameters n + 1", mirror_get_parameters(m, 0, buf, np + 1), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "get_parameters n = 0", mirror_get_parameters(m, 0, buf, 0), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "get_parameters replica 3 of 3", mirror_get_parameters(m, 3, buf, np),
                  MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "get_parameters replica SIZE_MAX", mirror_get_parameters(m, (size_t)-1, buf, np),
                  MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "get_parameters into NULL", mirror_get_parameters(m, 0, NULL, np), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "get_gradients n - 1", mirror_get_gradients(m, 0, buf, np - 1), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "get_gradients into NULL", mirror_get_gradients(m, 1, NULL, np), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "get_optimizer_state n + 1",
                  mirror_get_optimizer_state(m, 0, buf, mirror_optimizer_state_size(m) + 1), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "get_optimizer_state replica 3", mirror_get_optimizer_state(m, 3, buf, np),
                  MIRROR_ERR_ARGUMENT);
    for (i = 0; i < np; i++) buf[i] = 0.25f;
    take(m, &before);
    after_failure(m, &before, "set_parameters n - 1", mirror_set_parameters(m, buf, np - 1), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "set_parameters n + 1", mirror_set_parameters(m, buf, np + 1), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "set_parameters from NULL", mirror_set_parameters(m, NULL, np), MIRROR_ERR_ARGUMENT);
    {
        float got[MAXP];
        CHECK(mirror_set_parameters(m, buf, np) == MIRROR_OK && mirror_get_parameters(m, 2, got, np) == MIRROR_OK &&
                  !memcmp(got, buf, np * sizeof(float)),
              "a valid set_parameters reaches every replica");
    }

    /* predict. */
    take(m, &before);
    after_failure(m, &before, "predict into NULL", mirror_predict(m, X, 4, NULL), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "predict from NULL", mirror_predict(m, NULL, 4, out), MIRROR_ERR_ARGUMENT);
    CHECK(mirror_predict(m, X, 0, NULL) == MIRROR_OK, "predict of 0 samples is fine");
    CHECK(mirror_predict(m, X, 8, out) == MIRROR_OK, "predict of 8 samples");
    CHECK(live_allocs == live, "failed steps allocate nothing (%ld)", live_allocs - live);
    mirror_model_destroy(m);

    /* MSE: NULL targets. */
    m = small_model(s3, MIRROR_LOSS_MSE);
    CHECK(m != NULL, "an MSE model builds");
    if (!m) return;
    b = batch_of(4);
    b.labels = NULL;
    CHECK(mirror_train_step(m, &b, NULL) == MIRROR_OK, "MSE trains without labels: %s", mirror_model_error(m));
    take(m, &before);
    b.targets = NULL;
    after_failure(m, &before, "NULL targets with MSE", mirror_train_step(m, &b, NULL), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    CHECK(mirror_evaluate_batch(m, &b, NULL) == MIRROR_ERR_ARGUMENT, "evaluate_batch with NULL targets (MSE)");
    mirror_model_destroy(m);
}

// >>fit and evaluate -------------------------------------------------------------------

static int hook_calls;
static size_t hook_epoch;
static int stop_hook(void *user, const mirror_epoch_log *log)
{
    hook_calls++;
    hook_epoch = log->epoch;
    return *(int *)user;
}

static void test_fit(mirror_strategy *s3)
{
    mirror_model *m = small_model(s3, MIRROR_LOSS_SOFTMAX_CE);
    mirror_dataset ds, wrong, empty;
    mirror_fit_desc fd;
    mirror_epoch_log last;
    mirror_metrics met;
    snapshot before;
    int32_t labels[16];
    int stop = 1;
    long live;

    CHECK(m != NULL, "the model for fit builds");
    if (!m) return;
    memset(&ds, 0, sizeof ds);
    ds.x = X, ds.labels = Y, ds.count = 16, ds.channels = 4, ds.height = 1, ds.width = 1, ds.num_classes = 3;
    memset(&fd, 0, sizeof fd);
    fd.train = &ds;
    fd.batch = 5;
    fd.progress = MIRROR_PROGRESS_NONE;
    live = live_allocs;

    take(m, &before);
    after_failure(m, &before, "fit with a NULL desc", mirror_fit(m, NULL, NULL), MIRROR_ERR_ARGUMENT);
    take(m, &before);
    fd.train = NULL;
    after_failure(m, &before, "fit with no train set", mirror_fit(m, &fd, NULL), MIRROR_ERR_ARGUMENT);
    fd.train = &ds;
    wrong = ds;
    wrong.channels = 2, wrong.height = 1, wrong.width = 1;
    take(m, &before);
    fd.train = &wrong;
    after_failure(m, &before, "fit on 2-feature samples (the model takes 4)", mirror_fit(m, &fd, NULL),
                  MIRROR_ERR_SHAPE);
    wrong.channels = 1, wrong.height = 2, wrong.width = 3;
    take(m, &before);
    after_failure(m, &before, "fit on 1x2x3 samples", mirror_fit(m, &fd, NULL), MIRROR_ERR_SHAPE);
    fd.train = &ds;
    fd.validation = &wrong;
    take(m, &before);
    after_failure(m, &before, "fit with a validation set of the wrong shape", mirror_fit(m, &fd, NULL),
                  MIRROR_ERR_SHAPE);
    fd.validation = NULL;
    fd.batch = 9;
    take(m, &before);
    after_failure(m, &before, "fit with batch 9 > max_batch 8", mirror_fit(m, &fd, NULL), MIRROR_ERR_CAPACITY);
    fd.batch = 5;
    fd.progress = (mirror_progress)9;
    take(m, &before);
    after_failure(m, &before, "fit with progress 9", mirror_fit(m, &fd, NULL), MIRROR_ERR_ARGUMENT);
    fd.progress = MIRROR_PROGRESS_NONE;
    wrong = ds;
    wrong.count = 4;
    fd.train = &wrong;
    fd.batch = 5;
    fd.drop_remainder = 1;
    take(m, &before);
    after_failure(m, &before, "fit of 4 samples in dropped batches of 5 (no batch)", mirror_fit(m, &fd, NULL),
                  MIRROR_ERR_ARGUMENT);
    fd.train = &ds;
    fd.drop_remainder = 0;
    memset(&empty, 0, sizeof empty);
    fd.train = &empty;
    take(m, &before);
    after_failure(m, &before, "fit on an empty dataset", mirror_fit(m, &fd, NULL), MIRROR_ERR_ARGUMENT);
    fd.train = &ds;

    /* An epoch hook that returns non-zero stops after the first epoch. */
    fd.epochs = 3;
    fd.on_epoch = stop_hook;
    fd.user = &stop;
    hook_calls = 0;
    memset(&last, 0, sizeof last);
    take(m, &before);
    {
        int rc = mirror_fit(m, &fd, &last);
        CHECK(rc == MIRROR_ERR_STOPPED, "the hook returns 1: fit stops with MIRROR_ERR_STOPPED (got %d)", rc);
        CHECK(hook_calls == 1 && hook_epoch == 1 && last.epoch == 1 && last.epochs == 3,
              "after the first epoch (%d hook calls, epoch %zu, last.epoch %zu)", hook_calls, hook_epoch, last.epoch);
        CHECK(mirror_optimizer_steps(m) == before.steps + mirror_num_batches(16, 5, 0),
              "one epoch of 4 steps ran (%llu)", (unsigned long long)(mirror_optimizer_steps(m) - before.steps));
        CHECK(mirror_model_error(m)[0] != '\0', "the model records why: \"%s\"", mirror_model_error(m));
    }
    stop = 0;
    hook_calls = 0;
    CHECK(mirror_fit(m, &fd, &last) == MIRROR_OK && hook_calls == 3 && last.epoch == 3,
          "after the stop the model fits 3 epochs with a hook that returns 0: %s", mirror_model_error(m));

    /* A train set with a bad label: fit fails with a label error. */
    memcpy(labels, Y, sizeof labels);
    labels[9] = 3;
    wrong = ds;
    wrong.labels = labels;
    fd.train = &wrong;
    fd.epochs = 1;
    fd.on_epoch = NULL;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_ERR_LABEL, "fit on a set with label 3 of 3 classes: label error");
    fd.train = &ds;

    /* evaluate. */
    take(m, &before);
    after_failure(m, &before, "evaluate an empty (zeroed) dataset", mirror_evaluate(m, &empty, 0, &met),
                  MIRROR_ERR_ARGUMENT);
    wrong = ds;
    wrong.count = 0;
    take(m, &before);
    after_failure(m, &before, "evaluate a dataset of count 0", mirror_evaluate(m, &wrong, 0, &met),
                  MIRROR_ERR_ARGUMENT);
    take(m, &before);
    after_failure(m, &before, "evaluate NULL", mirror_evaluate(m, NULL, 0, &met), MIRROR_ERR_ARGUMENT);
    wrong = ds;
    wrong.channels = 3;
    take(m, &before);
    after_failure(m, &before, "evaluate a dataset of the wrong shape", mirror_evaluate(m, &wrong, 0, &met),
                  MIRROR_ERR_SHAPE);
    wrong = ds;
    wrong.labels = labels;
    take(m, &before);
    after_failure(m, &before, "evaluate a dataset with label 3 of 3", mirror_evaluate(m, &wrong, 0, &met),
                  MIRROR_ERR_LABEL);
    wrong.labels = NULL;
    take(m, &before);
    after_failure(m, &before, "evaluate a dataset without labels", mirror_evaluate(m, &wrong, 0, &met),
                  MIRROR_ERR_ARGUMENT);
    CHECK(strstr(mirror_model_error(m), "no labels") && strstr(mirror_model_error(m), "cross-entropy"),
          "a cross-entropy model, a dataset without labels: the message says so (%s)", mirror_model_error(m));
    /* float targets (a float32 .npy y loads as them) for a cross-entropy model */
    wrong.targets = T, wrong.target_dim = 3;
    fd.train = &wrong;
    take(m, &before);
    after_failure(m, &before, "fit a cross-entropy model on float targets", mirror_fit(m, &fd, NULL),
                  MIRROR_ERR_ARGUMENT);
    CHECK(strstr(mirror_model_error(m), "float targets") && strstr(mirror_model_error(m), "cross-entropy") &&
              strstr(mirror_model_error(m), "integer labels") && !strstr(mirror_model_error(m), "batch.labels"),
          "fit a cross-entropy model on float targets: the message says targets, not labels, and what is needed "
          "(%s)", mirror_model_error(m));
    fd.train = &ds;
    memset(&met, 0xff, sizeof met);
    CHECK(mirror_evaluate(m, &ds, 100, &met) == MIRROR_OK && met.count == 16,
          "evaluate with batch 100 > max_batch: chunks of max_batch, 16 samples (got %zu)", met.count);
    CHECK(mirror_evaluate(m, &ds, 0, NULL) == MIRROR_OK, "evaluate with out NULL");
    CHECK(live_allocs == live, "fit and evaluate failures leaked nothing (%ld)", live_allocs - live);
    mirror_model_destroy(m);

    /* MSE fit without targets. */
    m = small_model(s3, MIRROR_LOSS_MSE);
    if (m) {
        fd.train = &ds;
        fd.on_epoch = NULL;
        take(m, &before);
        after_failure(m, &before, "MSE fit on a dataset without targets", mirror_fit(m, &fd, NULL), MIRROR_ERR_SHAPE);
        wrong = ds;
        wrong.targets = T, wrong.target_dim = 2;
        fd.train = &wrong;
        take(m, &before);
        after_failure(m, &before, "MSE fit with targets of width 2 for 3 outputs", mirror_fit(m, &fd, NULL),
                      MIRROR_ERR_SHAPE);
        wrong.target_dim = 3;
        CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "MSE fit with targets of width 3: %s", mirror_model_error(m));
        mirror_model_destroy(m);
    }
}

// >>results, logger, memory, destroy ---------------------------------------------------

static void test_results(void)
{
#define T_CODE(name, value, text) {name, value, #name, text},
    static const struct {
        int code, value;
        const char *name, *text;
    } codes[] = {MIRROR_RESULT_LIST(T_CODE)};
#undef T_CODE
    static const int unknown[] = {1, 2, -6, -9, -13, -19, -24, -29, -33, -39, -42, 100, -100, INT_MIN, INT_MAX};
    size_t i, j, n = sizeof codes / sizeof *codes;
    int distinct = 1;
    for (i = 0; i < n; i++) {
        const char *got = mirror_result_string(codes[i].code);
        CHECK(codes[i].code == codes[i].value && (codes[i].code == 0) == (i == 0) && (i == 0 || codes[i].code < 0),
              "%s is %d: 0 for success, negative for errors", codes[i].name, codes[i].code);
        CHECK(got && !strcmp(got, codes[i].text), "mirror_result_string(%s) is \"%s\" (got \"%s\")", codes[i].name,
              codes[i].text, got ? got : "(NULL)");
        CHECK(got && strcmp(got, "unknown result") != 0 && got[0], "%s has a name of its own", codes[i].name);
        for (j = 0; j < i; j++) distinct &= codes[i].code != codes[j].code && strcmp(codes[i].text, codes[j].text);
    }
    CHECK(n == 18, "18 result codes (got %zu)", n);
    CHECK(distinct, "codes and names are distinct");
    CHECK(!strcmp(mirror_result_string(MIRROR_ERR_ARGUMENT), "invalid argument"), "the header's example");
    /* codes used beyond their first case say so: a summary buffer, a file's dtype */
    CHECK(strstr(mirror_result_string(MIRROR_ERR_CAPACITY), "buffer") != NULL,
          "MIRROR_ERR_CAPACITY (a summary buffer too small too) names buffers: \"%s\"",
          mirror_result_string(MIRROR_ERR_CAPACITY));
    CHECK(!strstr(mirror_result_string(MIRROR_ERR_UNSUPPORTED), "this build") &&
              strstr(mirror_result_string(MIRROR_ERR_UNSUPPORTED), "type"),
          "MIRROR_ERR_UNSUPPORTED (a .npy dtype too) does not blame the build: \"%s\"",
          mirror_result_string(MIRROR_ERR_UNSUPPORTED));
    for (i = 0; i < sizeof unknown / sizeof *unknown; i++)
        CHECK(!strcmp(mirror_result_string(unknown[i]), "unknown result"), "mirror_result_string(%d) is "
              "\"unknown result\" (got \"%s\")", unknown[i], mirror_result_string(unknown[i]));
}

static void test_logger_hook(mirror_strategy *s)
{
    mirror_error err = {0, ""};
    mirror_model *m;
    int before;
    log_errors = log_notices = 0;
    mirror_set_logger(test_logger, &log_errors);
    CHECK(mirror_strategy_create(NULL, NULL, &err) == MIRROR_ERR_ARGUMENT, "an error with the logger set");
    CHECK(log_errors == 1 && log_user_ok && !strcmp(log_last, err.message),
          "the logger receives it as an error with its user pointer: \"%s\"", log_last);
    {
        mirror_model_desc d = base_desc(s);
        d.channels = 0;
        m = NULL;
        mirror_model_create(&d, &m, NULL);
        CHECK(log_errors == 2 && log_last[0], "an error with err NULL still reaches the logger: \"%s\"", log_last);
    }
    m = empty_model(s, 4, 1, 1);
    mirror_dense(m, 0);
    CHECK(log_errors == 3 && !strcmp(log_last, mirror_model_error(m)),
          "a model error reaches the logger with the model's message: \"%s\"", log_last);
    mirror_model_destroy(m);
    {
        mirror_dataset ds;
        mirror_dataset_load_idx(&ds, "/nonexistent/mirror/images", "/nonexistent/mirror/labels", 10, NULL);
        CHECK(log_errors == 4 && strstr(log_last, "/nonexistent/mirror/images"),
              "a loader error reaches the logger: \"%s\"", log_last);
    }
    CHECK(log_notices == 0, "no notices from these calls");
    mirror_set_logger(NULL, NULL);
    before = log_errors;
    mirror_strategy_create(NULL, NULL, NULL);
    CHECK(log_errors == before, "after mirror_set_logger(NULL, NULL) the logger is no longer called");
}

/* A message longer than mirror_error's buffer ends in "...", between
   UTF-8 characters, the logger seeing the same; a part of a message cut
   to a bound keeps its head and tail around "..." and whole characters;
   a device list of 5000 bytes leaves its message whole, what to do at its
   end. */
static void test_message_bounds(void)
{
    static char big[3 * sizeof ((mirror_error *)0)->message], spec[5000];
    mirror_error err = {0, ""};
    mirror_strategy_desc d;
    mirror_strategy *s = NULL;
    char part[64];
    size_t n = sizeof err.message, i, len;
    memset(big, 'a', sizeof big - 1);
    mirror_set_logger(test_logger, &log_errors);
    CHECK(mirror__error(&err, MIRROR_ERR_IO, "%s: the end", big) == MIRROR_ERR_IO && err.code == MIRROR_ERR_IO &&
              strlen(err.message) == n - 1 && !strcmp(err.message + n - 4, "...") && !strcmp(log_last, err.message),
          "a message cut by the buffer ends in \"...\", in err and to the logger (%zu bytes)", strlen(err.message));
    for (i = 0; i + 2 < sizeof big; i += 2) big[i] = (char)0xC3, big[i + 1] = (char)0xA9; /* U+00E9, two bytes */
    mirror__error(&err, MIRROR_ERR_IO, "x%s", big); /* the cut falls inside a character: it backs off */
    len = strlen(err.message);
    CHECK(len == n - 2 && !strcmp(err.message + len - 3, "...") && (unsigned char)err.message[len - 5] == 0xC3 &&
              (unsigned char)err.message[len - 4] == 0xA9,
          "a message cut inside a UTF-8 character ends in \"...\" after the whole one before (%zu bytes)", len);
    mirror_set_logger(NULL, NULL);
    snprintf(part, sizeof part, MIRROR__CUT_F, MIRROR__CUT("0123456789abcdefghij", 11));
    CHECK(!strcmp(part, "01...efghij"), "a part over its bound: its first third and last two thirds (%s)", part);
    snprintf(part, sizeof part, MIRROR__CUT_F, MIRROR__CUT("0123456789a", 11));
    CHECK(!strcmp(part, "0123456789a"), "a part within its bound: whole (%s)", part);
    snprintf(part, sizeof part, MIRROR__CUT_F, MIRROR__CUT("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 13));
    CHECK(!strcmp(part, "\xc3\xa9...\xc3\xa9\xc3\xa9\xc3\xa9"), "a part cut between UTF-8 characters, at both ends (%s)",
          part);
    memset(&d, 0, sizeof d);
    memcpy(spec, "cpu:", 4), memset(spec + 4, '9', sizeof spec - 6), spec[sizeof spec - 2] = 'x';
    d.devices = spec;
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_ERR_ARGUMENT && strlen(err.message) < 300 &&
              strstr(err.message, "devices \"cpu:99999999") && strstr(err.message, "...") &&
              strstr(err.message, "99x\": \"x\" after the replica count: CPU replicas are \"cpu:N\"") &&
              strstr(err.message, "names GPUs: \"cuda:0,1\")"),
          "devices of 5000 bytes: the list cut inside, the message whole: %s", err.message);
    mirror_strategy_destroy(s);
}

static void test_memory_report(mirror_strategy *s)
{
    static const struct {
        mirror_optimizer_kind kind;
        float momentum;
        size_t state_per_param;
        const char *name;
    } opts[] = {{MIRROR_OPT_SGD, 0.0f, 0, "SGD"},
                {MIRROR_OPT_SGD, 0.9f, 1, "SGD with momentum"},
                {MIRROR_OPT_ADAM, 0.0f, 2, "Adam"},
                {MIRROR_OPT_ADAMW, 0.0f, 2, "AdamW"},
                {MIRROR_OPT_DEFAULT, 0.0f, 0, "the default optimizer"}};
    size_t i, r;
    for (i = 0; i < sizeof opts / sizeof *opts; i++) {
        mirror_model_desc d = base_desc(s);
        mirror_model *m = NULL;
        mirror_memory_report rep;
        size_t np;
        int ok = 1;
        d.channels = 1, d.height = 6, d.width = 6, d.max_batch = 8;
        d.optimizer.kind = opts[i].kind;
        d.optimizer.momentum = opts[i].momentum;
        mirror_model_create(&d, &m, NULL);
        CHECK(mirror_memory_report_get(m, 0, &rep) == MIRROR_ERR_ARGUMENT, "%s: no report before build",
              opts[i].name);
        mirror_conv2d(m, 2, 3, 1, 1), mirror_relu(m), mirror_maxpool2d(m, 2, 2), mirror_flatten(m);
        mirror_dense(m, 3);
        CHECK(mirror_model_build(m) == MIRROR_OK, "%s: the small CNN builds: %s", opts[i].name, mirror_model_error(m));
        np = mirror_num_parameters(m);
        CHECK(np == 2 * 9 + 2 + 3 * 18 + 3, "%s: %zu parameters", opts[i].name, np);
        CHECK(mirror_optimizer_state_size(m) == opts[i].state_per_param * np, "%s: optimizer state %zu = %zu x %zu",
              opts[i].name, mirror_optimizer_state_size(m), opts[i].state_per_param, np);
        for (r = 0; r < mirror_num_replicas(s); r++) {
            memset(&rep, 0, sizeof rep);
            /* several CPU replicas share one optimizer state, counted on replica 0
               (built with MIRROR_CPU_SHARED_UPDATE=0: a slice each) */
            size_t R = mirror_num_replicas(s), state = m->plan.sharded == MIRROR__SHARDED_DEVICES ? 4 * m->sizes.nstate / R
                                                      : r == 0 || R == 1 ? 4 * m->sizes.nstate : 0; /* padding included */
            ok &= mirror_memory_report_get(m, r, &rep) == MIRROR_OK && rep.parameters == 4 * m->nslots &&
                  rep.gradients == 4 * m->nslots && rep.optimizer == state && rep.activations > 0 &&
                  m->nslots >= np && m->sizes.nstate == opts[i].state_per_param * m->nslots;
        }
        CHECK(ok, "%s: every replica reports parameters = gradients = 4 x %zu bytes, the optimizer state once "
                  "(4 x state on replica 0), activations > 0", opts[i].name, np);
        CHECK(mirror_memory_report_get(m, mirror_num_replicas(s), &rep) == MIRROR_ERR_ARGUMENT,
              "%s: replica out of range", opts[i].name);
        CHECK(mirror_memory_report_get(m, 0, NULL) == MIRROR_ERR_ARGUMENT, "%s: NULL out", opts[i].name);
        mirror_model_destroy(m);
    }
}

static void test_destroy_null(void)
{
    mirror_dataset ds;
    memset(&ds, 0, sizeof ds);
    mirror_strategy_destroy(NULL);
    mirror_model_destroy(NULL);
    mirror_dataset_free(NULL);
    mirror_dataset_free(&ds);
    CHECK(ds.x == NULL && ds.count == 0, "destroy and free accept NULL and a zeroed dataset");
}

/* The reducer: NCCL is a GPU reducer; MIRROR_REDUCER must name one. */
static void test_reducer(void)
{
    mirror_strategy_desc d;
    mirror_strategy *s = NULL;
    mirror_error err = {0, ""};
    memset(&d, 0, sizeof d);
    d.devices = "cpu:2";
    d.reducer = MIRROR_REDUCER_NCCL;
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_ERR_ARGUMENT && !s && strstr(err.message, "NCCL"),
          "the NCCL reducer on CPU replicas is an error naming NCCL (%s)", err.message);
    d.reducer = (mirror_reducer)7;
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_ERR_ARGUMENT && !s, "an unknown reducer is an error");
    d.reducer = MIRROR_REDUCER_COPY;
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_OK && mirror_strategy_query_desc(s).reducer == MIRROR_REDUCER_COPY,
          "the copy reducer on CPU replicas");
    mirror_strategy_destroy(s);
    s = NULL;
    d.reducer = MIRROR_REDUCER_DEFAULT;
    setenv("MIRROR_REDUCER", "bogus", 1);
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_ERR_ARGUMENT && !s && strstr(err.message, "MIRROR_REDUCER"),
          "MIRROR_REDUCER=bogus is an error naming the variable (%s)", err.message);
    setenv("MIRROR_REDUCER", "nccl", 1);
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_ERR_ARGUMENT && !s &&
              strstr(err.message, "MIRROR_REDUCER=nccl asks for the NCCL reducer") && strstr(err.message, "unset"),
          "MIRROR_REDUCER=nccl on CPU replicas is the error the desc's NCCL gives, naming the variable (%s)",
          err.message);
    setenv("MIRROR_REDUCER", "copy", 1);
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_OK, "MIRROR_REDUCER=copy on CPU replicas: %s", err.message);
    mirror_strategy_destroy(s);
    unsetenv("MIRROR_REDUCER");
}

/* Datasets are checked against the model dimension by dimension: the
   same size in another layout is refused, with the layout it expected. */
static void test_layout(mirror_strategy *s3)
{
    static float x[8 * 36];
    static int32_t y[8];
    mirror_model *cnn = empty_model(s3, 1, 6, 6), *flat = empty_model(s3, 36, 1, 1);
    mirror_dataset ds, val;
    mirror_fit_desc fd;
    mirror_metrics met;
    CHECK(cnn && flat, "the models for the layout checks");
    if (!cnn || !flat) goto out;
    mirror_conv2d(cnn, 2, 3, 1, 0), mirror_flatten(cnn), mirror_dense(cnn, 3);
    mirror_dense(flat, 3);
    CHECK(mirror_model_build(cnn) == MIRROR_OK && mirror_model_build(flat) == MIRROR_OK, "build");
    memset(&ds, 0, sizeof ds);
    ds.x = x, ds.labels = y, ds.count = 8, ds.channels = 6, ds.height = 6, ds.width = 1, ds.num_classes = 3;
    memset(&fd, 0, sizeof fd);
    fd.train = &ds;
    fd.batch = 4;
    fd.progress = MIRROR_PROGRESS_NONE;
    CHECK(mirror_fit(cnn, &fd, NULL) == MIRROR_ERR_SHAPE && strstr(mirror_model_error(cnn), "channels-last") &&
              strstr(mirror_model_error(cnn), "1x6x6"),
          "6x6x1 samples on a 1x6x6 model: refused, said channels-last: %s", mirror_model_error(cnn));
    CHECK(mirror_evaluate(cnn, &ds, 0, &met) == MIRROR_ERR_SHAPE, "and by evaluate");
    ds.channels = 2, ds.height = 3, ds.width = 6;
    CHECK(mirror_fit(cnn, &fd, NULL) == MIRROR_ERR_SHAPE && !strstr(mirror_model_error(cnn), "channels-last") &&
              strstr(mirror_model_error(cnn), "channels x height x width"),
          "2x3x6 samples: refused, the expected layout named: %s", mirror_model_error(cnn));
    ds.channels = 1, ds.height = 6, ds.width = 6;
    val = ds;
    val.channels = 6, val.height = 1, val.width = 6;
    fd.validation = &val;
    CHECK(mirror_fit(cnn, &fd, NULL) == MIRROR_ERR_SHAPE && strstr(mirror_model_error(cnn), "validation"),
          "a validation set of another layout: refused: %s", mirror_model_error(cnn));
    fd.validation = NULL;
    CHECK(mirror_fit(cnn, &fd, NULL) == MIRROR_OK, "1x6x6 samples train: %s", mirror_model_error(cnn));
    CHECK(mirror_fit(flat, &fd, NULL) == MIRROR_OK, "a flat model takes 1x6x6 samples as 36 features: %s",
          mirror_model_error(flat));
    ds.channels = 6, ds.height = 6, ds.width = 1;
    CHECK(mirror_fit(flat, &fd, NULL) == MIRROR_OK, "and 6x6x1 ones");
out:
    mirror_model_destroy(cnn);
    mirror_model_destroy(flat);
}

/* The parameter arenas' layout: each tensor at a multiple of the backend's
   alignment (a build with MIRROR_CPU_PARAM_ALIGN pads, as a GPU's does),
   zeros between, which training keeps; the API sees the values alone. */
static void test_param_layout(mirror_strategy *s3)
{
    static float x[8 * 36];
    static int32_t y[8];
    mirror_model_desc d = base_desc(s3);
    mirror_model *m = NULL;
    mirror_batch b;
    size_t i, r, c, values = 0, misplaced = 0, nonzero = 0, n;
    float *got, *again;
    d.channels = 1, d.height = 6, d.width = 6, d.max_batch = 8, d.seed = 5;
    d.optimizer.kind = MIRROR_OPT_ADAMW, d.optimizer.weight_decay = 0.1f;
    CHECK(mirror_model_create(&d, &m, NULL) == MIRROR_OK, "the model for the layout");
    if (!m) return;
    mirror_conv2d(m, 3, 3, 1, 0), mirror_batchnorm(m, MIRROR_BN_SYNC), mirror_relu(m), mirror_flatten(m);
    mirror_dense(m, 5), mirror_relu(m), mirror_dense(m, 3);
    CHECK(mirror_model_build(m) == MIRROR_OK, "build: %s", mirror_model_error(m));
    for (i = 0; i < 8 * 36; i++) x[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
    for (i = 0; i < 8; i++) y[i] = (int32_t)(i % 3);
    memset(&b, 0, sizeof b);
    b.x = x, b.labels = y, b.rows = b.n = 8;
    for (i = 0; i < 4; i++) CHECK(mirror_train_step(m, &b, NULL) == MIRROR_OK, "step %zu", i);
    for (i = 0; i < m->nlayers; i++) {
        const mirror__layer *l = &m->layers[i];
        values += l->n_w + l->n_b;
        misplaced += l->n_w && (l->w_off % MIRROR_CPU_PARAM_ALIGN || l->b_off % MIRROR_CPU_PARAM_ALIGN);
    }
    CHECK(misplaced == 0 && mirror_num_parameters(m) == values && mirror_optimizer_state_size(m) == 2 * values &&
              m->nslots >= values,
          "tensors at multiples of %d floats (%zu misplaced); %zu values in arenas of %zu floats", MIRROR_CPU_PARAM_ALIGN,
          misplaced, values, m->nslots);
    for (r = 0; r < m->s->replicas; r++) /* the gaps: not in any tensor */
        for (c = 0; c < m->nslots; c++) {
            int inside = 0;
            for (i = 0; i < m->nlayers && !inside; i++) {
                const mirror__layer *l = &m->layers[i];
                inside = (c >= l->w_off && c < l->w_off + l->n_w) || (c >= l->b_off && c < l->b_off + l->n_b);
            }
            if (inside) continue;
            nonzero += m->rep[r].params[c] != 0.0f || m->rep[r].grads[c] != 0.0f;
            if (m->plan.sharded == MIRROR__SHARDED_DEVICES && c / m->plan.slice != r) continue; /* not replica r's slice of the state */
            nonzero += *mirror__state_at(m, &m->rep[r], 0, c) != 0.0f || *mirror__state_at(m, &m->rep[r], 1, c) != 0.0f;
        }
    CHECK(nonzero == 0, "after 4 AdamW steps on %zu replicas the gaps between tensors hold zeros (%zu do not)",
          m->s->replicas, nonzero);
    n = mirror_num_parameters(m);
    got = (float *)calloc(n, sizeof(float)), again = (float *)calloc(n, sizeof(float));
    if (got && again) {
        got[0] = 1.0f;
        CHECK(mirror_get_parameters(m, 1, got, n) == MIRROR_OK && mirror_set_parameters(m, got, n) == MIRROR_OK &&
                  mirror_get_parameters(m, 2, again, n) == MIRROR_OK && !memcmp(got, again, n * sizeof(float)),
              "get then set then get: the same values");
        CHECK(mirror_get_parameters(m, 0, got, n + 1) == MIRROR_ERR_ARGUMENT &&
                  mirror_set_parameters(m, got, m->nslots + 1) == MIRROR_ERR_ARGUMENT,
              "counts other than the values' refused");
    }
    free(got), free(again);
    mirror_model_destroy(m);
}

/* Two threads on one model: while one is inside fit (held in its epoch
   hook), every call from the other returns MIRROR_ERR_STATE at once; after
   the fit, the same calls work. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int inside, tested, fit_rc;
    mirror_model *m;
    mirror_dataset *ds;
} busy = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, NULL, NULL};

static int hold_in_fit(void *user, const mirror_epoch_log *log)
{
    (void)user, (void)log;
    pthread_mutex_lock(&busy.lock);
    busy.inside = 1;
    pthread_cond_broadcast(&busy.cond);
    while (!busy.tested) pthread_cond_wait(&busy.cond, &busy.lock);
    pthread_mutex_unlock(&busy.lock);
    return 0;
}

static void *fit_thread(void *arg)
{
    mirror_fit_desc fd;
    (void)arg;
    memset(&fd, 0, sizeof fd);
    fd.train = busy.ds;
    fd.batch = 4;
    fd.progress = MIRROR_PROGRESS_NONE;
    fd.on_epoch = hold_in_fit;
    busy.fit_rc = mirror_fit(busy.m, &fd, NULL);
    return NULL;
}

static void test_two_threads(mirror_strategy *s3)
{
    mirror_model *m = small_model(s3, MIRROR_LOSS_SOFTMAX_CE), *other = small_model(s3, MIRROR_LOSS_SOFTMAX_CE);
    mirror_dataset ds;
    mirror_batch b;
    mirror_metrics met;
    float p[MAXP], *bufs[3] = {p, p, p};
    pthread_t t;
    int rc[6], i;
    CHECK(m && other, "models for the two-thread check");
    if (!m || !other) goto out;
    memset(&ds, 0, sizeof ds);
    ds.x = X, ds.labels = Y, ds.count = 16, ds.channels = 4, ds.height = 1, ds.width = 1, ds.num_classes = 3;
    memset(&b, 0, sizeof b);
    b.x = X, b.labels = Y, b.n = 4;
    busy.m = m, busy.ds = &ds;
    if (pthread_create(&t, NULL, fit_thread, NULL) != 0) {
        CHECK(0, "pthread_create");
        goto out;
    }
    pthread_mutex_lock(&busy.lock);
    while (!busy.inside) pthread_cond_wait(&busy.cond, &busy.lock);
    pthread_mutex_unlock(&busy.lock);
    rc[0] = mirror_train_step(m, &b, &met);
    rc[1] = mirror_evaluate_batch(m, &b, &met);
    rc[2] = mirror_get_parameters(m, 0, p, mirror_num_parameters(m));
    rc[3] = mirror_train_step(other, &b, &met); /* another model on the same strategy */
    rc[4] = mirror_all_reduce_sum(s3, bufs, 4);
    rc[5] = mirror_checkpoint_load(m, "/nonexistent", 0, NULL);
    for (i = 0; i < 6; i++)
        CHECK(rc[i] == MIRROR_ERR_STATE, "call %d from a second thread during fit: MIRROR_ERR_STATE, not a deadlock (%s)",
              i, mirror_result_string(rc[i]));
    CHECK(strstr(mirror_model_error(other), "another thread"), "the message says why: %s", mirror_model_error(other));
    pthread_mutex_lock(&busy.lock);
    busy.tested = 1;
    pthread_cond_broadcast(&busy.cond);
    pthread_mutex_unlock(&busy.lock);
    pthread_join(t, NULL);
    CHECK(busy.fit_rc == MIRROR_OK, "the fit itself went on: %s", mirror_model_error(m));
    CHECK(mirror_train_step(m, &b, &met) == MIRROR_OK && mirror_train_step(other, &b, &met) == MIRROR_OK,
          "after it, both models train from this thread");
out:
    mirror_model_destroy(m);
    mirror_model_destroy(other);
}

/* The strategy destroyed before its models: they keep working, and the
   strategy goes with the last of them (ASan and valgrind see the rest). */
static void test_destroy_order(void)
{
    mirror_strategy *s = new_strategy("cpu:2", 0);
    mirror_model *a = s ? small_model(s, MIRROR_LOSS_SOFTMAX_CE) : NULL, *b2 = s ? small_model(s, MIRROR_LOSS_MSE) : NULL;
    mirror_batch b;
    mirror_metrics met;
    long live = live_allocs;
    CHECK(a && b2, "two models on a strategy");
    if (!a || !b2) {
        mirror_model_destroy(a), mirror_model_destroy(b2), mirror_strategy_destroy(s);
        return;
    }
    memset(&b, 0, sizeof b);
    b.x = X, b.labels = Y, b.n = 8;
    log_notices = 0;
    mirror_set_logger(test_logger, &log_errors);
    mirror_strategy_destroy(s);
    mirror_set_logger(NULL, NULL);
    CHECK(live_allocs == live && log_notices == 1, "destroyed first: released later, with a notice (%ld freed)",
          live - live_allocs);
    CHECK(mirror_train_step(a, &b, &met) == MIRROR_OK, "a model trains on after its strategy's destroy: %s",
          mirror_model_error(a));
    mirror_model_destroy(a);
    CHECK(live_allocs < live, "the first model's memory is freed");
    b.targets = T;
    CHECK(mirror_train_step(b2, &b, &met) == MIRROR_OK, "the last model too: %s", mirror_model_error(b2));
    mirror_model_destroy(b2); /* releases the strategy; the final count of live allocations checks it */
}

/* The deadline wait behind the MPI and GPU waits: a poll that answers
   after some calls, and one that never does. */
typedef struct poll_script {
    int calls, answer_at, answer;
} poll_script;

static int scripted_poll(void *ctx)
{
    poll_script *p = (poll_script *)ctx;
    return ++p->calls >= p->answer_at ? p->answer : 0;
}

static void test_timeout(void)
{
    poll_script done = {0, 5, 1}, failed = {0, 3, -1}, never = {0, INT_MAX, 1};
    mirror_strategy_desc d;
    mirror_strategy *s = NULL;
    mirror_error err = {0, ""};
    double t0, waited;
    int got = mirror__poll(scripted_poll, &done, 10.0);
    CHECK(got == 1 && done.calls == 5, "a poll done at the 5th call: 1 after 5 calls (%d after %d)", got, done.calls);
    got = mirror__poll(scripted_poll, &failed, 10.0);
    CHECK(got == -1 && failed.calls == 3, "a poll failing at the 3rd call: -1 after 3 calls (%d after %d)", got,
          failed.calls);
    t0 = mirror__now();
    got = mirror__poll(scripted_poll, &never, 0.05);
    waited = mirror__now() - t0;
    CHECK(got == 0 && waited >= 0.05 && waited < 5.0, "a poll never done: 0 after the 0.05 s deadline (%d after %.3f s)",
          got, waited);

    memset(&d, 0, sizeof d);
    d.devices = "cpu:1";
    unsetenv("MIRROR_TIMEOUT");
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_OK && s->timeout == 300.0, "the default timeout: 300 s");
    mirror_strategy_destroy(s), s = NULL;
    setenv("MIRROR_TIMEOUT", "2.5", 1);
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_OK && s->timeout == 2.5, "MIRROR_TIMEOUT=2.5: 2.5 s");
    mirror_strategy_destroy(s), s = NULL;
    d.timeout = 7.0;
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_OK && s->timeout == 7.0, "the desc's 7 s over the environment");
    mirror_strategy_destroy(s), s = NULL;
    d.timeout = 0.0;
    setenv("MIRROR_TIMEOUT", "soon", 1);
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_ERR_ARGUMENT && s == NULL && strstr(err.message, "soon"),
          "MIRROR_TIMEOUT=soon: an argument error naming it (%s)", err.message);
    unsetenv("MIRROR_TIMEOUT");
    /* a timeout that would wait for ever or not at all: refused, naming it,
       never taken for the default */
    {
        static const struct {
            double timeout;
            const char *says;
        } bad[] = {{-1.0, "timeout -1"}, {-1e-9, "timeout -1e-09"}, {1e-9, "timeout 1e-09"}, {NAN, "nan"},
                   {INFINITY, "inf"}};
        size_t i;
        for (i = 0; i < sizeof bad / sizeof *bad; i++) {
            d.timeout = bad[i].timeout;
            err.message[0] = '\0';
            CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_ERR_ARGUMENT && s == NULL &&
                      strstr(err.message, bad[i].says) && strstr(err.message, "seconds"),
                  "timeout %g: an argument error naming it (%s)", bad[i].timeout, err.message);
            mirror_strategy_destroy(s), s = NULL;
        }
        static const char *const bad_env[] = {"inf", "1e999", "1e-9"};
        for (i = 0; i < sizeof bad_env / sizeof *bad_env; i++) {
            setenv("MIRROR_TIMEOUT", bad_env[i], 1);
            d.timeout = 0.0;
            CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_ERR_ARGUMENT && s == NULL &&
                      strstr(err.message, bad_env[i]),
                  "MIRROR_TIMEOUT=%s: an argument error naming it (%s)", bad_env[i], err.message);
            mirror_strategy_destroy(s), s = NULL;
        }
        unsetenv("MIRROR_TIMEOUT");
    }
}

/* A CUDA build without a device list: each answer CUDA can give, faked. No
   driver or no GPU trains on CPU replicas with a notice that says which; a
   driver too old for the runtime, or a GPU that cannot be used, is an
   error that says what to do. */
static void test_cuda_verdict(void)
{
    static const struct {
        mirror__cuda_answer answer;
        int count, driver;
        mirror__gpus verdict;
        const char *says, *also;
    } cases[] = {
        {MIRROR__CUDA_COUNTED, 2, 13000, MIRROR__GPUS_USE, "", ""},
        {MIRROR__CUDA_COUNTED, 1, 12080, MIRROR__GPUS_USE, "", ""}, /* an older minor: CUDA's compatibility */
        {MIRROR__CUDA_OLD_DRIVER, 0, 0, MIRROR__GPUS_NONE, "no NVIDIA driver found", ""}, /* what no driver answers */
        {MIRROR__CUDA_FAILED, 0, 0, MIRROR__GPUS_NONE, "no NVIDIA driver found", ""},
        {MIRROR__CUDA_NO_DEVICE, 0, 13000, MIRROR__GPUS_NONE, "no NVIDIA GPU found", ""},
        {MIRROR__CUDA_COUNTED, 0, 13000, MIRROR__GPUS_NONE, "no NVIDIA GPU found", ""},
        {MIRROR__CUDA_OLD_DRIVER, 0, 12040, MIRROR__GPUS_ERROR, "driver is for CUDA 12.4", "CUDA 13.0 or newer"},
        {MIRROR__CUDA_FAILED, 0, 12040, MIRROR__GPUS_ERROR, "runtime (13.0)", "devices \"cpu\""},
        {MIRROR__CUDA_FAILED, 0, 13000, MIRROR__GPUS_ERROR, "CUDA cannot use the GPUs: all CUDA-capable devices",
         "devices \"cpu\""},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[400] = "";
        const char *message = cases[i].answer == MIRROR__CUDA_FAILED
                                  ? "all CUDA-capable devices are busy or unavailable"
                                  : "CUDA driver version is insufficient for CUDA runtime version";
        mirror__gpus got = mirror__cuda_verdict(cases[i].answer, cases[i].count, cases[i].driver, 13000, message, why,
                                                sizeof why);
        CHECK(got == cases[i].verdict && strstr(why, cases[i].says) && strstr(why, cases[i].also) &&
                  !strstr(why, got == MIRROR__GPUS_ERROR ? "no NVIDIA" : "insufficient"),
              "case %zu: verdict %d saying \"%s\" (%d: %s)", i, (int)cases[i].verdict, cases[i].says, (int)got, why);
    }
}

// >>bounds -------------------------------------------------------------------------

enum { B_LR, B_MOMENTUM, B_DECAY, B_BETA1, B_BETA2, B_EPS, B_CLIP, B_GAMMA, B_MIN_LR, B_GROWTH, B_BACKOFF };

/* A desc with one optimizer or loss-scale setting at v: created (ok) or
   refused; an accepted Adam (beta1, beta2, eps) also takes a step and
   keeps every parameter finite. */
static void bound(mirror_strategy *s, int field, float v, int ok, const char *what)
{
    mirror_model_desc d = base_desc(s);
    mirror_optimizer_desc *o = &d.optimizer;
    mirror_model *m = NULL;
    mirror_error err = {0, ""};
    int rc;
    if (field == B_BETA1 || field == B_BETA2 || field == B_EPS) o->kind = MIRROR_OPT_ADAM;
    if (field == B_GAMMA) o->schedule = MIRROR_LR_STEP, o->step_size = 1;
    if (field == B_MIN_LR) o->schedule = MIRROR_LR_COSINE, o->total_steps = 10, o->lr = 0.5f;
    if (field == B_GROWTH || field == B_BACKOFF) d.precision = MIRROR_PRECISION_FP16;
    switch (field) {
    case B_LR: o->lr = v; break;
    case B_MOMENTUM: o->momentum = v; break;
    case B_DECAY: o->weight_decay = v; break;
    case B_BETA1: o->beta1 = v; break;
    case B_BETA2: o->beta2 = v; break;
    case B_EPS: o->eps = v; break;
    case B_CLIP: o->clip_norm = v; break;
    case B_GAMMA: o->gamma = v; break;
    case B_MIN_LR: o->min_lr = v; break;
    case B_GROWTH: d.loss_scale.growth_factor = v; break;
    default: d.loss_scale.backoff_factor = v; break;
    }
    rc = mirror_model_create(&d, &m, &err);
    CHECK(ok ? rc == MIRROR_OK : rc == MIRROR_ERR_ARGUMENT && err.message[0], "%s (%.9g): %s (%s)", what, (double)v,
          ok ? "accepted" : "refused", rc ? err.message : "created");
    if (!m) return;
    if (o->kind == MIRROR_OPT_ADAM) {
        mirror_batch b = batch_of(8);
        float w[15];
        size_t i;
        int finite = 1;
        mirror_dense(m, 3);
        CHECK(mirror_model_build(m) == MIRROR_OK && mirror_train_step(m, &b, NULL) == MIRROR_OK &&
                  mirror_get_parameters(m, 0, w, 15) == MIRROR_OK,
              "%s: a step: %s", what, mirror_model_error(m));
        for (i = 0; i < 15; i++) finite &= isfinite(w[i]) != 0;
        CHECK(finite, "%s: every parameter finite after a step", what);
    }
    mirror_model_destroy(m);
}

/* Each optimizer and loss-scale bound at its edge: the last float inside
   is accepted, the first outside (the next float) refused. An open end is
   the bound itself: beta2 written as 0.99999999f is 1.0f, which made every
   Adam update 0/0. */
static void test_bounds(mirror_strategy *s)
{
    const float tiny = nextafterf(0.0f, 1.0f), below1 = nextafterf(1.0f, 0.0f), above1 = nextafterf(1.0f, 2.0f);
    bound(s, B_LR, 1e6f, 1, "lr 1e6");
    bound(s, B_LR, nextafterf(1e6f, 2e6f), 0, "lr just above 1e6");
    bound(s, B_LR, -tiny, 0, "lr just below 0");
    bound(s, B_MOMENTUM, 1.0f, 1, "momentum 1");
    bound(s, B_MOMENTUM, above1, 0, "momentum just above 1");
    bound(s, B_MOMENTUM, -tiny, 0, "momentum just below 0");
    bound(s, B_DECAY, 1e6f, 1, "weight decay 1e6");
    bound(s, B_DECAY, nextafterf(1e6f, 2e6f), 0, "weight decay just above 1e6");
    bound(s, B_DECAY, -tiny, 0, "weight decay just below 0");
    bound(s, B_BETA1, below1, 1, "beta1 just below 1");
    bound(s, B_BETA1, 1.0f, 0, "beta1 1");
    bound(s, B_BETA1, 0.99999999f, 0, "beta1 0.99999999f (1.0f)");
    bound(s, B_BETA1, -tiny, 0, "beta1 just below 0");
    bound(s, B_BETA2, below1, 1, "beta2 just below 1");
    bound(s, B_BETA2, 1.0f, 0, "beta2 1");
    bound(s, B_BETA2, 0.99999999f, 0, "beta2 0.99999999f (1.0f)");
    bound(s, B_BETA2, -tiny, 0, "beta2 just below 0");
    bound(s, B_EPS, 1.0f, 1, "eps 1");
    bound(s, B_EPS, tiny, 1, "eps the smallest float");
    bound(s, B_EPS, above1, 0, "eps just above 1");
    bound(s, B_EPS, -tiny, 0, "eps just below 0");
    bound(s, B_CLIP, FLT_MAX, 1, "clip_norm FLT_MAX");
    bound(s, B_CLIP, INFINITY, 0, "clip_norm Inf");
    bound(s, B_CLIP, -tiny, 0, "clip_norm just below 0");
    bound(s, B_GAMMA, 1.0f, 1, "gamma 1");
    bound(s, B_GAMMA, tiny, 1, "gamma the smallest float");
    bound(s, B_GAMMA, above1, 0, "gamma just above 1");
    bound(s, B_GAMMA, -tiny, 0, "gamma just below 0");
    bound(s, B_MIN_LR, 0.5f, 1, "min_lr at lr");
    bound(s, B_MIN_LR, nextafterf(0.5f, 1.0f), 0, "min_lr just above lr");
    bound(s, B_MIN_LR, -tiny, 0, "min_lr just below 0");
    bound(s, B_GROWTH, above1, 1, "growth just above 1");
    bound(s, B_GROWTH, 1.0f, 0, "growth 1");
    bound(s, B_GROWTH, 1e6f, 1, "growth 1e6");
    bound(s, B_GROWTH, nextafterf(1e6f, 2e6f), 0, "growth just above 1e6");
    bound(s, B_BACKOFF, below1, 1, "backoff just below 1");
    bound(s, B_BACKOFF, 1.0f, 0, "backoff 1");
    bound(s, B_BACKOFF, tiny, 1, "backoff the smallest float");
    bound(s, B_BACKOFF, -tiny, 0, "backoff just below 0");
}

int main(void)
{
    mirror_strategy *s3;
    size_t i;
    for (i = 0; i < 16 * 4; i++) X[i] = (float)((i * 7) % 11) / 10.0f - 0.5f;
    for (i = 0; i < 16; i++) Y[i] = (int32_t)(i % 3);
    for (i = 0; i < 16 * 3; i++) T[i] = (float)(i % 5) / 4.0f;

    test_strategy();
    test_reducer();
    test_timeout();
    test_cuda_verdict();
    s3 = new_strategy("cpu:3", 0);
    CHECK(s3 != NULL, "a strategy of 3 replicas");
    if (!s3) return check_done("test_api");
    test_model_create(s3);
    test_model_defaults(s3);
    test_bounds(s3);
    test_layers(s3);
    test_steps(s3);
    test_fit(s3);
    test_layout(s3);
    test_param_layout(s3);
    test_two_threads(s3);
    test_destroy_order();
    test_results();
    test_logger_hook(s3);
    test_message_bounds();
    test_memory_report(s3);
    test_destroy_null();
    mirror_strategy_destroy(s3);
    CHECK(live_allocs == 0, "every allocation freed (%ld live)", live_allocs);
    return check_done("test_api");
}
