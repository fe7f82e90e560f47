/* ops.h - every member of the backend table (struct mirror__backend) in one
   table of cases, ggml's test-backend-ops in spirit. Include after mirror.h
   (with MIRROR_IMPLEMENTATION) and check.h. tests/test_ops.c runs every
   case on the CPU backend against a float64 reference written here (make
   test); tests/gpu/test_cuda.cu ("test_cuda ops-table") runs every case on
   every CUDA device against the CPU backend, the same inputs through both.

   A case is one function and a row of ops_cases[]: the members it
   exercises (space-separated), the precisions it runs in (OPS_ALL: fp32,
   and fp16 and bf16 storage through set_precision; OPS_F32ONLY; OPS_16: the
   16-bit formats alone, for the ops that take a format argument) and up to
   eight shape numbers. The function draws its inputs from t's seeded
   generator, runs the op through t->be and t->dev, and for each output
   calls ops_get (which downloads it) and fills the float64 reference into
   its want[] (mag[]: the sum of the magnitudes added, where the op sums);
   or ops_self for a property of the backend's own results (a round trip,
   a zeroing, marks that increase), which every backend meets by itself.
   Tolerances are per output: bitwise where the op is exact (copies,
   permute, im2col, narrow and widen, max pooling, comparisons, the
   scaler's state machine); else rel * mag + abs, with one rounding of the
   16-bit format added for outputs in 16-bit storage. A GPU's output is
   compared with the CPU's within twice that (each lies within it of
   float64), or bitwise where the case says so.

   Coverage: ops_members lists every member of struct mirror__backend in
   order with offsetof and sizeof; ops_coverage checks that they tile the
   struct (a member added and not listed breaks the tiling), that every
   function member has a case and every case names members, and that the
   optional members (NULL allowed) come last. Under C++ (run.sh compiles
   test_ops.c as C++ in every make test) a static_assert counts the
   struct's fields by aggregate initialisation, which also sees a member
   hidden in padding. A new member: add it to OPS_MEMBER_LIST, write its
   case function, add its rows to ops_cases.

   Cases per member (shapes x precisions; "x3": fp32, fp16 and bf16 storage):
     open close bind status                 1 x fp32 (a second context: alloc, round trip, status)
     alloc release zero upload download     3 sizes (1, 37, 4099 bytes) x fp32
     host_alloc host_release host_wait      2 sizes x fp32
     stage upload_staged staged             2 sizes x fp32, both slots
     set                                    4 sizes (1-32 bytes) x fp32, in stream order
     gemm                                  10 (1x1x1, one row, odd, past a tile in k and in n, every transpose,
                                              alpha/beta, ld > cols, fp32 C of a gradient, k = 0) x3
     gemm_bias                              6 (per column / per row, relu, transposes) x3
     bias_add, bias_grad                    4 each (Inf and NaN in bias_add's y) x3
     relu_forward, relu_backward            4 each (1 to 4099, Inf and NaN) x3
     act_forward, act_backward              6 each (tanh, sigmoid, GELU; 1 to 1000) x3
     im2col, col2im                         5 each (1x1, padded, strided, 'same', wide) x3
     permute                                4 x3
     maxpool_forward                        6 (overlapping, NaN, a wide plane) x3
     maxpool_backward                       3 x3
     maxpool_relu_backward (optional)       3 x3
     dropout                                4 (in place, p 0.1-0.9, row0) x3
     avgpool_forward, avgpool_backward      4 each (global, overlapping) x3
     bn_sums                                4 (forward and backward, one row) x3
     bn_forward                             3 x3
     bn_backward                            4 (dx NULL) x3
     add                                    4 (in place, b NULL) x3
     softmax_ce                             5 (k 1 to 1000, scale NULL, an Inf logit) x3
     mse                                    4 (an Inf target) x3
     accumulate                             4 (1 to 4099 rows, correct NULL) x fp32
     check32                                5 (NaN, Inf, -Inf, already set) x fp32
     clip                                   4 (NaN, max_norm 0) x3 (fp32 g, or g16)
     slice_stats                            4 x3
     slice_verdict                          5 x3 (format 0 or 16-bit)
     sgd                                    5 (momentum, Nesterov, decay, clip, skip, v NULL) x fp32
     adam                                   4 (AdamW, clip, skip) x fp32
     set_precision                          1 (and a second context's scratch grown) x3
     narrow, widen                          3 each (wide range, ties, subnormals, Inf, NaN) x fp16, bf16
     check                                  4 x fp16, bf16
     sgd_mixed, adam_mixed                  4 each x fp16, bf16
     scaler_update                          6 (backoff, growth, clamps, static) x fp32
     mark marks                             1 x fp32
     workspace                              1 x fp32
     reduce_bucket buckets_done (optional)  2 sizes x3, where the reducer is NCCL
     capture_begin capture_end graph_launch graph_free (optional)  1 x fp32
     device_memory (optional)               1 x fp32
     gemm_align (optional)                  2 (gemm_bias's with plans keyed at 4 and 32 bytes) x3
     gather (optional)                      6 (plain rows, one row, flip, crop pad and both on odd planes,
                                              several channels, int32 labels) x3 */
#ifndef OPS_H
#define OPS_H
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the members of struct mirror__backend, in order ---------------------- */
/* OPS_DATA: a field; OPS_FN: a required operation; OPS_OPT: an optional one. */
enum { OPS_DATA, OPS_FN, OPS_OPT };
#define OPS_MEMBER_LIST(X)                                                                                         \
    X(name, OPS_DATA) X(conv_chunk, OPS_DATA) X(keep_cols, OPS_DATA) X(group_bytes, OPS_DATA)                    \
    X(param_align, OPS_DATA) X(gemm_rows_free, OPS_DATA) X(open, OPS_FN) X(close, OPS_FN) X(bind, OPS_FN)        \
    X(status, OPS_FN) X(alloc, OPS_FN) X(release, OPS_FN) X(host_is_device, OPS_DATA) X(host_alloc, OPS_FN)      \
    X(host_release, OPS_FN) X(host_wait, OPS_FN) X(zero, OPS_FN) X(upload, OPS_FN) X(download, OPS_FN)           \
    X(stage, OPS_FN) X(upload_staged, OPS_FN) X(staged, OPS_FN) X(gemm, OPS_FN) X(gemm_bias, OPS_FN)             \
    X(bias_add, OPS_FN) X(bias_grad, OPS_FN) X(relu_forward, OPS_FN) X(relu_backward, OPS_FN)                   \
    X(act_forward, OPS_FN) X(act_backward, OPS_FN) X(im2col, OPS_FN) X(col2im, OPS_FN) X(permute, OPS_FN)        \
    X(maxpool_forward, OPS_FN) X(dropout, OPS_FN) X(set, OPS_FN) X(avgpool_forward, OPS_FN)                     \
    X(avgpool_backward, OPS_FN) X(bn_sums, OPS_FN) X(bn_forward, OPS_FN) X(bn_backward, OPS_FN) X(add, OPS_FN)   \
    X(maxpool_backward, OPS_FN) X(softmax_ce, OPS_FN) X(mse, OPS_FN) X(accumulate, OPS_FN) X(check32, OPS_FN)    \
    X(clip, OPS_FN) X(slice_stats, OPS_FN) X(slice_verdict, OPS_FN) X(sgd, OPS_FN) X(adam, OPS_FN)               \
    X(set_precision, OPS_FN) X(narrow, OPS_FN) X(widen, OPS_FN) X(check, OPS_FN) X(sgd_mixed, OPS_FN)           \
    X(adam_mixed, OPS_FN) X(scaler_update, OPS_FN) X(mark, OPS_FN) X(marks, OPS_FN) X(workspace, OPS_FN)        \
    X(maxpool_relu_backward, OPS_OPT) X(reduce_bucket, OPS_OPT) X(buckets_done, OPS_OPT)                         \
    X(capture_begin, OPS_OPT) X(capture_end, OPS_OPT) X(graph_launch, OPS_OPT) X(graph_free, OPS_OPT)            \
    X(device_memory, OPS_OPT) X(gemm_align, OPS_OPT) X(gather, OPS_OPT)

typedef struct ops_member {
    const char *name;
    size_t offset, size;
    int kind;
} ops_member;

#define OPS_MEMBER_ROW(m, k) {#m, offsetof(mirror__backend, m), sizeof(((mirror__backend *)0)->m), k},
#define OPS_ONE(m, k) +1
static const ops_member ops_members[] = {OPS_MEMBER_LIST(OPS_MEMBER_ROW)};
enum { OPS_MEMBERS = 0 OPS_MEMBER_LIST(OPS_ONE) };

#if defined(__cplusplus) && !defined(__CUDACC__)
/* The struct's field count, from the longest list of initialisers that
   converts to anything the struct takes: one more than its fields fails.
   (Not under nvcc, whose front end finds no list that fills every field
   in this test: run.sh compiles test_ops.c as C++ with the host's
   compiler in every make test.) */
#include <utility>
template <size_t> struct ops_any {
    template <class T> operator T() const { return T(); }
};
template <class T, size_t... I> constexpr bool ops_inits(decltype(T{ops_any<I>()...}) *) { return true; }
template <class T, size_t... I> constexpr bool ops_inits(...) { return false; }
template <class T, size_t... I> constexpr bool ops_inits_n(std::index_sequence<I...>)
{
    return ops_inits<T, I...>(nullptr);
}
static_assert(ops_inits_n<mirror__backend>(std::make_index_sequence<OPS_MEMBERS>()) &&
                  !ops_inits_n<mirror__backend>(std::make_index_sequence<OPS_MEMBERS + 1>()),
              "struct mirror__backend has a member that tests/ops.h's OPS_MEMBER_LIST lacks: add it and its cases");
#endif

/* ---- a run of one case ----------------------------------------------------- */
typedef struct ops_tol {
    double rel, abs; /* |got - want| <= rel mag + abs; both 0: bitwise */
} ops_tol;

/* What an output holds on the device. */
enum { OPS_ST, OPS_F32, OPS_I32, OPS_F64, OPS_H16, OPS_U8 };

typedef struct ops_out {
    const char *name;
    size_t n;
    double *got, *want, *mag;
    ops_tol tol, gpu; /* against float64; a GPU's against the CPU's */
    int self;         /* a property of this backend's own results: got against want, on every backend */
} ops_out;

#define OPS_OUTS 16
#define OPS_HOLDS 64
#define OPS_LARGEST ((size_t)1 << 17) /* the most values of one storage operand in any case */

typedef struct ops_t {
    const mirror__backend *be;
    void *dev;
    mirror_strategy *s;
    int format; /* the case's precision: 0 fp32, else the 16-bit storage format */
    uint64_t rng;
    int absent; /* an optional member this backend has not (NULL): nothing ran */
    ops_out out[OPS_OUTS];
    size_t nout;
    void *host[OPS_HOLDS], *devp[OPS_HOLDS];
    size_t nhost, ndevp;
    char note[200]; /* what went wrong outside an output (too many outputs, an operand too large) */
} ops_t;

struct ops_case;
typedef void (*ops_fn)(ops_t *t, const struct ops_case *c);
enum { OPS_F32ONLY = 1, OPS_16 = 6, OPS_ALL = 7 }; /* bit p: precision p */
typedef struct ops_case {
    const char *members;
    ops_fn fn;
    int precisions;
    size_t a[8];
} ops_case;

static double ops_u(ops_t *t) { return (double)mirror__uniform(&t->rng); }

static void *ops_hold(ops_t *t, size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (t->nhost < OPS_HOLDS) t->host[t->nhost++] = p;
    else snprintf(t->note, sizeof t->note, "more than %d host buffers", OPS_HOLDS);
    return p;
}

static void *ops_dev(ops_t *t, size_t bytes)
{
    void *p = t->be->alloc(t->dev, bytes ? bytes : 4);
    if (t->ndevp < OPS_HOLDS) t->devp[t->ndevp++] = p;
    else snprintf(t->note, sizeof t->note, "more than %d device buffers", OPS_HOLDS);
    return p;
}

static size_t ops_es(const ops_t *t) { return t->format ? sizeof(uint16_t) : sizeof(float); }

/* x as the case's storage keeps it. */
static float ops_keep(const ops_t *t, double x) { return t->format ? mirror_hd_round((float)x, t->format) : (float)x; }

/* n values uniform in [lo, hi), as the storage keeps them (fp32 with keep 0). */
static float *ops_values(ops_t *t, size_t n, double lo, double hi, int keep)
{
    float *x = (float *)ops_hold(t, n * sizeof(float));
    size_t i;
    for (i = 0; i < n; i++) x[i] = keep ? ops_keep(t, lo + (hi - lo) * ops_u(t)) : (float)(lo + (hi - lo) * ops_u(t));
    return x;
}
static float *ops_rand(ops_t *t, size_t n, double lo, double hi) { return ops_values(t, n, lo, hi, 1); }
static float *ops_rand32(ops_t *t, size_t n, double lo, double hi) { return ops_values(t, n, lo, hi, 0); }

static void *ops_upb(ops_t *t, const void *x, size_t bytes)
{
    void *d = ops_dev(t, bytes);
    t->be->upload(t->dev, d, x, bytes);
    return d;
}

/* n floats into the case's storage on the device. */
static void *ops_up(ops_t *t, const float *x, size_t n)
{
    uint16_t *h;
    size_t i;
    if (n > OPS_LARGEST)
        snprintf(t->note, sizeof t->note, "an operand of %zu values (OPS_LARGEST %zu)", n, OPS_LARGEST);
    if (!t->format) return ops_upb(t, x, n * sizeof(float));
    h = (uint16_t *)ops_hold(t, n * sizeof(uint16_t));
    for (i = 0; i < n; i++) h[i] = mirror_hd_narrow(x[i], t->format);
    return ops_upb(t, h, n * sizeof(uint16_t));
}

static size_t ops_kind_size(const ops_t *t, int kind)
{
    return kind == OPS_ST ? ops_es(t) : kind == OPS_F64 ? 8 : kind == OPS_H16 ? 2 : kind == OPS_U8 ? 1 : 4;
}

static ops_out *ops_new(ops_t *t, const char *name, size_t n)
{
    ops_out *o;
    if (t->nout == OPS_OUTS) {
        snprintf(t->note, sizeof t->note, "more than %d outputs", OPS_OUTS);
        t->nout--;
    }
    o = &t->out[t->nout++];
    memset(o, 0, sizeof *o);
    o->name = name, o->n = n;
    o->got = (double *)calloc(n ? n : 1, sizeof(double));
    o->want = (double *)calloc(n ? n : 1, sizeof(double));
    o->mag = (double *)calloc(n ? n : 1, sizeof(double));
    return o;
}

/* Output `name`: n values of `kind` at d, downloaded into got; the case
   fills want (and mag where the op sums). tol is fp32's: outputs in 16-bit
   storage get one rounding of their format more. */
