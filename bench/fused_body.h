/* fused_body.h - the fused mixed-precision update benchmark, one body for
   both backends: bench/bench_fused.c (CPU) and bench/bench_fused_cuda.cu
   (GPU) include it after mirror.h / mirror_cuda.h with MIRROR_IMPLEMENTATION,
   since it calls the backend table (mirror__backend) directly.

   On a flat arena of N parameters (fp16 gradients at a loss scale of 65536,
   fp32 masters and moments, the 16-bit working copy) it times the update's
   launches as mirror__update_mixed issues them, and the device's own copy
   as the reference bandwidth. Bytes counted per parameter, each read or
   written once:
     copy          8   read 4 + write 4 (a 4N-byte buffer)
     check         2   read the 16-bit gradient
     adam_mixed   28   read g (2), w m v (12); write w m v (12), w16 (2)
     sgd_mixed    20   read g (2), w v (8); write w v (8), w16 (2)
   The step lines add check (2) to the optimizer, as the step does (the
   layers read w16 itself); scaler_update is one thread on a few bytes. GB/s = bytes / seconds / 1e9; "of copy" is the
   ratio to the copy's GB/s. Each timing issues the launches `reps` times
   and then waits (a download of the scaler's state, which is synchronous);
   median of FUSED_ROUNDS timings after one warm-up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUSED_ROUNDS 7

/* The reference copy of bytes from src to dst, both device memory. */
typedef void (*fused_copy_fn)(void *dev, void *dst, const void *src, size_t bytes);

typedef struct fused_ctx {
    const mirror__backend *be;
    void *dev;
    size_t n, reps;
    fused_copy_fn copy;
    float *w, *m, *v, *src, *dst; /* src, dst: the copy's 4N bytes */
    uint16_t *w16, *g16;
    mirror_loss_scale_state *st; /* device memory, as in a model */
    mirror__tick *tick[2];       /* device memory: Adam's learning rate, SGD's */
    mirror_loss_scale_desc scaler;
} fused_ctx;

enum { FUSED_COPY, FUSED_CHECK, FUSED_ADAM, FUSED_STEP_ADAM, FUSED_SGD, FUSED_STEP_SGD };

static const struct {
    int op;
    const char *name;
    int bytes; /* per parameter */
} fused_lines[] = {
    {FUSED_COPY, "copy", 8},
    {FUSED_CHECK, "check", 2},
    {FUSED_ADAM, "adam_mixed", 28},
    {FUSED_STEP_ADAM, "check+adam_mixed+scaler_update", 30},
    {FUSED_SGD, "sgd_mixed(momentum)", 20},
    {FUSED_STEP_SGD, "check+sgd_mixed+scaler_update", 22},
};

/* Fails loudly: a failed launch would otherwise time as a fast one. */
static void fused_ok(const fused_ctx *c, const char *what)
{
    mirror_error err = {0, ""};
    if (c->be->status(c->dev, &err) == MIRROR_OK) return;
    fprintf(stderr, "bench_fused: %s: %s\n", what, err.message);
    exit(1);
}

/* Waits for the device; returns the scaler's state. */
static mirror_loss_scale_state fused_wait(const fused_ctx *c)
{
    mirror_loss_scale_state st;
    c->be->download(c->dev, &st, c->st, sizeof st);
    fused_ok(c, "waiting for the device");
    return st;
}

/* The launches of one line, in the step's order (mirror__update_mixed). */
static void fused_issue(const fused_ctx *c, int op)
{
    const mirror__backend *be = c->be;
    const int f = MIRROR_PRECISION_FP16;
    if (op == FUSED_COPY) c->copy(c->dev, c->dst, c->src, c->n * sizeof(float));
    if (op == FUSED_CHECK || op == FUSED_STEP_ADAM || op == FUSED_STEP_SGD) be->check(c->dev, c->st, c->g16, c->n, f);
    if (op == FUSED_ADAM || op == FUSED_STEP_ADAM) /* AdamW */
        be->adam_mixed(c->dev, c->w, c->m, c->v, c->w16, c->g16, c->n, f, c->st, c->tick[0], 0.9f, 0.999f, 1e-8f,
                       0.01f, 1);
    if (op == FUSED_SGD || op == FUSED_STEP_SGD)
        be->sgd_mixed(c->dev, c->w, c->m, c->w16, c->g16, c->n, f, c->st, c->tick[1], 0.9f, 0.0f, 0);
    if (op == FUSED_STEP_ADAM || op == FUSED_STEP_SGD) be->scaler_update(c->dev, c->st, &c->scaler);
}

