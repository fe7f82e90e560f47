/* test_memory.c - a model's memory: a build that fails at any of its
   allocations frees what it took and leaves a model that destroys cleanly
   or builds again; a build that would take more memory than the machine
   has, or than ulimit -v allows, is refused before it allocates anything,
   naming both figures; what the system says of its memory (MemTotal, a
   cgroup's limit, a balloon that lets it grow), read from trees made
   here, and the override (host_memory, $MIRROR_HOST_MEMORY); a batch with
   fewer rows than samples is refused before it is read. */
#define _POSIX_C_SOURCE 200809L /* setrlimit, sysconf; mirror.h is not the first include */
#include "alloc_count.h"
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The errors the failures log would flood the output: counted instead. */
static int log_errors;
static void quiet(void *user, int level, const char *message)
{
    (void)user, (void)message;
    log_errors += level == MIRROR_LOG_ERROR;
}

/* What a build allocates depends on the model: batchnorm (running
   statistics, per-replica sums), deterministic mode (a gradient arena per
   chunk), mixed precision (16-bit copies, fp32 scratch), the optimizer's
   state (shared by CPU replicas, or one per replica unsharded). */
typedef struct config {
    const char *name;
    mirror_precision precision;
    int deterministic, batchnorm;
    mirror_optimizer_kind optimizer;
    mirror_shard_update shard;
} config;

enum { SIDE = 6, BATCH = 8, CLASSES = 3 };

/* A small CNN over SIDE x SIDE inputs, not yet built. */
static mirror_model *unbuilt(mirror_strategy *s, const config *c)
{
    mirror_model_desc d = model_desc(s, 1, SIDE, SIDE, BATCH, 3);
    d.precision = c->precision;
    d.deterministic = c->deterministic, d.chunk = c->deterministic ? 2 : 0;
    d.optimizer = optimizer_of(c->optimizer, 0.0f);
    d.shard_update = c->shard;
    return new_model(&d, NULL, "conv 4 3 1 1, %srelu, maxpool 2 2, flatten, dense %d", c->batchnorm ? "batchnorm, " : "",
                     CLASSES);
}

static float X[BATCH * SIDE * SIDE];
static int32_t Y[BATCH];

/* One training step on the batch of BATCH samples: the model works. */
static int trains(mirror_model *m)
{
    mirror_batch b;
    mirror_metrics out;
    memset(&b, 0, sizeof b);
    b.x = X, b.labels = Y, b.n = BATCH;
    return mirror_train_step(m, &b, &out) == MIRROR_OK && out.count == BATCH;
}

/* Allocation k of the build fails, for every k until the build needs no
   more: each failure returns MIRROR_ERR_NO_MEMORY with a message and
   frees every byte the build took; the model is then destroyed at once
   (a pointer freed by the failed build and again by destroy was "double
   free or corruption"), or built again, trained and destroyed. */
static void test_failed_builds(mirror_strategy *s, const config *c)
{
    long before = live_allocs, points;
    int ok = 1, done = 0, again;
    for (points = 0; !done && points < 10000; points++)
        for (again = 0; again < 2 && !done; again++) {
            mirror_model *m = unbuilt(s, c);
            long made;
            int rc;
            if (!m) {
                CHECK(0, "%s: the model is created", c->name);
                return;
            }
            made = live_allocs;
            allocs_before_failure = points;
            rc = mirror_model_build(m);
            done = allocs_before_failure > 0; /* the build ended before its allocation number `points` */
            allocs_before_failure = -1;
            if (done) {
                ok &= rc == MIRROR_OK && trains(m);
            } else if (rc != MIRROR_OK) {
                int freed = live_allocs == made, refused = rc == MIRROR_ERR_NO_MEMORY && mirror_model_error(m)[0] &&
                                                           mirror_num_parameters(m) == 0;
                int rebuilt = !again || (mirror_model_build(m) == MIRROR_OK && trains(m));
                if (!(freed && refused && rebuilt))
                    fprintf(stderr, "%s: allocation %ld failing: rc %d (%s), %ld left over, built again: %d\n",
                            c->name, points, rc, mirror_model_error(m), live_allocs - made, rebuilt);
                ok &= freed && refused && rebuilt;
            }
            mirror_model_destroy(m);
            ok &= live_allocs == before;
        }
    CHECK(done && points > 20 && ok,
          "%s: each of the build's %ld allocations failing in turn: MIRROR_ERR_NO_MEMORY, nothing kept, the model "
          "destroyed without a leak or a second free, or built again and trained",
          c->name, points - 1);
}