static ops_out *ops_get(ops_t *t, const char *name, const void *d, size_t n, int kind, ops_tol tol)
{
    ops_out *o = ops_new(t, name, n);
    unsigned char *h = (unsigned char *)ops_hold(t, n * ops_kind_size(t, kind));
    size_t i;
    int f = kind == OPS_ST ? t->format : kind == OPS_H16 ? t->format : 0;
    t->be->download(t->dev, h, d, n * ops_kind_size(t, kind));
    for (i = 0; i < n; i++) {
        if (kind == OPS_I32) o->got[i] = ((const int32_t *)h)[i];
        else if (kind == OPS_F64) o->got[i] = ((const double *)h)[i];
        else if (kind == OPS_U8) o->got[i] = h[i];
        else o->got[i] = mirror_hd_load(h, i, f);
    }
    if (f) {
        tol.rel += f == MIRROR_PRECISION_BF16 ? 1.0 / 256 : 1.0 / 2048; /* one rounding, relative to mag >= |want| */
        tol.abs += f == MIRROR_PRECISION_BF16 ? 0.0 : ldexp(1.0, -24); /* fp16's subnormal spacing */
    }
    o->tol = tol;
    o->gpu.rel = 2 * tol.rel, o->gpu.abs = 2 * tol.abs;
    return o;
}

/* A property of the backend's own results: the case fills got and want. */
static ops_out *ops_self(ops_t *t, const char *name, size_t n)
{
    ops_out *o = ops_new(t, name, n);
    o->self = 1;
    return o;
}

static const ops_tol OPS_EXACT = {0.0, 0.0};
static ops_tol ops_tol_of(double rel, double abs)
{
    ops_tol t;
    t.rel = rel, t.abs = abs;
    return t;
}
#define OPS_U32 (1.0 / 16777216.0) /* fp32's unit roundoff, 2^-24 */

/* got within tol of want (NaN where NaN, infinities equal). */
static int ops_near(double got, double want, double mag, ops_tol tol)
{
    if (want != want) return got != got;
    if (isinf(want) || (tol.rel == 0.0 && tol.abs == 0.0)) return got == want;
    return fabs(got - want) <= tol.rel * mag + tol.abs;
}

/* The mirror_loss_scale_state fields as doubles, in one order. */
enum { OPS_STATE = 10 };
static void ops_state_values(double *v, const mirror_loss_scale_state *st)
{
    v[0] = st->scale, v[1] = st->last_scale, v[2] = st->good_steps, v[3] = st->consecutive_skips;
    v[4] = st->found_nonfinite, v[5] = st->last_skipped, v[6] = (double)st->skipped, v[7] = (double)st->applied;
    v[8] = st->grad_norm, v[9] = st->clip;
}

static ops_out *ops_get_state(ops_t *t, const char *name, const void *d, ops_tol tol,
                              const mirror_loss_scale_state *want)
{
    ops_out *o = ops_new(t, name, OPS_STATE);
    mirror_loss_scale_state h;
    t->be->download(t->dev, &h, d, sizeof h);
    ops_state_values(o->got, &h);
    ops_state_values(o->want, want);
    o->tol = tol;
    o->gpu.rel = 2 * tol.rel, o->gpu.abs = 2 * tol.abs;
    return o;
}

static mirror_loss_scale_state ops_state(float scale, uint32_t found, float clip)
{
    mirror_loss_scale_state st;
    memset(&st, 0, sizeof st);
    st.scale = st.last_scale = scale, st.found_nonfinite = found, st.clip = clip;
    st.good_steps = 3, st.applied = 41, st.skipped = 2;
    return st;
}

static void *ops_tick(ops_t *t, uint64_t step, uint64_t row0, float lr, float bc1, float bc2_sqrt)
{
    mirror__tick k;
    memset(&k, 0, sizeof k);
    k.step = step, k.row0 = row0, k.lr = lr, k.bc1 = bc1, k.bc2_sqrt = bc2_sqrt;
    return ops_upb(t, &k, sizeof k);
}

/* ---- float64 references of the 16-bit formats ----------------------------- */
/* x rounded to nearest even with p significant bits, the smallest normal
   exponent emin and the largest finite value max (beyond: Inf). */
static double ops_round_to(double x, int p, int emin, double max)
{
    int e;
    double q, r;
    if (x != x || isinf(x) || x == 0.0) return x;
    (void)frexp(x, &e);
    q = ldexp(1.0, (e - 1 > emin ? e - 1 : emin) - (p - 1));
    r = rint(x / q) * q;
    return fabs(r) > max ? (r > 0 ? INFINITY : -INFINITY) : r;
}

static double ops_round16(double x, int format)
{
    return format == MIRROR_PRECISION_BF16 ? ops_round_to(x, 8, -126, ldexp(255.0, 120))
                                           : ops_round_to(x, 11, -14, 65504.0);
}

/* A 16-bit value's bits decoded. */
static double ops_decode16(uint16_t h, int format)
{
    int bf = format == MIRROR_PRECISION_BF16, mb = bf ? 7 : 10, eb = bf ? 8 : 5, bias = bf ? 127 : 15;
    int e = (h >> mb) & ((1 << eb) - 1), m = h & ((1 << mb) - 1);
    double v = e == (1 << eb) - 1 ? (m ? NAN : INFINITY)
                                  : e ? ldexp((double)((1 << mb) + m), e - bias - mb) : ldexp((double)m, 1 - bias - mb);
    return h >> 15 ? -v : v;
}

/* ---- data movement and the device's life ---------------------------------- */
static void ops_flag(ops_t *t, const char *name, int ok)
{
    ops_out *o = ops_self(t, name, 1);
    o->got[0] = ok, o->want[0] = 1;
}

static void op_lifecycle(ops_t *t, const ops_case *c)
{
    mirror_error err = {0, ""};
    size_t ws = 0, i;
    void *d2 = t->be->open(t->s, 0, &ws, &err), *p;
    unsigned char in[29], back[29];
    (void)c;
    ops_flag(t, "open gives a context", d2 != NULL);
    if (!d2) return;
    t->be->bind(d2);
    for (i = 0; i < sizeof in; i++) in[i] = (unsigned char)(i * 37 + 11);
    p = t->be->alloc(d2, sizeof in);
    t->be->upload(d2, p, in, sizeof in);
    t->be->download(d2, back, p, sizeof in);
    ops_flag(t, "a round trip through the second context", p && !memcmp(in, back, sizeof in));
    t->be->release(d2, p);
    ops_flag(t, "status: no failure", t->be->status(d2, &err) == MIRROR_OK);
    t->be->close(d2);
    t->be->bind(t->dev);
    ops_flag(t, "the first context goes on after the second closed", t->be->status(t->dev, &err) == MIRROR_OK);
}

/* a[0] bytes: alloc zeroed, upload and download, zero of a middle range. */
static void op_memory(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i, lo = n / 3, len = n / 2;
    unsigned char *in = (unsigned char *)ops_hold(t, n);
    void *d = ops_dev(t, n);
    ops_out *o = ops_get(t, "alloc: zeroed", d, n, OPS_U8, OPS_EXACT);
    o->self = 1;
    for (i = 0; i < n; i++) in[i] = (unsigned char)(1 + (ops_u(t) * 255));
    t->be->upload(t->dev, d, in, n);
    o = ops_get(t, "upload, download", d, n, OPS_U8, OPS_EXACT);
    o->self = 1;
    for (i = 0; i < n; i++) o->want[i] = in[i];
    t->be->zero(t->dev, (char *)d + lo, len);
    o = ops_get(t, "zero of a middle range", d, n, OPS_U8, OPS_EXACT);
    o->self = 1;
    for (i = 0; i < n; i++) o->want[i] = i >= lo && i < lo + len ? 0 : in[i];
}

/* a[0] floats through pinned host memory; host_wait frees it for the next. */
static void op_host(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i, zero = 1;
    float *h = (float *)t->be->host_alloc(t->dev, n * sizeof(float)), *first = ops_rand32(t, n, -1, 1);
    void *d = ops_dev(t, n * sizeof(float));
    ops_out *o;
    ops_flag(t, "host_alloc gives memory", h != NULL);
    if (!h) return;
    for (i = 0; i < n; i++) zero &= h[i] == 0.0f;
    ops_flag(t, "host_alloc: zeroed", (int)zero);
    memcpy(h, first, n * sizeof(float));
    t->be->upload(t->dev, d, h, n * sizeof(float));
    t->be->host_wait(t->dev);
    for (i = 0; i < n; i++) h[i] = -1.0f; /* the upload has read it */
    o = ops_get(t, "what the upload read before host_wait returned", d, n, OPS_F32, OPS_EXACT);
    o->self = 1;
    for (i = 0; i < n; i++) o->want[i] = first[i];
    t->be->host_release(t->dev, h);
}

/* a[0] floats through each slot: stage, upload_staged, staged, then an op
   on the compute stream reads them. */
static void op_staged(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    int slot;
    for (slot = 0; slot < 2; slot++) {
        float *h = (float *)t->be->host_alloc(t->dev, n * sizeof(float)), *x = ops_rand32(t, n, -2, 2);
        void *d = ops_dev(t, n * sizeof(float)), *y = ops_dev(t, n * sizeof(float));
        ops_out *o;
        if (!h) {
            ops_flag(t, "host_alloc gives memory", 0);
            return;
        }
        t->be->stage(t->dev, slot);
        memcpy(h, x, n * sizeof(float));
        t->be->upload_staged(t->dev, d, h, n * sizeof(float));
        t->be->staged(t->dev, slot);
        t->be->add(t->dev, y, d, NULL, n); /* y = the staged values, on the compute stream */
        o = ops_get(t,
                    slot ? "slot 1: the compute read the staged values" : "slot 0: the compute read the staged values",
                    y, n, OPS_F32, OPS_EXACT);
        o->self = 1;
        for (i = 0; i < n; i++) o->want[i] = x[i];
        t->be->stage(t->dev, slot); /* its upload done: the host buffer is free */
        t->be->host_release(t->dev, h);
    }
}

/* set of a[0] bytes, in stream order: the value taken at once. */
static void op_set(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    unsigned char v1[32], v2[32], before[32];
    void *p = ops_dev(t, 32), *q = ops_dev(t, 32);
    ops_out *o;
    for (i = 0; i < 32; i++)
        before[i] = (unsigned char)(200 - i), v1[i] = (unsigned char)(i + 1), v2[i] = (unsigned char)(90 + i);
    t->be->upload(t->dev, p, before, 32);
    t->be->set(t->dev, p, v1, n);
    memset(v1, 0xee, sizeof v1); /* taken at once */
    t->be->add(t->dev, q, p, NULL, 32 / ops_es(t)); /* a copy queued after the set */
    t->be->set(t->dev, p, v2, n);
    o = ops_get(t, "the copy between two sets saw the first", q, 32, OPS_U8, OPS_EXACT);
    o->self = 1;
    for (i = 0; i < 32; i++) o->want[i] = i < n ? (double)(i + 1) : before[i];
    o = ops_get(t, "the second set, the rest untouched", p, 32, OPS_U8, OPS_EXACT);
    o->self = 1;
    for (i = 0; i < 32; i++) o->want[i] = i < n ? v2[i] : before[i];
}

static void op_marks(ops_t *t, const ops_case *c)
{
    double when[MIRROR__MARKS];
    void *p = ops_dev(t, 4096);
    int s, ok = 1;
    (void)c;
    for (s = 0; s < MIRROR__MARKS; s++) {
        t->be->zero(t->dev, p, 4096);
        t->be->mark(t->dev, s);
    }
    t->be->marks(t->dev, when, MIRROR__MARKS);
    for (s = 0; s < MIRROR__MARKS; s++) ok &= when[s] > 0.0 && (s == 0 || when[s] >= when[s - 1]);
    ops_flag(t, "marks: every slot reached, in order, on one clock", ok && when[MIRROR__MARKS - 1] - when[0] < 60.0);
}

static void op_workspace(ops_t *t, const ops_case *c)
{
    static const size_t largest[4] = {0, 1, 1000, 1000000};
    int p, i, ok = 1;
    (void)c;
    for (p = 0; p <= MIRROR_PRECISION_BF16; p++)
        for (i = 1; i < 4; i++) {
            ok &= t->be->workspace(p, largest[i - 1]) <= t->be->workspace(p, largest[i]);
            ok &= t->be->workspace(0, largest[i]) <= t->be->workspace(p, largest[i]);
        }
    ops_flag(t, "workspace: monotone in largest, fp32 the least", ok);
}

/* set_precision again, then an op that reads and writes that storage (a[0]
   values). On a second context set_precision for 1 value, fp32, then for
   a[1] (a test's order on one device): an op on a[1] values stays within
   the scratch (CPU replicas') that the last call asked for. */
static void op_set_precision(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], n2 = c->a[1], es = ops_es(t), i, ws = 0;
    float *x = ops_rand(t, n, -3, 3), *x2 = ops_rand(t, n2, -3, 3);
    unsigned char *h2 = (unsigned char *)ops_hold(t, n2 * es), *back = (unsigned char *)ops_hold(t, n2 * es);
    mirror_error err = {0, ""};
    void *dx, *dy, *d2;
    ops_out *o;
    int ok;
    ops_flag(t, "set_precision: MIRROR_OK", t->be->set_precision(t->dev, t->format, OPS_LARGEST) == MIRROR_OK);
    dx = ops_up(t, x, n), dy = ops_dev(t, n * es);
    t->be->relu_forward(t->dev, dy, dx, n);
    o = ops_get(t, "an op in that storage", dy, n, OPS_ST, OPS_EXACT);
    for (i = 0; i < n; i++) o->want[i] = x[i] > 0 ? x[i] : 0.0;
    d2 = t->be->open(t->s, 0, &ws, &err);
    ops_flag(t, "a second context", d2 != NULL);
    if (!d2) return;
    ok = t->be->set_precision(d2, t->format, 1) == MIRROR_OK &&
         t->be->set_precision(d2, MIRROR_PRECISION_FP32, 0) == MIRROR_OK &&
         t->be->set_precision(d2, t->format, n2) == MIRROR_OK;
    ops_flag(t, "set_precision for 1 value, fp32, then for more: MIRROR_OK", ok);
    for (i = 0; i < n2; i++)
        if (t->format) ((uint16_t *)h2)[i] = mirror_hd_narrow(x2[i], t->format);
        else ((float *)h2)[i] = x2[i];
    dx = t->be->alloc(d2, n2 * es), dy = t->be->alloc(d2, n2 * es);
    t->be->upload(d2, dx, h2, n2 * es);
    t->be->relu_forward(d2, dy, dx, n2);
    t->be->download(d2, back, dy, n2 * es);
    o = ops_self(t, "the second context's op on more values than its first set_precision's", n2);
    for (i = 0; i < n2; i++) o->got[i] = mirror_hd_load(back, i, t->format), o->want[i] = x2[i] > 0 ? x2[i] : 0.0;
    t->be->release(d2, dx), t->be->release(d2, dy);
    t->be->close(d2);
    t->be->bind(t->dev);
}

/* ---- GEMMs ------------------------------------------------------------------ */
/* op(A) [m, k] and op(B) [k, n] as stored, lda/ldb pad columns. */
static double ops_a(const float *a, size_t lda, int ta, size_t i, size_t p)
{
    return ta ? a[p * lda + i] : a[i * lda + p];
}

/* a: m n k ta tb pad (ld = cols + pad) alpha/beta (0: 1, 0; 1: 0.5, 1;
   2: -1.5, 0.25) grad (C fp32, beta adds). */
