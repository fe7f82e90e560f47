/* fuzz_idx.c - the IDX reader: the first two bytes say where the image file
   ends and the label file begins. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mirror_dataset ds;
    size_t split;
    volatile float sink;
    if (size < 2) return 0;
    split = ((size_t)data[0] << 8 | data[1]) % (size - 1);
    if (mirror__parse_idx(&ds, data + 2, split, "images", data + 2 + split, size - 2 - split, "labels", 10, NULL) ==
        MIRROR_OK)
        sink = fuzz_touch(&ds);
    (void)sink;
    mirror_dataset_free(&ds);
    return 0;
}