static int fused_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of one issue of op. */
static double fused_seconds(const fused_ctx *c, int op)
{
    double t[FUSED_ROUNDS];
    size_t round, k;
    for (round = 0; round <= FUSED_ROUNDS; round++) { /* round 0 warms up (and faults the pages in) */
        double t0 = mirror__now();
        for (k = 0; k < c->reps; k++) fused_issue(c, op);
        fused_wait(c);
        if (round) t[round - 1] = (mirror__now() - t0) / (double)c->reps;
    }
    qsort(t, FUSED_ROUNDS, sizeof *t, fused_cmp);
    return t[FUSED_ROUNDS / 2];
}

/* The state with the scale of a fresh fp16 model, and the flag as given. */
static void fused_set_state(const fused_ctx *c, void *host, uint32_t found_nonfinite)
{
    mirror_loss_scale_state st;
    memset(&st, 0, sizeof st);
    st.scale = st.last_scale = 65536.0f;
    st.found_nonfinite = found_nonfinite;
    memcpy(host, &st, sizeof st);
    c->be->upload(c->dev, c->st, host, sizeof st);
    c->be->host_wait(c->dev);
}

/* n random values into device memory through the host buffer: floats in
   [lo, hi], or (half) fp16 gradients of magnitude up to 1e-3 scaled by
   65536, finite. */
static void fused_fill(const fused_ctx *c, void *dst, void *host, float lo, float hi, int half, uint64_t *rng)
{
    size_t i;
    for (i = 0; i < c->n; i++) {
        float x = lo + (hi - lo) * mirror__uniform(rng);
        if (half)
            ((uint16_t *)host)[i] = mirror_hd_narrow(x * 65536.0f, MIRROR_PRECISION_FP16);
        else
            ((float *)host)[i] = x;
    }
    c->be->upload(c->dev, dst, host, c->n * (half ? sizeof(uint16_t) : sizeof(float)));
    c->be->host_wait(c->dev);
}

/* The whole benchmark on replica 0 of a strategy over `devices`; N from
   argv[1], else default_n. */