static void op_gemm(ops_t *t, const ops_case *c)
{
    size_t m = c->a[0], n = c->a[1], k = c->a[2], pad = c->a[5], i, j, p;
    int ta = (int)c->a[3], tb = (int)c->a[4], grad = (int)c->a[7];
    float alpha = c->a[6] == 0 ? 1.0f : c->a[6] == 1 ? 0.5f : -1.5f;
    float beta = c->a[6] == 0 ? 0.0f : c->a[6] == 1 ? 1.0f : 0.25f;
    size_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    size_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb, nc = m * ldc;
    float *a = ops_rand(t, na, -1, 1), *b = ops_rand(t, nb, -1, 1);
    float *c0 = grad ? ops_rand32(t, nc, -1, 1) : ops_rand(t, nc, -1, 1);
    void *da = ops_up(t, a, na), *db = ops_up(t, b, nb), *dc = grad ? ops_upb(t, c0, nc * 4) : ops_up(t, c0, nc);
    ops_out *o;
    t->be->gemm(t->dev, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc, grad);
    o = ops_get(t, "C", dc, nc, grad ? OPS_F32 : OPS_ST, ops_tol_of((double)(k + 4) * OPS_U32, 0.0));
    for (i = 0; i < m; i++)
        for (j = 0; j < ldc; j++) {
            double s = 0.0, mag = 0.0;
            if (j >= n) { /* beyond the columns: untouched */
                o->want[i * ldc + j] = c0[i * ldc + j];
                continue;
            }
            for (p = 0; p < k; p++) {
                double v = ops_a(a, lda, ta, i, p) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
                s += v, mag += fabs(v);
            }
            o->want[i * ldc + j] = alpha * s + (beta != 0.0f ? beta * (double)c0[i * ldc + j] : 0.0);
            o->mag[i * ldc + j] = fabs(alpha) * mag + fabs(beta * (double)c0[i * ldc + j]);
        }
}

/* a: m n k ta tb per_row relu */
static void op_gemm_bias(ops_t *t, const ops_case *c)
{
    size_t m = c->a[0], n = c->a[1], k = c->a[2], i, j, p;
    int ta = (int)c->a[3], tb = (int)c->a[4], per_row = (int)c->a[5], relu = (int)c->a[6];
    size_t lda = ta ? m : k, ldb = tb ? k : n, nb = per_row ? m : n;
    float *a = ops_rand(t, m * k, -1, 1), *b = ops_rand(t, k * n, -1, 1), *bias = ops_rand(t, nb, -1, 1);
    void *da = ops_up(t, a, m * k), *db = ops_up(t, b, k * n), *dbias = ops_up(t, bias, nb);
    void *dc = ops_dev(t, m * n * ops_es(t));
    ops_out *o;
    t->be->gemm_bias(t->dev, ta, tb, m, n, k, da, lda, db, ldb, dbias, per_row, relu, dc, n);
    o = ops_get(t, "C", dc, m * n, OPS_ST, ops_tol_of((double)(k + 4) * OPS_U32, 0.0));
    for (i = 0; i < m; i++)
        for (j = 0; j < n; j++) {
            double s = bias[per_row ? i : j], mag = fabs(s);
            for (p = 0; p < k; p++) {
                double v = ops_a(a, lda, ta, i, p) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
                s += v, mag += fabs(v);
            }
            o->want[i * n + j] = relu && !(s > 0.0) ? 0.0 : s;
            o->mag[i * n + j] = mag;
        }
}

/* ---- elementwise and per-channel ops --------------------------------------- */
/* Inf and NaN at fixed places where n > 10. */
static void ops_poison(float *x, size_t n)
{
    if (n > 10) x[3] = NAN, x[7] = INFINITY, x[n - 2] = -INFINITY;
}

/* a: rows channels inner */
static void op_bias_add(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], ch = c->a[1], inner = c->a[2], n = rows * ch * inner, i;
    float *y = ops_rand(t, n, -2, 2), *bias = ops_rand(t, ch, -2, 2);
    void *dy;
    ops_out *o;
    ops_poison(y, n);
    dy = ops_up(t, y, n);
    t->be->bias_add(t->dev, dy, ops_up(t, bias, ch), rows, ch, inner);
    o = ops_get(t, "y", dy, n, OPS_ST, ops_tol_of(OPS_U32, 0.0));
    for (i = 0; i < n; i++) {
        double b = bias[(i / inner) % ch];
        o->want[i] = y[i] + b;
        o->mag[i] = fabs(y[i]) + fabs(b);
    }
    o->gpu = OPS_EXACT; /* one addition, rounded once */
}

static void op_bias_grad(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], ch = c->a[1], inner = c->a[2], n = rows * ch * inner, i;
    float *dy = ops_rand(t, n, -2, 2), *db = ops_rand32(t, ch, -1, 1);
    void *ddb = ops_upb(t, db, ch * 4);
    ops_out *o;
    t->be->bias_grad(t->dev, (float *)ddb, ops_up(t, dy, n), rows, ch, inner);
    o = ops_get(t, "db", ddb, ch, OPS_F32, ops_tol_of((double)(rows * inner + 4) * OPS_U32, 0.0));
    for (i = 0; i < ch; i++) o->want[i] = db[i], o->mag[i] = fabs(db[i]);
    for (i = 0; i < n; i++) o->want[(i / inner) % ch] += dy[i], o->mag[(i / inner) % ch] += fabs(dy[i]);
}

static void op_relu_forward(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    float *x = ops_rand(t, n, -3, 3);
    void *dy = ops_dev(t, n * ops_es(t));
    ops_out *o;
    ops_poison(x, n);
    t->be->relu_forward(t->dev, dy, ops_up(t, x, n), n);
    o = ops_get(t, "y", dy, n, OPS_ST, OPS_EXACT);
    for (i = 0; i < n; i++) o->want[i] = x[i] != x[i] ? x[i] : x[i] > 0 ? x[i] : 0.0; /* NaN stays */
}

static void op_relu_backward(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    float *d = ops_rand(t, n, -3, 3), *y = ops_rand(t, n, -1, 2);
    void *dd;
    ops_out *o;
    ops_poison(y, n);
    if (n > 10) d[5] = NAN, y[5] = 1.0f; /* a NaN gradient where it flows */
    dd = ops_up(t, d, n);
    t->be->relu_backward(t->dev, dd, ops_up(t, y, n), n);
    o = ops_get(t, "d", dd, n, OPS_ST, OPS_EXACT);
    for (i = 0; i < n; i++) o->want[i] = y[i] > 0 || y[i] != y[i] ? d[i] : 0.0;
}

static double ops_act(int kind, double x)
{
    if (kind == MIRROR__TANH) return tanh(x);
    if (kind == MIRROR__SIGMOID) return 1.0 / (1.0 + exp(-x));
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

static int ops_kind(size_t k) { return k == 0 ? MIRROR__TANH : k == 1 ? MIRROR__SIGMOID : MIRROR__GELU; }

/* a: n kind (0 tanh, 1 sigmoid, 2 GELU) */
static void op_act_forward(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    int kind = ops_kind(c->a[1]);
    float *x = ops_rand(t, n, -4, 4);
    void *dy = ops_dev(t, n * ops_es(t));
    ops_out *o;
    t->be->act_forward(t->dev, kind, dy, ops_up(t, x, n), n);
    o = ops_get(t, "y", dy, n, OPS_ST, ops_tol_of(8 * OPS_U32, 4 * OPS_U32));
    for (i = 0; i < n; i++) o->want[i] = ops_act(kind, x[i]);
}

static void op_act_backward(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    int kind = ops_kind(c->a[1]);
    float *d = ops_rand(t, n, -2, 2), *x = ops_rand(t, n, -4, 4), *y = (float *)ops_hold(t, n * sizeof(float));
    void *dd;
    ops_out *o;
    for (i = 0; i < n; i++) y[i] = ops_keep(t, ops_act(kind, x[i])); /* y = f(x), as stored */
    dd = ops_up(t, d, n);
    t->be->act_backward(t->dev, kind, dd, ops_up(t, x, n), ops_up(t, y, n), n);
    o = ops_get(t, "d", dd, n, OPS_ST, ops_tol_of(8 * OPS_U32, 4 * OPS_U32));
    for (i = 0; i < n; i++) {
        double g, v = y[i], u = x[i];
        if (kind == MIRROR__TANH) g = 1.0 - v * v, o->mag[i] = fabs(d[i]) * (1.0 + v * v);
        else if (kind == MIRROR__SIGMOID) g = v * (1.0 - v), o->mag[i] = fabs(d[i]) * v * (1.0 + v);
        else g = 0.5 * (1.0 + erf(u / sqrt(2.0))) + u * exp(-0.5 * u * u) / sqrt(2.0 * 3.14159265358979323846),
             o->mag[i] = fabs(d[i]) * (1.0 + fabs(u));
        o->want[i] = d[i] * g;
    }
}

/* ---- convolution's layouts --------------------------------------------------- */
/* a: n c h w k stride pad; col [c k k, n ho wo]; each output's taps. */
static size_t ops_out_size(size_t h, size_t k, size_t stride, size_t pad) { return (h + 2 * pad - k) / stride + 1; }

static long ops_tap(const ops_case *c, size_t s, size_t ch, size_t ki, size_t kj, size_t oy, size_t ox)
{
    size_t C = c->a[1], h = c->a[2], w = c->a[3], stride = c->a[5], pad = c->a[6];
    long iy = (long)(oy * stride + ki) - (long)pad, ix = (long)(ox * stride + kj) - (long)pad;
    if (iy < 0 || ix < 0 || iy >= (long)h || ix >= (long)w) return -1;
    return (long)(((s * C + ch) * h + (size_t)iy) * w + (size_t)ix);
}

static void op_im2col(ops_t *t, const ops_case *c)
{
    size_t N = c->a[0], C = c->a[1], h = c->a[2], w = c->a[3], k = c->a[4], stride = c->a[5], pad = c->a[6];
    size_t ho = ops_out_size(h, k, stride, pad), wo = ops_out_size(w, k, stride, pad), cols = N * ho * wo;
    size_t nx = N * C * h * w, ncol = C * k * k * cols, s, ch, ki, kj, oy, ox;
    float *x = ops_rand(t, nx, -3, 3);
    void *dcol = ops_dev(t, ncol * ops_es(t));
    ops_out *o;
    ops_poison(x, nx);
    t->be->im2col(t->dev, dcol, ops_up(t, x, nx), N, C, h, w, k, stride, pad, ho, wo);
    o = ops_get(t, "col", dcol, ncol, OPS_ST, OPS_EXACT);
    for (ch = 0; ch < C; ch++)
        for (ki = 0; ki < k; ki++)
            for (kj = 0; kj < k; kj++)
                for (s = 0; s < N; s++)
                    for (oy = 0; oy < ho; oy++)
                        for (ox = 0; ox < wo; ox++) {
                            long at = ops_tap(c, s, ch, ki, kj, oy, ox);
                            o->want[((ch * k + ki) * k + kj) * cols + (s * ho + oy) * wo + ox] = at < 0 ? 0.0 : x[at];
                        }
}

static void op_col2im(ops_t *t, const ops_case *c)
{
    size_t N = c->a[0], C = c->a[1], h = c->a[2], w = c->a[3], k = c->a[4], stride = c->a[5], pad = c->a[6];
    size_t ho = ops_out_size(h, k, stride, pad), wo = ops_out_size(w, k, stride, pad), cols = N * ho * wo;
    size_t nx = N * C * h * w, ncol = C * k * k * cols, s, ch, ki, kj, oy, ox;
    float *col = ops_rand(t, ncol, -2, 2), *x0 = ops_rand(t, nx, -9, 9);
    void *dx = ops_up(t, x0, nx); /* overwritten */
    ops_out *o;
    t->be->col2im(t->dev, dx, ops_up(t, col, ncol), N, C, h, w, k, stride, pad, ho, wo);
    o = ops_get(t, "x", dx, nx, OPS_ST, ops_tol_of((double)(k * k + 2) * OPS_U32, 0.0));
    for (ch = 0; ch < C; ch++)
        for (ki = 0; ki < k; ki++)
            for (kj = 0; kj < k; kj++)
                for (s = 0; s < N; s++)
                    for (oy = 0; oy < ho; oy++)
                        for (ox = 0; ox < wo; ox++) {
                            long at = ops_tap(c, s, ch, ki, kj, oy, ox);
                            double v = col[((ch * k + ki) * k + kj) * cols + (s * ho + oy) * wo + ox];
                            if (at >= 0) o->want[at] += v, o->mag[at] += fabs(v);
                        }
    o->gpu = OPS_EXACT; /* each input gathers its taps in one order */
}

/* a: a b inner */
static void op_permute(ops_t *t, const ops_case *c)
{
    size_t A = c->a[0], B = c->a[1], inner = c->a[2], n = A * B * inner, i, j, e;
    float *x = ops_rand(t, n, -3, 3);
    void *dy = ops_dev(t, n * ops_es(t));
    ops_out *o;
    ops_poison(x, n);
    t->be->permute(t->dev, dy, ops_up(t, x, n), A, B, inner);
    o = ops_get(t, "dst", dy, n, OPS_ST, OPS_EXACT);
    for (i = 0; i < A; i++)
        for (j = 0; j < B; j++)
            for (e = 0; e < inner; e++) o->want[(j * A + i) * inner + e] = x[(i * B + j) * inner + e];
}

/* ---- pooling ------------------------------------------------------------------ */
/* a: planes h w k stride (max pooling), nan (a NaN in the first plane) */
static void op_maxpool_forward(ops_t *t, const ops_case *c)
{
    size_t P = c->a[0], h = c->a[1], w = c->a[2], k = c->a[3], stride = c->a[4];
    size_t ho = (h - k) / stride + 1, wo = (w - k) / stride + 1, nx = P * h * w, ny = P * ho * wo, p, oy, ox, i, j;
    float *x = ops_rand(t, nx, -3, 3);
    void *dy = ops_dev(t, ny * ops_es(t)), *darg = ops_dev(t, ny * 4);
    ops_out *o, *oa;
    if (c->a[5]) x[w + 1] = NAN, x[1] = 5.0f; /* the window's first NaN, not its larger value */
    t->be->maxpool_forward(t->dev, dy, (int32_t *)darg, ops_up(t, x, nx), P, h, w, k, stride, ho, wo);
    o = ops_get(t, "y", dy, ny, OPS_ST, OPS_EXACT);
    oa = ops_get(t, "arg", darg, ny, OPS_I32, OPS_EXACT);
    for (p = 0; p < P; p++)
        for (oy = 0; oy < ho; oy++)
            for (ox = 0; ox < wo; ox++) {
                size_t at = (oy * stride) * w + ox * stride, nan = (size_t)-1;
                double top = x[p * h * w + at];
                for (i = 0; i < k; i++)
                    for (j = 0; j < k; j++) {
                        size_t q = (oy * stride + i) * w + ox * stride + j;
                        double v = x[p * h * w + q];
                        if (v != v && nan == (size_t)-1) nan = q;
                        if (v > top) top = v, at = q; /* the first of equal maxima */
                    }
                if (nan != (size_t)-1) top = NAN, at = nan;
                o->want[(p * ho + oy) * wo + ox] = top;
                oa->want[(p * ho + oy) * wo + ox] = (double)at;
            }
}

/* Random arguments inside each window (as max pooling's forward leaves them). */
static int32_t *ops_args(ops_t *t, size_t P, size_t w, size_t k, size_t stride, size_t ho, size_t wo)
{
    int32_t *arg = (int32_t *)ops_hold(t, P * ho * wo * 4);
    size_t p, oy, ox;
    for (p = 0; p < P; p++)
        for (oy = 0; oy < ho; oy++)
            for (ox = 0; ox < wo; ox++)
                arg[(p * ho + oy) * wo + ox] =
                    (int32_t)((oy * stride + (size_t)(ops_u(t) * k)) * w + ox * stride + (size_t)(ops_u(t) * k));
    return arg;
}

static void op_maxpool_backward(ops_t *t, const ops_case *c)
{
    size_t P = c->a[0], h = c->a[1], w = c->a[2], k = c->a[3], stride = c->a[4];
    size_t ho = (h - k) / stride + 1, wo = (w - k) / stride + 1, nx = P * h * w, ny = P * ho * wo, i;
    int32_t *arg = ops_args(t, P, w, k, stride, ho, wo);
    float *dy = ops_rand(t, ny, -2, 2), *x0 = ops_rand(t, nx, -9, 9);
    void *dx = ops_up(t, x0, nx); /* overwritten */
    ops_out *o;
    t->be->maxpool_backward(t->dev, dx, (const int32_t *)ops_upb(t, arg, ny * 4), ops_up(t, dy, ny), P, h, w, k,
                            stride, ho, wo);
    o = ops_get(t, "dx", dx, nx, OPS_ST, ops_tol_of((double)(k * k + 2) * OPS_U32, 0.0));
    for (i = 0; i < ny; i++) {
        size_t at = (i / (ho * wo)) * h * w + (size_t)arg[i];
        o->want[at] += dy[i], o->mag[at] += fabs(dy[i]);
    }
    o->gpu = OPS_EXACT; /* the terms added in one order */
}

/* a: planes h w k stride, k <= stride */
static void op_maxpool_relu_backward(ops_t *t, const ops_case *c)
{
    size_t P = c->a[0], h = c->a[1], w = c->a[2], k = c->a[3], stride = c->a[4];
    size_t ho = (h - k) / stride + 1, wo = (w - k) / stride + 1, nx = P * h * w, ny = P * ho * wo, i;
    int32_t *arg;
    float *dy, *y;
    void *dx;
    ops_out *o;
    if (!t->be->maxpool_relu_backward) {
        t->absent = 1;
        return;
    }
    arg = ops_args(t, P, w, k, stride, ho, wo), dy = ops_rand(t, ny, -2, 2), y = ops_rand(t, ny, -1, 1);
    ops_poison(y, ny);
    dx = ops_up(t, ops_rand(t, nx, -9, 9), nx); /* overwritten */
    t->be->maxpool_relu_backward(t->dev, dx, (const int32_t *)ops_upb(t, arg, ny * 4), ops_up(t, dy, ny),
                                 ops_up(t, y, ny), P, h, w, ho, wo);
    o = ops_get(t, "dx", dx, nx, OPS_ST, OPS_EXACT);
    for (i = 0; i < ny; i++) o->want[(i / (ho * wo)) * h * w + (size_t)arg[i]] = y[i] > 0 || y[i] != y[i] ? dy[i] : 0.0;
}

/* a: rows inner p (percent) row0 in_place; the mask is mirror_hd_dropout's hash. */
static void op_dropout(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], inner = c->a[1], n = rows * inner, r, e;
    float p = (float)c->a[2] / 100.0f;
    uint64_t seed = 77, layer = 3, step = 11, key = mirror_hd_dropout_key(seed, layer, step);
    float *x = ops_rand(t, n, -3, 3);
    void *dx = ops_up(t, x, n), *dy = c->a[4] ? dx : ops_dev(t, n * ops_es(t));
    ops_out *o;
    t->be->dropout(t->dev, dy, dx, rows, inner, seed, layer,
                   (const mirror__tick *)ops_tick(t, step, c->a[3], 0.1f, 1, 1), p);
    o = ops_get(t, "y", dy, n, OPS_ST, ops_tol_of(2 * OPS_U32, 0.0));
    for (r = 0; r < rows; r++)
        for (e = 0; e < inner; e++)
            o->want[r * inner + e] =
                mirror_hd_dropout(key, c->a[3] + r, e, p) == 0.0f ? 0.0 : x[r * inner + e] / (1.0 - (double)p);
    o->gpu = OPS_EXACT; /* one product, rounded once */
}

