/* fuzz_cifar10.c - the CIFAR-10 batch reader. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mirror_dataset ds;
    volatile float sink;
    if (mirror__parse_cifar10(&ds, data, size, "fuzz", NULL) == MIRROR_OK) sink = fuzz_touch(&ds);
    (void)sink;
    mirror_dataset_free(&ds);
    return 0;
}
