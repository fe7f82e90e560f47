/* test_cuda.cu - the CUDA backend against the CPU backend (make test-gpu;
   needs a GPU). Every backend operation on random inputs, NaN and Inf
   included; whole training steps; 1, 2 and 4 replicas on one GPU against
   one replica; NCCL with one rank; out-of-memory.

   Tolerances, and why:
   - data movement and comparisons (relu, im2col, maxpool, the copy
     reducer's sum in replica order, col2im and maxpool backward, which add
     in the CPU's order): bitwise;
   - element formulas (bias add, SGD, Adam, MSE): 4 ulp, since host and
     device compilers may fuse different multiply-adds;
   - softmax cross-entropy: 1e-5 relative (the device's expf and logf are
     within 2 ulp, not correctly rounded);
   - sums in another order (cuBLAS GEMM, bias gradient): 1e-5 times the
     sum of the magnitudes added. */
#define MIRROR_IMPLEMENTATION
#include "../../mirror_cuda.h"
#include "../check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 12345;

static float *random_floats(size_t n, float scale)
{
    float *p = (float *)malloc((n ? n : 1) * sizeof(float));
    size_t i;
    for (i = 0; i < n; i++) p[i] = scale * (2.0f * mirror__uniform(&rng) - 1.0f);
    return p;
}

/* Places NaN, +Inf and -Inf at fixed positions. */
static void poison(float *p, size_t n)
{
    if (n > 10) p[3] = NAN, p[7] = INFINITY, p[n - 2] = -INFINITY;
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* Within k ulp, NaN where the other has NaN, equal infinities. */
static size_t ulp_misses(const float *a, const float *b, size_t n, int k)
{
    size_t i, bad = 0;
    for (i = 0; i < n; i++) {
        int32_t x, y;
        if (isnan(a[i]) || isnan(b[i])) {
            bad += !(isnan(a[i]) && isnan(b[i]));
            continue;
        }
        memcpy(&x, &a[i], 4);
        memcpy(&y, &b[i], 4);
        if (x < 0) x = INT32_MIN - x;
        if (y < 0) y = INT32_MIN - y;
        bad += (x > y ? (int64_t)x - y : (int64_t)y - x) > k;
    }
    return bad;
}

/* Within 4 ulp or an absolute margin: a fused multiply-add where the other
   compiler rounds twice moves a result near zero by many ulp, by at most
   half an ulp of the product. */
static int near(const float *a, const float *b, size_t n, float margin)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (ulp_misses(&a[i], &b[i], 1, 4) && !(fabsf(a[i] - b[i]) <= margin)) return 0;
    return 1;
}

/* One replica on GPU 0 and one CPU device, to call both backends directly. */
static mirror_strategy *gpu1;
static void *gdev, *cdev;
static const mirror__backend *G = &mirror__cuda_backend, *C = &mirror__cpu_backend;

static float *to_gpu(const float *h, size_t n)
{
    float *d = (float *)G->alloc(gdev, n * sizeof(float));
    G->upload(gdev, d, h, n * sizeof(float));
    return d;
}

static float *from_gpu(const float *d, size_t n)
{
    float *h = (float *)malloc((n ? n : 1) * sizeof(float));
    G->download(gdev, h, d, n * sizeof(float));
    return h;
}

