/* test_half.c - the 16-bit storage formats and the loss scaler of the shared
   math: every fp16 and bf16 bit pattern widens exactly (against a decode
   written here with ldexp) and narrows back to itself; a few million floats
   (random bit patterns and the hard ranges: fp16 subnormals and overflow,
   exact ties, float subnormals, NaN payloads) narrow as a double-precision
   round-to-nearest-even reference says; mirror_hd_round, mirror_hd_finite
   and mirror_hd_unscale agree with their definitions; and the loss-scale
   state machine follows a reference model of torch.amp.GradScaler (with
   bounds) over long random step sequences. Deterministic: a fixed seed. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#define FP16 MIRROR_PRECISION_FP16
#define BF16 MIRROR_PRECISION_BF16

// >>helpers ------------------------------------------------------------------

static uint64_t rng_state = 0x4A1F5EEDull;

/* the library's splitmix64 */
static uint64_t rng_next(void) { return mirror__next(&rng_state); }

static uint32_t rng_u32(void) { return (uint32_t)(rng_next() >> 32); }

/* Uniform in [0, n). */
static uint32_t rng_below(uint32_t n) { return (uint32_t)(((rng_next() >> 32) * n) >> 32); }

/* Uniform in [0, 1), 53 bits. */
static double rng_unit(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float random_sign(float f) { return (rng_next() & 1) ? -f : f; }

/* The same float, or both NaN. */
static int same_or_nan(float a, float b) { return (isnan(a) && isnan(b)) || bits_of(a) == bits_of(b); }

// >>reference ----------------------------------------------------------------

/* The value of a binary16 pattern: sign, 5 exponent bits, 10 mantissa bits. */
static float ref_f16_decode(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -24);            /* subnormal: m * 2^-24 */
    else v = ldexp(1024 + m, e - 15 - 10);         /* (1 + m/2^10) * 2^(e-15) */
    return (float)((h & 0x8000) ? -v : v);
}

/* The value of a bfloat16 pattern: sign, 8 exponent bits, 7 mantissa bits. */
static float ref_bf16_decode(uint16_t h)
{
    int e = (h >> 7) & 0xff, m = h & 0x7f;
    double v;
    if (e == 0xff) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -126 - 7);       /* subnormal: m/2^7 * 2^-126 */
    else v = ldexp(128 + m, e - 127 - 7);          /* (1 + m/2^7) * 2^(e-127) */
    return (float)((h & 0x8000) ? -v : v);
}

/* f rounded to nearest, ties to even, in a format with p mantissa bits and
   minimum normal exponent emin; results of magnitude >= inf_at are Inf. The
   quantum q is a power of two, so f / q and the product are exact in double;
   nearbyint rounds ties to even in the default rounding mode. */
static float ref_round(float f, int p, int emin, double inf_at)
{
    double x = f, q, r;
    int e;
    if (isnan(f) || isinf(f) || x == 0.0) return f;
    frexp(x, &e);
    e -= 1; /* |x| in [2^e, 2^(e+1)) */
    if (e < emin) e = emin;
    q = ldexp(1.0, e - p);
    r = nearbyint(x / q) * q;
    if (fabs(r) >= inf_at) return copysignf(INFINITY, f);
    return copysignf((float)r, f); /* a zero keeps f's sign */
}

static float ref_round_f16(float f) { return ref_round(f, 10, -14, 65536.0); }
static float ref_round_bf16(float f) { return ref_round(f, 7, -126, ldexp(1.0, 128)); }

// >>all 16-bit patterns ------------------------------------------------------

/* Every fp16 pattern: widening is exact, widen then narrow is the identity
   (NaN: a NaN of the same sign both ways), narrow/widen dispatch to the
   fp16 functions, and mirror_hd_unscale is the exact value times inv. */
