/* test_bare.c - mirror.h without its file formats (MIRROR_NO_LOADERS and
   MIRROR_NO_OUTPUTS, defined here, so that every build of this file is the
   bare one): datasets from arrays and the synthetic digits still train,
   fit still runs and saves its checkpoints, and a fit whose desc asks for
   a side output fails before its first step with MIRROR_ERR_ARGUMENT
   naming the macro, writing nothing. (tests/run.sh checks that the
   left-out calls are not declared.) */
#define _POSIX_C_SOURCE 200809L /* mkdtemp; mirror.h is not the first include */
#include "alloc_count.h"
#define MIRROR_NO_LOADERS
#define MIRROR_NO_OUTPUTS
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "digits.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static mirror_dataset data;

static mirror_fit_desc fit_desc(void)
{
    mirror_fit_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.train = &data, fd.validation = &data, fd.epochs = 2, fd.batch = 12;
    fd.progress = MIRROR_PROGRESS_NONE;
    return fd;
}

static mirror_model *model(mirror_strategy *s)
{
    mirror_model_desc d = model_desc(s, 1, 8, 8, 12, 3);
    d.deterministic = 1;
    d.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.0f);
    return build_model(&d, NULL, "flatten, dense 8, relu, dense 10");
}

int main(void)
{
    static const char *const fields[4] = {"history", "plot", "trace", "tensorboard"};
    char dir[] = "/tmp/mirror_bare_XXXXXX", path[64], ckpt[64];
    mirror_strategy *s = checked_strategy("cpu:2", 2);
    mirror_model *m = model(s), *again = model(s);
    mirror_epoch_log last;
    mirror_checkpoint_info info;
    struct stat st;
    float a[1024], b[1024];
    size_t i, n;
    int rc;
    small_digits(&data, 50, 5, 8, 3);
    CHECK(mkdtemp(dir) != NULL, "a temporary directory");
    snprintf(path, sizeof path, "%s/out", dir);
    snprintf(ckpt, sizeof ckpt, "%s/bare.ckpt", dir);

    /* each output asked for: refused before the first step, naming the macro and the field */
    for (i = 0; i < 4; i++) {
        mirror_fit_desc fd = fit_desc();
        const char **at = i == 0 ? &fd.history : i == 1 ? &fd.plot : i == 2 ? &fd.trace : &fd.tensorboard;
        *at = path;
        rc = mirror_fit(m, &fd, NULL);
        CHECK(rc == MIRROR_ERR_ARGUMENT && strstr(mirror_model_error(m), "MIRROR_NO_OUTPUTS") &&
                  strstr(mirror_model_error(m), fields[i]),
              "fit asking for the %s without outputs: %d, %s", fields[i], rc, mirror_model_error(m));
        CHECK(mirror_optimizer_steps(m) == 0 && stat(path, &st) != 0, "the %s: no step, nothing written", fields[i]);
    }

    /* without outputs fit trains, saves its checkpoint and says no output failed */
    {
        mirror_fit_desc fd = fit_desc();
        fd.checkpoint = ckpt;
        memset(&last, 0, sizeof last);
        rc = mirror_fit(m, &fd, &last);
        CHECK(rc == MIRROR_OK && last.epoch == 2 && last.failed_outputs == 0 && mirror_optimizer_steps(m) == 10,
              "a bare fit: %d (%s), epoch %zu, %llu steps", rc, mirror_model_error(m), last.epoch,
              (unsigned long long)mirror_optimizer_steps(m));
        CHECK(mirror_checkpoint_load(again, ckpt, 0, &info) == MIRROR_OK && info.step == 10,
              "its checkpoint loads: %s", mirror_model_error(again));
        n = mirror_num_parameters(m);
        CHECK(n <= 1024 && mirror_get_parameters(m, 0, a, n) == MIRROR_OK &&
                  mirror_get_parameters(again, 0, b, n) == MIRROR_OK && !memcmp(a, b, n * sizeof *a),
              "the checkpoint holds the fit's parameters");
    }

    mirror_model_destroy(again);
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    mirror_dataset_free(&data);
    remove(ckpt);
    snprintf(path, sizeof path, "%s/bare.ckpt.lock", dir);
    remove(path);
    rmdir(dir);
    return check_done("test_bare");
}
