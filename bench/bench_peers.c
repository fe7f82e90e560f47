/* bench_peers.c - mirror's side of bench/peers.py: reads lines
   "MODEL BATCH REPLICAS [SHARD [PRECISION [EPOCHS]]]" (mlp|cnn, global
   batch, CPU replicas, the update's sharding: auto (the default), on or
   off, fp32 (the default), fp16 or bf16, and the times over the samples
   a pass takes, 1 by default) on stdin and answers each with the
   samples/s of one pass of training steps over 2560 synthetic digits
   (Adam). The first request for a configuration
   builds its model and runs one untimed pass. The line "scaling" answers
   with the machine's own two-thread scaling: the rate of independent
   vector multiply-adds on two threads over one (2.0 on two cores of their
   own, less where they share one); "compiler" with the compiler that
   built it and the GEMM's vectors.

   Built with MIRROR_MPI (build/bench_peers_mpi, run by bench/mpi.py under
   mpirun), REPLICAS counts each process's (and SHARD on shards the update
   across the processes): rank 0 reads the requests, every process runs
   them, rank 0 answers.

   Build:  make build/bench_peers   (make bench-peers runs it with the peers) */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#define EXAMPLE_BENCH_MODEL
#include "../examples/models.h"
#include "fma_chains.h"

#include <stdio.h>
#include <string.h>

#define SAMPLES 2560
#define BENCH_STR_(x) #x
#define BENCH_STR(x) BENCH_STR_(x)
#if defined(__clang__)
#define BENCH_COMPILER "clang " BENCH_STR(__clang_major__) "." BENCH_STR(__clang_minor__) "." BENCH_STR(__clang_patchlevel__)
#elif defined(__GNUC__)
#define BENCH_COMPILER "gcc " __VERSION__
#else
#define BENCH_COMPILER "a compiler that does not say"
#endif
#define SLOTS 16

static double pass(mirror_model *m, const mirror_dataset *ds, const size_t *perm, size_t batch, size_t epochs)
{
    double t0 = mirror__now();
    size_t e, k;
    for (e = 0; e < epochs; e++)
        for (k = 0; k < SAMPLES / batch; k++) {
            mirror_batch b = example_bench_batch(ds, perm + k * batch, batch);
            if (mirror_train_step(m, &b, NULL)) return -1.0;
        }
    return (double)(epochs * SAMPLES) / (mirror__now() - t0);
}

/* A thread's share of the chains: its seconds into *seconds. */
static void *fma_chains(void *seconds)
{
    *(double *)seconds = bench_fma_seconds(4000000);
    return NULL;
}

/* Two threads' rate over one thread's, the best of 3 tries of each. */
static double two_thread_scaling(void)
{
    double one = 1e30, two = 1e30, t[2], t0;
    pthread_t other;
    int k;
    for (k = 0; k < 3; k++) {
        fma_chains(t);
        one = t[0] < one ? t[0] : one;
        t0 = mirror__now();
        if (pthread_create(&other, NULL, fma_chains, &t[1])) return 0.0;
        fma_chains(&t[0]);
        pthread_join(other, NULL);
        t0 = mirror__now() - t0;
        two = t0 < two ? t0 : two;
    }
    return 2.0 * one / two;
}

/* The next request, read by rank 0 (and with MPI sent to every process);
   0 at the end. */
static int next_request(char *line, int size)
{
    int rank = 0;
#ifdef MIRROR_MPI
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#endif
    if (rank == 0 && !fgets(line, size, stdin)) line[0] = '\0';
#ifdef MIRROR_MPI
    { /* waiting, the other ranks sleep: a spinning wait would take a core from the mode being timed */
        MPI_Request req;
        struct timespec ms = {0, 1000000};
        int done = 0;
        MPI_Ibcast(line, size, MPI_CHAR, 0, MPI_COMM_WORLD, &req);
        while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) nanosleep(&ms, NULL);
    }
#endif
    return line[0] != '\0';
}

int main(void)
{
    struct {
        char kind[8];
        size_t batch, replicas;
        mirror_shard_update shard;
        mirror_precision precision;
        mirror_strategy *s;
        mirror_model *m;
    } slot[SLOTS];
    size_t used = 0, perm[SAMPLES], i;
    char kind[8], shard_name[8], precision_name[8], line[128];
    mirror_dataset ds;
#ifdef MIRROR_MPI
    int provided;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
#endif
    mirror_dataset_synthetic_digits(&ds, SAMPLES, 1, NULL);
    mirror_permutation(perm, SAMPLES, 1, 0);
    while (next_request(line, (int)sizeof line)) {
        double rate;
        size_t batch, replicas, epochs = 1;
        mirror_shard_update shard;
        mirror_precision precision;
        char devices[32];
        strcpy(shard_name, "auto"), strcpy(precision_name, "fp32");
        if (!strncmp(line, "scaling", 7) || !strncmp(line, "compiler", 8)) {
            if (line[0] == 's')
                printf("%.3f\n", two_thread_scaling());
            else
                printf("%s, %s%s\n", BENCH_COMPILER, MIRROR__ISA, MIRROR__DPBF16 ? ", bf16 GEMMs on vdpbf16ps" : "");
            fflush(stdout);
            continue;
        }
        if (sscanf(line, "%7s %zu %zu %7s %7s %zu", kind, &batch, &replicas, shard_name, precision_name, &epochs) < 3 ||
            !epochs)
            break;
        shard = !strcmp(shard_name, "on") ? MIRROR_SHARD_ON : !strcmp(shard_name, "off") ? MIRROR_SHARD_OFF
                                                                                       : MIRROR_SHARD_AUTO;
        precision = !strcmp(precision_name, "bf16")   ? MIRROR_PRECISION_BF16
                    : !strcmp(precision_name, "fp16") ? MIRROR_PRECISION_FP16
                                                      : MIRROR_PRECISION_FP32;
        for (i = 0; i < used; i++)
            if (!strcmp(slot[i].kind, kind) && slot[i].batch == batch && slot[i].replicas == replicas &&
                slot[i].shard == shard && slot[i].precision == precision)
                break;
        if (i == used) {
            mirror_strategy_desc sd = {0};
            if (used == SLOTS) return 1;
            snprintf(devices, sizeof devices, "cpu:%zu", replicas);
            sd.devices = devices;
            strcpy(slot[i].kind, kind), slot[i].batch = batch, slot[i].replicas = replicas, slot[i].shard = shard;
            slot[i].precision = precision;
            if (mirror_strategy_create(&sd, &slot[i].s, NULL) ||
                !(slot[i].m = example_bench_model_with(slot[i].s, kind, batch, 0, shard, precision)))
                return 1;
            used++;
            pass(slot[i].m, &ds, perm, batch, epochs);
        }
        rate = pass(slot[i].m, &ds, perm, batch, epochs);
        if (mirror_strategy_process(slot[i].s).rank == 0) printf("%.1f\n", rate);
        fflush(stdout);
    }
    for (i = 0; i < used; i++) mirror_model_destroy(slot[i].m), mirror_strategy_destroy(slot[i].s);
    mirror_dataset_free(&ds);
#ifdef MIRROR_MPI
    MPI_Finalize();
#endif
    return 0;
}