static void test_elementwise(void)
{
    const size_t n = 100003;
    float *x = random_floats(n, 3.0f), *y = random_floats(n, 1.0f), *cpu = (float *)malloc(n * 4), *gpu;
    float *dx, *dy;
    poison(x, n);
    dx = to_gpu(x, n);
    dy = to_gpu(y, n);

    C->relu_forward(cdev, cpu, x, n);
    G->relu_forward(gdev, dy, dx, n);
    gpu = from_gpu(dy, n);
    CHECK(same_bits(cpu, gpu, n), "relu forward: bitwise, NaN and Inf included");
    free(gpu);

    memcpy(cpu, y, n * 4);
    C->relu_backward(cdev, cpu, x, n);
    G->upload(gdev, dy, y, n * 4);
    G->relu_backward(gdev, dy, dx, n);
    gpu = from_gpu(dy, n);
    CHECK(same_bits(cpu, gpu, n), "relu backward: bitwise");
    free(gpu);

    {
        size_t rows = 7, ch = 13, inner = 1099; /* rows * ch * inner = n */
        float *b = random_floats(ch, 1.0f), *db = to_gpu(b, ch), *bias_cpu = (float *)calloc(ch, 4), *dbg;
        memcpy(cpu, x, n * 4);
        C->bias_add(cdev, cpu, b, rows, ch, inner);
        G->upload(gdev, dy, x, n * 4);
        G->bias_add(gdev, dy, db, rows, ch, inner);
        gpu = from_gpu(dy, n);
        CHECK(ulp_misses(cpu, gpu, n, 4) == 0, "bias add: within 4 ulp, NaN where NaN");
        free(gpu);
        C->bias_grad(cdev, bias_cpu, y, rows, ch, inner);
        G->upload(gdev, dy, y, n * 4);
        G->zero(gdev, db, ch * 4);
        G->bias_grad(gdev, db, dy, rows, ch, inner);
        dbg = from_gpu(db, ch);
        {
            size_t c, bad = 0;
            for (c = 0; c < ch; c++) bad += fabsf(dbg[c] - bias_cpu[c]) > 1e-5f * (float)(rows * inner);
            CHECK(bad == 0, "bias gradient: within 1e-5 per element summed (%zu channels off)", bad);
        }
        free(b), free(bias_cpu), free(dbg);
        G->release(gdev, db);
    }
    free(x), free(y), free(cpu);
    G->release(gdev, dx);
    G->release(gdev, dy);
}

static void test_optimizers(void)
{
    const size_t n = 65537;
    float *w = random_floats(n, 1.0f), *g = random_floats(n, 0.1f), *m = random_floats(n, 0.01f);
    float *v = random_floats(n, 0.01f), *wc, *mc, *vc, *dw, *dg, *dm, *dv, *out;
    size_t i;
    poison(g, n);
    for (i = 0; i < n; i++) v[i] = fabsf(v[i]);
    wc = (float *)malloc(n * 4), mc = (float *)malloc(n * 4), vc = (float *)malloc(n * 4);
    memcpy(wc, w, n * 4), memcpy(mc, m, n * 4), memcpy(vc, v, n * 4);
    dw = to_gpu(w, n), dg = to_gpu(g, n), dm = to_gpu(m, n), dv = to_gpu(v, n);
    C->sgd(cdev, wc, mc, g, n, 0.1f, 0.9f, 1e-4f, 1);
    G->sgd(gdev, dw, dm, dg, n, 0.1f, 0.9f, 1e-4f, 1);
    out = from_gpu(dw, n);
    CHECK(near(wc, out, n, 1e-7f), "SGD Nesterov: weights within 4 ulp + 1e-7");
    free(out);
    out = from_gpu(dm, n);
    CHECK(near(mc, out, n, 1e-7f), "SGD Nesterov: momentum within 4 ulp + 1e-7");
    free(out);
    C->adam(cdev, wc, mc, vc, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0.1f, 0.0316f);
    G->adam(gdev, dw, dm, dv, dg, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0.1f, 0.0316f);
    out = from_gpu(dw, n);
    CHECK(near(wc, out, n, 1e-7f), "AdamW: weights within 4 ulp + 1e-7, NaN where the gradient was NaN or Inf");
    free(out);
    out = from_gpu(dv, n);
    CHECK(near(vc, out, n, 1e-9f), "AdamW: second moments within 4 ulp + 1e-9");
    free(out);
    free(w), free(g), free(m), free(v), free(wc), free(mc), free(vc);
    G->release(gdev, dw), G->release(gdev, dg), G->release(gdev, dm), G->release(gdev, dv);
}

static void test_gemm(void)
{
    static const size_t sizes[][3] = {{1, 1, 1}, {7, 33, 130}, {130, 7, 300}, {64, 256, 784}, {33, 300, 1}};
    size_t s;
    int ta, tb;
    float *ws = (float *)malloc(MIRROR__GEMM_WORKSPACE * sizeof(float));
    for (s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (ta = 0; ta < 2; ta++)
            for (tb = 0; tb < 2; tb++) {
                size_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2], i, bad = 0;
                float *a = random_floats(m * k, 1.0f), *b = random_floats(k * n, 1.0f), *c = random_floats(m * n, 1.0f);
                float *da = to_gpu(a, m * k), *db = to_gpu(b, k * n), *dc = to_gpu(c, m * n), *got;
                mirror__sgemm_builtin(ta, tb, m, n, k, 0.5f, a, ta ? m : k, b, tb ? k : n, 1.0f, c, n, ws);
                G->gemm(gdev, ta, tb, m, n, k, 0.5f, da, ta ? m : k, db, tb ? k : n, 1.0f, dc, n);
                got = from_gpu(dc, m * n);
                for (i = 0; i < m * n; i++) bad += fabsf(got[i] - c[i]) > 1e-5f * (float)(k + 1);
                CHECK(bad == 0, "cuBLAS GEMM %zux%zux%zu ta=%d tb=%d against the built-in: %zu elements off", m, n, k,
                      ta, tb, bad);
                free(a), free(b), free(c), free(got);
                G->release(gdev, da), G->release(gdev, db), G->release(gdev, dc);
            }
    free(ws);
}