static void test_all_f16(void)
{
    static const float invs[] = {1.0f, 0.5f, 1.0f / 65536.0f, 5.9604644775390625e-8f, 0.3f,
                                 1.0f / 3.0f, 7.5f, 1e-30f};
    long bad_widen = 0, bad_trip = 0, bad_nan = 0, bad_dispatch = 0, bad_unscale = 0, nans = 0;
    uint32_t first_widen = 0, first_trip = 0, first_nan = 0, first_dispatch = 0, first_unscale = 0;
    uint32_t i;
    size_t k;
    for (i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i, back;
        float w = mirror_hd_f32_from_f16(h), want = ref_f16_decode(h);
        int is_nan = ((h & 0x7c00) == 0x7c00) && (h & 0x3ff);
        back = mirror_hd_f16_from_f32(w);
        if (is_nan) {
            nans++;
            /* NaN widens to a NaN float, and narrows back to a NaN half, sign kept */
            if (!(isnan(w) && (bits_of(w) >> 31) == (uint32_t)(h >> 15) && (back & 0x7c00) == 0x7c00 &&
                  (back & 0x3ff) != 0 && (back & 0x8000) == (h & 0x8000)) && bad_nan++ == 0)
                first_nan = i;
        } else {
            if (bits_of(w) != bits_of(want) && bad_widen++ == 0) first_widen = i;
            if (back != h && bad_trip++ == 0) first_trip = i;
        }
        if ((mirror_hd_widen(h, FP16) != w && !is_nan) || mirror_hd_narrow(w, FP16) != back)
            if (bad_dispatch++ == 0) first_dispatch = i;
        for (k = 0; k < sizeof invs / sizeof invs[0]; k++)
            if (!same_or_nan(mirror_hd_unscale(h, FP16, invs[k]), want * invs[k]) && bad_unscale++ == 0)
                first_unscale = i;
    }
    CHECK(nans == 2046, "fp16 NaN patterns counted: %ld, want 2046", nans);
    CHECK(bad_widen == 0, "fp16 widen vs ldexp decode: %ld differ, first h=0x%04x: want 0x%08x got 0x%08x",
          bad_widen, first_widen, bits_of(ref_f16_decode((uint16_t)first_widen)),
          bits_of(mirror_hd_f32_from_f16((uint16_t)first_widen)));
    CHECK(bad_trip == 0, "fp16 narrow(widen(h)) == h: %ld differ, first h=0x%04x got 0x%04x", bad_trip,
          first_trip, mirror_hd_f16_from_f32(mirror_hd_f32_from_f16((uint16_t)first_trip)));
    CHECK(bad_nan == 0, "fp16 NaN round trip: %ld not a same-sign NaN, first h=0x%04x: float 0x%08x half 0x%04x",
          bad_nan, first_nan, bits_of(mirror_hd_f32_from_f16((uint16_t)first_nan)),
          mirror_hd_f16_from_f32(mirror_hd_f32_from_f16((uint16_t)first_nan)));
    CHECK(bad_dispatch == 0, "mirror_hd_widen/narrow(FP16) vs the fp16 functions: %ld differ, first h=0x%04x",
          bad_dispatch, first_dispatch);
    CHECK(bad_unscale == 0, "fp16 mirror_hd_unscale(h, inv) vs decode(h) * inv: %ld differ, first h=0x%04x",
          bad_unscale, first_unscale);
}

/* Every bf16 pattern: the same, with the decode "the float whose top 16 bits
   are h" written with ldexp. */
