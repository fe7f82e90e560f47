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
#include "../resnet_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv)
{
    mirror_strategy_desc sd;
    mirror_strategy *s = NULL;
    mirror_model *m = NULL;
    mirror_error err = {0, ""};
    mirror_dataset data;
    float *p = NULL, *z = (float *)malloc(RESNET_RELUS * sizeof(float));
    size_t k, n, np, nz, first = 0;
    const char *dir = argc == 4 ? argv[3] : NULL;
    int ok;
    if (!dir || atoi(argv[1]) < 1 || atoi(argv[2]) < 0 || !z) {
        fprintf(stderr, "usage: resnet REPLICAS CHUNK OUTDIR\n");
        return 2;
    }
    small_digits(&data, RESNET_SAMPLES, 23, RESNET_SIDE, 2);
    memset(&sd, 0, sizeof sd);
    sd.devices = "cpu", sd.num_replicas = (size_t)atoi(argv[1]);
    ok = mirror_strategy_create(&sd, &s, &err) == MIRROR_OK && (m = resnet_model(s, (size_t)atoi(argv[2]), &err));
    np = ok ? mirror_num_parameters(m) : 0;
    ok = ok && (p = (float *)malloc(np * sizeof(float))) != NULL && !mirror_get_parameters(m, 0, p, np) &&
         write_to(dir, "x.f32", data.x, sizeof(float), RESNET_SAMPLES * RESNET_SIDE * RESNET_SIDE, "wb") &&
         write_to(dir, "labels.i32", data.labels, sizeof(int32_t), RESNET_SAMPLES, "wb") &&
         write_to(dir, "init.f32", p, sizeof(float), np, "wb");
    for (k = 0; ok && k < RESNET_STEPS; k++, first += n) {
        mirror_batch b;
        mirror_metrics met;
        double loss;
        n = resnet_rows(k);
        memset(&b, 0, sizeof b);
        b.x = data.x + first * RESNET_SIDE * RESNET_SIDE, b.labels = data.labels + first, b.n = n;
        ok = mirror_train_step(m, &b, &met) == MIRROR_OK && (nz = resnet_relu_inputs(m, z)) > 0 &&
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