/* a: planes h w kh kw stride */
static void ops_pool_shape(const ops_case *c, size_t *ho, size_t *wo)
{
    *ho = (c->a[1] - c->a[3]) / c->a[5] + 1, *wo = (c->a[2] - c->a[4]) / c->a[5] + 1;
}

static void op_avgpool_forward(ops_t *t, const ops_case *c)
{
    size_t P = c->a[0], h = c->a[1], w = c->a[2], kh = c->a[3], kw = c->a[4], stride = c->a[5], ho, wo, p, oy, ox, i, j;
    float *x;
    void *dy;
    ops_out *o;
    ops_pool_shape(c, &ho, &wo);
    x = ops_rand(t, P * h * w, -3, 3), dy = ops_dev(t, P * ho * wo * ops_es(t));
    t->be->avgpool_forward(t->dev, dy, ops_up(t, x, P * h * w), P, h, w, kh, kw, stride, ho, wo);
    o = ops_get(t, "y", dy, P * ho * wo, OPS_ST, ops_tol_of((double)(kh * kw + 2) * OPS_U32, 0.0));
    for (p = 0; p < P; p++)
        for (oy = 0; oy < ho; oy++)
            for (ox = 0; ox < wo; ox++) {
                size_t at = (p * ho + oy) * wo + ox;
                for (i = 0; i < kh; i++)
                    for (j = 0; j < kw; j++) {
                        double v = x[(p * h + oy * stride + i) * w + ox * stride + j];
                        o->want[at] += v / (double)(kh * kw), o->mag[at] += fabs(v) / (double)(kh * kw);
                    }
            }
}

static void op_avgpool_backward(ops_t *t, const ops_case *c)
{
    size_t P = c->a[0], h = c->a[1], w = c->a[2], kh = c->a[3], kw = c->a[4], stride = c->a[5], ho, wo, p, oy, ox, i, j;
    float *dy;
    void *dx;
    ops_out *o;
    ops_pool_shape(c, &ho, &wo);
    dy = ops_rand(t, P * ho * wo, -3, 3), dx = ops_up(t, ops_rand(t, P * h * w, -9, 9), P * h * w);
    t->be->avgpool_backward(t->dev, dx, ops_up(t, dy, P * ho * wo), P, h, w, kh, kw, stride, ho, wo);
    o = ops_get(t, "dx", dx, P * h * w, OPS_ST, ops_tol_of((double)(kh * kw + 2) * OPS_U32, 0.0));
    for (p = 0; p < P; p++)
        for (oy = 0; oy < ho; oy++)
            for (ox = 0; ox < wo; ox++)
                for (i = 0; i < kh; i++)
                    for (j = 0; j < kw; j++) {
                        size_t at = (p * h + oy * stride + i) * w + ox * stride + j;
                        double v = dy[(p * ho + oy) * wo + ox] / (double)(kh * kw);
                        o->want[at] += v, o->mag[at] += fabs(v);
                    }
    o->gpu = OPS_EXACT; /* each input gathers its windows in one order */
}

/* ---- batch normalisation ----------------------------------------------------- */
/* stat: each channel's mean at [c], invstd at [C + c]. */
static float *ops_stat(ops_t *t, size_t ch)
{
    float *stat = (float *)ops_hold(t, 2 * ch * sizeof(float));
    size_t i;
    for (i = 0; i < ch; i++) stat[i] = (float)(ops_u(t) - 0.5), stat[ch + i] = (float)(0.5 + ops_u(t));
    return stat;
}

static double ops_xhat(const float *stat, size_t ch, size_t C, double x) { return (x - stat[ch]) * stat[C + ch]; }

/* a: rows channels inner backward (x given) */
static void op_bn_sums(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], C = c->a[1], inner = c->a[2], n = rows * C * inner, i;
    int back = (int)c->a[3];
    float *a = ops_rand(t, n, -1, 3), *x = ops_rand(t, n, -2, 2), *stat = ops_stat(t, C);
    double *part = (double *)ops_dev(t, 2 * C * sizeof(double)), *mean = (double *)ops_hold(t, C * sizeof(double));
    ops_out *o;
    t->be->bn_sums(t->dev, part, ops_up(t, a, n), back ? ops_up(t, x, n) : NULL,
                   (const float *)ops_upb(t, stat, 2 * C * 4), rows, C, inner);
    /* the forward's sums are doubles of floats; backward's terms are float products */
    o = ops_get(t, "part", part, 2 * C, OPS_F64, ops_tol_of(back ? 4 * OPS_U32 : 1e-12, 0.0));
    for (i = 0; i < n; i++) o->want[(i / inner) % C] += a[i], o->mag[(i / inner) % C] += fabs(a[i]);
    for (i = 0; i < C; i++) mean[i] = o->want[i] / (double)(rows * inner);
    for (i = 0; i < n; i++) {
        size_t ch = (i / inner) % C;
        double v = back ? a[i] * ops_xhat(stat, ch, C, x[i]) : (a[i] - mean[ch]) * (a[i] - mean[ch]);
        o->want[C + ch] += v, o->mag[C + ch] += fabs(v);
    }
}

/* a: rows channels inner */
static void op_bn_forward(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], C = c->a[1], inner = c->a[2], n = rows * C * inner, i;
    float *x = ops_rand(t, n, -2, 2), *stat = ops_stat(t, C), *gamma = ops_rand(t, C, 0.5, 1.5),
          *beta = ops_rand(t, C, -1, 1);
    void *dy = ops_dev(t, n * ops_es(t));
    ops_out *o;
    t->be->bn_forward(t->dev, dy, ops_up(t, x, n), (const float *)ops_upb(t, stat, 2 * C * 4), ops_up(t, gamma, C),
                      ops_up(t, beta, C), rows, C, inner);
    o = ops_get(t, "y", dy, n, OPS_ST, ops_tol_of(4 * OPS_U32, 0.0));
    for (i = 0; i < n; i++) {
        size_t ch = (i / inner) % C;
        double xh = ops_xhat(stat, ch, C, x[i]);
        o->want[i] = gamma[ch] * xh + beta[ch];
        o->mag[i] = fabs(gamma[ch] * xh) + fabs(beta[ch]) + fabs(gamma[ch] * stat[ch] * stat[C + ch]);
    }
}

/* a: rows channels inner no_dx */
static void op_bn_backward(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], C = c->a[1], inner = c->a[2], n = rows * C * inner, i;
    int no_dx = (int)c->a[3];
    float *dy = ops_rand(t, n, -1, 1), *x = ops_rand(t, n, -2, 2), *stat = ops_stat(t, C),
          *gamma = ops_rand(t, C, 0.5, 1.5);
    float *means = ops_rand32(t, 2 * C, -0.3, 0.3), *dg = ops_rand32(t, C, -1, 1), *dbt = ops_rand32(t, C, -1, 1);
    double *part = (double *)ops_hold(t, 2 * C * sizeof(double));
    void *ddx = no_dx ? NULL : ops_dev(t, n * ops_es(t)), *ddg = ops_upb(t, dg, C * 4), *ddb = ops_upb(t, dbt, C * 4);
    ops_out *o;
    for (i = 0; i < 2 * C; i++) part[i] = 10.0 * (ops_u(t) - 0.5);
    t->be->bn_backward(t->dev, ddx, (float *)ddg, (float *)ddb, ops_up(t, dy, n), ops_up(t, x, n),
                       (const float *)ops_upb(t, stat, 2 * C * 4), (const float *)ops_upb(t, means, 2 * C * 4),
                       (const double *)ops_upb(t, part, 2 * C * 8), ops_up(t, gamma, C), rows, C, inner);
    o = ops_get(t, "dgamma", ddg, C, OPS_F32, ops_tol_of(2 * OPS_U32, 0.0));
    for (i = 0; i < C; i++) o->want[i] = dg[i] + part[C + i], o->mag[i] = fabs(dg[i]) + fabs(part[C + i]);
    o = ops_get(t, "dbeta", ddb, C, OPS_F32, ops_tol_of(2 * OPS_U32, 0.0));
    for (i = 0; i < C; i++) o->want[i] = dbt[i] + part[i], o->mag[i] = fabs(dbt[i]) + fabs(part[i]);
    if (no_dx) return;
    o = ops_get(t, "dx", ddx, n, OPS_ST, ops_tol_of(8 * OPS_U32, 0.0));
    for (i = 0; i < n; i++) {
        size_t ch = (i / inner) % C;
        double xh = ops_xhat(stat, ch, C, x[i]), gi = gamma[ch] * (double)stat[C + ch];
        o->want[i] = gi * (dy[i] - means[ch] - xh * means[C + ch]);
        o->mag[i] = fabs(gi) * (fabs(dy[i]) + fabs(means[ch]) + fabs(xh * means[C + ch]) +
                                fabs(means[C + ch] * stat[ch] * stat[C + ch]));
    }
}

/* a: n mode (0: y = a + b; 1: in place, y = a; 2: b NULL, a copy) */
static void op_add(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    int mode = (int)c->a[1];
    float *a = ops_rand(t, n, -3, 3), *b = ops_rand(t, n, -3, 3);
    void *da, *dy;
    ops_out *o;
    ops_poison(a, n);
    da = ops_up(t, a, n), dy = mode == 1 ? da : ops_dev(t, n * ops_es(t));
    t->be->add(t->dev, dy, da, mode == 2 ? NULL : ops_up(t, b, n), n);
    o = ops_get(t, "y", dy, n, OPS_ST, ops_tol_of(OPS_U32, 0.0));
    for (i = 0; i < n; i++) {
        o->want[i] = mode == 2 ? (double)a[i] : (double)a[i] + b[i];
        o->mag[i] = fabs(a[i]) + (mode == 2 ? 0 : fabs(b[i]));
    }
    o->gpu = OPS_EXACT; /* one addition, rounded once */
}

/* ---- losses and metrics ------------------------------------------------------ */
/* A row whose loss is not finite: its whole gradient NaN (mirror_hd_poison). */
static void ops_poisoned(ops_out *odz, const ops_out *ol, size_t r, size_t k)
{
    size_t j;
    if (ol->want[r] == ol->want[r] && !isinf(ol->want[r])) return;
    for (j = 0; j < k; j++) odz->want[r * k + j] = NAN;
}

/* a: rows k scaled infinite (a logit of +Inf in row 0) */
static void op_softmax_ce(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], k = c->a[1], r, j;
    float *z = ops_rand(t, rows * k, -4, 4), scale = 1024.0f, inv = 1.0f / (float)(rows + 3);
    int32_t *labels = (int32_t *)ops_hold(t, rows * 4);
    void *dz = ops_dev(t, rows * k * ops_es(t)), *dloss = ops_dev(t, rows * 4), *dcorrect = ops_dev(t, rows * 4);
    double f = c->a[2] ? (double)(inv * scale) : (double)inv, tol = (double)(k + 8) * OPS_U32;
    ops_out *odz, *ol, *oc;
    for (r = 0; r < rows; r++) labels[r] = (int32_t)(ops_u(t) * k);
    if (rows > 1) z[k + (size_t)labels[1]] = 9.0f; /* a row it gets right */
    if (c->a[3]) z[0] = INFINITY;
    t->be->softmax_ce(t->dev, dz, (float *)dloss, (int32_t *)dcorrect, ops_up(t, z, rows * k),
                      (const int32_t *)ops_upb(t, labels, rows * 4), rows, k, inv,
                      c->a[2] ? (const float *)ops_upb(t, &scale, 4) : NULL);
    odz = ops_get(t, "dz", dz, rows * k, OPS_ST, ops_tol_of(tol, 0.0));
    ol = ops_get(t, "loss", dloss, rows, OPS_F32, ops_tol_of(tol, 0.0));
    oc = ops_get(t, "correct", dcorrect, rows, OPS_I32, OPS_EXACT);
    for (r = 0; r < rows; r++) {
        const float *zr = z + r * k;
        size_t arg = 0;
        double top = zr[0], sum = 0.0;
        for (j = 1; j < k; j++)
            if (zr[j] > top) top = zr[j], arg = j;
        for (j = 0; j < k; j++) sum += exp(zr[j] - top);
        for (j = 0; j < k; j++) {
            double p = exp(zr[j] - top) / sum, one = j == (size_t)labels[r] ? 1.0 : 0.0;
            odz->want[r * k + j] = (p - one) * f;
            odz->mag[r * k + j] = (p + one) * f;
        }
        ol->want[r] = log(sum) - (zr[labels[r]] - top);
        ol->mag[r] = fabs(ol->want[r]) + fabs(zr[labels[r]] - top) + 1.0;
        oc->want[r] = arg == (size_t)labels[r];
        ops_poisoned(odz, ol, r, k);
    }
}

