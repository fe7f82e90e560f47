/* bench_gpu.c - training throughput on one GPU (make bench-gpu; needs a GPU).
   The workloads, each with Adam, in fp32 (strict: mirror's GEMMs do not use
   TF32) and in fp16 and bf16 mixed precision:

     mlp      784-256-128-10 at batch 128: launch-bound
     mlp2048  784-2048-2048-10 at batch 4096
     mlp8192  8192-8192-8192-8192-10 at batch 8192: GEMM-bound (TFLOP/s)
     cnn      the trainer's CNN at batch 512

   then the CNN's step time with K = 1, 2, 4 and 8 replicas on the one GPU at
   a fixed global batch of 512, with every replica updating every parameter
   and with the sharded update (each replica a slice). The data sit in device memory where they
   fit (mirror_keep_data; as PyTorch's benchmark keeps its data on the device): a step uploads
   its rows' indices alone and the GPU gathers them; where they do not fit, or on CPU replicas,
   each step gathers its batch on the host (and a GPU uploads it). The small MLP runs once more
   with its data on the host (MIRROR_DATA_OFF: each step gathers and uploads its batch, as
   mirror does without mirror_keep_data), where its first runs had them on the device. Medians
   of ROUNDS timings of a run of steps, after a warm-up run.
   Writes the synthetic digits to DIR/bench_digits.bin (--out DIR, else
   $BENCH_DIR, else build) for bench/bench_torch.py, which trains the same
   models on the same data.

   Each workload runs as queued and with CUDA graphs (desc.graphs).

   Output: "mirror <workload> <batch> <precision> <samples/s> <ms/step>
   <TFLOP/s> <eager|graphs> data=<device|host>" (the MLPs' 6 x batch x
   parameters flops a step; "-" for the CNN; where the data lived) and
   "replicas <K> <ms/step> <ms/step sharded> data=<device|host>".

   bench_gpu [--quick] [--devices LIST] [--out DIR]: --quick shrinks every workload
   (batches / 16, widths / 16) for a try on CPU replicas, say with
   --devices cpu:2; LIST replaces "cuda:0" (and K replicas its first device
   K times). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c99 */
#include "../mirror.h"
#define EXAMPLE_BENCH_MODEL /* the benchmarks' model too */
#include "../examples/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUNDS 5

typedef struct workload {
    const char *name;
    size_t batch, steps;
    size_t in, width, depth; /* an MLP: in features, depth hidden layers of width; else 0 (the digits' model) */
} workload;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fail(const char *what)
{
    fprintf(stderr, "bench_gpu: %s\n", what);
    exit(1);
}

/* Median seconds per step over ROUNDS runs of `steps` steps; the last
   step's metrics are read, which waits for the GPU to finish them all.
   Step k takes the dataset's k-th run of `batch` rows (through an index,
   so that the batch is over the dataset's arrays, which mirror_keep_data
   keeps on the device where they fit and place allows: *on_device says
   whether). */
static double time_steps(mirror_model *m, const mirror_dataset *ds, size_t batch, size_t steps,
                         mirror_data_place place, int *on_device)
{
    double t[ROUNDS];
    size_t round, k, i, per = ds->count / batch, *index = (size_t *)malloc(ds->count * sizeof(size_t));
    mirror_metrics out;
    if (!index) fail("out of memory");
    for (i = 0; i < ds->count; i++) index[i] = i;
    if (mirror_keep_data(m, ds, place, on_device)) fail(mirror_model_error(m));
    for (round = 0; round <= ROUNDS; round++) { /* round 0 warms up */
        double t0 = now();
        for (k = 0; k < steps; k++) {
            mirror_batch b = example_bench_batch(ds, index + (k % per) * batch, batch);
            if (mirror_train_step(m, &b, k + 1 == steps ? &out : NULL)) fail(mirror_model_error(m));
        }
        if (round) t[round - 1] = (now() - t0) / (double)steps;
    }
    free(index);
    qsort(t, ROUNDS, sizeof *t, cmp);
    return t[ROUNDS / 2];
}

