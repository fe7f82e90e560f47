/* resnet.c - a small ResNet trained for 20 steps on synthetic digits, every
   step's values written out, for tests/interop/test_resnet.py to train the
   same network in PyTorch from the same start and compare.

   resnet REPLICAS CHUNK OUTDIR
     REPLICAS  CPU replicas (1 or more)
     CHUNK     deterministic mode's chunk (0: the mode without it)
     OUTDIR    written there, float32 and int32 raw:
               x.f32, labels.i32   the 951 samples (1 x 12 x 12) and their labels
               init.f32            the parameters before the first step
               params.f32          20 x the parameters after each step
               loss.f64            20 x each step's mean loss
               relu.f32            20 x the relus' inputs of each step (the
                                   batchnorm layers' outputs: each layer's
                                   [rows, C, H, W] in turn, rows in batch order)
   The network: conv 8 3x3, batchnorm, relu; an identity block and a
   projecting one (8 -> 16 channels, stride 2) of conv 3x3, batchnorm, relu;
   global average pooling, dense 10. SGD with Nesterov momentum 0.9, weight
   decay 1e-4, rate 0.05; global batches of 50 in order, the last two 49
   and 2. The parameters are in the model's order: each layer's weight then
   bias (batchnorm: gamma, beta; a projecting block: its 1x1 convolution).

   Build:  make build/interop_resnet
   (or: cc -O2 -std=c99 tests/interop/resnet.c -o resnet -lm -lpthread) */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"
#include "../digits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SIDE = 12, SAMPLES = 951, STEPS = 20, RELU_MAX = 50 * (8 * 144 + 8 * 144 + 16 * 36) };

static int write_to(const char *dir, const char *name, const void *p, size_t size, size_t n, const char *mode)
{
    char path[4096];
    FILE *f;
    int ok;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, mode))) return 0;
    ok = fwrite(p, size, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* The batchnorm layers' outputs of m's last training step, rows in batch order. */
static size_t relu_inputs(const mirror_model *m, float *z)
{
    size_t i, r, n = 0;
    for (i = 0; i < m->nlayers; i++) {
        const mirror__layer *l = &m->layers[i];
        for (r = 0; l->kind == MIRROR__BATCHNORM && r < m->s->replicas; r++) {
            size_t k = m->rep[r].count * mirror__out_size(l);
            if (n + k > RELU_MAX) return 0;
            memcpy(z + n, m->rep[r].acts + l->out_off, k * sizeof(float));
            n += k;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    mirror_strategy_desc sd;
    mirror_model_desc md;
    mirror_strategy *s = NULL;
    mirror_model *m = NULL;
    mirror_error err = {0, ""};
    mirror_dataset data;
    float *p = NULL, *z = (float *)malloc(RELU_MAX * sizeof(float));
    size_t k, n, np, nz, first = 0;
    const char *dir = argc == 4 ? argv[3] : NULL;
    int ok;
    if (!dir || atoi(argv[1]) < 1 || atoi(argv[2]) < 0 || !z) {
        fprintf(stderr, "usage: resnet REPLICAS CHUNK OUTDIR\n");
        return 2;
    }
    small_digits(&data, SAMPLES, 23, SIDE, 2);
    memset(&sd, 0, sizeof sd);
    sd.devices = "cpu", sd.num_replicas = (size_t)atoi(argv[1]);
    memset(&md, 0, sizeof md);
    md.channels = 1, md.height = md.width = SIDE, md.max_batch = 50, md.seed = 33;
    md.deterministic = atoi(argv[2]) > 0, md.chunk = (size_t)atoi(argv[2]);
    md.optimizer.kind = MIRROR_OPT_SGD, md.optimizer.lr = 0.05f, md.optimizer.momentum = 0.9f;
    md.optimizer.nesterov = 1, md.optimizer.weight_decay = 1e-4f;
    ok = mirror_strategy_create(&sd, &s, &err) == MIRROR_OK && (md.strategy = s, 1) &&
         mirror_model_create(&md, &m, &err) == MIRROR_OK;
    ok = ok && !mirror_conv2d(m, 8, 3, 1, 1) && !mirror_batchnorm(m, MIRROR_BN_SYNC) && !mirror_relu(m) &&
         !mirror_residual(m) && !mirror_conv2d(m, 8, 3, 1, 1) && !mirror_batchnorm(m, MIRROR_BN_SYNC) &&
         !mirror_relu(m) && !mirror_residual_end(m) && !mirror_residual(m) && !mirror_conv2d(m, 16, 3, 2, 1) &&
         !mirror_batchnorm(m, MIRROR_BN_SYNC) && !mirror_relu(m) && !mirror_residual_end(m) &&
         !mirror_global_avgpool(m) && !mirror_flatten(m) && !mirror_dense(m, 10) && !mirror_model_build(m);
    np = ok ? mirror_num_parameters(m) : 0;
    ok = ok && (p = (float *)malloc(np * sizeof(float))) != NULL && !mirror_get_parameters(m, 0, p, np) &&
         write_to(dir, "x.f32", data.x, sizeof(float), SAMPLES * SIDE * SIDE, "wb") &&
         write_to(dir, "labels.i32", data.labels, sizeof(int32_t), SAMPLES, "wb") &&
         write_to(dir, "init.f32", p, sizeof(float), np, "wb");
    for (k = 0; ok && k < STEPS; k++, first += n) {
        mirror_batch b;
        mirror_metrics met;
        double loss;
        n = k < 18 ? 50 : k == 18 ? 49 : 2;
        memset(&b, 0, sizeof b);
        b.x = data.x + first * SIDE * SIDE, b.labels = data.labels + first, b.n = n;
        ok = mirror_train_step(m, &b, &met) == MIRROR_OK && (nz = relu_inputs(m, z)) > 0 &&
             !mirror_get_parameters(m, 0, p, np);
        loss = met.loss_sum / (double)n;
        ok = ok && write_to(dir, "params.f32", p, sizeof(float), np, k ? "ab" : "wb") &&
             write_to(dir, "loss.f64", &loss, sizeof loss, 1, k ? "ab" : "wb") &&
             write_to(dir, "relu.f32", z, sizeof(float), nz, k ? "ab" : "wb");
    }
    if (!ok)
        fprintf(stderr, "resnet: %s\n",
                err.message[0]              ? err.message
                : m && *mirror_model_error(m) ? mirror_model_error(m)
                                              : "out of memory, or a file in OUTDIR not written");
    free(p), free(z);
    mirror_dataset_free(&data);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    return ok ? 0 : 1;
}
