/* test_mpi.c - one strategy over several processes (MIRROR_MPI), run by
   tests/mpi/run.sh as mpirun -np P build/test_mpi L: P processes of L CPU
   replicas each. Every process also builds, on MPI_COMM_SELF, a strategy of
   P x L replicas in itself: the reference. Against it, after 20 steps of
   batches that split unevenly (and leave replicas empty), in fp32 and in
   fp16 with skipped steps: the parameters are bitwise equal (the sum folds
   in rank order, the additions of the reference), every replica of every
   process agrees (mirror_check_replicas), and the metrics, evaluation and
   predictions are the reference's. In deterministic mode the reference
   is one process of one replica, and accumulated micro-batches fold onto
   the sum before them. Again with the update sharded across processes
   and the gradient clipped: the same parameters, and the gradient,
   optimizer state and norm that each process gathers from the slices'
   owners are the reference's. Each replica's own gradient and metrics
   (replica_values) are those of the reference's replica of the same
   global index. Then mirror_check_replicas finding a
   replica changed by hand, mirror_agree with one process failing, and a
   checkpoint loaded by one process only, or another one there.
   Rank 0 prints the checks of every process: "test_mpi_PxL: ...". */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"
#include "../check.h"
#include "../digits.h"

#include <math.h>
#include <string.h>

enum { STEPS = 20, SIDE = 12, SAMPLES = 95 };

/* Samples per step: uneven splits, a batch smaller than the replicas. */
static const size_t batches[] = {10, 7, 3, 1, 16, 5, 2, 13};

static mirror_dataset data;

static mirror_strategy *strategy(MPI_Comm *comm, size_t replicas)
{
    mirror_strategy_desc d;
    mirror_strategy *s = NULL;
    mirror_error err = {0, ""};
    memset(&d, 0, sizeof d);
    d.devices = "cpu";
    d.num_replicas = replicas;
    d.mpi_comm = comm;
    d.timeout = 60;
    CHECK(mirror_strategy_create(&d, &s, &err) == MIRROR_OK, "strategy of %zu replicas: %s", replicas, err.message);
    return s;
}

/* Deterministic mode's chunk for the models made next (0: off); with
   `sharded`, their update is sharded across processes (shard_update on)
   and clips the gradient to norm 0.5. */
static size_t det_chunk;
static int sharded;
static int replica_values; /* the models keep each replica's own values */

/* conv - relu - maxpool, dense - relu - dense; Adam; fp32 or fp16 with a
   loss scale of 2^24 that overflows at first (the first steps are skipped). */
static mirror_model *model(mirror_strategy *s, mirror_precision precision, int bn)
{
    mirror_model_desc d;
    mirror_model *m = NULL;
    memset(&d, 0, sizeof d);
    d.strategy = s;
    d.channels = 1, d.height = d.width = SIDE;
    d.max_batch = 16;
    d.seed = 5;
    d.optimizer.kind = MIRROR_OPT_ADAM;
    d.optimizer.lr = 0.003f;
    d.precision = precision;
    d.deterministic = det_chunk > 0, d.chunk = det_chunk;
    d.replica_values = replica_values;
    if (sharded) d.shard_update = MIRROR_SHARD_ON, d.optimizer.clip_norm = 0.5f;
    if (precision == MIRROR_PRECISION_FP16) {
        d.loss_scale.kind = MIRROR_SCALE_DYNAMIC;
        d.loss_scale.init_scale = 16777216.0f;
    }
    if (!s || mirror_model_create(&d, &m, NULL)) return NULL;
    mirror_conv2d(m, 4, 3, 1, 1);
    if (bn) mirror_batchnorm(m, MIRROR_BN_SYNC);
    mirror_relu(m);
    if (bn) { /* a residual block with batchnorm inside */
        mirror_residual(m);
        mirror_conv2d(m, 4, 3, 1, 1), mirror_batchnorm(m, MIRROR_BN_SYNC);
        mirror_residual_end(m);
    }
    mirror_maxpool2d(m, 2, 2);
    mirror_flatten(m), mirror_dense(m, 16), mirror_relu(m), mirror_dense(m, 10);
    if (mirror_model_build(m)) {
        mirror_model_destroy(m);
        return NULL;
    }
    return m;
}