static void test_conv_ops(void)
{
    static const size_t shapes[][6] = {{1, 3, 9, 7, 3, 1}, {5, 2, 8, 8, 3, 2}, {3, 4, 5, 6, 2, 1}, {7, 1, 28, 28, 5, 1}};
    size_t s;
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        size_t ns = shapes[s][0], c = shapes[s][1], h = shapes[s][2], w = shapes[s][3], k = shapes[s][4];
        size_t st = shapes[s][5], pad = k / 2, ho = (h + 2 * pad - k) / st + 1, wo = (w + 2 * pad - k) / st + 1;
        size_t ncol = ns * c * k * k * ho * wo, nx = ns * c * h * w;
        float *x = random_floats(nx, 1.0f), *col = (float *)malloc(ncol * 4), *dx = to_gpu(x, nx);
        float *dcol = (float *)G->alloc(gdev, ncol * 4), *got, *back = (float *)malloc(nx * 4);
        poison(x, nx);
        G->upload(gdev, dx, x, nx * 4);
        C->im2col(cdev, col, x, ns, c, h, w, k, st, pad, ho, wo);
        G->im2col(gdev, dcol, dx, ns, c, h, w, k, st, pad, ho, wo);
        got = from_gpu(dcol, ncol);
        CHECK(same_bits(col, got, ncol), "im2col %zu x %zux%zux%zu k%zu s%zu: bitwise", ns, c, h, w, k, st);
        free(got);
        C->col2im(cdev, back, col, ns, c, h, w, k, st, pad, ho, wo);
        G->col2im(gdev, dx, dcol, ns, c, h, w, k, st, pad, ho, wo);
        got = from_gpu(dx, nx);
        CHECK(ulp_misses(back, got, nx, 0) == 0, "col2im %zu x %zux%zux%zu k%zu s%zu: bitwise (CPU order)", ns, c, h, w,
              k, st);
        free(got);
        C->permute(cdev, back, x, ns * c, h, w);
        G->upload(gdev, dcol, x, nx * 4);
        G->permute(gdev, dx, dcol, ns * c, h, w);
        got = from_gpu(dx, nx);
        CHECK(same_bits(back, got, nx), "permute [%zu][%zu][%zu]: bitwise", ns * c, h, w);
        free(got), free(x), free(col), free(back);
        G->release(gdev, dx), G->release(gdev, dcol);
    }
    { /* maxpool, overlapping (k 3, s 2) and tiling (k 2, s 2) windows */
        size_t planes = 6, h = 9, w = 9, kk;
        for (kk = 2; kk <= 3; kk++) {
            size_t ho = (h - kk) / 2 + 1, wo = (w - kk) / 2 + 1, ny = planes * ho * wo, nx = planes * h * w;
            float *x = random_floats(nx, 1.0f), *y = (float *)malloc(ny * 4), *dyh = random_floats(ny, 1.0f);
            float *dxh = (float *)malloc(nx * 4), *gx = to_gpu(x, nx), *gy = (float *)G->alloc(gdev, ny * 4);
            int32_t *arg = (int32_t *)malloc(ny * 4), *garg = (int32_t *)G->alloc(gdev, ny * 4), *argh;
            float *gdy = to_gpu(dyh, ny), *gdx = (float *)G->alloc(gdev, nx * 4), *got;
            x[5] = NAN;
            G->upload(gdev, gx, x, nx * 4);
            C->maxpool_forward(cdev, y, arg, x, planes, h, w, kk, 2, ho, wo);
            G->maxpool_forward(gdev, gy, garg, gx, planes, h, w, kk, 2, ho, wo);
            got = from_gpu(gy, ny);
            argh = (int32_t *)malloc(ny * 4);
            G->download(gdev, argh, garg, ny * 4);
            CHECK(same_bits(y, got, ny) && !memcmp(arg, argh, ny * 4), "maxpool forward k%zu: values and argmax bitwise",
                  kk);
            free(got);
            C->maxpool_backward(cdev, dxh, arg, dyh, planes, h, w, kk, 2, ho, wo);
            G->maxpool_backward(gdev, gdx, garg, gdy, planes, h, w, kk, 2, ho, wo);
            got = from_gpu(gdx, nx);
            CHECK(same_bits(dxh, got, nx), "maxpool backward k%zu: bitwise (output order)", kk);
            free(got), free(x), free(y), free(dyh), free(dxh), free(arg), free(argh);
            G->release(gdev, gx), G->release(gdev, gy), G->release(gdev, garg), G->release(gdev, gdy);
            G->release(gdev, gdx);
        }
    }
}