static void test_all_bf16(void)
{
    static const float invs[] = {1.0f, 0.5f, 1.0f / 65536.0f, 0.3f, 1.0f / 3.0f, 7.5f, 1e30f};
    long bad_widen = 0, bad_top = 0, bad_trip = 0, bad_nan = 0, bad_dispatch = 0, bad_unscale = 0, nans = 0;
    uint32_t first_widen = 0, first_top = 0, first_trip = 0, first_nan = 0, first_dispatch = 0,
             first_unscale = 0;
    uint32_t i;
    size_t k;
    for (i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i, back;
        float w = mirror_hd_f32_from_bf16(h), want = ref_bf16_decode(h);
        int is_nan = ((h & 0x7f80) == 0x7f80) && (h & 0x7f);
        back = mirror_hd_bf16_from_f32(w);
        if (bits_of(w) != (i << 16) && bad_top++ == 0) first_top = i; /* NaNs too: widening moves bits */
        if (is_nan) {
            nans++;
            if (!(isnan(w) && (bits_of(w) >> 31) == (uint32_t)(h >> 15) && (back & 0x7f80) == 0x7f80 &&
                  (back & 0x7f) != 0 && (back & 0x8000) == (h & 0x8000)) && bad_nan++ == 0)
                first_nan = i;
        } else {
            if (bits_of(w) != bits_of(want) && bad_widen++ == 0) first_widen = i;
            if (back != h && bad_trip++ == 0) first_trip = i;
        }
        if ((mirror_hd_widen(h, BF16) != w && !is_nan) || mirror_hd_narrow(w, BF16) != back)
            if (bad_dispatch++ == 0) first_dispatch = i;
        for (k = 0; k < sizeof invs / sizeof invs[0]; k++)
            if (!same_or_nan(mirror_hd_unscale(h, BF16, invs[k]), want * invs[k]) && bad_unscale++ == 0)
                first_unscale = i;
    }
    CHECK(nans == 254, "bf16 NaN patterns counted: %ld, want 254", nans);
    CHECK(bad_widen == 0, "bf16 widen vs ldexp decode: %ld differ, first h=0x%04x: want 0x%08x got 0x%08x",
          bad_widen, first_widen, bits_of(ref_bf16_decode((uint16_t)first_widen)),
          bits_of(mirror_hd_f32_from_bf16((uint16_t)first_widen)));
    CHECK(bad_top == 0, "bf16 widen is the float with top bits h: %ld differ, first h=0x%04x", bad_top, first_top);
    CHECK(bad_trip == 0, "bf16 narrow(widen(h)) == h: %ld differ, first h=0x%04x got 0x%04x", bad_trip,
          first_trip, mirror_hd_bf16_from_f32(mirror_hd_f32_from_bf16((uint16_t)first_trip)));
    CHECK(bad_nan == 0, "bf16 NaN round trip: %ld not a same-sign NaN, first h=0x%04x: half 0x%04x", bad_nan,
          first_nan, mirror_hd_bf16_from_f32(mirror_hd_f32_from_bf16((uint16_t)first_nan)));
    CHECK(bad_dispatch == 0, "mirror_hd_widen/narrow(BF16) vs the bf16 functions: %ld differ, first h=0x%04x",
          bad_dispatch, first_dispatch);
    CHECK(bad_unscale == 0, "bf16 mirror_hd_unscale(h, inv) vs decode(h) * inv: %ld differ, first h=0x%04x",
          bad_unscale, first_unscale);
}

// >>float to 16 bits ---------------------------------------------------------

/* The mismatches of one group of float inputs, with the first of each kind. */
typedef struct tally {
    long count;
    long bad[2];                      /* narrowing vs the reference: fp16, bf16 */
    uint32_t in[2], want[2], got[2];  /* the first such mismatch */
    long bad_round, bad_finite;       /* mirror_hd_round, mirror_hd_finite */
    uint32_t in_round, in_finite;
} tally;

/* One float through both formats. */
static void check_float(tally *t, float f)
{
    static const int fmts[2] = {FP16, BF16};
    int k;
    t->count++;
    for (k = 0; k < 2; k++) {
        uint16_t h = mirror_hd_narrow(f, fmts[k]);
        float got = mirror_hd_widen(h, fmts[k]);
        float want = k == 0 ? ref_round_f16(f) : ref_round_bf16(f);
        int ok = isnan(f) ? isnan(got) : bits_of(got) == bits_of(want);
        if (!ok && t->bad[k]++ == 0) {
            t->in[k] = bits_of(f);
            t->want[k] = bits_of(want);
            t->got[k] = bits_of(got);
        }
        /* mirror_hd_round is widen(narrow(x)), bit for bit */
        if (bits_of(mirror_hd_round(f, fmts[k])) != bits_of(got) && t->bad_round++ == 0) t->in_round = bits_of(f);
    }
    /* mirror_hd_finite is false exactly for Inf and NaN */
    if ((!mirror_hd_finite(f)) != (isinf(f) || isnan(f)) && t->bad_finite++ == 0) t->in_finite = bits_of(f);
}