/* Step k: batches[k % 8] samples from offset 9k of the data. */
static int step(mirror_model *m, size_t k, mirror_metrics *out)
{
    static size_t index[16];
    mirror_batch b;
    size_t i, n = batches[k % (sizeof batches / sizeof *batches)];
    for (i = 0; i < n; i++) index[i] = (9 * k + i) % SAMPLES;
    memset(&b, 0, sizeof b);
    b.x = data.x, b.labels = data.labels, b.rows = data.count, b.index = index, b.n = n;
    return mirror_train_step(m, &b, out);
}

static float *params(mirror_model *m)
{
    size_t n = mirror_num_parameters(m);
    float *p = (float *)malloc(n * sizeof(float));
    if (p) mirror_get_parameters(m, 0, p, n);
    return p;
}

/* The update sharded across processes: what only each slice's owner
   keeps current, the reduced gradient and the optimizer state, read on
   every process (each gathers them whole), is the reference's, bit for
   bit, as is the clipping norm. */
static void compare_sharded(mirror_model *w, mirror_model *r, const char *name)
{
    size_t n = mirror_num_parameters(w), ns = mirror_optimizer_state_size(w), i, same = 1;
    float *gw = (float *)malloc(n * sizeof(float)), *gr = (float *)malloc(n * sizeof(float));
    float *sw = (float *)malloc(ns * sizeof(float)), *sr = (float *)malloc(ns * sizeof(float));
    float norm = mirror_last_grad_norm(w);
    CHECK(gw && gr && sw && sr && mirror_get_gradients(w, 0, gw, n) == MIRROR_OK &&
              mirror_get_gradients(r, 0, gr, n) == MIRROR_OK && !memcmp(gw, gr, n * sizeof(float)),
          "%s: the reduced gradient, gathered from every process, is the reference's", name);
    for (i = 0; i < mirror_strategy_process(w->s).local_replicas; i++)
        same &= sw && sr && mirror_get_optimizer_state(w, i, sw, ns) == MIRROR_OK &&
                mirror_get_optimizer_state(r, 0, sr, ns) == MIRROR_OK && !memcmp(sw, sr, ns * sizeof(float));
    CHECK(same, "%s: the optimizer state, gathered from every process, is the reference's on every replica", name);
    CHECK(norm == mirror_last_grad_norm(r) && norm > 0.5f,
          "%s: the clipping norm is the reference's (%g against %g) and clips", name, (double)norm,
          (double)mirror_last_grad_norm(r));
    free(gw), free(gr), free(sw), free(sr);
}

