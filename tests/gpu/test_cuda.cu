/* test_cuda.cu - the CUDA backend against the CPU backend (make test-gpu;
   needs a GPU). Every backend operation on random inputs, NaN and Inf
   included; the table of op cases (tests/ops.h: every member of the
   backend table, several shapes, each precision) on every GPU against the
   CPU backend; whole training steps; 1, 2 and 4 replicas on one GPU against
   one replica; NCCL with one rank; out-of-memory. Mixed precision: round,
   narrow, widen, check, the fused updates and the scaler against the CPU;
   the copy reducer's 16-bit and float all-reduce against the CPU reducer;
   fp16 and bf16 training against CPU replicas, with an overflowing input.
   Exact GEMMs (fp32 that TF32 would fail, tensor cores that an fp16
   accumulator would fail); kernels over 65,535 blocks and over 2^31
   elements; evaluate, predict, checkpoints across backends and MSE on the
   GPU; phase timing by CUDA events; a wait past the timeout; NCCL's
   bucketed all-reduce (one rank); the bias gradient in two passes;
   deterministic mode on 1, 2 and 4 replicas of a GPU (and on two GPUs), and
   the CNN's fp16 chunk gradients on 1 and 4, tensor by tensor. With two
   GPUs or more: NCCL and the copy reducer across GPUs in fp32, fp16 and
   bf16, training on every GPU, fp16's skip decision through NCCL, and the
   caller's current GPU.

   Tolerances, and why:
   - data movement and comparisons (relu, im2col, maxpool, the copy
     reducer's sums in replica order, col2im and maxpool backward, which add
     in the CPU's order): bitwise;
   - 16-bit conversions, the non-finite check, the loss scaler: bitwise
     (integer bit work, single roundings, fminf/fmaxf), except that a sum
     holding NaN may carry another NaN payload (the GPU's is canonical);
   - element formulas (bias add, SGD, Adam, their mixed forms, MSE): 4 ulp
     (or a small absolute margin near zero), since host and device
     compilers may fuse different multiply-adds; the 16-bit copy of a
     mixed update must then be exactly narrow(w) of the GPU's own w;
   - softmax cross-entropy: 1e-5 relative (the device's expf and logf are
     within 2 ulp, not correctly rounded);
   - sums in another order (cuBLAS GEMM, bias gradient): 1e-5 times the
     sum of the magnitudes added; GEMMs on values whose sums fp32 holds
     exactly in any order: bitwise;
   - NCCL across GPUs: R roundings (fp32, or the 16-bit format's at every
     hop) of the sum of the R magnitudes; every replica the same bits;
   - evaluation, prediction and MSE training against the CPU: 1e-4
     relative;
   - mixed-precision training: step losses within 2e-2 relative (GEMMs
     that add in another order move an activation now and then to the
     neighbouring 16-bit value); the scaler's decisions bitwise. */
#define MIRROR_IMPLEMENTATION
#include "../../mirror_cuda.h"
#include "../check.h"
#include "../helpers.h"
#include "../ops.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* same_bits, and where they differ, the first difference on stderr */
static int bitwise(const float *a, const float *b, size_t n)
{
    size_t i;
    for (i = 0; i < n && !memcmp(&a[i], &b[i], sizeof(float)); i++) {}
    if (i < n) { /* the first that differs, its bits (a NaN's payload shows) */
        uint32_t x, y;
        memcpy(&x, &a[i], 4), memcpy(&y, &b[i], 4);
        fprintf(stderr, "  [%zu] differs first: %08x (CPU) and %08x (GPU)\n", i, x, y);
    }
    return i == n;
}

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
    size_t i, misses = 0, worst = 0;
    for (i = 0; i < n; i++)
        if (ulp_misses(&a[i], &b[i], 1, 4) && !(fabsf(a[i] - b[i]) <= margin))
            if (misses++ == 0 || !(fabsf(a[i] - b[i]) <= fabsf(a[worst] - b[worst]))) worst = i;
    if (misses) /* what a GPU run has to say, for the next fix */
        fprintf(stderr, "  %zu of %zu beyond 4 ulp + %g; the farthest, [%zu]: %.9g (CPU) and %.9g (GPU)\n", misses, n,
                margin, worst, a[worst], b[worst]);
    return misses == 0;
}

/* One replica on GPU 0 and one CPU device, to call both backends directly. */
static mirror_strategy *gpu1;
static void *gdev, *cdev;
static const mirror__backend *G = &mirror__cuda_backend, *C = &mirror__cpu_backend;

static void *to_gpu_bytes(const void *h, size_t bytes)
{
    void *d = G->alloc(gdev, bytes);
    G->upload(gdev, d, h, bytes);
    return d;
}

static void *from_gpu_bytes(const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    G->download(gdev, h, d, bytes);
    return h;
}

static float *to_gpu(const float *h, size_t n) { return (float *)to_gpu_bytes(h, n * sizeof(float)); }
static float *from_gpu(const float *d, size_t n) { return (float *)from_gpu_bytes(d, n * sizeof(float)); }
static uint16_t *to_gpu16(const uint16_t *h, size_t n) { return (uint16_t *)to_gpu_bytes(h, n * sizeof(uint16_t)); }
static uint16_t *from_gpu16(const uint16_t *d, size_t n) { return (uint16_t *)from_gpu_bytes(d, n * sizeof(uint16_t)); }

static void test_elementwise(void)
{
    const size_t n = 7 * 13 * 1099; /* bias: rows * channels * inner */
    float *x = random_floats(n, 3.0f), *y = random_floats(n, 1.0f), *cpu = (float *)malloc(n * 4), *gpu;
    float *dx, *dy;
    poison(x, n);
    dx = to_gpu(x, n);
    dy = to_gpu(y, n);

    C->relu_forward(cdev, cpu, x, n);
    G->relu_forward(gdev, dy, dx, n);
    gpu = from_gpu(dy, n);
    CHECK(bitwise(cpu, gpu, n), "relu forward: bitwise, NaN and Inf included");
    free(gpu);

    memcpy(cpu, y, n * 4);
    C->relu_backward(cdev, cpu, x, n);
    G->upload(gdev, dy, y, n * 4);
    G->relu_backward(gdev, dy, dx, n);
    gpu = from_gpu(dy, n);
    CHECK(bitwise(cpu, gpu, n), "relu backward: bitwise");
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

/* The bias gradient spread over many blocks per channel (two passes), and
   in one pass: against the CPU, and the same bits on a second run; a
   dense layer's (inner 1) in one run of rows (at most MIRROR__BIAS_RUN)
   the CPU's bits. */
static void test_bias_grad_spread(void)
{
    static const size_t shapes[][3] = {{256, 16, 784}, {300, 3, 5000}, {4096, 10, 1}, {64, 2000, 1}, {1, 1, 70001},
                                       {MIRROR__BIAS_RUN, 2000, 1}, {7, 257, 1}, {4099, 3001, 1}, {40, 70001, 1}};
    size_t s;
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        size_t rows = shapes[s][0], ch = shapes[s][1], inner = shapes[s][2], n = rows * ch * inner, c, bad = 0;
        float *dy = random_floats(n, 1.0f), *cpu = (float *)calloc(ch, 4), *ddy = to_gpu(dy, n);
        float *db = (float *)G->alloc(gdev, ch * 4), *first, *again;
        C->bias_grad(cdev, cpu, dy, rows, ch, inner);
        G->bias_grad(gdev, db, ddy, rows, ch, inner);
        first = from_gpu(db, ch);
        G->zero(gdev, db, ch * 4);
        G->bias_grad(gdev, db, ddy, rows, ch, inner);
        again = from_gpu(db, ch);
        for (c = 0; c < ch; c++) bad += fabsf(first[c] - cpu[c]) > 1e-5f * (float)(rows * inner);
        CHECK(bad == 0 && same_bits(first, again, ch),
              "bias gradient of [%zu, %zu, %zu]: within 1e-5 per element summed (%zu channels off), the same bits "
              "twice", rows, ch, inner, bad);
        if (inner == 1 && rows <= MIRROR__BIAS_RUN)
            CHECK(same_bits(first, cpu, ch), "bias gradient of [%zu, %zu]: the CPU's bits (rows in order)", rows, ch);
        free(dy), free(cpu), free(first), free(again);
        G->release(gdev, ddy), G->release(gdev, db);
    }
}

/* An update's tick (the step, its learning rate, fp32 Adam's bias
   corrections) in host memory for the CPU, into *host, and on the GPU
   (returned: release it). */
