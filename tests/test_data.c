/* test_data.c - datasets in memory: the synthetic digits, datasets over
   caller arrays and their split, the epoch order (permutations, batch
   counts, shards) and predict_proba on them. Files on disk are
   test_loaders.c's. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, rmdir; mirror.h is not the first include */
#include "alloc_count.h"
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "files.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef MIRROR_ZLIB
#include <zlib.h>
#endif

// >>synthetic digits -------------------------------------------------------------

static void test_synthetic(void)
{
    enum { N = 100, PIX = 28 * 28 };
    mirror_dataset a, b, c;
    mirror_error err = {0, ""};
    size_t i, j, k, per_class[10] = {0}, out_of_range = 0;
    double mean[10][PIX], min_distance = 1e9;
    long live = live_allocs;
    int rc;

    memset(&c, 0x5a, sizeof c);
    rc = mirror_dataset_synthetic_digits(&c, 0, 1, &err);
    CHECK(rc == MIRROR_ERR_ARGUMENT && err.code == rc && err.message[0], "count 0 is an argument error (%d)", rc);
    CHECK(zeroed(&c), "count 0: the dataset is left empty");
    CHECK(mirror_dataset_synthetic_digits(NULL, 10, 1, &err) == MIRROR_ERR_ARGUMENT, "NULL dataset");
    rc = mirror_dataset_synthetic_digits(&c, 30000000, 1, &err);
    CHECK(rc == MIRROR_ERR_ARGUMENT && strstr(err.message, "30000000") && strstr(err.message, "1 to 16777216") &&
              zeroed(&c),
          "count 30000000: an argument error that gives the limit (%s)", err.message);
    rc = mirror_dataset_synthetic_digits(&c, 0, 1, &err);
    CHECK(rc == MIRROR_ERR_ARGUMENT && strstr(err.message, "1 to 16777216"), "count 0: gives the range too (%s)",
          err.message);
    CHECK(live_allocs == live, "failed synthetic calls allocate nothing");

    CHECK(mirror_dataset_synthetic_digits(&a, N, 42, &err) == MIRROR_OK, "100 digits, seed 42: %s", err.message);
    CHECK(mirror_dataset_synthetic_digits(&b, N, 42, &err) == MIRROR_OK, "again with seed 42");
    CHECK(mirror_dataset_synthetic_digits(&c, N, 43, &err) == MIRROR_OK, "seed 43");
    if (!a.x || !b.x || !c.x) return;
    CHECK(a.count == N && a.channels == 1 && a.height == 28 && a.width == 28 && a.num_classes == 10 &&
              a.targets == NULL,
          "shape 1x28x28, 10 classes, %zu samples", a.count);
    CHECK(!memcmp(a.x, b.x, N * PIX * sizeof(float)) && !memcmp(a.labels, b.labels, N * sizeof(int32_t)),
          "the same seed gives bitwise equal data");
    CHECK(memcmp(a.x, c.x, N * PIX * sizeof(float)) != 0, "another seed gives other images");
    for (i = 0; i < N * PIX; i++) out_of_range += !(a.x[i] >= 0.0f && a.x[i] <= 1.0f);
    CHECK(out_of_range == 0, "every value in [0,1] (%zu outside)", out_of_range);
    for (i = 0; i < N; i++)
        if (a.labels[i] >= 0 && a.labels[i] < 10) per_class[a.labels[i]]++;
    for (k = 0; k < 10; k++) CHECK(per_class[k] == N / 10, "class %zu has %zu of 100 samples", k, per_class[k]);
    CHECK(memcmp(a.x, a.x + 10 * PIX, PIX * sizeof(float)) != 0, "two samples of one class differ");

    /* Class means: pairwise distinct (RMS difference over the pixels). */
    memset(mean, 0, sizeof mean);
    for (i = 0; i < N; i++)
        for (j = 0; j < PIX; j++) mean[a.labels[i]][j] += a.x[i * PIX + j] / (double)(N / 10);
    for (k = 0; k < 10; k++) {
        size_t l;
        for (l = k + 1; l < 10; l++) {
            double d = 0.0;
            for (j = 0; j < PIX; j++) d += (mean[k][j] - mean[l][j]) * (mean[k][j] - mean[l][j]);
            d = sqrt(d / PIX);
            if (d < min_distance) min_distance = d;
        }
    }
    CHECK(min_distance > 0.03, "the ten class means are pairwise distinct (smallest RMS distance %.4f)",
          min_distance);
    mirror_dataset_free(&a);
    mirror_dataset_free(&b);
    mirror_dataset_free(&c);

    /* 25 samples: the classes take 3 or 2 each, cycling. */
    CHECK(mirror_dataset_synthetic_digits(&a, 25, 0, &err) == MIRROR_OK, "25 digits, seed 0");
    memset(per_class, 0, sizeof per_class);
    for (i = 0; a.labels && i < 25; i++)
        if (a.labels[i] >= 0 && a.labels[i] < 10) per_class[a.labels[i]]++;
    for (k = 0; k < 10; k++)
        CHECK(per_class[k] == (k < 5 ? 3u : 2u), "25 samples: class %zu has %zu", k, per_class[k]);
    mirror_dataset_free(&a);
    CHECK(live_allocs == live, "synthetic datasets freed");
}