static void compare(mirror_precision precision, size_t local, size_t processes, int bn)
{
    char name[64];
    MPI_Comm self = MPI_COMM_SELF;
    mirror_strategy *ws = strategy(NULL, local), *rs = strategy(&self, det_chunk ? 1 : local * processes);
    mirror_model *w = model(ws, precision, bn), *r = model(rs, precision, bn);
    mirror_metrics mw, mr;
    mirror_loss_scale_state sw, sr;
    mirror_process_info info = mirror_strategy_process(ws);
    float *pw = NULL, *pr = NULL, *yw = NULL, *yr = NULL;
    size_t k, n, metrics_equal = 1, steps_ok = 1;
    snprintf(name, sizeof name, "%s%s%s", sharded ? "sharded " : "", det_chunk ? "deterministic " : "",
             bn ? "fp32 batchnorm" : mirror_precision_name(precision));
    if (!w || !r) {
        CHECK(0, "%s: models", name);
        goto out;
    }
    CHECK(mirror_num_replicas(ws) == local * processes && info.processes == processes && info.local_replicas == local &&
              info.first_replica == info.rank * local,
          "%s: %zu replicas in all, rank %zu of %zu holds replicas %zu..", name, mirror_num_replicas(ws), info.rank,
          info.processes, info.first_replica);
    /* every process of the test runs on this machine: its local rank (MPI_COMM_TYPE_SHARED) is its rank */
    CHECK(info.local_rank == info.rank && mirror_strategy_process(rs).local_rank == 0,
          "%s: local rank %zu on one machine is the rank %zu; alone (MPI_COMM_SELF) it is 0", name, info.local_rank,
          info.rank);
    for (k = 0; k < STEPS; k++) {
        int a = step(w, k, &mw), b = step(r, k, &mr);
        steps_ok &= a == MIRROR_OK && b == MIRROR_OK;
        metrics_equal &= mw.count == mr.count && mw.correct == mr.correct &&
                         fabs(mw.loss_sum - mr.loss_sum) <= 1e-9 * (1.0 + fabs(mr.loss_sum));
    }
    CHECK(steps_ok, "%s: 20 steps: %s", name, mirror_model_error(w));
    CHECK(metrics_equal, "%s: every step's metrics are the reference's (last: %g/%zu/%zu against %g/%zu/%zu)", name,
          mw.loss_sum, mw.correct, mw.count, mr.loss_sum, mr.correct, mr.count);
    n = mirror_num_parameters(w);
    pw = params(w), pr = params(r);
    CHECK(pw && pr && !memcmp(pw, pr, n * sizeof(float)),
          "%s: after 20 steps the parameters are bitwise those of one process with %zu replicas", name,
          det_chunk ? 1 : local * processes);
    CHECK(mirror_check_replicas(w) == MIRROR_OK, "%s: every replica of every process agrees: %s", name,
          mirror_model_error(w));
    if (sharded) compare_sharded(w, r, name);
    if (precision != MIRROR_PRECISION_FP32) {
        CHECK(mirror_loss_scale_get(w, &sw) == MIRROR_OK && mirror_loss_scale_get(r, &sr) == MIRROR_OK &&
                  sw.skipped == sr.skipped && sw.skipped > 0 && sw.scale == sr.scale,
              "%s: the same steps skipped (%llu, reference %llu) and the same scale", name,
              (unsigned long long)sw.skipped, (unsigned long long)sr.skipped);
    }
    CHECK(mirror_evaluate(w, &data, 16, &mw) == MIRROR_OK && mirror_evaluate(r, &data, 16, &mr) == MIRROR_OK &&
              mw.count == SAMPLES && mw.correct == mr.correct && fabs(mw.loss_sum - mr.loss_sum) <= 1e-9 * mr.loss_sum,
          "%s: evaluate over every process: %zu samples, %zu correct (reference %zu)", name, mw.count, mw.correct,
          mr.correct);
    yw = (float *)malloc(SAMPLES * 10 * sizeof(float));
    yr = (float *)malloc(SAMPLES * 10 * sizeof(float));
    CHECK(yw && yr && mirror_predict(w, data.x, SAMPLES, yw) == MIRROR_OK &&
              mirror_predict(r, data.x, SAMPLES, yr) == MIRROR_OK && !memcmp(yw, yr, SAMPLES * 10 * sizeof(float)),
          "%s: predict gathers every process's rows: bitwise the reference's", name);
out:
    free(pw), free(pr), free(yw), free(yr);
    mirror_model_destroy(w), mirror_model_destroy(r);
    mirror_strategy_destroy(ws), mirror_strategy_destroy(rs);
}

/* Deterministic mode: steps of two micro-batches (6 and 3 samples, chunks
   of 3) over every process are steps of 9 on one replica, bit for bit:
   each micro-batch's chunks fold onto the sum of the one before, which
   rank 0 starts from. */
/* replica_values across processes: a process's replica i is global
   replica first + i, whose own gradient and metrics are those of replica
   first + i of the reference (one process of every replica), bit for bit;
   a replica index counts this process's replicas. */
