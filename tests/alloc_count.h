/* alloc_count.h - routes mirror's allocations through counters. Include it
   before mirror.h: live_allocs is what is still allocated, total_allocs
   every allocation so far (a training step must add none). Failures are
   injected with allocs_before_failure: at n >= 0, n more allocations
   succeed and the next one fails (once; the counter is then -1, off).
   largest_alloc is the largest single allocation so far (a test may reset
   it to 0 to measure a call). */
#ifndef ALLOC_COUNT_H
#define ALLOC_COUNT_H
#include <stdlib.h>

static long live_allocs, total_allocs, allocs_before_failure = -1;
static size_t largest_alloc;

static void *count_malloc(size_t n)
{
    void *p;
    if (allocs_before_failure == 0) {
        allocs_before_failure = -1;
        return NULL;
    }
    if (allocs_before_failure > 0) allocs_before_failure--;
    if (n > largest_alloc) largest_alloc = n;
    p = malloc(n);
    if (p) live_allocs++, total_allocs++;
    return p;
}

static void count_free(void *p)
{
    if (p) live_allocs--;
    free(p);
}

#define MIRROR_MALLOC(n) count_malloc(n)
#define MIRROR_FREE(p) count_free(p)
#endif