/* A dense model over 1024x32x32 inputs, max_batch samples. */
static mirror_model *wide(mirror_strategy *s, size_t max_batch)
{
    mirror_model_desc d = model_desc(s, 1024, 32, 32, max_batch, 0);
    return new_model(&d, NULL, "flatten, dense 2");
}

/* A strategy of 2 CPU replicas whose builds plan on host_memory. */
static mirror_strategy *planned(const char *host_memory, mirror_error *err)
{
    mirror_strategy_desc d;
    mirror_strategy *s = NULL;
    memset(&d, 0, sizeof d);
    d.devices = "cpu:2";
    d.host_memory = host_memory;
    return mirror_strategy_create(&d, &s, err) == MIRROR_OK ? s : NULL;
}

/* A build beyond the machine's memory (2^24 samples of 4 MiB: 64 TiB and
   more) is refused before it allocates a byte, with the need and the
   memory there is; the model stays destroyable. Before the check, malloc
   either failed (and the failed build crashed) or, overcommitted, the
   zeroing of the arenas grew until the kernel killed the process. The
   strategy plans on 16 GiB: whether this machine's physical memory
   refuses or only warns depends on it (mirror__host_plan, tested below),
   and a build that went on would ask malloc for 64 TiB. */
static void test_beyond_the_machine(void)
{
    mirror_error err = {0, ""};
    mirror_strategy *s = planned("16G", &err);
    mirror_model *m = s ? wide(s, (size_t)1 << 24) : NULL;
    const char *have = "and the host memory given (host_memory, $MIRROR_HOST_MEMORY) is 16.0 GiB: lower";
    char text[400];
    long live, total;
    int rc;
    if (!m) {
        CHECK(0, "the wide model is created: %s", err.message);
        mirror_strategy_destroy(s);
        return;
    }
    live = live_allocs, total = total_allocs;
    rc = mirror_model_build(m);
    snprintf(text, sizeof text, "%s", mirror_model_error(m));
    CHECK(rc == MIRROR_ERR_NO_MEMORY && total_allocs == total && live_allocs == live,
          "a build of 64 TiB and more: MIRROR_ERR_NO_MEMORY before any allocation (%d, %ld allocations): %s", rc,
          total_allocs - total, text);
    CHECK(strstr(text, "2 replicas need ") && strstr(text, " TiB of host memory") && strstr(text, have) &&
              strstr(text, "lower max_batch (16777216, the global batch)"),
          "the message gives the need, the memory there is (%s) and what to lower: %s", have, text);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

/* A file of the fake tree under root, its directories made. */
static void put(const char *root, const char *path, const char *text)
{
    char full[512], *slash;
    FILE *f;
    snprintf(full, sizeof full, "%s%s", root, path);
    for (slash = strchr(full + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(full, 0755);
        *slash = '/';
    }
    if (text && (f = fopen(full, "w")) != NULL) {
        fputs(text, f);
        fclose(f);
    } else if (!text) {
        mkdir(full, 0755);
    }
}

/* What the system says of its memory, read from trees made here: a fixed
   machine with a cgroup v2 limit above the process's own cgroup; a microVM
   whose balloon (or virtio-mem) lets its memory grow; cgroup v1; a system
   with nothing to read. Then the plan from each, with and without the
   override: only the physical memory of a machine that says it cannot
   grow refuses; ulimits and cgroups refuse whatever the override says. */
static void test_host_facts(void)
{
    char root[] = "/tmp/mirror_host_XXXXXX", cmd[600];
    mirror__host_facts f;
    mirror__host_budget b;
    struct rlimit as, data;
    int limited;
    if (!mkdtemp(root)) {
        CHECK(0, "a temporary directory");
        return;
    }
    limited = (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) ||
              (getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY);

    mirror__host_facts_read(root, &f);
    CHECK(f.physical == 0.0 && f.cgroup == 0.0 && f.grows && !*f.grows,
          "an empty tree (no /proc/meminfo: not a Linux): no MemTotal, no cgroup, nothing grows (%g, %g, %s)",
          f.physical, f.cgroup, f.grows ? f.grows : "NULL");
    put(root, "/proc/meminfo", "MemTotal:        1048576 kB\nMemFree:          524288 kB\n");
    mirror__host_facts_read(root, &f);
    CHECK(f.physical == 1073741824.0 && f.grows == NULL,
          "a Linux with no /sys: MemTotal read, cannot tell whether memory grows (%g, %s)", f.physical,
          f.grows ? f.grows : "NULL");
    f.address_space = f.data = 0.0;
    b = mirror__host_plan(&f, 0.0, 0);
    CHECK(b.soft == 1073741824.0 && strstr(b.advisory, "does not say"),
          "no /sys: the physical memory is advice only (%s)", b.advisory);

    put(root, "/proc/self/cgroup", "0::/user.slice/job\n");
    put(root, "/sys/fs/cgroup/user.slice/memory.max", "3221225472\n");
    put(root, "/sys/fs/cgroup/user.slice/job/memory.max", "max\n");
    put(root, "/sys/devices/system/memory", NULL);
    mirror__host_facts_read(root, &f);
    CHECK(f.physical == 1073741824.0 && f.cgroup == 3221225472.0 && f.grows && !*f.grows,
          "a fixed machine: MemTotal 1 GiB, the parent cgroup's 3 GiB (the job's own is max), nothing grows (%g, "
          "%g, \"%s\")", f.physical, f.cgroup, f.grows ? f.grows : "NULL");
    f.address_space = f.data = 0.0;
    b = mirror__host_plan(&f, 0.0, 0);
    CHECK(b.soft == 1073741824.0 && !b.advisory[0] && b.hard == 3221225472.0 && !strcmp(b.hard_what, "cgroup's memory limit"),
          "fixed: the physical memory refuses (%g, \"%s\"), the cgroup too (%g, %s)", b.soft, b.advisory, b.hard,
          b.hard_what ? b.hard_what : "NULL");
    b = mirror__host_plan(&f, 0.0, 1);
    CHECK(b.soft == 1073741824.0 && strstr(b.advisory, "is advisory") && b.hard == 3221225472.0,
          "fixed, MIRROR_HOST_MEMORY=advisory: the physical memory warns, the cgroup still refuses (\"%s\")",
          b.advisory);
    b = mirror__host_plan(&f, 64.0 * 1073741824.0, 0);
    CHECK(b.soft == 64.0 * 1073741824.0 && !b.advisory[0] && strstr(b.soft_what, "MIRROR_HOST_MEMORY") &&
              b.hard == 3221225472.0,
          "fixed, MIRROR_HOST_MEMORY=64G: 64 GiB in place of the physical memory, refusing; the cgroup too");
    f.address_space = 1e9;
    b = mirror__host_plan(&f, 0.0, 1);
    CHECK(b.hard == 1e9 && strstr(b.hard_what, "ulimit -v"), "the lowest hard limit names itself: %s", b.hard_what);

    put(root, "/sys/bus/virtio/drivers/virtio_balloon/bind", "");
    mirror__host_facts_read(root, &f);
    CHECK(f.grows && !*f.grows, "a balloon driver with no device bound: nothing grows (\"%s\")",
          f.grows ? f.grows : "NULL");
    put(root, "/sys/bus/virtio/drivers/virtio_balloon/virtio0", NULL);
    put(root, "/proc/vmstat", "nr_free_pages 100\nnr_balloon_pages 0\n");
    mirror__host_facts_read(root, &f);
    CHECK(f.grows && !*f.grows && f.balloon == 0.0,
          "a bound virtio balloon that holds nothing (a cloud machine's): nothing grows (\"%s\")",
          f.grows ? f.grows : "NULL");
    put(root, "/proc/vmstat", "nr_free_pages 100\nnr_balloon_pages 262144\n");
    mirror__host_facts_read(root, &f);
    f.address_space = f.data = 0.0;
    b = mirror__host_plan(&f, 0.0, 0);
    CHECK(f.grows && !strcmp(f.grows, "a virtio balloon") && b.soft == 1073741824.0 &&
              strstr(b.advisory, "a virtio balloon lets this machine's memory grow"),
          "a microVM's balloon holding pages (%g bytes): MemTotal warns only (\"%s\")", f.balloon, b.advisory);
    put(root, "/sys/bus/virtio/drivers/virtio_mem/virtio3", NULL);
    mirror__host_facts_read(root, &f);
    CHECK(f.grows && !strcmp(f.grows, "a virtio-mem device"), "virtio-mem: %s", f.grows ? f.grows : "NULL");

    put(root, "/proc/self/cgroup", "7:cpuacct,memory:/box\n3:pids:/box\n");
    put(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n");
    put(root, "/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "9223372036854771712\n");
    put(root, "/sys/fs/cgroup/pids/box/memory.limit_in_bytes", "1024\n");
    mirror__host_facts_read(root, &f);
    CHECK(f.cgroup == 2147483648.0, "cgroup v1: the memory controller's limits, v1's 'none' passed over (%g)",
          f.cgroup);
    if (!limited) {
        mirror__host_facts_read("", &f);
        CHECK(f.physical > 0.0 && f.address_space == 0.0 && f.data == 0.0,
              "this machine: MemTotal read, no ulimit (%g)", f.physical);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0, "the tree removed");
}

/* host_memory and $MIRROR_HOST_MEMORY: sizes and "advisory" taken, the
   desc's before the environment's, anything else refused naming it. */
static void test_host_override(void)
{
    static const char *const good[] = {"advisory", "64G", "512M", "1.5T", "1048576", "8GiB", "300k", "2TB"};
    static const char *const bad[] = {"lots", "12X", "-4G", "0", "1.5Q", "8 G", "nan", "inf", "1e30", "8Gi"};
    mirror_error err = {0, ""};
    mirror_strategy *s;
    mirror_strategy_desc q;
    double bytes;
    int advisory;
    size_t i;
    for (i = 0; i < sizeof good / sizeof *good; i++)
        CHECK(mirror__host_override(good[i], "host_memory", &bytes, &advisory, &err) == MIRROR_OK &&
                  (advisory || bytes >= 1024.0),
              "host_memory \"%s\" is taken: %s", good[i], err.message);
    mirror__host_override("1.5T", "host_memory", &bytes, &advisory, &err);
    CHECK(bytes == 1.5 * 1099511627776.0 && !advisory, "1.5T is 1.5 x 2^40 bytes (%g)", bytes);
    for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        s = planned(bad[i], &err);
        CHECK(!s && err.code == MIRROR_ERR_ARGUMENT && strstr(err.message, "host_memory \"") &&
                  strstr(err.message, "advisory"),
              "host_memory \"%s\" is refused, naming the field and the words it takes: %s", bad[i], err.message);
        mirror_strategy_destroy(s);
    }
    s = planned("1.5T", &err);
    q = mirror_strategy_query_desc(s);
    CHECK(s && q.host_memory && !strcmp(q.host_memory, "1.5T"), "query_desc gives host_memory back: %s",
          s ? q.host_memory : err.message);
    mirror_strategy_destroy(s);
    setenv("MIRROR_HOST_MEMORY", "12X", 1);
    s = planned(NULL, &err);
    CHECK(!s && err.code == MIRROR_ERR_ARGUMENT && strstr(err.message, "MIRROR_HOST_MEMORY \"12X\""),
          "a bad $MIRROR_HOST_MEMORY is refused, naming it: %s", err.message);
    mirror_strategy_destroy(s);
    s = planned("advisory", &err);
    q = mirror_strategy_query_desc(s);
    CHECK(s && !strcmp(q.host_memory, "advisory"), "the desc's host_memory before the environment's: %s",
          s ? q.host_memory : err.message);
    mirror_strategy_destroy(s);
    setenv("MIRROR_HOST_MEMORY", "advisory", 1);
    s = planned(NULL, &err);
    q = mirror_strategy_query_desc(s);
    CHECK(s && !strcmp(q.host_memory, "advisory"), "$MIRROR_HOST_MEMORY where the desc has none: %s",
          s ? q.host_memory : err.message);
    mirror_strategy_destroy(s);
    unsetenv("MIRROR_HOST_MEMORY");
}

/* Whether this runs under a sanitizer or valgrind: they reserve terabytes
   of address space, which a lowered ulimit -v would refuse them. */
static int sanitized(void)
{
    const char *preload = getenv("LD_PRELOAD");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
    return 1;
#endif
#endif
    return preload && strstr(preload, "vgpreload") != NULL;
}

/* Under an address-space limit (ulimit -v) lower than the arenas, the
   build is refused before it allocates, naming the limit; with the limit
   raised again the same model builds and trains. The limit is set below
   what the process holds already: nothing may be allocated until it is
   restored, and the build allocates nothing before its check. */
static void test_address_limit(mirror_strategy *s)
{
    struct rlimit old, low;
    mirror_model *m;
    char text[300], limit[80], figure[32];
    long live, total;
    int rc, rebuilt;
    if (sanitized()) {
        printf("test_memory: the ulimit -v case skipped under a sanitizer or valgrind\n");
        return;
    }
    if (!(m = wide(s, 8))) { /* 4 samples of 4 MiB a replica: about 200 MiB in all */
        CHECK(0, "the wide model is created");
        return;
    }
    CHECK(getrlimit(RLIMIT_AS, &old) == 0, "getrlimit(RLIMIT_AS)");
    low = old;
    low.rlim_cur = (rlim_t)128 << 20;
    if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < low.rlim_cur) low.rlim_cur = old.rlim_cur;
    snprintf(limit, sizeof limit, "the address-space limit (ulimit -v) is %s",
             mirror__bytes_text((double)low.rlim_cur, figure, sizeof figure));
    live = live_allocs, total = total_allocs;
    if (setrlimit(RLIMIT_AS, &low) != 0) {
        CHECK(0, "setrlimit(RLIMIT_AS, 128 MiB)");
        mirror_model_destroy(m);
        return;
    }
    rc = mirror_model_build(m);
    setrlimit(RLIMIT_AS, &old);
    snprintf(text, sizeof text, "%s", mirror_model_error(m));
    CHECK(rc == MIRROR_ERR_NO_MEMORY && total_allocs == total && live_allocs == live,
          "under ulimit -v of 128 MiB: MIRROR_ERR_NO_MEMORY before any allocation (%d, %ld allocations): %s", rc,
          total_allocs - total, text);
    CHECK(strstr(text, limit) && strstr(text, " MiB of host memory") &&
              strstr(text, "lower max_batch (8, "),
          "the message names the limit, the need and what to lower: %s", text);
    rebuilt = mirror_model_build(m);
    CHECK(rebuilt == MIRROR_OK && mirror_num_parameters(m) == 2 * 1024 * 32 * 32 + 2,
          "with the limit raised, the refused model builds: %s", mirror_model_error(m));
    mirror_model_destroy(m);
}

/* mirror_batch.rows without an index: sample i is row i, so fewer rows
   than samples would read past the caller's arrays (AddressSanitizer:
   heap-buffer-overflow in mirror__check_batch). Every call that takes a
   batch refuses it; rows 0 (not given) and rows >= n are as before. */
static void test_batch_rows(mirror_strategy *s)
{
    static const config plain = {"fp32", MIRROR_PRECISION_FP32, 0, 0, MIRROR_OPT_SGD, MIRROR_SHARD_AUTO};
    mirror_model *m = unbuilt(s, &plain);
    float *x = (float *)malloc(3 * SIDE * SIDE * sizeof(float));
    int32_t *y = (int32_t *)malloc(3 * sizeof(int32_t));
    mirror_batch b;
    mirror_metrics out;
    size_t i;
    if (!m || !x || !y || mirror_model_build(m)) {
        CHECK(0, "the model builds and the buffers are allocated");
        free(x), free(y), mirror_model_destroy(m);
        return;
    }
    for (i = 0; i < 3 * SIDE * SIDE; i++) x[i] = 0.1f * (float)(i % 7);
    for (i = 0; i < 3; i++) y[i] = (int32_t)i;
    memset(&b, 0, sizeof b);
    b.x = x, b.labels = y, b.rows = 3, b.n = BATCH;
    CHECK(mirror_train_step(m, &b, &out) == MIRROR_ERR_ARGUMENT &&
              strstr(mirror_model_error(m), "mirror_train_step: batch.n is 8 but batch.rows only 3"),
          "a step on 8 samples of 3 rows is refused: %s", mirror_model_error(m));
    CHECK(mirror_train_steps(m, &b, 1, &out) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "rows only 3"),
          "mirror_train_steps too: %s", mirror_model_error(m));
    CHECK(mirror_evaluate_batch(m, &b, &out) == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "rows only 3"),
          "mirror_evaluate_batch too: %s", mirror_model_error(m));
    b.n = 3;
    CHECK(mirror_train_step(m, &b, &out) == MIRROR_OK && out.count == 3, "3 samples of 3 rows train");
    b.rows = 0;
    CHECK(mirror_train_step(m, &b, &out) == MIRROR_OK && out.count == 3, "rows 0 without an index: n rows, as before");
    free(x), free(y);
    mirror_model_destroy(m);
}

