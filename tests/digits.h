/* digits.h - small images for the tests: synthetic digits subsampled to
   size x size (every stride-th pixel, from (stride, stride)), so that whole
   training runs stay fast. Include after mirror.h. */
#ifndef DIGITS_H
#define DIGITS_H

static void small_digits(mirror_dataset *ds, size_t count, uint64_t seed, size_t size, size_t stride)
{
    mirror_dataset full;
    size_t i, y, x;
    mirror_dataset_synthetic_digits(&full, count, seed, NULL);
    *ds = full;
    ds->x = (float *)MIRROR_MALLOC(count * size * size * sizeof(float));
    for (i = 0; i < count; i++)
        for (y = 0; y < size; y++)
            for (x = 0; x < size; x++)
                ds->x[(i * size + y) * size + x] = full.x[i * 784 + (stride * y + stride) * 28 + stride * x + stride];
    MIRROR_FREE(full.x);
    ds->height = ds->width = size;
}
#endif
