/* predict.c - mirror's logits for raw inputs, for tests/interop/test_export.py
   to compare with what the exported models give.

   predict CKPT IN.f32 N OUT.f32 [WEIGHTS]
     CKPT     an fp32 checkpoint: the model is rebuilt from it, on 1 CPU replica
     IN.f32   N samples, float32 NCHW in the checkpoint's input shape, raw
     OUT.f32  written: N x outputs float32 logits, raw
     WEIGHTS  loaded after CKPT: a mirror checkpoint of the same layers (weights
              only: a 16-bit checkpoint's fp32 masters, say), or any weights
              file mirror_load_weights reads (a PyTorch state_dict)

   Build:  make build/interop_predict
   (or: cc -O2 -std=c99 tests/interop/predict.c -o predict -lm -lpthread) */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <stdio.h>
#include <stdlib.h>

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "predict: %s%s\n", what, detail);
    exit(1);
}

/* The n floats of path, or NULL when it does not hold exactly n. */
static float *read_floats(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    float *x = (float *)malloc(n * sizeof(float) + 1);
    int extra;
    if (!f || !x || fread(x, sizeof(float), n, f) != n) n = 0;
    extra = f ? fgetc(f) != EOF : 1;
    if (f) fclose(f);
    if (!n || extra) free(x), x = NULL;
    return x;
}

int main(int argc, char **argv)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_strategy *s;
    mirror_model *m;
    mirror_model_desc d;
    size_t n, outputs;
    float *x, *y;
    FILE *f;
    int rc;

    if (argc != 5 && argc != 6) die("usage: predict CKPT IN.f32 N OUT.f32 [WEIGHTS]", "");
    n = (size_t)strtoul(argv[3], NULL, 10);
    if (!n) die("N must be a positive count: ", argv[3]);

    sd.devices = "cpu:1";
    if (mirror_strategy_create(&sd, &s, &err)) die(err.message, "");
    if (mirror_model_from_checkpoint(s, argv[1], n < 256 ? n : 256, &m, NULL, &err)) die(err.message, "");

    /* The rebuilt model keeps the checkpoint's precision; these logits are
       fp32's. Any checkpoint of the same layers loads into an fp32 model. */
    d = mirror_model_query_desc(m);
    if (d.precision != MIRROR_PRECISION_FP32)
        die(argv[1], ": a 16-bit checkpoint; pass an fp32 checkpoint of the same model as CKPT and this one as "
                     "WEIGHTS");
    if (argc == 6) {
        /* A mirror checkpoint loads with every check; another weights file
           is not one (MIRROR_ERR_FORMAT) and goes to mirror_load_weights. */
        rc = mirror_checkpoint_load(m, argv[5], 1, NULL);
        if (rc == MIRROR_ERR_FORMAT) rc = mirror_load_weights(m, argv[5], NULL);
        if (rc) die(mirror_model_error(m), "");
    }

    d = mirror_model_query_desc(m);
    outputs = mirror_num_outputs(m);
    if (!(x = read_floats(argv[2], n * d.channels * d.height * d.width)))
        die(argv[2], ": cannot be read, or does not hold N samples of the model's input shape");
    if (!(y = (float *)malloc(n * outputs * sizeof(float)))) die("out of memory", "");
    if (mirror_predict(m, x, n, y)) die(mirror_model_error(m), "");

    if (!(f = fopen(argv[4], "wb")) || fwrite(y, sizeof(float), n * outputs, f) != n * outputs || fclose(f))
        die(argv[4], ": cannot be written");
    free(x);
    free(y);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    return 0;
}