/* a: rows d scaled infinite (a target of +Inf in row 0) */
static void op_mse(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], d = c->a[1], r, j;
    float *z = ops_rand(t, rows * d, -3, 3), *tg = ops_rand32(t, rows * d, -3, 3), scale = 512.0f,
          inv = 1.0f / (float)(rows + 1);
    void *dz = ops_dev(t, rows * d * ops_es(t)), *dloss = ops_dev(t, rows * 4);
    double f = c->a[2] ? (double)(inv * scale) : (double)inv;
    ops_out *odz, *ol;
    if (c->a[3]) tg[0] = INFINITY;
    t->be->mse(t->dev, dz, (float *)dloss, ops_up(t, z, rows * d), (const float *)ops_upb(t, tg, rows * d * 4), rows, d,
               inv, c->a[2] ? (const float *)ops_upb(t, &scale, 4) : NULL);
    odz = ops_get(t, "dz", dz, rows * d, OPS_ST, ops_tol_of(6 * OPS_U32, 0.0));
    ol = ops_get(t, "loss", dloss, rows, OPS_F32, ops_tol_of((double)(d + 4) * OPS_U32, 0.0));
    for (r = 0; r < rows; r++)
        for (j = 0; j < d; j++) {
            double e = (double)z[r * d + j] - tg[r * d + j];
            odz->want[r * d + j] = 2.0 * f / (double)d * e;
            odz->mag[r * d + j] = fabs(odz->want[r * d + j]);
            ol->want[r] += e * e / (double)d;
        }
    for (r = 0; r < rows; r++) ops_poisoned(odz, ol, r, d);
}

/* a: rows with_correct */
static void op_accumulate(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], r;
    float *loss = ops_rand32(t, rows, 0, 5);
    int32_t *correct = (int32_t *)ops_hold(t, rows * 4);
    double acc[2] = {12.5, 7.0};
    void *dacc = ops_upb(t, acc, sizeof acc);
    ops_out *o;
    for (r = 0; r < rows; r++) correct[r] = ops_u(t) < 0.5;
    t->be->accumulate(t->dev, (double *)dacc, (const float *)ops_upb(t, loss, rows * 4),
                      c->a[1] ? (const int32_t *)ops_upb(t, correct, rows * 4) : NULL, rows);
    /* sums of floats in double, in any order */
    o = ops_get(t, "acc", dacc, 2, OPS_F64, ops_tol_of((double)(rows + 2) * 1.2e-16, 0.0));
    o->want[0] = acc[0], o->want[1] = acc[1];
    for (r = 0; r < rows; r++) o->want[0] += loss[r], o->want[1] += c->a[1] ? correct[r] : 0;
}

/* ---- the gradient's checks ----------------------------------------------------- */
/* n values of g with a non-finite one: 0 none, 1 NaN first, 2 Inf last, 3 -Inf in the middle. */
static void ops_spoil(float *g, size_t n, size_t how)
{
    if (how == 1) g[0] = NAN;
    if (how == 2) g[n - 1] = INFINITY;
    if (how == 3) g[n / 2] = -INFINITY;
}

/* a: n spoil already_set */
static void op_check32(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0];
    float *g = ops_rand32(t, n, -1e30, 1e30);
    mirror_loss_scale_state st = ops_state(1.0f, (uint32_t)c->a[2], 0.0f), want;
    void *dst = ops_upb(t, &st, sizeof st);
    ops_spoil(g, n, c->a[1]);
    t->be->check32(t->dev, (mirror_loss_scale_state *)dst, (const float *)ops_upb(t, g, n * 4), n,
                   (const mirror__tick *)ops_tick(t, 7, 0, 0.1f, 1, 1));
    want = st;
    if (c->a[1] && !st.found_nonfinite) want.found_nonfinite = 1, want.applied = 6; /* the steps before step 7 */
    ops_get_state(t, "state", dst, OPS_EXACT, &want);
}

/* The gradient of a clip or slice case: fp32 g (t->format 0) or 16-bit g16
   of g times scale; squares: its sum of squares unscaled, in float64. */
static const void *ops_grad(ops_t *t, size_t n, size_t spoil, float scale, double *squares, double *mag)
{
    float *g = ops_rand32(t, n, -2, 2);
    uint16_t *h;
    size_t i;
    *squares = *mag = 0.0;
    if (!t->format) {
        ops_spoil(g, n, spoil);
        for (i = 0; i < n; i++) *squares += (double)g[i] * g[i];
        *mag = *squares;
        return ops_upb(t, g, n * 4);
    }
    h = (uint16_t *)ops_hold(t, n * 2);
    for (i = 0; i < n; i++) h[i] = mirror_hd_narrow(g[i] * scale, t->format);
    if (spoil) /* where ops_spoil puts them: a NaN, Inf, -Inf */
        h[spoil == 1 ? 0 : spoil == 2 ? n - 1 : n / 2] =
            t->format == MIRROR_PRECISION_BF16 ? (spoil == 1 ? 0x7fc0u : spoil == 2 ? 0x7f80u : 0xff80u)
                                              : (spoil == 1 ? 0x7e00u : spoil == 2 ? 0x7c00u : 0xfc00u);
    for (i = 0; i < n; i++) {
        double v = ops_decode16(h[i], t->format) / scale;
        *squares += v * v;
    }
    *mag = *squares;
    return ops_upb(t, h, n * 2);
}

/* a: n spoil max_norm (0: none, else 1/2 of the norm's order) */
static void op_clip(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0];
    float scale = t->format ? 1024.0f : 1.0f, max_norm = c->a[2] ? 0.5f : 0.0f;
    double sq, mag;
    mirror_loss_scale_state st = ops_state(scale, 0, 0.0f), want;
    void *dst = ops_upb(t, &st, sizeof st);
    const void *g = ops_grad(t, n, c->a[1], scale, &sq, &mag);
    ops_out *o;
    t->be->clip(t->dev, (mirror_loss_scale_state *)dst, t->format ? NULL : (const float *)g,
                t->format ? (const uint16_t *)g : NULL, n, t->format, max_norm);
    want = st;
    o = ops_get_state(t, "state", dst, ops_tol_of((double)(n / 8 + 16) * OPS_U32, 0.0), &want);
    o->want[8] = sqrt(sq);
    o->want[9] =
        sq != sq || max_norm <= 0.0f || max_norm / (sqrt(sq) + 1e-6) >= 1.0 ? 1.0 : max_norm / (sqrt(sq) + 1e-6);
    o->mag[9] = 2.0 * o->want[9];
}

/* a: n spoil squares */
static void op_slice_stats(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0];
    float scale = t->format ? 256.0f : 1.0f;
    double sq, mag;
    mirror_loss_scale_state st = ops_state(scale, 0, 0.0f);
    void *out = ops_dev(t, 8);
    const void *g = ops_grad(t, n, c->a[1], scale, &sq, &mag);
    ops_out *o;
    t->be->slice_stats(t->dev, (float *)out, t->format ? NULL : (const float *)g,
                       t->format ? (const uint16_t *)g : NULL, n, t->format,
                       (const mirror_loss_scale_state *)ops_upb(t, &st, sizeof st), (int)c->a[2]);
    o = ops_get(t, "out", out, 2, OPS_F32, ops_tol_of((double)(n / 8 + 16) * OPS_U32, 0.0));
    o->want[0] = c->a[1] ? 1.0 : 0.0;
    o->want[1] = c->a[2] ? sq : 0.0;
    if (c->a[1] && c->a[2]) o->want[1] = NAN; /* squares of an Inf or NaN: the verdict skips them */
    if (c->a[1] && c->a[2] && c->a[1] != 1) o->want[1] = INFINITY;
}

/* a: nonfinite squares max_norm(0/1) already_set; format: the case's */
static void op_slice_verdict(ops_t *t, const ops_case *c)
{
    float sums[2], max_norm = c->a[2] ? 1.5f : 0.0f;
    mirror_loss_scale_state st = ops_state(t->format ? 128.0f : 1.0f, (uint32_t)c->a[3], 0.0f), want;
    void *dst = ops_upb(t, &st, sizeof st);
    ops_out *o;
    sums[0] = (float)c->a[0], sums[1] = (float)c->a[1] / 7.0f;
    t->be->slice_verdict(t->dev, (mirror_loss_scale_state *)dst, (const float *)ops_upb(t, sums, 8),
                         (const mirror__tick *)ops_tick(t, 9, 0, 0.1f, 1, 1), t->format, max_norm);
    want = st;
    if (c->a[0] && (t->format || !st.found_nonfinite)) {
        want.found_nonfinite = 1;
        if (!t->format) want.applied = 8;
    }
    o = ops_get_state(t, "state", dst, ops_tol_of(2 * OPS_U32, 0.0), &want);
    if (max_norm > 0.0f) {
        double norm = sqrt((double)sums[1]);
        o->want[8] = norm, o->want[9] = max_norm / (norm + 1e-6) < 1.0 ? max_norm / (norm + 1e-6) : 1.0;
    }
}

/* ---- the updates ------------------------------------------------------------- */
/* One SGD element in float64 (torch.optim.SGD); mag: the sum of the magnitudes. */
static void ops_sgd(double *w, double *v, double g, double lr, double m, double wd, int nesterov, double *wmag)
{
    double ga = fabs(g) + fabs(wd * *w);
    g += wd * *w;
    if (m != 0.0) {
        *v = m * *v + g;
        ga = fabs(m * *v) + ga;
        g = nesterov ? g + m * *v : *v;
        ga = nesterov ? ga * (1 + m) : ga;
    }
    *wmag = fabs(*w) + lr * ga;
    *w -= lr * g;
}

/* a: n momentum(0: none, 1: 0.9, 2: 0.9 Nesterov) decay clipped skip v_null */
static void op_sgd(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    float m = c->a[1] ? 0.9f : 0.0f, wd = c->a[2] ? 0.01f : 0.0f, lr = 0.05f, cl = c->a[3] ? 0.25f : 0.0f;
    float *w = ops_rand32(t, n, -1, 1), *v = ops_rand32(t, n, -1, 1), *g = ops_rand32(t, n, -3, 3);
    mirror_loss_scale_state st = ops_state(1.0f, (uint32_t)c->a[4], cl);
    void *dw = ops_upb(t, w, n * 4), *dv = c->a[5] ? NULL : ops_upb(t, v, n * 4);
    ops_out *ow, *ov = NULL;
    t->be->sgd(t->dev, (float *)dw, (float *)dv, (const float *)ops_upb(t, g, n * 4), n,
               (const mirror_loss_scale_state *)ops_upb(t, &st, sizeof st),
               (const mirror__tick *)ops_tick(t, 3, 0, lr, 1, 1), m, wd, c->a[1] == 2);
    ow = ops_get(t, "w", dw, n, OPS_F32, ops_tol_of(6 * OPS_U32, 0.0));
    if (dv) ov = ops_get(t, "v", dv, n, OPS_F32, ops_tol_of(4 * OPS_U32, 0.0));
    for (i = 0; i < n; i++) {
        double W = w[i], V = dv ? v[i] : 0.0, mag;
        if (!c->a[4]) ops_sgd(&W, &V, (double)g[i] * (cl > 0 ? cl : 1.0f), lr, m, wd, c->a[1] == 2, &mag);
        else mag = fabs(W);
        ow->want[i] = W, ow->mag[i] = mag;
        if (ov) ov->want[i] = V, ov->mag[i] = fabs(m * v[i]) + fabs(g[i]) + fabs(wd * w[i]);
    }
}

/* One Adam / AdamW element in float64; wmag: the magnitudes of its terms. */
static void ops_adam(double *w, double *m, double *v, double g, double lr, double b1, double b2, double eps, double wd,
                     int decoupled, double bc1, double bc2_sqrt, double *wmag)
{
    double step;
    if (decoupled) *w *= 1.0 - lr * wd;
    else g += wd * *w;
    *m = b1 * *m + (1.0 - b1) * g;
    *v = b2 * *v + (1.0 - b2) * g * g;
    step = (lr / bc1) * *m / (sqrt(*v) / bc2_sqrt + eps);
    *wmag = fabs(*w) + 2.0 * fabs(step) + (lr / bc1) * (fabs(b1 * *m) + fabs(g)) / (sqrt(*v) / bc2_sqrt + eps);
    *w -= step;
}

/* a: n decoupled clipped skip */
static void op_adam(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, lr = 0.01f, cl = c->a[2] ? 0.5f : 0.0f, bc1 = 0.271f,
          bc2 = 0.0547f;
    float *w = ops_rand32(t, n, -1, 1), *m = ops_rand32(t, n, -0.1, 0.1), *v = ops_rand32(t, n, 0, 0.01),
          *g = ops_rand32(t, n, -1, 1);
    mirror_loss_scale_state st = ops_state(1.0f, (uint32_t)c->a[3], cl);
    void *dw = ops_upb(t, w, n * 4), *dm = ops_upb(t, m, n * 4), *dv = ops_upb(t, v, n * 4);
    ops_out *ow, *om, *ov;
    t->be->adam(t->dev, (float *)dw, (float *)dm, (float *)dv, (const float *)ops_upb(t, g, n * 4), n,
                (const mirror_loss_scale_state *)ops_upb(t, &st, sizeof st),
                (const mirror__tick *)ops_tick(t, 3, 0, lr, bc1, bc2), b1, b2, eps, wd, (int)c->a[1]);
    ow = ops_get(t, "w", dw, n, OPS_F32, ops_tol_of(16 * OPS_U32, 0.0));
    om = ops_get(t, "avg", dm, n, OPS_F32, ops_tol_of(4 * OPS_U32, 0.0));
    ov = ops_get(t, "avg_sq", dv, n, OPS_F32, ops_tol_of(4 * OPS_U32, 0.0));
    for (i = 0; i < n; i++) {
        double W = w[i], M = m[i], V = v[i], mag = fabs(W);
        if (!c->a[3])
            ops_adam(&W, &M, &V, (double)g[i] * (cl > 0 ? cl : 1.0f), lr, b1, b2, eps, wd, (int)c->a[1], bc1, bc2,
                     &mag);
        ow->want[i] = W, ow->mag[i] = mag;
        om->want[i] = M, om->mag[i] = fabs(b1 * m[i]) + 2 * fabs(g[i]);
        ov->want[i] = V, ov->mag[i] = fabs(V) + fabs(v[i]);
    }
}