static void tally_report(const tally *t, const char *name)
{
    static const char *const fmt_names[2] = {"fp16", "bf16"};
    int k;
    for (k = 0; k < 2; k++)
        CHECK(t->bad[k] == 0,
              "%s: %ld of %ld floats round to %s unlike the reference, first in 0x%08x: want 0x%08x got 0x%08x",
              name, t->bad[k], t->count, fmt_names[k], t->in[k], t->want[k], t->got[k]);
    CHECK(t->bad_round == 0, "%s: mirror_hd_round vs widen(narrow(x)): %ld differ, first 0x%08x", name,
          t->bad_round, t->in_round);
    CHECK(t->bad_finite == 0, "%s: mirror_hd_finite vs isinf/isnan: %ld differ, first 0x%08x", name,
          t->bad_finite, t->in_finite);
}

/* f, its float neighbours on both sides, and all three negated. */
static void check_around(tally *t, float f)
{
    check_float(t, f);
    check_float(t, -f);
    check_float(t, nextafterf(f, 0.0f));
    check_float(t, -nextafterf(f, 0.0f));
    check_float(t, nextafterf(f, INFINITY));
    check_float(t, -nextafterf(f, INFINITY));
}

/* The reference itself on hand-computed values, so that agreement means something. */
static void test_reference(void)
{
    CHECK(ref_round_f16(65504.0f) == 65504.0f, "reference: 65504 stays");
    CHECK(ref_round_f16(65519.99f) == 65504.0f, "reference: 65519.99 -> 65504");
    CHECK(isinf(ref_round_f16(65520.0f)) && ref_round_f16(-65520.0f) < 0, "reference: +-65520 -> +-Inf");
    CHECK(ref_round_f16(1.0f + 1.0f / 2048) == 1.0f, "reference: 1 + 2^-11 (tie, even below) -> 1");
    CHECK(ref_round_f16(1.0f + 3.0f / 2048) == 1.0f + 2.0f / 1024, "reference: 1 + 3*2^-11 (tie, odd below) up");
    CHECK(ref_round_f16(ldexpf(1.0f, -25)) == 0.0f && bits_of(ref_round_f16(-ldexpf(1.0f, -25))) == 0x80000000u,
          "reference: +-2^-25 (tie with 0) -> +-0");
    CHECK(ref_round_f16(ldexpf(3.0f, -26)) == ldexpf(1.0f, -24), "reference: 3*2^-26 -> 2^-24");
    CHECK(ref_round_f16(ldexpf(3.0f, -25)) == ldexpf(2.0f, -24), "reference: 3*2^-25 (tie, odd below) -> 2^-23");
    CHECK(ref_round_bf16(1.0f + 1.0f / 256) == 1.0f, "reference: bf16 1 + 2^-8 (tie) -> 1");
    CHECK(ref_round_bf16(float_of(0x7f7f8000u)) == INFINITY, "reference: bf16 tie above the largest -> Inf");
    CHECK(ref_round_bf16(float_of(0x7f7f7fffu)) == float_of(0x7f7f0000u), "reference: bf16 below that tie");
    CHECK(ref_round_bf16(float_of(0x00008000u)) == 0.0f, "reference: bf16 tie 0x8000 -> 0");
    CHECK(ref_round_bf16(float_of(0x00018000u)) == float_of(0x00020000u), "reference: bf16 tie 0x18000 up");
}