static mirror__tick *tick_pair(mirror__tick *host, uint64_t step, float lr, float bc1, float bc2_sqrt)
{
    mirror__tick *d = (mirror__tick *)G->alloc(gdev, sizeof *d);
    host->step = step, host->lr = lr, host->bc1 = bc1, host->bc2_sqrt = bc2_sqrt;
    G->upload(gdev, d, host, sizeof *host);
    G->host_wait(gdev);
    return d;
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
    mirror_loss_scale_state guard, *dguard = (mirror_loss_scale_state *)G->alloc(gdev, sizeof guard);
    memset(&guard, 0, sizeof guard); /* clear: the updates run */
    dw = to_gpu(w, n), dg = to_gpu(g, n), dm = to_gpu(m, n), dv = to_gpu(v, n);
    mirror__tick ht, *dt = tick_pair(&ht, 1, 0.1f, 0.0f, 0.0f);
    C->sgd(cdev, wc, mc, g, n, &guard, &ht, 0.9f, 1e-4f, 1);
    G->sgd(gdev, dw, dm, dg, n, dguard, dt, 0.9f, 1e-4f, 1);
    G->release(gdev, dt);
    out = from_gpu(dw, n);
    CHECK(near(wc, out, n, 1e-7f), "SGD Nesterov: weights within 4 ulp + 1e-7");
    free(out);
    out = from_gpu(dm, n);
    CHECK(near(mc, out, n, 1e-7f), "SGD Nesterov: momentum within 4 ulp + 1e-7");
    free(out);
    dt = tick_pair(&ht, 1, 1e-3f, 0.1f, 0.0316f);
    C->adam(cdev, wc, mc, vc, g, n, &guard, &ht, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    G->adam(gdev, dw, dm, dv, dg, n, dguard, dt, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    G->release(gdev, dt);
    out = from_gpu(dw, n);
    CHECK(near(wc, out, n, 1e-7f), "AdamW: weights within 4 ulp + 1e-7, NaN where the gradient was NaN or Inf");
    free(out);
    out = from_gpu(dv, n);
    CHECK(near(vc, out, n, 1e-9f), "AdamW: second moments within 4 ulp + 1e-9");
    free(out);
    free(w), free(g), free(m), free(v), free(wc), free(mc), free(vc);
    G->release(gdev, dw), G->release(gdev, dg), G->release(gdev, dm), G->release(gdev, dv);
    G->release(gdev, dguard);
}

/* fp32's guard: check32 sets it as the CPU does (the first non-finite
   step's number kept, a set flag never cleared), and while it is set the
   updates move nothing. */
static void test_check32(void)
{
    const size_t n = (size_t)65535 * MIRROR__THREADS + 1001;
    float *g = random_floats(n, 1.0f), *dg = to_gpu(g, n), *w = random_floats(n, 1.0f), *dw = to_gpu(w, n), *out;
    mirror_loss_scale_state *dst = (mirror_loss_scale_state *)G->alloc(gdev, sizeof *dst);
    const struct {
        size_t at;
        float value;
        uint32_t flag_before;
        int want;
        const char *what;
    } cases[] = {
        {0, 0.0f, 0, 0, "finite values"},
        {n - 1, INFINITY, 0, 1, "+Inf at the last element"},
        {n / 2, NAN, 0, 1, "a NaN in the middle"},
        {0, -INFINITY, 0, 1, "-Inf at the first element"},
        {n - 1, FLT_MAX, 0, 0, "the largest finite value"},
        {n / 2, NAN, 1, 1, "a NaN with the flag already set (the first step's number stays)"},
    };
    size_t c;
    mirror__tick ht, *dt = tick_pair(&ht, 9, 0.1f, 0.0f, 0.0f);
    for (c = 0; c < sizeof cases / sizeof *cases; c++) {
        mirror_loss_scale_state cs, gs;
        float kept = g[cases[c].at];
        memset(&cs, 0, sizeof cs);
        cs.scale = 1.0f, cs.found_nonfinite = cases[c].flag_before, cs.applied = 3;
        if (cases[c].value != 0.0f) g[cases[c].at] = cases[c].value;
        G->upload(gdev, dst, &cs, sizeof cs);
        G->upload(gdev, dg, g, n * 4);
        C->check32(cdev, &cs, g, n, &ht);
        G->check32(gdev, dst, dg, n, dt);
        G->download(gdev, &gs, dst, sizeof gs);
        CHECK(cs.found_nonfinite == (uint32_t)cases[c].want && !memcmp(&cs, &gs, sizeof cs) &&
                  cs.applied == (cases[c].want && !cases[c].flag_before ? 8u : 3u),
              "check32, %s: flag %u on the CPU, %u on the GPU, want %d; applied %llu and %llu", cases[c].what,
              cs.found_nonfinite, gs.found_nonfinite, cases[c].want, (unsigned long long)cs.applied,
              (unsigned long long)gs.applied);
        g[cases[c].at] = kept;
    }
    G->upload(gdev, dg, g, n * 4);
    G->sgd(gdev, dw, NULL, dg, n, dst, dt, 0.0f, 0.0f, 0); /* the flag is set from the last case */
    out = from_gpu(dw, n);
    CHECK(same_bits(w, out, n), "sgd with the guard set: no weight moves");
    free(out), free(g), free(w);
    G->release(gdev, dg), G->release(gdev, dw), G->release(gdev, dst), G->release(gdev, dt);
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
                mirror__sgemm_builtin(ta, tb, m, n, k, 0.5f, a, ta ? m : k, b, tb ? k : n, 1.0f, c, n, ws, NULL);
                G->gemm(gdev, ta, tb, m, n, k, 0.5f, da, ta ? m : k, db, tb ? k : n, 1.0f, dc, n, 0);
                got = from_gpu(dc, m * n);
                for (i = 0; i < m * n; i++) bad += fabsf(got[i] - c[i]) > 1e-5f * (float)(k + 1);
                CHECK(bad == 0, "cuBLAS GEMM %zux%zux%zu ta=%d tb=%d against the built-in: %zu elements off", m, n, k,
                      ta, tb, bad);
                free(a), free(b), free(c), free(got);
                G->release(gdev, da), G->release(gdev, db), G->release(gdev, dc);
            }
    free(ws);
}

/* A layer's forward GEMM with its bias and relu (a dense layer's bias per
   column: cuBLASLt's epilogue, or the kernel where it has no algorithm; a
   convolution's per row: the kernel) against the CPU's, the relu keeping a
   NaN (the bias of column or row 1 is one) as mirror_hd_relu does. */
static void test_gemm_bias(void)
{
    static const size_t sizes[][3] = {{1, 1, 1}, {7, 33, 130}, {130, 7, 300}, {64, 256, 784}, {256, 10, 128}};
    size_t s;
    int ta, tb, t;
    for (s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (ta = 0; ta < 2; ta++)
            for (tb = 0; tb < 2; tb++)
                for (t = 0; t < 4; t++) {
                    int relu = t & 1, per_row = t >> 1;
                    size_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2], i, bad = 0, nb = per_row ? m : n;
                    float *a = random_floats(m * k, 1.0f), *b = random_floats(k * n, 1.0f), *bias = random_floats(nb, 1.0f);
                    float *c = random_floats(m * n, 1.0f), *got, *da, *db, *dbias, *dc;
                    if (nb > 1) bias[1] = NAN;
                    da = to_gpu(a, m * k), db = to_gpu(b, k * n), dbias = to_gpu(bias, nb), dc = to_gpu(c, m * n);
                    C->gemm_bias(cdev, ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, bias, per_row, relu, c, n);
                    G->gemm_bias(gdev, ta, tb, m, n, k, da, ta ? m : k, db, tb ? k : n, dbias, per_row, relu, dc, n);
                    got = from_gpu(dc, m * n);
                    for (i = 0; i < m * n; i++)
                        bad += isnan(c[i]) ? !isnan(got[i]) : !(fabsf(got[i] - c[i]) <= 1e-5f * (float)(k + 1));
                    CHECK(bad == 0,
                          "gemm_bias %zux%zux%zu ta=%d tb=%d per_row=%d relu=%d against the CPU's: %zu elements off", m,
                          n, k, ta, tb, per_row, relu, bad);
                    free(a), free(b), free(bias), free(c), free(got);
                    G->release(gdev, da), G->release(gdev, db), G->release(gdev, dbias), G->release(gdev, dc);
                }
}

/* GEMMs on values whose products and sums fp32 holds exactly, in any order,
   so that a GEMM computing in fp32 gives the exact result bit for bit: the
   tolerance of test_gemm cannot tell TF32 (inputs rounded to 11
   significant bits) from fp32, this can. fp32: a has 12 significant bits
   (m / 2^11, m in 2048..4095, either sign), which TF32 rounds; b is an
   integer in -3..3; with k <= 1024 every partial sum stays below 2^13 at a
   granularity of 2^-11: 24 bits. 16-bit GEMMs (tensor cores): integers
   that fp16 (|v| <= 31) or bf16 (|v| <= 15) hold exactly, whose sums of
   products pass 2048 by far, where an fp16 accumulator would round. */
static float exact_operand(int format, int left)
{
    uint64_t r = mirror__next(&rng);
    int half = format == MIRROR_PRECISION_FP16 ? 31 : 15;
    if (format != MIRROR_PRECISION_FP32) return (float)((int)((r >> 40) % (uint64_t)(2 * half + 1)) - half);
    if (!left) return (float)((int)((r >> 40) % 7) - 3);
    return (float)(2048 + (r >> 40) % 2048) / 2048.0f * ((r & 1) ? -1.0f : 1.0f);
}

/* n floats, narrowed on the host, into 16-bit device memory at d. */
static void upload16(void *d, const float *x, size_t n, int format)
{
    uint16_t *h = (uint16_t *)malloc(n * 2);
    size_t i;
    for (i = 0; i < n; i++) h[i] = mirror_hd_narrow(x[i], format);
    G->upload(gdev, d, h, n * 2);
    free(h);
}

static void test_gemm_exact(void)
{
    static const size_t sizes[][3] = {{64, 256, 784}, {7, 33, 130}, {130, 7, 1024}};
    static const int kinds[3] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16, MIRROR_PRECISION_BF16};
    size_t s, f, i, j, l;
    int ta, tb;
    for (f = 0; f < 3; f++)
        for (s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (ta = 0; ta < 2; ta++)
                for (tb = 0; tb < 2; tb++) {
                    size_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2], bad = 0;
                    float *a = (float *)malloc(m * k * 4), *b = (float *)malloc(k * n * 4);
                    float *want = (float *)malloc(m * n * 4), *c = (float *)malloc(m * n * 4), *got;
                    float *da, *db, *dc;
                    for (i = 0; i < m * k; i++) a[i] = exact_operand(kinds[f], 1);
                    for (i = 0; i < k * n; i++) b[i] = exact_operand(kinds[f], 0);
                    for (i = 0; i < m * n; i++) c[i] = NAN; /* beta 0: never read */
                    for (i = 0; i < m; i++)
                        for (j = 0; j < n; j++) {
                            double sum = 0.0;
                            for (l = 0; l < k; l++)
                                sum += (double)(ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
                            want[i * n + j] = (float)sum;
                        }
                    if (kinds[f] == MIRROR_PRECISION_FP32) {
                        da = to_gpu(a, m * k), db = to_gpu(b, k * n);
                    } else { /* 16-bit operands (the values are exact in 16 bits), an fp32 C */
                        da = (float *)G->alloc(gdev, m * k * 2), db = (float *)G->alloc(gdev, k * n * 2);
                        upload16(da, a, m * k, kinds[f]), upload16(db, b, k * n, kinds[f]);
                    }
                    dc = to_gpu(c, m * n);
                    G->set_precision(gdev, kinds[f], 0);
                    G->gemm(gdev, ta, tb, m, n, k, 1.0f, da, ta ? m : k, db, tb ? k : n, 0.0f, dc, n, 1);
                    G->set_precision(gdev, MIRROR_PRECISION_FP32, 0);
                    got = from_gpu(dc, m * n);
                    for (i = 0; i < m * n; i++) bad += got[i] != want[i];
                    CHECK(bad == 0, "%s GEMM %zux%zux%zu ta=%d tb=%d on exactly summable values: the exact result "
                          "bit for bit (%zu elements off; TF32 or a 16-bit accumulator would be)",
                          mirror_precision_name((mirror_precision)kinds[f]), m, n, k, ta, tb, bad);
                    free(a), free(b), free(want), free(c), free(got);
                    G->release(gdev, da), G->release(gdev, db), G->release(gdev, dc);
                }
}

/* Kernels over more than 65,535 blocks of threads (the grid-stride loops
   reach the end), and over more than 2^31 elements (indices are size_t
   all the way), where the GPU has the memory. */
static void test_large_shapes(void)
{
    size_t n = (size_t)65535 * MIRROR__THREADS * 3 + 17, big = ((size_t)1 << 31) + 4099, i, j, bad = 0;
    float *x = random_floats(n, 1.0f), *want = (float *)malloc(n * 4), *dx = to_gpu(x, n), *got;
    float *bx = NULL, *by = NULL, *edge = (float *)malloc(2 * 4096 * 4);
    const size_t at[2] = {((size_t)1 << 31) - 2048, big - 4096};
    C->relu_forward(cdev, want, x, n);
    G->relu_forward(gdev, dx, dx, n);
    got = from_gpu(dx, n);
    CHECK(bitwise(got, want, n), "relu over %zu floats (%zu blocks' worth): bitwise the CPU's", n,
          n / MIRROR__THREADS);
    free(x), free(want), free(got);
    G->release(gdev, dx);
    if (getenv("MIRROR_TEST_SANITIZER")) {
        printf("2^31 + 4099 elements: skipped under compute-sanitizer (17 GB under its watch)\n");
    } else if (cudaMalloc((void **)&bx, big * 4) != cudaSuccess || cudaMalloc((void **)&by, big * 4) != cudaSuccess) {
        (void)cudaGetLastError();
        printf("2^31 + 4099 elements: %.1f GB of GPU memory not free, skipped\n", 2.0 * (double)big * 4 / 1e9);
    } else {
        cudaMemset(bx, 0x3f, big * 4); /* every float 0x3f3f3f3f, positive */
        cudaMemset(by, 0xff, big * 4); /* NaN where relu does not write */
        cudaDeviceSynchronize();
        G->relu_forward(gdev, by, bx, big);
        for (j = 0; j < 2; j++) G->download(gdev, edge + j * 4096, by + at[j], 4096 * 4);
        for (i = 0; i < 2 * 4096; i++) bad += mirror_hd_bits(edge[i]) != 0x3f3f3f3fu;
        CHECK(bad == 0, "relu over 2^31 + 4099 floats: written around 2^31 and up to the last (%zu wrong)", bad);
    }
    cudaFree(bx), cudaFree(by);
    free(edge);
}

static void test_conv_ops(void)
{
    static const size_t shapes[][6] = {{1, 3, 9, 7, 3, 1}, {5, 2, 8, 8, 3, 2}, {3, 4, 5, 6, 2, 1}, {7, 1, 28, 28, 5, 1},
                                       {2, 2, 9, 7, 5, 3}};
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
    G->upload(gdev, gloss, loss + 1, (rows - 1) * 4); /* the same losses on both: the same bits */
    G->upload(gdev, gacc, acc, sizeof acc);
    C->accumulate(cdev, acc, loss + 1, cor + 1, rows - 1);
    G->accumulate(gdev, gacc, gloss, gcor + 1, rows - 1);
    G->download(gdev, gacc_h, gacc, sizeof gacc_h);
    CHECK(!memcmp(gacc_h, acc, sizeof acc), "metrics added onto the sums so far: the CPU's bits (%.17g, %.17g)",
          gacc_h[0], acc[0]);
    { /* the lanes' order (one block of 256 threads): the CPU's bits on either side of the lanes, correct or NULL */
        static const size_t counts[] = {1, 255, 256, 257, 4099};
        const size_t most = 4099;
        float *many = random_floats(most, 100.0f), *gmany = to_gpu(many, most);
        int32_t *flags = (int32_t *)malloc(most * 4), *gflags = (int32_t *)G->alloc(gdev, most * 4);
        size_t c, j;
        for (j = 0; j < most; j++) flags[j] = (int32_t)(j % 3 == 0);
        G->upload(gdev, gflags, flags, most * 4);
        for (c = 0; c < sizeof counts / sizeof *counts; c++)
            for (j = 0; j < 2; j++) {
                double sums[2] = {0.5, 2.0};
                G->upload(gdev, gacc, sums, sizeof sums);
                C->accumulate(cdev, sums, many, j ? flags : NULL, counts[c]);
                G->accumulate(gdev, gacc, gmany, j ? gflags : NULL, counts[c]);
                G->download(gdev, gacc_h, gacc, sizeof gacc_h);
                CHECK(!memcmp(gacc_h, sums, sizeof sums), "accumulate over %zu rows (correct %s): the CPU's bits",
                      counts[c], j ? "given" : "NULL");
            }
        free(many), free(flags);
        G->release(gdev, gmany), G->release(gdev, gflags);
    }
    gt = to_gpu(t, rows * k);
    C->mse(cdev, dz, loss, z + k, t, rows - 1, k, 0.5f, NULL);
    G->mse(gdev, gdz, gloss, gz + k, gt, rows - 1, k, 0.5f, NULL);
    got = from_gpu(gloss, rows - 1);
    CHECK(ulp_misses(loss, got, rows - 1, 16) == 0, "MSE loss within 16 ulp (a sum of 10 squares)");
    free(got);
    { /* the loss scale, read from device memory: a power of two scales dz exactly, not the loss */
        float scale = 1024.0f, *gscale = to_gpu(&scale, 1), *plain, *scaled, *cpu_dz = (float *)malloc(rows * k * 4);
        float *loss_plain;
        size_t j, n = rows * k;
        G->softmax_ce(gdev, gdz, gloss, gcor, gz, gy, rows, k, 1.0f / rows, NULL);
        plain = from_gpu(gdz, n), loss_plain = from_gpu(gloss, rows);
        G->softmax_ce(gdev, gdz, gloss, gcor, gz, gy, rows, k, 1.0f / rows, gscale);
        C->softmax_ce(cdev, cpu_dz, loss, cor, z, y, rows, k, 1.0f / rows, &scale);
        scaled = from_gpu(gdz, n), got = from_gpu(gloss, rows);
        for (j = 0; j < n; j++) plain[j] *= scale;
        CHECK(same_bits(plain, scaled, n) && same_bits(loss_plain, got, rows),
              "softmax cross-entropy with a device loss scale of 1024: dz exactly 1024 times the unscaled, loss unchanged");
        for (j = 0, bad = 0; j < n; j++)
            bad += isnan(cpu_dz[j]) ? !isnan(scaled[j]) : !(fabsf(scaled[j] - cpu_dz[j]) <= 1e-5f * scale / rows);
        CHECK(bad == 0, "softmax cross-entropy scaled dz against the CPU's: within 1e-5 of the largest (%zu off)", bad);
        free(plain), free(scaled), free(got), free(loss_plain);
        n = (rows - 1) * k;
        G->mse(gdev, gdz, gloss, gz + k, gt, rows - 1, k, 0.5f, NULL);
        plain = from_gpu(gdz, n);
        G->mse(gdev, gdz, gloss, gz + k, gt, rows - 1, k, 0.5f, gscale);
        C->mse(cdev, cpu_dz, loss, z + k, t, rows - 1, k, 0.5f, &scale);
        scaled = from_gpu(gdz, n);
        for (j = 0; j < n; j++) plain[j] *= scale;
        CHECK(same_bits(plain, scaled, n), "MSE with a device loss scale of 1024: dz exactly 1024 times the unscaled");
        CHECK(ulp_misses(cpu_dz, scaled, n, 4) == 0, "MSE scaled dz against the CPU's: within 4 ulp");
        free(plain), free(scaled), free(cpu_dz);
        G->release(gdev, gscale);
    }
    free(z), free(dz), free(loss), free(t), free(y), free(cor), free(corh);
    G->release(gdev, gz), G->release(gdev, gdz), G->release(gdev, gloss), G->release(gdev, gy);
    G->release(gdev, gcor), G->release(gdev, gacc), G->release(gdev, gt);
}

/* ---- mixed precision ---- */

static const int formats[2] = {MIRROR_PRECISION_FP16, MIRROR_PRECISION_BF16};

static const char *format_name(int f) { return mirror_precision_name((mirror_precision)f); }

/* n floats over every range 16 bits meet: special values first, then random
   bit patterns (NaN payloads, Inf, float subnormals, huge values), the fp16
   range from its subnormals to past its overflow, exact fp16 and bf16 ties. */
static float *wide_range_floats(size_t n)
{
    static const float specials[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e6f, FLT_MAX,
                                     INFINITY, -INFINITY, NAN, 5.9604644775390625e-8f /* 2^-24 */,
                                     2.98023223876953125e-8f /* 2^-25 */, 6.103515625e-05f /* 2^-14 */, 1e-45f,
                                     FLT_MIN};
    float *p = (float *)malloc(n * sizeof(float));
    size_t i;
    for (i = 0; i < n; i++) {
        uint64_t r = mirror__next(&rng);
        uint32_t u = (uint32_t)(r >> 32), e = (101 + (uint32_t)(r >> 8) % 44) << 23; /* 2^-26 .. 2^17 */
        switch (r & 3) {
        case 0: break;                                                           /* any pattern */
        case 1: u = (u & 0x807fffffu) | e; break;                                /* fp16's range */
        case 2: u = (u & 0x807fe000u) | e | 0x1000u; break;                      /* an fp16 tie */
        default: u = (u & 0xffff0000u) | 0x8000u; break;                         /* a bf16 tie */
        }
        p[i] = i < sizeof specials / sizeof *specials ? specials[i] : mirror_hd_float(u);
    }
    return p;
}

/* Equal, or both NaN: the GPU's float arithmetic returns the canonical NaN,
   the CPU's the payload of an operand. */
static size_t half_misses(const uint16_t *a, const uint16_t *b, size_t n, int f)
{
    size_t i, bad = 0;
    for (i = 0; i < n; i++)
        bad += a[i] != b[i] && !(isnan(mirror_hd_widen(a[i], f)) && isnan(mirror_hd_widen(b[i], f)));
    return bad;
}

/* narrow and widen are integer bit work and exact float steps: bitwise, NaN payloads included. */
static void test_half_ops(void)
{
    const size_t n = 100003;
    float *x = wide_range_floats(n), *cpu = (float *)malloc(n * 4), *dx = to_gpu(x, n), *got;
    uint16_t *h = (uint16_t *)malloc(n * 2), *every = (uint16_t *)malloc(65536 * 2), *got16;
    uint16_t *dh = (uint16_t *)G->alloc(gdev, n * 2);
    size_t i, k;
    for (i = 0; i < 65536; i++) every[i] = (uint16_t)i;
    for (k = 0; k < 2; k++) {
        int f = formats[k];
        C->narrow(cdev, h, x, n, f);
        G->upload(gdev, dx, x, n * 4);
        G->narrow(gdev, dh, dx, n, f);
        got16 = from_gpu16(dh, n);
        CHECK(!memcmp(h, got16, n * 2), "%s narrow: bitwise over %zu floats of every range", format_name(f), n);
        free(got16);
        C->widen(cdev, cpu, every, 65536, f);
        G->upload(gdev, dh, every, 65536 * 2);
        G->widen(gdev, dx, dh, 65536, f);
        got = from_gpu(dx, 65536);
        CHECK(same_bits(cpu, got, 65536), "%s widen: all 65536 patterns bitwise", format_name(f));
        free(got);
    }
    free(x), free(cpu), free(h), free(every);
    G->release(gdev, dx), G->release(gdev, dh);
}

/* 16-bit storage (set_precision fp16 or bf16 on both backends): each
   layer op reads and writes 16-bit buffers; the GPU's kernels, which load,
   compute in fp32 and store once, against the CPU's fp32 loops on widened
   operands: bitwise where the arithmetic is the same (moves, sums in the
   CPU's order, max, relu, bias), within a few 16-bit steps for the GEMMs
   (cuBLAS's order of sums) and softmax (expf). */
static uint16_t *random16(size_t n, int f)
{
    float *x = random_floats(n, 2.0f);
    uint16_t *h = (uint16_t *)malloc(n * 2);
    size_t i;
    for (i = 0; i < n; i++) h[i] = mirror_hd_narrow(x[i], f);
    free(x);
    return h;
}

/* Elements of a and b (16-bit, format f) further apart than tol relative
   to the larger (0: bitwise; NaN matches NaN). */
static size_t misses16(const uint16_t *a, const uint16_t *b, size_t n, int f, float tol)
{
    size_t i, bad = 0;
    for (i = 0; i < n; i++) {
        float x = mirror_hd_widen(a[i], f), y = mirror_hd_widen(b[i], f);
        if (isnan(x) && isnan(y)) continue;
        bad += tol == 0.0f ? a[i] != b[i] : !(fabsf(x - y) <= tol * fmaxf(1.0f, fmaxf(fabsf(x), fabsf(y))));
    }
    return bad;
}

/* The CPU's 16-bit result `want` against the GPU's at d. */
static void check16(const uint16_t *want, const void *d, size_t n, int f, float tol, const char *what)
{
    uint16_t *got = from_gpu16((const uint16_t *)d, n);
    size_t bad = misses16(want, got, n, f, tol);
    CHECK(bad == 0, "%s, %s storage: %zu of %zu elements off the CPU's", what, format_name(f), bad, n);
    free(got);
}

static void test_storage16(void)
{
    const size_t ns = 3, c = 4, h = 6, w = 5, k = 3, ho = 6, wo = 5, nx = ns * c * h * w, ncol = c * k * k * ns * ho * wo;
    const size_t m = 37, n = 29, kk = 70;
    size_t fi;
    for (fi = 0; fi < 2; fi++) {
        int f = formats[fi];
        uint16_t *x = random16(nx, f), *y = random16(nx, f), *bias = random16(n, f), *a = random16(m * kk, f);
        uint16_t *b = random16(kk * n, f), *out = (uint16_t *)malloc((ncol > m * n ? ncol : m * n) * 2);
        uint16_t *dx = to_gpu16(x, nx), *dy = to_gpu16(y, nx), *dbias = to_gpu16(bias, n), *da = to_gpu16(a, m * kk);
        uint16_t *db = to_gpu16(b, kk * n), *dout = (uint16_t *)G->alloc(gdev, (ncol > m * n ? ncol : m * n) * 2);
        int32_t *arg = (int32_t *)malloc(nx * 4), *darg = (int32_t *)G->alloc(gdev, nx * 4), *labels, *correct;
        int32_t *dlabels, *dcorrect;
        float *loss = (float *)malloc(m * 4), *dloss = (float *)G->alloc(gdev, m * 4);
        C->set_precision(cdev, f, ncol > nx ? ncol : nx);
        G->set_precision(gdev, f, 0);
        C->relu_forward(cdev, out, x, nx), G->relu_forward(gdev, dout, dx, nx);
        check16(out, dout, nx, f, 0.0f, "relu_forward");
        memcpy(out, y, nx * 2), G->upload(gdev, dout, y, nx * 2);
        C->relu_backward(cdev, out, x, nx), G->relu_backward(gdev, dout, dx, nx);
        check16(out, dout, nx, f, 0.0f, "relu_backward");
        C->add(cdev, out, x, y, nx), G->add(gdev, dout, dx, dy, nx);
        check16(out, dout, nx, f, 0.0f, "add");
        memcpy(out, x, nx * 2), G->upload(gdev, dout, x, nx * 2);
        C->bias_add(cdev, out, bias, ns * c, 1, h * w), G->bias_add(gdev, dout, dbias, ns * c, 1, h * w);
        check16(out, dout, nx, f, 0.0f, "bias_add");
        C->permute(cdev, out, x, ns, c, h * w), G->permute(gdev, dout, dx, ns, c, h * w);
        check16(out, dout, nx, f, 0.0f, "permute");
        C->im2col(cdev, out, x, ns, c, h, w, k, 1, 1, ho, wo), G->im2col(gdev, dout, dx, ns, c, h, w, k, 1, 1, ho, wo);
        check16(out, dout, ncol, f, 0.0f, "im2col");
        G->upload(gdev, dout, out, ncol * 2); /* the CPU's columns for both */
        {
            uint16_t *back = (uint16_t *)malloc(nx * 2);
            C->col2im(cdev, back, out, ns, c, h, w, k, 1, 1, ho, wo), G->col2im(gdev, dy, dout, ns, c, h, w, k, 1, 1, ho, wo);
            check16(back, dy, nx, f, 0.0f, "col2im");
            free(back);
        }
        C->maxpool_forward(cdev, out, arg, x, ns * c, h, w, 2, 2, 3, 2);
        G->maxpool_forward(gdev, dout, darg, dx, ns * c, h, w, 2, 2, 3, 2);
        check16(out, dout, ns * c * 6, f, 0.0f, "maxpool_forward");
        G->upload(gdev, darg, arg, ns * c * 6 * 4);
        G->upload(gdev, dy, y, ns * c * 6 * 2);
        C->maxpool_backward(cdev, out, arg, y, ns * c, h, w, 2, 2, 3, 2);
        G->maxpool_backward(gdev, dout, darg, dy, ns * c, h, w, 2, 2, 3, 2);
        check16(out, dout, nx, f, 0.0f, "maxpool_backward");
        C->avgpool_forward(cdev, out, x, ns * c, h, w, 2, 2, 2, 3, 2);
        G->avgpool_forward(gdev, dout, dx, ns * c, h, w, 2, 2, 2, 3, 2);
        check16(out, dout, ns * c * 6, f, 0.0f, "avgpool_forward");
        C->gemm(cdev, 0, 1, m, n, kk, 1.0f, a, kk, b, kk, 0.0f, out, n, 0);
        G->gemm(gdev, 0, 1, m, n, kk, 1.0f, da, kk, db, kk, 0.0f, dout, n, 0);
        check16(out, dout, m * n, f, 0.02f, "gemm (16-bit C)");
        C->gemm_bias(cdev, 0, 1, m, n, kk, a, kk, b, kk, bias, 0, 1, out, n);
        G->gemm_bias(gdev, 0, 1, m, n, kk, da, kk, db, kk, dbias, 0, 1, dout, n);
        check16(out, dout, m * n, f, 0.02f, "gemm_bias with relu");
        labels = (int32_t *)malloc(m * 4), correct = (int32_t *)malloc(m * 4);
        for (size_t i = 0; i < m; i++) labels[i] = (int32_t)(i % n);
        dlabels = (int32_t *)to_gpu_bytes(labels, m * 4), dcorrect = (int32_t *)G->alloc(gdev, m * 4);
        C->softmax_ce(cdev, out, loss, correct, a, labels, m, n, 0.5f, NULL);
        G->softmax_ce(gdev, dout, dloss, dcorrect, da, dlabels, m, n, 0.5f, NULL);
        check16(out, dout, m * n, f, 0.01f, "softmax_ce's gradient");
        C->set_precision(cdev, MIRROR_PRECISION_FP32, 0);
        G->set_precision(gdev, MIRROR_PRECISION_FP32, 0);
        free(x), free(y), free(bias), free(a), free(b), free(out), free(arg), free(loss), free(labels), free(correct);
        G->release(gdev, dx), G->release(gdev, dy), G->release(gdev, dbias), G->release(gdev, da), G->release(gdev, db);
        G->release(gdev, dout), G->release(gdev, darg), G->release(gdev, dloss), G->release(gdev, dlabels);
        G->release(gdev, dcorrect);
    }
}

/* The plan cuBLASLt's gemm_bias made for a key. */
static const mirror__lt_plan *plan_of(const mirror__cuda_dev *d, size_t m, cudaDataType_t type, const void *a,
                                      const void *b, const void *c)
{
    unsigned i;
    for (i = 0; i < MIRROR__MIN(d->plans, MIRROR__LT_PLANS); i++) {
        const mirror__lt_plan *p = &d->plan[i];
        if (p->m == m && p->type == type && p->align[0] == mirror__align_of(a) &&
            p->align[1] == mirror__align_of(b) && p->align[2] == mirror__align_of(c))
            return p;
    }
    return NULL;
}

/* cuBLASLt's plans (a dense layer's gemm_bias): a key per data type and
   per alignment of the operands, told to the heuristic. fp16 then bf16 at
   one shape (each its own plan), on views 256-byte aligned, at 64, 128
   and 32 bytes past (as activations, 16-bit weights and deterministic
   chunks are carved) and at 2 bytes past, against the CPU; a matmul
   cuBLASLt refuses and a key it has no algorithm for (the device's
   lt_refuses, which leaves cuBLASLt's handle as it is) run the
   GEMM and the epilogue kernel without an error; with gemm_align
   (deterministic mode's) the key holds that alignment, not the views';
   split-K sums stay in fp32 (the plans' reduction scheme, cuBLAS's math
   mode). */
static void test_lt_plans(void)
{
    static const size_t views[3][3] = {{0, 0, 0}, {32, 64, 16}, {1, 3, 1}}; /* elements past A, B, C's start */
    const size_t m = 37, n = 29, k = 70, pad = 64;
    mirror__cuda_dev *d = (mirror__cuda_dev *)gdev;
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
    size_t fi, v;
    CHECK(cublasGetMathMode(d->blas, &mode) == CUBLAS_STATUS_SUCCESS &&
              (mode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
          "cuBLAS keeps split-K sums in fp32 (math mode %d)", (int)mode);
    for (fi = 0; fi < 2; fi++) {
        int f = formats[fi];
        cudaDataType_t type = f == MIRROR_PRECISION_FP16 ? CUDA_R_16F : CUDA_R_16BF;
        uint16_t *a = random16(m * k, f), *b = random16(k * n, f), *bias = random16(n, f);
        uint16_t *want = (uint16_t *)malloc(m * n * 2), *dbias = to_gpu16(bias, n);
        uint16_t *da = (uint16_t *)G->alloc(gdev, (m * k + pad) * 2), *db = (uint16_t *)G->alloc(gdev, (k * n + pad) * 2);
        uint16_t *dc = (uint16_t *)G->alloc(gdev, (m * n + pad) * 2);
        mirror_error st = {0, ""};
        C->set_precision(cdev, f, m * k);
        G->set_precision(gdev, f, 0);
        C->gemm_bias(cdev, 0, 1, m, n, k, a, k, b, k, bias, 0, 1, want, n);
        for (v = 0; v < 3; v++) {
            uint16_t *va = da + views[v][0], *vb = db + views[v][1], *vc = dc + views[v][2];
            const mirror__lt_plan *p;
            char what[120];
            uint32_t scheme = 0;
            size_t written = 0;
            G->upload(gdev, va, a, m * k * 2), G->upload(gdev, vb, b, k * n * 2);
            G->gemm_bias(gdev, 0, 1, m, n, k, va, k, vb, k, dbias, 0, 1, vc, n);
            snprintf(what, sizeof what, "gemm_bias on views %zu, %zu, %zu bytes past 256", 2 * views[v][0],
                     2 * views[v][1], 2 * views[v][2]);
            check16(want, vc, m * n, f, 0.02f, what);
            p = plan_of(d, m, type, va, vb, vc);
            CHECK(p != NULL, "%s, %s: a plan of its own (type and alignments in the key)", what, format_name(f));
            if (p && p->usable)
                CHECK(cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                           sizeof scheme, &written) == CUBLAS_STATUS_SUCCESS &&
                          (scheme == CUBLASLT_REDUCTION_SCHEME_NONE || scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE),
                      "%s, %s: split-K sums (if any) in fp32 (reduction scheme %u)", what, format_name(f), scheme);
        }
        {
            mirror__lt_plan *p = (mirror__lt_plan *)plan_of(d, m, type, da, db, dc);
            int was = p && p->usable;
            d->lt_refuses = 1; /* cuBLASLt's answers read as refusals: its handle stays valid */
            G->upload(gdev, da, a, m * k * 2), G->upload(gdev, db, b, k * n * 2);
            G->zero(gdev, dc, m * n * 2);
            G->gemm_bias(gdev, 0, 1, m, n, k, da, k, db, k, dbias, 0, 1, dc, n);
            check16(want, dc, m * n, f, 0.02f, "a matmul cuBLASLt refuses: the GEMM and the epilogue kernel");
            CHECK(!was || (p && !p->usable), "%s: a refused key takes the GEMM from then on (was usable: %d)",
                  format_name(f), was);
            G->zero(gdev, dc, m * n * 2);
            G->gemm_bias(gdev, 0, 1, m - 1, n, k, da, k, db, k, dbias, 0, 1, dc, n);
            check16(want, dc, (m - 1) * n, f, 0.02f, "a key cuBLASLt has no algorithm for");
            p = (mirror__lt_plan *)plan_of(d, m - 1, type, da, db, dc);
            CHECK(p && !p->usable, "%s: a key without an algorithm has an unusable plan", format_name(f));
            d->lt_refuses = 0;
            CHECK(G->status(gdev, &st) == MIRROR_OK, "%s: the fallbacks record no error: %s", format_name(f),
                  st.message);
        }
        { /* deterministic mode's keys: at most the device's gemm_align, whatever the operands' own */
            unsigned i, keyed = 0;
            d->gemm_align = 32;
            G->zero(gdev, dc, m * n * 2);
            G->gemm_bias(gdev, 0, 1, m, n, k, da, k, db, k, dbias, 0, 1, dc, n);
            check16(want, dc, m * n, f, 0.02f, "gemm_bias keyed at 32 bytes on views at 256");
            for (i = 0; i < MIRROR__MIN(d->plans, MIRROR__LT_PLANS); i++)
                keyed += d->plan[i].m == m && d->plan[i].type == type && d->plan[i].align[0] == 32 &&
                         d->plan[i].align[1] == 32 && d->plan[i].align[2] == 32;
            d->gemm_align = 0;
            CHECK(keyed == 1, "%s: gemm_align 32: a plan of its own keyed at 32 bytes for views at 256 (%u)",
                  format_name(f), keyed);
        }
        if (fi == 1)
            CHECK(plan_of(d, m, CUDA_R_16F, da, db, dc) && plan_of(d, m, CUDA_R_16BF, da, db, dc),
                  "fp16 and bf16 hold a plan each at one shape and alignment");
        C->set_precision(cdev, MIRROR_PRECISION_FP32, 0);
        G->set_precision(gdev, MIRROR_PRECISION_FP32, 0);
        free(a), free(b), free(bias), free(want);
        G->release(gdev, da), G->release(gdev, db), G->release(gdev, dc), G->release(gdev, dbias);
    }
}

/* The gradient's norm for clipping, summed across the GPU in two passes of
   a fixed order: the CPU's within 1e-6 relative and the same bits on a
   second run, over sizes from empty to more spans than blocks, in fp32 and
   in fp16 unscaled by 1024. */
static void test_clip_norm(void)
{
    static const size_t sizes[] = {0, 1, 2047, 300007, 5000011};
    mirror_loss_scale_state *dst = (mirror_loss_scale_state *)G->alloc(gdev, sizeof *dst);
    size_t s, i;
    int f;
    for (s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (f = 0; f <= MIRROR_PRECISION_FP16; f += MIRROR_PRECISION_FP16) {
            size_t n = sizes[s];
            float *x = (float *)malloc((n + 1) * 4), *dx;
            uint16_t *h = (uint16_t *)malloc((n + 1) * 2), *dh;
            mirror_loss_scale_state cs, gs[2];
            for (i = 0; i < n; i++) {
                x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
                h[i] = mirror_hd_narrow(x[i] * 1024.0f, MIRROR_PRECISION_FP16);
            }
            dx = to_gpu(x, n + 1), dh = to_gpu16(h, n + 1);
            memset(&cs, 0, sizeof cs);
            cs.scale = f ? 1024.0f : 1.0f;
            for (i = 0; i < 2; i++) {
                G->upload(gdev, dst, &cs, sizeof cs);
                G->clip(gdev, dst, f ? NULL : dx, f ? dh : NULL, n, f, 0.5f);
                G->download(gdev, &gs[i], dst, sizeof gs[i]);
            }
            C->clip(cdev, &cs, f ? NULL : x, f ? h : NULL, n, f, 0.5f);
            CHECK(fabsf(gs[0].grad_norm - cs.grad_norm) <= 1e-6f * cs.grad_norm &&
                      fabsf(gs[0].clip - cs.clip) <= 1e-6f * cs.clip && !memcmp(&gs[0], &gs[1], sizeof cs),
                  "clip norm over %zu %s values: %.9g (CPU %.9g), factor %.9g (CPU %.9g), the same bits twice", n,
                  f ? "fp16" : "fp32", gs[0].grad_norm, cs.grad_norm, gs[0].clip, cs.clip);
            free(x), free(h);
            G->release(gdev, dx), G->release(gdev, dh);
        }
    G->release(gdev, dst);
}

/* check sets found_nonfinite exactly when the CPU does, over a gradient
   longer than the grid's first pass, and touches nothing else. */
static void test_check(void)
{
    const size_t n = (size_t)65535 * MIRROR__THREADS + 1001;
    float *x = wide_range_floats(n);
    uint16_t *g = (uint16_t *)malloc(n * 2), *dg = (uint16_t *)G->alloc(gdev, n * 2);
    mirror_loss_scale_state *dst = (mirror_loss_scale_state *)G->alloc(gdev, sizeof *dst);
    size_t i, k, c;
    for (k = 0; k < 2; k++) {
        int f = formats[k], bf16 = f == MIRROR_PRECISION_BF16;
        uint16_t inf = bf16 ? 0x7f80 : 0x7c00, nan = bf16 ? 0x7fc0 : 0x7e00, top = bf16 ? 0x7f7f : 0x7bff;
        const struct {
            size_t at;
            uint16_t value;
            float scale;
            uint32_t flag_before;
            int want;
            const char *what;
        } cases[] = {
            {0, 0, 65536.0f, 0, 0, "finite values, subnormals included, scale 65536"},
            {0, 0, 0.5f, 0, 0, "finite values, scale 0.5"},
            {n - 1, inf, 65536.0f, 0, 1, "+Inf at the last element"},
            {n / 2, nan, 65536.0f, 0, 1, "a NaN in the middle"},
            {15, inf, 65536.0f, 0, 1, "+Inf at element 15 (the top half of the last word of a group of 8)"},
            {0, (uint16_t)(inf | 0x8000), 1.0f, 0, 1, "-Inf at the first element"},
            {n - 1, top, 1.0f, 0, 0, "the largest finite value, scale 1"},
            {n - 1, top, 0.5f, 0, bf16, "the largest finite value, scale 0.5 (bf16: Inf once unscaled)"},
            {0, 0, 65536.0f, 1, 1, "finite values with the flag already set (check never clears it)"},
        };
        /* finite, and small enough for bf16 to stay finite unscaled by 0.5 */
        for (i = 0; i < n; i++) {
            g[i] = mirror_hd_narrow(x[i], f);
            if (!(fabsf(mirror_hd_widen(g[i], f)) <= 1e30f)) g[i] = 0;
        }
        for (c = 0; c < sizeof cases / sizeof *cases; c++) {
            mirror_loss_scale_state cs, gs;
            uint16_t kept = g[cases[c].at];
            memset(&cs, 0, sizeof cs);
            cs.scale = cases[c].scale, cs.found_nonfinite = cases[c].flag_before, cs.applied = 3;
            g[cases[c].at] = cases[c].value ? cases[c].value : kept;
            G->upload(gdev, dst, &cs, sizeof cs);
            G->upload(gdev, dg, g, n * 2);
            C->check(cdev, &cs, g, n, f);
            G->check(gdev, dst, dg, n, f);
            G->download(gdev, &gs, dst, sizeof gs);
            CHECK(cs.found_nonfinite == (uint32_t)cases[c].want && !memcmp(&cs, &gs, sizeof cs),
                  "%s check, %s: flag %u on the CPU, %u on the GPU, want %d; the rest untouched", format_name(f),
                  cases[c].what, cs.found_nonfinite, gs.found_nonfinite, cases[c].want);
            g[cases[c].at] = kept;
        }
    }
    free(x), free(g);
    G->release(gdev, dg), G->release(gdev, dst);
}

/* The fused updates against the CPU's on the same inputs: 16-bit gradients
   unscaled by 1024 (subnormal, NaN and Inf among them), Adam's t = applied
   + 1 = 7. Tolerances as for sgd and adam (the compilers may fuse different
   multiply-adds); w16 must be narrow(w) of the GPU's own w, bit for bit. With
   the flag set, nothing moves at all. */
static void test_mixed_updates(void)
{
    static const char *const names[4] = {"SGD Nesterov", "SGD without momentum", "AdamW", "Adam (L2)"};
    const size_t n = 65537;
    size_t i, k, o;
    for (k = 0; k < 2; k++) {
        int f = formats[k], bf16 = f == MIRROR_PRECISION_BF16;
        float *w = random_floats(n, 1.0f), *m = random_floats(n, 0.01f), *v = random_floats(n, 0.01f);
        float *gf = random_floats(n, 0.1f * 1024.0f), *wc = (float *)malloc(n * 4), *mc = (float *)malloc(n * 4);
        float *vc = (float *)malloc(n * 4), *dw, *dm, *dv, *gw, *gm, *gv;
        uint16_t *g = (uint16_t *)malloc(n * 2), *w16 = (uint16_t *)calloc(n, 2), *w16c = (uint16_t *)malloc(n * 2);
        uint16_t *dg, *dw16, *gw16;
        mirror_loss_scale_state st, *dst;
        size_t inconsistent;
        memset(&st, 0, sizeof st);
        st.scale = 1024.0f, st.applied = 6;
        for (i = 0; i < n; i++) v[i] = fabsf(v[i]), g[i] = mirror_hd_narrow(gf[i], f);
        g[3] = bf16 ? 0x7fc0 : 0x7e00, g[7] = bf16 ? 0x7f80 : 0x7c00, g[11] = 0x0001, g[12] = 0x8003;
        dw = to_gpu(w, n), dm = to_gpu(m, n), dv = to_gpu(v, n), dg = to_gpu16(g, n), dw16 = to_gpu16(w16, n);
        dst = (mirror_loss_scale_state *)to_gpu_bytes(&st, sizeof st);
        mirror__tick sgd_t, adam_t, *dsgd_t = tick_pair(&sgd_t, 7, 0.1f, 0.0f, 0.0f);
        mirror__tick *dadam_t = tick_pair(&adam_t, 7, 1e-3f, 0.0f, 0.0f);
        for (o = 0; o < 4; o++) {
            memcpy(wc, w, n * 4), memcpy(mc, m, n * 4), memcpy(vc, v, n * 4), memcpy(w16c, w16, n * 2);
            G->upload(gdev, dw, w, n * 4), G->upload(gdev, dm, m, n * 4), G->upload(gdev, dv, v, n * 4);
            G->upload(gdev, dw16, w16, n * 2);
            if (o < 2) {
                float momentum = o == 0 ? 0.9f : 0.0f;
                C->sgd_mixed(cdev, wc, o == 0 ? mc : NULL, w16c, g, n, f, &st, &sgd_t, momentum, 1e-4f, 1);
                G->sgd_mixed(gdev, dw, o == 0 ? dm : NULL, dw16, dg, n, f, dst, dsgd_t, momentum, 1e-4f, 1);
            } else {
                C->adam_mixed(cdev, wc, mc, vc, w16c, g, n, f, &st, &adam_t, 0.9f, 0.999f, 1e-8f, 0.01f, o == 2);
                G->adam_mixed(gdev, dw, dm, dv, dw16, dg, n, f, dst, dadam_t, 0.9f, 0.999f, 1e-8f, 0.01f, o == 2);
            }
            gw = from_gpu(dw, n), gm = from_gpu(dm, n), gv = from_gpu(dv, n), gw16 = from_gpu16(dw16, n);
            for (i = 0, inconsistent = 0; i < n; i++) inconsistent += gw16[i] != mirror_hd_narrow(gw[i], f);
            CHECK(near(wc, gw, n, 1e-7f), "%s %s: masters within 4 ulp + 1e-7, NaN where NaN", format_name(f), names[o]);
            /* Adam's m = b1 m + (1 - b1) g cancels where its two terms,
               each under 0.01 here (ulp 9.3e-10), nearly meet: a multiply-add
               fused on one side and not on the other is then 2 ulp of the
               terms apart, many ulp of the result (up to 1.9e-9 over
               every way of fusing them, tried on the CPU) */
            CHECK(near(mc, gm, n, o < 2 ? 1e-7f : 4e-9f), "%s %s: first moments (momentum) within 4 ulp + %g",
                  format_name(f), names[o], o < 2 ? 1e-7 : 4e-9);
            CHECK(o < 2 ? same_bits(v, gv, n) : near(vc, gv, n, 1e-9f), "%s %s: second moments within 4 ulp + 1e-9",
                  format_name(f), names[o]);
            CHECK(inconsistent == 0, "%s %s: the 16-bit copy is narrow(w) of the GPU's w (%zu differ)", format_name(f),
                  names[o], inconsistent);
            free(gw), free(gm), free(gv), free(gw16);
        }
        /* a slice that starts one element in (the sharded update's): no
           array aligned for the kernels' groups, every element one a thread */
        memcpy(wc, w, n * 4), memcpy(mc, m, n * 4), memcpy(vc, v, n * 4), memcpy(w16c, w16, n * 2);
        G->upload(gdev, dw, w, n * 4), G->upload(gdev, dm, m, n * 4), G->upload(gdev, dv, v, n * 4);
        G->upload(gdev, dw16, w16, n * 2);
        C->adam_mixed(cdev, wc + 1, mc + 1, vc + 1, w16c + 1, g + 1, n - 1, f, &st, &adam_t, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
        G->adam_mixed(gdev, dw + 1, dm + 1, dv + 1, dw16 + 1, dg + 1, n - 1, f, dst, dadam_t, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
        gw = from_gpu(dw, n), gm = from_gpu(dm, n), gv = from_gpu(dv, n), gw16 = from_gpu16(dw16, n);
        for (i = 1, inconsistent = 0; i < n; i++) inconsistent += gw16[i] != mirror_hd_narrow(gw[i], f);
        CHECK(!memcmp(gw, w, 4) && gw16[0] == w16[0] && near(wc, gw, n, 1e-7f) && near(mc, gm, n, 4e-9f) &&
                  near(vc, gv, n, 1e-9f) && inconsistent == 0,
              "%s AdamW on a slice one element in: the CPU's within the tolerances above, w16 narrow(w), element 0 "
              "untouched", format_name(f));
        free(gw), free(gm), free(gv), free(gw16);
        /* the first 65536 elements against two slices of them cut 3
           before the end: the last 4 elements, a whole group of 4 in the
           one, are an element at a time in the other (a group cut short,
           and a slice not aligned), as an update of the whole and the
           sharded update's slices can take them: the same bits */
        {
            float *gw2, *gm2, *gv2;
            uint16_t *gh2;
            G->upload(gdev, dw, w, n * 4), G->upload(gdev, dm, m, n * 4), G->upload(gdev, dv, v, n * 4);
            G->upload(gdev, dw16, w16, n * 2);
            const size_t whole = 65536, cut = whole - 3;
            G->adam_mixed(gdev, dw, dm, dv, dw16, dg, whole, f, dst, dadam_t, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
            gw = from_gpu(dw, n), gm = from_gpu(dm, n), gv = from_gpu(dv, n), gw16 = from_gpu16(dw16, n);
            G->upload(gdev, dw, w, n * 4), G->upload(gdev, dm, m, n * 4), G->upload(gdev, dv, v, n * 4);
            G->upload(gdev, dw16, w16, n * 2);
            G->adam_mixed(gdev, dw, dm, dv, dw16, dg, cut, f, dst, dadam_t, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
            G->adam_mixed(gdev, dw + cut, dm + cut, dv + cut, dw16 + cut, dg + cut, whole - cut, f, dst, dadam_t, 0.9f,
                          0.999f, 1e-8f, 0.01f, 1);
            gw2 = from_gpu(dw, n), gm2 = from_gpu(dm, n), gv2 = from_gpu(dv, n), gh2 = from_gpu16(dw16, n);
            CHECK(bitwise(gw, gw2, n) && bitwise(gm, gm2, n) && bitwise(gv, gv2, n) && !memcmp(gw16, gh2, n * 2),
                  "%s AdamW on 65536 elements in two slices, cut 3 before the end: the bits of one call",
                  format_name(f));
            free(gw), free(gm), free(gv), free(gw16), free(gw2), free(gm2), free(gv2), free(gh2);
        }
        /* a skipped step: the flag set, every buffer as it was */
        st.found_nonfinite = 1;
        G->upload(gdev, dst, &st, sizeof st);
        G->upload(gdev, dw, w, n * 4), G->upload(gdev, dm, m, n * 4), G->upload(gdev, dv, v, n * 4);
        G->upload(gdev, dw16, w16, n * 2);
        G->sgd_mixed(gdev, dw, dm, dw16, dg, n, f, dst, dsgd_t, 0.9f, 1e-4f, 1);
        G->adam_mixed(gdev, dw, dm, dv, dw16, dg, n, f, dst, dadam_t, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
        gw = from_gpu(dw, n), gm = from_gpu(dm, n), gv = from_gpu(dv, n), gw16 = from_gpu16(dw16, n);
        CHECK(same_bits(w, gw, n) && same_bits(m, gm, n) && same_bits(v, gv, n) && !memcmp(w16, gw16, n * 2),
              "%s SGD and Adam with found_nonfinite set: w, m, v and w16 untouched", format_name(f));
        free(gw), free(gm), free(gv), free(gw16);
        free(w), free(m), free(v), free(gf), free(wc), free(mc), free(vc), free(g), free(w16), free(w16c);
        G->release(gdev, dw), G->release(gdev, dm), G->release(gdev, dv), G->release(gdev, dg);
        G->release(gdev, dw16), G->release(gdev, dst);
        G->release(gdev, dsgd_t), G->release(gdev, dadam_t);
    }
}

/* The scaler's state machine on the GPU against the CPU's over 200 steps of
   flags: long finite runs (growth up to max_scale) and runs of overflows
   (backoff down to min_scale). Factors that are not powers of two, so that
   the float arithmetic rounds; bitwise. */
static void test_scaler_update(void)
{
    static const mirror_loss_scaling kinds[3] = {MIRROR_SCALE_DYNAMIC, MIRROR_SCALE_STATIC, MIRROR_SCALE_NONE};
    static const float overflow_odds[4] = {0.0f, 0.95f, 0.3f, 0.0f}; /* per run of 25 steps */
    mirror_loss_scale_state *dst = (mirror_loss_scale_state *)G->alloc(gdev, sizeof *dst);
    size_t k, step;
    for (k = 0; k < 3; k++) {
        mirror_loss_scale_desc d;
        mirror_loss_scale_state cs, gs;
        size_t bad = 0;
        int hit_min = 0, hit_max = 0;
        memset(&d, 0, sizeof d), memset(&cs, 0, sizeof cs);
        d.kind = kinds[k], d.init_scale = 1000.0f, d.growth_factor = 1.5f, d.backoff_factor = 0.6f;
        d.growth_interval = 3, d.min_scale = 3.0f, d.max_scale = 5000.0f, d.max_consecutive_skips = 50;
        cs.scale = cs.last_scale = d.init_scale;
        gs = cs;
        for (step = 0; step < 200; step++) {
            uint32_t flag = mirror__uniform(&rng) < overflow_odds[step / 25 % 4];
            cs.found_nonfinite = gs.found_nonfinite = flag;
            G->upload(gdev, dst, &gs, sizeof gs);
            C->scaler_update(cdev, &cs, &d);
            G->scaler_update(gdev, dst, &d);
            G->download(gdev, &gs, dst, sizeof gs);
            bad += memcmp(&cs, &gs, sizeof cs) != 0;
            hit_min |= cs.scale == d.min_scale, hit_max |= cs.scale == d.max_scale;
        }
        CHECK(bad == 0, "scaler_update, %s: the GPU's state bitwise the CPU's after each of 200 steps (%zu differ)",
              mirror_loss_scaling_name(kinds[k]), bad);
        if (kinds[k] == MIRROR_SCALE_DYNAMIC)
            CHECK(hit_min && hit_max && cs.skipped > 20 && cs.applied > 100,
                  "the dynamic sequence reached both bounds (skipped %llu, applied %llu)",
                  (unsigned long long)cs.skipped, (unsigned long long)cs.applied);
    }
    G->release(gdev, dst);
}

/* ---- whole models ---- */

static mirror_dataset data;

/* chunk > 0: deterministic mode with chunks of that many samples. */
static mirror_shard_update shard_mode = MIRROR_SHARD_AUTO; /* what model_with asks beside its arguments */

static mirror_model *model_with(mirror_strategy *s, mirror_optimizer_kind opt, mirror_precision precision,
                                size_t chunk)
{
    mirror_model_desc d;
    mirror_model *m = NULL;
    memset(&d, 0, sizeof d);
    d.strategy = s;
    d.deterministic = chunk > 0, d.chunk = chunk;
    d.channels = 1, d.height = 28, d.width = 28;
    d.max_batch = 40;
    d.seed = 5;
    d.optimizer.kind = opt;
    d.optimizer.momentum = opt == MIRROR_OPT_SGD ? 0.9f : 0.0f;
    d.precision = precision; /* fp16: dynamic loss scaling from 65536 */
    d.shard_update = shard_mode;
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

static mirror_model *model(mirror_strategy *s, mirror_optimizer_kind opt, mirror_precision precision)
{
    return model_with(s, opt, precision, 0);
}

static mirror_strategy *strategy(const char *devices, mirror_reducer reducer)
{
    mirror_error err = {0, ""};
    mirror_strategy *s = strategy_with(devices, 0, reducer, &err);
    if (!s) fprintf(stderr, "%s: %s\n", devices, err.message);
    return s;
}

/* `steps` steps of batch 40 (the last of an epoch of 150 is 30). */
static int run_steps(mirror_model *m, int steps)
{
    size_t perm[150], k;
    int rc = MIRROR_OK;
    mirror_permutation(perm, 150, 9, 0);
    for (k = 0; k < (size_t)steps && !rc; k++) {
        mirror_batch b;
        memset(&b, 0, sizeof b);
        b.x = data.x, b.labels = data.labels, b.rows = data.count;
        b.index = perm + (k % 4) * 40, b.n = k % 4 == 3 ? 30 : 40;
        if ((rc = mirror_train_step(m, &b, NULL))) fprintf(stderr, "step: %s\n", mirror_model_error(m));
    }
    return rc;
}

/* Parameters after run_steps. */
static float *train(mirror_strategy *s, mirror_optimizer_kind opt, int steps, size_t *n)
{
    mirror_model *m = model(s, opt, MIRROR_PRECISION_FP32);
    float *p;
    if (!m) return NULL;
    run_steps(m, steps);
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

/* The copy reducer on 1, 2 and 4 replicas of GPU 0 against the CPU reducer:
   the 16-bit all-reduce and the float one bitwise (NaN where NaN), and the
   broadcast. Values: every 16-bit pattern, subnormals whose sums turn
   normal, and large values whose sums overflow to Inf. */
static uint16_t random_half(int f)
{
    uint64_t r = mirror__next(&rng);
    uint16_t u = (uint16_t)(r >> 48);
    float large = f == MIRROR_PRECISION_BF16 ? 1e38f : 30000.0f, sign = r & 4 ? -1.0f : 1.0f;
    switch (r & 3) {
    case 0: return u;
    case 1: return (uint16_t)(u & (f == MIRROR_PRECISION_BF16 ? 0x807fu : 0x83ffu)); /* subnormal */
    case 2: return mirror_hd_narrow(sign * large * (1.0f + (float)(u % 1000) / 1000.0f), f);
    default: return mirror_hd_narrow(4.0f * (2.0f * mirror__uniform(&rng) - 1.0f), f);
    }
}

static void test_copy_reducer(void)
{
    static const char *const gpus[3] = {"cuda:0", "cuda:0,0", "cuda:0,0,0,0"}, *const cpus[3] = {"cpu:1", "cpu:2", "cpu:4"};
    const size_t n = 100003;
    size_t t, r, k, i;
    for (t = 0; t < 3; t++) {
        mirror_strategy *gs = strategy(gpus[t], MIRROR_REDUCER_COPY), *cs = strategy(cpus[t], MIRROR_REDUCER_DEFAULT);
        size_t R = (size_t)1 << t, bad = 0;
        int rc;
        uint16_t *h[4], *d[4], *got;
        float *hf[4], *df[4], *gotf, *root;
        CHECK(gs && cs && strcmp(gs->reducer->name, "copy") == 0, "%s: the copy reducer", gpus[t]);
        if (!gs || !cs) continue;
        for (k = 0; k < 2; k++) {
            int f = formats[k];
            for (r = 0; r < R; r++) {
                h[r] = (uint16_t *)malloc(n * 2);
                for (i = 0; i < n; i++) h[r][i] = random_half(f);
                d[r] = to_gpu16(h[r], n);
            }
            cudaDeviceSynchronize(); /* the uploads, on another stream than the reducer's */
            cs->reducer->all_reduce_half(cs, h, n, f, NULL);
            rc = gs->reducer->all_reduce_half(gs, d, n, f, NULL);
            cudaDeviceSynchronize();
            for (r = 0, bad = 0; r < R; r++) {
                got = from_gpu16(d[r], n);
                bad += half_misses(h[r], got, n, f);
                free(got), free(h[r]);
                G->release(gdev, d[r]);
            }
            CHECK(rc == MIRROR_OK && bad == 0, "%s all-reduce of %s: every replica bitwise the CPU reducer's (%zu differ)",
                  gpus[t], format_name(f), bad);
        }
        for (r = 0; r < R; r++) {
            hf[r] = random_floats(n, 1e38f);
            poison(hf[r], n);
            df[r] = to_gpu(hf[r], n);
        }
        cudaDeviceSynchronize();
        mirror_all_reduce_sum(cs, hf, n);
        rc = mirror_all_reduce_sum(gs, df, n);
        cudaDeviceSynchronize();
        for (r = 0, bad = 0; r < R; r++) {
            gotf = from_gpu(df[r], n);
            bad += ulp_misses(hf[r], gotf, n, 0);
            free(gotf);
        }
        CHECK(rc == MIRROR_OK && bad == 0, "%s float all-reduce: every replica bitwise the CPU reducer's (%zu differ)",
              gpus[t], bad);
        root = random_floats(n, 1.0f);
        G->upload(gdev, df[R - 1], root, n * 4);
        cudaDeviceSynchronize();
        rc = mirror_broadcast(gs, df, n, R - 1);
        cudaDeviceSynchronize();
        for (r = 0, bad = 0; r < R; r++) {
            gotf = from_gpu(df[r], n);
            bad += !same_bits(root, gotf, n);
            free(gotf), free(hf[r]);
            G->release(gdev, df[r]);
        }
        CHECK(rc == MIRROR_OK && bad == 0, "%s broadcast from the last replica: every replica bitwise", gpus[t]);
        free(root);
        mirror_strategy_destroy(gs), mirror_strategy_destroy(cs);
    }
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
        if (s && ref) { /* the buckets of the all-reduce during backward, one a layer */
            mirror_model *m = model(s, MIRROR_OPT_ADAMW, MIRROR_PRECISION_FP32);
            p = (float *)calloc(n, 4);
            if (m) {
                CHECK(m->buckets.on, "NCCL in one process: the gradient all-reduced in buckets during backward");
                mirror__plan_buckets(m, 1);
                run_steps(m, 20);
                mirror_get_parameters(m, 0, p, n);
                CHECK(m->buckets.n > 1 && same_bits(p, ref, n),
                      "NCCL with one rank in %zu buckets on their own stream: bitwise equal to the copy reducer",
                      m->buckets.n);
                mirror_model_destroy(m);
            }
            free(p);
        }
        mirror_strategy_destroy(s);
    }
#endif
    free(ref_cpu);
    free(ref);
}

/* Deterministic mode on GPUs (chunks of 8: batches of 40 and 30 make 5 and
   4 chunks): 1, 2 and 4 replicas of GPU 0, and with two GPUs or more every
   GPU under NCCL's strategy, give one replica's parameters bit for bit, in
   fp32 and fp16; against the CPU in the same mode within 1e-4. */
static float *train_deterministic(const char *devices, mirror_reducer reducer, mirror_precision precision, size_t *n)
{
    mirror_strategy *s = strategy(devices, reducer);
    mirror_model *m = s ? model_with(s, MIRROR_OPT_ADAMW, precision, 8) : NULL;
    float *p = NULL;
    if (m && run_steps(m, 20) == MIRROR_OK) {
        *n = mirror_num_parameters(m);
        p = (float *)malloc(*n * 4);
        mirror_get_parameters(m, mirror_num_replicas(s) - 1, p, *n);
    }
    CHECK(p != NULL, "deterministic %s on %s: 20 steps", mirror_precision_name(precision), devices);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    return p;
}

static void test_deterministic_gpu(void)
{
    static const char *const lists[3] = {"cuda:0", "cuda:0,0", "cuda:0,0,0,0"};
    static const mirror_precision precisions[2] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16};
    size_t k, t, n = 0, n2 = 0;
    int visible = 0;
    for (k = 0; k < 2; k++) {
        float *ref = train_deterministic(lists[0], MIRROR_REDUCER_COPY, precisions[k], &n), *p;
        for (t = 1; ref && t < 3; t++) {
            p = train_deterministic(lists[t], MIRROR_REDUCER_COPY, precisions[k], &n2);
            CHECK(p && n2 == n && same_bits(p, ref, n), "deterministic %s: %s gives cuda:0's parameters bit for bit",
                  mirror_precision_name(precisions[k]), lists[t]);
            free(p);
        }
        if (ref && cudaGetDeviceCount(&visible) == cudaSuccess && visible >= 2) {
            p = train_deterministic("cuda:0,1", MIRROR_REDUCER_DEFAULT, precisions[k], &n2);
            CHECK(p && same_bits(p, ref, n), "deterministic %s on two GPUs (NCCL's strategy): one GPU's bits",
                  mirror_precision_name(precisions[k]));
            free(p);
        }
        if (ref && k == 0) {
            p = train_deterministic("cpu:2", MIRROR_REDUCER_DEFAULT, precisions[k], &n2);
            CHECK(p && worst_excess(p, ref, n, 1e-4, 1e-4) <= 0.0,
                  "deterministic fp32 on the GPU against 2 CPU replicas in the same mode: within 1e-4 + 1e-4 relative "
                  "(excess %.3g)", p ? worst_excess(p, ref, n, 1e-4, 1e-4) : -1.0);
            free(p);
        }
        free(ref);
    }
}

/* The trainer's CNN (conv 16, conv 32, dense 128, dense 10) in fp16,
   deterministic with chunks of 16, one step of 64 samples on cuda:0 (4
   chunks, one replica) and on cuda:0,0,0,0 (a chunk each): every chunk's
   gradient arena at 256 bytes, as on 4 replicas (cuBLAS picks a weight
   gradient GEMM's kernel by the alignment of its fp32 C: arenas back to
   back put chunk 1's at 8 bytes), and each chunk's gradient, tensor by
   tensor, then the parameters, bit for bit; the first tensor that differs
   is named. */
static mirror_model *chunk_cnn(const char *devices)
{
    mirror_strategy *s = strategy(devices, MIRROR_REDUCER_COPY);
    mirror_model_desc d;
    mirror_model *m = NULL;
    size_t perm[150];
    mirror_batch b;
    memset(&d, 0, sizeof d);
    d.strategy = s, d.deterministic = 1, d.chunk = 16, d.max_batch = 64, d.seed = 1;
    d.channels = 1, d.height = 28, d.width = 28;
    d.optimizer.kind = MIRROR_OPT_ADAM;
    d.precision = MIRROR_PRECISION_FP16;
    if (!s || mirror_model_create(&d, &m, NULL)) {
        mirror_strategy_destroy(s);
        return NULL;
    }
    mirror_conv2d(m, 16, 3, 1, 1), mirror_relu(m), mirror_maxpool2d(m, 2, 2);
    mirror_conv2d(m, 32, 3, 1, 1), mirror_relu(m), mirror_maxpool2d(m, 2, 2);
    mirror_flatten(m), mirror_dense(m, 128), mirror_relu(m), mirror_dense(m, 10);
    mirror_permutation(perm, 150, 9, 0);
    memset(&b, 0, sizeof b);
    b.x = data.x, b.labels = data.labels, b.rows = data.count, b.index = perm, b.n = 64;
    if (mirror_model_build(m) || mirror_train_step(m, &b, NULL)) {
        fprintf(stderr, "chunk_cnn on %s: %s\n", devices, mirror_model_error(m));
        mirror_model_destroy(m), mirror_strategy_destroy(s);
        return NULL;
    }
    return m;
}

static void test_chunk_alignment_gpu(void)
{
    mirror_model *one = chunk_cnn("cuda:0"), *four = chunk_cnn("cuda:0,0,0,0");
    size_t q, i, n = one ? one->nslots : 0, bad = 0, np = one ? mirror_num_parameters(one) : 0;
    float *a = (float *)malloc((n + np + 1) * 4), *b = (float *)malloc((n + np + 1) * 4);
    char first[160] = "none";
    CHECK(one && four && four->nslots == n && a && b, "the CNN in fp16, deterministic, one step on 1 and 4 replicas");
    for (q = 0; one && four && a && b && q < 4; q++) {
        const float *gq = mirror__chunk_grads(one, &one->rep[0], q);
        bad += (uintptr_t)gq % 256 != 0;
        one->be->download(one->rep[0].dev, a, gq, n * 4);
        four->be->download(four->rep[q].dev, b, mirror__chunk_grads(four, &four->rep[q], 0), n * 4);
        for (i = 0; i < one->nlayers && !strcmp(first, "none"); i++) {
            const mirror__layer *l = &one->layers[i];
            if (memcmp(a + l->w_off, b + l->w_off, l->n_w * 4) || memcmp(a + l->b_off, b + l->b_off, l->n_b * 4))
                snprintf(first, sizeof first, "chunk %zu, layer %zu (%s), its %s", q, i,
                         mirror__kinds[l->kind].name, memcmp(a + l->w_off, b + l->w_off, l->n_w * 4) ? "W" : "b");
        }
    }
    CHECK(bad == 0, "deterministic mode: every chunk's gradient arena at 256 bytes on one GPU replica (%zu not)", bad);
    CHECK(!strcmp(first, "none"), "fp16 chunk gradients: 1 replica's bitwise 4 replicas' (first to differ: %s)",
          first);
    if (one && four && a && b) {
        mirror_get_parameters(one, 0, a, np), mirror_get_parameters(four, 3, b, np);
        CHECK(same_bits(a, b, np), "fp16 CNN: the parameters after one step, 1 and 4 replicas bit for bit");
    }
    free(a), free(b);
    for (q = 0; q < 2; q++) {
        mirror_model *m = q ? four : one;
        mirror_strategy *s = m ? m->s : NULL;
        mirror_model_destroy(m), mirror_strategy_destroy(s);
    }
}

/* The sharded update's two operations against the CPU's: a slice's flag
   exactly and its sum of squares within 1e-6 (another order of the same
   double sums), in fp32 and in 16 bits unscaled; then the verdict, the
   shared math on both, bit for bit. */
static void test_slice_ops(void)
{
    const size_t n = 300007;
    float *x = (float *)malloc(n * 4), *dx = (float *)G->alloc(gdev, n * 4), *dout = (float *)G->alloc(gdev, 8);
    uint16_t *h = (uint16_t *)malloc(n * 2), *dh = (uint16_t *)G->alloc(gdev, n * 2);
    mirror_loss_scale_state *dst = (mirror_loss_scale_state *)G->alloc(gdev, sizeof *dst), cs, gs;
    size_t i, k;
    for (i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (k = 0; k < 4; k++) { /* fp32, fp32 with a NaN, fp16 scaled by 1024, the same with an Inf */
        int f = k < 2 ? 0 : MIRROR_PRECISION_FP16;
        float cpu[2], gpu[2];
        memset(&cs, 0, sizeof cs);
        cs.scale = f ? 1024.0f : 1.0f, cs.applied = 4;
        for (i = 0; i < n; i++) h[i] = mirror_hd_narrow(x[i] * 1024.0f, MIRROR_PRECISION_FP16);
        if (k == 1) x[n / 3] = NAN;
        if (k == 3) h[n - 1] = 0x7c00;
        G->upload(gdev, dx, x, n * 4), G->upload(gdev, dh, h, n * 2), G->upload(gdev, dst, &cs, sizeof cs);
        C->slice_stats(cdev, cpu, f ? NULL : x, f ? h : NULL, n, f, &cs, 1);
        G->slice_stats(gdev, dout, f ? NULL : dx, f ? dh : NULL, n, f, dst, 1);
        G->download(gdev, gpu, dout, 8);
        CHECK(cpu[0] == (float)(k & 1) && gpu[0] == cpu[0] &&
                  (k & 1 ? isnan(gpu[1]) || isinf(gpu[1]) : fabs(gpu[1] - cpu[1]) <= 1e-6 * cpu[1]),
              "slice stats, case %zu: flag %g (CPU %g), squares %.9g (CPU %.9g)", k, gpu[0], cpu[0], gpu[1], cpu[1]);
        if (k == 1) x[n / 3] = 0.0f;
        cpu[0] = (float)(k & 1) * 2.0f; /* two replicas' slices not finite */
        G->upload(gdev, dout, cpu, 8);
        mirror__tick ht, *dt = tick_pair(&ht, 9, 0.0f, 0.0f, 0.0f);
        C->slice_verdict(cdev, &cs, cpu, &ht, f, 0.5f);
        G->slice_verdict(gdev, dst, dout, dt, f, 0.5f);
        G->release(gdev, dt);
        G->download(gdev, &gs, dst, sizeof gs);
        if (isnan(cs.grad_norm) && isnan(gs.grad_norm)) gs.grad_norm = cs.grad_norm; /* a GPU's NaN is its own */
        CHECK(!memcmp(&cs, &gs, sizeof cs) && cs.found_nonfinite == (uint32_t)(k & 1),
              "slice verdict, case %zu: the CPU's state bit for bit (flag %u, norm %g, clip %g)", k, gs.found_nonfinite,
              gs.grad_norm, gs.clip);
    }
    free(x), free(h);
    G->release(gdev, dx), G->release(gdev, dh), G->release(gdev, dout), G->release(gdev, dst);
}

/* The sharded update (MIRROR_SHARD_ON) on GPUs against every replica
   updating everything: 20 AdamW steps give the same parameters and state,
   bit for bit, on 2 and 4 replicas of one GPU (the copy reducer) in fp32
   and fp16, and on two GPUs through NCCL where there are two (two ranks add
   in one order). Each replica's memory report holds 1/R of the state. */
static float *train_sharded(const char *devices, mirror_reducer reducer, mirror_precision precision,
                            mirror_shard_update mode, size_t *n, size_t *state_bytes)
{
    mirror_strategy *s = strategy(devices, reducer);
    mirror_model *m;
    mirror_memory_report rep;
    float *p = NULL;
    shard_mode = mode;
    m = s ? model(s, MIRROR_OPT_ADAMW, precision) : NULL;
    shard_mode = MIRROR_SHARD_AUTO;
    if (m && run_steps(m, 20) == MIRROR_OK && mirror_check_replicas(m) == MIRROR_OK) {
        size_t np = mirror_num_parameters(m), ns = mirror_optimizer_state_size(m);
        *n = np + ns;
        p = (float *)malloc(*n * 4);
        mirror_get_parameters(m, mirror_num_replicas(s) - 1, p, np);
        mirror_get_optimizer_state(m, 0, p + np, ns);
        mirror_memory_report_get(m, mirror_num_replicas(s) - 1, &rep);
        *state_bytes = rep.optimizer;
    }
    CHECK(p != NULL, "%s %s, shard_update %d: 20 steps, replicas equal: %s", devices,
          mirror_precision_name(precision), (int)mode, m ? mirror_model_error(m) : "no model");
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    return p;
}

static void test_sharded_gpu(void)
{
    static const char *const lists[3] = {"cuda:0,0", "cuda:0,0,0,0", "cuda:0,1"};
    static const mirror_precision precisions[2] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16};
    size_t k, t, n = 0, n2 = 0, whole = 0, part = 0, replicas[3] = {2, 4, 2};
    int visible = 0;
    cudaGetDeviceCount(&visible);
    for (k = 0; k < 2; k++)
        for (t = 0; t < 3; t++) {
            mirror_reducer red = t < 2 ? MIRROR_REDUCER_COPY : MIRROR_REDUCER_DEFAULT;
            float *off, *on;
            if (t == 2 && visible < 2) continue;
            off = train_sharded(lists[t], red, precisions[k], MIRROR_SHARD_OFF, &n, &whole);
            on = train_sharded(lists[t], red, precisions[k], MIRROR_SHARD_ON, &n2, &part);
            CHECK(off && on && n == n2 && same_bits(on, off, n),
                  "%s %s: the sharded update gives the unsharded parameters and state bit for bit", lists[t],
                  mirror_precision_name(precisions[k]));
            CHECK(part * replicas[t] >= whole && part * replicas[t] < whole + replicas[t] * 64 * 8,
                  "%s: a replica holds %zu bytes of the %zu-byte state", lists[t], part, whole);
            free(off), free(on);
        }
}

/* CUDA graphs: 24 steps of an MLP with dropout (batches of 40 and 30, the
   last of an epoch of 150), every fourth with its metrics read at once,
   give the parameters, optimizer state and losses of the same steps
   without graphs, bit for bit, on cuda:0 and on two replicas of it, in
   fp32 and fp16; and the passes were recorded. */
static float *train_graphs(const char *devices, mirror_precision precision, int graphs, size_t *n, double *loss,
                           size_t *recorded)
{
    mirror_strategy *s = strategy(devices, MIRROR_REDUCER_DEFAULT);
    mirror_model_desc d;
    mirror_model *m = NULL;
    size_t perm[150], k, r;
    float *p = NULL;
    int rc = s ? MIRROR_OK : MIRROR_ERR_DEVICE;
    memset(&d, 0, sizeof d);
    d.strategy = s, d.channels = 1, d.height = 28, d.width = 28, d.max_batch = 40, d.seed = 5;
    d.optimizer.kind = MIRROR_OPT_ADAMW, d.precision = precision, d.graphs = graphs;
    if (!rc && !(rc = mirror_model_create(&d, &m, NULL))) {
        mirror_flatten(m), mirror_dense(m, 64), mirror_relu(m), mirror_dropout(m, 0.25f), mirror_dense(m, 10);
        rc = mirror_model_build(m);
    }
    mirror_permutation(perm, 150, 9, 0);
    *loss = 0.0;
    for (k = 0; !rc && k < 24; k++) {
        mirror_batch b;
        mirror_metrics met;
        memset(&b, 0, sizeof b);
        b.x = data.x, b.labels = data.labels, b.rows = data.count;
        b.index = perm + (k % 4) * 40, b.n = k % 4 == 3 ? 30 : 40;
        rc = mirror_train_step(m, &b, k % 4 == 1 ? &met : NULL);
        if (!rc && k % 4 == 1) *loss += met.loss_sum;
    }
    if (!rc) {
        size_t np = mirror_num_parameters(m), ns = mirror_optimizer_state_size(m);
        *n = np + ns;
        p = (float *)malloc(*n * 4);
        mirror_get_parameters(m, mirror_num_replicas(s) - 1, p, np);
        mirror_get_optimizer_state(m, 0, p + np, ns);
        for (r = 0, *recorded = 0; r < mirror_num_replicas(s); r++)
            for (k = 0; k < MIRROR__GRAPHS; k++) *recorded += m->rep[r].graph[k].graph != NULL;
    }
    CHECK(p != NULL, "%s %s, graphs %d: 24 steps: %s", devices, mirror_precision_name(precision), graphs,
          m ? mirror_model_error(m) : "no model");
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    return p;
}

static void test_graphs_gpu(void)
{
    static const char *const lists[2] = {"cuda:0", "cuda:0,0"};
    static const mirror_precision precisions[2] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16};
    size_t k, t, n = 0, n2 = 0, none = 0, recorded = 0;
    for (k = 0; k < 2; k++)
        for (t = 0; t < 2; t++) {
            double loss[2];
            float *off = train_graphs(lists[t], precisions[k], 0, &n, &loss[0], &none);
            float *on = train_graphs(lists[t], precisions[k], 1, &n2, &loss[1], &recorded);
            CHECK(off && on && n == n2 && same_bits(on, off, n) && loss[0] == loss[1] && recorded > 0 && none == 0,
                  "%s %s: graphs (%zu recorded) give the parameters, state and losses without, bit for bit",
                  lists[t], mirror_precision_name(precisions[k]), recorded);
            free(off), free(on);
        }
}

/* A mixed-precision run: the mean losses of 20 SGD-momentum steps, then one
   step whose sample 30 (replica 1's shard of 40 on 2 replicas) holds an input
   of 1e6: Inf in fp16, finite in bf16. */
typedef struct mixed_run {
    double loss[20];
    mirror_loss_scale_state before, after; /* around the step with 1e6 */
    float *params_before, *params_after;   /* replica 0's */
    size_t n;                              /* parameters */
    int replicas_equal;                    /* every replica's parameters after it */
    int rc;                                /* the first failure */
} mixed_run;

static void run_mixed(mirror_strategy *s, mirror_precision precision, mixed_run *out)
{
    mirror_model *m = model(s, MIRROR_OPT_SGD, precision);
    size_t perm[150], k, r, n, in = 28 * 28;
    float *big, *q;
    mirror_batch b;
    memset(out, 0, sizeof *out);
    out->rc = m ? MIRROR_OK : MIRROR_ERR_STATE;
    if (!m) return;
    mirror_permutation(perm, 150, 9, 0);
    for (k = 0; k < 20 && !out->rc; k++) {
        mirror_metrics met;
        memset(&b, 0, sizeof b);
        b.x = data.x, b.labels = data.labels, b.rows = data.count;
        b.index = perm + (k % 4) * 40, b.n = k % 4 == 3 ? 30 : 40;
        if (!(out->rc = mirror_train_step(m, &b, &met))) out->loss[k] = met.loss_sum / (double)met.count;
    }
    n = out->n = mirror_num_parameters(m);
    out->params_before = (float *)malloc(n * 4), out->params_after = (float *)malloc(n * 4);
    q = (float *)malloc(n * 4);
    big = (float *)malloc(data.count * in * sizeof(float));
    memcpy(big, data.x, data.count * in * sizeof(float));
    big[30 * in + 100] = 1e6f;
    memset(&b, 0, sizeof b);
    b.x = big, b.labels = data.labels, b.rows = data.count, b.n = 40;
    if (!out->rc) out->rc = mirror_loss_scale_get(m, &out->before);
    if (!out->rc) out->rc = mirror_get_parameters(m, 0, out->params_before, n);
    if (!out->rc) out->rc = mirror_train_step(m, &b, NULL);
    if (!out->rc) out->rc = mirror_loss_scale_get(m, &out->after);
    if (!out->rc) out->rc = mirror_get_parameters(m, 0, out->params_after, n);
    out->replicas_equal = 1;
    for (r = 1; r < mirror_num_replicas(s); r++) {
        mirror_get_parameters(m, r, q, n);
        out->replicas_equal &= same_bits(q, out->params_after, n);
    }
    if (out->rc) fprintf(stderr, "mixed run: %s\n", mirror_model_error(m));
    free(big), free(q);
    mirror_model_destroy(m);
}

/* fp16 and bf16 on 2 replicas of one GPU against 2 CPU replicas. Losses
   within 2e-2 relative: the GPU's GEMMs add in another order, so an
   activation now and then rounds to the neighbouring 16-bit value; 1 CPU
   replica against 2 already differ by 3e-3 after 20 steps. The loss scaler
   decides alike: the same state bit for bit. */
static void test_mixed_training(void)
{
    mirror_strategy *cs = strategy("cpu:2", MIRROR_REDUCER_DEFAULT), *gs = strategy("cuda:0,0", MIRROR_REDUCER_COPY);
    size_t k, i;
    if (!cs || !gs) {
        CHECK(0, "strategies cpu:2 and cuda:0,0");
        mirror_strategy_destroy(cs), mirror_strategy_destroy(gs);
        return;
    }
    for (k = 0; k < 2; k++) {
        int f = formats[k], fp16 = f == MIRROR_PRECISION_FP16;
        mixed_run c, g;
        size_t off = 0, worst = 0;
        run_mixed(cs, (mirror_precision)f, &c);
        run_mixed(gs, (mirror_precision)f, &g);
        CHECK(c.rc == MIRROR_OK && g.rc == MIRROR_OK, "%s: both runs complete", format_name(f));
        if (c.rc || g.rc) {
            free(c.params_before), free(c.params_after), free(g.params_before), free(g.params_after);
            continue;
        }
        for (i = 0; i < 20; i++) {
            off += !(fabs(g.loss[i] - c.loss[i]) <= 2e-2 * fabs(c.loss[i]));
            if (fabs(g.loss[i] - c.loss[i]) > fabs(g.loss[worst] - c.loss[worst])) worst = i;
        }
        CHECK(off == 0, "%s, 2 replicas on one GPU: 20 step losses within 2e-2 relative of 2 CPU replicas, %zu off "
              "(farthest at step %zu: %.6f against %.6f)", format_name(f), off, worst, g.loss[worst], c.loss[worst]);
        CHECK(!memcmp(&g.before, &c.before, sizeof g.before) && g.before.skipped == 0 && g.before.applied == 20,
              "%s after 20 steps: the GPU's scaler state equals the CPU's (scale %g, %llu skipped, %llu applied)",
              format_name(f), (double)g.before.scale, (unsigned long long)g.before.skipped,
              (unsigned long long)g.before.applied);
        CHECK(!memcmp(&g.after, &c.after, sizeof g.after), "%s, an input of 1e6 on replica 1: the GPU's scaler state "
              "equals the CPU's after the step", format_name(f));
        if (fp16)
            CHECK(g.after.skipped == 1 && g.after.last_skipped == 1 && g.after.found_nonfinite == 0 &&
                      g.after.applied == 20 && g.after.scale == g.before.scale / 2 &&
                      same_bits(g.params_before, g.params_after, g.n) && g.replicas_equal,
                  "fp16, an input of 1e6 (Inf in fp16) on replica 1: every GPU replica skipped the step, the "
                  "scale halved (%g -> %g), the parameters unchanged", (double)g.before.scale,
                  (double)g.after.scale);
        else
            CHECK(g.after.skipped == 0 && g.after.applied == 21 && g.replicas_equal &&
                      !same_bits(g.params_before, g.params_after, g.n),
                  "bf16, an input of 1e6 (finite in bf16): the GPU step applied on every replica");
        free(c.params_before), free(c.params_after), free(g.params_before), free(g.params_after);
    }
    mirror_strategy_destroy(cs), mirror_strategy_destroy(gs);
#ifndef MIRROR_NO_NCCL
    { /* all_reduce_half through ncclFloat16 and ncclBfloat16: one rank, so the copy reducer's bits */
        mirror_strategy *ns = strategy("cuda:0", MIRROR_REDUCER_NCCL), *one = strategy("cuda:0", MIRROR_REDUCER_COPY);
        for (k = 0; k < 2 && ns && one; k++) {
            mixed_run a, b;
            run_mixed(ns, (mirror_precision)formats[k], &a);
            run_mixed(one, (mirror_precision)formats[k], &b);
            CHECK(a.rc == MIRROR_OK && b.rc == MIRROR_OK && !memcmp(a.loss, b.loss, sizeof a.loss) &&
                      !memcmp(&a.after, &b.after, sizeof a.after) && same_bits(a.params_after, b.params_after, a.n),
                  "%s with NCCL, one rank: losses, scaler and parameters bitwise the copy reducer's",
                  format_name(formats[k]));
            free(a.params_before), free(a.params_after), free(b.params_before), free(b.params_after);
        }
        CHECK(ns && one, "strategies cuda:0 with NCCL and with the copy reducer");
        mirror_strategy_destroy(ns), mirror_strategy_destroy(one);
    }
#endif
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
    /* refused before any cudaMalloc, against cudaMemGetInfo's free memory */
    CHECK(rc == MIRROR_ERR_NO_MEMORY && strstr(mirror_model_error(m), "the arenas of 1 replica on GPU ") &&
              strstr(mirror_model_error(m), " TiB and it has ") && strstr(mirror_model_error(m), " free (of "),
          "a model larger than the GPU: MIRROR_ERR_NO_MEMORY naming the need and the GPU's free memory (%d: %s)", rc,
          mirror_model_error(m));
    mirror_model_destroy(m);
    m = model(s, MIRROR_OPT_SGD, MIRROR_PRECISION_FP32);
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

/* Evaluation, prediction, checkpoints and the MSE loss on the GPU, against
   the CPU backend after the same steps: metrics and outputs within 1e-4
   relative (the GEMMs add in another order); a checkpoint written by a GPU
   model loads into a CPU model bit for bit, and the other way round. */
static void test_model_io(void)
{
    mirror_strategy *gs = strategy("cuda:0", MIRROR_REDUCER_DEFAULT), *cs = strategy("cpu:1", MIRROR_REDUCER_DEFAULT);
    mirror_model *g = gs ? model(gs, MIRROR_OPT_ADAM, MIRROR_PRECISION_FP32) : NULL;
    mirror_model *c = cs ? model(cs, MIRROR_OPT_ADAM, MIRROR_PRECISION_FP32) : NULL, *back = NULL, *there = NULL;
    mirror_metrics mg, mc;
    char path[2][64];
    size_t n = 0, i, off = 0;
    float *pg, *pc, *outg, *outc;
    CHECK(g && c, "a GPU and a CPU model");
    if (!g || !c) goto done;
    CHECK(run_steps(g, 6) == MIRROR_OK && run_steps(c, 6) == MIRROR_OK, "6 steps on each");
    CHECK(mirror_evaluate(g, &data, 40, &mg) == MIRROR_OK && mirror_evaluate(c, &data, 40, &mc) == MIRROR_OK &&
              mg.count == 150 && mc.count == 150,
          "evaluate on the GPU and the CPU: %s", mirror_model_error(g));
    CHECK(fabs(mg.loss_sum - mc.loss_sum) <= 1e-4 * fabs(mc.loss_sum) &&
              (mg.correct > mc.correct ? mg.correct - mc.correct : mc.correct - mg.correct) <= 1,
          "evaluate: the GPU's loss sum %.6f within 1e-4 relative of the CPU's %.6f, correct %zu and %zu",
          mg.loss_sum, mc.loss_sum, mg.correct, mc.correct);
    outg = (float *)malloc(150 * 10 * 4), outc = (float *)malloc(150 * 10 * 4);
    CHECK(mirror_predict(g, data.x, 150, outg) == MIRROR_OK && mirror_predict(c, data.x, 150, outc) == MIRROR_OK,
          "predict on both");
    for (i = 0; i < 150 * 10; i++) off += !(fabsf(outg[i] - outc[i]) <= 1e-4f * (1.0f + fabsf(outc[i])));
    CHECK(off == 0, "predict: 1500 logits within 1e-4 of the CPU's (%zu off)", off);
    free(outg), free(outc);

    n = mirror_num_parameters(g);
    pg = (float *)malloc(n * 4), pc = (float *)malloc(n * 4);
    snprintf(path[0], sizeof path[0], "/tmp/mirror_test_cuda_%d_gpu.ckpt", (int)getpid());
    snprintf(path[1], sizeof path[1], "/tmp/mirror_test_cuda_%d_cpu.ckpt", (int)getpid());
    back = model(cs, MIRROR_OPT_ADAM, MIRROR_PRECISION_FP32);
    there = model(gs, MIRROR_OPT_ADAM, MIRROR_PRECISION_FP32);
    CHECK(back && there && mirror_checkpoint_save(g, path[0], NULL, 1) == MIRROR_OK &&
              mirror_checkpoint_save(c, path[1], NULL, 1) == MIRROR_OK &&
              mirror_checkpoint_load(back, path[0], 0, NULL) == MIRROR_OK &&
              mirror_checkpoint_load(there, path[1], 0, NULL) == MIRROR_OK,
          "checkpoints saved on each backend and loaded on the other");
    if (back && there) {
        mirror_get_parameters(g, 0, pg, n), mirror_get_parameters(back, 0, pc, n);
        CHECK(same_bits(pg, pc, n), "the GPU model's checkpoint in a CPU model: bitwise its parameters");
        mirror_get_parameters(c, 0, pc, n), mirror_get_parameters(there, 0, pg, n);
        CHECK(same_bits(pg, pc, n), "the CPU model's checkpoint in a GPU model: bitwise its parameters");
    }
    remove(path[0]), remove(path[1]);
    free(pg), free(pc);
done:
    mirror_model_destroy(g), mirror_model_destroy(c), mirror_model_destroy(back), mirror_model_destroy(there);
    if (gs && cs) { /* MSE: a regression head, 10 SGD steps */
        float *want[2];
        mirror_metrics e[2];
        size_t k;
        int rc = MIRROR_OK;
        float *targets = (float *)malloc(150 * 3 * 4);
        for (i = 0; i < 150 * 3; i++) targets[i] = (float)((i * 7) % 5) / 4.0f - 0.5f;
        for (k = 0; k < 2; k++) {
            mirror_strategy *s = k ? cs : gs;
            mirror_model_desc d;
            mirror_model *m = NULL;
            int step;
            memset(&d, 0, sizeof d);
            d.strategy = s, d.channels = 1, d.height = 28, d.width = 28, d.max_batch = 40, d.seed = 3;
            d.loss = MIRROR_LOSS_MSE, d.optimizer.kind = MIRROR_OPT_SGD, d.optimizer.momentum = 0.9f;
            want[k] = NULL;
            if (mirror_model_create(&d, &m, NULL) == MIRROR_OK) {
                mirror_flatten(m), mirror_dense(m, 16), mirror_tanh(m), mirror_dense(m, 3);
                rc = mirror_model_build(m);
            } else {
                rc = MIRROR_ERR_STATE;
            }
            for (step = 0; step < 10 && !rc; step++) {
                mirror_batch b;
                memset(&b, 0, sizeof b);
                b.x = data.x + (size_t)(step % 3) * 40 * 784, b.targets = targets + (size_t)(step % 3) * 40 * 3;
                b.n = 40;
                rc = mirror_train_step(m, &b, NULL);
            }
            if (!rc) {
                mirror_dataset ds = data;
                ds.targets = targets, ds.target_dim = 3, ds.labels = NULL;
                rc = mirror_evaluate(m, &ds, 40, &e[k]);
            }
            if (!rc) {
                n = mirror_num_parameters(m);
                want[k] = (float *)malloc(n * 4);
                rc = mirror_get_parameters(m, 0, want[k], n);
            }
            CHECK(rc == MIRROR_OK, "MSE on %s: 10 steps and an evaluation (%s)", k ? "the CPU" : "the GPU",
                  m ? mirror_model_error(m) : "no model");
            mirror_model_destroy(m);
        }
        if (want[0] && want[1]) {
            CHECK(worst_excess(want[0], want[1], n, 1e-5, 1e-4) <= 0.0 &&
                      fabs(e[0].loss_sum - e[1].loss_sum) <= 1e-4 * fabs(e[1].loss_sum),
                  "MSE: the GPU's parameters within 1e-5 + 1e-4 relative of the CPU's, loss sums %.6f and %.6f",
                  e[0].loss_sum, e[1].loss_sum);
        }
        free(want[0]), free(want[1]), free(targets);
    }
    mirror_strategy_destroy(gs), mirror_strategy_destroy(cs);
}

/* Timing on the GPU: CUDA events on each replica's stream give every phase
   of the kept steps a positive length, and the trace has each replica's
   spans. */
static void test_gpu_timing(void)
{
    mirror_strategy *s = strategy("cuda:0,0", MIRROR_REDUCER_COPY);
    mirror_model *m = s ? model(s, MIRROR_OPT_ADAM, MIRROR_PRECISION_FP32) : NULL;
    mirror_phase_times t;
    char path[64];
    int p, positive = 1;
    memset(&t, 0, sizeof t);
    snprintf(path, sizeof path, "/tmp/mirror_test_cuda_%d_trace.json", (int)getpid());
    CHECK(m && mirror_timing(m, 4) == MIRROR_OK && run_steps(m, 6) == MIRROR_OK &&
              mirror_phase_times_get(m, (size_t)-1, &t) == MIRROR_OK && t.steps == 4 &&
              mirror_trace_write(m, path) == MIRROR_OK,
          "timing 4 of 6 steps on 2 replicas of GPU 0, and its trace: %s", m ? mirror_model_error(m) : "no model");
    for (p = 0; p < MIRROR_PHASE_COUNT; p++) positive &= t.seconds[p] > 0.0 && t.imbalance[p] >= 1.0;
    CHECK(positive, "every phase timed by CUDA events is positive (gather %.3g, forward %.3g, backward %.3g, "
          "all-reduce %.3g, update %.3g ms)", 1e3 * t.seconds[0], 1e3 * t.seconds[1], 1e3 * t.seconds[2],
          1e3 * t.seconds[3], 1e3 * t.seconds[4]);
    remove(path);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* A wait that runs past the strategy's timeout fails with MIRROR_ERR_TIMEOUT
   and says so, instead of hanging; once the work ends, the replica works
   again. The stream is held up by a host function that sleeps. */
static void CUDART_CB sleep_on_stream(void *seconds)
{
    struct timespec t;
    double s = *(const double *)seconds;
    t.tv_sec = (time_t)s, t.tv_nsec = (long)((s - (double)t.tv_sec) * 1e9);
    nanosleep(&t, NULL);
}

static void test_wait_timeout(void)
{
    static double nap = 1.0;
    mirror_strategy_desc sd;
    mirror_strategy *s = NULL;
    mirror_error err = {0, ""}, st = {0, ""};
    size_t ws;
    void *dev;
    float host[4], *buf;
    double t0, waited;
    int rc;
    memset(&sd, 0, sizeof sd);
    sd.devices = "cuda:0", sd.timeout = 0.2;
    if (mirror_strategy_create(&sd, &s, &err) != MIRROR_OK || !(dev = G->open(s, 0, &ws, &err))) {
        CHECK(0, "a strategy with a timeout of 0.2 s: %s", err.message);
        mirror_strategy_destroy(s);
        return;
    }
    buf = (float *)G->alloc(dev, sizeof host);
    cudaLaunchHostFunc(((mirror__cuda_dev *)dev)->stream, sleep_on_stream, &nap);
    t0 = mirror__now();
    G->download(dev, host, buf, sizeof host);
    waited = mirror__now() - t0;
    rc = G->status(dev, &st);
    CHECK(rc == MIRROR_ERR_TIMEOUT && strstr(st.message, "did not finish in 0.2 s") && waited < 0.9,
          "a download behind 1 s of work with a timeout of 0.2 s: MIRROR_ERR_TIMEOUT after %.2f s (%d: %s)", waited,
          rc, st.message);
    cudaStreamSynchronize(((mirror__cuda_dev *)dev)->stream);
    G->download(dev, host, buf, sizeof host);
    CHECK(G->status(dev, &st) == MIRROR_OK, "once the work has ended, a download works again: %s", st.message);
    {
        const size_t big = (size_t)64 << 20; /* pageable: the driver would stage it behind the stream */
        unsigned char *pageable = (unsigned char *)calloc(big, 1), *dbig = (unsigned char *)G->alloc(dev, big);
        float *pinned = (float *)G->host_alloc(dev, sizeof host);
        cudaLaunchHostFunc(((mirror__cuda_dev *)dev)->stream, sleep_on_stream, &nap);
        t0 = mirror__now();
        G->upload(dev, dbig, pageable, big);
        waited = mirror__now() - t0;
        rc = G->status(dev, &st);
        CHECK(rc == MIRROR_ERR_TIMEOUT && waited < 0.9,
              "an upload of 64 MB of pageable memory behind 1 s of work: MIRROR_ERR_TIMEOUT after %.2f s (%d: %s)",
              waited, rc, st.message);
        cudaStreamSynchronize(((mirror__cuda_dev *)dev)->stream);
        cudaLaunchHostFunc(((mirror__cuda_dev *)dev)->stream, sleep_on_stream, &nap);
        t0 = mirror__now();
        G->download(dev, pinned, buf, sizeof host);
        waited = mirror__now() - t0;
        rc = G->status(dev, &st);
        CHECK(rc == MIRROR_ERR_TIMEOUT && waited < 0.9,
              "a download into pinned memory behind 1 s of work: MIRROR_ERR_TIMEOUT after %.2f s (%d: %s)", waited, rc,
              st.message);
        cudaStreamSynchronize(((mirror__cuda_dev *)dev)->stream);
        G->upload(dev, dbig, pageable, big);
        CHECK(G->status(dev, &st) == MIRROR_OK, "once the work has ended, an upload works again: %s", st.message);
        G->host_release(dev, pinned);
        G->release(dev, dbig);
        free(pageable);
    }
    G->release(dev, buf);
    G->close(dev);
    mirror_strategy_destroy(s);
}

/* ---- two GPUs or more: these switch on where two or more are visible ---- */

/* Waits for every visible GPU (the uploads below go through the default
   stream, the reductions through the replicas' own). */
static void sync_all(void)
{
    int visible = 0, dev;
    cudaGetDeviceCount(&visible);
    for (dev = 0; dev < visible; dev++) cudaSetDevice(dev), cudaDeviceSynchronize();
    cudaSetDevice(0);
}

static void *on_gpu(int dev, const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaSetDevice(dev) != cudaSuccess || cudaMalloc(&d, bytes) != cudaSuccess ||
        cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        (void)cudaGetLastError();
    return d;
}

static void *off_gpu(int dev, const void *d, size_t bytes)
{
    void *h = malloc(bytes);
    if (cudaSetDevice(dev) != cudaSuccess || cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        (void)cudaGetLastError();
        memset(h, 0xff, bytes);
    }
    return h;
}

static double value_at(const void *p, size_t i, int format)
{
    return format == MIRROR_PRECISION_FP32 ? ((const float *)p)[i] : mirror_hd_widen(((const uint16_t *)p)[i], format);
}

/* The all-reduce of gs's replicas, across GPUs, in `format` (fp32 or a
   16-bit one) against the CPU reducer: the copy reducer bitwise (the same
   order, the same single rounding); NCCL within R roundings of the sum of
   magnitudes (its own order; 16-bit sums round at every hop). Either way
   every replica ends with the same bits. */
static void reduce_across(mirror_strategy *gs, const char *devices, int format)
{
    const size_t n = 100003, size = format == MIRROR_PRECISION_FP32 ? 4 : 2;
    const mirror__gpu *g = (const mirror__gpu *)gs->gpu;
    const double eps = format == MIRROR_PRECISION_FP32   ? FLT_EPSILON
                       : format == MIRROR_PRECISION_FP16 ? 1.0 / 1024
                                                         : 1.0 / 128;
    size_t R = mirror_num_replicas(gs), r, i, q, bad = 0, differ = 0;
    int exact = strcmp(gs->reducer->name, "copy") == 0, rc;
    char cpu[16];
    mirror_strategy *cs;
    void *h[8], *want[8], *d[8], *got[8];
    snprintf(cpu, sizeof cpu, "cpu:%zu", R);
    cs = strategy(cpu, MIRROR_REDUCER_DEFAULT);
    for (r = 0; r < R; r++) {
        h[r] = malloc(n * size), want[r] = malloc(n * size);
        for (i = 0; i < n; i++) {
            float v = 2.0f * mirror__uniform(&rng) - 1.0f;
            if (size == 4)
                ((float *)h[r])[i] = v;
            else
                ((uint16_t *)h[r])[i] = mirror_hd_narrow(v, format);
        }
        memcpy(want[r], h[r], n * size);
        d[r] = on_gpu(g->device[r], h[r], n * size);
    }
    sync_all();
    if (size == 4) {
        mirror_all_reduce_sum(cs, (float *const *)want, n);
        rc = mirror_all_reduce_sum(gs, (float *const *)d, n);
    } else {
        cs->reducer->all_reduce_half(cs, (uint16_t *const *)want, n, format, NULL);
        rc = gs->reducer->all_reduce_half(gs, (uint16_t *const *)d, n, format, NULL);
    }
    sync_all();
    for (r = 0; r < R; r++) got[r] = off_gpu(g->device[r], d[r], n * size);
    for (i = 0; i < n; i++) {
        double mag = 0.0;
        for (q = 0; q < R; q++) mag += fabs(value_at(h[q], i, format));
        for (r = 0; r < R; r++) {
            double x = value_at(got[r], i, format), w = value_at(want[r], i, format);
            bad += exact ? x != w : !(fabs(x - w) <= (double)R * eps * mag);
            differ += memcmp((char *)got[r] + i * size, (char *)got[0] + i * size, size) != 0;
        }
    }
    CHECK(rc == MIRROR_OK && bad == 0 && differ == 0,
          "%s, reducer %s, %s all-reduce: %s the CPU reducer's (%zu off); every replica the same bits (%zu differ)",
          devices, gs->reducer->name, format_name(format),
          exact ? "bitwise" : "within R roundings of", bad, differ);
    for (r = 0; r < R; r++) {
        cudaSetDevice(g->device[r]);
        cudaFree(d[r]);
        free(h[r]), free(want[r]), free(got[r]);
    }
    cudaSetDevice(0);
    mirror_strategy_destroy(cs);
}

/* Every visible GPU (up to 8) with NCCL and with the copy reducer, and
   replicas that alternate between GPUs 0 and 1 (shared and distinct GPUs,
   cross-device events): all-reduces in fp32, fp16 and bf16; 20 training
   steps against one GPU's (train() also checks that every replica holds
   the same bits); and fp16 with NCCL across GPUs, where the overflowing
   step is skipped on every replica alike. */
static void test_multi_gpu(void)
{
    static const int kinds[3] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16, MIRROR_PRECISION_BF16};
    int visible = 0, v;
    size_t t, k, n, n1;
    size_t used;
    char all[64];
    const char *lists[3];
    mirror_reducer reducers[3] = {MIRROR_REDUCER_NCCL, MIRROR_REDUCER_COPY, MIRROR_REDUCER_COPY};
    mirror_strategy *one;
    float *ref;
    if (cudaGetDeviceCount(&visible) != cudaSuccess || visible < 2) {
        printf("multi-GPU tests: fewer than two GPUs, skipped (they run where two or more are visible)\n");
        return;
    }
    if (visible > 8) visible = 8;
    memcpy(all, "cuda:", 6);
    for (v = 0, used = 5; v < visible; v++)
        used += (size_t)snprintf(all + used, sizeof all - used, v ? ",%d" : "%d", v);
    lists[0] = all, lists[1] = all, lists[2] = "cuda:0,1,0,1";
#ifdef MIRROR_NO_NCCL
    reducers[0] = MIRROR_REDUCER_COPY;
#endif
    one = strategy("cuda:0", MIRROR_REDUCER_COPY);
    ref = one ? train(one, MIRROR_OPT_ADAMW, 20, &n1) : NULL;
    mirror_strategy_destroy(one);
    for (t = 0; t < 3; t++) {
        mirror_strategy *s = strategy(lists[t], reducers[t]);
        float *p;
        CHECK(s != NULL, "%s with reducer %d: a strategy", lists[t], (int)reducers[t]);
        if (!s) continue;
        for (k = 0; k < 3; k++) reduce_across(s, lists[t], kinds[k]);
        p = train(s, MIRROR_OPT_ADAMW, 20, &n);
        CHECK(p && ref && worst_excess(p, ref, n, 1e-5, 1e-5) <= 0.0,
              "%s, reducer %s: 20 steps equal one GPU's within 1e-5 + 1e-5 relative (excess %.3g)", lists[t],
              s->reducer->name, p && ref ? worst_excess(p, ref, n, 1e-5, 1e-5) : -1.0);
        free(p);
        if (t == 0) {
            mixed_run mr;
            run_mixed(s, MIRROR_PRECISION_FP16, &mr);
            CHECK(mr.rc == MIRROR_OK && mr.after.skipped == 1 && mr.after.scale == mr.before.scale / 2 &&
                      same_bits(mr.params_before, mr.params_after, mr.n) && mr.replicas_equal,
                  "%s, reducer %s, fp16 with an input of 1e6 on one replica: every replica skipped the step alike",
                  lists[t], s->reducer->name);
            free(mr.params_before), free(mr.params_after);
        }
        mirror_strategy_destroy(s);
    }
    free(ref);
}

/* With two GPUs or more: a program working on its last GPU calls mirror
   on GPU 0 and finds its own GPU current again after every call. */
static void test_caller_device(void)
{
    int visible = 0, now = -1;
    mirror_strategy *s;
    mirror_model *m;
    float *p;
    size_t n;
    if (cudaGetDeviceCount(&visible) != cudaSuccess || visible < 2) {
        printf("caller's device: one GPU, nothing to switch (runs with two or more)\n");
        return;
    }
    cudaSetDevice(visible - 1);
    s = strategy("cuda:0", MIRROR_REDUCER_DEFAULT);
    cudaGetDevice(&now);
    CHECK(now == visible - 1, "after mirror_strategy_create on GPU 0 the caller's GPU %d is current (%d)", visible - 1,
          now);
    m = s ? model(s, MIRROR_OPT_ADAM, MIRROR_PRECISION_FP32) : NULL;
    if (m) {
        n = mirror_num_parameters(m);
        p = (float *)malloc(n * sizeof(float));
        mirror_get_parameters(m, 0, p, n);
        cudaGetDevice(&now);
        CHECK(now == visible - 1, "after mirror_get_parameters: still GPU %d (%d)", visible - 1, now);
        free(p);
    }
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    cudaSetDevice(0);
}

/* Closes what main opened and prints the counts. */
/* The table of op cases (tests/ops.h) on every CUDA device against the CPU
   backend: each case's inputs, from its seed, through both tables; each
   output within the case's GPU tolerance of the CPU's (bitwise where the
   op is exact or adds in the CPU's order), each property of a backend's own
   results (round trips, marks, graphs, NCCL's buckets) on the GPU itself.
   An optional member the GPU has not is counted, not failed. */
static void test_ops_table(void)
{
    int visible = 0, v;
    mirror_error err = {0, ""};
    CHECK(ops_coverage(G) == 0, "the op table covers every member of the CUDA backend's table");
    CHECK(cudaGetDeviceCount(&visible) == cudaSuccess && visible > 0, "visible GPUs for the op table");
    for (v = 0; v < visible; v++) {
        char devices[32], label[40];
        size_t ws = 0;
        mirror_strategy *s = NULL;
        ops_t gt, ct;
        snprintf(devices, sizeof devices, "cuda:%d", v);
#ifndef MIRROR_NO_NCCL
        s = strategy_with(devices, 1, MIRROR_REDUCER_NCCL, &err); /* reduce_bucket's NCCL, one rank */
#endif
        if (!s) s = strategy_with(devices, 1, MIRROR_REDUCER_DEFAULT, &err);
        CHECK(s != NULL, "GPU %d: a strategy for the op table: %s", v, err.message);
        if (!s) continue;
        memset(&gt, 0, sizeof gt), memset(&ct, 0, sizeof ct);
        gt.be = G, gt.s = s, gt.dev = G->open(s, 0, &ws, &err);
        ct.be = C, ct.s = s, ct.dev = C->open(s, 0, &ws, &err);
        CHECK(gt.dev && ct.dev, "GPU %d: contexts for the op table: %s", v, err.message);
        snprintf(label, sizeof label, "GPU %d against the CPU", v);
        if (gt.dev && ct.dev) printf("%s: the op table, %zu runs missed\n", label, ops_table(&gt, &ct, label, 1));
        if (gt.dev) {
            mirror_error st = {0, ""};
            CHECK(G->status(gt.dev, &st) == MIRROR_OK, "GPU %d: no device error in the op table: %s", v, st.message);
            G->close(gt.dev);
        }
        if (ct.dev) C->close(ct.dev);
        mirror_strategy_destroy(s);
    }
}

static int close_all(void)
{
    G->close(gdev);
    C->close(cdev);
    mirror_strategy_destroy(gpu1);
    mirror_dataset_free(&data);
    return check_done("test_cuda");
}

/* "test_cuda ops": the operation tests alone (up to the check that they
   left no device error), a short run for compute-sanitizer; "test_cuda
   ops-table": the table of op cases (tests/ops.h) alone. */
int main(int argc, char **argv)
{
    mirror_error err = {0, ""};
    size_t ws;
    int ops_only = argc == 2 && !strcmp(argv[1], "ops"), table_only = argc == 2 && !strcmp(argv[1], "ops-table");
    if (argc > 1 && !ops_only && !table_only) {
        fprintf(stderr, "usage: test_cuda [ops | ops-table]\n");
        return 2;
    }
    gpu1 = strategy("cuda:0", MIRROR_REDUCER_DEFAULT);
    CHECK(gpu1 != NULL, "a GPU strategy (make test-gpu needs a GPU)");
    if (!gpu1) return check_done("test_cuda");
    gdev = G->open(gpu1, 0, &ws, &err);
    cdev = C->open(gpu1, 0, &ws, &err);
    CHECK(gdev && cdev, "device contexts: %s", err.message);
    if (!gdev || !cdev) return check_done("test_cuda");
    mirror_dataset_synthetic_digits(&data, 150, 4, NULL);
    if (table_only) {
        test_ops_table();
        return close_all();
    }
    test_elementwise();
    test_bias_grad_spread();
    test_optimizers();
    test_gemm();
    test_gemm_bias();
    test_lt_plans();
    test_storage16();
    test_gemm_exact();
    test_large_shapes();
    test_conv_ops();
    test_losses();
    test_half_ops();
    test_check();
    test_check32();
    test_slice_ops();
    test_clip_norm();
    test_mixed_updates();
    test_scaler_update();
    test_ops_table();
    {
        mirror_error st = {0, ""};
        CHECK(G->status(gdev, &st) == MIRROR_OK, "no device error in the operation tests: %s", st.message);
    }
    if (ops_only) return close_all();
    test_training();
    test_deterministic_gpu();
    test_chunk_alignment_gpu();
    test_sharded_gpu();
    test_graphs_gpu();
    test_copy_reducer();
    test_mixed_training();
    test_out_of_memory();
    test_model_io();
    test_gpu_timing();
    test_wait_timeout();
    test_multi_gpu();
    test_caller_device();
    return close_all();
}
