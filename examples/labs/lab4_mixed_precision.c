/* Lab 4 - mixed precision and the loss scaler.

   Run:   make build/lab4_mixed_precision && ./build/lab4_mixed_precision

   What to look at: in fp16 (md.precision) the layers store weights,
   activations and gradients in 16 bits, while the optimizer keeps fp32
   master weights. fp16's largest value is 65504 and it flushes values
   below about 6e-8 to zero, so the loss gradient is multiplied by a loss
   scale S before backward and every gradient divided by S after the
   all-reduce. A gradient that overflowed (Inf or NaN) makes every replica
   skip the step: the weights stay as they were, and the dynamic scaler
   halves S; after growth_interval finite steps in a row it doubles S
   (torch.amp.GradScaler's rule). This lab starts at S = 2^24, far too
   large, with growth_interval 10, and reads the scaler after each step
   (mirror_loss_scale_get). bf16 keeps fp32's exponent range: no scaling.

   What comes out: the steps where the scale moved, the last loss, and:
      check: the first step overflows at 2^24 and is skipped: ok
      check: every skip halves the scale and leaves the weights bit for bit as they were: ok
      check: 10 finite steps in a row double the scale: ok
      check: bf16 trains at a scale of 1 and skips no step: ok
   Try: md.loss_scale.kind = MIRROR_SCALE_STATIC with init_scale 1e6. */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 40

static int failures;

static void check(int held, const char *promise)
{
    printf("check: %s: %s\n", promise, held ? "ok" : "FAILED");
    if (!held) failures++;
}

static void die(const char *what)
{
    fprintf(stderr, "lab4: %s\n", what);
    exit(1);
}

/* STEPS steps of batch 64 on 2 replicas in `precision`, each move of the
   scaler checked against its rule. */
static void train(const mirror_dataset *d, mirror_precision precision)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_loss_scale_state was, now;
    mirror_metrics got;
    mirror_strategy *s;
    mirror_model *m;
    static float before[12730], after[12730];
    size_t k, skips = 0, growths = 0;
    int rule = 1, kept = 1, first_skipped = 0;
    sd.devices = "cpu:2";
    if (mirror_strategy_create(&sd, &s, &err)) die(err.message);
    md.strategy = s;
    md.channels = 28 * 28;
    md.max_batch = 64;
    md.optimizer.kind = MIRROR_OPT_SGD;
    md.optimizer.lr = 0.1f;
    md.precision = precision;
    md.loss_scale.init_scale = precision == MIRROR_PRECISION_FP16 ? 16777216.0f : 0.0f; /* 2^24; bf16: its default 1 */
    md.loss_scale.growth_interval = 10;
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_dense(m, 16);
    mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m) || mirror_loss_scale_get(m, &was)) die(mirror_model_error(m));
    for (k = 0; k < STEPS; k++) {
        mirror_batch b = {0};
        b.x = d->x + (k % 30) * 64 * 784; /* batch k: samples 64k ... of the 1920 */
        b.labels = d->labels + (k % 30) * 64;
        b.n = 64;
        if (mirror_get_parameters(m, 0, before, 12730) || mirror_train_step(m, &b, &got) ||
            mirror_get_parameters(m, 0, after, 12730) || mirror_loss_scale_get(m, &now))
            die(mirror_model_error(m));
        if (k == 0) first_skipped = now.last_skipped;
        if (now.last_skipped) {
            skips++;
            rule &= now.scale == was.scale / 2;
            kept &= !memcmp(before, after, sizeof before);
        } else {
            growths += now.scale > was.scale;
            rule &= now.scale == (was.good_steps + 1 == 10 ? 2 * was.scale : was.scale);
        }
        if (now.scale != was.scale || k == 0)
            printf("  %s step %2zu: %s, scale %.0f -> %.0f\n", mirror_precision_name(precision), k + 1,
                   now.last_skipped ? "skipped" : "applied", was.scale, now.scale);
        was = now;
    }
    printf("%s: loss of the last step %.4f, %zu of %d steps skipped\n", mirror_precision_name(precision),
           got.loss_sum / (double)got.count, skips, STEPS);
    if (precision == MIRROR_PRECISION_BF16) {
        check(skips == 0 && now.scale == 1.0f, "bf16 trains at a scale of 1 and skips no step");
    } else {
        check(first_skipped, "the first step overflows at 2^24 and is skipped");
        check(rule && kept, "every skip halves the scale and leaves the weights bit for bit as they were");
        check(rule && growths > 0, "10 finite steps in a row double the scale");
    }
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
}

int main(void)
{
    mirror_error err = {0, ""};
    mirror_dataset d;
    if (mirror_dataset_synthetic_digits(&d, 1920, 1, &err)) die(err.message);
    train(&d, MIRROR_PRECISION_FP16);
    train(&d, MIRROR_PRECISION_BF16);
    mirror_dataset_free(&d);
    return failures ? 1 : 0;
}