static int fused_main(int argc, char **argv, const char *devices, size_t default_n, size_t reps, fused_copy_fn copy)
{
    mirror_strategy_desc sd;
    mirror_strategy *s = NULL;
    mirror_error err = {0, ""};
    mirror_loss_scale_state st;
    fused_ctx c;
    size_t i, ws = 0, steps = 0;
    uint64_t rng = 1;
    double copy_gbs = 0.0, t_adam = 0.0, t;
    void *host;
    memset(&c, 0, sizeof c);
    c.n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : default_n;
    if (!c.n) {
        fprintf(stderr, "usage: %s [parameters]\n", argv[0]);
        return 2;
    }
    memset(&sd, 0, sizeof sd);
    sd.devices = devices;
    if (mirror_strategy_create(&sd, &s, &err)) {
        fprintf(stderr, "bench_fused: %s\n", err.message);
        return 1;
    }
    c.be = s->backend;
    c.reps = reps;
    c.copy = copy;
    if (!(c.dev = c.be->open(s, 0, &ws, &err))) {
        fprintf(stderr, "bench_fused: %s\n", err.message);
        return 1;
    }
    if (c.be->set_precision(c.dev, MIRROR_PRECISION_FP16, 0)) {
        fprintf(stderr, "bench_fused: out of memory\n");
        return 1;
    }
    c.scaler.kind = MIRROR_SCALE_DYNAMIC; /* the defaults mirror_model_create fills in */
    c.scaler.init_scale = 65536.0f, c.scaler.growth_factor = 2.0f, c.scaler.backoff_factor = 0.5f;
    c.scaler.growth_interval = 2000, c.scaler.min_scale = 1.0f, c.scaler.max_scale = 16777216.0f;
    c.w = (float *)c.be->alloc(c.dev, c.n * sizeof(float));
    c.m = (float *)c.be->alloc(c.dev, c.n * sizeof(float));
    c.v = (float *)c.be->alloc(c.dev, c.n * sizeof(float));
    c.src = (float *)c.be->alloc(c.dev, c.n * sizeof(float));
    c.dst = (float *)c.be->alloc(c.dev, c.n * sizeof(float));
    c.w16 = (uint16_t *)c.be->alloc(c.dev, c.n * sizeof(uint16_t));
    c.g16 = (uint16_t *)c.be->alloc(c.dev, c.n * sizeof(uint16_t));
    c.st = (mirror_loss_scale_state *)c.be->alloc(c.dev, sizeof *c.st);
    for (i = 0; i < 2; i++) {
        mirror__tick t;
        memset(&t, 0, sizeof t);
        t.step = 1, t.lr = i ? 0.01f : 1e-3f;
        if ((c.tick[i] = (mirror__tick *)c.be->alloc(c.dev, sizeof t)) != NULL) c.be->set(c.dev, c.tick[i], &t, sizeof t);
    }
    host = c.be->host_alloc(c.dev, c.n * sizeof(float));
    fused_ok(&c, "allocating the arena");
    if (!c.w || !c.m || !c.v || !c.src || !c.dst || !c.w16 || !c.g16 || !c.st || !c.tick[0] || !c.tick[1] || !host) {
        fprintf(stderr, "bench_fused: out of memory for %zu parameters\n", c.n);
        return 1;
    }
    fused_fill(&c, c.w, host, -0.1f, 0.1f, 0, &rng);
    fused_fill(&c, c.m, host, -1e-3f, 1e-3f, 0, &rng);
    fused_fill(&c, c.v, host, 0.0f, 1e-6f, 0, &rng);
    fused_fill(&c, c.src, host, -1.0f, 1.0f, 0, &rng); /* not the zero page */
    fused_fill(&c, c.g16, host, -1e-3f, 1e-3f, 1, &rng);
    fused_set_state(&c, host, 0);

    printf("# fused mixed-precision update: %s, N = %zu parameters, fp16 gradients at scale 65536, "
           "median of %d timings of %zu call(s)\n", s->describe, c.n, FUSED_ROUNDS, c.reps);
    printf("# %-38s %7s %10s %9s %8s\n", "launches", "B/param", "ms", "GB/s", "of copy");
    for (i = 0; i < sizeof fused_lines / sizeof fused_lines[0]; i++) {
        double gbs;
        t = fused_seconds(&c, fused_lines[i].op);
        gbs = (double)fused_lines[i].bytes * (double)c.n / t / 1e9;
        if (fused_lines[i].op == FUSED_COPY) copy_gbs = gbs;
        if (fused_lines[i].op == FUSED_ADAM) t_adam = t;
        if (fused_lines[i].op == FUSED_STEP_ADAM || fused_lines[i].op == FUSED_STEP_SGD) steps += FUSED_ROUNDS + 1;
        printf("fused %-34s %7d %10.3f %9.1f %8.2f\n", fused_lines[i].name, fused_lines[i].bytes, 1e3 * t, gbs,
               gbs / copy_gbs);
    }
    /* Every step applied (finite gradients), and w16 is w in 16 bits. */
    st = fused_wait(&c);
    if (st.applied != steps * c.reps || st.skipped) {
        fprintf(stderr, "bench_fused: the scaler applied %llu steps and skipped %llu, expected %llu and 0\n",
                (unsigned long long)st.applied, (unsigned long long)st.skipped, (unsigned long long)(steps * c.reps));
        return 1;
    }
    {
        float w_last;
        uint16_t w16_last;
        c.be->download(c.dev, &w_last, c.w + c.n - 1, sizeof w_last);
        c.be->download(c.dev, &w16_last, c.w16 + c.n - 1, sizeof w16_last);
        if (w16_last != mirror_hd_narrow(w_last, MIRROR_PRECISION_FP16)) {
            fprintf(stderr, "bench_fused: the 16-bit working copy does not match the master\n");
            return 1;
        }
    }
    /* A skipped step: the flag set, adam_mixed reads it and returns. */
    fused_set_state(&c, host, 1);
    t = fused_seconds(&c, FUSED_ADAM);
    printf("fused %-34s %7s %10.4f %9s %8s  (%.2f us, %.1e of adam_mixed's time)\n", "adam_mixed(skipped)", "-",
           1e3 * t, "-", "-", 1e6 * t, t / t_adam);

    c.be->host_release(c.dev, host);
    c.be->release(c.dev, c.w), c.be->release(c.dev, c.m), c.be->release(c.dev, c.v);
    c.be->release(c.dev, c.src), c.be->release(c.dev, c.dst);
    c.be->release(c.dev, c.w16), c.be->release(c.dev, c.g16), c.be->release(c.dev, c.st);
    c.be->release(c.dev, c.tick[0]), c.be->release(c.dev, c.tick[1]);
    c.be->close(c.dev);
    mirror_strategy_destroy(s);
    return 0;
}
