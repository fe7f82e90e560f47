/* Lab 7 - several processes (MultiWorkerMirroredStrategy), with MPI.

   Build: mpicc -O2 -std=c99 -DMIRROR_MPI examples/labs/lab7_processes.c -o lab7 -lm -lpthread
          (or: make build/lab7_processes, where make finds mpicc and mpirun)
   Run:   mpirun --bind-to none -np 2 ./lab7 2     (2 processes of 2 replicas)
          --bind-to none: Open MPI would pin each process to one core, which
          its replica threads would share. As root add --allow-run-as-root;
          more processes than cores (-np 3 on 2 cores) need --oversubscribe;
          on several machines, a hostfile (tools/reference.md: Several machines).

   What to look at: the program is SPMD, as with Horovod or torchrun: every
   process runs the same code, loads the data itself, and makes the same
   calls with the same global batches. Compiled with -DMIRROR_MPI, one
   strategy spans the processes; each drives its own replicas (threads),
   numbered after those of the ranks before it (mirror_strategy_process).
   Each step's gradient sum folds in rank order: rank 0 sums its replicas
   and sends the partial sums to rank 1, which adds its own, and so on;
   only gradients and metrics cross between processes, never a sample.
   Those are the additions one process holding every replica makes, in the
   same order, so P processes of L replicas train exactly as 1 process of
   P x L replicas. Each process checks that here against such a process of
   its own (a strategy on MPI_COMM_SELF).

   What comes out: a line per process (its rank and replicas), then from
   rank 0:
      check: every replica of every process holds the same parameters: ok
      check: each process's parameters are those of one process of all the replicas, bit for bit: ok
   Try: -np 3 with 1 replica each, or -np 1 with 4. */
#define MIRROR_IMPLEMENTATION
#include "../../mirror.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what)
{
    fprintf(stderr, "lab7: %s\n", what);
    exit(1); /* mpirun then ends the others */
}

/* `replicas` replicas of this process, over comm; 12 steps of batch 50. */
static mirror_model *train(const mirror_dataset *d, const void *comm, size_t replicas, mirror_strategy **s)
{
    mirror_error err = {0, ""};
    mirror_strategy_desc sd = {0};
    mirror_model_desc md = {0};
    mirror_model *m;
    size_t step;
    sd.devices = "cpu";
    sd.num_replicas = replicas;
    sd.mpi_comm = comm;
    if (mirror_strategy_create(&sd, s, &err)) die(err.message);
    md.strategy = *s;
    md.channels = 28 * 28;
    md.max_batch = 50;
    md.optimizer.kind = MIRROR_OPT_ADAM;
    if (mirror_model_create(&md, &m, &err)) die(err.message);
    mirror_dense(m, 32);
    mirror_relu(m);
    mirror_dense(m, 10);
    if (mirror_model_build(m)) die(mirror_model_error(m));
    for (step = 0; step < 12; step++) {
        mirror_batch b = {0};
        b.x = d->x + step * 50 * 784;
        b.labels = d->labels + step * 50;
        b.n = 50;
        if (mirror_train_step(m, &b, NULL)) die(mirror_model_error(m));
    }
    return m;
}

int main(int argc, char **argv)
{
    mirror_error err = {0, ""};
    mirror_dataset d;
    mirror_strategy *world, *alone;
    mirror_model *m, *ref;
    mirror_process_info me;
    MPI_Comm self = MPI_COMM_SELF;
    static float w[25450], w_ref[25450]; /* 784 x 32 + 32 + 32 x 10 + 10 */
    size_t replicas = argc > 1 ? (size_t)atoi(argv[1]) : 1;
    int same, in_sync;

    if (replicas < 1 || replicas > 8) die("usage: lab7 [REPLICAS: 1 to 8 a process]");
    if (mirror_dataset_synthetic_digits(&d, 600, 1, &err)) die(err.message);
    m = train(&d, NULL, replicas, &world); /* NULL: MPI_COMM_WORLD */
    me = mirror_strategy_process(world);
    printf("rank %zu of %zu: replicas %zu to %zu of %zu\n", me.rank, me.processes, me.first_replica,
           me.first_replica + me.local_replicas - 1, mirror_num_replicas(world));
    in_sync = mirror_check_replicas(m) == MIRROR_OK; /* every process takes part */
    ref = train(&d, &self, mirror_num_replicas(world), &alone);
    if (mirror_get_parameters(m, 0, w, 25450) || mirror_get_parameters(ref, 0, w_ref, 25450))
        die(mirror_model_error(m));
    same = !memcmp(w, w_ref, sizeof w);
    /* every process's verdict: MIRROR_OK everywhere only when all agree */
    same = mirror_agree(world, same ? MIRROR_OK : MIRROR_ERR_REPLICAS, &err) == MIRROR_OK;
    if (me.rank == 0) {
        printf("check: every replica of every process holds the same parameters: %s\n", in_sync ? "ok" : "FAILED");
        printf("check: each process's parameters are those of one process of all the replicas, bit for bit: %s\n",
               same ? "ok" : "FAILED");
    }
    mirror_model_destroy(ref);
    mirror_model_destroy(m);
    mirror_strategy_destroy(alone);
    mirror_strategy_destroy(world);
    mirror_dataset_free(&d);
    return in_sync && same ? 0 : 1;
}