/* Several million floats, group by group. */
static void test_narrow(void)
{
    static const float specials[] = {0.0f, INFINITY, 1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f,
                                     65505.0f, 65535.0f, 1e10f, FLT_MAX, FLT_MIN, 1e-45f,
                                     6.103515625e-05f /* 2^-14 */, 6.0975552e-05f /* largest fp16 subnormal */,
                                     5.9604644775390625e-8f /* 2^-24 */, 2.98023223876953125e-8f /* 2^-25 */,
                                     4.4703483581542969e-8f /* 3*2^-26 */, 1e-8f, 0.1f, 1.0f / 3.0f, 3.14159265f};
    tally t;
    long i, ties_even = 0, ties_odd = 0;
    size_t k;

    /* hand-picked values, their neighbours and negatives */
    memset(&t, 0, sizeof t);
    for (k = 0; k < sizeof specials / sizeof specials[0]; k++) check_around(&t, specials[k]);
    check_float(&t, NAN);
    check_float(&t, -NAN);
    tally_report(&t, "special values");

    /* uniformly random bit patterns: NaN, Inf, subnormal and huge floats too */
    memset(&t, 0, sizeof t);
    for (i = 0; i < 1500000; i++) check_float(&t, float_of(rng_u32()));
    tally_report(&t, "random bit patterns");

    /* around the fp16 subnormal range, 2^-26 .. 2^-13: any exponent, any mantissa */
    memset(&t, 0, sizeof t);
    for (i = 0; i < 400000; i++) {
        uint32_t e = 127 - 26 + rng_below(14);
        check_float(&t, float_of((rng_u32() & 0x80000000u) | (e << 23) | (rng_u32() & 0x7fffffu)));
    }
    tally_report(&t, "fp16 subnormal range");

    /* around fp16 overflow, 60000 .. 70000 */
    memset(&t, 0, sizeof t);
    for (i = 0; i < 200000; i++) check_float(&t, random_sign((float)(60000.0 + 10000.0 * rng_unit())));
    for (i = 0; i < 2000; i++) check_around(&t, (float)(65504 + (int)i * 0.0625 / 4)); /* 65504 .. 65535.25 */
    tally_report(&t, "fp16 overflow range");

    /* exact ties between consecutive fp16 values (half of them subnormal),
       and the floats just beside them */
    memset(&t, 0, sizeof t);
    for (i = 0; i < 150000; i++) {
        uint16_t h = (uint16_t)((i & 1) ? rng_below(0x400) : rng_below(0x7bff)); /* below 0x7bff: b is finite */
        double a = ref_f16_decode(h), b = ref_f16_decode((uint16_t)(h + 1));
        float tie = (float)((a + b) / 2); /* 12 significant bits: exact */
        if (h & 1) ties_odd++;
        else ties_even++;
        check_around(&t, tie);
    }
    check_around(&t, 65520.0f); /* the tie between 65504 and where 65536 would be */
    CHECK(ties_even > 1000 && ties_odd > 1000, "fp16 ties below both even (%ld) and odd (%ld) halves", ties_even,
          ties_odd);
    tally_report(&t, "fp16 ties");

    /* exact ties between consecutive bf16 values (half of them subnormal),
       including the one above the largest finite bf16 */
    memset(&t, 0, sizeof t);
    ties_even = ties_odd = 0;
    for (i = 0; i < 150000; i++) {
        uint16_t h = (uint16_t)((i & 1) ? rng_below(0x80) : rng_below(0x7f80));
        double a = ref_bf16_decode(h), b = h == 0x7f7f ? ldexp(1.0, 128) : ref_bf16_decode((uint16_t)(h + 1));
        float tie = (float)((a + b) / 2); /* 9 significant bits: exact */
        if (h & 1) ties_odd++;
        else ties_even++;
        check_around(&t, tie);
    }
    check_around(&t, (float)((ref_bf16_decode(0x7f7f) + ldexp(1.0, 128)) / 2));
    CHECK(ties_even > 1000 && ties_odd > 1000, "bf16 ties below both even (%ld) and odd (%ld) values", ties_even,
          ties_odd);
    tally_report(&t, "bf16 ties");

    /* float subnormals (bf16 subnormals and zero for fp16), and the top binade of float */
    memset(&t, 0, sizeof t);
    for (i = 0; i < 200000; i++) check_float(&t, float_of((rng_u32() & 0x80000000u) | (rng_u32() & 0x7fffffu)));
    for (i = 0; i < 100000; i++)
        check_float(&t, float_of((rng_u32() & 0x80000000u) | (254u << 23) | (rng_u32() & 0x7fffffu)));
    tally_report(&t, "float subnormals and the top binade");

    /* NaN with random payloads and both signs, quiet and signalling */
    memset(&t, 0, sizeof t);
    for (i = 0; i < 100000; i++) {
        uint32_t payload = rng_u32() & 0x7fffffu;
        check_float(&t, float_of((rng_u32() & 0x80000000u) | 0x7f800000u | (payload ? payload : 1u)));
    }
    check_float(&t, float_of(0x7f800001u));
    check_float(&t, float_of(0xffc00000u));
    check_float(&t, float_of(0x7f802000u)); /* payload only in the bits fp16 drops */
    check_float(&t, float_of(0x7f800001u)); /* payload only in the bits bf16 drops */
    tally_report(&t, "NaN payloads");
}

