/* fma_chains.h - a core's arithmetic without its memory, for the CPU
   benchmarks: independent chains of vector multiply-adds, as many as the
   GEMM tile keeps (MR x NV). bench_train turns it into one core's peak,
   bench_peers into the machine's two-thread scaling. Include after
   mirror.h with MIRROR_IMPLEMENTATION. */
#ifndef BENCH_FMA_CHAINS_H
#define BENCH_FMA_CHAINS_H

/* FLOPs of one round of the chains. */
#define BENCH_FMA_FLOPS (2.0 * MIRROR__VL * MIRROR__MR * MIRROR__NV)

/* Seconds for `rounds` rounds of the chains. */
static double bench_fma_seconds(size_t rounds)
{
    mirror__vec acc[MIRROR__MR][MIRROR__NV], x, y;
    const mirror__vec zero = {0};
    volatile float sink = 0.0f;
    size_t i, j, it;
    double t0;
    x = zero + 1.0000001f, y = zero + 0.9999999f;
    for (i = 0; i < MIRROR__MR; i++)
        for (j = 0; j < MIRROR__NV; j++) acc[i][j] = zero + (float)(i + j);
    t0 = mirror__now();
    for (it = 0; it < rounds; it++)
        MIRROR__UNROLL for (i = 0; i < MIRROR__MR; i++)
            MIRROR__UNROLL for (j = 0; j < MIRROR__NV; j++) acc[i][j] = acc[i][j] * x + y;
    t0 = mirror__now() - t0;
    for (i = 0; i < MIRROR__MR; i++) /* the chains' results are used: none is optimised away */
        for (j = 0; j < MIRROR__NV; j++) {
            float first;
            memcpy(&first, &acc[i][j], sizeof first);
            sink += first;
        }
    (void)sink;
    return t0;
}
#endif