/* ---- the 16-bit formats ------------------------------------------------------- */
/* Floats across the 16-bit format's range: normal, subnormal, beyond its
   largest, ties, zeros, Inf and NaN. */
static float *ops_wide(ops_t *t, size_t n)
{
    float *x = (float *)ops_hold(t, n * sizeof(float));
    size_t i;
    int bf = t->format == MIRROR_PRECISION_BF16;
    for (i = 0; i < n; i++) {
        double u = ops_u(t), sign = ops_u(t) < 0.5 ? -1.0 : 1.0;
        int e = (int)(ops_u(t) * (bf ? 280 : 50)) - (bf ? 150 : 30);
        x[i] = (float)(sign * ldexp(1.0 + u, e));
        if (i % 7 == 3)
            x[i] = (float)(sign * ldexp(1.0 + (double)(1 + 2 * (i % 5)) / (bf ? 256.0 : 2048.0), e)); /* a tie */
    }
    if (n > 10)
        x[1] = NAN, x[2] = INFINITY, x[4] = -0.0f, x[5] = bf ? 3.4e38f : 65519.0f, x[6] = bf ? -3.4e38f : 65520.0f;
    return x;
}

static void op_narrow(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    float *x = ops_wide(t, n);
    void *d = ops_dev(t, n * 2);
    ops_out *o;
    t->be->narrow(t->dev, (uint16_t *)d, (const float *)ops_upb(t, x, n * 4), n, t->format);
    o = ops_get(t, "dst", d, n, OPS_H16, OPS_EXACT);
    o->tol = OPS_EXACT; /* (not widened by a rounding: the rounding is what is checked) */
    for (i = 0; i < n; i++) o->want[i] = ops_round16(x[i], t->format);
}

static void op_widen(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    uint16_t *h = (uint16_t *)ops_hold(t, n * 2);
    void *d = ops_dev(t, n * 4);
    ops_out *o;
    for (i = 0; i < n; i++) h[i] = (uint16_t)(i < 16 ? (i * 0x1111u) : ops_u(t) * 65536.0);
    t->be->widen(t->dev, (float *)d, (const uint16_t *)ops_upb(t, h, n * 2), n, t->format);
    o = ops_get(t, "dst", d, n, OPS_F32, OPS_EXACT);
    for (i = 0; i < n; i++) o->want[i] = ops_decode16(h[i], t->format);
}

/* a: n spoil already_set */
static void op_check(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0];
    double sq, mag;
    mirror_loss_scale_state st = ops_state(1024.0f, (uint32_t)c->a[2], 0.0f), want;
    void *dst = ops_upb(t, &st, sizeof st);
    const void *g = ops_grad(t, n, c->a[1], 1024.0f, &sq, &mag);
    t->be->check(t->dev, (mirror_loss_scale_state *)dst, (const uint16_t *)g, n, t->format);
    want = st;
    if (c->a[1]) want.found_nonfinite = 1;
    ops_get_state(t, "state", dst, OPS_EXACT, &want);
}

/* The 16-bit gradient of a mixed update: g times scale, narrowed; *gd: its
   unscaled values. */
static const uint16_t *ops_grad16(ops_t *t, size_t n, float scale, double **gd)
{
    float *g = ops_rand32(t, n, -2, 2);
    uint16_t *h = (uint16_t *)ops_hold(t, n * 2);
    size_t i;
    *gd = (double *)ops_hold(t, n * sizeof(double));
    for (i = 0; i < n; i++)
        h[i] = mirror_hd_narrow(g[i] * scale, t->format), (*gd)[i] = ops_decode16(h[i], t->format) / scale;
    return (const uint16_t *)ops_upb(t, h, n * 2);
}

/* w16: narrow of the backend's own w, bitwise. */
static void ops_w16(ops_t *t, const void *dw16, const ops_out *ow)
{
    ops_out *o = ops_get(t, "w16 = narrow(w)", dw16, ow->n, OPS_H16, OPS_EXACT);
    size_t i;
    o->self = 1, o->tol = OPS_EXACT;
    for (i = 0; i < ow->n; i++) o->want[i] = ops_round16(ow->got[i], t->format);
}

/* a: n momentum(0/1/2 Nesterov) clipped skip */
static void op_sgd_mixed(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    float m = c->a[1] ? 0.9f : 0.0f, wd = 0.001f, lr = 0.05f, cl = c->a[2] ? 0.25f : 0.0f, scale = 4096.0f;
    float *w = ops_rand32(t, n, -1, 1), *v = ops_rand32(t, n, -1, 1);
    double *gd;
    mirror_loss_scale_state st = ops_state(scale, (uint32_t)c->a[3], cl);
    const uint16_t *g = ops_grad16(t, n, scale, &gd);
    void *dw = ops_upb(t, w, n * 4), *dv = ops_upb(t, v, n * 4), *dw16 = ops_dev(t, n * 2);
    ops_out *ow, *ov;
    t->be->sgd_mixed(t->dev, (float *)dw, (float *)dv, (uint16_t *)dw16, g, n, t->format,
                     (const mirror_loss_scale_state *)ops_upb(t, &st, sizeof st),
                     (const mirror__tick *)ops_tick(t, 3, 0, lr, 1, 1), m, wd, c->a[1] == 2);
    ow = ops_get(t, "w", dw, n, OPS_F32, ops_tol_of(6 * OPS_U32, 0.0));
    ov = ops_get(t, "v", dv, n, OPS_F32, ops_tol_of(4 * OPS_U32, 0.0));
    for (i = 0; i < n; i++) {
        double W = w[i], V = v[i], mag = fabs(W);
        if (!c->a[3]) ops_sgd(&W, &V, gd[i] * (cl > 0 ? cl : 1.0f), lr, m, wd, c->a[1] == 2, &mag);
        ow->want[i] = W, ow->mag[i] = mag;
        ov->want[i] = V, ov->mag[i] = fabs(m * v[i]) + fabs(gd[i]) + fabs(wd * w[i]);
    }
    if (!c->a[3]) ops_w16(t, dw16, ow);
}

/* a: n decoupled clipped skip */
static void op_adam_mixed(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, lr = 0.01f, cl = c->a[2] ? 0.5f : 0.0f, scale = 2048.0f;
    float *w = ops_rand32(t, n, -1, 1), *m = ops_rand32(t, n, -0.1, 0.1), *v = ops_rand32(t, n, 0, 0.01);
    double *gd, tt;
    mirror_loss_scale_state st = ops_state(scale, (uint32_t)c->a[3], cl);
    const uint16_t *g = ops_grad16(t, n, scale, &gd);
    void *dw = ops_upb(t, w, n * 4), *dm = ops_upb(t, m, n * 4), *dv = ops_upb(t, v, n * 4), *dw16 = ops_dev(t, n * 2);
    ops_out *ow, *om, *ov;
    t->be->adam_mixed(t->dev, (float *)dw, (float *)dm, (float *)dv, (uint16_t *)dw16, g, n, t->format,
                      (const mirror_loss_scale_state *)ops_upb(t, &st, sizeof st),
                      (const mirror__tick *)ops_tick(t, 3, 0, lr, 1, 1), b1, b2, eps, wd, (int)c->a[1]);
    ow = ops_get(t, "w", dw, n, OPS_F32, ops_tol_of(16 * OPS_U32, 0.0));
    om = ops_get(t, "avg", dm, n, OPS_F32, ops_tol_of(4 * OPS_U32, 0.0));
    ov = ops_get(t, "avg_sq", dv, n, OPS_F32, ops_tol_of(4 * OPS_U32, 0.0));
    tt = (double)(st.applied + 1); /* Adam's t */
    for (i = 0; i < n; i++) {
        double W = w[i], M = m[i], V = v[i], mag = fabs(W);
        if (!c->a[3])
            ops_adam(&W, &M, &V, gd[i] * (cl > 0 ? cl : 1.0f), lr, b1, b2, eps, wd, (int)c->a[1], 1.0 - pow(b1, tt),
                     sqrt(1.0 - pow(b2, tt)), &mag);
        ow->want[i] = W, ow->mag[i] = mag;
        om->want[i] = M, om->mag[i] = fabs(b1 * m[i]) + 2 * fabs(gd[i]);
        ov->want[i] = V, ov->mag[i] = fabs(V) + fabs(v[i]);
    }
    if (!c->a[3]) ops_w16(t, dw16, ow);
}

/* a: found good_steps kind(0 dynamic, 1 static) scale(0: 1024, 1: at max, 2: at min) */
static void op_scaler_update(ops_t *t, const ops_case *c)
{
    mirror_loss_scale_desc d;
    mirror_loss_scale_state st, want;
    void *dst;
    memset(&d, 0, sizeof d);
    d.kind = c->a[2] ? MIRROR_SCALE_STATIC : MIRROR_SCALE_DYNAMIC;
    d.init_scale = 1024.0f, d.growth_factor = 2.0f, d.backoff_factor = 0.5f, d.growth_interval = 5;
    d.min_scale = 1.0f, d.max_scale = 65536.0f, d.max_consecutive_skips = 50;
    st = ops_state(c->a[3] == 1 ? 65536.0f : c->a[3] == 2 ? 1.0f : 1024.0f, (uint32_t)c->a[0], 0.0f);
    st.good_steps = (uint32_t)c->a[1], st.consecutive_skips = c->a[0] ? 4 : 0;
    dst = ops_upb(t, &st, sizeof st);
    t->be->scaler_update(t->dev, (mirror_loss_scale_state *)dst, &d);
    /* torch's _amp_update_scale_, the scale kept in [min, max] */
    want = st;
    want.last_scale = st.scale, want.found_nonfinite = 0, want.last_skipped = st.found_nonfinite != 0;
    if (st.found_nonfinite) {
        want.skipped++, want.consecutive_skips++, want.good_steps = 0;
        if (!c->a[2]) want.scale = (float)(st.scale * 0.5 < 1.0 ? 1.0 : st.scale * 0.5);
    } else {
        want.applied++, want.consecutive_skips = 0, want.good_steps++;
        if (!c->a[2] && want.good_steps >= d.growth_interval)
            want.good_steps = 0, want.scale = (float)(st.scale * 2.0 > 65536.0 ? 65536.0 : st.scale * 2.0);
        if (c->a[2]) want.good_steps = st.good_steps; /* a static scale counts nothing */
    }
    ops_get_state(t, "state", dst, OPS_EXACT, &want);
}

/* ---- optional members ---------------------------------------------------------- */
/* a: n. One rank: the sum is the values themselves. */
static void op_buckets(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    float *x = ops_rand(t, n, -3, 3);
    void *d;
    ops_out *o;
    if (!t->be->reduce_bucket || !t->s->reducer || strcmp(t->s->reducer->name, "nccl") != 0 || t->s->replicas != 1) {
        t->absent = 1; /* (the buckets are NCCL's, in one process) */
        return;
    }
    d = ops_up(t, x, n);
    t->be->reduce_bucket(t->dev, d, n, t->format);
    t->be->buckets_done(t->dev);
    o = ops_get(t, "one rank's sum", d, n, OPS_ST, OPS_EXACT);
    o->self = 1;
    for (i = 0; i < n; i++) o->want[i] = x[i];
}

/* a: n. An add recorded, launched twice, its input changed between. */
static void op_graphs(ops_t *t, const ops_case *c)
{
    size_t n = c->a[0], i;
    float *a = ops_rand32(t, n, -3, 3), *b = ops_rand32(t, n, -3, 3), *a2 = ops_rand32(t, n, -3, 3);
    void *da, *db, *dy, *graph;
    ops_out *o;
    int began;
    if (!t->be->capture_begin) {
        t->absent = 1;
        return;
    }
    da = ops_upb(t, a, n * 4), db = ops_upb(t, b, n * 4), dy = ops_dev(t, n * 4);
    began = t->be->capture_begin(t->dev);
    ops_flag(t, "capture_begin: recording", began == 1);
    if (began != 1) return;
    t->be->add(t->dev, dy, da, db, n);
    graph = t->be->capture_end(t->dev);
    ops_flag(t, "capture_end: a graph", graph != NULL);
    if (!graph) return;
    t->be->graph_launch(t->dev, graph);
    o = ops_get(t, "the graph's add", dy, n, OPS_F32, OPS_EXACT);
    o->self = 1;
    for (i = 0; i < n; i++) o->want[i] = a[i] + b[i];
    t->be->upload(t->dev, da, a2, n * 4);
    t->be->graph_launch(t->dev, graph);
    o = ops_get(t, "launched again on new values", dy, n, OPS_F32, OPS_EXACT);
    o->self = 1;
    for (i = 0; i < n; i++) o->want[i] = a2[i] + b[i];
    t->be->graph_free(t->dev, graph);
}

static void op_device_memory(ops_t *t, const ops_case *c)
{
    size_t free_bytes = 1, total = 0;
    int dev;
    (void)c;
    if (!t->be->device_memory) {
        t->absent = 1;
        return;
    }
    dev = t->be->device_memory(t->s, 0, &free_bytes, &total);
    ops_flag(t, "device_memory: a device, free <= total", dev >= 0 && free_bytes <= total && total > 0);
    ops_flag(t, "device_memory: the same device without the sizes", t->be->device_memory(t->s, 0, NULL, NULL) == dev);
}

/* gemm_bias's case (a[0..6]) with the GEMMs told every operand is aligned
   to a[7] bytes at most (deterministic mode's cap): the same results, by
   whatever algorithm that alignment allows; the cap is lifted after. */
static void op_gemm_align(ops_t *t, const ops_case *c)
{
    if (!t->be->gemm_align) {
        t->absent = 1;
        return;
    }
    t->be->gemm_align(t->dev, c->a[7]);
    op_gemm_bias(t, c);
    t->be->gemm_align(t->dev, 0);
}

/* Rows of a dataset in device memory by index, augmented as fit augments
   them; a: rows of the dataset, n gathered, width (values a row), pad,
   flip, h, w (a row's planes), labels (1: int32 rows of one value, the
   labels' gather; else storage values). The reference takes each value
   from where mirror_hd_augment_draw and mirror_hd_augment_source (the
   definition) say, zero on the padding: every value exact. */
static void op_gather(ops_t *t, const ops_case *c)
{
    size_t rows = c->a[0], n = c->a[1], width = c->a[2], pad = c->a[3], h = c->a[5], w = c->a[6], i, j, y, x;
    int flip = (int)c->a[4], labels = (int)c->a[7];
    size_t size = labels ? sizeof(int32_t) : ops_es(t);
    uint64_t key = 0x9e3779b97f4a7c15u ^ (uint64_t)(rows * 131 + n);
    float *src = labels ? NULL : ops_rand(t, rows * width, -2, 2);
    int32_t *lab = labels ? (int32_t *)ops_hold(t, rows * sizeof(int32_t)) : NULL;
    int64_t *index = (int64_t *)ops_hold(t, n * sizeof(int64_t));
    void *dsrc, *dindex, *ddst = ops_dev(t, n * width * size);
    ops_out *o;
    if (!index || !ddst || (labels ? !lab : !src)) return;
    for (i = 0; i < rows && labels; i++) lab[i] = (int32_t)(i * 7 % 1000) - 500;
    for (i = 0; i < n; i++) index[i] = i == 0 ? (int64_t)(rows - 1) : (int64_t)(ops_u(t) * (double)rows) % (int64_t)rows;
    dsrc = labels ? ops_upb(t, lab, rows * sizeof(int32_t)) : ops_up(t, src, rows * width);
    dindex = ops_upb(t, index, n * sizeof(int64_t));
    t->be->gather(t->dev, ddst, dsrc, (const int64_t *)dindex, n, width, size, key, pad, flip, h, w);
    o = ops_get(t, labels ? "labels" : "rows", ddst, n * width, labels ? OPS_I32 : OPS_ST, OPS_EXACT);
    for (i = 0; i < n; i++) {
        const size_t r = (size_t)index[i];
        long dy = 0, dx = 0, at;
        int flipped = 0;
        if (pad || flip) mirror_hd_augment_draw(key, (uint64_t)r, pad, flip, &dy, &dx, &flipped);
        for (j = 0; j < width; j += (pad || flip) ? h * w : width)
            for (y = 0; y < ((pad || flip) ? h : 1); y++)
                for (x = 0; x < ((pad || flip) ? w : width); x++) {
                    size_t e = (pad || flip) ? j + y * w + x : x;
                    at = (pad || flip) ? mirror_hd_augment_source(h, w, y, x, dy, dx, flipped) : (long)x;
                    o->want[i * width + e] = at < 0 ? 0.0 : labels ? (double)lab[r] : src[r * width + j + (size_t)at];
                }
    }
}

