/* scaling.c - a lecture demo of data parallelism: one model trained on 1, 2
   and 4 CPU replicas at the same global batch, with and without
   deterministic mode. For each run: the time per epoch, the final loss and
   accuracy, and the largest difference of any weight from the 1-replica
   run's. The replicas compute the same mean gradient, so the curves agree;
   by default the sums are added in another order for each replica count
   and the weights drift apart in their last digits; deterministic mode
   adds them in one order and the weights are the same, bit for bit.

   Build and run:  make && ./build/scaling [EPOCHS [DIR]]   (./build/scaling --help)
   (DIR: Fashion-MNIST's four .gz files; default: 3000 synthetic digits.
   On a machine with fewer cores than replicas the times do not fall.) */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 64

static void die(const char *what)
{
    fprintf(stderr, "scaling: %s\n", what);
    exit(1);
}

/* Trains a fresh MLP on `replicas` replicas; its *count parameters into
   *params (allocated). */
static mirror_epoch_log train(const mirror_dataset *data, const mirror_dataset *test, size_t replicas, int deterministic,
                              size_t epochs, float **params, size_t *count)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_fit_desc fd = {0};
    mirror_epoch_log last;
    mirror_strategy *s;
    mirror_model *m;

    sd.devices = "cpu";
    sd.num_replicas = replicas;
    if (mirror_strategy_create(&sd, &s, &err)) die(err.message);
    md.strategy = s;
    md.channels = data->channels;
    md.height = data->height;
    md.width = data->width;
    md.max_batch = BATCH;
    md.seed = 1;
    md.optimizer.kind = MIRROR_OPT_ADAM;
    md.deterministic = deterministic; /* chunks of 16 samples */
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_flatten(m);
    mirror_dense(m, 128);
    mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) die(mirror_model_error(m));

    fd.train = data;
    fd.validation = test;
    fd.epochs = epochs;
    fd.batch = BATCH;
    fd.progress = MIRROR_PROGRESS_NONE;
    if (mirror_fit(m, &fd, &last)) die(mirror_model_error(m));
    *count = mirror_num_parameters(m);
    if (!(*params = (float *)malloc(*count * sizeof(float)))) die("out of memory");
    if (mirror_get_parameters(m, 0, *params, *count)) die(mirror_model_error(m));
    mirror_model_destroy(m);
    mirror_strategy_destroy(s);
    return last;
}

int main(int argc, char **argv)
{
    static const size_t counts[3] = {1, 2, 4};
    size_t epochs = 2, n = 0, i, c;
    mirror_dataset data, test;
    mirror_error err = {0, ""};
    float *one = NULL, *params;
    int det, rc;

    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: scaling [EPOCHS [DIR]]\n"
               "  EPOCHS  from 1 to 1000 (2)\n"
               "  DIR     Fashion-MNIST's four .gz files (default: 3000 synthetic digits)\n");
        return 0;
    }
    if (argc > 3) die("usage: scaling [EPOCHS [DIR]] (scaling --help)");
    if (argc > 1) {
        char *end;
        unsigned long asked = strtoul(argv[1], &end, 10);
        if (end == argv[1] || *end != '\0' || argv[1][0] == '-' || asked < 1 || asked > 1000)
            die("EPOCHS: a number from 1 to 1000 (scaling --help)");
        epochs = (size_t)asked;
    }
    if (argc > 2)
        rc = mirror_dataset_load_mnist(&data, &test, argv[2], &err);
    else {
        rc = mirror_dataset_synthetic_digits(&data, 3000, 1, &err);
        if (rc == MIRROR_OK) rc = mirror_dataset_synthetic_digits(&test, 600, 2, &err);
    }
    if (rc != MIRROR_OK) die(err.message);

    printf("%zu training samples, global batch %d, %zu epochs, MLP %zux%zu-128-10, Adam\n", data.count, BATCH, epochs,
           data.height, data.width);
    printf("%-13s %8s %10s %10s %9s %9s %16s\n", "mode", "replicas", "s/epoch", "train_loss", "val_loss", "val_acc",
           "max |w - w_1|");
    /* w_1: the weights of the same mode on 1 replica */
    for (det = 0; det <= 1; det++)
        for (c = 0; c < 3; c++) {
            mirror_epoch_log log = train(&data, &test, counts[c], det, epochs, &params, &n);
            double worst = 0.0;
            if (c == 0) {
                free(one);
                one = params;
            }
            for (i = 0; i < n; i++) worst = fmax(worst, fabs((double)params[i] - (double)one[i]));
            printf("%-13s %8zu %10.3f %10.6f %9.6f %9.4f %16.3g\n", det ? "deterministic" : "default", counts[c],
                   log.seconds, log.train_loss, log.val_loss, log.val_acc, worst);
            if (params != one) free(params);
        }
    free(one);
    mirror_dataset_free(&data);
    mirror_dataset_free(&test);
    return 0;
}
