/* mirror.h - synchronous data-parallel training on every replica of one machine.
   C99, one header, no dependencies beyond libc, libm and POSIX threads.

// >>manual ==================================================================

   mirror trains a small neural network the way tf.distribute.MirroredStrategy
   and PyTorch DDP do: one copy of the model per replica, each replica runs
   forward and backward on its shard of the global batch, an all-reduce sums
   the gradients, and every replica applies the same optimizer update. On the
   CPU backend a replica is a POSIX thread; mirror_cuda.h adds GPUs.

   QUICK START

      #define MIRROR_IMPLEMENTATION     // in exactly one file, before any
      #define MIRROR_ZLIB               // other #include (see BUILDING); the
      #include "mirror.h"               // dataset package's files are .gz: -lz
      #include <stdio.h>
      #include <stdlib.h>

      static void die(const char *message)
      {
          fprintf(stderr, "%s\n", message);
          exit(1);
      }

      // in main:
      mirror_error err = {0};
      mirror_strategy *s;               // zero desc: one replica per core
      mirror_strategy_desc sd = {0};
      if (mirror_strategy_create(&sd, &s, &err)) die(err.message);

      mirror_dataset train, test;
      if (mirror_dataset_load_mnist(&train, &test, "/usr/share/datasets/fashion-mnist", &err))
          die(err.message);

      mirror_model_desc md = {0};
      md.strategy = s;
      md.channels = 1; md.height = 28; md.width = 28;
      md.optimizer.kind = MIRROR_OPT_ADAM;
      mirror_model *m;
      if (mirror_model_create(&md, &m, &err)) die(err.message);
      mirror_flatten(m); mirror_dense(m, 128); mirror_relu(m); mirror_dense(m, 10);
      if (mirror_model_build(m)) die(mirror_model_error(m));   // first error wins

      mirror_fit_desc fd = {0};
      fd.train = &train; fd.validation = &test; fd.epochs = 3;
      if (mirror_fit(m, &fd, NULL)) die(mirror_model_error(m));

      mirror_model_destroy(m); mirror_strategy_destroy(s);
      mirror_dataset_free(&train); mirror_dataset_free(&test);

   BUILDING

      CPU:   cc -O3 -march=native -ffp-contract=fast -fno-math-errno -std=c99 \
                app.c -lm -lpthread
             (add -DMIRROR_ZLIB -lz to read .gz files,
              -DMIRROR_CBLAS -lopenblas to route GEMMs through a CBLAS; set
              OPENBLAS_NUM_THREADS=1 then, the replicas being the threads)
             C++ (C++11 or later) and nvcc compile the header as well
             (in C++ a zeroed desc is "= {}", as "= {0}" warns there).

      Option macros (below) change the library's code: define them in, or
      on the compile line of, the file that defines MIRROR_IMPLEMENTATION
      (in a CUDA build, the nvcc line of the .cu file). Elsewhere they do
      nothing. That file takes about 20 s of CPU to compile at -O3 (gcc 12
      on an AMD EPYC): keep it apart (mirror.c holding the lines above)
      and compile it once. Built
      without optimisation it trains many times slower, and a compile-time
      note says so (MIRROR_QUIET_O0 silences it).

      The implementation uses clock_gettime, isatty and fileno, which glibc
      declares under -std=c99 only with _POSIX_C_SOURCE. mirror.h defines
      _POSIX_C_SOURCE itself when it is the first include of the file that
      defines MIRROR_IMPLEMENTATION (after another header it stops with an
      #error that says so); otherwise compile that file with
      -D_POSIX_C_SOURCE=200809L. -ffp-contract=fast lets the compiler fuse
      multiply-adds (ISO C modes turn it off); it roughly doubles GEMM speed.
      -fno-math-errno lets it vectorise sqrtf in the Adam update.
      The GEMM's register tile is written with GCC/Clang vector extensions
      and sized for the widest vectors the flags allow (AVX-512, AVX2,
      SSE2, NEON): -march=native picks the machine's. The rest of a step
      is written for the vectorisers (restrict pointers, whole blocks of
      16), so gcc and clang at -O2 and -O3 run whole steps at close speeds: on a
      2-core AMD EPYC with AVX-512 (make bench-peers, 2026-11-27), one
      replica of the example MLP and CNN ran at 0.97x to 1.05x of clang 14
      -O3's speed with gcc 12 -O2 and at 1.02x to 1.05x with gcc -O3
      (bench/RESULTS.md; tools/reference.md, Performance). The Makefile
      uses -O3. Bitwise reproducibility is a promise of one build: another
      compiler or other flags may round otherwise.

   OPTION MACROS (define before including, in the file that defines
   MIRROR_IMPLEMENTATION or on its compile line)

      MIRROR_IMPLEMENTATION   emit the implementation in this translation unit
      MIRROR_STATIC           make every function static (private copy; define
                              it with MIRROR_IMPLEMENTATION in the same file)
      MIRROR_API              decoration of every public function (extern)
      MIRROR_MALLOC(n)        allocator, with MIRROR_FREE(p): both or neither
                              (the header declaring them is then included
                              first: add -D_POSIX_C_SOURCE=200809L)
      MIRROR_FREE(p)
      MIRROR_ZLIB             read gzip-compressed files through zlib (-lz)
      MIRROR_NO_LOADERS       leave out the dataset loaders (IDX, MNIST,
                              CIFAR-10, .npy: >>loaders) and their
                              declarations; datasets come from arrays
      MIRROR_NO_OUTPUTS       leave out the side outputs (mirror_trace_write,
                              fit's history, plot, trace and TensorBoard:
                              >>outputs); a fit desc that asks for one then
                              fails with MIRROR_ERR_ARGUMENT naming it. These
                              two take away declarations too: define them
                              wherever mirror.h is included
      MIRROR_MPI              a strategy spans several processes over MPI
                              (compile with mpicc; see PROCESSES)
      MIRROR_CBLAS            use cblas_sgemm from <cblas.h> for every GEMM
      MIRROR_NO_ATOMICS       replica threads sync through the mutex only
                              (the default without GCC/Clang atomics)
      MIRROR_GEMM_MC/KC/NC    blocking of the built-in GEMM (120/256/2048)
      MIRROR_NO_SIMD          the built-in GEMM in plain C, without GCC/Clang
                              vector extensions (the default with other
                              compilers; see >>gemm for the tiles)
      MIRROR_QUIET_O0         no compile-time note when the implementation
                              is compiled without optimisation
      MIRROR_CPU_CONV_CHUNK   samples per convolution GEMM on the CPU (1)
      MIRROR_CPU_GEMM_ROWS_FREE 0: deterministic mode runs the CPU's GEMMs
                              over samples a chunk at a time, as on a GPU
                              (1; 0 with MIRROR_CBLAS)
      MIRROR_CPU_KEEP_COLS    bytes of im2col a CPU replica keeps from forward
                              for backward (0: backward redoes it)
      MIRROR_CPU_GROUP_BYTES  bytes of activations and their gradients a
                              group of samples takes through a CNN's
                              convolutions, activations and pooling on the
                              CPU, forward and backward, before the next
                              group (512 KiB: a core's cache; 0: each layer
                              takes the whole shard); the same bits either way
      MIRROR_NO_BF16_DOT      bf16 GEMMs widen their operands to fp32 even
                              where the CPU has AVX512_BF16 (see MIXED
                              PRECISION)
      MIRROR_CUDA_KEEP_COLS   the same on a GPU (1 GiB; see mirror_cuda.h)
      MIRROR_CPU_PARAM_ALIGN  floats each parameter tensor is aligned to in
                              a CPU replica's arenas (1; a GPU's: 64)
      MIRROR_CPU_SHARED_UPDATE 0: CPU replicas shard the update through the
                              reducer's reduce-scatter and all-gather, with
                              a state slice each, as GPUs do (1: on shared
                              memory, one state)
      MIRROR_CPU_GRAPHS       1: CPU replicas emulate graphs (desc.graphs):
                              a replay queues the pass again with the host's
                              state as it was at capture (tests; 0)
      MIRROR_BUCKET_BYTES     the least bytes of a gradient bucket that NCCL
                              all-reduces while backward runs (25 MB)

   DESC DEFAULTS (zero means default; mirror_*_query_desc returns them filled)

      mirror_strategy_desc  devices        $MIRROR_DEVICES when num_replicas is 0
                                           too, else "cpu:<cores>": the cores the
                                           process may use (its CPU affinity),
                                           shared out among the processes of a
                                           machine that may all use every one
                                           (a CUDA build: every visible GPU;
                                           mirror_cuda.h, DEVICES)
                            num_replicas   the count the device list gives
                            reducer        $MIRROR_REDUCER, else NCCL on distinct
                                           GPUs, else the copy reducer (NCCL on
                                           CPU replicas is an error)
                            host_memory    $MIRROR_HOST_MEMORY, else what the
                                           system says (MEMORY)
      mirror_model_desc     max_batch      256 (largest global batch)
                            loss           MIRROR_LOSS_SOFTMAX_CE
                            init           He uniform before a relu, Glorot
                                           uniform elsewhere; biases zero
                            seed           0 is a seed like any other
      mirror_optimizer_desc kind           MIRROR_OPT_SGD
                            (zero always means default: beta1 = 0 and AdamW
                            without decay cannot be asked for; use Adam)
                            lr             0.01 (SGD), 0.001 (Adam, AdamW)
                            beta1, beta2   0.9, 0.999
                            eps            1e-8
                            weight_decay   0 (SGD, Adam: L2 added to the
                                           gradient); 0.01 (AdamW: decoupled)
                            momentum       0; nesterov 0
                            schedule       MIRROR_LR_CONSTANT; warmup 0;
                                           gamma 0.1
      mirror_model_desc     precision      MIRROR_PRECISION_FP32
                            shard_update   MIRROR_SHARD_AUTO: sharded on CPU
                                           replicas, not on GPUs
                            graphs         0 (1: CUDA graphs, GPUs only)
                            replica_values 0 (1: each replica keeps its own
                                           gradient and metrics of the last
                                           step)
      mirror_loss_scale_desc (fp16 and bf16 only)
                            kind           dynamic for fp16, none for bf16
                            init_scale     65536 (none: 1)
                            growth_factor  2, after growth_interval 2000
                                           finite steps in a row
                            backoff_factor 0.5
                            min_scale      1; max_scale 2^24
                            max_consecutive_skips 50
      mirror_fit_desc       epochs         1
                            batch          min(64, max_batch)
                            progress       MIRROR_PROGRESS_AUTO: a bar on a
                                           terminal, one line per epoch otherwise
                            shuffle_seed   the model's seed
                            validation_name "val" (the epoch line's
                                           val_loss, val_acc)
                            checkpoint     none; checkpoint_keep 3, and
                                           checkpoint_every 0 (the end only)
                            data_on_device MIRROR_DATA_AUTO: GPUs keep the
                                           data in device memory where they
                                           fit; CPU replicas gather in place

   API INDEX (each declaration below says more)

      errors      mirror_result_string (a code's text), mirror_set_logger
                  (every error and notice), mirror_model_error (a model's
                  last error)
      strategy    mirror_strategy_create, mirror_strategy_destroy,
                  mirror_num_replicas,
                  mirror_strategy_query_desc, mirror_strategy_describe,
                  mirror_strategy_process (rank, processes, local replicas),
                  mirror_agree (one result for every process),
                  mirror_all_reduce_sum, mirror_broadcast, mirror_shard,
                  mirror_model_shard
      model       mirror_model_create, mirror_model_build,
                  mirror_model_destroy, mirror_model_query_desc,
                  mirror_model_summary, mirror_model_print_summary,
                  mirror_num_parameters,
                  mirror_num_outputs, mirror_optimizer_state_size,
                  mirror_memory_report_get, mirror_model_from_checkpoint
      layers      mirror_dense, mirror_conv2d, mirror_relu, mirror_tanh,
                  mirror_sigmoid, mirror_gelu, mirror_maxpool2d,
                  mirror_avgpool2d, mirror_global_avgpool, mirror_dropout,
                  mirror_flatten, mirror_batchnorm (SyncBatchNorm),
                  mirror_residual, mirror_residual_end (residual blocks)
      state       mirror_get_parameters, mirror_get_gradients,
                  mirror_get_optimizer_state, mirror_set_parameters,
                  mirror_check_replicas, mirror_optimizer_steps,
                  mirror_current_lr, mirror_last_grad_norm,
                  mirror_loss_scale_get, mirror_precision_name,
                  mirror_loss_scaling_name
      steps       mirror_train_step, mirror_train_steps (accumulation),
                  mirror_take_metrics, mirror_evaluate_batch, mirror_predict,
                  mirror_predict_proba, mirror_get_replica_gradients and
                  mirror_get_replica_metrics (each replica's own part of
                  the last step, with desc.replica_values)
      timing      mirror_timing, mirror_phase_times_get, mirror_trace_write
      outputs     mirror_predict_write (predictions as a .npy file)
      data        mirror_dataset_load_idx, mirror_dataset_load_mnist,
                  mirror_dataset_load_cifar10, mirror_dataset_load_npy,
                  mirror_dataset_synthetic_digits,
                  mirror_dataset_from_arrays, mirror_dataset_split,
                  mirror_dataset_free, mirror_permutation, mirror_num_batches
      fit         mirror_fit, mirror_evaluate, mirror_keep_data (a
                  dataset in device memory for the steps)
      checkpoints mirror_checkpoint_save, mirror_checkpoint_load,
                  mirror_load_weights (from a safetensors file of any origin),
                  mirror_model_weights_source (the file they came from),
                  mirror_checkpoint_describe (the model a file holds)

   OWNERSHIP

      Create/destroy pairs: mirror_strategy_create/_destroy,
      mirror_model_create/_destroy, mirror_dataset_load_* and mirror_dataset_free.
      A model keeps a pointer to its strategy: destroy the models first. A
      strategy destroyed while models use it (a notice says so) stays
      alive for them and is released with the last one.
      Batches and datasets passed to a call are only read during that call.
      Destroy functions accept NULL. A dataset's arrays belong to the
      dataset: mirror_dataset_free releases x, labels and targets with
      MIRROR_FREE, so arrays a caller attaches (targets for MSE) must come
      from MIRROR_MALLOC, or be detached (set to NULL) before the free.

   ERRORS

      Every call that can fail returns an int: MIRROR_OK (0) or a negative
      mirror_result. Calls on a model record the detail (what failed, where)
      in the model, readable with mirror_model_error(); calls without an
      object take an optional mirror_error* that receives the code and the
      message (up to 2047 bytes: a path, a name, a list or a model's
      description in it is cut inside itself, with "...", so that what
      follows it, what to do, is always there; a message cut at its end,
      as one naming a side output's path of thousands of bytes can be,
      ends in "...").
      mirror_result_string() names each code. A logger set with
      mirror_set_logger() sees every error message as it happens (and
      notices, such as a backend falling back). The library never exits or
      aborts on bad input; a failed call changes nothing the caller can
      observe and the model stays usable. (mirror_fit checks every label
      before its first step; a stop from the epoch hook keeps the epochs
      already trained.)

   THREADING

      One strategy runs one call at a time: call into a strategy and its
      models from one thread at a time. A call that finds another thread
      inside one returns MIRROR_ERR_STATE at once (it does not wait, and
      nothing changes); mirror_model_destroy and mirror_strategy_destroy
      must not race with calls. Different strategies are independent.
      Inside a call, the caller's thread runs replica 0 and the strategy's
      helper threads run the others. A thread waiting for the others
      spins for at most 200 microseconds (only with a core for every
      replica), then sleeps: between calls the helpers take no CPU.

   PROCESSES (MIRROR_MPI)

      Compiled with mpicc and -DMIRROR_MPI, a strategy spans every process
      of MPI_COMM_WORLD (or of the communicator the desc points to) and
      initialises MPI itself when the program has not. Each process drives
      its own replicas (desc.devices and num_replicas count them); the
      replicas of all processes are numbered in rank order, and
      mirror_num_replicas is their total. mirror_strategy_process says
      where this process stands. Without MIRROR_MPI nothing changes: one
      process, rank 0 of 1.

      The program is SPMD, as with Horovod: every process loads the data
      itself and makes the same calls in the same order with the same
      global batches (fit shuffles alike everywhere, from the seed); each
      computes its replicas' shards of every batch. Only gradients,
      metrics, predictions and small status words cross the network,
      never a sample. Steps outside the library that may fail in one
      process only (loading data) go through mirror_agree.

      The gradient sum is a fold in rank order: rank 0 sums its replicas
      in replica order and sends the partial sums to rank 1, which adds
      its replicas' and sends them on; the last rank broadcasts the total.
      These are the additions one process holding every replica makes, in
      the same order, so P processes of L replicas give bitwise the
      parameters of one process of P x L replicas (tests/mpi), run after
      run. Mixed precision folds the widened 16-bit gradients in fp32 and
      rounds once, as in one process, so every replica of every process
      makes the same skip decision. The optimizer state is kept once per
      process, and each process updates every parameter (its replicas
      share the update out as in one process), so that rank 0 holds the
      whole state of every step.

      With shard_update = MIRROR_SHARD_ON (CPU replicas) the update is
      sharded across the processes too, ZeRO stage 1 over every replica:
      the fold's last rank sends each process the sums of its own slice
      alone (a reduce-scatter: the same sums), each process's replicas
      update its slice (whole blocks of 1024 parameters) with that slice's
      optimizer state, the non-finite verdict and the clipping norm come
      from every process's flags and blocks' sums of squares (one small
      all-gather; the norm adds the blocks in order, as one process does),
      and an all-gather hands the updated slices round. The parameters are
      those of one process, bit for bit, and each process runs 1/P of the
      update. The price: between steps each slice's reduced gradient and
      optimizer state are current on its owner alone, so
      mirror_get_gradients, mirror_get_optimizer_state,
      mirror_checkpoint_save and mirror_check_replicas gather them first
      and must be called in every process (as fit does); the state's arena
      stays whole-sized in each process (it takes a checkpoint's whole
      state); and when the processes lose each other rank 0 holds its own
      slice of the state alone, so it says so and saves nothing (the
      periodic checkpoints are the safety net).

      Rank 0's initial parameters reach every replica; rank 0 prints fit's
      progress and writes checkpoints (its result is every process's);
      every process reads them. A checkpoint resumes on any number of
      processes and replicas. mirror_check_replicas compares a hash of
      every replica of every process; fit runs it at its start, after
      every epoch, and every check_replicas_every steps when asked.

      Processes must agree. mirror_model_build compares across them, before
      the parameters' broadcast, a hash of the layers and their shapes, the
      optimizer, its schedule, the precision and loss scaling,
      deterministic mode and the seed; mirror_fit, before its first step,
      the batch and accumulation, the data (sizes and a hash of the
      contents), the shuffle seed, the augmentation, the epochs and the
      start, which outputs and hooks it has, and the file the parameters
      were loaded from (mirror_weights_source: its kind, CRC-32 and size,
      not its path). One that differs fails every process with
      MIRROR_ERR_ARGUMENT and one message naming it and the first rank
      that differs (for the file, each one's path and CRC-32). A check of
      the build or of fit that fails in one process fails them all at
      once. Each such exchange starts with the public call each process
      is in: processes in different calls (a checkpoint loaded, or
      weights, in one process only, while another has gone on to fit)
      all fail there, naming both calls and each one's file, instead of
      meeting in exchanges of other shapes (Open MPI's MPI_ERR_TRUNCATE
      abort). Make the same calls in every process.

      Never a hang: every MPI operation is non-blocking and waited for
      with a deadline (desc.timeout, else $MIRROR_TIMEOUT, else 300 s). A
      failure before a step's reduction travels with it (the status word)
      and fails that step in every process (MIRROR_ERR_PEER); a stop
      flag travels the same way, so every process stops before the same
      step. A process that died or hangs makes the others fail with
      MIRROR_ERR_TIMEOUT; that strategy is then broken, MPI is not
      finalized at exit, and mpirun ends the job when the process exits.
      A stop flag set while a process waits for the others (mpirun sends
      SIGTERM to the processes of a job it ends) ends the wait 1 s later
      with MIRROR_ERR_STOPPED, and breaks the strategy too. When fit fails
      so, after a step has run, rank 0 saves the last complete step to the
      fit's checkpoint path on its own (a failed step changes nothing, so
      that is what every survivor holds) and says so in a notice; the
      failure stays fit's result. tools/reference.md gives the mpirun flags
      that make a lost machine end the job within seconds, and the one
      case where no survivor can act: a killed peer's reset connections can
      hold a process inside Open MPI 4.1's TCP transport until mpirun
      kills it (then --checkpoint-every's files are the safety net).

      GPU replicas in several processes (mirror_cuda.h compiled with
      -DMIRROR_MPI; the Makefile's build/train_cuda_mpi): without a device
      list each process takes one GPU, the one its rank among the
      processes of its machine names (mirror_process_info.local_rank, from
      MPI_COMM_TYPE_SHARED), in turn over the visible GPUs
      (CUDA_VISIBLE_DEVICES honoured); with num_replicas N it takes N GPUs
      from local_rank x N on. Every replica must have a GPU of its own:
      the processes compare their GPUs' PCI bus ids per machine and all
      fail with the clash before NCCL starts. One NCCL communicator spans
      every GPU of every process (rank 0's unique id broadcast over MPI,
      ncclCommInitRank with the global replica index). Each reduction
      folds the status word through MPI first (a failure or a stop in any
      process reaches all, and then no process all-reduces), then sums on
      the GPUs in NCCL, fp32 or 16 bits: NCCL's order, not the rank-order
      fold, so across processes GPU sums agree within rounding, not
      bitwise with one process. Every replica of every process still
      receives the same sum, so the skip decision of mixed precision is
      the same everywhere. Waits on a GPU poll NCCL's asynchronous errors
      under the same timeout and abort NCCL on failure (mirror_cuda.h,
      STREAMS AND WAITING).

      MPI is called from the thread that calls mirror: a program that calls
      MPI_Init itself asks for MPI_THREAD_SERIALIZED (or more) when that
      is not the thread that called MPI_Init.

   HOW A STEP FLOWS (mirror_train_step)

      Each step below names the section of this file that holds it (see
      INSIDE mirror.h); read from mirror_train_step at the end of >>step
      upward, each call leads further up the file.

      1. Checks (>>step). On the caller's thread: the batch's labels or
         targets, its size against max_batch, batchnorm's smallest batch.
      2. Shards (>>step, >>threads). The global batch of n samples is cut
         into contiguous shards, one per replica; shard sizes differ by at
         most one, a shard may be empty (mirror_shard). The replica threads
         each copy their shard into their input arena (mirror__load_shard),
         or, where the data are kept on the device, send its rows' indices
         and gather it there (DATA ON THE DEVICE).
      3. Forward and backward (>>layers, through >>backend: >>cpu backend
         and >>gemm here, mirror_cuda.h on GPUs). Every replica runs its
         shard through the layers and back. The loss gradient is divided
         by n, the global count, never by the shard size...
      4. The all-reduce (>>reducers; across processes >>processes). ...so
         the SUM of the replicas' gradients is exactly the mean gradient of
         the global batch, whatever the split. The CPU reducer adds replica
         0, 1, 2, ... in that order for every element, with the elements
         split across the worker threads. With desc.replica_values each
         replica's own gradient and metrics are copied aside just before
         (mirror__keep_own), for mirror_get_replica_gradients.
      5. Inf and NaN (>>loss scaling). The update's first pass checks the
         reduced gradient (in mixed precision unscaled on the way); the
         verdict is the same on every replica, as it is taken after the
         sum, and the loss scaler moves on it (see NON-FINITE VALUES).
      6. The update (>>optimizers). On CPU replicas it is sharded (ZeRO
         stage 1 on shared memory): replica w owns slice w of the
         parameters (mirror_shard of the parameter count); it sums that
         slice of every replica's gradient in replica order (a
         reduce-scatter with the additions of the all-reduce: steps 4 and 5
         happen here, slice by slice) and checks it; then, with the verdict
         of every slice, it applies the optimizer to the slice and copies
         the new values into every other replica (an all-gather), chunk by
         chunk while it is in cache. Each parameter is updated once a step,
         not once per replica, so this part of the step shrinks as
         replicas are added; the optimizer state lives once. On GPUs every
         replica checks the all-reduced gradient and runs the same update,
         unless the model desc asks shard_update = MIRROR_SHARD_ON: then
         the reducer reduce-scatters the gradient (NCCL's
         ncclReduceScatter; the copy reducer sums it all), each replica
         checks its slice and sums its squares, two floats that the reducer
         adds so that every replica takes the same verdict and clipping
         norm, updates its slice with the optimizer state of that slice
         alone (1/R of the state per GPU), and the all-gather hands the
         slices round (the 16-bit working copy in mixed precision, which
         the layers read as it is; the fp32 masters stay with their slice's
         owner, and the API and checkpoints take each slice from there).
         The sums are the all-reduce's, so the parameters are those of the
         unsharded update, bit for bit, with the copy reducer (NCCL's
         reduce-scatter on three GPUs or more may add in another order
         than its all-reduce); a clipping norm adds its squares slice by
         slice (in deterministic mode it is taken over the whole gradient,
         which every replica holds). In one process only; gradients then
         are not all-reduced in buckets during backward. MIRROR_SHARD_OFF
         makes CPU replicas update everything too; MIRROR_SHARD_ON shards
         CPU replicas' update across processes as well (PROCESSES).
         Either way the parameters stay bitwise identical on every
         replica. Which of these ways a model takes is chosen once, when
         it is built: a plan of four steps (reduce, check, update,
         gather; mirror__update_plan in >>structs), which
         mirror__train_micro runs in that order whatever the mode.
      7. Metrics (>>step; taken in >>inspection). The loss sum, correct
         count and sample count are summed on each replica's device (a
         step's rows in 256 strided lanes and a fixed tree over them, one
         order on the CPU and the GPU: mirror_hd_lane_sums), and across
         replicas and processes when they are read.

      mirror_fit (>>fit) runs these steps epoch by epoch through the same
      internal step (mirror__train), with the data of >>data and the
      checkpoints of >>checkpoints, and writes its side outputs through
      the list of >>outputs.

   DATA ON THE DEVICE (mirror_fit_desc.data_on_device, mirror_keep_data)

      Without it, each step's replica threads gather their shard's rows
      (augmented: flip and crop-pad) into host buffers, pinned on a GPU,
      which the GPU uploads in fp32 and narrows there in mixed precision.
      On a GPU that is a memcpy of every sample every step by one host
      thread a replica, often longer than the step's arithmetic. With it,
      fit copies its training and validation sets into every replica's
      device memory once, at its start (mirror_keep_data does so for the
      steps a program runs itself); a step uploads its rows' indices
      alone (int64), and each replica gathers its shard there, augmented
      by the same functions (mirror_hd_augment_draw and
      mirror_hd_augment_source; the backend's gather), into its input
      buffers. In mixed precision the copy is stored narrowed, 16 bits a
      value: half the memory, and the gather writes the 16-bit input
      directly. That gives the same bits as the host's path: narrowing
      is per value, so narrowing then gathering is gathering then
      narrowing, and a crop's padding zero narrows to zero. Replicas on
      one GPU share one copy. A copy is kept with its key, the host's
      arrays, their rows and a hash of their contents: a second fit or
      mirror_evaluate on the same unchanged dataset finds it; changed
      contents are copied again. It is freed with the model, or when
      another dataset takes its place (one for training, one evaluated).
      Where the device's free memory, less a margin (a sixteenth of it, at
      most 512 MiB), cannot hold a set, a notice says so, once a set, and
      the host gathers. MIRROR_DATA_AUTO (the default) keeps data on GPUs;
      CPU replicas gather in place (their device memory is the host's), and
      MIRROR_DATA_ON makes them keep a copy too, which is how the tests
      check the path: the same bits either way (tests/test_device_data.c).
      fit's epoch log says where the training data lived
      (data_on_device).

   NON-FINITE VALUES

      A NaN in the data is not lost on its way: relu(NaN) is NaN and a
      max-pooling window holding a NaN yields NaN, as in PyTorch, so it
      reaches the loss. A sample whose loss is Inf or NaN gets a NaN
      gradient (a loss can overflow where its gradient does not), so one
      check of the reduced gradient, before the update, sees both. In fp32
      a non-finite step is an error, not a skip (there is no loss scale to
      lower): the step changes nothing (parameters, optimizer state, step
      count) and the call that reads the verdict fails with
      MIRROR_ERR_NOT_FINITE naming the step: "step 11: the loss or the
      reduced gradient is not finite ...". On CPU replicas that is the
      step itself. GPU replicas do not wait for the verdict: every later
      step does nothing until the host reads it (mirror_train_step with
      metrics, mirror_take_metrics, a checkpoint save, fit every 32
      steps). The model stays usable: the next step starts from the
      parameters of the last finite step. mirror_fit stops at that step
      and saves no checkpoint, so a run that diverges keeps its good
      checkpoints. Mixed precision skips such steps instead (below). An
      update can still make Inf or NaN of a finite gradient (overflow):
      no checkpoint is saved that holds one, in parameters or optimizer
      state (MIRROR_ERR_NOT_FINITE naming the tensor), so fit fails at
      its next save and the previous checkpoint stays.

   MIXED PRECISION (mirror_model_desc.precision = MIRROR_PRECISION_FP16 or _BF16)

      Weights, activations and gradients are 16-bit values (uint16_t
      storage, round to nearest even, mirror_hd_narrow); the optimizer keeps
      fp32 master weights and moments. The activations, their gradients,
      im2col's columns and the weights the layers read are 16-bit buffers:
      half the memory of fp32, and GEMMs on 16-bit operands (every op
      computes in fp32 and rounds what it stores once). In a step, on every
      replica: the input goes up in fp32 and the device narrows it to 16
      bits (a GPU converts, not the host thread; data kept on the device
      are stored narrowed, see DATA ON THE DEVICE); the loss gradient is
      multiplied by the loss scale S; the weight gradients, accumulated in
      fp32, are stored in 16 bits and all-reduced in 16 bits. Where fp32
      rounds nothing, two places round twice: a convolution's input gradient
      adds the 16-bit columns of its GEMM (as a GPU's col2im of a 16-bit
      buffer does), and a projected residual block adds the 16-bit
      projection to the 16-bit body, as PyTorch's autocast does.
      On a CPU with AVX512_BF16 (a build for it: -march=native there), bf16
      GEMMs multiply their 16-bit operands as stored with vdpbf16ps: twice
      an fp32 vector's multiply-adds. Its products add up in pairs along
      the depth, the pair's second first, and subnormal values count as
      zeros (mirror_hd_dot_bf16), so bf16 results there are not the bits of
      a CPU without it, though they are the same for any replica count.
      Then, with no host wait: one pass checks the reduced gradient,
      unscaled, for Inf and NaN and sets a flag in device memory; one fused
      pass reads the flag and, when the gradient is finite, unscales it,
      updates the masters and moments and writes the 16-bit working copy;
      the scaler updates its state (mirror_hd_scaler_update). Because the
      check runs after the all-reduce, every replica decides alike; a
      skipped step changes nothing but the scaler's state (not even Adam's
      step count). The host reads the state only where it waits anyway:
      mirror_train_step with metrics, mirror_take_metrics (which return
      MIRROR_ERR_NOT_FINITE once max_consecutive_skips steps in a row were
      skipped), mirror_loss_scale_get, checkpoints and fit's progress.

   DETERMINISTIC MODE (mirror_model_desc.deterministic = 1, chunk K)

      Without it, N replicas compute the mean gradient of the global batch
      as one replica does, but add it up in another order (each replica its
      shard, then the replicas), so the parameters agree within float32
      rounding, and over hundreds of steps drift apart in their last
      digits; sooner and by more where a relu's input lies within rounding
      of 0 and one order puts it on the other side: its gradient passes in
      one run and not in the other (a ResNet 5e-4 apart 11 steps after
      such a tie: tests/test_norm.c). With it they are bitwise the same
      for any replica count, any number of processes and, with
      accumulation, any cut into micro-batches
      of whole chunks. Each global batch is cut into chunks of K samples
      (0: 16; the last may be short); each replica takes a run of whole
      chunks (mirror_shard over the chunks), so its shard may be a chunk
      longer than an even share, and a replica may have none. Every sum
      over samples is made per chunk, in the same code and the same order
      whichever replica makes it: the weight and bias gradients (each chunk
      into a gradient arena of its own), batchnorm's sums and M2s
      (forward; merged in chunk order), its sums of dy and dy xhat
      (backward), and dgamma, dbeta. The chunks' gradients are then added in
      chunk order, 0, 1, 2, ..., one after another: over the replicas by
      the reduction's threads, across processes by the rank-order fold,
      which starts from the sum of the ranks before. With accumulation each
      micro-batch's chunks are added onto the sum of the micro-batches
      before, so B x k samples in micro-batches of B (K dividing B) give the
      step of B k samples, bit for bit: the reduction then runs once per
      micro-batch rather than once per step. Mixed precision adds the
      chunks in fp32 and rounds the sum to 16 bits once.
      What it does not make split-free: the batchnorm layers made with
      MIRROR_BN_LOCAL (their statistics are the shard's, by definition); the
      metrics, whose per-sample losses are the same bits but are added in
      double per replica (the sums agree to about 1e-16). The built-in GEMM
      adds each element's products in one order whatever the matrix shape;
      cuBLAS and a CBLAS (MIRROR_CBLAS) pick their kernels by shape, so
      there every GEMM over samples (a dense layer's forward and input
      gradient too) runs one chunk at a time: its shapes are the chunk's,
      whatever the shard. cuBLASLt (a dense layer's forward) also picks by
      the operands' alignment: it is told the alignment every chunk has
      whatever the replica count (mirror__chunk_align: 64 bytes, or the
      lowest bit of K rows of a dense layer's inputs or outputs), not the
      one this count gives the chunk's place in the arena. cuBLAS picks by
      the alignment of C too, a weight gradient's in fp32: each chunk's
      gradient arena starts at a multiple of param_align floats (64 on a
      GPU, 256 bytes: mirror__chunk_stride), as a replica's first does.
      Packed back to back, one replica's chunk 1 was only 8-byte aligned,
      where 4 replicas hold it as a first chunk, at 256 bytes, and an fp16
      or bf16 GEMM (tensor cores) took another kernel for it, which added
      the products in another order (an H200, 1 against 4 replicas). On GPUs
      the chunks are added on the first GPU in chunk order (the copy
      reducer's sum; NCCL's order is its own, so the nccl reducer hands it
      over), in one process: GPU replicas across processes are refused
      (MIRROR_ERR_UNSUPPORTED). On one H200, 1, 2 and 4 replicas of the
      GPU gave the same parameters bit for bit (fp32 and fp16; bf16 on 1
      and 4); on two GPUs or more it has not run (bench/GPU.md). The
      cost: K = 16 makes the weight-gradient GEMMs 16 samples deep and
      keeps ceil(chunks / replicas) gradient arenas per replica (the
      memory report counts them under gradients); bench/RESULTS.md has the
      measured time and memory.

   MEMORY

      mirror_model_build gives each replica four flat arenas: parameters,
      gradients, optimizer state, and activations plus workspace, sized for
      the largest shard, ceil(max_batch / replicas). Tensors are views into
      them, so one all-reduce covers every gradient, and a training step
      allocates nothing. mirror_memory_report_get() gives the bytes of each.
      With several CPU replicas the optimizer state is one arena that every
      replica shares (the update is sharded, see above): Adam's state costs
      8 bytes per parameter once instead of once per replica, which saves
      8 (R - 1) bytes per parameter on R replicas; the report counts it on
      replica 0. GPUs with shard_update on hold 1/R of it each (the
      parameter count padded to R x 64). A relu right after a dense or
      conv2d layer is that layer's GEMM epilogue (the bias too:
      mirror__epilogue, one pass over the output instead of three) and
      writes over the layer's output, which nothing else reads, so the
      pair holds one activation buffer, not two. Data kept on the device
      (DATA ON THE DEVICE) take memory beside the arenas, from fit's start
      (or mirror_keep_data's call) until the model goes: the report does
      not count them.

      Before it allocates anything, mirror_model_build adds up what the
      process's replicas will take (arenas, workspace, host buffers) and
      compares it with the memory there is: on GPUs each GPU's free memory
      (cudaMemGetInfo) against the replicas on it; on the host the limits
      that would fail the allocations for real, the address-space and data
      limits (ulimit -v, ulimit -d) and the memory limit of the process's
      cgroup or an ancestor's (memory.max, v1's memory.limit_in_bytes),
      and the physical memory (MemTotal). Beyond a limit the build fails
      with MIRROR_ERR_NO_MEMORY, giving both figures and what to lower
      (max_batch, the replicas, the model), rather than growing until the
      kernel's OOM killer ends the process. The physical memory refuses
      only on a machine that says its memory cannot grow: where a
      virtio-mem device or a Hyper-V balloon is bound, or a virtio balloon
      that holds pages (a microVM whose MemTotal starts far below what it
      can have, and grows as it is used), or where /sys cannot tell, it
      gives a notice and the build goes on. The strategy desc's
      host_memory, else $MIRROR_HOST_MEMORY, overrides it: a size ("64G")
      stands in for the physical memory and refuses, "advisory" makes it
      a notice on any machine (the GPU pack's run.sh sets it); the ulimits
      and the cgroup refuse whatever it says. What the process holds
      already is not counted, so a build that passes may still meet a
      failed allocation: that is MIRROR_ERR_NO_MEMORY too, and frees what
      the build took.

   SIDE OUTPUTS (fit's history, plot, trace and TensorBoard events; mirror_trace_write)

      They get a checkpoint's care. Each is written to a temporary file beside
      its path (named as a checkpoint's, PATH.tmp-mirror-...), flushed to disk
      and renamed over PATH, so that PATH holds its last complete version
      whatever happens (a full disk, a crash; a crash leaves the temporary
      file, which no later run removes: no lock says that its writer is gone).
      A PATH that exists and is not a regular file (a directory, a FIFO, a
      device, a symbolic link) is refused with MIRROR_ERR_ARGUMENT before
      anything is opened, so a FIFO never blocks. Before its first step fit
      refuses (MIRROR_ERR_ARGUMENT) an output (the TensorBoard directory too)
      that names a checkpoint: its checkpoint PATH, the kept PATH.1 ...
      PATH.(keep - 1), PATH.lock, or those of resumed_from, by name or as the
      same file (device and inode); the file the model's parameters were
      loaded from, which fit knows untold (mirror_weights_source: a checkpoint
      with its kept files, or a weights file); and two outputs that name one
      path. Once training has begun, a write that fails (no space, an I/O
      error) is a notice, not an error: fit trains on, saves its checkpoints,
      tries again at the next epoch, and returns MIRROR_OK with the output's
      bit in failed_outputs of the last epoch's log. (Before the first step,
      when nothing can be lost, it fails fit.) The example trainer then prints
      a warning naming the output, its final line, and exits with status 3.

      TensorBoard's events (fit desc's tensorboard, a directory) are the
      exception to the renaming: each fit appends records to a file of its
      own there. A record whose write fails is cut away again, so the file
      holds whole records, and the failure is the same notice and bit
      (MIRROR_OUTPUT_TENSORBOARD). A directory that cannot be made, a path
      that is not a directory, or one that names a checkpoint's file or
      another output (above: made where a save goes, it would fail that
      save after the whole run) fails fit before the first step. The
      scalars that do not apply to the model are left out, not written as
      zeros: grad_norm without clipping (clip_norm 0: the step computes the
      norm for the clipping alone), loss_scale where the loss is not scaled
      (fp32; bf16, whose scale is 1), skipped_steps in fp32 (a non-finite
      step fails fp32's fit instead). The history keeps all its columns.

      Directories. fit makes the missing directories of every path it
      writes, as mkdir -p does (each with 0777 less the umask): the
      TensorBoard directory itself and its parents, and the directory of
      the history, the plot, the trace and the checkpoint. A name on the way
      that is not a directory fails with MIRROR_ERR_ARGUMENT, one that
      cannot be made (no permission, a read-only file system) with
      MIRROR_ERR_IO, each naming it. mirror_checkpoint_save and
      mirror_trace_write, called alone, make none: a missing directory
      fails them with MIRROR_ERR_IO.

      A fit refused before its first step leaves the disk as it found it.
      It checks every path (the outputs', the checkpoint's) before it makes
      anything; only then does it make the directories, take the
      checkpoint's PATH.lock and write the first versions of the history,
      the plot and the trace to temporary files, which it renames over
      their paths once every output is ready (and makes the TensorBoard
      event file). Where one of those steps fails, what it made is removed:
      the temporary files, the event file, a PATH.lock it made (removed
      holding its lock; a saver that locked the old file finds it gone and
      locks the new one), and the directories it made, innermost first.
      Files and directories that were there before stay as they were: an
      old plot at the path is not replaced until every output is ready.

      Modes. Every file fit and the saves make (checkpoints, PATH.1 ..,
      PATH.lock, the outputs, the event files) gets 0666 less the umask, as
      fopen gives (0644 under the usual umask 022): a checkpoint is data to
      share, and the process's umask says with whom (umask 077 keeps them
      the user's own).

   PATHS

      Any length the system opens (PATH_MAX: 4095 bytes on Linux). mirror
      joins names to some: a checkpoint's PATH.lock, PATH.N and temporary
      files (39 bytes at most), a side output's temporary file (37), a
      TensorBoard event file (129 at most), MNIST's file names (27). A
      path whose joined names would pass PATH_MAX is refused with
      MIRROR_ERR_ARGUMENT naming the limit, before anything is written;
      no path is ever cut short.

   LIMITS

      POSIX only (pthreads). Layers: dense, conv2d, relu,
      tanh, sigmoid, gelu, maxpool2d, avgpool2d, global_avgpool, dropout,
      batchnorm, flatten, and residual blocks around any of them;
      losses: softmax cross-entropy
      and mean squared error. A model is a sequence of layers; a residual
      block is a stretch of it (blocks do not nest).

   A NEW LAYER KIND

      A layer kind lives in one place: its entry in the table of kinds
      (mirror__kinds, in >>layers; a MIRROR__ value in mirror__kind, in
      >>structs, and the entry at that place) and its functions just
      above the table, in its order: the shape rule (what it checks, its
      output shape, its parameter counts), its description in a
      checkpoint's "model" and the way back from it, its tensors' names
      and W's shape in a checkpoint, their initialisation, forward and
      backward. mirror__add, the passes, the checkpoints and the build
      read the entry; none names the kind. A new kind also needs its
      public call (mirror_<kind> in >>model and pool, and its line in
      the API INDEX); any device operation it needs: a member of the
      backend table (>>backend), its CPU op (>>cpu backend, the shared
      math in loops), its CUDA kernel and launcher (mirror_cuda.h); and
      tools/mirror_model.py's reading of its description (ARITY, the
      PyTorch module, the ONNX node). Its tests: tests/README.md, "A new
      layer kind".

   INSIDE mirror.h

      Sections are marked `// >>name` (grep for them), in this order:
      manual; declarations (strategy, model, steps, data, fit,
      checkpoints); shared math (every per-element formula, MIRROR_HD, run
      by the CPU loops and the CUDA kernels alike); then, under
      MIRROR_IMPLEMENTATION:

        structs               the private state, together
        errors                result codes, messages, the logger
        allocation            sizes checked, MIRROR_MALLOC
        random                splitmix64
        threads               the replica threads, waiting with a deadline,
                              one call at a time
        gemm                  the built-in GEMM (register tiles per ISA)
        backend               the table of device operations
        cpu backend           the reference backend: the shared math in loops
        layers                the layer kinds (each in one place, and their
                              table); forward and backward of a shard
        reducers              sums across replicas (and results across
                              processes)
        loss scaling          the scaler, the fp32 guard, Inf and NaN
        optimizers            the update alone (sharded or not)
        step                  the training step, mirror_train_step last

      That is the core, in the order a step uses it; what surrounds it:

        strategy and devices  mirror_strategy_create and its defaults
        processes             what the core needs across processes: one
                              process's table, and MPI's (MIRROR_MPI)
        model and pool        layers added, the arenas planned and built
        inspection            timing, replica checks, metrics, evaluate a
                              batch, predict
        data                  datasets in memory, the synthetic digits
        files                 files read and written safely (paths,
                              bounded reads, gzip, temporary files renamed)
        loaders               IDX, MNIST, CIFAR-10, .npy (MIRROR_NO_LOADERS
                              leaves them out)
        checkpoints           safetensors: save, load, resume, rebuild
        outputs               the side outputs: trace, history, plot,
                              TensorBoard, and fit's list of them
                              (MIRROR_NO_OUTPUTS leaves them out)
        fit                   mirror_fit; it reaches the side outputs
                              through their list alone

      No function of loaders or outputs is called from the core
      (tests/run.sh checks it).

      mirror_cuda.h follows the same plan for the GPU: its kernels call the
      shared math; its backend and reducer tables are the CPU's in kind.

   REVISION HISTORY (the newest entry's number is MIRROR_VERSION)

      0.5  several processes over MPI (MIRROR_MPI); learning-rate schedules,
           gradient clipping and accumulation; tanh, sigmoid, GELU, average
           and global average pooling, dropout, batch normalisation
           (synchronised across replicas and processes), residual blocks;
           deterministic mode (bitwise the same for any replica count).
      0.4  mixed precision: fp16 and bf16 storage, loss scaling, fused updates.
      0.3  checkpoints (safetensors, atomic, exact resume), CIFAR-10 and .npy.
      0.2  mirror_cuda.h: GPU replicas, NCCL and copy reducers.
      0.1  CPU replicas, layers, optimizers, data, fit.
*/

#if defined(MIRROR_IMPLEMENTATION) && !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime, fileno under -std=c99 */
#endif

#ifndef MIRROR_H
#define MIRROR_H

#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// >>declarations ============================================================

/* The newest entry of the REVISION HISTORY; make install writes it into
   mirror.pc (pkg-config --modversion mirror). */
#define MIRROR_VERSION "0.5"

#ifndef MIRROR_API
#ifdef MIRROR_STATIC
#define MIRROR_API static
#else
#define MIRROR_API extern
#endif
#endif

/* Shared math is host code under a C compiler and host+device code under nvcc. */
#ifdef __CUDACC__
#define MIRROR_HD __host__ __device__
#else
#define MIRROR_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes: 0 is success, errors are negative and grouped by area. */
#define MIRROR_RESULT_LIST(X)                                                  \
    X(MIRROR_OK, 0, "success")                                                 \
    X(MIRROR_ERR_ARGUMENT, -1, "invalid argument")                             \
    X(MIRROR_ERR_SHAPE, -2, "layer shapes do not chain")                       \
    X(MIRROR_ERR_STATE, -3, "call out of order")                               \
    X(MIRROR_ERR_CAPACITY, -4, "too large: a batch beyond the arenas, or a buffer too small") \
    X(MIRROR_ERR_LABEL, -5, "label out of range")                              \
    X(MIRROR_ERR_NO_MEMORY, -10, "out of memory")                              \
    X(MIRROR_ERR_THREAD, -11, "thread creation failed")                        \
    X(MIRROR_ERR_DEVICE, -12, "device unavailable")                            \
    X(MIRROR_ERR_IO, -20, "file input/output failed")                          \
    X(MIRROR_ERR_FORMAT, -21, "malformed file")                                \
    X(MIRROR_ERR_UNSUPPORTED, -22, "not supported: a type, format or feature (the message says which)") \
    X(MIRROR_ERR_CHECKSUM, -23, "checksum mismatch")                           \
    X(MIRROR_ERR_STOPPED, -30, "stopped by the epoch hook")                  \
    X(MIRROR_ERR_NOT_FINITE, -31, "loss or gradients not finite")            \
    X(MIRROR_ERR_REPLICAS, -32, "replicas hold different parameters")        \
    X(MIRROR_ERR_PEER, -40, "another process failed")                        \
    X(MIRROR_ERR_TIMEOUT, -41, "another process, or the work queued on a GPU, did not finish in time")

typedef enum mirror_result {
#define MIRROR__ENUM(name, value, text) name = value,
    MIRROR_RESULT_LIST(MIRROR__ENUM)
#undef MIRROR__ENUM
} mirror_result;

/* The code of a failure and its detail ("conv2d (layer 2): kernel 5 larger
   than the padded input 4x4"). Zero-initialise before use. The message has
   room for the longest the library writes, each path, name, list and
   description in it cut to a bound of its own; one cut at its end ends
   in "...". */
typedef struct mirror_error {
    int code;
    char message[2048];
} mirror_error;

/* The text of a result code ("invalid argument" for MIRROR_ERR_ARGUMENT),
   or "unknown result" for a value that is not one. */
MIRROR_API const char *mirror_result_string(int result);

enum { MIRROR_LOG_ERROR = 1, MIRROR_LOG_NOTICE = 2 };
/* Sees every error and notice. The default prints notices to stderr and
   leaves errors to the caller. Set it before creating a strategy. */
typedef void (*mirror_log_fn)(void *user, int level, const char *message);
MIRROR_API void mirror_set_logger(mirror_log_fn fn, void *user);

// >>declarations: strategy --------------------------------------------------

typedef struct mirror_strategy mirror_strategy;

typedef enum mirror_reducer {
    MIRROR_REDUCER_DEFAULT = 0, /* $MIRROR_REDUCER, else NCCL on distinct GPUs, else copy */
    MIRROR_REDUCER_NCCL,        /* NCCL all-reduce: replicas on distinct GPUs */
    MIRROR_REDUCER_COPY         /* sum on one device in replica order, then broadcast */
} mirror_reducer;

typedef struct mirror_strategy_desc {
    /* "cpu:4" is four CPU replicas, "cpu" one per online core; with
       mirror_cuda.h, "cuda" is every visible GPU, "cuda:0,1" two GPUs and
       "cuda:0,0,0,0" four replicas on GPU 0. NULL: the MIRROR_DEVICES
       environment variable (when num_replicas is 0 too), else every GPU in
       a CUDA build that finds one, else "cpu". */
    const char *devices;
    /* 0: as many as the device list gives. For "cpu", sets the count; for
       "cuda", takes the first num_replicas GPUs, placing replicas on the
       GPUs in turn when there are more replicas than GPUs (the copy
       reducer then sums them). More than 8 CPU replicas
       per core is allowed, with a notice: they are no faster, and each
       holds its own parameters, gradients and activations. */
    size_t num_replicas;
    /* GPU replicas only; the CPU reducer sums in replica order already. */
    mirror_reducer reducer;
    /* MIRROR_MPI (see PROCESSES): a pointer to the MPI_Comm whose processes
       the strategy spans; NULL is MPI_COMM_WORLD, &MPI_COMM_SELF this
       process alone. devices and num_replicas count this process's
       replicas. Ignored without MIRROR_MPI. */
    const void *mpi_comm;
    /* Seconds a process waits for the others in a cross-process operation,
       or for the work queued on a GPU (an NCCL all-reduce included),
       before it fails with MIRROR_ERR_TIMEOUT; 0: $MIRROR_TIMEOUT, else
       300. A negative, NaN or infinite one is MIRROR_ERR_ARGUMENT. */
    double timeout;
    /* The host memory a model build plans on (see MEMORY in the manual).
       NULL or "": $MIRROR_HOST_MEMORY, else what the system says. A size,
       "64G", "512M", "1.5T" or bytes (K, M, G, T: powers of 1024), stands
       in for the physical memory; "advisory" makes the physical memory a
       warning, never a refusal (a machine whose memory grows as it is
       used). The limits that would fail the allocations for real (ulimit
       -v and -d, a cgroup's memory limit) refuse whatever it says. Anything
       else is MIRROR_ERR_ARGUMENT. */
    const char *host_memory;
} mirror_strategy_desc;

MIRROR_API int mirror_strategy_create(const mirror_strategy_desc *desc,
                                      mirror_strategy **out, mirror_error *err);
MIRROR_API void mirror_strategy_destroy(mirror_strategy *s);
/* num_replicas_in_sync: the replicas that every step splits across, those
   of every process. */
MIRROR_API size_t mirror_num_replicas(const mirror_strategy *s);

/* Where this process stands (MIRROR_MPI; one process otherwise: rank 0 of
   1, every replica local). Its replicas are the global replicas
   first_replica, first_replica + 1, ..., first_replica + local_replicas - 1. */
typedef struct mirror_process_info {
    size_t rank, processes;
    size_t local_replicas, first_replica;
    size_t local_rank; /* among the processes on this machine (MPI_COMM_TYPE_SHARED) */
} mirror_process_info;
MIRROR_API mirror_process_info mirror_strategy_process(const mirror_strategy *s);
/* Every process passes its own result (and, when it failed, its message in
   err); every process gets MIRROR_OK when all succeeded, else the first
   failing process's code there and MIRROR_ERR_PEER elsewhere, with that
   process's message ("rank 1 failed: data/train-images-idx3-ubyte: ...")
   in err. For steps outside the library that may fail on one process only
   (loading data): without it, the others would wait in their next
   collective until the timeout. One process: returns result. */
MIRROR_API int mirror_agree(mirror_strategy *s, int result, mirror_error *err);
/* The desc with defaults applied ("cpu:2", 2). */
MIRROR_API mirror_strategy_desc mirror_strategy_query_desc(const mirror_strategy *s);
/* One line: "2 CPU replicas (threads), reducer cpu-ordered". A CUDA build
   that falls back to CPU replicas says why here too. */
MIRROR_API const char *mirror_strategy_describe(const mirror_strategy *s);

/* All-reduce SUM in place: bufs[r] is replica r's buffer of n floats (in
   replica r's device memory: host memory for CPU replicas); after
   the call every buffer holds sum over r of the inputs, added in replica
   order 0, 1, 2, ... for every element (deterministic). n may be 0. */
MIRROR_API int mirror_all_reduce_sum(mirror_strategy *s, float *const *bufs, size_t n);
/* Copy bufs[root] into every other buffer. With several processes, bufs
   are this process's replicas' and root counts the replicas of every
   process; the sum above takes in every process's replicas. */
MIRROR_API int mirror_broadcast(mirror_strategy *s, float *const *bufs, size_t n, size_t root);

/* Replica r's contiguous shard of a global batch of n: samples
   [*begin, *begin + *count). Sizes differ by at most one; early replicas
   take the extra samples; a shard is empty when n < replicas. This is the
   split of a model outside deterministic mode; mirror_model_shard gives
   the split a model uses, in either mode. */
MIRROR_API void mirror_shard(size_t n, size_t replicas, size_t r, size_t *begin, size_t *count);

// >>declarations: model -----------------------------------------------------

typedef struct mirror_model mirror_model;

typedef enum mirror_loss {
    MIRROR_LOSS_DEFAULT = 0,
    /* loss_i = logsumexp(z_i) - z_i[y_i]; z [B,K] logits, y [B] in [0,K) */
    MIRROR_LOSS_SOFTMAX_CE,
    /* loss_i = (1/D) sum_j (z_ij - t_ij)^2; z, t [B,D] (torch mean MSE) */
    MIRROR_LOSS_MSE
} mirror_loss;

typedef enum mirror_init {
    MIRROR_INIT_DEFAULT = 0, /* He before a relu, Glorot elsewhere */
    MIRROR_INIT_HE,          /* W ~ U(-a, a), a = sqrt(6 / fan_in) */
    MIRROR_INIT_GLOROT       /* W ~ U(-a, a), a = sqrt(6 / (fan_in + fan_out)) */
} mirror_init;

typedef enum mirror_optimizer_kind {
    MIRROR_OPT_DEFAULT = 0,
    /* g += wd*w; v = mu*v + g; w -= lr * (nesterov ? g + mu*v : v) */
    MIRROR_OPT_SGD,
    /* g += wd*w; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
       w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps) */
    MIRROR_OPT_ADAM,
    /* w *= 1 - lr*wd, then Adam without the L2 term */
    MIRROR_OPT_ADAMW
} mirror_optimizer_kind;

/* Learning-rate schedules (torch.optim.lr_scheduler's StepLR, CosineAnnealingLR
   and LinearLR warmup, stepped once per step). See mirror_optimizer_desc. */
typedef enum mirror_lr_schedule {
    MIRROR_LR_CONSTANT = 0, /* lr */
    MIRROR_LR_STEP,         /* lr * gamma^floor(t / step_size) */
    MIRROR_LR_COSINE,       /* min_lr + (lr - min_lr) (1 + cos(pi t / T)) / 2, t <= T = total_steps - warmup */
    MIRROR_LR_CALLBACK      /* lr_fn(lr_user, s) */
} mirror_lr_schedule;

typedef struct mirror_optimizer_desc {
    mirror_optimizer_kind kind;
    float lr;
    float momentum; /* SGD */
    int nesterov;   /* SGD, needs momentum > 0 */
    float weight_decay;
    float beta1, beta2, eps; /* Adam, AdamW */
    /* The learning rate of step s = 1, 2, ... (mirror_steps: every step run,
       skipped ones included): the schedule at t = s - warmup - 1 (t = 0
       during the warmup), times s / warmup during the first warmup steps.
       mirror_current_lr gives it; fit logs it. Checkpoints store the
       schedule and the step, so a resumed run gets the same rates. */
    mirror_lr_schedule schedule;
    uint64_t warmup;
    uint64_t step_size; /* MIRROR_LR_STEP: steps between two decays */
    float gamma;        /* MIRROR_LR_STEP: the decay, in (0, 1] (0: 0.1) */
    uint64_t total_steps; /* MIRROR_LR_COSINE: steps, warmup included, after which the rate is min_lr */
    float min_lr;         /* MIRROR_LR_COSINE: in [0, lr] */
    float (*lr_fn)(void *user, uint64_t step); /* MIRROR_LR_CALLBACK: a rate >= 0 for step s */
    void *lr_user;
    /* Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_), 0:
       off. After the all-reduce and, in mixed precision, the unscaling,
       before the update: the gradient of L2 norm n is multiplied by
       min(1, clip_norm / (n + 1e-6)), the same on every replica.
       mirror_last_grad_norm gives n; fit logs it. */
    float clip_norm;
} mirror_optimizer_desc;

/* Where a model's weights, activations and gradients are stored. Mixed
   modes keep fp32 master weights and optimizer state; the forward and
   backward pass see 16-bit values, the gradients are all-reduced in 16 bits,
   and one fused update per step writes the masters and the 16-bit copy. */
typedef enum mirror_precision {
    MIRROR_PRECISION_FP32 = 0,
    MIRROR_PRECISION_FP16, /* IEEE binary16: 5 exponent bits; needs loss scaling */
    MIRROR_PRECISION_BF16  /* bfloat16: fp32's 8 exponent bits, 8 significant bits */
} mirror_precision;

typedef enum mirror_loss_scaling {
    MIRROR_SCALE_DEFAULT = 0, /* dynamic for fp16, none otherwise */
    MIRROR_SCALE_DYNAMIC,     /* torch.amp.GradScaler: halve on overflow, grow when stable */
    MIRROR_SCALE_STATIC,      /* a fixed scale, init_scale */
    MIRROR_SCALE_NONE         /* a scale of 1 */
} mirror_loss_scaling;

/* The loss scaler of a mixed-precision model. The loss gradient is
   multiplied by the scale, so that small gradients survive 16-bit storage;
   after the all-reduce every gradient is divided by it again and checked.
   A step whose gradient holds an Inf or NaN is skipped on every replica
   (nothing changes but this state), and a dynamic scale is halved; after
   growth_interval finite steps in a row it doubles. Mixed modes always
   check and skip, whatever the kind (with NONE, at a scale of 1). */
typedef struct mirror_loss_scale_desc {
    mirror_loss_scaling kind;
    float init_scale;         /* 65536 (2^16); STATIC: the scale, at least min_scale */
    float growth_factor;      /* 2 */
    float backoff_factor;     /* 0.5 */
    uint32_t growth_interval; /* 2000 */
    float min_scale;          /* 1: a dynamic scale never goes below, however many overflows */
    float max_scale;          /* 16777216 (2^24): nor above */
    /* Consecutive skipped steps that make a step fail with
       MIRROR_ERR_NOT_FINITE instead of training nothing in silence: 50. */
    uint32_t max_consecutive_skips;
    /* On a skipped step, find the first layer (from the loss back) and
       replica whose gradient is not finite, and log it. This waits for the
       device at every step; for debugging. */
    int report_nonfinite;
} mirror_loss_scale_desc;

/* The scaler's state, identical on every replica (see mirror_loss_scale_get). */
typedef struct mirror_loss_scale_state {
    float scale;
    float last_scale;           /* the scale the last step's gradients carried */
    uint32_t good_steps;        /* finite steps since the scale last changed */
    uint32_t consecutive_skips; /* skipped steps in a row, up to now */
    uint32_t found_nonfinite;   /* set during a step; 0 between steps */
    uint32_t last_skipped;      /* the last step was skipped */
    uint64_t skipped;           /* skipped steps in all */
    uint64_t applied;           /* optimizer steps applied (Adam's t) */
    /* Gradient clipping (clip_norm > 0): the last step's reduced, unscaled
       gradient's L2 norm and the factor the update multiplied it by. */
    float grad_norm;
    float clip; /* 0 until a step is clipped or not: then in (0, 1] */
} mirror_loss_scale_state;

typedef enum mirror_shard_update {
    MIRROR_SHARD_AUTO = 0, /* CPU replicas: on; GPUs: off */
    MIRROR_SHARD_ON,
    MIRROR_SHARD_OFF
} mirror_shard_update;

typedef struct mirror_model_desc {
    mirror_strategy *strategy; /* required */
    /* Shape of one input sample, NCHW without the N. A vector of F features
       is channels = F, height = width = 1 (0 means 1 for height and width). */
    size_t channels, height, width;
    size_t max_batch; /* largest global batch of a step; evaluation and prediction
                         run larger inputs in chunks of max_batch */
    mirror_loss loss;
    mirror_init init;
    uint64_t seed; /* parameter initialisation */
    mirror_optimizer_desc optimizer;
    mirror_precision precision;
    mirror_loss_scale_desc loss_scale; /* mixed precision only */
    /* Deterministic mode (1: on; CPU replicas, and GPU replicas in one
       process: across processes they are refused): the parameters are
       bitwise the same for any replica count and any split of the global
       batch.
       The batch is cut into chunks of `chunk` samples (0: 16), each
       replica takes whole chunks, and the chunks' gradients are added in
       chunk order. See DETERMINISTIC MODE in the manual. */
    int deterministic;
    size_t chunk;
    /* The sharded optimizer update (ZeRO stage 1): each replica updates one
       slice of the parameters and keeps that slice's optimizer state alone.
       MIRROR_SHARD_AUTO: on CPU replicas (shared memory), off on GPUs.
       MIRROR_SHARD_ON with CPU replicas in several processes: across the
       processes too, each updating its slice alone (then reading the
       gradient or the optimizer state, and saving a checkpoint, gather them
       in every process; see PROCESSES). See the update in THE STEP. */
    mirror_shard_update shard_update;
    /* 1: each replica's forward and backward of a training step, and its
       update, are recorded once per shape (CUDA graphs) and replayed, two
       launches a step instead of one per kernel. GPUs only; elsewhere, for
       models with batchnorm layers and in deterministic mode, the step
       runs as without (a notice says why), and so it does while
       mirror_timing records; a sharded update is not recorded. Once the model is built,
       mirror_model_query_desc reports whether they are in use. See GRAPHS
       in mirror_cuda.h. */
    int graphs;
    /* 1: every replica keeps its own part of the last step, what
       TensorFlow's strategy.run hands back per replica: its gradient before
       the all-reduce (its shard's, divided by the global batch; with
       accumulation, its sum over the step's micro-batches) and its metrics.
       Read them with mirror_get_replica_gradients and
       mirror_get_replica_metrics. It costs a copy of the gradient a
       replica and step (on a GPU a wait for the device, and no bucketed
       all-reduce during backward); 0, the default: no memory, no work. */
    int replica_values;
} mirror_model_desc;

/* Creates an empty model; add layers, then build. */
MIRROR_API int mirror_model_create(const mirror_model_desc *desc, mirror_model **out,
                                   mirror_error *err);
MIRROR_API void mirror_model_destroy(mirror_model *m);
/* The detail of the model's last error ("" when none). */
MIRROR_API const char *mirror_model_error(const mirror_model *m);
MIRROR_API mirror_model_desc mirror_model_query_desc(const mirror_model *m);

/* Layers. Shapes per sample, NCHW; the first error is kept and returned
   again by mirror_model_build, so a model can be written without checks. */

/* y = x W^T + b.  x [B,F] -> y [B,units];  W [units,F], b [units].
   Needs a flat input (channels = F, height = width = 1): see mirror_flatten. */
MIRROR_API int mirror_dense(mirror_model *m, size_t units);
/* y[o] = b[o] + sum_{c,i,j} W[o,c,i,j] x_pad[c, s*y+i, s*x+j].
   x [B,C,H,W] -> y [B,filters,Ho,Wo], Ho = (H + 2p - k)/s + 1;
   W [filters,C,k,k], b [filters]; zero padding p. */
MIRROR_API int mirror_conv2d(mirror_model *m, size_t filters, size_t kernel, size_t stride,
                             size_t padding);
/* y = max(0, x), any shape. */
MIRROR_API int mirror_relu(mirror_model *m);
/* Smooth activations, elementwise, any shape: tanh; sigmoid 1 / (1 + e^-x);
   GELU x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (PyTorch's exact GELU). */
MIRROR_API int mirror_tanh(mirror_model *m);
MIRROR_API int mirror_sigmoid(mirror_model *m);
MIRROR_API int mirror_gelu(mirror_model *m);
/* Inverted dropout (torch.nn.Dropout): in training each element is zeroed
   with probability p, the rest multiplied by 1 / (1 - p); in evaluation and
   prediction the layer passes its input. The mask of an element is a hash
   of (the model's seed, the layer, the step, the sample's place in the
   step's global batch, the element): the same for any replica count and
   split, and nothing is stored (backward hashes again). p in [0, 1). */
MIRROR_API int mirror_dropout(mirror_model *m, float p);
/* y[c,i,j] = max over the window x[c, s*i .. s*i+k-1, s*j .. s*j+k-1].
   x [B,C,H,W] -> y [B,C,Ho,Wo], Ho = (H - k)/s + 1 (no padding). */
MIRROR_API int mirror_maxpool2d(mirror_model *m, size_t window, size_t stride);
/* Average pooling: each output the mean of a window x window patch of its
   channel, taken every stride; [C,H,W] -> [C,(H-window)/stride+1,...]. */
MIRROR_API int mirror_avgpool2d(mirror_model *m, size_t window, size_t stride);
/* Global average pooling: each channel's mean over its whole plane;
   [C,H,W] -> [C,1,1] (ResNet's head). */
MIRROR_API int mirror_global_avgpool(mirror_model *m);
/* [B,C,H,W] -> [B,C*H*W,1,1]; no data moves. */
MIRROR_API int mirror_flatten(mirror_model *m);
/* Batch normalisation (torch.nn.BatchNorm2d, and BatchNorm1d on a flat
   input), any shape, per channel c over the batch and the plane:
     y = gamma[c] (x - mean[c]) / sqrt(var[c] + eps) + beta[c]
   gamma [C] (starts at 1) and beta [C] (at 0) are trained; momentum 0.1,
   eps 1e-5. In training mean and var (biased) are the batch's, and update
   the running statistics r = 0.9 r + 0.1 batch (unbiased variance), which
   evaluation and prediction use and checkpoints keep.
   MIRROR_BN_SYNC (SyncBatchNorm, the default): the statistics of the whole
   global batch, every replica of every process. In the forward pass each
   replica's shard (deterministic mode: each chunk) gives per channel, in
   double, the sum of its n values and their M2 = sum of (x - its mean)^2,
   in two passes over its own data; the parts then merge in replica and
   rank order (chunk order) by Chan's formula, M2 = M2_a + M2_b + (mean_b -
   mean_a)^2 n_a n_b / (n_a + n_b), and var = M2 / n. Nothing large cancels,
   so a mean far from 0 costs no precision (E[x^2] - E[x]^2 in float32 is
   1e-4 off at mean 100, deviation 1). In the backward pass the sums of dy
   and dy xhat add in the same order. Any replica count and split gives one
   replica's result within float32 rounding (deterministic mode: its bits).
   MIRROR_BN_LOCAL: each replica normalises by the statistics of its own
   shard (BatchNorm under DDP without SyncBatchNorm): results then depend on
   how the batch is split. The running statistics follow the global batch
   in both modes, so every replica keeps the same.
   A training batch in which a layer would normalise a single value per
   channel is refused (MIRROR_ERR_ARGUMENT), as PyTorch refuses it: its
   output would be beta whatever the input. That is a flat input (height =
   width = 1) of one sample: a batch of 1, or in local mode a replica's
   shard of 1 (an empty shard is fine). mirror_fit checks its batch and its
   last, shorter batch before the first step (drop_remainder drops that).
   A step that fails (a non-finite fp32 step), or a batch whose statistics
   are not finite, leaves the running statistics as they were. */
typedef enum mirror_batchnorm_mode { MIRROR_BN_SYNC = 0, MIRROR_BN_LOCAL = 1 } mirror_batchnorm_mode;
MIRROR_API int mirror_batchnorm(mirror_model *m, mirror_batchnorm_mode mode);
/* Residual blocks: mirror_residual opens a block, the layers after it form
   its body F, mirror_residual_end closes it: y = F(x) + P(x), x the block's
   input. P is the identity when F keeps the shape; otherwise a 1x1
   convolution with a bias (weight [C_out, C_in, 1, 1]) whose stride s is
   the smallest with (H - 1)/s + 1 = H_out (and the same for W), as in
   ResNet's downsampling blocks; a shape no stride reaches is an error.
   Blocks follow each other but do not nest; every block must be closed
   before build. */
MIRROR_API int mirror_residual(mirror_model *m);
MIRROR_API int mirror_residual_end(mirror_model *m);

/* Allocates every replica's arenas and initialises the parameters from the
   model's seed, identically on every replica. MIRROR_ERR_NO_MEMORY, before
   anything is allocated, when the arenas would not fit in the memory there
   is (see MEMORY), or when an allocation fails: a failed build frees what
   it took, and the model may be destroyed or built again. */
MIRROR_API int mirror_model_build(mirror_model *m);

/* Sizes after build: parameters (= gradients), optimizer state floats (per
   replica on GPUs, once for all CPU replicas), and the model's output width
   (classes for softmax CE). */
MIRROR_API size_t mirror_num_parameters(const mirror_model *m);
MIRROR_API size_t mirror_optimizer_state_size(const mirror_model *m);
MIRROR_API size_t mirror_num_outputs(const mirror_model *m);
/* One line per layer with shapes and parameter counts, then a total line
   ("total  N params, M bytes in fp32"), into buf. 128 bytes per layer
   plus 128 always suffice. A buf too small gets what fits (terminated) and
   MIRROR_ERR_CAPACITY, whose message (mirror_model_error) says how many
   bytes the whole needs. */
MIRROR_API int mirror_model_summary(mirror_model *m, char *buf, size_t size);
/* The same summary written to a stream: mirror_model_print_summary(m, stdout).
   MIRROR_ERR_IO when the stream fails. */
MIRROR_API int mirror_model_print_summary(mirror_model *m, FILE *out);

/* Copies replica r's flat parameters, gradients (after a step: the reduced
   mean gradient of the last global batch) or optimizer state to dst, which
   holds n floats (n must be the arena's size). Adam's state is m then v.
   In fp16 and bf16: the fp32 masters, and the reduced 16-bit gradient
   widened and divided by the loss scale it carried. With several
   processes r counts this process's replicas. Each replica's own gradient,
   before the all-reduce: mirror_get_replica_gradients. */
MIRROR_API int mirror_get_parameters(mirror_model *m, size_t r, float *dst, size_t n);
MIRROR_API int mirror_get_gradients(mirror_model *m, size_t r, float *dst, size_t n);
MIRROR_API int mirror_get_optimizer_state(mirror_model *m, size_t r, float *dst, size_t n);
/* Sets the parameters of every replica from src (n floats). */
MIRROR_API int mirror_set_parameters(mirror_model *m, const float *src, size_t n);
/* Hashes the parameters (and optimizer state) of every replica of every
   process and compares them with replica 0's: MIRROR_OK when all are
   bitwise equal, else MIRROR_ERR_REPLICAS naming the first replica that
   differs and its process. mirror_fit runs it every check_replicas_every
   steps when asked. */
MIRROR_API int mirror_check_replicas(mirror_model *m);
/* The learning rate the next step will use (the schedule's, see
   mirror_optimizer_desc); 0 on a NULL or unbuilt model. */
MIRROR_API float mirror_current_lr(mirror_model *m);
/* With gradient clipping (clip_norm > 0): the L2 norm of the last step's
   reduced (and unscaled) gradient, before clipping; 0 without clipping or
   before the first step. Waits for the device. */
MIRROR_API float mirror_last_grad_norm(mirror_model *m);
/* Optimizer steps taken (the t of Adam's bias correction); skipped steps
   do not count. In a mixed-precision model this waits for the device. */
MIRROR_API uint64_t mirror_optimizer_steps(const mirror_model *m);
/* The loss scaler's state (replica 0's; every replica holds the same).
   Waits for the device. A model in fp32 has no scaler: MIRROR_ERR_STATE. */
MIRROR_API int mirror_loss_scale_get(mirror_model *m, mirror_loss_scale_state *out);
/* "fp32", "fp16", "bf16"; and the scaler kinds "dynamic", "static", "none". */
MIRROR_API const char *mirror_precision_name(mirror_precision p);
MIRROR_API const char *mirror_loss_scaling_name(mirror_loss_scaling k);

/* The bytes replica r's arenas hold. On a GPU each parameter tensor starts
   at a 256-byte boundary, so parameters, gradients and optimizer state hold
   up to 252 bytes of padding a tensor beside 4 bytes a value. */
typedef struct mirror_memory_report {
    size_t parameters, gradients, optimizer, activations; /* bytes */
} mirror_memory_report;
MIRROR_API int mirror_memory_report_get(const mirror_model *m, size_t r, mirror_memory_report *out);

// >>declarations: steps ---------------------------------------------------

/* A global batch. Sample i is row i of x (and of labels or targets), or
   row index[i] when index is given, so a shuffled batch needs no copy. */
typedef struct mirror_batch {
    const float *x;         /* [rows, C, H, W] */
    const int32_t *labels;  /* [rows], softmax cross-entropy */
    const float *targets;   /* [rows, outputs], mean squared error */
    const size_t *index;    /* optional, [n] */
    size_t rows;            /* rows of x (and labels, targets); needed with index; without, 0 or >= n */
    size_t n;
} mirror_batch;

typedef struct mirror_metrics {
    double loss_sum; /* sum of per-sample losses */
    size_t correct;  /* argmax == label (softmax cross-entropy) */
    size_t count;    /* samples */
} mirror_metrics;

/* The rows [*begin, *begin + *count) of a global batch of n that replica
   r takes in m's steps (r counts every replica of every process, from
   mirror_strategy_process's first_replica on). Outside deterministic mode
   it is mirror_shard's even split; in deterministic mode each replica
   takes whole chunks of md.chunk samples (mirror_shard over the chunks),
   so shards may be a chunk apart: batch 64 on 3 replicas in chunks of 16
   is 32, 16 and 16. MIRROR_ERR_ARGUMENT (its message logged) for r
   beyond the replicas. */
MIRROR_API int mirror_model_shard(const mirror_model *m, size_t n, size_t r, size_t *begin, size_t *count);

/* One synchronous step on a global batch (n <= max_batch). With out, waits
   for the step's metrics; with out NULL, the host never waits for the
   device: the metrics add up on the device until mirror_take_metrics.
   MIRROR_ERR_NOT_FINITE: the step (fp32), or max_consecutive_skips steps
   in a row (mixed precision), had a non-finite loss or gradient and
   changed no parameter (see NON-FINITE VALUES). */
MIRROR_API int mirror_train_step(mirror_model *m, const mirror_batch *b, mirror_metrics *out);
/* Gradient accumulation (DDP's no_sync): one optimizer step over k
   micro-batches (each n <= max_batch), the result of one step on all
   their samples within float32 rounding. Forward and backward run on each
   in turn and the gradients add up on every replica, without
   communication; then one all-reduce and one update. out (may be NULL)
   gets the metrics of all k. Memory is that of one micro-batch. Batchnorm
   layers are the exception (as in PyTorch): each micro-batch normalises
   with its own statistics, so with them k micro-batches are not one batch
   of all their samples. */
MIRROR_API int mirror_train_steps(mirror_model *m, const mirror_batch *micro, size_t k, mirror_metrics *out);
/* The summed metrics of the steps run with out NULL since the last take. */
MIRROR_API int mirror_take_metrics(mirror_model *m, mirror_metrics *out);

/* A replica's own part of the last step (mirror_model_desc.replica_values
   = 1; otherwise MIRROR_ERR_STATE): replica r's gradient before the
   all-reduce, into dst of n floats (n the parameter count), and its
   metrics. The gradient is divided by the global batch as the step divides
   it, so the replicas' gradients add up to the reduced one: in fp32 the
   float sum in replica order, r = 0, 1, 2, ..., is mirror_get_gradients'
   bit for bit (deterministic mode adds chunk by chunk: within rounding;
   mixed precision: this is the replica's 16-bit gradient widened and
   unscaled, the reduced one rounds the sum to 16 bits once more). The
   replicas' metrics add up to the step's. With accumulation: the sums over
   the step's micro-batches. Zeros before the first step. With several
   processes r counts this process's replicas, as in mirror_get_gradients. */
MIRROR_API int mirror_get_replica_gradients(mirror_model *m, size_t r, float *dst, size_t n);
MIRROR_API int mirror_get_replica_metrics(mirror_model *m, size_t r, mirror_metrics *out);

/* A step you can see. With timing on, every step records, per replica,
   when each phase began and ended, in a ring of the last `steps` steps;
   off (0, the default) it costs one branch per phase. CPU replicas read
   the host's clock; GPU replicas record CUDA events on each replica's
   stream (the device's own times, put on the host's clock), and the host
   waits for them after each phase group, so with timing on it no longer
   queues ahead of the GPU. */
typedef enum mirror_phase {
    MIRROR_PHASE_GATHER = 0, /* the shard gathered into host buffers and uploaded (data on the device: its
                                indices uploaded, the shard gathered there) */
    MIRROR_PHASE_FORWARD,
    MIRROR_PHASE_BACKWARD,   /* the loss and backward */
    MIRROR_PHASE_ALLREDUCE,  /* the gradient sum (the sharded update: the reduce-scatter, each replica's
                                slice; deterministic mode: the chunks' sum) */
    MIRROR_PHASE_UPDATE,     /* the optimizer (and the skip check, the all-gather) */
    MIRROR_PHASE_COUNT
} mirror_phase;
MIRROR_API int mirror_timing(mirror_model *m, size_t steps);
/* Over the kept steps: the mean seconds per step of each phase on replica
   r (replica (size_t)-1: the mean over this process's replicas), and the
   imbalance, the slowest replica's mean over the mean of all (1: even). */
typedef struct mirror_phase_times {
    size_t steps;
    double seconds[MIRROR_PHASE_COUNT];
    double imbalance[MIRROR_PHASE_COUNT];
} mirror_phase_times;
MIRROR_API int mirror_phase_times_get(mirror_model *m, size_t replica, mirror_phase_times *out);
#ifndef MIRROR_NO_OUTPUTS
/* The kept steps as a Chrome trace-event JSON file (chrome://tracing,
   Perfetto): one track per replica, a span per phase with its step.
   Written beside path and renamed over it (see SIDE OUTPUTS): a path that
   exists and is not a regular file is refused (MIRROR_ERR_ARGUMENT). */
MIRROR_API int mirror_trace_write(mirror_model *m, const char *path);
/* The model's outputs for the n samples of x ([n, C, H, W]) as a NumPy
   .npy file at path: float32, shape (n, outputs), little-endian; the
   logits (mirror_predict), or with probabilities 1 the softmax
   probabilities (mirror_predict_proba). Written as a side output is, to
   a temporary file beside path renamed over it (see SIDE OUTPUTS): path
   is then the whole array, or as it was. Before any pass, refused with
   MIRROR_ERR_ARGUMENT: a path that exists and is not a regular file,
   one that names the file the model's parameters were loaded from
   (mirror_model_weights_source; a checkpoint's kept PATH.1, PATH.2, ...
   and PATH.lock too), or one of inputs (may be NULL; a NULL-terminated
   list: the files x was read from). With several processes every
   process calls it and rank 0 writes. */
MIRROR_API int mirror_predict_write(mirror_model *m, const float *x, size_t n, int probabilities, const char *path,
                                    const char *const *inputs);
#endif
/* Forward only, split across replicas, in chunks of max_batch. */
MIRROR_API int mirror_evaluate_batch(mirror_model *m, const mirror_batch *b, mirror_metrics *out);
/* out [n, outputs]: the last layer's output (logits, not probabilities). */
MIRROR_API int mirror_predict(mirror_model *m, const float *x, size_t n, float *out);
/* The same as softmax probabilities, each row summing to 1 (a model with
   the softmax cross-entropy loss; MSE models: MIRROR_ERR_ARGUMENT). */
MIRROR_API int mirror_predict_proba(mirror_model *m, const float *x, size_t n, float *out);

// >>declarations: data ------------------------------------------------------

/* Every reader of files (the loaders below, mirror_checkpoint_load) opens
   without blocking and reads regular files only: a FIFO, a device such as
   /dev/zero or a directory is refused at once (MIRROR_ERR_IO). A gzip file
   is inflated no further than its content can be: what an IDX or .npy
   header declares (not past a malformed header, whose error is then
   given), a CIFAR-10 batch (10000 records), what a checkpoint of the
   model can hold (64 MiB of header and its tensors), 4 GiB for the rest
   (MIRROR_ERR_FORMAT beyond, the message naming the file and the bound). */

/* An in-memory dataset; the library allocates and mirror_dataset_free frees. */
typedef struct mirror_dataset {
    float *x;          /* [count, channels, height, width] */
    int32_t *labels;   /* [count] in [0, num_classes), or NULL */
    float *targets;    /* [count, target_dim], or NULL */
    size_t count, channels, height, width, num_classes, target_dim;
    int borrowed; /* the arrays are the caller's (mirror_dataset_from_arrays): free frees none of them */
} mirror_dataset;

#ifndef MIRROR_NO_LOADERS
/* Loads an MNIST-format IDX pair: images (type ubyte, dims n,h,w) scaled to
   [0,1] and labels (ubyte, dims n) in [0, num_classes) (0 means 10). Plain or
   gzip files (gzip needs MIRROR_ZLIB). On error ds is left empty. */
MIRROR_API int mirror_dataset_load_idx(mirror_dataset *ds, const char *images_path,
                                       const char *labels_path, size_t num_classes,
                                       mirror_error *err);
/* DIR/train-images-idx3-ubyte[.gz] etc.: the four files of MNIST or
   Fashion-MNIST. Either output may be NULL. */
MIRROR_API int mirror_dataset_load_mnist(mirror_dataset *train, mirror_dataset *test,
                                         const char *dir, mirror_error *err);
/* CIFAR-10 binary batches (data_batch_1.bin ... test_batch.bin), the npaths
   files concatenated in order into one dataset: records of 3073 bytes, a
   label byte in [0, 10) then 32x32 pixels as R, G and B planes, giving
   3x32x32 images (NCHW as stored) scaled to [0,1] and 10 classes. Plain or
   gzip files (gzip needs MIRROR_ZLIB), each of at most one batch's 10000
   records (MIRROR_ERR_FORMAT beyond). On error ds is left empty. */
MIRROR_API int mirror_dataset_load_cifar10(mirror_dataset *ds, const char *const *paths, size_t npaths,
                                           mirror_error *err);
/* NumPy .npy files (format 1.0, 2.0 or 3.0, C order): x of dtype <f4 (copied)
   or |u1 (scaled to [0,1]) and shape (n, features) (as features x 1 x 1),
   (n, height, width) (one channel) or (n, channels, height, width) (NCHW:
   channels-last arrays, (n, height, width, channels), must be transposed
   first, or fit refuses them); y, or
   NULL for no labels, of dtype <i4, <i8 or |u1 and shape (n,), every label
   >= 0, num_classes the largest plus one (at most 65536), or of dtype <f4:
   regression targets for a mean squared error, shape (n,) (target_dim 1)
   or (n, d) (target_dim d). Plain or gzip files (gzip needs MIRROR_ZLIB);
   a header of at most 1 MiB. On error ds is left empty. */
MIRROR_API int mirror_dataset_load_npy(mirror_dataset *ds, const char *x_path, const char *y_path,
                                       mirror_error *err);
#endif
/* count (1 to 2^24 = 16777216) 28x28 hand-drawn-style digits, 10 classes,
   balanced, made from seed: random shift, rotation, scale, stroke width
   and noise. */
MIRROR_API int mirror_dataset_synthetic_digits(mirror_dataset *ds, size_t count, uint64_t seed,
                                               mirror_error *err);
MIRROR_API void mirror_dataset_free(mirror_dataset *ds);
/* A dataset over the caller's arrays: x [count, channels, height, width],
   labels [count] in [0, num_classes) or NULL, targets [count, target_dim]
   or NULL. copy 1: ds holds copies; copy 0: ds borrows the arrays, which
   must outlive it (mirror_dataset_free then frees none of them). Labels
   are checked (MIRROR_ERR_LABEL) and targets must be finite. */
MIRROR_API int mirror_dataset_from_arrays(mirror_dataset *ds, const float *x, const int32_t *labels,
                                          const float *targets, size_t count, size_t channels, size_t height,
                                          size_t width, size_t num_classes, size_t target_dim, int copy,
                                          mirror_error *err);
/* Splits all into train and validation copies (Keras' validation_split, but
   shuffled): a permutation of (seed, 0) sends val_count samples to val and
   the rest, in the permutation's order, to train. all is not changed. */
MIRROR_API int mirror_dataset_split(const mirror_dataset *all, size_t val_count, uint64_t seed, mirror_dataset *train,
                                    mirror_dataset *val, mirror_error *err);

/* perm [n]: the permutation of epoch `epoch` for `seed`: a pure function of
   (seed, epoch, n), so every replica and every process agrees on it. */
MIRROR_API int mirror_permutation(size_t *perm, size_t n, uint64_t seed, uint64_t epoch);
/* Number of global batches in an epoch: the final partial batch is kept
   unless drop_remainder. */
MIRROR_API size_t mirror_num_batches(size_t count, size_t batch, int drop_remainder);

// >>declarations: fit -------------------------------------------------------

typedef enum mirror_progress {
    MIRROR_PROGRESS_AUTO = 0, /* a bar on a terminal (not one mpirun made), else one line per epoch */
    MIRROR_PROGRESS_BAR,
    MIRROR_PROGRESS_LINES,
    MIRROR_PROGRESS_NONE
} mirror_progress;

typedef struct mirror_epoch_log {
    size_t epoch, epochs; /* epoch counts from 1 */
    size_t steps, samples;
    double train_loss, train_acc;
    double val_loss, val_acc; /* -1 without a validation set */
    double seconds;           /* this epoch's training time */
    double samples_per_s;     /* this epoch's training throughput */
    double elapsed;           /* since fit started, validation included */
    /* Mixed precision: the loss scale at the epoch's end and the steps it
       skipped (non-finite gradients); 0 and 0 in fp32. */
    double loss_scale;
    uint64_t skipped;
    /* The learning rate of the epoch's last step; with a schedule or a
       warmup, fit's progress bar and epoch line show it. */
    double lr;
    /* With gradient clipping: the last step's gradient norm before
       clipping (the epoch line shows it); 0 otherwise. */
    double grad_norm;
    /* The side outputs (fit desc's history, plot, trace) whose latest
       write failed, as MIRROR_OUTPUT_* bits: their files hold their last
       complete version. A notice names each failure as it happens; fit
       trains on, saves its checkpoint and returns MIRROR_OK for them. The
       writing process's (rank 0's); 0 elsewhere. */
    unsigned failed_outputs;
    /* Where the training data lived (fit desc's data_on_device): 1 in
       device memory, 0 gathered on the host. */
    int data_on_device;
} mirror_epoch_log;

enum { MIRROR_OUTPUT_HISTORY = 1, MIRROR_OUTPUT_PLOT = 2, MIRROR_OUTPUT_TRACE = 4, MIRROR_OUTPUT_TENSORBOARD = 8 };

/* Called after every epoch; a non-zero return stops fit (MIRROR_ERR_STOPPED).
   With several processes every process calls its hook, and rank 0's answer
   counts for all. The hooks (and a logger) run inside fit: they may read
   the model (parameters, evaluate, predict, summary), set its parameters,
   load a checkpoint's weights (weights_only) and save checkpoints, but
   not fit it again (mirror_fit returns MIRROR_ERR_STATE), load a whole
   checkpoint (its step count and cursor are fit's: MIRROR_ERR_STATE) or
   destroy it (ignored; mirror_model_error says so). A step they take is
   an extra step of the run. */
typedef int (*mirror_epoch_fn)(void *user, const mirror_epoch_log *log);

/* fit's running numbers every log_every steps, for hand-made logging. */
typedef struct mirror_step_log {
    size_t epoch, epochs;  /* epoch counts from 1 */
    size_t step, steps;    /* this epoch's steps done, and in all */
    uint64_t global_step;  /* the model's steps run */
    size_t samples;        /* this epoch's samples so far */
    double loss, acc;      /* their means */
    double lr, seconds;    /* the last step's rate; this epoch's time so far */
} mirror_step_log;
typedef int (*mirror_step_fn)(void *user, const mirror_step_log *log);

/* Where fit's data live while it trains (mirror_fit_desc.data_on_device).
   On the device, each replica's device holds a copy of the dataset
   (16-bit in mixed precision), uploaded once, and a step sends its rows'
   indices alone: the replicas gather, augment and narrow their shards
   there. On the host, each replica's thread gathers its shard into host
   buffers every step, and a GPU replica uploads it. */
typedef enum mirror_data_place {
    MIRROR_DATA_AUTO = 0, /* GPUs: on the device where the data fit; CPU replicas: gathered in place */
    MIRROR_DATA_ON,       /* on the device where the data fit, CPU replicas too (a copy in host memory) */
    MIRROR_DATA_OFF       /* on the host */
} mirror_data_place;

typedef struct mirror_fit_desc {
    const mirror_dataset *train;      /* required */
    const mirror_dataset *validation; /* optional */
    /* What the epoch line calls the validation numbers: "NAME_loss",
       "NAME_acc" (NULL: "val"); a program that validates on its test set
       says "test". The history, plot and TensorBoard keep their names. */
    const char *validation_name;
    size_t epochs;        /* in all, counting initial_epoch */
    /* Resuming from C: load the checkpoint with a cursor
       (mirror_checkpoint_load(m, path, 0, &at)) and set initial_epoch =
       at.epoch, initial_step = at.epoch_step, shuffle_seed = at.shuffle_seed
       and resumed_from = path; epochs stays the total. examples/train.c
       does so. */
    size_t initial_epoch; /* epochs already done (resume): shuffles continue */
    size_t initial_step;  /* steps of epoch initial_epoch already done (resume mid-epoch) */
    size_t batch;         /* global batch (with accumulate: the micro-batch) */
    /* Gradient accumulation: each optimizer step takes `accumulate`
       micro-batches of `batch` (mirror_train_steps), so batch x accumulate
       samples; 0 or 1: none. drop_remainder drops a last step of fewer. */
    size_t accumulate;
    int drop_remainder;
    uint64_t shuffle_seed; /* 0: the model's seed */
    mirror_progress progress;
    mirror_epoch_fn on_epoch;
    void *user;
    /* Checkpoints (see mirror_checkpoint_save): written to `checkpoint`
       every checkpoint_every steps (0: never during an epoch), after the
       last epoch and when stopped, keeping checkpoint_keep (0: 3). Before
       its first step fit checks that the path can be saved to, makes its
       directory where missing (as mkdir -p) and takes its lock for the
       whole fit: a directory that cannot be made, a target that is not a
       regular file or not a checkpoint (a user's file there), or another
       process saving there fails at once. */
    const char *checkpoint;
    size_t checkpoint_every, checkpoint_keep;
    /* When *stop becomes non-zero (a signal handler may set it), fit saves
       a checkpoint (when it has a path) and returns MIRROR_ERR_STOPPED.
       With several processes a stop on any one stops them all, after the
       same step. */
    volatile sig_atomic_t *stop;
    /* Steps between two mirror_check_replicas (0: never). */
    size_t check_replicas_every;
    /* Augmentation of the training samples (not validation), applied as a
       shard is gathered: a left-right flip with probability 1/2
       (augment_flip) and a shift by up to augment_crop_pad pixels (a
       random crop of the image padded with zeros). Each sample's draws are
       a hash of (shuffle seed, epoch, its index in the dataset): the same
       for any replica count and split. */
    int augment_flip;
    size_t augment_crop_pad;
    /* Curves without dependencies (rank 0 writes them, rewritten whole after
       every epoch, checked writable before the first step; see SIDE
       OUTPUTS in the manual for the care they get): history a CSV
       of the epoch logs (epoch, steps, samples, train_loss, train_acc,
       val_loss, val_acc, lr, grad_norm, loss_scale, skipped, seconds,
       samples_per_s); plot an SVG of loss and accuracy, training and
       validation, by epoch, that a browser shows (round ticks, 1, 2 or 5
       times a power of ten apart; the loss on a log scale, said on its
       axis, where it spans more than a decade; a legend of line swatches,
       validation dashed, so that it reads in black and white). NULL: none.
       Their directories are made where missing (SIDE OUTPUTS). With
       curve_every (steps; 0: none), both also get a point every
       curve_every steps of the run (the model's steps, which a resumed
       run continues) within an epoch, for long epochs: the epoch's
       training loss and accuracy so far, at epoch (e - 1) + s / S after step
       s of S of epoch e (the CSV's epoch column then has fractions; the
       epoch's own row stays at e); the plot draws each epoch's running
       mean as a line of its own. A resumed fit (initial_epoch or
       initial_step) continues the history it finds at that path: it keeps
       the rows up to its cursor (the points of the epoch in progress
       before initial_step too), drops those after, and appends; the plot
       is drawn from them too. A checkpoint saved mid-epoch rewrites both
       with the epoch's points so far. A history that is missing or not
       one that fit wrote starts afresh, with a notice. */
    const char *history, *plot;
    /* Every log_every steps of the run (the model's steps; 0: never)
       on_step gets the epoch's running numbers (the metrics are read from
       the device then: a GPU waits); a non-zero return stops fit as the
       epoch hook does. */
    mirror_step_fn on_step;
    size_t log_every;
    /* trace: a Chrome trace of the last 256 steps, written when fit ends,
       after the checkpoint (timing on for the fit, see mirror_timing);
       phases: an epoch line of each phase's mean time and the replicas'
       imbalance. */
    const char *trace;
    int phases;
    size_t curve_every;
    /* The checkpoint this run was loaded from (may be NULL; fit does not
       read it): history, plot, trace and tensorboard must not name it,
       nor its kept copies PATH.1, PATH.2, ... and PATH.lock, as they must
       not name `checkpoint`'s. The file the parameters were loaded from is
       spared untold (mirror_weights_source). */
    const char *resumed_from;
    /* TensorBoard's event files in this directory (made with its missing
       parents, as mkdir -p; NULL: none), by rank 0, without dependencies:
       a scalar of each curve point (each epoch, and every curve_every
       steps within one) at the model's step: epoch, loss/train,
       accuracy/train, loss/validation, accuracy/validation (the accuracies
       of the softmax cross-entropy loss), learning_rate, grad_norm (with
       clipping), loss_scale (fp16's scaled loss), skipped_steps (mixed
       precision) and samples_per_s, the history's numbers. Each fit adds a file of its
       own that starts with a session's start at the step after the
       model's, so a resumed run continues its run's curves: TensorBoard
       drops what earlier files hold from that step on. A directory that
       cannot be made or written fails fit before the first step; a write
       that fails later costs a notice (the file keeps its whole records). */
    const char *tensorboard;
    /* Where the training and validation data live (mirror_data_place): on
       the device they are copied once, at fit's start (a later fit or
       mirror_evaluate on the same arrays, unchanged, finds them there), and
       kept until the model is destroyed or another set takes their place.
       They must fit in each device's free memory less a margin (a
       sixteenth, at most 512 MiB); where they do not, a notice says so and
       the host gathers. Either way the steps give the same bits. */
    mirror_data_place data_on_device;
} mirror_fit_desc;

/* model.fit: epochs of shuffled global batches, then validation. last (may
   be NULL) receives the final epoch's log. A run resumed mid-epoch from
   a checkpoint that fit saved logs that epoch whole, as the run that was
   not stopped does: the checkpoint keeps the epoch's running sums; from
   another (saved outside fit, or by an older mirror) the epoch's log
   counts its remaining steps only, and a notice says so. Training and
   validation samples must have the model's channels, height and width,
   each (a model of flat input takes any layout of its size): channels-last
   data is refused with MIRROR_ERR_SHAPE. Metrics left on the
   device by steps before the fit (run with out NULL, or by a fit that
   failed) are dropped, not counted, and fit leaves none behind. A
   non-finite step ends it with MIRROR_ERR_NOT_FINITE and no checkpoint;
   so does the end of a mixed-precision fit of a static loss scale (or
   none) that skipped every one of its steps (a scale that always
   overflows, shorter than max_consecutive_skips): it changed no parameter. A side output
   (history, plot, trace) that cannot be written once training has begun
   costs nothing else: a notice, last->failed_outputs, and MIRROR_OK when
   the rest succeeded. A fit inside a fit on the same model (from a hook)
   returns MIRROR_ERR_STATE. */
MIRROR_API int mirror_fit(mirror_model *m, const mirror_fit_desc *desc, mirror_epoch_log *last);
/* Loss and accuracy over a dataset, in global batches of `batch` (0, or more
   than max_batch: max_batch). *out holds sums, as every mirror_metrics does:
   the mean loss is out->loss_sum / out->count, the accuracy out->correct /
   out->count. */
MIRROR_API int mirror_evaluate(mirror_model *m, const mirror_dataset *ds, size_t batch,
                               mirror_metrics *out);
/* The data of the steps that follow in each replica's device memory, as
   fit's data_on_device keeps its own (place: MIRROR_DATA_AUTO, _ON or
   _OFF): mirror_train_step(s) and mirror_evaluate_batch on a batch over
   ds's arrays (x = ds->x, rows = ds->count, its labels or targets; index
   picks the samples) then upload the rows' indices alone. *on_device (may
   be NULL): 1 where the data are on the device now, 0 where the host
   gathers (OFF, AUTO on CPU replicas, or they do not fit: a notice says
   so). The copy is taken now: arrays changed later are seen at the next
   call. ds NULL: the host gathers again. A fit on other data takes the
   copy's place; mirror_model_destroy frees it. */
MIRROR_API int mirror_keep_data(mirror_model *m, const mirror_dataset *ds, mirror_data_place place, int *on_device);

// >>declarations: checkpoints -----------------------------------------------
/* A checkpoint is a safetensors file: 8 bytes of little-endian header
   length, a JSON header, then the raw little-endian float32 tensors, so
   Python opens it with safetensors.numpy.load_file or a few lines of NumPy.
   Tensors: layers.<i>.weight and layers.<i>.bias (the fp32 master
   parameters, in the layer's shape), and the optimizer state once (not per
   replica): optimizer.momentum (SGD with momentum) or optimizer.m and
   optimizer.v (Adam, AdamW), flat. The header's __metadata__ holds the
   format ("mirror") and version ("1"), the model's layers, the optimizer
   and its hyper-parameters, gradient clipping (clip_norm), the
   learning-rate schedule (lr_schedule "constant", "step", "cosine" or
   "callback", warmup, step_size, gamma, total_steps, min_lr), precision
   ("fp32", "fp16", "bf16"), the seed, how the gradients were added up
   (deterministic, chunk, replicas in all, backend), the step (steps run),
   the data cursor (epoch, epoch_step, batch, samples, drop_remainder,
   micro_batch) and the shuffle seed, saved by fit mid-epoch the epoch's
   running numbers (epoch_loss_sum, epoch_correct, epoch_samples,
   epoch_skipped, epoch_seconds), the loss scaler ("none" in fp32, else
   "dynamic", "static" or "none") and in fp16 and bf16 its state
   (loss_scale, scaler_good_steps, scaler_consecutive_skips,
   scaler_skipped, optimizer_steps), and a CRC-32 of every tensor and of
   the header itself. The tensors are the fp32 masters in every precision,
   so any checkpoint loads into a model of any precision.

   A load that goes on training (not weights only) compares the model's
   settings with the checkpoint's run: when any differs, one notice names
   each (say "lr 0.002 (the checkpoint's: 0.001), chunk 8 (the
   checkpoint's: 16)") and says whether the run stays bitwise the one that
   was not stopped, which only another replica count in deterministic mode
   does. A fit that resumes it in micro-batches cut otherwise (not both
   whole chunks, in deterministic mode) says so too.

   Saving is atomic: the file is written beside PATH under a temporary
   name, PATH.tmp-mirror-PPPPPPPP-RRRRRRRRRRRRRRRR (the process id and 64
   random bits in hexadecimal), flushed to disk (fsync), renamed over
   PATH, and the directory is flushed. Older checkpoints are kept as
   PATH.1 (the previous one), PATH.2, ... up to keep - 1 of them: PATH is
   always the newest. A failed save (no space, I/O error, permission)
   returns an error and leaves the previous checkpoint as it was. The
   files get 0666 less the umask, as fopen gives (see SIDE OUTPUTS).

   A save replaces only regular files: a PATH (or PATH.1 ..) that is a
   directory, device, FIFO, socket or symbolic link is refused with
   MIRROR_ERR_ARGUMENT. And only its own checkpoints: PATH, and PATH.1 .. as
   far as the rotation reaches (the first missing one, or PATH.(keep - 1),
   which it replaces), must each start as a checkpoint does (the header's
   8-byte length, then {"__metadata__":{"format":"mirror",); any other file
   (a user's notes.txt, an empty file) is refused with MIRROR_ERR_ARGUMENT
   naming it, and left as it was; fit finds it before its first step (one
   behind a missing PATH.N, at the save that reaches it). A crash
   never leaves PATH or PATH.N empty or cut short (the new file is renamed
   into place whole), so such a file is not a save's; a checkpoint cut short
   by something else after its first bytes (a copy, say) still counts, and is
   replaced. PATH.N at or beyond keep is never touched. It holds a POSIX
   record lock on PATH.lock, a file it makes beside PATH and leaves there: a
   second process saving to the same path gets MIRROR_ERR_IO saying so,
   instead of the two removing each other's files. Temporary files of saves
   that crashed are removed by the next save to PATH, holding the lock: files
   named exactly as above (or PATH.1.tmp-mirror-.. and so on, a rotation's
   copy), whatever they hold; nothing else (a user's PATH.tmp.backup stays,
   even empty). Record locks belong to a process: within one process, save one
   path from one thread at a time. */

typedef struct mirror_checkpoint_info {
    uint64_t step;         /* optimizer steps taken (saving: the model's count) */
    uint64_t epoch;        /* the epoch in progress, counted from 0 */
    uint64_t epoch_step;   /* its steps already done */
    uint64_t shuffle_seed; /* the permutation's seed (mirror_permutation) */
    /* The schedule the cursor counts in: resuming with another global
       batch (the samples of one optimizer step: fit's batch times its
       accumulate), dataset size or drop_remainder would replay other
       samples. */
    uint64_t batch, samples, drop_remainder;
    /* The samples of one micro-batch (fit's batch; 0: not known) as far as
       the sums go, which a resumed fit compares: in deterministic mode
       micro-batches of whole chunks count as one of the whole step. */
    uint64_t micro_batch;
} mirror_checkpoint_info;

/* Writes replica 0's parameters and optimizer state, and cursor (may be
   NULL: zeros), to path; keep (0: 3) checkpoints in all. A failed save
   leaves a loadable PATH: the previous checkpoint. An fp32 model whose
   last step was not finite, and not yet reported, is not saved
   (MIRROR_ERR_NOT_FINITE); nor is a model whose parameters or optimizer
   state hold an Inf or NaN (an update that diverged on a finite
   gradient): the message names the tensor. */
MIRROR_API int mirror_checkpoint_save(mirror_model *m, const char *path, const mirror_checkpoint_info *cursor,
                                      size_t keep);
/* Loads path into every replica of m, which must have the same layers; it
   may have another replica count. Everything is checked (format, version,
   shapes, offsets, checksums, and values a run can give: every float
   finite, Adam's second moments and running variances not negative, no
   optimizer state at optimizer step 0) before anything in m changes. With
   weights_only, the optimizer state and step are left as they are (for
   evaluation or fine-tuning); otherwise the optimizer kind must match.
   info (may be NULL) receives the step and the data cursor. (A device
   failure while copying to the replicas is the one error that can leave
   the model partly loaded.) */
MIRROR_API int mirror_checkpoint_load(mirror_model *m, const char *path, int weights_only,
                                      mirror_checkpoint_info *info);
/* Weights from another program: the parameters and BatchNorm's running
   statistics of m from any safetensors file whose tensors carry the names
   of mirror's checkpoints (layers.<i>.weight, .bias, .running_mean,
   .running_var) or the names nn.Sequential's state_dict gives the same
   layers (<i>.weight, ...), in the model's shapes: a state_dict saved with
   safetensors.torch.save_file from the module that tools/mirror_model.py
   builds, a hand-written equivalent, or a mirror checkpoint that another
   tool rewrote (its checksums are not read). F32, F16, BF16 and F64
   tensors convert to float; optimizer.* and *.num_batches_tracked are
   passed over. Every tensor missing, of another shape or dtype, holding a
   non-finite value, or with no place in the model is named in one error
   (MIRROR_ERR_SHAPE), with both shapes where they differ, and m is left as
   it was. The header is read as the JSON it is (every escape, any number
   of metadata keys, names and values of any length; what is not used is
   passed over), up to 64 MiB. On success the run starts afresh: the
   optimizer state is zero, the step count 0, the loss scaler at its
   initial scale. err (may be NULL) receives the error, as
   mirror_model_error(m) does. */
MIRROR_API int mirror_load_weights(mirror_model *m, const char *path, mirror_error *err);
/* A model rebuilt from the architecture, optimizer, schedule, precision,
   seed, clipping and deterministic mode that a checkpoint's header stores, on strategy s (any replica
   count), then loaded (mirror_checkpoint_load, every check included): for
   inference or to train on in another program. The header's checksum, and
   the file's size against the tensors its description implies, are
   checked before the model is built (whose memory check comes before it
   allocates). max_batch 0: 256. A learning-rate callback cannot be
   stored: such a model runs at its constant lr (a notice says so). On
   failure *out is NULL. */
MIRROR_API int mirror_model_from_checkpoint(mirror_strategy *s, const char *path, size_t max_batch, mirror_model **out,
                                            mirror_checkpoint_info *info, mirror_error *err);
/* The model a checkpoint holds, as its header describes it: "input(C,H,W);"
   then each layer ("conv2d(16,3,1,1);relu;maxpool2d(2,2);...", dropout(p)
   with its rate) and the loss ("loss(softmax_ce)" or "loss(mse)"), the
   string a load compares with the model's own. Into buf, NUL-terminated;
   a description longer than size - 1 bytes is not cut:
   MIRROR_ERR_ARGUMENT gives the size it needs (16384 holds any model
   mirror builds: 64 layers at most). Reads the header alone, checked as
   mirror_model_from_checkpoint checks it (format, checksum); nothing is
   built. For a program that builds the model itself from a kind's name
   (examples/train.c's --resume without --model). */
MIRROR_API int mirror_checkpoint_describe(const char *path, char *buf, size_t size, mirror_error *err);
/* The file the model's parameters were last loaded from, by
   mirror_checkpoint_load (mirror_model_from_checkpoint too) or
   mirror_load_weights: path NULL when none was (the seed's parameters).
   fit refuses side outputs that name it (and, for a checkpoint, its kept
   PATH.1, PATH.2, ... and PATH.lock), and processes compare it (kind,
   checksum and size; not the path, which may differ between machines)
   before they train. path stays valid until the next load or
   mirror_model_destroy. */
typedef struct mirror_weights_source {
    const char *path; /* as given to the load; NULL: none */
    int checkpoint;   /* 1: a checkpoint (mirror_checkpoint_load), 0: weights (mirror_load_weights) */
    uint32_t crc32;   /* CRC-32 (zlib's) of the file's bytes as read */
    uint64_t size;    /* the bytes read */
} mirror_weights_source;
MIRROR_API mirror_weights_source mirror_model_weights_source(const mirror_model *m);


// >>shared math =============================================================
/* Every per-element or per-row formula of the library, written once. The
   CPU backend calls these in loops; CUDA kernels call the same functions and
   add only the indexing, so the CPU tests check the arithmetic the GPU runs. */

/* A float's bits and back; Inf and NaN told by their bits, so that the
   tests hold under -ffast-math too. */
MIRROR_HD static inline uint32_t mirror_hd_bits(float x)
{
    union { float f; uint32_t u; } v;
    v.f = x;
    return v.u;
}

MIRROR_HD static inline float mirror_hd_float(uint32_t u)
{
    union { float f; uint32_t u; } v;
    v.u = u;
    return v.f;
}

MIRROR_HD static inline int mirror_hd_finite(float x)
{
    return (mirror_hd_bits(x) & 0x7f800000u) != 0x7f800000u;
}

MIRROR_HD static inline int mirror_hd_isnan(float x) { return (mirror_hd_bits(x) & 0x7fffffffu) > 0x7f800000u; }

/* 16-bit storage. A 16-bit value is a uint16_t holding the bits of an IEEE
   binary16 (format MIRROR_PRECISION_FP16) or of a bfloat16, the top half of
   a float32 (MIRROR_PRECISION_BF16). Conversions from float32 round to
   nearest, ties to even, as the GPU's conversion instructions do: values
   beyond the largest finite one become Inf, those below the smallest
   subnormal become zero, NaN stays a (quiet) NaN. Widening is exact. */

/* Every candidate is computed and one is selected by a mask, with no
   branch, so that CPU loops over these vectorise (gcc turned ?: here into
   branches, and the loops into scalar ones). */
MIRROR_HD static inline uint32_t mirror_hd_select(int c, uint32_t a, uint32_t b)
{
    return b ^ ((a ^ b) & (0u - (uint32_t)c)); /* c ? a : b */
}

MIRROR_HD static inline uint16_t mirror_hd_f16_from_f32(float x)
{
    uint32_t u = mirror_hd_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    /* >= 2^-14, a normal binary16: rebias the exponent, round away the low
       13 bits to nearest even (a carry moves up an exponent, as it should) */
    uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    /* below, a subnormal: adding 0.5 makes the float addition round to a
       multiple of 2^-24, which lands in the low bits (1024 is 2^-14) */
    uint32_t sub = mirror_hd_bits(mirror_hd_float(a) + 0.5f) - 0x3f000000u;
    uint32_t big = mirror_hd_select(a > 0x7f800000u, 0x7e00u | ((a >> 13) & 0x3ffu), /* NaN, kept quiet */
                                    0x7c00u);                                        /* >= 65520: Inf */
    return (uint16_t)(sign | mirror_hd_select(a >= 0x477ff000u, big, mirror_hd_select(a >= 0x38800000u, normal, sub)));
}

MIRROR_HD static inline float mirror_hd_f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, a = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t normal = a + (112u << 23), special = a + (224u << 23); /* rebias; Inf, NaN */
    /* subnormal mant * 2^-24 = 2^-14 * (1 + mant/1024) - 2^-14, exactly */
    uint32_t sub = mirror_hd_bits(mirror_hd_float(a + (113u << 23)) - mirror_hd_float(113u << 23));
    return mirror_hd_float(sign | mirror_hd_select(a >= 0x0f800000u, special, mirror_hd_select(a >= 0x00800000u, normal, sub)));
}

MIRROR_HD static inline uint16_t mirror_hd_bf16_from_f32(float x)
{
    uint32_t u = mirror_hd_bits(x), nan = (u >> 16) | 0x40u; /* NaN, kept quiet */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* overflows to Inf, as it should */
    return (uint16_t)mirror_hd_select((u & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

MIRROR_HD static inline float mirror_hd_f32_from_bf16(uint16_t h) { return mirror_hd_float((uint32_t)h << 16); }

/* x with a subnormal value flushed to zero, its sign kept. */
MIRROR_HD static inline float mirror_hd_ftz(float x)
{
    uint32_t u = mirror_hd_bits(x);
    return (u & 0x7f800000u) ? x : mirror_hd_float(u & 0x80000000u);
}

/* One step of a dot product on bf16 pairs as AVX512_BF16's vdpbf16ps takes
   it: acc plus a1 b1, rounded, then plus a0 b0, rounded (the pair's second
   product first), every input and sum that is subnormal taken as zero.
   The product of two bf16 values fits a float's significand; fmaf keeps
   it exact where it falls below the normal range too. */
MIRROR_HD static inline float mirror_hd_dot_bf16(float acc, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1)
{
    float s = mirror_hd_ftz(fmaf(mirror_hd_ftz(mirror_hd_f32_from_bf16(a1)), mirror_hd_ftz(mirror_hd_f32_from_bf16(b1)),
                                 mirror_hd_ftz(acc)));
    return mirror_hd_ftz(fmaf(mirror_hd_ftz(mirror_hd_f32_from_bf16(a0)), mirror_hd_ftz(mirror_hd_f32_from_bf16(b0)), s));
}

/* format: MIRROR_PRECISION_FP16 or MIRROR_PRECISION_BF16. */
/* (Both converted, one selected: no branch inside a CPU loop.) */
MIRROR_HD static inline uint16_t mirror_hd_narrow(float x, int format)
{
    uint16_t b = mirror_hd_bf16_from_f32(x), h = mirror_hd_f16_from_f32(x);
    return format == MIRROR_PRECISION_BF16 ? b : h;
}

MIRROR_HD static inline float mirror_hd_widen(uint16_t h, int format)
{
    float b = mirror_hd_f32_from_bf16(h), f = mirror_hd_f32_from_f16(h);
    return format == MIRROR_PRECISION_BF16 ? b : f;
}

/* x as the 16-bit format stores it: what a layer's output keeps. */
MIRROR_HD static inline float mirror_hd_round(float x, int format)
{
    return mirror_hd_widen(mirror_hd_narrow(x, format), format);
}

/* Storage: element i of a layer buffer in format f, 0 for floats, else
   16-bit values; a store rounds once. mirror_hd_skip: the address of
   element i. */
MIRROR_HD static inline float mirror_hd_load(const void *p, size_t i, int f)
{
    return f ? mirror_hd_widen(((const uint16_t *)p)[i], f) : ((const float *)p)[i];
}

MIRROR_HD static inline void mirror_hd_store(void *p, size_t i, float v, int f)
{
    if (f)
        ((uint16_t *)p)[i] = mirror_hd_narrow(v, f);
    else
        ((float *)p)[i] = v;
}

MIRROR_HD static inline void *mirror_hd_skip(const void *p, size_t i, int f)
{
    return (unsigned char *)(uintptr_t)p + i * (f ? sizeof(uint16_t) : sizeof(float));
}


/* ---- Division by a divisor fixed before a loop ----
   A GPU has no integer divider: a 64-bit division costs it dozens of
   instructions, and the layout kernels (im2col, col2im, permute, pooling)
   would spend most of theirs splitting an index into coordinates. This is
   Granlund and Montgomery's division by invariant integers (their figure
   4.1): for d >= 1 and any 64-bit n, n / d = (t + ((n - t) >> s1)) >> s2,
   t the high half of magic * n. The kernels take their divisors as
   arguments, made once per launch by mirror_hd_divisor_of. */
typedef struct mirror_hd_divisor {
    uint64_t d, magic;
    unsigned s1, s2;
} mirror_hd_divisor;

/* The high 64 bits of a * b. */
MIRROR_HD static inline uint64_t mirror_hd_mulhi(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
    return __umul64hi(a, b);
#else
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t lh = al * bh, hl = ah * bl, mid = (al * bl >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    return ah * bh + (lh >> 32) + (hl >> 32) + (mid >> 32);
#endif
}

/* With l = ceil(log2 d): magic = floor(2^64 (2^l - d) / d) + 1, s1 =
   min(l, 1), s2 = max(l - 1, 0). The quotient comes bit by bit (2^l - d <
   d, so it fits in 64 bits). d 0 is taken as 1. */
MIRROR_HD static inline mirror_hd_divisor mirror_hd_divisor_of(uint64_t d)
{
    mirror_hd_divisor v;
    uint64_t r, q = 0;
    unsigned l = 0, i;
    d = d ? d : 1;
    while (l < 64 && ((uint64_t)1 << l) < d) l++;
    r = l == 64 ? 0 - d : ((uint64_t)1 << l) - d;
    for (i = 0; i < 64; i++) { /* (r:0) / d, one bit at a time; top: r overflowed, so r > d */
        uint64_t top = r >> 63;
        r <<= 1;
        q <<= 1;
        if (top || r >= d) {
            r -= d;
            q |= 1;
        }
    }
    v.d = d;
    v.magic = q + 1;
    v.s1 = l ? 1u : 0u;
    v.s2 = l ? l - 1 : 0u;
    return v;
}

MIRROR_HD static inline uint64_t mirror_hd_div(mirror_hd_divisor v, uint64_t n)
{
    uint64_t t = mirror_hd_mulhi(v.magic, n);
    return (t + ((n - t) >> v.s1)) >> v.s2;
}

/* n / d into *q, and the remainder returned. */
MIRROR_HD static inline uint64_t mirror_hd_divmod(mirror_hd_divisor v, uint64_t n, uint64_t *q)
{
    *q = mirror_hd_div(v, n);
    return n - *q * v.d;
}

/* The channel of element i of a [rows, channels, inner] tensor. */
MIRROR_HD static inline uint64_t mirror_hd_channel(uint64_t i, mirror_hd_divisor inner, mirror_hd_divisor channels)
{
    uint64_t row;
    return mirror_hd_divmod(channels, mirror_hd_div(inner, i), &row);
}

/* A convolution's layout, x [n, c, h, w] and its im2col col [c*k*k,
   n*ho*wo] (sample s at columns s*ho*wo ...), with the divisors that the
   layout kernels split their indices by. */
typedef struct mirror_hd_conv_shape {
    uint64_t n, c, h, w, k, stride, pad, ho, wo;
    mirror_hd_divisor by_n, by_c, by_h, by_w, by_k, by_kk, by_wo, by_hwo, by_stride;
} mirror_hd_conv_shape;

MIRROR_HD static inline mirror_hd_conv_shape mirror_hd_conv_shape_of(size_t n, size_t c, size_t h, size_t w,
                                                                     size_t k, size_t stride, size_t pad, size_t ho,
                                                                     size_t wo)
{
    mirror_hd_conv_shape g;
    g.n = n;
    g.c = c;
    g.h = h;
    g.w = w;
    g.k = k;
    g.stride = stride;
    g.pad = pad;
    g.ho = ho;
    g.wo = wo;
    g.by_n = mirror_hd_divisor_of(n);
    g.by_c = mirror_hd_divisor_of(c);
    g.by_h = mirror_hd_divisor_of(h);
    g.by_w = mirror_hd_divisor_of(w);
    g.by_k = mirror_hd_divisor_of(k);
    g.by_kk = mirror_hd_divisor_of(k * k);
    g.by_wo = mirror_hd_divisor_of(wo);
    g.by_hwo = mirror_hd_divisor_of(ho * wo);
    g.by_stride = mirror_hd_divisor_of(stride);
    return g;
}

/* col[i] of im2col: the input pixel that tap (ki, kj) of output (oy, ox)
   reads, or 0 in the zero padding. The buffers of these functions are in
   storage format f (mirror_hd_load). */
MIRROR_HD static inline float mirror_hd_im2col_at(const mirror_hd_conv_shape *g, const void *x, uint64_t i, int f)
{
    uint64_t q, row, ch, ki, oy;
    uint64_t pos = mirror_hd_divmod(g->by_hwo, i, &q), smp = mirror_hd_divmod(g->by_n, q, &row);
    uint64_t tap = mirror_hd_divmod(g->by_kk, row, &ch), kj = mirror_hd_divmod(g->by_k, tap, &ki);
    uint64_t ox = mirror_hd_divmod(g->by_wo, pos, &oy);
    uint64_t py = oy * g->stride + ki, px = ox * g->stride + kj; /* in the padded input */
    if (py < g->pad || px < g->pad || py - g->pad >= g->h || px - g->pad >= g->w) return 0.0f;
    return mirror_hd_load(x, ((smp * g->c + ch) * g->h + py - g->pad) * g->w + px - g->pad, f);
}

/* x[i] of col2im: the sum of the col entries that read pixel i, in the
   order of the taps (ki, kj), that is of the outputs (oy, ox) from the
   last: the CPU backend's order, so the same bits. */
MIRROR_HD static inline float mirror_hd_col2im_at(const mirror_hd_conv_shape *g, const void *col, uint64_t i, int f)
{
    uint64_t q, plane, smp, ix = mirror_hd_divmod(g->by_w, i, &q), iy = mirror_hd_divmod(g->by_h, q, &plane);
    uint64_t ch = mirror_hd_divmod(g->by_c, plane, &smp), py = iy + g->pad, px = ix + g->pad, oy, ox, top, right;
    uint64_t hwo = g->ho * g->wo;
    float sum = 0.0f;
    if (!g->ho || !g->wo) return 0.0f;
    top = mirror_hd_div(g->by_stride, py);
    right = mirror_hd_div(g->by_stride, px);
    if (top >= g->ho) top = g->ho - 1;
    if (right >= g->wo) right = g->wo - 1;
    for (oy = top + 1; oy-- > 0 && py - oy * g->stride < g->k;) { /* ki = py - oy stride, rising */
        uint64_t taps = ((ch * g->k + py - oy * g->stride) * g->k * g->n + smp) * hwo + oy * g->wo;
        for (ox = right + 1; ox-- > 0 && px - ox * g->stride < g->k;) /* kj = px - ox stride */
            sum += mirror_hd_load(col, taps + (px - ox * g->stride) * g->n * hwo + ox, f);
    }
    return sum;
}

/* dx at pixel `at` = (iy, ix) of a max-pooling plane: the sum, in output
   order, of the dy of the outputs whose argmax it is. */
MIRROR_HD static inline float mirror_hd_maxpool_grad_at(const void *dy, const int32_t *arg, uint64_t at, uint64_t iy,
                                                        uint64_t ix, uint64_t k, mirror_hd_divisor by_stride,
                                                        uint64_t ho, uint64_t wo, int f)
{
    uint64_t stride = by_stride.d, oy, ox;
    uint64_t oy0 = iy + 1 > k ? mirror_hd_div(by_stride, iy + stride - k) : 0;
    uint64_t ox0 = ix + 1 > k ? mirror_hd_div(by_stride, ix + stride - k) : 0;
    float sum = 0.0f;
    for (oy = oy0; oy < ho && oy * stride <= iy; oy++)
        for (ox = ox0; ox < wo && ox * stride <= ix; ox++)
            if ((uint64_t)arg[oy * wo + ox] == at) sum += mirror_hd_load(dy, oy * wo + ox, f);
    return sum;
}


/* y = max(0, x), and NaN stays NaN (torch.relu): a NaN in the data must
   reach the loss, not vanish into a zero. On the bits, x <= 0 ? 0 : x: nvcc
   compiles that comparison into a max that returns a NaN of its own
   (FMNMX.NAN), not x's bits, so the GPU's relu was not the CPU's. Negative
   and not NaN: the sign bit set, at most -Inf's bits. */
MIRROR_HD static inline float mirror_hd_relu(float x)
{
    uint32_t u = mirror_hd_bits(x);
    return u >= 0x80000000u && u <= 0xff800000u ? 0.0f : x;
}

/* dx = dy where the output was positive or NaN; y = relu(x), so this is
   x > 0 or NaN (torch's threshold_backward). */
MIRROR_HD static inline float mirror_hd_relu_grad(float y, float dy) { return y <= 0.0f ? 0.0f : dy; }

/* Average pooling over a kh x kw window of a plane of width w: the mean of
   the window whose corner is (y0, x0). */
MIRROR_HD static inline float mirror_hd_window_mean(const void *x, size_t w, size_t kh, size_t kw, size_t y0,
                                                    size_t x0, int f)
{
    float sum = 0.0f;
    size_t i, j;
    for (i = 0; i < kh; i++)
        for (j = 0; j < kw; j++) sum += mirror_hd_load(x, (y0 + i) * w + x0 + j, f);
    return sum / (float)(kh * kw);
}

/* Its gradient at input (iy, ix) of the plane: the sum, over the windows
   (taken every stride, oh x ow of them) that hold it, of dy / (kh kw).
   Every input gathers its own sum: no two writers, the same order on
   every backend. */
MIRROR_HD static inline float mirror_hd_window_mean_grad(const void *dy, size_t oh, size_t ow, size_t kh, size_t kw,
                                                         size_t stride, size_t iy, size_t ix, int f)
{
    size_t oy0 = iy + 1 > kh ? (iy + 1 - kh + stride - 1) / stride : 0, ox0 = ix + 1 > kw ? (ix + 1 - kw + stride - 1) / stride : 0;
    size_t oy, ox;
    float sum = 0.0f;
    for (oy = oy0; oy < oh && oy * stride <= iy; oy++)
        for (ox = ox0; ox < ow && ox * stride <= ix; ox++) sum += mirror_hd_load(dy, oy * ow + ox, f);
    return sum / (float)(kh * kw);
}

/* Batch normalisation of one channel. The forward pass sums, over each
   part of the batch (a chunk, a replica's shard), the part's values and
   their M2: the sum of squared deviations from the part's own mean, in a
   second pass over the part, in double. (Not E[x^2] - E[x]^2: that takes
   the difference of two numbers of the size of mean^2, and with a mean of
   100 and a deviation of 1 its float32 squares leave the variance 1e-4 of
   itself off.) One value's term of M2: */
MIRROR_HD static inline double mirror_hd_bn_dev2(float x, double mean)
{
    double d = (double)x - mean;
    return d * d;
}

/* The parts then merge, one after another in a fixed order (Chan, Golub
   and LeVeque's parallel variance): part b, the sum and M2 of n_b values,
   into the sum and M2 of the n values before it. The difference of the
   two means is of the size of the deviation, not of the mean, so nothing
   large cancels; an empty part changes nothing. */
MIRROR_HD static inline void mirror_hd_bn_merge(double *sum, double *m2, double n, double sum_b, double m2_b,
                                                double n_b)
{
    double d;
    if (n_b <= 0.0) return;
    d = n > 0.0 ? sum_b / n_b - *sum / n : 0.0;
    *sum += sum_b;
    *m2 += m2_b + d * d * (n * n_b / (n + n_b));
}

/* The moments of count values from their sum and M2: the mean and the
   biased variance (what the normalisation divides by, as
   torch.nn.BatchNorm2d). */
MIRROR_HD static inline void mirror_hd_bn_moments(double sum, double m2, double count, double *mean, double *var)
{
    *mean = sum / count;
    *var = m2 / count;
}

/* 1 / sqrt(var + eps). */
MIRROR_HD static inline float mirror_hd_bn_invstd(double var, float eps) { return (float)(1.0 / sqrt(var + (double)eps)); }

/* The running statistics, which evaluation and prediction normalise with:
   r = (1 - momentum) r + momentum b, where b is the batch's mean, or for
   the variance its unbiased variance var * count / (count - 1). */
MIRROR_HD static inline float mirror_hd_bn_running(float running, float batch, float momentum)
{
    return (1.0f - momentum) * running + momentum * batch;
}

/* xhat = (x - mean) invstd, and y = gamma xhat + beta. */
MIRROR_HD static inline float mirror_hd_bn_xhat(float x, float mean, float invstd) { return (x - mean) * invstd; }
MIRROR_HD static inline float mirror_hd_bn(float x, float mean, float invstd, float gamma, float beta)
{
    return gamma * mirror_hd_bn_xhat(x, mean, invstd) + beta;
}

/* The input gradient, where xhat = (x - mean) invstd and the two means are
   those of dy and dy xhat over the same values as the statistics:
   dx = gamma invstd (dy - mean(dy) - xhat mean(dy xhat)). dgamma is the
   sum of dy xhat and dbeta that of dy. */
MIRROR_HD static inline float mirror_hd_bn_grad(float dy, float xhat, float gamma, float invstd, float mean_dy,
                                                float mean_dy_xhat)
{
    return gamma * invstd * (dy - mean_dy - xhat * mean_dy_xhat);
}

/* splitmix64's finaliser: the random numbers of dropout and augmentation
   are hashes of where they are used (a key, a sample, an element), so any
   device and any split draws the same. */
MIRROR_HD static inline uint64_t mirror_hd_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A key from a seed and two counters (a layer and a step, an epoch). */
MIRROR_HD static inline uint64_t mirror_hd_key(uint64_t seed, uint64_t a, uint64_t b)
{
    return mirror_hd_mix(seed + 0x9e3779b97f4a7c15ull * (a + 1) + 0x632be59bd9b4e019ull * b);
}

/* Dropout's factor for element e of sample `row` under key (the seed,
   layer and step): 0 with probability p, else 1 / (1 - p). */
MIRROR_HD static inline float mirror_hd_dropout(uint64_t key, uint64_t row, uint64_t e, float p)
{
    uint64_t z = mirror_hd_mix(key ^ (row * 0x9e3779b97f4a7c15ull) ^ (e * 0xd1b54a32d192ed03ull));
    return (float)(z >> 40) * (1.0f / 16777216.0f) < p ? 0.0f : 1.0f / (1.0f - p);
}

/* The key of dropout layer `layer` at step `step` of a model seeded `seed`. */
MIRROR_HD static inline uint64_t mirror_hd_dropout_key(uint64_t seed, uint64_t layer, uint64_t step)
{
    return mirror_hd_key(seed, layer, step);
}

/* Augmentation of sample `row` under key (the shuffle seed and the epoch):
   a shift (dy, dx), each in [-pad, pad] (a crop of the image padded by pad
   with zeros), and a left-right flip, each draw its own hash. */
MIRROR_HD static inline void mirror_hd_augment_draw(uint64_t key, uint64_t row, size_t pad, int flip, long *dy,
                                                    long *dx, int *flipped)
{
    uint64_t z = mirror_hd_mix(key ^ (row * 0x9e3779b97f4a7c15ull));
    *dy = pad ? (long)(z % (2 * pad + 1)) - (long)pad : 0;
    z = mirror_hd_mix(z);
    *dx = pad ? (long)(z % (2 * pad + 1)) - (long)pad : 0;
    z = mirror_hd_mix(z);
    *flipped = flip && (z >> 63);
}

/* Where pixel (y, x) of an augmented h x w plane comes from: the crop,
   then the flip (torchvision's RandomCrop(padding) then
   RandomHorizontalFlip). Its offset in the plane, or -1 on the padding,
   whose zero is a zero in any storage: a sample augmented then narrowed
   to 16 bits is the narrowed sample augmented, bit for bit. */
MIRROR_HD static inline long mirror_hd_augment_source(size_t h, size_t w, size_t y, size_t x, long dy, long dx,
                                                      int flipped)
{
    long sy = (long)y + dy, sx = (long)(flipped ? w - 1 - x : x) + dx;
    return sy < 0 || sx < 0 || sy >= (long)h || sx >= (long)w ? -1 : sy * (long)w + sx;
}

MIRROR_HD static inline float mirror_hd_augment_pixel(const float *plane, size_t h, size_t w, size_t y, size_t x,
                                                      long dy, long dx, int flipped)
{
    long at = mirror_hd_augment_source(h, w, y, x, dy, dx, flipped);
    return at < 0 ? 0.0f : plane[at];
}

/* The smooth activations and their gradients: tanh' = 1 - y^2 and
   sigmoid' = y (1 - y) from the output y; GELU's from the input x:
   Phi(x) + x phi(x), phi the standard normal density. */
MIRROR_HD static inline float mirror_hd_tanh(float x) { return tanhf(x); }
MIRROR_HD static inline float mirror_hd_tanh_grad(float y, float dy) { return dy * (1.0f - y * y); }
MIRROR_HD static inline float mirror_hd_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
MIRROR_HD static inline float mirror_hd_sigmoid_grad(float y, float dy) { return dy * y * (1.0f - y); }
MIRROR_HD static inline float mirror_hd_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
MIRROR_HD static inline float mirror_hd_gelu_grad(float x, float dy)
{
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
}

/* Max pooling over a k x k window whose rows lie `row` floats apart, from
   x (its corner): the maximum, with *at its offset from x; the first of
   equal maxima wins. A window holding a NaN yields its first NaN instead,
   as torch.max_pool2d does (a NaN in the data must reach the loss): the
   caller asks mirror_hd_window_nan, where the data may hold one. Apart,
   the comparison stays a select; a NaN test inside it made the CPU loop
   branch and mispredict (2-8x slower). mirror_hd_max_tap is one tap of
   the window: v at offset o takes the maximum if larger. */
MIRROR_HD static inline void mirror_hd_max_tap(float v, int32_t o, float *top, int32_t *at)
{
    int larger = v > *top;
    *at = larger ? o : *at;
    *top = larger ? v : *top;
}

MIRROR_HD static inline float mirror_hd_window_max(const void *x, size_t row, size_t k, size_t *at, int f)
{
    size_t i, j;
    int32_t best = 0;
    float top = mirror_hd_load(x, 0, f);
    for (i = 0; i < k; i++)
        for (j = 0; j < k; j++)
            mirror_hd_max_tap(mirror_hd_load(x, i * row + j, f), (int32_t)(i * row + j), &top, &best);
    *at = (size_t)best;
    return top;
}

/* Whether the window holds a NaN; *at receives the first one's offset. */
MIRROR_HD static inline int mirror_hd_window_nan(const void *x, size_t row, size_t k, size_t *at, int f)
{
    size_t i, j;
    for (i = 0; i < k; i++)
        for (j = 0; j < k; j++)
            if (mirror_hd_isnan(mirror_hd_load(x, i * row + j, f))) {
                *at = i * row + j;
                return 1;
            }
    return 0;
}

/* A row whose loss is not finite gets a NaN gradient, so that the step's
   one check of the reduced gradient sees it too: an fp32 step stops, a
   mixed-precision step is skipped. (A loss can overflow where its
   gradient does not: MSE beyond |z - t| = 1.8e19.) */
MIRROR_HD static inline float mirror_hd_poison(void *dz, size_t d, float loss, int f)
{
    size_t j;
    if (!mirror_hd_finite(loss))
        for (j = 0; j < d; j++) mirror_hd_store(dz, j, mirror_hd_float(0x7fc00000u), f); /* a quiet NaN */
    return loss;
}

/* One row of fused, stable softmax cross-entropy over k logits z with label
   y. Writes dz = (softmax(z) - onehot(y)) * inv_count, where inv_count is
   1 / (global batch size); returns the loss logsumexp(z) - z[y] and sets
   *correct when the first maximum of z is at y. */
/* The softmax of one row of k logits into p, the largest subtracted first;
   returns log of the sum of exp(z - zmax), with zmax and its index. */
MIRROR_HD static inline float mirror_hd_softmax_row(const float *z, size_t k, float *p, float *zmax, size_t *arg)
{
    size_t j;
    float sum = 0.0f;
    *zmax = z[0];
    *arg = 0;
    for (j = 1; j < k; j++)
        if (z[j] > *zmax) {
            *zmax = z[j];
            *arg = j;
        }
    for (j = 0; j < k; j++) {
        p[j] = expf(z[j] - *zmax);
        sum += p[j];
    }
    for (j = 0; j < k; j++) p[j] /= sum;
    return logf(sum);
}

/* (In three passes over z, none over dz but the last: dz may be 16-bit.) */
MIRROR_HD static inline float mirror_hd_softmax_ce_row(const void *z, size_t k, int32_t y, float inv_count, void *dz,
                                                       int *correct, int f)
{
    size_t j, arg = 0;
    float zmax = mirror_hd_load(z, 0, f), sum = 0.0f;
    for (j = 1; j < k; j++)
        if (mirror_hd_load(z, j, f) > zmax) {
            zmax = mirror_hd_load(z, j, f);
            arg = j;
        }
    for (j = 0; j < k; j++) sum += expf(mirror_hd_load(z, j, f) - zmax);
    for (j = 0; j < k; j++)
        mirror_hd_store(dz, j, (expf(mirror_hd_load(z, j, f) - zmax) / sum - (j == (size_t)y ? 1.0f : 0.0f)) * inv_count,
                        f);
    *correct = arg == (size_t)y;
    /* not zmax + log(sum) - z[y]: cancels at large z */
    return mirror_hd_poison(dz, k, logf(sum) - (mirror_hd_load(z, (size_t)y, f) - zmax), f);
}

/* One row of mean squared error over d outputs: returns (1/d) sum (z - t)^2
   and writes dz = 2 (z - t) / d * inv_count. */
MIRROR_HD static inline float mirror_hd_mse_row(const void *z, const float *t, size_t d, float inv_count, void *dz,
                                                int f)
{
    size_t j;
    float loss = 0.0f, scale = 2.0f * inv_count / (float)d;
    for (j = 0; j < d; j++) {
        float e = mirror_hd_load(z, j, f) - t[j];
        loss += e * e;
        mirror_hd_store(dz, j, scale * e, f);
    }
    return mirror_hd_poison(dz, d, loss / (float)d, f);
}

/* A step's metrics, summed in one order on every backend (a GPU block of
   MIRROR_HD_LANES threads, the CPU's loop): lane j adds rows j, j + L,
   j + 2L, ... of the per-sample losses (and correct flags, unless correct
   is NULL) in double into s[0] (and s[1]); then a fixed tree over the
   lanes, halving: while half >= 1, lane i < half adds lane i + half.
   part holds the loss lanes at [0, L) and the correct lanes at [L, 2L). */
#define MIRROR_HD_LANES 256
MIRROR_HD static inline void mirror_hd_lane_sums(double *s, const float *loss, const int32_t *correct, size_t rows,
                                                 size_t lane)
{
    size_t r;
    s[0] = s[1] = 0.0;
    for (r = lane; r < rows; r += MIRROR_HD_LANES) {
        s[0] += (double)loss[r];
        if (correct) s[1] += (double)correct[r];
    }
}

MIRROR_HD static inline void mirror_hd_tree_add(double *part, size_t lane, size_t half)
{
    part[lane] += part[lane + half];
    part[MIRROR_HD_LANES + lane] += part[MIRROR_HD_LANES + lane + half];
}

/* One SGD element (torch.optim.SGD, dampening 0): w, the momentum buffer v
   (unused when momentum is 0) and the gradient g. */
MIRROR_HD static inline void mirror_hd_sgd(float *w, float *v, float g, float lr, float momentum,
                                           float weight_decay, int nesterov)
{
    g += weight_decay * *w;
    if (momentum != 0.0f) {
        *v = momentum * *v + g;
        g = nesterov ? g + momentum * *v : *v;
    }
    *w -= lr * g;
}

/* One Adam / AdamW element (torch.optim.Adam / AdamW): avg and avg_sq are
   its moments (torch's exp_avg and exp_avg_sq). bc1 = 1 - beta1^t and
   bc2_sqrt = sqrt(1 - beta2^t) for step t >= 1. decoupled selects AdamW's
   w *= 1 - lr*wd over Adam's L2 term g += wd*w. */
MIRROR_HD static inline void mirror_hd_adam(float *w, float *avg, float *avg_sq, float g, float lr,
                                            float beta1, float beta2, float eps,
                                            float weight_decay, int decoupled, float bc1,
                                            float bc2_sqrt)
{
    if (decoupled)
        *w *= 1.0f - lr * weight_decay;
    else
        g += weight_decay * *w;
    *avg = beta1 * *avg + (1.0f - beta1) * g;
    *avg_sq = beta2 * *avg_sq + (1.0f - beta2) * g * g;
    *w -= (lr / bc1) * *avg / (sqrtf(*avg_sq) / bc2_sqrt + eps);
}

/* Gradient clipping by global norm: the factor for a gradient of L2 norm
   `norm`, min(1, max_norm / (norm + 1e-6)) (1 when max_norm is 0: off). */
MIRROR_HD static inline float mirror_hd_clip_factor(float norm, float max_norm)
{
    float c = max_norm > 0.0f ? max_norm / (norm + 1e-6f) : 1.0f;
    return c < 1.0f ? c : 1.0f; /* a NaN norm gives 1: that step is skipped anyway */
}

/* What an update multiplies the gradient by: the clipping factor of the
   step in st, or 1 where nothing was clipped. */
MIRROR_HD static inline float mirror_hd_clip_of(const mirror_loss_scale_state *st)
{
    return st->clip > 0.0f ? st->clip : 1.0f;
}

/* The learning rate of step s >= 1 under a schedule (see
   mirror_optimizer_desc; a callback's rate comes in as `called`). */
MIRROR_HD static inline float mirror_hd_schedule_lr(int schedule, float lr, uint64_t s, uint64_t warmup,
                                                    uint64_t step_size, float gamma, uint64_t total_steps,
                                                    float min_lr, float called)
{
    const double pi = 3.14159265358979323846;
    uint64_t t = s > warmup ? s - warmup - 1 : 0, T = total_steps > warmup ? total_steps - warmup : 1;
    double rate = lr;
    if (schedule == MIRROR_LR_STEP) rate = lr * pow((double)gamma, (double)(t / step_size));
    if (schedule == MIRROR_LR_COSINE)
        rate = min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(pi * (double)(t < T ? t : T) / (double)T));
    if (schedule == MIRROR_LR_CALLBACK) rate = called;
    if (s <= warmup) rate *= (double)s / (double)warmup;
    return (float)rate;
}

/* Adam's bias corrections for step t >= 1: bc1 = 1 - beta1^t and
   bc2_sqrt = sqrt(1 - beta2^t), in double, then rounded once. */
MIRROR_HD static inline void mirror_hd_adam_bias(float beta1, float beta2, uint64_t t, float *bc1,
                                                 float *bc2_sqrt)
{
    *bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    *bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, (double)t));
}


/* One gradient element unscaled, as torch's _unscale_ does: g * (1/scale). */
MIRROR_HD static inline float mirror_hd_unscale(uint16_t g, int format, float inv_scale)
{
    return mirror_hd_widen(g, format) * inv_scale;
}

/* The fused mixed-precision updates of one element: the 16-bit gradient
   unscaled, the fp32 master w (and moments) updated, the 16-bit working
   copy w16 written. The caller skips the call on a non-finite step. */
MIRROR_HD static inline void mirror_hd_sgd_mixed(float *w, float *v, uint16_t *w16, uint16_t g, int format,
                                                 float inv_scale, float lr, float momentum,
                                                 float weight_decay, int nesterov)
{
    mirror_hd_sgd(w, v, mirror_hd_unscale(g, format, inv_scale), lr, momentum, weight_decay, nesterov);
    *w16 = mirror_hd_narrow(*w, format);
}

MIRROR_HD static inline void mirror_hd_adam_mixed(float *w, float *avg, float *avg_sq, uint16_t *w16, uint16_t g,
                                                  int format, float inv_scale, float lr, float beta1,
                                                  float beta2, float eps, float weight_decay,
                                                  int decoupled, float bc1, float bc2_sqrt)
{
    mirror_hd_adam(w, avg, avg_sq, mirror_hd_unscale(g, format, inv_scale), lr, beta1, beta2, eps,
                   weight_decay, decoupled, bc1, bc2_sqrt);
    *w16 = mirror_hd_narrow(*w, format);
}

/* The guard of an fp32 model (a mirror_loss_scale_state, like the scaler
   of a mixed one), after the check of step `step`'s reduced gradient. fp32
   has no loss scale to lower, so a non-finite step is an error, not a
   skip: found_nonfinite stays set from the first non-finite step until
   the host reads it (every update does nothing meanwhile), and `applied`
   holds the steps applied before it. Every writer writes the same values. */
MIRROR_HD static inline void mirror_hd_guard(mirror_loss_scale_state *st, int finite, uint64_t step)
{
    if (finite || st->found_nonfinite) return;
    st->applied = step - 1;
    st->found_nonfinite = 1;
}

/* The sharded update across devices: every replica checked its slice of
   the reduced gradient into two floats, 1 if the slice holds an Inf or
   NaN (unscaled, in mixed precision) and its sum of squares; sums[] is
   their sum over the replicas. This takes the whole gradient's verdict
   into st: fp32's guard of step `step` (format 0), or the mixed step's
   skip; and, with max_norm > 0, the norm and its clipping factor. */
MIRROR_HD static inline void mirror_hd_slice_verdict(mirror_loss_scale_state *st, const float *sums, uint64_t step,
                                                     int format, float max_norm)
{
    int finite = !(sums[0] > 0.0f);
    if (format)
        st->found_nonfinite |= !finite;
    else
        mirror_hd_guard(st, finite, step);
    if (max_norm > 0.0f) {
        st->grad_norm = sqrtf(sums[1]);
        st->clip = mirror_hd_clip_factor(st->grad_norm, max_norm);
    }
}

/* The loss scaler after a step, once found_nonfinite says whether the
   reduced gradient held an Inf or NaN (torch's _amp_update_scale_, with the
   scale kept in [min_scale, max_scale]). A skipped step moves only this
   state; an applied one counts in `applied`, Adam's t. */
MIRROR_HD static inline void mirror_hd_scaler_update(mirror_loss_scale_state *st, const mirror_loss_scale_desc *d)
{
    int dynamic = d->kind == MIRROR_SCALE_DYNAMIC;
    st->last_scale = st->scale;
    st->last_skipped = st->found_nonfinite != 0;
    st->found_nonfinite = 0;
    if (st->last_skipped) {
        st->skipped++;
        st->consecutive_skips++;
        st->good_steps = 0;
        if (dynamic) st->scale = fmaxf(st->scale * d->backoff_factor, d->min_scale);
        return;
    }
    st->applied++;
    st->consecutive_skips = 0;
    if (!dynamic || ++st->good_steps < d->growth_interval) return;
    st->good_steps = 0;
    st->scale = fminf(st->scale * d->growth_factor, d->max_scale);
}

/* The half-width of the uniform initialisers: He a = sqrt(6/fan_in),
   Glorot a = sqrt(6/(fan_in + fan_out)). */
MIRROR_HD static inline float mirror_hd_init_bound(int he, size_t fan_in, size_t fan_out)
{
    return sqrtf(6.0f / (float)(he ? fan_in : fan_in + fan_out));
}

#ifdef __cplusplus
}
#endif
#endif /* MIRROR_H */

// >>implementation ==========================================================
#ifdef MIRROR_IMPLEMENTATION
/* Under -std=c99 glibc declares clock_gettime, fileno and isatty only when
   _POSIX_C_SOURCE is defined before its first header: a system header
   included ahead of mirror.h has shut that door. One error that gives the
   rule, and the implementation skipped rather than hundreds after it. */
#include <time.h>
#if !defined(CLOCK_MONOTONIC) && !defined(MIRROR_IMPLEMENTATION_DONE)
#error "mirror.h: in the file that defines MIRROR_IMPLEMENTATION, include mirror.h before any other header, or compile that file with -D_POSIX_C_SOURCE=200809L (under -std=c99 the C library hides clock_gettime otherwise)"
#define MIRROR_IMPLEMENTATION_DONE
#endif
#ifndef MIRROR_IMPLEMENTATION_DONE
#define MIRROR_IMPLEMENTATION_DONE

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef MIRROR_ZLIB
#include <zlib.h>
#endif
#ifdef MIRROR_CBLAS
#include <cblas.h>
#endif
/* AVX-512's shuffles, where the CPU GEMM transposes blocks of 16 x 16
   (mirror__transpose16), and bf16 GEMMs on vdpbf16ps where the target has
   AVX512_BF16 too (-march=native on such a CPU): see mirror__gemm_bf16. */
#if defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && \
    !defined(MIRROR_NO_SIMD)
#include <immintrin.h>
#define MIRROR__AVX512 1
#else
#define MIRROR__AVX512 0
#endif
#if MIRROR__AVX512 && defined(__AVX512BF16__) && !defined(MIRROR_NO_BF16_DOT)
#define MIRROR__DPBF16 1
#else
#define MIRROR__DPBF16 0
#endif

#if defined(MIRROR_MALLOC) != defined(MIRROR_FREE)
#error "define both MIRROR_MALLOC and MIRROR_FREE, or neither"
#endif
/* An unoptimised build trains many times slower; say so once, at compile
   time. MIRROR_QUIET_O0 silences it (a debugging build that means it). */
#if defined(__GNUC__) && !defined(__OPTIMIZE__) && !defined(__CUDA_ARCH__) && !defined(MIRROR_QUIET_O0)
#pragma message("mirror.h: compiled without optimisation, training runs many times slower: compile the file that defines MIRROR_IMPLEMENTATION with -O2 or -O3 (define MIRROR_QUIET_O0 to silence this)")
#endif
#ifndef MIRROR_MALLOC
#define MIRROR_MALLOC(n) malloc(n)
#define MIRROR_FREE(p) free(p)
#endif

#define MIRROR__MIN(a, b) ((a) < (b) ? (a) : (b))
#define MIRROR__MAX(a, b) ((a) > (b) ? (a) : (b))
/* A function some builds never call (one the tests reach, say). */
#if defined(__GNUC__) || defined(__clang__)
#define MIRROR__MAYBE_UNUSED __attribute__((unused))
#else
#define MIRROR__MAYBE_UNUSED
#endif

#ifdef __cplusplus
extern "C" {
#endif

// >>structs -----------------------------------------------------------------
/* mirror's private state, together: the layer kinds, the thread team and
   a reducer's job for it, the step's tick, a layer, a replica and its
   recorded passes, the update's plan, the model, a job for the replica
   threads, and the strategy. The backend and reducer tables are
   declared here and defined in >>backend; the processes interface is
   defined here (the strategy's last), its implementations in
   >>processes. */

typedef struct mirror__backend mirror__backend;
typedef struct mirror__reducer mirror__reducer;
typedef struct mirror__processes mirror__processes;

/* The layer kinds (the backend's activations take one). */
typedef enum mirror__kind {
    MIRROR__DENSE = 1,
    MIRROR__CONV2D,
    MIRROR__RELU,
    MIRROR__MAXPOOL2D,
    MIRROR__FLATTEN,
    MIRROR__TANH,
    MIRROR__SIGMOID,
    MIRROR__GELU,
    MIRROR__AVGPOOL2D,
    MIRROR__GLOBAL_AVGPOOL,
    MIRROR__DROPOUT,
    MIRROR__BATCHNORM,
    MIRROR__RESIDUAL,    /* a residual block's start: its input, kept */
    MIRROR__RESIDUAL_END /* the block's output plus its input (projected) */
} mirror__kind;

enum { MIRROR__KINDS = MIRROR__RESIDUAL_END + 1 };

/* The replica threads (see >>threads): a job is a function every worker
   runs on the same context, worker w for replica w. The context is a
   mirror__reduce_job for the reducers' jobs and a mirror__job for the
   step's (the forward and backward, the update), so the team serves both. */
typedef void (*mirror__job_fn)(void *ctx, size_t worker);

typedef struct mirror__team {
    size_t size; /* workers, the caller included */
    double spin; /* seconds a waiting worker spins before it sleeps; 0 when cores are scarce */
    pthread_t *threads;
    struct mirror__team_arg *args;
    pthread_mutex_t mutex;
    pthread_cond_t wake, done;
    unsigned long generation; /* bumped once per job */
    unsigned long pending;    /* helper threads still running the current job */
    int quit;
    int sleepers, caller_sleeps; /* who waits on wake / done */
    mirror__job_fn job;
    void *ctx;
} mirror__team;

/* One call of the CPU reducer (or of the fold across processes), as its
   threads read it: the sum of `in` (nin buffers, in order; the replicas'
   own, or deterministic mode's chunks) into every replica's buffer of
   `bufs`, or of the 16-bit buffers `half` in place, n values each; the
   broadcast's root; the sharded update's reduce-scatter and all-gather
   over `any`, slices of `slice` values of `size` bytes. */
typedef struct mirror__reduce_job {
    mirror_strategy *s;
    float *const *bufs;
    float *const *in;
    size_t nin;
    uint16_t *const *half;
    int format;           /* the 16-bit format of half, or of any (0: floats) */
    size_t n, root;
    void *const *any;
    size_t slice, size;
} mirror__reduce_job;

/* What a pass and an update read that changes from step to step, in
   device memory (a recorded pass or update then reads the step at hand):
   the step, the first row of the replica's shard among the step's samples
   (dropout's masks), the learning rate, and fp32 Adam's bias corrections. */
typedef struct mirror__tick {
    uint64_t step, row0;
    float lr, bc1, bc2_sqrt;
} mirror__tick;

#define MIRROR__MAX_LAYERS 64

typedef struct mirror__layer {
    mirror__kind kind;
    size_t c, h, w;         /* input shape of one sample */
    size_t oc, oh, ow;      /* output shape */
    size_t k, stride, pad;  /* conv2d, maxpool2d */
    size_t w_off, b_off;    /* floats into the parameter and gradient arenas */
    size_t n_w, n_b;
    size_t out_off, arg_off; /* bytes into the activation arena */
    size_t col_off;          /* a convolution's kept im2col (keep_cols), bytes into the activation arena */
    float p;                 /* dropout */
    /* batchnorm: its running statistics' floats into the model's, its
       statistics' floats into each replica's batchnorm arena; momentum, eps */
    size_t run_off, bn_off;
    float momentum, eps;
    int local;   /* batchnorm: statistics of the replica's shard alone */
    size_t from; /* residual_end: the index of its block's residual layer */
    /* A dense or conv2d layer followed by a relu: the relu is its GEMM's
       epilogue, and the relu's output is the layer's (its input is read
       by nothing else; the relu's backward reads its output alone). */
    int fused;
} mirror__layer;

/* What a layer's forward or backward works on: layer i of model m on
   replica r, the shard's rows [s0, s0 + S) (s0 0 outside the row-wise
   prefix), in and out values a sample. Backward: dLoss/d(its output) of
   those rows in d, dLoss/d(their input) into dx, or in place in d (the
   kind says which); input gradients are needed above layer `first` alone,
   and the pass pauses at layer `stop`. */
typedef struct mirror__io {
    const mirror_model *m;
    struct mirror__replica *r;
    const mirror__layer *l;
    size_t i, s0, S, in, out;
    const void *X, *x; /* the shard's input, and its row s0 on */
    const void *W, *b; /* the weights the layers read (16-bit in mixed precision) */
    void *Y, *y;       /* the shard's output, and its row s0 on */
    void *d, *dx;
    int accumulate; /* add the weight gradients to those there */
    size_t first, stop;
} mirror__io;

/* A layer kind, in one place: one entry of mirror__kinds (in >>layers,
   after the kinds' functions, one entry a kind in the order of
   mirror__kind; member order as declared here, so that C++ takes it). */
typedef struct mirror__kind_info {
    mirror__kind kind; /* its own place in the table (test_layers checks it) */
    /* In messages and the summary, and the layer's word in the model's
       description, which a checkpoint keeps ("model") and from which
       tools/mirror_model.py exports (ONNX, torch.export, TorchScript, a state_dict). */
    const char *name;
    /* Checks layer n (l: its arguments and its input shape) and sets its
       output shape and parameter counts; an error's code (with m's
       message) or MIRROR_OK. */
    int (*shape)(mirror_model *m, mirror__layer *l, size_t n);
    /* Its arguments in the description, "(16,3,1,1)" (NULL: none), their
       count, and the layer added to m from them (from a checkpoint; > 0:
       they describe no such layer). */
    void (*describe)(const mirror__layer *l, char *buf, size_t size);
    size_t nargs;
    int (*described)(mirror_model *m, const double *a);
    /* Its tensors in a checkpoint, layers.<i>.<name>: W's and b's (n_w and
       n_b values; NULL: no parameters), then the running statistics'
       (batchnorm: c values each, at run_off); W's shape there (its rank
       returned), and W and b drawn at build from the model's generator. */
    const char *tensors[4];
    size_t (*weight_shape)(const mirror_model *m, const mirror__layer *l, size_t *shape);
    void (*init)(const mirror_model *m, size_t i, uint64_t *state, float *host);
    /* The passes (NULL: nothing to do, the output being a view of the
       input); backward returns the layers it took (2 where max pooling
       took the relu below it too). */
    void (*forward)(const mirror__io *o);
    size_t (*backward)(const mirror__io *o);
    /* Its rows are independent in both passes: what it does to a sample
       reads that sample alone, and its weight gradients add the samples
       in row order (mirror__plan_groups). */
    int rowwise;
    int takes_relu; /* a GEMM that runs a relu after it as its epilogue (fused) */
    int convolves;  /* it runs a convolution where it has weights (mirror__convolution) */
    int view;       /* its output is its input (no storage) */
    int in_place;   /* backward writes the input gradient over d, not into dx */
} mirror__kind_info;

/* A replica's recorded training pass or update (see mirror__graph_step):
   the values the recording holds (the key), the backend's graph, and when
   the key last came. The emulation that MIRROR_CPU_GRAPHS builds keeps the
   model, replica and job as at capture instead, which each replay queues
   again (on a scratch copy of the model, made at capture). */
#define MIRROR__GRAPHS 8
enum { MIRROR__PASS_GRAPH, MIRROR__UPDATE_GRAPH };
typedef struct mirror__graph {
    int kind; /* MIRROR__PASS_GRAPH or MIRROR__UPDATE_GRAPH (whose key is the kind alone) */
    size_t count;
    float inv_count;
    int slot, accumulate, metrics_now;
    unsigned seen;       /* the key's visits since it took this place */
    uint64_t used;       /* the replica's pass count at its last visit */
    int failed;          /* capture failed: the key runs as queued */
    void *graph;         /* NULL: not captured */
    struct mirror_model *m_at, *m_run;
    struct mirror__replica *r_at;
    struct mirror__job *job_at;
} mirror__graph;

/* One replica: its device context, its four arenas and the views into the
   activation arena (each sized for shard_max samples). */
typedef struct mirror__replica {
    void *dev;
    float *params, *grads, *state;
    /* Mixed precision: the 16-bit working copy of the parameters (written
       by the optimizer), which the layers read (`weights` is it, or params
       in fp32), the 16-bit gradient that is all-reduced, and the loss
       scaler (device memory; host_scaler reads it), which in fp32 is the
       guard against non-finite steps (mirror_hd_guard). */
    uint16_t *work16, *grad16;
    void *weights;
    mirror_loss_scale_state *scaler, *host_scaler;
    float *stats; /* the sharded update across devices: its slice's check and sum of squares (2 floats) */
    mirror__tick *tick; /* the step at hand, in device memory (dropout's masks, the update) */
    mirror__graph graph[MIRROR__GRAPHS]; /* captured passes (graphs), */
    uint64_t passes;                     /* and the passes and updates queued through them */
    unsigned char *acts;
    size_t workspace_bytes;
    /* Storage (void *: 16-bit values in mixed precision, else floats): */
    void *input;      /* [S, sizes.in] */
    void *delta[2];   /* [S, sizes.max] each: backward ping-pong */
    void *col;        /* im2col of one chunk of samples (conv_chunk) */
    void *perm;       /* a conv output or gradient of one chunk, channels first */
    void *skip;       /* [S, sizes.max]: a residual block's input gradient through its shortcut */
    int32_t *labels;  /* [S] */
    float *targets;   /* [S, sizes.out] */
    float *loss;      /* [S] per-sample loss */
    int32_t *correct; /* [S] */
    double *acc;      /* [2] loss and correct sums of the steps not yet taken */
    /* Batch normalisation: per batchnorm layer of C channels, 6C floats at
       its bn_off: the batch's mean and invstd, the running statistics'
       mean and invstd (evaluation), the means of dy and dy xhat over the
       batch (backward). bn_part: this replica's sums of one layer (2C
       doubles), host_part and host_stat their host copies. */
    float *bn;
    double *bn_part, *host_part;
    float *host_stat;
    int dsel; /* backward: which delta buffer holds the gradient at hand */
    int bucketing; /* this backward all-reduces in buckets; bucket: the next one */
    size_t bucket;
    /* host buffers (pinned on a GPU): the shard gathered (in the slot at
       hand of two, as the input, labels and targets on the device: see
       mirror__load_shard), metrics read back. The input is fp32 in both;
       in mixed precision the device narrows it into the 16-bit input. */
    float *host_x[2], *in_x[2];
    float *host_targets[2], *host_loss;
    int32_t *host_labels[2], *host_correct;
    float *in_targets[2];
    int32_t *in_labels[2];
    int slot;
    /* Data kept on the device (mirror__resident): the shard's rows, as
       indices into it, in the two slots as the input (host_index pinned on
       a GPU; on CPU replicas in_index itself). Made at its first use. */
    int64_t *host_index[2], *in_index[2];
    double *host_acc;
    /* this step's shard and results; deterministic mode: the shard is
       chunks [chunk0, chunk0 + nchunks) of the batch, each chunk's
       gradients in an arena of its own (chunks_max of them) */
    size_t begin, count;
    size_t chunk0, nchunks;
    float *chunk_grads;
    size_t row0;  /* the shard's first sample's place among the step's samples (dropout) */
    int training; /* the pass trains (dropout drops) */
    double loss_sum;
    size_t correct_sum;
} mirror__replica;

enum { MIRROR__TRAIN = 1, MIRROR__EVAL, MIRROR__PREDICT };

/* A dataset kept in every replica's device memory (mirror__resident_use),
   so that a step uploads its rows' indices alone and each replica gathers
   its shard there (mirror__load_shard). Its key: the host's arrays it
   copies, their rows and a hash of their contents (a second fit or
   evaluate on the same dataset finds it; a changed one is copied again).
   x is stored as the model's input is (16-bit in mixed precision: each
   value narrowed once, as the host path narrows it after its gather; half
   the memory). dev[2r] and dev[2r + 1]: replica r's x and its labels or
   targets; replicas on one device share the copy of the first of them,
   owner[r]. dev NULL with a key: it did not fit (said once, in a notice). */
typedef struct mirror__resident {
    const float *x, *targets;
    const int32_t *labels;
    size_t rows;
    uint64_t hash;
    void **dev;
    size_t *owner;
} mirror__resident;

/* How the update is sharded (ZeRO stage 1: each replica updates a slice of
   the parameters), or 0: every replica updates them all. HOST: over the
   replicas' shared memory, each replica's thread summing and updating its
   slice (CPU replicas, mirror__sharded_host_update_job). DEVICES: across
   devices, through the reducer's reduce-scatter and all-gather
   (mirror__slices_update). */
enum { MIRROR__SHARDED_HOST = 1, MIRROR__SHARDED_DEVICES };

/* How a step's update runs: a plan of four steps, chosen once when the
   model is built (mirror__choose_plan), as the backend is, and run by
   mirror__train_micro in this order whatever the mode:
   - reduce: the gradient's sum across replicas (and processes), after the
     step's last micro-batch, or after every one (`each`);
   - check: the verdict on the reduced gradient (non-finite values, the
     clipping norm), where it needs every slice before any update;
   - update: the optimizer, on every parameter or on each replica's slice;
   - gather: the slices updated apart, into every replica.
   A mode with nothing to do in a step has mirror__step_none there (or
   mirror__reduce_none). The modes and their steps:

     mode                    reduce                       check                  update          gather
     plain                   all-reduce (or buckets')     in the update          every replica   -
     sharded on the host     16-bit: all-reduce; fp32: -  slices (fp32: summed)  slices, copied  in the update
     sharded across devices  reduce-scatter               slices' stats, summed  slices          all-gather
     across processes        reduce-scatter across them   slices, verdict        this process's  all-gather

   (mirror__reduce_all, _slices, _processes; mirror__plain_update;
   mirror__host_check, mirror__host_sum_check, mirror__host_update_step;
   mirror__slices_check, _update, _gather; mirror__across_check, _update,
   _gather_params.) Deterministic mode reduces by the chunks' sums after
   every micro-batch (mirror__reduce_chunks) and keeps its mode's other
   steps. Several processes reduce by the fold across them
   (mirror__reduce_processes), which runs after a failure too, carrying it
   to the others. Sharded on the host in fp32 in one process, the check
   job sums its slice itself (the reduce-scatter: `in_check`, whose jobs
   mark the all-reduce's edges). The mode's figures live here too:
   deterministic mode's chunk, the sharding, and this process's slots
   across processes. */
struct mirror__job;
typedef struct mirror__update_plan {
    int (*reduce)(mirror_model *m, int rc, int onto, int last);
    int (*check)(mirror_model *m, struct mirror__job *job);
    int (*update)(mirror_model *m, struct mirror__job *job);
    int (*gather)(mirror_model *m, struct mirror__job *job);
    int each;            /* reduce after every micro-batch (deterministic mode), else after the last */
    int in_check;        /* the reduction is the check's (sharded on the host, fp32, one process) */
    size_t chunk;        /* deterministic mode: samples per chunk (0: off) */
    size_t chunks_max;   /* the most chunks of one shard (1 when off) */
    int sharded;         /* the update's sharding (MIRROR__SHARDED_HOST or _DEVICES), or 0 */
    size_t slice;        /* sharded across devices: replica r's slice being slots [r slice, (r + 1) slice) */
    /* Sharded across processes too (shard_update on, CPU replicas, see
       mirror__across_update): this process updates slots [pbegin, pbegin +
       plen) alone (else they are every slot, [0, nslots)). */
    int across;
    size_t pbegin, plen;
} mirror__update_plan;

/* fit's running numbers of an epoch in progress, which a checkpoint saved
   mid-epoch keeps (epoch_loss_sum, epoch_correct, epoch_samples,
   epoch_skipped, epoch_seconds) so that the fit resumed from it logs the
   whole epoch; with the cursor they belong to (step, epoch, epoch_step). */
typedef struct mirror__epoch_sums {
    mirror_metrics acc; /* the loss sum, correct predictions and samples so far */
    uint64_t skipped;   /* steps the loss scaler skipped so far */
    double seconds;     /* the epoch's training time so far */
    uint64_t step, epoch, epoch_step;
    int kept;           /* loaded: a checkpoint held them */
} mirror__epoch_sums;

/* The shape at the end of the layers added so far (the next layer's
   input), and the residual block open there: its residual layer + 1 (0:
   none). */
typedef struct mirror__adding {
    size_t c, h, w;
    size_t open_block;
} mirror__adding;

/* Sizes the build plans: values of one sample's input, output (the last
   layer's), widest layer output, a convolution chunk's im2col and permuted
   output; optimizer state floats; the layers' part of the activation
   arena in bytes. */
typedef struct mirror__sizes {
    size_t in, out, max, col, perm;
    size_t nstate;
    size_t layer_bytes;
} mirror__sizes;

/* Batch normalisation's statistics: the running mean and variance of
   every batchnorm layer (host, the same on every replica and process;
   nrunning floats), a copy from before the step at hand, the replicas'
   sums, and the floats of every replica's batchnorm arena (size) and the
   widest layer's channels. */
typedef struct mirror__norm {
    float *running, *running_before;
    double *total;
    size_t nrunning, size, channels;
    int stale; /* the replicas' evaluation statistics lag the running ones */
} mirror__norm;

/* The longest path the system opens, its NUL included (PATH_MAX). The
   library joins names onto a user's path (PATH.lock, PATH.3, a temporary
   file's 37 characters, DIR/FILE) and never cuts one short: a path whose
   names would pass the limit is refused before anything is written. */
#if defined(PATH_MAX) && PATH_MAX > 0
#define MIRROR__PATH_MAX PATH_MAX
#else
#define MIRROR__PATH_MAX 4096
#endif

/* A point of fit's curves: an epoch's log at x = its epoch, or (curve_every)
   the epoch's numbers so far at x = epoch - 1 + steps done / steps, with no
   validation numbers (val_loss -1). */
typedef struct mirror__curve_point {
    double x;
    mirror_epoch_log log;
} mirror__curve_point;

/* What fit made on the disk before its first step, removed again when it
   fails there: a file (`file`), and the directories of the path's first
   `dirs` bytes from the one `made` bytes long inward (mirror__make_dirs;
   0: none). */
typedef struct mirror__made {
    int file;
    size_t dirs, made;
} mirror__made;

/* A file a side output holds open through a fit (fd -1: none), and its
   path: the event file, or a temporary file written before the first step
   (`staged`) that fit's start renames over the output's path. */
typedef struct mirror__output_file {
    int fd, staged;
    char path[MIRROR__PATH_MAX];
    mirror__made made;
} mirror__output_file;

#define MIRROR__FIT_OUTPUTS 4 /* the most side outputs of a fit */

/* A fit in progress: its desc (defaults applied), what its epochs share,
   and what it must undo at its end. */
typedef struct mirror__fit_run {
    mirror_fit_desc d;
    size_t steps, per_step; /* steps of an epoch, samples of a step */
    size_t verdict;         /* metrics (and the scaler's verdict) at least every `verdict` steps */
    size_t ran;             /* steps this fit ran */
    size_t *perm;           /* the epoch's permutation */
    mirror_batch *micro;    /* a step's micro-batches */
    const mirror__resident *data; /* the training set on the device, or NULL */
    mirror_epoch_log log;   /* the epoch at hand */
    mirror_metrics *acc;    /* its running sums (NULL between epochs), */
    double t0;              /* its start (less the time before a resume) */
    uint64_t skipped_before; /* and the scaler's skipped steps before it */
    int partial;            /* its sums lack the steps before a resume: a checkpoint does not keep them */
    mirror__curve_point *logs; /* the curve points so far, kept for the outputs rewritten from them */
    size_t nlogs, logs_cap;
    int curves_lost;        /* rank 0 ran out of memory for them */
    unsigned failed;        /* rank 0's side outputs whose latest write failed */
    uint64_t saved, applied; /* the step last saved; the optimizer steps applied before this fit */
    size_t at_epoch, at_step; /* the cursor: the next step to run (at_step = steps: the epoch's end) */
    double start;
    int bar, timed, shows_lr, classify;
    int timed_here;         /* fit turned timing on, and turns it off */
    /* The side outputs (>>outputs): their list, what those asked for need
       (MIRROR__NEEDS_*), and the files they hold open */
    const struct mirror__fit_output *outs;
    size_t nouts;
    int asked;
    unsigned needs;
    mirror__output_file files[MIRROR__FIT_OUTPUTS];
    mirror__made ckpt_made; /* the checkpoint's directories and PATH.lock */
} mirror__fit_run;


/* fit's side outputs (>>outputs) as fit sees them: a list of entries that
   fit calls in turn and never names. An entry is asked for by a path in
   the fit desc (the member at `at`; NULL: not asked). Before the first
   step rank 0 checks every entry asked (making nothing), then opens each
   (a failure fails fit: nothing is lost yet): an open makes its missing
   directories and its file, recording them in the fit's files[i].made, a
   file written whole going to a temporary file (staged) that fit renames
   over its path once every entry is open; a failure removes what they
   made (mirror__fit_discard). Then it hands them the curve points
   (`point`, each as it comes; `rewrite`, all the points so far, which fit
   keeps while an output asked needs them, at an epoch's end and at a
   checkpoint saved mid-epoch) and the fit's end (`end`). A write that
   fails there costs a notice and the entry's bit in failed_outputs, never
   the fit. `release` runs in every process, whichever way fit ends. Any
   hook may be NULL. */
enum { MIRROR__NEEDS_TIMING = 1, MIRROR__NEEDS_POINTS = 2, MIRROR__NEEDS_KEPT = 4 };
typedef struct mirror__fit_output {
    const char *name; /* in messages: "history", "TensorBoard directory" */
    size_t at;        /* offsetof(mirror_fit_desc, its path) */
    unsigned bit;     /* MIRROR_OUTPUT_* */
    unsigned needs;   /* MIRROR__NEEDS_*: the steps' timing, the curve points, the points kept */
    int (*check)(mirror_model *m, const mirror__fit_run *f, size_t i);
    int (*open)(mirror_model *m, mirror__fit_run *f, size_t i);
    void (*point)(mirror_model *m, mirror__fit_run *f, size_t i, double x, const mirror_epoch_log *log);
    void (*rewrite)(mirror_model *m, mirror__fit_run *f, size_t i);
    void (*end)(mirror_model *m, mirror__fit_run *f, size_t i);
    void (*release)(mirror__fit_run *f, size_t i);
} mirror__fit_output;

/* In >>fit: a point into the points fit keeps (a resumed history's rows
   go there too). */
static int mirror__curve_add(mirror__curve_point **pts, size_t *n, size_t *cap, double x, const mirror_epoch_log *log);

/* Output i's path in fit run f's desc (NULL: not asked). */
#define MIRROR__OUTPUT_PATH(f, i) (*(const char *const *)(const void *)((const char *)&(f)->d + (f)->outs[i].at))

/* A model: what its layers make at build, its replicas, how its step runs,
   and what a fit, the timing and batch normalisation keep between steps. */
struct mirror_model {
    /* ---- build: the desc, the layers as they are added, their sizes ---- */
    mirror_model_desc desc;
    mirror_strategy *s;
    const mirror__backend *be;
    mirror__layer layers[MIRROR__MAX_LAYERS];
    size_t nlayers;
    mirror__adding adding; /* while layers are added */
    int built;
    int sticky;         /* the first error of a layer call, returned by build */
    mirror_error err;
    size_t nparams, nslots; /* values; floats in a parameter arena (padded, see mirror__plan) */
    mirror__sizes sizes;    /* of a sample's values and of the arenas, planned at build */
    int format;         /* mixed precision: the 16-bit format, else 0 */

    /* ---- arenas: the replicas, and their arenas side by side for the reducer ---- */
    mirror__replica *rep;
    size_t shard_max;   /* arena capacity in samples: ceil(max_batch / replicas), or chunks_max chunks */
    struct {
        float **grads;     /* the replicas' gradient arenas, */
        float **params;    /* their parameter arenas, */
        uint16_t **grad16; /* in mixed precision their 16-bit gradients, */
        uint16_t **work16; /* and working copies, */
        float **stats;     /* and sharded across devices, their slices' stats */
    } bufs;

    /* ---- the step: how it runs (chosen at build), and where it stands ---- */
    mirror__update_plan plan;
    /* What the update's steps hand each other: deterministic mode's list
       of the chunks' gradients, in the order they are added, and the
       replica each lies on; sharded, each slice's non-finite flag (found)
       and across processes the verdict (every process's flag and blocks'
       sums of squares, `parts`) and what, since the last step, is current
       on its slice's owner alone (`stale`, MIRROR__STALE_*). */
    struct {
        float **chunk_in;
        size_t *chunk_owner;
        uint32_t *found;
        double *parts;
        int stale;
    } update;
    /* How a training pass runs: captured and replayed (graphs, see
       mirror__graph_step), with dropout layers, each convolution keeping
       its im2col from forward for backward (keep_cols), and the row-wise
       prefix (mirror__plan_groups): its layers (0: none) and the rows of
       a group. */
    struct {
        int graphs, dropouts, keep_cols;
        size_t group_layers, group_rows;
    } pass;
    /* The gradient's buckets (on: all-reduced while backward runs): bucket
       b holds the layers from layer[b] up to the bucket before's, slots
       [lo[b], hi[b]); bucket 0 is the top. */
    struct {
        int on;
        size_t n, layer[MIRROR__MAX_LAYERS], lo[MIRROR__MAX_LAYERS], hi[MIRROR__MAX_LAYERS];
    } buckets;
    /* replica_values (else NULL): each replica's own gradient of the last
       step, before the all-reduce, as its arena holds it (nslots floats a
       replica; in mixed precision still multiplied by the loss scale), a
       scratch arena the downloads pass through, and each replica's metrics */
    struct {
        float *grads;
        void *scratch;
        mirror_metrics *metrics;
    } own;
    uint64_t steps;      /* steps run, skipped ones included */
    float lr;            /* the learning rate of the step at hand (of the schedule at step `steps`) */
    size_t untaken;      /* samples of the steps whose metrics stay on the device */

    /* ---- fit: what mirror_fit sets for the steps it runs ---- */
    struct {
        int lock;           /* fit's lock on its checkpoint path: the descriptor + 1, 0 when none */
        int running;        /* mirror_fit runs on it: its hooks may not fit, load or destroy it */
        volatile sig_atomic_t *stop; /* fit's stop flag, which travels with each reduction across processes */
        uint64_t augment_key;   /* fit's augmentation of the training samples this epoch, */
        size_t augment_pad;     /* off while pad and flip are 0 */
        int augment_flip;
        uint64_t resumed_micro; /* the micro-batch of the checkpoint just loaded, for the next fit (0: none) */
        const mirror__epoch_sums *saving_sums; /* fit's, while it saves a checkpoint mid-epoch (else NULL) */
        mirror__epoch_sums resumed_sums;       /* the checkpoint just loaded's, for the next fit (kept 0: none) */
    } fit;
    /* The file the parameters were last loaded from (mirror_weights_source;
       its path NULL: none), and which file it is (device and inode; has_file
       0: not known), for fit's outputs to spare it. */
    struct {
        mirror_weights_source told;
        char *path;
        uint64_t dev, ino;
        int has_file;
    } source;
    /* Data in device memory: fit's training set (0) and the set evaluated
       (1), the one that the steps at hand read (NULL: the host gathers),
       and fit's data_on_device while it runs. */
    struct {
        mirror__resident sets[2];
        const mirror__resident *at;
        const mirror__resident *kept; /* mirror_keep_data's, or NULL */
        int place;
    } resident;

    /* ---- timing: a ring of the last `steps` steps' phases (off while steps is 0) ---- */
    struct {
        struct mirror__span *spans;
        size_t steps, cap, next, count;
        double origin;
    } trace;

    mirror__norm bn; /* batch normalisation's statistics */
};

/* What the replica threads run on: one global batch, or one chunk of it. */
typedef struct mirror__job {
    mirror_model *m;
    int mode; /* MIRROR__TRAIN, MIRROR__EVAL or MIRROR__PREDICT */
    const mirror_batch *batch;
    size_t offset, n; /* the chunk: samples [offset, offset + n) of batch */
    float inv_count;  /* 1 / n: the loss gradient's divisor, the global count */
    int metrics_now;  /* read the loss back now, or leave it on the device */
    int accumulate;   /* add the gradients to those of the micro-batches before */
    int last;         /* the step's last micro-batch: its backward may all-reduce in buckets */
    size_t row0;      /* the samples of the step before this micro-batch */
    uint64_t augment_key; /* fit's augmentation this epoch (off: pad 0, flip 0) */
    size_t augment_pad;
    int augment_flip;
    const mirror__resident *data; /* the batch's arrays kept on the device, or NULL */
    float *predict_out;
    /* The pass at hand: training pauses at each batchnorm layer, forward
       and backward, for the host to combine the replicas' sums. The job
       runs from layer `from` (its load first when `start`) and pauses at
       layer `stop` (forward; nlayers: none) or `back_stop` (backward;
       (size_t)-1: none); `backward` once the forward pass is done. */
    size_t from, stop, back_stop;
    int start, backward;
} mirror__job;

struct mirror_strategy {
    size_t replicas;
    char devices[256]; /* the device list in force, "cpu:2" */
    char describe[256];
    mirror_reducer reducer_kind;
    const mirror__backend *backend;
    const mirror__reducer *reducer;
    void *gpu; /* the CUDA backend's state (mirror_cuda.h), else NULL */
    mirror__team team;
    /* One call at a time (see mirror__enter): a recursive mutex, so that
       fit's calls to the other calls take it again. */
    pthread_mutex_t call;
    /* The models built on the strategy: destroyed before them, it waits
       for the last one (life guards both fields). */
    pthread_mutex_t life;
    size_t models;
    int destroyed;
    int depth;         /* calls inside calls (fit's), under the call lock */
    const char *call_name; /* the outermost public call in progress (processes compare it as they agree) */
    int caller_device; /* GPU replicas: the caller's current GPU, put back when the outer call returns */
    /* Processes (see >>processes): this one is rank `rank` of `processes`;
       its replicas are global replicas [first, first + replicas) of
       `world`. One process: 0, 1, 0, replicas. */
    size_t rank, processes, first, world;
    size_t local_rank; /* among the processes on this machine */
    size_t local_size; /* the processes on this machine (1 without MPI) */
    double timeout;    /* seconds to wait for other processes, or for a GPU's queued work */
    char host_memory[64]; /* the host memory override in force ("": none; mirror__host_override) */
    /* What the core needs across processes (see >>processes): the table
       in force (one process's, or MPI's) and its implementation's state. */
    const mirror__processes *procs;
    void *procs_state;
};

static void mirror__resident_free(mirror_model *m, mirror__resident *d);

/* What a CUDA build does without a device list, decided from what CUDA
   answered (mirror__cuda_verdict, in plain C so that the tests can fake
   every answer): use the GPUs; train on CPU replicas where there is no
   driver or no GPU; or fail, where a driver or a GPU is there but cannot
   be used. */
typedef enum {
    MIRROR__CUDA_COUNTED,    /* cudaGetDeviceCount succeeded (the count may be 0) */
    MIRROR__CUDA_NO_DEVICE,  /* cudaErrorNoDevice */
    MIRROR__CUDA_OLD_DRIVER, /* cudaErrorInsufficientDriver: also the answer where no driver is installed */
    MIRROR__CUDA_FAILED      /* any other error */
} mirror__cuda_answer;
typedef enum { MIRROR__GPUS_USE, MIRROR__GPUS_NONE, MIRROR__GPUS_ERROR } mirror__gpus;
#ifdef MIRROR_CUDA
/* In mirror_cuda.h: asks CUDA and returns mirror__cuda_verdict's verdict,
   its reason or error message into why. */
static mirror__gpus mirror__cuda_gpus(char *why, size_t size);
/* Sets s up for GPU replicas: spec is a "cuda..." device list, or NULL for
   every visible GPU (count > 0: count replicas, on the GPUs in turn when
   there are more replicas than GPUs); sets replicas, devices, backend,
   reducer and gpu. On failure s is left as it was and err says why. */
static int mirror__cuda_setup(mirror_strategy *s, const char *spec, size_t count, mirror_error *err);
static void mirror__cuda_teardown(mirror_strategy *s);
/* The calling thread's current GPU, and setting it back: mirror's calls
   leave the caller's device as they found it. */
static int mirror__cuda_current(void);
static void mirror__cuda_restore(int device);
/* A process's default GPUs when there are several processes
   ("cuda:i,...", from its rank among the processes of its machine). */
static void mirror__cuda_local_spec(size_t local_rank, size_t per_process, char *spec, size_t size);
#endif

/* Something every process must have alike before it trains (see
   mirror__processes_agree): what it is, in words, and a hash of it. */
typedef struct mirror__agreed {
    const char *what;
    uint64_t hash;
    const char *told; /* its value in words, for the message when it differs (NULL: not told) */
} mirror__agreed;

/* The processes interface: all that the core needs across processes, one
   table as the backend and reducer tables are. >>processes gives it two
   implementations: one process's, in every build (each member succeeds at
   once and every sum is the identity), and MPI's (MIRROR_MPI). A strategy
   holds the table in force (procs) and that implementation's state
   (procs_state); a strategy of one process, with MPI or without, holds one
   process's. Every exchange waits with a deadline (the strategy's
   timeout); one that fails, is late or is given up after a stop leaves the
   processes lost: every later exchange fails at once. Every member is
   required. */
struct mirror__processes {
    const char *name;

    /* ---- joining and leaving ---- */
    /* Joins the processes before the devices are chosen, waiting at most
       the timeout for the others: sets s->rank, processes, local_rank,
       local_size and procs_state (and, where it finds this process alone,
       hands s->procs over to one process's table). */
    int (*join)(mirror_strategy *s, const mirror_strategy_desc *d, mirror_error *err);
    /* Once the devices are chosen (s->replicas, s->gpu): every process's
       replicas counted into s->first and s->world, the reducer across the
       processes set, and s->describe with them. */
    int (*setup)(mirror_strategy *s, mirror_error *err);
    /* Leaves the processes and frees procs_state; also after a join or a
       setup that failed. */
    void (*teardown)(mirror_strategy *s);
    /* Process p's replica count. */
    size_t (*replicas_of)(const mirror_strategy *s, size_t p);

    /* ---- agreeing ---- */
    /* Every process's result: MIRROR_OK when all succeeded, else the first
       failed process's code there and MIRROR_ERR_PEER elsewhere, with that
       process's message. note (or NULL) says where the parameters came
       from, for the message when the processes are in different calls. */
    int (*agree)(mirror_strategy *s, int result, const char *note, mirror_error *err);
    /* Every process's items (their hashes) against rank 0's: one that
       differs fails every process with MIRROR_ERR_ARGUMENT, named, with the
       first rank that differs. */
    int (*compare)(mirror_strategy *s, const mirror__agreed *items, size_t n, const char *what, const char *note,
                   mirror_error *err);
    /* Rank 0's result and message on every process: what rank 0 alone did
       (a checkpoint save) succeeded or failed everywhere. */
    int (*share)(mirror_strategy *s, int result, mirror_error *err);

    /* ---- summing ---- */
    /* What the next reduction (the reducer's sums, or sum_list below)
       carries to the others: this process's result so far and whether it
       was asked to stop. A failure elsewhere makes that reduction
       MIRROR_ERR_PEER; stopped then says whether any process was asked to
       stop. scatter: that reduction is the reduce-scatter of the update
       sharded across processes (each process keeps its slice of the sum). */
    void (*carry)(mirror_strategy *s, int result, int stop, int scatter);
    int (*stopped)(const mirror_strategy *s);
    /* Deterministic mode's sum of a list (the reducer's sum_list) over
       every process's in[0, nin), rank by rank, into every replica's bufs;
       [*keep, *keep + *keep_len) is what of the n sums this process holds
       (all of them unless scattered). */
    int (*sum_list)(mirror_strategy *s, float *const *in, const size_t *owner, size_t nin, float *const *bufs,
                    size_t n, size_t *keep, size_t *keep_len, mirror_error *err);
    /* v[n] summed over the processes in rank order: every process the same. */
    int (*sum_doubles)(mirror_strategy *s, double *v, size_t n, const char *what, mirror_error *err);

    /* ---- gathering ---- */
    /* The update sharded across processes: each process's slice of an
       array of n slots (mirror__process_slice) into every process, in
       place. The array holds the slots (values of `size` bytes: floats or
       16-bit), or with `parts` the verdict's doubles: at p plus its first
       block, process p's flag and then its blocks' sums of squares. */
    int (*gather_slices)(mirror_strategy *s, void *buf, size_t n, size_t size, int parts, mirror_error *err);
    /* Every process's part of buf into every process's buf, in place:
       process p's is the values [parts[processes + p], + parts[p]), of
       `size` bytes (2, 4 or 8), copied bit for bit. */
    int (*gather)(mirror_strategy *s, void *buf, size_t size, const size_t *parts, const char *what,
                  mirror_error *err);

    /* ---- stopping and giving up ---- */
    /* fit's stop flag while it runs (NULL once it returns): a process
       asked to stop while it waits for the others gives up a moment later
       (the processes are then lost). Clears stopped. */
    void (*watch)(mirror_strategy *s, volatile sig_atomic_t *stop);
    /* Whether the processes have lost each other (an exchange failed, was
       late or was given up): no exchange can run any more. */
    int (*lost)(const mirror_strategy *s);
};

/* In >>processes: the table a strategy of this build joins with. */
static const mirror__processes *mirror__processes_built(void);

// >>errors ------------------------------------------------------------------
/* Result codes into messages: the last error's detail in a mirror_error
   (a model's own, or the caller's), every message also to the logger. */

static mirror_log_fn mirror__log_fn;
static void *mirror__log_user;

MIRROR_API void mirror_set_logger(mirror_log_fn fn, void *user)
{
    mirror__log_fn = fn;
    mirror__log_user = user;
}

MIRROR_API const char *mirror_result_string(int result)
{
    switch (result) {
#define MIRROR__CASE(name, value, text) \
    case value: return text;
        MIRROR_RESULT_LIST(MIRROR__CASE)
#undef MIRROR__CASE
    default: return "unknown result";
    }
}

static void mirror__log(int level, const char *message)
{
    if (mirror__log_fn)
        mirror__log_fn(mirror__log_user, level, message);
    else if (level == MIRROR_LOG_NOTICE)
        fprintf(stderr, "mirror: %s\n", message);
}

/* An err that takes nothing and logs nothing: for a check run ahead (a
   header read while its file inflates) whose failure the full parse then
   reports. Never written, so threads may share it. */
static mirror_error mirror__silent;

/* A part of a message of any length (a path, a name, a list, a model's
   description) in at most n bytes (n >= 8): its first third and last two
   thirds around "...", cut between UTF-8 characters. The longest part
   of a message is bounded, so that the rest of it, what to do, survives:
   MIRROR__CUT_F ("%.*s%s%s") takes the four arguments of MIRROR__CUT(s, n). */
#define MIRROR__CUT_F "%.*s%s%s"
#define MIRROR__CUT(s, n) mirror__cut_head(s, n), (s), mirror__cut_mark(s, n), mirror__cut_tail(s, n)
/* The bounds of a path and of a tensor's or a layer's name in a message. */
#define MIRROR__SHOWN_PATH 400
#define MIRROR__SHOWN_NAME 64
#define MIRROR__PATH(p) MIRROR__CUT(p, MIRROR__SHOWN_PATH)

static int mirror__cut_head(const char *s, size_t n)
{
    size_t len = strlen(s), head = (n - 3) / 3;
    if (len <= n) return (int)len;
    while (head && (s[head] & 0xC0) == 0x80) head--; /* not inside a character */
    return (int)head;
}

static const char *mirror__cut_mark(const char *s, size_t n) { return strlen(s) <= n ? "" : "..."; }

static const char *mirror__cut_tail(const char *s, size_t n)
{
    size_t len = strlen(s);
    const char *tail = s + len - (n - 3 - (n - 3) / 3);
    if (len <= n) return "";
    while ((*tail & 0xC0) == 0x80) tail++;
    return tail;
}

/* Records code and message in err (which may be NULL), logs it, returns
   code. A message longer than the buffer ends in "..." (between UTF-8
   characters), so that a reader knows it was cut. */
static int mirror__verror(mirror_error *err, int code, const char *fmt, va_list ap)
{
    char message[sizeof(err->message)];
    size_t at = sizeof message - 4;
    if (err == &mirror__silent) return code;
    if (vsnprintf(message, sizeof message, fmt, ap) >= (int)sizeof message) {
        while (at && (message[at] & 0xC0) == 0x80) at--;
        memcpy(message + at, "...", 4);
    }
    if (err) {
        err->code = code;
        memcpy(err->message, message, sizeof message);
    }
    mirror__log(MIRROR_LOG_ERROR, message);
    return code;
}

static int mirror__error(mirror_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = mirror__verror(err, code, fmt, ap);
    va_end(ap);
    return code;
}

static int mirror__fail(mirror_model *m, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = mirror__verror(&m->err, code, fmt, ap);
    va_end(ap);
    return code;
}

MIRROR_API const char *mirror_model_error(const mirror_model *m)
{
    return m ? m->err.message : "model is NULL";
}

static int mirror__bad_float(float v, float lo, float hi) { return !(v >= lo && v <= hi); }
/* [lo, hi) and (lo, hi]: the open end is compared with the bound itself,
   never with a float written just inside it (0.99999999f is 1.0f). */
static int mirror__bad_float_co(float v, float lo, float hi) { return !(v >= lo && v < hi); }
static int mirror__bad_float_oc(float v, float lo, float hi) { return !(v > lo && v <= hi); }

static int mirror__check_built(mirror_model *m, const char *what)
{
    if (!m) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "%s: model is NULL", what);
    if (!m->built) return mirror__fail(m, MIRROR_ERR_STATE, "%s: build the model first", what);
    return MIRROR_OK;
}

// >>allocation --------------------------------------------------------------
/* Every allocation goes through MIRROR_MALLOC, its size checked for
   overflow first. */

/* a * b into *out; 0 when it overflows. */
static int mirror__mul(size_t a, size_t b, size_t *out)
{
    if (a && b > (size_t)-1 / a) return 0;
    *out = a * b;
    return 1;
}

/* n * size bytes, or NULL when that overflows or the allocator fails. */
static void *mirror__alloc(size_t n, size_t size)
{
    size_t bytes;
    if (!mirror__mul(n, size, &bytes)) return NULL;
    return MIRROR_MALLOC(bytes ? bytes : 1);
}

static void *mirror__zalloc(size_t n, size_t size)
{
    void *p = mirror__alloc(n, size);
    if (p) memset(p, 0, n * size);
    return p;
}

// >>random ------------------------------------------------------------------
/* splitmix64: one 64-bit state, fast, and good enough for shuffles and
   initialisation. Every random number of the library comes from here. */

static uint64_t mirror__next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 random bits: exact in float. */
static float mirror__uniform(uint64_t *state)
{
    return (float)(mirror__next(state) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, bound), without modulo bias. */
static uint64_t mirror__below(uint64_t *state, uint64_t bound)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound, x;
    do x = mirror__next(state);
    while (x >= limit);
    return x % bound;
}

/* A 64-bit hash of n bytes, continuing from h: four lanes of 8-byte words
   (a dataset of hundreds of megabytes in a fraction of a second), folded
   with the tail and the length through splitmix64's mixer. It tells
   different bytes from equal ones (replicas, processes); it is no
   cryptographic digest. */
static uint64_t mirror__hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t lane[4], w, state;
    size_t i, j;
    for (j = 0; j < 4; j++) lane[j] = h + j * 0x9E3779B97F4A7C15ull;
    for (i = 0; i + 32 <= n; i += 32)
        for (j = 0; j < 4; j++) {
            memcpy(&w, b + i + 8 * j, 8);
            lane[j] = (lane[j] ^ w) * 0xBF58476D1CE4E5B9ull;
            lane[j] ^= lane[j] >> 29;
        }
    for (; i + 8 <= n; i += 8) { /* the tail's words, each into a lane: the loop of bytes keeps 8 at most */
        memcpy(&w, b + i, 8);
        j = (i / 8) % 4;
        lane[j] = (lane[j] ^ w) * 0xBF58476D1CE4E5B9ull;
        lane[j] ^= lane[j] >> 29;
    }
    for (w = 0; i < n; i++) w = (w << 8 | b[i]) * 0x94D049BB133111EBull;
    for (state = w ^ n, j = 0; j < 4; j++) {
        state ^= lane[j];
        state = mirror__next(&state);
    }
    return state;
}

/* Standard normal (Box-Muller). */
static float mirror__normal(uint64_t *state)
{
    float u = mirror__uniform(state) + (1.0f / 33554432.0f), v = mirror__uniform(state);
    return sqrtf(-2.0f * logf(u)) * cosf(6.28318530718f * v);
}

// >>threads -----------------------------------------------------------------
/* A fixed team of threads, one per replica: the caller's thread is worker 0
   and size - 1 helper threads are the others. mirror__run hands every
   worker the same job and returns when all have finished it. A step runs
   three jobs back to back, so where there is a core for every worker a
   waiting worker (a helper between jobs, the caller for the helpers)
   spins for up to MIRROR__SPIN_SECONDS before it sleeps on a condition
   variable: waking a sleeping thread costs tens of microseconds, a
   spinning one sees the next job at once. The budget covers a small
   step's gaps and the replicas' imbalance within a job; a longer wait
   (the caller's own work between steps) sleeps. A spinning worker pauses
   between looks and, after the first tenth of the budget, yields: when the
   scheduler has put the two threads on one core (another process had the
   other), the one awaited runs instead of waiting for the spin to end.
   Without GCC-style atomics (MIRROR__ATOMICS 0) every exchange goes
   through the mutex. */

#if (defined(__GNUC__) || defined(__clang__)) && !defined(MIRROR_NO_ATOMICS)
#define MIRROR__ATOMICS 1
#define MIRROR__LOAD(p) __atomic_load_n(p, __ATOMIC_ACQUIRE)
#define MIRROR__STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELEASE)
#else
#define MIRROR__ATOMICS 0
#endif
#define MIRROR__SPIN_SECONDS 200e-6
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define MIRROR__PAUSE() __builtin_ia32_pause()
#elif defined(__GNUC__) && defined(__aarch64__)
#define MIRROR__PAUSE() __asm__ __volatile__("yield")
#else
#define MIRROR__PAUSE() ((void)0)
#endif

typedef struct mirror__team_arg {
    mirror__team *team;
    size_t worker;
} mirror__team_arg;

static double mirror__now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Spins until (*p == value) == equal: 1 when it came, 0 once the team's
   budget has passed without it (the caller then sleeps). */
static int mirror__spin_until(const mirror__team *t, unsigned long *p, unsigned long value, int equal)
{
#if MIRROR__ATOMICS
    double start = 0.0, waited;
    long i;
    for (i = 0; t->spin > 0.0; i++) {
        if ((MIRROR__LOAD(p) == value) == equal) return 1;
        MIRROR__PAUSE();
        if (i % 64 != 63) continue; /* the clock every 64 looks */
        if (start == 0.0)
            start = mirror__now();
        else if ((waited = mirror__now() - start) > t->spin)
            return 0;
        else if (waited > 0.1 * t->spin)
            sched_yield();
    }
#else
    (void)t, (void)p, (void)value, (void)equal;
#endif
    return 0;
}

static void *mirror__worker_main(void *p)
{
    mirror__team_arg *arg = (mirror__team_arg *)p;
    mirror__team *t = arg->team;
    unsigned long seen = 0;
    for (;;) {
        mirror__job_fn job;
        void *ctx;
        int quit;
        if (!mirror__spin_until(t, &t->generation, seen, 0)) {
            pthread_mutex_lock(&t->mutex);
            t->sleepers++;
            while (t->generation == seen) pthread_cond_wait(&t->wake, &t->mutex);
            t->sleepers--;
            pthread_mutex_unlock(&t->mutex);
        }
        /* A new generation was published with job, ctx and quit before it. */
#if MIRROR__ATOMICS
        seen = MIRROR__LOAD(&t->generation);
        job = t->job, ctx = t->ctx, quit = t->quit;
#else
        pthread_mutex_lock(&t->mutex);
        seen = t->generation;
        job = t->job, ctx = t->ctx, quit = t->quit;
        pthread_mutex_unlock(&t->mutex);
#endif
        if (quit) return NULL;
        job(ctx, arg->worker);
#if MIRROR__ATOMICS
        if (__atomic_sub_fetch(&t->pending, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&t->mutex);
            if (t->caller_sleeps) pthread_cond_signal(&t->done);
            pthread_mutex_unlock(&t->mutex);
        }
#else
        pthread_mutex_lock(&t->mutex);
        if (--t->pending == 0) pthread_cond_signal(&t->done);
        pthread_mutex_unlock(&t->mutex);
#endif
    }
}

/* Hands the helpers a job (or, with quit, the order to return) and wakes the sleepers. */
static void mirror__publish(mirror__team *t, mirror__job_fn job, void *ctx, int quit)
{
    pthread_mutex_lock(&t->mutex);
    t->job = job;
    t->ctx = ctx;
    t->quit = quit;
#if MIRROR__ATOMICS
    MIRROR__STORE(&t->pending, (unsigned long)(t->size - 1));
    MIRROR__STORE(&t->generation, t->generation + 1);
#else
    t->pending = t->size - 1;
    t->generation++;
#endif
    if (t->sleepers) pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->mutex);
}

static void mirror__team_stop(mirror__team *t, size_t started)
{
    size_t i;
    if (t->threads) {
        mirror__publish(t, NULL, NULL, 1);
        for (i = 0; i < started; i++) pthread_join(t->threads[i], NULL);
        pthread_cond_destroy(&t->wake);
        pthread_cond_destroy(&t->done);
        pthread_mutex_destroy(&t->mutex);
    }
    MIRROR_FREE(t->threads);
    MIRROR_FREE(t->args);
    t->threads = NULL;
    t->args = NULL;
}

static int mirror__team_start(mirror__team *t, size_t size, size_t cores, mirror_error *err)
{
    size_t i;
    memset(t, 0, sizeof *t);
    t->size = size;
    t->spin = size <= cores ? MIRROR__SPIN_SECONDS : 0.0;
    if (size <= 1) return MIRROR_OK;
    t->threads = (pthread_t *)mirror__alloc(size - 1, sizeof *t->threads);
    t->args = (mirror__team_arg *)mirror__alloc(size - 1, sizeof *t->args);
    if (!t->threads || !t->args || pthread_mutex_init(&t->mutex, NULL) != 0) {
        MIRROR_FREE(t->threads);
        MIRROR_FREE(t->args);
        t->threads = NULL;
        t->args = NULL;
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: no memory for %zu threads", size);
    }
    if (pthread_cond_init(&t->wake, NULL) != 0 || pthread_cond_init(&t->done, NULL) != 0) {
        mirror__team_stop(t, 0); /* destroying a condition never initialised is harmless here */
        return mirror__error(err, MIRROR_ERR_THREAD, "strategy: could not create condition variables");
    }
    for (i = 0; i + 1 < size; i++) {
        t->args[i].team = t;
        t->args[i].worker = i + 1;
        if (pthread_create(&t->threads[i], NULL, mirror__worker_main, &t->args[i]) != 0) {
            mirror__team_stop(t, i);
            return mirror__error(err, MIRROR_ERR_THREAD, "strategy: could not start thread %zu of %zu", i + 2,
                                 size);
        }
    }
    return MIRROR_OK;
}

static void mirror__run(mirror__team *t, mirror__job_fn job, void *ctx)
{
    if (t->size > 1) mirror__publish(t, job, ctx, 0);
    job(ctx, 0); /* the caller is worker 0 */
    if (t->size <= 1 || mirror__spin_until(t, &t->pending, 0, 1)) return;
    pthread_mutex_lock(&t->mutex);
    t->caller_sleeps = 1;
#if MIRROR__ATOMICS
    while (MIRROR__LOAD(&t->pending) != 0) pthread_cond_wait(&t->done, &t->mutex);
#else
    while (t->pending != 0) pthread_cond_wait(&t->done, &t->mutex);
#endif
    t->caller_sleeps = 0;
    pthread_mutex_unlock(&t->mutex);
}

/* Waiting with a deadline, for what cannot block safely (another process's
   message, a GPU's queued work): calls poll(ctx) until it says 1 (done) or
   -1 (failed), and returns that, or 0 once timeout seconds have passed. A
   short wait spins; a long one naps between polls, leaving the cores.
   (static inline: builds with neither MPI nor CUDA do not call it.) */
static inline int mirror__poll(int (*poll)(void *ctx), void *ctx, double timeout)
{
    double deadline = mirror__now() + timeout;
    struct timespec nap = {0, 20000};
    long polls = 0;
    int got;
    while ((got = poll(ctx)) == 0) {
        if (++polls > 20000) nanosleep(&nap, NULL);
        if (polls % 64 == 0 && mirror__now() > deadline) return 0;
    }
    return got;
}

/* A global batch, or any n items, cut into contiguous parts, one per
   replica (or worker): sizes differ by at most one, a part may be empty. */
MIRROR_API void mirror_shard(size_t n, size_t replicas, size_t r, size_t *begin, size_t *count)
{
    size_t base, extra;
    if (!replicas || r >= replicas) {
        *begin = n;
        *count = 0;
        return;
    }
    base = n / replicas;
    extra = n % replicas;
    *begin = r * base + MIRROR__MIN(r, extra);
    *count = base + (r < extra);
}

/* The update sharded across processes (shard_update on): process p's
   slice of n parameter slots, whole blocks of MIRROR__NORM_BLOCK (the
   blocks the clipping norm adds its squares in), shared out as mirror_shard
   shares: blocks [*first, *first + *blocks), or slots [*begin, *begin +
   *count); a slice may be empty. */
enum { MIRROR__NORM_BLOCK = 1024 };

static void mirror__process_blocks(size_t n, size_t processes, size_t p, size_t *first, size_t *blocks)
{
    mirror_shard((n + MIRROR__NORM_BLOCK - 1) / MIRROR__NORM_BLOCK, processes, p, first, blocks);
}

static void mirror__process_slice(size_t n, size_t processes, size_t p, size_t *begin, size_t *count)
{
    size_t b, c;
    mirror__process_blocks(n, processes, p, &b, &c);
    *begin = MIRROR__MIN(b * MIRROR__NORM_BLOCK, n);
    *count = MIRROR__MIN((b + c) * MIRROR__NORM_BLOCK, n) - *begin;
}

/* ---- one call at a time ---- */

/* One call at a time on a strategy and its models: a call that finds
   another thread inside one returns MIRROR_ERR_STATE at once, where the
   replica threads would deadlock. The same thread may enter again (fit
   runs the other calls). s may be NULL: the call reports that itself. The
   message goes to err (a model's, or NULL). */
static int mirror__enter(mirror_strategy *s, mirror_error *err, const char *what)
{
    if (!s) return MIRROR_OK;
    if (pthread_mutex_trylock(&s->call) == 0) {
#ifdef MIRROR_CUDA
        if (s->depth == 0 && s->gpu) s->caller_device = mirror__cuda_current();
#endif
        if (s->depth == 0) s->call_name = what;
        s->depth++;
        return MIRROR_OK;
    }
    return mirror__error(err, MIRROR_ERR_STATE,
                         "%s: another thread is inside a call on this strategy or one of its models; call them "
                         "from one thread at a time (see THREADING)",
                         what);
}

static void mirror__leave(mirror_strategy *s)
{
    if (!s) return;
#ifdef MIRROR_CUDA
    if (s->depth == 1 && s->gpu) mirror__cuda_restore(s->caller_device);
#endif
    s->depth--;
    if (s->depth == 0) s->call_name = NULL;
    pthread_mutex_unlock(&s->call);
}

/* The body of a public call on model m: `inner`, inside the call lock. */
#define MIRROR__LOCKED(m, what, inner)                                                                 \
    mirror_strategy *s_ = (m) ? (m)->s : NULL;                                                         \
    int rc_ = mirror__enter(s_, (m) ? &(m)->err : NULL, what);                                         \
    if (rc_) return rc_;                                                                               \
    rc_ = inner;                                                                                       \
    mirror__leave(s_);                                                                                 \
    return rc_

// >>gemm --------------------------------------------------------------------
/* C = alpha op(A) op(B) + beta C, row-major, op(X) = X or X^T. The built-in
   kernel follows the BLIS recipe: blocks of C of MC x NC, panels of B
   packed contiguously (KC deep) so that a small MR x NR register tile reads
   them with unit stride. A is read in place, by broadcasts from MR rows
   (in either layout the tile's reads of A are short unit-stride runs), as
   the small-matrix kernels of BLIS do: the GEMMs of a replica's shard are
   small, and packing cost as much as the products.

   The tile is written with explicit vectors (GCC/Clang vector extensions),
   not left to the auto-vectoriser: how well a compiler vectorised a plain
   loop nest varied 30-fold between gcc and clang and between -O2 and -O3.
   The tile's shape follows the widest vector the target has, so that its
   accumulators fill most of the vector registers and no more:

      target                 vector      tile (MR x NR)   registers
      AVX-512                16 floats   8 x 32           32 zmm
      AVX, AVX2              8 floats    6 x 16           16 ymm
      SSE2 (x86-64 baseline) 4 floats    6 x 8            16 xmm
      NEON (arm64)           4 floats    8 x 8            32 q
      other compilers        1 float     4 x 4            plain C

   Each step of the k loop loads NV vectors of B, broadcasts each of the MR
   values of A and adds MR x NV products. The loops over MR and NV have
   constant bounds; the unroll pragma makes gcc at -O2 unroll them too, so
   the accumulators live in registers whatever the optimisation level.
   -ffp-contract=fast (or clang's default) turns each product and sum into
   one fused multiply-add where the target has FMA. */

#if (defined(__GNUC__) || defined(__clang__)) && !defined(MIRROR_NO_SIMD)
#if defined(__AVX512F__)
#define MIRROR__VL 16
#define MIRROR__MR 8
#define MIRROR__ISA "AVX-512"
#elif defined(__AVX__)
#define MIRROR__VL 8
#define MIRROR__MR 6
#if defined(__FMA__)
#define MIRROR__ISA "AVX2+FMA"
#else
#define MIRROR__ISA "AVX"
#endif
#elif defined(__SSE2__)
#define MIRROR__VL 4
#define MIRROR__MR 6
#define MIRROR__ISA "SSE2"
#elif defined(__ARM_NEON) || defined(__aarch64__)
#define MIRROR__VL 4
#define MIRROR__MR 8
#define MIRROR__ISA "NEON"
#endif
#endif

#ifdef MIRROR__VL
#define MIRROR__NV 2
typedef float mirror__vec __attribute__((vector_size(MIRROR__VL * sizeof(float))));
typedef int32_t mirror__ivec __attribute__((vector_size(MIRROR__VL * sizeof(int32_t)))); /* masks */
#else /* plain C: a vector of one float */
#define MIRROR__VL 1
#define MIRROR__MR 4
#define MIRROR__NV 4
#define MIRROR__ISA "plain C"
typedef float mirror__vec;
#endif
#define MIRROR__NR (MIRROR__NV * MIRROR__VL)

#if defined(__CUDACC__) /* nvcc's front end knows its own spelling only */
#define MIRROR__UNROLL _Pragma("unroll")
#elif (defined(__GNUC__) && __GNUC__ >= 8) || defined(__clang__)
#define MIRROR__UNROLL _Pragma("GCC unroll 16")
#else
#define MIRROR__UNROLL
#endif

/* A pointer through which alone its data is reached in a loop: C99's
   restrict, which C++ spells __restrict. */
#ifdef __cplusplus
#define MIRROR__RESTRICT __restrict
#else
#define MIRROR__RESTRICT restrict
#endif

/* for (i = 0; i < n; i++) body, as two loops: whole blocks of 16, then the
   rest. gcc at -O2 vectorises a loop only where the vector code replaces
   it whole, without a remainder or a run-time test of aliasing: the first
   loop is one when its pointers are restrict (at -O3, and with clang,
   either way). */
#define MIRROR__EACH(i, n, ...)                                                                                       \
    do {                                                                                                               \
        size_t mirror__blocks_ = (n) & ~(size_t)15;                                                                   \
        for (i = 0; i < mirror__blocks_; i++) __VA_ARGS__;                                                             \
        for (; i < (n); i++) __VA_ARGS__;                                                                              \
    } while (0)

/* The tile stays a function of its own: inlined into a caller with many
   live values, its row pointers spill out of the registers. */
#if defined(__GNUC__) || defined(__clang__)
#define MIRROR__NOINLINE __attribute__((noinline))
#define MIRROR__INLINE inline __attribute__((always_inline))
#else
#define MIRROR__NOINLINE
#define MIRROR__INLINE
#endif

#ifndef MIRROR_GEMM_MC
#define MIRROR_GEMM_MC 120
#endif
#ifndef MIRROR_GEMM_KC
#define MIRROR_GEMM_KC 256
#endif
#ifndef MIRROR_GEMM_NC
#define MIRROR_GEMM_NC 2048
#endif

/* Floats of packing workspace one GEMM call needs. */
#define MIRROR__GEMM_WORKSPACE (MIRROR_GEMM_KC * (MIRROR_GEMM_NC + MIRROR__NR))

/* Unaligned vector load and store: memcpy is what every compiler turns
   into one move instruction without assuming alignment. */
static mirror__vec mirror__vload(const float *p)
{
    mirror__vec v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void mirror__vstore(float *p, mirror__vec v) { memcpy(p, &v, sizeof v); }

#if MIRROR__AVX512
/* A 16 x 16 transpose of 32-bit values (floats, or bf16 pairs): the value
   at byte i*lds + 4j of src goes to byte j*ldd + 4i of dst, i and j below
   16. Four rounds of shuffles: pairs of 32 bits, then 64 bits within each
   128, then 128-bit quarters twice. */
static void mirror__transpose16(void *dst, size_t ldd, const void *src, size_t lds)
{
    __m512i r[16], t[16];
    size_t k, m;
    for (k = 0; k < 16; k++) r[k] = _mm512_loadu_si512((const char *)src + k * lds);
    for (k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_epi32(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_epi32(r[k], r[k + 1]);
    }
    for (k = 0; k < 16; k += 4) { /* r[k + m]: rows k..k+3 of column 4L + m, in each quarter L */
        r[k] = _mm512_unpacklo_epi64(t[k], t[k + 2]);
        r[k + 1] = _mm512_unpackhi_epi64(t[k], t[k + 2]);
        r[k + 2] = _mm512_unpacklo_epi64(t[k + 1], t[k + 3]);
        r[k + 3] = _mm512_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    for (m = 0; m < 4; m++) {
        char *d = (char *)dst;
        __m512i lo0 = _mm512_shuffle_i32x4(r[m], r[4 + m], 0x44), lo1 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0x44);
        __m512i hi0 = _mm512_shuffle_i32x4(r[m], r[4 + m], 0xee), hi1 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0xee);
        _mm512_storeu_si512(d + m * ldd, _mm512_shuffle_i32x4(lo0, lo1, 0x88));
        _mm512_storeu_si512(d + (4 + m) * ldd, _mm512_shuffle_i32x4(lo0, lo1, 0xdd));
        _mm512_storeu_si512(d + (8 + m) * ldd, _mm512_shuffle_i32x4(hi0, hi1, 0x88));
        _mm512_storeu_si512(d + (12 + m) * ldd, _mm512_shuffle_i32x4(hi0, hi1, 0xdd));
    }
}
#endif

/* op(B)[pc.., jc..] as panels of NR columns, pb[panel][p][j], zero past
   n; element (p, j) of op(B) is b[p*rs + j*cs]. */
static void mirror__pack_b(const float *b, size_t rs, size_t cs, size_t kc, size_t nc, float *pb)
{
    size_t j0, j, p;
    for (j0 = 0; j0 < nc; j0 += MIRROR__NR, pb += MIRROR__NR * kc) {
        size_t nr = MIRROR__MIN(MIRROR__NR, nc - j0);
        if (cs == 1 || rs != 1) {
            for (p = 0; p < kc; p++) {
                const float *src = b + p * rs + j0 * cs;
                float *dst = pb + p * MIRROR__NR;
                if (cs == 1)
                    memcpy(dst, src, nr * sizeof(float));
                else
                    for (j = 0; j < nr; j++) dst[j] = src[j * cs];
                for (j = nr; j < MIRROR__NR; j++) dst[j] = 0.0f;
            }
        } else { /* op(B) = B^T: its columns are B's rows, read along */
            size_t vj = 0, vp = 0;
            if (nr < MIRROR__NR) memset(pb, 0, kc * MIRROR__NR * sizeof(float));
#if MIRROR__AVX512
            vj = nr / 16 * 16, vp = kc / 16 * 16; /* whole blocks of 16 x 16, transposed */
            for (j = 0; j < vj; j += 16)
                for (p = 0; p < vp; p += 16)
                    mirror__transpose16(pb + p * MIRROR__NR + j, MIRROR__NR * sizeof(float), b + (j0 + j) * cs + p,
                                        cs * sizeof(float));
#endif
            for (j = 0; j < nr; j++) {
                const float *src = b + (j0 + j) * cs;
                for (p = j < vj ? vp : 0; p < kc; p++) pb[p * MIRROR__NR + j] = src[p];
            }
        }
    }
}

/* What a GEMM does to each element (i, j) of C once the products are in
   (NULL: nothing): adds bias[i*rs + j*cs], then applies mirror_hd_relu
   where relu is set. A dense layer's bias, and the relu after it, ride on
   its forward GEMM instead of two more passes over the output. */
typedef struct mirror__epilogue {
    const float *bias;
    size_t rs, cs;
    int relu;
} mirror__epilogue;

/* c = the epilogue of v at element (i, j). */
static float mirror__finish(const mirror__epilogue *ep, size_t i, size_t j, float v)
{
    v += ep->bias[i * ep->rs + j * ep->cs];
    return ep->relu ? mirror_hd_relu(v) : v;
}

/* The same epilogue for the block of C from element (i, j) on. */
static mirror__epilogue mirror__epilogue_at(const mirror__epilogue *ep, size_t i, size_t j)
{
    mirror__epilogue e = *ep;
    e.bias += i * ep->rs + j * ep->cs;
    return e;
}

#if MIRROR__VL > 1
/* The epilogue of the VL elements of C from (i, j) on, where the bias is
   one per row (cs 0) or runs along the row (cs 1); relu is mirror_hd_relu
   lane by lane, as a mask (0 where v <= 0, so that a NaN stays). With
   alpha 1 and beta 0, as in every GEMM with an epilogue, v + bias rounds
   once whether or not the compiler fuses it into the product's sum: the
   same bits as the scalar path of the tiles at the edges. */
static mirror__vec mirror__vfinish(const mirror__epilogue *ep, size_t i, size_t j, mirror__vec v)
{
    const mirror__vec zero = {0};
    const float *b = ep->bias + i * ep->rs + j * ep->cs;
    v += ep->cs ? mirror__vload(b) : zero + *b;
    return ep->relu ? (mirror__vec)((mirror__ivec)v & ~(mirror__ivec)(v <= zero)) : v;
}
#define MIRROR__VFINISH(ep) (!(ep) || (ep)->cs <= 1)
#else
#define mirror__vfinish(ep, i, j, v) (v)
#define MIRROR__VFINISH(ep) (!(ep))
#endif

#if MIRROR__AVX512
/* A whole tile's values stored where C's columns are contiguous (crs 1:
   the transposed product's C^T): 8 rows by 16 columns transposed in three
   rounds of shuffles (pairs of 32 bits, 64 bits within each 128, then
   128-bit quarters), column j's 8 values to c + j*ccs. */
static MIRROR__INLINE void mirror__store_columns(mirror__vec v[MIRROR__MR][MIRROR__NV], float *c, size_t ccs)
{
    size_t jv, k, m;
    for (jv = 0; jv < MIRROR__NV; jv++) {
        __m512 r[8], t[8];
        float *c0 = c + jv * MIRROR__VL * ccs;
        MIRROR__UNROLL for (k = 0; k < 8; k++) memcpy(&r[k], &v[k][jv], sizeof r[k]);
        MIRROR__UNROLL for (k = 0; k < 8; k += 2) {
            t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
            t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
        }
        MIRROR__UNROLL for (k = 0; k < 8; k += 4) { /* r[k + m]: rows k..k+3 of column 4L + m, in each quarter L */
            r[k] = _mm512_shuffle_ps(t[k], t[k + 2], 0x44);
            r[k + 1] = _mm512_shuffle_ps(t[k], t[k + 2], 0xee);
            r[k + 2] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0x44);
            r[k + 3] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0xee);
        }
        MIRROR__UNROLL for (m = 0; m < 4; m++) { /* columns m and 4 + m, then 8 + m and 12 + m */
            __m512 lo = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x44), hi = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xee);
            lo = _mm512_shuffle_f32x4(lo, lo, 0xd8), hi = _mm512_shuffle_f32x4(hi, hi, 0xd8);
            _mm256_storeu_ps(c0 + m * ccs, _mm512_castps512_ps256(lo));
            _mm256_storeu_ps(c0 + (4 + m) * ccs, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lo), 1)));
            _mm256_storeu_ps(c0 + (8 + m) * ccs, _mm512_castps512_ps256(hi));
            _mm256_storeu_ps(c0 + (12 + m) * ccs, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(hi), 1)));
        }
    }
}
#endif

/* A tile's last step: C[mr, nr] = beta C + alpha acc, then the epilogue
   ep; whole tiles along C's rows in vectors (with AVX-512, along its
   columns too where beta is 0), the rest element by element. */
static MIRROR__INLINE void mirror__tile_store(mirror__vec acc[MIRROR__MR][MIRROR__NV], float *c, size_t crs, size_t ccs,
                                              size_t mr, size_t nr, float alpha, float beta,
                                              const mirror__epilogue *ep)
{
    size_t i, j;
    if (mr == MIRROR__MR && nr == MIRROR__NR && ccs == 1 && MIRROR__VFINISH(ep)) {
        MIRROR__UNROLL for (i = 0; i < MIRROR__MR; i++)
            MIRROR__UNROLL for (j = 0; j < MIRROR__NV; j++) {
                float *cij = c + i * crs + j * MIRROR__VL;
                /* beta 0 overwrites: C may hold NaN, never scale it */
                mirror__vec v = beta == 0.0f ? alpha * acc[i][j] : beta * mirror__vload(cij) + alpha * acc[i][j];
                mirror__vstore(cij, ep ? mirror__vfinish(ep, i, j * MIRROR__VL, v) : v);
            }
#if MIRROR__AVX512
    } else if (mr == MIRROR__MR && nr == MIRROR__NR && crs == 1 && beta == 0.0f && MIRROR__VFINISH(ep)) {
        mirror__vec v[MIRROR__MR][MIRROR__NV];
        MIRROR__UNROLL for (i = 0; i < MIRROR__MR; i++)
            MIRROR__UNROLL for (j = 0; j < MIRROR__NV; j++) {
                v[i][j] = alpha * acc[i][j];
                if (ep) v[i][j] = mirror__vfinish(ep, i, j * MIRROR__VL, v[i][j]);
            }
        mirror__store_columns(v, c, ccs);
#endif
    } else {
        float t[MIRROR__MR][MIRROR__NR];
        memcpy(t, acc, sizeof t);
        for (i = 0; i < mr; i++)
            for (j = 0; j < nr; j++) {
                float *cij = c + i * crs + j * ccs, v = beta == 0.0f ? alpha * t[i][j] : beta * *cij + alpha * t[i][j];
                *cij = ep ? mirror__finish(ep, i, j, v) : v;
            }
    }
}

/* The register tile: C[mr, nr] = beta C + alpha A-rows . B-panel, where
   element (i, p) of A is a[i*ars + p*acs] (A is read in place, never
   packed: rows past mr repeat the last row, their sums are dropped) and
   element (i, j) of C is c[i*crs + j*ccs]; then the epilogue ep (NULL: none,
   else the tile's own, from its first element). */
MIRROR__NOINLINE static void mirror__tile(size_t kc, const float *a, size_t ars, size_t acs, const float *pb, size_t ldpb,
                         float *c, size_t crs, size_t ccs, size_t mr, size_t nr, float alpha, float beta,
                         const mirror__epilogue *ep)
{
    const mirror__vec zero = {0};
    mirror__vec acc[MIRROR__MR][MIRROR__NV], b[MIRROR__NV];
    const float *row[MIRROR__MR];
    size_t i, j, p, at;
    MIRROR__UNROLL for (i = 0; i < MIRROR__MR; i++) {
        row[i] = a + MIRROR__MIN(i, mr - 1) * ars;
        MIRROR__UNROLL for (j = 0; j < MIRROR__NV; j++) acc[i][j] = zero;
    }
    for (p = 0, at = 0; p < kc; p++, at += acs, pb += ldpb) {
        MIRROR__UNROLL for (j = 0; j < MIRROR__NV; j++) b[j] = mirror__vload(pb + j * MIRROR__VL);
        MIRROR__UNROLL for (i = 0; i < MIRROR__MR; i++) {
            mirror__vec ai = row[i][at] - zero; /* a broadcast: x - 0 is exactly x */
            MIRROR__UNROLL for (j = 0; j < MIRROR__NV; j++) acc[i][j] += ai * b[j];
        }
    }
    mirror__tile_store(acc, c, crs, ccs, mr, nr, alpha, beta, ep);
}

/* C = alpha op(A) op(B) + beta C with every operand given by strides:
   op(A)(i, p) = a[i*ars + p*acs], op(B)(p, j) = b[p*brs + j*bcs],
   C(i, j) = c[i*crs + j*ccs]. Only B is packed, and only when its rows
   are not contiguous or when A spans several blocks; otherwise the tile
   reads B's full panels in place and only the last, partial panel is
   packed, zero-filled. The depth k is cut into equal blocks of at most KC,
   not into KC and a thin rest; the epilogue ep (NULL: none) comes with the
   last. */
static void mirror__gemm_strided(size_t m, size_t n, size_t k, float alpha, const float *a, size_t ars,
                                 size_t acs, const float *b, size_t brs, size_t bcs, float beta, float *c,
                                 size_t crs, size_t ccs, float *ws, const mirror__epilogue *ep)
{
    size_t jc, pc, ic, jr, ir, i, j, blocks, kstep;
    if (k == 0 || alpha == 0.0f) {
        for (i = 0; i < m; i++)
            for (j = 0; j < n; j++) {
                float *cij = c + i * crs + j * ccs, v = beta == 0.0f ? 0.0f : beta * *cij;
                *cij = ep ? mirror__finish(ep, i, j, v) : v;
            }
        return;
    }
    blocks = (k + MIRROR_GEMM_KC - 1) / MIRROR_GEMM_KC;
    kstep = (k + blocks - 1) / blocks;
    for (jc = 0; jc < n; jc += MIRROR_GEMM_NC) {
        size_t nc = MIRROR__MIN(MIRROR_GEMM_NC, n - jc);
        size_t full = bcs != 1 || m > MIRROR_GEMM_MC ? 0 : nc / MIRROR__NR * MIRROR__NR; /* in place */
        for (pc = 0; pc < k; pc += kstep) {
            size_t kc = MIRROR__MIN(kstep, k - pc);
            float bk = pc == 0 ? beta : 1.0f;
            const float *bsrc = b + pc * brs + jc * bcs;
            mirror__pack_b(bsrc + full * bcs, brs, bcs, kc, nc - full, ws);
            for (ic = 0; ic < m; ic += MIRROR_GEMM_MC) {
                size_t mc = MIRROR__MIN(MIRROR_GEMM_MC, m - ic);
                for (jr = 0; jr < nc; jr += MIRROR__NR) {
                    const float *panel = jr < full ? bsrc + jr : ws + (jr - full) * kc;
                    size_t ldp = jr < full ? brs : MIRROR__NR;
                    for (ir = 0; ir < mc; ir += MIRROR__MR) {
                        mirror__epilogue at;
                        if (ep && pc + kc == k) at = mirror__epilogue_at(ep, ic + ir, jc + jr);
                        mirror__tile(kc, a + (ic + ir) * ars + pc * acs, ars, acs, panel, ldp,
                                     c + (ic + ir) * crs + (jc + jr) * ccs, crs, ccs,
                                     MIRROR__MIN(MIRROR__MR, mc - ir), MIRROR__MIN(MIRROR__NR, nc - jr), alpha,
                                     bk, ep && pc + kc == k ? &at : NULL);
                    }
                }
            }
        }
    }
}

/* The cost of an m x n product per unit of depth, in cycles at two vector
   multiply-adds a cycle: its register tiles' multiply-adds (rows and
   columns rounded up to whole tiles) and, where B's rows are not
   contiguous, a cycle for each float gathered into B's panels. */
static size_t mirror__gemm_cost(size_t m, size_t n, int gather_b)
{
    size_t panels = (n + MIRROR__NR - 1) / MIRROR__NR;
    return (m + MIRROR__MR - 1) / MIRROR__MR * panels * MIRROR__MR * MIRROR__NV / 2 +
           (gather_b ? panels * MIRROR__NR : 0);
}

/* C = alpha A B^T + beta C (then the epilogue ep, NULL: none) where A's
   rows and B's rows both run along the depth and n fits in one vector:
   no panel to pack (packing B^T is a gather as costly as the product at
   such widths, and the tile would multiply a 32-wide panel for 9 columns).
   Blocks of 4 rows by 3 columns keep 12 vector sums along the depth, each
   added up lane by lane at its end, then the depth's rest. A row's sums are
   its own: the same bits for any m. AVX-512 only, whose 32 registers hold
   the block (elsewhere the tiles' transposed problem serves). */
#if MIRROR__VL == 16
#define MIRROR__DOT_MR 4
#define MIRROR__DOT_NR 3
/* Each of v's n vectors in a register from here: gcc would load them again
   for every multiply-add (24 loads for 12, most of them split across two
   cache lines). */
#define MIRROR__KEEP(v, n) \
    do { \
        size_t k_; \
        MIRROR__UNROLL for (k_ = 0; k_ < (n); k_++) __asm__("" : "+v"((v)[k_])); \
    } while (0)
static void mirror__gemm_dot(size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda, const float *b,
                             size_t ldb, float beta, float *c, size_t ldc, const mirror__epilogue *ep)
{
    const mirror__vec zero = {0};
    size_t i0, j0, i, j, p, q, l;
    for (i0 = 0; i0 < m; i0 += MIRROR__DOT_MR)
        for (j0 = 0; j0 < n; j0 += MIRROR__DOT_NR) {
            mirror__vec acc[MIRROR__DOT_MR][MIRROR__DOT_NR], va[MIRROR__DOT_MR], vb[MIRROR__DOT_NR];
            float lanes[MIRROR__DOT_MR][MIRROR__DOT_NR][MIRROR__VL];
            const float *ra[MIRROR__DOT_MR], *rb[MIRROR__DOT_NR]; /* past m or n: the last again, dropped */
            MIRROR__UNROLL for (i = 0; i < MIRROR__DOT_MR; i++) {
                ra[i] = a + MIRROR__MIN(i0 + i, m - 1) * lda;
                MIRROR__UNROLL for (j = 0; j < MIRROR__DOT_NR; j++) acc[i][j] = zero;
            }
            MIRROR__UNROLL for (j = 0; j < MIRROR__DOT_NR; j++) rb[j] = b + MIRROR__MIN(j0 + j, n - 1) * ldb;
            for (p = 0; p + MIRROR__VL <= k; p += MIRROR__VL) {
                MIRROR__UNROLL for (i = 0; i < MIRROR__DOT_MR; i++) va[i] = mirror__vload(ra[i] + p);
                MIRROR__UNROLL for (j = 0; j < MIRROR__DOT_NR; j++) vb[j] = mirror__vload(rb[j] + p);
                MIRROR__KEEP(va, MIRROR__DOT_MR);
                MIRROR__KEEP(vb, MIRROR__DOT_NR);
                MIRROR__UNROLL for (i = 0; i < MIRROR__DOT_MR; i++)
                    MIRROR__UNROLL for (j = 0; j < MIRROR__DOT_NR; j++) acc[i][j] += va[i] * vb[j];
            }
            memcpy(lanes, acc, sizeof lanes); /* whole, so that acc stays in registers */
            for (i = 0; i < MIRROR__DOT_MR && i0 + i < m; i++)
                for (j = 0; j < MIRROR__DOT_NR && j0 + j < n; j++) {
                    float sum = 0.0f, *cij = c + (i0 + i) * ldc + j0 + j, v;
                    for (l = 0; l < MIRROR__VL; l++) sum += lanes[i][j][l];
                    for (q = p; q < k; q++) sum += ra[i][q] * rb[j][q];
                    v = beta == 0.0f ? alpha * sum : beta * *cij + alpha * sum; /* beta 0: C may hold NaN */
                    *cij = ep ? mirror__finish(ep, i0 + i, j0 + j, v) : v;
                }
        }
}
#endif

/* The built-in GEMM; ws holds MIRROR__GEMM_WORKSPACE floats. Where B^T
   would have to be packed (a gather of n x k floats, as large as the
   product's own reads for a replica's small m), it may compute C^T =
   op(B)^T op(A)^T instead: B^T becomes the A it reads in place, and what
   is packed is op(A)^T, of m x k floats, none at all when A is given
   transposed. It takes whichever costs less; the tiles fit the transposed
   problem better too where n is small (a 16 x 9 product is one row of
   tiles of 9 x 16, not three of 16 x 9 in 16-wide panels). */
static void mirror__sgemm_builtin(int ta, int tb, size_t m, size_t n, size_t k, float alpha,
                                  const float *a, size_t lda, const float *b, size_t ldb, float beta,
                                  float *c, size_t ldc, float *ws, const mirror__epilogue *ep)
{
    size_t ars = ta ? 1 : lda, acs = ta ? lda : 1, brs = tb ? 1 : ldb, bcs = tb ? ldb : 1;
#if MIRROR__VL == 16
    if (!ta && tb && n <= MIRROR__VL && k >= MIRROR__VL && alpha != 0.0f) {
        mirror__gemm_dot(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ep);
        return;
    }
#endif
    if (tb && mirror__gemm_cost(n, m, !ta) < mirror__gemm_cost(m, n, 1)) {
        mirror__epilogue t; /* the epilogue of C^T */
        if (ep) t = *ep, t.rs = ep->cs, t.cs = ep->rs;
        mirror__gemm_strided(n, m, k, alpha, b, bcs, brs, a, acs, ars, beta, c, 1, ldc, ws, ep ? &t : NULL);
    } else {
        mirror__gemm_strided(m, n, k, alpha, a, ars, acs, b, brs, bcs, beta, c, ldc, 1, ws, ep);
    }
}

/* Every GEMM of the CPU backend: a CBLAS when MIRROR_CBLAS (the epilogue ep
   then a pass of its own), else built in. */
static void mirror__sgemm(int ta, int tb, size_t m, size_t n, size_t k, float alpha, const float *a,
                          size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc,
                          float *ws, const mirror__epilogue *ep)
{
#ifdef MIRROR_CBLAS
    size_t i, j;
    (void)ws;
    (void)mirror__sgemm_builtin;
    if (m && n)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)k, alpha, a, (int)MIRROR__MAX(lda, 1), b, (int)MIRROR__MAX(ldb, 1),
                    beta, c, (int)MIRROR__MAX(ldc, 1));
    for (i = 0; ep && i < m; i++)
        for (j = 0; j < n; j++) c[i * ldc + j] = mirror__finish(ep, i, j, c[i * ldc + j]);
#else
    mirror__sgemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ws, ep);
#endif
}

#if MIRROR__DPBF16
/* The GEMM on bf16 operands (mixed precision's bf16 storage) where the CPU
   has AVX512_BF16: vdpbf16ps multiplies 16 pairs of bf16 values by 16
   pairs and adds both products into 16 fp32 sums, twice the multiply-adds
   of an fp32 vector, and the operands are read as stored, never widened.
   Each element of C is alpha times its sum along the depth, taken pair by
   pair as mirror_hd_dot_bf16 takes it (a pair past an odd depth's end is
   zeros), depth block by depth block as the fp32 GEMM adds them (blocks of
   an even count), then beta C and the epilogue as the fp32 tile: its bits
   do not depend on m or n. Both operands are packed, pairs of depth side
   by side: A as MR rows a pair, B as NR columns a pair. */

/* Rows i of X(i, p) = x[i*rs + p*cs]: the pair (p, p + 1) of its depth, the
   first value in the low half; zero past `end`. */
static uint32_t mirror__bf16_pair(const uint16_t *x, size_t rs, size_t cs, size_t i, size_t p, size_t end)
{
    uint32_t lo = x[i * rs + p * cs], hi = p + 1 < end ? x[i * rs + (p + 1) * cs] : 0u;
    return lo | hi << 16;
}

/* Panels of `width` rows of X (rows from i0, `rows` of them; zeros past),
   depth [p0, end) as pairs: panel t at dst + t * pairs * width. Where a
   row's values are contiguous along the depth (cs 1), a pair is 32 bits of
   it, and 16 rows by 16 pairs are a transpose; where the rows are (rs 1),
   a pair zips two runs of the panel's rows. */
static void mirror__bf16_pack(uint32_t *dst, const uint16_t *x, size_t rs, size_t cs, size_t i0, size_t rows,
                              size_t p0, size_t end, size_t width)
{
    size_t t, q, i, pairs = (end - p0 + 1) / 2, whole = (end - p0) / 2;
    for (t = 0; t < rows; t += width, dst += pairs * width) {
        size_t w = MIRROR__MIN(width, rows - t);
        const uint16_t *x0 = x + (i0 + t) * rs + p0 * cs;
        if (rs == 1) {
            for (q = 0; q < pairs; q++) {
                const uint16_t *lo = x0 + 2 * q * cs, *hi = lo + cs;
                uint32_t *d = dst + q * width;
                if (q < whole)
                    for (i = 0; i < w; i++) d[i] = (uint32_t)lo[i] | (uint32_t)hi[i] << 16;
                else
                    for (i = 0; i < w; i++) d[i] = lo[i];
                for (; i < width; i++) d[i] = 0u;
            }
        } else if (cs == 1) {
            size_t vi = w / 16 * 16, vq = whole / 16 * 16; /* rows and pairs that whole transposes take */
            for (i = 0; i < vi; i += 16)
                for (q = 0; q < vq; q += 16)
                    mirror__transpose16(dst + q * width + i, width * sizeof *dst, x0 + i * rs + 2 * q, rs * sizeof *x0);
            for (q = 0; q < pairs; q++) { /* the rest pair by pair, in the order dst is laid out */
                uint32_t *d = dst + q * width;
                for (i = q < vq ? vi : 0; i < w; i++) {
                    const uint16_t *row = x0 + i * rs + 2 * q;
                    if (q < whole)
                        memcpy(&d[i], row, sizeof(uint32_t));
                    else
                        d[i] = row[0];
                }
                memset(d + i, 0, (width - i) * sizeof *d);
            }
        } else {
            for (q = 0; q < pairs; q++)
                for (i = 0; i < width; i++)
                    dst[q * width + i] = i < w ? mirror__bf16_pair(x, rs, cs, i0 + t + i, p0 + 2 * q, end) : 0u;
        }
    }
}

/* The register tile over `pairs` pairs of depth: A's MR rows, pair q of
   row i at a + i*ars + q*aqs (16-bit units: packed or in place; rows past
   mr repeat the last), broadcast; B's NR columns packed, a pair each, NV
   vectors a pair. C in fp32 (c), or (c16) bf16 storage rounded once, beta
   0: what the fp32 C would hold, narrowed. */
MIRROR__NOINLINE static void mirror__tile_bf16(size_t pairs, const uint16_t *a, size_t ars, size_t aqs,
                                               const uint32_t *pb, float *c, uint16_t *c16, size_t crs, size_t ccs,
                                               size_t mr, size_t nr, float alpha, float beta,
                                               const mirror__epilogue *ep)
{
    const mirror__vec zero = {0};
    mirror__vec acc[MIRROR__MR][MIRROR__NV];
    float t[MIRROR__MR][MIRROR__NR];
    const uint16_t *row[MIRROR__MR];
    size_t i, j, q;
    MIRROR__UNROLL for (i = 0; i < MIRROR__MR; i++) {
        row[i] = a + MIRROR__MIN(i, mr - 1) * ars;
        MIRROR__UNROLL for (j = 0; j < MIRROR__NV; j++) acc[i][j] = zero;
    }
    for (q = 0; q < pairs; q++, pb += MIRROR__NR) {
        __m512bh b[MIRROR__NV];
        MIRROR__UNROLL for (j = 0; j < MIRROR__NV; j++) b[j] = (__m512bh)_mm512_loadu_si512(pb + j * MIRROR__VL);
        MIRROR__UNROLL for (i = 0; i < MIRROR__MR; i++) {
            int32_t pair;
            __m512bh ai;
            memcpy(&pair, row[i] + q * aqs, sizeof pair);
            ai = (__m512bh)_mm512_set1_epi32(pair);
            MIRROR__UNROLL for (j = 0; j < MIRROR__NV; j++)
                acc[i][j] = (mirror__vec)_mm512_dpbf16_ps((__m512)acc[i][j], ai, b[j]);
        }
    }
    /* one store (inlined: one copy), into t first where C is 16-bit */
    mirror__tile_store(acc, c16 ? &t[0][0] : c, c16 ? MIRROR__NR : crs, c16 ? 1 : ccs, mr, nr, alpha, c16 ? 0.0f : beta,
                       ep);
    for (i = 0; c16 && i < mr; i++)
        for (j = 0; j < nr; j++) c16[i * crs + j * ccs] = mirror_hd_bf16_from_f32(t[i][j]);
}

/* Pairs of depth a block takes at most, and whether ws (MIRROR__GEMM_WORKSPACE
   floats) holds B's panels and A's for such a block: with the blocking's
   defaults, about half of it. */
#define MIRROR__BF16_PAIRS ((MIRROR_GEMM_KC + 2) / 2)
#define MIRROR__BF16_FITS                                                                                              \
    ((MIRROR_GEMM_NC + MIRROR__NR + MIRROR_GEMM_MC + MIRROR__MR) * MIRROR__BF16_PAIRS <= MIRROR__GEMM_WORKSPACE)

/* What an m x n x k product costs beyond its multiply-adds: packing B's
   panels (a zip of two rows where its rows run along n, bcs 1; else a
   transpose) and A's where its rows do not run along the depth (acs not
   1: a zip; else A is read in place), and where C's rows do not run along
   n (ccs not 1), every tile's stores one by one. */
static size_t mirror__bf16_cost(size_t m, size_t n, size_t k, size_t acs, size_t bcs, size_t ccs)
{
    return ((bcs == 1 ? 1 : 2) * n + (acs == 1 ? 0 : m)) * k + (ccs == 1 ? 0 : 4 * m * n);
}

/* C = alpha op(A) op(B) + beta C (then ep) by strides, as
   mirror__gemm_strided, on bf16 A and B and an fp32 C (c), or a bf16 C
   (c16; beta 0 and one block of depth, k <= MIRROR_GEMM_KC); k > 0.
   Computes C^T = op(B)^T op(A)^T instead where that packs less. */
static void mirror__gemm_bf16_strided(size_t m, size_t n, size_t k, float alpha, const uint16_t *a, size_t ars,
                                      size_t acs, const uint16_t *b, size_t brs, size_t bcs, float beta, float *c,
                                      uint16_t *c16, size_t crs, size_t ccs, float *ws, const mirror__epilogue *ep)
{
    size_t blocks = (k + MIRROR_GEMM_KC - 1) / MIRROR_GEMM_KC, kstep = (k + blocks - 1) / blocks, jc, pc, ic, jr, ir;
    uint32_t *pb = (uint32_t *)ws, *pa = pb + (MIRROR_GEMM_NC + MIRROR__NR) * MIRROR__BF16_PAIRS;
    if (mirror__bf16_cost(n, m, k, brs, ars, crs) < mirror__bf16_cost(m, n, k, acs, bcs, ccs)) {
        mirror__epilogue t; /* the epilogue of C^T */
        if (ep) t = *ep, t.rs = ep->cs, t.cs = ep->rs;
        mirror__gemm_bf16_strided(n, m, k, alpha, b, bcs, brs, a, acs, ars, beta, c, c16, ccs, crs, ws, ep ? &t : NULL);
        return;
    }
    kstep += kstep & 1; /* whole pairs in every block but the last */
    for (jc = 0; jc < n; jc += MIRROR_GEMM_NC) {
        size_t nc = MIRROR__MIN(MIRROR_GEMM_NC, n - jc);
        for (pc = 0; pc < k; pc += kstep) {
            size_t kc = MIRROR__MIN(kstep, k - pc), pairs = (kc + 1) / 2;
            int last = pc + kc == k, in_place = acs == 1 && kc % 2 == 0; /* A's pairs as stored */
            mirror__bf16_pack(pb, b, bcs, brs, jc, nc, pc, pc + kc, MIRROR__NR);
            for (ic = 0; ic < m; ic += MIRROR_GEMM_MC) {
                size_t mc = MIRROR__MIN(MIRROR_GEMM_MC, m - ic);
                if (!in_place) mirror__bf16_pack(pa, a, ars, acs, ic, mc, pc, pc + kc, MIRROR__MR);
                for (jr = 0; jr < nc; jr += MIRROR__NR)
                    for (ir = 0; ir < mc; ir += MIRROR__MR) {
                        mirror__epilogue at;
                        const uint16_t *ap = in_place ? a + (ic + ir) * ars + pc : (const uint16_t *)(pa + ir * pairs);
                        size_t at_c = (ic + ir) * crs + (jc + jr) * ccs;
                        if (ep && last) at = mirror__epilogue_at(ep, ic + ir, jc + jr);
                        mirror__tile_bf16(pairs, ap, in_place ? ars : 2, in_place ? 2 : 2 * MIRROR__MR, pb + jr * pairs,
                                          c16 ? NULL : c + at_c, c16 ? c16 + at_c : NULL, crs, ccs,
                                          MIRROR__MIN(MIRROR__MR, mc - ir), MIRROR__MIN(MIRROR__NR, nc - jr), alpha,
                                          pc == 0 ? beta : 1.0f, ep && last ? &at : NULL);
                    }
            }
        }
    }
}

/* The same with op as in mirror__sgemm (ta, tb, leading dimensions). */
static void mirror__gemm_bf16(int ta, int tb, size_t m, size_t n, size_t k, float alpha, const uint16_t *a, size_t lda,
                              const uint16_t *b, size_t ldb, float beta, float *c, uint16_t *c16, size_t ldc,
                              float *ws, const mirror__epilogue *ep)
{
    mirror__gemm_bf16_strided(m, n, k, alpha, a, ta ? 1 : lda, ta ? lda : 1, b, tb ? 1 : ldb, tb ? ldb : 1, beta, c,
                              c16, ldc, 1, ws, ep);
}
#endif

// >>backend -----------------------------------------------------------------
/* The device operations that layers, optimizers and the step use. Layers
   never touch replica memory themselves; they call these, so a backend is
   this table and nothing else. Every member is required but those under
   "optional" at its end, which may be NULL (each says what NULL means;
   the code that calls one checks it first). `dev` is the backend's
   per-replica context from open(). Shapes: rows is the shard's sample
   count, inner the spatial size of a channel. Operations may run
   asynchronously (a GPU stream): only download and status wait for them.
   A failure inside an operation is kept in dev and reported by status. */

/* The backend and reducer tables name their members (designated
   initialisers, C99's). C++ has them from C++20; GCC and Clang take them
   earlier as an extension, which these pragmas let pass unwarned. */
#if defined(__cplusplus) && __cplusplus < 202002L && (defined(__GNUC__) || defined(__clang__))
#define MIRROR__NAMED_BEGIN                                                                          \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wpragmas\"")                 \
    _Pragma("GCC diagnostic ignored \"-Wunknown-warning-option\"")                                 \
    _Pragma("GCC diagnostic ignored \"-Wpedantic\"")                                               \
    _Pragma("GCC diagnostic ignored \"-Wc++20-extensions\"")                                       \
    _Pragma("GCC diagnostic ignored \"-Wc++20-designator\"")
#define MIRROR__NAMED_END _Pragma("GCC diagnostic pop")
#else
#define MIRROR__NAMED_BEGIN
#define MIRROR__NAMED_END
#endif

/* Timing's phase edges in a step: gather, forward, backward begin and end
   (0-3), the all-reduce's (4, 5), the update's (6, 7). */
enum { MIRROR__MARKS = 8 };

struct mirror__backend {
    const char *name;
    /* Samples per convolution GEMM (0: the whole shard). One sample keeps
       the im2col buffer in cache on a CPU; a GPU wants one large GEMM. */
    size_t conv_chunk;
    /* Bytes of im2col a replica may keep from forward for backward, every
       convolution's whole shard (0: backward redoes im2col in the one
       shared buffer). */
    size_t keep_cols;
    /* Bytes of activations and their gradients that a group of rows may
       take through the row-wise prefix of layers (0: each layer takes the
       whole shard; see mirror__plan_groups). */
    size_t group_bytes;
    /* Each parameter tensor (a layer's W, its b) starts in the parameter,
       gradient and state arenas at a multiple of this many floats (1: back
       to back). */
    size_t param_align;
    /* Whether a GEMM's row of results is the same whatever the number of
       rows (the built-in CPU GEMM: each element's products added in one
       order). Where not (cuBLAS, a CBLAS), deterministic mode runs every
       GEMM over samples one chunk at a time, so that its shapes do not
       depend on the shard. */
    int gemm_rows_free;
    /* Per-replica context for replica r of s; *workspace_bytes reports what
       it holds. NULL with err set on failure. */
    void *(*open)(mirror_strategy *s, size_t r, size_t *workspace_bytes, mirror_error *err);
    void (*close)(void *dev);
    /* Makes dev current on the calling thread (a GPU: cudaSetDevice). */
    void (*bind)(void *dev);
    /* The first failure since the last call (MIRROR_OK if none), into err. */
    int (*status)(void *dev, mirror_error *err);
    void *(*alloc)(void *dev, size_t bytes); /* zeroed device memory */
    void (*release)(void *dev, void *p);
    /* Whether the device's memory is the host's (the CPU backend): the
       shard is then gathered straight into the arenas, with no staging
       buffers and no upload. */
    int host_is_device;
    /* Host memory the device copies from and to quickly (pinned on a GPU). */
    void *(*host_alloc)(void *dev, size_t bytes);
    void (*host_release)(void *dev, void *p);
    /* Waits until no upload still reads the host buffers of dev. */
    void (*host_wait)(void *dev);
    void (*zero)(void *dev, void *p, size_t bytes);
    void (*upload)(void *dev, void *dst, const void *host, size_t bytes);
    void (*download)(void *dev, void *host, const void *src, size_t bytes); /* waits */
    /* The shard's input, double-buffered in two slots (mirror__load_shard).
       stage: slot's host buffers are free to fill (their last upload is
       done), and what upload_staged copies next waits for the compute that
       last read slot's device buffers. staged: the compute queued next
       waits for those copies. A GPU copies on a stream of its own, while
       it computes on the other slot. */
    void (*stage)(void *dev, int slot);
    void (*upload_staged)(void *dev, void *dst, const void *host, size_t bytes);
    void (*staged)(void *dev, int slot);
    /* Storage: in mixed precision (set_precision) the activations, their
       gradients, the im2col columns and the weights the layers read are
       16-bit values; the arguments below that are void * point to such
       storage (floats in fp32), the float * ones to fp32 always. An op
       computes in fp32 and rounds what it stores once (mirror_hd_narrow).
       C = alpha op(A) op(B) + beta C, A and B in storage; C in storage, or
       with grad an fp32 weight gradient (beta 1 adds to it). */
    void (*gemm)(void *dev, int ta, int tb, size_t m, size_t n, size_t k, float alpha, const void *a, size_t lda,
                 const void *b, size_t ldb, float beta, void *c, size_t ldc, int grad);
    /* A layer's forward in one GEMM: C = op(A) op(B) with bias[j] added
       to column j of every row (a dense layer), or with per_row, bias[i]
       to every column of row i (a convolution's channels), then, where
       relu is set, mirror_hd_relu, and C stored once: bitwise the gemm
       (alpha 1, beta 0) into fp32, bias_add and relu_forward one after the
       other. */
    void (*gemm_bias)(void *dev, int ta, int tb, size_t m, size_t n, size_t k, const void *a, size_t lda,
                      const void *b, size_t ldb, const void *bias, int per_row, int relu, void *c, size_t ldc);
    /* y[r, c, i] += bias[c] */
    void (*bias_add)(void *dev, void *y, const void *bias, size_t rows, size_t channels, size_t inner);
    /* db[c] += sum over r, i of dy[r, c, i] */
    void (*bias_grad)(void *dev, float *db, const void *dy, size_t rows, size_t channels, size_t inner);
    void (*relu_forward)(void *dev, void *y, const void *x, size_t n);
    /* in place: d = d where y > 0, else 0 */
    void (*relu_backward)(void *dev, void *d, const void *y, size_t n);
    /* The smooth activations (kind: a mirror__kind, MIRROR__TANH, _SIGMOID
       or _GELU): y = f(x); backward d = d * f'(x) in place, from x or y. */
    void (*act_forward)(void *dev, int kind, void *y, const void *x, size_t n);
    void (*act_backward)(void *dev, int kind, void *d, const void *x, const void *y, size_t n);
    /* n samples: x [n,C,H,W] -> col [C*k*k, n*Ho*Wo] (sample s at columns
       s*Ho*Wo ...), and col2im's sum back into x (overwritten). */
    void (*im2col)(void *dev, void *col, const void *x, size_t n, size_t c, size_t h, size_t w, size_t k,
                   size_t stride, size_t pad, size_t ho, size_t wo);
    void (*col2im)(void *dev, void *x, const void *col, size_t n, size_t c, size_t h, size_t w, size_t k,
                   size_t stride, size_t pad, size_t ho, size_t wo);
    /* src [a, b, inner] -> dst [b, a, inner] */
    void (*permute)(void *dev, void *dst, const void *src, size_t a, size_t b, size_t inner);
    /* planes = rows * channels; arg[i] is the argmax's offset in its plane. */
    void (*maxpool_forward)(void *dev, void *y, int32_t *arg, const void *x, size_t planes, size_t h, size_t w,
                            size_t k, size_t stride, size_t ho, size_t wo);
    /* Dropout over rows of `inner` elements, the first being global row
       t->row0: y = x * mirror_hd_dropout(key, row, e, p) (x may be y:
       backward applies it to the gradient in place), key being
       mirror_hd_dropout_key(seed, layer, t->step), t in device memory. */
    void (*dropout)(void *dev, void *y, const void *x, size_t rows, size_t inner, uint64_t seed, uint64_t layer,
                    const mirror__tick *t, float p);
    /* n <= 32 bytes from the host's value into p in device memory, in
       stream order (the value is taken at once). */
    void (*set)(void *dev, void *p, const void *value, size_t n);
    /* Average pooling over planes of h x w, kh x kw windows every stride:
       y = the window means; dx = mirror_hd_window_mean_grad of dy. */
    void (*avgpool_forward)(void *dev, void *y, const void *x, size_t planes, size_t h, size_t w, size_t kh, size_t kw,
                            size_t stride, size_t ho, size_t wo);
    void (*avgpool_backward)(void *dev, void *dx, const void *dy, size_t planes, size_t h, size_t w, size_t kh,
                             size_t kw, size_t stride, size_t ho, size_t wo);
    /* Batch normalisation over [rows, channels, inner]; stat holds a
       channel's mean at [c] and invstd at [C + c]. bn_sums, per channel in
       double, in a fixed order: with x NULL, part[c] = sum of a and
       part[C + c] = its M2, the sum of mirror_hd_bn_dev2 about the mean
       part[c] / (rows inner) (forward, a the input); else part[c] = sum
       of a and part[C + c] = sum of a xhat, xhat from x and stat (backward,
       a the output gradient). bn_forward: y = mirror_hd_bn. bn_backward:
       dgamma[c] += part[C + c], dbeta[c] += part[c] (this replica's sums),
       and, unless dx is NULL, dx = mirror_hd_bn_grad with the two means in
       means[c] and means[C + c]. */
    void (*bn_sums)(void *dev, double *part, const void *a, const void *x, const float *stat, size_t rows,
                    size_t channels, size_t inner);
    void (*bn_forward)(void *dev, void *y, const void *x, const float *stat, const void *gamma, const void *beta,
                       size_t rows, size_t channels, size_t inner);
    void (*bn_backward)(void *dev, void *dx, float *dgamma, float *dbeta, const void *dy, const void *x,
                        const float *stat, const float *means, const double *part, const void *gamma, size_t rows,
                        size_t channels, size_t inner);
    /* y = a + b elementwise (y may be a or b); b NULL: y = a. */
    void (*add)(void *dev, void *y, const void *a, const void *b, size_t n);
    void (*maxpool_backward)(void *dev, void *dx, const int32_t *arg, const void *dy, size_t planes, size_t h,
                             size_t w, size_t k, size_t stride, size_t ho, size_t wo);
    /* Per row: loss[r], correct[r], dz[r, :]. dz is multiplied by *scale,
       the loss scale in device memory, unless scale is NULL. */
    void (*softmax_ce)(void *dev, void *dz, float *loss, int32_t *correct, const void *z, const int32_t *labels,
                       size_t rows, size_t k, float inv_count, const float *scale);
    void (*mse)(void *dev, void *dz, float *loss, const void *z, const float *t, size_t rows, size_t d, float inv_count,
                const float *scale);
    /* acc[0] += sum of loss[r], acc[1] += sum of correct[r] (correct may be
       NULL), each sum in the lanes' order (mirror_hd_lane_sums) and then
       added: a step's metrics stay on the device. */
    void (*accumulate)(void *dev, double *acc, const float *loss, const int32_t *correct,
                       size_t rows);
    /* fp32: one pass over the reduced gradient of step t->step:
       mirror_hd_guard on st (found_nonfinite, kept set until the host
       clears it). */
    void (*check32)(void *dev, mirror_loss_scale_state *st, const float *g, size_t n, const mirror__tick *t);
    /* Gradient clipping: the L2 norm of the reduced gradient g (fp32), or of
       g16 unscaled by st->scale (mixed; g NULL), into st->grad_norm, and
       mirror_hd_clip_factor of it into st->clip, which the updates apply.
       Sums in a fixed order: every replica gets the same norm. */
    void (*clip)(void *dev, mirror_loss_scale_state *st, const float *g, const uint16_t *g16, size_t n, int format,
                 float max_norm);
    /* The sharded update across devices, on one slice of the reduced
       gradient g (fp32), or g16 unscaled by st->scale (g NULL):
       slice_stats writes out[0] = 1 if the slice holds an Inf or NaN, else
       0, and out[1] = its sum of squares (0 unless squares), in a fixed
       order. Once the reducer has summed out over the replicas,
       slice_verdict applies mirror_hd_slice_verdict to st. */
    void (*slice_stats)(void *dev, float *out, const float *g, const uint16_t *g16, size_t n, int format,
                        const mirror_loss_scale_state *st, int squares);
    void (*slice_verdict)(void *dev, mirror_loss_scale_state *st, const float *sums, const mirror__tick *t,
                          int format, float max_norm);
    /* One launch over the whole flat parameter arena, doing nothing while
       guard->found_nonfinite is set; the learning rate (and Adam's bias
       corrections) from t. */
    void (*sgd)(void *dev, float *w, float *v, const float *g, size_t n, const mirror_loss_scale_state *guard,
                const mirror__tick *t, float momentum, float weight_decay, int nesterov);
    void (*adam)(void *dev, float *w, float *avg, float *avg_sq, const float *g, size_t n,
                 const mirror_loss_scale_state *guard, const mirror__tick *t, float beta1, float beta2, float eps,
                 float weight_decay, int decoupled);

    /* Mixed precision; format is MIRROR_PRECISION_FP16 or _BF16. */
    /* The model's precision, after open: the storage of the layer ops
       (16-bit unless MIRROR_PRECISION_FP32), largest the most values of
       one storage operand (CPU replicas keep that much fp32 scratch for
       each of an op's operands: a later call for more grows it). MIRROR_OK,
       or MIRROR_ERR_NO_MEMORY. */
    int (*set_precision)(void *dev, int precision, size_t largest);
    void (*narrow)(void *dev, uint16_t *dst, const float *src, size_t n, int format);
    void (*widen)(void *dev, float *dst, const uint16_t *src, size_t n, int format);
    /* One pass over the reduced gradient: sets st->found_nonfinite when
       any element, unscaled, is Inf or NaN. */
    void (*check)(void *dev, mirror_loss_scale_state *st, const uint16_t *g, size_t n, int format);
    /* One pass each, doing nothing when st->found_nonfinite: unscale g by
       st->scale, update the fp32 master w and moments, and write w16, the
       working copy the layers read. Adam's t is st->applied + 1; the
       learning rate is t->lr. */
    void (*sgd_mixed)(void *dev, float *w, float *v, uint16_t *w16, const uint16_t *g, size_t n, int format,
                      const mirror_loss_scale_state *st, const mirror__tick *t, float momentum, float weight_decay,
                      int nesterov);
    void (*adam_mixed)(void *dev, float *w, float *avg, float *avg_sq, uint16_t *w16, const uint16_t *g, size_t n,
                       int format, const mirror_loss_scale_state *st, const mirror__tick *t, float beta1, float beta2,
                       float eps, float weight_decay, int decoupled);
    /* mirror_hd_scaler_update on the device's copy of the state. */
    void (*scaler_update)(void *dev, mirror_loss_scale_state *st, const mirror_loss_scale_desc *d);
    /* Timing (mirror_timing): mark notes when the replica's work reaches
       the phase edge `slot` (0 to MIRROR__MARKS - 1): the CPU reads its
       clock then; a GPU records an event on the replica's stream. marks
       gives slots [0, n) in seconds on mirror__now's clock (a GPU waits
       for its events and places them on that clock). */
    void (*mark)(void *dev, int slot);
    void (*marks)(void *dev, double *t, int n);
    /* The bytes a replica takes beyond its arenas (open's workspace,
       set_precision's scratch) for a model of that precision whose largest
       storage operand holds `largest` values: asked before a build
       allocates (mirror__check_memory). */
    size_t (*workspace)(int precision, size_t largest);

    /* ---- optional: NULL where the backend has none (the callers check) ---- */
    /* maxpool_backward and the backward of the relu before it, in one
       pass, where no two windows overlap (k <= stride): dx is the scatter
       of dy, each term through mirror_hd_relu_grad of the relu's output at
       its pixel, which is the pooling's output y. NULL: the two ops, one
       after the other. */
    void (*maxpool_relu_backward)(void *dev, void *dx, const int32_t *arg, const void *dy, const void *y,
                                  size_t planes, size_t h, size_t w, size_t ho, size_t wo);
    /* The gradient all-reduced in buckets while backward runs (NULL: after
       it, by the reducer; used with the nccl reducer in one process).
       reduce_bucket: the n values at buf (format 0: fp32, else 16-bit)
       summed over every replica, once the work queued so far has made
       them, beside the work queued next. buckets_done: the work queued
       next waits for every bucket. */
    void (*reduce_bucket)(void *dev, void *buf, size_t n, int format);
    void (*buckets_done)(void *dev);
    /* Graphs (NULL: none). capture_begin: the work queued next on the
       replica is recorded, not run (1; 0: it cannot be; -1: not now, a
       failure waits to be reported). capture_end: the
       recording as a graph ready to launch, or NULL where recording failed
       (the work recorded is dropped: queue it again). graph_launch runs it
       in stream order; graph_free. */
    int (*capture_begin)(void *dev);
    void *(*capture_end)(void *dev);
    void (*graph_launch)(void *dev, void *graph);
    void (*graph_free)(void *dev, void *graph);
    /* The device replica r is on, and unless free_bytes is NULL its free
       and total bytes (0 where it cannot tell), asked before a build
       allocates. NULL: the replicas' memory is the host's. */
    int (*device_memory)(mirror_strategy *s, size_t r, size_t *free_bytes, size_t *total_bytes);
    /* The alignment in bytes (a power of two; 0: each operand's own) that
       the GEMMs tell their choice of algorithm, whatever an operand's
       address (mirror__gemm_key_align), set once after open: deterministic
       mode's (mirror__chunk_align), so that a chunk's GEMM is chosen alike
       wherever the replica count puts the chunk. NULL: the backend's GEMMs
       do not choose by alignment. */
    void (*gemm_align)(void *dev, size_t bytes);
    /* Data kept in device memory (mirror__resident_use; NULL: the host
       gathers every shard). Row i of dst = row index[i] of src, for i < n:
       rows of `width` values of `size` bytes (4: floats or int32 labels;
       2: 16-bit storage). With pad or flip, each row is planes of h x w,
       augmented as the host's gather augments them: mirror_hd_augment_draw
       of (key, index[i]), then mirror_hd_augment_source, zeros where it
       falls on the padding. */
    void (*gather)(void *dev, void *dst, const void *src, const int64_t *index, size_t n, size_t width, size_t size,
                   uint64_t key, size_t pad, int flip, size_t h, size_t w);
};

/* The reducer sums n floats over the replicas' buffers (see
   mirror_all_reduce_sum), queued after the work already issued on every
   replica and before the work issued next. */
struct mirror__reducer {
    const char *name;
    int (*all_reduce_sum)(mirror_strategy *s, float *const *bufs, size_t n, mirror_error *err);
    int (*broadcast)(mirror_strategy *s, float *const *bufs, size_t n, size_t root,
                     mirror_error *err);
    /* The same sum over 16-bit values (format as in mirror_hd_narrow):
       each sum is formed in fp32 and rounded once where the reducer can
       (the CPU and copy reducers; NCCL rounds at every hop). */
    int (*all_reduce_half)(mirror_strategy *s, uint16_t *const *bufs, size_t n, int format,
                           mirror_error *err);
    /* Deterministic mode's sum of a list: bufs[r] of every replica =
       in[0] + in[1] + ... + in[nin - 1], element by element in that order;
       in[k] lies on replica owner[k]'s device (in[0] may be bufs[0]). */
    int (*sum_list)(mirror_strategy *s, float *const *in, const size_t *owner, size_t nin, float *const *bufs,
                    size_t n, mirror_error *err);

    /* ---- optional: NULL where the reducer has none (the callers check) ---- */
    /* The sharded update across devices.
       bufs[r] holds replicas * slice values (format 0: floats, else 16-bit
       values summed as all_reduce_half sums them), slice r being replica
       r's. reduce_scatter: slice r of bufs[r] becomes the sum of every
       replica's slice r (the other slices are left undefined).
       all_gather: slice r of bufs[r] is copied into every other replica's
       slice r (values of `size` bytes). */
    int (*reduce_scatter)(mirror_strategy *s, void *const *bufs, size_t slice, int format, mirror_error *err);
    int (*all_gather)(mirror_strategy *s, void *const *bufs, size_t slice, size_t size, mirror_error *err);
};

/* The largest power of two up to 256 that divides p's address. */
static uint32_t mirror__align_of(const void *p)
{
    uint32_t k = 256;
    while (k > 1 && (uintptr_t)p % k) k /= 2;
    return k;
}

/* The alignment a GEMM's choice of algorithm is told for operand p: its
   own, at most cap where cap is set (gemm_align). The CUDA backend's;
   CPU builds have no caller but the tests. */
static MIRROR__MAYBE_UNUSED uint32_t mirror__gemm_key_align(const void *p, size_t cap)
{
    uint32_t k = mirror__align_of(p);
    return cap && cap < k ? (uint32_t)cap : k;
}

/* The first failure any replica's device met since the last check. */
static int mirror__device_status(mirror_model *m)
{
    size_t r;
    int rc = MIRROR_OK, one;
    mirror_error e; /* each step's: not its 2 KiB zeroed, only what a status reads */
    e.code = 0, e.message[0] = '\0';
    for (r = 0; m->rep && r < m->s->replicas; r++)
        if (m->rep[r].dev && (one = m->be->status(m->rep[r].dev, &e)) != MIRROR_OK && rc == MIRROR_OK) {
            rc = one;
            m->err = e;
        }
    if (rc) mirror__log(MIRROR_LOG_ERROR, m->err.message);
    return rc;
}

// >>cpu backend -------------------------------------------------------------
/* The reference backend: host memory, loops over the shared math. */

#define MIRROR__CPU_SCRATCH 4 /* an op's most 16-bit operands (bn_backward: dx, dy, x, gamma) */

typedef struct mirror__cpu_dev {
    float *gemm_ws;              /* MIRROR__GEMM_WORKSPACE floats */
    double mark[MIRROR__MARKS]; /* timing: the clock at the phases' edges */
    int format;                 /* the storage: 0 fp32, else 16-bit (set_precision) */
    float *wide[MIRROR__CPU_SCRATCH]; /* 16-bit storage: fp32 scratch for an op's operands */
    size_t wide_n;              /* the values each scratch holds */
} mirror__cpu_dev;

/* A replica's memory beyond its arenas: the built-in GEMM's packing
   workspace, and in mixed precision MIRROR__CPU_SCRATCH fp32 copies of the
   largest operand (set_precision); saturating. */
static size_t mirror__cpu_workspace(int precision, size_t largest)
{
    size_t scratch = 0;
#ifdef MIRROR_CBLAS
    size_t gemm = 0;
#else
    size_t gemm = MIRROR__GEMM_WORKSPACE * sizeof(float);
#endif
    if (precision && !mirror__mul(largest ? largest : 1, MIRROR__CPU_SCRATCH * sizeof(float), &scratch))
        return (size_t)-1;
    return scratch > (size_t)-1 - gemm ? (size_t)-1 : gemm + scratch;
}

static void *mirror__cpu_open(mirror_strategy *s, size_t r, size_t *workspace_bytes, mirror_error *err)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)mirror__zalloc(1, sizeof *d);
    (void)s, (void)r;
    if (!d) {
        mirror__error(err, MIRROR_ERR_NO_MEMORY, "replica %zu: out of memory", r);
        return NULL;
    }
    *workspace_bytes = mirror__cpu_workspace(0, 0);
#ifdef MIRROR_CBLAS
    d->gemm_ws = NULL;
#else
    d->gemm_ws = (float *)mirror__alloc(MIRROR__GEMM_WORKSPACE, sizeof(float));
    if (!d->gemm_ws) {
        MIRROR_FREE(d);
        mirror__error(err, MIRROR_ERR_NO_MEMORY, "replica %zu: no memory for the GEMM workspace", r);
        return NULL;
    }
#endif
    return d;
}

static void mirror__cpu_mark(void *dev, int slot) { ((mirror__cpu_dev *)dev)->mark[slot] = mirror__now(); }

static void mirror__cpu_marks(void *dev, double *t, int n)
{
    memcpy(t, ((mirror__cpu_dev *)dev)->mark, (size_t)n * sizeof *t);
}

static void mirror__cpu_close(void *dev)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    int i;
    if (!d) return;
    for (i = 0; i < MIRROR__CPU_SCRATCH; i++) MIRROR_FREE(d->wide[i]);
    MIRROR_FREE(d->gemm_ws);
    MIRROR_FREE(d);
}

static void *mirror__cpu_alloc(void *dev, size_t bytes)
{
    (void)dev;
    return mirror__zalloc(bytes, 1);
}

static void mirror__cpu_release(void *dev, void *p)
{
    (void)dev;
    MIRROR_FREE(p);
}

static void mirror__cpu_nothing(void *dev) { (void)dev; }
static void mirror__cpu_slot(void *dev, int slot) { (void)dev, (void)slot; }

static int mirror__cpu_status(void *dev, mirror_error *err)
{
    (void)dev, (void)err;
    return MIRROR_OK;
}

static void mirror__cpu_zero(void *dev, void *p, size_t bytes)
{
    (void)dev;
    if (bytes) memset(p, 0, bytes);
}

static void mirror__cpu_copy(void *dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    if (bytes && dst != src) memcpy(dst, src, bytes); /* the same: an input gathered in place */
}

/* The fp32 loops of the layer ops. */

static void mirror__f32_gemm(void *dev, int ta, int tb, size_t m, size_t n, size_t k, float alpha,
                             const float *a, size_t lda, const float *b, size_t ldb, float beta,
                             float *c, size_t ldc)
{
    mirror__sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                  ((mirror__cpu_dev *)dev)->gemm_ws, NULL);
}

static void mirror__f32_gemm_bias(void *dev, int ta, int tb, size_t m, size_t n, size_t k, const float *a, size_t lda,
                                  const float *b, size_t ldb, const float *bias, int per_row, int relu, float *c,
                                  size_t ldc)
{
    mirror__epilogue ep;
    ep.bias = bias, ep.rs = per_row ? 1 : 0, ep.cs = per_row ? 0 : 1, ep.relu = relu;
    mirror__sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, ((mirror__cpu_dev *)dev)->gemm_ws, &ep);
}

static void mirror__f32_bias_add(void *dev, float *y, const float *bias, size_t rows,
                                 size_t channels, size_t inner)
{
    size_t r, c, i;
    (void)dev;
    for (r = 0; r < rows; r++)
        for (c = 0; c < channels; c++, y += inner)
            for (i = 0; i < inner; i++) y[i] += bias[c];
}

/* The 8 lanes of a sum added up, in one fixed order. */
static float mirror__lanes8(const float *lane)
{
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

/* Sum of n floats in 8 fixed lanes: the same order every time (deterministic)
   yet free for the compiler to vectorise, which a plain running sum is not. */
static float mirror__sum(const float *x, size_t n)
{
    float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    size_t i, j;
    for (i = 0; i + 8 <= n; i += 8)
        for (j = 0; j < 8; j++) lane[j] += x[i + j];
    for (j = 0; i < n; i++, j++) lane[j] += x[i];
    return mirror__lanes8(lane);
}

/* mirror__sum of four rows of n floats, back to back, added to out[0..3]:
   the same sums, whose four chains of additions run side by side (one
   chain waits on each addition). */
static void mirror__add_sums4(float *out, const float *x, size_t n)
{
    float lane[4][8];
    size_t i, j, c;
    memset(lane, 0, sizeof lane);
    for (i = 0; i + 8 <= n; i += 8)
        for (c = 0; c < 4; c++)
            for (j = 0; j < 8; j++) lane[c][j] += x[c * n + i + j];
    for (c = 0; c < 4; c++) {
        for (j = 0; i + j < n; j++) lane[c][j] += x[c * n + i + j];
        out[c] += mirror__lanes8(lane[c]);
    }
}

static void mirror__f32_bias_grad(void *dev, float *db, const float *dy, size_t rows,
                                  size_t channels, size_t inner)
{
    size_t r, c;
    (void)dev;
    for (r = 0; r < rows; r++, dy += channels * inner) {
        for (c = 0; inner == 1 && c < channels; c++) db[c] += dy[c];
        for (c = 0; inner > 1 && c + 4 <= channels; c += 4) mirror__add_sums4(db + c, dy + c * inner, inner);
        for (; inner > 1 && c < channels; c++) db[c] += mirror__sum(dy + c * inner, inner);
    }
}

static void mirror__f32_relu_forward(void *dev, float *y, const float *x, size_t n)
{
    size_t i;
    (void)dev;
    MIRROR__EACH(i, n, y[i] = mirror_hd_relu(x[i]));
}

static void mirror__f32_relu_backward(void *dev, float *MIRROR__RESTRICT d, const float *MIRROR__RESTRICT y,
                                      size_t n)
{
    size_t i;
    (void)dev;
    MIRROR__EACH(i, n, d[i] = mirror_hd_relu_grad(y[i], d[i]));
}

/* One loop per kind, so that each vectorises. */
static void mirror__f32_act_forward(void *dev, int kind, float *y, const float *x, size_t n)
{
    size_t i;
    (void)dev;
    if (kind == MIRROR__TANH)
        for (i = 0; i < n; i++) y[i] = mirror_hd_tanh(x[i]);
    else if (kind == MIRROR__SIGMOID)
        for (i = 0; i < n; i++) y[i] = mirror_hd_sigmoid(x[i]);
    else
        for (i = 0; i < n; i++) y[i] = mirror_hd_gelu(x[i]);
}

static void mirror__f32_act_backward(void *dev, int kind, float *d, const float *x, const float *y, size_t n)
{
    size_t i;
    (void)dev;
    if (kind == MIRROR__TANH)
        for (i = 0; i < n; i++) d[i] = mirror_hd_tanh_grad(y[i], d[i]);
    else if (kind == MIRROR__SIGMOID)
        for (i = 0; i < n; i++) d[i] = mirror_hd_sigmoid_grad(y[i], d[i]);
    else
        for (i = 0; i < n; i++) d[i] = mirror_hd_gelu_grad(x[i], d[i]);
}

/* The input row of output row o at kernel row ki, or -1 in the padding. */
static long mirror__tap(size_t o, size_t ki, size_t stride, size_t pad, size_t size)
{
    long v = (long)(o * stride + ki) - (long)pad;
    return v >= 0 && v < (long)size ? v : -1;
}

/* The output columns [*lo, *hi) whose input column o*stride + kj - pad is
   inside [0, w); the others read the zero padding. */
static void mirror__inside(size_t kj, size_t stride, size_t pad, size_t w, size_t wo, size_t *lo,
                           size_t *hi)
{
    size_t a = pad > kj ? (pad - kj + stride - 1) / stride : 0;
    size_t b = w + pad > kj ? (w + pad - kj + stride - 1) / stride : 0;
    *lo = MIRROR__MIN(a, wo);
    *hi = MIRROR__MAX(*lo, MIRROR__MIN(b, wo));
}

/* A "same" convolution at stride 1 (2*pad + 1 == k, so ho == h and
   wo == w) reads, at tap (ki, kj), the plane shifted by `shift` =
   (ki - pad)*w + kj - pad floats, and col's row for the tap is that
   shifted plane: one flat copy, not one per row of 14 or 28 floats (too
   short for vectors). The copy is cut to the floats of the plane,
   [t0, t1); and the flat shift crosses the side edges: the columns
   outside [lo, hi) of each row come from the row before or after. Those
   positions inside [t0, t1) are the tap's edge (at most
   MIRROR__SAME_EDGE: larger pads and planes take the row path). */
#define MIRROR__SAME_EDGE 512
typedef struct {
    long shift;
    size_t t0, t1, n, edge[MIRROR__SAME_EDGE];
} mirror__same_tap;

static int mirror__same_flat(size_t k, size_t stride, size_t pad, size_t h, size_t w)
{
    return stride == 1 && 2 * pad + 1 == k && h * MIRROR__MIN(pad, w) <= MIRROR__SAME_EDGE; /* the widest edge */
}

static void mirror__same_tap_of(mirror__same_tap *t, size_t pad, size_t h, size_t w, size_t ki, size_t kj)
{
    size_t oy, ox, at, lo, hi;
    mirror__inside(kj, 1, pad, w, w, &lo, &hi);
    t->shift = ((long)ki - (long)pad) * (long)w + (long)kj - (long)pad;
    t->t0 = t->shift < 0 ? MIRROR__MIN((size_t)-t->shift, h * w) : 0; /* a shift past the plane: */
    t->t1 = t->shift > 0 ? h * w - MIRROR__MIN((size_t)t->shift, h * w) : h * w; /* nothing to copy */
    t->t1 = MIRROR__MAX(t->t0, t->t1);
    for (oy = 0, t->n = 0; oy < h; oy++)
        for (ox = 0; ox < w; ox++) {
            if (ox == lo) ox = MIRROR__MAX(lo, hi); /* on to the columns past [lo, hi) */
            if (ox < w && (at = oy * w + ox) >= t->t0 && at < t->t1) t->edge[t->n++] = at;
        }
}

/* One value of e bytes (a float, or a 16-bit value) from src to dst: a
   copy of a constant size, which compilers make one move. */
static void mirror__move_at(unsigned char *dst, const unsigned char *src, size_t e)
{
    if (e == sizeof(float))
        memcpy(dst, src, sizeof(float));
    else
        memcpy(dst, src, sizeof(uint16_t));
}

/* im2col of a same convolution on the flat path, tap by tap (each tap's
   edge found once); values of e bytes. */
static void mirror__im2col_same(unsigned char *col, const unsigned char *x, size_t e, size_t n, size_t c, size_t h,
                                size_t w, size_t k, size_t pad)
{
    static const unsigned char zero[sizeof(float)] = {0};
    size_t ch, ki, kj, s, i, hw = h * w;
    mirror__same_tap t;
    for (ki = 0; ki < k; ki++)
        for (kj = 0; kj < k; kj++) {
            mirror__same_tap_of(&t, pad, h, w, ki, kj);
            for (ch = 0; ch < c; ch++)
                for (s = 0; s < n; s++) {
                    const unsigned char *plane = x + (s * c + ch) * hw * e;
                    unsigned char *row = col + (((ch * k + ki) * k + kj) * n + s) * hw * e;
                    memset(row, 0, t.t0 * e);
                    if (t.t1 > t.t0)
                        memcpy(row + t.t0 * e, plane + (size_t)((long)t.t0 + t.shift) * e, (t.t1 - t.t0) * e);
                    memset(row + t.t1 * e, 0, (hw - t.t1) * e);
                    for (i = 0; i < t.n; i++) mirror__move_at(row + t.edge[i] * e, zero, e);
                }
        }
}

/* col[(ch*k + ki)*k + kj][(s*ho + oy)*wo + ox] = x[s][ch][oy*st + ki - p][ox*st + kj - p],
   0 outside, for values of e bytes: it moves them and computes nothing, so
   that 16-bit storage is read and written as it is. */
static void mirror__im2col(unsigned char *col, const unsigned char *x, size_t e, size_t n, size_t c, size_t h,
                           size_t w, size_t k, size_t stride, size_t pad, size_t ho, size_t wo)
{
    size_t ch, ki, kj, s, oy, ox, lo, hi;
    if (mirror__same_flat(k, stride, pad, h, w)) {
        mirror__im2col_same(col, x, e, n, c, h, w, k, pad);
        return;
    }
    for (ch = 0; ch < c; ch++)
        for (ki = 0; ki < k; ki++)
            for (kj = 0; kj < k; kj++)
                for (s = 0, mirror__inside(kj, stride, pad, w, wo, &lo, &hi); s < n; s++)
                for (oy = 0; oy < ho; oy++, col += wo * e) {
                    long iy = mirror__tap(oy, ki, stride, pad, h);
                    const unsigned char *row;
                    if (iy < 0) {
                        memset(col, 0, wo * e);
                        continue;
                    }
                    row = x + ((s * c + ch) * h + (size_t)iy) * w * e; /* ox reads row[ox*st + kj - p] */
                    memset(col, 0, lo * e);
                    if (stride == 1 && hi > lo)
                        memcpy(col + lo * e, row + (lo + kj - pad) * e, (hi - lo) * e);
                    else
                        for (ox = lo; ox < hi; ox++)
                            mirror__move_at(col + ox * e, row + (ox * stride + kj - pad) * e, e);
                    memset(col + hi * e, 0, (wo - hi) * e);
                }
}

/* to += from. Out of line: inlined, gcc -O2 loses what restrict says and
   the loop stays scalar. */
static MIRROR__NOINLINE void mirror__add_to(float *MIRROR__RESTRICT to, const float *MIRROR__RESTRICT from, size_t n)
{
    size_t i;
    MIRROR__EACH(i, n, to[i] += from[i]);
}

/* col2im of a same convolution's tap on one plane: the shifted plane
   added in one flat pass, after which the pixels it reached across a side
   edge get back the values they had. Each pixel takes one term of the
   flat pass, and its taps in the same order, so this is exact: the sums
   of the row path bit for bit. */
static void mirror__col2im_tap(float *plane, const float *col, const mirror__same_tap *t)
{
    float kept[MIRROR__SAME_EDGE], *to;
    size_t e;
    if (t->t1 == t->t0) return; /* the tap reads the padding alone */
    to = plane + ((long)t->t0 + t->shift); /* to[i] is col[t0 + i]'s pixel */
    for (e = 0; e < t->n; e++) kept[e] = to[t->edge[e] - t->t0];
    mirror__add_to(to, col + t->t0, t->t1 - t->t0);
    for (e = 0; e < t->n; e++) to[t->edge[e] - t->t0] = kept[e];
}

/* The adjoint of im2col: x = 0, then every col entry added back to its pixel. */
static void mirror__f32_col2im(void *dev, float *x, const float *col, size_t n, size_t c, size_t h,
                               size_t w, size_t k, size_t stride, size_t pad, size_t ho, size_t wo)
{
    size_t ch, ki, kj, s, oy, ox, lo, hi, hw = h * w;
    mirror__same_tap t;
    (void)dev;
    memset(x, 0, n * c * hw * sizeof(float));
    if (mirror__same_flat(k, stride, pad, h, w)) {
        for (ki = 0; ki < k; ki++)
            for (kj = 0; kj < k; kj++)
                for (mirror__same_tap_of(&t, pad, h, w, ki, kj), ch = 0; ch < c; ch++)
                    for (s = 0; s < n; s++)
                        mirror__col2im_tap(x + (s * c + ch) * hw, col + (((ch * k + ki) * k + kj) * n + s) * hw, &t);
        return;
    }
    for (ch = 0; ch < c; ch++)
        for (ki = 0; ki < k; ki++)
            for (kj = 0; kj < k; kj++)
                for (s = 0, mirror__inside(kj, stride, pad, w, wo, &lo, &hi); s < n; s++)
                for (oy = 0; oy < ho; oy++, col += wo) {
                    long iy = mirror__tap(oy, ki, stride, pad, h);
                    float *row = x + ((s * c + ch) * h + (size_t)(iy < 0 ? 0 : iy)) * w;
                    if (iy < 0) continue;
                    for (ox = lo; ox < hi; ox++) row[ox * stride + kj - pad] += col[ox];
                }
}

/* The windows of max pooling that hold a NaN yield their first NaN. Out of
   line, where compilers cannot fold it into the main loop: a NaN test
   there made it branch and mispredict (2-8x slower). */
static MIRROR__NOINLINE void mirror__maxpool_nan(float *y, int32_t *arg, const float *x, size_t planes, size_t h,
                                                 size_t w, size_t k, size_t stride, size_t ho, size_t wo)
{
    size_t p, oy, ox, at;
    for (p = 0; p < planes; p++, x += h * w)
        for (oy = 0; oy < ho; oy++)
            for (ox = 0; ox < wo; ox++, y++, arg++) {
                size_t corner = oy * stride * w + ox * stride;
                if (!mirror_hd_window_nan(x + corner, w, k, &at, 0)) continue;
                *y = x[corner + at];
                *arg = (int32_t)(corner + at);
            }
}

/* One row of max pooling's outputs, each window's taps in order: the
   general case. */
static void mirror__maxpool_row(float *MIRROR__RESTRICT y, int32_t *MIRROR__RESTRICT arg,
                                const float *MIRROR__RESTRICT x, size_t corner, size_t w, size_t k, size_t stride,
                                size_t wo)
{
    size_t ox, i, j;
    for (ox = 0; ox < wo; ox++) {
        size_t c = corner + ox * stride;
        float top = x[c];
        int32_t at = (int32_t)c;
        for (i = 0; i < k; i++)
            for (j = 0; j < k; j++) mirror_hd_max_tap(x[c + i * w + j], (int32_t)(c + i * w + j), &top, &at);
        y[ox] = top, arg[ox] = at;
    }
}

#if MIRROR__AVX512
/* mirror_hd_max_tap for 16 windows at once, lane by lane. */
static MIRROR__INLINE void mirror__max_tap16(__m512 v, int32_t o, __m512 *top, __m512i *at)
{
    __mmask16 larger = _mm512_cmp_ps_mask(v, *top, _CMP_GT_OQ); /* v > top: false where either is NaN */
    *top = _mm512_mask_mov_ps(*top, larger, v);
    *at = _mm512_mask_mov_epi32(*at, larger, _mm512_set1_epi32(o));
}

/* Max pooling of 2x2 windows at stride 2 with AVX-512, the common case: up
   to 16 windows of a pair of rows at a time. Each row's 32 values split
   into its even and odd columns (a permute of two vectors each), so that
   lane l holds the four values of window l, taken in mirror_hd_max_tap's
   order; loads and stores past the row's last window are masked off.
   Returns whether a window held a NaN (mirror__maxpool_nan's to take). */
static int mirror__maxpool_2x2(float *y, int32_t *arg, const float *x, size_t planes, size_t h, size_t w, size_t ho,
                               size_t wo)
{
    __mmask16 nan = 0;
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    size_t p, oy, ox;
    for (p = 0; p < planes; p++, x += h * w)
        for (oy = 0; oy < ho; oy++, y += wo, arg += wo)
            for (ox = 0; ox < wo; ox += 16) {
                size_t n = MIRROR__MIN(16, wo - ox); /* windows: 2n values of each row */
                __mmask16 out = (__mmask16)((1u << n) - 1u), lo = (__mmask16)((1u << MIRROR__MIN(2 * n, 16)) - 1u);
                __mmask16 hi = (__mmask16)((1u << (2 * n - MIRROR__MIN(2 * n, 16))) - 1u);
                const float *r0 = x + 2 * oy * w + 2 * ox, *r1 = r0 + w;
                __m512 a0 = _mm512_maskz_loadu_ps(lo, r0), a1 = _mm512_maskz_loadu_ps(hi, r0 + 16);
                __m512 b0 = _mm512_maskz_loadu_ps(lo, r1), b1 = _mm512_maskz_loadu_ps(hi, r1 + 16);
                __m512 top = _mm512_permutex2var_ps(a0, even, a1);
                __m512i at = _mm512_setzero_si512();
                nan |= _mm512_cmp_ps_mask(a0, a1, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b0, b1, _CMP_UNORD_Q);
                mirror__max_tap16(_mm512_permutex2var_ps(a0, odd, a1), 1, &top, &at);
                mirror__max_tap16(_mm512_permutex2var_ps(b0, even, b1), (int32_t)w, &top, &at);
                mirror__max_tap16(_mm512_permutex2var_ps(b0, odd, b1), (int32_t)w + 1, &top, &at);
                _mm512_mask_storeu_ps(y + ox, out, top);
                at = _mm512_add_epi32(at, _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * oy * w + 2 * ox)), even));
                _mm512_mask_storeu_epi32(arg + ox, out, at);
            }
    return nan != 0;
}
#elif MIRROR__VL > 1
/* mirror_hd_max_tap for VL windows at once, lane by lane: the select is
   made of masks, so that no compiler can turn it into a branch. */
static void mirror__vmax_tap(mirror__vec v, int32_t o, mirror__vec *top, mirror__ivec *at)
{
    mirror__ivec larger = (mirror__ivec)(v > *top);
    *top = (mirror__vec)(((mirror__ivec)v & larger) | ((mirror__ivec)*top & ~larger));
    *at = (o & larger) | (*at & ~larger);
}

/* The 2x2 windows whose corners are b[0], ..., b[len - 1] (len >= VL),
   VL corners at a time: four contiguous loads, b[q], b[q + 1], b[q + w]
   and b[q + w + 1]. The last vector overlaps the one before rather than
   leave a scalar tail. */
static void mirror__pool_corners(float *top, int32_t *at, const float *b, size_t w, size_t len)
{
    size_t q, last = len - MIRROR__VL;
    for (q = 0; q < len; q = q < last && q + MIRROR__VL > last ? last : q + MIRROR__VL) {
        mirror__vec t = mirror__vload(b + q);
        mirror__ivec o = {0};
        mirror__vmax_tap(mirror__vload(b + q + 1), 1, &t, &o);
        mirror__vmax_tap(mirror__vload(b + q + w), (int32_t)w, &t, &o);
        mirror__vmax_tap(mirror__vload(b + q + w + 1), (int32_t)w + 1, &t, &o);
        mirror__vstore(top + q, t);
        memcpy(at + q, &o, sizeof o);
    }
}

/* Max pooling of 2x2 windows at stride 2, the common case, whose rows of
   7 or 14 outputs are too short for vectors: the window at every corner
   of a pair of rows is taken, and those at the even columns picked out.
   Where a pair of rows has fewer corners than a vector, a band of pairs
   is taken as one run of corners (the odd rows' are dropped too). */
#define MIRROR__POOL_BAND 1024
static void mirror__maxpool_2x2(float *y, int32_t *arg, const float *x, size_t planes, size_t h, size_t w, size_t ho,
                                size_t wo)
{
    float top[MIRROR__POOL_BAND];
    int32_t at[MIRROR__POOL_BAND];
    size_t p, oy0, rows, r, ox, band = 2 * wo - 1 >= MIRROR__VL ? 1 : MIRROR__POOL_BAND / (2 * w);
    for (p = 0; p < planes; p++, x += h * w)
        for (oy0 = 0; oy0 < ho; oy0 += rows) {
            size_t len;
            rows = MIRROR__MIN(ho - oy0, band);
            len = (rows - 1) * 2 * w + 2 * wo - 1; /* up to the corner of the last window */
            if (len < MIRROR__VL) {
                for (r = 0; r < rows; r++, y += wo, arg += wo)
                    mirror__maxpool_row(y, arg, x, (oy0 + r) * 2 * w, w, 2, 2, wo);
                continue;
            }
            mirror__pool_corners(top, at, x + oy0 * 2 * w, w, len);
            for (r = 0; r < rows; r++, y += wo, arg += wo)
                for (ox = 0; ox < wo; ox++) {
                    size_t c = r * 2 * w + 2 * ox;
                    y[ox] = top[c], arg[ox] = (int32_t)(oy0 * 2 * w + c) + at[c];
                }
        }
}
#endif

/* Whether x[0..n) holds a NaN: the largest magnitude's bits, a reduction
   both compilers vectorise (an OR of per-element tests, gcc does not). */
static int mirror__any_nan(const float *x, size_t n)
{
    uint32_t top = 0;
    size_t i;
    MIRROR__EACH(i, n, top = MIRROR__MAX(top, mirror_hd_bits(x[i]) & 0x7fffffffu));
    return mirror_hd_isnan(mirror_hd_float(top));
}

static void mirror__f32_maxpool_forward(void *dev, float *y, int32_t *arg, const float *x,
                                        size_t planes, size_t h, size_t w, size_t k, size_t stride,
                                        size_t ho, size_t wo)
{
    size_t p, oy;
    float *y0 = y;
    int32_t *arg0 = arg;
    const float *x0 = x;
    int nan = -1; /* whether a window holds a NaN; -1: not known */
    (void)dev;
#if MIRROR__AVX512
    if (k == 2 && stride == 2)
        nan = mirror__maxpool_2x2(y, arg, x, planes, h, w, ho, wo);
    else
#elif MIRROR__VL > 1
    if (k == 2 && stride == 2 && 2 * w <= MIRROR__POOL_BAND)
        mirror__maxpool_2x2(y, arg, x, planes, h, w, ho, wo);
    else
#endif
        for (p = 0; p < planes; p++, x += h * w)
            for (oy = 0; oy < ho; oy++, y += wo, arg += wo)
                mirror__maxpool_row(y, arg, x, oy * stride * w, w, k, stride, wo);
    if (nan < 0 ? mirror__any_nan(x0, planes * h * w) : nan)
        mirror__maxpool_nan(y0, arg0, x0, planes, h, w, k, stride, ho, wo);
}

/* Each pixel takes one window's term at most: 0 + dy where it is the
   window's maximum, 0 elsewhere, then the relu's gradient, as the two
   passes give it. The relu's output at the maximum is the window's
   output, y: the gradients are taken along y and dy, in vectors (a
   scalar select branches, and mispredicts), then scattered. */
static void mirror__f32_maxpool_relu_backward(void *dev, float *dx, const int32_t *arg, const float *dy,
                                              const float *y, size_t planes, size_t h, size_t w, size_t ho, size_t wo)
{
    float g[256];
    size_t p, i, at, n;
    (void)dev;
    memset(dx, 0, planes * h * w * sizeof(float));
    for (p = 0; p < planes; p++, dx += h * w)
        for (at = 0; at < ho * wo; at += n, arg += n, dy += n, y += n) {
            n = MIRROR__MIN(ho * wo - at, sizeof g / sizeof *g);
            MIRROR__EACH(i, n, g[i] = mirror_hd_relu_grad(y[i], 0.0f + dy[i]));
            for (i = 0; i < n; i++) dx[arg[i]] = g[i];
        }
}

static void mirror__f32_maxpool_backward(void *dev, float *dx, const int32_t *arg, const float *dy,
                                         size_t planes, size_t h, size_t w, size_t k, size_t stride,
                                         size_t ho, size_t wo)
{
    size_t p, i;
    (void)dev, (void)k, (void)stride;
    memset(dx, 0, planes * h * w * sizeof(float));
    for (p = 0; p < planes; p++, dx += h * w)
        for (i = 0; i < ho * wo; i++) dx[*arg++] += *dy++;
}

static void mirror__f32_dropout(void *dev, float *y, const float *x, size_t rows, size_t inner, uint64_t seed,
                                uint64_t layer, const mirror__tick *t, float p)
{
    uint64_t key = mirror_hd_dropout_key(seed, layer, t->step), row0 = t->row0;
    size_t r, e;
    (void)dev;
    for (r = 0; r < rows; r++, x += inner, y += inner)
        for (e = 0; e < inner; e++) y[e] = x[e] * mirror_hd_dropout(key, row0 + r, e, p);
}

static void mirror__cpu_set(void *dev, void *p, const void *value, size_t n)
{
    (void)dev;
    memcpy(p, value, n);
}

static void mirror__f32_avgpool_forward(void *dev, float *y, const float *x, size_t planes, size_t h, size_t w,
                                        size_t kh, size_t kw, size_t stride, size_t ho, size_t wo)
{
    size_t p, i, j;
    (void)dev;
    for (p = 0; p < planes; p++, x += h * w)
        for (i = 0; i < ho; i++)
            for (j = 0; j < wo; j++) *y++ = mirror_hd_window_mean(x, w, kh, kw, i * stride, j * stride, 0);
}

static void mirror__f32_avgpool_backward(void *dev, float *dx, const float *dy, size_t planes, size_t h, size_t w,
                                         size_t kh, size_t kw, size_t stride, size_t ho, size_t wo)
{
    size_t p, i, j;
    (void)dev;
    for (p = 0; p < planes; p++, dy += ho * wo)
        for (i = 0; i < h; i++)
            for (j = 0; j < w; j++) *dx++ = mirror_hd_window_mean_grad(dy, ho, wo, kh, kw, stride, i, j, 0);
}

/* The sums of a and (backward) of a xhat; forward, a second pass for the
   M2 about the means the first gives. */
static void mirror__f32_bn_sums(void *dev, double *part, const float *a, const float *x, const float *stat,
                                size_t rows, size_t channels, size_t inner)
{
    size_t r, c, i, C = channels;
    double n = (double)rows * (double)inner;
    const float *p;
    (void)dev;
    memset(part, 0, 2 * C * sizeof(double));
    for (r = 0, p = a; r < rows; r++)
        for (c = 0; c < C; c++, p += inner) {
            double s = 0.0, q = 0.0;
            for (i = 0; i < inner; i++) {
                s += (double)p[i];
                if (x) q += (double)(p[i] * mirror_hd_bn_xhat(x[i], stat[c], stat[C + c]));
            }
            part[c] += s, part[C + c] += q;
            if (x) x += inner;
        }
    for (r = 0, p = a; !x && r < rows; r++)
        for (c = 0; c < C; c++, p += inner) {
            double q = 0.0, mean = part[c] / n;
            for (i = 0; i < inner; i++) q += mirror_hd_bn_dev2(p[i], mean);
            part[C + c] += q;
        }
}

static void mirror__f32_bn_forward(void *dev, float *y, const float *x, const float *stat, const float *gamma,
                                   const float *beta, size_t rows, size_t channels, size_t inner)
{
    size_t r, c, i, C = channels;
    (void)dev;
    for (r = 0; r < rows; r++)
        for (c = 0; c < C; c++, x += inner, y += inner)
            for (i = 0; i < inner; i++) y[i] = mirror_hd_bn(x[i], stat[c], stat[C + c], gamma[c], beta[c]);
}

static void mirror__f32_bn_backward(void *dev, float *dx, float *dgamma, float *dbeta, const float *dy,
                                    const float *x, const float *stat, const float *means, const double *part,
                                    const float *gamma, size_t rows, size_t channels, size_t inner)
{
    size_t r, c, i, C = channels;
    (void)dev;
    for (c = 0; c < C; c++) dgamma[c] += (float)part[C + c], dbeta[c] += (float)part[c];
    for (r = 0; dx && r < rows; r++)
        for (c = 0; c < C; c++, x += inner, dy += inner, dx += inner)
            for (i = 0; i < inner; i++)
                dx[i] = mirror_hd_bn_grad(dy[i], mirror_hd_bn_xhat(x[i], stat[c], stat[C + c]), gamma[c], stat[C + c],
                                          means[c], means[C + c]);
}

static void mirror__f32_add(void *dev, float *y, const float *a, const float *b, size_t n)
{
    size_t i;
    (void)dev;
    if (!b) {
        if (y != a) memcpy(y, a, n * sizeof(float));
        return;
    }
    for (i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void mirror__f32_softmax_ce(void *dev, float *dz, float *loss, int32_t *correct,
                                   const float *z, const int32_t *labels, size_t rows, size_t k,
                                   float inv_count, const float *scale)
{
    size_t r;
    (void)dev;
    if (scale) inv_count *= *scale;
    for (r = 0; r < rows; r++) {
        int ok;
        loss[r] = mirror_hd_softmax_ce_row(z + r * k, k, labels[r], inv_count, dz + r * k, &ok, 0);
        correct[r] = ok;
    }
}

static void mirror__f32_mse(void *dev, float *dz, float *loss, const float *z, const float *t,
                            size_t rows, size_t d, float inv_count, const float *scale)
{
    size_t r;
    (void)dev;
    if (scale) inv_count *= *scale;
    for (r = 0; r < rows; r++)
        loss[r] = mirror_hd_mse_row(z + r * d, t + r * d, d, inv_count, dz + r * d, 0);
}

/* 16-bit storage (mixed precision): a model's activations and the weights
   the layers read are 16-bit values (set_storage). The CPU backend runs
   each op as the fp32 loop above on its operands widened into fp32
   scratch, and narrows what it writes (mirror_hd_narrow, the rounding of
   a GPU kernel's store): the bits a GPU kernel that reads and writes 16
   bits computes in fp32 in between. In fp32 (or with no dev, as the tests
   call the loops) the pointers pass through. */
/* n values converted, one loop per format so that each vectorises. */
static void mirror__widen_run(float *dst, const uint16_t *src, size_t n, int format)
{
    size_t i;
    if (format == MIRROR_PRECISION_BF16)
        for (i = 0; i < n; i++) dst[i] = mirror_hd_f32_from_bf16(src[i]);
    else
        for (i = 0; i < n; i++) dst[i] = mirror_hd_f32_from_f16(src[i]);
}

static void mirror__narrow_run(uint16_t *dst, const float *src, size_t n, int format)
{
    size_t i;
    if (format == MIRROR_PRECISION_BF16)
        for (i = 0; i < n; i++) dst[i] = mirror_hd_bf16_from_f32(src[i]);
    else
        for (i = 0; i < n; i++) dst[i] = mirror_hd_f16_from_f32(src[i]);
}

/* Rows x cols values, rows ld apart, at p: widened into scratch `slot`
   (fp32: p itself). */
static float *mirror__cpu_in(mirror__cpu_dev *d, int slot, const void *p, size_t rows, size_t cols, size_t ld)
{
    size_t r;
    if (!d || !d->format || !p) return (float *)(uintptr_t)p;
    if (ld == cols) cols *= rows, rows = 1;
    for (r = 0; r < rows; r++) mirror__widen_run(d->wide[slot] + r * ld, (const uint16_t *)p + r * ld, cols, d->format);
    return d->wide[slot];
}

/* Where an op writes what lands at p: scratch `slot` (fp32: p itself). */
static float *mirror__cpu_out(mirror__cpu_dev *d, int slot, void *p)
{
    return d && d->format && p ? d->wide[slot] : (float *)p;
}

/* What the op wrote at v, narrowed into p (fp32: nothing to do). */
static void mirror__cpu_put(mirror__cpu_dev *d, void *p, const float *v, size_t rows, size_t cols, size_t ld)
{
    size_t r;
    if (!d || !d->format || !p) return;
    if (ld == cols) cols *= rows, rows = 1;
    for (r = 0; r < rows; r++) mirror__narrow_run((uint16_t *)p + r * ld, v + r * ld, cols, d->format);
}

/* n contiguous values: the same three. */
static float *mirror__cpu_in1(mirror__cpu_dev *d, int slot, const void *p, size_t n)
{
    return mirror__cpu_in(d, slot, p, 1, n, n);
}

static void mirror__cpu_put1(mirror__cpu_dev *d, void *p, const float *v, size_t n) { mirror__cpu_put(d, p, v, 1, n, n); }

/* Rows of op(X) (r x c) as stored: r x c, or c x r when transposed. */
static size_t mirror__stored_rows(int t, size_t r, size_t c) { return t ? c : r; }

/* Whether this GEMM takes its bf16 operands as they are (mirror__gemm_bf16):
   bf16 storage, a CPU with vdpbf16ps, something to multiply. Else they
   are widened to fp32 first. */
static int mirror__cpu_dpbf16(const mirror__cpu_dev *d, size_t k, float alpha)
{
#if MIRROR__DPBF16 && !defined(MIRROR_CBLAS)
    return MIRROR__BF16_FITS && d->format == MIRROR_PRECISION_BF16 && k > 0 && alpha != 0.0f;
#else
    (void)d, (void)k, (void)alpha;
    return 0;
#endif
}

static void mirror__cpu_gemm(void *dev, int ta, int tb, size_t m, size_t n, size_t k, float alpha, const void *a,
                             size_t lda, const void *b, size_t ldb, float beta, void *c, size_t ldc, int grad)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    int dp = mirror__cpu_dpbf16(d, k, alpha);
    const float *fa, *fb;
    float *fc;
#if MIRROR__DPBF16 && !defined(MIRROR_CBLAS)
    if (dp && !grad && beta == 0.0f && k <= MIRROR_GEMM_KC) { /* C stored as the tiles finish */
        mirror__gemm_bf16(ta, tb, m, n, k, alpha, (const uint16_t *)a, lda, (const uint16_t *)b, ldb, 0.0f, NULL,
                          (uint16_t *)c, ldc, d->gemm_ws, NULL);
        return;
    }
#endif
    fa = dp ? NULL : mirror__cpu_in(d, 0, a, mirror__stored_rows(ta, m, k), ta ? m : k, lda);
    fb = dp ? NULL : mirror__cpu_in(d, 1, b, mirror__stored_rows(tb, k, n), tb ? k : n, ldb);
    /* C: an fp32 weight gradient (grad) as it is, else 16-bit storage widened */
    fc = grad ? (float *)c : beta == 0.0f ? mirror__cpu_out(d, 2, c) : mirror__cpu_in(d, 2, c, m, n, ldc);
#if MIRROR__DPBF16 && !defined(MIRROR_CBLAS)
    if (dp)
        mirror__gemm_bf16(ta, tb, m, n, k, alpha, (const uint16_t *)a, lda, (const uint16_t *)b, ldb, beta, fc, NULL,
                          ldc, d->gemm_ws, NULL);
    else
#endif
        mirror__f32_gemm(dev, ta, tb, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc);
    if (!grad) mirror__cpu_put(d, c, fc, m, n, ldc);
}

static void mirror__cpu_gemm_bias(void *dev, int ta, int tb, size_t m, size_t n, size_t k, const void *a, size_t lda,
                                  const void *b, size_t ldb, const void *bias, int per_row, int relu, void *c,
                                  size_t ldc)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fc = mirror__cpu_out(d, 3, c);
    const float *fbias = mirror__cpu_in1(d, 2, bias, per_row ? m : n);
#if MIRROR__DPBF16 && !defined(MIRROR_CBLAS)
    if (mirror__cpu_dpbf16(d, k, 1.0f)) {
        mirror__epilogue ep;
        int whole = k <= MIRROR_GEMM_KC; /* one block of depth: C stored as the tiles finish */
        ep.bias = fbias, ep.rs = per_row ? 1 : 0, ep.cs = per_row ? 0 : 1, ep.relu = relu;
        mirror__gemm_bf16(ta, tb, m, n, k, 1.0f, (const uint16_t *)a, lda, (const uint16_t *)b, ldb, 0.0f,
                          whole ? NULL : fc, whole ? (uint16_t *)c : NULL, ldc, d->gemm_ws, &ep);
        if (!whole) mirror__cpu_put(d, c, fc, m, n, ldc);
        return;
    }
#endif
    mirror__f32_gemm_bias(dev, ta, tb, m, n, k, mirror__cpu_in(d, 0, a, mirror__stored_rows(ta, m, k), ta ? m : k, lda),
                          lda, mirror__cpu_in(d, 1, b, mirror__stored_rows(tb, k, n), tb ? k : n, ldb), ldb, fbias,
                          per_row, relu, fc, ldc);
    mirror__cpu_put(d, c, fc, m, n, ldc);
}

static void mirror__cpu_bias_add(void *dev, void *y, const void *bias, size_t rows, size_t channels, size_t inner)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    size_t n = rows * channels * inner;
    float *fy = mirror__cpu_in1(d, 0, y, n);
    mirror__f32_bias_add(dev, fy, mirror__cpu_in1(d, 1, bias, channels), rows, channels, inner);
    mirror__cpu_put1(d, y, fy, n);
}

static void mirror__cpu_bias_grad(void *dev, float *db, const void *dy, size_t rows, size_t channels, size_t inner)
{
    mirror__f32_bias_grad(dev, db, mirror__cpu_in1((mirror__cpu_dev *)dev, 0, dy, rows * channels * inner), rows,
                          channels, inner);
}

static void mirror__cpu_relu_forward(void *dev, void *y, const void *x, size_t n)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fy = mirror__cpu_out(d, 0, y);
    mirror__f32_relu_forward(dev, fy, mirror__cpu_in1(d, 1, x, n), n);
    mirror__cpu_put1(d, y, fy, n);
}

static void mirror__cpu_relu_backward(void *dev, void *dd, const void *y, size_t n)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fd = mirror__cpu_in1(d, 0, dd, n);
    mirror__f32_relu_backward(dev, fd, mirror__cpu_in1(d, 1, y, n), n);
    mirror__cpu_put1(d, dd, fd, n);
}

static void mirror__cpu_act_forward(void *dev, int kind, void *y, const void *x, size_t n)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fy = mirror__cpu_out(d, 0, y);
    mirror__f32_act_forward(dev, kind, fy, mirror__cpu_in1(d, 1, x, n), n);
    mirror__cpu_put1(d, y, fy, n);
}

static void mirror__cpu_act_backward(void *dev, int kind, void *dd, const void *x, const void *y, size_t n)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fd = mirror__cpu_in1(d, 0, dd, n);
    mirror__f32_act_backward(dev, kind, fd, mirror__cpu_in1(d, 1, x, n), mirror__cpu_in1(d, 2, y, n), n);
    mirror__cpu_put1(d, dd, fd, n);
}

/* Moves values: 16-bit ones as they are. */
static void mirror__cpu_im2col(void *dev, void *col, const void *x, size_t n, size_t c, size_t h, size_t w, size_t k,
                               size_t stride, size_t pad, size_t ho, size_t wo)
{
    size_t e = dev && ((mirror__cpu_dev *)dev)->format ? sizeof(uint16_t) : sizeof(float);
    mirror__im2col((unsigned char *)col, (const unsigned char *)x, e, n, c, h, w, k, stride, pad, ho, wo);
}

static void mirror__cpu_col2im(void *dev, void *x, const void *col, size_t n, size_t c, size_t h, size_t w, size_t k,
                               size_t stride, size_t pad, size_t ho, size_t wo)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fx = mirror__cpu_out(d, 0, x);
    mirror__f32_col2im(dev, fx, mirror__cpu_in1(d, 1, col, c * k * k * n * ho * wo), n, c, h, w, k, stride, pad, ho,
                       wo);
    mirror__cpu_put1(d, x, fx, n * c * h * w);
}

/* Moves values: 16-bit ones as they are. */
static void mirror__cpu_permute(void *dev, void *dst, const void *src, size_t a, size_t b, size_t inner)
{
    size_t i, j, e = dev && ((mirror__cpu_dev *)dev)->format ? 2 : 4, row = inner * e;
    for (i = 0; i < a; i++)
        for (j = 0; j < b; j++) memcpy((char *)dst + (j * a + i) * row, (const char *)src + (i * b + j) * row, row);
}

static void mirror__cpu_maxpool_forward(void *dev, void *y, int32_t *arg, const void *x, size_t planes, size_t h,
                                        size_t w, size_t k, size_t stride, size_t ho, size_t wo)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fy = mirror__cpu_out(d, 0, y);
    mirror__f32_maxpool_forward(dev, fy, arg, mirror__cpu_in1(d, 1, x, planes * h * w), planes, h, w, k, stride, ho,
                                wo);
    mirror__cpu_put1(d, y, fy, planes * ho * wo);
}

/* mirror__f32_maxpool_relu_backward into 16-bit dx (format f): each term
   narrowed, then scattered as it is; the zeros need no rounding. The bits
   of the fp32 pass narrowed whole, for a quarter of its conversions. */
static void mirror__maxpool_relu_backward16(uint16_t *dx, const int32_t *arg, const float *dy, const float *y,
                                            size_t planes, size_t h, size_t w, size_t ho, size_t wo, int f)
{
    float g[256];
    uint16_t g16[256];
    size_t p, i, at, n;
    memset(dx, 0, planes * h * w * sizeof(uint16_t));
    for (p = 0; p < planes; p++, dx += h * w)
        for (at = 0; at < ho * wo; at += n, arg += n, dy += n, y += n) {
            n = MIRROR__MIN(ho * wo - at, sizeof g / sizeof *g);
            MIRROR__EACH(i, n, g[i] = mirror_hd_relu_grad(y[i], 0.0f + dy[i]));
            mirror__narrow_run(g16, g, n, f);
            for (i = 0; i < n; i++) dx[arg[i]] = g16[i];
        }
}

static void mirror__cpu_maxpool_relu_backward(void *dev, void *dx, const int32_t *arg, const void *dy, const void *y,
                                              size_t planes, size_t h, size_t w, size_t ho, size_t wo)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    const float *fdy = mirror__cpu_in1(d, 1, dy, planes * ho * wo), *fy = mirror__cpu_in1(d, 2, y, planes * ho * wo);
    if (d && d->format)
        mirror__maxpool_relu_backward16((uint16_t *)dx, arg, fdy, fy, planes, h, w, ho, wo, d->format);
    else
        mirror__f32_maxpool_relu_backward(dev, (float *)dx, arg, fdy, fy, planes, h, w, ho, wo);
}

static void mirror__cpu_maxpool_backward(void *dev, void *dx, const int32_t *arg, const void *dy, size_t planes,
                                         size_t h, size_t w, size_t k, size_t stride, size_t ho, size_t wo)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fdx = mirror__cpu_out(d, 0, dx);
    mirror__f32_maxpool_backward(dev, fdx, arg, mirror__cpu_in1(d, 1, dy, planes * ho * wo), planes, h, w, k, stride,
                                 ho, wo);
    mirror__cpu_put1(d, dx, fdx, planes * h * w);
}

static void mirror__cpu_dropout(void *dev, void *y, const void *x, size_t rows, size_t inner, uint64_t seed,
                                uint64_t layer, const mirror__tick *t, float p)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fy = mirror__cpu_out(d, 0, y);
    mirror__f32_dropout(dev, fy, mirror__cpu_in1(d, 1, x, rows * inner), rows, inner, seed, layer, t, p);
    mirror__cpu_put1(d, y, fy, rows * inner);
}

static void mirror__cpu_avgpool_forward(void *dev, void *y, const void *x, size_t planes, size_t h, size_t w, size_t kh,
                                        size_t kw, size_t stride, size_t ho, size_t wo)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fy = mirror__cpu_out(d, 0, y);
    mirror__f32_avgpool_forward(dev, fy, mirror__cpu_in1(d, 1, x, planes * h * w), planes, h, w, kh, kw, stride, ho,
                                wo);
    mirror__cpu_put1(d, y, fy, planes * ho * wo);
}

static void mirror__cpu_avgpool_backward(void *dev, void *dx, const void *dy, size_t planes, size_t h, size_t w,
                                         size_t kh, size_t kw, size_t stride, size_t ho, size_t wo)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fdx = mirror__cpu_out(d, 0, dx);
    mirror__f32_avgpool_backward(dev, fdx, mirror__cpu_in1(d, 1, dy, planes * ho * wo), planes, h, w, kh, kw, stride,
                                 ho, wo);
    mirror__cpu_put1(d, dx, fdx, planes * h * w);
}

static void mirror__cpu_bn_sums(void *dev, double *part, const void *a, const void *x, const float *stat, size_t rows,
                                size_t channels, size_t inner)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    size_t n = rows * channels * inner;
    mirror__f32_bn_sums(dev, part, mirror__cpu_in1(d, 0, a, n), mirror__cpu_in1(d, 1, x, n), stat, rows, channels,
                        inner);
}

static void mirror__cpu_bn_forward(void *dev, void *y, const void *x, const float *stat, const void *gamma,
                                   const void *beta, size_t rows, size_t channels, size_t inner)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    size_t n = rows * channels * inner;
    float *fy = mirror__cpu_out(d, 0, y);
    mirror__f32_bn_forward(dev, fy, mirror__cpu_in1(d, 1, x, n), stat, mirror__cpu_in1(d, 2, gamma, channels),
                           mirror__cpu_in1(d, 3, beta, channels), rows, channels, inner);
    mirror__cpu_put1(d, y, fy, n);
}

static void mirror__cpu_bn_backward(void *dev, void *dx, float *dgamma, float *dbeta, const void *dy, const void *x,
                                    const float *stat, const float *means, const double *part, const void *gamma,
                                    size_t rows, size_t channels, size_t inner)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    size_t n = rows * channels * inner;
    float *fdx = mirror__cpu_out(d, 0, dx);
    mirror__f32_bn_backward(dev, fdx, dgamma, dbeta, mirror__cpu_in1(d, 1, dy, n), mirror__cpu_in1(d, 2, x, n), stat,
                            means, part, mirror__cpu_in1(d, 3, gamma, channels), rows, channels, inner);
    mirror__cpu_put1(d, dx, fdx, n);
}

static void mirror__cpu_add(void *dev, void *y, const void *a, const void *b, size_t n)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fy = mirror__cpu_out(d, 0, y);
    mirror__f32_add(dev, fy, mirror__cpu_in1(d, 1, a, n), mirror__cpu_in1(d, 2, b, n), n);
    mirror__cpu_put1(d, y, fy, n);
}

static void mirror__cpu_softmax_ce(void *dev, void *dz, float *loss, int32_t *correct, const void *z,
                                   const int32_t *labels, size_t rows, size_t k, float inv_count, const float *scale)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fdz = mirror__cpu_out(d, 0, dz);
    mirror__f32_softmax_ce(dev, fdz, loss, correct, mirror__cpu_in1(d, 1, z, rows * k), labels, rows, k, inv_count,
                           scale);
    mirror__cpu_put1(d, dz, fdz, rows * k);
}

static void mirror__cpu_mse(void *dev, void *dz, float *loss, const void *z, const float *t, size_t rows, size_t n,
                            float inv_count, const float *scale)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *fdz = mirror__cpu_out(d, 0, dz);
    mirror__f32_mse(dev, fdz, loss, mirror__cpu_in1(d, 1, z, rows * n), t, rows, n, inv_count, scale);
    mirror__cpu_put1(d, dz, fdz, rows * n);
}

/* The sums of loss (and correct) over rows into out[0] (and out[1]), in
   the lanes' order (mirror_hd_lane_sums, then mirror_hd_tree_add). */
static void mirror__lanes_total(double *out, const float *loss, const int32_t *correct, size_t rows)
{
    double part[2 * MIRROR_HD_LANES], s[2];
    size_t j, half;
    for (j = 0; j < MIRROR_HD_LANES; j++) {
        mirror_hd_lane_sums(s, loss, correct, rows, j);
        part[j] = s[0], part[MIRROR_HD_LANES + j] = s[1];
    }
    for (half = MIRROR_HD_LANES / 2; half > 0; half /= 2)
        for (j = 0; j < half; j++) mirror_hd_tree_add(part, j, half);
    out[0] = part[0], out[1] = part[MIRROR_HD_LANES];
}

static void mirror__cpu_accumulate(void *dev, double *acc, const float *loss, const int32_t *correct,
                                   size_t rows)
{
    double total[2];
    (void)dev;
    mirror__lanes_total(total, loss, correct, rows);
    acc[0] += total[0];
    if (correct) acc[1] += total[1];
}

/* The sum of !finite over g, folded with AND so that the loop vectorises. */
static int mirror__all_finite(const float *g, size_t n)
{
    size_t i;
    int finite = 1;
    MIRROR__EACH(i, n, finite &= mirror_hd_finite(g[i]));
    return finite;
}

static void mirror__cpu_check32(void *dev, mirror_loss_scale_state *st, const float *g, size_t n,
                                const mirror__tick *t)
{
    (void)dev;
    mirror_hd_guard(st, mirror__all_finite(g, n), t->step);
}

/* The squares of g[begin, end) (or of g16 unscaled) in 8 float lanes,
   which vectorise, added into a double at the end. */
static double mirror__sum_squares(const float *g, const uint16_t *g16, size_t begin, size_t end, int format,
                                  float inv_scale)
{
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    double sum = 0.0;
    size_t i, j;
    for (i = begin; i + 8 <= end; i += 8)
        for (j = 0; j < 8; j++) {
            float x = g ? g[i + j] : mirror_hd_unscale(g16[i + j], format, inv_scale);
            lane[j] += x * x;
        }
    for (; i < end; i++) {
        float x = g ? g[i] : mirror_hd_unscale(g16[i], format, inv_scale);
        lane[0] += x * x;
    }
    for (j = 0; j < 8; j++) sum += lane[j];
    return sum;
}

/* The sum of squares of n values of g (or of g16 unscaled), block by
   block (the update sharded across processes adds the same blocks' sums). */
static double mirror__cpu_squares(const float *g, const uint16_t *g16, size_t n, int format, float inv_scale)
{
    double sum = 0.0;
    size_t i;
    for (i = 0; i < n; i += MIRROR__NORM_BLOCK)
        sum += mirror__sum_squares(g, g16, i, MIRROR__MIN(n, i + MIRROR__NORM_BLOCK), format, inv_scale);
    return sum;
}

static void mirror__cpu_clip(void *dev, mirror_loss_scale_state *st, const float *g, const uint16_t *g16, size_t n,
                             int format, float max_norm)
{
    (void)dev;
    st->grad_norm = (float)sqrt(mirror__cpu_squares(g, g16, n, format, 1.0f / st->scale));
    st->clip = mirror_hd_clip_factor(st->grad_norm, max_norm);
}

static int mirror__half_finite(const uint16_t *g, size_t n, int format, float inv_scale)
{
    size_t i;
    int finite = 1;
    for (i = 0; i < n; i++) finite &= mirror_hd_finite(mirror_hd_unscale(g[i], format, inv_scale));
    return finite;
}

static void mirror__cpu_slice_stats(void *dev, float *out, const float *g, const uint16_t *g16, size_t n, int format,
                                    const mirror_loss_scale_state *st, int squares)
{
    float inv_scale = 1.0f / st->scale;
    (void)dev;
    out[0] = (g ? mirror__all_finite(g, n) : mirror__half_finite(g16, n, format, inv_scale)) ? 0.0f : 1.0f;
    out[1] = squares ? (float)mirror__cpu_squares(g, g16, n, format, inv_scale) : 0.0f;
}

static void mirror__cpu_slice_verdict(void *dev, mirror_loss_scale_state *st, const float *sums,
                                      const mirror__tick *t, int format, float max_norm)
{
    (void)dev;
    mirror_hd_slice_verdict(st, sums, t->step, format, max_norm);
}

static void mirror__cpu_sgd(void *dev, float *MIRROR__RESTRICT w, float *MIRROR__RESTRICT v,
                            const float *MIRROR__RESTRICT g, size_t n, const mirror_loss_scale_state *guard,
                            const mirror__tick *t, float momentum, float weight_decay, int nesterov)
{
    size_t i;
    float unused = 0.0f, c = mirror_hd_clip_of(guard), lr = t->lr;
    (void)dev;
    if (guard->found_nonfinite) return;
    if (v)
        MIRROR__EACH(i, n, mirror_hd_sgd(&w[i], &v[i], g[i] * c, lr, momentum, weight_decay, nesterov));
    else
        MIRROR__EACH(i, n, mirror_hd_sgd(&w[i], &unused, g[i] * c, lr, momentum, weight_decay, nesterov));
}

static void mirror__cpu_adam(void *dev, float *MIRROR__RESTRICT w, float *MIRROR__RESTRICT avg,
                             float *MIRROR__RESTRICT avg_sq, const float *MIRROR__RESTRICT g, size_t n,
                             const mirror_loss_scale_state *guard, const mirror__tick *t, float beta1, float beta2,
                             float eps, float weight_decay, int decoupled)
{
    size_t i;
    float c = mirror_hd_clip_of(guard), lr = t->lr, bc1 = t->bc1, bc2_sqrt = t->bc2_sqrt;
    (void)dev;
    if (guard->found_nonfinite) return;
    MIRROR__EACH(i, n, mirror_hd_adam(&w[i], &avg[i], &avg_sq[i], g[i] * c, lr, beta1, beta2, eps, weight_decay,
                                      decoupled, bc1, bc2_sqrt));
}

/* A later call for more values than the scratch holds makes it anew (the
   ops widen `largest` values into it); out of memory leaves the device as
   it was. */
static int mirror__cpu_set_precision(void *dev, int precision, size_t largest)
{
    mirror__cpu_dev *d = (mirror__cpu_dev *)dev;
    float *wide[MIRROR__CPU_SCRATCH] = {NULL};
    int i, ok = 1;
    largest = largest ? largest : 1;
    if (precision && largest > d->wide_n) {
        for (i = 0; i < MIRROR__CPU_SCRATCH && ok; i++)
            ok = (wide[i] = (float *)mirror__alloc(largest, sizeof(float))) != NULL;
        for (i = 0; i < MIRROR__CPU_SCRATCH; i++) {
            MIRROR_FREE(ok ? d->wide[i] : wide[i]);
            if (ok) d->wide[i] = wide[i];
        }
        if (!ok) return MIRROR_ERR_NO_MEMORY;
        d->wide_n = largest;
    }
    d->format = precision;
    return MIRROR_OK;
}

static void mirror__cpu_narrow(void *dev, uint16_t *dst, const float *src, size_t n, int format)
{
    (void)dev;
    mirror__narrow_run(dst, src, n, format);
}

static void mirror__cpu_widen(void *dev, float *dst, const uint16_t *src, size_t n, int format)
{
    (void)dev;
    mirror__widen_run(dst, src, n, format);
}

static void mirror__cpu_check(void *dev, mirror_loss_scale_state *st, const uint16_t *g, size_t n, int format)
{
    (void)dev;
    if (!mirror__half_finite(g, n, format, 1.0f / st->scale)) st->found_nonfinite = 1;
}

static void mirror__cpu_sgd_mixed(void *dev, float *w, float *v, uint16_t *w16, const uint16_t *g, size_t n, int format, const mirror_loss_scale_state *st, const mirror__tick *t,
                                  float momentum, float weight_decay, int nesterov)
{
    size_t i;
    float unused = 0.0f, lr = t->lr, inv_scale = mirror_hd_clip_of(st) / st->scale; /* unscaled and clipped */
    (void)dev;
    if (st->found_nonfinite) return;
    for (i = 0; i < n; i++)
        mirror_hd_sgd_mixed(&w[i], v ? &v[i] : &unused, &w16[i], g[i], format, inv_scale, lr, momentum,
                            weight_decay, nesterov);
}

static void mirror__cpu_adam_mixed(void *dev, float *MIRROR__RESTRICT w, float *MIRROR__RESTRICT avg,
                                   float *MIRROR__RESTRICT avg_sq, uint16_t *MIRROR__RESTRICT w16,
                                   const uint16_t *MIRROR__RESTRICT g, size_t n, int format,
                                   const mirror_loss_scale_state *st,
                                   const mirror__tick *t, float beta1, float beta2, float eps, float weight_decay,
                                   int decoupled)
{
    size_t i;
    float bc1, bc2_sqrt, lr = t->lr, inv_scale = mirror_hd_clip_of(st) / st->scale; /* unscaled and clipped */
    (void)dev;
    if (st->found_nonfinite) return;
    mirror_hd_adam_bias(beta1, beta2, st->applied + 1, &bc1, &bc2_sqrt);
    MIRROR__EACH(i, n, mirror_hd_adam_mixed(&w[i], &avg[i], &avg_sq[i], &w16[i], g[i], format, inv_scale, lr, beta1,
                                            beta2, eps, weight_decay, decoupled, bc1, bc2_sqrt));
}

static void mirror__cpu_scaler_update(void *dev, mirror_loss_scale_state *st, const mirror_loss_scale_desc *d)
{
    (void)dev;
    mirror_hd_scaler_update(st, d);
}

/* The rows of data kept in memory that a shard takes: a row's draws once,
   then its pixels (the kernel draws per pixel: it has no row loop). */
static void mirror__cpu_gather(void *dev, void *dst, const void *src, const int64_t *index, size_t n, size_t width,
                               size_t size, uint64_t key, size_t pad, int flip, size_t h, size_t w)
{
    unsigned char *to = (unsigned char *)dst;
    size_t i, j, y, x, row = width * size;
    long dy, dx, at;
    int flipped;
    (void)dev;
    for (i = 0; i < n; i++, to += row) {
        const unsigned char *from = (const unsigned char *)src + (size_t)index[i] * row;
        if (!pad && !flip) {
            memcpy(to, from, row);
            continue;
        }
        mirror_hd_augment_draw(key, (uint64_t)index[i], pad, flip, &dy, &dx, &flipped);
        for (j = 0; j < width; j += h * w)
            for (y = 0; y < h; y++)
                for (x = 0; x < w; x++) {
                    unsigned char *e = to + (j + y * w + x) * size;
                    if ((at = mirror_hd_augment_source(h, w, y, x, dy, dx, flipped)) < 0)
                        memset(e, 0, size);
                    else
                        memcpy(e, from + (j + (size_t)at) * size, size);
                }
    }
}

#ifndef MIRROR_CPU_CONV_CHUNK
#define MIRROR_CPU_CONV_CHUNK 1
#endif
#ifndef MIRROR_CPU_KEEP_COLS
#define MIRROR_CPU_KEEP_COLS 0 /* one sample's columns stay in cache; a shard's would not */
#endif
#ifndef MIRROR_CPU_GROUP_BYTES
#define MIRROR_CPU_GROUP_BYTES 524288 /* a group's activations pass from layer to layer in a core's own cache */
#endif
#ifndef MIRROR_CPU_PARAM_ALIGN
#define MIRROR_CPU_PARAM_ALIGN 1
#endif
#ifndef MIRROR_CPU_SHARED_UPDATE
#define MIRROR_CPU_SHARED_UPDATE 1 /* 0: the sharded update goes through the reducer, as on GPUs */
#endif
#ifndef MIRROR_CPU_GRAPHS
#define MIRROR_CPU_GRAPHS 0 /* 1: CPU replicas emulate graphs (a replay queues the pass as at capture) */
#endif
#ifndef MIRROR_CPU_GEMM_ROWS_FREE
#ifdef MIRROR_CBLAS
#define MIRROR_CPU_GEMM_ROWS_FREE 0 /* a CBLAS may pick its kernels by shape */
#else
#define MIRROR_CPU_GEMM_ROWS_FREE 1
#endif
#endif

MIRROR__NAMED_BEGIN
static const mirror__backend mirror__cpu_backend = {
    .name = "cpu",
    .conv_chunk = MIRROR_CPU_CONV_CHUNK,
    .keep_cols = MIRROR_CPU_KEEP_COLS,
    .group_bytes = MIRROR_CPU_GROUP_BYTES,
    .param_align = MIRROR_CPU_PARAM_ALIGN,
    .gemm_rows_free = MIRROR_CPU_GEMM_ROWS_FREE,
    .open = mirror__cpu_open,
    .close = mirror__cpu_close,
    .bind = mirror__cpu_nothing,
    .status = mirror__cpu_status,
    .alloc = mirror__cpu_alloc,
    .release = mirror__cpu_release,
    .host_is_device = 1,
    .host_alloc = mirror__cpu_alloc,
    .host_release = mirror__cpu_release,
    .host_wait = mirror__cpu_nothing,
    .zero = mirror__cpu_zero,
    .upload = mirror__cpu_copy,
    .download = mirror__cpu_copy,
    .stage = mirror__cpu_slot,
    .upload_staged = mirror__cpu_copy,
    .staged = mirror__cpu_slot,
    .gemm = mirror__cpu_gemm,
    .gemm_bias = mirror__cpu_gemm_bias,
    .bias_add = mirror__cpu_bias_add,
    .bias_grad = mirror__cpu_bias_grad,
    .relu_forward = mirror__cpu_relu_forward,
    .relu_backward = mirror__cpu_relu_backward,
    .act_forward = mirror__cpu_act_forward,
    .act_backward = mirror__cpu_act_backward,
    .im2col = mirror__cpu_im2col,
    .col2im = mirror__cpu_col2im,
    .permute = mirror__cpu_permute,
    .maxpool_forward = mirror__cpu_maxpool_forward,
    .dropout = mirror__cpu_dropout,
    .set = mirror__cpu_set,
    .avgpool_forward = mirror__cpu_avgpool_forward,
    .avgpool_backward = mirror__cpu_avgpool_backward,
    .bn_sums = mirror__cpu_bn_sums,
    .bn_forward = mirror__cpu_bn_forward,
    .bn_backward = mirror__cpu_bn_backward,
    .add = mirror__cpu_add,
    .maxpool_backward = mirror__cpu_maxpool_backward,
    .softmax_ce = mirror__cpu_softmax_ce,
    .mse = mirror__cpu_mse,
    .accumulate = mirror__cpu_accumulate,
    .check32 = mirror__cpu_check32,
    .clip = mirror__cpu_clip,
    .slice_stats = mirror__cpu_slice_stats,
    .slice_verdict = mirror__cpu_slice_verdict,
    .sgd = mirror__cpu_sgd,
    .adam = mirror__cpu_adam,
    .set_precision = mirror__cpu_set_precision,
    .narrow = mirror__cpu_narrow,
    .widen = mirror__cpu_widen,
    .check = mirror__cpu_check,
    .sgd_mixed = mirror__cpu_sgd_mixed,
    .adam_mixed = mirror__cpu_adam_mixed,
    .scaler_update = mirror__cpu_scaler_update,
    .mark = mirror__cpu_mark,
    .marks = mirror__cpu_marks,
    .workspace = mirror__cpu_workspace,
    .maxpool_relu_backward = mirror__cpu_maxpool_relu_backward,
    .reduce_bucket = NULL, /* the CPU's update sums the gradient itself (mirror__sharded_host_update_job) */
    .buckets_done = NULL,
    .capture_begin = NULL, /* graphs: none (see mirror__graph_step for the emulation the tests build) */
    .capture_end = NULL,
    .graph_launch = NULL,
    .graph_free = NULL,
    .device_memory = NULL, /* the replicas' memory is the host's */
    .gemm_align = NULL,    /* the built-in GEMM's order is one for every address (a CBLAS is not told) */
    .gather = mirror__cpu_gather, /* for fit's data_on_device = MIRROR_DATA_ON: by default they gather in place */
};
MIRROR__NAMED_END

// >>layers ------------------------------------------------------------------
/* Forward and backward of one replica's shard of S samples: the helpers
   the layers share; the layer kinds, each in one place (its shape rule,
   description, parameters and passes), and their table mirror__kinds;
   then the passes through the model, which dispatch on it. Shapes are in
   the comments as [S, ...]; mirror__act(r, l) is layer l's output. */

/* ---- shapes ----*/

static size_t mirror__out_size(const mirror__layer *l) { return l->oc * l->oh * l->ow; }

/* Samples per convolution GEMM for this model: the backend's, at most a shard. */
static size_t mirror__conv_chunk(const mirror_model *m)
{
    /* deterministic mode: within a chunk, so that a chunk's sums are cut
       alike whatever the shard */
    size_t n = m->be->conv_chunk, cap = m->plan.chunk ? MIRROR__MIN(m->plan.chunk, m->shard_max) : m->shard_max;
    return n && n < cap ? n : MIRROR__MAX(cap, 1);
}

/* A residual block's projection as the convolution it is: the 1x1
   convolution from the block's input (layer l->from's) to l's output. */
static mirror__layer mirror__projection(const mirror_model *m, const mirror__layer *l)
{
    mirror__layer p = *l;
    const mirror__layer *in = &m->layers[l->from];
    p.kind = MIRROR__CONV2D;
    p.fused = 0; /* its output is added to, never a relu's */
    p.c = in->c, p.h = in->h, p.w = in->w;
    p.k = 1, p.pad = 0;
    return p;
}

/* The convolution a layer runs: conv2d's own, or a residual block's
   projection. */
static mirror__layer mirror__convolution(const mirror_model *m, const mirror__layer *l)
{
    return l->kind == MIRROR__CONV2D ? *l : mirror__projection(m, l);
}

/* Bytes of one storage value: 16 bits in mixed precision, else a float. */
static size_t mirror__esize(const mirror_model *m) { return m->format ? sizeof(uint16_t) : sizeof(float); }

/* Storage element i from p on. */
static void *mirror__el(const mirror_model *m, const void *p, size_t i)
{
    return (unsigned char *)(uintptr_t)p + i * mirror__esize(m);
}

/* A view of the model's input (a first flatten, say) has offset 0, where
   the first slot's input is carved: it reads the slot at hand. */
static void *mirror__act(const mirror__replica *r, const mirror__layer *l)
{
    return l->out_off ? (void *)(r->acts + l->out_off) : r->input;
}

static void *mirror__layer_input(const mirror_model *m, const mirror__replica *r, size_t i)
{
    return i ? mirror__act(r, &m->layers[i - 1]) : r->input;
}

/* Deterministic mode cuts a replica's shard into chunks of m->plan.chunk
   samples (the last may be short), each with a gradient arena of its own;
   otherwise the shard is one chunk, and its arena is r->grads. Chunk q is
   rows [*at, *at + the count returned) of the shard. */
static size_t mirror__nchunks(const mirror_model *m, const mirror__replica *r)
{
    return m->plan.chunk ? r->nchunks : 1;
}

static size_t mirror__chunk_rows(const mirror_model *m, const mirror__replica *r, size_t q, size_t *at)
{
    if (!m->plan.chunk) return *at = 0, r->count;
    *at = q * m->plan.chunk;
    return MIRROR__MIN(m->plan.chunk, r->count - *at);
}

/* Floats from one chunk's gradient arena to the next: the gradient's,
   rounded up to the backend's param_align, so that every chunk's arena,
   and each tensor in it, has the alignment of the first whatever the
   chunk's place. cuBLAS picks a weight gradient GEMM's kernel by the
   alignment of its C too: arenas back to back would put chunk 1's at 8
   bytes on one replica and at 256 on another replica count, which may
   pick a kernel that adds the products in another order. */
static size_t mirror__chunk_stride(const mirror_model *m)
{
    size_t a = m->be->param_align ? m->be->param_align : 1;
    return (m->nslots + a - 1) / a * a;
}

static float *mirror__chunk_grads(const mirror_model *m, const mirror__replica *r, size_t q)
{
    return m->plan.chunk ? r->chunk_grads + q * mirror__chunk_stride(m) : r->grads;
}

/* Global replica g's rows [*begin, *begin + *count) of a batch of n: an
   even share (mirror_shard), or in deterministic mode its share of whole
   chunks, [*chunk0, *chunk0 + *nchunks). */
static void mirror__rows_of(const mirror_model *m, size_t n, size_t g, size_t *begin, size_t *count, size_t *chunk0,
                            size_t *nchunks)
{
    size_t K = m->plan.chunk;
    if (!K) {
        mirror_shard(n, m->s->world, g, begin, count);
        *chunk0 = 0, *nchunks = 1;
        return;
    }
    mirror_shard((n + K - 1) / K, m->s->world, g, chunk0, nchunks);
    *begin = MIRROR__MIN(*chunk0 * K, n);
    *count = MIRROR__MIN((*chunk0 + *nchunks) * K, n) - *begin;
}

MIRROR_API int mirror_model_shard(const mirror_model *m, size_t n, size_t r, size_t *begin, size_t *count)
{
    size_t chunk0, nchunks;
    if (!m || !begin || !count)
        return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_model_shard: %s is NULL",
                             !m ? "the model" : "begin or count");
    if (r >= m->s->world)
        return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_model_shard: replica %zu of a strategy of %zu replicas",
                             r, m->s->world);
    mirror__rows_of(m, n, r, begin, count, &chunk0, &nchunks);
    return MIRROR_OK;
}

/* The im2col of the chunk of samples from s on: kept, or the shared buffer. */
static void *mirror__col(const mirror_model *m, const mirror__replica *r, const mirror__layer *l, size_t s)
{
    return m->pass.keep_cols ? mirror__el(m, r->acts + l->col_off, s * l->c * l->k * l->k * l->oh * l->ow) : r->col;
}

/* A convolution (conv2d, or a residual block's projection) of the shard's
   rows [s0, s0 + S), n at a time (conv_chunk; s0 a multiple of it): col
   [C*k*k, n*hw]; y' [OC, n*hw] = W [OC, C*k*k] . col + b (per channel, a
   row of y'; and the relu after it if fused), then y' to y [n, OC, hw]. x
   and y are the shard's. */
static void mirror__conv_forward(const mirror_model *m, mirror__replica *r, const mirror__layer *l, const void *x,
                                 void *y, size_t s0, size_t S)
{
    const mirror__backend *be = m->be;
    const void *W = mirror__el(m, r->weights, l->w_off), *b = mirror__el(m, r->weights, l->b_off);
    size_t s, chunk = mirror__conv_chunk(m), in = l->c * l->h * l->w, out = mirror__out_size(l),
              ckk = l->c * l->k * l->k, hw = l->oh * l->ow;
    for (s = s0; s < s0 + S; s += chunk) {
        size_t n = MIRROR__MIN(chunk, s0 + S - s);
        void *yn = n == 1 ? mirror__el(m, y, s * out) : r->perm, *col = mirror__col(m, r, l, s);
        be->im2col(r->dev, col, mirror__el(m, x, s * in), n, l->c, l->h, l->w, l->k, l->stride, l->pad, l->oh, l->ow);
        be->gemm_bias(r->dev, 0, 0, l->oc, n * hw, ckk, W, ckk, col, n * hw, b, 1, l->fused, yn, n * hw);
        if (n > 1) be->permute(r->dev, mirror__el(m, y, s * out), r->perm, l->oc, n, hw);
    }
}

/* Its backward over the same rows, n samples at a time: d' [OC, n*hw] is d
   [n, OC, hw] channels first; dW += d' . col^T [n*hw, C*k*k]; dcol
   [C*k*k, n*hw] = W^T . d', summed back into dx by col2im (dx NULL: not
   needed). x is the shard's, d and dx those rows' alone. beta 0 writes dW
   (the first chunk), 1 adds to it (accumulation, or rows after others).
   dW and db are in the gradient arena `grads`. */
static void mirror__conv_backward(const mirror_model *m, mirror__replica *r, const mirror__layer *l, const void *x,
                                  const void *d, void *dx, size_t s0, size_t S, int accumulate, float *grads)
{
    const mirror__backend *be = m->be;
    const void *W = mirror__el(m, r->weights, l->w_off);
    float *dW = grads + l->w_off, *db = grads + l->b_off;
    size_t s, chunk = mirror__conv_chunk(m), in = l->c * l->h * l->w, out = mirror__out_size(l),
              ckk = l->c * l->k * l->k, hw = l->oh * l->ow;
    if (!accumulate) be->zero(r->dev, db, l->n_b * sizeof(float));
    for (s = s0; s < s0 + S; s += chunk) {
        size_t n = MIRROR__MIN(chunk, s0 + S - s), nhw = n * hw;
        const void *dn = mirror__el(m, d, (s - s0) * out);
        void *col = mirror__col(m, r, l, s); /* kept: forward's; its last use, so dcol may overwrite it */
        be->bias_grad(r->dev, db, dn, n, l->oc, hw); /* chunk by chunk, the samples' sums in the same order */
        if (n > 1) {
            be->permute(r->dev, r->perm, dn, n, l->oc, hw);
            dn = r->perm;
        }
        if (!m->pass.keep_cols)
            be->im2col(r->dev, col, mirror__el(m, x, s * in), n, l->c, l->h, l->w, l->k, l->stride, l->pad, l->oh,
                       l->ow);
        be->gemm(r->dev, 0, 1, l->oc, ckk, nhw, 1.0f, dn, nhw, col, nhw, s > s0 || accumulate ? 1.0f : 0.0f, dW, ckk,
                 1);
        if (!dx) continue;
        be->gemm(r->dev, 1, 0, ckk, nhw, l->oc, 1.0f, W, ckk, dn, nhw, 0.0f, col, nhw, 0);
        be->col2im(r->dev, mirror__el(m, dx, (s - s0) * in), col, n, l->c, l->h, l->w, l->k, l->stride, l->pad, l->oh,
                   l->ow);
    }
}

/* The same, each chunk of the shard into its own gradient arena: of rows
   [s0, s0 + S), which hold whole chunks. */
static void mirror__conv_backward_chunks(const mirror_model *m, mirror__replica *r, const mirror__layer *l,
                                         const void *x, const void *d, void *dx, size_t s0, size_t S, int accumulate)
{
    size_t q, at, k, in = l->c * l->h * l->w, out = mirror__out_size(l);
    if (!m->plan.chunk) {
        mirror__conv_backward(m, r, l, x, d, dx, s0, S, accumulate, r->grads);
        return;
    }
    for (q = s0 / m->plan.chunk; q < mirror__nchunks(m, r); q++) {
        k = mirror__chunk_rows(m, r, q, &at);
        if (at >= s0 + S) break;
        mirror__conv_backward(m, r, l, x, mirror__el(m, d, (at - s0) * out), dx ? mirror__el(m, dx, (at - s0) * in) : NULL,
                              at, k, accumulate, mirror__chunk_grads(m, r, q));
    }
}

/* Batchnorm layer l's statistics in replica r's arena: the batch's
   (training) or the running ones (evaluation). */
static float *mirror__bn_stat(const mirror__replica *r, const mirror__layer *l)
{
    return r->bn + l->bn_off + (r->training ? 0 : 2 * l->c);
}

/* Batchnorm layer l's sums over each chunk of the shard into r->bn_part,
   2C doubles a chunk: of a and its M2 (x NULL: forward, a the input), or
   of a and a xhat (backward, a = dy, x the input). */
static void mirror__bn_chunk_sums(const mirror_model *m, mirror__replica *r, const mirror__layer *l, const void *a,
                                  const void *x)
{
    size_t q, at, k, in = l->c * l->h * l->w;
    for (q = 0; q < mirror__nchunks(m, r); q++) {
        k = mirror__chunk_rows(m, r, q, &at);
        m->be->bn_sums(r->dev, r->bn_part + q * 2 * l->c, mirror__el(m, a, at * in), x ? mirror__el(m, x, at * in) : NULL,
                       x ? mirror__bn_stat(r, l) : NULL, k, l->c, l->h * l->w);
    }
}

/* The GEMMs over a shard's S samples: one, or one a chunk in deterministic
   mode where a GEMM's rows depend on their count (gemm_rows_free); part q
   has rows [*at, *at + the count returned). */
static size_t mirror__gemm_parts(const mirror_model *m, const mirror__replica *r)
{
    return m->plan.chunk && !m->be->gemm_rows_free ? r->nchunks : 1;
}

static size_t mirror__gemm_rows(const mirror_model *m, const mirror__replica *r, size_t q, size_t S, size_t *at)
{
    if (mirror__gemm_parts(m, r) == 1) return *at = 0, S;
    return mirror__chunk_rows(m, r, q, at);
}

/* Deterministic mode's alignment for the GEMMs' choice of algorithm
   (gemm_align), in bytes; 0 outside it. A dense layer's GEMM over chunk q
   of a shard reads and writes q K rows past the shard's start, and where
   that start sits in the activation arena moves with the shard's size:
   so the chunk's own alignment depends on the replica count, which must
   not pick another algorithm. What every chunk has whatever the count:
   the arena's 64 bytes (mirror__carve), the lowest bit of K rows of each
   dense layer's inputs and outputs. The parameters sit alike for every
   count (at 256 bytes on a GPU: param_align). */
static size_t mirror__chunk_align(const mirror_model *m)
{
    size_t i, a = 64, e = mirror__esize(m);
    if (!m->plan.chunk) return 0;
    for (i = 0; i < m->nlayers; i++) {
        const mirror__layer *l = &m->layers[i];
        size_t in = m->plan.chunk * l->c * e, out = m->plan.chunk * l->oc * e;
        if (l->kind != MIRROR__DENSE) continue;
        a = MIRROR__MIN(a, MIRROR__MIN(in & (~in + 1), out & (~out + 1)));
    }
    return a;
}

/* What layer i's passes work on over the shard's rows [s0, s0 + S); the
   backward's own fields are the caller's to set. */
static void mirror__io_at(mirror__io *o, const mirror_model *m, mirror__replica *r, size_t i, size_t s0, size_t S)
{
    const mirror__layer *l = &m->layers[i];
    o->m = m, o->r = r, o->l = l, o->i = i, o->s0 = s0, o->S = S;
    o->in = l->c * l->h * l->w, o->out = mirror__out_size(l);
    o->X = mirror__layer_input(m, r, i), o->x = mirror__el(m, o->X, s0 * o->in);
    o->W = mirror__el(m, r->weights, l->w_off), o->b = mirror__el(m, r->weights, l->b_off);
    o->Y = mirror__act(r, l), o->y = mirror__el(m, o->Y, s0 * o->out);
    o->d = o->dx = NULL;
    o->accumulate = 0;
    o->first = o->stop = 0;
}

/* ---- the layer kinds ----
   Each kind's shape rule, description, parameters and passes, in the
   order of mirror__kind; their table, mirror__kinds, follows them. A new
   kind: its MIRROR__ value, its entry, these functions, its public call
   (mirror_<kind>, in >>model and pool, through mirror__add), any backend
   ops it needs, and its tests (tests/README.md). */

/* The output shape of the input's: the activations, dropout. */
static int mirror__same_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    (void)m, (void)n;
    l->oc = l->c, l->oh = l->h, l->ow = l->w;
    return MIRROR_OK;
}

/* A pooling window of k, stride apart, over each channel's plane. */
static int mirror__pool_shape(mirror_model *m, mirror__layer *l, size_t n, const char *name)
{
    if (l->k > l->h || l->k > l->w)
        return mirror__fail(m, MIRROR_ERR_SHAPE,
                            "%s (layer %zu): window %zu larger than the "
                            "input %zux%zu",
                            name, n, l->k, l->h, l->w);
    l->oc = l->c;
    l->oh = (l->h - l->k) / l->stride + 1;
    l->ow = (l->w - l->k) / l->stride + 1;
    return MIRROR_OK;
}

/* A window and a stride, "(2,2)". */
static void mirror__window_describe(const mirror__layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "(%zu,%zu)", l->k, l->stride);
}

/* He before a relu (a batchnorm between them too), Glorot elsewhere,
   unless the desc says otherwise. */
static int mirror__uses_he(const mirror_model *m, size_t i)
{
    if (m->desc.init != MIRROR_INIT_DEFAULT) return m->desc.init == MIRROR_INIT_HE;
    while (++i < m->nlayers && m->layers[i].kind == MIRROR__BATCHNORM) {}
    return i < m->nlayers && m->layers[i].kind == MIRROR__RELU;
}

/* W uniform in [-a, a] (a from its fans, mirror_hd_init_bound), b 0. */
static void mirror__init_uniform(const mirror_model *m, size_t i, size_t fan_out, uint64_t *state, float *host)
{
    const mirror__layer *l = &m->layers[i];
    size_t j, fan_in = l->n_w / (l->n_b ? l->n_b : 1);
    float a = mirror_hd_init_bound(mirror__uses_he(m, i), fan_in, fan_out);
    for (j = 0; j < l->n_w; j++) host[l->w_off + j] = a * (2.0f * mirror__uniform(state) - 1.0f);
    for (j = 0; j < l->n_b; j++) host[l->b_off + j] = 0.0f;
}

/* A convolution's W [OC, C, k, k], as nn.Conv2d's (conv2d, a residual
   block's projection). */
static size_t mirror__conv_weight_shape(const mirror_model *m, const mirror__layer *l, size_t *shape)
{
    mirror__layer c = mirror__convolution(m, l);
    shape[0] = c.oc, shape[1] = c.c, shape[2] = shape[3] = c.k;
    return 4;
}

static void mirror__conv_init(const mirror_model *m, size_t i, uint64_t *state, float *host)
{
    const mirror__layer *l = &m->layers[i];
    mirror__init_uniform(m, i, l->oc * l->k * l->k, state, host);
}

/* -- dense: y [S,units] = x [S,F] . W^T [F,units] + b (and the relu after
   it, if fused); W [units, F], as nn.Linear's. */

static int mirror__dense_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    if (l->h != 1 || l->w != 1)
        return mirror__fail(m, MIRROR_ERR_SHAPE,
                            "dense (layer %zu): input %zux%zux%zu is not flat; "
                            "add mirror_flatten first",
                            n, l->c, l->h, l->w);
    l->oh = l->ow = 1;
    l->n_w = l->oc * l->c;
    l->n_b = l->oc;
    return MIRROR_OK;
}

static void mirror__dense_describe(const mirror__layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "(%zu)", l->oc);
}

static int mirror__dense_described(mirror_model *m, const double *a) { return mirror_dense(m, (size_t)a[0]); }

static size_t mirror__dense_weight_shape(const mirror_model *m, const mirror__layer *l, size_t *shape)
{
    (void)m;
    shape[0] = l->oc, shape[1] = l->c;
    return 2;
}

static void mirror__dense_init(const mirror_model *m, size_t i, uint64_t *state, float *host)
{
    mirror__init_uniform(m, i, m->layers[i].oc, state, host);
}

static void mirror__dense_forward(const mirror__io *o)
{
    const mirror_model *m = o->m;
    const mirror__layer *l = o->l;
    size_t q;
    for (q = 0; q < mirror__gemm_parts(m, o->r); q++) {
        size_t at, k = mirror__gemm_rows(m, o->r, q, o->S, &at);
        m->be->gemm_bias(o->r->dev, 0, 1, k, l->oc, l->c, mirror__el(m, o->x, at * l->c), l->c, o->W, l->c, o->b, 0,
                         l->fused, mirror__el(m, o->y, at * l->oc), l->oc);
    }
}

/* dW [units,F] = d^T [units,S] . x [S,F];  db = column sums of d;
   dx [S,F] = d [S,units] . W [units,F] */
static size_t mirror__dense_backward(const mirror__io *o)
{
    const mirror_model *m = o->m;
    const mirror__backend *be = m->be;
    mirror__replica *r = o->r;
    const mirror__layer *l = o->l;
    size_t q, at, k;
    float *g;
    for (q = 0; q < mirror__nchunks(m, r); q++) {
        k = mirror__chunk_rows(m, r, q, &at), g = mirror__chunk_grads(m, r, q);
        be->gemm(r->dev, 1, 0, l->oc, l->c, k, 1.0f, mirror__el(m, o->d, at * l->oc), l->oc,
                 mirror__el(m, o->x, at * l->c), l->c, o->accumulate ? 1.0f : 0.0f, g + l->w_off, l->c, 1);
        if (!o->accumulate) be->zero(r->dev, g + l->b_off, l->n_b * sizeof(float));
        be->bias_grad(r->dev, g + l->b_off, mirror__el(m, o->d, at * l->oc), k, l->oc, 1);
    }
    for (q = 0; o->i > o->first && q < mirror__gemm_parts(m, r); q++) {
        k = mirror__gemm_rows(m, r, q, o->S, &at);
        be->gemm(r->dev, 0, 0, k, l->c, l->oc, 1.0f, mirror__el(m, o->d, at * l->oc), l->oc, o->W, l->c, 0.0f,
                 mirror__el(m, o->dx, at * l->c), l->c, 0);
    }
    return 1;
}

/* -- conv2d: y [S,OC,Ho,Wo] = W [OC,C,k,k] * x [S,C,H,W] + b, through
   im2col and a GEMM (mirror__conv_forward; and the relu after it, if
   fused). */

static int mirror__conv2d_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    if (l->pad >= l->k) /* pad < k <= 64 first, so h + 2 pad cannot overflow */
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "conv2d (layer %zu): padding %zu must be below the "
                            "kernel size %zu",
                            n, l->pad, l->k);
    if (l->k > l->h + 2 * l->pad || l->k > l->w + 2 * l->pad)
        return mirror__fail(m, MIRROR_ERR_SHAPE,
                            "conv2d (layer %zu): kernel %zu larger than the padded "
                            "input %zux%zu",
                            n, l->k, l->h + 2 * l->pad, l->w + 2 * l->pad);
    l->oh = (l->h + 2 * l->pad - l->k) / l->stride + 1;
    l->ow = (l->w + 2 * l->pad - l->k) / l->stride + 1;
    l->n_w = l->oc * l->c * l->k * l->k;
    l->n_b = l->oc;
    return MIRROR_OK;
}

static void mirror__conv2d_describe(const mirror__layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "(%zu,%zu,%zu,%zu)", l->oc, l->k, l->stride, l->pad);
}

static int mirror__conv2d_described(mirror_model *m, const double *a)
{
    return mirror_conv2d(m, (size_t)a[0], (size_t)a[1], (size_t)a[2], (size_t)a[3]);
}

static void mirror__conv2d_forward(const mirror__io *o)
{
    mirror__conv_forward(o->m, o->r, o->l, o->X, o->Y, o->s0, o->S);
}

static size_t mirror__conv2d_backward(const mirror__io *o)
{
    mirror__conv_backward_chunks(o->m, o->r, o->l, o->X, o->d, o->i > o->first ? o->dx : NULL, o->s0, o->S,
                                 o->accumulate);
    return 1;
}

/* -- relu: y = max(0, x); backward in place from y. After a layer that
   fused it, its output is that layer's. */

static int mirror__relu_described(mirror_model *m, const double *a) { (void)a; return mirror_relu(m); }

static void mirror__relu_forward(const mirror__io *o)
{
    if (!o->i || !o->m->layers[o->i - 1].fused) o->m->be->relu_forward(o->r->dev, o->y, o->x, o->S * o->out);
}

static size_t mirror__relu_backward(const mirror__io *o)
{
    o->m->be->relu_backward(o->r->dev, o->d, o->y, o->S * o->out);
    return 1;
}

/* -- maxpool2d: each window's largest value, its place kept (arg_off) for
   backward. */

static int mirror__maxpool2d_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    return mirror__pool_shape(m, l, n, "maxpool2d");
}

static int mirror__maxpool2d_described(mirror_model *m, const double *a)
{
    return mirror_maxpool2d(m, (size_t)a[0], (size_t)a[1]);
}

static void mirror__maxpool2d_forward(const mirror__io *o)
{
    const mirror__layer *l = o->l;
    o->m->be->maxpool_forward(o->r->dev, o->y, (int32_t *)(o->r->acts + l->arg_off) + o->s0 * o->out, o->x,
                              o->S * l->c, l->h, l->w, l->k, l->stride, l->oh, l->ow);
}

/* Whether max pooling layer i takes the backward of the relu layer below
   it (its input) in the same pass: windows that do not overlap, a backend
   that can, and a relu layer that the backward visits and stops at not. */
static int mirror__pool_takes_relu(const mirror_model *m, size_t i, size_t first, size_t stop)
{
    const mirror__layer *l = &m->layers[i];
    return m->be->maxpool_relu_backward && l->k <= l->stride && i > first && i - 1 != stop &&
           m->layers[i - 1].kind == MIRROR__RELU;
}

static size_t mirror__maxpool2d_backward(const mirror__io *o)
{
    const mirror__backend *be = o->m->be;
    const mirror__layer *l = o->l;
    const int32_t *arg = (const int32_t *)(o->r->acts + l->arg_off) + o->s0 * o->out;
    if (mirror__pool_takes_relu(o->m, o->i, o->first, o->stop)) { /* and the relu layer below is done */
        be->maxpool_relu_backward(o->r->dev, o->dx, arg, o->d, o->y, o->S * l->c, l->h, l->w, l->oh, l->ow);
        return 2;
    }
    be->maxpool_backward(o->r->dev, o->dx, arg, o->d, o->S * l->c, l->h, l->w, l->k, l->stride, l->oh, l->ow);
    return 1;
}

/* -- flatten: [S,C,H,W] as [S,C*H*W], a view of its input. */

static int mirror__flatten_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    (void)m, (void)n;
    l->oc = l->c * l->h * l->w;
    l->oh = l->ow = 1;
    return MIRROR_OK;
}

static int mirror__flatten_described(mirror_model *m, const double *a) { (void)a; return mirror_flatten(m); }

/* -- tanh, sigmoid, gelu: y = f(x) by the backend's act_forward, which
   takes the kind; backward in place, d = d f'(x), from x or y. */

static int mirror__tanh_described(mirror_model *m, const double *a) { (void)a; return mirror_tanh(m); }
static int mirror__sigmoid_described(mirror_model *m, const double *a) { (void)a; return mirror_sigmoid(m); }
static int mirror__gelu_described(mirror_model *m, const double *a) { (void)a; return mirror_gelu(m); }

static void mirror__act_forward(const mirror__io *o)
{
    o->m->be->act_forward(o->r->dev, (int)o->l->kind, o->y, o->x, o->S * o->out);
}

static size_t mirror__act_backward(const mirror__io *o)
{
    o->m->be->act_backward(o->r->dev, (int)o->l->kind, o->d, o->x, o->y, o->S * o->out);
    return 1;
}

/* -- avgpool2d: each window's mean. */

static int mirror__avgpool2d_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    return mirror__pool_shape(m, l, n, "avgpool2d");
}

static int mirror__avgpool2d_described(mirror_model *m, const double *a)
{
    return mirror_avgpool2d(m, (size_t)a[0], (size_t)a[1]);
}

static void mirror__avgpool2d_forward(const mirror__io *o)
{
    const mirror__layer *l = o->l;
    o->m->be->avgpool_forward(o->r->dev, o->y, o->x, o->S * l->c, l->h, l->w, l->k, l->k, l->stride, l->oh, l->ow);
}

static size_t mirror__avgpool2d_backward(const mirror__io *o)
{
    const mirror__layer *l = o->l;
    o->m->be->avgpool_backward(o->r->dev, o->dx, o->d, o->S * l->c, l->h, l->w, l->k, l->k, l->stride, l->oh, l->ow);
    return 1;
}

/* -- global_avgpool: each channel's mean, [S,C,H,W] -> [S,C,1,1]: average
   pooling whose window is the plane. */

static int mirror__global_avgpool_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    (void)m, (void)n;
    l->oc = l->c;
    l->oh = l->ow = 1;
    return MIRROR_OK;
}

static int mirror__global_avgpool_described(mirror_model *m, const double *a)
{
    (void)a;
    return mirror_global_avgpool(m);
}

static void mirror__global_avgpool_forward(const mirror__io *o)
{
    const mirror__layer *l = o->l;
    o->m->be->avgpool_forward(o->r->dev, o->y, o->x, o->S * l->c, l->h, l->w, l->h, l->w, l->stride, l->oh, l->ow);
}

static size_t mirror__global_avgpool_backward(const mirror__io *o)
{
    const mirror__layer *l = o->l;
    o->m->be->avgpool_backward(o->r->dev, o->dx, o->d, o->S * l->c, l->h, l->w, l->h, l->w, l->stride, l->oh, l->ow);
    return 1;
}

/* -- dropout: in training each value zeroed with probability p, the rest
   scaled by 1 / (1 - p), the mask hashed from (seed, layer, sample,
   value); in evaluation the input as it is (p 0). */

static void mirror__dropout_describe(const mirror__layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "(%.9g)", (double)l->p);
}

static int mirror__dropout_described(mirror_model *m, const double *a) { return mirror_dropout(m, (float)a[0]); }

static void mirror__dropout_forward(const mirror__io *o)
{
    o->m->be->dropout(o->r->dev, o->y, o->x, o->S, o->out, o->m->desc.seed, o->i, o->r->tick,
                      o->r->training ? o->l->p : 0.0f);
}

static size_t mirror__dropout_backward(const mirror__io *o) /* the same mask, hashed again */
{
    if (o->l->p > 0.0f)
        o->m->be->dropout(o->r->dev, o->d, o->d, o->S, o->out, o->m->desc.seed, o->i, o->r->tick, o->l->p);
    return 1;
}

/* -- batchnorm: y = gamma (x - mean) invstd + beta per channel, gamma as
   W and beta as b (c each, gamma 1 and beta 0 at build); the batch's
   statistics in training (a training pass pauses here for the replicas'
   sums, >>step), the running ones in evaluation. */

static int mirror__batchnorm_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    mirror__same_shape(m, l, n);
    l->n_w = l->n_b = l->c;
    return MIRROR_OK;
}

static void mirror__batchnorm_describe(const mirror__layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "(%.9g,%.9g,%d)", (double)l->momentum, (double)l->eps, l->local);
}

static int mirror__batchnorm(mirror_model *m, float momentum, float eps, int local);

static int mirror__batchnorm_described(mirror_model *m, const double *a)
{
    if (a[2] > 1.0) return 1; /* local: 0 or 1 */
    return mirror__batchnorm(m, (float)a[0], (float)a[1], a[2] == 1.0);
}

static size_t mirror__batchnorm_weight_shape(const mirror_model *m, const mirror__layer *l, size_t *shape)
{
    (void)m;
    shape[0] = l->c;
    return 1;
}

static void mirror__batchnorm_init(const mirror_model *m, size_t i, uint64_t *state, float *host)
{
    const mirror__layer *l = &m->layers[i];
    size_t j;
    (void)state;
    for (j = 0; j < l->n_w; j++) host[l->w_off + j] = 1.0f, host[l->b_off + j] = 0.0f;
}

static void mirror__batchnorm_forward(const mirror__io *o)
{
    const mirror__layer *l = o->l;
    o->m->be->bn_forward(o->r->dev, o->y, o->x, mirror__bn_stat(o->r, l), o->W, o->b, o->S, l->c, l->h * l->w);
}

/* dgamma, dbeta from each chunk's sums; dx from the batch's means */
static size_t mirror__batchnorm_backward(const mirror__io *o)
{
    const mirror_model *m = o->m;
    const mirror__backend *be = m->be;
    mirror__replica *r = o->r;
    const mirror__layer *l = o->l;
    size_t q, at, k;
    float *g;
    for (q = 0; q < mirror__nchunks(m, r); q++) {
        k = mirror__chunk_rows(m, r, q, &at), g = mirror__chunk_grads(m, r, q);
        if (!o->accumulate) { /* gamma's and beta's */
            be->zero(r->dev, g + l->w_off, l->c * sizeof(float));
            be->zero(r->dev, g + l->b_off, l->c * sizeof(float));
        }
        be->bn_backward(r->dev, o->i > o->first ? mirror__el(m, o->dx, at * o->in) : NULL, g + l->w_off, g + l->b_off,
                        mirror__el(m, o->d, at * o->in), mirror__el(m, o->x, at * o->in), mirror__bn_stat(r, l),
                        r->bn + l->bn_off + 4 * l->c, r->bn_part + q * 2 * l->c, o->W, k, l->c, l->h * l->w);
    }
    return 1;
}

/* -- residual: a residual block's start, its input kept (the output is a
   view of it); backward adds the gradient through the shortcut, waiting
   in r->skip, to the body's. Blocks do not nest. */

static int mirror__residual_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    if (m->adding.open_block)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "residual (layer %zu): the block opened at layer %zu is still open "
                            "(blocks do not nest; close it with mirror_residual_end)",
                            n, m->adding.open_block - 1);
    l->oc = l->c, l->oh = l->h, l->ow = l->w;
    m->adding.open_block = n + 1;
    return MIRROR_OK;
}

static int mirror__residual_described(mirror_model *m, const double *a) { (void)a; return mirror_residual(m); }

static size_t mirror__residual_backward(const mirror__io *o)
{
    o->m->be->add(o->r->dev, o->d, o->d, o->r->skip, o->S * o->out);
    return 1;
}

/* -- residual_end: y = F(x) + x, the block's output plus its input, or
   plus the input's projection (a strided 1x1 convolution, W and b) where
   the shapes differ. */

static int mirror__residual_end_shape(mirror_model *m, mirror__layer *l, size_t n)
{
    const mirror__layer *in;
    if (!m->adding.open_block)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "residual_end (layer %zu): no residual block is open (mirror_residual "
                            "starts one)",
                            n);
    l->from = m->adding.open_block - 1;
    in = &m->layers[l->from];
    l->oc = l->c, l->oh = l->h, l->ow = l->w;
    l->k = 1, l->stride = 1;
    if (in->c != l->c || in->h != l->h || in->w != l->w) { /* a 1x1 projection, strided */
        while (l->stride <= 64 && ((in->h - 1) / l->stride + 1 != l->h || (in->w - 1) / l->stride + 1 != l->w))
            l->stride++;
        if (l->stride > 64)
            return mirror__fail(m, MIRROR_ERR_SHAPE,
                                "residual_end (layer %zu): the block's input %zux%zux%zu cannot be "
                                "projected onto its output %zux%zux%zu by a strided 1x1 convolution",
                                n, in->c, in->h, in->w, l->c, l->h, l->w);
        l->n_w = l->oc * in->c;
        l->n_b = l->oc;
    }
    m->adding.open_block = 0;
    return MIRROR_OK;
}

static int mirror__residual_end_described(mirror_model *m, const double *a)
{
    (void)a;
    return mirror_residual_end(m);
}

static void mirror__residual_end_forward(const mirror__io *o)
{
    const mirror_model *m = o->m;
    const void *block_in = mirror__layer_input(m, o->r, o->l->from);
    if (o->l->n_w) {
        mirror__layer p = mirror__projection(m, o->l);
        mirror__conv_forward(m, o->r, &p, block_in, o->y, 0, o->S);
        block_in = o->y;
    }
    m->be->add(o->r->dev, o->y, o->x, block_in, o->S * o->out);
}

/* d flows on into the body; the shortcut's share waits in r->skip */
static size_t mirror__residual_end_backward(const mirror__io *o)
{
    const mirror_model *m = o->m;
    const mirror__layer *l = o->l;
    if (l->n_w) {
        mirror__layer p = mirror__projection(m, l);
        mirror__conv_backward_chunks(m, o->r, &p, mirror__layer_input(m, o->r, l->from), o->d,
                                     l->from > o->first ? o->r->skip : NULL, 0, o->S, o->accumulate);
    } else if (l->from > o->first) {
        m->be->add(o->r->dev, o->r->skip, o->d, NULL, o->S * o->out);
    }
    return 1;
}

/* The layer kinds, in the order of mirror__kind (entry 0: none). Each
   entry's lines: the kind, its name and shape rule; its description and
   the way back; its parameters; its passes; its properties. */
MIRROR__NAMED_BEGIN
static const mirror__kind_info mirror__kinds[MIRROR__KINDS] = {
    {.kind = (mirror__kind)0, .name = "?", .shape = NULL,
     .describe = NULL, .nargs = 0, .described = NULL,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = NULL, .backward = NULL,
     .rowwise = 0, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 0},
    {.kind = MIRROR__DENSE, .name = "dense", .shape = mirror__dense_shape,
     .describe = mirror__dense_describe, .nargs = 1, .described = mirror__dense_described,
     .tensors = {"weight", "bias"}, .weight_shape = mirror__dense_weight_shape, .init = mirror__dense_init,
     .forward = mirror__dense_forward, .backward = mirror__dense_backward,
     .rowwise = 0, .takes_relu = 1, .convolves = 0, .view = 0, .in_place = 0},
    {.kind = MIRROR__CONV2D, .name = "conv2d", .shape = mirror__conv2d_shape,
     .describe = mirror__conv2d_describe, .nargs = 4, .described = mirror__conv2d_described,
     .tensors = {"weight", "bias"}, .weight_shape = mirror__conv_weight_shape, .init = mirror__conv_init,
     .forward = mirror__conv2d_forward, .backward = mirror__conv2d_backward,
     .rowwise = 1, .takes_relu = 1, .convolves = 1, .view = 0, .in_place = 0},
    {.kind = MIRROR__RELU, .name = "relu", .shape = mirror__same_shape,
     .describe = NULL, .nargs = 0, .described = mirror__relu_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = mirror__relu_forward, .backward = mirror__relu_backward,
     .rowwise = 1, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 1},
    {.kind = MIRROR__MAXPOOL2D, .name = "maxpool2d", .shape = mirror__maxpool2d_shape,
     .describe = mirror__window_describe, .nargs = 2, .described = mirror__maxpool2d_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = mirror__maxpool2d_forward, .backward = mirror__maxpool2d_backward,
     .rowwise = 1, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 0},
    {.kind = MIRROR__FLATTEN, .name = "flatten", .shape = mirror__flatten_shape,
     .describe = NULL, .nargs = 0, .described = mirror__flatten_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = NULL, .backward = NULL,
     .rowwise = 1, .takes_relu = 0, .convolves = 0, .view = 1, .in_place = 1},
    {.kind = MIRROR__TANH, .name = "tanh", .shape = mirror__same_shape,
     .describe = NULL, .nargs = 0, .described = mirror__tanh_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = mirror__act_forward, .backward = mirror__act_backward,
     .rowwise = 1, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 1},
    {.kind = MIRROR__SIGMOID, .name = "sigmoid", .shape = mirror__same_shape,
     .describe = NULL, .nargs = 0, .described = mirror__sigmoid_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = mirror__act_forward, .backward = mirror__act_backward,
     .rowwise = 1, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 1},
    {.kind = MIRROR__GELU, .name = "gelu", .shape = mirror__same_shape,
     .describe = NULL, .nargs = 0, .described = mirror__gelu_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = mirror__act_forward, .backward = mirror__act_backward,
     .rowwise = 1, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 1},
    {.kind = MIRROR__AVGPOOL2D, .name = "avgpool2d", .shape = mirror__avgpool2d_shape,
     .describe = mirror__window_describe, .nargs = 2, .described = mirror__avgpool2d_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = mirror__avgpool2d_forward, .backward = mirror__avgpool2d_backward,
     .rowwise = 1, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 0},
    {.kind = MIRROR__GLOBAL_AVGPOOL, .name = "global_avgpool", .shape = mirror__global_avgpool_shape,
     .describe = NULL, .nargs = 0, .described = mirror__global_avgpool_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = mirror__global_avgpool_forward, .backward = mirror__global_avgpool_backward,
     .rowwise = 1, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 0},
    {.kind = MIRROR__DROPOUT, .name = "dropout", .shape = mirror__same_shape,
     .describe = mirror__dropout_describe, .nargs = 1, .described = mirror__dropout_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = mirror__dropout_forward, .backward = mirror__dropout_backward,
     .rowwise = 0, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 1},
    {.kind = MIRROR__BATCHNORM, .name = "batchnorm", .shape = mirror__batchnorm_shape,
     .describe = mirror__batchnorm_describe, .nargs = 3, .described = mirror__batchnorm_described,
     .tensors = {"weight", "bias", "running_mean", "running_var"}, .weight_shape = mirror__batchnorm_weight_shape,
     .init = mirror__batchnorm_init,
     .forward = mirror__batchnorm_forward, .backward = mirror__batchnorm_backward,
     .rowwise = 0, .takes_relu = 0, .convolves = 0, .view = 0, .in_place = 0},
    {.kind = MIRROR__RESIDUAL, .name = "residual", .shape = mirror__residual_shape,
     .describe = NULL, .nargs = 0, .described = mirror__residual_described,
     .tensors = {NULL}, .weight_shape = NULL, .init = NULL,
     .forward = NULL, .backward = mirror__residual_backward,
     .rowwise = 0, .takes_relu = 0, .convolves = 0, .view = 1, .in_place = 1},
    {.kind = MIRROR__RESIDUAL_END, .name = "residual_end", .shape = mirror__residual_end_shape,
     .describe = NULL, .nargs = 0, .described = mirror__residual_end_described,
     .tensors = {"weight", "bias"}, .weight_shape = mirror__conv_weight_shape, .init = mirror__conv_init,
     .forward = mirror__residual_end_forward, .backward = mirror__residual_end_backward,
     .rowwise = 0, .takes_relu = 0, .convolves = 1, .view = 0, .in_place = 1},
};
MIRROR__NAMED_END

/* Whether layer l runs a convolution: conv2d, and a projecting residual_end. */
static int mirror__convolves(const mirror__layer *l) { return mirror__kinds[l->kind].convolves && l->n_w; }

/* ---- the passes through the model ---- */

/* Layer i's forward over the shard's rows [s0, s0 + S): all of them (s0
   0), or in the row-wise prefix a group (mirror__plan_groups). */
static void mirror__layer_forward(mirror_model *m, mirror__replica *r, size_t i, size_t s0, size_t S)
{
    const mirror__kind_info *k = &mirror__kinds[m->layers[i].kind];
    mirror__io o;
    if (!k->forward) return; /* its output is its input */
    mirror__io_at(&o, m, r, i, s0, S);
    k->forward(&o);
}

/* Layers [from, stop) of replica r's shard of S samples; where stop is a
   batchnorm layer (stop < nlayers), its input's sums into r->bn_part and
   a pause (the host combines the replicas' and sets the statistics). */
static void mirror__forward(mirror_model *m, mirror__replica *r, size_t S, size_t from, size_t stop)
{
    size_t i, j, s0, G = m->pass.group_rows;
    for (i = from; i < m->nlayers; i++) {
        if (i == stop) {
            mirror__bn_chunk_sums(m, r, &m->layers[i], mirror__layer_input(m, r, i), NULL);
            return;
        }
        if (i == 0 && m->pass.group_layers && S >= 2 * G) { /* the row-wise prefix, a group of rows through all of it */
            for (s0 = 0; s0 < S; s0 += G)
                for (j = 0; j < m->pass.group_layers; j++) mirror__layer_forward(m, r, j, s0, MIRROR__MIN(G, S - s0));
            i = m->pass.group_layers - 1;
            continue;
        }
        mirror__layer_forward(m, r, i, 0, S);
    }
}

/* The first layer with weights: input gradients are needed only above it. */
static size_t mirror__first_weighted(const mirror_model *m)
{
    size_t i;
    for (i = 0; i < m->nlayers; i++)
        if (m->layers[i].n_w) return i;
    return m->nlayers;
}

/* Bucketed all-reduce: queues the sum of every bucket whose layers, all at
   or above layer `done`, have their gradients queued, while backward goes
   on below them (mixed precision: narrowed to 16 bits first). */
static void mirror__reduce_buckets(const mirror_model *m, mirror__replica *r, size_t done)
{
    for (; r->bucketing && r->bucket < m->buckets.n && m->buckets.layer[r->bucket] >= done; r->bucket++) {
        size_t lo = m->buckets.lo[r->bucket], n = m->buckets.hi[r->bucket] - lo;
        if (m->format) {
            m->be->narrow(r->dev, r->grad16 + lo, r->grads + lo, n, m->format);
            m->be->reduce_bucket(r->dev, r->grad16 + lo, n, m->format);
        } else {
            m->be->reduce_bucket(r->dev, r->grads + lo, n, 0);
        }
    }
}

/* Layer i's backward over the shard's rows [s0, s0 + S) (s0 0 outside the
   row-wise prefix), with dLoss/d(its output) of those rows in d:
   dLoss/d(their input) into dx, or in place in d. Returns the layers it
   took (2 where max pooling took the relu below it too); *moved: whether
   the gradient is now in dx. */
static size_t mirror__layer_backward(mirror_model *m, mirror__replica *r, size_t i, size_t s0, size_t S,
                                     int accumulate, size_t first, size_t stop, void *d, void *dx, int *moved)
{
    const mirror__kind_info *k = &mirror__kinds[m->layers[i].kind];
    mirror__io o;
    *moved = !k->in_place;
    if (!k->backward) return 1; /* its input gradient is its output's */
    mirror__io_at(&o, m, r, i, s0, S);
    o.d = d, o.dx = dx, o.accumulate = accumulate, o.first = first, o.stop = stop;
    return k->backward(&o);
}

/* The row-wise prefix's backward, a group of rows through all of it (the
   layers' weight gradients add the groups in row order, as the whole
   shard's backward adds its rows), from dLoss/d(its output) in d. A
   group's gradients pass between two group-sized halves of dx, the same
   for every group: the other buffer, free, S >= 2G rows. */
static void mirror__backward_groups(mirror_model *m, mirror__replica *r, size_t S, int accumulate, size_t first,
                                    size_t stop, void *d, void *dx)
{
    size_t s0, i, G = m->pass.group_rows, top = mirror__out_size(&m->layers[m->pass.group_layers - 1]);
    void *half[2];
    half[0] = dx, half[1] = mirror__el(m, dx, G * m->sizes.max);
    for (s0 = 0; s0 < S; s0 += G) {
        void *gd = mirror__el(m, d, s0 * top);
        int moved;
        for (i = m->pass.group_layers; i-- > first;) {
            void *gdx = half[gd == half[0]];
            /* after the first group, a convolution adds to its gradients (deterministic mode: each chunk's own) */
            i -= mirror__layer_backward(m, r, i, s0, MIRROR__MIN(G, S - s0), accumulate || (s0 && !m->plan.chunk),
                                        first, stop, gd, gdx, &moved) - 1;
            if (moved) gd = gdx;
        }
    }
}

/* Backward from layer `from` down (the top: nlayers - 1, with
   dLoss/d(output) in r->delta[0]), leaving dLoss/dW in r->grads, or in
   deterministic mode each chunk's in its own arena. Where layer `stop` is
   a batchnorm layer, its sums of dy and dy xhat go into r->bn_part and
   the pass pauses there; it resumes with from = stop. */
static void mirror__backward(mirror_model *m, mirror__replica *r, size_t S, int accumulate, size_t from, size_t stop)
{
    size_t i, first = mirror__first_weighted(m);
    void *d, *dx, *swap;
    int moved;
    /* The weight gradients are written by GEMMs with beta 0 (a
       convolution's first chunk too), not added to: only the bias
       gradients, which accumulate, start from zero, and the whole arena
       where an empty shard writes nothing. A micro-batch after the first
       (accumulate) adds to what the others left: beta 1, nothing zeroed.
       Deterministic mode writes each chunk's arena afresh: the reduction
       adds the micro-batches. */
    accumulate = accumulate && !m->plan.chunk;
    if (from == m->nlayers - 1) {
        r->dsel = 0;
        if (S == 0 && !accumulate && !m->plan.chunk) m->be->zero(r->dev, r->grads, m->nslots * sizeof(float));
    }
    d = r->delta[r->dsel], dx = r->delta[1 - r->dsel];
    for (i = from + 1; i-- > 0 && i >= first;) {
        mirror__reduce_buckets(m, r, i + 1); /* the layers above i are done */
        if (i == stop) {
            r->dsel = d == r->delta[1];
            mirror__bn_chunk_sums(m, r, &m->layers[i], d, mirror__layer_input(m, r, i));
            return;
        }
        if (i + 1 == m->pass.group_layers && S >= 2 * m->pass.group_rows) {
            mirror__backward_groups(m, r, S, accumulate, first, stop, d, dx);
            break;
        }
        i -= mirror__layer_backward(m, r, i, 0, S, accumulate, first, stop, d, dx, &moved) - 1;
        if (moved) swap = d, d = dx, dx = swap;
    }
    mirror__reduce_buckets(m, r, 0);
    /* Mixed precision: the weight gradients, accumulated in fp32, are
       stored in 16 bits: the buffer the all-reduce carries (deterministic
       mode narrows the reduced sum instead; buckets narrow their own). */
    if (m->format && !m->plan.chunk && !r->bucketing) m->be->narrow(r->dev, r->grad16, r->grads, m->nslots, m->format);
}

// >>reducers ----------------------------------------------------------------
/* The sums across replicas: the CPU reducer (the threads add the replicas
   in a fixed order), the public all-reduce and broadcast, deterministic
   mode's chunk sums, the update plan's reduce steps (the step's gradient
   all-reduce), and the results that every process must share. The CUDA
   reducers are in mirror_cuda.h, the MPI one in >>processes. */

/* Worker w owns the elements of its shard of [0, n) and, for each, adds the
   replicas in order 0, 1, 2, ...: the same additions in the same order
   whatever the thread count, so the sum is deterministic. */

#define MIRROR__REDUCE_CHUNK 512

/* acc = the sum of in[r][begin, begin + len) over r in order 0, 1, ...
   (none: zeros), which is then written into every out[r]; in and out
   may be the same buffers. */
static void mirror__sum_chunk(float *acc, float *const *in, size_t nin, float *const *out, size_t nout, size_t begin,
                              size_t len)
{
    size_t i, r;
    if (nin)
        memcpy(acc, in[0] + begin, len * sizeof(float));
    else
        memset(acc, 0, len * sizeof(float));
    for (r = 1; r < nin; r++) {
        const float *b = in[r] + begin;
        for (i = 0; i < len; i++) acc[i] += b[i];
    }
    for (r = 0; r < nout; r++) memcpy(out[r] + begin, acc, len * sizeof(float));
}

/* The sum of j->in in order into every replica's j->bufs. */
static void mirror__cpu_all_reduce_job(void *ctx, size_t worker)
{
    const mirror__reduce_job *j = (const mirror__reduce_job *)ctx;
    mirror_strategy *s = j->s;
    float acc[MIRROR__REDUCE_CHUNK];
    size_t begin, count, end;
    mirror_shard(j->n, s->team.size ? s->team.size : 1, worker, &begin, &count);
    end = begin + count;
    for (; begin < end; begin += MIRROR__REDUCE_CHUNK)
        mirror__sum_chunk(acc, j->in, j->nin, j->bufs, s->replicas, begin,
                          MIRROR__MIN(MIRROR__REDUCE_CHUNK, end - begin));
}

/* The same over 16-bit buffers: widened, added in fp32 in replica order,
   rounded once, into out[0 .. nout). Gradients are already divided by the
   global count, so the sum is a mean's size and does not overflow where
   the parts do not. */
static void mirror__sum_half_chunk(float *acc, uint16_t *const *in, size_t nin, uint16_t *const *out, size_t nout,
                                   size_t begin, size_t len, int f)
{
    size_t i, r;
    for (i = 0; i < len; i++) acc[i] = mirror_hd_widen(in[0][begin + i], f);
    for (r = 1; r < nin; r++) {
        const uint16_t *b = in[r] + begin;
        for (i = 0; i < len; i++) acc[i] += mirror_hd_widen(b[i], f);
    }
    for (r = 0; r < nout; r++)
        for (i = 0; i < len; i++) out[r][begin + i] = mirror_hd_narrow(acc[i], f);
}

static void mirror__cpu_all_reduce_half_job(void *ctx, size_t worker)
{
    const mirror__reduce_job *j = (const mirror__reduce_job *)ctx;
    mirror_strategy *s = j->s;
    float acc[MIRROR__REDUCE_CHUNK];
    size_t begin, count, end;
    mirror_shard(j->n, s->team.size ? s->team.size : 1, worker, &begin, &count);
    for (end = begin + count; begin < end; begin += MIRROR__REDUCE_CHUNK)
        mirror__sum_half_chunk(acc, j->half, s->replicas, j->half, s->replicas, begin,
                               MIRROR__MIN(MIRROR__REDUCE_CHUNK, end - begin), j->format);
}

/* Replica `worker`'s slice of every replica's buffer, summed in replica
   order into its own buffer alone. */
static void mirror__cpu_reduce_scatter_job(void *ctx, size_t worker)
{
    const mirror__reduce_job *j = (const mirror__reduce_job *)ctx;
    size_t R = j->s->replicas;
    float acc[MIRROR__REDUCE_CHUNK];
    size_t begin = worker * j->slice, end = begin + j->slice, len;
    for (; begin < end; begin += len) {
        len = MIRROR__MIN(MIRROR__REDUCE_CHUNK, end - begin);
        if (j->format)
            mirror__sum_half_chunk(acc, (uint16_t *const *)j->any, R, (uint16_t *const *)&j->any[worker], 1, begin,
                                   len, j->format);
        else
            mirror__sum_chunk(acc, (float *const *)j->any, R, (float *const *)&j->any[worker], 1, begin, len);
    }
}

/* Replica `worker`'s slice of its own buffer, into every other's. */
static void mirror__cpu_all_gather_job(void *ctx, size_t worker)
{
    const mirror__reduce_job *j = (const mirror__reduce_job *)ctx;
    size_t r, bytes = j->slice * j->size;
    const unsigned char *from = (const unsigned char *)j->any[worker] + worker * bytes;
    for (r = 0; r < j->s->replicas; r++)
        if (r != worker) memcpy((unsigned char *)j->any[r] + worker * bytes, from, bytes);
}

static void mirror__cpu_broadcast_job(void *ctx, size_t worker)
{
    const mirror__reduce_job *j = (const mirror__reduce_job *)ctx;
    mirror_strategy *s = j->s;
    size_t begin, count, r;
    mirror_shard(j->n, s->team.size ? s->team.size : 1, worker, &begin, &count);
    for (r = 0; r < s->replicas; r++)
        if (r != j->root && count)
            memcpy(j->bufs[r] + begin, j->bufs[j->root] + begin, count * sizeof(float));
}

/* A reducer's call: its job, filled by the caller from a zeroed one, run
   by the threads. */
static mirror__reduce_job mirror__reduce_job_of(mirror_strategy *s, size_t n)
{
    mirror__reduce_job j;
    memset(&j, 0, sizeof j);
    j.s = s, j.n = n;
    return j;
}

static int mirror__cpu_all_reduce(mirror_strategy *s, float *const *bufs, size_t n, mirror_error *err)
{
    mirror__reduce_job j = mirror__reduce_job_of(s, n);
    (void)err;
    j.in = j.bufs = bufs, j.nin = s->replicas;
    mirror__run(&s->team, mirror__cpu_all_reduce_job, &j);
    return MIRROR_OK;
}

static int mirror__cpu_all_reduce_half(mirror_strategy *s, uint16_t *const *bufs, size_t n, int format,
                                       mirror_error *err)
{
    mirror__reduce_job j = mirror__reduce_job_of(s, n);
    (void)err;
    j.half = bufs, j.format = format;
    mirror__run(&s->team, mirror__cpu_all_reduce_half_job, &j);
    return MIRROR_OK;
}

static int mirror__cpu_broadcast(mirror_strategy *s, float *const *bufs, size_t n, size_t root,
                                 mirror_error *err)
{
    mirror__reduce_job j = mirror__reduce_job_of(s, n);
    (void)err;
    j.bufs = bufs, j.root = root;
    mirror__run(&s->team, mirror__cpu_broadcast_job, &j);
    return MIRROR_OK;
}

/* The threads sum element ranges, each element in list order. */
static int mirror__cpu_sum_list(mirror_strategy *s, float *const *in, const size_t *owner, size_t nin,
                                float *const *bufs, size_t n, mirror_error *err)
{
    mirror__reduce_job j = mirror__reduce_job_of(s, n);
    (void)owner, (void)err;
    j.in = in, j.nin = nin, j.bufs = bufs;
    mirror__run(&s->team, mirror__cpu_all_reduce_job, &j);
    return MIRROR_OK;
}

/* Replica r's thread sums its own slice (reduce-scatter) or copies it
   into the others (all-gather). */
static int mirror__cpu_slices(mirror_strategy *s, mirror__job_fn job, void *const *bufs, size_t slice, int format,
                              size_t size)
{
    mirror__reduce_job j = mirror__reduce_job_of(s, 0);
    j.any = bufs, j.slice = slice, j.format = format, j.size = size;
    mirror__run(&s->team, job, &j);
    return MIRROR_OK;
}

static int mirror__cpu_reduce_scatter(mirror_strategy *s, void *const *bufs, size_t slice, int format,
                                      mirror_error *err)
{
    (void)err;
    return mirror__cpu_slices(s, mirror__cpu_reduce_scatter_job, bufs, slice, format, 0);
}

static int mirror__cpu_all_gather(mirror_strategy *s, void *const *bufs, size_t slice, size_t size, mirror_error *err)
{
    (void)err;
    return mirror__cpu_slices(s, mirror__cpu_all_gather_job, bufs, slice, 0, size);
}

MIRROR__NAMED_BEGIN
static const mirror__reducer mirror__cpu_reducer = {
    .name = "cpu-ordered",
    .all_reduce_sum = mirror__cpu_all_reduce,
    .broadcast = mirror__cpu_broadcast,
    .all_reduce_half = mirror__cpu_all_reduce_half,
    .sum_list = mirror__cpu_sum_list,
    .reduce_scatter = mirror__cpu_reduce_scatter,
    .all_gather = mirror__cpu_all_gather,
};
MIRROR__NAMED_END

static int mirror__check_bufs(float *const *bufs, size_t replicas, size_t n, const char *what,
                              mirror_error *err)
{
    size_t r;
    if (!bufs) return mirror__error(err, MIRROR_ERR_ARGUMENT, "%s: bufs is NULL", what);
    for (r = 0; r < replicas && n; r++)
        if (!bufs[r]) return mirror__error(err, MIRROR_ERR_ARGUMENT, "%s: bufs[%zu] is NULL", what, r);
    return MIRROR_OK;
}

MIRROR_API int mirror_all_reduce_sum(mirror_strategy *s, float *const *bufs, size_t n)
{
    int rc;
    if (!s) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_all_reduce_sum: strategy is NULL");
    if ((rc = mirror__check_bufs(bufs, s->replicas, n, "mirror_all_reduce_sum", NULL)) ||
        (rc = mirror__enter(s, NULL, "mirror_all_reduce_sum")))
        return rc;
    rc = n ? s->reducer->all_reduce_sum(s, bufs, n, NULL) : MIRROR_OK;
    mirror__leave(s);
    return rc;
}

MIRROR_API int mirror_broadcast(mirror_strategy *s, float *const *bufs, size_t n, size_t root)
{
    int rc;
    if (!s) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_broadcast: strategy is NULL");
    if (root >= s->world)
        return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_broadcast: root %zu of %zu replicas",
                             root, s->world);
    if ((rc = mirror__check_bufs(bufs, s->replicas, n, "mirror_broadcast", NULL)) ||
        (rc = mirror__enter(s, NULL, "mirror_broadcast")))
        return rc;
    rc = n ? s->reducer->broadcast(s, bufs, n, root, NULL) : MIRROR_OK;
    mirror__leave(s);
    return rc;
}

/* Deterministic mode's sum, over every chunk's gradient arena of every
   replica of every process in chunk order (onto the total of the
   micro-batches before: `onto`), into every replica's r->grads; mixed
   precision then narrows that total into the 16-bit gradient. The sum is
   the strategy's fp32 sum of the list of chunk arenas in list order: in
   one process its reducer's sum_list (CPU: the threads' element ranges;
   GPUs: on the first GPU, as the copy reducer sums), across processes the
   rank-order fold, which starts on rank 0 from the total before. */
static int mirror__sum_chunks(mirror_model *m, int onto)
{
    mirror_strategy *s = m->s;
    size_t r, q, nin = 0, keep = 0, len = m->nslots;
    int rc;
    if (onto && s->rank == 0) m->update.chunk_owner[nin] = 0, m->update.chunk_in[nin++] = m->rep[0].grads;
    for (r = 0; r < s->replicas; r++)
        for (q = 0; q < m->rep[r].nchunks; q++)
            m->update.chunk_owner[nin] = r, m->update.chunk_in[nin++] = mirror__chunk_grads(m, &m->rep[r], q);
    rc = s->procs->sum_list(s, m->update.chunk_in, m->update.chunk_owner, nin, m->bufs.grads, m->nslots, &keep, &len,
                            &m->err);
    for (r = 0; rc == MIRROR_OK && m->format && r < s->replicas; r++) /* scattered: this process's slice */
        m->be->narrow(m->rep[r].dev, m->rep[r].grad16 + keep, m->rep[r].grads + keep, len, m->format);
    return rc;
}

/* The plan's reduce steps (see mirror__update_plan): the all-reduce of a
   step's gradients, given this process's result so far (rc), after the
   step's last micro-batch (`last`) or, in deterministic mode, after each
   (`onto`: onto the sum of the micro-batches before). */

/* Nothing to send: the check sums the slices (sharded on the host, fp32,
   in one process: mirror__host_sum_check_job). */
static int mirror__reduce_none(mirror_model *m, int rc, int onto, int last)
{
    (void)m, (void)onto, (void)last;
    return rc;
}

/* The whole gradient into every replica, or the wait for the buckets that
   backward has handed to the reducer. */
static int mirror__reduce_all(mirror_model *m, int rc, int onto, int last)
{
    mirror_strategy *s = m->s;
    (void)onto, (void)last;
    if (m->buckets.on) { /* summed in buckets during backward: what follows waits for them */
        size_t r;
        for (r = 0; r < s->replicas; r++) m->be->buckets_done(m->rep[r].dev);
        return rc;
    }
    if (rc) return rc;
    if (m->format) return s->reducer->all_reduce_half(s, m->bufs.grad16, m->nslots, m->format, &m->err);
    return s->reducer->all_reduce_sum(s, m->bufs.grads, m->nslots, &m->err);
}

/* Sharded across devices: each replica's slice alone (see
   mirror__slices_update). */
static int mirror__reduce_slices(mirror_model *m, int rc, int onto, int last)
{
    mirror_strategy *s = m->s;
    (void)onto, (void)last;
    if (rc) return rc;
    return m->format ? s->reducer->reduce_scatter(s, (void *const *)m->bufs.grad16, m->plan.slice, m->format, &m->err)
                     : s->reducer->reduce_scatter(s, (void *const *)m->bufs.grads, m->plan.slice, 0, &m->err);
}

/* Deterministic mode, in one process: the chunks' sum, after each
   micro-batch. */
static int mirror__reduce_chunks(mirror_model *m, int rc, int onto, int last)
{
    (void)last;
    return rc ? rc : mirror__sum_chunks(m, onto);
}

/* Several processes: the reduction always runs, carrying this process's
   result so far and its stop flag to the others (see >>processes): a
   failure anywhere fails the step everywhere; the step's last reduction
   is a reduce-scatter when the update is sharded across processes. */
static int mirror__reduce_processes(mirror_model *m, int rc, int onto, int last)
{
    mirror_strategy *s = m->s;
    int reduced;
    s->procs->carry(s, rc, m->fit.stop && *m->fit.stop, m->plan.across && last);
    reduced = m->plan.chunk ? mirror__sum_chunks(m, onto)
              : m->format   ? s->reducer->all_reduce_half(s, m->bufs.grad16, m->nslots, m->format, &m->err)
                            : s->reducer->all_reduce_sum(s, m->bufs.grads, m->nslots, &m->err);
    return reduced ? reduced : rc; /* this process's own failure fails its step too */
}

/* What rank 0 alone does (saving a checkpoint): whether this process is
   the one, and its result for every process. One process: it is, and the
   result is its own. */
static int mirror__leads(const mirror_model *m) { return m->s->rank == 0; }

static int mirror__from_leader(mirror_model *m, int rc) { return m->s->procs->share(m->s, rc, &m->err); }

/* The file m's parameters were loaded from (mirror_weights_source), in
   words, for messages that compare processes. */
static const char *mirror__source_words(const mirror_model *m, char *words, size_t size)
{
    if (!m->source.told.path) snprintf(words, size, "no file");
    else
        snprintf(words, size, "the %s %s (crc32 %08lx)", m->source.told.checkpoint ? "checkpoint" : "weights file",
                 m->source.told.path, (unsigned long)m->source.told.crc32);
    return words;
}

/* What every process does that may fail in one (loading a checkpoint):
   failed anywhere, it fails everywhere. */
static int mirror__all_agree(mirror_model *m, int rc)
{
    char note[200], words[180];
    snprintf(note, sizeof note, "parameters from %s", mirror__source_words(m, words, sizeof words));
    return m->s->procs->agree(m->s, rc, note, &m->err);
}

/* What every process must have alike (items): one that differs fails
   every process, with a message that names it and the ranks that differ
   from rank 0. One process: nothing to compare. */
static int mirror__processes_agree(mirror_model *m, const mirror__agreed *items, size_t n, const char *what)
{
    char note[200], words[180];
    snprintf(note, sizeof note, "parameters from %s", mirror__source_words(m, words, sizeof words));
    return m->s->procs->compare(m->s, items, n, what, note, &m->err);
}

/* An item's name, then its parts added to its hash. */
static void mirror__agree_on(mirror__agreed *a, const char *what)
{
    a->what = what;
    a->hash = 0;
    a->told = NULL;
}

static void mirror__agree_add(mirror__agreed *a, const void *v, size_t size)
{
    a->hash = mirror__hash(a->hash, v, size);
}
static void mirror__agree_count(mirror__agreed *a, uint64_t v) { mirror__agree_add(a, &v, sizeof v); }
static void mirror__agree_float(mirror__agreed *a, float v) { mirror__agree_add(a, &v, sizeof v); }

/* This process's metric sums into every process's (one process: as they are). */
static int mirror__sum_processes(mirror_model *m, mirror_metrics *sum)
{
    double v[3];
    int rc;
    v[0] = sum->loss_sum, v[1] = (double)sum->correct, v[2] = (double)sum->count;
    if ((rc = m->s->procs->sum_doubles(m->s, v, 3, "metrics across processes", &m->err))) return rc;
    sum->loss_sum = v[0], sum->correct = (size_t)v[1], sum->count = (size_t)v[2];
    return MIRROR_OK;
}

// >>loss scaling ------------------------------------------------------------
/* The loss scaler of mixed precision and the guard of fp32 (both a
   mirror_loss_scale_state on each replica's device): its settings, its
   state read and written, and the verdict of a step that met Inf or NaN. */

/* The loss scaler's settings make sense: a message into err, or MIRROR_OK. */
static int mirror__check_loss_scale(const mirror_model_desc *d, mirror_error *err)
{
    const mirror_loss_scale_desc *ls = &d->loss_scale;
    if ((int)d->precision < 0 || d->precision > MIRROR_PRECISION_BF16)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_create: unknown precision %d",
                             (int)d->precision);
    if (d->precision == MIRROR_PRECISION_FP32) {
        if (ls->kind != MIRROR_SCALE_DEFAULT && ls->kind != MIRROR_SCALE_NONE)
            return mirror__error(err, MIRROR_ERR_ARGUMENT,
                                 "mirror_model_create: loss scaling needs precision fp16 or bf16 "
                                 "(fp32 gradients do not underflow)");
        return MIRROR_OK;
    }
    if ((int)ls->kind < 0 || ls->kind > MIRROR_SCALE_NONE)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_create: unknown loss scaling %d",
                             (int)ls->kind);
    if (mirror__bad_float(ls->min_scale, 1e-30f, 1e30f) || mirror__bad_float(ls->max_scale, ls->min_scale, 1e30f) ||
        (ls->kind == MIRROR_SCALE_NONE && ls->init_scale != 1.0f) ||
        /* a static scale below min_scale underflows the gradients to zero:
           it would train nothing, without an error */
        (ls->kind == MIRROR_SCALE_STATIC ? mirror__bad_float(ls->init_scale, ls->min_scale, 1e30f)
                                         : mirror__bad_float(ls->init_scale, ls->min_scale, ls->max_scale)) ||
        mirror__bad_float_oc(ls->growth_factor, 1.0f, 1e6f) ||
        !(ls->backoff_factor > 0.0f && ls->backoff_factor < 1.0f))
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_model_create: loss scale settings out of range (%s scaling, "
                             "init %.9g in [min %.9g, max %.9g], growth %.9g in (1, 1e6], backoff %.9g in (0, 1))",
                             mirror_loss_scaling_name(ls->kind), (double)ls->init_scale,
                             (double)ls->min_scale, (double)ls->max_scale, (double)ls->growth_factor,
                             (double)ls->backoff_factor);
    return MIRROR_OK;
}

MIRROR_API const char *mirror_loss_scaling_name(mirror_loss_scaling k)
{
    switch (k) {
    case MIRROR_SCALE_DEFAULT: return "default";
    case MIRROR_SCALE_DYNAMIC: return "dynamic";
    case MIRROR_SCALE_STATIC: return "static";
    case MIRROR_SCALE_NONE: return "none";
    }
    return "unknown";
}

/* Every replica's loss scaler state from st. */
static int mirror__set_scaler(mirror_model *m, const mirror_loss_scale_state *st)
{
    size_t r;
    for (r = 0; r < m->s->replicas; r++) {
        mirror__replica *p = &m->rep[r];
        m->be->bind(p->dev);
        m->be->host_wait(p->dev);
        *p->host_scaler = *st;
        m->be->upload(p->dev, p->scaler, p->host_scaler, sizeof *st);
        m->be->host_wait(p->dev);
    }
    return mirror__device_status(m);
}

/* Replica 0's loss scaler state into *st (waits for the device). */
static int mirror__get_scaler(mirror_model *m, mirror_loss_scale_state *st)
{
    mirror__replica *p = &m->rep[0];
    m->be->bind(p->dev);
    m->be->download(p->dev, p->host_scaler, p->scaler, sizeof *st);
    *st = *p->host_scaler;
    return mirror__device_status(m);
}

static int mirror__loss_scale_get(mirror_model *m, mirror_loss_scale_state *out)
{
    int rc;
    if ((rc = mirror__check_built(m, "mirror_loss_scale_get"))) return rc;
    if (!out) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_loss_scale_get: out is NULL");
    if (!m->format)
        return mirror__fail(m, MIRROR_ERR_STATE, "mirror_loss_scale_get: an fp32 model has no loss scaler");
    return mirror__get_scaler(m, out);
}

MIRROR_API int mirror_loss_scale_get(mirror_model *m, mirror_loss_scale_state *out)
{
    MIRROR__LOCKED(m, "mirror_loss_scale_get", mirror__loss_scale_get(m, out));
}

/* After a skipped step, with report_nonfinite: the first layer, from the
   loss back, and the first replica whose own gradient (before the
   all-reduce) is not finite in 16 bits. Waits for the device. */
static void mirror__report_nonfinite(mirror_model *m, const mirror_loss_scale_state *st)
{
    char msg[256];
    size_t i, r, q, j, found_layer = m->nlayers, found_rep = 0;
    float *host = (float *)mirror__alloc(m->nslots, sizeof(float));
    if (!host) {
        mirror__log(MIRROR_LOG_NOTICE, "a step was skipped; no memory to find the non-finite layer");
        return;
    }
    for (r = 0; r < m->s->replicas; r++) /* the replica's own gradient: in deterministic mode, its chunks' */
        for (q = 0; q < mirror__nchunks(m, &m->rep[r]); q++) {
            m->be->download(m->rep[r].dev, host, mirror__chunk_grads(m, &m->rep[r], q), m->nslots * sizeof(float));
            for (i = m->nlayers; i-- > 0 && (found_layer == m->nlayers || i > found_layer);) {
                const mirror__layer *l = &m->layers[i];
                for (j = 0; j < l->n_w + l->n_b; j++)
                    if (!mirror_hd_finite(mirror_hd_round(host[j < l->n_w ? l->w_off + j : l->b_off + j - l->n_w],
                                                          m->format)))
                        break;
                if (j < l->n_w + l->n_b) {
                    found_layer = i;
                    found_rep = r;
                    break;
                }
            }
        }
    MIRROR_FREE(host);
    if (found_layer < m->nlayers)
        snprintf(msg, sizeof msg,
                 "step %llu skipped: the gradient of layer %zu (%s) on replica %zu is not finite; "
                 "loss scale %g -> %g",
                 (unsigned long long)m->steps, found_layer, mirror__kinds[m->layers[found_layer].kind].name,
                 found_rep, (double)st->last_scale, (double)st->scale);
    else
        snprintf(msg, sizeof msg,
                 "step %llu skipped: every replica's gradient is finite, their sum is not; "
                 "loss scale %g -> %g",
                 (unsigned long long)m->steps, (double)st->last_scale, (double)st->scale);
    mirror__log(MIRROR_LOG_NOTICE, msg);
}

/* fp32, where the host reads the device: a non-finite step fails the call.
   Its guard is cleared and the step count goes back to the steps applied,
   so that the model goes on (if asked to) from the last finite step. */
static int mirror__guard_verdict(mirror_model *m, const char *what)
{
    mirror_loss_scale_state st;
    int rc;
    if ((rc = mirror__get_scaler(m, &st)) || !st.found_nonfinite) return rc;
    m->steps = st.applied;
    st.found_nonfinite = 0;
    if ((rc = mirror__set_scaler(m, &st))) return rc;
    return mirror__fail(m, MIRROR_ERR_NOT_FINITE,
                        "%s: step %llu: the loss or the reduced gradient is not finite (Inf or NaN): the data holds "
                        "Inf or NaN, or training diverged (too high a learning rate?); nothing of that step was "
                        "applied, the parameters are those after step %llu",
                        what, (unsigned long long)st.applied + 1, (unsigned long long)st.applied);
}

/* Where the host reads the device anyway: in fp32 the guard's verdict; in
   mixed precision the step fails once max_consecutive_skips steps in a row
   were skipped. */
static int mirror__scaler_verdict(mirror_model *m, const char *what)
{
    mirror_loss_scale_state st;
    const mirror_loss_scale_desc *d = &m->desc.loss_scale;
    int rc;
    if (!m->format) return mirror__guard_verdict(m, what);
    if ((rc = mirror__get_scaler(m, &st))) return rc;
    if (st.consecutive_skips < d->max_consecutive_skips) return MIRROR_OK;
    return mirror__fail(m, MIRROR_ERR_NOT_FINITE,
                        "%s: the last %u steps were skipped, their gradients not finite (loss scale %g, "
                        "%s scaling, minimum %g): the model diverged or the data holds Inf or NaN; "
                        "parameters are those of the last finite step",
                        what, st.consecutive_skips, (double)st.scale, mirror_loss_scaling_name(d->kind),
                        (double)d->min_scale);
}

// >>optimizers --------------------------------------------------------------
/* The update alone: the schedule's learning rate, the optimizer state's
   layout, clipping, the update of every parameter on every replica, and
   the sharded updates (on the host, across devices, across processes):
   the update plan's check, update and gather steps. */

/* What a replica's arenas hold, as the API and checkpoints name it. */
enum { MIRROR__PARAMS, MIRROR__GRADS, MIRROR__STATE };

/* The optimizer state's arrays: Adam's two moments, momentum's one, or none. */
static size_t mirror__state_copies(const mirror_model *m) { return m->nslots ? m->sizes.nstate / m->nslots : 0; }

/* The floats of optimizer state a replica holds: every parameter's, or
   (sharded across devices) its slice's alone. */
static size_t mirror__state_floats(const mirror_model *m)
{
    return m->plan.sharded == MIRROR__SHARDED_DEVICES && m->nslots ? m->sizes.nstate / m->nslots * m->plan.slice
                                                                   : m->sizes.nstate;
}

/* Replica r's optimizer state, copy c (Adam: 0 the first moment, 1 the
   second), at parameter slot off (in r's slice when sharded across devices). */
static float *mirror__state_at(const mirror_model *m, const mirror__replica *r, size_t c, size_t off)
{
    if (m->plan.sharded != MIRROR__SHARDED_DEVICES) return r->state + c * m->nslots + off;
    return r->state + c * m->plan.slice + (off - (size_t)(r - m->rep) * m->plan.slice);
}

/* A schedule's parameters, each in its range. */
static int mirror__check_schedule(const mirror_optimizer_desc *o, mirror_error *err)
{
    const char *why = NULL;
    if ((int)o->schedule < 0 || o->schedule > MIRROR_LR_CALLBACK)
        why = "unknown schedule";
    else if (o->schedule == MIRROR_LR_STEP && !o->step_size)
        why = "MIRROR_LR_STEP needs step_size >= 1";
    else if (o->schedule == MIRROR_LR_STEP && mirror__bad_float_oc(o->gamma, 0.0f, 1.0f))
        why = "MIRROR_LR_STEP needs gamma in (0, 1]";
    else if (o->schedule == MIRROR_LR_COSINE && o->total_steps <= o->warmup)
        why = "MIRROR_LR_COSINE needs total_steps beyond the warmup";
    else if (o->schedule == MIRROR_LR_COSINE && mirror__bad_float(o->min_lr, 0.0f, o->lr))
        why = "MIRROR_LR_COSINE needs min_lr in [0, lr]";
    else if (o->schedule == MIRROR_LR_CALLBACK && !o->lr_fn)
        why = "MIRROR_LR_CALLBACK needs lr_fn";
    if (!why) return MIRROR_OK;
    return mirror__error(err, MIRROR_ERR_ARGUMENT,
                         "mirror_model_create: learning-rate schedule: %s (schedule %d, step_size %llu, gamma %g, "
                         "warmup %llu, total_steps %llu, min_lr %g, lr %g)",
                         why, (int)o->schedule, (unsigned long long)o->step_size, (double)o->gamma,
                         (unsigned long long)o->warmup, (unsigned long long)o->total_steps, (double)o->min_lr,
                         (double)o->lr);
}

/* The learning rate of step s >= 1 into *lr: a callback's must be a
   finite rate >= 0. */
static int mirror__schedule(mirror_model *m, uint64_t s, float *lr)
{
    const mirror_optimizer_desc *o = &m->desc.optimizer;
    float called = o->schedule == MIRROR_LR_CALLBACK ? o->lr_fn(o->lr_user, s) : 0.0f;
    if (!(called >= 0.0f && called <= 3.4e38f))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "step %llu: the learning-rate callback returned %g: a rate must be finite and >= 0; "
                            "nothing of that step was applied",
                            (unsigned long long)s, (double)called);
    *lr = mirror_hd_schedule_lr((int)o->schedule, o->lr, s, o->warmup, o->step_size, o->gamma, o->total_steps,
                                o->min_lr, called);
    return MIRROR_OK;
}

MIRROR_API float mirror_current_lr(mirror_model *m)
{
    float lr = 0.0f;
    if (m && m->built) mirror__schedule(m, m->steps + 1, &lr);
    return lr;
}

MIRROR_API float mirror_last_grad_norm(mirror_model *m)
{
    mirror_loss_scale_state st;
    if (!m || !m->built || m->desc.optimizer.clip_norm <= 0.0f || mirror__get_scaler(m, &st)) return 0.0f;
    return st.grad_norm;
}

/* The step's tick (mirror__tick) into replica r's device memory: the
   update reads its learning rate and bias corrections there. */
static void mirror__set_tick(mirror_model *m, mirror__replica *r)
{
    mirror__tick t;
    const mirror_optimizer_desc *o = &m->desc.optimizer;
    memset(&t, 0, sizeof t);
    t.step = m->steps, t.row0 = r->row0, t.lr = m->lr;
    mirror_hd_adam_bias(o->beta1, o->beta2, m->steps, &t.bc1, &t.bc2_sqrt);
    m->be->set(r->dev, r->tick, &t, sizeof t);
}

/* The fp32 update of parameters [off, off + n) of replica r from its
   reduced gradient, unless r's guard holds a non-finite step. */
static void mirror__update_fp32(mirror_model *m, mirror__replica *r, size_t off, size_t n)
{
    const mirror_optimizer_desc *o = &m->desc.optimizer;
    const float *g = r->grads + off;
    if (o->kind == MIRROR_OPT_SGD)
        m->be->sgd(r->dev, r->params + off, m->sizes.nstate ? mirror__state_at(m, r, 0, off) : NULL, g, n, r->scaler,
                   r->tick, o->momentum, o->weight_decay, o->nesterov);
    else
        m->be->adam(r->dev, r->params + off, mirror__state_at(m, r, 0, off), mirror__state_at(m, r, 1, off), g, n,
                    r->scaler, r->tick, o->beta1, o->beta2, o->eps, o->weight_decay, o->kind == MIRROR_OPT_ADAMW);
}

/* Mixed precision, on replica r's device and stream, with no wait for it,
   once r->scaler->found_nonfinite holds the step's verdict: the fused
   update of parameters [off, off + n), which does nothing on a non-finite
   step (the working copy is then as it was) and writes the working copy
   the layers read in the same pass; then the scaler's update. */
static void mirror__update_mixed(mirror_model *m, mirror__replica *r, size_t off, size_t n)
{
    const mirror_optimizer_desc *o = &m->desc.optimizer;
    int f = m->format;
    if (o->kind == MIRROR_OPT_SGD)
        m->be->sgd_mixed(r->dev, r->params + off, m->sizes.nstate ? mirror__state_at(m, r, 0, off) : NULL,
                         r->work16 + off, r->grad16 + off, n, f, r->scaler, r->tick, o->momentum, o->weight_decay,
                         o->nesterov);
    else
        m->be->adam_mixed(r->dev, r->params + off, mirror__state_at(m, r, 0, off), mirror__state_at(m, r, 1, off),
                          r->work16 + off, r->grad16 + off, n, f, r->scaler, r->tick, o->beta1,
                          o->beta2, o->eps, o->weight_decay, o->kind == MIRROR_OPT_ADAMW);
    m->be->scaler_update(r->dev, r->scaler, &m->desc.loss_scale);
}

/* Gradient clipping, when asked: replica r's norm of the whole reduced
   gradient (every replica holds it: the same sums, the same norm) and its
   factor, which the update then applies. */
static void mirror__clip(mirror_model *m, mirror__replica *r)
{
    float max_norm = m->desc.optimizer.clip_norm;
    if (max_norm > 0.0f)
        m->be->clip(r->dev, r->scaler, m->format ? NULL : r->grads, m->format ? r->grad16 : NULL, m->nslots,
                    m->format, max_norm);
}

/* The update as the host queues it on replica r (no sharding): the check
   of the whole reduced gradient, clipping, the optimizer. */
static void mirror__queue_update(mirror_model *m, mirror__replica *r)
{
    if (m->format) {
        m->be->check(r->dev, r->scaler, r->grad16, m->nslots, m->format);
        mirror__clip(m, r);
        mirror__update_mixed(m, r, 0, m->nslots);
        return;
    }
    m->be->check32(r->dev, r->scaler, r->grads, m->nslots, r->tick);
    mirror__clip(m, r);
    mirror__update_fp32(m, r, 0, m->nslots);
}

/* The sharded update (ZeRO stage 1 on shared memory). Where every
   replica's arenas are host memory (the CPU backend), replica w owns slice
   w of the parameters (mirror_shard of nparams over the replicas): it sums
   its slice of every replica's gradient in replica order (the
   reduce-scatter: the additions of the all-reduce, so the same sums) and
   checks it; with the verdict of every slice, it applies the optimizer to
   that slice only, and copies the new values into the other replicas (the
   all-gather). Two jobs, since the verdict needs every slice. Each parameter is updated once a
   step rather than once per replica, the optimizer state lives once (every
   replica's state pointer is replica 0's arena), and the replicas stay
   bitwise equal: each slice is computed once, by one thread, and copied. */
/* Copies parameters [off, off + n) of replica `from` (fp32 masters and, in
   mixed precision, the working copy) into the others. */
static void mirror__gather_slice(mirror_model *m, size_t from, size_t off, size_t n)
{
    const mirror__replica *src = &m->rep[from];
    size_t r;
    for (r = 0; r < m->s->replicas; r++) {
        mirror__replica *dst = &m->rep[r];
        if (r == from || !n) continue;
        memcpy(dst->params + off, src->params + off, n * sizeof(float));
        if (!m->format) continue;
        memcpy(dst->work16 + off, src->work16 + off, n * sizeof(uint16_t));
    }
}

/* The all-reduce's edges, marked by the host on every replica around the
   reducer, and across processes around the sharded update too
   (mirror__across_check, mirror__across_gather_params); unless the
   replicas' own jobs mark them (the plan's in_check: the sharded update's
   reduce-scatter, mirror__host_sum_check_job). */
static void mirror__mark_reduce(mirror_model *m, int slot)
{
    size_t r;
    for (r = 0; m->trace.steps && !m->plan.in_check && r < m->s->replicas; r++)
        m->be->mark(m->rep[r].dev, slot);
}

/* Replica w's slice: of every parameter, or sharded across processes of
   this process's (slots [pbegin, pbegin + plen), every slot in one). */
static void mirror__host_slice(const mirror_model *m, size_t w, size_t *begin, size_t *count)
{
    mirror_shard(m->plan.plen, m->s->replicas, w, begin, count);
    *begin += m->plan.pbegin;
}

/* Whether replica r's reduced gradient holds an Inf or NaN in [begin,
   begin + count) (mixed precision: unscaled). */
static uint32_t mirror__nonfinite(mirror_model *m, mirror__replica *r, size_t begin, size_t count)
{
    mirror_loss_scale_state st = *r->scaler;
    if (!m->format) return !mirror__all_finite(r->grads + begin, count);
    st.found_nonfinite = 0;
    m->be->check(r->dev, &st, r->grad16 + begin, count, m->format);
    return st.found_nonfinite;
}

/* Sharded across processes: worker w checks its share of this process's
   slice (whole blocks of MIRROR__NORM_BLOCK) into found[w] and, with
   clipping, puts each block's sum of squares in its place in `parts`
   (the layout of gather_slices, >>structs): the sums mirror__cpu_squares
   makes of the same blocks in one process. */
static void mirror__across_check_job(void *ctx, size_t w)
{
    enum { B = MIRROR__NORM_BLOCK };
    mirror_model *m = ((const mirror__job *)ctx)->m;
    mirror__replica *r = &m->rep[w];
    size_t b, c, k, begin, last = m->plan.pbegin + m->plan.plen, end = last, first, blocks;
    double *part;
    mirror__process_blocks(m->nslots, m->s->processes, m->s->rank, &first, &blocks);
    part = m->update.parts + first + m->s->rank + 1; /* behind this process's flag */
    mirror_shard(blocks, m->s->replicas, w, &b, &c);
    begin = MIRROR__MIN(end, m->plan.pbegin + b * B);
    end = MIRROR__MIN(end, m->plan.pbegin + (b + c) * B);
    m->update.found[w] = mirror__nonfinite(m, r, begin, end - begin);
    for (k = b; m->desc.optimizer.clip_norm > 0.0f && k < b + c; k++) {
        size_t lo = m->plan.pbegin + k * B;
        part[k] = mirror__sum_squares(m->format ? NULL : r->grads, m->format ? r->grad16 : NULL, lo,
                                      MIRROR__MIN(lo + B, last), m->format, 1.0f / r->scaler->scale);
    }
}

/* First each replica checks its slice of the reduced gradient into
   found[worker]: summed already by mixed precision's 16-bit all-reduce,
   the reduction across processes or deterministic mode's chunks. */
static void mirror__host_check_job(void *ctx, size_t worker)
{
    mirror_model *m = ((const mirror__job *)ctx)->m;
    size_t begin, count;
    mirror_shard(m->nslots, m->s->replicas, worker, &begin, &count);
    m->update.found[worker] = mirror__nonfinite(m, &m->rep[worker], begin, count);
}

/* fp32 in one process forms the slice here, the reduce-scatter: the sum of
   every replica's slice in replica order (the additions of the all-reduce,
   so the same sums), written back into every replica's gradient arena, as
   after an all-reduce; then checks it. */
static void mirror__host_sum_check_job(void *ctx, size_t worker)
{
    mirror_model *m = ((const mirror__job *)ctx)->m;
    mirror__replica *r = &m->rep[worker];
    float acc[MIRROR__REDUCE_CHUNK];
    size_t begin, count, end, len;
    int finite = 1;
    if (m->trace.steps) m->be->mark(r->dev, 4);
    mirror_shard(m->nslots, m->s->replicas, worker, &begin, &count);
    for (end = begin + count; begin < end; begin += len) {
        len = MIRROR__MIN(MIRROR__REDUCE_CHUNK, end - begin);
        mirror__sum_chunk(acc, m->bufs.grads, m->s->replicas, m->bufs.grads, m->s->replicas, begin, len);
        finite &= mirror__all_finite(acc, len);
    }
    m->update.found[worker] = !finite;
    if (m->trace.steps) m->be->mark(r->dev, 5);
}

/* Then every replica takes the verdict of all slices into its guard or
   scaler, updates its own slice (nothing on a non-finite step) and copies
   the slice into the others (the all-gather). `clip`: the clipping norm
   is its own to take (across processes it is the verdict's). */
static void mirror__host_update(mirror_model *m, size_t worker, int clip)
{
    mirror__replica *r = &m->rep[worker];
    size_t begin, count, end, len, i;
    uint32_t found = 0;
    mirror__set_tick(m, r);
    mirror__host_slice(m, worker, &begin, &count);
    for (i = 0; i < m->s->replicas; i++) found |= m->update.found[i];
    if (m->format) {
        r->scaler->found_nonfinite |= found;
        if (clip) mirror__clip(m, r);
        mirror__update_mixed(m, r, begin, count);
        mirror__gather_slice(m, worker, begin, count);
        return;
    }
    mirror_hd_guard(r->scaler, !found, m->steps);
    if (clip) mirror__clip(m, r);
    for (end = begin + count; begin < end; begin += len) { /* each chunk copied while in cache */
        len = MIRROR__MIN(MIRROR__REDUCE_CHUNK, end - begin);
        mirror__update_fp32(m, r, begin, len);
        mirror__gather_slice(m, worker, begin, len);
    }
}

static void mirror__sharded_host_update_job(void *ctx, size_t worker)
{
    mirror_model *m = ((const mirror__job *)ctx)->m;
    if (m->trace.steps) m->be->mark(m->rep[worker].dev, 6);
    mirror__host_update(m, worker, 1);
    if (m->trace.steps) m->be->mark(m->rep[worker].dev, 7);
}

/* The plan's steps sharded on the host: the check (the slices summed
   there too, in_check), and the update with its all-gather. */
static int mirror__host_check(mirror_model *m, mirror__job *job)
{
    mirror__run(&m->s->team, mirror__host_check_job, job);
    return MIRROR_OK;
}

static int mirror__host_sum_check(mirror_model *m, mirror__job *job)
{
    mirror__run(&m->s->team, mirror__host_sum_check_job, job);
    return MIRROR_OK;
}

static int mirror__host_update_step(mirror_model *m, mirror__job *job)
{
    mirror__run(&m->s->team, mirror__sharded_host_update_job, job);
    return MIRROR_OK;
}

/* The update sharded across processes too (shard_update on, CPU
   replicas): ZeRO stage 1 over every replica of every process. The
   reduction is a reduce-scatter (the rank-order fold, whose last rank
   sends each process its slice alone: see >>processes), process p
   owns slice p (mirror__process_slice) and its replicas share it as they
   share the whole in one process (mirror__host_slice). Then:
   - the verdict: each process's non-finite flag and its blocks' sums of
     squares reach every process (one all-gather of doubles); the flags
     are or-ed, and the clipping norm adds the blocks' sums in block order,
     the additions mirror__cpu_squares makes in one process, so the norm
     and the verdict are one process's;
   - the update of each slice by its owner, with the optimizer state of
     that slice (the arena stays whole, every process reads a checkpoint's
     whole state, but only the slice is kept current);
   - the all-gather of the parameters (and mixed precision's working copy).
   The parameters are those of one process, bit for bit. The reduced
   gradient and the optimizer state are then current on each slice's
   owner alone (m->update.stale): whatever reads them whole (the API, checkpoints,
   mirror_check_replicas) gathers them first (mirror__gather_whole), in every
   process, as every call across processes runs. */
enum { MIRROR__STALE_GRADS = 1, MIRROR__STALE_STATE = 2 };

/* Each process's slice of `which` (the parameters and the working copy,
   the reduced gradient, or the optimizer state) from its owner into every
   process, and into each of this process's replicas. */
static int mirror__across_gather(mirror_model *m, int which)
{
    mirror_strategy *s = m->s;
    mirror__replica *r0 = &m->rep[0];
    size_t c, r, n = m->nslots, end = m->plan.pbegin + m->plan.plen;
    int rc = MIRROR_OK, half = which == MIRROR__GRADS && m->format;
    if (which == MIRROR__STATE) { /* one arena that the replicas share */
        for (c = 0; c < mirror__state_copies(m) && rc == MIRROR_OK; c++)
            rc = s->procs->gather_slices(s, r0->state + c * n, n, sizeof(float), 0, &m->err);
        return rc;
    }
    rc = half ? s->procs->gather_slices(s, r0->grad16, n, sizeof(uint16_t), 0, &m->err)
              : s->procs->gather_slices(s, which == MIRROR__GRADS ? r0->grads : r0->params, n, sizeof(float), 0,
                                        &m->err);
    if (rc == MIRROR_OK && which == MIRROR__PARAMS && m->format)
        rc = s->procs->gather_slices(s, r0->work16, n, sizeof(uint16_t), 0, &m->err);
    for (r = 1; rc == MIRROR_OK && r < s->replicas; r++) { /* the others' slices: around this process's */
        mirror__replica *q = &m->rep[r];
        size_t at[2], len[2], i;
        at[0] = 0, len[0] = m->plan.pbegin, at[1] = end, len[1] = n - end;
        for (i = 0; i < 2; i++) {
            if (which == MIRROR__GRADS) {
                if (half) memcpy(q->grad16 + at[i], r0->grad16 + at[i], len[i] * sizeof(uint16_t));
                else memcpy(q->grads + at[i], r0->grads + at[i], len[i] * sizeof(float));
                continue;
            }
            memcpy(q->params + at[i], r0->params + at[i], len[i] * sizeof(float));
            if (m->format) memcpy(q->work16 + at[i], r0->work16 + at[i], len[i] * sizeof(uint16_t));
        }
    }
    return rc;
}

/* The verdict (see above), after mirror__across_check_job: into
   found[0] (the others 0) and, with clipping, every replica's scaler. */
static int mirror__across_verdict(mirror_model *m)
{
    mirror_strategy *s = m->s;
    float max_norm = m->desc.optimizer.clip_norm;
    size_t r, p, k, first, blocks;
    double sum = 0.0, found = 0.0;
    int rc;
    for (r = 0; r < s->replicas; r++) found += m->update.found[r] != 0;
    mirror__process_blocks(m->nslots, s->processes, s->rank, &first, &blocks);
    m->update.parts[first + s->rank] = found;
    if ((rc = s->procs->gather_slices(s, m->update.parts, m->nslots, 0, 1, &m->err))) return rc;
    for (p = 0, found = 0.0; p < s->processes; p++) {
        const double *flag;
        mirror__process_blocks(m->nslots, s->processes, p, &first, &blocks);
        flag = m->update.parts + first + p;
        found += *flag;
        for (k = 0; k < blocks; k++) sum += flag[1 + k];
    }
    for (r = 0; r < s->replicas; r++) {
        mirror_loss_scale_state *st = m->rep[r].scaler;
        m->update.found[r] = r == 0 && found > 0.0;
        if (max_norm <= 0.0f) continue;
        st->grad_norm = (float)sqrt(sum); /* as mirror__cpu_clip */
        st->clip = mirror_hd_clip_factor(st->grad_norm, max_norm);
    }
    return MIRROR_OK;
}

/* The plan's steps of the update sharded across processes (see above),
   after the reduce-scatter: the check and the verdict, each process's
   update of its slice, and the all-gather of the parameters. The update's
   phase runs from the check to the all-gather. */
static int mirror__across_check(mirror_model *m, mirror__job *job)
{
    mirror__mark_reduce(m, 6);
    mirror__run(&m->s->team, mirror__across_check_job, job);
    return mirror__across_verdict(m);
}

static void mirror__across_update_job(void *ctx, size_t worker)
{
    mirror__host_update(((const mirror__job *)ctx)->m, worker, 0); /* the verdict's norm */
}

static int mirror__across_update(mirror_model *m, mirror__job *job)
{
    mirror__run(&m->s->team, mirror__across_update_job, job);
    m->update.stale = MIRROR__STALE_GRADS | MIRROR__STALE_STATE;
    return MIRROR_OK;
}

static int mirror__across_gather_params(mirror_model *m, mirror__job *job)
{
    int rc = mirror__across_gather(m, MIRROR__PARAMS);
    (void)job;
    mirror__mark_reduce(m, 7);
    return rc;
}

/* What the update sharded across processes keeps on its owners alone
   (`which`: MIRROR__GRADS or _STATE), gathered whole into every process
   before it is read; nothing otherwise. */
static int mirror__gather_whole(mirror_model *m, int which)
{
    int bit = which == MIRROR__GRADS ? MIRROR__STALE_GRADS : MIRROR__STALE_STATE, rc;
    if (!(m->update.stale & bit)) return MIRROR_OK;
    if ((rc = mirror__across_gather(m, which))) return rc;
    m->update.stale &= ~bit;
    return MIRROR_OK;
}

/* The sharded update across devices (ZeRO stage 1, where the replicas'
   arenas are apart: GPUs). The reduce-scatter has left replica r the sum
   of slice r of the gradient (slots [r slice, (r + 1) slice)). Each
   replica checks its slice and sums its squares (slice_stats); the
   reducer adds those two floats over the replicas, and every replica
   takes the whole gradient's verdict and norm from them (slice_verdict).
   Then replica r applies the optimizer to slice r alone, with the state of
   that slice alone (1/R of the state per replica), and the all-gather
   copies each slice into the others: the fp32 parameters, or in mixed
   precision the 16-bit working copy, which the layers read. The fp32 masters of mixed precision stay on
   their slice's owner: whatever reads them (the API, checkpoints) takes
   each slice from its owner (mirror__download_arena). The sums are the
   reducer's all-reduce sums, and each slice is updated once, so the
   parameters are those of the update without sharding; only the clipping
   norm adds its squares in another order (outside deterministic mode). */
/* Whether the clipping norm is summed slice by slice. Deterministic mode's
   gradient is whole on every replica (mirror__sum_chunks): its norm is
   taken over the whole, in one order whatever the replica count. */
static int mirror__slice_norm(const mirror_model *m) { return m->desc.optimizer.clip_norm > 0.0f && !m->plan.chunk; }

static void mirror__slice_stats_job(void *ctx, size_t worker)
{
    mirror_model *m = ((const mirror__job *)ctx)->m;
    mirror__replica *r = &m->rep[worker];
    size_t begin = worker * m->plan.slice;
    m->be->bind(r->dev);
    if (m->trace.steps) m->be->mark(r->dev, 6);
    m->be->slice_stats(r->dev, r->stats, m->format ? NULL : r->grads + begin, m->format ? r->grad16 + begin : NULL,
                       m->plan.slice, m->format, r->scaler, mirror__slice_norm(m));
}

static void mirror__slice_update_job(void *ctx, size_t worker)
{
    mirror_model *m = ((const mirror__job *)ctx)->m;
    mirror__replica *r = &m->rep[worker];
    const mirror_optimizer_desc *o = &m->desc.optimizer;
    m->be->bind(r->dev);
    mirror__set_tick(m, r);
    m->be->slice_verdict(r->dev, r->scaler, r->stats, r->tick, m->format, mirror__slice_norm(m) ? o->clip_norm : 0.0f);
    if (m->plan.chunk) mirror__clip(m, r);
    if (m->format) {
        mirror__update_mixed(m, r, worker * m->plan.slice, m->plan.slice);
        return;
    }
    mirror__update_fp32(m, r, worker * m->plan.slice, m->plan.slice);
}

static void mirror__slice_gathered_job(void *ctx, size_t worker)
{
    mirror_model *m = ((const mirror__job *)ctx)->m;
    mirror__replica *r = &m->rep[worker];
    m->be->bind(r->dev);
    if (m->trace.steps) m->be->mark(r->dev, 7);
}

/* The plan's steps sharded across devices: the slices' stats summed, the
   update of each slice, and the all-gather. */
static int mirror__slices_check(mirror_model *m, mirror__job *job)
{
    mirror_strategy *s = m->s;
    mirror__run(&s->team, mirror__slice_stats_job, job);
    return s->reducer->all_reduce_sum(s, m->bufs.stats, 2, &m->err);
}

static int mirror__slices_update(mirror_model *m, mirror__job *job)
{
    mirror__run(&m->s->team, mirror__slice_update_job, job);
    return MIRROR_OK;
}

static int mirror__slices_gather(mirror_model *m, mirror__job *job)
{
    mirror_strategy *s = m->s;
    int rc = m->format
                 ? s->reducer->all_gather(s, (void *const *)m->bufs.work16, m->plan.slice, sizeof(uint16_t), &m->err)
                 : s->reducer->all_gather(s, (void *const *)m->bufs.params, m->plan.slice, sizeof(float), &m->err);
    mirror__run(&s->team, mirror__slice_gathered_job, job);
    return rc;
}

MIRROR_API uint64_t mirror_optimizer_steps(const mirror_model *m)
{
    mirror_loss_scale_state st;
    if (!m || !m->built || !m->format) return m ? m->steps : 0;
    return mirror__get_scaler((mirror_model *)m, &st) == MIRROR_OK ? st.applied : 0;
}

// >>step --------------------------------------------------------------------
/* The training step, from the bottom up: the batch checked on the
   caller's thread, metrics, the timing marks, a replica's shard loaded,
   its pass queued (or recorded and replayed as a graph), batchnorm's pauses
   for the host, then mirror__train_micro, which runs the jobs on the
   replica threads (forward and backward, the all-reduce, the update) for
   each micro-batch, and mirror_train_step(s) at the end. */

/* Checks a batch against the model: sizes, pointers and every label. */
static int mirror__check_batch(mirror_model *m, const mirror_batch *b, const char *what, int need_y)
{
    size_t i;
    int rc;
    if ((rc = mirror__check_built(m, what))) return rc;
    if (!b) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: batch is NULL", what);
    if (b->n && !b->x) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: batch.x is NULL", what);
    if (!b->index && b->rows && b->rows < b->n) /* sample i is row i: the buffers end before the samples do */
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "%s: batch.n is %zu but batch.rows only %zu (without an index sample i is row i: "
                            "n must be at most rows, or rows 0)",
                            what, b->n, b->rows);
    for (i = 0; b->index && i < b->n; i++)
        if (b->index[i] >= b->rows)
            return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: index[%zu] = %zu is outside the %zu rows",
                                what, i, b->index[i], b->rows);
    if (!need_y || !b->n) return MIRROR_OK;
    if (m->desc.loss == MIRROR_LOSS_MSE) {
        if (!b->targets)
            return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: batch.targets is NULL (MSE loss)", what);
        return MIRROR_OK;
    }
    if (!b->labels)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: batch.labels is NULL (softmax cross-entropy)",
                            what);
    for (i = 0; i < b->n; i++) {
        int32_t y = b->labels[b->index ? b->index[i] : i];
        if (y < 0 || (size_t)y >= m->sizes.out)
            return mirror__fail(m, MIRROR_ERR_LABEL, "%s: label %ld of sample %zu is outside [0, %zu)",
                                what, (long)y, i, m->sizes.out);
    }
    return MIRROR_OK;
}

static void mirror__metrics_add(mirror_metrics *acc, double loss_sum, size_t correct, size_t count)
{
    acc->loss_sum += loss_sum;
    acc->correct += correct;
    acc->count += count;
}

/* The metric sums of every replica, added in replica order. */
static void mirror__collect(const mirror_model *m, mirror_metrics *acc)
{
    size_t r;
    for (r = 0; r < m->s->replicas; r++)
        mirror__metrics_add(acc, m->rep[r].loss_sum, m->rep[r].correct_sum, m->rep[r].count);
}

/* ---- the step's timing marks (read in >>inspection) ---- */

typedef struct mirror__span {
    uint64_t step;
    uint32_t replica, phase;
    double t0, t1; /* seconds since timing began */
} mirror__span;

static void mirror__span_push(mirror_model *m, uint64_t step, size_t replica, int phase, double t0, double t1)
{
    mirror__span *sp = &m->trace.spans[m->trace.next];
    sp->step = step, sp->replica = (uint32_t)replica, sp->phase = (uint32_t)phase;
    sp->t0 = t0 - m->trace.origin, sp->t1 = t1 - m->trace.origin;
    m->trace.next = (m->trace.next + 1) % m->trace.cap;
    if (m->trace.count < m->trace.cap) m->trace.count++;
}

/* After a compute job: each replica's gather, forward and backward. */
static void mirror__mark_compute(mirror_model *m, uint64_t step)
{
    double t[MIRROR__MARKS];
    size_t r;
    for (r = 0; m->trace.steps && r < m->s->replicas; r++) {
        m->be->marks(m->rep[r].dev, t, 4);
        mirror__span_push(m, step, r, MIRROR_PHASE_GATHER, t[0], t[1]);
        mirror__span_push(m, step, r, MIRROR_PHASE_FORWARD, t[1], t[2]);
        mirror__span_push(m, step, r, MIRROR_PHASE_BACKWARD, t[2], t[3]);
    }
}


/* After the update: each replica's all-reduce and update. */
static void mirror__mark_update(mirror_model *m, uint64_t step)
{
    double t[MIRROR__MARKS];
    size_t r;
    for (r = 0; m->trace.steps && r < m->s->replicas; r++) {
        m->be->marks(m->rep[r].dev, t, MIRROR__MARKS);
        mirror__span_push(m, step, r, MIRROR_PHASE_ALLREDUCE, t[4], t[5]);
        mirror__span_push(m, step, r, MIRROR_PHASE_UPDATE, t[6], t[7]);
    }
}

/* Sample `row` of the dataset, augmented into dst (every channel alike). */
static void mirror__augment_row(const mirror_model *m, const mirror__job *job, size_t row, const float *src,
                                float *dst)
{
    size_t c, y, x, h = m->desc.height, w = m->desc.width;
    long dy, dx;
    int flipped;
    mirror_hd_augment_draw(job->augment_key, row, job->augment_pad, job->augment_flip, &dy, &dx, &flipped);
    for (c = 0; c < m->desc.channels; c++, src += h * w)
        for (y = 0; y < h; y++)
            for (x = 0; x < w; x++) *dst++ = mirror_hd_augment_pixel(src, h, w, y, x, dy, dx, flipped);
}

static int mirror__resident_over(const mirror__resident *d, const mirror_batch *b)
{
    return d && d->dev && b->x == d->x && b->rows == d->rows && b->labels == d->labels && b->targets == d->targets;
}

/* The data on the device that batch b reads: what fit or evaluate keeps
   there (m->resident.at), or mirror_keep_data, when b is over its very arrays;
   else NULL. */
static const mirror__resident *mirror__resident_of(const mirror_model *m, const mirror_batch *b)
{
    return mirror__resident_over(m->resident.at, b)     ? m->resident.at
           : mirror__resident_over(m->resident.kept, b) ? m->resident.kept
                                                        : NULL;
}

/* Copies replica r's shard of the job's chunk into its arenas: gathered
   row by row into the replica's host buffers, then one upload each. The
   buffers come in two slots, taken in turn: while a GPU still computes on
   the last shard's slot, this one's copies run beside it. The input goes
   up in fp32; in mixed precision the device narrows it into the 16-bit
   input (the host gathers, the GPU converts). Where the batch's data are
   kept on the device (job->data), only the rows' indices go up, and the
   device gathers them, augmented, into the same buffers (mixed precision:
   from its 16-bit copy straight into the 16-bit input). */
static void mirror__load_shard(const mirror__job *job, mirror__replica *r)
{
    const mirror_model *m = job->m;
    const mirror_batch *b = job->batch;
    size_t i, in = m->sizes.in, out = m->sizes.out, S = r->count;
    int ce = m->desc.loss == MIRROR_LOSS_SOFTMAX_CE, with_y = job->mode != MIRROR__PREDICT, slot = r->slot ^= 1;
    float *targets = r->host_targets[slot], *x = r->host_x[slot];
    int32_t *labels = r->host_labels[slot];
    m->be->stage(r->dev, slot);
    if (job->data) {
        void *const *dev = job->data->dev + 2 * (size_t)(r - m->rep);
        for (i = 0; i < S; i++) {
            size_t k = job->offset + r->begin + i;
            r->host_index[slot][i] = (int64_t)(b->index ? b->index[k] : k);
        }
        if (S) m->be->upload_staged(r->dev, r->in_index[slot], r->host_index[slot], S * sizeof(int64_t));
        m->be->staged(r->dev, slot);
        r->labels = r->in_labels[slot], r->targets = r->in_targets[slot];
        if (!m->format) r->input = r->in_x[slot];
        if (!S) return;
        m->be->gather(r->dev, r->input, dev[0], r->in_index[slot], S, in, m->format ? 2 : 4, job->augment_key,
                      job->augment_pad, job->augment_flip, m->desc.height, m->desc.width);
        if (with_y)
            m->be->gather(r->dev, ce ? (void *)r->labels : (void *)r->targets, dev[1], r->in_index[slot], S,
                          ce ? 1 : out, 4, 0, 0, 0, 1, 1);
        return;
    }
    for (i = 0; i < S; i++) {
        size_t k = job->offset + r->begin + i, row = b->index ? b->index[k] : k;
        if (job->augment_flip || job->augment_pad)
            mirror__augment_row(m, job, row, b->x + row * in, x + i * in);
        else
            memcpy(x + i * in, b->x + row * in, in * sizeof(float));
        if (!with_y) continue;
        if (ce)
            labels[i] = b->labels[row];
        else
            memcpy(targets + i * out, b->targets + row * out, out * sizeof(float));
    }
    r->labels = r->in_labels[slot], r->targets = r->in_targets[slot];
    if (!m->format) r->input = r->in_x[slot];
    if (S) m->be->upload_staged(r->dev, r->in_x[slot], x, S * in * sizeof(float));
    if (S && with_y && ce) m->be->upload_staged(r->dev, r->labels, labels, S * sizeof(int32_t));
    if (S && with_y && !ce) m->be->upload_staged(r->dev, r->targets, targets, S * out * sizeof(float));
    m->be->staged(r->dev, slot);
    if (S && m->format) m->be->narrow(r->dev, (uint16_t *)r->input, r->in_x[slot], S * in, m->format);
}

/* The loss layer: per-sample loss, correct flags and the output gradient
   (divided by the global count) into delta[0]. The sums stay on the
   device (r->acc), or are wanted now: mirror__take_loss reads them, once
   the backward pass is queued behind them (a GPU then computes on while
   the host waits for the copy). */
static void mirror__loss(const mirror_model *m, mirror__replica *r, float inv_count, int now)
{
    const void *z = mirror__act(r, &m->layers[m->nlayers - 1]);
    size_t S = r->count;
    int ce = m->desc.loss == MIRROR_LOSS_SOFTMAX_CE;
    if (!S) return;
    const float *scale = m->format ? &r->scaler->scale : NULL; /* the loss scale */
    if (ce)
        m->be->softmax_ce(r->dev, r->delta[0], r->loss, r->correct, z, r->labels, S, m->sizes.out, inv_count,
                          scale);
    else
        m->be->mse(r->dev, r->delta[0], r->loss, z, r->targets, S, m->sizes.out, inv_count, scale);
    if (!now) m->be->accumulate(r->dev, r->acc, r->loss, ce ? r->correct : NULL, S);
}

/* The loss and correct sums of the shard into r->loss_sum and
   r->correct_sum (waits for the device). */
static void mirror__take_loss(const mirror_model *m, mirror__replica *r)
{
    size_t i, S = r->count;
    int ce = m->desc.loss == MIRROR_LOSS_SOFTMAX_CE;
    double total[2];
    if (!S) return;
    m->be->download(r->dev, r->host_loss, r->loss, S * sizeof(float));
    mirror__lanes_total(total, r->host_loss, NULL, S); /* accumulate's order: the same sums either way */
    r->loss_sum += total[0];
    if (!ce) return;
    m->be->download(r->dev, r->host_correct, r->correct, S * sizeof(int32_t));
    for (i = 0; i < S; i++) r->correct_sum += (size_t)r->host_correct[i];
}

/* A training pass as the host queues it (no batchnorm: in one piece). */
static void mirror__queue_pass(mirror_model *m, mirror__replica *r, const mirror__job *job)
{
    mirror__forward(m, r, r->count, 0, m->nlayers);
    mirror__loss(m, r, job->inv_count, job->metrics_now);
    mirror__backward(m, r, r->count, job->accumulate, m->nlayers - 1, (size_t)-1);
}

/* Frees one of replica r's graphs (and the emulation's copies). */
static void mirror__graph_clear(mirror_model *m, mirror__replica *r, mirror__graph *g)
{
    if (g->graph && m->be->graph_free) m->be->graph_free(r->dev, g->graph);
    MIRROR_FREE(g->m_at);
    MIRROR_FREE(g->m_run);
    MIRROR_FREE(g->r_at);
    MIRROR_FREE(g->job_at);
    memset(g, 0, sizeof *g);
}

/* The place of the key among r's graphs: its own, else a free one, else
   the one least recently used (its graph freed). An update's key is its
   kind alone. */
static mirror__graph *mirror__graph_of(mirror_model *m, mirror__replica *r, const mirror__job *job, int kind)
{
    mirror__graph key, *g, *pick = &r->graph[0];
    size_t k;
    memset(&key, 0, sizeof key);
    key.kind = kind;
    if (kind == MIRROR__PASS_GRAPH) {
        key.count = r->count, key.inv_count = job->inv_count;
        key.slot = r->slot, key.accumulate = job->accumulate, key.metrics_now = job->metrics_now;
    }
    for (k = 0; k < MIRROR__GRAPHS; k++) {
        g = &r->graph[k];
        if (g->seen && g->kind == key.kind && g->count == key.count && g->inv_count == key.inv_count &&
            g->slot == key.slot && g->accumulate == key.accumulate && g->metrics_now == key.metrics_now)
            return g;
        if (pick->seen && (!g->seen || g->used < pick->used)) pick = g;
    }
    mirror__graph_clear(m, r, pick);
    *pick = key;
    return pick;
}

/* What a graph of that kind records, as the host queues it. */
static void mirror__queue(int kind, mirror_model *m, mirror__replica *r, const mirror__job *job)
{
    if (kind == MIRROR__PASS_GRAPH)
        mirror__queue_pass(m, r, job);
    else
        mirror__queue_update(m, r);
}

/* The emulation's graph: the model, replica and job as at capture, and a
   scratch model for the replays. */
static void *mirror__emulated_capture(const mirror_model *m, const mirror__replica *r, const mirror__job *job,
                                      mirror__graph *g)
{
    g->m_at = (mirror_model *)mirror__alloc(1, sizeof *m);
    g->m_run = (mirror_model *)mirror__alloc(1, sizeof *m);
    g->r_at = (mirror__replica *)mirror__alloc(1, sizeof *r);
    g->job_at = (mirror__job *)mirror__alloc(1, sizeof *job);
    if (!g->m_at || !g->m_run || !g->r_at || !g->job_at) return NULL;
    *g->m_at = *m, *g->r_at = *r, *g->job_at = *job;
    return g->m_at;
}

/* Queues the work again from the state at capture, as a graph replays
   what was recorded then (a value the host changed since is not seen). */
static void mirror__emulated_launch(const mirror__graph *g)
{
    mirror__replica at = *g->r_at;
    mirror__job job = *g->job_at;
    *g->m_run = *g->m_at;
    job.m = g->m_run;
    mirror__queue(g->kind, g->m_run, &at, &job);
}

/* A training pass or an update through graphs: the first time its key
   comes the work is queued as usual (a warm-up: libraries set up their
   kernels then), the second time it is recorded, and from then on the
   graph replays it. A pass's key holds every value it is queued with that
   changes from step to step on the host: the shard's size, the input
   slot, the loss's divisor, accumulation and the metrics' path. The step
   and the shard's first row (dropout's masks) and the update's learning
   rate and bias corrections are read from device memory (r->tick). */
static void mirror__graph_step(mirror_model *m, mirror__replica *r, const mirror__job *job, int kind)
{
    mirror__graph *g = mirror__graph_of(m, r, job, kind);
    g->used = ++r->passes;
    if (!g->graph && !g->failed && g->seen++ >= 1) {
        if (!m->be->capture_begin) {
            g->graph = mirror__emulated_capture(m, r, job, g);
            g->failed = !g->graph;
        } else {
            int began = m->be->capture_begin(r->dev);
            if (began > 0) {
                mirror__queue(kind, m, r, job);
                g->graph = m->be->capture_end(r->dev);
            }
            if (began < 0) g->seen--; /* not now (a failure waits to be reported): the next visit tries */
            g->failed = began == 0 || (began > 0 && !g->graph);
        }
    }
    if (!g->graph)
        mirror__queue(kind, m, r, job);
    else if (m->be->graph_launch)
        m->be->graph_launch(r->dev, g->graph);
    else
        mirror__emulated_launch(g);
}

/* Replica `worker`: its shard in, forward, then the loss and backward, or
   the outputs out for predict. */
static void mirror__compute_job(void *ctx, size_t worker)
{
    const mirror__job *job = (const mirror__job *)ctx;
    mirror_model *m = job->m;
    mirror__replica *r = &m->rep[worker];
    size_t from = job->from;
    m->be->bind(r->dev);
    if (job->start) {
        mirror__rows_of(m, job->n, m->s->first + worker, &r->begin, &r->count, &r->chunk0, &r->nchunks);
        r->row0 = job->row0 + job->offset + r->begin;
        r->training = job->mode == MIRROR__TRAIN;
        r->bucketing = m->buckets.on && r->training && job->last, r->bucket = 0;
        if (m->trace.steps) m->be->mark(r->dev, 0);
        mirror__load_shard(job, r);
        if (r->training && m->pass.dropouts) { /* the update writes its own fields later */
            mirror__tick t;
            memset(&t, 0, sizeof t);
            t.step = m->steps + 1, t.row0 = r->row0;
            m->be->set(r->dev, r->tick, &t, sizeof t);
        }
        if (m->trace.steps) m->be->mark(r->dev, 1);
        r->loss_sum = 0.0;
        r->correct_sum = 0;
    }
    if (m->pass.graphs && r->training && !m->trace.steps) { /* one job, the whole pass: no batchnorm */
        mirror__graph_step(m, r, job, MIRROR__PASS_GRAPH);
        if (job->metrics_now) mirror__take_loss(m, r);
        return;
    }
    if (!job->backward) {
        mirror__forward(m, r, r->count, job->from, job->stop);
        if (job->stop < m->nlayers) return; /* paused at a batchnorm layer */
        if (m->trace.steps) m->be->mark(r->dev, 2);
        if (job->mode == MIRROR__PREDICT) {
            size_t n = r->count * m->sizes.out, i;
            float *dst = job->predict_out + (job->offset + r->begin) * m->sizes.out;
            if (n) m->be->download(r->dev, dst, mirror__act(r, &m->layers[m->nlayers - 1]), n * mirror__esize(m));
            for (i = n; m->format && i-- > 0;) { /* 16-bit outputs, widened in place from the last */
                uint16_t h;
                memcpy(&h, (unsigned char *)dst + i * sizeof h, sizeof h);
                dst[i] = mirror_hd_widen(h, m->format);
            }
            return;
        }
        mirror__loss(m, r, job->inv_count, job->metrics_now);
        from = m->nlayers - 1;
    }
    if (job->mode == MIRROR__TRAIN) mirror__backward(m, r, r->count, job->accumulate, from, job->back_stop);
    /* the metrics, once the pass is done or, training, its backward queued to the end */
    if (job->metrics_now && (job->mode != MIRROR__TRAIN || job->back_stop == (size_t)-1)) mirror__take_loss(m, r);
    if (m->trace.steps) m->be->mark(r->dev, 3);
}

/* Replica `worker` applies the optimizer to its own copy, with the reduced
   gradient: every replica the same update over every parameter. Each
   replica checks the whole reduced gradient first (the same on every
   replica, so every replica decides alike). */
static void mirror__update_job(void *ctx, size_t worker)
{
    const mirror__job *job = (const mirror__job *)ctx;
    mirror_model *m = job->m;
    mirror__replica *r = &m->rep[worker];
    m->be->bind(r->dev);
    if (m->trace.steps) m->be->mark(r->dev, 6);
    mirror__set_tick(m, r);
    if (m->pass.graphs && !m->trace.steps)
        mirror__graph_step(m, r, job, MIRROR__UPDATE_GRAPH);
    else
        mirror__queue_update(m, r);
    if (m->trace.steps) m->be->mark(r->dev, 7);
}

/* The plan's steps of the plain update: every replica's update job (which
   checks the whole gradient itself), and nothing before or after it. */
static int mirror__plain_update(mirror_model *m, mirror__job *job)
{
    mirror__run(&m->s->team, mirror__update_job, job);
    return MIRROR_OK;
}

static int mirror__step_none(mirror_model *m, mirror__job *job)
{
    (void)m, (void)job;
    return MIRROR_OK;
}

/* The batchnorm layers where a training pass pauses: the first at or
   after i (nlayers: none), the last below i ((size_t)-1: none).
   Evaluation normalises by the running statistics and never pauses. */
static size_t mirror__next_bn(const mirror_model *m, const mirror__job *job, size_t i)
{
    for (; job->mode == MIRROR__TRAIN && i < m->nlayers; i++)
        if (m->layers[i].kind == MIRROR__BATCHNORM) return i;
    return m->nlayers;
}

static size_t mirror__prev_bn(const mirror_model *m, size_t i)
{
    while (i-- > 0)
        if (m->layers[i].kind == MIRROR__BATCHNORM) return i;
    return (size_t)-1;
}

/* Sums v[n] over the processes, in rank order (one process: nothing). */
static int mirror__sum_doubles(mirror_model *m, double *v, size_t n, const char *what)
{
    return m->s->procs->sum_doubles(m->s, v, n, what, &m->err);
}

/* The running statistics of layer l move toward the batch's, whose sum
   and M2 over count values are in tot; a batch with a statistic that is not
   finite leaves them as they were. */
static void mirror__bn_running(mirror_model *m, const mirror__layer *l, const double *tot, double count)
{
    size_t c, C = l->c;
    float *mean = m->bn.running + l->run_off, *var = mean + C;
    double mu, v;
    for (c = 0; c < C; c++) {
        mirror_hd_bn_moments(tot[c], tot[C + c], count, &mu, &v);
        if (!mirror_hd_finite((float)mu) || !mirror_hd_finite((float)v)) return;
    }
    for (c = 0; c < C; c++) {
        mirror_hd_bn_moments(tot[c], tot[C + c], count, &mu, &v);
        mean[c] = mirror_hd_bn_running(mean[c], (float)mu, l->momentum);
        var[c] = mirror_hd_bn_running(var[c], (float)(count > 1.0 ? v * count / (count - 1.0) : v), l->momentum);
    }
    m->bn.stale = 1;
}

/* Slot u of a batch of n (bn_combine): chunk u in deterministic mode,
   else global replica u's shard; its rows [*begin, *begin + the count
   returned). */
static size_t mirror__bn_slot_rows(const mirror_model *m, size_t n, size_t u, size_t *begin)
{
    size_t count;
    if (!m->plan.chunk) {
        mirror_shard(n, m->s->world, u, begin, &count);
        return count;
    }
    *begin = MIRROR__MIN(u * m->plan.chunk, n);
    return MIRROR__MIN(m->plan.chunk, n - *begin);
}

/* Part b of a batchnorm layer's sums (2C doubles) onto part a, which holds
   the na values before it: forward, each channel's sum and M2 merge
   (mirror_hd_bn_merge), over na and nb values; backward, the sums of dy
   and dy xhat add. */
static void mirror__bn_add(double *a, const double *b, size_t C, int backward, double na, double nb)
{
    size_t c;
    for (c = 0; c < C; c++)
        if (backward) a[c] += b[c], a[C + c] += b[C + c];
        else mirror_hd_bn_merge(&a[c], &a[C + c], na, b[c], b[C + c], nb);
}

/* A pause of a training pass at batchnorm layer i: the replicas' parts
   (forward: the sum and M2 of x; backward: the sums of dy and dy xhat),
   combined in the order of the global replicas (deterministic mode: of
   the batch's chunks), become what every replica goes on with: the batch's
   mean and invstd (forward), the means of dy and dy xhat (backward). Local
   mode: each replica's own parts. Forward also moves the running
   statistics, by the global batch's. Across processes each replica's (or
   chunk's) part travels in a slot of its own (the others add zeros,
   exactly), so P processes combine what one process of all the replicas
   combines, in its order: the same bits. */
static int mirror__bn_combine(mirror_model *m, const mirror__job *job, size_t i, int backward)
{
    const mirror__layer *l = &m->layers[i];
    size_t C = l->c, n2 = 2 * C, inner = l->h * l->w, r, c, q, nq, at, rows;
    size_t U = m->plan.chunk ? (job->n + m->plan.chunk - 1) / m->plan.chunk : m->s->world; /* the slots */
    double *slot = m->bn.total, *tot = slot + U * n2 + 1, count = (double)job->n * (double)inner;
    int rc, mine;
    memset(slot, 0, (U * n2 + 1) * sizeof(double));
    for (r = 0; r < m->s->replicas; r++) {
        mirror__replica *p = &m->rep[r];
        nq = mirror__nchunks(m, p);
        m->be->bind(p->dev);
        m->be->download(p->dev, p->host_part, p->bn_part, nq * n2 * sizeof(double));
        memcpy(slot + (m->plan.chunk ? p->chunk0 : m->s->first + r) * n2, p->host_part, nq * n2 * sizeof(double));
        if (!nq) memset(p->host_part, 0, n2 * sizeof(double));
        for (q = 1; q < nq; q++) { /* the replica's own part (local mode): its chunks' in order */
            rows = mirror__chunk_rows(m, p, q, &at);
            mirror__bn_add(p->host_part, p->host_part + q * n2, C, backward, (double)at * inner, (double)rows * inner);
        }
    }
    /* the failures so far travel with the parts: every process stops here alike */
    slot[U * n2] = (mine = mirror__device_status(m)) != MIRROR_OK;
    if ((rc = mirror__sum_doubles(m, slot, U * n2 + 1, "batchnorm across processes")) || (rc = mine)) return rc;
    if (slot[U * n2] > 0.0)
        return mirror__fail(m, MIRROR_ERR_PEER, "batchnorm (layer %zu): another process failed in this step", i);
    memset(tot, 0, n2 * sizeof(double));
    for (r = 0; r < U; r++) {
        rows = mirror__bn_slot_rows(m, job->n, r, &at);
        mirror__bn_add(tot, slot + r * n2, C, backward, (double)at * inner, (double)rows * inner);
    }
    for (r = 0; r < m->s->replicas; r++) {
        mirror__replica *p = &m->rep[r];
        const double *sum = l->local ? p->host_part : tot;
        double n = l->local ? (double)(p->count ? p->count : 1) * (double)inner : count, mu, var;
        m->be->bind(p->dev);
        m->be->host_wait(p->dev); /* the last upload from host_stat is done */
        for (c = 0; c < C; c++) {
            if (backward) {
                p->host_stat[c] = (float)(sum[c] / n), p->host_stat[C + c] = (float)(sum[C + c] / n);
                continue;
            }
            mirror_hd_bn_moments(sum[c], sum[C + c], n, &mu, &var);
            p->host_stat[c] = (float)mu, p->host_stat[C + c] = mirror_hd_bn_invstd(var, l->eps);
        }
        m->be->upload(p->dev, p->bn + l->bn_off + (backward ? 4 * C : 0), p->host_stat, 2 * C * sizeof(float));
    }
    if (!backward) mirror__bn_running(m, l, tot, count);
    return mirror__device_status(m);
}

/* The running statistics into every replica's evaluation slots: the mean
   and 1 / sqrt(var + eps). */
static int mirror__bn_refresh(mirror_model *m)
{
    size_t r, i, c;
    for (r = 0; r < m->s->replicas; r++) {
        mirror__replica *p = &m->rep[r];
        m->be->bind(p->dev);
        for (i = 0; i < m->nlayers; i++) {
            const mirror__layer *l = &m->layers[i];
            const float *run = m->bn.running + l->run_off;
            if (l->kind != MIRROR__BATCHNORM) continue;
            m->be->host_wait(p->dev);
            for (c = 0; c < l->c; c++)
                p->host_stat[c] = run[c], p->host_stat[l->c + c] = mirror_hd_bn_invstd(run[l->c + c], l->eps);
            m->be->upload(p->dev, p->bn + l->bn_off + 2 * l->c, p->host_stat, 2 * l->c * sizeof(float));
        }
        m->be->host_wait(p->dev);
    }
    m->bn.stale = 0;
    return mirror__device_status(m);
}

/* Runs a job on every replica. A training pass pauses at each batchnorm
   layer, forward and then backward, while the host combines the replicas'
   sums (mirror__bn_combine); the job then goes on from there. */
static int mirror__compute(mirror_model *m, mirror__job *job)
{
    int rc;
    if (job->mode != MIRROR__TRAIN && m->bn.stale && (rc = mirror__bn_refresh(m))) return rc;
    job->start = 1, job->backward = 0, job->from = 0;
    job->stop = mirror__next_bn(m, job, 0);
    job->back_stop = job->mode == MIRROR__TRAIN ? mirror__prev_bn(m, m->nlayers) : (size_t)-1;
    for (;;) {
        mirror__run(&m->s->team, mirror__compute_job, job);
        job->start = 0;
        if (!job->backward && job->stop < m->nlayers) {
            if ((rc = mirror__bn_combine(m, job, job->stop, 0))) return rc;
            job->from = job->stop;
            job->stop = mirror__next_bn(m, job, job->from + 1);
            continue;
        }
        if (job->back_stop == (size_t)-1) return MIRROR_OK;
        if ((rc = mirror__bn_combine(m, job, job->back_stop, 1))) return rc;
        job->backward = 1;
        job->from = job->back_stop;
        job->back_stop = mirror__prev_bn(m, job->from);
    }
}

/* A training batch of n in which a batchnorm layer would normalise a
   single value per channel is refused, as torch.nn.BatchNorm1d refuses
   it: the value is its own mean, the variance 0, and the output beta
   whatever the input. That is a flat input (one value per channel and
   sample) of one sample: the global batch, or in local mode a replica's
   shard (an empty shard normalises nothing). */
static int mirror__check_bn_values(mirror_model *m, size_t n, const char *what)
{
    size_t i, g, begin, count, chunk0, nchunks;
    for (i = 0; i < m->nlayers; i++) {
        const mirror__layer *l = &m->layers[i];
        if (l->kind != MIRROR__BATCHNORM || l->h * l->w != 1) continue;
        if (n == 1)
            return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                                "%s: a batch of 1 sample: batchnorm layer %zu would normalise a single value per "
                                "channel (its output beta, whatever the input); train on 2 samples or more",
                                what, i);
        for (g = 0; l->local && g < m->s->world; g++) {
            mirror__rows_of(m, n, g, &begin, &count, &chunk0, &nchunks);
            if (count == 1)
                return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                                    "%s: a batch of %zu gives replica %zu a shard of 1 sample: batchnorm layer %zu "
                                    "(MIRROR_BN_LOCAL) would normalise a single value per channel there; use "
                                    "batches of 2 samples or more a replica, or MIRROR_BN_SYNC",
                                    what, n, g, i);
        }
    }
    return MIRROR_OK;
}

/* replica_values: after micro-batch j's pass, before the all-reduce,
   each replica's own metrics and gradient into the model's copies. The
   gradient is what the all-reduce takes from the replica: its arena, which
   holds the sum of the step's micro-batches (read after the last; in mixed
   precision the 16-bit one, widened), or in deterministic mode, which
   reduces after every micro-batch, its chunks' arenas added in chunk order
   onto the micro-batches before. */
static void mirror__keep_own(mirror_model *m, const mirror__job *job, size_t j)
{
    size_t r, q, i, n = m->nslots;
    float *scratch = (float *)m->own.scratch;
    uint16_t *half = (uint16_t *)m->own.scratch;
    for (r = 0; r < m->s->replicas; r++) {
        mirror__replica *p = &m->rep[r];
        float *own = m->own.grads + r * n;
        m->be->bind(p->dev);
        if (!job->metrics_now) { /* the sums stay on the device for the step's metrics: read the losses again */
            p->loss_sum = 0.0;
            p->correct_sum = 0;
            mirror__take_loss(m, p);
        }
        if (j == 0) memset(&m->own.metrics[r], 0, sizeof(mirror_metrics));
        mirror__metrics_add(&m->own.metrics[r], p->loss_sum, p->correct_sum, p->count);
        if (m->plan.chunk) {
            if (j == 0) memset(own, 0, n * sizeof(float));
            for (q = 0; q < p->nchunks; q++) {
                m->be->download(p->dev, scratch, mirror__chunk_grads(m, p, q), n * sizeof(float));
                for (i = 0; i < n; i++) own[i] += scratch[i];
            }
        } else if (job->last && m->format) {
            m->be->download(p->dev, half, p->grad16, n * sizeof(uint16_t));
            for (i = 0; i < n; i++) own[i] = mirror_hd_widen(half[i], m->format);
        } else if (job->last) {
            m->be->download(p->dev, own, p->grads, n * sizeof(float));
        }
    }
}

/* One optimizer step over k micro-batches (mirror_train_steps; k = 1:
   mirror_train_step): forward and backward on each, the gradients added
   up on every replica without communication, each divided by the count of
   all k, then one all-reduce and one update. */
static int mirror__train_micro(mirror_model *m, const mirror_batch *micro, size_t k, mirror_metrics *out,
                               const char *what)
{
    mirror_metrics sum = {0.0, 0, 0};
    mirror__job job;
    size_t j, total = 0;
    int rc;
    if (!micro || !k) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: no batch", what);
    for (j = 0; j < k; j++) {
        if ((rc = mirror__check_batch(m, &micro[j], what, 1))) return rc;
        if (micro[j].n == 0) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: batch %zu is empty", what, j);
        if ((rc = mirror__check_bn_values(m, micro[j].n, what))) return rc;
        if (micro[j].n > m->desc.max_batch)
            return mirror__fail(m, MIRROR_ERR_CAPACITY, "%s: batch of %zu exceeds max_batch %zu the arenas were sized for",
                                what, micro[j].n, m->desc.max_batch);
        total += micro[j].n;
        if (total > ((size_t)1 << 40)) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: %zu batches of too many samples",
                                                        what, k);
    }
    memset(&job, 0, sizeof job);
    job.m = m;
    job.mode = MIRROR__TRAIN;
    job.inv_count = 1.0f / (float)total; /* the gradient of the mean over all k */
    job.metrics_now = out != NULL;
    job.augment_key = m->fit.augment_key, job.augment_pad = m->fit.augment_pad, job.augment_flip = m->fit.augment_flip;
    for (j = 0, rc = MIRROR_OK; j < k && rc == MIRROR_OK; j++) {
        job.batch = &micro[j];
        job.data = mirror__resident_of(m, &micro[j]);
        job.n = micro[j].n;
        job.accumulate = j > 0, job.last = j + 1 == k;
        if ((rc = mirror__compute(m, &job)) == MIRROR_OK) {
            mirror__mark_compute(m, m->steps + 1);
            job.row0 += micro[j].n;
            if (out) mirror__collect(m, &sum);
            if (m->own.grads) mirror__keep_own(m, &job, j);
            rc = mirror__device_status(m);
        }
        if (!m->plan.each && rc == MIRROR_OK && j + 1 < k) continue;
        /* the reduction: after the last micro-batch, or after each in
           deterministic mode; with several processes after a failure too */
        mirror__mark_reduce(m, 4);
        rc = m->plan.reduce(m, rc, j > 0, j + 1 == k);
        mirror__mark_reduce(m, 5);
    }
    if (rc) return rc;
    /* the update, as the plan runs it (see mirror__update_plan); a failed
       check applies nothing of the step */
    m->steps++;
    if ((rc = mirror__schedule(m, m->steps, &m->lr)) || (rc = m->plan.check(m, &job))) {
        m->steps--;
        return rc;
    }
    if ((rc = m->plan.update(m, &job)) || (rc = m->plan.gather(m, &job))) return rc;
    mirror__mark_update(m, m->steps);
    if ((rc = mirror__device_status(m))) return rc;
    if (m->format && m->desc.loss_scale.report_nonfinite) {
        mirror_loss_scale_state st;
        if ((rc = mirror__get_scaler(m, &st))) return rc;
        if (st.last_skipped) mirror__report_nonfinite(m, &st);
    }
    if (!out) {
        m->untaken += total;
        /* CPU replicas: the verdict costs no wait, so it comes at once */
        return m->be == &mirror__cpu_backend ? mirror__scaler_verdict(m, what) : MIRROR_OK;
    }
    if ((rc = mirror__sum_processes(m, &sum))) return rc;
    *out = sum;
    return mirror__scaler_verdict(m, what);
}

/* The same, with the running statistics of batchnorm restored when the
   step fails: a failed step changes nothing. */
static int mirror__train(mirror_model *m, const mirror_batch *micro, size_t k, mirror_metrics *out, const char *what)
{
    int rc;
    if ((rc = mirror__check_built(m, what))) return rc;
    if (m->bn.nrunning) memcpy(m->bn.running_before, m->bn.running, m->bn.nrunning * sizeof(float));
    if ((rc = mirror__train_micro(m, micro, k, out, what)) && m->bn.nrunning) {
        memcpy(m->bn.running, m->bn.running_before, m->bn.nrunning * sizeof(float));
        m->bn.stale = 1;
    }
    return rc;
}

MIRROR_API int mirror_train_step(mirror_model *m, const mirror_batch *b, mirror_metrics *out)
{
    if (!b) return mirror__check_batch(m, b, "mirror_train_step", 1);
    {
        MIRROR__LOCKED(m, "mirror_train_step", mirror__train(m, b, 1, out, "mirror_train_step"));
    }
}

MIRROR_API int mirror_train_steps(mirror_model *m, const mirror_batch *micro, size_t k, mirror_metrics *out)
{
    MIRROR__LOCKED(m, "mirror_train_steps", mirror__train(m, micro, k, out, "mirror_train_steps"));
}

// >>strategy and devices ----------------------------------------------------
/* A strategy: the devices (CPU threads here, GPUs in mirror_cuda.h), its
   reducer, its thread team and its locks, created with its defaults. */

/* "cpu" or "cpu:N" into a replica count (0 for "cpu": one per core). */
static int mirror__parse_devices(const char *spec, size_t *count, mirror_error *err)
{
    const char *p = spec;
    unsigned long v;
    char *end;
    if (strncmp(p, "cuda", 4) == 0)
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED,
                             "devices \"" MIRROR__CUT_F "\": this program was built without CUDA "
                             "(compile one .cu file with mirror_cuda.h)",
                             MIRROR__CUT(spec, 128));
    if (strncmp(p, "cpu", 3) != 0)
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "devices \"" MIRROR__CUT_F "\": expected \"cpu\" or \"cpu:N\"", MIRROR__CUT(spec, 128));
    p += 3;
    if (*p == '\0') {
        *count = 0;
        return MIRROR_OK;
    }
    if (*p != ':' || p[1] < '0' || p[1] > '9')
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "devices \"" MIRROR__CUT_F "\": expected \"cpu\" or \"cpu:N\"", MIRROR__CUT(spec, 128));
    errno = 0;
    v = strtoul(p + 1, &end, 10);
    if (*end != '\0')
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "devices \"" MIRROR__CUT_F "\": \"" MIRROR__CUT_F "\" after the replica count: CPU "
                             "replicas are \"cpu:N\", one count of threads (a list such as 0,1 names GPUs: "
                             "\"cuda:0,1\")",
                             MIRROR__CUT(spec, 128), MIRROR__CUT(end, 64));
    if (errno || v < 1 || v > 4096)
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "devices \"" MIRROR__CUT_F "\": %.*s%s replicas: the replica count must be 1 to 4096",
                             MIRROR__CUT(spec, 128), (int)MIRROR__MIN(end - p - 1, 24), p + 1,
                             end - p - 1 > 24 ? "..." : "");
    *count = (size_t)v;
    return MIRROR_OK;
}

/* The strategy's call lock, recursive (see struct mirror_strategy), and its
   lifetime lock. */
static int mirror__locks_init(mirror_strategy *s, mirror_error *err)
{
    pthread_mutexattr_t a;
    int ok = pthread_mutexattr_init(&a) == 0;
    if (ok && (pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE) != 0 || pthread_mutex_init(&s->call, &a) != 0))
        ok = 0;
    else if (ok && pthread_mutex_init(&s->life, NULL) != 0) {
        pthread_mutex_destroy(&s->call);
        ok = 0;
    }
    pthread_mutexattr_destroy(&a);
    return ok ? MIRROR_OK : mirror__error(err, MIRROR_ERR_THREAD, "strategy: cannot create its locks");
}

/* The reducer from the desc, else $MIRROR_REDUCER, else the default. */
static int mirror__reducer_kind(mirror_reducer asked, mirror_reducer *out, mirror_error *err)
{
    const char *env = getenv("MIRROR_REDUCER");
    if ((int)asked < 0 || asked > MIRROR_REDUCER_COPY)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "strategy: unknown reducer %d", (int)asked);
    *out = asked;
    if (asked != MIRROR_REDUCER_DEFAULT || !env || !*env) return MIRROR_OK;
    if (!strcmp(env, "nccl")) *out = MIRROR_REDUCER_NCCL;
    else if (!strcmp(env, "copy")) *out = MIRROR_REDUCER_COPY;
    else
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "MIRROR_REDUCER=\"" MIRROR__CUT_F "\": expected nccl or copy",
                             MIRROR__CUT(env, 64));
    return MIRROR_OK;
}

/* The cores this process may run on: its CPU affinity where Linux tells
   it (/proc/self/status: mpirun binds each process of a small job to one
   core, taskset and containers narrow it too), else every online core. */
static size_t mirror__usable_cores(void)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    size_t cores = online > 0 ? (size_t)online : 1, count = 0;
    char line[4096];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *p = line + sizeof "Cpus_allowed_list:" - 1;
        if (strncmp(line, "Cpus_allowed_list:", sizeof "Cpus_allowed_list:" - 1)) continue;
        while (*p) { /* "0-3,8,10-11" */
            char *end;
            unsigned long lo, hi;
            while (*p == ' ' || *p == '\t' || *p == ',') p++;
            if (*p < '0' || *p > '9') break;
            lo = hi = strtoul(p, &end, 10);
            if (*end == '-') hi = strtoul(end + 1, &end, 10);
            if (hi >= lo) count += hi - lo + 1;
            p = end;
        }
        break;
    }
    if (f) fclose(f);
    return count && count < cores ? count : cores;
}

/* The desc's timeout, else $MIRROR_TIMEOUT, else 300 s. A negative, NaN
   or infinite one is refused: it would wait for ever; so is one under a
   millisecond, which no process could meet. */
static int mirror__timeout(const mirror_strategy_desc *d, double *timeout, mirror_error *err)
{
    const char *env = getenv("MIRROR_TIMEOUT");
    char *end = NULL;
    *timeout = d->timeout;
    if (!(*timeout == 0.0 || (*timeout >= 1e-3 && *timeout <= DBL_MAX)))
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_strategy_create: timeout %g; give seconds, from 0.001 (0: $MIRROR_TIMEOUT, "
                             "else 300)", *timeout);
    if (*timeout == 0.0 && env && *env) {
        *timeout = strtod(env, &end);
        if (*end || !(*timeout >= 1e-3 && *timeout <= DBL_MAX))
            return mirror__error(err, MIRROR_ERR_ARGUMENT, "MIRROR_TIMEOUT=\"" MIRROR__CUT_F "\": expected a number of "
                                 "seconds, from 0.001", MIRROR__CUT(env, 64));
    }
    if (*timeout == 0.0) *timeout = 300.0;
    return MIRROR_OK;
}

/* A host memory override (see the desc's host_memory), `from` naming
   where it came from: "advisory" sets *advisory, a size sets *bytes;
   NULL or "" leaves both 0. */
static int mirror__host_override(const char *text, const char *from, double *bytes, int *advisory,
                                 mirror_error *err)
{
    static const char units[] = "KMGT";
    const char *unit;
    char *end = NULL;
    double v;
    *bytes = 0.0, *advisory = 0;
    if (!text || !*text) return MIRROR_OK;
    if (strcmp(text, "advisory") == 0) return *advisory = 1, MIRROR_OK;
    v = strtod(text, &end);
    if (end != text && *end && *end != ' ' && (unit = strchr(units, *end & ~0x20)) != NULL) { /* K, k, ... */
        v *= pow(1024.0, (double)(unit - units + 1));
        end += 1 + (end[1] == 'i' && end[2] == 'B') * 2 + (end[1] == 'B');
    }
    if (end == text || *end || strlen(text) >= 64 || !(v >= 1.0 && v <= 4e18))
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "%s \"%.80s\": expected the bytes a build may plan on (\"64G\", \"512M\", \"1.5T\"; K, M, "
                             "G, T are powers of 1024) or \"advisory\" (the physical memory only warns)", from, text);
    *bytes = v;
    return MIRROR_OK;
}

/* Defaults for a strategy desc's zero fields, in one place: the device
   list from $MIRROR_DEVICES (unless the desc counts replicas), the reducer
   from $MIRROR_REDUCER, the timeout from $MIRROR_TIMEOUT, else 300 s, the
   host memory from $MIRROR_HOST_MEMORY. A bad value, in the desc or the
   environment, is refused. The replica count comes with the devices
   (mirror_strategy_create). */
static int mirror__strategy_defaults(mirror_strategy_desc *d, mirror_error *err)
{
    int rc, advisory;
    double bytes;
    const char *from = "host_memory";
    if (!d->devices && !d->num_replicas) d->devices = getenv("MIRROR_DEVICES");
    if ((rc = mirror__reducer_kind(d->reducer, &d->reducer, err))) return rc;
    if (!d->host_memory || !*d->host_memory) d->host_memory = getenv("MIRROR_HOST_MEMORY"), from = "MIRROR_HOST_MEMORY";
    if ((rc = mirror__host_override(d->host_memory, from, &bytes, &advisory, err))) return rc;
    return mirror__timeout(d, &d->timeout, err);
}

/* The verdict on a CUDA build's GPUs when no device list is given, from
   cudaGetDeviceCount's answer and count, the driver's and the runtime's
   CUDA versions (12040 for 12.4; the driver's 0 where none is installed)
   and CUDA's message for the answer: why gets the notice's reason
   (MIRROR__GPUS_NONE) or the error's message (MIRROR__GPUS_ERROR). A driver
   older than the runtime may still run it (CUDA's minor version
   compatibility), so only a failed count blames the driver's age. CPU
   builds have no caller but the tests. */
static MIRROR__MAYBE_UNUSED mirror__gpus mirror__cuda_verdict(mirror__cuda_answer answer, int count, int driver,
                                                              int runtime, const char *message, char *why,
                                                              size_t size)
{
    if (answer == MIRROR__CUDA_COUNTED && count > 0) return MIRROR__GPUS_USE;
    if (driver <= 0) { /* CUDA's words for it, "driver version is insufficient", would send one to update a driver */
        snprintf(why, size, "no NVIDIA driver found (the CUDA runtime finds no libcuda.so.1)");
        return MIRROR__GPUS_NONE;
    }
    if (answer == MIRROR__CUDA_COUNTED || answer == MIRROR__CUDA_NO_DEVICE) {
        snprintf(why, size, "no NVIDIA GPU found");
        return MIRROR__GPUS_NONE;
    }
    if (answer == MIRROR__CUDA_OLD_DRIVER || driver < runtime) {
        snprintf(why, size,
                 "the NVIDIA driver is for CUDA %d.%d, older than this program's CUDA runtime (%d.%d): update the "
                 "driver to one for CUDA %d.%d or newer, or build with an older CUDA toolkit, or choose devices "
                 "\"cpu\" (MIRROR_DEVICES=cpu) to train on CPU replicas",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, runtime / 1000,
                 runtime % 1000 / 10);
        return MIRROR__GPUS_ERROR;
    }
    snprintf(why, size, "CUDA cannot use the GPUs: %s (devices \"cpu\", or MIRROR_DEVICES=cpu, trains on CPU replicas)",
             message);
    return MIRROR__GPUS_ERROR;
}

MIRROR_API int mirror_strategy_create(const mirror_strategy_desc *desc, mirror_strategy **out,
                                      mirror_error *err)
{
    mirror_strategy_desc d;
    mirror_strategy *s;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    size_t count = 0, cores = mirror__usable_cores();
    char no_gpu[400] = "", why_cpu[64] = "";
    int rc, explicit_list;
#ifdef MIRROR_CUDA
    mirror__gpus gpus;
#endif
    if (!out) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_strategy_create: out is NULL");
    *out = NULL;
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    if (d.num_replicas > 4096)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "num_replicas %zu: at most 4096", d.num_replicas);
    if ((rc = mirror__strategy_defaults(&d, err))) return rc;
    explicit_list = d.devices && *d.devices;
    s = (mirror_strategy *)mirror__zalloc(1, sizeof *s);
    if (!s) return mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: out of memory");
    s->processes = s->local_size = 1;
    s->reducer_kind = d.reducer;
    s->timeout = d.timeout;
    if (d.host_memory) snprintf(s->host_memory, sizeof s->host_memory, "%s", d.host_memory);
    s->procs = mirror__processes_built(); /* before anything can fail: the teardown is its */
    if ((rc = s->procs->join(s, &d, err)) != MIRROR_OK) goto fail;
#ifdef MIRROR_CUDA
    /* GPUs when asked for, or by default when there are any. Without a
       device list, CPU replicas take over only where there is no driver
       or no GPU; a driver or a GPU that cannot be used is an error, not a
       slow run. */
    gpus = explicit_list ? MIRROR__GPUS_USE : mirror__cuda_gpus(no_gpu, sizeof no_gpu);
    if (gpus == MIRROR__GPUS_ERROR) {
        rc = mirror__error(err, MIRROR_ERR_DEVICE, "%s", no_gpu);
        goto fail;
    }
    if (gpus == MIRROR__GPUS_USE) {
        if (!explicit_list || strncmp(d.devices, "cuda", 4) == 0) {
            const char *spec = explicit_list ? d.devices : NULL;
            char local[256];
            if (!spec && s->processes > 1) { /* several processes: one GPU per local rank by default */
                mirror__cuda_local_spec(s->local_rank, d.num_replicas ? d.num_replicas : 1, local, sizeof local);
                spec = local;
            }
            rc = mirror__cuda_setup(s, spec, d.num_replicas, err);
            if (rc == MIRROR_OK) goto team;
            goto fail;
        }
    } else {
        /* the verdict's plain words, before CUDA's detail in parentheses (the notice below gives it whole) */
        size_t words = strcspn(no_gpu, "(");
        while (words && no_gpu[words - 1] == ' ') words--;
        snprintf(why_cpu, sizeof why_cpu, " (%.*s)", (int)MIRROR__MIN(words, 50), no_gpu); /* a few words */
    }
#endif
    if ((rc = mirror__parse_devices(explicit_list ? d.devices : "cpu", &count, err)) != MIRROR_OK) goto fail;
    if (count && d.num_replicas && count != d.num_replicas) {
        rc = mirror__error(err, MIRROR_ERR_ARGUMENT,
                           "devices \"" MIRROR__CUT_F "\" gives %zu replicas but num_replicas is %zu",
                           MIRROR__CUT(d.devices, 128), count, d.num_replicas);
        goto fail;
    }
    if (s->reducer_kind == MIRROR_REDUCER_NCCL) { /* asked for, by the desc or the environment */
        int asked_nccl = desc && desc->reducer == MIRROR_REDUCER_NCCL;
        rc = mirror__error(err, MIRROR_ERR_ARGUMENT,
                           "strategy: %s asks for the NCCL reducer, which needs GPU replicas (\"cuda\" devices), "
                           "and these replicas are CPU threads%s: %s",
                           asked_nccl ? "mirror_strategy_desc.reducer" : "MIRROR_REDUCER=nccl", why_cpu,
                           asked_nccl ? "use MIRROR_REDUCER_DEFAULT or MIRROR_REDUCER_COPY"
                                      : "unset MIRROR_REDUCER or set it to copy");
        goto fail;
    }
    if (!count) count = d.num_replicas;
    /* By default a replica per core this process may use; processes of one
       machine that may all use every core share them out. */
    if (!count) count = online > 0 && cores == (size_t)online ? cores / s->local_size : cores;
    if (!count) count = 1;
    count = MIRROR__MIN(count, 4096);
    if (why_cpu[0]) { /* a CUDA build on a machine without a driver or a GPU */
        char notice[sizeof no_gpu + 60];
        snprintf(notice, sizeof notice, "%s: training on %zu CPU replica%s", no_gpu, count, count == 1 ? "" : "s");
        mirror__log(MIRROR_LOG_NOTICE, notice);
    }
    if (count > cores && online > 0 && cores < (size_t)online) { /* bound to fewer cores than it has replicas */
        char notice[300];
        snprintf(notice, sizeof notice,
                 "%zu CPU replicas on the %zu core%s this process may use (its CPU affinity; the machine has %ld): "
                 "they share %s; under mpirun, pass --bind-to none",
                 count, cores, cores == 1 ? "" : "s", online, cores == 1 ? "it" : "them");
        mirror__log(MIRROR_LOG_NOTICE, notice);
    } else if (count > 8 * cores) { /* allowed (a demonstration of many replicas), but rarely meant */
        char notice[200];
        snprintf(notice, sizeof notice,
                 "%zu CPU replicas on %zu cores: no faster than %zu replicas, and each holds its own parameters, "
                 "gradients and activations",
                 count, cores, cores);
        mirror__log(MIRROR_LOG_NOTICE, notice);
    }
    s->replicas = count;
    s->backend = &mirror__cpu_backend;
    s->reducer = &mirror__cpu_reducer;
    s->reducer_kind = MIRROR_REDUCER_COPY;
    snprintf(s->devices, sizeof s->devices, "cpu:%zu", count);
    snprintf(s->describe, sizeof s->describe, "%zu CPU replica%s%s, reducer %s", count,
             count == 1 ? " (a thread)" : "s (threads)", why_cpu, s->reducer->name);
#ifdef MIRROR_CUDA
team:
#endif
    s->world = s->replicas;
    if ((rc = s->procs->setup(s, err)) != MIRROR_OK) goto fail;
    if ((rc = mirror__locks_init(s, err)) != MIRROR_OK) goto fail;
    if ((rc = mirror__team_start(&s->team, s->replicas, cores, err)) != MIRROR_OK) {
        pthread_mutex_destroy(&s->call);
        pthread_mutex_destroy(&s->life);
        goto fail;
    }
    *out = s;
    return MIRROR_OK;
fail:
    s->procs->teardown(s);
#ifdef MIRROR_CUDA
    mirror__cuda_teardown(s);
#endif
    MIRROR_FREE(s);
    return rc;
}

static void mirror__strategy_free(mirror_strategy *s)
{
    mirror__team_stop(&s->team, s->team.size - 1); /* the helper threads */
    s->procs->teardown(s);
#ifdef MIRROR_CUDA
    mirror__cuda_teardown(s);
#endif
    pthread_mutex_destroy(&s->call);
    pthread_mutex_destroy(&s->life);
    MIRROR_FREE(s);
}

/* Destroying a strategy that models still use would pull the threads and
   devices from under them: it is released with the last model instead. */
MIRROR_API void mirror_strategy_destroy(mirror_strategy *s)
{
    size_t models;
    if (!s) return;
    pthread_mutex_lock(&s->life);
    models = s->models;
    s->destroyed = 1;
    pthread_mutex_unlock(&s->life);
    if (!models) {
        mirror__strategy_free(s);
        return;
    }
    {
        char notice[160];
        snprintf(notice, sizeof notice,
                 "mirror_strategy_destroy: %zu model%s still use%s the strategy; it is released with the last", models,
                 models == 1 ? "" : "s", models == 1 ? "s" : "");
        mirror__log(MIRROR_LOG_NOTICE, notice);
    }
}

/* A model on s is created (+1) or destroyed (-1); the last one releases a
   strategy already destroyed. */
static void mirror__strategy_models(mirror_strategy *s, int delta)
{
    int release;
    pthread_mutex_lock(&s->life);
    s->models = delta > 0 ? s->models + 1 : s->models - 1;
    release = s->destroyed && !s->models;
    pthread_mutex_unlock(&s->life);
    if (release) mirror__strategy_free(s);
}

MIRROR_API size_t mirror_num_replicas(const mirror_strategy *s) { return s ? s->world : 0; }

MIRROR_API mirror_strategy_desc mirror_strategy_query_desc(const mirror_strategy *s)
{
    mirror_strategy_desc d;
    memset(&d, 0, sizeof d);
    if (s) {
        d.devices = s->devices;
        d.num_replicas = s->replicas;
        d.reducer = s->reducer_kind;
        d.timeout = s->timeout;
        d.host_memory = s->host_memory;
    }
    return d;
}

MIRROR_API const char *mirror_strategy_describe(const mirror_strategy *s)
{
    return s ? s->describe : "";
}

// >>processes ---------------------------------------------------------------
/* What the core needs across processes is one table, the processes
   interface (struct mirror__processes in >>structs): join and leave,
   agree on a configuration, share rank 0's result, sum (the status word
   that rides on each reduction, doubles, deterministic mode's list), gather
   slices, and the stop flag and the verdict of a lost peer. The core calls
   it through s->procs and never names MPI; this section holds its two
   implementations. One process's, in every build, succeeds at once: its
   sums and gathers leave every value as it is, its agreements return this
   process's result. MPI's (MIRROR_MPI) follows, with its state
   (mirror__mpi); mirror_cuda.h adds the GPUs' reducer across processes
   (>>cuda processes). A strategy that finds itself alone, MPI or not,
   runs on one process's table.

   Several processes (MIRROR_MPI). A strategy spans the processes of a
   communicator; each process drives its own replicas, which are global
   replicas [first, first + replicas). Every process makes the same calls on
   its strategy and models in the same order with the same global batches
   (it loads the dataset itself and shuffles it alike) and computes the
   shards of its replicas only: no sample crosses the network.

   The cross-process sum is a fold in rank order. Rank 0 adds its replicas'
   buffers in replica order and sends the partial sums to rank 1, which
   adds its replicas' and sends them on; the last rank broadcasts the
   total. Those are the additions one process holding every replica makes,
   in the same order: the sum is bitwise that of one process with the same
   replica count, and the same run to run. Behind the sums travels the
   status word (MIRROR__STATUS floats): the first rank that failed before
   the reduction (plus one; 0 for none), its result code, and whether any
   process was asked to stop, so that a failure or a stop reaches every
   process with the step that meets it.

   Every MPI call is non-blocking and waited for with a deadline (the
   timeout): a process that died or hangs makes the others fail with
   MIRROR_ERR_TIMEOUT instead of waiting for ever. The strategy is then
   broken: every later cross-process call fails at once, and MPI is not
   finalized at exit (finalizing would wait for the lost process); the
   process should exit, and mpirun ends the job. */

/* This process's place, and the global count, in every build. */
MIRROR_API mirror_process_info mirror_strategy_process(const mirror_strategy *s)
{
    mirror_process_info p;
    memset(&p, 0, sizeof p);
    if (!s) return p;
    p.rank = s->rank;
    p.processes = s->processes;
    p.local_replicas = s->replicas;
    p.first_replica = s->first;
    p.local_rank = s->local_rank;
    return p;
}

/* ---- one process ---- */
/* Alone, the process is rank 0 of 1 (mirror_strategy_create set that),
   holds every replica, and whatever it sends it receives as it is. */
static int mirror__one_join(mirror_strategy *s, const mirror_strategy_desc *d, mirror_error *err)
{
    (void)d, (void)err;
    s->procs_state = NULL;
    return MIRROR_OK;
}

static int mirror__one_setup(mirror_strategy *s, mirror_error *err)
{
    (void)err;
    s->first = 0, s->world = s->replicas;
    return MIRROR_OK;
}

static void mirror__one_teardown(mirror_strategy *s) { (void)s; }

static size_t mirror__one_replicas_of(const mirror_strategy *s, size_t p)
{
    (void)p;
    return s->replicas;
}

static int mirror__one_agree(mirror_strategy *s, int result, const char *note, mirror_error *err)
{
    (void)s, (void)note, (void)err;
    return result;
}

static int mirror__one_compare(mirror_strategy *s, const mirror__agreed *items, size_t n, const char *what,
                               const char *note, mirror_error *err)
{
    (void)s, (void)items, (void)n, (void)what, (void)note, (void)err;
    return MIRROR_OK;
}

static int mirror__one_share(mirror_strategy *s, int result, mirror_error *err)
{
    (void)s, (void)err;
    return result;
}

static void mirror__one_carry(mirror_strategy *s, int result, int stop, int scatter)
{
    (void)s, (void)result, (void)stop, (void)scatter;
}

/* A stop is this process's own flag, which fit reads itself. */
static int mirror__one_stopped(const mirror_strategy *s)
{
    (void)s;
    return 0;
}

/* The list's sum is the reducer's, whole. */
static int mirror__one_sum_list(mirror_strategy *s, float *const *in, const size_t *owner, size_t nin,
                                float *const *bufs, size_t n, size_t *keep, size_t *keep_len, mirror_error *err)
{
    *keep = 0, *keep_len = n;
    return s->reducer->sum_list(s, in, owner, nin, bufs, n, err);
}

static int mirror__one_sum_doubles(mirror_strategy *s, double *v, size_t n, const char *what, mirror_error *err)
{
    (void)s, (void)v, (void)n, (void)what, (void)err;
    return MIRROR_OK;
}

static int mirror__one_gather_slices(mirror_strategy *s, void *buf, size_t n, size_t size, int parts,
                                     mirror_error *err)
{
    (void)s, (void)buf, (void)n, (void)size, (void)parts, (void)err;
    return MIRROR_OK;
}

static int mirror__one_gather(mirror_strategy *s, void *buf, size_t size, const size_t *parts, const char *what,
                              mirror_error *err)
{
    (void)s, (void)buf, (void)size, (void)parts, (void)what, (void)err;
    return MIRROR_OK;
}

static void mirror__one_watch(mirror_strategy *s, volatile sig_atomic_t *stop) { (void)s, (void)stop; }

static int mirror__one_lost(const mirror_strategy *s)
{
    (void)s;
    return 0;
}

MIRROR__NAMED_BEGIN
static const mirror__processes mirror__one_process = {
    .name = "one process",
    .join = mirror__one_join,
    .setup = mirror__one_setup,
    .teardown = mirror__one_teardown,
    .replicas_of = mirror__one_replicas_of,
    .agree = mirror__one_agree,
    .compare = mirror__one_compare,
    .share = mirror__one_share,
    .carry = mirror__one_carry,
    .stopped = mirror__one_stopped,
    .sum_list = mirror__one_sum_list,
    .sum_doubles = mirror__one_sum_doubles,
    .gather_slices = mirror__one_gather_slices,
    .gather = mirror__one_gather,
    .watch = mirror__one_watch,
    .lost = mirror__one_lost,
};
MIRROR__NAMED_END

/* ---- MPI ---- */
#ifdef MIRROR_MPI
#ifdef __cplusplus
} /* mpi.h outside extern "C": it may declare C++ */
#endif
#include <mpi.h>
#ifdef __cplusplus
extern "C" {
#endif

/* A strategy's state across MPI processes (procs_state). */
typedef struct mirror__mpi {
    MPI_Comm comm;     /* a duplicate of the desc's communicator (MPI_COMM_NULL: none) */
    int broken;        /* a cross-process operation failed: every later one fails at once */
    size_t *counts;    /* every process's replica count */
    float *fold;       /* the partial sums that travel from rank to rank, and the status word */
    size_t fold_cap;
    MPI_Request *fold_reqs; /* the fold's requests (mirror__mpi_all_reduce) */
    size_t fold_pieces;
    int fold_from;     /* the fold starts from the partial sums received */
    size_t fold_begin, fold_len; /* the piece of the fold at hand */
    float *const *in;  /* what an fp32 fold adds, in order (the replicas', or deterministic mode's chunks) */
    size_t nin;
    float *const *bufs; /* where the fp32 total goes, or */
    uint16_t *const *half; /* the 16-bit buffers folded (widened) and given the total (narrowed) */
    int format;
    int scatter;       /* the next fold is scattered: each process keeps its slice of the total */
    size_t keep_begin, keep_len; /* what of the total this process keeps */
    int *slices;       /* every process's part of a gather (count, then place) for MPI, 2 x processes */
    int status;        /* this process's result before a reduction */
    int stop_asked;    /* this process was asked to stop (fit's stop flag) */
    int stop_seen;     /* after a reduction: some process was */
    volatile sig_atomic_t *stop; /* fit's stop flag while it runs: a wait gives up MIRROR__STOP_GRACE s after it */
} mirror__mpi;

static mirror__mpi *mirror__mpi_of(const mirror_strategy *s) { return (mirror__mpi *)s->procs_state; }

#ifdef MIRROR_CUDA
/* In mirror_cuda.h: one NCCL communicator over every GPU of every process. */
static int mirror__cuda_mpi_join(mirror_strategy *s, mirror_error *err);
#endif

enum { MIRROR__STATUS = 3, MIRROR__FOLD_TAG = 4242, MIRROR__FOLD_PIECE = 1 << 16, MIRROR__STOP_GRACE = 1 };

static int mirror__mpi_broken; /* some strategy broke: MPI is not finalized at exit */

static void mirror__mpi_finalize(void)
{
    int done = 0;
    MPI_Finalized(&done);
    if (!done && !mirror__mpi_broken) MPI_Finalize();
}

/* The process that holds global replica g. */
static size_t mirror__mpi_owner(const mirror_strategy *s, size_t g)
{
    const size_t *counts = mirror__mpi_of(s)->counts;
    size_t p, first = 0;
    for (p = 0; p + 1 < s->processes && g >= first + counts[p]; p++) first += counts[p];
    return p;
}

static size_t mirror__mpi_replicas_of(const mirror_strategy *s, size_t p) { return mirror__mpi_of(s)->counts[p]; }

/* A request waited for, and when a stop asked during the wait ends it. */
typedef struct mirror__mpi_waiting {
    MPI_Request *req;
    const mirror_strategy *s;
    double give_up; /* 0 until a stop is asked */
} mirror__mpi_waiting;

/* 1 done, -1 failed, -2 given up after a stop, 0 not yet. A stop asked
   while this process waits (a signal: mpirun sends SIGTERM to every
   process it ends, before SIGKILL) ends the wait MIRROR__STOP_GRACE s
   later: time enough for healthy peers to arrive, so that every process
   stops after the same step, and little enough that rank 0 can save the
   last complete step before mpirun kills it. */
static int mirror__mpi_test(void *ctx)
{
    mirror__mpi_waiting *w = (mirror__mpi_waiting *)ctx;
    volatile sig_atomic_t *stop = mirror__mpi_of(w->s)->stop;
    int done = 0;
    if (MPI_Test(w->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return -1;
    if (done || !stop || !*stop) return done;
    if (w->give_up == 0.0) w->give_up = mirror__now() + MIRROR__STOP_GRACE;
    return mirror__now() > w->give_up ? -2 : 0;
}

/* Waits for req until the deadline. A failed, late or abandoned operation
   breaks the strategy (see above). */
static int mirror__mpi_wait(mirror_strategy *s, MPI_Request *req, const char *what, mirror_error *err)
{
    mirror__mpi_waiting w;
    int got;
    w.req = req, w.s = s, w.give_up = 0.0;
    got = mirror__poll(mirror__mpi_test, &w, s->timeout);
    if (got > 0) return MIRROR_OK;
    mirror__mpi_of(s)->broken = mirror__mpi_broken = 1;
    if (got == -1) return mirror__error(err, MIRROR_ERR_PEER, "%s: MPI failed: another process has gone", what);
    if (got == -2)
        return mirror__error(err, MIRROR_ERR_STOPPED,
                             "%s: rank %zu of %zu was stopped (a signal) while it waited for the other processes, "
                             "which did not come within %g s; this strategy can reach them no more",
                             what, s->rank, s->processes, (double)MIRROR__STOP_GRACE);
    return mirror__error(err, MIRROR_ERR_TIMEOUT,
                         "%s: rank %zu of %zu waited %g s for the other processes: one of them failed, died "
                         "or hangs (the timeout is the strategy desc's timeout or $MIRROR_TIMEOUT); "
                         "this strategy can reach them no more: exit, and mpirun ends the job",
                         what, s->rank, s->processes, s->timeout);
}

/* Starts an operation (rc, an MPI result) and waits for it. */
static int mirror__mpi_done(mirror_strategy *s, int rc, MPI_Request *req, const char *what, mirror_error *err)
{
    if (rc != MPI_SUCCESS) {
        mirror__mpi_of(s)->broken = mirror__mpi_broken = 1;
        return mirror__error(err, MIRROR_ERR_PEER, "%s: MPI refused the operation (error %d)", what, rc);
    }
    return mirror__mpi_wait(s, req, what, err);
}

static int mirror__mpi_usable(mirror_strategy *s, size_t n, const char *what, mirror_error *err)
{
    if (mirror__mpi_of(s)->broken)
        return mirror__error(err, MIRROR_ERR_PEER,
                             "%s: an earlier cross-process operation failed; the processes can no longer "
                             "work together (exit, and start the job again)",
                             what);
    if (n > INT_MAX)
        return mirror__error(err, MIRROR_ERR_CAPACITY, "%s: %zu elements exceed one MPI message (2^31 - 1)", what, n);
    return MIRROR_OK;
}

/* acc (= fold) over this worker's part of the piece [fold_begin,
   fold_begin + fold_len): the partial sums received (or, on rank 0, the
   first buffer's values), plus every local buffer's in order, chunk by
   chunk: the replicas' 16-bit buffers widened, or the fp32 ones of in
   (the replicas', or deterministic mode's chunks). */
static void mirror__mpi_fold_job(void *ctx, size_t worker)
{
    mirror_strategy *s = (mirror_strategy *)ctx;
    mirror__mpi *mp = mirror__mpi_of(s);
    size_t begin, count, end, len, r, i, nin = mp->half ? s->replicas : mp->nin;
    int f = mp->format;
    mirror_shard(mp->fold_len, s->team.size ? s->team.size : 1, worker, &begin, &count);
    begin += mp->fold_begin;
    for (end = begin + count; begin < end; begin += len) {
        float *acc = mp->fold + begin;
        len = MIRROR__MIN(MIRROR__REDUCE_CHUNK, end - begin);
        if (!nin && !mp->fold_from) memset(acc, 0, len * sizeof(float));
        for (r = 0; r < nin; r++) {
            int first = r == 0 && !mp->fold_from;
            if (mp->half) {
                const uint16_t *b = mp->half[r] + begin;
                if (first)
                    for (i = 0; i < len; i++) acc[i] = mirror_hd_widen(b[i], f);
                else
                    for (i = 0; i < len; i++) acc[i] += mirror_hd_widen(b[i], f);
            } else if (first) {
                memcpy(acc, mp->in[r] + begin, len * sizeof(float));
            } else {
                const float *b = mp->in[r] + begin;
                for (i = 0; i < len; i++) acc[i] += b[i];
            }
        }
    }
}

/* The total (what of it this process keeps) into every local buffer
   (16-bit ones narrowed once). */
static void mirror__mpi_unfold_job(void *ctx, size_t worker)
{
    mirror_strategy *s = (mirror_strategy *)ctx;
    mirror__mpi *mp = mirror__mpi_of(s);
    size_t begin, count, r, i;
    mirror_shard(mp->keep_len, s->team.size ? s->team.size : 1, worker, &begin, &count);
    begin += mp->keep_begin;
    for (r = 0; r < s->replicas && count; r++) {
        if (!mp->half) {
            memcpy(mp->bufs[r] + begin, mp->fold + begin, count * sizeof(float));
            continue;
        }
        for (i = begin; i < begin + count; i++) mp->half[r][i] = mirror_hd_narrow(mp->fold[i], mp->format);
    }
}

/* Piece k of the pieces of a fold of n sums: acc[*at, *at + *len); the
   last piece carries the status word too. */
static void mirror__fold_piece(size_t n, size_t pieces, size_t k, size_t *at, size_t *len)
{
    *at = k * MIRROR__FOLD_PIECE;
    *len = (k + 1 == pieces ? n + MIRROR__STATUS : *at + MIRROR__FOLD_PIECE) - *at;
}

/* Waits for every request of reqs[0, n). */
static int mirror__mpi_wait_all(mirror_strategy *s, MPI_Request *reqs, size_t n, const char *what, mirror_error *err)
{
    size_t i;
    int rc = MIRROR_OK;
    for (i = 0; i < n && rc == MIRROR_OK; i++) rc = mirror__mpi_wait(s, &reqs[i], what, err);
    return rc;
}

/* The scatter of a fold (scatter): the sums of [at, at + len) that
   fall in process p's slice of n, as [*lo, *hi); empty when *lo == *hi. */
static void mirror__scatter_part(const mirror_strategy *s, size_t n, size_t p, size_t at, size_t len, size_t *lo,
                                 size_t *hi)
{
    size_t begin, count;
    mirror__process_slice(n, s->processes, p, &begin, &count);
    *lo = MIRROR__MAX(at, begin);
    *hi = MIRROR__MAX(*lo, MIRROR__MIN(at + len, begin + count));
}

/* The fold (see above) of in[0, nin) (fp32) or the 16-bit half buffers
   into bufs or half, with the status word: on return peer holds the first
   failed rank (plus one; 0: none), peer_code its code, and stop_seen the
   stops. It runs in pieces of MIRROR__FOLD_PIECE
   floats, pipelined: a rank sends piece k on while it folds piece k + 1,
   and the last rank broadcasts each piece as soon as it is summed. The
   pieces change no sum: each element still adds up in rank order.
   Scattered (scatter, the update sharded across processes: a
   reduce-scatter), the last rank sends each process only the sums of its
   slice (mirror__process_slice) and broadcasts the status word alone, and
   each process writes only its slice into its buffers. */
static int mirror__mpi_all_reduce(mirror_strategy *s, float *const *in, size_t nin, float *const *bufs,
                                  uint16_t *const *half, size_t n, int format, size_t *peer, int *peer_code,
                                  mirror_error *err)
{
    mirror__mpi *mp = mirror__mpi_of(s);
    const char *what = mp->scatter ? "reduce-scatter across processes" : "all-reduce across processes";
    size_t total = n + MIRROR__STATUS, pieces = n ? (n + MIRROR__FOLD_PIECE - 1) / MIRROR__FOLD_PIECE : 1, k, at, len;
    size_t p, lo, hi, nreqs = 4 * pieces + s->processes + 1, scattered = 0;
    MPI_Request *recv, *send, *bcast, *scat;
    float *acc;
    int rc, first = s->rank == 0, last = s->rank + 1 == s->processes, scatter = mp->scatter;
    mp->scatter = 0; /* consumed, also on failure */
    if ((rc = mirror__mpi_usable(s, total, what, err))) return rc;
    if (total > mp->fold_cap || pieces > mp->fold_pieces) {
        MIRROR_FREE(mp->fold);
        MIRROR_FREE(mp->fold_reqs);
        mp->fold_cap = mp->fold_pieces = 0;
        mp->fold = (float *)mirror__alloc(total, sizeof(float));
        mp->fold_reqs = (MPI_Request *)mirror__alloc(nreqs, sizeof(MPI_Request));
        if (!mp->fold || !mp->fold_reqs) return mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: out of memory", what);
        mp->fold_cap = total, mp->fold_pieces = pieces;
    }
    /* a receive, a send and a broadcast a piece, and the status word's
       broadcast; scattered, a send for each part of a piece in a slice */
    acc = mp->fold;
    recv = mp->fold_reqs, send = recv + pieces, bcast = send + pieces, scat = bcast + pieces + 1;
    mp->keep_begin = 0, mp->keep_len = n;
    if (scatter) mirror__process_slice(n, s->processes, s->rank, &mp->keep_begin, &mp->keep_len);
    mp->in = in, mp->nin = nin;
    mp->bufs = bufs;
    mp->half = half;
    mp->format = format;
    mp->fold_from = !first;
    for (k = 0; k < pieces && !first; k++) { /* every piece's receive posted at once */
        mirror__fold_piece(n, pieces, k, &at, &len);
        if ((rc = MPI_Irecv(acc + at, (int)len, MPI_FLOAT, (int)s->rank - 1, MIRROR__FOLD_TAG, mp->comm, &recv[k])))
            return mirror__mpi_done(s, rc, &recv[k], what, err);
    }
    for (k = 0; k < pieces; k++) {
        mirror__fold_piece(n, pieces, k, &at, &len);
        if (!first && (rc = mirror__mpi_wait(s, &recv[k], what, err))) return rc;
        mp->fold_begin = at;
        mp->fold_len = MIRROR__MIN(at + len, n) - at;
        if (mp->fold_len) mirror__run(&s->team, mirror__mpi_fold_job, s);
        if (k + 1 == pieces) { /* the status word, behind the sums */
            if (first) acc[n] = acc[n + 1] = acc[n + 2] = 0.0f;
            if (mp->status && acc[n] == 0.0f) acc[n] = (float)(s->rank + 1), acc[n + 1] = (float)mp->status;
            if (mp->stop_asked) acc[n + 2] = 1.0f;
        }
        if (!last) {
            rc = MPI_Isend(acc + at, (int)len, MPI_FLOAT, (int)s->rank + 1, MIRROR__FOLD_TAG, mp->comm, &send[k]);
            if (rc) return mirror__mpi_done(s, rc, &send[k], what, err);
        } else if (!scatter) {
            if ((rc = MPI_Ibcast(acc + at, (int)len, MPI_FLOAT, (int)s->rank, mp->comm, &bcast[k])))
                return mirror__mpi_done(s, rc, &bcast[k], what, err);
        } else {
            bcast[k] = MPI_REQUEST_NULL; /* done at once */
        }
        for (p = 0; last && scatter && p + 1 < s->processes; p++) {
            mirror__scatter_part(s, n, p, at, MIRROR__MIN(at + len, n) - at, &lo, &hi);
            if (lo < hi && (rc = MPI_Isend(acc + lo, (int)(hi - lo), MPI_FLOAT, (int)p, MIRROR__FOLD_TAG, mp->comm,
                                           &scat[scattered++])))
                return mirror__mpi_done(s, rc, &scat[scattered - 1], what, err);
        }
    }
    /* The others receive the total (scattered: their slice) into acc once
       their sends are out of it; the status word comes with it. */
    if (!last && (rc = mirror__mpi_wait_all(s, send, pieces, what, err))) return rc;
    for (k = 0; k < pieces && !last; k++) {
        mirror__fold_piece(n, pieces, k, &at, &len);
        if (scatter) {
            mirror__scatter_part(s, n, s->rank, at, MIRROR__MIN(at + len, n) - at, &lo, &hi);
            rc = lo < hi ? MPI_Irecv(acc + lo, (int)(hi - lo), MPI_FLOAT, (int)s->processes - 1, MIRROR__FOLD_TAG,
                                     mp->comm, &bcast[k])
                         : MPI_SUCCESS;
            if (lo == hi) bcast[k] = MPI_REQUEST_NULL;
        } else {
            rc = MPI_Ibcast(acc + at, (int)len, MPI_FLOAT, (int)s->processes - 1, mp->comm, &bcast[k]);
        }
        if (rc) return mirror__mpi_done(s, rc, &bcast[k], what, err);
    }
    if (scatter) {
        rc = MPI_Ibcast(acc + n, MIRROR__STATUS, MPI_FLOAT, (int)s->processes - 1, mp->comm, &bcast[pieces]);
        if (rc) return mirror__mpi_done(s, rc, &bcast[pieces], what, err);
    }
    if ((rc = mirror__mpi_wait_all(s, bcast, pieces + (size_t)scatter, what, err)) ||
        (rc = mirror__mpi_wait_all(s, scat, scattered, what, err)))
        return rc;
    mirror__run(&s->team, mirror__mpi_unfold_job, s);
    *peer = (size_t)acc[n];
    *peer_code = (int)acc[n + 1];
    mp->stop_seen = acc[n + 2] != 0.0f;
    mp->status = mp->stop_asked = 0; /* consumed: a later reduction starts clean */
    return MIRROR_OK;
}

/* After a fold: MIRROR_ERR_PEER when another rank failed before it (peer:
   that rank plus one, 0 for none, with its code); this rank's own failure
   is its caller's to report. */
static int mirror__mpi_peer_failed(const mirror_strategy *s, size_t peer, int code, mirror_error *err)
{
    if (!peer || peer == s->rank + 1) return MIRROR_OK;
    return mirror__error(err, MIRROR_ERR_PEER, "rank %zu failed before the all-reduce (%s); nothing of the step was applied",
                         peer - 1, mirror_result_string(code));
}

/* The reducer's entry points: a failure in another process before the
   reduction is an error here too. */
static int mirror__mpi_reduce_status(mirror_strategy *s, float *const *in, size_t nin, float *const *bufs,
                                     uint16_t *const *half, size_t n, int format, mirror_error *err)
{
    size_t peer = 0;
    int code = 0, rc = mirror__mpi_all_reduce(s, in, nin, bufs, half, n, format, &peer, &code, err);
    return rc ? rc : mirror__mpi_peer_failed(s, peer, code, err);
}

static int mirror__mpi_all_reduce_sum(mirror_strategy *s, float *const *bufs, size_t n, mirror_error *err)
{
    return mirror__mpi_reduce_status(s, bufs, s->replicas, bufs, NULL, n, 0, err);
}

static int mirror__mpi_all_reduce_half(mirror_strategy *s, uint16_t *const *bufs, size_t n, int format,
                                       mirror_error *err)
{
    return mirror__mpi_reduce_status(s, NULL, 0, NULL, bufs, n, format, err);
}

/* Deterministic mode's list, folded rank by rank (the processes
   interface's sum_list). */
static int mirror__mpi_sum_list(mirror_strategy *s, float *const *in, const size_t *owner, size_t nin,
                                float *const *bufs, size_t n, size_t *keep, size_t *keep_len, mirror_error *err)
{
    mirror__mpi *mp = mirror__mpi_of(s);
    int rc = mirror__mpi_reduce_status(s, in, nin, bufs, NULL, n, 0, err);
    (void)owner;
    *keep = mp->keep_begin, *keep_len = mp->keep_len;
    return rc;
}

/* What the next fold carries (see mirror__mpi_all_reduce). */
static void mirror__mpi_carry(mirror_strategy *s, int result, int stop, int scatter)
{
    mirror__mpi *mp = mirror__mpi_of(s);
    mp->status = result;
    mp->stop_asked = stop;
    mp->scatter = scatter;
}

static int mirror__mpi_stopped(const mirror_strategy *s) { return mirror__mpi_of(s)->stop_seen; }

static void mirror__mpi_watch(mirror_strategy *s, volatile sig_atomic_t *stop)
{
    mirror__mpi *mp = mirror__mpi_of(s);
    mp->stop_seen = 0;
    mp->stop = stop;
}

static int mirror__mpi_lost(const mirror_strategy *s) { return mirror__mpi_of(s)->broken; }

/* Global replica root's buffer into every replica of every process. */
static int mirror__mpi_broadcast(mirror_strategy *s, float *const *bufs, size_t n, size_t root, mirror_error *err)
{
    const char *what = "broadcast across processes";
    size_t owner = mirror__mpi_owner(s, root), local = owner == s->rank ? root - s->first : 0;
    MPI_Request req;
    int rc;
    if ((rc = mirror__mpi_usable(s, n, what, err)) ||
        (rc = mirror__mpi_done(s, MPI_Ibcast(bufs[local], (int)n, MPI_FLOAT, (int)owner, mirror__mpi_of(s)->comm, &req),
                               &req, what, err)))
        return rc;
    return s->replicas > 1 ? mirror__cpu_reducer.broadcast(s, bufs, n, local, err) : MIRROR_OK;
}

/* Every process's part of buf (mp->slices: counts, then places, in
   values of `size` bytes) into every process's buf, in place, bit for bit. */
static int mirror__mpi_gatherv(mirror_strategy *s, void *buf, size_t size, const char *what, mirror_error *err)
{
    mirror__mpi *mp = mirror__mpi_of(s);
    MPI_Datatype type = size == 8 ? MPI_UINT64_T : size == 4 ? MPI_UINT32_T : MPI_UINT16_T;
    MPI_Request req;
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, type, buf, mp->slices, mp->slices + s->processes, type, mp->comm, &req);
    return mirror__mpi_done(s, rc, &req, what, err);
}

/* The processes interface's gather_slices: the slices of
   mirror__process_slice, or the verdict's flag and blocks. */
static int mirror__mpi_gather_slices(mirror_strategy *s, void *buf, size_t n, size_t size, int parts, mirror_error *err)
{
    const char *what = parts ? "the update's verdict across processes" : "all-gather across processes";
    int *slices = mirror__mpi_of(s)->slices;
    size_t p, begin, count, blocks = (n + MIRROR__NORM_BLOCK - 1) / MIRROR__NORM_BLOCK;
    int rc;
    if ((rc = mirror__mpi_usable(s, parts ? blocks + s->processes : n, what, err))) return rc;
    for (p = 0; p < s->processes; p++) {
        if (parts) { /* the flag, then the blocks */
            mirror__process_blocks(n, s->processes, p, &begin, &count);
            begin += p, count += 1;
        } else {
            mirror__process_slice(n, s->processes, p, &begin, &count);
        }
        slices[p] = (int)count, slices[s->processes + p] = (int)begin;
    }
    return mirror__mpi_gatherv(s, buf, parts ? sizeof(double) : size, what, err);
}

/* The processes interface's gather: parts as the caller lays them out. */
static int mirror__mpi_gather(mirror_strategy *s, void *buf, size_t size, const size_t *parts, const char *what,
                              mirror_error *err)
{
    int *slices = mirror__mpi_of(s)->slices;
    size_t p, end = 0;
    int rc;
    for (p = 0; p < s->processes; p++) end = MIRROR__MAX(end, parts[s->processes + p] + parts[p]);
    if ((rc = mirror__mpi_usable(s, end, what, err))) return rc;
    for (p = 0; p < s->processes; p++)
        slices[p] = (int)parts[p], slices[s->processes + p] = (int)parts[s->processes + p];
    return mirror__mpi_gatherv(s, buf, size, what, err);
}

MIRROR__NAMED_BEGIN
static const mirror__reducer mirror__mpi_reducer = {
    .name = "cpu-ordered, then MPI in rank order",
    .all_reduce_sum = mirror__mpi_all_reduce_sum,
    .broadcast = mirror__mpi_broadcast,
    .all_reduce_half = mirror__mpi_all_reduce_half,
    .sum_list = mirror__cpu_sum_list, /* one process's */
    .reduce_scatter = NULL, /* no sharded update across processes */
    .all_gather = NULL,
};
MIRROR__NAMED_END

static void mirror__mpi_teardown(mirror_strategy *s);

/* Joins the processes of the desc's communicator: a duplicate of it with
   errors returned, this process's rank, and its rank among the processes
   of its machine (MPI_COMM_TYPE_SHARED; the default GPU of a process).
   Alone, it frees the duplicate and takes one process's table. */
static int mirror__mpi_join(mirror_strategy *s, const mirror_strategy_desc *d, mirror_error *err)
{
    MPI_Comm base = d->mpi_comm ? *(const MPI_Comm *)d->mpi_comm : MPI_COMM_WORLD, local = MPI_COMM_NULL;
    MPI_Request req;
    mirror__mpi *mp;
    int ready = 0, provided = 0, rank = 0, size = 0;
    if (!(mp = (mirror__mpi *)mirror__zalloc(1, sizeof *mp)))
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: out of memory");
    mp->comm = MPI_COMM_NULL; /* before anything can fail: the teardown reads it */
    s->procs_state = mp;
    MPI_Initialized(&ready);
    if (!ready) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return mirror__error(err, MIRROR_ERR_DEVICE, "strategy: MPI_Init_thread failed");
        if (provided < MPI_THREAD_SERIALIZED)
            return mirror__error(err, MIRROR_ERR_UNSUPPORTED, "strategy: this MPI gives threads no MPI_THREAD_SERIALIZED");
        atexit(mirror__mpi_finalize);
    }
    if (MPI_Comm_idup(base, &mp->comm, &req) != MPI_SUCCESS)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "strategy: cannot duplicate the MPI communicator");
    if (mirror__mpi_wait(s, &req, "strategy: joining the processes", err)) { /* whose rank is not known yet */
        mp->comm = MPI_COMM_NULL;
        return mirror__error(err, MIRROR_ERR_TIMEOUT,
                             "strategy: joining the processes: the others did not answer within %g s (the timeout): "
                             "one of them failed, died or never created its strategy",
                             s->timeout);
    }
    MPI_Comm_set_errhandler(mp->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(mp->comm, &rank);
    MPI_Comm_size(mp->comm, &size);
    s->rank = (size_t)rank;
    s->processes = (size_t)size;
    /* Every process has answered the duplicate, so this collective (MPI
       has no non-blocking form of it) finds them all. */
    if (MPI_Comm_split_type(mp->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) != MPI_SUCCESS)
        return mirror__error(err, MIRROR_ERR_PEER, "strategy: MPI could not group the processes by machine");
    MPI_Comm_rank(local, &rank);
    MPI_Comm_size(local, &size);
    s->local_rank = (size_t)rank;
    s->local_size = (size_t)size;
    MPI_Comm_free(&local);
    if (s->processes == 1) { /* alone: nothing to do across processes */
        mirror__mpi_teardown(s);
        s->procs = &mirror__one_process;
    }
    return MIRROR_OK;
}

/* Every process's replicas, and the reducer across the processes. */
static int mirror__mpi_setup(mirror_strategy *s, mirror_error *err)
{
    MPI_Request req;
    unsigned long long mine = s->replicas, *all;
    char range[64];
    int rc;
    size_t p;
    mirror__mpi *mp = mirror__mpi_of(s);
    s->first = s->world = 0;
    all = (unsigned long long *)mirror__alloc(s->processes, sizeof *all);
    mp->counts = (size_t *)mirror__alloc(s->processes, sizeof *mp->counts);
    mp->slices = (int *)mirror__alloc(2 * s->processes, sizeof *mp->slices);
    if (!all || !mp->counts || !mp->slices) {
        MIRROR_FREE(all);
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: out of memory");
    }
    rc = mirror__mpi_done(s,
                          MPI_Iallgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, mp->comm,
                                         &req),
                          &req, "strategy: counting the replicas of every process", err);
    for (p = 0; rc == MIRROR_OK && p < s->processes; p++) {
        mp->counts[p] = (size_t)all[p];
        if (p < s->rank) s->first += mp->counts[p];
        s->world += mp->counts[p];
    }
    MIRROR_FREE(all);
    if (rc == MIRROR_OK && s->world > 1 << 20)
        rc = mirror__error(err, MIRROR_ERR_ARGUMENT, "strategy: %zu replicas in all: at most 2^20", s->world);
    if (rc) return rc;
#ifdef MIRROR_CUDA
    if (s->gpu && (rc = mirror__cuda_mpi_join(s, err))) return rc; /* its reducer: NCCL across processes */
#endif
    if (!s->gpu) s->reducer = &mirror__mpi_reducer;
    if (s->replicas == 1)
        snprintf(range, sizeof range, "replica %zu", s->first);
    else
        snprintf(range, sizeof range, "replicas %zu-%zu", s->first, s->first + s->replicas - 1);
    snprintf(s->describe, sizeof s->describe, "%zu replicas in %zu processes; rank %zu has %s %s %.64s, reducer %s",
             s->world, s->processes, s->rank, s->gpu ? "CUDA" : "CPU", range,
             s->gpu ? s->devices : s->replicas == 1 ? "(a thread)" : "(threads)",
             s->reducer->name);
    return MIRROR_OK;
}

static void mirror__mpi_teardown(mirror_strategy *s)
{
    mirror__mpi *mp = mirror__mpi_of(s);
    int done = 0;
    if (!mp) return;
    s->procs_state = NULL;
    MPI_Finalized(&done);
    if (!done && mp->comm != MPI_COMM_NULL && !mp->broken) MPI_Comm_free(&mp->comm);
    MIRROR_FREE(mp->counts);
    MIRROR_FREE(mp->slices);
    if (mp->broken) return; /* requests may still be posted on them (and on mp): left to the process's end */
    MIRROR_FREE(mp->fold);
    MIRROR_FREE(mp->fold_reqs);
    MIRROR_FREE(mp);
}

/* Sums v[n] over the processes, in rank order: every process the same. */
static int mirror__mpi_sum_doubles(mirror_strategy *s, double *v, size_t n, const char *what, mirror_error *err)
{
    double *all;
    MPI_Request req;
    size_t p, i;
    int rc;
    if ((rc = mirror__mpi_usable(s, n * s->processes, what, err))) return rc;
    if (!(all = (double *)mirror__alloc(n * s->processes, sizeof(double))))
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: out of memory", what);
    rc = mirror__mpi_done(s, MPI_Iallgather(v, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, mirror__mpi_of(s)->comm,
                                            &req),
                          &req, what, err);
    for (i = 0; rc == MIRROR_OK && i < n; i++)
        for (v[i] = 0.0, p = 0; p < s->processes; p++) v[i] += all[p * n + i];
    MIRROR_FREE(all);
    return rc;
}

/* The first exchange of every agreement (mirror__mpi_agree and _compare),
   of one shape: each process's public call (a hash of its name) and
   result. Processes in different calls (one loading a checkpoint or
   weights that another did not) find it out here and fail alike, each
   message naming the calls and what each model's parameters came from
   (note, may be NULL), instead of going on into exchanges of other shapes
   (Open MPI's MPI_ERR_TRUNCATE abort, or one process's hashes read as
   another's results). *all (the caller frees it) gets each process's
   result. */
static int mirror__mpi_meet(mirror_strategy *s, int result, const char *note, const char *what, int64_t **all,
                            mirror_error *err)
{
    enum { SAID = 200 };
    const char *call = s->call_name ? s->call_name : what;
    int64_t mine[2], *got;
    char *said;
    MPI_Comm comm = mirror__mpi_of(s)->comm;
    MPI_Request req;
    size_t p, other = 0, differ = 0;
    int rc;
    *all = NULL;
    if ((rc = mirror__mpi_usable(s, 2 * s->processes, what, err))) return rc;
    if (!(got = (int64_t *)mirror__alloc(2 * s->processes, sizeof(int64_t))))
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: out of memory", what);
    mine[0] = (int64_t)(mirror__hash(0, call, strlen(call)) >> 1), mine[1] = result;
    rc = mirror__mpi_done(s, MPI_Iallgather(mine, 2, MPI_INT64_T, got, 2, MPI_INT64_T, comm, &req), &req, what, err);
    for (p = 1; rc == MIRROR_OK && p < s->processes; p++)
        if (got[2 * p] != got[0] && !differ++) other = p;
    if (rc || !other) {
        if (rc) MIRROR_FREE(got);
        else *all = got;
        return rc;
    }
    MIRROR_FREE(got);
    /* Every process saw the same difference: each one's words, to all. */
    if (!(said = (char *)mirror__zalloc(s->processes + 1, SAID)))
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: out of memory", what);
    snprintf(said + s->processes * SAID, SAID, "%s%s%s%s%s", call, result ? " (failed: " : "",
             result ? mirror_result_string(result) : "", result ? ")" : "", note ? ", " : "");
    if (note) snprintf(said + s->processes * SAID + strlen(said + s->processes * SAID),
                       SAID - strlen(said + s->processes * SAID), "%s", note);
    rc = mirror__mpi_done(s, MPI_Iallgather(said + s->processes * SAID, SAID, MPI_CHAR, said, SAID, MPI_CHAR, comm,
                                            &req),
                          &req, what, err);
    if (rc == MIRROR_OK) {
        said[SAID - 1] = said[other * SAID + SAID - 1] = '\0';
        rc = mirror__error(err, MIRROR_ERR_ARGUMENT,
                           "%s: the processes are in different calls: rank 0 in %s; rank %zu in %s%s; make the same "
                           "calls in each",
                           call, said, other, said + other * SAID, differ > 1 ? " (and others)" : "");
    }
    MIRROR_FREE(said);
    return rc;
}

/* Every process's result; the first failure's message from its process. */
static int mirror__mpi_agree(mirror_strategy *s, int result, const char *note, mirror_error *err)
{
    struct {
        int code;
        char message[sizeof err->message];
    } word;
    MPI_Comm comm = mirror__mpi_of(s)->comm;
    MPI_Request req;
    int64_t *all;
    int rc;
    size_t p;
    if ((rc = mirror__mpi_meet(s, result, note, "mirror_agree", &all, err))) return rc;
    for (p = 0; p < s->processes && all[2 * p + 1] == MIRROR_OK; p++) {}
    MIRROR_FREE(all);
    if (p == s->processes) return MIRROR_OK;
    memset(&word, 0, sizeof word);
    word.code = result;
    if (err && p == s->rank) memcpy(word.message, err->message, sizeof word.message);
    if ((rc = mirror__mpi_done(s, MPI_Ibcast(&word, (int)sizeof word, MPI_BYTE, (int)p, comm, &req), &req,
                               "mirror_agree", err)))
        return rc;
    if (p == s->rank) return result;
    word.message[sizeof word.message - 1] = '\0';
    return mirror__error(err, MIRROR_ERR_PEER, "rank %zu failed: %s", p, word.message[0] ? word.message :
                         mirror_result_string(word.code));
}

/* Rank 0's result (and message) on every process: what rank 0 alone did
   (a checkpoint save) succeeded or failed everywhere. */
static int mirror__mpi_share(mirror_strategy *s, int result, mirror_error *err)
{
    struct {
        int code;
        char message[sizeof err->message];
    } word;
    MPI_Comm comm = mirror__mpi_of(s)->comm;
    MPI_Request req;
    int rc;
    if ((rc = mirror__mpi_usable(s, 1, "sharing rank 0's result", err))) return rc;
    memset(&word, 0, sizeof word);
    word.code = result;
    if (s->rank == 0 && result && err) memcpy(word.message, err->message, sizeof word.message);
    if ((rc = mirror__mpi_done(s, MPI_Ibcast(&word, (int)sizeof word, MPI_BYTE, 0, comm, &req), &req,
                               "sharing rank 0's result", err)))
        return rc;
    if (s->rank == 0 || !word.code) return word.code;
    word.message[sizeof word.message - 1] = '\0';
    return mirror__error(err, word.code, "rank 0: %s", word.message);
}

/* Every process's items against rank 0's: each one that differs named,
   with the first ranks that differ, in one message on every process. */
static int mirror__mpi_compare(mirror_strategy *s, const mirror__agreed *items, size_t n, const char *what,
                               const char *note, mirror_error *err)
{
    enum { TOLD = 160 };
    char list[sizeof err->message / 2], *told; /* half: the advice after it survives */
    uint64_t *all;
    int64_t *met;
    MPI_Comm comm = mirror__mpi_of(s)->comm;
    MPI_Request req;
    size_t i, p, differ, len = 0, told_item = n, told_rank = 0;
    int rc;
    if ((rc = mirror__mpi_meet(s, MIRROR_OK, note, what, &met, err))) return rc;
    MIRROR_FREE(met);
    if ((rc = mirror__mpi_usable(s, n * s->processes, what, err))) return rc;
    if (!(all = (uint64_t *)mirror__alloc(n * (s->processes + 1), sizeof(uint64_t))))
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: out of memory", what);
    for (i = 0; i < n; i++) all[n * s->processes + i] = items[i].hash;
    rc = mirror__mpi_done(s, MPI_Iallgather(all + n * s->processes, (int)n, MPI_UINT64_T, all, (int)n, MPI_UINT64_T,
                                            comm, &req),
                          &req, what, err);
    list[0] = '\0';
    for (i = 0; rc == MIRROR_OK && i < n; i++) {
        size_t first = 0;
        for (differ = 0, p = 1; p < s->processes; p++)
            if (all[p * n + i] != all[i] && !differ++) first = p;
        if (differ && len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s (on rank %zu%s)", len ? "; " : "",
                                    items[i].what, first, differ > 1 ? " and others" : "");
        if (differ && items[i].told && told_item == n) told_item = i, told_rank = first;
    }
    MIRROR_FREE(all);
    if (rc || !list[0]) return rc;
    /* The first item that differs and can be told: each process's words, to all. */
    if (told_item < n && len < sizeof list) {
        if (!(told = (char *)mirror__zalloc(s->processes + 1, TOLD)))
            return mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: out of memory", what);
        snprintf(told + s->processes * TOLD, TOLD, "%s", items[told_item].told);
        rc = mirror__mpi_done(s, MPI_Iallgather(told + s->processes * TOLD, TOLD, MPI_CHAR, told, TOLD, MPI_CHAR,
                                                comm, &req),
                              &req, what, err);
        told[TOLD - 1] = told[told_rank * TOLD + TOLD - 1] = '\0';
        if (rc == MIRROR_OK)
            len += (size_t)snprintf(list + len, sizeof list - len, ": rank 0's is %s, rank %zu's %s", told, told_rank,
                                    told + told_rank * TOLD);
        MIRROR_FREE(told);
        if (rc) return rc;
    }
    if (len >= sizeof list) memcpy(list + sizeof list - 4, "...", 4); /* a list cut says so */
    return mirror__error(err, MIRROR_ERR_ARGUMENT, "%s: the processes differ from rank 0 in %s: they must be started "
                         "alike to train together", what, list);
}

MIRROR__NAMED_BEGIN
static const mirror__processes mirror__mpi_processes = {
    .name = "MPI",
    .join = mirror__mpi_join,
    .setup = mirror__mpi_setup,
    .teardown = mirror__mpi_teardown,
    .replicas_of = mirror__mpi_replicas_of,
    .agree = mirror__mpi_agree,
    .compare = mirror__mpi_compare,
    .share = mirror__mpi_share,
    .carry = mirror__mpi_carry,
    .stopped = mirror__mpi_stopped,
    .sum_list = mirror__mpi_sum_list,
    .sum_doubles = mirror__mpi_sum_doubles,
    .gather_slices = mirror__mpi_gather_slices,
    .gather = mirror__mpi_gather,
    .watch = mirror__mpi_watch,
    .lost = mirror__mpi_lost,
};
MIRROR__NAMED_END
#endif

static const mirror__processes *mirror__processes_built(void)
{
#ifdef MIRROR_MPI
    return &mirror__mpi_processes;
#else
    return &mirror__one_process;
#endif
}

MIRROR_API int mirror_agree(mirror_strategy *s, int result, mirror_error *err)
{
    int rc;
    if (!s) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_agree: strategy is NULL");
    if (s->processes == 1) return result;
    if ((rc = mirror__enter(s, err, "mirror_agree"))) return rc;
    rc = s->procs->agree(s, result, NULL, err);
    mirror__leave(s);
    return rc;
}

// >>model and pool ----------------------------------------------------------
/* A model: its desc's defaults and checks, its layers as they are added,
   and at build the pool: one flat arena each for parameters, gradients,
   optimizer state and activations per replica, planned once, checked
   against the memory there is, then allocated; parameters and state in
   and out. */

/* Defaults for zero fields, in one place. */
static mirror_model_desc mirror__model_defaults(mirror_model_desc d)
{
    mirror_optimizer_desc *o = &d.optimizer;
    if (!d.height) d.height = 1;
    if (!d.width) d.width = 1;
    if (!d.max_batch) d.max_batch = 256;
    if (d.loss == MIRROR_LOSS_DEFAULT) d.loss = MIRROR_LOSS_SOFTMAX_CE;
    if (o->kind == MIRROR_OPT_DEFAULT) o->kind = MIRROR_OPT_SGD;
    if (o->lr == 0.0f) o->lr = o->kind == MIRROR_OPT_SGD ? 0.01f : 0.001f;
    if (o->beta1 == 0.0f) o->beta1 = 0.9f;
    if (o->beta2 == 0.0f) o->beta2 = 0.999f;
    if (o->eps == 0.0f) o->eps = 1e-8f;
    if (o->weight_decay == 0.0f && o->kind == MIRROR_OPT_ADAMW) o->weight_decay = 0.01f;
    if (o->gamma == 0.0f) o->gamma = 0.1f;
    if (d.deterministic && !d.chunk) d.chunk = 16;
    if (d.precision != MIRROR_PRECISION_FP32) {
        mirror_loss_scale_desc *ls = &d.loss_scale;
        if (ls->kind == MIRROR_SCALE_DEFAULT)
            ls->kind = d.precision == MIRROR_PRECISION_FP16 ? MIRROR_SCALE_DYNAMIC : MIRROR_SCALE_NONE;
        if (ls->init_scale == 0.0f) ls->init_scale = ls->kind == MIRROR_SCALE_NONE ? 1.0f : 65536.0f;
        if (ls->growth_factor == 0.0f) ls->growth_factor = 2.0f;
        if (ls->backoff_factor == 0.0f) ls->backoff_factor = 0.5f;
        if (!ls->growth_interval) ls->growth_interval = 2000;
        if (ls->min_scale == 0.0f) ls->min_scale = 1.0f;
        if (ls->max_scale == 0.0f) ls->max_scale = 16777216.0f;
        if (!ls->max_consecutive_skips) ls->max_consecutive_skips = 50;
    }
    return d;
}

MIRROR_API const char *mirror_precision_name(mirror_precision p)
{
    switch (p) {
    case MIRROR_PRECISION_FP32: return "fp32";
    case MIRROR_PRECISION_FP16: return "fp16";
    case MIRROR_PRECISION_BF16: return "bf16";
    }
    return "unknown";
}

MIRROR_API int mirror_model_create(const mirror_model_desc *desc, mirror_model **out,
                                   mirror_error *err)
{
    mirror_model_desc d;
    mirror_model *m;
    const mirror_optimizer_desc *o;
    size_t in_size;
    int rc;
    if (!out) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_create: out is NULL");
    *out = NULL;
    if (!desc) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_create: desc is NULL");
    if (!desc->strategy)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_create: desc.strategy is NULL");
    d = mirror__model_defaults(*desc);
    o = &d.optimizer;
    if (!d.channels)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_create: desc.channels is 0");
    if (!mirror__mul(d.channels, d.height, &in_size) || !mirror__mul(in_size, d.width, &in_size) ||
        in_size > ((size_t)1 << 28))
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_model_create: input %zux%zux%zu is too large", d.channels,
                             d.height, d.width);
    if (d.max_batch > ((size_t)1 << 24))
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_model_create: max_batch %zu is too large", d.max_batch);
    if ((int)d.loss < 0 || d.loss > MIRROR_LOSS_MSE || (int)d.init < 0 || d.init > MIRROR_INIT_GLOROT ||
        (int)o->kind < 0 || o->kind > MIRROR_OPT_ADAMW)
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_model_create: unknown loss, init or optimizer kind");
    if (mirror__bad_float(o->lr, 0.0f, 1e6f) || mirror__bad_float(o->momentum, 0.0f, 1.0f) ||
        mirror__bad_float(o->weight_decay, 0.0f, 1e6f) || mirror__bad_float_co(o->beta1, 0.0f, 1.0f) ||
        mirror__bad_float_co(o->beta2, 0.0f, 1.0f) || mirror__bad_float_oc(o->eps, 0.0f, 1.0f) ||
        (o->nesterov && o->momentum == 0.0f))
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_model_create: optimizer hyper-parameters out of range "
                             "(lr %.9g in [0, 1e6], momentum %.9g in [0, 1], weight decay %.9g in [0, 1e6], betas "
                             "%.9g %.9g in [0, 1), eps %.9g in (0, 1], nesterov %d with momentum > 0)",
                             (double)o->lr, (double)o->momentum, (double)o->weight_decay,
                             (double)o->beta1, (double)o->beta2, (double)o->eps, o->nesterov);
    if ((rc = mirror__check_schedule(o, err))) return rc;
    if (mirror__bad_float(o->clip_norm, 0.0f, FLT_MAX))
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_create: clip_norm %g: a finite norm >= 0 (0: off)",
                             (double)o->clip_norm);
    if ((rc = mirror__check_loss_scale(&d, err))) return rc;
    if (d.graphs != 0 && d.graphs != 1)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_create: graphs %d: 0 or 1", d.graphs);
    if ((int)d.shard_update < 0 || d.shard_update > MIRROR_SHARD_OFF)
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_model_create: shard_update %d: MIRROR_SHARD_AUTO, _ON or _OFF",
                             (int)d.shard_update);
    if (d.deterministic && (d.deterministic != 1 || d.chunk > ((size_t)1 << 24)))
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_model_create: deterministic %d, chunk %zu: deterministic is 0 or 1, a chunk "
                             "at most 2^24 samples",
                             d.deterministic, d.chunk);
    m = (mirror_model *)mirror__zalloc(1, sizeof *m);
    if (!m) return mirror__error(err, MIRROR_ERR_NO_MEMORY, "mirror_model_create: out of memory");
    m->desc = d;
    m->s = d.strategy;
    m->be = m->s->backend;
    m->adding.c = d.channels;
    m->adding.h = d.height;
    m->adding.w = d.width;
    m->sizes.in = in_size;
    m->plan.chunk = d.deterministic ? d.chunk : 0;
    mirror__strategy_models(m->s, 1);
    *out = m;
    return MIRROR_OK;
}

MIRROR_API mirror_model_desc mirror_model_query_desc(const mirror_model *m)
{
    mirror_model_desc d;
    memset(&d, 0, sizeof d);
    if (!m) return d;
    d = m->desc;
    if (m->built) d.graphs = m->pass.graphs; /* in use, not asked */
    return d;
}

/* Appends a layer whose input is the current shape (its kind checks it
   and shapes its output); records the first error. */
static int mirror__add(mirror_model *m, mirror__layer *l)
{
    const mirror__kind_info *k = &mirror__kinds[l->kind];
    size_t n = m ? m->nlayers : 0, size;
    int rc;
    if (!m) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "layer added to a NULL model");
    if (m->sticky) return m->sticky;
    if (m->built)
        return mirror__fail(m, MIRROR_ERR_STATE, "%s: the model is already built", k->name);
    if (n == MIRROR__MAX_LAYERS)
        return m->sticky = mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: more than %d layers", k->name,
                                        MIRROR__MAX_LAYERS);
    l->c = m->adding.c;
    l->h = m->adding.h;
    l->w = m->adding.w;
    if ((rc = k->shape(m, l, n))) return m->sticky = rc;
    if (!mirror__mul(l->oc, l->oh, &size) || !mirror__mul(size, l->ow, &size) || size > ((size_t)1 << 28) ||
        l->n_w > ((size_t)1 << 30))
        return m->sticky = mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s (layer %zu): too large", k->name, n);
    m->layers[m->nlayers++] = *l;
    m->adding.c = l->oc;
    m->adding.h = l->oh;
    m->adding.w = l->ow;
    return MIRROR_OK;
}

static int mirror__bad_size(mirror_model *m, const char *what, size_t v, size_t max)
{
    if (!m) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "%s: model is NULL", what);
    if (m->sticky) return m->sticky;
    if (v >= 1 && v <= max) return MIRROR_OK;
    return m->sticky = mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s (layer %zu): %zu is out of range [1, %zu]",
                                    what, m->nlayers, v, max);
}

static int mirror__add_layer(mirror_model *m, mirror__kind kind, size_t oc, size_t k, size_t stride,
                             size_t pad)
{
    mirror__layer l;
    memset(&l, 0, sizeof l);
    l.kind = kind;
    l.oc = oc;
    l.k = k;
    l.stride = stride;
    l.pad = pad;
    return mirror__add(m, &l);
}

MIRROR_API int mirror_dense(mirror_model *m, size_t units)
{
    int rc;
    if ((rc = mirror__bad_size(m, "dense: units", units, (size_t)1 << 24))) return rc;
    return mirror__add_layer(m, MIRROR__DENSE, units, 0, 0, 0);
}

MIRROR_API int mirror_conv2d(mirror_model *m, size_t filters, size_t kernel, size_t stride,
                             size_t padding)
{
    int rc;
    if ((rc = mirror__bad_size(m, "conv2d: filters", filters, (size_t)1 << 16)) ||
        (rc = mirror__bad_size(m, "conv2d: kernel", kernel, 64)) ||
        (rc = mirror__bad_size(m, "conv2d: stride", stride, 64)))
        return rc;
    return mirror__add_layer(m, MIRROR__CONV2D, filters, kernel, stride, padding);
}

MIRROR_API int mirror_relu(mirror_model *m) { return mirror__add_layer(m, MIRROR__RELU, 0, 0, 0, 0); }
MIRROR_API int mirror_tanh(mirror_model *m) { return mirror__add_layer(m, MIRROR__TANH, 0, 0, 0, 0); }
MIRROR_API int mirror_sigmoid(mirror_model *m) { return mirror__add_layer(m, MIRROR__SIGMOID, 0, 0, 0, 0); }
MIRROR_API int mirror_gelu(mirror_model *m) { return mirror__add_layer(m, MIRROR__GELU, 0, 0, 0, 0); }

MIRROR_API int mirror_maxpool2d(mirror_model *m, size_t window, size_t stride)
{
    int rc;
    if ((rc = mirror__bad_size(m, "maxpool2d: window", window, 64)) ||
        (rc = mirror__bad_size(m, "maxpool2d: stride", stride, 64)))
        return rc;
    return mirror__add_layer(m, MIRROR__MAXPOOL2D, 0, window, stride, 0);
}

MIRROR_API int mirror_flatten(mirror_model *m) { return mirror__add_layer(m, MIRROR__FLATTEN, 0, 0, 0, 0); }

MIRROR_API int mirror_avgpool2d(mirror_model *m, size_t window, size_t stride)
{
    int rc;
    if ((rc = mirror__bad_size(m, "avgpool2d: window", window, 64)) ||
        (rc = mirror__bad_size(m, "avgpool2d: stride", stride, 64)))
        return rc;
    return mirror__add_layer(m, MIRROR__AVGPOOL2D, 0, window, stride, 0);
}

MIRROR_API int mirror_dropout(mirror_model *m, float p)
{
    mirror__layer l;
    if (m && !m->built && !m->sticky && !(p >= 0.0f && p < 1.0f))
        return m->sticky = mirror__fail(m, MIRROR_ERR_ARGUMENT, "dropout: p %g: a probability in [0, 1)", (double)p);
    memset(&l, 0, sizeof l);
    l.kind = MIRROR__DROPOUT;
    l.p = p;
    return mirror__add(m, &l);
}

MIRROR_API int mirror_global_avgpool(mirror_model *m)
{
    return mirror__add_layer(m, MIRROR__GLOBAL_AVGPOOL, 0, 0, 1, 0);
}

static int mirror__batchnorm(mirror_model *m, float momentum, float eps, int local)
{
    mirror__layer l;
    if (m && !m->built && !m->sticky && (!(momentum > 0.0f && momentum <= 1.0f) || !(eps > 0.0f && eps <= 1.0f)))
        return m->sticky = mirror__fail(m, MIRROR_ERR_ARGUMENT,
                                        "batchnorm: momentum %g and eps %g: each in (0, 1]", (double)momentum,
                                        (double)eps);
    memset(&l, 0, sizeof l);
    l.kind = MIRROR__BATCHNORM;
    l.momentum = momentum, l.eps = eps, l.local = local;
    return mirror__add(m, &l);
}

MIRROR_API int mirror_batchnorm(mirror_model *m, mirror_batchnorm_mode mode)
{
    if (m && !m->built && !m->sticky && mode != MIRROR_BN_SYNC && mode != MIRROR_BN_LOCAL)
        return m->sticky = mirror__fail(m, MIRROR_ERR_ARGUMENT, "batchnorm: unknown mode %d", (int)mode);
    return mirror__batchnorm(m, 0.1f, 1e-5f, mode == MIRROR_BN_LOCAL);
}

MIRROR_API int mirror_residual(mirror_model *m) { return mirror__add_layer(m, MIRROR__RESIDUAL, 0, 0, 0, 0); }
MIRROR_API int mirror_residual_end(mirror_model *m) { return mirror__add_layer(m, MIRROR__RESIDUAL_END, 0, 0, 0, 0); }

/* Arena layout, computed once at build. Parameters and gradients: each
   weighted layer's W then b, back to back, so one all-reduce and one
   optimizer launch cover them all. Activations: the input shard, labels,
   targets, each layer's output, maxpool argmaxes, two backward buffers,
   one im2col buffer and the per-sample loss, each 64-byte aligned. */

static size_t mirror__carve(size_t *cursor, size_t count, size_t elem)
{
    size_t at = (*cursor + 63) & ~(size_t)63;
    *cursor = at + count * elem;
    return at;
}

/* A convolution's im2col of a whole shard, in floats. */
static size_t mirror__cols(const mirror_model *m, const mirror__layer *l)
{
    mirror__layer c = mirror__convolution(m, l);
    return m->shard_max * c.c * c.k * c.k * c.oh * c.ow;
}

/* Whether the convolutions keep their im2col from forward for backward:
   where the backend's budget holds all of them (in deterministic mode a
   chunk's backward runs apart from the shard's forward: never). Else one
   buffer, redone in backward. */
static void mirror__plan_cols(mirror_model *m)
{
    size_t i;
    double bytes = 0.0;
    for (i = 0; i < m->nlayers; i++)
        if (mirror__convolves(&m->layers[i])) bytes += (double)mirror__cols(m, &m->layers[i]) * sizeof(float);
    m->pass.keep_cols = !m->plan.chunk && bytes > 0.0 && bytes <= (double)m->be->keep_cols;
}

/* The row-wise prefix: the layers from the first on whose rows are
   independent (a CNN's convolutions, activations and pooling). Layer by
   layer, each writes the whole shard's output and the next reads it back
   from memory; where the backend sets group_bytes, the prefix runs a group
   of rows through all its layers instead, forward and backward, whose
   activations and gradients stay in the core's cache from one layer to
   the next. The same bits: a row's results are its own, and the weight
   gradients add the groups' rows in order, chunk by chunk as before (a
   group holds whole convolution chunks, and whole chunks in deterministic
   mode). At least two layers, or there is nothing to pass on. */
static void mirror__plan_groups(mirror_model *m)
{
    size_t i, bytes = 0, unit = m->plan.chunk ? m->plan.chunk : mirror__conv_chunk(m);
    for (i = 0; i < m->nlayers && mirror__kinds[m->layers[i].kind].rowwise; i++)
        bytes += 2 * mirror__out_size(&m->layers[i]) * mirror__esize(m); /* its output, and their gradient */
    m->pass.group_layers = i >= 2 && m->be->group_bytes ? i : 0;
    m->pass.group_rows = MIRROR__MAX(1, m->be->group_bytes / MIRROR__MAX(bytes, 1) / unit) * unit;
}

#ifndef MIRROR_BUCKET_BYTES
#define MIRROR_BUCKET_BYTES ((size_t)25 << 20)
#endif

/* The gradient's buckets, from the top layer down (the order backward
   makes them): a bucket closes at the first layer start where it holds at
   least `bytes` (DDP's 25 MB), and the last reaches slot 0. Buckets end at
   layer starts, so a bucket is whole once its lowest layer's backward is
   queued. */
static void mirror__plan_buckets(mirror_model *m, size_t bytes)
{
    size_t i, first = m->nlayers, hi = m->nslots, b = 0;
    for (i = m->nlayers; i-- > 0;)
        if (m->layers[i].n_w) first = i;
    for (i = m->nlayers; i-- > 0 && first < m->nlayers;) {
        const mirror__layer *l = &m->layers[i];
        if (!l->n_w || (i > first && (hi - l->w_off) * sizeof(float) < bytes)) continue;
        m->buckets.layer[b] = i, m->buckets.lo[b] = i == first ? 0 : l->w_off, m->buckets.hi[b] = hi;
        hi = m->buckets.lo[b++];
    }
    m->buckets.n = b;
}

/* Which update the model takes. CPU replicas share memory: the update is
   sharded there unless asked off (mirror__sharded_host_update_job), and
   when asked on, across processes too (mirror__across_update). Elsewhere,
   when asked, it is sharded across devices through the reducer's
   reduce-scatter and all-gather (mirror__slices_update), in one process. */
static int mirror__choose_update(mirror_model *m)
{
    mirror_shard_update want = m->desc.shard_update;
    int cpu = m->be == &mirror__cpu_backend;
    m->plan.sharded = 0;
    m->plan.slice = 0;
    m->plan.across = 0;
    if (cpu && MIRROR_CPU_SHARED_UPDATE && want == MIRROR_SHARD_ON && m->s->processes > 1) {
        m->plan.sharded = MIRROR__SHARDED_HOST;
        m->plan.across = 1;
        return MIRROR_OK;
    }
    if (m->s->replicas == 1 || want == MIRROR_SHARD_OFF || (!cpu && want == MIRROR_SHARD_AUTO)) return MIRROR_OK;
    if (cpu && MIRROR_CPU_SHARED_UPDATE) {
        m->plan.sharded = MIRROR__SHARDED_HOST;
        return MIRROR_OK;
    }
    if (m->s->reducer->reduce_scatter && m->s->processes == 1) {
        m->plan.sharded = MIRROR__SHARDED_DEVICES;
        return MIRROR_OK;
    }
    if (want == MIRROR_SHARD_AUTO) return MIRROR_OK;
    return mirror__fail(m, MIRROR_ERR_UNSUPPORTED,
                        "mirror_model_build: shard_update on: the sharded update on GPUs runs in one process, "
                        "through a reducer with a reduce-scatter (the %s reducer%s)",
                        m->s->reducer->name, m->s->processes > 1 ? ", across processes" : "");
}

/* The update's plan (see mirror__update_plan): its mode, then the steps
   that run it, chosen here once. */
static int mirror__choose_plan(mirror_model *m)
{
    mirror__update_plan *p = &m->plan;
    int rc, one = m->s->processes == 1;
    if ((rc = mirror__choose_update(m))) return rc;
    p->each = p->chunk != 0;
    p->in_check = p->sharded == MIRROR__SHARDED_HOST && !m->format && one && !p->chunk;
    p->reduce = !one                                    ? mirror__reduce_processes
                : p->chunk                              ? mirror__reduce_chunks
                : p->sharded == MIRROR__SHARDED_DEVICES ? mirror__reduce_slices
                : p->in_check                           ? mirror__reduce_none
                                                        : mirror__reduce_all;
    p->check = mirror__step_none, p->update = mirror__plain_update, p->gather = mirror__step_none;
    if (p->across)
        p->check = mirror__across_check, p->update = mirror__across_update, p->gather = mirror__across_gather_params;
    else if (p->sharded == MIRROR__SHARDED_HOST)
        p->check = p->in_check ? mirror__host_sum_check : mirror__host_check, p->update = mirror__host_update_step;
    else if (p->sharded == MIRROR__SHARDED_DEVICES)
        p->check = mirror__slices_check, p->update = mirror__slices_update, p->gather = mirror__slices_gather;
    return MIRROR_OK;
}

/* Whether training passes are captured and replayed (desc.graphs): where
   the backend records graphs (or CPU replicas emulate them), for models
   whose pass runs in one piece: batchnorm pauses at each layer for the
   host, and deterministic mode sums chunk by chunk. */
static void mirror__choose_graphs(mirror_model *m)
{
    int able = m->be->capture_begin != NULL || (m->be == &mirror__cpu_backend && MIRROR_CPU_GRAPHS);
    m->pass.graphs = m->desc.graphs && able && !m->bn.nrunning && !m->plan.chunk;
    if (m->desc.graphs && !m->pass.graphs)
        mirror__log(MIRROR_LOG_NOTICE,
                    !able           ? "graphs: off, these replicas record none (CUDA graphs are GPUs')"
                    : m->plan.chunk ? "graphs: off in deterministic mode (its chunks are summed apart)"
                                    : "graphs: off for a model with batchnorm layers (they pause for "
                                      "the host at each layer)");
}

static void mirror__plan(mirror_model *m)
{
    size_t i, S = m->shard_max, at = 0, p = 0, a = m->be->param_align ? m->be->param_align : 1;
    const mirror__layer *last = &m->layers[m->nlayers - 1];
    m->sizes.out = mirror__out_size(last);
    m->sizes.max = m->sizes.in;
    m->sizes.col = m->sizes.perm = 0;
    m->bn.nrunning = m->bn.size = m->bn.channels = m->nparams = 0;
    m->pass.dropouts = 0;
    for (i = 0; i < m->nlayers; i++) {
        mirror__layer *l = &m->layers[i];
        m->sizes.max = MIRROR__MAX(m->sizes.max, mirror__out_size(l));
        l->w_off = (p + a - 1) / a * a; /* zeros between tensors, which no update changes */
        l->b_off = (l->w_off + l->n_w + a - 1) / a * a;
        p = l->b_off + l->n_b;
        m->nparams += l->n_w + l->n_b;
        m->pass.dropouts |= l->kind == MIRROR__DROPOUT;
        if (mirror__convolves(l)) {
            mirror__layer c = mirror__convolution(m, l);
            size_t n = mirror__conv_chunk(m);
            m->sizes.col = MIRROR__MAX(m->sizes.col, n * c.c * c.k * c.k * c.oh * c.ow);
            if (n > 1) m->sizes.perm = MIRROR__MAX(m->sizes.perm, n * c.oc * c.oh * c.ow);
        }
        if (l->kind == MIRROR__BATCHNORM) {
            l->run_off = m->bn.nrunning, l->bn_off = m->bn.size;
            m->bn.nrunning += 2 * l->c, m->bn.size += 6 * l->c;
            m->bn.channels = MIRROR__MAX(m->bn.channels, l->c);
        }
    }
    m->nslots = p;
    /* equal slices of whole alignment units, as NCCL's reduce-scatter wants */
    if (m->plan.sharded == MIRROR__SHARDED_DEVICES) {
        size_t unit = m->s->replicas * a;
        m->nslots = (p + unit - 1) / unit * unit;
        m->plan.slice = m->nslots / m->s->replicas;
    }
    m->plan.pbegin = 0, m->plan.plen = m->nslots;
    if (m->plan.across) mirror__process_slice(m->nslots, m->s->processes, m->s->rank, &m->plan.pbegin, &m->plan.plen);
    mirror__plan_cols(m);
    mirror__plan_groups(m);
    mirror__plan_buckets(m, MIRROR_BUCKET_BYTES);
    switch (m->desc.optimizer.kind) {
    case MIRROR_OPT_SGD: m->sizes.nstate = m->desc.optimizer.momentum != 0.0f ? m->nslots : 0; break;
    default: m->sizes.nstate = 2 * m->nslots; break;
    }
    mirror__carve(&at, S * m->sizes.in, mirror__esize(m)); /* the input the layers read, at 0 */
    for (i = 0; i < m->nlayers; i++) {
        mirror__layer *l = &m->layers[i];
        l->fused = mirror__kinds[l->kind].takes_relu && i + 1 < m->nlayers && m->layers[i + 1].kind == MIRROR__RELU;
        if (mirror__kinds[l->kind].view || (i && m->layers[i - 1].fused))
            l->out_off = i ? m->layers[i - 1].out_off : 0; /* a view of its input (or a fused relu's, in place) */
        else
            l->out_off = mirror__carve(&at, S * mirror__out_size(l), mirror__esize(m));
        if (l->kind == MIRROR__MAXPOOL2D)
            l->arg_off = mirror__carve(&at, S * mirror__out_size(l), sizeof(int32_t));
        if (m->pass.keep_cols && mirror__convolves(l))
            l->col_off = mirror__carve(&at, mirror__cols(m, l), mirror__esize(m));
    }
    m->sizes.layer_bytes = at;
}

/* The most values of one storage operand of a layer op: an activation or
   gradient of the shard, im2col's columns, a conv's permuted output, the
   weights. */
static size_t mirror__largest(const mirror_model *m)
{
    size_t n = MIRROR__MAX(m->shard_max * m->sizes.max, m->shard_max * m->sizes.in);
    return MIRROR__MAX(MIRROR__MAX(n, m->sizes.col), MIRROR__MAX(m->sizes.perm, m->nslots));
}

static int mirror__has_residual(const mirror_model *m)
{
    size_t i;
    for (i = 0; i < m->nlayers; i++)
        if (m->layers[i].kind == MIRROR__RESIDUAL) return 1;
    return 0;
}

/* The step buffers after the layers' part of the activation arena; sets
   replica r's views when r is given. Returns the arena's total bytes. */
static size_t mirror__step_buffers(const mirror_model *m, mirror__replica *r)
{
    size_t S = m->shard_max, k, at = m->sizes.layer_bytes, off[14], e = mirror__esize(m);
    off[0] = mirror__carve(&at, S, sizeof(int32_t));               /* labels */
    off[1] = mirror__carve(&at, S * m->sizes.out, sizeof(float));   /* targets */
    off[2] = mirror__carve(&at, S * m->sizes.max, e);               /* delta[0] */
    off[3] = mirror__carve(&at, S * m->sizes.max, e);               /* delta[1] */
    off[4] = mirror__carve(&at, m->pass.keep_cols ? 0 : m->sizes.col, e); /* col (kept: each conv's own) */
    off[5] = mirror__carve(&at, S, sizeof(float));                 /* loss */
    off[6] = mirror__carve(&at, S, sizeof(int32_t));               /* correct */
    off[7] = mirror__carve(&at, 2, sizeof(double));                /* acc */
    off[8] = mirror__carve(&at, m->sizes.perm, e);                  /* perm */
    off[9] = mirror__carve(&at, mirror__has_residual(m) ? S * m->sizes.max : 0, e); /* skip */
    off[10] = mirror__carve(&at, S * m->sizes.in, sizeof(float));   /* the second slot's input, */
    off[11] = mirror__carve(&at, S, sizeof(int32_t));              /* labels */
    off[12] = mirror__carve(&at, S * m->sizes.out, sizeof(float));  /* and targets */
    off[13] = mirror__carve(&at, m->format ? S * m->sizes.in : 0, sizeof(float)); /* mixed: the first slot's input */
    if (r) {
        unsigned char *a = r->acts;
        r->in_x[0] = (float *)(a + (m->format ? off[13] : 0)); /* fp32: the input the layers read */
        r->in_labels[0] = (int32_t *)(a + off[0]);
        r->in_targets[0] = (float *)(a + off[1]);
        r->in_x[1] = (float *)(a + off[10]);
        r->in_labels[1] = (int32_t *)(a + off[11]);
        r->in_targets[1] = (float *)(a + off[12]);
        for (k = 0; k < 2 && m->be->host_is_device; k++) /* gathered in place: the uploads copy nothing */
            r->host_x[k] = r->in_x[k], r->host_labels[k] = r->in_labels[k], r->host_targets[k] = r->in_targets[k];
        r->input = m->format ? (void *)a : (void *)r->in_x[r->slot];
        r->labels = r->in_labels[r->slot];
        r->targets = r->in_targets[r->slot];
        r->delta[0] = a + off[2];
        r->delta[1] = a + off[3];
        r->col = a + off[4];
        r->loss = (float *)(a + off[5]);
        r->correct = (int32_t *)(a + off[6]);
        r->acc = (double *)(a + off[7]);
        r->perm = a + off[8];
        r->skip = a + off[9];
    }
    return (at + 63) & ~(size_t)63;
}

static void mirror__graphs_free(mirror_model *m, mirror__replica *r)
{
    size_t k;
    for (k = 0; k < MIRROR__GRAPHS; k++) mirror__graph_clear(m, r, &r->graph[k]);
}

/* Frees what a build allocated and clears every pointer to it: a failed
   build calls this, and mirror_model_destroy calls it again. */
static void mirror__free_replicas(mirror_model *m)
{
    size_t r, k;
    for (k = 0; m->rep && k < 2; k++) mirror__resident_free(m, &m->resident.sets[k]);
    for (r = 0; m->rep && r < m->s->replicas; r++) {
        mirror__replica *p = &m->rep[r];
        if (!p->dev) continue;
        m->be->release(p->dev, p->params);
        m->be->release(p->dev, p->grads);
        m->be->release(p->dev, p->chunk_grads);
        if (r == 0 || m->plan.sharded != MIRROR__SHARDED_HOST) /* sharded on the host: one state */
            m->be->release(p->dev, p->state);
        m->be->release(p->dev, p->acts);
        m->be->release(p->dev, p->work16);
        m->be->release(p->dev, p->grad16);
        m->be->release(p->dev, p->scaler);
        m->be->release(p->dev, p->stats);
        m->be->release(p->dev, p->tick);
        mirror__graphs_free(m, p);
        m->be->host_release(p->dev, p->host_scaler);
        for (k = 0; k < 2 && !m->be->host_is_device; k++) {
            m->be->host_release(p->dev, p->host_x[k]);
            m->be->host_release(p->dev, p->host_labels[k]);
            m->be->host_release(p->dev, p->host_targets[k]);
        }
        for (k = 0; k < 2; k++) {
            if (!m->be->host_is_device) m->be->host_release(p->dev, p->host_index[k]);
            m->be->release(p->dev, p->in_index[k]);
        }
        m->be->host_release(p->dev, p->host_loss);
        m->be->host_release(p->dev, p->host_correct);
        m->be->host_release(p->dev, p->host_acc);
        m->be->release(p->dev, p->bn);
        m->be->release(p->dev, p->bn_part);
        m->be->host_release(p->dev, p->host_part);
        m->be->host_release(p->dev, p->host_stat);
        m->be->close(p->dev);
        memset(p, 0, sizeof *p); /* a second pass finds nothing to free */
    }
    MIRROR_FREE(m->rep);
    MIRROR_FREE(m->bufs.grads);
    MIRROR_FREE(m->bufs.params);
    MIRROR_FREE(m->bufs.grad16);
    MIRROR_FREE(m->bufs.work16);
    MIRROR_FREE(m->bufs.stats);
    MIRROR_FREE(m->update.found);
    MIRROR_FREE(m->update.parts);
    MIRROR_FREE(m->update.chunk_in);
    MIRROR_FREE(m->update.chunk_owner);
    MIRROR_FREE(m->own.grads);
    MIRROR_FREE(m->own.scratch);
    MIRROR_FREE(m->own.metrics);
    MIRROR_FREE(m->bn.running);
    MIRROR_FREE(m->bn.running_before);
    MIRROR_FREE(m->bn.total);
    m->bn.running = m->bn.running_before = NULL;
    m->bn.total = NULL;
    m->rep = NULL;
    m->bufs.grads = m->bufs.params = NULL;
    m->bufs.grad16 = m->bufs.work16 = NULL;
    m->bufs.stats = NULL;
    m->update.found = NULL;
    m->update.parts = NULL;
    m->update.chunk_in = NULL;
    m->update.chunk_owner = NULL;
    m->own.grads = NULL;
    m->own.scratch = NULL;
    m->own.metrics = NULL;
}

MIRROR_API void mirror_model_destroy(mirror_model *m)
{
    mirror_strategy *s;
    if (!m) return;
    if (m->fit.running) { /* from fit's hook: the fit would go on in freed memory */
        mirror__fail(m, MIRROR_ERR_STATE, "mirror_model_destroy: called inside mirror_fit on this model (from a hook); "
                                          "not destroyed");
        return;
    }
    s = m->s;
    mirror__free_replicas(m);
    MIRROR_FREE(m->trace.spans);
    MIRROR_FREE(m->source.path);
    MIRROR_FREE(m);
    mirror__strategy_models(s, -1);
}

/* Fills host[nparams] from the model's seed: one generator, layer by layer. */
static void mirror__init_params(const mirror_model *m, float *host)
{
    uint64_t state = m->desc.seed;
    size_t i;
    for (i = 0; i < m->nlayers; i++) /* each kind with parameters draws its own (batchnorm: none) */
        if (m->layers[i].n_w) mirror__kinds[m->layers[i].kind].init(m, i, &state, host);
}

/* Mixed precision: every replica's 16-bit working copy from the masters,
   after the masters were set. */
static int mirror__refresh_working_copy(mirror_model *m)
{
    size_t r;
    for (r = 0; m->format && r < m->s->replicas; r++) {
        mirror__replica *p = &m->rep[r];
        m->be->bind(p->dev);
        m->be->narrow(p->dev, p->work16, p->params, m->nslots, m->format);
    }
    return mirror__device_status(m);
}

/* The bytes of replica r's arenas, with `workspace` bytes of workspace
   among its activations: what mirror_memory_report_get reports once the
   model is built, and what mirror__check_memory counts before. */
static void mirror__arena_bytes(const mirror_model *m, size_t r, size_t workspace, mirror_memory_report *out)
{
    /* mixed precision: + the 16-bit working copy; + the 16-bit gradient */
    out->parameters = m->nslots * (sizeof(float) + (m->format ? sizeof(uint16_t) : 0));
    out->gradients = m->nslots * (sizeof(float) + (m->format ? sizeof(uint16_t) : 0)) + /* deterministic: per chunk */
                     (m->plan.chunk ? m->plan.chunks_max * mirror__chunk_stride(m) * sizeof(float) : 0);
    /* sharded on the host: one state */
    out->optimizer = r == 0 || m->plan.sharded != MIRROR__SHARDED_HOST ? mirror__state_floats(m) * sizeof(float) : 0;
    out->activations = mirror__step_buffers(m, NULL) + workspace + m->bn.size * sizeof(float) +
                       m->plan.chunks_max * 2 * m->bn.channels * sizeof(double); /* batchnorm's statistics and sums */
}

/* All that replica r's build takes on its device (the host for CPU
   replicas), in double: a sum over thousands of replicas must not wrap. */
static double mirror__replica_bytes(const mirror_model *m, size_t r, size_t workspace)
{
    mirror_memory_report b;
    mirror__arena_bytes(m, r, workspace, &b);
    return (double)b.parameters + (double)b.gradients + (double)b.optimizer + (double)b.activations;
}

/* The host buffers of one replica (its host_alloc calls in
   mirror__model_build; pinned memory on a GPU): two slots of the shard's
   input, labels and targets, its losses and correct flags, batchnorm's
   sums and statistics. */
static double mirror__host_buffer_bytes(const mirror_model *m)
{
    double S = (double)m->shard_max, C = m->bn.nrunning ? (double)m->bn.channels : 0.0;
    return 2.0 * S * (double)(m->sizes.in + 1 + m->sizes.out) * 4.0 + 2.0 * S * 4.0 + 64.0 +
           (double)m->plan.chunks_max * 2.0 * C * 8.0 + 2.0 * C * 4.0;
}

/* What the system says of the host's memory, read from the files under
   `root` ("" on a live system; a test gives a tree of its own). */
typedef struct mirror__host_facts {
    double physical;             /* MemTotal, in bytes; 0: unknown */
    double address_space, data; /* ulimit -v, -d; 0: none */
    double cgroup;               /* the lowest memory limit of the process's cgroups and their ancestors; 0: none */
    double balloon;              /* what a balloon holds now (/proc/vmstat's nr_balloon_pages), in bytes */
    /* What lets the memory grow while the process runs ("a virtio-mem
       device", "a virtio balloon"); "" where nothing does, so that
       MemTotal is the machine's memory; NULL where it cannot tell (a
       Linux with no /sys to read). Elsewhere: "". */
    const char *grows;
} mirror__host_facts;

static FILE *mirror__open_under(const char *root, const char *path)
{
    char full[4096];
    if (snprintf(full, sizeof full, "%s%s", root, path) >= (int)sizeof full) return NULL; /* never a cut name */
    return fopen(full, "r");
}

/* The lowest memory limit (file `file`: memory.max, memory.limit_in_bytes)
   of the cgroup at `path` in the hierarchy mounted at `mount`, and of its
   ancestors up to the mount; 0 where none is set ("max", or cgroup v1's
   2^63 rounded to pages). A container sees its own cgroup at the mount. */
static double mirror__cgroup_limit(const char *root, const char *mount, const char *path, const char *file)
{
    char dir[2048], name[4096], line[64];
    double low = 0.0, v;
    char *cut;
    FILE *f;
    if (snprintf(dir, sizeof dir, "%s%s", mount, strcmp(path, "/") ? path : "") >= (int)sizeof dir) return 0.0;
    for (;;) {
        if (snprintf(name, sizeof name, "%s/%s", dir, file) < (int)sizeof name &&
            (f = mirror__open_under(root, name)) != NULL) {
            if (fgets(line, sizeof line, f) && line[0] >= '0' && line[0] <= '9' &&
                (v = strtod(line, NULL)) > 0.0 && v < 4e18 && (low == 0.0 || v < low))
                low = v;
            fclose(f);
        }
        if (strlen(dir) <= strlen(mount) || !(cut = strrchr(dir, '/'))) return low;
        *cut = '\0';
    }
}

/* Whether the directory root/path has an entry whose name holds `mark`
   (a driver's bound device: virtio0, a Hyper-V GUID). */
static int mirror__dir_has(const char *root, const char *path, const char *mark)
{
    char full[4096];
    struct dirent *e;
    DIR *d;
    int found = 0;
    if (snprintf(full, sizeof full, "%s%s", root, path) >= (int)sizeof full || !(d = opendir(full))) return 0;
    while (!found && (e = readdir(d)) != NULL) found = strstr(e->d_name, mark) != NULL;
    closedir(d);
    return found;
}

static void mirror__host_facts_read(const char *root, mirror__host_facts *f)
{
    /* The devices through which a hypervisor gives a running machine more
       memory: a microVM's MemTotal starts far below what it can have. A
       virtio balloon counts while it holds pages: an empty one (most
       cloud machines bind the driver) has nothing to give back. */
    static const struct {
        const char *dir, *mark, *what;
        int holding;
    } growers[] = {{"/sys/bus/virtio/drivers/virtio_mem", "virtio", "a virtio-mem device", 0},
                   {"/sys/bus/virtio/drivers/virtio_balloon", "virtio", "a virtio balloon", 1},
                   {"/sys/bus/vmbus/drivers/hv_balloon", "-", "a Hyper-V balloon", 0}};
    char line[4096];
    struct rlimit rl;
    size_t i;
    FILE *file;
    DIR *sys;
    int proc = 0; /* a /proc/meminfo: Linux */
    memset(f, 0, sizeof *f);
    if ((file = mirror__open_under(root, "/proc/meminfo")) != NULL) {
        proc = 1;
        while (fgets(line, sizeof line, file))
            if (strncmp(line, "MemTotal:", 9) == 0) f->physical = strtod(line + 9, NULL) * 1024.0; /* kB */
        fclose(file);
    }
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    if (f->physical <= 0.0 && !*root) {
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        if (pages > 0 && size > 0) f->physical = (double)pages * (double)size;
    }
#endif
    if ((file = mirror__open_under(root, "/proc/vmstat")) != NULL) {
        long page = sysconf(_SC_PAGESIZE);
        while (fgets(line, sizeof line, file))
            if (strncmp(line, "nr_balloon_pages ", 17) == 0) f->balloon = strtod(line + 17, NULL) * (double)page;
        fclose(file);
    }
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) f->address_space = (double)rl.rlim_cur;
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) f->data = (double)rl.rlim_cur;
    /* "0::/path" (cgroup v2), "4:memory:/path" (v1's memory controller) */
    if ((file = mirror__open_under(root, "/proc/self/cgroup")) != NULL) {
        while (fgets(line, sizeof line, file)) {
            char *controllers = strchr(line, ':'), *path, list[256];
            double v = 0.0;
            if (!controllers || !(path = strchr(controllers + 1, ':'))) continue;
            *controllers++ = '\0', *path++ = '\0';
            path[strcspn(path, "\n")] = '\0';
            snprintf(list, sizeof list, ",%s,", controllers);
            if (strcmp(line, "0") == 0 && !*controllers)
                v = mirror__cgroup_limit(root, "/sys/fs/cgroup", path, "memory.max");
            else if (strstr(list, ",memory,"))
                v = mirror__cgroup_limit(root, "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes");
            if (v > 0.0 && (f->cgroup == 0.0 || v < f->cgroup)) f->cgroup = v;
        }
        fclose(file);
    }
    f->grows = "";
    for (i = 0; i < sizeof growers / sizeof *growers && !*f->grows; i++)
        if ((!growers[i].holding || f->balloon > 0.0) && mirror__dir_has(root, growers[i].dir, growers[i].mark))
            f->grows = growers[i].what;
    if (proc && !*f->grows) {
        if (snprintf(line, sizeof line, "%s/sys/devices/system", root) >= (int)sizeof line || !(sys = opendir(line)))
            f->grows = NULL;
        else
            closedir(sys);
    }
}

/* The host memory a build may plan on, from the facts and the override
   (mirror__host_override: its size, or advisory): `hard` is what would
   fail the allocations for real (ulimit -v, -d, a cgroup's limit), and
   refuses; `soft`, the physical memory or the override's size, refuses
   only where the memory cannot grow, and else (`advisory` set to why)
   warns. 0: nothing known. */
typedef struct mirror__host_budget {
    double hard, soft;
    const char *hard_what, *soft_what;
    char advisory[96]; /* why soft only warns; "": it refuses */
} mirror__host_budget;

static mirror__host_budget mirror__host_plan(const mirror__host_facts *f, double override_bytes, int override_advisory)
{
    const double hard[] = {f->address_space, f->data, f->cgroup};
    static const char *const hard_what[] = {"address-space limit (ulimit -v)", "data-segment limit (ulimit -d)",
                                            "cgroup's memory limit"};
    mirror__host_budget b;
    size_t i;
    memset(&b, 0, sizeof b);
    for (i = 0; i < 3; i++)
        if (hard[i] > 0.0 && (b.hard == 0.0 || hard[i] < b.hard)) b.hard = hard[i], b.hard_what = hard_what[i];
    if (override_bytes > 0.0) {
        b.soft = override_bytes, b.soft_what = "host memory given (host_memory, $MIRROR_HOST_MEMORY)";
        return b;
    }
    b.soft = f->physical, b.soft_what = "physical memory";
    if (override_advisory)
        snprintf(b.advisory, sizeof b.advisory, "host_memory ($MIRROR_HOST_MEMORY) is advisory");
    else if (!f->grows)
        snprintf(b.advisory, sizeof b.advisory, "the system does not say whether its memory can grow");
    else if (*f->grows)
        snprintf(b.advisory, sizeof b.advisory, "%s lets this machine's memory grow", f->grows);
    return b;
}

/* bytes as "341.2 MiB", "23.4 GiB" or "64.0 TiB" into buf. */
static const char *mirror__bytes_text(double bytes, char *buf, size_t size)
{
    static const char *const units[] = {"MiB", "GiB", "TiB"};
    int u = 0;
    bytes /= 1024.0 * 1024.0;
    while (u < 2 && bytes >= 1024.0) bytes /= 1024.0, u++;
    snprintf(buf, size, "%.1f %s", bytes, units[u]);
    return buf;
}

/* Replica r's device is the first of its replicas': the need of all those
   on it, into *replicas and *need; 0 when an earlier replica shares it. */
static int mirror__device_need(const mirror_model *m, size_t r, size_t workspace, size_t *replicas, double *need)
{
    size_t q;
    int dev = m->be->device_memory(m->s, r, NULL, NULL);
    for (q = 0; q < r; q++)
        if (m->be->device_memory(m->s, q, NULL, NULL) == dev) return 0;
    *replicas = 0, *need = 0.0;
    for (q = r; q < m->s->replicas; q++)
        if (m->be->device_memory(m->s, q, NULL, NULL) == dev)
            ++*replicas, *need += mirror__replica_bytes(m, q, workspace);
    return 1;
}

/* Refuses, before anything is allocated, a build that would take more
   memory than there is: each GPU's replicas against its free memory, and
   on the host, the replicas' host buffers (pinned on GPUs) and for CPU
   replicas everything, against mirror__host_memory. Without it a build
   beyond the physical memory is not refused by malloc (overcommit): the
   arenas are zeroed page by page until the kernel kills the process. */
static int mirror__check_memory(mirror_model *m)
{
    size_t R = m->s->replicas, r, n, workspace = m->be->workspace(m->format, mirror__largest(m));
    double need, host = (double)R * sizeof(mirror__replica) + (double)m->nslots * sizeof(float), have, bytes;
    char a[32], b[32], c[32];
    const char *what;
    mirror__host_facts facts;
    mirror__host_budget plan;
    int advisory;
    for (r = 0; m->be->device_memory && r < R; r++) {
        size_t free_bytes, total_bytes;
        int dev = m->be->device_memory(m->s, r, &free_bytes, &total_bytes);
        if (!mirror__device_need(m, r, workspace, &n, &need) || !free_bytes || need <= (double)free_bytes) continue;
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY,
                            "mirror_model_build: the arenas of %zu replica%s on GPU %d need %s and it has %s free "
                            "(of %s): lower max_batch (%zu, the global batch), the replicas on that GPU or the "
                            "model's size",
                            n, n == 1 ? "" : "s", dev, mirror__bytes_text(need, a, sizeof a),
                            mirror__bytes_text((double)free_bytes, b, sizeof b),
                            mirror__bytes_text((double)total_bytes, c, sizeof c), m->desc.max_batch);
    }
    for (r = 0; r < R; r++)
        host += mirror__host_buffer_bytes(m) + (m->be->device_memory ? 0.0 : mirror__replica_bytes(m, r, workspace));
    mirror__host_facts_read("", &facts);
    mirror__host_override(m->s->host_memory, "host_memory", &bytes, &advisory, &mirror__silent); /* checked */
    plan = mirror__host_plan(&facts, bytes, advisory);
    if (plan.hard > 0.0 && host > plan.hard) what = plan.hard_what, have = plan.hard;
    else if (plan.soft > 0.0 && host > plan.soft) what = plan.soft_what, have = plan.soft;
    else return MIRROR_OK;
    if (have == plan.soft && plan.advisory[0]) {
        char notice[512];
        snprintf(notice, sizeof notice,
                 "mirror_model_build: %zu replica%s need%s %s of host memory, more than the %s (%s); going on, as %s",
                 R, R == 1 ? "" : "s", R == 1 ? "s" : "", mirror__bytes_text(host, a, sizeof a), what,
                 mirror__bytes_text(have, c, sizeof c), plan.advisory);
        mirror__log(MIRROR_LOG_NOTICE, notice);
        return MIRROR_OK;
    }
    return mirror__fail(m, MIRROR_ERR_NO_MEMORY,
                        "mirror_model_build: %zu replica%s need%s %s of host memory (%s each) and the %s is %s: "
                        "lower max_batch (%zu, the global batch), the replicas or the model%s",
                        R, R == 1 ? "" : "s", R == 1 ? "s" : "", mirror__bytes_text(host, a, sizeof a),
                        mirror__bytes_text(host / (double)R, b, sizeof b), what, mirror__bytes_text(have, c, sizeof c),
                        m->desc.max_batch,
                        have == plan.soft && bytes == 0.0 ? "; if memory grows as used: MIRROR_HOST_MEMORY=advisory"
                                                          : "");
}

/* Replica r's buffers on its opened device: parameters, gradients and
   optimizer state, activations, the host's staging for the batch and the
   results, batchnorm's sums, the loss scaler, and the 16-bit copies.
   0 when memory ran out (the device's error, if any, in its status). */
static int mirror__replica_buffers(mirror_model *m, size_t r, size_t act_total)
{
    mirror__replica *p = &m->rep[r];
    size_t S = m->shard_max, k;
    p->params = (float *)m->be->alloc(p->dev, m->nslots * sizeof(float));
    p->grads = (float *)m->be->alloc(p->dev, m->nslots * sizeof(float));
    p->state = r > 0 && m->plan.sharded == MIRROR__SHARDED_HOST
                   ? m->rep[0].state
                   : (float *)m->be->alloc(p->dev, mirror__state_floats(m) * sizeof(float));
    if (m->plan.sharded == MIRROR__SHARDED_DEVICES && !(p->stats = (float *)m->be->alloc(p->dev, 2 * sizeof(float))))
        return 0;
    if (!(p->tick = (mirror__tick *)m->be->alloc(p->dev, sizeof(mirror__tick)))) return 0;
    m->bufs.stats[r] = p->stats;
    p->acts = (unsigned char *)m->be->alloc(p->dev, act_total);
    for (k = 0; k < 2 && !m->be->host_is_device; k++) { /* else the arenas' own (mirror__step_buffers) */
        p->host_x[k] = (float *)m->be->host_alloc(p->dev, S * m->sizes.in * sizeof(float));
        p->host_labels[k] = (int32_t *)m->be->host_alloc(p->dev, S * sizeof(int32_t));
        p->host_targets[k] = (float *)m->be->host_alloc(p->dev, S * m->sizes.out * sizeof(float));
        if (!p->host_x[k] || !p->host_labels[k] || !p->host_targets[k]) return 0;
    }
    p->host_loss = (float *)m->be->host_alloc(p->dev, S * sizeof(float));
    p->host_correct = (int32_t *)m->be->host_alloc(p->dev, S * sizeof(int32_t));
    p->host_acc = (double *)m->be->host_alloc(p->dev, 2 * sizeof(double));
    if (!p->params || !p->grads || !p->state || !p->acts || !p->host_loss || !p->host_correct || !p->host_acc)
        return 0;
    if (m->plan.chunk &&
        !(p->chunk_grads = (float *)m->be->alloc(p->dev, m->plan.chunks_max * mirror__chunk_stride(m) * sizeof(float))))
        return 0;
    if (m->bn.nrunning) {
        p->bn = (float *)m->be->alloc(p->dev, m->bn.size * sizeof(float));
        p->bn_part = (double *)m->be->alloc(p->dev, m->plan.chunks_max * 2 * m->bn.channels * sizeof(double));
        p->host_part = (double *)m->be->host_alloc(p->dev, m->plan.chunks_max * 2 * m->bn.channels * sizeof(double));
        p->host_stat = (float *)m->be->host_alloc(p->dev, 2 * m->bn.channels * sizeof(float));
        if (!p->bn || !p->bn_part || !p->host_part || !p->host_stat) return 0;
    }
    p->weights = p->params;
    p->scaler = (mirror_loss_scale_state *)m->be->alloc(p->dev, sizeof *p->scaler);
    p->host_scaler = (mirror_loss_scale_state *)m->be->host_alloc(p->dev, sizeof *p->host_scaler);
    if (!p->scaler || !p->host_scaler) return 0;
    if (m->be->gemm_align) m->be->gemm_align(p->dev, mirror__chunk_align(m));
    if (m->format) {
        if (m->be->set_precision(p->dev, m->format, mirror__largest(m))) return 0;
        p->work16 = (uint16_t *)m->be->alloc(p->dev, m->nslots * sizeof(uint16_t));
        p->grad16 = (uint16_t *)m->be->alloc(p->dev, m->nslots * sizeof(uint16_t));
        if (!p->work16 || !p->grad16) return 0;
        p->weights = p->work16;
        m->bufs.grad16[r] = p->grad16;
        m->bufs.work16[r] = p->work16;
    }
    mirror__step_buffers(m, p);
    m->bufs.grads[r] = p->grads;
    m->bufs.params[r] = p->params;
    return 1;
}

/* What every process's model must have alike, compared before the
   parameters' broadcast: the layers and their shapes (the model and the
   data's), the optimizer, its schedule, the precision and loss scaling,
   deterministic mode and the seed. */
static int mirror__model_agree(mirror_model *m)
{
    const mirror_model_desc *d = &m->desc;
    const mirror_optimizer_desc *o = &d->optimizer;
    const mirror_loss_scale_desc *ls = &d->loss_scale;
    mirror__agreed it[7];
    size_t i;
    if (m->s->processes == 1) return MIRROR_OK;
    mirror__agree_on(&it[0], "the layers (the model, or the data's shape)");
    mirror__agree_count(&it[0], m->sizes.in), mirror__agree_count(&it[0], (uint64_t)d->loss);
    for (i = 0; i < m->nlayers; i++) {
        const mirror__layer *l = &m->layers[i];
        uint64_t v[14];
        v[0] = (uint64_t)l->kind, v[1] = l->c, v[2] = l->h, v[3] = l->w, v[4] = l->oc, v[5] = l->oh, v[6] = l->ow;
        v[7] = l->k, v[8] = l->stride, v[9] = l->pad, v[10] = l->n_w, v[11] = l->n_b, v[12] = (uint64_t)l->local;
        v[13] = l->from;
        mirror__agree_add(&it[0], v, sizeof v);
        mirror__agree_float(&it[0], l->p), mirror__agree_float(&it[0], l->momentum);
        mirror__agree_float(&it[0], l->eps);
    }
    mirror__agree_on(&it[1], "the optimizer and its settings");
    mirror__agree_count(&it[1], (uint64_t)o->kind), mirror__agree_count(&it[1], (uint64_t)o->nesterov);
    mirror__agree_float(&it[1], o->lr), mirror__agree_float(&it[1], o->momentum);
    mirror__agree_float(&it[1], o->weight_decay), mirror__agree_float(&it[1], o->beta1);
    mirror__agree_float(&it[1], o->beta2), mirror__agree_float(&it[1], o->eps);
    mirror__agree_float(&it[1], o->clip_norm);
    mirror__agree_on(&it[2], "the learning-rate schedule");
    mirror__agree_count(&it[2], (uint64_t)o->schedule), mirror__agree_count(&it[2], o->warmup);
    mirror__agree_count(&it[2], o->step_size), mirror__agree_count(&it[2], o->total_steps);
    mirror__agree_count(&it[2], o->lr_fn != NULL);
    mirror__agree_float(&it[2], o->gamma), mirror__agree_float(&it[2], o->min_lr);
    mirror__agree_on(&it[3], "the precision and loss scaling");
    mirror__agree_count(&it[3], (uint64_t)d->precision), mirror__agree_count(&it[3], (uint64_t)ls->kind);
    mirror__agree_count(&it[3], ls->growth_interval), mirror__agree_count(&it[3], ls->max_consecutive_skips);
    mirror__agree_count(&it[3], (uint64_t)ls->report_nonfinite);
    mirror__agree_float(&it[3], ls->init_scale), mirror__agree_float(&it[3], ls->growth_factor);
    mirror__agree_float(&it[3], ls->backoff_factor), mirror__agree_float(&it[3], ls->min_scale);
    mirror__agree_float(&it[3], ls->max_scale);
    mirror__agree_on(&it[4], "deterministic mode and its chunk");
    mirror__agree_count(&it[4], (uint64_t)d->deterministic), mirror__agree_count(&it[4], m->plan.chunk);
    mirror__agree_on(&it[5], "the seed");
    mirror__agree_count(&it[5], d->seed);
    mirror__agree_on(&it[6], "the update's sharding across processes (shard_update on)");
    mirror__agree_count(&it[6], (uint64_t)m->plan.across);
    return mirror__processes_agree(m, it, 7, "mirror_model_build");
}

/* The build's checks and plan: the arenas' sizes, the update's kind, and
   whether the memory is there. */
static int mirror__model_plan(mirror_model *m)
{
    int rc;
    if (m->sticky) return m->sticky;
    if (m->built) return mirror__fail(m, MIRROR_ERR_STATE, "mirror_model_build: already built");
    if (!m->nlayers) return mirror__fail(m, MIRROR_ERR_STATE, "mirror_model_build: no layers");
    if (m->adding.open_block)
        return mirror__fail(m, MIRROR_ERR_STATE, "mirror_model_build: the residual block opened at layer %zu is not "
                                                 "closed (mirror_residual_end)",
                            m->adding.open_block - 1);
    if (m->plan.chunk && m->be != &mirror__cpu_backend && m->s->processes > 1)
        return mirror__fail(m, MIRROR_ERR_UNSUPPORTED,
                            "mirror_model_build: deterministic mode on GPUs runs in one process: across processes "
                            "the GPUs' chunk sums would need an ordered fold on the host");
    m->plan.chunks_max = 1;
    m->shard_max = (m->desc.max_batch + m->s->world - 1) / m->s->world;
    if (m->plan.chunk) { /* each replica takes whole chunks: up to ceil(chunks / world) of them */
        size_t chunks = (m->desc.max_batch + m->plan.chunk - 1) / m->plan.chunk;
        m->plan.chunks_max = (chunks + m->s->world - 1) / m->s->world;
        m->shard_max = MIRROR__MIN(m->plan.chunks_max * m->plan.chunk, m->desc.max_batch);
    }
    m->format = m->desc.precision == MIRROR_PRECISION_FP32 ? 0 : (int)m->desc.precision;
    if ((rc = mirror__choose_plan(m))) return rc;
    mirror__plan(m);
    /* The layer limits keep the arena arithmetic inside a 64-bit size_t; a
       bound in double catches what would overflow a 32-bit one. */
    if (4.0 * ((double)m->shard_max * (double)(m->sizes.in + (m->nlayers + 4) * m->sizes.max) +
               (double)m->sizes.col + (double)m->sizes.perm + (double)(m->plan.chunks_max + 1) * (double)m->nslots) >
        (double)((size_t)-1 / 2))
        return mirror__fail(m, MIRROR_ERR_CAPACITY, "mirror_model_build: the arenas would not fit in memory");
    if (m->desc.loss == MIRROR_LOSS_SOFTMAX_CE && m->sizes.out < 2)
        return mirror__fail(m, MIRROR_ERR_SHAPE,
                            "mirror_model_build: softmax cross-entropy needs at least 2 outputs, "
                            "the last layer gives %zu",
                            m->sizes.out);
    return mirror__check_memory(m);
}

static int mirror__model_build(mirror_model *m)
{
    size_t R, r, act_total;
    float *init;
    int rc, agreed = 0;
    if (!m) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_model_build: model is NULL");
    /* Every process's result, so that none waits for one that failed; then
       the same model everywhere, before the parameters' broadcast (which
       another model's count of them would derail). */
    if ((rc = mirror__all_agree(m, mirror__model_plan(m))) || (rc = mirror__model_agree(m))) return rc;
    R = m->s->replicas; /* this process's; shards split the batch over every process's */
    act_total = mirror__step_buffers(m, NULL);
    m->rep = (mirror__replica *)mirror__zalloc(R, sizeof *m->rep);
    m->bufs.grads = (float **)mirror__zalloc(R, sizeof(float *));
    m->bufs.params = (float **)mirror__zalloc(R, sizeof(float *));
    m->bufs.grad16 = (uint16_t **)mirror__zalloc(R, sizeof(uint16_t *));
    m->bufs.work16 = (uint16_t **)mirror__zalloc(R, sizeof(uint16_t *));
    m->bufs.stats = (float **)mirror__zalloc(R, sizeof(float *));
    m->update.found = (uint32_t *)mirror__zalloc(R, sizeof(uint32_t));
    m->update.parts = (double *)mirror__zalloc(
        m->plan.across ? m->nslots / MIRROR__NORM_BLOCK + 1 + m->s->processes : 1, sizeof(double));
    m->update.chunk_in = (float **)mirror__zalloc(R * m->plan.chunks_max + 1, sizeof(float *));
    m->update.chunk_owner = (size_t *)mirror__zalloc(R * m->plan.chunks_max + 1, sizeof(size_t));
    init = (float *)mirror__zalloc(m->nslots, sizeof(float)); /* zeros between the tensors */
    if (!m->rep || !m->bufs.grads || !m->bufs.params || !m->bufs.grad16 || !m->bufs.work16 || !m->bufs.stats ||
        !m->update.found || !m->update.parts || !m->update.chunk_in ||
        !m->update.chunk_owner || !init)
        goto oom;
    if (m->desc.replica_values) {
        m->own.grads = (float *)mirror__zalloc(R * m->nslots, sizeof(float));
        m->own.scratch = mirror__alloc(m->nslots ? m->nslots : 1, sizeof(float));
        m->own.metrics = (mirror_metrics *)mirror__zalloc(R, sizeof(mirror_metrics));
        if (!m->own.grads || !m->own.scratch || !m->own.metrics) goto oom;
    }
    if (m->bn.nrunning) {
        size_t i, j;
        m->bn.running = (float *)mirror__alloc(m->bn.nrunning, sizeof(float));
        m->bn.running_before = (float *)mirror__alloc(m->bn.nrunning, sizeof(float));
        size_t units = m->plan.chunk ? m->plan.chunks_max * m->s->world : m->s->world; /* whose sums bn_combine adds */
        m->bn.total = (double *)mirror__alloc((units + 1) * 2 * m->bn.channels + 1, sizeof(double));
        if (!m->bn.running || !m->bn.running_before || !m->bn.total) goto oom;
        for (i = 0; i < m->nlayers; i++) /* mean 0, variance 1 */
            for (j = 0; m->layers[i].kind == MIRROR__BATCHNORM && j < m->layers[i].c; j++)
                m->bn.running[m->layers[i].run_off + j] = 0.0f,
                m->bn.running[m->layers[i].run_off + m->layers[i].c + j] = 1.0f;
        m->bn.stale = 1;
    }
    mirror__choose_graphs(m);
    m->buckets.on = m->be->reduce_bucket && !strcmp(m->s->reducer->name, "nccl") && m->s->processes == 1 &&
                    !m->plan.chunk && m->plan.sharded != MIRROR__SHARDED_DEVICES && !m->pass.graphs &&
                    !m->own.grads; /* a replica's own gradient is read before the sum */
    for (r = 0; r < R; r++) {
        mirror__replica *p = &m->rep[r];
        if (!(p->dev = m->be->open(m->s, r, &p->workspace_bytes, &m->err))) {
            rc = m->err.code;
            goto fail;
        }
        if (!mirror__replica_buffers(m, r, act_total)) goto oom;
    }
    /* Every process has its buffers (a process that failed to agrees in
       fail): none waits in the broadcast for one that is gone. */
    agreed = 1;
    if ((rc = mirror__all_agree(m, MIRROR_OK))) goto fail;
    /* One generator fills replica 0; the broadcast makes every replica equal. */
    mirror__init_params(m, init);
    m->be->upload(m->rep[0].dev, m->rep[0].params, init, m->nslots * sizeof(float));
    m->be->host_wait(m->rep[0].dev); /* the copy has read init */
    MIRROR_FREE(init);
    init = NULL;
    if ((rc = m->s->reducer->broadcast(m->s, m->bufs.params, m->nslots, 0, &m->err)) ||
        (rc = mirror__device_status(m)))
        goto fail;
    {
        mirror_loss_scale_state st; /* fp32: the guard, found_nonfinite clear */
        memset(&st, 0, sizeof st);
        st.scale = st.last_scale = m->format ? m->desc.loss_scale.init_scale : 1.0f;
        if ((rc = mirror__set_scaler(m, &st)) || (rc = mirror__refresh_working_copy(m))) goto fail;
    }
    m->built = 1;
    return MIRROR_OK;
oom: /* the device's own message (which call, its error string) when it has one */
    if ((rc = mirror__device_status(m)) == MIRROR_OK)
        rc = mirror__fail(m, MIRROR_ERR_NO_MEMORY,
                          "mirror_model_build: out of memory for %zu replicas of %zu parameters and "
                          "%zu activation bytes",
                          R, m->nparams, act_total);
fail:
    if (!agreed) rc = mirror__all_agree(m, rc);
    MIRROR_FREE(init);
    mirror__free_replicas(m);
    return rc;
}

MIRROR_API int mirror_model_build(mirror_model *m)
{
    MIRROR__LOCKED(m, "mirror_model_build", mirror__model_build(m));
}

/* Arrays of the optimizer's state: 0, 1 (momentum) or 2 (Adam's avg and avg_sq). */
MIRROR_API size_t mirror_num_parameters(const mirror_model *m) { return m && m->built ? m->nparams : 0; }
MIRROR_API size_t mirror_optimizer_state_size(const mirror_model *m)
{
    return m && m->built ? mirror__state_copies(m) * m->nparams : 0;
}
MIRROR_API size_t mirror_num_outputs(const mirror_model *m) { return m && m->built ? m->sizes.out : 0; }

/* Formats into buf at *used: measured whole, written as far as it fits
   (buf stays terminated); 0 when formatting fails. */
static int mirror__appendf(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(*used < size ? buf + *used : NULL, *used < size ? size - *used : 0, fmt, ap);
    va_end(ap);
    if (n >= 0) *used += (size_t)n;
    return n >= 0;
}

static int mirror__model_summary(mirror_model *m, char *buf, size_t size)
{
    size_t i, need = 0, total = 0;
    int ok = 1;
    if (!buf || !size)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_model_summary: %s", buf ? "size is 0" : "buf is NULL");
    buf[0] = '\0';
    for (i = 0; i < m->nlayers; i++) { /* every line is measured; those that fit are written */
        const mirror__layer *l = &m->layers[i];
        char in[64], out[64];
        snprintf(in, sizeof in, "%zux%zux%zu", l->c, l->h, l->w);
        snprintf(out, sizeof out, "%zux%zux%zu", l->oc, l->oh, l->ow);
        ok &= mirror__appendf(buf, size, &need, "%2zu  %-14s %12s -> %-12s %10zu params\n", i,
                              mirror__kinds[l->kind].name, in, out, l->n_w + l->n_b);
        total += l->n_w + l->n_b;
    }
    ok &= mirror__appendf(buf, size, &need, "total  %zu params, %zu bytes in fp32\n", total, 4 * total);
    if (!ok) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_model_summary: formatting failed");
    return need < size ? MIRROR_OK
                       : mirror__fail(m, MIRROR_ERR_CAPACITY,
                                      "mirror_model_summary: the summary of %zu layers needs %zu bytes and buf "
                                      "holds %zu: it was cut short",
                                      m->nlayers, need + 1, size);
}

MIRROR_API int mirror_model_summary(mirror_model *m, char *buf, size_t size)
{
    if (!m) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_model_summary: the model is NULL");
    {
        MIRROR__LOCKED(m, "mirror_model_summary", mirror__model_summary(m, buf, size));
    }
}

/* 128 bytes a layer and 128 more hold the summary (mirror_model_summary). */
static int mirror__print_summary(mirror_model *m, FILE *out)
{
    size_t size = 128 * (m->nlayers + 1);
    char *buf;
    int rc;
    if (!out) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_model_print_summary: the stream is NULL");
    if (!(buf = (char *)mirror__zalloc(size, 1)))
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_model_print_summary: out of memory");
    rc = mirror__model_summary(m, buf, size);
    if (rc == MIRROR_OK && (fputs(buf, out) == EOF || fflush(out) != 0))
        rc = mirror__fail(m, MIRROR_ERR_IO, "mirror_model_print_summary: the stream could not be written");
    MIRROR_FREE(buf);
    return rc;
}

MIRROR_API int mirror_model_print_summary(mirror_model *m, FILE *out)
{
    if (!m) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_model_print_summary: the model is NULL");
    {
        MIRROR__LOCKED(m, "mirror_model_print_summary", mirror__print_summary(m, out));
    }
}

/* The values alone, in layer order (what the API and checkpoints see), from
   `copies` arrays shaped as a parameter arena (nslots floats each, zeros
   between tensors), or back (unpack: the gaps are left as they are). */
static void mirror__pack(const mirror_model *m, float *packed, float *slots, size_t copies, int unpack)
{
    size_t c, i, at = 0;
    for (c = 0; c < copies; c++, slots += m->nslots)
        for (i = 0; i < m->nlayers; i++) {
            const mirror__layer *l = &m->layers[i];
            float *w = slots + l->w_off, *b = slots + l->b_off;
            memcpy(unpack ? w : packed + at, unpack ? packed + at : w, l->n_w * sizeof(float));
            memcpy(unpack ? b : packed + at + l->n_w, unpack ? packed + at + l->n_w : b, l->n_b * sizeof(float));
            at += l->n_w + l->n_b;
        }
}

/* Where `which` (MIRROR__PARAMS, _GRADS or _STATE, copy c) of replica q
   holds slot off: the gradient is the 16-bit one in mixed precision. */
static const void *mirror__arena_at(const mirror_model *m, size_t q, int which, size_t c, size_t off)
{
    const mirror__replica *p = &m->rep[q];
    if (which == MIRROR__STATE) return mirror__state_at(m, p, c, off);
    if (which == MIRROR__GRADS) return m->format ? (const void *)(p->grad16 + off) : (const void *)(p->grads + off);
    return p->params + off;
}

/* Replica r's `which` into host, shaped as its arena (copies of nslots
   values). An update sharded across devices keeps a slice up to date on its owner alone
   (the gradient's sum, the optimizer state, mixed precision's masters):
   each slice then comes from its owner. */
static void mirror__download_arena(mirror_model *m, size_t r, void *host, int which)
{
    size_t c, q, copies = which == MIRROR__STATE ? mirror__state_copies(m) : 1;
    size_t size = which == MIRROR__GRADS && m->format ? sizeof(uint16_t) : sizeof(float);
    unsigned char *to = (unsigned char *)host;
    for (c = 0; c < copies; c++, to += m->nslots * size) {
        /* fp32 parameters are gathered */
        if (m->plan.sharded != MIRROR__SHARDED_DEVICES || (which == MIRROR__PARAMS && !m->format)) {
            m->be->download(m->rep[r].dev, to, mirror__arena_at(m, r, which, c, 0), m->nslots * size);
            continue;
        }
        for (q = 0; q < m->s->replicas; q++)
            m->be->download(m->rep[q].dev, to + q * m->plan.slice * size,
                            mirror__arena_at(m, q, which, c, q * m->plan.slice), m->plan.slice * size);
    }
}

/* The optimizer state from host, shaped as the arena, into every replica
   (sharded across devices: each its slice). */
static void mirror__upload_state(mirror_model *m, const float *slots)
{
    size_t r, c, copies = mirror__state_copies(m);
    m->update.stale &= ~MIRROR__STALE_STATE; /* whole again */
    for (r = 0; r < m->s->replicas && m->sizes.nstate; r++) {
        for (c = 0; c < copies; c++) {
            int by_slice = m->plan.sharded == MIRROR__SHARDED_DEVICES;
            size_t off = by_slice ? r * m->plan.slice : 0, n = by_slice ? m->plan.slice : m->nslots;
            m->be->upload(m->rep[r].dev, mirror__state_at(m, &m->rep[r], c, off), slots + c * m->nslots + off,
                          n * sizeof(float));
        }
        m->be->host_wait(m->rep[r].dev);
    }
}

/* Mixed precision: the reduced 16-bit gradient of the last step, widened
   and divided by the loss scale it carried. */
static int mirror__copy_out_half_grads(mirror_model *m, size_t r, float *dst)
{
    mirror_loss_scale_state st;
    size_t i, n = m->nslots;
    uint16_t *half = (uint16_t *)mirror__alloc(n ? n : 1, sizeof(uint16_t));
    int rc;
    if (!half) return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_get_gradients: out of memory");
    if ((rc = mirror__get_scaler(m, &st)) == MIRROR_OK) {
        mirror__download_arena(m, r, half, MIRROR__GRADS);
        for (i = 0; i < n; i++) dst[i] = mirror_hd_unscale(half[i], m->format, 1.0f / st.last_scale);
        rc = mirror__device_status(m);
    }
    MIRROR_FREE(half);
    return rc;
}

static int mirror__copy_out(mirror_model *m, size_t r, float *dst, size_t n, int which)
{
    static const char *const what_names[] = {"mirror_get_parameters", "mirror_get_gradients",
                                              "mirror_get_optimizer_state"};
    const char *what = what_names[which];
    size_t want, copies;
    float *slots;
    int rc = MIRROR_OK;
    if ((rc = mirror__check_built(m, what))) return rc;
    if (which != MIRROR__PARAMS && (rc = mirror__gather_whole(m, which))) return rc; /* first: in every process */
    copies = which == MIRROR__STATE ? mirror__state_copies(m) : 1;
    want = copies * m->nparams;
    if (r >= m->s->replicas)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: replica %zu of %zu", what, r, m->s->replicas);
    if (n != want || (!dst && n))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: dst must hold %zu floats (got %zu%s)", what,
                            want, n, dst ? "" : ", NULL");
    if (!n) return MIRROR_OK;
    /* the arena's shape, packed after (padded arenas only) */
    if (!(slots = m->nslots == m->nparams ? dst : (float *)mirror__alloc(copies * m->nslots, sizeof(float))))
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "%s: out of memory", what);
    if (which == MIRROR__GRADS && m->format)
        rc = mirror__copy_out_half_grads(m, r, slots);
    else
        mirror__download_arena(m, r, slots, which);
    if (slots != dst) {
        if (rc == MIRROR_OK) mirror__pack(m, dst, slots, copies, 0);
        MIRROR_FREE(slots);
    }
    return rc;
}

static int mirror__get_parameters(mirror_model *m, size_t r, float *dst, size_t n)
{
    return mirror__copy_out(m, r, dst, n, MIRROR__PARAMS);
}

MIRROR_API int mirror_get_parameters(mirror_model *m, size_t r, float *dst, size_t n)
{
    MIRROR__LOCKED(m, "mirror_get_parameters", mirror__get_parameters(m, r, dst, n));
}

static int mirror__get_gradients(mirror_model *m, size_t r, float *dst, size_t n)
{
    return mirror__copy_out(m, r, dst, n, MIRROR__GRADS);
}

MIRROR_API int mirror_get_gradients(mirror_model *m, size_t r, float *dst, size_t n)
{
    MIRROR__LOCKED(m, "mirror_get_gradients", mirror__get_gradients(m, r, dst, n));
}

static int mirror__get_optimizer_state(mirror_model *m, size_t r, float *dst, size_t n)
{
    return mirror__copy_out(m, r, dst, n, MIRROR__STATE);
}

MIRROR_API int mirror_get_optimizer_state(mirror_model *m, size_t r, float *dst, size_t n)
{
    MIRROR__LOCKED(m, "mirror_get_optimizer_state", mirror__get_optimizer_state(m, r, dst, n));
}

/* Every replica's parameters from slots, shaped as the arena. */
static int mirror__upload_params(mirror_model *m, const float *slots)
{
    size_t r;
    for (r = 0; r < m->s->replicas; r++) {
        m->be->upload(m->rep[r].dev, m->rep[r].params, slots, m->nslots * sizeof(float));
        m->be->host_wait(m->rep[r].dev); /* slots is the caller's again on return */
    }
    return m->format ? mirror__refresh_working_copy(m) : mirror__device_status(m);
}

static int mirror__set_parameters(mirror_model *m, const float *src, size_t n)
{
    float *slots;
    int rc;
    if ((rc = mirror__check_built(m, "mirror_set_parameters"))) return rc;
    if (!src || n != m->nparams)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_set_parameters: src must hold %zu floats",
                            m->nparams);
    if (m->nslots == m->nparams) return mirror__upload_params(m, src);
    if (!(slots = (float *)mirror__zalloc(m->nslots, sizeof(float))))
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_set_parameters: out of memory");
    mirror__pack(m, (float *)src, slots, 1, 1);
    rc = mirror__upload_params(m, slots);
    MIRROR_FREE(slots);
    return rc;
}

MIRROR_API int mirror_set_parameters(mirror_model *m, const float *src, size_t n)
{
    MIRROR__LOCKED(m, "mirror_set_parameters", mirror__set_parameters(m, src, n));
}

MIRROR_API int mirror_memory_report_get(const mirror_model *m, size_t r, mirror_memory_report *out)
{
    if (!m || !out || !m->built || r >= m->s->replicas)
        return mirror__error(NULL, MIRROR_ERR_ARGUMENT,
                             "mirror_memory_report_get: needs a built model, a replica index and out");
    mirror__arena_bytes(m, r, m->rep[r].workspace_bytes, out);
    return MIRROR_OK;
}

/* ---- data kept in device memory (mirror__resident, read by mirror__load_shard) ---- */

/* The tests' stand-in for a device's free memory on CPU replicas, whose
   memory is the host's (0: unbounded): a dataset beyond it does not fit. */
static size_t mirror__cpu_free_bytes;

static void mirror__resident_free(mirror_model *m, mirror__resident *d)
{
    size_t r;
    if (m->resident.at == d) m->resident.at = NULL;
    if (m->resident.kept == d) m->resident.kept = NULL;
    for (r = 0; d->dev && r < m->s->replicas; r++)
        if (d->owner[r] == r && m->rep[r].dev) {
            m->be->release(m->rep[r].dev, d->dev[2 * r]);
            m->be->release(m->rep[r].dev, d->dev[2 * r + 1]);
        }
    MIRROR_FREE(d->dev);
    MIRROR_FREE(d->owner);
    memset(d, 0, sizeof *d);
}

/* n floats of x into replica r's dst: as they are, or narrowed to the
   model's 16 bits a piece at a time through a scratch buffer on the
   device, which never holds the whole set in fp32. 0: out of memory. */
#define MIRROR__RESIDENT_PIECE ((size_t)1 << 22) /* floats */
static int mirror__resident_copy(mirror_model *m, size_t r, void *dst, const float *x, size_t n)
{
    void *dev = m->rep[r].dev;
    size_t at, piece = MIRROR__MIN(n, MIRROR__RESIDENT_PIECE);
    float *scratch;
    if (!m->format) {
        m->be->upload(dev, dst, x, n * sizeof(float));
        return 1;
    }
    if (!(scratch = (float *)m->be->alloc(dev, piece * sizeof(float)))) return 0;
    for (at = 0; at < n; at += piece) {
        size_t k = MIRROR__MIN(piece, n - at);
        m->be->upload(dev, scratch, x + at, k * sizeof(float));
        m->be->narrow(dev, (uint16_t *)dst + at, scratch, k, m->format);
    }
    m->be->release(dev, scratch);
    return 1;
}

/* Whether a copy of `bytes` (and each replica's index buffers, `index`
   bytes, where not made yet) fits on every replica's device beside what
   is there, less a margin: a sixteenth of the device, at most 512 MiB (the
   libraries' workspaces, the graphs). Replicas on one device share a copy:
   owner[r] is the first of them. Else why not, into notice. */
static int mirror__resident_fits(mirror_model *m, double bytes, double index, size_t *owner, char *notice,
                                 size_t size)
{
    size_t r, q, n = m->s->replicas;
    int *device = (int *)mirror__alloc(n, sizeof(int));
    if (!device) return snprintf(notice, size, "out of memory"), 0;
    for (r = 0; r < n; r++) {
        device[r] = m->be->device_memory ? m->be->device_memory(m->s, r, NULL, NULL) : 0;
        for (owner[r] = r, q = 0; q < r && owner[r] == r; q++)
            if (device[q] == device[r]) owner[r] = q;
    }
    MIRROR_FREE(device);
    for (r = 0; r < n; r++) {
        size_t free_bytes = 0, total = 0, margin;
        double need = bytes;
        char a[32], b[32], c[32];
        if (owner[r] != r) continue;
        for (q = r; q < n; q++) need += owner[q] == r ? index : 0.0;
        if (m->be->device_memory)
            m->be->device_memory(m->s, r, &free_bytes, &total);
        else if (!mirror__cpu_free_bytes)
            continue; /* the host's memory: an allocation that fails says so */
        else
            free_bytes = total = mirror__cpu_free_bytes;
        margin = MIRROR__MIN(total / 16, (size_t)512 << 20);
        if (need + (double)margin <= (double)free_bytes) continue;
        snprintf(notice, size, "%s on replica %zu's device, which has %s free and keeps a margin of %s",
                 mirror__bytes_text(need, a, sizeof a), r, mirror__bytes_text((double)free_bytes, b, sizeof b),
                 mirror__bytes_text((double)margin, c, sizeof c));
        return 0;
    }
    return 1;
}

/* Replica r's two index buffers (see mirror__replica.host_index). */
static int mirror__resident_index(mirror_model *m, size_t r)
{
    mirror__replica *p = &m->rep[r];
    size_t k, bytes = m->shard_max * sizeof(int64_t);
    for (k = 0; k < 2 && !p->in_index[k]; k++) {
        if (!(p->in_index[k] = (int64_t *)m->be->alloc(p->dev, bytes))) return 0;
        p->host_index[k] = m->be->host_is_device ? p->in_index[k] : (int64_t *)m->be->host_alloc(p->dev, bytes);
        if (!p->host_index[k]) return 0;
    }
    return 1;
}

static int mirror__resident_holds(const mirror__resident *d, const mirror_dataset *ds, uint64_t hash)
{
    return d->rows == ds->count && d->x == ds->x && d->labels == ds->labels && d->targets == ds->targets &&
           d->hash == hash;
}

/* Where the steps that follow read dataset ds from, as fit's data_on_device
   (m->resident.place) asks: its copy in every replica's device memory (role 0:
   fit's training set, 1: the set evaluated), made now or found there from
   before, or *out NULL: the host gathers each shard, as it does where the
   backend has no gather, or the set does not fit (a notice says so, once
   for a set). A failure of the devices after the copy is an error. */
static int mirror__resident_use(mirror_model *m, const mirror_dataset *ds, int role, const mirror__resident **out)
{
    mirror__resident *d = &m->resident.sets[role];
    int ce = m->desc.loss != MIRROR_LOSS_MSE, place = m->resident.place, quiet;
    size_t r, n = m->s->replicas, e = m->format ? sizeof(uint16_t) : sizeof(float), y = ce ? 1 : m->sizes.out;
    uint64_t hash;
    char why[300] = "", notice[500];
    *out = NULL;
    if (!m->be->gather || place == MIRROR_DATA_OFF || (place == MIRROR_DATA_AUTO && m->be->host_is_device))
        return MIRROR_OK;
    hash = mirror__hash(ds->count, ds->x, ds->count * m->sizes.in * sizeof(float));
    hash = mirror__hash(hash, ce ? (const void *)ds->labels : (const void *)ds->targets, ds->count * y * 4);
    if (role == 1 && mirror__resident_holds(&m->resident.sets[0], ds, hash) &&
        m->resident.sets[0].dev) { /* the training set */
        *out = &m->resident.sets[0];
        return MIRROR_OK;
    }
    if (role == 0 && mirror__resident_holds(&m->resident.sets[1], ds, hash) &&
        m->resident.sets[1].dev) { /* evaluated before */
        mirror__resident_free(m, d); /* the copy moves to training's place */
        *d = m->resident.sets[1];
        memset(&m->resident.sets[1], 0, sizeof m->resident.sets[1]);
        if (m->resident.at == &m->resident.sets[1]) m->resident.at = d;
        if (m->resident.kept == &m->resident.sets[1]) m->resident.kept = d;
    }
    if (mirror__resident_holds(d, ds, hash) && d->dev) {
        *out = d;
        return MIRROR_OK;
    }
    quiet = mirror__resident_holds(d, ds, hash); /* it did not fit before: tried again, said once */
    mirror__resident_free(m, d);
    d->x = ds->x, d->labels = ds->labels, d->targets = ds->targets, d->rows = ds->count, d->hash = hash;
    if (!(d->owner = (size_t *)mirror__alloc(n, sizeof(size_t))) ||
        !(d->dev = (void **)mirror__zalloc(2 * n, sizeof(void *)))) {
        snprintf(why, sizeof why, "out of memory");
        goto host;
    }
    if (!mirror__resident_fits(m, (double)ds->count * ((double)m->sizes.in * (double)e + 4.0 * (double)y) +
                                      (m->format ? 4.0 * (double)MIRROR__MIN(ds->count * m->sizes.in,
                                                                             MIRROR__RESIDENT_PIECE)
                                                 : 0.0),
                               m->rep[0].in_index[0] ? 0.0 : 2.0 * (double)m->shard_max * sizeof(int64_t), d->owner,
                               why, sizeof why))
        goto host;
    for (r = 0; r < n; r++) {
        void *dev = m->rep[r].dev;
        m->be->bind(dev);
        if (!mirror__resident_index(m, r)) break;
        if (d->owner[r] != r) {
            d->dev[2 * r] = d->dev[2 * d->owner[r]], d->dev[2 * r + 1] = d->dev[2 * d->owner[r] + 1];
            continue;
        }
        if (!(d->dev[2 * r] = m->be->alloc(dev, ds->count * m->sizes.in * e)) ||
            !(d->dev[2 * r + 1] = m->be->alloc(dev, ds->count * y * 4)) ||
            !mirror__resident_copy(m, r, d->dev[2 * r], ds->x, ds->count * m->sizes.in))
            break;
        m->be->upload(dev, d->dev[2 * r + 1], ce ? (const void *)ds->labels : (const void *)ds->targets,
                      ds->count * y * 4);
    }
    if (r == n) { /* whole before a replica reads them: those on the owner's GPU read from streams of their own */
        for (r = 0; r < n; r++)
            if (d->owner[r] == r) m->be->host_wait(m->rep[r].dev);
        *out = d;
        return mirror__device_status(m);
    }
    snprintf(why, sizeof why, "out of device memory");
    for (r = 0; r < n; r++) { /* a device that ran out of memory says so in its status: taken, into the notice */
        mirror_error err = {0, ""};
        if (m->be->status(m->rep[r].dev, &err)) snprintf(why, sizeof why, "%.290s", err.message);
    }
host:
    for (r = 0; d->dev && r < n; r++) /* what was made: its owners' copies */
        if (d->owner[r] != r) d->dev[2 * r] = d->dev[2 * r + 1] = NULL;
    for (r = 0; d->dev && r < n; r++) {
        m->be->release(m->rep[r].dev, d->dev[2 * r]);
        m->be->release(m->rep[r].dev, d->dev[2 * r + 1]);
    }
    MIRROR_FREE(d->dev);
    MIRROR_FREE(d->owner);
    d->dev = NULL, d->owner = NULL; /* the key stays: trying this set again is quiet */
    snprintf(notice, sizeof notice, "%s (%zu samples) stay in host memory, each step gathering its shard there: %s",
             role ? "the evaluated data" : "the training data", ds->count, why);
    if (!quiet) mirror__log(MIRROR_LOG_NOTICE, notice);
    return MIRROR_OK;
}

// >>inspection --------------------------------------------------------------
/* Looking at a model without training it: the timing of the step's
   phases (its Chrome trace is a side output, >>outputs), the check that
   the replicas agree, metrics taken, evaluation of a batch, prediction. */

/* ---- timing ---- */

static int mirror__timing(mirror_model *m, size_t steps)
{
    size_t cap = steps * (size_t)m->s->replicas * MIRROR_PHASE_COUNT;
    mirror__span *ring = NULL;
    if (steps > 1u << 16) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_timing: at most 65536 steps");
    if (steps && !(ring = (mirror__span *)mirror__alloc(cap, sizeof *ring))) /* the old ring kept on failure */
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_timing: out of memory for %zu steps", steps);
    MIRROR_FREE(m->trace.spans);
    m->trace.spans = ring;
    m->trace.steps = steps, m->trace.cap = steps ? cap : 0, m->trace.next = m->trace.count = 0;
    m->trace.origin = mirror__now();
    return MIRROR_OK;
}

MIRROR_API int mirror_timing(mirror_model *m, size_t steps)
{
    int rc;
    if ((rc = mirror__check_built(m, "mirror_timing"))) return rc;
    {
        MIRROR__LOCKED(m, "mirror_timing", mirror__timing(m, steps));
    }
}

static int mirror__phase_times(mirror_model *m, size_t replica, mirror_phase_times *out)
{
    size_t R = m->s->replicas, i, r, p;
    double *sum;
    uint64_t lo = (uint64_t)-1, hi = 0;
    if (!out) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_phase_times_get: out is NULL");
    if (replica != (size_t)-1 && replica >= R)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_phase_times_get: replica %zu of %zu", replica, R);
    memset(out, 0, sizeof *out);
    if (!m->trace.count) return MIRROR_OK;
    if (!(sum = (double *)mirror__zalloc(R * MIRROR_PHASE_COUNT, sizeof(double))))
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_phase_times_get: out of memory");
    for (i = 0; i < m->trace.count; i++) {
        const mirror__span *sp = &m->trace.spans[i];
        sum[sp->replica * MIRROR_PHASE_COUNT + sp->phase] += sp->t1 - sp->t0;
        if (sp->step < lo) lo = sp->step;
        if (sp->step > hi) hi = sp->step;
    }
    out->steps = (size_t)(hi - lo + 1);
    for (p = 0; p < MIRROR_PHASE_COUNT; p++) {
        double all = 0.0, slowest = 0.0;
        for (r = 0; r < R; r++) {
            double t = sum[r * MIRROR_PHASE_COUNT + p] / (double)out->steps;
            all += t / (double)R;
            if (t > slowest) slowest = t;
        }
        out->seconds[p] = replica == (size_t)-1 ? all : sum[replica * MIRROR_PHASE_COUNT + p] / (double)out->steps;
        out->imbalance[p] = all > 0.0 ? slowest / all : 1.0;
    }
    MIRROR_FREE(sum);
    return MIRROR_OK;
}

MIRROR_API int mirror_phase_times_get(mirror_model *m, size_t replica, mirror_phase_times *out)
{
    int rc;
    if ((rc = mirror__check_built(m, "mirror_phase_times_get"))) return rc;
    {
        MIRROR__LOCKED(m, "mirror_phase_times_get", mirror__phase_times(m, replica, out));
    }
}

static const char *const mirror__phase_names[MIRROR_PHASE_COUNT] = {"gather", "forward", "backward", "all-reduce",
                                                                    "update"};

/* The hash of every local replica's parameters and optimizer state, then
   of every process's replicas (in global order): compared with replica 0's. */
static int mirror__check_replicas(mirror_model *m)
{
    mirror_strategy *s = m->s;
    size_t r, p, n = MIRROR__MAX(m->nslots, m->sizes.nstate), bad, *parts, *first;
    float *host = (float *)mirror__alloc(n ? n : 1, sizeof(float));
    uint64_t *hash = (uint64_t *)mirror__alloc(s->world, sizeof(uint64_t));
    int rc = MIRROR_OK;
    parts = (size_t *)mirror__alloc(2 * s->processes, sizeof(size_t));
    if (!host || !hash || !parts) {
        rc = mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_check_replicas: out of memory");
        goto out;
    }
    if ((rc = mirror__gather_whole(m, MIRROR__STATE))) goto out;
    for (r = 0; r < s->replicas; r++) {
        uint64_t h = 0;
        mirror__download_arena(m, r, host, MIRROR__PARAMS);
        h = mirror__hash(h, host, m->nslots * sizeof(float));
        if (m->format) { /* the working copy the layers read */
            m->be->download(m->rep[r].dev, host, m->rep[r].work16, m->nslots * sizeof(uint16_t));
            h = mirror__hash(h, host, m->nslots * sizeof(uint16_t));
        }
        mirror__download_arena(m, r, host, MIRROR__STATE);
        hash[s->first + r] = mirror__hash(h, host, m->sizes.nstate * sizeof(float));
    }
    if ((rc = mirror__device_status(m))) goto out;
    first = parts + s->processes;
    for (p = 0; p < s->processes; p++) /* each process's replicas: the hashes it holds */
        parts[p] = s->procs->replicas_of(s, p), first[p] = p ? first[p - 1] + parts[p - 1] : 0;
    if ((rc = s->procs->gather(s, hash, sizeof *hash, parts, "mirror_check_replicas", &m->err))) goto out;
    for (bad = 1; bad < s->world && hash[bad] == hash[0]; bad++) {}
    if (bad < s->world) {
        for (p = 0; p + 1 < s->processes && bad >= first[p + 1]; p++) {}
        rc = mirror__fail(m, MIRROR_ERR_REPLICAS,
                          "mirror_check_replicas: after step %llu, replica %zu (rank %zu, its replica %zu) holds other "
                          "parameters or optimizer state than replica 0",
                          (unsigned long long)m->steps, bad, p, bad - first[p]);
    }
out:
    MIRROR_FREE(host);
    MIRROR_FREE(hash);
    MIRROR_FREE(parts);
    return rc;
}

MIRROR_API int mirror_check_replicas(mirror_model *m)
{
    int rc;
    if ((rc = mirror__check_built(m, "mirror_check_replicas"))) return rc;
    {
        MIRROR__LOCKED(m, "mirror_check_replicas", mirror__check_replicas(m));
    }
}

/* The metric sums left on the device into *out, and reset there: this
   process's, or with every_process those of every process (fit drops
   metrics with this process's alone). */
static int mirror__take(mirror_model *m, mirror_metrics *out, int every_process)
{
    mirror_metrics sum = {0.0, 0, 0};
    size_t r;
    int rc;
    for (r = 0; r < m->s->replicas; r++) {
        mirror__replica *p = &m->rep[r];
        m->be->bind(p->dev);
        m->be->download(p->dev, p->host_acc, p->acc, 2 * sizeof(double));
        m->be->zero(p->dev, p->acc, 2 * sizeof(double));
        mirror__metrics_add(&sum, p->host_acc[0], (size_t)p->host_acc[1], 0);
    }
    if ((rc = mirror__device_status(m)) || (every_process && (rc = mirror__sum_processes(m, &sum)))) return rc;
    sum.count = m->untaken; /* the global batches' samples */
    m->untaken = 0;
    *out = sum;
    return MIRROR_OK;
}

static int mirror__take_metrics(mirror_model *m, mirror_metrics *out)
{
    int rc;
    if ((rc = mirror__check_built(m, "mirror_take_metrics"))) return rc;
    if (!out) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_take_metrics: out is NULL");
    if ((rc = mirror__take(m, out, 1))) return rc;
    return mirror__scaler_verdict(m, "mirror_take_metrics");
}

MIRROR_API int mirror_take_metrics(mirror_model *m, mirror_metrics *out)
{
    MIRROR__LOCKED(m, "mirror_take_metrics", mirror__take_metrics(m, out));
}

/* replica_values: a built model that keeps them, and replica r of this
   process. */
static int mirror__check_own(mirror_model *m, size_t r, const char *what)
{
    int rc;
    if ((rc = mirror__check_built(m, what))) return rc;
    if (!m->own.grads)
        return mirror__fail(m, MIRROR_ERR_STATE,
                            "%s: the model keeps no replica values: set mirror_model_desc.replica_values = 1 "
                            "before mirror_model_build",
                            what);
    if (r >= m->s->replicas)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: replica %zu of %zu", what, r, m->s->replicas);
    return MIRROR_OK;
}

/* Replica r's own gradient, packed as mirror_get_gradients packs the
   reduced one, and in mixed precision divided by the loss scale it
   carried. */
static int mirror__get_replica_gradients(mirror_model *m, size_t r, float *dst, size_t n)
{
    const char *what = "mirror_get_replica_gradients";
    float inv_scale = 1.0f, *own;
    size_t i;
    int rc;
    if ((rc = mirror__check_own(m, r, what))) return rc;
    if (n != m->nparams || (!dst && n))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: dst must hold %zu floats (got %zu%s)", what, m->nparams, n,
                            dst ? "" : ", NULL");
    if (m->format) {
        mirror_loss_scale_state st;
        if ((rc = mirror__get_scaler(m, &st))) return rc;
        inv_scale = 1.0f / st.last_scale;
    }
    own = m->own.grads + r * m->nslots;
    if (m->nslots == m->nparams)
        memcpy(dst, own, n * sizeof(float));
    else
        mirror__pack(m, dst, own, 1, 0);
    for (i = 0; m->format && i < n; i++) dst[i] *= inv_scale;
    return MIRROR_OK;
}

MIRROR_API int mirror_get_replica_gradients(mirror_model *m, size_t r, float *dst, size_t n)
{
    MIRROR__LOCKED(m, "mirror_get_replica_gradients", mirror__get_replica_gradients(m, r, dst, n));
}

static int mirror__get_replica_metrics(mirror_model *m, size_t r, mirror_metrics *out)
{
    int rc;
    if ((rc = mirror__check_own(m, r, "mirror_get_replica_metrics"))) return rc;
    if (!out) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_get_replica_metrics: out is NULL");
    *out = m->own.metrics[r];
    return MIRROR_OK;
}

MIRROR_API int mirror_get_replica_metrics(mirror_model *m, size_t r, mirror_metrics *out)
{
    MIRROR__LOCKED(m, "mirror_get_replica_metrics", mirror__get_replica_metrics(m, r, out));
}

/* With several processes, every process's rows of a chunk's predictions
   (n rows of out_size) into every process's out: the processes' rows are
   contiguous, in rank order. */
static int mirror__gather_predictions(mirror_model *m, float *out, size_t n)
{
    mirror_strategy *s = m->s;
    size_t p, g = 0, begin, count, first_row, c0, nc, *parts;
    int rc;
    if (s->processes == 1) return MIRROR_OK;
    parts = (size_t *)mirror__alloc(2 * s->processes, sizeof(size_t));
    if (!parts) return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_predict: out of memory");
    for (p = 0; p < s->processes; p++) {
        size_t replicas = s->procs->replicas_of(s, p);
        mirror__rows_of(m, n, g, &first_row, &count, &c0, &nc);
        mirror__rows_of(m, n, g + replicas - 1, &begin, &count, &c0, &nc);
        parts[p] = (begin + count - first_row) * m->sizes.out;
        parts[s->processes + p] = first_row * m->sizes.out;
        g += replicas;
    }
    rc = s->procs->gather(s, out, sizeof *out, parts, "mirror_predict: gathering the processes' rows", &m->err);
    MIRROR_FREE(parts);
    return rc;
}

/* Forward passes over b in chunks of max_batch (evaluate or predict).
   acc gets the metrics of every process. */
static int mirror__forward_chunks(mirror_model *m, const mirror_batch *b, size_t chunk, int mode,
                                  float *pred, mirror_metrics *acc)
{
    mirror_metrics mine = {0.0, 0, 0};
    mirror__job job;
    int rc;
    if (!chunk || chunk > m->desc.max_batch) chunk = m->desc.max_batch;
    memset(&job, 0, sizeof job);
    job.m = m;
    job.mode = mode;
    job.batch = b;
    job.data = mirror__resident_of(m, b);
    job.metrics_now = 1;
    job.predict_out = pred;
    for (job.offset = 0; job.offset < b->n; job.offset += chunk) {
        job.n = MIRROR__MIN(chunk, b->n - job.offset);
        job.inv_count = 1.0f / (float)job.n;
        if ((rc = mirror__compute(m, &job)) || (rc = mirror__device_status(m))) return rc;
        if (acc) mirror__collect(m, &mine);
        if (pred && (rc = mirror__gather_predictions(m, pred + job.offset * m->sizes.out, job.n))) return rc;
    }
    if (acc && (rc = mirror__sum_processes(m, &mine)) == MIRROR_OK)
        mirror__metrics_add(acc, mine.loss_sum, mine.correct, mine.count);
    return rc;
}

static int mirror__evaluate_batch(mirror_model *m, const mirror_batch *b, mirror_metrics *out)
{
    mirror_metrics sum = {0.0, 0, 0};
    int rc;
    if ((rc = mirror__check_batch(m, b, "mirror_evaluate_batch", 1)) ||
        (rc = mirror__forward_chunks(m, b, 0, MIRROR__EVAL, NULL, &sum)))
        return rc;
    if (out) *out = sum;
    return MIRROR_OK;
}

MIRROR_API int mirror_evaluate_batch(mirror_model *m, const mirror_batch *b, mirror_metrics *out)
{
    MIRROR__LOCKED(m, "mirror_evaluate_batch", mirror__evaluate_batch(m, b, out));
}

static int mirror__predict(mirror_model *m, const float *x, size_t n, float *out)
{
    mirror_batch b;
    int rc;
    memset(&b, 0, sizeof b);
    b.x = x;
    b.n = n;
    if ((rc = mirror__check_batch(m, &b, "mirror_predict", 0))) return rc;
    if (n && !out) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_predict: out is NULL");
    return mirror__forward_chunks(m, &b, 0, MIRROR__PREDICT, out, NULL);
}

MIRROR_API int mirror_predict(mirror_model *m, const float *x, size_t n, float *out)
{
    MIRROR__LOCKED(m, "mirror_predict", mirror__predict(m, x, n, out));
}

static int mirror__predict_proba(mirror_model *m, const float *x, size_t n, float *out)
{
    size_t i, arg, k;
    float zmax, *row;
    int rc;
    if ((rc = mirror__check_built(m, "mirror_predict_proba"))) return rc;
    if (m->desc.loss != MIRROR_LOSS_SOFTMAX_CE)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_predict_proba: the model's loss is not softmax "
                                                    "cross-entropy: its outputs are no logits (use mirror_predict)");
    if ((rc = mirror__predict(m, x, n, out))) return rc;
    k = m->sizes.out;
    if (!(row = (float *)mirror__alloc(k, sizeof(float))))
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_predict_proba: out of memory");
    for (i = 0; i < n; i++) {
        mirror_hd_softmax_row(out + i * k, k, row, &zmax, &arg);
        memcpy(out + i * k, row, k * sizeof(float));
    }
    MIRROR_FREE(row);
    return MIRROR_OK;
}

MIRROR_API int mirror_predict_proba(mirror_model *m, const float *x, size_t n, float *out)
{
    MIRROR__LOCKED(m, "mirror_predict_proba", mirror__predict_proba(m, x, n, out));
}

// >>data --------------------------------------------------------------------
/* Datasets in memory: from arrays, split, shuffled; the built-in
   synthetic digits. (The files they load from: >>loaders.) */

MIRROR_API void mirror_dataset_free(mirror_dataset *ds)
{
    if (!ds) return;
    if (!ds->borrowed) {
        MIRROR_FREE(ds->x);
        MIRROR_FREE(ds->labels);
        MIRROR_FREE(ds->targets);
    }
    memset(ds, 0, sizeof *ds);
}

/* A copy of n floats (or int32s), NULL for none. */
static void *mirror__dup(const void *p, size_t n, size_t elem, int *failed)
{
    void *q;
    if (!p) return NULL;
    if (!(q = mirror__alloc(n ? n : 1, elem))) {
        *failed = 1;
        return NULL;
    }
    memcpy(q, p, n * elem);
    return q;
}

MIRROR_API int mirror_dataset_from_arrays(mirror_dataset *ds, const float *x, const int32_t *labels,
                                          const float *targets, size_t count, size_t channels, size_t height,
                                          size_t width, size_t num_classes, size_t target_dim, int copy,
                                          mirror_error *err)
{
    size_t i, in = 0, tn = 0;
    int failed = 0;
    if (ds) memset(ds, 0, sizeof *ds);
    if (!ds || !x || !count || !channels || !height || !width)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_from_arrays: %s",
                             !ds || !x ? "NULL argument" : "a count or dimension of 0");
    if (!mirror__mul(channels, height, &in) || !mirror__mul(in, width, &in) || !mirror__mul(in, count, &in) ||
        (targets && (!target_dim || !mirror__mul(count, target_dim, &tn))) || (labels && !num_classes) ||
        num_classes > 65536)
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_dataset_from_arrays: the sizes overflow, or labels without num_classes (1 to "
                             "65536), or targets without target_dim");
    for (i = 0; labels && i < count; i++)
        if (labels[i] < 0 || (size_t)labels[i] >= num_classes)
            return mirror__error(err, MIRROR_ERR_LABEL, "mirror_dataset_from_arrays: label %ld of sample %zu is outside "
                                 "[0, %zu)", (long)labels[i], i, num_classes);
    for (i = 0; i < tn; i++)
        if (!mirror_hd_finite(targets[i]))
            return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_from_arrays: target %zu is not finite", i);
    if (copy) {
        ds->x = (float *)mirror__dup(x, in, sizeof(float), &failed);
        ds->labels = (int32_t *)mirror__dup(labels, count, sizeof(int32_t), &failed);
        ds->targets = (float *)mirror__dup(targets, tn, sizeof(float), &failed);
        if (failed) {
            mirror_dataset_free(ds);
            return mirror__error(err, MIRROR_ERR_NO_MEMORY, "mirror_dataset_from_arrays: out of memory");
        }
    } else {
        ds->x = (float *)x, ds->labels = (int32_t *)labels, ds->targets = (float *)targets;
        ds->borrowed = 1;
    }
    ds->count = count, ds->channels = channels, ds->height = height, ds->width = width;
    ds->num_classes = labels ? num_classes : 0;
    ds->target_dim = targets ? target_dim : 0;
    return MIRROR_OK;
}

/* Row r of src into row at of dst (x, labels, targets as src has them). */
static void mirror__copy_row(mirror_dataset *dst, size_t at, const mirror_dataset *src, size_t r)
{
    size_t in = src->channels * src->height * src->width;
    memcpy(dst->x + at * in, src->x + r * in, in * sizeof(float));
    if (src->labels) dst->labels[at] = src->labels[r];
    if (src->targets)
        memcpy(dst->targets + at * src->target_dim, src->targets + r * src->target_dim, src->target_dim * sizeof(float));
}

MIRROR_API int mirror_dataset_split(const mirror_dataset *all, size_t val_count, uint64_t seed, mirror_dataset *train,
                                    mirror_dataset *val, mirror_error *err)
{
    mirror_dataset *out[2];
    size_t *perm, i, k, n[2];
    int rc = MIRROR_OK;
    if (all && (all == train || all == val || (train && train == val)))
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_split: all, train and val must be three datasets");
    if (train) memset(train, 0, sizeof *train);
    if (val) memset(val, 0, sizeof *val);
    if (!all || !train || !val || !all->x)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_split: NULL argument");
    if (!val_count || val_count >= all->count)
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_dataset_split: %zu validation samples of %zu: both parts need at least one",
                             val_count, all->count);
    if (!(perm = (size_t *)mirror__alloc(all->count, sizeof(size_t))))
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "mirror_dataset_split: out of memory");
    mirror_permutation(perm, all->count, seed, 0);
    out[0] = train, out[1] = val;
    n[0] = all->count - val_count, n[1] = val_count;
    for (k = 0; k < 2 && rc == MIRROR_OK; k++) {
        size_t in = all->channels * all->height * all->width;
        *out[k] = *all;
        out[k]->borrowed = 0;
        out[k]->count = n[k];
        out[k]->x = (float *)mirror__alloc(n[k] * in, sizeof(float));
        out[k]->labels = all->labels ? (int32_t *)mirror__alloc(n[k], sizeof(int32_t)) : NULL;
        out[k]->targets = all->targets ? (float *)mirror__alloc(n[k] * all->target_dim, sizeof(float)) : NULL;
        if (!out[k]->x || (all->labels && !out[k]->labels) || (all->targets && !out[k]->targets))
            rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "mirror_dataset_split: out of memory");
        for (i = 0; rc == MIRROR_OK && i < n[k]; i++) mirror__copy_row(out[k], i, all, perm[(k ? n[0] : 0) + i]);
    }
    MIRROR_FREE(perm);
    if (rc) mirror_dataset_free(train), mirror_dataset_free(val);
    return rc;
}

MIRROR_API size_t mirror_num_batches(size_t count, size_t batch, int drop_remainder)
{
    if (!batch) return 0;
    return count / batch + (!drop_remainder && count % batch != 0);
}

MIRROR_API int mirror_permutation(size_t *perm, size_t n, uint64_t seed, uint64_t epoch)
{
    uint64_t state = seed ^ (0xD1B54A32D192ED03ull * (epoch + 1));
    size_t i;
    if (!perm && n) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_permutation: perm is NULL");
    mirror__next(&state); /* decorrelate nearby (seed, epoch) pairs */
    for (i = 0; i < n; i++) perm[i] = i;
    for (i = n; i > 1; i--) { /* Fisher-Yates */
        size_t j = (size_t)mirror__below(&state, i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    return MIRROR_OK;
}

/* Synthetic digits: each class is a few strokes in a unit box (x right,
   y down). A sample jitters the control points, then draws the strokes
   with a random rotation, scale, shift and stroke width, adds noise. */

#define MIRROR__GLYPH_POINTS 14
typedef struct mirror__stroke {
    int n;
    float p[MIRROR__GLYPH_POINTS][2];
} mirror__stroke;

/* Up to two strokes per digit; ovals are made by mirror__oval. */
static const mirror__stroke mirror__glyphs[10][2] = {
    {{0, {{0}}}, {0, {{0}}}}, /* 0: oval */
    {{3, {{0.35f, 0.28f}, {0.52f, 0.12f}, {0.52f, 0.9f}}}, {0, {{0}}}},
    {{8, {{0.25f, 0.3f}, {0.35f, 0.15f}, {0.5f, 0.1f}, {0.67f, 0.16f}, {0.72f, 0.32f}, {0.62f, 0.5f},
          {0.25f, 0.9f}, {0.78f, 0.9f}}},
     {0, {{0}}}},
    {{9, {{0.25f, 0.16f}, {0.72f, 0.14f}, {0.45f, 0.45f}, {0.62f, 0.5f}, {0.74f, 0.65f}, {0.7f, 0.8f},
          {0.55f, 0.9f}, {0.38f, 0.9f}, {0.24f, 0.8f}}},
     {0, {{0}}}},
    {{3, {{0.62f, 0.9f}, {0.62f, 0.1f}, {0.2f, 0.64f}}}, {2, {{0.2f, 0.64f}, {0.8f, 0.64f}}}},
    {{10, {{0.74f, 0.12f}, {0.32f, 0.12f}, {0.28f, 0.46f}, {0.48f, 0.4f}, {0.66f, 0.46f}, {0.74f, 0.64f},
           {0.68f, 0.82f}, {0.52f, 0.9f}, {0.36f, 0.88f}, {0.24f, 0.8f}}},
     {0, {{0}}}},
    {{11, {{0.68f, 0.12f}, {0.46f, 0.24f}, {0.32f, 0.44f}, {0.27f, 0.64f}, {0.33f, 0.84f}, {0.5f, 0.91f},
           {0.67f, 0.84f}, {0.72f, 0.68f}, {0.62f, 0.54f}, {0.44f, 0.52f}, {0.3f, 0.62f}}},
     {0, {{0}}}},
    {{3, {{0.24f, 0.12f}, {0.76f, 0.12f}, {0.42f, 0.9f}}}, {2, {{0.36f, 0.5f}, {0.66f, 0.5f}}}},
    {{0, {{0}}}, {0, {{0}}}}, /* 8: two ovals */
    {{0, {{0}}}, {4, {{0.7f, 0.34f}, {0.68f, 0.6f}, {0.62f, 0.78f}, {0.55f, 0.9f}}}}, /* 9: oval + tail */
};

static void mirror__oval(mirror__stroke *s, float cx, float cy, float rx, float ry)
{
    int i;
    s->n = 13;
    for (i = 0; i < 13; i++) {
        float a = 6.28318530718f * (float)i / 12.0f;
        s->p[i][0] = cx + rx * sinf(a);
        s->p[i][1] = cy - ry * cosf(a);
    }
}

/* The strokes of one digit, jittered; returns how many. */
static int mirror__digit_strokes(int digit, mirror__stroke *out, uint64_t *rng)
{
    int n = 0, i, j;
    const mirror__stroke *g = mirror__glyphs[digit];
    if (digit == 0) mirror__oval(&out[n++], 0.5f, 0.5f, 0.26f, 0.38f);
    if (digit == 8) {
        mirror__oval(&out[n++], 0.5f, 0.3f, 0.18f, 0.19f);
        mirror__oval(&out[n++], 0.5f, 0.69f, 0.22f, 0.21f);
    }
    if (digit == 9) mirror__oval(&out[n++], 0.5f, 0.33f, 0.2f, 0.2f);
    for (i = 0; i < 2; i++)
        if (g[i].n) out[n++] = g[i];
    for (i = 0; i < n; i++)
        for (j = 0; j < out[i].n; j++) {
            out[i].p[j][0] += 0.08f * (mirror__uniform(rng) - 0.5f);
            out[i].p[j][1] += 0.08f * (mirror__uniform(rng) - 0.5f);
        }
    return n;
}

/* Distance from (x, y) to the segment a-b. */
static float mirror__segment_distance(float x, float y, const float *a, const float *b)
{
    float dx = b[0] - a[0], dy = b[1] - a[1], len2 = dx * dx + dy * dy, t = 0.0f, ex, ey;
    if (len2 > 0.0f) t = MIRROR__MAX(0.0f, MIRROR__MIN(1.0f, ((x - a[0]) * dx + (y - a[1]) * dy) / len2));
    ex = x - (a[0] + t * dx);
    ey = y - (a[1] + t * dy);
    return sqrtf(ex * ex + ey * ey);
}

static void mirror__draw_digit(float *img, int digit, uint64_t *rng)
{
    mirror__stroke strokes[3];
    int n = mirror__digit_strokes(digit, strokes, rng), s, j;
    float angle = 0.5f * (mirror__uniform(rng) - 0.5f), scale = 17.0f + 5.0f * mirror__uniform(rng);
    float shear = 0.3f * (mirror__uniform(rng) - 0.5f);
    float cx = 14.0f + 5.0f * (mirror__uniform(rng) - 0.5f), cy = 14.0f + 5.0f * (mirror__uniform(rng) - 0.5f);
    float half = 0.6f + 0.9f * mirror__uniform(rng), ca = cosf(angle), sa = sinf(angle);
    float noise = 0.05f + 0.1f * mirror__uniform(rng);
    size_t i;
    /* Control points to pixels: centre, shear, rotate, scale, shift. */
    for (s = 0; s < n; s++)
        for (j = 0; j < strokes[s].n; j++) {
            float u = strokes[s].p[j][0] - 0.5f, v = strokes[s].p[j][1] - 0.5f;
            u += shear * v;
            strokes[s].p[j][0] = cx + scale * (ca * u - sa * v);
            strokes[s].p[j][1] = cy + scale * (sa * u + ca * v);
        }
    for (i = 0; i < 28 * 28; i++) {
        float x = (float)(i % 28) + 0.5f, y = (float)(i / 28) + 0.5f, d = 1e9f, v;
        for (s = 0; s < n; s++)
            for (j = 0; j + 1 < strokes[s].n; j++)
                d = MIRROR__MIN(d, mirror__segment_distance(x, y, strokes[s].p[j], strokes[s].p[j + 1]));
        v = MIRROR__MAX(0.0f, MIRROR__MIN(1.0f, half + 0.5f - d)) + noise * mirror__normal(rng);
        img[i] = MIRROR__MAX(0.0f, MIRROR__MIN(1.0f, v));
    }
}

MIRROR_API int mirror_dataset_synthetic_digits(mirror_dataset *ds, size_t count, uint64_t seed,
                                               mirror_error *err)
{
    uint64_t rng = seed;
    size_t i;
    if (!ds) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_synthetic_digits: ds is NULL");
    memset(ds, 0, sizeof *ds);
    if (!count || count > ((size_t)1 << 24))
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_dataset_synthetic_digits: count %zu; it makes 1 to %zu samples (2^24)", count,
                             (size_t)1 << 24);
    ds->x = (float *)mirror__alloc(count * 28 * 28, sizeof(float));
    ds->labels = (int32_t *)mirror__alloc(count, sizeof(int32_t));
    if (!ds->x || !ds->labels) {
        mirror_dataset_free(ds);
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "mirror_dataset_synthetic_digits: out of memory");
    }
    for (i = 0; i < count; i++) {
        ds->labels[i] = (int32_t)(i % 10);
        mirror__draw_digit(ds->x + i * 28 * 28, (int)(i % 10), &rng);
    }
    ds->count = count;
    ds->channels = 1;
    ds->height = ds->width = 28;
    ds->num_classes = 10;
    return MIRROR_OK;
}

// >>files -------------------------------------------------------------------
/* Files read and written safely, for checkpoints, the loaders and the side
   outputs alike: paths within PATH_MAX, regular files alone read and
   bounded by what their header declares (gzip inflated), temporary files
   renamed over their path, paths compared. */

/* Whether path with `extra` bytes joined to it (`added`: what they are)
   stays within MIRROR__PATH_MAX; else MIRROR_ERR_ARGUMENT naming the limit. */
static int mirror__path_fits(mirror_error *err, const char *what, const char *path, size_t extra, const char *added)
{
    size_t n = strlen(path);
    if (n + extra < (size_t)MIRROR__PATH_MAX) return MIRROR_OK;
    return mirror__error(err, MIRROR_ERR_ARGUMENT,
                         "%s: the path is %zu bytes long, and with the %zu of %s it would pass the system's limit "
                         "of %d bytes for a path (PATH_MAX); name a shorter one",
                         what, n, extra, added, MIRROR__PATH_MAX - 1);
}

/* What a file that is not a regular file is, for messages. */
static const char *mirror__file_kind(mode_t mode)
{
    return S_ISDIR(mode) ? "a directory" : S_ISLNK(mode) ? "a symbolic link" : S_ISFIFO(mode) ? "a FIFO"
                                                                                            : "a device or socket";
}

/* A temporary file beside PATH is named PATH.tmp-mirror-PPPPPPPP-RRRRRRRRRRRRRRRR:
   the writer's process id and 64 random bits, in lowercase hexadecimal. No
   user picks such a name, so a save (holding PATH.lock) removes the ones a
   crash left by their name alone, never by what they hold. */
#define MIRROR__TMP_MARK ".tmp-mirror-"
#define MIRROR__TMP_TAIL 25 /* "PPPPPPPP-RRRRRRRRRRRRRRRR" */
#define MIRROR__TMP_NAME (sizeof MIRROR__TMP_MARK - 1 + MIRROR__TMP_TAIL) /* what it adds to PATH */

/* write(2) all of it, through short writes and EINTR. */
static int mirror__write_all(int fd, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    while (n) {
        ssize_t w = write(fd, b, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsync of the directory holding path, so that a rename survives a crash. */
static int mirror__sync_dir(const char *path)
{
    char dir[MIRROR__PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    int fd, rc;
    if (n >= sizeof dir) return errno = ENAMETOOLONG, -1;
    if (slash) memcpy(dir, path, n ? n : 1), dir[n ? n : 1] = '\0';
    else dir[0] = '.', dir[1] = '\0';
    if ((fd = open(dir, O_RDONLY)) < 0) return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}

/* Creates a new temporary file for path (mode: as open's, less the umask),
   its name in name[size]; returns its descriptor, or -1 with errno set. */
static int mirror__make_tmp(const char *path, int mode, char *name, size_t size)
{
    uint32_t pid = (uint32_t)getpid();
    double now = mirror__now();
    uint64_t state, bits;
    int tries, fd = -1;
    /* never true, but without it gcc -O3 -fsanitize=undefined warns of a null snprintf */
    if (!name || !size) {
        errno = EINVAL;
        return -1;
    }
    memcpy(&bits, &now, sizeof bits);
    state = bits ^ (uint64_t)pid << 32 ^ (uint64_t)(uintptr_t)name; /* no shared state: threads may call it */
    for (tries = 0; tries < 100; tries++) {
        if (snprintf(name, size, "%s" MIRROR__TMP_MARK "%08lx-%016llx", path, (unsigned long)pid,
                     (unsigned long long)mirror__next(&state)) >= (int)size) {
            errno = ENAMETOOLONG;
            return -1;
        }
        if ((fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, (mode_t)mode)) >= 0 || errno != EEXIST) break;
    }
    return fd;
}

/* The whole file in a new buffer, gunzipped when it is gzip and zlib is in. */
#define MIRROR__MAX_FILE ((size_t)-1 / 4 < ((size_t)1 << 30) * 4 ? (size_t)-1 / 4 : ((size_t)1 << 30) * 4)

#ifndef MIRROR_ZLIB /* with zlib, gzread tells (gzdirect) */
static int mirror__is_gzip(const unsigned char *p, size_t len) { return len >= 2 && p[0] == 0x1f && p[1] == 0x8b; }
#endif

/* How many bytes a file may hold, from its first len bytes (its header):
   0 while they do not tell yet, MIRROR__BAD_HEADER when the header is
   malformed (reading stops there; the parser then says what is wrong). */
typedef size_t (*mirror__declared_fn)(const unsigned char *p, size_t len);
#define MIRROR__BAD_HEADER ((size_t)-1)

/* Opens path for reading without blocking (a FIFO with no writer would
   block open() for ever) and refuses what is not a regular file: FIFOs,
   devices such as /dev/zero, directories. Returns the descriptor, or -1
   with err set. */
static int mirror__open_regular(const char *path, mirror_error *err)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        mirror__error(err, MIRROR_ERR_IO, MIRROR__CUT_F ": cannot open: %s%s", MIRROR__PATH(path), strerror(e),
                      e == ENOENT && lstat(path, &st) == 0 && S_ISLNK(st.st_mode) ? " (a symbolic link to nothing)"
                                                                                   : "");
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        mirror__error(err, MIRROR_ERR_IO, MIRROR__CUT_F ": cannot stat: %s", MIRROR__PATH(path), strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        mirror__error(err, MIRROR_ERR_IO, MIRROR__CUT_F ": not a regular file but %s: give the path of a file",
                      MIRROR__PATH(path),
                      S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* Reads a whole regular file (decompressed, with MIRROR_ZLIB) into memory,
   at most `most` bytes (`most_is` says what that bound is, for the
   message), and a compressed file no more than what `declared` (may be
   NULL) reads in its header: a gzip bomb is refused at its bound, one byte
   past it, not after gigabytes. (A plain file's size is on the disk: its
   parser gives the exact count of missing or trailing bytes.) */
static int mirror__read_bounded(const char *path, size_t most, const char *most_is, mirror__declared_fn declared,
                                unsigned char **data, size_t *size, mirror_error *err)
{
    unsigned char *buf = NULL, *grown;
    size_t cap = 0, len = 0, bound = 0;
    int got, compressed = 0, fd = mirror__open_regular(path, err);
#ifdef MIRROR_ZLIB
    gzFile f = fd < 0 ? NULL : gzdopen(fd, "rb");
#else
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
#endif
    *data = NULL;
    *size = 0;
    if (fd < 0) return err ? err->code : MIRROR_ERR_IO;
    if (!f) {
        close(fd);
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory to open", MIRROR__PATH(path));
    }
    most = MIRROR__MIN(most, MIRROR__MAX_FILE);
    for (;;) {
        if (len == cap || len > most) {
            cap = MIRROR__MIN(cap ? 2 * cap : 1 << 16, most + 1);
            if (len > most || !(grown = (unsigned char *)MIRROR_MALLOC(cap))) {
                MIRROR_FREE(buf);
#ifdef MIRROR_ZLIB
                gzclose(f);
#else
                fclose(f);
#endif
                if (len > most)
                    return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": more than the %zu bytes %s",
                                         MIRROR__PATH(path), most,
                                         bound && bound <= most ? "its header declares (decompressed)" : most_is);
                return mirror__error(err, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": too large to read into memory",
                                     MIRROR__PATH(path));
            }
            if (len) memcpy(grown, buf, len);
            MIRROR_FREE(buf);
            buf = grown;
        }
#ifdef MIRROR_ZLIB
        got = gzread(f, buf + len, (unsigned)MIRROR__MIN(cap - len, (size_t)1 << 30));
#else
        got = (int)fread(buf + len, 1, MIRROR__MIN(cap - len, (size_t)1 << 30), f);
#endif
        if (got <= 0) break;
        len += (size_t)got;
#ifdef MIRROR_ZLIB
        compressed = !gzdirect(f); /* known after the first read */
#endif
        if (declared && !bound && compressed && (bound = declared(buf, len)) != 0) {
            if (bound == MIRROR__BAD_HEADER) break; /* the parser says what is wrong */
            most = MIRROR__MIN(most, bound);
        }
    }
#ifdef MIRROR_ZLIB
    {
        int zerr = Z_OK;
        const char *msg = gzerror(f, &zerr);
        if (got < 0 || zerr != Z_OK) { /* Z_BUF_ERROR: the stream ended early */
            char what[96];
            snprintf(what, sizeof what, "%s", msg ? msg : "read error");
            gzclose(f);
            MIRROR_FREE(buf);
            return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": cannot decompress: %s", MIRROR__PATH(path),
                                 what);
        }
        gzclose(f);
    }
#else
    {
        int failed = ferror(f);
        fclose(f);
        if (failed) {
            MIRROR_FREE(buf);
            return mirror__error(err, MIRROR_ERR_IO, MIRROR__CUT_F ": read error", MIRROR__PATH(path));
        }
    }
    if (mirror__is_gzip(buf, len)) {
        MIRROR_FREE(buf);
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED,
                             MIRROR__CUT_F ": gzip file, and this build has no zlib: define MIRROR_ZLIB in the file "
                             "that defines "
                             "MIRROR_IMPLEMENTATION (a CUDA build: on nvcc's line) and link -lz, or gunzip the file",
                             MIRROR__PATH(path));
    }
#endif
    *data = buf;
    *size = len;
    return MIRROR_OK;
}

static int mirror__read_file(const char *path, size_t most, mirror__declared_fn declared, unsigned char **data,
                             size_t *size, mirror_error *err)
{
    return mirror__read_bounded(path, most, "this file can hold (decompressed)", declared, data, size, err);
}

/* Directory of path (".", "/" or what comes before the last slash) into
   dir, and where its last name starts; 0 when dir cannot hold it. */
static int mirror__split_path(const char *path, char *dir, size_t size, const char **name)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n + 2 > size) return 0;
    if (slash) memcpy(dir, path, n ? n : 1), dir[n ? n : 1] = '\0';
    else dir[0] = '.', dir[1] = '\0';
    *name = slash ? slash + 1 : path;
    return 1;
}

/* Whether a and b lie in one directory (the same device and inode, or,
   where it does not exist, the same text); *na and *nb get their names. */
static int mirror__same_dir(const char *a, const char *b, const char **na, const char **nb)
{
    char da[MIRROR__PATH_MAX], db[MIRROR__PATH_MAX];
    struct stat sa, sb;
    if (!mirror__split_path(a, da, sizeof da, na) || !mirror__split_path(b, db, sizeof db, nb)) return 0;
    if (stat(da, &sa) != 0 || stat(db, &sb) != 0) return !strcmp(da, db);
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Whether paths a and b name one file: the same file (device and inode)
   where both exist, else the same name in the same directory. */
static int mirror__same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    const char *na, *nb;
    int ea = lstat(a, &sa) == 0, eb = lstat(b, &sb) == 0;
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return !ea && !eb && mirror__same_dir(a, b, &na, &nb) && !strcmp(na, nb);
}

/* The directory of path's first len bytes (trailing slashes aside) made
   as mkdir -p makes it: each missing one, outermost first, 0777 less the
   umask. *made: the length of the outermost one this call made (0: none
   was missing); those below it are this call's too, and
   mirror__unmake_dirs removes them. A name on the way that is not a
   directory fails with MIRROR_ERR_ARGUMENT, one that cannot be made
   (no permission, a read-only file system) with MIRROR_ERR_IO, naming it:
   "WHAT DIR cannot be made: ..." (what: "mirror_fit: the history's
   directory"). */
static int mirror__make_dirs(mirror_error *err, const char *what, const char *path, size_t len, size_t *made)
{
    char at[MIRROR__PATH_MAX];
    struct stat st;
    size_t end;
    *made = 0;
    while (len > 1 && path[len - 1] == '/') len--;
    if (len >= sizeof at) /* mirror__path_fits saw to it */
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "%s: the path passes PATH_MAX", what);
    for (end = 1; end <= len; end++) {
        if (end < len && !(path[end] == '/' && path[end - 1] != '/')) continue; /* a name ends at a slash */
        memcpy(at, path, end), at[end] = '\0';
        if (stat(at, &st) == 0) {
            if (S_ISDIR(st.st_mode)) continue;
            return mirror__error(err, MIRROR_ERR_ARGUMENT, "%s %.*s cannot be made: %s is %s, not a directory", what,
                                 (int)len, path, at, S_ISREG(st.st_mode) ? "a file" : mirror__file_kind(st.st_mode));
        }
        if (errno == ENOENT && mkdir(at, 0777) == 0) {
            if (!*made) *made = end;
            continue;
        }
        if (errno == EEXIST && stat(at, &st) == 0 && S_ISDIR(st.st_mode)) continue; /* made meanwhile by another */
        return mirror__error(err, MIRROR_ERR_IO, "%s %.*s cannot be made: %s: %s", what, (int)len, path, at,
                             strerror(errno));
    }
    return MIRROR_OK;
}

/* Removes the directories mirror__make_dirs(path, len) made (made: what it
   gave), innermost first; rmdir leaves one that is not empty. */
static void mirror__unmake_dirs(const char *path, size_t len, size_t made)
{
    char dir[MIRROR__PATH_MAX];
    while (len > 1 && path[len - 1] == '/') len--;
    if (!made || len >= sizeof dir) return;
    memcpy(dir, path, len), dir[len] = '\0';
    while (len >= made && rmdir(dir) == 0) {
        while (len && dir[len - 1] != '/') len--; /* up to the name's slash, */
        while (len > 1 && dir[len - 1] == '/') len--; /* then past it */
        dir[len] = '\0';
    }
}

/* Where path's directory ends: its last slash (0: none, the working
   directory; 1: the root). */
static size_t mirror__dir_length(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) + (slash == path) : 0;
}

#ifndef MIRROR_NO_LOADERS
// >>loaders -----------------------------------------------------------------
/* The dataset loaders (left out by MIRROR_NO_LOADERS): IDX (MNIST),
   CIFAR-10 and .npy files, plain or gzip, each bounded by what its
   header declares. */

static size_t mirror__be32(const unsigned char *p)
{
    return (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | (size_t)p[3];
}

/* An IDX file's size as its header declares it: magic 0 0 type ndims,
   then ndims big-endian dimensions, then the data. 0 until the header has
   been read; MIRROR__BAD_HEADER for another magic number or where the
   product overflows. */
static size_t mirror__idx_declared(const unsigned char *p, size_t len)
{
    size_t ndims, i, total;
    if (len < 4) return 0;
    if (p[0] != 0 || p[1] != 0) return MIRROR__BAD_HEADER;
    total = p[2] == 0x0B ? 2 : p[2] == 0x0C || p[2] == 0x0D ? 4 : p[2] == 0x0E ? 8 : 1; /* the element's bytes */
    ndims = p[3];
    if (len < 4 + 4 * ndims) return 0;
    for (i = 0; i < ndims; i++)
        if (!mirror__mul(total, mirror__be32(p + 4 + 4 * i), &total)) return MIRROR__BAD_HEADER;
    return total >= (size_t)-1 - 4 - 4 * ndims ? MIRROR__BAD_HEADER : 4 + 4 * ndims + total;
}

/* Checks an IDX header of `dims` dimensions of unsigned bytes; dim[] gets
   the sizes; the payload must fill the rest of the file exactly. */
static int mirror__idx_header(const char *path, const unsigned char *p, size_t size, size_t dims,
                              size_t *dim, mirror_error *err)
{
    size_t i, payload = 1, header = 4 + 4 * dims;
    if (size < 4)
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": truncated: %zu bytes, an IDX file starts with "
                             "a 4-byte magic number", MIRROR__PATH(path), size);
    if (p[0] != 0 || p[1] != 0)
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": bad magic %02x %02x (not an IDX file)",
                             MIRROR__PATH(path), p[0], p[1]);
    if (p[2] != 0x08)
        return mirror__error(err, MIRROR_ERR_FORMAT,
                             MIRROR__CUT_F ": element type 0x%02x, expected 0x08 (unsigned byte)",
                             MIRROR__PATH(path), p[2]);
    if (p[3] != dims)
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": %u dimensions, expected %zu", MIRROR__PATH(path),
                             p[3], dims);
    if (size < header)
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": truncated header: %zu of %zu bytes",
                             MIRROR__PATH(path), size,
                             header);
    for (i = 0; i < dims; i++) {
        dim[i] = mirror__be32(p + 4 + 4 * i);
        if (!mirror__mul(payload, dim[i], &payload))
            return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": dimensions overflow", MIRROR__PATH(path));
    }
    if (payload > size - header)
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": truncated data: %zu of %zu bytes",
                             MIRROR__PATH(path), size - header, payload);
    if (payload < size - header)
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": %zu trailing bytes after the data",
                             MIRROR__PATH(path), size - header - payload);
    return MIRROR_OK;
}

/* An IDX image file and label file already in memory into ds (left
   zeroed on error). Separate from the reading so that fuzzers can call it. */
static int mirror__parse_idx(mirror_dataset *ds, const unsigned char *img, size_t img_size, const char *images_path,
                             const unsigned char *lab, size_t lab_size, const char *labels_path, size_t num_classes,
                             mirror_error *err)
{
    size_t idim[3] = {0, 0, 0}, ldim[1] = {0}, i, pixels;
    int rc;
    memset(ds, 0, sizeof *ds);
    if ((rc = mirror__idx_header(images_path, img, img_size, 3, idim, err)) ||
        (rc = mirror__idx_header(labels_path, lab, lab_size, 1, ldim, err)))
        return rc;
    if (idim[0] != ldim[0])
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F " has %zu images but " MIRROR__CUT_F " has %zu labels",
                             MIRROR__PATH(images_path), idim[0], MIRROR__PATH(labels_path), ldim[0]);
    if (!idim[0] || !idim[1] || !idim[2])
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": empty (%zu images of %zux%zu)",
                             MIRROR__PATH(images_path), idim[0],
                             idim[1], idim[2]);
    for (i = 0; i < ldim[0]; i++)
        if (lab[8 + i] >= num_classes)
            return mirror__error(err, MIRROR_ERR_LABEL, MIRROR__CUT_F ": label %u of sample %zu is outside [0, %zu)",
                                 MIRROR__PATH(labels_path), lab[8 + i], i, num_classes);
    pixels = idim[0] * idim[1] * idim[2]; /* fits: the file holds them */
    ds->x = (float *)mirror__alloc(pixels, sizeof(float));
    ds->labels = (int32_t *)mirror__alloc(idim[0], sizeof(int32_t));
    if (!ds->x || !ds->labels) {
        mirror_dataset_free(ds);
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": no memory for %zu images",
                             MIRROR__PATH(images_path), idim[0]);
    }
    for (i = 0; i < pixels; i++) ds->x[i] = (float)img[16 + i] * (1.0f / 255.0f);
    for (i = 0; i < idim[0]; i++) ds->labels[i] = lab[8 + i];
    ds->count = idim[0];
    ds->channels = 1;
    ds->height = idim[1];
    ds->width = idim[2];
    ds->num_classes = num_classes;
    return MIRROR_OK;
}

MIRROR_API int mirror_dataset_load_idx(mirror_dataset *ds, const char *images_path,
                                       const char *labels_path, size_t num_classes, mirror_error *err)
{
    unsigned char *img = NULL, *lab = NULL;
    size_t img_size = 0, lab_size = 0;
    int rc;
    if (ds) memset(ds, 0, sizeof *ds);
    if (!ds || !images_path || !labels_path)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_load_idx: NULL argument");
    if (!num_classes) num_classes = 10;
    if (num_classes > 256)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_load_idx: num_classes %zu > 256",
                             num_classes);
    if ((rc = mirror__read_file(images_path, MIRROR__MAX_FILE, mirror__idx_declared, &img, &img_size, err)) ==
            MIRROR_OK &&
        (rc = mirror__read_file(labels_path, MIRROR__MAX_FILE, mirror__idx_declared, &lab, &lab_size, err)) ==
            MIRROR_OK)
        rc = mirror__parse_idx(ds, img, img_size, images_path, lab, lab_size, labels_path, num_classes, err);
    MIRROR_FREE(img);
    MIRROR_FREE(lab);
    return rc;
}

/* DIR/NAME when it exists (whatever it is: opening it then says what is
   wrong with it, a permission or a directory in its place), else DIR/NAME.gz
   when that exists; neither: an error naming both. */
static int mirror__find(char *out, size_t size, const char *dir, const char *name, mirror_error *err)
{
    struct stat st;
    snprintf(out, size, "%s/%s", dir, name);
    if (lstat(out, &st) == 0) return MIRROR_OK;
    snprintf(out, size, "%s/%s.gz", dir, name);
    if (lstat(out, &st) == 0) return MIRROR_OK;
    return mirror__error(err, MIRROR_ERR_IO,
                         MIRROR__CUT_F ": neither %s nor %s.gz is there (the MNIST files, plain or gzip)",
                         MIRROR__PATH(dir), name, name);
}

MIRROR_API int mirror_dataset_load_mnist(mirror_dataset *train, mirror_dataset *test, const char *dir,
                                         mirror_error *err)
{
    static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    mirror_dataset *out[2];
    char img[MIRROR__PATH_MAX], lab[MIRROR__PATH_MAX];
    struct stat st;
    int i, rc;
    out[0] = train;
    out[1] = test;
    if (train) memset(train, 0, sizeof *train);
    if (test) memset(test, 0, sizeof *test);
    if (!dir || (!train && !test))
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_load_mnist: NULL argument");
    if (!dir[0])
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "mirror_dataset_load_mnist: an empty directory name (\".\" is the current directory)");
    if ((rc = mirror__path_fits(err, "mirror_dataset_load_mnist", dir, sizeof "/train-images-idx3-ubyte.gz" - 1,
                                "a file's name in it")))
        return rc;
    if (stat(dir, &st) != 0)
        return mirror__error(err, MIRROR_ERR_IO, MIRROR__CUT_F ": cannot open the directory: %s", MIRROR__PATH(dir),
                             strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return mirror__error(err, MIRROR_ERR_IO,
                             MIRROR__CUT_F ": not a directory: give the directory that holds the MNIST files",
                             MIRROR__PATH(dir));
    for (i = 0; i < 2; i++) {
        if (!out[i]) continue;
        if ((rc = mirror__find(img, sizeof img, dir, names[2 * i], err)) != MIRROR_OK ||
            (rc = mirror__find(lab, sizeof lab, dir, names[2 * i + 1], err)) != MIRROR_OK ||
            (rc = mirror_dataset_load_idx(out[i], img, lab, 10, err)) != MIRROR_OK) {
            if (i == 1 && train) mirror_dataset_free(train);
            return rc;
        }
    }
    return MIRROR_OK;
}

/* CIFAR-10: a batch is records of a label byte and 3 x 32 x 32 pixel bytes,
   10000 of them in each file of the data set. */
#define MIRROR__CIFAR_PIXELS 3072
#define MIRROR__CIFAR_RECORD (1 + MIRROR__CIFAR_PIXELS)
#define MIRROR__CIFAR_BATCH 10000

/* Checks one batch in memory: a positive whole number of records, every
   label in [0, 10). */
static int mirror__cifar10_check(const unsigned char *p, size_t size, const char *name, mirror_error *err)
{
    size_t i;
    if (!size)
        return mirror__error(err, MIRROR_ERR_FORMAT,
                             MIRROR__CUT_F ": empty file (a CIFAR-10 batch is records of %d bytes)",
                             MIRROR__PATH(name), MIRROR__CIFAR_RECORD);
    if (size < MIRROR__CIFAR_RECORD)
        return mirror__error(err, MIRROR_ERR_FORMAT,
                             MIRROR__CUT_F ": size %zu, less than one %d-byte CIFAR-10 record (cut short, or not a "
                             "CIFAR-10 batch)", MIRROR__PATH(name), size, MIRROR__CIFAR_RECORD);
    if (size % MIRROR__CIFAR_RECORD) /* cut short or with bytes added: the size cannot tell which */
        return mirror__error(err, MIRROR_ERR_FORMAT,
                             MIRROR__CUT_F ": size %zu is not a multiple of the %d-byte CIFAR-10 record: %zu records "
                             "and %zu bytes over (expected %zu or %zu bytes)",
                             MIRROR__PATH(name), size, MIRROR__CIFAR_RECORD, size / MIRROR__CIFAR_RECORD,
                             size % MIRROR__CIFAR_RECORD, size - size % MIRROR__CIFAR_RECORD,
                             size - size % MIRROR__CIFAR_RECORD + MIRROR__CIFAR_RECORD);
    for (i = 0; i < size / MIRROR__CIFAR_RECORD; i++)
        if (p[i * MIRROR__CIFAR_RECORD] > 9)
            return mirror__error(err, MIRROR_ERR_LABEL, MIRROR__CUT_F ": label %u of record %zu is outside [0, 10)",
                                 MIRROR__PATH(name), p[i * MIRROR__CIFAR_RECORD], i);
    return MIRROR_OK;
}

/* One CIFAR-10 batch (or batches back to back) from memory into ds, which
   is overwritten; on error ds is left empty. name is for the messages. */
static int mirror__parse_cifar10(mirror_dataset *ds, const unsigned char *p, size_t size, const char *name,
                                 mirror_error *err)
{
    size_t n, i, j;
    int rc;
    memset(ds, 0, sizeof *ds);
    if ((rc = mirror__cifar10_check(p, size, name, err)) != MIRROR_OK) return rc;
    n = size / MIRROR__CIFAR_RECORD;
    ds->x = (float *)mirror__alloc(n, MIRROR__CIFAR_PIXELS * sizeof(float));
    ds->labels = (int32_t *)mirror__alloc(n, sizeof(int32_t));
    if (!ds->x || !ds->labels) {
        mirror_dataset_free(ds);
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": no memory for %zu images", MIRROR__PATH(name),
                             n);
    }
    for (i = 0; i < n; i++) {
        const unsigned char *r = p + i * MIRROR__CIFAR_RECORD;
        float *x = ds->x + i * MIRROR__CIFAR_PIXELS;
        ds->labels[i] = r[0];
        for (j = 0; j < MIRROR__CIFAR_PIXELS; j++) x[j] = (float)r[1 + j] * (1.0f / 255.0f);
    }
    ds->count = n;
    ds->channels = 3;
    ds->height = 32;
    ds->width = 32;
    ds->num_classes = 10;
    return MIRROR_OK;
}

MIRROR_API int mirror_dataset_load_cifar10(mirror_dataset *ds, const char *const *paths, size_t npaths,
                                           mirror_error *err)
{
    unsigned char **buf = NULL, *all = NULL;
    size_t *size = NULL, i, total = 0, at = 0;
    char batch_is[64];
    int rc = MIRROR_OK;
    snprintf(batch_is, sizeof batch_is, "a CIFAR-10 batch holds (%d records of %d bytes)", MIRROR__CIFAR_BATCH,
             MIRROR__CIFAR_RECORD);
    if (ds) memset(ds, 0, sizeof *ds);
    if (!ds || !paths || !npaths)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_load_cifar10: %s",
                             !npaths && ds && paths ? "no files (npaths is 0)" : "NULL argument");
    for (i = 0; i < npaths; i++)
        if (!paths[i])
            return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_load_cifar10: paths[%zu] is NULL", i);
    buf = (unsigned char **)mirror__alloc(npaths, sizeof *buf);
    size = (size_t *)mirror__alloc(npaths, sizeof *size);
    if (buf)
        for (i = 0; i < npaths; i++) buf[i] = NULL;
    if (!buf || !size) {
        rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "mirror_dataset_load_cifar10: no memory for %zu files",
                           npaths);
        goto done;
    }
    /* Every file is read and checked (its own name in the messages), then
       the records are put back to back and decoded in one pass. A file
       holds one batch at most: a gzip file inflates no further. */
    for (i = 0; i < npaths; i++) {
        if ((rc = mirror__read_bounded(paths[i], (size_t)MIRROR__CIFAR_BATCH * MIRROR__CIFAR_RECORD, batch_is, NULL,
                                       &buf[i], &size[i], err)) != MIRROR_OK ||
            (rc = mirror__cifar10_check(buf[i], size[i], paths[i], err)) != MIRROR_OK)
            goto done;
        if (size[i] > (size_t)-1 - total) {
            rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": the batches together are too large",
                               MIRROR__PATH(paths[i]));
            goto done;
        }
        total += size[i];
    }
    if (npaths == 1) {
        all = buf[0];
        buf[0] = NULL;
    } else {
        if (!(all = (unsigned char *)mirror__alloc(total, 1))) {
            rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": no memory for %zu bytes of batches",
                               MIRROR__PATH(paths[0]), total);
            goto done;
        }
        for (i = 0; i < npaths; i++) {
            memcpy(all + at, buf[i], size[i]);
            at += size[i];
            MIRROR_FREE(buf[i]);
            buf[i] = NULL;
        }
    }
    rc = mirror__parse_cifar10(ds, all, total, paths[0], err);
done:
    if (buf)
        for (i = 0; i < npaths; i++) MIRROR_FREE(buf[i]);
    MIRROR_FREE(buf);
    MIRROR_FREE(size);
    MIRROR_FREE(all);
    if (rc) mirror_dataset_free(ds);
    return rc;
}

/* NumPy .npy: "\x93NUMPY", major and minor version, the header length (2
   bytes little-endian in 1.0, 4 in 2.0 and 3.0), then a Python dict literal
   {'descr': '<f4', 'fortran_order': False, 'shape': (n, h, w), } padded
   with spaces to a newline, then the data in C order. */
enum { MIRROR__NPY_U1 = 1, MIRROR__NPY_I4, MIRROR__NPY_I8, MIRROR__NPY_F4 };
#define MIRROR__NPY_MAX_DIMS 4
#define MIRROR__NPY_MAX_HEADER (1 << 20)

typedef struct mirror__npy {
    int dtype;                          /* MIRROR__NPY_* */
    char descr[32];                     /* the dtype as written, for messages */
    size_t ndim, shape[MIRROR__NPY_MAX_DIMS];
    size_t count;                       /* elements: the product of shape (1 for ()) */
    const unsigned char *data;          /* count elements inside p, little-endian, maybe unaligned */
} mirror__npy;

static uint32_t mirror__le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t mirror__le64(const unsigned char *p)
{
    return (uint64_t)mirror__le32(p) | (uint64_t)mirror__le32(p + 4) << 32;
}

/* The header text from s[*i] to s[n]: whitespace, one token, a quoted string. */
static void mirror__npy_space(const unsigned char *s, size_t n, size_t *i)
{
    while (*i < n && (s[*i] == ' ' || s[*i] == '\t' || s[*i] == '\n' || s[*i] == '\r')) ++*i;
}

static int mirror__npy_eat(const unsigned char *s, size_t n, size_t *i, char c)
{
    mirror__npy_space(s, n, i);
    if (*i < n && s[*i] == (unsigned char)c) {
        ++*i;
        return 1;
    }
    return 0;
}

/* A word (True, False) that is not the start of a longer name. */
static int mirror__npy_word(const unsigned char *s, size_t n, size_t *i, const char *word)
{
    size_t len = strlen(word);
    unsigned char next;
    mirror__npy_space(s, n, i);
    if (n - *i < len || memcmp(s + *i, word, len) != 0) return 0;
    next = *i + len < n ? s[*i + len] : ' ';
    if ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9') ||
        next == '_')
        return 0;
    *i += len;
    return 1;
}

/* A '...' or "..." string of printable characters without escapes, shorter
   than cap, into out. */
static int mirror__npy_string(const unsigned char *s, size_t n, size_t *i, char *out, size_t cap)
{
    unsigned char quote;
    size_t len = 0;
    mirror__npy_space(s, n, i);
    if (*i >= n || (s[*i] != '\'' && s[*i] != '"')) return 0;
    quote = s[(*i)++];
    for (; *i < n && s[*i] != quote; ++*i) {
        if (s[*i] < 0x20 || s[*i] > 0x7e || s[*i] == '\\' || len + 1 >= cap) return 0;
        out[len++] = (char)s[*i];
    }
    if (*i >= n) return 0;
    ++*i;
    out[len] = '\0';
    return 1;
}

/* The preamble and header dict of a .npy file in p (size bytes: the whole
   file, or as much as has been read) into out, whose data then points
   past the header. *total gets the file's size as the header declares it;
   0 when size ends inside the header; MIRROR__BAD_HEADER when the header
   is malformed or declares what this loader does not read. */
static int mirror__npy_header(const unsigned char *p, size_t size, const char *name, mirror__npy *out,
                              size_t *total, mirror_error *err)
{
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    const unsigned char *s;
    char key[32];
    size_t pre, hlen, n, i = 0, k, ndim = 0, count = 1, elem, bytes;
    int seen[3] = {0, 0, 0}, fortran = 0;
    unsigned major, minor;
    memset(out, 0, sizeof *out);
    *total = MIRROR__BAD_HEADER;
    for (i = 0; i < 6 && i < size; i++)
        if (p[i] != (unsigned char)"\x93NUMPY"[i])
            return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": bad magic (not a .npy file)",
                                 MIRROR__PATH(name));
    if (size < 8) {
        *total = 0;
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": truncated: %zu bytes, a .npy file starts with "
                             "a 10-byte preamble", MIRROR__PATH(name), size);
    }
    major = p[6];
    minor = p[7];
    if (major < 1 || major > 3 || minor != 0)
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED,
                             MIRROR__CUT_F ": .npy format version %u.%u (only 1.0, 2.0 and 3.0)",
                             MIRROR__PATH(name), major, minor);
    pre = major == 1 ? 10 : 12;
    if (size < pre) {
        *total = 0;
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": truncated: %zu bytes, a version %u.0 .npy file "
                             "starts with a %zu-byte preamble", MIRROR__PATH(name), size, major, pre);
    }
    hlen = major == 1 ? (size_t)p[8] | (size_t)p[9] << 8 : (size_t)mirror__le32(p + 8);
    if (hlen > MIRROR__NPY_MAX_HEADER) /* a bound on what a gzip file inflates before its header is read */
        return mirror__error(err, MIRROR_ERR_FORMAT,
                             MIRROR__CUT_F ": a header of %zu bytes (numpy writes a few hundred; at "
                             "most %d)", MIRROR__PATH(name), hlen, MIRROR__NPY_MAX_HEADER);
    if (hlen > size - pre) {
        *total = 0;
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": truncated header: %zu of %zu bytes",
                             MIRROR__PATH(name), size - pre, hlen);
    }
    s = p + pre;
    n = hlen;
    i = 0;
    /* The dict: quoted keys, each of the three exactly once, in any order,
       entries separated by commas, a trailing comma allowed. */
    if (!mirror__npy_eat(s, n, &i, '{'))
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": the header is not a dict", MIRROR__PATH(name));
    for (;;) {
        if (mirror__npy_eat(s, n, &i, '}')) break;
        if (!mirror__npy_string(s, n, &i, key, sizeof key))
            return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: expected a quoted key at byte %zu",
                                 MIRROR__PATH(name), pre + i);
        for (k = 0; k < 3 && strcmp(key, keys[k]) != 0; k++) continue;
        if (k == 3) return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: unexpected key '%s'",
                                         MIRROR__PATH(name), key);
        if (seen[k]) return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: key '%s' twice",
                                          MIRROR__PATH(name), key);
        seen[k] = 1;
        if (!mirror__npy_eat(s, n, &i, ':'))
            return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: expected ':' after '%s'",
                                 MIRROR__PATH(name), key);
        if (k == 0) {
            if (mirror__npy_eat(s, n, &i, '['))
                return mirror__error(err, MIRROR_ERR_UNSUPPORTED,
                                     MIRROR__CUT_F ": structured dtype (a list of fields) is "
                                     "not supported", MIRROR__PATH(name));
            if (!mirror__npy_string(s, n, &i, out->descr, sizeof out->descr))
                return mirror__error(err, MIRROR_ERR_FORMAT,
                                     MIRROR__CUT_F ": header: 'descr' is not a short quoted string",
                                     MIRROR__PATH(name));
        } else if (k == 1) {
            if (mirror__npy_word(s, n, &i, "True"))
                fortran = 1;
            else if (!mirror__npy_word(s, n, &i, "False"))
                return mirror__error(err, MIRROR_ERR_FORMAT,
                                     MIRROR__CUT_F ": header: 'fortran_order' is not True or False",
                                     MIRROR__PATH(name));
        } else {
            /* A tuple of non-negative decimal integers: (), (5,), (5, 6),
               (5, 6,); (5) is a number, not a tuple. Python 2 longs (5L)
               appear in 1.0 and 2.0 headers. */
            int comma = 1;
            if (!mirror__npy_eat(s, n, &i, '('))
                return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: 'shape' is not a tuple",
                                     MIRROR__PATH(name));
            for (;;) {
                size_t d = 0, digits = 0;
                if (mirror__npy_eat(s, n, &i, ')')) break;
                if (!comma)
                    return mirror__error(err, MIRROR_ERR_FORMAT,
                                         MIRROR__CUT_F ": header: expected ',' or ')' in 'shape'",
                                         MIRROR__PATH(name));
                if (mirror__npy_eat(s, n, &i, '-'))
                    return mirror__error(err, MIRROR_ERR_FORMAT,
                                         MIRROR__CUT_F ": header: negative dimension in 'shape'",
                                         MIRROR__PATH(name));
                for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
                    if (digits == 1 && d == 0)
                        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: dimension with a leading "
                                             "zero in 'shape'", MIRROR__PATH(name));
                    if (d > ((size_t)-1 - (size_t)(s[i] - '0')) / 10)
                        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: dimension too large in "
                                             "'shape'", MIRROR__PATH(name));
                    d = 10 * d + (size_t)(s[i] - '0');
                }
                if (!digits)
                    return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: 'shape' is not a tuple of "
                                         "integers", MIRROR__PATH(name));
                if (major <= 2 && i < n && s[i] == 'L') i++;
                if (ndim < MIRROR__NPY_MAX_DIMS) out->shape[ndim] = d;
                ndim++;
                if (!mirror__mul(count, d, &count))
                    return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: the element count of 'shape' "
                                         "overflows", MIRROR__PATH(name));
                comma = mirror__npy_eat(s, n, &i, ',');
                if (ndim == 1 && !comma)
                    return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: 'shape' (%zu) is not a tuple "
                                         "(a one-element tuple is (%zu,))", MIRROR__PATH(name), d, d);
            }
        }
        if (mirror__npy_eat(s, n, &i, ',')) continue;
        if (mirror__npy_eat(s, n, &i, '}')) break;
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header: expected ',' or '}' at byte %zu",
                             MIRROR__PATH(name), pre + i);
    }
    mirror__npy_space(s, n, &i);
    if (i != n)
        return mirror__error(err, MIRROR_ERR_FORMAT,
                             MIRROR__CUT_F ": header: unexpected text after the dict at byte %zu",
                             MIRROR__PATH(name), pre + i);
    for (k = 0; k < 3; k++)
        if (!seen[k]) return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": header lacks '%s'",
                                           MIRROR__PATH(name), keys[k]);

    /* What the dict says, checked against what this loader reads. */
    if (!strcmp(out->descr, "<f4"))
        out->dtype = MIRROR__NPY_F4, elem = 4;
    else if (!strcmp(out->descr, "<i4"))
        out->dtype = MIRROR__NPY_I4, elem = 4;
    else if (!strcmp(out->descr, "<i8"))
        out->dtype = MIRROR__NPY_I8, elem = 8;
    else if (!strcmp(out->descr, "|u1") || !strcmp(out->descr, "<u1"))
        out->dtype = MIRROR__NPY_U1, elem = 1;
    else
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED,
                             MIRROR__CUT_F ": %sdtype '%s' is not supported (<f4, |u1, <i4 or "
                             "<i8)", MIRROR__PATH(name), out->descr[0] == '>' ? "big-endian " : "", out->descr);
    if (fortran)
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED, MIRROR__CUT_F ": fortran_order True is not supported (save a "
                             "C-ordered array)", MIRROR__PATH(name));
    if (ndim > MIRROR__NPY_MAX_DIMS)
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED, MIRROR__CUT_F ": %zu dimensions (at most %d)",
                             MIRROR__PATH(name), ndim,
                             MIRROR__NPY_MAX_DIMS);
    if (!mirror__mul(count, elem, &bytes) || bytes >= MIRROR__BAD_HEADER - pre - hlen)
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": the data size of 'shape' overflows",
                             MIRROR__PATH(name));
    out->ndim = ndim;
    out->count = count;
    out->data = p + pre + hlen;
    *total = pre + hlen + bytes;
    return MIRROR_OK;
}

/* A .npy file's size as its header declares it (a mirror__declared_fn). */
static size_t mirror__npy_declared(const unsigned char *p, size_t len)
{
    mirror__npy a;
    size_t total;
    mirror__npy_header(p, len, "", &a, &total, &mirror__silent);
    return total;
}

/* A whole .npy file in memory: its header, then data that fills the rest
   of the file exactly. */
static int mirror__parse_npy(const unsigned char *p, size_t size, const char *name, mirror__npy *out,
                             mirror_error *err)
{
    size_t total, rest, bytes;
    int rc = mirror__npy_header(p, size, name, out, &total, err);
    if (rc != MIRROR_OK) return rc;
    rest = size - (size_t)(out->data - p);
    bytes = total - (size_t)(out->data - p);
    if (bytes > rest) {
        rc = mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": truncated data: %zu of %zu bytes",
                           MIRROR__PATH(name), rest, bytes);
    } else if (bytes < rest) {
        rc = mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": %zu trailing bytes after the data",
                           MIRROR__PATH(name), rest - bytes);
    }
    if (rc != MIRROR_OK) memset(out, 0, sizeof *out);
    return rc;
}

/* Element i of an integer array as a signed value. */
static long long mirror__npy_int(const mirror__npy *a, size_t i)
{
    if (a->dtype == MIRROR__NPY_U1) return a->data[i];
    if (a->dtype == MIRROR__NPY_I4) {
        uint32_t v = mirror__le32(a->data + 4 * i);
        return v >> 31 ? -(long long)(~v) - 1 : (long long)v;
    } else {
        uint64_t v = mirror__le64(a->data + 8 * i);
        return v >> 63 ? -(long long)(~v) - 1 : (long long)v;
    }
}

MIRROR_API int mirror_dataset_load_npy(mirror_dataset *ds, const char *x_path, const char *y_path,
                                       mirror_error *err)
{
    unsigned char *xb = NULL, *yb = NULL;
    size_t xs = 0, ys = 0, i, classes = 0, targets = 0;
    mirror__npy x, y;
    int rc;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    if (ds) memset(ds, 0, sizeof *ds);
    if (!ds || !x_path) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_dataset_load_npy: NULL argument");
    if ((rc = mirror__read_file(x_path, MIRROR__MAX_FILE, mirror__npy_declared, &xb, &xs, err)) != MIRROR_OK ||
        (rc = mirror__parse_npy(xb, xs, x_path, &x, err)) != MIRROR_OK)
        goto done;
    if (x.dtype != MIRROR__NPY_F4 && x.dtype != MIRROR__NPY_U1) {
        rc = mirror__error(err, MIRROR_ERR_UNSUPPORTED,
                           MIRROR__CUT_F ": dtype '%s' is not supported for x (<f4 or |u1)",
                           MIRROR__PATH(x_path), x.descr);
        goto done;
    }
    if (x.ndim < 2 || x.ndim > 4) {
        rc = mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": shape of %zu dimension(s); x is (n, features), (n, "
                           "height, width) or (n, channels, height, width)", MIRROR__PATH(x_path), x.ndim);
        goto done;
    }
    if (!x.count) {
        rc = mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": empty (a dimension of 'shape' is 0)",
                           MIRROR__PATH(x_path));
        goto done;
    }
    if (y_path) {
        if ((rc = mirror__read_file(y_path, MIRROR__MAX_FILE, mirror__npy_declared, &yb, &ys, err)) != MIRROR_OK ||
            (rc = mirror__parse_npy(yb, ys, y_path, &y, err)) != MIRROR_OK)
            goto done;
        if (y.dtype == MIRROR__NPY_F4 && (y.ndim == 1 || (y.ndim == 2 && y.shape[1]))) {
            targets = y.ndim == 1 ? 1 : y.shape[1]; /* float targets, for MSE */
        } else if (y.dtype == MIRROR__NPY_F4) {
            rc = mirror__error(err, MIRROR_ERR_FORMAT,
                               MIRROR__CUT_F ": shape of %zu dimension(s); float targets are (n,) or "
                               "(n, d) with d >= 1", MIRROR__PATH(y_path), y.ndim);
            goto done;
        } else if (y.dtype != MIRROR__NPY_I4 && y.dtype != MIRROR__NPY_I8 && y.dtype != MIRROR__NPY_U1) {
            rc = mirror__error(err, MIRROR_ERR_UNSUPPORTED,
                               MIRROR__CUT_F ": dtype '%s' is not supported for labels (<i4, "
                               "<i8 or |u1) or targets (<f4)", MIRROR__PATH(y_path), y.descr);
            goto done;
        } else if (y.ndim != 1) {
            rc = mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": shape of %zu dimension(s); labels are (n,)",
                               MIRROR__PATH(y_path), y.ndim);
            goto done;
        }
        if (targets && y.shape[0] != x.shape[0]) {
            rc = mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F " has %zu samples but " MIRROR__CUT_F " has %zu targets",
                               MIRROR__PATH(x_path), x.shape[0], MIRROR__PATH(y_path), y.shape[0]);
            goto done;
        }
        for (i = 0; targets && i < y.count; i++) {
            float t;
            uint32_t bits = mirror__le32(y.data + 4 * i);
            memcpy(&t, &bits, sizeof t);
            if (!mirror_hd_finite(t)) {
                rc = mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": target %zu is not finite",
                                   MIRROR__PATH(y_path), i);
                goto done;
            }
        }
        if (!targets && y.shape[0] != x.shape[0]) {
            rc = mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F " has %zu samples but " MIRROR__CUT_F " has %zu labels",
                               MIRROR__PATH(x_path), x.shape[0], MIRROR__PATH(y_path), y.shape[0]);
            goto done;
        }
        for (i = 0; !targets && i < y.count; i++) {
            long long v = mirror__npy_int(&y, i);
            if (v < 0 || v > 65535) {
                rc = mirror__error(err, MIRROR_ERR_LABEL, MIRROR__CUT_F ": label %lld of sample %zu %s",
                                   MIRROR__PATH(y_path), v, i,
                                   v < 0           ? "is negative"
                                   : v > INT32_MAX ? "does not fit int32"
                                                   : "is above 65535 (at most 65536 classes)");
                goto done;
            }
            if ((size_t)v >= classes) classes = (size_t)v + 1;
        }
    }
    ds->x = (float *)mirror__alloc(x.count, sizeof(float));
    ds->labels = y_path && !targets ? (int32_t *)mirror__alloc(x.shape[0], sizeof(int32_t)) : NULL;
    ds->targets = targets ? (float *)mirror__alloc(y.count, sizeof(float)) : NULL;
    if (!ds->x || (y_path && !ds->labels && !ds->targets)) {
        rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": no memory for %zu samples",
                           MIRROR__PATH(x_path), x.shape[0]);
        goto done;
    }
    if (x.dtype == MIRROR__NPY_U1)
        for (i = 0; i < x.count; i++) ds->x[i] = (float)x.data[i] * (1.0f / 255.0f);
    else
        for (i = 0; i < x.count; i++) {
            uint32_t bits = mirror__le32(x.data + 4 * i);
            memcpy(ds->x + i, &bits, sizeof bits);
        }
    if (targets)
        for (i = 0; i < y.count; i++) {
            uint32_t bits = mirror__le32(y.data + 4 * i);
            memcpy(ds->targets + i, &bits, sizeof bits);
        }
    else if (y_path)
        for (i = 0; i < y.count; i++) ds->labels[i] = (int32_t)mirror__npy_int(&y, i);
    ds->target_dim = targets;
    ds->count = x.shape[0];
    ds->channels = x.ndim == 4 ? x.shape[1] : x.ndim == 3 ? 1 : x.shape[1];
    ds->height = x.ndim == 2 ? 1 : x.shape[x.ndim - 2];
    ds->width = x.ndim == 2 ? 1 : x.shape[x.ndim - 1];
    ds->num_classes = classes;
done:
    MIRROR_FREE(xb);
    MIRROR_FREE(yb);
    if (rc) mirror_dataset_free(ds);
    return rc;
}
#endif /* MIRROR_NO_LOADERS */

// >>checkpoints -------------------------------------------------------------
/* Checkpoints: a safetensors file with the run's description in its
   header, written beside the path and renamed over it, rotated; read
   back strictly, resumed exactly, or rebuilt into a model. */

/* A reflected CRC-32 of polynomial poly (bit-reversed), continuing from crc. */
static uint32_t mirror__crc(uint32_t poly, uint32_t crc, const unsigned char *p, size_t n)
{
    uint32_t table[256], c;
    size_t i;
    int k;
    for (i = 0; i < 256; i++) {
        for (c = (uint32_t)i, k = 0; k < 8; k++) c = c & 1 ? poly ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    crc = ~crc;
    for (i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* CRC-32 (the polynomial of zlib, PNG and gzip), continuing from crc. */
static uint32_t mirror__crc32(uint32_t crc, const unsigned char *p, size_t n)
{
    return mirror__crc(0xEDB88320u, crc, p, n);
}

/* A growing text buffer for the header; a failed allocation sticks. */
typedef struct mirror__text {
    char *p;
    size_t len, cap;
    int failed;
} mirror__text;

static void mirror__printf(mirror__text *t, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (t->failed) return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if (t->p && t->len + (size_t)n < t->cap) break;
        {
            size_t cap = (t->cap ? t->cap : 4096);
            char *grown;
            while (cap <= t->len + (size_t)n) cap *= 2;
            if (!(grown = (char *)MIRROR_MALLOC(cap))) {
                t->failed = 1;
                return;
            }
            if (t->p) memcpy(grown, t->p, t->len + 1);
            MIRROR_FREE(t->p);
            t->p = grown;
            t->cap = cap;
        }
    }
    t->len += (size_t)n;
}

/* The model's layers in one line: the identity a checkpoint is checked against. */
static void mirror__describe_model(const mirror_model *m, mirror__text *t)
{
    size_t i;
    mirror__printf(t, "input(%zu,%zu,%zu)", m->desc.channels, m->desc.height, m->desc.width);
    for (i = 0; i < m->nlayers; i++) {
        const mirror__kind_info *k = &mirror__kinds[m->layers[i].kind];
        char args[128] = "";
        if (k->describe) k->describe(&m->layers[i], args, sizeof args);
        mirror__printf(t, ";%s%s", k->name, args);
    }
    mirror__printf(t, ";loss(%s)", m->desc.loss == MIRROR_LOSS_MSE ? "mse" : "softmax_ce");
}

/* A checkpoint of another model than m (its description theirs, NULL
   when it has none; m's ours), refused: where the two part first (the
   input, a layer and what each has there, the loss), what to do, then
   both descriptions, each cut to a bound. */
static int mirror__model_differs(mirror_model *m, const char *path, const char *theirs, const char *ours)
{
    const char *a = theirs ? theirs : "", *b = ours;
    size_t item = 0, na = 1, nb = 1, la, lb;
    char where[3 * MIRROR__SHOWN_NAME + 160];
    for (la = 0; a[la]; la++) na += a[la] == ';';
    for (lb = 0; b[lb]; lb++) nb += b[lb] == ';';
    for (;; item++) { /* the items' counts and the first that differs */
        la = strcspn(a, ";"), lb = strcspn(b, ";");
        if (la != lb || memcmp(a, b, la) || !a[la] || !b[lb]) break;
        a += la + 1, b += lb + 1;
    }
    {
        char x[MIRROR__SHOWN_NAME + 1], y[MIRROR__SHOWN_NAME + 1]; /* the differing items, each cut */
        snprintf(x, sizeof x, "%.*s", (int)la, a), snprintf(y, sizeof y, "%.*s", (int)lb, b);
        if (la > MIRROR__SHOWN_NAME) memcpy(x + MIRROR__SHOWN_NAME - 3, "...", 3);
        if (lb > MIRROR__SHOWN_NAME) memcpy(y + MIRROR__SHOWN_NAME - 3, "...", 3);
        if (!theirs)
            snprintf(where, sizeof where, "it describes no model");
        else if (item == 0 || (item + 1 == na && item + 1 == nb))
            snprintf(where, sizeof where, "the checkpoint's %s is %s, this model's %s", item ? "loss" : "input", x, y);
        else
            snprintf(where, sizeof where,
                     "at layer %zu the checkpoint has %s, this model %s (%zu layers in the checkpoint, %zu in this model)",
                     item - 1, item + 1 == na ? "none" : x, item + 1 == nb ? "none" : y, na >= 2 ? na - 2 : 0, nb - 2);
    }
    return mirror__fail(m, MIRROR_ERR_SHAPE,
                        MIRROR__CUT_F ": a checkpoint of another model: %s. To load it, build the model it describes "
                        "(mirror_model_from_checkpoint builds it). The checkpoint's: " MIRROR__CUT_F
                        "; this model's: " MIRROR__CUT_F,
                        MIRROR__PATH(path), where, MIRROR__CUT(theirs ? theirs : "(none)", 500),
                        MIRROR__CUT(ours, 500));
}

static const char *const mirror__opt_names[] = {"default", "sgd", "adam", "adamw"};
static const char *const mirror__schedule_names[] = {"constant", "step", "cosine", "callback"};

/* One tensor of a checkpoint: its name, shape, and where its floats are. */
typedef struct mirror__tensor {
    char name[64];
    size_t shape[4], rank, count;
    const float *host; /* saving */
    uint64_t begin, end; /* loading: byte offsets in the data */
} mirror__tensor;

#define MIRROR__MAX_TENSORS (4 * MIRROR__MAX_LAYERS + 2)

/* One tensor of rank 1. */
static void mirror__vector(mirror__tensor *t, size_t layer, const char *name, size_t count, const float *host)
{
    snprintf(t->name, sizeof t->name, "layers.%zu.%s", layer, name);
    t->shape[0] = t->count = count;
    t->rank = 1;
    t->host = host;
}

/* The tensors a checkpoint of m holds, pointing into params, state and the
   running statistics of batchnorm, named and shaped by each layer's kind
   (batchnorm's weight and bias are its gamma and beta, as in PyTorch's
   state_dict). */
static size_t mirror__tensors(const mirror_model *m, const float *params, const float *state, const float *running,
                              mirror__tensor *t)
{
    size_t i, n = 0;
    for (i = 0; i < m->nlayers; i++) {
        const mirror__layer *l = &m->layers[i];
        const mirror__kind_info *k = &mirror__kinds[l->kind];
        if (!l->n_w) continue;
        snprintf(t[n].name, sizeof t[n].name, "layers.%zu.%s", i, k->tensors[0]);
        t[n].rank = k->weight_shape(m, l, t[n].shape);
        t[n].count = l->n_w;
        t[n++].host = params ? params + l->w_off : NULL;
        mirror__vector(&t[n++], i, k->tensors[1], l->n_b, params ? params + l->b_off : NULL);
        if (!k->tensors[2]) continue;
        mirror__vector(&t[n++], i, k->tensors[2], l->c, running ? running + l->run_off : NULL);
        mirror__vector(&t[n++], i, k->tensors[3], l->c, running ? running + l->run_off + l->c : NULL);
    }
    if (m->sizes.nstate) {
        int adam = m->desc.optimizer.kind != MIRROR_OPT_SGD;
        snprintf(t[n].name, sizeof t[n].name, "%s", adam ? "optimizer.m" : "optimizer.momentum");
        t[n].shape[0] = t[n].count = m->nparams; /* state: packed */
        t[n].rank = 1;
        t[n++].host = state ? state : NULL;
        if (adam) {
            snprintf(t[n].name, sizeof t[n].name, "optimizer.v");
            t[n].shape[0] = t[n].count = m->nparams;
            t[n].rank = 1;
            t[n++].host = state ? state + m->nparams : NULL;
        }
    }
    return n;
}

/* What a run's numbers depend on besides its parameters, optimizer state
   and data cursor, as header keys: the optimizer's hyper-parameters and
   clipping, precision and loss scaling, the seed (dropout's masks), the
   schedule, and how the gradients are added up (deterministic mode and its
   chunk, the backend, and outside deterministic mode the replicas in all).
   Written once, here: a resumed run's are compared with the checkpoint's as
   text (mirror__resume_changes). */
static void mirror__run_settings(const mirror_model *m, mirror__text *h)
{
    const mirror_optimizer_desc *o = &m->desc.optimizer;
    mirror__printf(h, "\"lr\":\"%.9g\",\"momentum\":\"%.9g\",\"nesterov\":\"%d\",\"weight_decay\":\"%.9g\","
                      "\"beta1\":\"%.9g\",\"beta2\":\"%.9g\",\"eps\":\"%.9g\",\"clip_norm\":\"%.9g\","
                      "\"precision\":\"%s\",\"loss_scaler\":\"%s\",\"seed\":\"%llu\"",
                   (double)o->lr, (double)o->momentum, o->nesterov, (double)o->weight_decay, (double)o->beta1,
                   (double)o->beta2, (double)o->eps, (double)o->clip_norm, mirror_precision_name(m->desc.precision),
                   m->format ? mirror_loss_scaling_name(m->desc.loss_scale.kind) : "none",
                   (unsigned long long)m->desc.seed);
    mirror__printf(h, ",\"lr_schedule\":\"%s\",\"warmup\":\"%llu\",\"step_size\":\"%llu\",\"gamma\":\"%.9g\","
                      "\"total_steps\":\"%llu\",\"min_lr\":\"%.9g\"",
                   mirror__schedule_names[o->schedule], (unsigned long long)o->warmup,
                   (unsigned long long)o->step_size, (double)o->gamma, (unsigned long long)o->total_steps,
                   (double)o->min_lr);
    mirror__printf(h, ",\"deterministic\":\"%d\",\"chunk\":\"%zu\",\"backend\":\"%s\"", m->plan.chunk != 0,
                   m->plan.chunk, m->be->name);
    if (!m->plan.chunk) /* deterministic mode's bits are the same for any: its checkpoints are the same bytes */
        mirror__printf(h, ",\"replicas\":\"%zu\"", m->s->world);
}

/* How every checkpoint this library writes starts, after the header's
   length: how a save tells its own files from a user's (mirror__ours). */
#define MIRROR__CKPT_START "{\"__metadata__\":{\"format\":\"mirror\","

/* The header JSON, padded with spaces to a multiple of 8 bytes (safetensors'
   alignment); crc32.header is computed over the text with its own value as
   "00000000", then written in place. */
static int mirror__checkpoint_header(const mirror_model *m, const mirror_checkpoint_info *c,
                                     const mirror_loss_scale_state *st, const mirror__tensor *t, size_t nt,
                                     mirror__text *h)
{
    uint64_t offset = 0;
    size_t i, j;
    char *crc_at;
    mirror__printf(h, MIRROR__CKPT_START "\"version\":\"1\",\"model\":\"");
    mirror__describe_model(m, h);
    mirror__printf(h, "\",\"optimizer\":\"%s\",", mirror__opt_names[m->desc.optimizer.kind]);
    mirror__run_settings(m, h);
    mirror__printf(h, ",\"step\":\"%llu\",\"epoch\":\"%llu\",\"epoch_step\":\"%llu\",\"shuffle_seed\":\"%llu\","
                      "\"batch\":\"%llu\",\"samples\":\"%llu\",\"drop_remainder\":\"%llu\",\"micro_batch\":\"%llu\"",
                   (unsigned long long)m->steps, (unsigned long long)c->epoch, (unsigned long long)c->epoch_step,
                   (unsigned long long)c->shuffle_seed, (unsigned long long)c->batch, (unsigned long long)c->samples,
                   (unsigned long long)c->drop_remainder, (unsigned long long)c->micro_batch);
    if (m->fit.saving_sums && c->epoch_step) /* fit's epoch so far; the doubles with digits to read back exactly */
        mirror__printf(h, ",\"epoch_loss_sum\":\"%.17g\",\"epoch_correct\":\"%llu\",\"epoch_samples\":\"%llu\","
                          "\"epoch_skipped\":\"%llu\",\"epoch_seconds\":\"%.17g\"",
                       m->fit.saving_sums->acc.loss_sum, (unsigned long long)m->fit.saving_sums->acc.correct,
                       (unsigned long long)m->fit.saving_sums->acc.count,
                       (unsigned long long)m->fit.saving_sums->skipped, m->fit.saving_sums->seconds);
    if (st) /* the scaler's state; the scale printed with enough digits to read back exactly */
        mirror__printf(h, ",\"loss_scale\":\"%.9g\",\"scaler_good_steps\":\"%lu\",\"scaler_consecutive_skips\":\"%lu\","
                          "\"scaler_skipped\":\"%llu\",\"optimizer_steps\":\"%llu\"",
                       (double)st->scale, (unsigned long)st->good_steps, (unsigned long)st->consecutive_skips,
                       (unsigned long long)st->skipped, (unsigned long long)st->applied);
    for (i = 0; i < nt; i++)
        mirror__printf(h, ",\"crc32.%s\":\"%08lx\"", t[i].name,
                       (unsigned long)mirror__crc32(0, (const unsigned char *)t[i].host, t[i].count * sizeof(float)));
    mirror__printf(h, ",\"crc32.header\":\"00000000\"}");
    for (i = 0; i < nt; i++) {
        mirror__printf(h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", t[i].name);
        for (j = 0; j < t[i].rank; j++) mirror__printf(h, j ? ",%zu" : "%zu", t[i].shape[j]);
        mirror__printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                       (unsigned long long)(offset + t[i].count * sizeof(float)));
        offset += t[i].count * sizeof(float);
    }
    mirror__printf(h, "}");
    while (!h->failed && h->len % 8) mirror__printf(h, " ");
    if (h->failed) return MIRROR_ERR_NO_MEMORY;
    crc_at = strstr(h->p, "\"crc32.header\":\"00000000\"") + 16;
    {
        char hex[9];
        snprintf(hex, sizeof hex, "%08lx", (unsigned long)mirror__crc32(0, (const unsigned char *)h->p, h->len));
        memcpy(crc_at, hex, 8);
    }
    return MIRROR_OK;
}

/* Whether suffix, what follows PATH in a file's name, is one that
   mirror__make_tmp gives PATH, or PATH.1 .. PATH.(keep - 1)
   (mirror__copy_file's, rotating), exactly: PATH.lock covers those, not
   another run's PATH.7. */
static int mirror__is_our_tmp(const char *suffix, size_t keep)
{
    size_t i, mark = strlen(MIRROR__TMP_MARK), n = 0;
    if (suffix[0] == '.' && suffix[1] >= '1' && suffix[1] <= '9') { /* a rotation's copy */
        for (suffix++; *suffix >= '0' && *suffix <= '9' && n < keep; suffix++) n = n * 10 + (size_t)(*suffix - '0');
        if (n >= keep) return 0;
    }
    if (strncmp(suffix, MIRROR__TMP_MARK, mark) != 0) return 0;
    for (i = 0, suffix += mark; i < MIRROR__TMP_TAIL; i++) {
        char ch = suffix[i];
        if (i == 8 ? ch != '-' : !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return 0;
    }
    return suffix[MIRROR__TMP_TAIL] == '\0';
}

/* The most a save joins to PATH: PATH.1's temporary file (a rotation's
   copy); PATH.lock and PATH.N (N below keep, 20 digits at most) are shorter. */
#define MIRROR__CKPT_NAMES (sizeof ".1" - 1 + MIRROR__TMP_NAME)
#define MIRROR__CKPT_NAMES_ARE "the names made beside it (PATH.lock, PATH.1 .., their temporary files)"

/* Copies file from to file to through a temporary file and a rename (for
   file systems without hard links). */
static int mirror__copy_file(const char *from, const char *to, char *tmp, size_t size)
{
    unsigned char buf[1 << 14];
    int in = open(from, O_RDONLY), out = -1, ok = in >= 0;
    ssize_t n;
    if (ok) ok = (out = mirror__make_tmp(to, 0666, tmp, size)) >= 0; /* as a save's */
    while (ok && (n = read(in, buf, sizeof buf)) != 0) ok = n > 0 && !mirror__write_all(out, buf, (size_t)n);
    if (ok) ok = fsync(out) == 0;
    if (out >= 0 && close(out) != 0) ok = 0;
    if (in >= 0) close(in);
    if (ok) ok = rename(tmp, to) == 0;
    if (!ok && out >= 0) unlink(tmp);
    return ok ? 0 : -1;
}

/* PATH.1 ... PATH.(keep-2) move one place back (as far as they exist), then
   PATH.1 becomes a second name of the current PATH (or a copy of it): PATH
   itself is never missing. */
static int mirror__rotate(const char *path, size_t keep, char *a, char *b, size_t size)
{
    size_t i, top = 1;
    if (keep < 2 || access(path, F_OK) != 0) return 0;
    for (;;) { /* the first free place, at most keep - 1 */
        snprintf(a, size, "%s.%zu", path, top);
        if (top + 1 >= keep || access(a, F_OK) != 0) break;
        top++;
    }
    for (i = top; i >= 2; i--) {
        snprintf(a, size, "%s.%zu", path, i - 1);
        snprintf(b, size, "%s.%zu", path, i);
        if (rename(a, b) != 0 && errno != ENOENT) return -1;
    }
    snprintf(a, size, "%s.1", path);
    if (unlink(a) != 0 && errno != ENOENT) return -1;
    if (link(path, a) == 0) return 0;
    return mirror__copy_file(path, a, b, size);
}

/* Temporary files of saves that a crash interrupted, beside PATH. Called
   with the path's lock held, so no other process is writing one; only
   regular files whose name has exactly the form mirror__make_tmp gives go,
   whatever they hold (not, say, a user's run.ckpt.tmp.backup, even empty
   or a copy of a checkpoint). */
static void mirror__remove_stale(const char *path, size_t keep, char *buf, char *name, size_t size)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t dirlen = slash ? (size_t)(slash - path) : 0, baselen = strlen(base);
    DIR *d;
    struct dirent *e;
    if (dirlen + 2 > size) return;
    if (slash) memcpy(buf, path, dirlen ? dirlen : 1), buf[dirlen ? dirlen : 1] = '\0';
    else buf[0] = '.', buf[1] = '\0';
    if (!(d = opendir(buf))) return;
    while ((e = readdir(d)) != NULL)
        if (!strncmp(e->d_name, base, baselen) && mirror__is_our_tmp(e->d_name + baselen, keep)) {
            struct stat st;
            snprintf(name, size, "%s/%s", buf, e->d_name);
            if (lstat(name, &st) == 0 && S_ISREG(st.st_mode)) unlink(name);
        }
    closedir(d);
}

/* Whether the regular file at path is one of this library's checkpoints:
   its first bytes are a header's length (8 bytes) and MIRROR__CKPT_START.
   A save writes a temporary file, flushes it and renames it into place, so
   a crash leaves PATH and PATH.N whole or as they were, never empty or cut
   short: what does not start so (an empty file too) is a user's. A file
   cut short by something else after those bytes still counts. *why: what
   the file is otherwise. */
static int mirror__ours(const char *path, const char **why)
{
    unsigned char head[8 + sizeof MIRROR__CKPT_START - 1];
    size_t got = 0;
    ssize_t n = 1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) return *why = "it cannot be read, so it cannot be told from a user's file", 0;
    while (got < sizeof head && (n = read(fd, head + got, sizeof head - got)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        got += (size_t)n;
    }
    close(fd);
    if (n < 0) return *why = "it cannot be read, so it cannot be told from a user's file", 0;
    if (!got) return *why = "it is empty", 0;
    if (got < sizeof head || memcmp(head + 8, MIRROR__CKPT_START, sizeof MIRROR__CKPT_START - 1) != 0)
        return *why = "it does not start as one", 0;
    return 1;
}

/* A save replaces PATH and renames PATH.1, PATH.2 .. along (up to the
   first that is missing, below keep), the last of them over the one
   after: each of them must be a regular file, never a directory, a device,
   a FIFO, a socket or a symbolic link (which a rename would replace), and
   a checkpoint of this library's, never a user's file that happens to
   have the name. (A user's file behind a gap, PATH.3 where PATH.2 is
   missing, is found by the save that would reach it: keep may be SIZE_MAX,
   and names are not walked past the first that is missing.) */
static int mirror__check_targets(mirror_model *m, const char *path, size_t keep, char *name, size_t size)
{
    struct stat st;
    const char *why;
    size_t i;
    for (i = 0; i == 0 || i < keep; i++) {
        if (i) snprintf(name, size, "%s.%zu", path, i);
        if (lstat(i ? name : path, &st) != 0) {
            if (i) break;
            continue;
        }
        if (!S_ISREG(st.st_mode))
            return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                                MIRROR__CUT_F " exists and is not a regular file (%s); a checkpoint only replaces a "
                                "regular file",
                                MIRROR__PATH(i ? name : path), mirror__file_kind(st.st_mode));
        if (!mirror__ours(i ? name : path, &why))
            return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                                MIRROR__CUT_F " exists and is not a mirror checkpoint (%s); a save replaces or "
                                "rotates away only the checkpoints it wrote: move the file or name another path",
                                MIRROR__PATH(i ? name : path), why);
    }
    return MIRROR_OK;
}

/* Two processes saving to one path would remove each other's temporary
   files and interleave their rotations: a save holds a POSIX record lock
   on PATH.lock (made beside PATH and left there) and refuses to start
   while another process holds it. *out gets the lock's descriptor. Record
   locks belong to the process: one process must not save one path from
   two threads at once. *made (may be NULL): whether this call made the
   lock file. A fit refused before its first step removes the file it made,
   holding its lock: whoever locks the file after that finds it no longer
   at its name, and locks the one there then. */
static int mirror__save_lock(mirror_model *m, const char *path, char *name, size_t size, int *out, int *made)
{
    struct flock fl;
    struct stat st, at;
    int fd, tries, created;
    snprintf(name, size, "%s.lock", path);
    for (tries = 0;; tries++) {
        created = 0;
        if ((fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, 0666)) >= 0) created = 1;
        else if (errno == EEXIST) fd = open(name, O_RDWR | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0 && errno == ENOENT && tries < 100) continue; /* removed between the two opens */
        if (fd < 0)
            return mirror__fail(m, MIRROR_ERR_IO,
                                MIRROR__CUT_F ": cannot create the lock file " MIRROR__CUT_F
                                ": %s (is the directory there and writable?)",
                                MIRROR__PATH(path), MIRROR__PATH(name), strerror(errno));
        memset(&fl, 0, sizeof fl);
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            return mirror__fail(m, MIRROR_ERR_ARGUMENT, MIRROR__CUT_F ": its lock file " MIRROR__CUT_F
                                " is not a regular file", MIRROR__PATH(path), MIRROR__PATH(name));
        }
        if (fcntl(fd, F_SETLK, &fl) != 0) {
            int e = errno;
            close(fd);
            return mirror__fail(m, MIRROR_ERR_IO,
                                MIRROR__CUT_F ": another process is saving checkpoints to this path (it holds "
                                MIRROR__CUT_F ": %s)", MIRROR__PATH(path), MIRROR__PATH(name), strerror(e));
        }
        if (stat(name, &at) == 0 && at.st_dev == st.st_dev && at.st_ino == st.st_ino) break;
        close(fd); /* locked a file that its maker removed: the one at the name now */
        if (tries == 100)
            return mirror__fail(m, MIRROR_ERR_IO, MIRROR__CUT_F ": its lock file " MIRROR__CUT_F " keeps being replaced",
                                MIRROR__PATH(path), MIRROR__PATH(name));
    }
    if (made) *made = created;
    *out = fd;
    return MIRROR_OK;
}

/* Before fit's first step: PATH can be saved to (its targets are regular
   files, the lock is free, a file can be made beside it), its missing
   directories made. The lock is kept until fit returns
   (mirror__fit_unlock); *made: what was made, which a fit refused before
   its first step removes (mirror__fit_discard). */
static int mirror__fit_lock(mirror_model *m, const char *path, size_t keep, mirror__made *made)
{
    size_t size = strlen(path) + 300;
    char *name = (char *)MIRROR_MALLOC(size);
    int rc = MIRROR_OK, fd, probe;
    if (!name) return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_fit: out of memory");
    made->dirs = mirror__dir_length(path);
    if (!*path) {
        rc = mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_fit: the checkpoint path is empty");
    } else if ((rc = mirror__path_fits(&m->err, "mirror_fit: the checkpoint", path, MIRROR__CKPT_NAMES,
                                       MIRROR__CKPT_NAMES_ARE)) == MIRROR_OK &&
               (rc = mirror__check_targets(m, path, keep ? keep : 3, name, size)) == MIRROR_OK &&
               (rc = mirror__make_dirs(&m->err, "mirror_fit: the checkpoint's directory", path, made->dirs,
                                       &made->made)) == MIRROR_OK &&
               (rc = mirror__save_lock(m, path, name, size, &fd, &made->file)) == MIRROR_OK) {
        m->fit.lock = fd + 1;
        if ((probe = mirror__make_tmp(path, 0600, name, size)) < 0) {
            rc = mirror__fail(m, MIRROR_ERR_IO, MIRROR__CUT_F ": cannot create a file beside it: %s",
                              MIRROR__PATH(path), strerror(errno));
        } else {
            close(probe);
            unlink(name);
        }
    }
    MIRROR_FREE(name);
    return rc;
}

static void mirror__fit_unlock(mirror_model *m)
{
    if (m->fit.lock) close(m->fit.lock - 1);
    m->fit.lock = 0;
}

/* Whether fit holds PATH.lock (name: room for it): a save from fit, or
   from its hook to fit's path however spelt, must not lock it again,
   since closing that second descriptor would drop fit's lock. A save to
   another path takes that path's lock. */
static int mirror__holds_lock(mirror_model *m, const char *path, char *name, size_t size)
{
    struct stat held, st;
    if (!m->fit.lock) return 0;
    snprintf(name, size, "%s.lock", path);
    return fstat(m->fit.lock - 1, &held) == 0 && stat(name, &st) == 0 && held.st_dev == st.st_dev &&
           held.st_ino == st.st_ino;
}

/* A checkpoint is the run's result: never one of Inf or NaN. fp32's guard
   checks the reduced gradient, not what the update makes of it, and an
   update can turn a finite gradient into NaN (Adam's 0/0 where nothing
   bounds beta2 below 1) or overflow; a model that then saves it would
   rotate the good checkpoints away. */
static int mirror__saved_finite(mirror_model *m, const char *path, const mirror__tensor *t, size_t nt)
{
    size_t i, k;
    for (i = 0; i < nt; i++)
        for (k = 0; k < t[i].count; k++)
            if (!mirror_hd_finite(t[i].host[k]))
                return mirror__fail(m, MIRROR_ERR_NOT_FINITE,
                                    "mirror_checkpoint_save: %s: not saved, the previous checkpoint is intact: after "
                                    "step %llu, tensor %s holds %g (element %zu); the gradients were finite, so an "
                                    "update made it (a learning rate or weight decay too large?), unless the "
                                    "parameters were set so",
                                    path, (unsigned long long)m->steps, t[i].name, (double)t[i].host[k], k);
    return MIRROR_OK;
}

static int mirror__checkpoint_save(mirror_model *m, const char *path, const mirror_checkpoint_info *cursor,
                                   size_t keep)
{
    mirror_checkpoint_info c;
    mirror_loss_scale_state st;
    mirror__tensor t[MIRROR__MAX_TENSORS];
    mirror__text h = {NULL, 0, 0, 0};
    float *params = NULL, *state = NULL;
    size_t nt, i, plen;
    char *tmp = NULL, *a = NULL, *b = NULL;
    unsigned char len8[8];
    int rc, fd = -1, lock = -1;
    if ((rc = mirror__check_built(m, "mirror_checkpoint_save"))) return rc;
    /* fp32 after a non-finite step the host has not yet seen: not saved,
       so that it cannot rotate a good checkpoint away */
    if (!m->format && (rc = mirror__guard_verdict(m, "mirror_checkpoint_save"))) return rc;
    if (!path || !*path) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_checkpoint_save: path is NULL or empty");
    if ((rc = mirror__path_fits(&m->err, "mirror_checkpoint_save", path, MIRROR__CKPT_NAMES, MIRROR__CKPT_NAMES_ARE)))
        return rc;
    plen = strlen(path);
    memset(&c, 0, sizeof c);
    if (cursor) c = *cursor;
    if (!keep) keep = 3;
    params = (float *)mirror__alloc(m->nslots, sizeof(float));
    state = (float *)mirror__alloc(m->sizes.nstate ? m->sizes.nstate : 1, sizeof(float));
    tmp = (char *)MIRROR_MALLOC(plen + 300); /* file names: the new file, two for rotation */
    a = (char *)MIRROR_MALLOC(plen + 300);
    b = (char *)MIRROR_MALLOC(plen + 300);
    if (!params || !state || !tmp || !a || !b) {
        rc = mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_checkpoint_save: out of memory");
        goto done;
    }
    if ((rc = mirror__check_targets(m, path, keep, a, plen + 300))) goto done;
    if (!mirror__holds_lock(m, path, a, plen + 300) && (rc = mirror__save_lock(m, path, a, plen + 300, &lock, NULL)))
        goto done;
    mirror__remove_stale(path, keep, a, b, plen + 300);
    mirror__download_arena(m, 0, params, MIRROR__PARAMS); /* as the arena */
    if ((rc = mirror__device_status(m)) ||
        (rc = mirror_get_optimizer_state(m, 0, state, mirror__state_copies(m) * m->nparams)))
        goto done;
    if (m->format && (rc = mirror__get_scaler(m, &st))) goto done;
    nt = mirror__tensors(m, params, state, m->bn.running, t);
    if ((rc = mirror__saved_finite(m, path, t, nt))) goto done;
    if ((rc = mirror__checkpoint_header(m, &c, m->format ? &st : NULL, t, nt, &h))) {
        rc = mirror__fail(m, rc, "mirror_checkpoint_save: out of memory for the header");
        goto done;
    }
    for (i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    /* 0666 less the umask, as fopen's: a checkpoint is data to share, and the umask says with whom */
    if ((fd = mirror__make_tmp(path, 0666, tmp, plen + 300)) < 0) {
        rc = mirror__fail(m, MIRROR_ERR_IO, MIRROR__CUT_F ": cannot create a temporary file beside it: %s",
                          MIRROR__PATH(path), strerror(errno));
        goto done;
    }
    if (mirror__write_all(fd, len8, 8) || mirror__write_all(fd, h.p, h.len)) goto write_failed;
    for (i = 0; i < nt; i++)
        if (mirror__write_all(fd, t[i].host, t[i].count * sizeof(float))) goto write_failed;
    if (fsync(fd) != 0) goto write_failed;
    if (close(fd) != 0) {
        fd = -1;
        goto write_failed;
    }
    fd = -1;
    if (mirror__rotate(path, keep, a, b, plen + 300) != 0) {
        rc = mirror__fail(m, MIRROR_ERR_IO, MIRROR__CUT_F ": cannot keep the previous checkpoints: %s",
                          MIRROR__PATH(path), strerror(errno));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        rc = mirror__fail(m, MIRROR_ERR_IO, MIRROR__CUT_F ": cannot rename the new checkpoint into place: %s",
                          MIRROR__PATH(path), strerror(errno));
        unlink(tmp);
        goto done;
    }
    if (mirror__sync_dir(path) != 0) { /* saved; only the rename's durability is in doubt */
        char notice[300];
        snprintf(notice, sizeof notice, "%s: saved, but flushing its directory failed: %s", path, strerror(errno));
        mirror__log(MIRROR_LOG_NOTICE, notice);
    }
    goto done;
write_failed:
    rc = mirror__fail(m, MIRROR_ERR_IO,
                      MIRROR__CUT_F ": writing the checkpoint failed (%s); the previous one is intact",
                      MIRROR__PATH(path), strerror(errno));
    if (fd >= 0) close(fd);
    unlink(tmp);
done:
    MIRROR_FREE(h.p);
    MIRROR_FREE(params);
    MIRROR_FREE(state);
    MIRROR_FREE(tmp);
    MIRROR_FREE(a);
    MIRROR_FREE(b);
    if (lock >= 0) close(lock);
    return rc;
}

/* With several processes rank 0 writes; every process returns its result. */
static int mirror__checkpoint_save_once(mirror_model *m, const char *path, const mirror_checkpoint_info *cursor,
                                        size_t keep)
{
    int rc;
    if (m->built && (rc = mirror__gather_whole(m, MIRROR__STATE))) return rc; /* sharded across processes: gathered */
    rc = mirror__leads(m) ? mirror__checkpoint_save(m, path, cursor, keep) : MIRROR_OK;
    return mirror__from_leader(m, rc);
}

MIRROR_API int mirror_checkpoint_save(mirror_model *m, const char *path, const mirror_checkpoint_info *cursor,
                                      size_t keep)
{
    if (!m) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_checkpoint_save: model is NULL");
    {
        MIRROR__LOCKED(m, "mirror_checkpoint_save", mirror__checkpoint_save_once(m, path, cursor, keep));
    }
}

/* ---- reading: a strict little JSON reader for the header ---- */

/* The longest header read: a checkpoint's is a few kilobytes, a large
   state_dict's a few megabytes (safetensors itself stops at 100 MB). */
#define MIRROR__MAX_HEADER ((uint64_t)1 << 26)

/* One tensor of a file's header, as the file says it: its name and dtype
   (in the header's store), its shape (the first 4 of rank dimensions: no
   model tensor has more) and where its bytes are in the data. */
typedef struct mirror__entry {
    const char *name, *dtype;
    size_t shape[4], rank, count;
    uint64_t begin, end;
} mirror__entry;

/* A key of __metadata__ and its value. */
typedef struct mirror__pair {
    const char *key, *value;
} mirror__pair;

/* A safetensors header, read whole: every string decoded into store (no
   longer than the JSON text, so one allocation of its length holds them
   all), the metadata in the file's order and sorted by key, the tensors in
   the file's order and sorted by name. Any number of keys and tensors,
   names and values of any length: what is not used is passed over.
   mirror__header_free releases it; why says what the parser refused. */
typedef struct mirror__header {
    char *store;
    size_t used, size;
    mirror__pair *meta, *meta_sorted;
    size_t nmeta, meta_cap;
    mirror__entry *t, **t_sorted;
    size_t nt, t_cap;
    char why[160];
} mirror__header;

static void mirror__header_free(mirror__header *h)
{
    MIRROR_FREE(h->store);
    MIRROR_FREE(h->meta);
    MIRROR_FREE(h->meta_sorted);
    MIRROR_FREE(h->t);
    MIRROR_FREE(h->t_sorted);
    memset(h, 0, sizeof *h);
}

typedef struct mirror__json {
    const char *p, *end, *start;
    mirror__header *h;
} mirror__json;

/* Refuses the header: why, with the byte it was read at. Returns 0. */
static int mirror__json_refuse(mirror__json *j, const char *why, const char *name)
{
    if (!j->h->why[0])
        snprintf(j->h->why, sizeof j->h->why, "%s%s%.60s%s at byte %zu", why, name ? " \"" : "", name ? name : "",
                 name && strlen(name) > 60 ? "...\"" : name ? "\"" : "", (size_t)(j->p - j->start));
    return 0;
}

static void mirror__json_ws(mirror__json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int mirror__json_char(mirror__json *j, char c)
{
    mirror__json_ws(j);
    if (j->p >= j->end || *j->p != c) return 0;
    j->p++;
    return 1;
}

/* Four hex digits of a \u escape. */
static int mirror__json_hex4(mirror__json *j, unsigned long *u)
{
    int i;
    for (*u = 0, i = 0; i < 4; i++, j->p++) {
        char c = j->p < j->end ? *j->p : '\0';
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return 0;
        *u = *u << 4 | (unsigned long)d;
    }
    return 1;
}

/* A JSON string with every escape JSON has (\uXXXX and surrogate pairs as
   UTF-8), decoded into the header's store; *out points at it. A \u0000
   cannot be a C string's byte: refused, saying so. */
static int mirror__json_string(mirror__json *j, const char **out)
{
    mirror__header *h = j->h;
    char *o = h->store + h->used;
    if (!mirror__json_char(j, '"')) return 0; /* the caller says what it expected */
    *out = o;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p++;
        unsigned long u, low;
        if (c < 0x20) return mirror__json_refuse(j, "a control character inside a string", NULL);
        if (c != '\\') {
            *o++ = (char)c;
            continue;
        }
        if (j->p >= j->end) break;
        switch (c = (unsigned char)*j->p++) {
        case '"': case '\\': case '/': *o++ = (char)c; continue;
        case 'b': *o++ = '\b'; continue;
        case 'f': *o++ = '\f'; continue;
        case 'n': *o++ = '\n'; continue;
        case 'r': *o++ = '\r'; continue;
        case 't': *o++ = '\t'; continue;
        case 'u': break;
        default: return mirror__json_refuse(j, "an unknown escape in a string", NULL);
        }
        if (!mirror__json_hex4(j, &u)) return mirror__json_refuse(j, "a \\u escape without 4 hex digits", NULL);
        if (u >= 0xDC00 && u <= 0xDFFF) return mirror__json_refuse(j, "a lone low surrogate (\\uDC00-\\uDFFF)", NULL);
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || (j->p += 2, !mirror__json_hex4(j, &low)) ||
                low < 0xDC00 || low > 0xDFFF)
                return mirror__json_refuse(j, "a high surrogate not followed by a low one", NULL);
            u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
        }
        if (!u) return mirror__json_refuse(j, "a \\u0000 in a string, which this library cannot hold", NULL);
        if (u < 0x80) {
            *o++ = (char)u;
        } else if (u < 0x800) {
            *o++ = (char)(0xC0 | u >> 6), *o++ = (char)(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
            *o++ = (char)(0xE0 | u >> 12), *o++ = (char)(0x80 | (u >> 6 & 0x3F)), *o++ = (char)(0x80 | (u & 0x3F));
        } else {
            *o++ = (char)(0xF0 | u >> 18), *o++ = (char)(0x80 | (u >> 12 & 0x3F));
            *o++ = (char)(0x80 | (u >> 6 & 0x3F)), *o++ = (char)(0x80 | (u & 0x3F));
        }
    }
    if (j->p >= j->end) return mirror__json_refuse(j, "a string not closed", NULL);
    j->p++;
    *o++ = '\0'; /* in place of the closing quote: the store never outgrows the text */
    h->used = (size_t)(o - h->store);
    return 1;
}

static int mirror__json_uint(mirror__json *j, uint64_t *v)
{
    int digits = 0;
    mirror__json_ws(j);
    *v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        uint64_t d = (uint64_t)(*j->p++ - '0');
        if (*v > (UINT64_MAX - d) / 10) return 0;
        *v = *v * 10 + d;
        digits++;
    }
    return digits > 0;
}

/* The array p of n elements of size bytes with room for one more: p
   itself while n < *cap, else a copy of twice the room (MIRROR_MALLOC has
   no realloc) and p freed; NULL (p kept) when that fails. */
static void *mirror__room(void *p, size_t n, size_t *cap, size_t size)
{
    void *grown;
    size_t want = *cap ? 2 * *cap : 16;
    if (n < *cap) return p;
    if (!(grown = mirror__alloc(want, size))) return NULL;
    if (n) memcpy(grown, p, n * size);
    MIRROR_FREE(p);
    *cap = want;
    return grown;
}

/* A tensor's entry {"dtype":..., "shape":[...], "data_offsets":[b, e]}. */
static int mirror__json_entry(mirror__json *j, mirror__entry *t)
{
    const char *field;
    uint64_t v, elems = 1, max = (uint64_t)1 << 60; /* bytes of any dtype fit 64 bits */
    size_t n;
    int have = 0, bit;
    if (!mirror__json_char(j, '{')) return mirror__json_refuse(j, "a tensor's entry is not an object:", t->name);
    do {
        if (!mirror__json_string(j, &field) || !mirror__json_char(j, ':'))
            return mirror__json_refuse(j, "a tensor's field expected in", t->name);
        bit = !strcmp(field, "dtype") ? 1 : !strcmp(field, "shape") ? 2 : !strcmp(field, "data_offsets") ? 4 : 0;
        if (!bit || have & bit)
            return mirror__json_refuse(j, bit ? "a field given twice in"
                                              : "an unknown field (safetensors has dtype, shape, data_offsets) in",
                                       t->name);
        have |= bit;
        if (bit == 1) {
            if (!mirror__json_string(j, &t->dtype))
                return mirror__json_refuse(j, "a dtype that is not a string:", t->name);
        } else if (bit == 2) {
            if (!mirror__json_char(j, '[')) return mirror__json_refuse(j, "a shape that is not a list:", t->name);
            for (n = 0; !mirror__json_char(j, ']'); n++) {
                if ((n && !mirror__json_char(j, ',')) || !mirror__json_uint(j, &v))
                    return mirror__json_refuse(j, "a shape that is not a list of sizes:", t->name);
                if (v && elems > max / v) return mirror__json_refuse(j, "more than 2^60 elements in tensor", t->name);
                elems *= v;
                if (n < 4) t->shape[n] = (size_t)v;
            }
            t->rank = n;
            t->count = (size_t)elems;
            if ((uint64_t)t->count != elems)
                return mirror__json_refuse(j, "more elements than memory holds in", t->name);
        } else if (!mirror__json_char(j, '[') || !mirror__json_uint(j, &t->begin) || !mirror__json_char(j, ',') ||
                   !mirror__json_uint(j, &t->end) || !mirror__json_char(j, ']')) {
            return mirror__json_refuse(j, "data_offsets that are not two offsets:", t->name);
        }
    } while (mirror__json_char(j, ','));
    if (!mirror__json_char(j, '}')) return mirror__json_refuse(j, "a tensor's entry not closed:", t->name);
    if (have != 7) return mirror__json_refuse(j, "a tensor without its dtype, shape or data_offsets:", t->name);
    return 1;
}

static int mirror__pair_order(const void *a, const void *b)
{
    return strcmp(((const mirror__pair *)a)->key, ((const mirror__pair *)b)->key);
}

static int mirror__entry_order(const void *a, const void *b)
{
    return strcmp((*(mirror__entry *const *)a)->name, (*(mirror__entry *const *)b)->name);
}

/* The sorted views, and a key or a tensor name given twice refused (it
   would be read two ways). */
static int mirror__header_index(mirror__json *j)
{
    mirror__header *h = j->h;
    size_t i;
    if (!(h->meta_sorted = (mirror__pair *)mirror__alloc(h->nmeta, sizeof *h->meta_sorted)) ||
        !(h->t_sorted = (mirror__entry **)mirror__alloc(h->nt, sizeof *h->t_sorted)))
        return mirror__json_refuse(j, "out of memory for the header", NULL);
    if (h->nmeta) memcpy(h->meta_sorted, h->meta, h->nmeta * sizeof *h->meta);
    for (i = 0; i < h->nt; i++) h->t_sorted[i] = &h->t[i];
    if (h->nmeta) qsort(h->meta_sorted, h->nmeta, sizeof *h->meta_sorted, mirror__pair_order);
    if (h->nt) qsort(h->t_sorted, h->nt, sizeof *h->t_sorted, mirror__entry_order);
    for (i = 1; i < h->nmeta; i++)
        if (!strcmp(h->meta_sorted[i].key, h->meta_sorted[i - 1].key))
            return mirror__json_refuse(j, "a metadata key given twice:", h->meta_sorted[i].key);
    for (i = 1; i < h->nt; i++)
        if (!strcmp(h->t_sorted[i]->name, h->t_sorted[i - 1]->name))
            return mirror__json_refuse(j, "a tensor given twice:", h->t_sorted[i]->name);
    return 1;
}

/* Parses the JSON of a safetensors header (len bytes of text) into h, which
   the caller releases with mirror__header_free whatever the result. 0 when
   the text is not one; h->why says why. */
static int mirror__parse_header(const char *text, size_t len, mirror__header *h)
{
    mirror__json j;
    const char *key;
    int seen_meta = 0;
    memset(h, 0, sizeof *h);
    j.p = j.start = text;
    j.end = text + len;
    j.h = h;
    if (!(h->store = (char *)MIRROR_MALLOC(len + 1)))
        return mirror__json_refuse(&j, "out of memory for the header", NULL);
    h->size = len + 1;
    if (!mirror__json_char(&j, '{')) return mirror__json_refuse(&j, "not a JSON object", NULL);
    if (mirror__json_char(&j, '}')) goto end;
    do {
        if (!mirror__json_string(&j, &key) || !mirror__json_char(&j, ':'))
            return mirror__json_refuse(&j, "a key and ':' expected", NULL);
        if (!strcmp(key, "__metadata__")) {
            if (seen_meta++) return mirror__json_refuse(&j, "__metadata__ given twice", NULL);
            if (!mirror__json_char(&j, '{')) return mirror__json_refuse(&j, "__metadata__ is not an object", NULL);
            if (mirror__json_char(&j, '}')) continue;
            do {
                mirror__pair *p = (mirror__pair *)mirror__room(h->meta, h->nmeta, &h->meta_cap, sizeof *p);
                if (!p) return mirror__json_refuse(&j, "out of memory for the header", NULL);
                h->meta = p;
                p += h->nmeta;
                if (!mirror__json_string(&j, &p->key) || !mirror__json_char(&j, ':'))
                    return mirror__json_refuse(&j, "a metadata key and ':' expected", NULL);
                if (!mirror__json_string(&j, &p->value))
                    return mirror__json_refuse(&j, "a metadata value that is not a string (safetensors' metadata "
                                                   "maps strings to strings):", p->key);
                h->nmeta++;
            } while (mirror__json_char(&j, ','));
            if (!mirror__json_char(&j, '}')) return mirror__json_refuse(&j, "__metadata__ not closed", NULL);
        } else {
            mirror__entry *t = (mirror__entry *)mirror__room(h->t, h->nt, &h->t_cap, sizeof *t);
            if (!t) return mirror__json_refuse(&j, "out of memory for the header", NULL);
            h->t = t;
            t += h->nt;
            memset(t, 0, sizeof *t);
            t->name = key;
            if (!mirror__json_entry(&j, t)) return 0;
            h->nt++;
        }
    } while (mirror__json_char(&j, ','));
    if (!mirror__json_char(&j, '}')) return mirror__json_refuse(&j, "',' or '}' expected", NULL);
end:
    mirror__json_ws(&j);
    if (j.p != j.end) return mirror__json_refuse(&j, "text after the JSON object", NULL);
    return mirror__header_index(&j);
}

static int mirror__key_order(const void *key, const void *pair)
{
    return strcmp((const char *)key, ((const mirror__pair *)pair)->key);
}

static const char *mirror__meta(const mirror__header *h, const char *key)
{
    const mirror__pair *p = NULL;
    if (h->nmeta)
        p = (const mirror__pair *)bsearch(key, h->meta_sorted, h->nmeta, sizeof *h->meta_sorted, mirror__key_order);
    return p ? p->value : NULL;
}

static int mirror__name_order(const void *name, const void *entry)
{
    return strcmp((const char *)name, (*(mirror__entry *const *)entry)->name);
}

/* The file's tensor of that name, or NULL. */
static const mirror__entry *mirror__find_tensor(const mirror__header *h, const char *name)
{
    mirror__entry *const *e = NULL;
    if (h->nt && h->t_sorted)
        e = (mirror__entry *const *)bsearch(name, h->t_sorted, h->nt, sizeof *h->t_sorted, mirror__name_order);
    return e ? *e : NULL;
}

static int mirror__meta_u64(const mirror__header *h, const char *key, uint64_t *v)
{
    const char *s = mirror__meta(h, key);
    mirror__json j;
    if (!s || s[0] < '0' || s[0] > '9' || (s[0] == '0' && s[1])) return 0; /* digits, no leading zero */
    j.p = s;
    j.end = s + strlen(s);
    return mirror__json_uint(&j, v) && j.p == j.end;
}

/* Checks a whole checkpoint file in memory against m; on success the
   parameters and state are ready in the returned header's tensors. */
/* The precision and loss scaler fields; a scaler's state into *st (and
   *has_st set) when the checkpoint has one. Any precision loads into any
   model: the tensors are the fp32 masters. */
static int mirror__check_precision(mirror_model *m, const char *path, const mirror__header *h,
                                   mirror_loss_scale_state *st, int *has_st)
{
    static const char *const scalers[] = {"none", "dynamic", "static"};
    const char *p = mirror__meta(h, "precision"), *k = mirror__meta(h, "loss_scaler"), *scale;
    uint64_t good, consecutive;
    char *end;
    size_t i;
    int known = 0;
    for (i = 0; i < 3 && p; i++) known |= !strcmp(p, mirror_precision_name((mirror_precision)i));
    if (!known)
        return mirror__fail(m, MIRROR_ERR_UNSUPPORTED,
                            MIRROR__CUT_F ": precision \"%s\", this mirror reads fp32, fp16 and bf16",
                            MIRROR__PATH(path), p ? p : "(none)");
    for (i = 0, known = 0; i < 3 && k; i++) known |= !strcmp(k, scalers[i]);
    if (!known)
        return mirror__fail(m, MIRROR_ERR_UNSUPPORTED,
                            MIRROR__CUT_F ": loss scaler \"%s\", this mirror knows dynamic, static and none",
                            MIRROR__PATH(path), k ? k : "(none)");
    memset(st, 0, sizeof *st);
    *has_st = !strcmp(p, "fp32") ? 0 : 1;
    if (!*has_st) return MIRROR_OK;
    if ((scale = mirror__meta(h, "loss_scale")) != NULL) st->scale = strtof(scale, &end);
    if (!scale || end == scale || *end != '\0' || !(st->scale > 0.0f) || !mirror_hd_finite(st->scale) ||
        !mirror__meta_u64(h, "scaler_good_steps", &good) ||
        !mirror__meta_u64(h, "scaler_consecutive_skips", &consecutive) || good > UINT32_MAX ||
        consecutive > UINT32_MAX || !mirror__meta_u64(h, "scaler_skipped", &st->skipped) ||
        !mirror__meta_u64(h, "optimizer_steps", &st->applied))
        return mirror__fail(m, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": a %s checkpoint without a valid loss scaler state",
                            MIRROR__PATH(path), p);
    st->last_scale = st->scale;
    st->good_steps = (uint32_t)good;
    st->consecutive_skips = (uint32_t)consecutive;
    return MIRROR_OK;
}

/* Counters past 2^53 are not a run's: doubles stop counting them exactly
   (Adam's bias correction), and 2^64 - 1 would wrap to a step 0. */
#define MIRROR__MAX_COUNT ((uint64_t)1 << 53)

/* Every counter of a checkpoint in the range a run can give it, checksums
   or not: a crafted file must not set Adam's t to 2^64 - 1 (a division by
   zero at the next step) or a loss scale outside the scaler's range. */
static int mirror__check_counters(mirror_model *m, const char *path, const mirror_checkpoint_info *c,
                                  const mirror_loss_scale_state *st)
{
    const mirror_loss_scale_desc *d = &m->desc.loss_scale;
    const char *bad = NULL;
    if (c->step > MIRROR__MAX_COUNT || c->epoch > MIRROR__MAX_COUNT || c->epoch_step > MIRROR__MAX_COUNT)
        bad = "step, epoch or epoch_step beyond 2^53";
    else if (c->drop_remainder > 1)
        bad = "drop_remainder other than 0 or 1";
    else if (c->batch && c->samples && c->epoch_step >= mirror_num_batches(c->samples, c->batch, (int)c->drop_remainder))
        bad = "epoch_step not inside an epoch of its batch and sample count";
    else if (st && (st->applied > c->step || st->skipped > c->step || st->consecutive_skips > st->skipped))
        bad = "optimizer_steps, scaler_skipped or scaler_consecutive_skips larger than the steps run";
    else if (st && m->format && d->kind == MIRROR_SCALE_DYNAMIC && (st->scale < d->min_scale || st->scale > d->max_scale))
        bad = "a loss scale outside this model's [min_scale, max_scale]";
    if (!bad) return MIRROR_OK;
    return mirror__fail(m, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": %s: not a checkpoint this library wrote for this model",
                        MIRROR__PATH(path), bad);
}

/* The header of a safetensors file in memory (buf, size bytes), parsed
   into h; *text gets its JSON (NUL-terminated, the caller frees it) and
   *data_size the bytes after it. */
static int mirror__safetensors_header(mirror_model *m, const char *path, const unsigned char *buf, size_t size,
                                      mirror__header *h, char **text, uint64_t *data_size)
{
    uint64_t hlen = 0;
    size_t i;
    *text = NULL;
    memset(h, 0, sizeof *h);
    if (size < 8) return mirror__fail(m, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": %zu bytes: not a safetensors file",
                                      MIRROR__PATH(path), size);
    for (i = 0; i < 8; i++) hlen |= (uint64_t)buf[i] << (8 * i);
    if (hlen < 2 || hlen > size - 8)
        return mirror__fail(m, MIRROR_ERR_FORMAT,
                            MIRROR__CUT_F ": header length %llu does not fit the file of %zu bytes", MIRROR__PATH(path),
                            (unsigned long long)hlen, size);
    if (hlen > MIRROR__MAX_HEADER)
        return mirror__fail(m, MIRROR_ERR_UNSUPPORTED,
                            MIRROR__CUT_F ": a header of %llu bytes; this library reads headers of up "
                            "to 64 MiB", MIRROR__PATH(path), (unsigned long long)hlen);
    *data_size = size - 8 - hlen;
    if (!(*text = (char *)MIRROR_MALLOC((size_t)hlen + 1)))
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory", MIRROR__PATH(path));
    memcpy(*text, buf + 8, (size_t)hlen);
    (*text)[hlen] = '\0';
    if (memchr(*text, '\0', (size_t)hlen))
        return mirror__fail(m, MIRROR_ERR_FORMAT,
                            MIRROR__CUT_F ": a NUL byte in the header: not the JSON of a safetensors file",
                            MIRROR__PATH(path));
    if (!mirror__parse_header(*text, (size_t)hlen, h))
        return mirror__fail(m, strstr(h->why, "out of memory") ? MIRROR_ERR_NO_MEMORY : MIRROR_ERR_FORMAT,
                            "%s: the header is not the JSON of a safetensors file: %s", path, h->why);
    return MIRROR_OK;
}

/* What a checkpoint that fails its checksums, or has none, says besides:
   the file may be sound but rewritten by another program (Python's
   safetensors writes the header anew), whose weights load another way. */
#define MIRROR__REWRITTEN                                                                                 \
    "written or changed by another program (or damaged); to start from its weights, load them with " \
    "mirror_load_weights (the trainer's --init-weights)"

/* The header's own checksum: over the text (len bytes; its value is
   zeroed in place) with its value as "00000000". */
static int mirror__check_header_crc(const char *path, char *text, size_t len, const mirror__header *h,
                                    mirror_error *err)
{
    char *at = strstr(text, "\"crc32.header\":\"");
    const char *s = mirror__meta(h, "crc32.header");
    char want_hex[9], got_hex[9];
    if (!at || !s || strlen(s) != 8)
        return mirror__error(err, MIRROR_ERR_CHECKSUM, "%s: no header checksum: " MIRROR__REWRITTEN, path);
    at += 16;
    memcpy(got_hex, at, 8);
    got_hex[8] = '\0';
    memcpy(at, "00000000", 8);
    snprintf(want_hex, sizeof want_hex, "%08lx", (unsigned long)mirror__crc32(0, (const unsigned char *)text, len));
    if (strcmp(want_hex, got_hex) != 0)
        return mirror__error(err, MIRROR_ERR_CHECKSUM, "%s: " MIRROR__REWRITTEN ": the header's checksum is %s, its "
                             "contents give %s", path, got_hex, want_hex);
    return MIRROR_OK;
}

static int mirror__begin_order(const void *a, const void *b)
{
    const mirror__entry *x = *(const mirror__entry *const *)a, *y = *(const mirror__entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int mirror__check_checkpoint(mirror_model *m, const char *path, const unsigned char *buf, size_t size,
                                    int weights_only, mirror__header *h, mirror_checkpoint_info *info,
                                    mirror_loss_scale_state *st, int *has_st)
{
    mirror__tensor want[MIRROR__MAX_TENSORS];
    mirror__text model = {NULL, 0, 0, 0};
    const mirror__entry **by_begin = NULL;
    mirror__entry *mine = NULL;
    uint64_t hlen, data_size = 0, covered = 0, adam_t;
    size_t i, k, nwant;
    const char *s;
    char *text = NULL;
    int rc;
    if ((rc = mirror__safetensors_header(m, path, buf, size, h, &text, &data_size))) goto done;
    hlen = size - 8 - data_size;
    if (!(s = mirror__meta(h, "format")) || strcmp(s, "mirror") != 0) {
        rc = mirror__fail(m, MIRROR_ERR_FORMAT,
                          MIRROR__CUT_F ": not a mirror checkpoint (no \"format\": \"mirror\"); to start from its "
                          "weights, load them with mirror_load_weights (the trainer's --init-weights)",
                          MIRROR__PATH(path));
        goto done;
    }
    if ((rc = mirror__check_header_crc(path, text, (size_t)hlen, h, &m->err))) goto done;
    if (!(s = mirror__meta(h, "version")) || strcmp(s, "1") != 0) {
        rc = mirror__fail(m, MIRROR_ERR_UNSUPPORTED,
                          MIRROR__CUT_F ": checkpoint version \"%s\", this mirror reads version 1", MIRROR__PATH(path),
                          s ? s : "(none)");
        goto done;
    }
    if ((rc = mirror__check_precision(m, path, h, st, has_st))) goto done;
    mirror__describe_model(m, &model);
    if (model.failed) {
        rc = mirror__fail(m, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory", MIRROR__PATH(path));
        goto done;
    }
    if (!(s = mirror__meta(h, "model")) || strcmp(s, model.p) != 0) {
        rc = mirror__model_differs(m, path, s, model.p);
        goto done;
    }
    memset(info, 0, sizeof *info);
    if (!mirror__meta_u64(h, "step", &info->step) || !mirror__meta_u64(h, "epoch", &info->epoch) ||
        !mirror__meta_u64(h, "epoch_step", &info->epoch_step) ||
        !mirror__meta_u64(h, "shuffle_seed", &info->shuffle_seed) || !mirror__meta_u64(h, "batch", &info->batch) ||
        !mirror__meta_u64(h, "samples", &info->samples) ||
        !mirror__meta_u64(h, "drop_remainder", &info->drop_remainder)) {
        rc = mirror__fail(m, MIRROR_ERR_FORMAT,
                          MIRROR__CUT_F ": the step or the data cursor is missing or not a number", MIRROR__PATH(path));
        goto done;
    }
    if (!mirror__meta_u64(h, "micro_batch", &info->micro_batch)) info->micro_batch = 0; /* older files: not known */
    if ((rc = mirror__check_counters(m, path, info, *has_st ? st : NULL))) goto done;
    if (!weights_only && (!(s = mirror__meta(h, "optimizer")) || strcmp(s, mirror__opt_names[m->desc.optimizer.kind]))) {
        rc = mirror__fail(m, MIRROR_ERR_SHAPE,
                          MIRROR__CUT_F ": optimizer \"%s\", this model's is \"%s\" (load weights only?)",
                          MIRROR__PATH(path), s ? s : "(none)", mirror__opt_names[m->desc.optimizer.kind]);
        goto done;
    }
    /* Offsets: inside the data, no overlap (the tensors in the order of
       their bytes: each non-empty one begins at or after the end of the
       one before), the data covered exactly. */
    for (i = 0; i < h->nt; i++) {
        const mirror__entry *t = &h->t[i];
        if (strcmp(t->dtype, "F32") != 0 || t->end < t->begin || t->end > data_size || t->count > data_size / 4 ||
            t->end - t->begin != (uint64_t)t->count * 4) {
            rc = mirror__fail(m, MIRROR_ERR_FORMAT,
                              MIRROR__CUT_F ": tensor %s: dtype %s, %zu elements at bytes [%llu, %llu) of %llu",
                              MIRROR__PATH(path), t->name, t->dtype, t->count, (unsigned long long)t->begin,
                              (unsigned long long)t->end, (unsigned long long)data_size);
            goto done;
        }
        covered += t->end - t->begin;
    }
    if (!(by_begin = (const mirror__entry **)mirror__alloc(h->nt, sizeof *by_begin))) {
        rc = mirror__fail(m, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory", MIRROR__PATH(path));
        goto done;
    }
    for (i = k = 0; i < h->nt; i++)
        if (h->t[i].end > h->t[i].begin) by_begin[k++] = &h->t[i];
    if (k) qsort((void *)by_begin, k, sizeof *by_begin, mirror__begin_order);
    for (i = 1; i < k; i++)
        if (by_begin[i]->begin < by_begin[i - 1]->end) {
            rc = mirror__fail(m, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": tensors %s and %s overlap", MIRROR__PATH(path),
                              by_begin[i - 1]->name,
                              by_begin[i]->name);
            goto done;
        }
    if (covered != data_size) {
        rc = mirror__fail(m, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": the tensors cover %llu of %llu data bytes",
                          MIRROR__PATH(path), (unsigned long long)covered, (unsigned long long)data_size);
        goto done;
    }
    /* Every tensor this model needs: present, same shape, checksum right. */
    memset(want, 0, sizeof want);
    nwant = mirror__tensors(m, NULL, NULL, NULL, want);
    if (!(mine = (mirror__entry *)mirror__zalloc(nwant, sizeof *mine))) {
        rc = mirror__fail(m, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory", MIRROR__PATH(path));
        goto done;
    }
    for (i = 0; i < nwant; i++) {
        const mirror__entry *t;
        char key[96], hex[9];
        int optimizer = !strncmp(want[i].name, "optimizer.", 10);
        if (optimizer && weights_only) continue;
        t = mirror__find_tensor(h, want[i].name);
        if (!t || t->rank != want[i].rank || memcmp(t->shape, want[i].shape, t->rank * sizeof(size_t))) {
            rc = mirror__fail(m, MIRROR_ERR_SHAPE, MIRROR__CUT_F ": tensor %s %s", MIRROR__PATH(path), want[i].name,
                              t ? "has another shape than the model's" : "is missing");
            goto done;
        }
        snprintf(key, sizeof key, "crc32.%s", t->name);
        snprintf(hex, sizeof hex, "%08lx",
                 (unsigned long)mirror__crc32(0, buf + 8 + hlen + t->begin, (size_t)(t->end - t->begin)));
        if (!(s = mirror__meta(h, key)) || strcmp(s, hex) != 0) {
            rc = mirror__fail(m, MIRROR_ERR_CHECKSUM, "%s: tensor %s: checksum %s, its data gives %s: " MIRROR__REWRITTEN,
                              path, t->name, s ? s : "(none)", hex);
            goto done;
        }
        mine[i] = *t;
        mine[i].begin = 8 + hlen + t->begin; /* where its floats start in buf */
    }
    /* Values a run can give, checksums or not: every float finite (a
       crafted Adam v of +Inf would freeze every weight, a NaN anywhere
       would be blamed on the data), Adam's second moments and BatchNorm's
       running variances not negative, and no optimizer state before the
       first optimizer step (Adam's t, which its bias correction counts). */
    adam_t = *has_st ? st->applied : info->step;
    for (i = 0; i < nwant; i++) {
        const unsigned char *p = buf + mine[i].begin;
        int square = !strcmp(want[i].name, "optimizer.v") || strstr(want[i].name, ".running_var") != NULL;
        int state = !strncmp(want[i].name, "optimizer.", 10);
        const char *bad = NULL;
        float f = 0.0f;
        for (k = 0; k < mine[i].count && !bad; k++) {
            memcpy(&f, p + 4 * k, 4);
            bad = !mirror_hd_finite(f)         ? (mirror_hd_isnan(f) ? "NaN" : "infinite")
                  : square && f < 0.0f         ? "negative, a square's average"
                  : state && !adam_t && f != 0 ? "not zero at optimizer step 0"
                                               : NULL;
        }
        if (bad) {
            rc = mirror__fail(m, MIRROR_ERR_FORMAT,
                              MIRROR__CUT_F ": tensor %s: element %zu is %s (%g): a value no run of this model gives "
                              "(a checkpoint this library saves never holds it)",
                              MIRROR__PATH(path), want[i].name, k - 1, bad, (double)f);
            goto done;
        }
    }
    /* Hand the wanted tensors back in the model's order (no longer sorted
       by name: no lookup by name after this). */
    MIRROR_FREE(h->t);
    MIRROR_FREE(h->t_sorted);
    h->t_sorted = NULL;
    h->t = mine;
    h->nt = nwant;
    mine = NULL;
done:
    MIRROR_FREE(text);
    MIRROR_FREE(model.p);
    MIRROR_FREE((void *)by_begin);
    MIRROR_FREE(mine);
    return rc;
}

/* After a load that goes on training: one notice that names every setting
   (mirror__run_settings) that differs from the checkpoint's run; the run
   then is not bitwise the one that was not stopped. (In deterministic mode
   the replica count is no such setting.) Keys an older checkpoint lacks
   are not compared. Also keeps the checkpoint's micro-batch for the next
   fit (mirror__resume_split). */
static void mirror__resume_changes(mirror_model *m, const char *path, const mirror__header *saved)
{
    mirror__text now = {NULL, 0, 0, 0}, line = {NULL, 0, 0, 0};
    mirror__header *h = (mirror__header *)mirror__zalloc(1, sizeof *h);
    size_t i, differ = 0;
    if (!mirror__meta_u64(saved, "micro_batch", &m->fit.resumed_micro)) m->fit.resumed_micro = 0;
    mirror__printf(&now, "{\"__metadata__\":{");
    mirror__run_settings(m, &now);
    mirror__printf(&now, "}}");
    if (h && !now.failed && mirror__parse_header(now.p, now.len, h))
        for (i = 0; i < h->nmeta; i++) {
            const char *was = mirror__meta(saved, h->meta[i].key);
            if (was && strcmp(was, h->meta[i].value))
                mirror__printf(&line, "%s%s %s (the checkpoint's: %.40s)", differ++ ? ", " : "", h->meta[i].key,
                               h->meta[i].value, was);
        }
    if (differ && !line.failed) {
        mirror__text notice = {NULL, 0, 0, 0};
        mirror__printf(&notice, "%s: resumed with %s: the run goes on, no longer bitwise the run that was not stopped",
                       path, line.p);
        if (!notice.failed) mirror__log(MIRROR_LOG_NOTICE, notice.p);
        MIRROR_FREE(notice.p);
    }
    if (h) mirror__header_free(h);
    MIRROR_FREE(h);
    MIRROR_FREE(now.p);
    MIRROR_FREE(line.p);
}

/* A fit's micro-batch as far as the sums go (what a checkpoint keeps): in
   deterministic mode micro-batches of whole chunks add up to the step of
   the whole global batch, bit for bit, so they count as one of batch x
   accumulate. */
static uint64_t mirror__micro_cut(const mirror_model *m, size_t batch, size_t accumulate)
{
    return m->plan.chunk && batch % m->plan.chunk == 0 ? (uint64_t)batch * accumulate : batch;
}

/* A fit that resumes a checkpoint in micro-batches cut otherwise than its
   run's says so: the sums then add up in another order. */
static void mirror__resume_split(mirror_model *m, const mirror_fit_desc *d)
{
    uint64_t was = m->fit.resumed_micro, now = mirror__micro_cut(m, d->batch, d->accumulate);
    char notice[300];
    m->fit.resumed_micro = 0; /* once, for the fit that follows the load */
    if (!was || !(d->initial_epoch || d->initial_step) || was == now) return;
    snprintf(notice, sizeof notice,
             "resumed with micro-batches of %llu samples where the checkpoint's run had %llu%s: the run goes on, no "
             "longer bitwise the run that was not stopped",
             (unsigned long long)now, (unsigned long long)was,
             m->plan.chunk ? " (micro-batches of whole chunks count as one of the whole step)" : "");
    mirror__log(MIRROR_LOG_NOTICE, notice);
}

/* The file the parameters come from now (mirror_weights_source): taken
   before the model changes, so that running out of memory leaves it as
   it was. The checksum is of buf, the bytes the load read. */
static int mirror__remember_source(mirror_model *m, const char *path, int checkpoint, const unsigned char *buf,
                                   size_t size)
{
    size_t n = strlen(path) + 1;
    char *copy = (char *)MIRROR_MALLOC(n);
    struct stat st;
    if (!copy) return mirror__fail(m, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory", MIRROR__PATH(path));
    memcpy(copy, path, n);
    MIRROR_FREE(m->source.path);
    m->source.path = copy;
    m->source.told.path = copy, m->source.told.checkpoint = checkpoint;
    m->source.told.crc32 = mirror__crc32(0, buf, size), m->source.told.size = size;
    m->source.has_file = stat(path, &st) == 0;
    m->source.dev = m->source.has_file ? (uint64_t)st.st_dev : 0;
    m->source.ino = m->source.has_file ? (uint64_t)st.st_ino : 0;
    return MIRROR_OK;
}

MIRROR_API mirror_weights_source mirror_model_weights_source(const mirror_model *m)
{
    mirror_weights_source none;
    memset(&none, 0, sizeof none);
    return m ? m->source.told : none;
}

/* A double of the header into *v; 0 when missing or not a number. */
static int mirror__meta_double(const mirror__header *h, const char *key, double *v)
{
    const char *s = mirror__meta(h, key);
    char *end;
    if (!s) return 0;
    *v = strtod(s, &end);
    return end != s && !*end;
}

/* fit's running numbers of the epoch in progress, where a checkpoint saved
   mid-epoch by fit holds them, into *e (kept 0 where it holds none: saved
   at an epoch's start, outside fit, or by an older mirror). Numbers that
   no run could give (more samples than the data, more correct than
   samples, a negative or NaN loss, a negative time) are refused. */
static int mirror__epoch_sums_of(mirror_model *m, const char *path, const mirror__header *h,
                                 const mirror_checkpoint_info *c, mirror__epoch_sums *e)
{
    uint64_t correct = 0, count = 0, skipped = 0;
    memset(e, 0, sizeof *e);
    if (!mirror__meta(h, "epoch_loss_sum") && !mirror__meta(h, "epoch_samples")) return MIRROR_OK;
    if (!mirror__meta_double(h, "epoch_loss_sum", &e->acc.loss_sum) ||
        !mirror__meta_double(h, "epoch_seconds", &e->seconds) || !mirror__meta_u64(h, "epoch_correct", &correct) ||
        !mirror__meta_u64(h, "epoch_samples", &count) || !mirror__meta_u64(h, "epoch_skipped", &skipped) ||
        !c->epoch_step || !(e->acc.loss_sum >= 0.0) || !(e->seconds >= 0.0 && e->seconds < 1e300) || !count ||
        correct > count || (c->samples && count > c->samples) || skipped > c->epoch_step)
        return mirror__fail(m, MIRROR_ERR_FORMAT,
                            MIRROR__CUT_F ": the epoch's running numbers (epoch_loss_sum, epoch_correct, "
                            "epoch_samples, "
                            "epoch_skipped, epoch_seconds) are not a run's: not a checkpoint this library wrote",
                            MIRROR__PATH(path));
    e->acc.correct = (size_t)correct, e->acc.count = (size_t)count, e->skipped = skipped;
    e->epoch = c->epoch, e->epoch_step = c->epoch_step, e->kept = 1;
    return MIRROR_OK;
}

static int mirror__checkpoint_load(mirror_model *m, const char *path, int weights_only,
                                   mirror_checkpoint_info *info)
{
    unsigned char *buf = NULL;
    size_t size = 0, i;
    float *params = NULL, *state = NULL;
    mirror__header *h = NULL;
    mirror_checkpoint_info got;
    mirror_loss_scale_state st;
    mirror__epoch_sums sums;
    double most;
    int rc, has_st = 0;
    if ((rc = mirror__check_built(m, "mirror_checkpoint_load"))) return rc;
    if (!path) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_checkpoint_load: path is NULL");
    /* at most a 64 MiB header and this model's tensors: not a whole
       multi-gigabyte file (or gzip bomb) into memory to find that out */
    most = 8.0 + (double)(1 << 26) + 4.0 * ((double)m->nslots + (double)m->sizes.nstate + (double)m->bn.nrunning);
    if ((rc = mirror__read_file(path, most < (double)MIRROR__MAX_FILE ? (size_t)most : MIRROR__MAX_FILE, NULL, &buf,
                                &size, &m->err)))
        return rc;
    h = (mirror__header *)mirror__zalloc(1, sizeof *h);
    params = (float *)mirror__zalloc(m->nslots, sizeof(float));            /* as the arena */
    state = (float *)mirror__zalloc(2 * m->sizes.nstate + 1, sizeof(float)); /* packed, then as the arena */
    if (!h || !params || !state) {
        rc = mirror__fail(m, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory", MIRROR__PATH(path));
        goto done;
    }
    if ((rc = mirror__check_checkpoint(m, path, buf, size, weights_only, h, &got, &st, &has_st)) ||
        (!weights_only && (rc = mirror__epoch_sums_of(m, path, h, &got, &sums))) ||
        (rc = mirror__remember_source(m, path, 1, buf, size)))
        goto done;
    /* Everything checked: now, and only now, the model changes (an
       earlier checkpoint's epoch sums no longer describe its parameters). */
    m->fit.resumed_sums.kept = 0;
    {
        mirror__tensor dst[MIRROR__MAX_TENSORS];
        size_t n = mirror__tensors(m, params, state, m->bn.running, dst);
        for (i = 0; i < n; i++) {
            if (!strncmp(dst[i].name, "optimizer.", 10) && weights_only) continue;
            memcpy((void *)dst[i].host, buf + h->t[i].begin, dst[i].count * sizeof(float));
        }
        m->bn.stale = 1;
    }
    if ((rc = mirror__upload_params(m, params))) goto done;
    if (!weights_only) {
        mirror__pack(m, state, state + m->sizes.nstate, mirror__state_copies(m), 1);
        mirror__upload_state(m, state + m->sizes.nstate);
        m->steps = got.step;
        if ((rc = mirror__device_status(m))) goto done;
        if (m->format) { /* from an fp32 checkpoint: a fresh scaler that has taken its steps */
            if (!has_st) {
                st.scale = st.last_scale = m->desc.loss_scale.init_scale;
                st.applied = got.step;
            }
            if (m->desc.loss_scale.kind != MIRROR_SCALE_DYNAMIC) st.scale = st.last_scale = m->desc.loss_scale.init_scale;
            if ((rc = mirror__set_scaler(m, &st))) goto done;
        } else if (has_st) {
            m->steps = st.applied; /* Adam's t in fp32 */
        }
    }
    if (!m->format) { /* the guard starts afresh from the loaded parameters */
        memset(&st, 0, sizeof st);
        st.scale = st.last_scale = 1.0f;
        if ((rc = mirror__set_scaler(m, &st))) goto done;
    }
    if (!weights_only) {
        mirror__resume_changes(m, path, h);
        m->fit.resumed_sums = sums, m->fit.resumed_sums.step = m->steps;
    }
    if (info) *info = got;
done:
    MIRROR_FREE(buf);
    if (h) mirror__header_free(h);
    MIRROR_FREE(h);
    MIRROR_FREE(params);
    MIRROR_FREE(state);
    return rc;
}

/* A whole checkpoint loaded from fit's hook would change the step count
   that fit's cursor counts: refused there (in every process alike). */
static int mirror__checkpoint_load_call(mirror_model *m, const char *path, int weights_only,
                                        mirror_checkpoint_info *info)
{
    if (m->fit.running && !weights_only)
        return mirror__fail(m, MIRROR_ERR_STATE,
                            "mirror_checkpoint_load: called inside mirror_fit on this model (from a hook): a whole "
                            "checkpoint would change the step count that fit's cursor counts; load weights_only");
    return mirror__all_agree(m, mirror__checkpoint_load(m, path, weights_only, info));
}

MIRROR_API int mirror_checkpoint_load(mirror_model *m, const char *path, int weights_only,
                                      mirror_checkpoint_info *info)
{
    if (!m) return mirror__error(NULL, MIRROR_ERR_ARGUMENT, "mirror_checkpoint_load: model is NULL");
    {
        MIRROR__LOCKED(m, "mirror_checkpoint_load", mirror__checkpoint_load_call(m, path, weights_only, info));
    }
}

/* ---- weights from another program (mirror_load_weights) ---- */

/* The bytes of an element of a safetensors dtype that weights convert
   from; 0 for another dtype. */
static size_t mirror__dtype_size(const char *dtype)
{
    if (!strcmp(dtype, "F32")) return 4;
    if (!strcmp(dtype, "F16") || !strcmp(dtype, "BF16")) return 2;
    return strcmp(dtype, "F64") ? 0 : 8;
}

/* Element i of little-endian data of dtype (size bytes each) as a float. */
static float mirror__element(const unsigned char *p, size_t size, const char *dtype, size_t i)
{
    float f;
    double d;
    p += i * size;
    if (size == 2) {
        uint16_t h = (uint16_t)(p[0] | p[1] << 8);
        return dtype[0] == 'B' ? mirror_hd_f32_from_bf16(h) : mirror_hd_f32_from_f16(h);
    }
    if (size == 4) return memcpy(&f, p, 4), f;
    return memcpy(&d, p, 8), (float)d;
}

/* "[128, 1568]"; a file's shape of rank over 4 (only the first 4 kept)
   as "[2, 3, 4, 5, ...] (rank 6)". */
static void mirror__print_shape(mirror__text *t, const size_t *shape, size_t rank)
{
    size_t j;
    mirror__printf(t, "[");
    for (j = 0; j < rank && j < 4; j++) mirror__printf(t, j ? ", %zu" : "%zu", shape[j]);
    mirror__printf(t, rank > 4 ? ", ...] (rank %zu)" : "]", rank);
}

/* The file's tensor that holds model tensor `name` (layers.<i>.<what>):
   that name, or, as nn.Sequential's state_dict names it, <i>.<what>. */
static const mirror__entry *mirror__find_weight(const mirror__header *h, const char *name, size_t *at)
{
    const mirror__entry *t = mirror__find_tensor(h, name);
    if (!t) t = mirror__find_tensor(h, name + 7);
    if (t) *at = (size_t)(t - h->t);
    return t;
}

/* Tensors of a weights file that mean nothing to a model and are passed
   over: a mirror checkpoint's optimizer state, PyTorch's count of
   BatchNorm's batches. */
static int mirror__ignored_weight(const char *name)
{
    size_t n = strlen(name), tail = strlen(".num_batches_tracked");
    return !strncmp(name, "optimizer.", 10) || (n > tail && !strcmp(name + n - tail, ".num_batches_tracked"));
}

/* The problems of a weights file, gathered for one message: the file's
   tensors with no place in the model (a module's own names, most often),
   this model's tensors missing from it, and the rest (shapes, dtypes,
   bytes, values), each list its first MIRROR__LISTED and a count. */
#define MIRROR__LISTED 3
typedef struct mirror__weight_problems {
    size_t count[3];
    mirror__text list[3];
} mirror__weight_problems;
enum { MIRROR__UNPLACED, MIRROR__MISSING, MIRROR__OTHER };

/* The next problem of a kind: a text for the list (fmt), while it is short. */
static void mirror__weight_problem(mirror__weight_problems *wp, int kind, const char *fmt, ...)
{
    mirror__text *t = &wp->list[kind];
    va_list ap;
    char one[240]; /* the longest: a name and two shapes of rank 5 and more */
    if (wp->count[kind]++ >= MIRROR__LISTED) return;
    va_start(ap, fmt);
    if (vsnprintf(one, sizeof one, fmt, ap) >= (int)sizeof one) memcpy(one + sizeof one - 4, "...", 4);
    va_end(ap);
    mirror__printf(t, "%s%s", t->len ? (kind == MIRROR__OTHER ? "; " : ", ") : "", one);
}

/* " (and 3 more)" after a list that was cut, else "". */
static void mirror__more(mirror__text *why, size_t count)
{
    if (count > MIRROR__LISTED) mirror__printf(why, " (and %zu more)", count - MIRROR__LISTED);
}

/* The message of a file's problems, what to do first: names that are
   not the model's come with the names it reads and how to give them. */
static void mirror__tell_weight_problems(mirror__weight_problems *wp, mirror__text *why)
{
    size_t *n = wp->count;
    int i;
    for (i = 0; i < 3; i++)
        if (wp->list[i].failed) why->failed = 1;
    if (n[MIRROR__UNPLACED]) {
        mirror__printf(why, "%zu of the file's tensors %s this model does not know: %s", n[MIRROR__UNPLACED],
                       n[MIRROR__UNPLACED] > 1 ? "have names" : "has a name", wp->list[MIRROR__UNPLACED].p);
        mirror__more(why, n[MIRROR__UNPLACED]);
        mirror__printf(why, ". mirror reads its own names (layers.0.weight) or those of an nn.Sequential's "
                            "state_dict, which number the layers in order (0.weight, 3.bias): rename the tensors "
                            "for this model's layers, or save the state_dict of an nn.Sequential of the same layers");
    }
    if (n[MIRROR__MISSING]) {
        mirror__printf(why, "%s%zu of this model's tensors %s missing (layers.<i>.<what> or <i>.<what>): %s",
                       n[MIRROR__UNPLACED] ? ". " : "", n[MIRROR__MISSING], n[MIRROR__MISSING] > 1 ? "are" : "is",
                       wp->list[MIRROR__MISSING].p);
        mirror__more(why, n[MIRROR__MISSING]);
    }
    if (n[MIRROR__OTHER]) {
        mirror__printf(why, "%s%s", n[MIRROR__UNPLACED] || n[MIRROR__MISSING] ? ". " : "", wp->list[MIRROR__OTHER].p);
        mirror__more(why, n[MIRROR__OTHER]);
    }
    for (i = 0; i < 3; i++) MIRROR_FREE(wp->list[i].p);
}

/* Checks every tensor of the weights file in buf against m and converts
   the model's into params (shaped as the arena) and running; the problems
   found, each with the tensor's name, go to *why. */
static int mirror__convert_weights(mirror_model *m, const unsigned char *data, uint64_t data_size,
                                   const mirror__header *h, float *params, float *running, mirror__text *why)
{
    mirror__tensor want[MIRROR__MAX_TENSORS];
    mirror__weight_problems wp;
    unsigned char *used = (unsigned char *)mirror__zalloc(h->nt, 1);
    size_t i, j, k, nwant = mirror__tensors(m, params, NULL, running, want);
    mirror__text a = {NULL, 0, 0, 0}, b = {NULL, 0, 0, 0};
    if (!used) return why->failed = 1, MIRROR_ERR_NO_MEMORY;
    memset(&wp, 0, sizeof wp);
    for (i = 0; i < nwant; i++) {
        const mirror__entry *t;
        size_t size;
        if (!strncmp(want[i].name, "optimizer.", 10)) continue;
        if (!(t = mirror__find_weight(h, want[i].name, &k))) {
            mirror__weight_problem(&wp, MIRROR__MISSING, "%s", want[i].name + 7);
            continue;
        }
        used[k] = 1;
        size = mirror__dtype_size(t->dtype);
        if (t->rank != want[i].rank || memcmp(t->shape, want[i].shape, t->rank * sizeof(size_t))) {
            a.len = b.len = 0;
            mirror__print_shape(&a, t->shape, t->rank);
            mirror__print_shape(&b, want[i].shape, want[i].rank);
            mirror__weight_problem(&wp, MIRROR__OTHER,
            "tensor " MIRROR__CUT_F ": shape %s in the file, %s in this model",
                                   MIRROR__CUT(t->name, MIRROR__SHOWN_NAME), a.failed ? "?" : a.p,
                                   b.failed ? "?" : b.p);
        } else if (!size) {
            mirror__weight_problem(&wp, MIRROR__OTHER,
                                   "tensor " MIRROR__CUT_F ": dtype " MIRROR__CUT_F
                                   " (weights convert from F32, F16, BF16 and F64)",
                                   MIRROR__CUT(t->name, MIRROR__SHOWN_NAME), MIRROR__CUT(t->dtype, 16));
        } else if (t->end < t->begin || t->end > data_size || t->end - t->begin != (uint64_t)t->count * size) {
            mirror__weight_problem(&wp, MIRROR__OTHER,
            "tensor " MIRROR__CUT_F ": %zu elements of %s at bytes [%llu, %llu) of %llu",
                                   MIRROR__CUT(t->name, MIRROR__SHOWN_NAME), t->count, t->dtype,
                                   (unsigned long long)t->begin, (unsigned long long)t->end,
                                   (unsigned long long)data_size);
        } else {
            float *dst = (float *)want[i].host;
            for (j = 0; j < t->count; j++) dst[j] = mirror__element(data + t->begin, size, t->dtype, j);
            for (j = 0; j < t->count && mirror_hd_finite(dst[j]); j++) {}
            if (j < t->count)
                mirror__weight_problem(&wp, MIRROR__OTHER, "tensor " MIRROR__CUT_F ": element %zu is %s%s",
                                       MIRROR__CUT(t->name, MIRROR__SHOWN_NAME), j,
                                       mirror_hd_isnan(dst[j]) ? "NaN" : "infinite", size == 8 ? " as a float" : "");
        }
    }
    for (k = 0; k < h->nt; k++)
        if (!used[k] && !mirror__ignored_weight(h->t[k].name))
            mirror__weight_problem(&wp, MIRROR__UNPLACED, MIRROR__CUT_F, MIRROR__CUT(h->t[k].name, MIRROR__SHOWN_NAME));
        else if (!used[k] && (h->t[k].end < h->t[k].begin || h->t[k].end > data_size)) /* a file cut short */
            mirror__weight_problem(&wp, MIRROR__OTHER, "tensor " MIRROR__CUT_F ": bytes [%llu, %llu) of %llu",
                                   MIRROR__CUT(h->t[k].name, MIRROR__SHOWN_NAME), (unsigned long long)h->t[k].begin,
                                   (unsigned long long)h->t[k].end, (unsigned long long)data_size);
    MIRROR_FREE(used);
    MIRROR_FREE(a.p);
    MIRROR_FREE(b.p);
    if (a.failed || b.failed) why->failed = 1;
    mirror__tell_weight_problems(&wp, why);
    if (why->failed) return MIRROR_ERR_NO_MEMORY;
    return wp.count[0] + wp.count[1] + wp.count[2] ? MIRROR_ERR_SHAPE : MIRROR_OK;
}

static int mirror__load_weights(mirror_model *m, const char *path)
{
    unsigned char *buf = NULL;
    size_t size = 0;
    uint64_t data_size = 0;
    float *params = NULL, *running = NULL, *state = NULL;
    mirror__header *h = NULL;
    mirror__text why = {NULL, 0, 0, 0};
    mirror_loss_scale_state st;
    char *text = NULL;
    double most;
    int rc;
    if ((rc = mirror__check_built(m, "mirror_load_weights"))) return rc;
    if (!path) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_load_weights: path is NULL");
    if (m->fit.running)
        return mirror__fail(m, MIRROR_ERR_STATE, "mirror_load_weights: called inside mirror_fit on this model (from a "
                                                 "hook): it starts the optimizer afresh under fit's cursor");
    /* a 64 MiB header, and this model's tensors in F64 with a checkpoint's
       optimizer state beside them, at most */
    most = 8.0 + (double)(1 << 26) + 8.0 * ((double)m->nslots + (double)m->sizes.nstate + (double)m->bn.nrunning);
    if ((rc = mirror__read_file(path, most < (double)MIRROR__MAX_FILE ? (size_t)most : MIRROR__MAX_FILE, NULL, &buf,
                                &size, &m->err)))
        return rc;
    h = (mirror__header *)mirror__zalloc(1, sizeof *h);
    params = (float *)mirror__zalloc(m->nslots, sizeof(float));
    running = (float *)mirror__zalloc(m->bn.nrunning + 1, sizeof(float));
    state = (float *)mirror__zalloc(mirror__state_copies(m) * m->nslots + 1, sizeof(float));
    if (!h || !params || !running || !state) {
        rc = mirror__fail(m, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory", MIRROR__PATH(path));
        goto done;
    }
    if ((rc = mirror__safetensors_header(m, path, buf, size, h, &text, &data_size))) goto done;
    if ((rc = mirror__convert_weights(m, buf + (size - data_size), data_size, h, params, running, &why))) {
        rc = mirror__fail(m, rc, MIRROR__CUT_F ": %s", MIRROR__PATH(path),
                          why.failed ? "out of memory" : why.p);
        goto done;
    }
    /* Everything checked: now the model changes, and its run starts afresh. */
    m->fit.resumed_sums.kept = 0; /* a checkpoint's epoch sums describe its parameters, not these */
    if ((rc = mirror__remember_source(m, path, 0, buf, size)) || (rc = mirror__upload_params(m, params))) goto done;
    if (m->bn.nrunning) memcpy(m->bn.running, running, m->bn.nrunning * sizeof(float)); /* none without batchnorm */
    m->bn.stale = 1;
    mirror__upload_state(m, state); /* zeros */
    m->steps = 0;
    memset(&st, 0, sizeof st);
    st.scale = st.last_scale = m->format ? m->desc.loss_scale.init_scale : 1.0f;
    if ((rc = mirror__set_scaler(m, &st))) goto done;
    rc = mirror__device_status(m);
done:
    MIRROR_FREE(buf);
    if (h) mirror__header_free(h);
    MIRROR_FREE(h);
    MIRROR_FREE(text);
    MIRROR_FREE(why.p);
    MIRROR_FREE(params);
    MIRROR_FREE(running);
    MIRROR_FREE(state);
    return rc;
}

MIRROR_API int mirror_load_weights(mirror_model *m, const char *path, mirror_error *err)
{
    int rc;
    if (!m) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_load_weights: model is NULL");
    {
        mirror_strategy *s = m->s;
        if ((rc = mirror__enter(s, &m->err, "mirror_load_weights")) == MIRROR_OK) {
            rc = mirror__all_agree(m, mirror__load_weights(m, path));
            mirror__leave(s);
        }
    }
    if (rc && err) *err = m->err;
    return rc;
}

/* ---- a model rebuilt from a checkpoint's header ---- */

/* The header of the checkpoint at path (its JSON text, NUL-terminated),
   read without the tensors behind it, whose bytes *data_size gets: the
   header's length is checked against the file's before it is read. */
static int mirror__read_header_text(const char *path, char **text, uint64_t *data_size, mirror_error *err)
{
    unsigned char len8[8];
    uint64_t hlen = 0;
    size_t i, got = 0;
    ssize_t n = 0;
    struct stat st;
    int fd = mirror__open_regular(path, err);
    *text = NULL;
    if (fd < 0) return err ? err->code : MIRROR_ERR_IO;
    while (got < 8 && (n = read(fd, len8 + got, 8 - got)) > 0) got += (size_t)n;
    for (i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    if (got < 8 || hlen < 2 || hlen > MIRROR__MAX_HEADER || fstat(fd, &st) != 0 || st.st_size < 8 ||
        hlen > (uint64_t)st.st_size - 8) {
        close(fd);
        return mirror__error(err, MIRROR_ERR_FORMAT,
                             MIRROR__CUT_F ": not a checkpoint (no header of a sensible length)", MIRROR__PATH(path));
    }
    *data_size = (uint64_t)st.st_size - 8 - hlen;
    if (!(*text = (char *)MIRROR_MALLOC((size_t)hlen + 1))) {
        close(fd);
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory", MIRROR__PATH(path));
    }
    for (got = 0; got < hlen && (n = read(fd, *text + got, (size_t)hlen - got)) > 0;) got += (size_t)n;
    close(fd);
    (*text)[got] = '\0';
    if (got < hlen || memchr(*text, '\0', got)) {
        MIRROR_FREE(*text);
        *text = NULL;
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": the header is cut short", MIRROR__PATH(path));
    }
    return MIRROR_OK;
}

/* One entry of a model description, "name" or "name(a,b,...)": its name
   and up to 4 numbers; *p moves past it and its ';'. 0 when malformed. */
static int mirror__arch_entry(const char **p, char *name, size_t cap, double *arg, size_t *nargs)
{
    const char *s = *p;
    size_t len = strcspn(s, "(;");
    char *end;
    if (!len || len >= cap) return 0;
    memcpy(name, s, len);
    name[len] = '\0';
    s += len;
    *nargs = 0;
    if (*s == '(' && strncmp(name, "loss", 4) != 0) {
        do {
            s++;
            if (*nargs == 4 || !(*s >= '0' && *s <= '9')) return 0;
            arg[(*nargs)++] = strtod(s, &end);
            s = end;
        } while (*s == ',');
        if (*s++ != ')') return 0;
    } else if (*s == '(') { /* loss(name): the name as the argument */
        size_t k = strcspn(s + 1, ")");
        if (s[1 + k] != ')' || k >= cap) return 0;
        memcpy(name, s + 1, k);
        name[k] = '\0';
        s += k + 2;
        *nargs = (size_t)-1;
    }
    if (*s == ';') s++;
    else if (*s) return 0;
    *p = s;
    return 1;
}

/* The layers of a description into m (after its input entry). */
static int mirror__add_described(mirror_model *m, const char *p, const char *path)
{
    char name[32];
    double a[4];
    size_t n, i, k;
    int rc = MIRROR_OK;
    while (*p && rc == MIRROR_OK) {
        if (!mirror__arch_entry(&p, name, sizeof name, a, &n)) break;
        if (n == (size_t)-1) return *p ? mirror__fail(m, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": layers after the loss",
                                                      MIRROR__PATH(path)) : rc;
        for (i = 0; i < n; i++)
            if (!(a[i] >= 0 && a[i] <= 1e9)) return mirror__fail(m, MIRROR_ERR_FORMAT,
                                                                 MIRROR__CUT_F ": %s(...) out of range",
                                                                 MIRROR__PATH(path), name);
        for (k = 1; k < MIRROR__KINDS && strcmp(name, mirror__kinds[k].name); k++) {}
        if (k == MIRROR__KINDS || n != mirror__kinds[k].nargs || (rc = mirror__kinds[k].described(m, a)) > 0)
            return mirror__fail(m, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": unknown layer \"%s\" with %zu arguments",
                                MIRROR__PATH(path), name, n);
    }
    return rc ? rc : mirror__fail(m, MIRROR_ERR_FORMAT,
                                  MIRROR__CUT_F ": the model description is malformed or has no loss",
                                  MIRROR__PATH(path));
}

/* A float of the header's metadata (absent: 0). */
static float mirror__meta_float(const mirror__header *h, const char *key)
{
    const char *s = mirror__meta(h, key);
    char *end;
    double v = s ? strtod(s, &end) : 0.0;
    return s && !*end && v >= -3.4e38 && v <= 3.4e38 ? (float)v : 0.0f;
}

/* The model desc the header stores: input, loss, optimizer, schedule,
   precision, loss scaler, seed, clipping and deterministic mode. */
static int mirror__described_desc(const mirror__header *h, const char *path, mirror_model_desc *d, const char **layers,
                                  mirror_error *err)
{
    const char *model = mirror__meta(h, "model"), *s;
    char name[32];
    double a[4];
    size_t n, i;
    uint64_t v;
    mirror_optimizer_desc *o = &d->optimizer;
    if (!model || !mirror__arch_entry(&model, name, sizeof name, a, &n) || strcmp(name, "input") || n != 3)
        return mirror__error(err, MIRROR_ERR_FORMAT, MIRROR__CUT_F ": no model description (input(C,H,W);...)",
                             MIRROR__PATH(path));
    for (i = 0; i < 3; i++)
        if (!(a[i] >= 1 && a[i] <= 1e9)) return mirror__error(err, MIRROR_ERR_FORMAT,
                                                              MIRROR__CUT_F ": input out of range", MIRROR__PATH(path));
    d->channels = (size_t)a[0], d->height = (size_t)a[1], d->width = (size_t)a[2];
    d->loss = strstr(model, ";loss(mse)") || !strncmp(model, "loss(mse)", 9) ? MIRROR_LOSS_MSE : MIRROR_LOSS_SOFTMAX_CE;
    *layers = model;
    s = mirror__meta(h, "optimizer");
    for (i = 1; i < sizeof mirror__opt_names / sizeof *mirror__opt_names; i++)
        if (s && !strcmp(s, mirror__opt_names[i])) o->kind = (mirror_optimizer_kind)i;
    if (o->kind == MIRROR_OPT_DEFAULT) return mirror__error(err, MIRROR_ERR_FORMAT,
                                                            MIRROR__CUT_F ": unknown optimizer", MIRROR__PATH(path));
    o->lr = mirror__meta_float(h, "lr"), o->momentum = mirror__meta_float(h, "momentum");
    o->nesterov = mirror__meta_float(h, "nesterov") != 0.0f, o->weight_decay = mirror__meta_float(h, "weight_decay");
    o->beta1 = mirror__meta_float(h, "beta1"), o->beta2 = mirror__meta_float(h, "beta2");
    o->eps = mirror__meta_float(h, "eps"), o->clip_norm = mirror__meta_float(h, "clip_norm");
    s = mirror__meta(h, "lr_schedule");
    for (i = 0; s && i < MIRROR_LR_CALLBACK; i++)
        if (!strcmp(s, mirror__schedule_names[i])) o->schedule = (mirror_lr_schedule)i;
    if (mirror__meta_u64(h, "warmup", &v)) o->warmup = v;
    if (mirror__meta_u64(h, "step_size", &v)) o->step_size = v;
    if (mirror__meta_u64(h, "total_steps", &v)) o->total_steps = v;
    o->gamma = mirror__meta_float(h, "gamma"), o->min_lr = mirror__meta_float(h, "min_lr");
    if (s && !strcmp(s, "callback"))
        mirror__log(MIRROR_LOG_NOTICE, "the checkpoint's learning rate came from a callback, which a checkpoint "
                                       "cannot hold: the rebuilt model runs at its constant lr");
    s = mirror__meta(h, "precision");
    d->precision = s && !strcmp(s, "fp16") ? MIRROR_PRECISION_FP16 : s && !strcmp(s, "bf16") ? MIRROR_PRECISION_BF16
                                                                                              : MIRROR_PRECISION_FP32;
    s = mirror__meta(h, "loss_scaler");
    if (d->precision != MIRROR_PRECISION_FP32 && s)
        d->loss_scale.kind = !strcmp(s, "dynamic")  ? MIRROR_SCALE_DYNAMIC
                             : !strcmp(s, "static") ? MIRROR_SCALE_STATIC
                                                    : MIRROR_SCALE_NONE;
    if (d->loss_scale.kind == MIRROR_SCALE_STATIC) d->loss_scale.init_scale = mirror__meta_float(h, "loss_scale");
    if (mirror__meta_u64(h, "seed", &v)) d->seed = v;
    if (mirror__meta_u64(h, "deterministic", &v)) d->deterministic = v == 1;
    if (d->deterministic && mirror__meta_u64(h, "chunk", &v)) d->chunk = (size_t)MIRROR__MIN(v, ((uint64_t)1 << 24) + 1);
    return MIRROR_OK;
}

/* The tensors' bytes a checkpoint of m (its layers added, not built)
   holds, as mirror__tensors lists them: the parameters, BatchNorm's
   running statistics and the optimizer state once, float32; the file's
   data must be exactly that before a build allocates for it. */
static int mirror__described_size(mirror_model *m, const char *path, uint64_t data_size)
{
    uint64_t params = 0, running = 0, copies, need;
    size_t i;
    for (i = 0; i < m->nlayers; i++) { /* each n_w at most 2^30, 64 layers: no overflow */
        params += m->layers[i].n_w + m->layers[i].n_b;
        if (m->layers[i].kind == MIRROR__BATCHNORM) running += 2 * (uint64_t)m->layers[i].c;
    }
    copies = m->desc.optimizer.kind == MIRROR_OPT_SGD ? m->desc.optimizer.momentum != 0.0f : 2;
    need = 4 * (params * (1 + copies) + running);
    if (need == data_size) return MIRROR_OK;
    return mirror__fail(m, MIRROR_ERR_FORMAT,
                        MIRROR__CUT_F ": %llu bytes of tensors where the model its header describes needs %llu (%llu "
                        "parameters, "
                        "%llu of optimizer state, %llu running statistics): cut short, or not the checkpoint its "
                        "header says",
                        MIRROR__PATH(path), (unsigned long long)data_size, (unsigned long long)need,
                        (unsigned long long)params,
                        (unsigned long long)(params * copies), (unsigned long long)running);
}

static int mirror__from_checkpoint(mirror_strategy *s, const char *path, size_t max_batch, mirror_model **out,
                                   mirror_checkpoint_info *info, mirror_error *err)
{
    mirror__header *h = NULL;
    mirror_model_desc d;
    const char *layers = NULL, *format;
    char *text = NULL;
    uint64_t data_size = 0;
    int rc;
    *out = NULL;
    memset(&d, 0, sizeof d);
    if ((rc = mirror__read_header_text(path, &text, &data_size, err))) return rc;
    /* The header checked as a load checks it (its format, its checksum),
       and the file's size against the tensors it describes, before the
       model is built: a few hundred crafted bytes must not make it
       allocate gigabytes. */
    if (!(h = (mirror__header *)mirror__zalloc(1, sizeof *h))) {
        rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, MIRROR__CUT_F ": out of memory", MIRROR__PATH(path));
    } else if (!mirror__parse_header(text, strlen(text), h)) {
        rc = mirror__error(err, strstr(h->why, "out of memory") ? MIRROR_ERR_NO_MEMORY : MIRROR_ERR_FORMAT,
                           "%s: the header is not the JSON of a checkpoint: %s", path, h->why);
    } else if (!(format = mirror__meta(h, "format")) || strcmp(format, "mirror") != 0) {
        rc = mirror__error(err, MIRROR_ERR_FORMAT,
                           MIRROR__CUT_F ": not a mirror checkpoint (no \"format\": \"mirror\")", MIRROR__PATH(path));
    } else if ((rc = mirror__check_header_crc(path, text, strlen(text), h, err)) == MIRROR_OK &&
               (rc = mirror__described_desc(h, path, &d, &layers, err)) == MIRROR_OK) {
        d.strategy = s;
        if (d.deterministic && s && s->processes > 1 && s->backend != &mirror__cpu_backend) {
            d.deterministic = 0, d.chunk = 0; /* refused there (mirror_model_build) */
            mirror__log(MIRROR_LOG_NOTICE, "the checkpoint's run was deterministic; GPU replicas across processes "
                                           "are not: the rebuilt model runs without");
        }
        d.max_batch = max_batch;
        if ((rc = mirror_model_create(&d, out, err)) == MIRROR_OK &&
            ((rc = mirror__add_described(*out, layers, path)) || (rc = mirror__described_size(*out, path, data_size)) ||
             (rc = mirror_model_build(*out)) ||
             (rc = mirror_checkpoint_load(*out, path, 0, info)))) {
            if (err) mirror__error(err, rc, "%s", mirror_model_error(*out));
            mirror_model_destroy(*out);
            *out = NULL;
        }
    }
    MIRROR_FREE(text);
    if (h) mirror__header_free(h);
    MIRROR_FREE(h);
    return rc;
}

MIRROR_API int mirror_model_from_checkpoint(mirror_strategy *s, const char *path, size_t max_batch, mirror_model **out,
                                            mirror_checkpoint_info *info, mirror_error *err)
{
    if (!out) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_from_checkpoint: out is NULL");
    *out = NULL;
    if (!s || !path) return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_model_from_checkpoint: NULL argument");
    return mirror__from_checkpoint(s, path, max_batch, out, info, err);
}

MIRROR_API int mirror_checkpoint_describe(const char *path, char *buf, size_t size, mirror_error *err)
{
    mirror__header *h = NULL;
    const char *format, *model;
    char *text = NULL;
    uint64_t data_size = 0;
    int rc;
    if (!path || !buf || !size)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "mirror_checkpoint_describe: NULL argument");
    buf[0] = '\0';
    if ((rc = mirror__read_header_text(path, &text, &data_size, err))) return rc;
    if (!(h = (mirror__header *)mirror__zalloc(1, sizeof *h))) {
        rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "%s: out of memory", path);
    } else if (!mirror__parse_header(text, strlen(text), h)) {
        rc = mirror__error(err, strstr(h->why, "out of memory") ? MIRROR_ERR_NO_MEMORY : MIRROR_ERR_FORMAT,
                           "%s: the header is not the JSON of a checkpoint: %s", path, h->why);
    } else if (!(format = mirror__meta(h, "format")) || strcmp(format, "mirror") != 0) {
        rc = mirror__error(err, MIRROR_ERR_FORMAT, "%s: not a mirror checkpoint (no \"format\": \"mirror\")", path);
    } else if ((rc = mirror__check_header_crc(path, text, strlen(text), h, err)) == MIRROR_OK) {
        if (!(model = mirror__meta(h, "model")))
            rc = mirror__error(err, MIRROR_ERR_FORMAT, "%s: no model description (input(C,H,W);...)", path);
        else if (strlen(model) >= size)
            rc = mirror__error(err, MIRROR_ERR_ARGUMENT, "%s: the model description is %zu bytes, buf holds %zu", path,
                               strlen(model) + 1, size);
        else
            memcpy(buf, model, strlen(model) + 1);
    }
    MIRROR_FREE(text);
    if (h) mirror__header_free(h);
    MIRROR_FREE(h);
    return rc;
}

#ifndef MIRROR_NO_OUTPUTS
// >>outputs -----------------------------------------------------------------
/* The side outputs (left out by MIRROR_NO_OUTPUTS): the Chrome trace, and
   fit's CSV history, SVG plot and TensorBoard events, written as a
   checkpoint is, to a temporary file beside PATH renamed over it, so that
   PATH is always a complete file (see SIDE OUTPUTS); then the entries of
   fit's list of outputs (mirror__fit_output), through which fit reaches
   them. */

/* A side output's PATH: not empty, not too long for its temporary name, and
   a regular file if it exists. lstat, never open: a FIFO cannot block. */
static int mirror__output_path(mirror_model *m, const char *what, const char *path)
{
    struct stat st;
    int rc;
    if (!path || !*path) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: the path is NULL or empty", what);
    if ((rc = mirror__path_fits(&m->err, what, path, MIRROR__TMP_NAME, "its temporary file's name"))) return rc;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "%s: %s exists and is not a regular file (%s); a side output only replaces a regular file",
                            what, path, mirror__file_kind(st.st_mode));
    return MIRROR_OK;
}

/* A side output being written: its temporary file (a path checked by
   mirror__output_path fits in tmp). */
typedef struct mirror__output {
    FILE *f;
    char tmp[MIRROR__PATH_MAX];
} mirror__output;

/* Makes the temporary file beside path, named as a checkpoint's
   (mirror__make_tmp); 0 (errno set) on failure. */
static int mirror__output_open(mirror__output *o, const char *path)
{
    int fd, e;
    if ((fd = mirror__make_tmp(path, 0666, o->tmp, sizeof o->tmp)) < 0) return 0; /* as fopen's, less the umask */
    if ((o->f = fdopen(fd, "w")) != NULL) return 1;
    e = errno;
    close(fd);
    unlink(o->tmp);
    errno = e;
    return 0;
}

/* Flushes the temporary file to disk and renames it over path (staged not
   NULL: leaves it for fit's start to rename, its name in staged, of
   MIRROR__PATH_MAX bytes); on failure removes it, leaving path as it was,
   and returns 0 with errno set. */
static int mirror__output_close(mirror__output *o, const char *path, char *staged)
{
    int ok = fflush(o->f) == 0 && !ferror(o->f), e;
    if (ok) ok = fsync(fileno(o->f)) == 0;
    e = errno;
    if (fclose(o->f) != 0 && ok) ok = 0, e = errno;
    if (ok && staged) memcpy(staged, o->tmp, sizeof o->tmp);
    else if (ok && rename(o->tmp, path) != 0) ok = 0, e = errno;
    if (!ok) unlink(o->tmp);
    errno = e;
    return ok;
}

/* The trace into path (staged: see mirror__output_close); 0 (errno set)
   when it cannot be written. */
static int mirror__trace_file(mirror_model *m, const char *path, char *staged)
{
    mirror__output o;
    FILE *f;
    size_t i, r, at;
    if (!mirror__output_open(&o, path)) return 0;
    f = o.f;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    for (r = 0; r < m->s->replicas; r++)
        fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":%zu,"
                   "\"args\":{\"name\":\"replica %zu\"}},\n",
                m->s->rank, r, m->s->first + r);
    for (i = 0; i < m->trace.count; i++) { /* oldest first */
        const mirror__span *sp;
        at = (m->trace.next + m->trace.cap - m->trace.count + i) % m->trace.cap;
        sp = &m->trace.spans[at];
        fprintf(f, "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%zu,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
                   "\"args\":{\"step\":%llu}},\n",
                mirror__phase_names[sp->phase], m->s->rank, sp->replica, sp->t0 * 1e6, (sp->t1 - sp->t0) * 1e6,
                (unsigned long long)sp->step);
    }
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%zu,\"args\":{\"name\":\"mirror, rank %zu\"}}\n]}\n",
            m->s->rank, m->s->rank);
    return mirror__output_close(&o, path, staged);
}

static int mirror__trace_write(mirror_model *m, const char *path)
{
    int rc;
    if ((rc = mirror__output_path(m, "mirror_trace_write", path))) return rc;
    if (!mirror__trace_file(m, path, NULL))
        return mirror__fail(m, MIRROR_ERR_IO, "mirror_trace_write: %s: cannot write the trace: %s", path,
                            strerror(errno));
    return MIRROR_OK;
}

MIRROR_API int mirror_trace_write(mirror_model *m, const char *path)
{
    int rc;
    if ((rc = mirror__check_built(m, "mirror_trace_write"))) return rc;
    {
        MIRROR__LOCKED(m, "mirror_trace_write", mirror__trace_write(m, path));
    }
}

/* CRC-32C (Castagnoli's polynomial, TFRecord's), masked as TFRecord
   stores it: rotated right by 15 bits, plus a constant. */
static uint32_t mirror__masked_crc32c(const unsigned char *p, size_t n)
{
    uint32_t c = mirror__crc(0x82F63B78u, 0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- fit's curves: a CSV history and an SVG plot of the epoch logs ---- */

static const char mirror__history_header[] =
    "epoch,steps,samples,train_loss,train_acc,val_loss,val_acc,lr,grad_norm,loss_scale,skipped,seconds,"
    "samples_per_s\n";

/* The history (CSV) of pts (staged: see mirror__output_close); 0 (errno
   set) when it cannot be written. */
static int mirror__write_history(const char *path, const mirror__curve_point *pts, size_t n, char *staged)
{
    mirror__output o;
    FILE *f;
    size_t i;
    if (!mirror__output_open(&o, path)) return 0;
    f = o.f;
    fputs(mirror__history_header, f);
    for (i = 0; i < n; i++) {
        const mirror_epoch_log *l = &pts[i].log;
        fprintf(f, "%.9g,%zu,%zu,%.9g,%.9g,", pts[i].x, l->steps, l->samples, l->train_loss, l->train_acc);
        if (l->val_loss != -1.0) fprintf(f, "%.9g,%.9g,", l->val_loss, l->val_acc);
        else fprintf(f, ",,");
        fprintf(f, "%.9g,%.9g,%.9g,%llu,%.6f,%.1f\n", l->lr, l->grad_norm, l->loss_scale, (unsigned long long)l->skipped,
                l->seconds, l->samples_per_s);
    }
    return mirror__output_close(&o, path, staged);
}

/* A count read back from a history: a whole number that a size_t holds. */
static int mirror__whole(double v)
{
    return v >= 0.0 && v < 1e18 && v == floor(v);
}

/* One row of a history, as mirror__write_history writes it, into *p; 0 when
   it is not one (val_loss and val_acc may be empty: no validation). */
static int mirror__history_row(const char *line, mirror__curve_point *p)
{
    double v[13];
    const char *at = line;
    char *end;
    size_t i;
    for (i = 0; i < 13; i++) {
        if ((i == 5 || i == 6) && *at == ',') {
            v[i] = -1.0;
        } else {
            v[i] = strtod(at, &end);
            if (end == at) return 0;
            at = end;
        }
        if (*at++ != (i < 12 ? ',' : '\n')) return 0;
    }
    if (*at || !(v[0] > 0.0 && v[0] < 1e18) || !mirror__whole(v[1]) || !mirror__whole(v[2]) || !mirror__whole(v[10]))
        return 0;
    memset(p, 0, sizeof *p);
    p->x = v[0];
    p->log.epoch = (size_t)ceil(v[0]);
    p->log.steps = (size_t)v[1], p->log.samples = (size_t)v[2];
    p->log.train_loss = v[3], p->log.train_acc = v[4], p->log.val_loss = v[5], p->log.val_acc = v[6];
    p->log.lr = v[7], p->log.grad_norm = v[8], p->log.loss_scale = v[9], p->log.skipped = (uint64_t)v[10];
    p->log.seconds = v[11], p->log.samples_per_s = v[12];
    return 1;
}

/* A line of the plot, drawn point by point: a polyline, or a dot where it
   has one point (a run of one epoch). Ending it starts the next. A dashed
   series (dash: its stroke-dasharray, NULL: solid) has hollow dots. */
typedef struct mirror__svg_line {
    FILE *f;
    const char *color, *dash;
    size_t points;
    double x, y; /* the last point */
} mirror__svg_line;

static void mirror__svg_line_end(mirror__svg_line *l)
{
    if (l->points >= 2) fprintf(l->f, "\"/>\n");
    if (l->points == 1)
        fprintf(l->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\" stroke=\"%s\" stroke-width=\"2\"/>\n", l->x,
                l->y, l->dash ? "white" : l->color, l->color);
    l->points = 0;
}

static void mirror__svg_line_begin(mirror__svg_line *l, FILE *f, const char *color, const char *dash)
{
    l->f = f;
    l->color = color;
    l->dash = dash;
    l->points = 0;
    l->x = l->y = 0.0;
}

static void mirror__svg_line_point(mirror__svg_line *l, double x, double y)
{
    if (++l->points == 2) { /* a line after all: from the point held */
        fprintf(l->f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"", l->color);
        if (l->dash) fprintf(l->f, " stroke-dasharray=\"%s\"", l->dash);
        fprintf(l->f, " points=\"%.1f,%.1f ", l->x, l->y);
    }
    if (l->points >= 2) fprintf(l->f, "%.1f,%.1f ", x, y);
    l->x = x;
    l->y = y;
}

/* A panel's value axis: its ends (their log10 on a log scale) and its
   ticks, at round numbers: on a linear axis every 1, 2 or 5 times a power
   of ten, the ends the multiples of that step around the data; on a log
   axis the decades around the data (with their 2 and 5 where they are
   three or fewer, every k-th where they are more than eight). */
typedef struct mirror__svg_axis {
    int log;
    double lo, hi, step;
    double tick[32];
    size_t ticks;
} mirror__svg_axis;

static void mirror__svg_axis_of(mirror__svg_axis *a, double lo, double hi, int log_scale)
{
    static const double mult[3] = {1.0, 2.0, 5.0};
    double p, k;
    size_t i;
    a->log = log_scale, a->ticks = 0;
    if (log_scale) {
        double first = floor(log10(lo)), last = ceil(log10(hi)), every = ceil((last - first) / 8.0);
        a->lo = first, a->hi = last, a->step = every;
        for (p = first; p <= last + 0.5; p += 1.0)
            for (i = 0; i < (last - first <= 3.0 ? 3u : 1u); i++) {
                double v = mult[i] * pow(10.0, p);
                if ((i || fmod(p - first, every) == 0.0) && log10(v) <= last + 1e-9 && a->ticks < 32)
                    a->tick[a->ticks++] = v;
            }
        return;
    }
    /* the smallest step of 1, 2 or 5 x 10^e that cuts the span in at most 5 */
    for (p = pow(10.0, floor(log10((hi - lo) / 5.0))), i = 0; (hi - lo) / (mult[i] * p) > 5.0 + 1e-9;)
        if (++i == 3) i = 0, p *= 10.0;
    a->step = mult[i] * p;
    a->lo = floor(lo / a->step + 1e-9) * a->step, a->hi = ceil(hi / a->step - 1e-9) * a->step;
    for (k = floor(lo / a->step + 1e-9); a->ticks < 32 && k * a->step <= a->hi + a->step / 2; k += 1.0)
        a->tick[a->ticks++] = k * a->step + 0.0; /* + 0.0: never -0 */
}

/* Where v falls on the axis, 0 at its low end, 1 at its high end. */
static double mirror__svg_axis_at(const mirror__svg_axis *a, double v)
{
    return ((a->log ? log10(v) : v) - a->lo) / (a->hi - a->lo);
}

/* A tick's label: a log axis's as %g; a linear one's with the decimals of
   its step (0.05: two), so that 0.1 and 0.15 read alike. */
static void mirror__svg_tick_label(const mirror__svg_axis *a, double v, char *out, size_t size)
{
    int decimals = a->log || a->step >= 1.0 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
    if (a->log || fabs(v) >= 1e15) snprintf(out, size, "%g", v);
    else snprintf(out, size, "%.*f", decimals, v);
}

/* The series of a panel: training solid, validation dashed, so that they
   are told apart without their colours too. */
static const char *const mirror__svg_color[2] = {"#3182bd", "#e6550d"};
static const char *const mirror__svg_dash[2] = {NULL, "6,4"};

/* One panel of the plot at (x0, y0), w x h: a series of training values
   (and of validation values, where there are), against the epochs. The
   loss goes on a log scale where it spans more than a decade. */
static void mirror__svg_panel(FILE *f, double x0, double y0, double w, double h, const char *title,
                              const mirror__curve_point *pts, size_t n, int acc)
{
    const double left = 64, bottom = 36, top = 28, right = 12;
    double lo = 1e300, hi = -1e300, px = w - left - right, py = h - top - bottom;
    double first = n ? pts[0].x : 0, span = n ? pts[n - 1].x - first : 0; /* the epochs shown */
    size_t i, k, series, labels, e;
    int validated = 0;
    mirror__svg_axis axis;
    char label[48];
    for (i = 0; i < n; i++) {
        const mirror_epoch_log *l = &pts[i].log;
        double v[2];
        v[0] = acc ? l->train_acc : l->train_loss;
        v[1] = acc ? l->val_acc : l->val_loss;
        validated |= l->val_loss != -1.0;
        for (k = 0; k < 2; k++)
            if (v[k] == v[k] && v[k] > -1e300 && v[k] < 1e300 && (k == 0 || l->val_loss != -1.0)) {
                if (v[k] < lo) lo = v[k];
                if (v[k] > hi) hi = v[k];
            }
    }
    if (lo > hi) lo = 0, hi = 1;
    if (hi - lo < 1e-12) lo -= 0.5, hi += 0.5;
    mirror__svg_axis_of(&axis, lo, hi, !acc && lo > 0 && hi > 10.0 * lo);
    fprintf(f, "<g transform=\"translate(%.1f,%.1f)\">\n", x0, y0);
    fprintf(f, "<text x=\"%.1f\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n", left + px / 2, title);
    fprintf(f, "<text class=\"ylabel\" transform=\"rotate(-90 14 %.1f)\" x=\"14\" y=\"%.1f\" text-anchor=\"middle\" "
               "font-size=\"12\">%s%s</text>\n",
            top + py / 2, top + py / 2, title, axis.log ? " (log scale)" : "");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", left,
            top, px, py);
    for (k = 0; k < axis.ticks; k++) { /* value ticks and grid */
        double y = top + py - py * mirror__svg_axis_at(&axis, axis.tick[k]);
        mirror__svg_tick_label(&axis, axis.tick[k], label, sizeof label);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left, y, left + px, y);
        fprintf(f, "<text class=\"ytick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%s</text>\n",
                left - 4, y + 4, label);
    }
    labels = (size_t)(span + 1.0); /* epoch ticks at the whole epochs shown, at most about 10 labelled */
    for (e = (size_t)ceil(first - 1e-9); n && (double)e <= pts[n - 1].x + 1e-9; e++) {
        double x = left + (span > 1e-9 ? px * ((double)e - first) / span : px / 2);
        if (labels <= 10 || (e - (size_t)ceil(first - 1e-9)) % ((labels + 9) / 10) == 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%zu</text>\n", x,
                    top + py + 14, e);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">epoch</text>\n", left + px / 2,
            top + py + 30);
    for (series = 0; series < 2; series++) {
        mirror__svg_line line;
        if (series && !validated) break;
        mirror__svg_line_begin(&line, f, mirror__svg_color[series], mirror__svg_dash[series]);
        for (i = 0; i < n; i++) {
            const mirror_epoch_log *l = &pts[i].log;
            double v = series ? (acc ? l->val_acc : l->val_loss) : (acc ? l->train_acc : l->train_loss);
            double x = left + (span > 1e-9 ? px * (pts[i].x - first) / span : px / 2);
            int within = pts[i].x != floor(pts[i].x); /* a curve_every point: the epoch's running mean */
            if (series && l->val_loss == -1.0) continue; /* a point within an epoch */
            if (!(v == v) || v < lo || v > hi) continue; /* NaN: a gap */
            if (within && i > 0 && ceil(pts[i - 1].x) != ceil(pts[i].x))
                mirror__svg_line_end(&line); /* a new epoch's mean starts afresh: a new line */
            mirror__svg_line_point(&line, x, top + py - py * mirror__svg_axis_at(&axis, v));
        }
        mirror__svg_line_end(&line);
    }
    { /* the legend, where the curves are not: a swatch of each series' line (its colour and dashes), its name */
        size_t shown = validated ? 2 : 1;
        double lx = left + px - 104, ly = acc ? top + py - 8 - 16 * (double)shown : top + 6;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"98\" height=\"%.1f\" fill=\"white\" fill-opacity=\"0.85\" "
                   "stroke=\"#ccc\"/>\n",
                lx, ly, 4 + 16 * (double)shown);
        for (series = 0; series < shown; series++) {
            double y = ly + 12 + 16 * (double)series;
            fprintf(f, "<line class=\"swatch\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-width=\"2\"",
                    lx + 6, y - 4, lx + 30, y - 4, mirror__svg_color[series]);
            if (mirror__svg_dash[series]) fprintf(f, " stroke-dasharray=\"%s\"", mirror__svg_dash[series]);
            fprintf(f, "/>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#222\">%s</text>\n", lx + 36, y,
                    series ? "validation" : "training");
        }
    }
    fprintf(f, "</g>\n");
}

/* Loss (and, for a classifier, accuracy) by epoch, training and validation
   (staged: see mirror__output_close). */
static int mirror__write_plot(const char *path, const mirror__curve_point *pts, size_t n, int classify, char *staged)
{
    mirror__output o;
    FILE *f;
    double w = 420, h = 300;
    if (!mirror__output_open(&o, path)) return 0;
    f = o.f;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\">\n",
            classify ? 2 * w : w, h);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    mirror__svg_panel(f, 0, 0, w, h, "loss", pts, n, 0);
    if (classify) mirror__svg_panel(f, w, 0, w, h, "accuracy", pts, n, 1);
    fprintf(f, "</svg>\n");
    return mirror__output_close(&o, path, staged);
}

/* A resumed fit continues its history (rank 0): the rows of the file at
   d->history up to its cursor, step initial_step of epoch initial_epoch
   (of `steps`), into *pts; those after it (the rest of the epoch in
   progress, and later ones) are dropped, as the run redoes them. A file
   that is missing, or that is not a history fit wrote, gives none and a
   notice. Only running out of memory fails. */
static int mirror__read_history(mirror_model *m, const mirror_fit_desc *d, size_t steps, mirror__curve_point **pts,
                                size_t *n, size_t *cap)
{
    /* points lie at whole steps, epoch - 1 + s / steps: half a step beyond the cursor tells them apart */
    double cursor = (double)d->initial_epoch + ((double)d->initial_step + 0.5) / (double)steps;
    char line[1024], notice[1200];
    mirror__curve_point p;
    struct stat st;
    size_t row = 1;
    FILE *f = NULL;
    int fd = open(d->history, O_RDONLY | O_NOFOLLOW | O_NONBLOCK), good;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !(f = fdopen(fd, "r")))) close(fd);
    if (!f) {
        snprintf(notice, sizeof notice, "mirror_fit: %s: no history to continue (%s); it starts at epoch %zu",
                 d->history, fd < 0 ? strerror(errno) : "not a regular file", d->initial_epoch + 1);
        mirror__log(MIRROR_LOG_NOTICE, notice);
        return MIRROR_OK;
    }
    good = fgets(line, sizeof line, f) && !strcmp(line, mirror__history_header);
    while (good && fgets(line, sizeof line, f)) {
        row++;
        if (!(good = mirror__history_row(line, &p))) break;
        if (p.x > cursor) continue; /* after the step resumed at */
        p.log.epochs = d->epochs;
        if (!mirror__curve_add(pts, n, cap, p.x, &p.log)) {
            fclose(f);
            return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_fit: out of memory for the history");
        }
    }
    if (ferror(f)) good = 0;
    fclose(f);
    if (!good) {
        *n = 0;
        snprintf(notice, sizeof notice,
                 "mirror_fit: %s: not a history that mirror_fit wrote (line %zu); a new one starts at epoch %zu",
                 d->history, row, d->initial_epoch + 1);
        mirror__log(MIRROR_LOG_NOTICE, notice);
    }
    return MIRROR_OK;
}

/* Once training has begun, a side output written (ok) or not: its bit in
   *failed while its writes fail, and a notice when they start to (errno
   says why). Training goes on; the file keeps its last complete version. */
static void mirror__output_result(unsigned *failed, unsigned bit, int ok, const char *what, const char *path)
{
    char notice[1200];
    if (ok) {
        *failed &= ~bit;
        return;
    }
    if (!(*failed & bit)) {
        snprintf(notice, sizeof notice,
                 "mirror_fit: %s: cannot write the %s (%s); the file keeps its last complete version, and the "
                 "training and its checkpoints go on as if it had been written",
                 path, what, strerror(errno));
        mirror__log(MIRROR_LOG_NOTICE, notice);
    }
    *failed |= bit;
}

/* ---- fit's TensorBoard events ---- */
/* TensorBoard reads a directory of event files: records framed as
   TFRecord's (the length as a little-endian uint64, its masked CRC-32C,
   the bytes, their masked CRC-32C), each an Event protocol buffer. The
   few fields written are encoded here by hand, field number and wire
   type first:
     Event      1 wall_time (double), 2 step (int64), 3 file_version
                (string), 5 summary (Summary), 7 session_log (SessionLog)
     Summary    1 value (a Value, repeated)
     Value      1 tag (string), 2 simple_value (float)
     SessionLog 1 status (enum; START is 1)
   A fit starts its own file and opens it with SessionLog START at the
   step after the model's: TensorBoard then drops what an earlier file of
   the directory holds from that step on, the steps a resumed run runs
   again. */

/* A protocol buffer being written into a fixed buffer; `over` once full. */
typedef struct mirror__pb {
    unsigned char *p;
    size_t len, cap;
    int over;
} mirror__pb;

static void mirror__pb_byte(mirror__pb *b, unsigned v)
{
    if (b->len < b->cap) b->p[b->len++] = (unsigned char)v;
    else b->over = 1;
}

static void mirror__pb_varint(mirror__pb *b, uint64_t v)
{
    for (; v >= 0x80; v >>= 7) mirror__pb_byte(b, (unsigned)(v & 0x7F) | 0x80);
    mirror__pb_byte(b, (unsigned)v);
}

/* Field `field` of wire type 2: a length, then the bytes. */
static void mirror__pb_bytes(mirror__pb *b, unsigned field, const void *data, size_t n)
{
    size_t i;
    mirror__pb_varint(b, field << 3 | 2);
    mirror__pb_varint(b, n);
    for (i = 0; i < n; i++) mirror__pb_byte(b, ((const unsigned char *)data)[i]);
}

/* Field `field` of wire type 1 (bytes 8) or 5 (bytes 4): v little-endian. */
static void mirror__pb_fixed(mirror__pb *b, unsigned field, uint64_t v, int bytes)
{
    int i;
    mirror__pb_varint(b, field << 3 | (bytes == 8 ? 1u : 5u));
    for (i = 0; i < bytes; i++) mirror__pb_byte(b, (unsigned)(v >> (8 * i)) & 0xFF);
}

/* A Summary's Value: tag and simple_value. */
static void mirror__tb_value(mirror__pb *summary, const char *tag, double v)
{
    unsigned char raw[80];
    mirror__pb value = {raw, 0, sizeof raw, 0};
    mirror__pb_bytes(&value, 1, tag, strlen(tag));
    mirror__pb_fixed(&value, 2, mirror_hd_bits((float)v), 4);
    mirror__pb_bytes(summary, 1, raw, value.len);
    summary->over |= value.over;
}

/* One Event at step, with summary (may be NULL), the file's version (may
   be NULL) or a session's start, appended to fd as a TFRecord record; -1
   (errno set) when it cannot be written, and then the file is cut back
   to where it was, so that it holds whole records only. */
static int mirror__tb_event(int fd, uint64_t step, const mirror__pb *summary, const char *version, int start)
{
    static const unsigned char session_start[] = {0x08, 0x01};
    unsigned char raw[1024], head[12], tail[4];
    mirror__pb e = {raw, 0, sizeof raw, 0};
    struct timespec now;
    double wall;
    uint64_t bits;
    uint32_t crc;
    off_t at;
    int i;
    clock_gettime(CLOCK_REALTIME, &now);
    wall = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    memcpy(&bits, &wall, 8);
    mirror__pb_fixed(&e, 1, bits, 8);
    mirror__pb_varint(&e, 2 << 3 | 0);
    mirror__pb_varint(&e, step);
    if (version) mirror__pb_bytes(&e, 3, version, strlen(version));
    if (summary) mirror__pb_bytes(&e, 5, summary->p, summary->len);
    if (start) mirror__pb_bytes(&e, 7, session_start, sizeof session_start);
    if (e.over || (summary && summary->over)) return errno = EOVERFLOW, -1;
    for (i = 0; i < 8; i++) head[i] = (unsigned char)((uint64_t)e.len >> (8 * i));
    crc = mirror__masked_crc32c(head, 8);
    for (i = 0; i < 4; i++) head[8 + i] = (unsigned char)(crc >> (8 * i));
    crc = mirror__masked_crc32c(raw, e.len);
    for (i = 0; i < 4; i++) tail[i] = (unsigned char)(crc >> (8 * i));
    if ((at = lseek(fd, 0, SEEK_END)) < 0) return -1;
    if (mirror__write_all(fd, head, sizeof head) || mirror__write_all(fd, raw, e.len) ||
        mirror__write_all(fd, tail, sizeof tail)) {
        int was = errno;
        if (ftruncate(fd, at) != 0) {} /* the record's start: what a reader reads stays whole */
        return errno = was, -1;
    }
    return 0;
}

/* A new event file in the directory (mirror__tb_start made it where it
   was missing), named as TensorBoard looks for them; its first records are
   the version and the session's start. TensorBoard reads a directory's
   files in the order of their names, which start with the time in
   seconds: a file's time is made later than every other file's there, so
   that a fit started within the same second still comes after. Rank 0,
   before the first step. */
/* The most an event file's name adds to its directory: a slash, the
   prefix, the time, the host's name (63 bytes at most), the process id and
   a count. */
#define MIRROR__TB_NAME (sizeof "/events.out.tfevents." - 1 + 20 + 1 + 63 + 1 + 20 + 1 + 2)

static int mirror__tb_open(mirror_model *m, const char *dir, int *fd, char *path, size_t size)
{
    static const char prefix[] = "events.out.tfevents.";
    char host[64];
    long long now = (long long)time(NULL);
    DIR *d;
    struct dirent *e;
    size_t i;
    int k;
    if ((d = opendir(dir)) != NULL) {
        while ((e = readdir(d)) != NULL)
            if (!strncmp(e->d_name, prefix, sizeof prefix - 1)) {
                long long t = strtoll(e->d_name + sizeof prefix - 1, NULL, 10);
                if (t >= now && t < now + 1000000) now = t + 1;
            }
        closedir(d);
    }
    if (gethostname(host, sizeof host) != 0) strcpy(host, "host");
    host[sizeof host - 1] = '\0';
    for (i = 0; host[i]; i++)
        if (host[i] == '/') host[i] = '_';
    for (k = 0, *fd = -1; *fd < 0 && k < 100; k++) {
        int n = snprintf(path, size, "%s/%s%010lld.%s.%ld.%d", dir, prefix, now, host, (long)getpid(), k);
        if (n < 0 || (size_t)n >= size) /* mirror__tb_check saw to it; never a name cut short */
            return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                                "mirror_fit: the TensorBoard directory %s: an event file's name in it would pass the "
                                "system's limit of %d bytes for a path (PATH_MAX)",
                                dir, MIRROR__PATH_MAX - 1);
        *fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666); /* as fopen's, less the umask */
        if (*fd < 0 && errno != EEXIST) break;
    }
    if (*fd < 0 || mirror__tb_event(*fd, m->steps, NULL, "brain.Event:2", 0) ||
        mirror__tb_event(*fd, m->steps + 1, NULL, NULL, 1)) {
        int was = errno;
        if (*fd >= 0) close(*fd), unlink(path), *fd = -1;
        return mirror__fail(m, MIRROR_ERR_IO, "mirror_fit: cannot write TensorBoard events in %s: %s", dir,
                            strerror(was));
    }
    return MIRROR_OK;
}

/* The scalars that apply to a model (MIRROR__TB_*): the gradient's norm
   where clipping is on (the step computes it for the clipping alone:
   without, the log holds 0), the loss scale where the loss is scaled
   (fp16; bf16's scale is 1), the skipped steps in mixed precision (fp32
   never skips a step: a non-finite one fails it). */
enum { MIRROR__TB_NORM = 1, MIRROR__TB_SCALE = 2, MIRROR__TB_SKIPS = 4 };
static unsigned mirror__tb_applies(const mirror_model *m)
{
    unsigned which = 0;
    if (m->desc.optimizer.clip_norm > 0.0f) which |= MIRROR__TB_NORM;
    if (m->format && m->desc.loss_scale.kind != MIRROR_SCALE_NONE) which |= MIRROR__TB_SCALE;
    if (m->format) which |= MIRROR__TB_SKIPS;
    return which;
}

/* A curve point as one Event at the model's step: the epoch (with a
   fraction within one), the losses and accuracies, the rate, the gradient
   norm, the loss scale, the skipped steps (those that apply: `which`), the
   speed. */
static int mirror__tb_point(int fd, uint64_t step, double x, const mirror_epoch_log *l, int classify, unsigned which)
{
    unsigned char raw[768];
    mirror__pb summary = {raw, 0, sizeof raw, 0};
    mirror__tb_value(&summary, "epoch", x);
    mirror__tb_value(&summary, "loss/train", l->train_loss);
    if (classify) mirror__tb_value(&summary, "accuracy/train", l->train_acc);
    if (l->val_loss != -1.0) {
        mirror__tb_value(&summary, "loss/validation", l->val_loss);
        if (classify) mirror__tb_value(&summary, "accuracy/validation", l->val_acc);
    }
    mirror__tb_value(&summary, "learning_rate", l->lr);
    if (which & MIRROR__TB_NORM) mirror__tb_value(&summary, "grad_norm", l->grad_norm);
    if (which & MIRROR__TB_SCALE) mirror__tb_value(&summary, "loss_scale", l->loss_scale);
    if (which & MIRROR__TB_SKIPS) mirror__tb_value(&summary, "skipped_steps", (double)l->skipped);
    mirror__tb_value(&summary, "samples_per_s", l->samples_per_s);
    return mirror__tb_event(fd, step, &summary, NULL, 0) == 0;
}

/* Whether out names one of the files of checkpoint PATH: PATH, PATH.1 ..
   PATH.(keep - 1) (keep 0: any number) and PATH.lock, by name, or as the
   same file as one of them that exists. */
static int mirror__names_checkpoint(const char *out, const char *path, size_t keep)
{
    char name[MIRROR__PATH_MAX];
    const char *no, *np, *rest;
    struct stat so, sp;
    size_t i;
    if (mirror__same_dir(out, path, &no, &np) && !strncmp(no, np, strlen(np))) {
        rest = no + strlen(np);
        if (!*rest || !strcmp(rest, ".lock")) return 1;
        if (rest[0] == '.' && rest[1] >= '1' && rest[1] <= '9' && !rest[1 + strspn(rest + 1, "0123456789")])
            return !keep || strtoull(rest + 1, NULL, 10) < keep; /* PATH.k (too many digits: the largest value) */
    }
    if (lstat(out, &so) != 0) return 0;
    for (i = 0; !keep || i < keep + 1; i++) { /* PATH.lock, PATH, PATH.1, ... as far as they exist */
        int n;
        if (i == 0) n = snprintf(name, sizeof name, "%s.lock", path);
        else if (i == 1) n = snprintf(name, sizeof name, "%s", path);
        else n = snprintf(name, sizeof name, "%s.%zu", path, i - 1);
        if (n < 0 || (size_t)n >= sizeof name || lstat(name, &sp) != 0) { /* missing, or too long to be a file's */
            if (i >= 2) break;
            continue;
        }
        if (sp.st_dev == so.st_dev && sp.st_ino == so.st_ino) return 1;
    }
    return 0;
}

/* Whether out names the file the model's parameters were loaded from
   (mirror_weights_source): as the same file, or by name (a checkpoint's
   kept files too). */
static int mirror__names_source(const mirror_model *m, const char *out)
{
    struct stat so;
    if (!m->source.told.path) return 0;
    if (m->source.has_file && stat(out, &so) == 0 && (uint64_t)so.st_dev == m->source.dev &&
        (uint64_t)so.st_ino == m->source.ino)
        return 1;
    return m->source.told.checkpoint ? mirror__names_checkpoint(out, m->source.told.path, 0)
                                     : mirror__same_file(out, m->source.told.path);
}

/* ---- predictions as a .npy file ---- */

/* The .npy preamble of a float32 array of shape (n, k): magic, version
   1.0, the header's length, and its dict padded with spaces to a multiple
   of 64 bytes, ending in a newline (NumPy's own layout). */
static size_t mirror__npy_preamble(unsigned char *p, size_t size, size_t n, size_t k)
{
    int len = snprintf((char *)p + 10, size - 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }",
                       n, k);
    size_t total = 10 + (size_t)len + 1, padded = (total + 63) / 64 * 64;
    memcpy(p, "\x93NUMPY\x01\x00", 8);
    p[8] = (unsigned char)((padded - 10) & 0xff), p[9] = (unsigned char)((padded - 10) >> 8);
    memset(p + 10 + len, ' ', padded - total);
    p[padded - 1] = '\n';
    return padded;
}

static int mirror__predict_write(mirror_model *m, const float *x, size_t n, int probabilities, const char *path,
                                 const char *const *inputs)
{
    static const char what[] = "mirror_predict_write";
    unsigned char head[192], le[4 * 256];
    size_t k, i, j;
    float *out;
    mirror__output o;
    int rc, ok;
    if ((rc = mirror__check_built(m, what)) || (rc = mirror__output_path(m, what, path))) return rc;
    if (mirror__names_source(m, path))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "%s: %s would overwrite %s, the %s the model's parameters were loaded from; name another "
                            "path",
                            what, path, m->source.told.path, m->source.told.checkpoint ? "checkpoint" : "weights file");
    for (i = 0; inputs && inputs[i]; i++)
        if (mirror__same_file(path, inputs[i]))
            return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: %s would overwrite the input %s; name another path", what,
                                path, inputs[i]);
    k = m->sizes.out;
    if (!(out = (float *)mirror__alloc(n, k * sizeof(float))))
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "%s: out of memory", what);
    rc = probabilities ? mirror__predict_proba(m, x, n, out) : mirror__predict(m, x, n, out);
    if (rc == MIRROR_OK && mirror__leads(m)) { /* every process holds every row; one writes them */
        ok = mirror__output_open(&o, path);
        if (ok) {
            ok = fwrite(head, 1, mirror__npy_preamble(head, sizeof head, n, k), o.f) > 0;
            for (i = 0; ok && i < n * k; i += 256) { /* little-endian whatever the host */
                size_t c = MIRROR__MIN(256, n * k - i);
                for (j = 0; j < c; j++) {
                    uint32_t b;
                    memcpy(&b, out + i + j, 4);
                    le[4 * j] = (unsigned char)b, le[4 * j + 1] = (unsigned char)(b >> 8);
                    le[4 * j + 2] = (unsigned char)(b >> 16), le[4 * j + 3] = (unsigned char)(b >> 24);
                }
                ok = fwrite(le, 4, c, o.f) == c;
            }
            ok = mirror__output_close(&o, path, NULL) && ok;
        }
        if (!ok)
            rc = mirror__fail(m, MIRROR_ERR_IO, "%s: %s: cannot write the predictions: %s", what, path,
                              strerror(errno));
    }
    MIRROR_FREE(out);
    return rc;
}

MIRROR_API int mirror_predict_write(mirror_model *m, const float *x, size_t n, int probabilities, const char *path,
                                    const char *const *inputs)
{
    int rc;
    if ((rc = mirror__check_built(m, "mirror_predict_write"))) return rc;
    {
        MIRROR__LOCKED(m, "mirror_predict_write", mirror__predict_write(m, x, n, probabilities, path, inputs));
    }
}

/* ---- fit's list of outputs ---- */

/* Before the first step (rank 0): output i's path names no checkpoint
   file (fit's, or the one it resumed from) and not the file the
   parameters were loaded from. The TensorBoard directory neither: made
   where a checkpoint will be saved, it would fail that save after the
   whole run. */
static int mirror__output_spares(mirror_model *m, const mirror__fit_run *f, size_t i)
{
    const mirror_fit_desc *d = &f->d;
    const char *path = MIRROR__OUTPUT_PATH(f, i), *name = f->outs[i].name;
    size_t keep = d->checkpoint_keep ? d->checkpoint_keep : 3;
    if (d->checkpoint && mirror__names_checkpoint(path, d->checkpoint, keep))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "mirror_fit: the %s %s would overwrite the checkpoint %s or one kept beside it; name "
                            "another path",
                            name, path, d->checkpoint);
    if (d->resumed_from && mirror__names_checkpoint(path, d->resumed_from, 0))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "mirror_fit: the %s %s would overwrite the checkpoint %s that the run resumed from, or "
                            "one kept beside it; name another path",
                            name, path, d->resumed_from);
    if (mirror__names_source(m, path))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "mirror_fit: the %s %s would overwrite %s, the %s the model's parameters were loaded "
                            "from; name another path",
                            name, path, m->source.told.path,
                            m->source.told.checkpoint ? "checkpoint (or one kept beside it)" : "weights file");
    return MIRROR_OK;
}

/* A file that is written whole (history, plot, trace): a usable path (no
   FIFO), sparing the checkpoints. */
static int mirror__file_output_check(mirror_model *m, const mirror__fit_run *f, size_t i)
{
    char what[64];
    int rc;
    snprintf(what, sizeof what, "mirror_fit: the %s", f->outs[i].name);
    if ((rc = mirror__output_path(m, what, MIRROR__OUTPUT_PATH(f, i)))) return rc;
    return mirror__output_spares(m, f, i);
}

/* Output i's directory (the first len bytes of its path) made where it
   is missing, as mkdir -p makes it, into what the output made. */
static int mirror__output_dirs(mirror_model *m, mirror__fit_run *f, size_t i, size_t len)
{
    char what[80];
    mirror__made *made = &f->files[i].made;
    snprintf(what, sizeof what, "mirror_fit: the %s%s", f->outs[i].name,
             len == strlen(MIRROR__OUTPUT_PATH(f, i)) ? "" : "'s directory");
    made->dirs = len;
    return mirror__make_dirs(&m->err, what, MIRROR__OUTPUT_PATH(f, i), len, &made->made);
}

/* A file output's first version, written before the first step into a
   temporary file (staged) that fit's start renames over its path once
   every output is ready: a fit refused before its first step leaves
   nothing (mirror__fit_discard). 0 (errno set) when it cannot be written. */
static int mirror__staged(mirror__fit_run *f, size_t i, int ok)
{
    f->files[i].staged = f->files[i].made.file = ok;
    return ok;
}

/* The history: a resumed run's rows read back, then written (a failure
   fails fit); rewritten whole from the points at each epoch's end. */
static int mirror__history_open(mirror_model *m, mirror__fit_run *f, size_t i)
{
    const mirror_fit_desc *d = &f->d;
    const char *path = MIRROR__OUTPUT_PATH(f, i);
    int rc;
    if ((d->initial_epoch || d->initial_step) &&
        (rc = mirror__read_history(m, d, f->steps, &f->logs, &f->nlogs, &f->logs_cap)))
        return rc;
    if ((rc = mirror__output_dirs(m, f, i, mirror__dir_length(path)))) return rc;
    if (!mirror__staged(f, i, mirror__write_history(path, f->logs, f->nlogs, f->files[i].path)))
        return mirror__fail(m, MIRROR_ERR_IO, "mirror_fit: %s: cannot write the history: %s", path, strerror(errno));
    return MIRROR_OK;
}

static void mirror__history_rewrite(mirror_model *m, mirror__fit_run *f, size_t i)
{
    const char *path = MIRROR__OUTPUT_PATH(f, i);
    (void)m;
    mirror__output_result(&f->failed, MIRROR_OUTPUT_HISTORY, mirror__write_history(path, f->logs, f->nlogs, NULL),
                          "history", path);
}

/* The plot: written at the start (the points a resumed history holds) and
   at each epoch's end. */
static int mirror__plot_open(mirror_model *m, mirror__fit_run *f, size_t i)
{
    const char *path = MIRROR__OUTPUT_PATH(f, i);
    int rc;
    if ((rc = mirror__output_dirs(m, f, i, mirror__dir_length(path)))) return rc;
    if (!mirror__staged(f, i,
                        mirror__write_plot(path, f->logs, f->nlogs, m->desc.loss == MIRROR_LOSS_SOFTMAX_CE,
                                           f->files[i].path)))
        return mirror__fail(m, MIRROR_ERR_IO, "mirror_fit: %s: cannot write the plot: %s", path, strerror(errno));
    return MIRROR_OK;
}

static void mirror__plot_rewrite(mirror_model *m, mirror__fit_run *f, size_t i)
{
    const char *path = MIRROR__OUTPUT_PATH(f, i);
    mirror__output_result(&f->failed, MIRROR_OUTPUT_PLOT,
                          mirror__write_plot(path, f->logs, f->nlogs, m->desc.loss == MIRROR_LOSS_SOFTMAX_CE, NULL),
                          "plot", path);
}

/* The trace: written empty at the start, so that a path that cannot be
   fails fit then, and at the end, after the checkpoint, which it must
   never cost. */
static int mirror__trace_open(mirror_model *m, mirror__fit_run *f, size_t i)
{
    const char *path = MIRROR__OUTPUT_PATH(f, i);
    int rc;
    if ((rc = mirror__output_dirs(m, f, i, mirror__dir_length(path)))) return rc;
    if (!mirror__staged(f, i, mirror__trace_file(m, path, f->files[i].path)))
        return mirror__fail(m, MIRROR_ERR_IO, "mirror_fit: %s: cannot write the trace: %s", path, strerror(errno));
    return MIRROR_OK;
}

static void mirror__trace_end(mirror_model *m, mirror__fit_run *f, size_t i)
{
    const char *path = MIRROR__OUTPUT_PATH(f, i);
    if (m->trace.count)
        mirror__output_result(&f->failed, MIRROR_OUTPUT_TRACE, mirror__trace_file(m, path, NULL), "trace", path);
}

/* TensorBoard: a directory (not empty, room for an event file's name in
   it), a file of this fit's own there, an event per curve point. */
static int mirror__tb_check(mirror_model *m, const mirror__fit_run *f, size_t i)
{
    const char *path = MIRROR__OUTPUT_PATH(f, i);
    char what[64];
    int rc;
    snprintf(what, sizeof what, "mirror_fit: the %s", f->outs[i].name);
    if (!*path) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: the path is empty", what);
    if ((rc = mirror__path_fits(&m->err, what, path, MIRROR__TB_NAME, "an event file's name in it"))) return rc;
    return mirror__output_spares(m, f, i);
}

/* The directory made where it is missing (with its parents, as mkdir -p),
   and the event file in it. */
static int mirror__tb_start(mirror_model *m, mirror__fit_run *f, size_t i)
{
    mirror__output_file *o = &f->files[i];
    const char *dir = MIRROR__OUTPUT_PATH(f, i);
    int rc;
    if ((rc = mirror__output_dirs(m, f, i, strlen(dir)))) return rc;
    if ((rc = mirror__tb_open(m, dir, &o->fd, o->path, sizeof o->path))) return rc;
    o->made.file = 1;
    return MIRROR_OK;
}

static void mirror__tb_take(mirror_model *m, mirror__fit_run *f, size_t i, double x, const mirror_epoch_log *log)
{
    mirror__output_file *o = &f->files[i];
    if (o->fd >= 0)
        mirror__output_result(&f->failed, MIRROR_OUTPUT_TENSORBOARD,
                              mirror__tb_point(o->fd, m->steps, x, log, f->classify, mirror__tb_applies(m)),
                              "TensorBoard events", o->path);
}

static void mirror__tb_release(mirror__fit_run *f, size_t i)
{
    if (f->files[i].fd >= 0) close(f->files[i].fd);
    f->files[i].fd = -1;
}

/* fit's side outputs, in the order they are checked (a path that two
   name is told with the earlier one first) and opened. */
static const mirror__fit_output mirror__outputs[] = {
    {"history", offsetof(mirror_fit_desc, history), MIRROR_OUTPUT_HISTORY, MIRROR__NEEDS_POINTS | MIRROR__NEEDS_KEPT,
     mirror__file_output_check, mirror__history_open, NULL, mirror__history_rewrite, NULL, NULL},
    {"plot", offsetof(mirror_fit_desc, plot), MIRROR_OUTPUT_PLOT, MIRROR__NEEDS_POINTS | MIRROR__NEEDS_KEPT,
     mirror__file_output_check, mirror__plot_open, NULL, mirror__plot_rewrite, NULL, NULL},
    {"trace", offsetof(mirror_fit_desc, trace), MIRROR_OUTPUT_TRACE, MIRROR__NEEDS_TIMING, mirror__file_output_check,
     mirror__trace_open, NULL, NULL, mirror__trace_end, NULL},
    {"TensorBoard directory", offsetof(mirror_fit_desc, tensorboard), MIRROR_OUTPUT_TENSORBOARD, MIRROR__NEEDS_POINTS,
     mirror__tb_check, mirror__tb_start, mirror__tb_take, NULL, NULL, mirror__tb_release},
};
/* a fit run holds a file for each (a negative size fails the compile) */
typedef char mirror__outputs_fit[sizeof mirror__outputs / sizeof *mirror__outputs <= MIRROR__FIT_OUTPUTS ? 1 : -1];
#endif /* MIRROR_NO_OUTPUTS */

// >>fit ---------------------------------------------------------------------
/* mirror_fit: the data checked, the fit's defaults, its progress and its
   side outputs (through their list, >>outputs), then epochs of steps,
   validation, checkpoints and hooks, and an end that keeps what was done. */

/* A dataset's samples must have the model's layout, channels x height x
   width, dimension by dimension: the same size in another layout (channels
   last) would train on scrambled pixels. A model of flat input (height =
   width = 1) takes any layout of its size, read in the dataset's order. */
static int mirror__check_dataset(mirror_model *m, const mirror_dataset *ds, const char *what)
{
    const mirror_model_desc *d = &m->desc;
    size_t in_size = 0;
    int flat = d->height == 1 && d->width == 1, same;
    if (!ds || !ds->x || !ds->count)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "%s: dataset is NULL or empty", what);
    same = mirror__mul(ds->channels, ds->height, &in_size) && mirror__mul(in_size, ds->width, &in_size) &&
           in_size == m->sizes.in;
    if (!flat) same &= ds->channels == d->channels && ds->height == d->height && ds->width == d->width;
    if (!same)
        return mirror__fail(m, MIRROR_ERR_SHAPE,
                            "%s: samples of %zux%zux%zu, the model takes %zux%zux%zu (channels x height x width, "
                            "NCHW)%s",
                            what, ds->channels, ds->height, ds->width, d->channels, d->height, d->width,
                            ds->channels == d->height && ds->height == d->width && ds->width == d->channels
                                ? ": this looks channels-last (N, H, W, C); transpose it to (N, C, H, W)"
                                : "");
    if (m->desc.loss == MIRROR_LOSS_MSE && (!ds->targets || ds->target_dim != m->sizes.out))
        return mirror__fail(m, MIRROR_ERR_SHAPE, "%s: MSE needs targets of width %zu", what, m->sizes.out);
    if (m->desc.loss != MIRROR_LOSS_MSE && !ds->labels) /* float .npy labels load as targets */
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            ds->targets ? "%s: the dataset holds float targets (for a mean squared error), but the "
                                          "model's loss is softmax cross-entropy, which needs integer labels (a "
                                          ".npy y of int32, int64 or uint8)"
                                        : "%s: the dataset has no labels, which softmax cross-entropy needs",
                            what);
    return MIRROR_OK;
}

static void mirror__batch_of(mirror_batch *b, const mirror_dataset *ds, const size_t *index, size_t n)
{
    memset(b, 0, sizeof *b);
    b->x = ds->x;
    b->labels = ds->labels;
    b->targets = ds->targets;
    b->index = index;
    b->rows = ds->count;
    b->n = n;
}

static int mirror__evaluate(mirror_model *m, const mirror_dataset *ds, size_t batch, mirror_metrics *out)
{
    mirror_metrics sum;
    mirror_batch b;
    int rc;
    if ((rc = mirror__check_built(m, "mirror_evaluate")) ||
        (rc = mirror__check_dataset(m, ds, "mirror_evaluate")))
        return rc;
    mirror__batch_of(&b, ds, NULL, ds->count);
    if ((rc = mirror__check_batch(m, &b, "mirror_evaluate", 1)) ||
        (rc = mirror__all_agree(m, mirror__resident_use(m, ds, 1, &m->resident.at))))
        return rc;
    memset(out ? out : &sum, 0, sizeof sum);
    rc = mirror__forward_chunks(m, &b, batch, MIRROR__EVAL, NULL, out ? out : &sum);
    m->resident.at = NULL;
    return rc;
}

MIRROR_API int mirror_evaluate(mirror_model *m, const mirror_dataset *ds, size_t batch, mirror_metrics *out)
{
    MIRROR__LOCKED(m, "mirror_evaluate", mirror__evaluate(m, ds, batch, out));
}

static int mirror__keep_data(mirror_model *m, const mirror_dataset *ds, mirror_data_place place, int *on_device)
{
    int rc, fits = m ? m->resident.place : 0;
    if (on_device) *on_device = 0;
    if ((rc = mirror__check_built(m, "mirror_keep_data"))) return rc;
    m->resident.kept = NULL;
    if (!ds) return MIRROR_OK;
    if ((int)place < 0 || place > MIRROR_DATA_OFF)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_keep_data: unknown place %d", (int)place);
    /* the steps take batches of any layout of the model's input size: so does this */
    if (!ds->x || !ds->count || ds->channels * ds->height * ds->width != m->sizes.in)
        return mirror__fail(m, MIRROR_ERR_SHAPE,
                            "mirror_keep_data: %zu samples of %zux%zux%zu, the model takes %zu values", ds->count,
                            ds->channels, ds->height, ds->width, m->sizes.in);
    if (m->desc.loss == MIRROR_LOSS_MSE ? !ds->targets || ds->target_dim != m->sizes.out : !ds->labels)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_keep_data: the dataset has no %s",
                            m->desc.loss == MIRROR_LOSS_MSE ? "targets of the model's outputs" : "labels");
    m->resident.place = place;
    rc = mirror__resident_use(m, ds, 0, &m->resident.kept);
    m->resident.place = fits; /* a fit's, when a hook keeps data */
    if (on_device) *on_device = m->resident.kept != NULL;
    return rc;
}

MIRROR_API int mirror_keep_data(mirror_model *m, const mirror_dataset *ds, mirror_data_place place, int *on_device)
{
    MIRROR__LOCKED(m, "mirror_keep_data", mirror__keep_data(m, ds, place, on_device));
}

/* The terminal's width in columns (80 where it does not say). */
static size_t mirror__columns(void)
{
    struct winsize ws;
    if (ioctl(fileno(stdout), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

/* "1h02m", "3m07s" or "42s". */
static void mirror__duration(char *out, size_t size, double seconds)
{
    unsigned long t = seconds > 0 && seconds < 1e7 ? (unsigned long)(seconds + 0.5) : 0;
    if (t >= 3600) snprintf(out, size, "%luh%02lum", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(out, size, "%lum%02lus", t / 60, t % 60);
    else snprintf(out, size, "%lus", t);
}

/* The bar, redrawn in place on one line that never wraps: its width is what
   the terminal leaves beside the numbers (at most 30), and the line is cut
   to the terminal's width. `what` replaces the numbers (validation). */
static void mirror__progress_bar(const mirror_epoch_log *log, size_t step, size_t steps, const mirror_metrics *acc,
                                 double seconds, int show_lr, int classify, const char *what)
{
    char line[512], tail[256], eta[32];
    size_t used = 0, tn = 0, head, width, cols = mirror__columns(), i, fill;
    mirror__duration(eta, sizeof eta, step ? seconds * (double)(steps - step) / (double)step : 0.0);
    if (what)
        mirror__appendf(tail, sizeof tail, &tn, " %s", what);
    else {
        mirror__appendf(tail, sizeof tail, &tn, " %zu/%zu  loss %.4f", step, steps,
                        acc->count ? acc->loss_sum / (double)acc->count : 0.0);
        if (classify)
            mirror__appendf(tail, sizeof tail, &tn, "  acc %.4f",
                            acc->count ? (double)acc->correct / (double)acc->count : 0.0);
        mirror__appendf(tail, sizeof tail, &tn, "  %.0f samples/s  ETA %s",
                        seconds > 0 ? (double)acc->count / seconds : 0.0, eta);
        if (log->loss_scale > 0) mirror__appendf(tail, sizeof tail, &tn, "  scale %g", log->loss_scale);
        if (show_lr) mirror__appendf(tail, sizeof tail, &tn, "  lr %.3g", log->lr);
    }
    mirror__appendf(line, sizeof line, &used, "epoch %zu/%zu [", log->epoch, log->epochs);
    head = used;
    width = cols > head + 2 + strlen(tail) + 8 ? MIRROR__MIN(30, cols - head - 2 - strlen(tail)) : 8;
    fill = steps ? width * step / steps : width;
    for (i = 0; i < width && used + 1 < sizeof line; i++) line[used++] = i < fill ? '=' : (i == fill ? '>' : '.');
    line[used] = '\0';
    mirror__appendf(line, sizeof line, &used, "]%s", tail);
    if (used >= sizeof line) used = sizeof line - 1;
    if (used > cols - 1) line[cols - 1] = '\0'; /* never wraps */
    printf("\r%s\033[K", line);
    fflush(stdout);
}

static void mirror__epoch_line(const mirror_epoch_log *log, int bar, int show_lr, int classify, const char *val)
{
    if (!val) val = "val";
    printf("%sepoch %zu/%zu  loss %.4f", bar ? "\r\033[K" : "", log->epoch, log->epochs, log->train_loss);
    if (classify) printf("  acc %.4f", log->train_acc);
    if (log->val_loss != -1.0) /* -1: no validation set; NaN and Inf are printed as they are */
        printf(classify ? "  %.32s_loss %.4f  %.32s_acc %.4f" : "  %.32s_loss %.4f", val, log->val_loss, val,
               log->val_acc);
    if (log->loss_scale > 0) printf("  scale %g  skipped %llu", log->loss_scale, (unsigned long long)log->skipped);
    if (show_lr) printf("  lr %.3g", log->lr);
    if (log->grad_norm > 0) printf("  grad_norm %.3g", log->grad_norm);
    printf("  %.0f samples/s  %.1fs\n", log->samples_per_s, log->seconds);
    fflush(stdout);
}

/* Mixed precision: the scale and the skipped steps since *skipped_before
   into the log (waits for the device; fit does it where it reads metrics). */
static int mirror__log_scaler(mirror_model *m, mirror_epoch_log *log, uint64_t skipped_before)
{
    mirror_loss_scale_state st;
    int rc;
    if (!m->format) return MIRROR_OK;
    if ((rc = mirror__get_scaler(m, &st))) return rc;
    log->loss_scale = st.scale;
    log->skipped = st.skipped - skipped_before;
    return MIRROR_OK;
}

/* A mixed-precision fit of a fixed loss scale (static, or none) whose
   every step was skipped, its gradients not finite, has changed no
   parameter, and would do the same again: it fails rather than end as a
   success, and saves nothing. (A dynamic scale lowers itself as it skips;
   max_consecutive_skips bounds it.) */
static int mirror__fit_learnt_nothing(mirror_model *m, size_t ran)
{
    mirror_loss_scale_state st;
    int rc = mirror__get_scaler(m, &st);
    if (rc) return rc;
    return mirror__fail(m, MIRROR_ERR_NOT_FINITE,
                        "mirror_fit: all %zu steps were skipped, their gradients not finite (loss scale %g, %s): "
                        "no parameter changed; lower the static scale or make it dynamic",
                        ran, (double)st.scale, mirror_loss_scaling_name(m->desc.loss_scale.kind));
}

/* A checkpoint's cursor (epoch, step): the next step to run. */
static mirror_checkpoint_info mirror__fit_cursor(mirror_model *m, const mirror_fit_desc *d, size_t epoch, size_t step,
                                                 size_t steps)
{
    mirror_checkpoint_info at;
    at.step = m->steps;
    at.epoch = step < steps ? epoch : epoch + 1;
    at.epoch_step = step < steps ? step : 0;
    at.shuffle_seed = d->shuffle_seed;
    at.batch = d->batch * d->accumulate; /* the samples of one optimizer step */
    at.samples = d->train->count;
    at.drop_remainder = d->drop_remainder != 0;
    at.micro_batch = mirror__micro_cut(m, d->batch, d->accumulate);
    return at;
}


/* Whether a hook's answer stops fit: with several processes rank 0's answer
   counts for all, so that they stop before the same step. */
static int mirror__hook_stops(mirror_model *m, int answer)
{
    return mirror__from_leader(m, answer ? MIRROR_ERR_STOPPED : MIRROR_OK) != MIRROR_OK;
}

/* An epoch's phase line: each phase's mean milliseconds per step over the
   kept steps, and how much slower the slowest replica is than the mean. */
static void mirror__phase_line(mirror_model *m)
{
    mirror_phase_times pt;
    int p;
    if (mirror__phase_times(m, (size_t)-1, &pt) || !pt.steps) return;
    printf("phases (ms per step, slowest replica / mean):");
    for (p = 0; p < MIRROR_PHASE_COUNT; p++)
        printf("  %s %.3f (%.2f)", mirror__phase_names[p], 1e3 * pt.seconds[p], pt.imbalance[p]);
    printf("\n");
    fflush(stdout);
}

/* The stop flag: this process's, or with several processes whether any
   process's was set at the last step (it travels with the reduction, so
   that every process stops before the same step). */
static int mirror__fit_stop_asked(const mirror_model *m, const mirror_fit_desc *d)
{
    if (m->s->processes > 1) return m->s->procs->stopped(m->s);
    return d->stop && *d->stop;
}

/* Whether standard output is a terminal that a person reads: not one
   that mpirun made (Open MPI gives rank 0 a pseudo-terminal, which a
   redrawn bar would fill with carriage returns in a log). */
static int mirror__stdout_is_terminal(void)
{
    return isatty(fileno(stdout)) && !getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_RANK") && !getenv("PMIX_RANK");
}

/* Defaults for a fit desc's zero fields, in one place (see
   mirror_fit_desc). The progress mode is resolved here too: a bar on a
   terminal (not one of mpirun's), else lines. */
static mirror_fit_desc mirror__fit_defaults(const mirror_model *m, mirror_fit_desc d)
{
    if (!d.epochs) d.epochs = 1;
    if (!d.batch) d.batch = MIRROR__MIN(64, m->desc.max_batch);
    if (!d.shuffle_seed) d.shuffle_seed = m->desc.seed;
    if (!d.accumulate) d.accumulate = 1;
    if (d.progress == MIRROR_PROGRESS_AUTO)
        d.progress = mirror__stdout_is_terminal() ? MIRROR_PROGRESS_BAR : MIRROR_PROGRESS_LINES;
    return d;
}

/* What a fit checks before anything is allocated or written: the data
   (every label up front, so that a bad one fails before the first step),
   the batch, and where to start; *steps: the steps of an epoch. */
static int mirror__fit_check(mirror_model *m, const mirror_fit_desc *d, size_t *steps)
{
    mirror_batch all;
    size_t per_step = d->batch * d->accumulate;
    int rc;
    if ((rc = mirror__check_dataset(m, d->train, "mirror_fit (train)")) ||
        (d->validation && (rc = mirror__check_dataset(m, d->validation, "mirror_fit (validation)"))))
        return rc;
    mirror__batch_of(&all, d->train, NULL, d->train->count);
    if ((rc = mirror__check_batch(m, &all, "mirror_fit (train)", 1))) return rc;
    if (d->validation) {
        mirror__batch_of(&all, d->validation, NULL, d->validation->count);
        if ((rc = mirror__check_batch(m, &all, "mirror_fit (validation)", 1))) return rc;
    }
    if (d->batch > m->desc.max_batch)
        return mirror__fail(m, MIRROR_ERR_CAPACITY, "mirror_fit: batch %zu exceeds max_batch %zu", d->batch,
                            m->desc.max_batch);
    if (d->augment_crop_pad > MIRROR__MAX(m->desc.height, m->desc.width))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_fit: augment_crop_pad %zu is beyond the image (%zux%zu)",
                            d->augment_crop_pad, m->desc.height, m->desc.width);
    if (d->accumulate > ((size_t)1 << 20) || d->batch * d->accumulate > ((size_t)1 << 40))
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_fit: accumulate %zu: at most 2^20 micro-batches of %zu",
                            d->accumulate, d->batch);
    if ((int)d->progress < 0 || d->progress > MIRROR_PROGRESS_NONE)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_fit: unknown progress mode");
    if ((int)d->data_on_device < 0 || d->data_on_device > MIRROR_DATA_OFF)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_fit: unknown data_on_device %d", (int)d->data_on_device);
#ifdef MIRROR_NO_OUTPUTS
    if (d->history || d->plot || d->trace || d->tensorboard)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT,
                            "mirror_fit: the desc asks for a side output (%s), but this mirror.h was built with "
                            "MIRROR_NO_OUTPUTS, which leaves them out",
                            d->history ? "history" : d->plot ? "plot" : d->trace ? "trace" : "tensorboard");
#endif
    *steps = mirror_num_batches(d->train->count, per_step, d->drop_remainder);
    if (!*steps)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_fit: %zu samples make no batch of %zu",
                            d->train->count, per_step);
    /* a batch that batchnorm refuses fails now, not in the first epoch:
       each micro-batch is d->batch samples, the last the remainder */
    if ((rc = mirror__check_bn_values(m, d->batch, "mirror_fit")) ||
        (!d->drop_remainder && d->train->count % d->batch &&
         (rc = mirror__check_bn_values(m, d->train->count % d->batch,
                                       "mirror_fit (the last batch; drop_remainder drops it)"))))
        return rc;
    if (d->initial_step >= *steps && d->initial_epoch < d->epochs)
        return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_fit: initial_step %zu, but an epoch has %zu steps",
                            d->initial_step, *steps);
    return MIRROR_OK;
}

/* A dataset's shape and contents, into an item to agree on. */
static void mirror__agree_dataset(mirror__agreed *a, const mirror_dataset *ds, size_t in_size)
{
    uint64_t v[8];
    v[0] = ds->count, v[1] = ds->channels, v[2] = ds->height, v[3] = ds->width, v[4] = ds->num_classes;
    v[5] = ds->target_dim, v[6] = ds->labels != NULL, v[7] = ds->targets != NULL;
    mirror__agree_add(a, v, sizeof v);
    mirror__agree_add(a, ds->x, ds->count * in_size * sizeof(float));
    if (ds->labels) mirror__agree_add(a, ds->labels, ds->count * sizeof(int32_t));
    if (ds->targets) mirror__agree_add(a, ds->targets, ds->count * ds->target_dim * sizeof(float));
}

/* What every process's fit must have alike, compared before the first
   step: the batch, the data (its size and a hash of its contents), the
   shuffle seed, the augmentation, the epochs and where they start,
   which outputs and hooks it has (rank 0 writes and calls them, but every
   process takes part in their results), and the file the parameters were
   loaded from (by its bytes: the path may differ between machines). */
static int mirror__fit_agree(mirror_model *m, const mirror_fit_desc *d)
{
    mirror__agreed it[8];
    uint64_t v[11];
    char words[160];
    if (m->s->processes == 1) return MIRROR_OK;
    mirror__agree_on(&it[0], "the batch and accumulation");
    mirror__agree_count(&it[0], d->batch), mirror__agree_count(&it[0], d->accumulate);
    mirror__agree_count(&it[0], (uint64_t)d->drop_remainder);
    mirror__agree_on(&it[1], "the training data (its size or contents)");
    mirror__agree_dataset(&it[1], d->train, m->sizes.in);
    mirror__agree_on(&it[2], "the validation data (its size or contents)");
    mirror__agree_count(&it[2], d->validation != NULL);
    if (d->validation) mirror__agree_dataset(&it[2], d->validation, m->sizes.in);
    mirror__agree_on(&it[3], "the shuffle seed");
    mirror__agree_count(&it[3], d->shuffle_seed);
    mirror__agree_on(&it[4], "the augmentation");
    mirror__agree_count(&it[4], (uint64_t)d->augment_flip), mirror__agree_count(&it[4], d->augment_crop_pad);
    mirror__agree_on(&it[5], "the epochs, or the step to start from");
    v[0] = d->epochs, v[1] = d->initial_epoch, v[2] = d->initial_step, v[3] = m->steps;
    mirror__agree_add(&it[5], v, 4 * sizeof v[0]);
    mirror__agree_on(&it[6], "the checkpoint, side outputs or hooks");
    v[0] = d->checkpoint != NULL, v[1] = d->checkpoint_every, v[2] = d->history != NULL, v[3] = d->plot != NULL;
    v[4] = d->curve_every, v[5] = d->trace != NULL, v[6] = d->log_every, v[7] = d->check_replicas_every;
    v[8] = d->on_step != NULL, v[9] = d->on_epoch != NULL, v[10] = d->tensorboard != NULL;
    mirror__agree_add(&it[6], v, sizeof v);
    mirror__agree_on(&it[7], "the file the parameters were loaded from");
    v[0] = m->source.told.path ? 1 + (uint64_t)m->source.told.checkpoint : 0, v[1] = m->source.told.crc32,
    v[2] = m->source.told.size;
    mirror__agree_add(&it[7], v, 3 * sizeof v[0]);
    it[7].told = mirror__source_words(m, words, sizeof words);
    return mirror__processes_agree(m, it, 8, "mirror_fit");
}

/* What rank 0 alone does, with the result on every process. */
#define MIRROR__BY_LEADER(m, call) mirror__from_leader(m, mirror__leads(m) ? (call) : MIRROR_OK)

/* ---- the side outputs, through their list (>>outputs): fit names none ---- */

/* The outputs a fit can write, and what those the desc asks for need. */
static void mirror__outputs_list(mirror__fit_run *f)
{
    size_t i;
#ifdef MIRROR_NO_OUTPUTS
    f->outs = NULL, f->nouts = 0;
#else
    f->outs = mirror__outputs, f->nouts = sizeof mirror__outputs / sizeof *mirror__outputs;
#endif
    for (i = 0; i < MIRROR__FIT_OUTPUTS; i++) f->files[i].fd = -1;
    for (i = 0; i < f->nouts; i++)
        if (MIRROR__OUTPUT_PATH(f, i)) f->asked = 1, f->needs |= f->outs[i].needs;
}

/* Before the first step (rank 0): each output asked has a usable path
   (its own check), and no two name one file. */
static int mirror__outputs_check(mirror_model *m, const mirror__fit_run *f)
{
    size_t i, j;
    int rc;
    for (i = 0; i < f->nouts; i++) {
        const char *path = MIRROR__OUTPUT_PATH(f, i);
        if (!path) continue;
        if (f->outs[i].check && (rc = f->outs[i].check(m, f, i))) return rc;
        for (j = 0; j < i; j++)
            if (MIRROR__OUTPUT_PATH(f, j) && mirror__same_file(path, MIRROR__OUTPUT_PATH(f, j)))
                return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_fit: the %s and the %s are both %s; name two paths",
                                    f->outs[j].name, f->outs[i].name, path);
    }
    return MIRROR_OK;
}

/* Once every output is ready (rank 0): the first versions of the files
   written whole, staged, renamed over their paths; nothing is left to
   remove from here on. */
static int mirror__outputs_place(mirror_model *m, mirror__fit_run *f)
{
    size_t i;
    for (i = 0; i < f->nouts; i++) {
        mirror__output_file *o = &f->files[i];
        if (o->staged && rename(o->path, MIRROR__OUTPUT_PATH(f, i)) != 0)
            return mirror__fail(m, MIRROR_ERR_IO, "mirror_fit: %s: cannot rename the %s into place: %s",
                                MIRROR__OUTPUT_PATH(f, i), f->outs[i].name, strerror(errno));
        o->staged = 0, o->path[0] = '\0';
    }
    for (i = 0; i < f->nouts; i++) memset(&f->files[i].made, 0, sizeof f->files[i].made);
    memset(&f->ckpt_made, 0, sizeof f->ckpt_made);
    return MIRROR_OK;
}

/* A fit refused before its first step (rank 0) removes what it made: the
   outputs' files (a staged one, the event file) and the checkpoint's
   PATH.lock, the lock still held, then the directories it made, the
   latest first. What was there before stays as it was. */
static void mirror__fit_discard(mirror_model *m, mirror__fit_run *f)
{
    char lock[MIRROR__PATH_MAX];
    size_t i;
    for (i = 0; i < f->nouts; i++)
        if (f->files[i].made.file && f->files[i].path[0]) unlink(f->files[i].path);
    if (f->ckpt_made.file && m->fit.lock &&
        (size_t)snprintf(lock, sizeof lock, "%s.lock", f->d.checkpoint) < sizeof lock)
        unlink(lock);
    for (i = f->nouts; i-- > 0;)
        if (f->files[i].made.made)
            mirror__unmake_dirs(MIRROR__OUTPUT_PATH(f, i), f->files[i].made.dirs, f->files[i].made.made);
    if (f->ckpt_made.made) mirror__unmake_dirs(f->d.checkpoint, f->ckpt_made.dirs, f->ckpt_made.made);
}

/* The outputs asked that are rewritten from the points so far (rank 0). */
static void mirror__outputs_rewrite(mirror_model *m, mirror__fit_run *f)
{
    size_t i;
    for (i = 0; i < f->nouts; i++)
        if (MIRROR__OUTPUT_PATH(f, i) && f->outs[i].rewrite) f->outs[i].rewrite(m, f, i);
}

/* A point of the curves at x (rank 0), into *pts, grown by doubling; 0 when
   out of memory. */
static int mirror__curve_add(mirror__curve_point **pts, size_t *n, size_t *cap, double x, const mirror_epoch_log *log)
{
    if (*n == *cap) {
        mirror__curve_point *grown = (mirror__curve_point *)mirror__alloc(2 * *cap + 8, sizeof *grown);
        if (!grown) return 0;
        if (*n) memcpy(grown, *pts, *n * sizeof **pts);
        MIRROR_FREE(*pts);
        *pts = grown, *cap = 2 * *cap + 8;
    }
    (*pts)[*n].x = x, (*pts)[(*n)++].log = *log;
    return 1;
}

/* The curves' points cannot grow (out of memory): the outputs rewritten
   from them keep what they hold, and are not written again in this fit. */
static void mirror__points_lost(mirror__fit_run *f)
{
    size_t i;
    f->curves_lost = 1;
    mirror__log(MIRROR_LOG_NOTICE, "mirror_fit: out of memory for the curves' points: the history and the plot stay "
                                   "as they are; training goes on");
    for (i = 0; i < f->nouts; i++)
        if (MIRROR__OUTPUT_PATH(f, i) && f->outs[i].needs & MIRROR__NEEDS_KEPT) f->failed |= f->outs[i].bit;
}

/* The checkpoint's lock released, the stop flag and the augmentation off:
   validation and later calls see the samples as they are. */
static void mirror__fit_unhold(mirror_model *m)
{
    mirror__fit_unlock(m);
    m->fit.stop = NULL;
    m->s->procs->watch(m->s, NULL);
    m->fit.augment_flip = 0, m->fit.augment_pad = 0;
    m->resident.at = NULL, m->resident.place = MIRROR_DATA_AUTO;
}

/* Undoes what mirror__fit_begin did (the lock, the timing, the buffers). */
static void mirror__fit_release(mirror_model *m, mirror__fit_run *f)
{
    size_t i;
    mirror__fit_unhold(m);
    if (f->timed_here) mirror__timing(m, 0);
    f->timed_here = 0;
    MIRROR_FREE(f->perm);
    MIRROR_FREE(f->micro);
    MIRROR_FREE(f->logs);
    f->perm = NULL, f->micro = NULL, f->logs = NULL;
    for (i = 0; i < f->nouts; i++)
        if (f->outs[i].release) f->outs[i].release(f, i);
}

/* The start of a fit: checks, defaults, timing, the side outputs' paths,
   the buffers, the data on the device; then, all checked, the disk: the
   checkpoint's lock, the side outputs (a failure here fails fit, as
   nothing is lost yet). On failure nothing is left held, and nothing made
   on the disk is left there. */
static int mirror__fit_begin(mirror_model *m, const mirror_fit_desc *desc, mirror__fit_run *f)
{
    mirror_fit_desc *d = &f->d;
    size_t i;
    int rc;
    memset(f, 0, sizeof *f);
    f->saved = (uint64_t)-1, f->start = mirror__now();
    if ((rc = mirror__check_built(m, "mirror_fit"))) return rc;
    if (!desc) return mirror__fail(m, MIRROR_ERR_ARGUMENT, "mirror_fit: desc is NULL");
    *d = mirror__fit_defaults(m, *desc);
    mirror__outputs_list(f);
    /* With several processes: a check that failed on one fails all, what
       they must have alike is compared, then their replicas (resumed from
       the same checkpoint?), before anything else crosses between them. */
    if ((rc = mirror__all_agree(m, mirror__fit_check(m, d, &f->steps))) || (rc = mirror__fit_agree(m, d)) ||
        (m->s->processes > 1 && (rc = mirror__check_replicas(m))))
        return rc;
    f->applied = mirror_optimizer_steps(m);
    f->per_step = d->batch * d->accumulate;
    if (!mirror__leads(m)) d->progress = MIRROR_PROGRESS_NONE; /* rank 0 speaks for every process */
    f->bar = d->progress == MIRROR_PROGRESS_BAR;
    f->shows_lr = m->desc.optimizer.schedule != MIRROR_LR_CONSTANT || m->desc.optimizer.warmup; /* a rate that moves */
    f->classify = m->desc.loss == MIRROR_LOSS_SOFTMAX_CE;
    /* Metrics are read across processes: at the same steps in each, never by the clock. */
    f->timed = f->bar && m->s->processes == 1;
    f->verdict = m->format ? (size_t)m->desc.loss_scale.max_consecutive_skips / 2 + 1 : 32;
    mirror__resume_split(m, d);
    /* Timing for the trace and the phase lines, when the model has none on. */
    if ((d->phases || f->needs & MIRROR__NEEDS_TIMING) && !m->trace.steps) {
        if ((rc = mirror__timing(m, 256))) goto fail;
        f->timed_here = 1;
    }
    /* The side outputs' paths (no checkpoint's, no FIFO), before anything is made */
    if (f->asked && (rc = MIRROR__BY_LEADER(m, mirror__outputs_check(m, f)))) goto fail;
    f->perm = (size_t *)mirror__alloc(d->train->count, sizeof(size_t));
    f->micro = (mirror_batch *)mirror__alloc(d->accumulate, sizeof(mirror_batch));
    if (!f->perm || !f->micro) {
        mirror__fit_release(m, f);
        return mirror__fail(m, MIRROR_ERR_NO_MEMORY, "mirror_fit: out of memory");
    }
    m->resident.place = d->data_on_device;
    /* the training data on the device where asked and they fit; a device's failure fails every process */
    if ((rc = mirror__all_agree(m, mirror__resident_use(m, d->train, 0, &f->data)))) goto fail;
    /* The disk, by rank 0, each directory missing made: a checkpoint that
       cannot be written found now, not after the training; each output
       opened in turn (a resumed run's history read, the curves' files and
       the trace's written, staged, TensorBoard's file), then the staged
       files renamed into place. */
    if (d->checkpoint &&
        (rc = MIRROR__BY_LEADER(m, mirror__fit_lock(m, d->checkpoint, d->checkpoint_keep, &f->ckpt_made))))
        goto fail;
    for (i = 0; i < f->nouts; i++)
        if (MIRROR__OUTPUT_PATH(f, i) && f->outs[i].open && (rc = MIRROR__BY_LEADER(m, f->outs[i].open(m, f, i))))
            goto fail;
    if (f->asked && (rc = MIRROR__BY_LEADER(m, mirror__outputs_place(m, f)))) goto fail;
    m->fit.stop = d->stop;
    m->fit.augment_flip = d->augment_flip != 0, m->fit.augment_pad = d->augment_crop_pad;
    m->s->procs->watch(m->s, d->stop);
    return MIRROR_OK;
fail:
    if (mirror__leads(m)) mirror__fit_discard(m, f);
    mirror__fit_release(m, f);
    return rc;
}

/* A curve point (rank 0): to each output that takes them as they come
   (TensorBoard's event), then into the points kept, from which the others
   are rewritten whole at an epoch's end. */
static void mirror__add_point(mirror_model *m, mirror__fit_run *f, double x, const mirror_epoch_log *log, int end)
{
    size_t i;
    for (i = 0; i < f->nouts; i++)
        if (MIRROR__OUTPUT_PATH(f, i) && f->outs[i].point) f->outs[i].point(m, f, i, x, log);
    if (!(f->needs & MIRROR__NEEDS_KEPT) || f->curves_lost) return;
    if (!mirror__curve_add(&f->logs, &f->nlogs, &f->logs_cap, x, log))
        mirror__points_lost(f);
    else if (end)
        mirror__outputs_rewrite(m, f);
}

/* The metrics of the steps since the last take into the epoch's sums, and
   the scaler's numbers into its log. */
static int mirror__fit_take(mirror_model *m, mirror__fit_run *f)
{
    mirror_metrics taken;
    int rc;
    if ((rc = mirror__take_metrics(m, &taken)) || (rc = mirror__log_scaler(m, &f->log, f->skipped_before))) return rc;
    mirror__metrics_add(f->acc, taken.loss_sum, taken.correct, taken.count);
    return MIRROR_OK;
}

/* A checkpoint at the cursor, saved by rank 0 with every process told.
   Mid-epoch it keeps the epoch's running sums, every step's metrics taken
   first (at the same steps in a run that is not stopped, so that both add
   them up alike), and the history and the plot are rewritten with the
   epoch's points so far: a fit resumed from it logs the whole epoch. */
static int mirror__fit_save(mirror_model *m, mirror__fit_run *f, size_t epoch, size_t step)
{
    const mirror_fit_desc *d = &f->d;
    mirror_checkpoint_info at = mirror__fit_cursor(m, d, epoch, step, f->steps);
    mirror__epoch_sums sums;
    int rc;
    if (at.epoch_step && f->acc && !f->partial) {
        if ((rc = mirror__fit_take(m, f))) return rc;
        memset(&sums, 0, sizeof sums);
        sums.acc = *f->acc, sums.skipped = f->log.skipped, sums.seconds = mirror__now() - f->t0;
        m->fit.saving_sums = &sums;
    }
    rc = mirror_checkpoint_save(m, d->checkpoint, &at, d->checkpoint_keep);
    m->fit.saving_sums = NULL;
    if (rc == MIRROR_OK && at.epoch_step && f->needs & MIRROR__NEEDS_KEPT && !f->curves_lost && mirror__leads(m))
        mirror__outputs_rewrite(m, f);
    return rc;
}

/* Stopping (the stop flag, or the epoch hook): save at the cursor, say where. */
static int mirror__fit_stop(mirror_model *m, mirror__fit_run *f, size_t epoch, size_t step, int bar)
{
    const mirror_fit_desc *d = &f->d;
    int rc;
    if (bar) printf("\n");
    if (d->checkpoint && (rc = mirror__fit_save(m, f, epoch, step))) return rc;
    return mirror__fail(m, MIRROR_ERR_STOPPED, "mirror_fit: stopped before step %zu of epoch %zu%s%s", step + 1,
                        epoch + 1, d->checkpoint ? "; checkpoint saved to " : "", d->checkpoint ? d->checkpoint : "");
}

/* The epoch log so far (its end is the epoch's own), as a curve point
   within the epoch. */
static void mirror__fit_curve_point(mirror_model *m, mirror__fit_run *f, size_t epoch, size_t step,
                                    const mirror_metrics *acc, double seconds)
{
    mirror_epoch_log so_far = f->log;
    so_far.steps = step + 1, so_far.samples = acc->count, so_far.seconds = seconds;
    so_far.samples_per_s = so_far.seconds > 0 ? (double)acc->count / so_far.seconds : 0.0;
    so_far.train_loss = acc->count ? acc->loss_sum / (double)acc->count : 0.0;
    so_far.train_acc = acc->count ? (double)acc->correct / (double)acc->count : 0.0;
    so_far.val_loss = so_far.val_acc = -1.0, so_far.grad_norm = mirror_last_grad_norm(m);
    mirror__add_point(m, f, (double)epoch + (double)(step + 1) / (double)f->steps, &so_far, 0);
}

/* After step `step` of an epoch: the metrics taken, the bar, a curve point,
   the step hook. Metrics come at the epoch's end and for the bar; also
   every `verdict` steps, where the scaler or the fp32 guard is read, so
   that a run that skips every step, or has stopped applying them, stops
   soon. Those counts are the model's steps, which a resumed run continues:
   its points and its metrics' sums fall where the run not stopped has them. */
static int mirror__fit_after_step(mirror_model *m, mirror__fit_run *f, size_t epoch, size_t step,
                                  mirror_metrics *acc, double t0, double *shown)
{
    const mirror_fit_desc *d = &f->d;
    int rc;
    if (!(step + 1 == f->steps || (f->timed && mirror__now() - *shown > 0.1) || m->steps % f->verdict == 0 ||
          (d->log_every && m->steps % d->log_every == 0) || (d->curve_every && m->steps % d->curve_every == 0)))
        return MIRROR_OK;
    if ((rc = mirror__fit_take(m, f))) return rc;
    *shown = mirror__now();
    f->log.lr = m->lr;
    if (f->bar) mirror__progress_bar(&f->log, step + 1, f->steps, acc, *shown - t0, f->shows_lr, f->classify, NULL);
    if (f->needs & MIRROR__NEEDS_POINTS && d->curve_every && m->steps % d->curve_every == 0 &&
        step + 1 < f->steps && mirror__leads(m))
        mirror__fit_curve_point(m, f, epoch, step, acc, *shown - t0);
    if (d->on_step && d->log_every && m->steps % d->log_every == 0) {
        mirror_step_log sl;
        sl.epoch = epoch + 1, sl.epochs = d->epochs, sl.step = step + 1, sl.steps = f->steps;
        sl.global_step = m->steps, sl.samples = acc->count, sl.lr = m->lr, sl.seconds = *shown - t0;
        sl.loss = acc->count ? acc->loss_sum / (double)acc->count : 0.0;
        sl.acc = acc->count ? (double)acc->correct / (double)acc->count : 0.0;
        if (mirror__hook_stops(m, d->on_step(d->user, &sl)))
            return mirror__fit_stop(m, f, epoch, step + 1, f->bar);
    }
    return MIRROR_OK;
}

/* An epoch's steps, from `first`, with their metrics into acc. */
static int mirror__fit_steps(mirror_model *m, mirror__fit_run *f, size_t epoch, size_t first, mirror_metrics *acc,
                             double t0)
{
    const mirror_fit_desc *d = &f->d;
    double shown = t0;
    size_t step, k, at;
    int rc;
    for (step = first; step < f->steps; step++) {
        f->at_epoch = epoch, f->at_step = step;
        if (mirror__fit_stop_asked(m, d)) /* before the step: it is the one to resume at */
            return mirror__fit_stop(m, f, epoch, step, f->bar);
        for (k = 0, at = step * f->per_step; k < d->accumulate && at < d->train->count; k++, at += d->batch)
            mirror__batch_of(&f->micro[k], d->train, f->perm + at, MIRROR__MIN(d->batch, d->train->count - at));
        /* metrics stay on the device */
        m->resident.at = f->data;
        if ((rc = mirror__train(m, f->micro, k, NULL, "mirror_train_steps"))) return rc;
        f->ran++, f->at_step = step + 1;
        if ((rc = mirror__fit_after_step(m, f, epoch, step, acc, t0, &shown))) return rc;
        if (d->checkpoint && d->checkpoint_every && m->steps % d->checkpoint_every == 0) {
            if ((rc = mirror__fit_save(m, f, epoch, step + 1))) return rc;
            f->saved = m->steps;
        }
        if (d->check_replicas_every && m->steps % d->check_replicas_every == 0 && (rc = mirror__check_replicas(m)))
            return rc;
    }
    return MIRROR_OK;
}

/* An epoch's end: its log, the validation, the epoch line, the curves, the
   epoch hook. */
static int mirror__fit_epoch_end(mirror_model *m, mirror__fit_run *f, size_t epoch, const mirror_metrics *acc,
                                 double t0)
{
    const mirror_fit_desc *d = &f->d;
    mirror_epoch_log *log = &f->log;
    mirror_metrics val = {0.0, 0, 0};
    int rc;
    log->steps = f->steps;
    log->samples = acc->count;
    log->seconds = mirror__now() - t0;
    log->samples_per_s = log->seconds > 0 ? (double)acc->count / log->seconds : 0.0;
    log->train_loss = acc->loss_sum / (double)acc->count;
    log->train_acc = (double)acc->correct / (double)acc->count;
    log->val_loss = log->val_acc = -1.0;
    if (d->validation) {
        if (f->bar) mirror__progress_bar(log, f->steps, f->steps, acc, mirror__now() - t0, 0, 0, "validating...");
        if ((rc = mirror__evaluate(m, d->validation, d->batch, &val))) return rc;
        log->val_loss = val.loss_sum / (double)val.count;
        log->val_acc = (double)val.correct / (double)val.count;
        if (!mirror_hd_finite((float)log->val_loss) && mirror__leads(m)) { /* a mean of float losses: a float */
            char notice[200];
            snprintf(notice, sizeof notice,
                     "epoch %zu: the validation loss is not finite (%g): the validation data hold NaN or Inf, "
                     "or the model overflows on them",
                     epoch + 1, log->val_loss);
            mirror__log(MIRROR_LOG_NOTICE, notice);
        }
    }
    log->elapsed = mirror__now() - f->start;
    log->lr = m->lr;
    log->grad_norm = mirror_last_grad_norm(m);
    if (d->progress != MIRROR_PROGRESS_NONE)
        mirror__epoch_line(log, f->bar, f->shows_lr, f->classify, d->validation_name);
    if (d->phases && mirror__leads(m)) mirror__phase_line(m);
    if (mirror__leads(m)) mirror__add_point(m, f, (double)log->epoch, log, 1); /* rank 0 writes; a failure costs no step */
    log->failed_outputs = f->failed;
    /* Several processes: their replicas compared after every epoch, so that a divergence cannot go unseen */
    if (m->s->processes > 1 && (rc = mirror__check_replicas(m))) return rc;
    if (d->on_epoch && mirror__hook_stops(m, d->on_epoch(d->user, log)))
        return mirror__fit_stop(m, f, epoch + 1, 0, 0);
    return MIRROR_OK;
}

/* A fit resumed at step `first` of an epoch starts from the epoch's sums
   that its checkpoint kept, when the model was loaded from one at this
   very cursor; else the epoch's log counts the steps from `first` on, and
   a notice says so. Once, for the fit that follows the load. */
static void mirror__fit_resume_sums(mirror_model *m, mirror__fit_run *f, size_t epoch, size_t first)
{
    mirror__epoch_sums *e = &m->fit.resumed_sums;
    char notice[400];
    if (e->kept && e->step == m->steps && e->epoch == epoch && e->epoch_step == first) {
        *f->acc = e->acc;
        f->t0 -= e->seconds;
        f->skipped_before -= MIRROR__MIN(e->skipped, f->skipped_before);
    } else {
        f->partial = 1;
        snprintf(notice, sizeof notice,
                 "mirror_fit: resumed at step %zu of epoch %zu without that epoch's running numbers (a checkpoint "
                 "that fit did not save there, or an older one): its log counts its last %zu steps only",
                 first + 1, epoch + 1, f->steps - first);
        if (mirror__leads(m)) mirror__log(MIRROR_LOG_NOTICE, notice);
    }
    e->kept = 0;
}

/* One epoch: its permutation and augmentation, its steps, its end. */
static int mirror__fit_epoch(mirror_model *m, mirror__fit_run *f, size_t epoch)
{
    const mirror_fit_desc *d = &f->d;
    mirror_metrics acc = {0.0, 0, 0};
    size_t first = epoch == d->initial_epoch ? d->initial_step : 0;
    int rc;
    f->log.epoch = epoch + 1;
    f->log.epochs = d->epochs;
    f->log.data_on_device = f->data != NULL;
    if ((rc = mirror__log_scaler(m, &f->log, 0))) return rc;
    f->acc = &acc, f->t0 = mirror__now(), f->skipped_before = f->log.skipped, f->partial = 0;
    f->log.skipped = 0;
    if (first) mirror__fit_resume_sums(m, f, epoch, first);
    mirror_permutation(f->perm, d->train->count, d->shuffle_seed, epoch);
    m->fit.augment_key = mirror_hd_key(d->shuffle_seed, 0x61756775ull /* "augu" */, epoch);
    rc = mirror__fit_steps(m, f, epoch, first, &acc, f->t0);
    if (rc == MIRROR_OK) rc = mirror__fit_epoch_end(m, f, epoch, &acc, f->t0);
    f->acc = NULL;
    return rc;
}

/* Whether the processes have lost each other (a host cut off, a rank
   killed or frozen, a stop while waiting): no collective can run. */
static int mirror__processes_lost(const mirror_model *m) { return m->s->procs->lost(m->s); }

/* After the processes lost each other: a failed step changes nothing, so
   every survivor holds the last complete step, and rank 0 saves it alone
   (as any checkpoint: a new file renamed into place), to be resumed on
   the processes at hand. The failure stays fit's result, with its
   message; a notice says what was saved, or why not. */
static void mirror__fit_save_lost(mirror_model *m, const mirror__fit_run *f)
{
    const mirror_fit_desc *d = &f->d;
    mirror_checkpoint_info at = mirror__fit_cursor(m, d, f->at_epoch, f->at_step, f->steps);
    mirror_error kept = m->err;
    char notice[sizeof m->err.message + 600];
    if (!mirror__leads(m)) return;
    if (m->update.stale & MIRROR__STALE_STATE)
        snprintf(notice, sizeof notice, "the processes lost each other, and rank 0 holds the optimizer state of its "
                 "slice alone (the update is sharded across processes: shard_update on), so it saved nothing: "
                 "resume from the last periodic checkpoint");
    else if (mirror__checkpoint_save(m, d->checkpoint, &at, d->checkpoint_keep))
        snprintf(notice, sizeof notice, "the processes lost each other, and rank 0 could not save the last complete "
                 "step: %s", m->err.message);
    else
        snprintf(notice, sizeof notice, "the processes lost each other; rank 0 saved the last complete step, step %llu "
                 "(epoch %llu, %llu steps into it), to %.300s: resume from it on the processes at hand",
                 (unsigned long long)at.step, (unsigned long long)at.epoch + 1, (unsigned long long)at.epoch_step,
                 d->checkpoint);
    m->err = kept;
    mirror__log(MIRROR_LOG_NOTICE, notice);
}

/* The end of a fit, after its last epoch or its first failure: a fixed
   loss scale that skipped every step fails it; the last checkpoint (unless
   the last step saved it, or nothing ran), also after the processes lost
   each other; the trace, after the checkpoint, which it must never cost. */
static int mirror__fit_end(mirror_model *m, mirror__fit_run *f, int rc, mirror_epoch_log *last)
{
    const mirror_fit_desc *d = &f->d;
    mirror_metrics dropped;
    size_t i;
    if (rc == MIRROR_OK && f->ran && m->desc.loss_scale.kind != MIRROR_SCALE_DYNAMIC &&
        mirror_optimizer_steps(m) == f->applied)
        rc = mirror__fit_learnt_nothing(m, f->ran);
    if (rc == MIRROR_OK && d->checkpoint && f->ran && f->saved != m->steps)
        rc = mirror__fit_save(m, f, d->epochs, 0);
    else if (rc != MIRROR_OK && d->checkpoint && f->ran && f->saved != m->steps && mirror__processes_lost(m))
        mirror__fit_save_lost(m, f);
    if (mirror__take(m, &dropped, 0) && rc == MIRROR_OK) rc = m->err.code;
    mirror__fit_unhold(m);
    for (i = 0; i < f->nouts && mirror__leads(m); i++)
        if (MIRROR__OUTPUT_PATH(f, i) && f->outs[i].end) f->outs[i].end(m, f, i);
    mirror__fit_release(m, f);
    f->log.failed_outputs = f->failed;
    if (last) *last = f->log;
    return rc;
}

static int mirror__fit(mirror_model *m, const mirror_fit_desc *desc, mirror_epoch_log *last)
{
    mirror__fit_run f;
    mirror_metrics dropped;
    size_t epoch;
    int rc;
    if ((rc = mirror__fit_begin(m, desc, &f))) return rc;
    /* Metrics of steps before this fit (a fit stopped mid-epoch, steps run
       with out NULL) are not this fit's: dropped, as fit's own are at its end. */
    rc = mirror__take(m, &dropped, 0);
    for (epoch = f.d.initial_epoch; epoch < f.d.epochs && rc == MIRROR_OK; epoch++)
        rc = mirror__fit_epoch(m, &f, epoch);
    return mirror__fit_end(m, &f, rc, last);
}

/* A fit on a model already in fit (called from its hooks or a logger)
   would reset the outer fit's augmentation, lock and stop flag: refused. */
static int mirror__fit_once(mirror_model *m, const mirror_fit_desc *desc, mirror_epoch_log *last)
{
    int rc;
    if (m && m->fit.running)
        return mirror__fail(m, MIRROR_ERR_STATE,
                            "mirror_fit: this model is already in mirror_fit (called from a hook?); a fit cannot run "
                            "inside another on the same model");
    if (m) m->fit.running = 1;
    rc = mirror__fit(m, desc, last);
    if (m) m->fit.running = 0;
    return rc;
}

MIRROR_API int mirror_fit(mirror_model *m, const mirror_fit_desc *desc, mirror_epoch_log *last)
{
    MIRROR__LOCKED(m, "mirror_fit", mirror__fit_once(m, desc, last));
}

#ifdef __cplusplus
}
#endif
#endif /* MIRROR_IMPLEMENTATION_DONE */
#endif /* MIRROR_IMPLEMENTATION */

/* ---------------------------------------------------------------------------
   MIT License. Copyright (c) 2026 the mirror authors. See LICENSE.
--------------------------------------------------------------------------- */