static void test_losses(void)
{
    const size_t rows = 301, k = 10;
    float *z = random_floats(rows * k, 5.0f), *dz = (float *)malloc(rows * k * 4), *loss = (float *)malloc(rows * 4);
    float *gz, *gdz, *gloss, *got, *t = random_floats(rows * k, 1.0f), *gt;
    int32_t *y = (int32_t *)malloc(rows * 4), *cor = (int32_t *)malloc(rows * 4), *gy, *gcor, *corh;
    double acc[2] = {0, 0}, gacc_h[2], *gacc;
    size_t i, bad = 0;
    for (i = 0; i < rows; i++) y[i] = (int32_t)(i % k);
    z[4] = INFINITY; /* row 0: NaN loss on both */
    gz = to_gpu(z, rows * k), gdz = (float *)G->alloc(gdev, rows * k * 4), gloss = (float *)G->alloc(gdev, rows * 4);
    gy = (int32_t *)G->alloc(gdev, rows * 4), gcor = (int32_t *)G->alloc(gdev, rows * 4);
    gacc = (double *)G->alloc(gdev, 2 * sizeof(double));
    G->upload(gdev, gy, y, rows * 4);
    C->softmax_ce(cdev, dz, loss, cor, z, y, rows, k, 1.0f / rows, NULL);
    G->softmax_ce(gdev, gdz, gloss, gcor, gz, gy, rows, k, 1.0f / rows, NULL);
    got = from_gpu(gloss, rows);
    for (i = 0; i < rows; i++)
        bad += isnan(loss[i]) ? !isnan(got[i]) : fabsf(got[i] - loss[i]) > 1e-5f * fmaxf(1.0f, fabsf(loss[i]));
    CHECK(bad == 0, "softmax cross-entropy loss: 1e-5 relative, NaN where NaN (%zu rows off)", bad);
    free(got);
    corh = (int32_t *)malloc(rows * 4);
    G->download(gdev, corh, gcor, rows * 4);
    CHECK(!memcmp(cor + 1, corh + 1, (rows - 1) * 4), "softmax cross-entropy correct flags equal");
    C->accumulate(cdev, acc, loss + 1, cor + 1, rows - 1);
    G->accumulate(gdev, gacc, gloss + 1, gcor + 1, rows - 1);
    G->download(gdev, gacc_h, gacc, sizeof gacc_h);
    CHECK(gacc_h[1] == acc[1] && fabs(gacc_h[0] - acc[0]) <= 1e-5 * fabs(acc[0]), "accumulated metrics agree");
    gt = to_gpu(t, rows * k);
    C->mse(cdev, dz, loss, z + k, t, rows - 1, k, 0.5f, NULL);
    G->mse(gdev, gdz, gloss, gz + k, gt, rows - 1, k, 0.5f, NULL);
    got = from_gpu(gloss, rows - 1);
    CHECK(ulp_misses(loss, got, rows - 1, 16) == 0, "MSE loss within 16 ulp (a sum of 10 squares)");
    free(got), free(z), free(dz), free(loss), free(t), free(y), free(cor), free(corh);
    G->release(gdev, gz), G->release(gdev, gdz), G->release(gdev, gloss), G->release(gdev, gy);
    G->release(gdev, gcor), G->release(gdev, gacc), G->release(gdev, gt);
}

/* ---- whole models ---- */

static mirror_dataset data;