// >>loss scaler --------------------------------------------------------------

/* An independent model of the scaler: double scale (exact with factors 2 and
   0.5 and power-of-two bounds), or float steps for other factors. */
typedef struct ref_scaler {
    double scale;
    uint32_t good, consec, last;
    uint64_t skipped, applied;
    int use_float;
} ref_scaler;

static void ref_update(ref_scaler *r, const mirror_loss_scale_desc *d, int nonfinite)
{
    int dynamic = d->kind == MIRROR_SCALE_DYNAMIC;
    if (nonfinite) {
        r->skipped++;
        r->consec++;
        r->good = 0;
        r->last = 1;
        if (!dynamic) return;
        if (r->use_float) {
            r->scale = fmaxf((float)r->scale * d->backoff_factor, d->min_scale);
        } else {
            r->scale *= d->backoff_factor;
            if (r->scale < d->min_scale) r->scale = d->min_scale;
        }
        return;
    }
    r->applied++;
    r->consec = 0;
    r->last = 0;
    if (!dynamic) return;
    r->good++;
    if (r->good == d->growth_interval) {
        r->good = 0;
        if (r->use_float) {
            r->scale = fminf((float)r->scale * d->growth_factor, d->max_scale);
        } else {
            r->scale *= d->growth_factor;
            if (r->scale > d->max_scale) r->scale = d->max_scale;
        }
    }
}

static mirror_loss_scale_desc scaler_desc(mirror_loss_scaling kind, float init, float growth, float backoff,
                                          uint32_t interval, float min_scale, float max_scale)
{
    mirror_loss_scale_desc d;
    memset(&d, 0, sizeof d);
    d.kind = kind;
    d.init_scale = init;
    d.growth_factor = growth;
    d.backoff_factor = backoff;
    d.growth_interval = interval;
    d.min_scale = min_scale;
    d.max_scale = max_scale;
    d.max_consecutive_skips = 50;
    return d;
}

static mirror_loss_scale_state scaler_start(float scale)
{
    mirror_loss_scale_state st;
    memset(&st, 0, sizeof st);
    st.scale = scale;
    return st;
}

/* A random step sequence: single overflows with probability p_single, runs
   of 1..max_run overflows starting with probability p_run; the flag set is a
   random non-zero value. Every step is compared with the reference. */
