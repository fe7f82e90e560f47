/* fuzz_flags.c - the trainer's command line (examples/options.h): the input,
   split at NUL bytes, is the argument vector, each argument in its own
   allocation of its exact size (ASan sees a read past one). Whatever the
   arguments, the parser returns one of its four answers; a usage error says
   which flag; and options it accepts are complete and in range. */
#include "fuzz.h"

#include "../../examples/options.h"

#include <stdlib.h>

enum { MOST_ARGS = 64 };

/* The invariants of accepted options; a violated one aborts (a finding). */
static void check_accepted(const options *o)
{
    const mirror_loss_scale_desc *ls = &o->md.loss_scale;
    int ok = o->model && o->optimizer && o->precision && o->fd.epochs >= 1 && o->synthetic >= 1;
    ok &= o->fd.batch >= 1 || ((o->evaluate || o->predict) && !o->fd.batch); /* inference: 0, the library's */
    ok &= !strcmp(o->model, "mlp") || !strcmp(o->model, "cnn") || !strcmp(o->model, "cnn-bn") ||
          !strcmp(o->model, "resnet");
    ok &= o->lr == 0.0 || (o->lr >= FLT_MIN && o->lr <= FLT_MAX && o->md.optimizer.lr > 0.0f);
    ok &= o->clip_norm == 0.0 || (o->clip_norm >= FLT_MIN && o->md.optimizer.clip_norm > 0.0f);
    ok &= o->md.optimizer.kind == MIRROR_OPT_SGD || o->md.optimizer.kind == MIRROR_OPT_ADAM ||
          o->md.optimizer.kind == MIRROR_OPT_ADAMW;
    ok &= (o->md.precision == MIRROR_PRECISION_FP32) == !strcmp(o->precision, "fp32");
    ok &= ls->kind != MIRROR_SCALE_STATIC || (ls->init_scale >= 1.0f && ls->init_scale <= 1e30f);
    ok &= ls->report_nonfinite == 0 || ls->report_nonfinite == 1;
    ok &= !o->fd.checkpoint_every || o->fd.checkpoint;
    ok &= (o->md.optimizer.schedule == MIRROR_LR_CONSTANT) == !strcmp(o->lr_schedule, "constant");
    ok &= !o->lr_step || o->md.optimizer.schedule == MIRROR_LR_STEP;
    ok &= o->md.optimizer.warmup <= UINT32_MAX;
    ok &= o->fd.accumulate >= 1 && o->fd.accumulate <= 1 << 20;
    ok &= o->dropout >= 0.0 && o->dropout <= 0.99;
    ok &= o->val_split == 0.0 || (o->val_split > 0.0 && o->val_split < 1.0);
    ok &= !o->predict || (o->out && o->data);
    ok &= (!o->fd.history || o->fd.history[0]) && (!o->fd.plot || o->fd.plot[0]) && (!o->fd.trace || o->fd.trace[0]);
    ok &= o->fd.phases == 0 || o->fd.phases == 1;
    ok &= o->md.graphs == 0 || o->md.graphs == 1;
    ok &= o->deterministic >= -1 && o->deterministic <= 1 && o->md.deterministic == (o->deterministic == 1);
    ok &= !o->md.chunk || o->deterministic != 0;
    ok &= o->fd.augment_crop_pad <= (o->fd.augment_flip ? 64u : 0u) && o->lr_schedule;
    ok &= o->md.shard_update == MIRROR_SHARD_AUTO || o->md.shard_update == MIRROR_SHARD_ON ||
          o->md.shard_update == MIRROR_SHARD_OFF;
    ok &= (!o->data || o->data[0]) && (!o->fd.checkpoint || o->fd.checkpoint[0]) &&
          (!o->fd.resumed_from || o->fd.resumed_from[0]) && (!o->sd.devices || o->sd.devices[0]);
    if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[MOST_ARGS + 1];
    options o;
    size_t start = 0, i;
    int argc = 1;
    argv[0] = (char *)"train";
    for (i = 0; size && i <= size && argc < MOST_ARGS; i++) { /* no bytes: no arguments */
        if (i < size && data[i]) continue;
        argv[argc] = (char *)malloc(i - start + 1);
        if (!argv[argc]) break;
        memcpy(argv[argc], data + start, i - start);
        argv[argc++][i - start] = '\0';
        start = i + 1;
    }
    argv[argc] = NULL;
    switch (options_parse(argc, argv, &o)) {
    case OPTIONS_RUN: check_accepted(&o); break;
    case OPTIONS_HELP: break;
    case OPTIONS_BAD: /* names the flag */
        if (!strstr(o.why, "--")) abort();
        break;
    case OPTIONS_UNKNOWN:
        if (strncmp(o.why, "unknown option ", 15) && !strstr(o.why, " needs a value")) abort();
        break;
    default: abort();
    }
    for (i = 1; i < (size_t)argc; i++) free(argv[i]);
    return 0;
}