/* ---- the table ------------------------------------------------------------------ */
#define OPS_CASE(members, fn, precisions, ...) {members, fn, precisions, {__VA_ARGS__}},
static const ops_case ops_cases[] = {
    OPS_CASE("open close bind status", op_lifecycle, OPS_F32ONLY, 0)
    OPS_CASE("gather", op_gather, OPS_ALL, 50, 37, 13, 0, 0, 0, 0, 0)
    OPS_CASE("gather", op_gather, OPS_ALL, 1, 1, 1, 0, 0, 0, 0, 0)
    OPS_CASE("gather", op_gather, OPS_ALL, 40, 33, 35, 0, 1, 5, 7, 0)
    OPS_CASE("gather", op_gather, OPS_ALL, 40, 29, 35, 2, 0, 5, 7, 0)
    OPS_CASE("gather", op_gather, OPS_ALL, 40, 50, 2 * 28 * 28, 4, 1, 28, 28, 0)
    OPS_CASE("gather", op_gather, OPS_ALL, 300, 257, 1, 0, 0, 0, 0, 1)
    OPS_CASE("gemm_align", op_gemm_align, OPS_ALL, 37, 70, 300, 0, 1, 0, 1, 4)
    OPS_CASE("gemm_align", op_gemm_align, OPS_ALL, 64, 32, 48, 0, 0, 0, 0, 32)
    OPS_CASE("alloc release zero upload download", op_memory, OPS_F32ONLY, 1)
    OPS_CASE("alloc release zero upload download", op_memory, OPS_F32ONLY, 37)
    OPS_CASE("alloc release zero upload download", op_memory, OPS_F32ONLY, 4099)
    OPS_CASE("host_alloc host_release host_wait", op_host, OPS_F32ONLY, 1)
    OPS_CASE("host_alloc host_release host_wait", op_host, OPS_F32ONLY, 3001)
    OPS_CASE("stage upload_staged staged", op_staged, OPS_F32ONLY, 1)
    OPS_CASE("stage upload_staged staged", op_staged, OPS_F32ONLY, 2053)
    OPS_CASE("set", op_set, OPS_F32ONLY, 1)
    OPS_CASE("set", op_set, OPS_F32ONLY, 4)
    OPS_CASE("set", op_set, OPS_F32ONLY, 13)
    OPS_CASE("set", op_set, OPS_F32ONLY, 32)
    /* m n k ta tb pad alpha/beta grad */
    OPS_CASE("gemm", op_gemm, OPS_ALL, 1, 1, 1, 0, 0, 0, 0, 0)
    OPS_CASE("gemm", op_gemm, OPS_ALL, 1, 33, 17, 0, 0, 0, 0, 0)
    OPS_CASE("gemm", op_gemm, OPS_ALL, 7, 13, 5, 1, 0, 3, 1, 0)
    OPS_CASE("gemm", op_gemm, OPS_ALL, 37, 70, 300, 0, 1, 0, 0, 0)
    OPS_CASE("gemm", op_gemm, OPS_ALL, 19, 9, 33, 1, 1, 2, 2, 0)
    OPS_CASE("gemm", op_gemm, OPS_ALL, 65, 17, 9, 0, 0, 1, 2, 0)
    OPS_CASE("gemm", op_gemm, OPS_ALL, 10, 23, 31, 1, 0, 0, 1, 1)
    OPS_CASE("gemm", op_gemm, OPS_ALL, 3, 50, 270, 0, 1, 0, 0, 1)
    OPS_CASE("gemm", op_gemm, OPS_ALL, 5, 4, 0, 0, 0, 0, 2, 0)
    OPS_CASE("gemm", op_gemm, OPS_ALL, 2, 2100, 5, 0, 0, 0, 0, 0)
    /* m n k ta tb per_row relu */
    OPS_CASE("gemm_bias", op_gemm_bias, OPS_ALL, 1, 1, 1, 0, 0, 0, 0)
    OPS_CASE("gemm_bias", op_gemm_bias, OPS_ALL, 1, 35, 19, 0, 1, 0, 1)
    OPS_CASE("gemm_bias", op_gemm_bias, OPS_ALL, 9, 17, 12, 0, 0, 1, 0)
    OPS_CASE("gemm_bias", op_gemm_bias, OPS_ALL, 40, 67, 270, 0, 1, 0, 1)
    OPS_CASE("gemm_bias", op_gemm_bias, OPS_ALL, 16, 49, 27, 1, 0, 1, 1)
    OPS_CASE("gemm_bias", op_gemm_bias, OPS_ALL, 7, 5, 3, 1, 1, 0, 0)
    /* rows channels inner */
    OPS_CASE("bias_add", op_bias_add, OPS_ALL, 1, 1, 1)
    OPS_CASE("bias_add", op_bias_add, OPS_ALL, 3, 5, 7)
    OPS_CASE("bias_add", op_bias_add, OPS_ALL, 2, 17, 33)
    OPS_CASE("bias_add", op_bias_add, OPS_ALL, 9, 10, 1)
    OPS_CASE("bias_grad", op_bias_grad, OPS_ALL, 1, 1, 1)
    OPS_CASE("bias_grad", op_bias_grad, OPS_ALL, 3, 5, 7)
    OPS_CASE("bias_grad", op_bias_grad, OPS_ALL, 2, 17, 33)
    OPS_CASE("bias_grad", op_bias_grad, OPS_ALL, 37, 10, 1)
    /* n */
    OPS_CASE("relu_forward", op_relu_forward, OPS_ALL, 1)
    OPS_CASE("relu_forward", op_relu_forward, OPS_ALL, 7)
    OPS_CASE("relu_forward", op_relu_forward, OPS_ALL, 33)
    OPS_CASE("relu_forward", op_relu_forward, OPS_ALL, 4099)
    OPS_CASE("relu_backward", op_relu_backward, OPS_ALL, 1)
    OPS_CASE("relu_backward", op_relu_backward, OPS_ALL, 7)
    OPS_CASE("relu_backward", op_relu_backward, OPS_ALL, 33)
    OPS_CASE("relu_backward", op_relu_backward, OPS_ALL, 4099)
    /* n kind */
    OPS_CASE("act_forward", op_act_forward, OPS_ALL, 1, 0)
    OPS_CASE("act_forward", op_act_forward, OPS_ALL, 1000, 0)
    OPS_CASE("act_forward", op_act_forward, OPS_ALL, 1, 1)
    OPS_CASE("act_forward", op_act_forward, OPS_ALL, 37, 1)
    OPS_CASE("act_forward", op_act_forward, OPS_ALL, 17, 2)
    OPS_CASE("act_forward", op_act_forward, OPS_ALL, 1000, 2)
    OPS_CASE("act_backward", op_act_backward, OPS_ALL, 1, 0)
    OPS_CASE("act_backward", op_act_backward, OPS_ALL, 1000, 0)
    OPS_CASE("act_backward", op_act_backward, OPS_ALL, 1, 1)
    OPS_CASE("act_backward", op_act_backward, OPS_ALL, 37, 1)
    OPS_CASE("act_backward", op_act_backward, OPS_ALL, 17, 2)
    OPS_CASE("act_backward", op_act_backward, OPS_ALL, 1000, 2)
    /* n c h w k stride pad */
    OPS_CASE("im2col", op_im2col, OPS_ALL, 1, 1, 1, 1, 1, 1, 0)
    OPS_CASE("im2col", op_im2col, OPS_ALL, 2, 3, 7, 5, 3, 1, 1)
    OPS_CASE("im2col", op_im2col, OPS_ALL, 1, 2, 9, 9, 3, 2, 0)
    OPS_CASE("im2col", op_im2col, OPS_ALL, 3, 2, 8, 8, 3, 1, 1)
    OPS_CASE("im2col", op_im2col, OPS_ALL, 2, 1, 5, 37, 5, 2, 2)
    OPS_CASE("col2im", op_col2im, OPS_ALL, 1, 1, 1, 1, 1, 1, 0)
    OPS_CASE("col2im", op_col2im, OPS_ALL, 2, 3, 7, 5, 3, 1, 1)
    OPS_CASE("col2im", op_col2im, OPS_ALL, 1, 2, 9, 9, 3, 2, 0)
    OPS_CASE("col2im", op_col2im, OPS_ALL, 3, 2, 8, 8, 3, 1, 1)
    OPS_CASE("col2im", op_col2im, OPS_ALL, 2, 1, 5, 37, 5, 2, 2)
    /* a b inner */
    OPS_CASE("permute", op_permute, OPS_ALL, 1, 1, 1)
    OPS_CASE("permute", op_permute, OPS_ALL, 3, 5, 7)
    OPS_CASE("permute", op_permute, OPS_ALL, 17, 2, 1)
    OPS_CASE("permute", op_permute, OPS_ALL, 4, 9, 33)
    /* planes h w k stride nan */
    OPS_CASE("maxpool_forward", op_maxpool_forward, OPS_ALL, 1, 1, 1, 1, 1, 0)
    OPS_CASE("maxpool_forward", op_maxpool_forward, OPS_ALL, 3, 6, 6, 2, 2, 0)
    OPS_CASE("maxpool_forward", op_maxpool_forward, OPS_ALL, 2, 7, 9, 3, 2, 0)
    OPS_CASE("maxpool_forward", op_maxpool_forward, OPS_ALL, 5, 8, 8, 2, 2, 1)
    OPS_CASE("maxpool_forward", op_maxpool_forward, OPS_ALL, 2, 9, 35, 3, 3, 1)
    OPS_CASE("maxpool_forward", op_maxpool_forward, OPS_ALL, 2, 6, 70, 2, 2, 0)
    OPS_CASE("maxpool_backward", op_maxpool_backward, OPS_ALL, 1, 1, 1, 1, 1)
    OPS_CASE("maxpool_backward", op_maxpool_backward, OPS_ALL, 3, 6, 6, 2, 2)
    OPS_CASE("maxpool_backward", op_maxpool_backward, OPS_ALL, 2, 7, 9, 3, 2)
    OPS_CASE("maxpool_relu_backward", op_maxpool_relu_backward, OPS_ALL, 1, 1, 1, 1, 1)
    OPS_CASE("maxpool_relu_backward", op_maxpool_relu_backward, OPS_ALL, 3, 6, 6, 2, 2)
    OPS_CASE("maxpool_relu_backward", op_maxpool_relu_backward, OPS_ALL, 2, 9, 35, 3, 3)
    /* rows inner p (percent) row0 in_place */
    OPS_CASE("dropout", op_dropout, OPS_ALL, 1, 1, 50, 0, 0)
    OPS_CASE("dropout", op_dropout, OPS_ALL, 7, 33, 10, 5, 0)
    OPS_CASE("dropout", op_dropout, OPS_ALL, 16, 100, 50, 0, 1)
    OPS_CASE("dropout", op_dropout, OPS_ALL, 3, 257, 90, 1000, 1)
    /* planes h w kh kw stride */
    OPS_CASE("avgpool_forward", op_avgpool_forward, OPS_ALL, 1, 1, 1, 1, 1, 1)
    OPS_CASE("avgpool_forward", op_avgpool_forward, OPS_ALL, 3, 6, 6, 2, 2, 2)
    OPS_CASE("avgpool_forward", op_avgpool_forward, OPS_ALL, 2, 7, 9, 3, 3, 2)
    OPS_CASE("avgpool_forward", op_avgpool_forward, OPS_ALL, 5, 7, 5, 7, 5, 1)
    OPS_CASE("avgpool_backward", op_avgpool_backward, OPS_ALL, 1, 1, 1, 1, 1, 1)
    OPS_CASE("avgpool_backward", op_avgpool_backward, OPS_ALL, 3, 6, 6, 2, 2, 2)
    OPS_CASE("avgpool_backward", op_avgpool_backward, OPS_ALL, 2, 7, 9, 3, 3, 2)
    OPS_CASE("avgpool_backward", op_avgpool_backward, OPS_ALL, 5, 7, 5, 7, 5, 1)
    /* rows channels inner backward / no_dx */
    OPS_CASE("bn_sums", op_bn_sums, OPS_ALL, 1, 3, 1, 0)
    OPS_CASE("bn_sums", op_bn_sums, OPS_ALL, 5, 7, 33, 0)
    OPS_CASE("bn_sums", op_bn_sums, OPS_ALL, 1, 3, 1, 1)
    OPS_CASE("bn_sums", op_bn_sums, OPS_ALL, 5, 7, 33, 1)
    OPS_CASE("bn_forward", op_bn_forward, OPS_ALL, 1, 1, 1)
    OPS_CASE("bn_forward", op_bn_forward, OPS_ALL, 3, 5, 7)
    OPS_CASE("bn_forward", op_bn_forward, OPS_ALL, 9, 17, 1)
    OPS_CASE("bn_backward", op_bn_backward, OPS_ALL, 1, 1, 1, 0)
    OPS_CASE("bn_backward", op_bn_backward, OPS_ALL, 3, 5, 7, 0)
    OPS_CASE("bn_backward", op_bn_backward, OPS_ALL, 9, 17, 1, 0)
    OPS_CASE("bn_backward", op_bn_backward, OPS_ALL, 3, 5, 7, 1)
    /* n mode */
    OPS_CASE("add", op_add, OPS_ALL, 1, 0)
    OPS_CASE("add", op_add, OPS_ALL, 33, 0)
    OPS_CASE("add", op_add, OPS_ALL, 1000, 1)
    OPS_CASE("add", op_add, OPS_ALL, 37, 2)
    /* rows k scaled */
    OPS_CASE("softmax_ce", op_softmax_ce, OPS_ALL, 1, 1, 0)
    OPS_CASE("softmax_ce", op_softmax_ce, OPS_ALL, 1, 10, 1)
    OPS_CASE("softmax_ce", op_softmax_ce, OPS_ALL, 7, 33, 0, 1)
    OPS_CASE("softmax_ce", op_softmax_ce, OPS_ALL, 3, 1000, 1)
    OPS_CASE("softmax_ce", op_softmax_ce, OPS_ALL, 40, 10, 1)
    /* rows d scaled */
    OPS_CASE("mse", op_mse, OPS_ALL, 1, 1, 0)
    OPS_CASE("mse", op_mse, OPS_ALL, 7, 3, 1, 1)
    OPS_CASE("mse", op_mse, OPS_ALL, 2, 257, 0)
    OPS_CASE("mse", op_mse, OPS_ALL, 33, 17, 1)
    /* rows with_correct */
    OPS_CASE("accumulate", op_accumulate, OPS_F32ONLY, 1, 1)
    OPS_CASE("accumulate", op_accumulate, OPS_F32ONLY, 7, 0)
    OPS_CASE("accumulate", op_accumulate, OPS_F32ONLY, 1000, 1)
    OPS_CASE("accumulate", op_accumulate, OPS_F32ONLY, 4099, 1)
    /* n spoil already_set */
    OPS_CASE("check32", op_check32, OPS_F32ONLY, 1, 0, 0)
    OPS_CASE("check32", op_check32, OPS_F32ONLY, 1, 1, 0)
    OPS_CASE("check32", op_check32, OPS_F32ONLY, 33, 2, 0)
    OPS_CASE("check32", op_check32, OPS_F32ONLY, 4099, 3, 0)
    OPS_CASE("check32", op_check32, OPS_F32ONLY, 100, 1, 1)
    /* n spoil max_norm */
    OPS_CASE("clip", op_clip, OPS_ALL, 1, 0, 1)
    OPS_CASE("clip", op_clip, OPS_ALL, 37, 0, 0)
    OPS_CASE("clip", op_clip, OPS_ALL, 4099, 0, 1)
    OPS_CASE("clip", op_clip, OPS_ALL, 100, 1, 1)
    /* n spoil squares */
    OPS_CASE("slice_stats", op_slice_stats, OPS_ALL, 1, 0, 1)
    OPS_CASE("slice_stats", op_slice_stats, OPS_ALL, 37, 0, 0)
    OPS_CASE("slice_stats", op_slice_stats, OPS_ALL, 4099, 0, 1)
    OPS_CASE("slice_stats", op_slice_stats, OPS_ALL, 100, 3, 0)
    /* nonfinite squares max_norm already_set */
    OPS_CASE("slice_verdict", op_slice_verdict, OPS_ALL, 0, 0, 0, 0)
    OPS_CASE("slice_verdict", op_slice_verdict, OPS_ALL, 0, 20, 1, 0)
    OPS_CASE("slice_verdict", op_slice_verdict, OPS_ALL, 1, 3, 0, 0)
    OPS_CASE("slice_verdict", op_slice_verdict, OPS_ALL, 2, 1, 1, 1)
    OPS_CASE("slice_verdict", op_slice_verdict, OPS_ALL, 0, 0, 1, 1)
    /* n momentum decay clipped skip v_null */
    OPS_CASE("sgd", op_sgd, OPS_F32ONLY, 1, 0, 0, 0, 0, 1)
    OPS_CASE("sgd", op_sgd, OPS_F32ONLY, 33, 1, 1, 0, 0, 0)
    OPS_CASE("sgd", op_sgd, OPS_F32ONLY, 1000, 2, 1, 1, 0, 0)
    OPS_CASE("sgd", op_sgd, OPS_F32ONLY, 37, 1, 0, 0, 1, 0)
    OPS_CASE("sgd", op_sgd, OPS_F32ONLY, 17, 0, 1, 1, 0, 0)
    /* n decoupled clipped skip */
    OPS_CASE("adam", op_adam, OPS_F32ONLY, 1, 0, 0, 0)
    OPS_CASE("adam", op_adam, OPS_F32ONLY, 1000, 1, 0, 0)
    OPS_CASE("adam", op_adam, OPS_F32ONLY, 33, 0, 1, 0)
    OPS_CASE("adam", op_adam, OPS_F32ONLY, 37, 1, 1, 1)
    OPS_CASE("set_precision", op_set_precision, OPS_ALL, 37, 4099)
    OPS_CASE("narrow", op_narrow, OPS_16, 1)
    OPS_CASE("narrow", op_narrow, OPS_16, 33)
    OPS_CASE("narrow", op_narrow, OPS_16, 4099)
    OPS_CASE("widen", op_widen, OPS_16, 1)
    OPS_CASE("widen", op_widen, OPS_16, 33)
    OPS_CASE("widen", op_widen, OPS_16, 4099)
    /* n spoil already_set */
    OPS_CASE("check", op_check, OPS_16, 1, 0, 0)
    OPS_CASE("check", op_check, OPS_16, 33, 1, 0)
    OPS_CASE("check", op_check, OPS_16, 4099, 2, 0)
    OPS_CASE("check", op_check, OPS_16, 100, 3, 1)
    /* n momentum clipped skip */
    OPS_CASE("sgd_mixed", op_sgd_mixed, OPS_16, 1, 0, 0, 0)
    OPS_CASE("sgd_mixed", op_sgd_mixed, OPS_16, 33, 1, 0, 0)
    OPS_CASE("sgd_mixed", op_sgd_mixed, OPS_16, 1000, 2, 1, 0)
    OPS_CASE("sgd_mixed", op_sgd_mixed, OPS_16, 37, 1, 0, 1)
    /* n decoupled clipped skip */
    OPS_CASE("adam_mixed", op_adam_mixed, OPS_16, 1, 0, 0, 0)
    OPS_CASE("adam_mixed", op_adam_mixed, OPS_16, 1000, 1, 0, 0)
    OPS_CASE("adam_mixed", op_adam_mixed, OPS_16, 33, 0, 1, 0)
    OPS_CASE("adam_mixed", op_adam_mixed, OPS_16, 37, 1, 1, 1)
    /* found good_steps static scale */
    OPS_CASE("scaler_update", op_scaler_update, OPS_F32ONLY, 0, 1, 0, 0)
    OPS_CASE("scaler_update", op_scaler_update, OPS_F32ONLY, 0, 4, 0, 0)
    OPS_CASE("scaler_update", op_scaler_update, OPS_F32ONLY, 0, 4, 0, 1)
    OPS_CASE("scaler_update", op_scaler_update, OPS_F32ONLY, 1, 3, 0, 0)
    OPS_CASE("scaler_update", op_scaler_update, OPS_F32ONLY, 1, 0, 0, 2)
    OPS_CASE("scaler_update", op_scaler_update, OPS_F32ONLY, 1, 4, 1, 0)
    OPS_CASE("mark marks", op_marks, OPS_F32ONLY, 0)
    OPS_CASE("workspace", op_workspace, OPS_F32ONLY, 0)
    OPS_CASE("reduce_bucket buckets_done", op_buckets, OPS_ALL, 1)
    OPS_CASE("reduce_bucket buckets_done", op_buckets, OPS_ALL, 4099)
    OPS_CASE("capture_begin capture_end graph_launch graph_free", op_graphs, OPS_F32ONLY, 1000)
    OPS_CASE("device_memory", op_device_memory, OPS_F32ONLY, 0)
};
enum { OPS_NCASES = sizeof ops_cases / sizeof *ops_cases };