static void run_scaler(const char *name, const mirror_loss_scale_desc *d, int use_float, long steps,
                       double p_single, double p_run, uint32_t max_run, int want_bounds_hit)
{
    mirror_loss_scale_state st = scaler_start(d->init_scale);
    ref_scaler r;
    long i, bad = 0, out_of_bounds = 0, at_min = 0, at_max = 0, first_bad = -1, first_oob = -1;
    uint32_t run = 0, max_consec = 0;
    memset(&r, 0, sizeof r);
    r.scale = d->init_scale;
    r.use_float = use_float;
    for (i = 0; i < steps; i++) {
        int nonfinite;
        if (run > 0) {
            run--;
            nonfinite = 1;
        } else if (rng_unit() < p_run) {
            run = rng_below(max_run);
            nonfinite = 1;
        } else {
            nonfinite = rng_unit() < p_single;
        }
        if (nonfinite) {
            uint32_t flag = (rng_next() & 1) ? 1u : rng_u32();
            st.found_nonfinite = flag ? flag : 1u;
        } else {
            st.found_nonfinite = 0;
        }
        mirror_hd_scaler_update(&st, d);
        ref_update(&r, d, nonfinite);
        if ((double)st.scale != r.scale || st.good_steps != r.good || st.consecutive_skips != r.consec ||
            st.last_skipped != r.last || st.skipped != r.skipped || st.applied != r.applied ||
            st.found_nonfinite != 0) {
            if (bad++ == 0) first_bad = i;
        }
        if (d->kind == MIRROR_SCALE_DYNAMIC ? !(st.scale >= d->min_scale && st.scale <= d->max_scale)
                                            : st.scale != d->init_scale)
            if (out_of_bounds++ == 0) first_oob = i;
        at_min += st.scale == d->min_scale;
        at_max += st.scale == d->max_scale;
        if (st.consecutive_skips > max_consec) max_consec = st.consecutive_skips;
    }
    CHECK(bad == 0, "%s: state vs reference model: %ld of %ld steps differ, first at step %ld", name, bad, steps,
          first_bad);
    CHECK(out_of_bounds == 0, "%s: scale within [%g, %g] (static: unchanged): %ld steps outside, first %ld",
          name, d->min_scale, d->max_scale, out_of_bounds, first_oob);
    CHECK(st.skipped + st.applied == (uint64_t)steps, "%s: skipped %llu + applied %llu == %ld steps", name,
          (unsigned long long)st.skipped, (unsigned long long)st.applied, steps);
    if (want_bounds_hit)
        CHECK(at_min > 0 && at_max > 0, "%s: the sequence reaches both bounds (%ld steps at min, %ld at max)",
              name, at_min, at_max);
    if (max_run > 1)
        CHECK(max_consec >= max_run / 2, "%s: long overflow runs happened (longest %u)", name, max_consec);
}

