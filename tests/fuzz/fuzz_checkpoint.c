/* fuzz_checkpoint.c - the checkpoint reader: header length, JSON header,
   offsets and checksums, against the model of fuzz.h. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mirror__header h;
    mirror_model *m = fuzz_model();
    mirror_checkpoint_info info;
    mirror_loss_scale_state st;
    size_t i;
    int has_st;
    volatile float sink = 0.0f;
    memset(&h, 0, sizeof h);
    if (!m) return 0;
    if (mirror__check_checkpoint(m, "fuzz", data, size, 0, &h, &info, &st, &has_st) == MIRROR_OK)
        for (i = 0; i < h.nt; i++) { /* what a load would copy */
            float f;
            size_t k;
            for (k = 0; k < h.t[i].count; k++) {
                memcpy(&f, data + h.t[i].begin + 4 * k, 4);
                sink += f;
            }
        }
    mirror__header_free(&h);
    (void)sink;
    return 0;
}