static mirror_model *model(mirror_strategy *s, mirror_optimizer_kind opt)
{
    mirror_model_desc d;
    mirror_model *m = NULL;
    memset(&d, 0, sizeof d);
    d.strategy = s;
    d.channels = 1, d.height = 28, d.width = 28;
    d.max_batch = 40;
    d.seed = 5;
    d.optimizer.kind = opt;
    d.optimizer.momentum = opt == MIRROR_OPT_SGD ? 0.9f : 0.0f;
    if (mirror_model_create(&d, &m, NULL)) return NULL;
    mirror_conv2d(m, 4, 3, 1, 1), mirror_relu(m), mirror_maxpool2d(m, 2, 2);
    mirror_flatten(m), mirror_dense(m, 32), mirror_relu(m), mirror_dense(m, 10);
    if (mirror_model_build(m)) {
        fprintf(stderr, "build: %s\n", mirror_model_error(m));
        mirror_model_destroy(m);
        return NULL;
    }
    return m;
}

static mirror_strategy *strategy(const char *devices, mirror_reducer reducer)
{
    mirror_strategy_desc d;
    mirror_strategy *s = NULL;
    mirror_error err = {0, ""};
    memset(&d, 0, sizeof d);
    d.devices = devices;
    d.reducer = reducer;
    if (mirror_strategy_create(&d, &s, &err)) fprintf(stderr, "%s: %s\n", devices, err.message);
    return s;
}

/* Parameters after `steps` steps of batch 40 (the last of an epoch of 150 is 30). */
static float *train(mirror_strategy *s, mirror_optimizer_kind opt, int steps, size_t *n)
{
    mirror_model *m = model(s, opt);
    size_t perm[150], k;
    float *p;
    if (!m) return NULL;
    mirror_permutation(perm, 150, 9, 0);
    for (k = 0; k < (size_t)steps; k++) {
        mirror_batch b;
        memset(&b, 0, sizeof b);
        b.x = data.x, b.labels = data.labels, b.rows = data.count;
        b.index = perm + (k % 4) * 40, b.n = k % 4 == 3 ? 30 : 40;
        if (mirror_train_step(m, &b, NULL)) {
            fprintf(stderr, "step: %s\n", mirror_model_error(m));
            break;
        }
    }
    *n = mirror_num_parameters(m);
    p = (float *)malloc(*n * 4);
    mirror_get_parameters(m, mirror_num_replicas(s) - 1, p, *n);
    if (mirror_num_replicas(s) > 1) { /* every replica against replica 0 */
        size_t r, ns = mirror_optimizer_state_size(m);
        float *p0 = (float *)malloc(*n * 4), *q = (float *)malloc(*n * 4);
        float *s0 = (float *)malloc((ns + 1) * 4), *sr = (float *)malloc((ns + 1) * 4);
        int equal = 1;
        mirror_get_parameters(m, 0, p0, *n);
        mirror_get_optimizer_state(m, 0, s0, ns);
        for (r = 1; r < mirror_num_replicas(s); r++) {
            mirror_get_parameters(m, r, q, *n);
            mirror_get_optimizer_state(m, r, sr, ns);
            equal &= same_bits(p0, q, *n) && same_bits(s0, sr, ns);
        }
        free(p0);
        CHECK(equal, "%s: replicas bitwise equal after %d steps", mirror_strategy_describe(s), steps);
        free(q), free(s0), free(sr);
    }
    mirror_model_destroy(m);
    return p;
}

static double worst_excess(const float *a, const float *ref, size_t n, double abs_tol, double rel_tol)
{
    size_t i;
    double worst = 0.0;
    for (i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - ref[i]) - abs_tol - rel_tol * fabs(ref[i]));
    return worst;
}