static void test_replica_values(size_t local, size_t processes)
{
    MPI_Comm self = MPI_COMM_SELF;
    mirror_strategy *ws = strategy(NULL, local), *rs = strategy(&self, local * processes);
    mirror_model *w, *r;
    mirror_process_info me = mirror_strategy_process(ws);
    mirror_metrics mw, mr;
    size_t n, i, k, same = 1;
    float *gw, *gr;
    replica_values = 1;
    w = model(ws, MIRROR_PRECISION_FP32, 0);
    r = model(rs, MIRROR_PRECISION_FP32, 0);
    replica_values = 0;
    CHECK(w && r, "replica_values: models built");
    if (!w || !r) return;
    n = mirror_num_parameters(w);
    gw = (float *)malloc(n * sizeof(float));
    gr = (float *)malloc(n * sizeof(float));
    for (k = 0; k < 3; k++)
        CHECK(step(w, k, &mw) == MIRROR_OK && step(r, k, &mr) == MIRROR_OK, "replica_values: step %zu", k);
    for (i = 0; i < local; i++) {
        same &= mirror_get_replica_gradients(w, i, gw, n) == MIRROR_OK;
        same &= mirror_get_replica_gradients(r, me.first_replica + i, gr, n) == MIRROR_OK;
        same &= !memcmp(gw, gr, n * sizeof(float));
        same &= mirror_get_replica_metrics(w, i, &mw) == MIRROR_OK;
        same &= mirror_get_replica_metrics(r, me.first_replica + i, &mr) == MIRROR_OK;
        same &= mw.loss_sum == mr.loss_sum && mw.correct == mr.correct && mw.count == mr.count;
    }
    CHECK(same, "replica_values: this process's replica i is the reference's replica %zu + i (gradient and metrics)",
          me.first_replica);
    CHECK(mirror_get_replica_gradients(w, local, gw, n) == MIRROR_ERR_ARGUMENT,
          "replica_values: replica %zu of this process's %zu is refused", local, local);
    free(gw);
    free(gr);
    mirror_model_destroy(w);
    mirror_model_destroy(r);
    mirror_strategy_destroy(ws);
    mirror_strategy_destroy(rs);
}

static void test_deterministic_accumulate(size_t local)
{
    MPI_Comm self = MPI_COMM_SELF;
    mirror_strategy *ws = strategy(NULL, local), *rs = strategy(&self, 1);
    mirror_model *w, *r;
    float *pw = NULL, *pr = NULL;
    size_t k, i, index[9];
    int ok;
    det_chunk = 3;
    w = model(ws, MIRROR_PRECISION_FP32, 0), r = model(rs, MIRROR_PRECISION_FP32, 0);
    ok = w && r;
    for (k = 0; ok && k < 8; k++) {
        mirror_batch b[2];
        memset(b, 0, sizeof b);
        for (i = 0; i < 9; i++) index[i] = (11 * k + i) % SAMPLES;
        for (i = 0; i < 2; i++) b[i].x = data.x, b[i].labels = data.labels, b[i].rows = data.count;
        b[0].index = index, b[0].n = 6, b[1].index = index + 6, b[1].n = 3;
        ok = mirror_train_steps(w, b, 2, NULL) == MIRROR_OK;
        b[0].n = 9;
        ok = ok && mirror_train_step(r, &b[0], NULL) == MIRROR_OK;
    }
    pw = ok ? params(w) : NULL, pr = ok ? params(r) : NULL;
    CHECK(pw && pr && !memcmp(pw, pr, mirror_num_parameters(w) * sizeof(float)),
          "%sdeterministic: 8 steps of micro-batches of 6 and 3 over every process are one replica's steps of 9, bit "
          "for bit", sharded ? "sharded " : "");
    det_chunk = 0;
    free(pw), free(pr);
    mirror_model_destroy(w), mirror_model_destroy(r);
    mirror_strategy_destroy(ws), mirror_strategy_destroy(rs);
}

/* mirror_all_reduce_sum of lengths around the fold's pieces (2^16 floats)
   against the reference: bitwise, every element added in replica order. */
