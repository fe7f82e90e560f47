/* test_train.c - end to end: mirror_fit on the synthetic digits with two
   replicas must learn them (a stated accuracy, far above chance), and the
   fit hook and logs must report what happened. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"

#include <string.h>

static size_t hook_calls;
static double hook_val_acc;
static int on_epoch(void *user, const mirror_epoch_log *log)
{
    (void)user;
    hook_calls++;
    hook_val_acc = log->val_acc;
    return 0;
}

int main(void)
{
    mirror_strategy *s = checked_strategy("cpu:2", 0);
    mirror_model_desc md = model_desc(s, 1, 28, 28, 50, 1);
    mirror_model *m = NULL;
    mirror_fit_desc fd;
    mirror_dataset train, test;
    mirror_epoch_log log;
    mirror_metrics ev;
    mirror_error err = {0, ""};

    CHECK(mirror_dataset_synthetic_digits(&train, 3000, 1, &err) == MIRROR_OK, "train set: %s", err.message);
    CHECK(mirror_dataset_synthetic_digits(&test, 1000, 2, &err) == MIRROR_OK, "test set: %s", err.message);
    md.optimizer = optimizer_of(MIRROR_OPT_ADAM, 0.0f);
    CHECK(mirror_model_create(&md, &m, &err) == MIRROR_OK, "model: %s", err.message);
    add_layers(m, "flatten, dense 64, relu, dense 10");
    CHECK(mirror_model_build(m) == MIRROR_OK, "build: %s", mirror_model_error(m));

    memset(&fd, 0, sizeof fd);
    fd.train = &train;
    fd.validation = &test;
    fd.epochs = 3;
    fd.batch = 50;
    fd.progress = MIRROR_PROGRESS_NONE;
    fd.on_epoch = on_epoch;
    CHECK(mirror_fit(m, &fd, &log) == MIRROR_OK, "fit: %s", mirror_model_error(m));
    CHECK(hook_calls == 3, "the epoch hook ran once per epoch (%zu)", hook_calls);
    CHECK(log.epoch == 3 && log.steps == 60 && log.samples == 3000, "log: epoch %zu, %zu steps, %zu samples",
          log.epoch, log.steps, log.samples);
    CHECK(log.val_acc == hook_val_acc, "the hook saw the final log");
    CHECK(log.train_loss < 0.5, "train loss %.4f < 0.5 after 3 epochs", log.train_loss);
    CHECK(mirror_evaluate(m, &test, 0, &ev) == MIRROR_OK && ev.count == 1000, "evaluate");
    printf("synthetic digits: test accuracy %.3f after 3 epochs\n", (double)ev.correct / 1000.0);
    CHECK((double)ev.correct / 1000.0 >= 0.90, "test accuracy %.3f >= 0.90 on synthetic digits (chance: 0.10)",
          (double)ev.correct / 1000.0);
    CHECK((double)ev.correct / 1000.0 == log.val_acc, "evaluate agrees with fit's validation");

    /* Resume: fit with initial_epoch 3 and epochs 4 trains exactly one more epoch. */
    hook_calls = 0;
    fd.initial_epoch = 3;
    fd.epochs = 4;
    CHECK(mirror_fit(m, &fd, &log) == MIRROR_OK && hook_calls == 1 && log.epoch == 4,
          "initial_epoch 3, epochs 4: one more epoch (%zu)", hook_calls);
    CHECK(mirror_optimizer_steps(m) == 240, "240 optimizer steps in 4 epochs (%llu)",
          (unsigned long long)mirror_optimizer_steps(m));

    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    mirror_dataset_free(&train);
    mirror_dataset_free(&test);
    return check_done("test_train");
}
