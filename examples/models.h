/* models.h - the example models, shared by examples/train.c and the
   benchmarks so that they measure what the trainer trains.

   mlp: 784-256-128-10 (flatten, dense-relu, dense-relu, dense)
   cnn: conv 16 3x3 - relu - maxpool 2, conv 32 3x3 - relu - maxpool 2,
        flatten, dense 128 - relu, dense 10 */
#ifndef EXAMPLE_MODELS_H
#define EXAMPLE_MODELS_H
#include <string.h>

/* Adds the layers of `kind` ("mlp" or "cnn") to m and builds it; returns
   MIRROR_ERR_ARGUMENT for another kind, else what mirror_model_build does. */
static int example_model(mirror_model *m, const char *kind)
{
    if (!strcmp(kind, "mlp")) {
        mirror_flatten(m);
        mirror_dense(m, 256), mirror_relu(m);
        mirror_dense(m, 128), mirror_relu(m);
        mirror_dense(m, 10);
    } else if (!strcmp(kind, "cnn")) {
        mirror_conv2d(m, 16, 3, 1, 1), mirror_relu(m), mirror_maxpool2d(m, 2, 2);
        mirror_conv2d(m, 32, 3, 1, 1), mirror_relu(m), mirror_maxpool2d(m, 2, 2);
        mirror_flatten(m);
        mirror_dense(m, 128), mirror_relu(m);
        mirror_dense(m, 10);
    } else {
        return MIRROR_ERR_ARGUMENT;
    }
    return mirror_model_build(m);
}
#endif