static void test_training(void)
{
    mirror_strategy *cpu = strategy("cpu:1", MIRROR_REDUCER_DEFAULT);
    size_t n, n2, r;
    static const char *const lists[3] = {"cuda:0", "cuda:0,0", "cuda:0,0,0,0"};
    float *ref_cpu = train(cpu, MIRROR_OPT_SGD, 8, &n), *ref = NULL;
    mirror_strategy_destroy(cpu);
    for (r = 0; r < 3; r++) {
        mirror_strategy *s = strategy(lists[r], MIRROR_REDUCER_COPY);
        float *p;
        CHECK(s != NULL && mirror_num_replicas(s) == ((size_t)1 << r), "%s: strategy", lists[r]);
        if (!s) continue;
        p = train(s, MIRROR_OPT_ADAMW, 20, &n2);
        if (r == 0) {
            float *short_run = train(s, MIRROR_OPT_SGD, 8, &n2);
            CHECK(worst_excess(short_run, ref_cpu, n, 1e-5, 1e-4) <= 0.0,
                  "8 SGD-momentum steps on the GPU against the CPU backend: within 1e-5 + 1e-4 relative "
                  "(excess %.3g)", worst_excess(short_run, ref_cpu, n, 1e-5, 1e-4));
            free(short_run);
            ref = p;
        } else {
            CHECK(worst_excess(p, ref, n, 1e-5, 1e-5) <= 0.0,
                  "%s: 20 steps equal one replica within 1e-5 + 1e-5 relative (excess %.3g)", lists[r],
                  worst_excess(p, ref, n, 1e-5, 1e-5));
            free(p);
        }
        mirror_strategy_destroy(s);
    }
#ifndef MIRROR_NO_NCCL
    {
        mirror_strategy *s = strategy("cuda:0", MIRROR_REDUCER_NCCL);
        float *p;
        CHECK(s && strstr(mirror_strategy_describe(s), "nccl"), "NCCL with one rank: %s",
              s ? mirror_strategy_describe(s) : "no strategy");
        if (s && ref) {
            p = train(s, MIRROR_OPT_ADAMW, 20, &n2);
            CHECK(same_bits(p, ref, n), "NCCL with one rank: bitwise equal to the copy reducer");
            free(p);
        }
        mirror_strategy_destroy(s);
    }
#endif
    free(ref_cpu);
    free(ref);
}

static void test_out_of_memory(void)
{
    mirror_strategy *s = strategy("cuda:0", MIRROR_REDUCER_DEFAULT);
    mirror_model_desc d;
    mirror_model *m = NULL;
    int rc;
    memset(&d, 0, sizeof d);
    d.strategy = s;
    d.channels = 1, d.height = 1, d.width = 1;
    d.max_batch = 1 << 14; /* activation arenas of 2^14 x 2^24 floats: 1 TiB each; host buffers small */
    mirror_model_create(&d, &m, NULL);
    mirror_dense(m, (size_t)1 << 24);
    mirror_dense(m, 16);
    rc = mirror_model_build(m);
    CHECK(rc == MIRROR_ERR_NO_MEMORY && strstr(mirror_model_error(m), "cudaMalloc:"),
          "a model larger than the GPU: MIRROR_ERR_NO_MEMORY naming cudaMalloc (%d: %s)", rc, mirror_model_error(m));
    mirror_model_destroy(m);
    m = model(s, MIRROR_OPT_SGD);
    CHECK(m != NULL, "after an out-of-memory build, a small model builds");
    if (m) { /* and trains: the failure is not reported again by a later launch */
        mirror_batch b;
        mirror_metrics out;
        memset(&b, 0, sizeof b);
        b.x = data.x, b.labels = data.labels, b.n = 40;
        rc = mirror_train_step(m, &b, &out);
        CHECK(rc == MIRROR_OK && out.count == 40, "a step after the out-of-memory build: %s", mirror_model_error(m));
    }
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

int main(void)
{
    mirror_error err = {0, ""};
    size_t ws;
    gpu1 = strategy("cuda:0", MIRROR_REDUCER_DEFAULT);
    CHECK(gpu1 != NULL, "a GPU strategy (make test-gpu needs a GPU)");
    if (!gpu1) return check_done("test_cuda");
    gdev = G->open(gpu1, 0, &ws, &err);
    cdev = C->open(gpu1, 0, &ws, &err);
    CHECK(gdev && cdev, "device contexts: %s", err.message);
    if (!gdev || !cdev) return check_done("test_cuda");
    mirror_dataset_synthetic_digits(&data, 150, 4, NULL);
    test_elementwise();
    test_optimizers();
    test_gemm();
    test_conv_ops();
    test_losses();
    {
        mirror_error st = {0, ""};
        CHECK(G->status(gdev, &st) == MIRROR_OK, "no device error in the operation tests: %s", st.message);
    }
    test_training();
    test_out_of_memory();
    G->close(gdev);
    C->close(cdev);
    mirror_strategy_destroy(gpu1);
    mirror_dataset_free(&data);
    return check_done("test_cuda");
}
