/* fuzz.h - shared by the libFuzzer targets: the library, and a model whose
   checkpoints the checkpoint target reads (its seed corpus is one of them).
   Build: make fuzz (clang -fsanitize=fuzzer,address,undefined). */
#ifndef FUZZ_H
#define FUZZ_H
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <stdint.h>
#include <string.h>

/* input 1x4x4, flatten, dense 3, relu, dense 2; Adam; one CPU replica. */
static mirror_model *fuzz_model(void)
{
    static mirror_strategy *s;
    static mirror_model *m;
    mirror_strategy_desc sd;
    mirror_model_desc md;
    if (m) return m;
    memset(&sd, 0, sizeof sd);
    sd.devices = "cpu:1";
    memset(&md, 0, sizeof md);
    md.channels = 1, md.height = 4, md.width = 4, md.max_batch = 4;
    md.optimizer.kind = MIRROR_OPT_ADAM;
    if (mirror_strategy_create(&sd, &s, NULL)) return NULL;
    md.strategy = s;
    if (mirror_model_create(&md, &m, NULL)) return NULL;
    mirror_flatten(m), mirror_dense(m, 3), mirror_relu(m), mirror_dense(m, 2);
    if (mirror_model_build(m)) return NULL;
    return m;
}

/* Reads every pixel and label of a loaded dataset (ASan sees any overrun). */
static float fuzz_touch(const mirror_dataset *ds)
{
    size_t i, n = ds->count * ds->channels * ds->height * ds->width;
    float s = 0.0f;
    for (i = 0; i < n; i++) s += ds->x[i];
    for (i = 0; ds->labels && i < ds->count; i++) s += (float)ds->labels[i];
    return s;
}
#endif