static void test_all_reduce(size_t local, size_t processes)
{
    static const size_t lengths[] = {0, 1, 65533, 65535, 65536, 65537, 200003};
    MPI_Comm self = MPI_COMM_SELF;
    mirror_strategy *ws = strategy(NULL, local), *rs = strategy(&self, local * processes);
    mirror_process_info info = mirror_strategy_process(ws);
    size_t li, r, i, world = local * processes;
    float **mine = (float **)calloc(world, sizeof(float *)), **all = (float **)calloc(world, sizeof(float *));
    for (li = 0; ws && rs && mine && all && li < sizeof lengths / sizeof *lengths; li++) {
        size_t n = lengths[li];
        int ok = 1;
        for (r = 0; r < world; r++) {
            mine[r] = (float *)malloc((n ? n : 1) * sizeof(float)), all[r] = (float *)malloc((n ? n : 1) * sizeof(float));
            for (i = 0; i < n; i++) /* values whose sum depends on the order of the additions */
                all[r][i] = (float)((r * 7919 + i * 104729) % 1000003) * 1e-3f + (float)(r + 1) * 1e5f;
        }
        for (r = 0; r < local; r++) memcpy(mine[r], all[info.first_replica + r], n * sizeof(float));
        CHECK(mirror_all_reduce_sum(ws, mine, n) == MIRROR_OK && mirror_all_reduce_sum(rs, all, n) == MIRROR_OK,
              "all-reduce of %zu floats", n);
        for (r = 0; r < local; r++) ok &= !memcmp(mine[r], all[0], n * sizeof(float));
        CHECK(ok, "all-reduce of %zu floats across processes: bitwise the one-process sum", n);
        for (r = 0; r < world; r++) free(mine[r]), free(all[r]);
    }
    free(mine), free(all);
    mirror_strategy_destroy(ws), mirror_strategy_destroy(rs);
}

/* fit checks the replicas every 3 steps and passes; then one parameter of
   the last replica (of the last process) is changed by hand, and the check
   names that replica and its process, in every process. */