static void test_scaler(void)
{
    mirror_loss_scale_desc d;
    mirror_loss_scale_state st;
    const float two24 = 16777216.0f;
    int i, ok;

    /* random sequences against the reference model */
    d = scaler_desc(MIRROR_SCALE_DYNAMIC, 65536.0f, 2.0f, 0.5f, 2000, 1.0f, two24); /* the defaults */
    run_scaler("defaults", &d, 0, 200000, 1.0 / 2500, 1.0 / 20000, 30, 0);
    d = scaler_desc(MIRROR_SCALE_DYNAMIC, 65536.0f, 2.0f, 0.5f, 3, 1.0f, two24);
    run_scaler("growth_interval 3", &d, 0, 200000, 0.3, 0.001, 10, 0);
    d = scaler_desc(MIRROR_SCALE_DYNAMIC, 65536.0f, 2.0f, 0.5f, 5, 1.0f, two24);
    run_scaler("bounds 1 .. 2^24, long overflow runs", &d, 0, 200000, 0.001, 0.002, 60, 1);
    d = scaler_desc(MIRROR_SCALE_DYNAMIC, 100.0f, 1.7f, 0.3f, 4, 0.5f, 1000.0f);
    run_scaler("backoff 0.3 growth 1.7 bounds 0.5 .. 1000", &d, 1, 200000, 0.1, 0.01, 12, 1);
    d = scaler_desc(MIRROR_SCALE_STATIC, 1024.0f, 2.0f, 0.5f, 3, 1.0f, two24);
    run_scaler("static 1024", &d, 0, 200000, 0.3, 0.01, 40, 0);
    d = scaler_desc(MIRROR_SCALE_NONE, 1.0f, 2.0f, 0.5f, 1, 1.0f, two24);
    run_scaler("none", &d, 0, 200000, 0.3, 0.01, 40, 0);

    /* 100 overflows in a row from 65536: the scale rests at min_scale 1 */
    d = scaler_desc(MIRROR_SCALE_DYNAMIC, 65536.0f, 2.0f, 0.5f, 2000, 1.0f, two24);
    st = scaler_start(d.init_scale);
    ok = 1;
    for (i = 0; i < 100; i++) {
        st.found_nonfinite = 1;
        mirror_hd_scaler_update(&st, &d);
        ok &= st.scale == (i < 16 ? ldexpf(1.0f, 15 - i) : 1.0f) && st.last_skipped == 1 && st.applied == 0;
    }
    CHECK(ok, "100 overflows: the scale halves from 65536 to 1, each step skipped");
    CHECK(st.scale == 1.0f, "100 overflows: scale %g == min_scale 1", st.scale);
    CHECK(st.consecutive_skips == 100 && st.skipped == 100, "100 overflows: consecutive_skips %u, skipped %llu",
          st.consecutive_skips, (unsigned long long)st.skipped);
    mirror_hd_scaler_update(&st, &d); /* one finite step */
    CHECK(st.consecutive_skips == 0 && st.last_skipped == 0 && st.applied == 1 && st.good_steps == 1,
          "a finite step after 100 overflows resets consecutive_skips (%u), applies (%llu), good_steps %u",
          st.consecutive_skips, (unsigned long long)st.applied, st.good_steps);
    CHECK(st.scale == 1.0f, "a finite step after 100 overflows leaves the scale at 1 (%g)", st.scale);

    /* growth_interval 1: doubles every finite step from 1 up to 2^24, no further */
    d = scaler_desc(MIRROR_SCALE_DYNAMIC, 1.0f, 2.0f, 0.5f, 1, 1.0f, two24);
    st = scaler_start(d.init_scale);
    ok = 1;
    for (i = 1; i <= 100; i++) {
        mirror_hd_scaler_update(&st, &d);
        ok &= st.scale == (i < 24 ? ldexpf(1.0f, i) : two24) && st.good_steps == 0;
    }
    CHECK(ok, "growth_interval 1: the scale is 2^min(step, 24) after every step");
    CHECK(st.scale == two24 && st.applied == 100, "growth stops at max_scale 2^24 (scale %g, applied %llu)",
          st.scale, (unsigned long long)st.applied);

    /* the default growth_interval: 1999 finite steps keep 65536, the 2000th doubles */
    d = scaler_desc(MIRROR_SCALE_DYNAMIC, 65536.0f, 2.0f, 0.5f, 2000, 1.0f, two24);
    st = scaler_start(d.init_scale);
    for (i = 0; i < 1999; i++) mirror_hd_scaler_update(&st, &d);
    CHECK(st.scale == 65536.0f && st.good_steps == 1999, "1999 finite steps: scale %g, good_steps %u", st.scale,
          st.good_steps);
    mirror_hd_scaler_update(&st, &d);
    CHECK(st.scale == 131072.0f && st.good_steps == 0, "the 2000th finite step doubles: scale %g, good_steps %u",
          st.scale, st.good_steps);
    st.found_nonfinite = 1;
    mirror_hd_scaler_update(&st, &d);
    CHECK(st.scale == 65536.0f && st.good_steps == 0 && st.found_nonfinite == 0 && st.applied == 2000,
          "an overflow halves back: scale %g, good_steps %u, flag cleared", st.scale, st.good_steps);

    /* STATIC and NONE: the scale never moves, the counters still count */
    d = scaler_desc(MIRROR_SCALE_STATIC, 512.0f, 2.0f, 0.5f, 1, 1.0f, two24);
    st = scaler_start(d.init_scale);
    for (i = 0; i < 10; i++) mirror_hd_scaler_update(&st, &d);
    for (i = 0; i < 10; i++) {
        st.found_nonfinite = 1;
        mirror_hd_scaler_update(&st, &d);
    }
    CHECK(st.scale == 512.0f && st.applied == 10 && st.skipped == 10 && st.consecutive_skips == 10,
          "static: scale %g unchanged after growth-interval steps and overflows", st.scale);
}

int main(void)
{
    test_all_f16();
    test_all_bf16();
    test_reference();
    test_narrow();
    test_scaler();
    return check_done("test_half");
}
