/* models.h - the example models, shared by examples/train.c and the
   benchmarks so that they measure what the trainer trains.

   mlp: 784-256-128-10 (flatten, dense-relu, dense-relu, dense)
   cnn: conv 16 3x3 - relu - maxpool 2, conv 32 3x3 - relu - maxpool 2,
        flatten, dense 128 - relu, dense 10
   cnn-bn: the cnn with SyncBatchNorm after each convolution
   resnet: a small ResNet for 28x28 or 32x32 images (any size): conv 32 3x3
        - batchnorm - relu, then three residual blocks of two conv 3x3 -
        batchnorm (relu between, relu after the sum) with 32, 64 and 128
        channels, the last two halving the plane (stride 2, a projected
        shortcut), global average pooling, dense 10
   With dropout p > 0, a dropout layer before each dense layer after the
   first (the hidden units' outputs are what it drops). */
#ifndef EXAMPLE_MODELS_H
#define EXAMPLE_MODELS_H
#include <stdio.h>
#include <string.h>

/* A dense layer of `units`, after a dropout of p when p > 0. */
static void example_dense(mirror_model *m, size_t units, float p)
{
    if (p > 0.0f) mirror_dropout(m, p);
    mirror_dense(m, units);
}

/* conv k x k (padding k/2) - batchnorm (synchronised), and a relu after. */
static void example_conv_bn(mirror_model *m, size_t filters, size_t stride, int relu)
{
    mirror_conv2d(m, filters, 3, stride, 1);
    mirror_batchnorm(m, MIRROR_BN_SYNC);
    if (relu) mirror_relu(m);
}

/* ResNet's basic block: two conv-batchnorms, the input added, a relu. */
static void example_block(mirror_model *m, size_t filters, size_t stride)
{
    mirror_residual(m);
    example_conv_bn(m, filters, stride, 1);
    example_conv_bn(m, filters, 1, 0);
    mirror_residual_end(m);
    mirror_relu(m);
}

/* Adds the layers of `kind` ("mlp", "cnn", "cnn-bn" or "resnet") to m and builds it; returns
   MIRROR_ERR_ARGUMENT for another kind, else what mirror_model_build does. */
static int example_model(mirror_model *m, const char *kind, float dropout)
{
    int bn = !strcmp(kind, "cnn-bn");
    if (!strcmp(kind, "mlp")) {
        mirror_flatten(m);
        mirror_dense(m, 256);
        mirror_relu(m);
        example_dense(m, 128, dropout);
        mirror_relu(m);
        example_dense(m, 10, dropout);
    } else if (!strcmp(kind, "cnn") || bn) {
        mirror_conv2d(m, 16, 3, 1, 1);
        if (bn) mirror_batchnorm(m, MIRROR_BN_SYNC);
        mirror_relu(m);
        mirror_maxpool2d(m, 2, 2);
        mirror_conv2d(m, 32, 3, 1, 1);
        if (bn) mirror_batchnorm(m, MIRROR_BN_SYNC);
        mirror_relu(m);
        mirror_maxpool2d(m, 2, 2);
        mirror_flatten(m);
        example_dense(m, 128, dropout);
        mirror_relu(m);
        example_dense(m, 10, dropout);
    } else if (!strcmp(kind, "resnet")) {
        example_conv_bn(m, 32, 1, 1);
        example_block(m, 32, 1);
        example_block(m, 64, 2);
        example_block(m, 128, 2);
        mirror_global_avgpool(m);
        mirror_flatten(m);
        example_dense(m, 10, dropout);
    } else {
        return MIRROR_ERR_ARGUMENT;
    }
    return mirror_model_build(m);
}

#ifdef EXAMPLE_BENCH_MODEL
/* The benchmarks' model: `kind` on 28x28 digits, Adam, arenas for global
   batches of `batch`, deterministic mode's chunk (0: off) and the update's
   sharding; NULL (with a message on stderr) on failure. */
static mirror_model *example_bench_model_with(mirror_strategy *s, const char *kind, size_t batch, size_t chunk,
                                              mirror_shard_update shard, mirror_precision precision)
{
    mirror_model_desc d;
    mirror_model *m = NULL;
    mirror_error err = {0, ""};
    memset(&d, 0, sizeof d);
    d.strategy = s;
    d.deterministic = chunk > 0, d.chunk = chunk;
    d.shard_update = shard;
    d.channels = 1, d.height = 28, d.width = 28;
    d.max_batch = batch;
    d.optimizer.kind = MIRROR_OPT_ADAM;
    d.precision = precision; /* bf16 or fp16: the loss scaling's defaults */
    if (mirror_model_create(&d, &m, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return NULL;
    }
    if (example_model(m, kind, 0.0f)) {
        fprintf(stderr, "%s\n", mirror_model_error(m));
        mirror_model_destroy(m);
        return NULL;
    }
    return m;
}

static inline mirror_model *example_bench_model(mirror_strategy *s, const char *kind, size_t batch)
{
    return example_bench_model_with(s, kind, batch, 0, MIRROR_SHARD_AUTO, MIRROR_PRECISION_FP32);
}

/* The benchmarks' batch: the n samples of ds at index. */
static mirror_batch example_bench_batch(const mirror_dataset *ds, const size_t *index, size_t n)
{
    mirror_batch b;
    memset(&b, 0, sizeof b);
    b.x = ds->x, b.labels = ds->labels, b.rows = ds->count;
    b.index = index, b.n = n;
    return b;
}
#endif /* EXAMPLE_BENCH_MODEL */
#endif