/* ---- running a case ------------------------------------------------------------- */
static const char *ops_precision_name(int p) { return p == MIRROR_PRECISION_BF16 ? "bf16" : p ? "fp16" : "fp32"; }

/* "gemm 37 70 300 0 1 0 0 0 fp16": the case's row, for messages. */
static const char *ops_case_name(const ops_case *c, int precision, char *buf, size_t size)
{
    size_t i, at = 0, last = 8;
    while (last > 1 && c->a[last - 1] == 0) last--;
    at += (size_t)snprintf(buf, size, "%s [", c->members);
    for (i = 0; i < last && at < size; i++) at += (size_t)snprintf(buf + at, size - at, i ? " %zu" : "%zu", c->a[i]);
    if (at < size) snprintf(buf + at, size - at, "] %s", ops_precision_name(precision));
    return buf;
}

static void ops_clear(ops_t *t)
{
    size_t i;
    for (i = 0; i < t->nout; i++) free(t->out[i].got), free(t->out[i].want), free(t->out[i].mag);
    t->nout = 0;
}

/* Case c in `precision` through t's backend: outputs in t->out. */
static void ops_run(ops_t *t, const ops_case *c, int precision)
{
    size_t i, j;
    ops_clear(t);
    t->format = precision, t->absent = 0, t->note[0] = '\0';
    /* the same inputs on every backend */
    t->rng = 0x9e3779b97f4a7c15ull * (uint64_t)(c - ops_cases + 1) + (uint64_t)precision;
    if (t->be->set_precision(t->dev, precision, OPS_LARGEST) != MIRROR_OK)
        snprintf(t->note, sizeof t->note, "set_precision(%d) failed", precision);
    else
        c->fn(t, c);
    for (i = 0; i < t->nout; i++)
        for (j = 0; j < t->out[i].n; j++)
            if (t->out[i].mag[j] < fabs(t->out[i].want[j])) t->out[i].mag[j] = fabs(t->out[i].want[j]);
    for (i = 0; i < t->ndevp; i++) t->be->release(t->dev, t->devp[i]);
    for (i = 0; i < t->nhost; i++) free(t->host[i]);
    t->ndevp = t->nhost = 0;
}

/* The first output of t that misses: against its want (ref NULL: the CPU
   against float64; or a self output), or against ref's got within the
   GPU tolerance. Writes what missed into why; 0 when none did. */
static int ops_misses(const ops_t *t, const ops_t *ref, char *why, size_t size)
{
    size_t i, j, outs = 0;
    if (t->note[0]) return snprintf(why, size, "%s", t->note), 1;
    for (i = 0; i < t->nout; i++) outs += !t->out[i].self;
    for (i = 0; ref && i < ref->nout; i++) outs -= !ref->out[i].self;
    if (ref && outs) return snprintf(why, size, "not the outputs of the CPU run"), 1;
    for (i = 0; i < t->nout; i++) {
        const ops_out *o = &t->out[i], *r = NULL;
        if (ref && !o->self) {
            size_t k;
            for (k = 0; k < ref->nout; k++) /* the same output of the CPU's run, by name */
                if (!ref->out[k].self && !strcmp(ref->out[k].name, o->name) && ref->out[k].n == o->n) r = &ref->out[k];
            if (!r) return snprintf(why, size, "%s: no such output in the CPU run", o->name), 1;
        }
        for (j = 0; j < o->n; j++) {
            double want = r ? r->got[j] : o->want[j], mag = r ? r->mag[j] : o->mag[j];
            if (!ops_near(o->got[j], want, mag, r ? o->gpu : o->tol))
                return snprintf(why, size, "%s[%zu] of %zu: %.9g, %s %.9g (tolerance %.3g of %.3g + %.3g)", o->name, j,
                                o->n, o->got[j], r ? "the CPU's" : "want", want, r ? o->gpu.rel : o->tol.rel, mag,
                                r ? o->gpu.abs : o->tol.abs),
                       1;
        }
    }
    return 0;
}

/* Whether member `name` is one of the case's. */
static int ops_names(const ops_case *c, const char *name)
{
    size_t len = strlen(name);
    const char *p = c->members;
    while ((p = strstr(p, name)) != NULL) {
        if ((p == c->members || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0')) return 1;
        p += len;
    }
    return 0;
}

/* Every case in each precision it takes, through t: against float64 (ref
   NULL), or against ref's run of the same case (the CPU backend, run just
   before: test_cuda's GPUs). One check a run, named by `label`; with
   `print`, per member the runs and those that missed. Returns the runs
   that missed. */
static size_t ops_table(ops_t *t, ops_t *ref, const char *label, int print)
{
    size_t i, k, runs[OPS_MEMBERS], fails[OPS_MEMBERS], absent[OPS_MEMBERS], missed_all = 0;
    char name[160], why[400];
    int p;
    memset(runs, 0, sizeof runs), memset(fails, 0, sizeof fails), memset(absent, 0, sizeof absent);
    for (k = 0; k < OPS_NCASES; k++)
        for (p = 0; p <= MIRROR_PRECISION_BF16; p++) {
            const ops_case *c = &ops_cases[k];
            int missed;
            if (!(c->precisions & (1 << p))) continue;
            if (ref) ops_run(ref, c, p);
            ops_run(t, c, p);
            missed = !t->absent && ops_misses(t, ref && !ref->absent ? ref : NULL, why, sizeof why);
            missed_all += (size_t)missed;
            CHECK(!missed, "%s: %s: %s", label, ops_case_name(c, p, name, sizeof name), why);
            for (i = 0; i < OPS_MEMBERS; i++)
                if (ops_names(c, ops_members[i].name))
                    runs[i]++, fails[i] += (size_t)missed, absent[i] += (size_t)t->absent;
        }
    ops_clear(t);
    if (ref) ops_clear(ref);
    for (i = 0; print && i < OPS_MEMBERS; i++)
        if (ops_members[i].kind != OPS_DATA)
            printf("%s: %-22s %3zu runs%s%s\n", label, ops_members[i].name, runs[i], fails[i] ? ", some MISSED" : "",
                   absent[i] ? ", optional: not on this backend or not in this setting" : "");
    return missed_all;
}

/* The table against struct mirror__backend and backend be: the listed
   members tile the struct, each operation has a case, each case names
   listed members, the optional ones last; be has every required member.
   Returns the number of failures, each printed. */
static int ops_coverage(const mirror__backend *be)
{
    size_t i, end = 0, k;
    int bad = 0, optional = 0;
    for (i = 0; i < OPS_MEMBERS; i++) {
        const ops_member *m = &ops_members[i];
        size_t align = m->size < sizeof(void *) ? m->size : sizeof(void *); /* scalars: their size */
        size_t at = (end + align - 1) / align * align;
        void *fn;
        if (m->offset != at) {
            fprintf(stderr,
                    "ops.h: member %s at byte %zu, where the list before it ends at %zu: a member the list lacks\n",
                    m->name, m->offset, end);
            bad++;
        }
        end = m->offset + m->size;
        if (m->kind == OPS_DATA) continue;
        for (k = 0; k < OPS_NCASES && !ops_names(&ops_cases[k], m->name); k++) {}
        if (k == OPS_NCASES) fprintf(stderr, "ops.h: backend member %s has no case\n", m->name), bad++;
        if (m->kind == OPS_OPT) optional = 1;
        else if (optional) fprintf(stderr, "ops.h: required member %s after the optional ones\n", m->name), bad++;
        memcpy(&fn, (const char *)be + m->offset, sizeof fn);
        if (m->kind == OPS_FN && !fn)
            fprintf(stderr, "ops.h: %s backend: required member %s is NULL\n", be->name, m->name), bad++;
    }
    if (!be->name || !be->name[0] || be->param_align < 1) /* the fields every backend sets */
        fprintf(stderr, "ops.h: a backend without a name or with param_align 0\n"), bad++;
    if ((end + sizeof(void *) - 1) / sizeof(void *) * sizeof(void *) != sizeof(mirror__backend))
        fprintf(stderr, "ops.h: the listed members end at byte %zu of %zu: a member the list lacks\n", end,
                sizeof(mirror__backend)),
            bad++;
    for (k = 0; k < OPS_NCASES; k++) { /* every name in a case is a member */
        const char *p = ops_cases[k].members;
        while (*p) {
            size_t len = strcspn(p, " ");
            for (i = 0;
                 i < OPS_MEMBERS && !(strlen(ops_members[i].name) == len && !strncmp(ops_members[i].name, p, len));
                 i++) {
            }
            if (i == OPS_MEMBERS || ops_members[i].kind == OPS_DATA)
                fprintf(stderr, "ops.h: case %zu names \"%.*s\", not an operation of the backend\n", k, (int)len, p),
                    bad++;
            p += len;
            p += *p == ' ';
        }
    }
    return bad;
}
#endif