static void test_check_replicas(size_t local)
{
    mirror_strategy *s = strategy(NULL, local);
    mirror_model *m = model(s, MIRROR_PRECISION_FP32, 0);
    mirror_process_info info = mirror_strategy_process(s);
    mirror_fit_desc fd;
    char want[64];
    if (!m) return;
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 1, fd.batch = 16, fd.progress = MIRROR_PROGRESS_NONE;
    fd.check_replicas_every = 3;
    CHECK(mirror_fit(m, &fd, NULL) == MIRROR_OK, "fit with a replica check every 3 steps: %s", mirror_model_error(m));
    if (info.rank + 1 == info.processes) m->rep[local - 1].params[7] += 1.0f;
    snprintf(want, sizeof want, "replica %zu (rank %zu, its replica %zu)", local * info.processes - 1,
             info.processes - 1, local - 1);
    CHECK(mirror_check_replicas(m) == (info.processes * local > 1 ? MIRROR_ERR_REPLICAS : MIRROR_OK) &&
              (info.processes * local == 1 || strstr(mirror_model_error(m), want)),
          "a replica changed by hand is named on every process: %s", mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* Processes that differ in what a step depends on do not train: the last
   process's learning rate, then one pixel of its data, fail the build and
   the fit on every process, naming what differs and where. */
static void test_disagree(size_t local)
{
    mirror_strategy *s = strategy(NULL, local);
    mirror_process_info info = mirror_strategy_process(s);
    mirror_model_desc d;
    mirror_model *m = NULL;
    mirror_fit_desc fd;
    mirror_dataset mine;
    char want[96];
    int last, rc;
    if (!s) return;
    last = info.rank + 1 == info.processes && info.processes > 1;
    memset(&d, 0, sizeof d);
    d.strategy = s, d.channels = 1, d.height = d.width = SIDE, d.max_batch = 16, d.seed = 5;
    d.optimizer.kind = MIRROR_OPT_ADAM, d.optimizer.lr = last ? 0.002f : 0.003f;
    CHECK(mirror_model_create(&d, &m, NULL) == MIRROR_OK && mirror_flatten(m) == MIRROR_OK &&
              mirror_dense(m, 10) == MIRROR_OK,
          "a model to build");
    snprintf(want, sizeof want, "differ from rank 0 in the optimizer and its settings (on rank %zu)",
             info.processes - 1);
    rc = mirror_model_build(m);
    CHECK(info.processes == 1 ? rc == MIRROR_OK : rc == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), want),
          "another learning rate on the last process fails the build everywhere: %s", mirror_model_error(m));
    mirror_model_destroy(m);
    d.optimizer.lr = 0.003f;
    CHECK(mirror_model_create(&d, &m, NULL) == MIRROR_OK && mirror_flatten(m) == MIRROR_OK &&
              mirror_dense(m, 10) == MIRROR_OK && mirror_model_build(m) == MIRROR_OK,
          "alike, the build succeeds: %s", m ? mirror_model_error(m) : "no model");
    small_digits(&mine, SAMPLES, 3, SIDE, 2);
    if (last) mine.x[5 * SIDE * SIDE + 7] += 0.5f;
    memset(&fd, 0, sizeof fd);
    fd.train = &mine, fd.epochs = 1, fd.batch = 16, fd.progress = MIRROR_PROGRESS_NONE;
    snprintf(want, sizeof want, "the training data (its size or contents) (on rank %zu)", info.processes - 1);
    rc = mirror_fit(m, &fd, NULL);
    CHECK(info.processes == 1 ? rc == MIRROR_OK : rc == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), want),
          "one pixel of other data on the last process fails the fit everywhere: %s", mirror_model_error(m));
    mirror_dataset_free(&mine);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* A checkpoint loaded by the last process only, while the others go on to
   fit: every process fails in the first exchange of both calls, each
   naming the calls and the file (not in exchanges of other shapes, which
   Open MPI ends with MPI_ERR_TRUNCATE). Then every process loads a
   checkpoint, the last another one: fit fails everywhere, naming both. */
