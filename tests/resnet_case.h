/* resnet_case.h - the ResNet case that test_norm.c (deterministic mode
   against the mode without it) and tests/interop/resnet.c (against
   PyTorch) train alike: conv 8 3x3, batchnorm, relu; an identity block and
   a projecting one (8 -> 16 channels, stride 2) of conv 3x3, batchnorm,
   relu; global average pooling, dense 10. SGD with Nesterov momentum 0.9,
   weight decay 1e-4, rate 0.05; 20 steps over 951 synthetic digits of
   12 x 12 (seed 23), global batches of 50 in order, the last two 49 and 2.
   Include after mirror.h (its implementation) and digits.h. */
#ifndef RESNET_CASE_H
#define RESNET_CASE_H

enum {
    RESNET_SIDE = 12,
    RESNET_SAMPLES = 951,
    RESNET_STEPS = 20,
    RESNET_RELUS = 50 * (8 * 144 + 8 * 144 + 16 * 36) /* the batchnorm layers' outputs of a step of 50 */
};

/* The rows of step k (from 0) */
static size_t resnet_rows(size_t k)
{
    return k < 18 ? 50 : k == 18 ? 49 : 2;
}

/* The case's model on s (seed 33); chunk > 0: deterministic mode with that
   chunk. NULL on failure, with err (may be NULL) or the model's error. */
static mirror_model *resnet_model(mirror_strategy *s, size_t chunk, mirror_error *err)
{
    mirror_model_desc md;
    mirror_model *m = NULL;
    memset(&md, 0, sizeof md);
    md.strategy = s, md.channels = 1, md.height = md.width = RESNET_SIDE, md.max_batch = 50, md.seed = 33;
    md.deterministic = chunk > 0, md.chunk = chunk;
    md.optimizer.kind = MIRROR_OPT_SGD, md.optimizer.lr = 0.05f, md.optimizer.momentum = 0.9f;
    md.optimizer.nesterov = 1, md.optimizer.weight_decay = 1e-4f;
    if (mirror_model_create(&md, &m, err) != MIRROR_OK) return NULL;
    if (mirror_conv2d(m, 8, 3, 1, 1) || mirror_batchnorm(m, MIRROR_BN_SYNC) || mirror_relu(m) ||
        mirror_residual(m) || mirror_conv2d(m, 8, 3, 1, 1) || mirror_batchnorm(m, MIRROR_BN_SYNC) || mirror_relu(m) ||
        mirror_residual_end(m) || mirror_residual(m) || mirror_conv2d(m, 16, 3, 2, 1) ||
        mirror_batchnorm(m, MIRROR_BN_SYNC) || mirror_relu(m) || mirror_residual_end(m) || mirror_global_avgpool(m) ||
        mirror_flatten(m) || mirror_dense(m, 10) || mirror_model_build(m)) {
        if (err) {
            err->code = MIRROR_ERR_ARGUMENT;
            snprintf(err->message, sizeof err->message, "%s", mirror_model_error(m));
        }
        mirror_model_destroy(m);
        return NULL;
    }
    return m;
}

/* The relus' inputs in m's last training step (its batchnorm layers'
   outputs), each layer's rows in batch order (the replicas' shards in
   turn), into z (RESNET_RELUS floats); how many, 0 when they do not fit. */
static size_t resnet_relu_inputs(const mirror_model *m, float *z)
{
    size_t i, r, n = 0;
    for (i = 0; i < m->nlayers; i++) {
        const mirror__layer *l = &m->layers[i];
        for (r = 0; l->kind == MIRROR__BATCHNORM && r < m->s->replicas; r++) {
            size_t k = m->rep[r].count * mirror__out_size(l);
            if (n + k > RESNET_RELUS) return 0;
            memcpy(z + n, m->rep[r].acts + l->out_off, k * sizeof(float));
            n += k;
        }
    }
    return n;
}

#endif