// >>epoch order -------------------------------------------------------------------

/* perm is a permutation of [0, n). */
static int is_permutation(const size_t *perm, size_t n)
{
    unsigned char *seen = (unsigned char *)calloc(n ? n : 1, 1);
    size_t i;
    int ok = seen != NULL;
    for (i = 0; ok && i < n; i++) {
        if (perm[i] >= n || seen[perm[i]]) ok = 0;
        else seen[perm[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_permutation(void)
{
    static const size_t sizes[] = {0, 1, 2, 17, 1000};
    size_t si, *p = (size_t *)malloc(1000 * sizeof(size_t)), *q = (size_t *)malloc(1000 * sizeof(size_t));
    size_t i, identity;
    for (si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        CHECK(mirror_permutation(p, n, 7, 3) == MIRROR_OK && is_permutation(p, n),
              "n=%zu: each index exactly once", n);
        CHECK(mirror_permutation(q, n, 7, 3) == MIRROR_OK && !memcmp(p, q, n * sizeof(size_t)),
              "n=%zu: equal for equal (seed, epoch)", n);
        if (n >= 17) {
            mirror_permutation(q, n, 7, 4);
            CHECK(is_permutation(q, n) && memcmp(p, q, n * sizeof(size_t)) != 0, "n=%zu: epoch 4 differs from 3", n);
            mirror_permutation(q, n, 8, 3);
            CHECK(is_permutation(q, n) && memcmp(p, q, n * sizeof(size_t)) != 0, "n=%zu: seed 8 differs from 7", n);
            mirror_permutation(q, n, 0, 0);
            CHECK(is_permutation(q, n) && memcmp(p, q, n * sizeof(size_t)) != 0, "n=%zu: seed 0 epoch 0 differs", n);
            for (identity = 0, i = 0; i < n; i++) identity += q[i] == i;
            CHECK(identity < n / 2, "n=%zu: seed 0 shuffles (%zu fixed points)", n, identity);
        }
    }
    CHECK(mirror_permutation(p, 1, 0, 0) == MIRROR_OK && p[0] == 0, "n=1 gives {0}");
    CHECK(mirror_permutation(NULL, 0, 1, 1) == MIRROR_OK, "NULL perm with n=0 is fine");
    CHECK(mirror_permutation(NULL, 5, 1, 1) == MIRROR_ERR_ARGUMENT, "NULL perm with n=5 is an error");
    {
        /* Consecutive epochs and seeds give different orders of 17. */
        size_t e, distinct = 0;
        mirror_permutation(q, 17, 1, 0);
        for (e = 1; e <= 20; e++) {
            mirror_permutation(p, 17, 1, e);
            distinct += memcmp(p, q, 17 * sizeof(size_t)) != 0;
            memcpy(q, p, 17 * sizeof(size_t));
        }
        CHECK(distinct == 20, "epochs 0..20 of seed 1: every epoch differs from the previous (%zu of 20)", distinct);
    }
    free(p);
    free(q);

    CHECK(mirror_num_batches(50, 7, 0) == 8, "50 samples, batch 7: 8 batches with the remainder");
    CHECK(mirror_num_batches(50, 7, 1) == 7, "50 samples, batch 7, drop_remainder: 7 batches");
    CHECK(mirror_num_batches(49, 7, 0) == 7 && mirror_num_batches(49, 7, 1) == 7, "49 of 7: 7 either way");
    CHECK(mirror_num_batches(6, 7, 0) == 1 && mirror_num_batches(6, 7, 1) == 0, "6 of 7: 1, or 0 dropped");
    CHECK(mirror_num_batches(0, 7, 0) == 0 && mirror_num_batches(0, 7, 1) == 0, "no samples: no batches");
    CHECK(mirror_num_batches(5, 0, 0) == 0 && mirror_num_batches(5, 0, 1) == 0, "batch 0: no batches");
    CHECK(mirror_num_batches(1, 1, 0) == 1 && mirror_num_batches(1, 1, 1) == 1, "1 of 1");
    CHECK(mirror_num_batches((size_t)-1, 2, 0) == (size_t)1 << (sizeof(size_t) * 8 - 1),
          "SIZE_MAX samples in batches of 2 does not overflow (got %zu)", mirror_num_batches((size_t)-1, 2, 0));
}

static void test_shard(void)
{
    size_t n, R, r, begin, count, bad = 0, cases = 0;
    for (n = 0; n <= 40; n++)
        for (R = 1; R <= 7; R++) {
            size_t next = 0, lo = (size_t)-1, hi = 0, prev = (size_t)-1;
            int ok = 1;
            for (r = 0; r < R; r++) {
                mirror_shard(n, R, r, &begin, &count);
                if (begin != next) ok = 0;               /* contiguous, in order */
                if (count > prev) ok = 0;                /* early replicas take the extra */
                if (n < R && r >= n && count != 0) ok = 0; /* empty shards */
                next = begin + count;
                prev = count;
                if (count < lo) lo = count;
                if (count > hi) hi = count;
            }
            if (next != n || hi - lo > 1) ok = 0; /* covers [0, n) exactly; sizes within one */
            if (!ok) {
                bad++;
                fprintf(stderr, "mirror_shard(n=%zu, replicas=%zu) is wrong\n", n, R);
            }
            cases++;
        }
    CHECK(bad == 0, "shards of n in 0..40 over 1..7 replicas: contiguous, exact cover, sizes within one, "
                    "empty when n < replicas (%zu of %zu wrong)", bad, cases);
    mirror_shard(10, 3, 0, &begin, &count);
    CHECK(begin == 0 && count == 4, "10 over 3: replica 0 takes [0,4)");
    mirror_shard(10, 3, 2, &begin, &count);
    CHECK(begin == 7 && count == 3, "10 over 3: replica 2 takes [7,10)");
    mirror_shard(2, 5, 3, &begin, &count);
    CHECK(count == 0, "2 over 5: replica 3 is empty");
    mirror_shard(10, 3, 3, &begin, &count);
    CHECK(count == 0, "a replica index past the count gets nothing");
    mirror_shard(10, 0, 0, &begin, &count);
    CHECK(count == 0, "zero replicas: nothing");
}

/* An epoch of 50 samples in global batches of 7 (the last holds 1) over 3
   replicas: every sample is seen exactly once, for several epochs. */
static void test_epoch_coverage(void)
{
    enum { COUNT = 50, BATCH = 7, REPLICAS = 3 };
    size_t perm[COUNT], epoch, step, r, i, begin, count;
    int ok = 1;
    for (epoch = 0; epoch < 3; epoch++) {
        unsigned seen[COUNT] = {0};
        size_t steps = mirror_num_batches(COUNT, BATCH, 0), samples = 0;
        CHECK(steps == 8, "8 global batches");
        mirror_permutation(perm, COUNT, 99, epoch);
        for (step = 0; step < steps; step++) {
            size_t n = step * BATCH + BATCH <= COUNT ? BATCH : COUNT - step * BATCH;
            for (r = 0; r < REPLICAS; r++) {
                mirror_shard(n, REPLICAS, r, &begin, &count);
                for (i = 0; i < count; i++) {
                    seen[perm[step * BATCH + begin + i]]++;
                    samples++;
                }
            }
        }
        for (i = 0; i < COUNT; i++) ok &= seen[i] == 1;
        CHECK(samples == COUNT, "epoch %zu: %zu samples went to replicas", epoch, samples);
    }
    CHECK(ok, "every sample seen exactly once per epoch across 3 replicas");
}

/* Datasets over caller arrays (copied and borrowed), split into training
   and validation, and a model's softmax probabilities. */
static void test_arrays_and_split(void)
{
    enum { N = 20, F = 3 };
    static float x[N * F], t[N * 2];
    static int32_t y[N];
    mirror_dataset a, b, tr, va;
    mirror_error err = {0, ""};
    long live = live_allocs;
    size_t i, j, seen[N];
    int ok = 1;
    for (i = 0; i < N * F; i++) x[i] = (float)i;
    for (i = 0; i < N; i++) y[i] = (int32_t)(i % 4), t[2 * i] = (float)i, t[2 * i + 1] = -(float)i;
    CHECK(mirror_dataset_from_arrays(&a, x, y, t, N, F, 1, 1, 4, 2, 1, &err) == MIRROR_OK && a.x != x && !a.borrowed &&
              !memcmp(a.x, x, sizeof x) && !memcmp(a.labels, y, sizeof y) && !memcmp(a.targets, t, sizeof t) &&
              a.num_classes == 4 && a.target_dim == 2,
          "copied: its own arrays, equal to the caller's: %s", err.message);
    CHECK(mirror_dataset_from_arrays(&b, x, y, NULL, N, F, 1, 1, 4, 0, 0, &err) == MIRROR_OK && b.x == x &&
              b.labels == y && b.borrowed && !b.targets,
          "borrowed: the caller's arrays themselves");
    mirror_dataset_free(&b);
    CHECK(b.x == NULL && x[5] == 5.0f, "freeing a borrowed dataset frees none of the caller's arrays");
    y[7] = 4;
    CHECK(mirror_dataset_from_arrays(&b, x, y, NULL, N, F, 1, 1, 4, 0, 1, &err) == MIRROR_ERR_LABEL &&
              strstr(err.message, "sample 7") && !b.x,
          "a label outside [0, 4): refused, naming the sample: %s", err.message);
    y[7] = 3;
    t[3] = NAN;
    CHECK(mirror_dataset_from_arrays(&b, x, NULL, t, N, F, 1, 1, 0, 2, 1, &err) == MIRROR_ERR_ARGUMENT &&
              strstr(err.message, "target 3"),
          "a NaN target: refused: %s", err.message);
    t[3] = -1.0f;
    CHECK(mirror_dataset_from_arrays(&b, x, y, NULL, N, F, 1, 1, 0, 0, 1, &err) == MIRROR_ERR_ARGUMENT &&
              mirror_dataset_from_arrays(&b, x, NULL, NULL, 0, F, 1, 1, 0, 0, 1, &err) == MIRROR_ERR_ARGUMENT &&
              mirror_dataset_from_arrays(&b, NULL, NULL, NULL, N, F, 1, 1, 0, 0, 1, &err) == MIRROR_ERR_ARGUMENT &&
              mirror_dataset_from_arrays(&b, x, NULL, NULL, (size_t)-1, (size_t)-1, 2, 1, 0, 0, 1, &err) ==
                  MIRROR_ERR_ARGUMENT,
          "labels without classes, no samples, no x, sizes that overflow: refused");

    CHECK(mirror_dataset_split(&a, 5, 9, &tr, &va, &err) == MIRROR_OK && tr.count == 15 && va.count == 5 &&
              tr.num_classes == 4 && va.target_dim == 2,
          "split 20 into 15 and 5: %s", err.message);
    for (i = 0; i < N; i++) seen[i] = 0;
    for (i = 0; i < 20; i++) { /* every sample once, in one part, with its label and targets */
        const mirror_dataset *d = i < 15 ? &tr : &va;
        size_t r = i < 15 ? i : i - 15, s = (size_t)d->x[r * F] / F;
        ok &= s < N && d->labels[r] == (int32_t)(s % 4) && d->targets[2 * r] == (float)s && !seen[s]++;
        for (j = 0; j < F; j++) ok &= d->x[r * F + j] == (float)(s * F + j);
    }
    CHECK(ok, "every sample in exactly one part, whole");
    mirror_dataset_free(&tr), mirror_dataset_free(&va);
    CHECK(mirror_dataset_split(&a, 20, 9, &tr, &va, &err) == MIRROR_ERR_ARGUMENT && !tr.x && !va.x &&
              mirror_dataset_split(&a, 0, 9, &tr, &va, &err) == MIRROR_ERR_ARGUMENT,
          "a split that leaves a part empty: refused: %s", err.message);
    CHECK(mirror_dataset_split(&a, 5, 9, &a, &va, &err) == MIRROR_ERR_ARGUMENT && a.x && a.count == N &&
              mirror_dataset_split(&a, 5, 9, &tr, &tr, &err) == MIRROR_ERR_ARGUMENT,
          "all given as a part, or one dataset for both parts: refused, all intact: %s", err.message);
    mirror_dataset_free(&a);
    CHECK(live_allocs == live, "nothing leaked (%ld)", live_allocs - live);
}

static void test_predict_proba(void)
{
    mirror_strategy *s = new_strategy("cpu:2", 0);
    mirror_model_desc md = model_desc(s, 4, 0, 0, 0, 2);
    mirror_model *m = build_model(&md, NULL, "dense 5, tanh, dense 3");
    float x[6 * 4], p[6 * 3], z[6 * 3];
    size_t i, j;
    int ok = 1;
    for (i = 0; i < 6 * 4; i++) x[i] = (float)((int)(i * 7 % 11) - 5) * 0.3f;
    CHECK(mirror_predict(m, x, 6, z) == MIRROR_OK && mirror_predict_proba(m, x, 6, p) == MIRROR_OK,
          "predict and predict_proba: %s", mirror_model_error(m));
    for (i = 0; i < 6; i++) {
        double sum = 0.0, norm = 0.0;
        for (j = 0; j < 3; j++) sum += p[i * 3 + j], norm += exp((double)z[i * 3 + j]);
        for (j = 0; j < 3; j++) ok &= fabs(p[i * 3 + j] - exp((double)z[i * 3 + j]) / norm) < 1e-6;
        ok &= fabs(sum - 1.0) < 1e-6;
    }
    CHECK(ok, "each row the softmax of the logits, summing to 1");
    mirror_model_destroy(m);
    md.loss = MIRROR_LOSS_MSE;
    mirror_model_create(&md, &m, NULL);
    mirror_dense(m, 3), mirror_model_build(m);
    CHECK(mirror_predict_proba(m, x, 6, p) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "softmax"),
          "an MSE model has no probabilities: %s", mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

int main(void)
{
    if (!make_root("test_data")) return 1;
    test_synthetic();
    test_permutation();
    test_shard();
    test_epoch_coverage();
    test_arrays_and_split();
    test_predict_proba();
    remove_tree(root);
    CHECK(access(root, F_OK) != 0, "the temporary directory %s is removed", root);
    CHECK(live_allocs == 0, "every allocation freed (%ld live)", live_allocs);
    return check_done("test_data");
}