static mirror_strategy *strategy(const char *devices)
{
    mirror_strategy_desc d;
    mirror_strategy *s = NULL;
    mirror_error err = {0, ""};
    memset(&d, 0, sizeof d);
    d.devices = devices;
    if (mirror_strategy_create(&d, &s, &err)) fail(err.message);
    return s;
}

/* The workload's model: an MLP of its shape, or the digits' "mlp"/"cnn". */
static mirror_model *build(mirror_strategy *s, const workload *w, mirror_precision precision,
                           mirror_shard_update shard, int graphs)
{
    mirror_model_desc d;
    mirror_model *m = NULL;
    mirror_error err = {0, ""};
    size_t i;
    memset(&d, 0, sizeof d);
    d.strategy = s;
    d.channels = 1, d.height = w->in ? 1 : 28, d.width = w->in ? w->in : 28;
    d.max_batch = w->batch;
    d.optimizer.kind = MIRROR_OPT_ADAM;
    d.precision = precision;
    d.shard_update = shard;
    d.graphs = graphs;
    if (mirror_model_create(&d, &m, &err)) fail(err.message);
    if (!w->in) {
        if (example_model(m, strcmp(w->name, "cnn") ? "mlp" : "cnn", 0.0f)) fail(mirror_model_error(m));
        return m;
    }
    mirror_flatten(m);
    for (i = 0; i < w->depth; i++) mirror_dense(m, w->width), mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) fail(mirror_model_error(m));
    return m;
}

/* count samples of `in` features in [-1, 1) with labels 0..9 (an MLP's
   data: only the speed is measured). */
static void random_data(mirror_dataset *ds, size_t count, size_t in)
{
    uint32_t state = 7;
    size_t i;
    memset(ds, 0, sizeof *ds);
    ds->x = (float *)malloc(count * in * sizeof(float));
    ds->labels = (int32_t *)malloc(count * sizeof(int32_t));
    if (!ds->x || !ds->labels) fail("out of memory");
    for (i = 0; i < count * in; i++) {
        state = state * 1664525u + 1013904223u; /* an LCG's top 24 bits */
        ds->x[i] = (float)(state >> 8) / 8388608.0f - 1.0f;
    }
    for (i = 0; i < count; i++) ds->labels[i] = (int32_t)(i % 10);
    ds->count = count, ds->channels = 1, ds->height = 1, ds->width = in, ds->num_classes = 10;
}

