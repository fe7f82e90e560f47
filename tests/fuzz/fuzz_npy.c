/* fuzz_npy.c - the .npy header and data reader: every element the parser
   accepts is read back. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mirror__npy a;
    size_t i;
    volatile unsigned long long sink = 0;
    if (mirror__parse_npy(data, size, "fuzz", &a, NULL) != MIRROR_OK) return 0;
    for (i = 0; i < a.count && a.dtype != MIRROR__NPY_F4; i++) sink ^= (unsigned long long)mirror__npy_int(&a, i);
    if (a.dtype == MIRROR__NPY_F4 && a.count) sink ^= a.data[4 * a.count - 1];
    (void)sink;
    return 0;
}