int main(void)
{
    static const config configs[] = {
        {"fp32, SGD, the shared update", MIRROR_PRECISION_FP32, 0, 0, MIRROR_OPT_SGD, MIRROR_SHARD_AUTO},
        {"fp32, deterministic, batchnorm", MIRROR_PRECISION_FP32, 1, 1, MIRROR_OPT_SGD, MIRROR_SHARD_AUTO},
        {"fp16, Adam, unsharded, batchnorm", MIRROR_PRECISION_FP16, 0, 1, MIRROR_OPT_ADAM, MIRROR_SHARD_OFF},
        {"bf16, deterministic, AdamW", MIRROR_PRECISION_BF16, 1, 0, MIRROR_OPT_ADAMW, MIRROR_SHARD_AUTO}};
    mirror_strategy *s;
    size_t i;
    for (i = 0; i < BATCH * SIDE * SIDE; i++) X[i] = (float)((i * 5) % 9) / 8.0f - 0.5f;
    for (i = 0; i < BATCH; i++) Y[i] = (int32_t)(i % CLASSES);
    mirror_set_logger(quiet, NULL);
    if (!(s = checked_strategy("cpu", 2))) return check_done("test_memory");
    for (i = 0; i < sizeof configs / sizeof *configs; i++) test_failed_builds(s, &configs[i]);
    test_beyond_the_machine();
    test_host_facts();
    test_host_override();
    test_address_limit(s);
    test_batch_rows(s);
    mirror_strategy_destroy(s);
    mirror_set_logger(NULL, NULL);
    CHECK(live_allocs == 0, "every allocation freed (%ld live)", live_allocs);
    return check_done("test_memory");
}
