/* fuzz_weights.c - the reader of weights from another program
   (mirror_load_weights): a safetensors header, then each tensor's name,
   shape, dtype, offsets and values, against the model of fuzz.h. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mirror__header h;
    mirror_model *m = fuzz_model();
    mirror__text why = {NULL, 0, 0, 0};
    uint64_t data_size = 0;
    float *params, *running;
    char *text = NULL;
    memset(&h, 0, sizeof h);
    if (!m) return 0;
    params = (float *)mirror__zalloc(m->nslots, sizeof(float));
    running = (float *)mirror__zalloc(m->bn.nrunning + 1, sizeof(float));
    if (params && running && mirror__safetensors_header(m, "fuzz", data, size, &h, &text, &data_size) == MIRROR_OK)
        mirror__convert_weights(m, data + (size - data_size), data_size, &h, params, running, &why);
    mirror__header_free(&h);
    MIRROR_FREE(text);
    MIRROR_FREE(why.p);
    MIRROR_FREE(params);
    MIRROR_FREE(running);
    return 0;
}