static void test_loads(size_t local)
{
    mirror_strategy *s = strategy(NULL, local);
    mirror_process_info info = mirror_strategy_process(s);
    mirror_model *m = s ? model(s, MIRROR_PRECISION_FP32, 0) : NULL;
    mirror_fit_desc fd;
    mirror_metrics out;
    char a[64], b[64], want[200];
    int last, rc, pid = (int)getpid();
    if (!m) return;
    last = info.rank + 1 == info.processes;
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD); /* rank 0's names for every process */
    snprintf(a, sizeof a, "/tmp/test_mpi_%d_a.ckpt", pid);
    snprintf(b, sizeof b, "/tmp/test_mpi_%d_b.ckpt", pid);
    CHECK(mirror_checkpoint_save(m, a, NULL, 1) == MIRROR_OK && step(m, 0, &out) == MIRROR_OK &&
              mirror_checkpoint_save(m, b, NULL, 1) == MIRROR_OK,
          "two checkpoints, a step apart: %s", mirror_model_error(m));
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.epochs = 1, fd.batch = 16, fd.progress = MIRROR_PROGRESS_NONE;
    if (info.processes > 1) {
        rc = last ? mirror_checkpoint_load(m, a, 1, NULL) : mirror_fit(m, &fd, NULL);
        snprintf(want, sizeof want, "rank %zu in mirror_checkpoint_load, parameters from the checkpoint %s (crc32",
                 info.processes - 1, a);
        CHECK(rc == MIRROR_ERR_ARGUMENT &&
                  strstr(mirror_model_error(m),
                         "the processes are in different calls: rank 0 in mirror_fit, parameters from no file") &&
                  strstr(mirror_model_error(m), want),
              "a checkpoint loaded by the last process alone fails %s there and fit elsewhere, naming both: %s",
              "the load", mirror_model_error(m));
    }
    rc = mirror_checkpoint_load(m, last ? b : a, 1, NULL);
    CHECK(rc == MIRROR_OK, "each process loads a checkpoint: %s", mirror_model_error(m));
    rc = mirror_fit(m, &fd, NULL);
    snprintf(want, sizeof want, "the file the parameters were loaded from (on rank %zu): rank 0's is the checkpoint %s "
             "(crc32", info.processes - 1, a);
    CHECK(info.processes == 1 ? rc == MIRROR_OK : rc == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), want) &&
                                                      strstr(mirror_model_error(m), b),
          "the last process's other checkpoint fails the fit everywhere, naming both: %s", mirror_model_error(m));
    if (info.rank == 0) {
        snprintf(want, sizeof want, "%s.lock", a), remove(want), remove(a);
        snprintf(want, sizeof want, "%s.lock", b), remove(want), remove(b);
    }
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* A result that fails on the last process only reaches every process. */
static void test_agree(size_t local)
{
    mirror_strategy *s = strategy(NULL, local);
    mirror_process_info info = mirror_strategy_process(s);
    mirror_error err = {0, ""};
    int mine = MIRROR_OK, rc;
    if (!s) return;
    CHECK(mirror_agree(s, MIRROR_OK, &err) == MIRROR_OK, "agree: all succeeded");
    if (info.rank + 1 == info.processes) {
        mine = MIRROR_ERR_IO;
        snprintf(err.message, sizeof err.message, "data/train-images: cannot open");
    }
    rc = mirror_agree(s, mine, &err);
    if (info.processes == 1)
        CHECK(rc == MIRROR_ERR_IO, "agree, one process: its own result");
    else if (mine)
        CHECK(rc == MIRROR_ERR_IO, "agree: the failing process gets its own code (%d)", rc);
    else
        CHECK(rc == MIRROR_ERR_PEER && strstr(err.message, "failed: data/train-images: cannot open"),
              "agree: the others get MIRROR_ERR_PEER and its message: %s", err.message);
    mirror_strategy_destroy(s);
}

int main(int argc, char **argv)
{
    int provided, rank = 0, size = 1, counts[2], totals[2] = {0, 0};
    char name[64];
    size_t local = argc > 1 ? (size_t)atoi(argv[1]) : 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    small_digits(&data, SAMPLES, 3, SIDE, 2);
    compare(MIRROR_PRECISION_FP32, local, (size_t)size, 0);
    compare(MIRROR_PRECISION_FP16, local, (size_t)size, 0);
    compare(MIRROR_PRECISION_FP32, local, (size_t)size, 1); /* SyncBatchNorm across processes */
    det_chunk = 2; /* deterministic mode: the reference is one replica */
    compare(MIRROR_PRECISION_FP32, local, (size_t)size, 0);
    compare(MIRROR_PRECISION_FP32, local, (size_t)size, 1);
    det_chunk = 0;
    sharded = 1; /* the update sharded across processes */
    compare(MIRROR_PRECISION_FP32, local, (size_t)size, 0);
    compare(MIRROR_PRECISION_FP16, local, (size_t)size, 0);
    det_chunk = 2;
    compare(MIRROR_PRECISION_FP32, local, (size_t)size, 1);
    det_chunk = 0;
    test_deterministic_accumulate(local);
    sharded = 0;
    test_deterministic_accumulate(local);
    test_all_reduce(local, (size_t)size);
    test_replica_values(local, (size_t)size);
    test_check_replicas(local);
    test_agree(local);
    test_disagree(local);
    test_loads(local);
    mirror_dataset_free(&data);
    counts[0] = check_passed, counts[1] = check_failed;
    MPI_Reduce(counts, totals, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank != 0) return check_failed != 0;
    check_passed = totals[0], check_failed = totals[1]; /* every process's checks */
    snprintf(name, sizeof name, "test_mpi_%dx%zu", size, local);
    return check_done(name);
}