int main(int argc, char **argv)
{
    workload loads[] = {{"mlp", 128, 50, 0, 0, 0},
                        {"mlp2048", 4096, 20, 784, 2048, 2},
                        {"mlp8192", 8192, 5, 8192, 8192, 3},
                        {"cnn", 512, 20, 0, 0, 0}};
    static const mirror_precision precisions[3] = {MIRROR_PRECISION_FP32, MIRROR_PRECISION_FP16,
                                                   MIRROR_PRECISION_BF16};
    const char *devices = "cuda:0", *dir = getenv("BENCH_DIR") ? getenv("BENCH_DIR") : "build";
    char path[4096];
    int quick = 0, a;
    size_t i, p, k;
    mirror_dataset digits;
    mirror_strategy *s;
    FILE *f;
    for (a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--quick")) quick = 1;
        else if (!strcmp(argv[a], "--devices") && a + 1 < argc) devices = argv[++a];
        else if (!strcmp(argv[a], "--out") && a + 1 < argc) dir = argv[++a];
        else fail("usage: bench_gpu [--quick] [--devices LIST] [--out DIR]");
    }
    for (i = 0; quick && i < sizeof loads / sizeof *loads; i++) {
        loads[i].batch = loads[i].batch / 16 ? loads[i].batch / 16 : 1;
        loads[i].width /= 16, loads[i].in = loads[i].in == 8192 ? 512 : loads[i].in;
        loads[i].steps = 3;
    }
    s = strategy(devices);
    mirror_dataset_synthetic_digits(&digits, 8192, 1, NULL);
    if (snprintf(path, sizeof path, "%s/bench_digits.bin", dir) >= (int)sizeof path) /* never a path cut short */
        fail("--out DIR is too long for a path (4095 bytes with bench_digits.bin)");
    if ((f = fopen(path, "wb")) != NULL) { /* count, then x, then int32 labels */
        int32_t n = (int32_t)digits.count;
        fwrite(&n, 4, 1, f);
        fwrite(digits.x, 4, digits.count * 784, f);
        fwrite(digits.labels, 4, digits.count, f);
        if (fclose(f)) fprintf(stderr, "bench_gpu: %s: not written whole\n", path);
    } else {
        fprintf(stderr, "bench_gpu: cannot write %s: bench_torch.py will lack its data\n", path);
    }
    printf("# %s; data in device memory where they fit (data=device: a step uploads its rows' indices; data=host: its "
           "batch); fp32 GEMMs strict (no TF32)\n",
           mirror_strategy_describe(s));
    for (i = 0; i < sizeof loads / sizeof *loads; i++) {
        const workload *w = &loads[i];
        mirror_dataset own, *ds = &digits;
        int kept = 0; /* a run of this workload had its data on the device */
        if (w->in == 8192 || (quick && w->in == 512)) random_data(&own, w->batch, w->in), ds = &own;
        /* runs 0-5: each precision eager and with graphs, the data where they fit; then, for the
           small MLP whose data sat on the device, 6-11 again with the data on the host (elsewhere
           the first runs were the host's already, or the data did not fit) */
        for (p = 0; p < (!strcmp(w->name, "mlp") && kept ? 12u : 6u); p++) {
            mirror_precision precision = precisions[p % 6 / 2];
            mirror_model *m = build(s, w, precision, MIRROR_SHARD_AUTO, (int)(p % 2));
            int on_device = 0;
            double t = time_steps(m, ds, w->batch, w->steps, p < 6 ? MIRROR_DATA_AUTO : MIRROR_DATA_OFF, &on_device);
            kept |= on_device;
            printf("mirror %s %zu %s %.0f %.3f ", w->name, w->batch, mirror_precision_name(precision),
                   (double)w->batch / t, 1e3 * t);
            if (w->in) printf("%.1f", 6.0 * (double)w->batch * (double)mirror_num_parameters(m) / t / 1e12);
            else printf("-");
            printf(" %s data=%s\n", p % 2 ? "graphs" : "eager", on_device ? "device" : "host");
            fflush(stdout);
            mirror_model_destroy(m);
        }
        if (ds == &own) free(own.x), free(own.labels);
    }
    mirror_strategy_destroy(s);
    for (k = 1; k <= 8; k *= 2) { /* K replicas of the first device: "cuda:0,0,0,0" or "cpu:4" */
        char first[64], list[256];
        const char *id;
        size_t r, at;
        const workload *cnn = &loads[3];
        mirror_model *m;
        double t[2];
        int on_device = 0;
        snprintf(first, sizeof first, "%.*s", (int)strcspn(devices, ","), devices);
        id = strchr(first, ':') ? strchr(first, ':') + 1 : "0";
        if (!strncmp(first, "cpu", 3)) {
            snprintf(list, sizeof list, "cpu:%zu", k);
        } else {
            at = (size_t)snprintf(list, sizeof list, "cuda:%s", id);
            for (r = 1; r < k && at < sizeof list; r++) at += (size_t)snprintf(list + at, sizeof list - at, ",%s", id);
        }
        s = strategy(list);
        for (r = 0; r < 2; r++) {
            m = build(s, cnn, MIRROR_PRECISION_FP32, r ? MIRROR_SHARD_ON : MIRROR_SHARD_OFF, 0);
            t[r] = time_steps(m, &digits, cnn->batch, cnn->steps, MIRROR_DATA_AUTO, &on_device);
            mirror_model_destroy(m);
        }
        printf("replicas %zu %.3f %.3f data=%s\n", mirror_num_replicas(s), 1e3 * t[0], 1e3 * t[1],
               on_device ? "device" : "host");
        fflush(stdout);
        mirror_strategy_destroy(s);
    }
    mirror_dataset_free(&digits);
    return 0;
}
