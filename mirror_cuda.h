/* mirror_cuda.h - the CUDA backend of mirror.h: replicas on every GPU of a
   machine, kernels that call mirror.h's shared math, cuBLAS GEMMs, NCCL.

// >>manual ==================================================================

   BUILDING

      Exactly one .cu file of the program compiles the implementation:

          // mirror_cuda.cu
          #define MIRROR_IMPLEMENTATION
          #include "mirror_cuda.h"

          nvcc -O3 -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_90,code=sm_90 -gencode arch=compute_100,code=sm_100 \
               -gencode arch=compute_110,code=sm_110 -gencode arch=compute_120,code=sm_120 \
               -gencode arch=compute_120,code=compute_120 \
               -Xcompiler -march=native,-ffp-contract=fast,-fno-math-errno \
               -c mirror_cuda.cu -o mirror_cuda.o
          cc -O3 -march=native -ffp-contract=fast -fno-math-errno -std=c99 app.c mirror_cuda.o \
             -o app -L$CUDA_PATH/lib64 -lcudart_static -lcublasLt -lcublas -lnccl -lstdc++ \
             -lm -ldl -lrt -lpthread

      The -gencode flags: SASS for each major from Turing (sm_75) to
      Blackwell (sm_100, sm_120), which the later minors of a major run
      too, and PTX for GPUs newer still (the Makefile's default CUDA_ARCH
      with CUDA 13; the README lists the GPUs). They are CUDA 13's:
      compute_110 is new there, and sm_100 and sm_120 need CUDA 12.8. Any
      CUDA 12 takes sm_75, sm_80 and sm_90 with PTX of compute_90; the
      Makefile asks its nvcc (--list-gpu-code), and -arch=native builds for
      the GPUs of the building machine. -Xcompiler gives the CPU code, the
      CPU replicas' included, the flags of a CPU build.

      Every other file includes mirror.h alone, from C, without
      MIRROR_IMPLEMENTATION: the same API, now with GPU replicas. Define
      MIRROR_NO_NCCL to build without NCCL (the copy reducer then does all
      reductions).

      What the program needs where it runs: the CUDA runtime is linked in
      (libcudart_static, as the Makefile does); it finds the driver
      (libcuda.so.1) when the program starts using it, so on a machine
      with no driver or no GPU the program starts and trains on CPU
      replicas (see DEVICES). cuBLAS (libcublas.so.13, libcublasLt.so.13)
      and NCCL (libnccl.so.2) are shared libraries the program cannot
      start without: install them (the CUDA toolkit or its redistributable
      packages), or find them through the rpath the Makefile sets or
      LD_LIBRARY_PATH. For a program that must also start where they are
      missing, ship the CPU build (mirror.h alone) beside the CUDA one.

      A build for a GPU machine without a compiler: make gpu-pack writes
      build/gpu-pack (about 30 MiB): the GPU tests, the trainer and the
      GPU benchmarks for x86-64-v3 hosts (no AVX-512), the default
      CUDA_ARCH's code (SASS for sm_75, 80, 90, 100, 110 and 120, PTX for
      compute_120), the CUDA runtime and libstdc++ linked in, no MPI, and
      a flavour without NCCL in nonccl/; they need glibc 2.34 or newer.
      Its run.sh OUTDIR [SECONDS] runs every GPU check under one deadline,
      finds cuBLAS and NCCL in the toolkit or in python3's nvidia/PACKAGE/lib
      packages (taking nonccl/ where libnccl is nowhere), and writes
      OUTDIR/gpu-results.txt as it goes; make gpu-report RESULTS=OUTDIR
      turns that into bench/GPU.md. "test_cuda ops" runs the operation
      tests alone, for compute-sanitizer.

      Where it has run: one NVIDIA H200 (sm_90; driver 580.159.04, CUDA
      13.0, cuBLAS 13.1.0, NCCL 2.28.3), 2026-11-28, through the pack.
      There every operation matched the CPU backend (NaN and Inf
      included), training on one replica matched the CPU backend and on
      2 and 4 replicas of the GPU one replica (within 1e-4 and 1e-5
      relative), NCCL with one rank (its buckets included) matched the copy
      reducer bit for bit, graphs, the sharded update and deterministic
      mode gave the bits they promise (below and mirror.h), and out of
      memory, checkpoints across backends, timing and the wait timeout
      behaved as described; compute-sanitizer's memcheck and racecheck
      over the operations found nothing (bench/GPU.md). Not yet run: two
      GPUs or more (NCCL and the copy reducer across GPUs, peer copies),
      several processes (MIRROR_MPI), the code for other architectures.

   DEVICES

      With no device list, every visible GPU is a replica (CUDA_VISIBLE_DEVICES
      is honoured by the runtime); mirror_strategy_desc.devices or
      MIRROR_DEVICES take "cuda" (all), "cuda:0,1" (GPUs 0 and 1),
      "cuda:0,0,0,0" (four replicas on GPU 0) or "cpu:N". num_replicas
      beyond the GPUs places the replicas on the GPUs in turn. Without a
      device list, what CUDA answers decides (mirror__cuda_verdict):

        no NVIDIA driver      CPU replicas, one per core, and one notice:
                              "no NVIDIA driver found (the CUDA runtime
                              finds no libcuda.so.1): training on 2 CPU
                              replicas" (CUDA's own words for it, "driver
                              version is insufficient", are not quoted:
                              no driver is there to update)
        a driver, no GPU      the same, "no NVIDIA GPU found: ..." (also
                              where CUDA_VISIBLE_DEVICES hides every GPU)
        a driver too old      an error (MIRROR_ERR_DEVICE) naming the
        for the CUDA runtime  driver's CUDA version and the runtime's
                              (12.4 and 13.0, say) and the ways out: a
                              newer driver, an older CUDA toolkit, or
                              devices "cpu"
        anything else         an error with CUDA's message (every GPU busy
                              or unavailable, a system not yet ready)

      So a machine with a GPU never trains on the CPU by surprise; anything
      that fails later (streams on an exclusive-mode GPU, say) is an error
      with its reason too. NCCL that cannot start by default (a small
      /dev/shm in a container) gives way to the copy reducer, with a
      notice; asked for, it is an error. An explicit "cuda..." list where
      no GPU can be used is an error (MIRROR_ERR_DEVICE) with the same
      reason: devices "cuda:0": no NVIDIA driver found (the CUDA runtime
      finds no libcuda.so.1).

   REDUCERS

      nccl   ncclCommInitAll over the replicas' GPUs. The gradient arena is
             all-reduced in buckets of at least 25 MB (MIRROR_BUCKET_BYTES),
             cut at layer starts from the top layer down: each replica's
             thread queues a bucket's ncclAllReduce as soon as its backward
             has queued the bucket's gradients, on a stream of its own that
             waits for them by an event, so the sums overlap the backward of
             the layers below (as DDP's buckets do); the update waits for
             the last. In one process; across processes one all-reduce
             follows backward (see PROCESSES). Needs distinct GPUs: NCCL
             refuses two ranks on one GPU.
      copy   the sum on the first replica's GPU, adding replica 0, 1, 2, ...
             in that order (the CPU reducer's order, so the same bits), then
             copies back; GPUs reached by peer copies. The default when
             replicas share a GPU or NCCL is absent.
      Choose with mirror_strategy_desc.reducer or MIRROR_REDUCER=nccl|copy.
      Mixed precision all-reduces the 16-bit gradient: NCCL in ncclFloat16
      or ncclBfloat16 (rounding at every hop), the copy reducer widening
      each replica's value, adding in fp32 in replica order and rounding
      once (the CPU reducer's bits).

   MIXED PRECISION

      Activations, their gradients, im2col's columns and the weights the
      layers read are 16-bit buffers (CUDA_R_16F or CUDA_R_16BF): every
      kernel loads 16 bits, computes in fp32 and stores 16 bits
      (mirror_hd_load, mirror_hd_store); the GEMMs are cublasGemmEx (and
      cuBLASLt's matmul) on 16-bit A and B with CUBLAS_COMPUTE_32F, on
      tensor cores, C rounded once to 16 bits or, for the weight
      gradients, kept in fp32; split-K partial sums stay in fp32 too
      (cuBLAS's CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, the
      compute-type reduction scheme for cuBLASLt). The shard goes up in
      fp32, as gathered, and one kernel narrows it into the 16-bit input
      the layers read: the host gathers rows, the GPU converts. The update after the all-reduce is three
      launches per replica, none of which the host waits for: check (one
      pass over the 16-bit gradient, 2 bytes a parameter: sets the
      scaler's found_nonfinite), the fused SGD or Adam (reads the flag and
      returns at once when it is set; else unscales, updates the fp32
      masters and moments, and writes the 16-bit working copy that the
      GEMMs read, in the same pass: AdamW moves 28 bytes a parameter, SGD
      with momentum 20), and the scaler's update (one thread). So the
      update moves 30 bytes a parameter with AdamW, 22 with SGD and
      momentum. The scaler lives in device memory; kernels read it, the
      host never does.

      Bytes of GPU memory read and written per parameter in one step of
      one replica with AdamW, each pass counting its buffers once (a GEMM
      may read its operands more than once from the cache; the network's
      share of an all-reduce is NCCL's):

                                           fp32   fp16 / bf16 mixed
        forward GEMMs read the weights        4   2 (the 16-bit copy)
        input-gradient GEMMs read them        4   2
        weight-gradient GEMMs write dW        4   4 (fp32)
        dW narrowed to 16 bits                -   6 (read 4, write 2)
        all-reduce in place (read, write)     8   4
        check (guard or scaler)               4   2
        AdamW update                         28   28 (+ the 16-bit copy)
        in all                               52   48

      The 16-bit gradient halves the all-reduce and the 16-bit copy halves
      the weights' reads; the activations, which a GEMM reads as often as
      the weights per sample, are halved too. With the sharded update each
      replica's AdamW pass covers 1/R of the parameters.

   STREAMS AND WAITING

      Each replica has a compute stream, a copy stream and (NCCL) a stream
      for its buckets' all-reduces; a replica's host thread only queues
      work on them. A shard is gathered into one of two
      pinned host buffers and copied on the copy stream into one of two
      input buffers on the GPU, while the compute stream may still run the
      step before on the other pair (double buffering); the compute stream
      waits for the copy with an event, the copy for the compute that last
      read its buffer. Within mirror_train_step the host waits for nothing
      unless the caller asks for the step's metrics (out != NULL); with
      out == NULL the loss sums stay on the device until mirror_take_metrics.
      mirror_fit reads them once per progress update and once per epoch.
      Data kept on the device (mirror.h, DATA ON THE DEVICE) take the same
      path with a shard's row indices (8 bytes a row) in place of its rows;
      the gather kernel (mirror__k_gather) then writes the input buffers on
      the compute stream.

      Where the host does wait (a download, memory about to be freed), it
      polls the stream rather than blocking in the driver, with the
      strategy's timeout (mirror_strategy_desc.timeout, else
      $MIRROR_TIMEOUT, else 300 s), and every 256th poll asks NCCL for an
      asynchronous error (ncclCommGetAsyncError). A failed NCCL operation,
      or a wait past the timeout, aborts every NCCL communicator of the
      strategy (ncclCommAbort, which ends the collectives in flight) and
      fails the call with MIRROR_ERR_DEVICE or MIRROR_ERR_TIMEOUT: a hang
      becomes an error. A copy between the GPU and pageable memory (the
      caller's, as in mirror_get_parameters and mirror_predict) would hold
      the host in the driver until the stream reached it, where no timeout
      runs: such a copy first waits for the stream by polling. The strategy's NCCL reductions fail at once from
      then on; destroy it and create another. A communicator whose init
      failed is aborted, not destroyed.

   SPEED

      The layout kernels (im2col, col2im, permute, pooling, batch
      normalisation's elementwise passes) split an index into coordinates by
      multiplying by a precomputed reciprocal (mirror_hd_divisor, in the
      shared math, tested against / and % on the CPU): a GPU has no integer
      divider. A convolution's bias gradient is spread over the GPU: each
      channel's elements are cut into spans of about 4096, one block a
      span, and a second pass adds a channel's spans in order (the same
      bits every run). A dense layer's reads dy along its rows, a thread a
      channel (a warp's reads side by side), the rows cut into runs of
      about 32 added in row order, and a second pass adds a channel's runs
      in order; a shard of up to 32 rows is one run, the CPU backend's
      order and bits.
      The sum of squares (the norm for clipping, a slice's with the sharded
      update) is spread the same way: up to 1024 blocks each add a span in
      double, and one block adds their sums in order.
      A convolution keeps its im2col from forward for backward when every
      convolution's whole-shard im2col fits in MIRROR_CUDA_KEEP_COLS bytes
      (default 1 GiB a replica; define it to change the budget, 0 to redo
      im2col in backward in one shared buffer). Each parameter tensor
      starts at a 256-byte boundary of the parameter, gradient and state
      arenas (aligned GEMM operands; zeros between, which no update
      changes); the API and checkpoints see the values packed. Overlap: see
      STREAMS AND WAITING (the input) and REDUCERS (NCCL's buckets).
      A dense layer's forward is one cuBLASLt matmul with the bias as its
      epilogue (CUBLASLT_EPILOGUE_BIAS; the plan, descriptors and the
      algorithm cuBLASLt's heuristic picks, is made at a key's first call
      and kept, 16 a replica; the key is the shape, the data type and the
      alignment of each operand, which the heuristic is told, since it
      assumes 256 bytes and activations are carved at 64; in deterministic
      mode at most the alignment every chunk has, whatever the replica
      count: see mirror.h, DETERMINISTIC MODE); where cuBLASLt
      has no algorithm for a key, or refuses a matmul (the key then takes
      this path from then on), the GEMM and one epilogue kernel. A convolution's bias is per row of
      its GEMM's output, which cuBLASLt's bias does not do: the GEMM and
      the epilogue kernel, before the permute. A relu right after a dense
      or conv2d layer is applied in place by that kernel, not by
      cuBLASLt's relu, whose max(x, 0) need not keep a NaN
      (mirror_hd_relu does; see mirror.h, NON-FINITE VALUES), and its
      output is the layer's buffer. So a dense-relu pair is two launches
      and one pass over its output, a conv-relu pair one pass besides the
      permute (before: a bias pass and a relu pass, each a launch).
      A step's loss and correct sums (accumulate) are one block of 256
      threads: strided lanes and a fixed tree, the CPU backend's order.
      NCCL's stream (the buckets' all-reduces) has the device's highest
      priority, as PyTorch's has, so that a bucket ready during backward
      is not queued behind backward's kernels.

      A dataset that fits in device memory is copied there once (fit's
      data_on_device, mirror_keep_data; 16-bit in mixed precision), so a
      step uploads its rows' indices, not its rows: bench_gpu's mlp2048
      at batch 4096 sent 12.8 MB a step through one host thread's memcpy
      into pinned memory, its 8192-wide MLP 268 MB, in fp32 even in fp16;
      now 32 KiB and 64 KiB. Data that do not fit still go
      through the host, one thread a replica (see mirror.h, DATA ON THE
      DEVICE).

      Known remaining costs, one line each:
      - a convolution's bias and relu are a pass of their own before the
        permute, not folded into it (the backend's permute takes no bias);
      - batch normalisation combines the replicas' statistics on the host,
        twice per layer per step, and so turns graphs off for its models;
      - the copy reducer's staging area, grown once (a first step), is
        freed by cudaFree, which also waits, untimed, for the first GPU's
        copy and NCCL streams (its compute streams are waited for first,
        with the timeout);
      - not yet profiled: the CNN's fp32 step at batch 512 took 1.048 ms
        on an H200 with graphs, PyTorch's 0.897 ms with CUDA graphs and
        cuDNN's convolutions (0.86x; bench/GPU.md).

   GRAPHS

      With mirror_model_desc.graphs = 1 each replica's forward, loss and
      backward of a training step, and its update (check, clipping,
      optimizer, loss scaler), are recorded once each as CUDA graphs
      (stream capture, thread-local mode) and replayed with cudaGraphLaunch:
      the CNN's 40-odd launches a replica become two, plus the input's
      upload, two one-thread kernels that write the step at hand into
      device memory (mirror__tick: the step for dropout's masks, then the
      learning rate and fp32 Adam's bias corrections for the update, which
      the kernels read there, so a replay sees this step's), and the
      reducer between the graphs. A graph holds the values it was recorded
      with, so each replica keeps up to 8 graphs, one per key: for a pass,
      the shard's size and first row, the input slot (of the two
      double-buffered ones), the loss's divisor (the global batch),
      accumulation, and whether the metrics are read at once; the update
      has one. The sharded updates are not recorded. A key's first
      pass runs as queued (cuBLAS and the kernels load), its second is
      recorded, later ones replay; the least recently used graph makes
      room for a new key. A recording that fails is logged as a notice and
      that key runs as queued from then on. Graphs are not used for models
      with batchnorm layers (the replicas' statistics are combined on the
      host at each layer), in deterministic mode, or while mirror_timing
      records phase edges; with graphs the gradient is all-reduced after
      backward, not in buckets during it. The tests emulate replays on CPU
      replicas (MIRROR_CPU_GRAPHS=1: a replay queues the work again with the
      host's state as at capture), so that a value read from the host that
      should come from the device shows.

   THE SHARDED UPDATE (ZeRO stage 1)

      With mirror_model_desc.shard_update = MIRROR_SHARD_ON, replicas in one
      process share out the update: the parameter arena is padded to a
      multiple of R x 64 floats and cut into R equal slices; the gradient is
      reduce-scattered (ncclReduceScatter in place, in the gradient's own
      type; the copy reducer sums the whole arena), each replica checks its
      slice (slice_stats: a flag and, with clipping, its sum of squares),
      the reducer all-reduces those two floats, every replica takes the
      same verdict and norm from them (mirror_hd_slice_verdict), updates
      its slice with the optimizer state of that slice alone, and
      ncclAllGather (in place, as bytes; the copy reducer gathers on the
      first GPU and copies back) hands the slices round: fp32
      parameters, or in mixed precision the 16-bit working copy, which
      the layers read. With the copy reducer the parameters are
      the unsharded update's bit for bit; with NCCL on three GPUs or more
      its reduce-scatter may add in another order than its all-reduce.
      Adam's state costs 8/R bytes a parameter
      per GPU instead of 8; the communication is the all-reduce's (a
      reduce-scatter and an all-gather of the same type). Gradients are not
      all-reduced in buckets in this mode. Across processes it is refused
      (MIRROR_ERR_UNSUPPORTED): a checkpoint would need every process's
      slices.

   ERRORS

      Every CUDA, cuBLAS and NCCL call is checked. A failure becomes a
      result code (MIRROR_ERR_NO_MEMORY for out-of-memory, MIRROR_ERR_DEVICE
      otherwise) with a message naming the call and the library's own error
      string, returned by the mirror_* call that met it. Freeing checks its
      results too (the waits, cudaFree, cudaFreeHost, cublasDestroy): a
      failure there is reported by the next call on that replica under its
      own name, not blamed on a later launch; one met while a model or
      strategy is destroyed, when no call follows, is logged as a notice.

   INSIDE mirror_cuda.h

      Sections are marked `// >>name` (grep for them), in this order:
      manual; then, under MIRROR_IMPLEMENTATION, mirror.h's plan for the
      GPU (a kernel adds indexing to the shared math, its launcher beside
      it checks the launch; the backend and reducer tables are the CPU's
      in kind):

        cuda structs          the private state, together
        cuda errors           a failed call recorded, the launch check
        cuda waiting          polling a stream under the timeout, NCCL
                              aborted
        cuda plans            cuBLASLt's plans for a dense layer's GEMM
        cuda graphs           a pass recorded, replayed and freed
        cuda kernels          what every kernel shares: the grid, the
                              grid-stride loop, the block's sum
        cuda replicas         a replica's GPU opened and closed
        cuda memory           memory, copies, the input's slots, gather
        cuda gemm             cuBLAS and cuBLASLt GEMMs, the epilogue
        cuda bias             bias add and the bias gradient
        cuda activations      relu, tanh, sigmoid, GELU
        cuda convolution      im2col, col2im, permute
        cuda pooling          max and average pooling
        cuda dropout          dropout's masks
        cuda batchnorm        batch normalisation's sums and passes
        cuda add              a residual block's sum
        cuda losses           softmax cross-entropy, MSE, the step's sums
        cuda update           fp32 check, clipping, the sharded update's
                              slices, SGD and Adam
        cuda mixed precision  narrow, widen, check, fused updates, scaler
        cuda timing           mirror_timing's events
        cuda buckets          NCCL's all-reduce during backward
        cuda backend          the table, mirror__cuda_backend
        cuda reducers         nccl, and the copy reducer with its kernels
        cuda devices          the device list, what CUDA answers, the
                              strategy's setup
        cuda processes        several processes (MIRROR_MPI)

      From cuda replicas to cuda buckets the groups follow the backend
      table (mirror.h's mirror__backend), each where its first member is;
      graphs have a section of their own above.
*/
#ifndef MIRROR_CUDA_H
#define MIRROR_CUDA_H

#define MIRROR_CUDA 1
#include "mirror.h"

#if defined(MIRROR_IMPLEMENTATION) && !defined(MIRROR_CUDA_IMPLEMENTATION_DONE)
#define MIRROR_CUDA_IMPLEMENTATION_DONE

#ifndef __CUDACC__
#error "compile the file that defines MIRROR_IMPLEMENTATION and includes mirror_cuda.h with nvcc"
#endif

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifndef MIRROR_NO_NCCL
#include <nccl.h>
#endif

extern "C" {

// >>cuda structs ------------------------------------------------------------
/* The private state, together: mirror__gpu is a strategy's (its replicas'
   GPUs and streams, the NCCL communicators and what aborts them, the copy
   reducer's staging area), mirror__cuda_dev a replica's (its streams and
   events, cuBLAS and cuBLASLt with their plans, its scratch, timing's
   events, its first failure); mirror__lt_plan one GEMM key's cuBLASLt
   plan, mirror__cuda_waiting one wait's polls; mirror__sources and
   mirror__bytes travel by value as kernel arguments. */

/* The strategy's GPU state: one stream per replica, NCCL communicators. */
typedef struct mirror__gpu {
    size_t replicas;
    int *device;
    cudaStream_t *stream;
    cudaEvent_t *ready; /* recorded on a replica's stream before a reduction */
    cudaEvent_t *done;  /* recorded on the root's stream after it: one per GPU's replica */
    int nccl;
#ifndef MIRROR_NO_NCCL
    ncclComm_t *comm;
#endif
    unsigned char *stage; /* the copy reducer's staging on the first GPU, for other GPUs' buffers */
    size_t stage_bytes;
    double timeout;         /* the strategy's: seconds a wait on a stream may take */
    pthread_mutex_t lock;   /* guards comm against an abort while another thread polls it */
    int locked;             /* lock was initialised */
    int aborted;            /* NCCL failed or hung: every communicator aborted */
    char why[200];          /* what made it abort */
} mirror__gpu;

/* A cuBLASLt plan for a dense layer's forward GEMM, made at the first call
   of its key (shape, data type, and the operands' alignments, which the
   heuristic must be told: it assumes 256 bytes; in deterministic mode at
   most the device's gemm_align, which every chunk has whatever the
   replica count, so that a chunk's algorithm is the same for every
   count): the descriptors, with the
   bias as the epilogue, and the algorithm the heuristic picked (usable 0:
   none, or cuBLASLt refused it once, and the layer then runs the plain GEMM
   and the epilogue kernel). */
#define MIRROR__LT_PLANS 16
typedef struct mirror__lt_plan {
    int ta, tb, usable;
    size_t m, n, k, lda, ldb, ldc;
    cudaDataType_t type;
    uint32_t align[3]; /* of A, B and C as the caller names them, in bytes (at most 256) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} mirror__lt_plan;

/* A replica's scratch in device memory (mirror__cuda_dev's part,
   squares and blas_ws): the bias gradient's parts in floats, the sum of
   squares' parts (a double per block of mirror__k_squares_part), and
   cuBLAS's workspace (cuBLAS's own advice for Hopper: 32 MiB). */
#define MIRROR__BIAS_PARTS ((size_t)1 << 16)
#define MIRROR__SQUARE_BLOCKS 1024
#define MIRROR__BLAS_WORKSPACE ((size_t)32 << 20)

/* A replica's device context: its GPU, its stream (the strategy's), its
   cuBLAS handle, and the first failure since the last status() call. */
typedef struct mirror__cuda_dev {
    struct mirror__gpu *gpu; /* the strategy's: communicators, timeout */
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudaEvent_t uploaded; /* after the last upload from the host buffers */
    /* The double-buffered input: the copy stream, and per slot the compute
       stream's release of it and the copy stream's upload into it. */
    cudaStream_t copy;
    cudaEvent_t freed[2], copied[2];
    /* The bucketed all-reduce (nccl): the replica's index, the stream NCCL
       runs on, a bucket made (on the compute stream), every bucket summed. */
    size_t replica;
    cudaStream_t comm;
    cudaEvent_t made, summed;
    float *part;          /* scratch: the bias gradient's parts (MIRROR__BIAS_PARTS floats) */
    double *squares;      /* scratch: the sum of squares' parts (MIRROR__SQUARE_BLOCKS doubles) */
    void *blas_ws;        /* cuBLAS's workspace, its own: a recorded GEMM allocates nothing */
    cublasLtHandle_t lt;  /* cuBLASLt (the same workspace) and its plans, the oldest replaced first */
    mirror__lt_plan plan[MIRROR__LT_PLANS];
    unsigned plans;
    /* The tests' refusal: cuBLASLt's heuristic is taken to find no
       algorithm, and its matmul to fail, as where cuBLASLt refuses. */
    int lt_refuses;
    size_t gemm_align;    /* the plans' alignment at most (gemm_align: deterministic mode's), 0: none */
    int precision;        /* the model's mirror_precision: the GEMM's compute type */
    /* Timing (mirror_timing), made by the first mark: an event per phase
       edge, and an origin event whose time on the host's clock is known. */
    cudaEvent_t mark[MIRROR__MARKS], origin;
    double origin_host;
    int timing;           /* the events exist */
    unsigned marked;      /* the slots recorded since timing began, a bit each */
    int code;
    char message[256];
} mirror__cuda_dev;

/* One wait for a stream or an event (mirror__gpu_wait). */
typedef struct mirror__cuda_waiting {
    mirror__gpu *g;
    cudaStream_t stream;
    cudaEvent_t event; /* NULL: the whole stream */
    cudaError_t e;     /* the runtime's answer to the last query */
    long polls;
    char why[200];     /* NCCL's failure */
} mirror__cuda_waiting;

/* The copy reducer's sources, a kernel argument: one buffer a replica. */
#define MIRROR__COPY_MAX 64
typedef struct mirror__sources {
    const void *p[MIRROR__COPY_MAX];
} mirror__sources;

/* Up to 32 bytes, as a kernel argument: the host's value is taken at the
   launch, so no host buffer has to outlive it. */
typedef struct mirror__bytes {
    unsigned char b[32];
} mirror__bytes;

// >>cuda errors -------------------------------------------------------------

static void mirror__cuda_record(mirror__cuda_dev *d, int code, const char *what, const char *why)
{
    if (d->code) return;
    d->code = code;
    if (snprintf(d->message, sizeof d->message, "GPU %d: %s: %s", d->device, what, why) >= (int)sizeof d->message)
        memcpy(d->message + sizeof d->message - 4, "...", 4); /* a cut message says so, as mirror__verror's */
}

/* Records a failed runtime call; returns whether it succeeded. The runtime
   keeps the error as the thread's last error too: clear it, so that the
   next launch check does not report it again. */
static int mirror__cuda_ok(mirror__cuda_dev *d, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    (void)cudaGetLastError();
    mirror__cuda_record(d, e == cudaErrorMemoryAllocation ? MIRROR_ERR_NO_MEMORY : MIRROR_ERR_DEVICE, what,
                        cudaGetErrorString(e));
    return 0;
}

static int mirror__blas_ok(mirror__cuda_dev *d, cublasStatus_t e, const char *what)
{
    if (e == CUBLAS_STATUS_SUCCESS) return 1;
    mirror__cuda_record(d, e == CUBLAS_STATUS_ALLOC_FAILED ? MIRROR_ERR_NO_MEMORY : MIRROR_ERR_DEVICE, what,
                        cublasGetStatusString(e));
    return 0;
}

/* Makes the replica's GPU current on the calling thread (a failure is
   recorded, as every call's). */
static mirror__cuda_dev *mirror__cuda_enter(void *dev)
{
    mirror__cuda_dev *d = (mirror__cuda_dev *)dev;
    mirror__cuda_ok(d, cudaSetDevice(d->device), "cudaSetDevice");
    return d;
}

/* After a launch: the launch error, if any (does not wait). */
#define MIRROR__LAUNCHED(d, name) mirror__cuda_ok(d, cudaGetLastError(), name)

// >>cuda waiting ------------------------------------------------------------
/* The host waits for a replica's stream (a download, freeing memory) by
   polling it with the strategy's timeout. NCCL reports a failed collective
   asynchronously (ncclCommGetAsyncError) and a collective whose peer failed
   never ends: a wait that sees such an error, or runs past the timeout,
   aborts every communicator of the strategy (ncclCommAbort), which ends
   the collectives in flight. The strategy's NCCL reductions fail from then
   on; the copy reducer and every other call work as before. */

/* Aborts every communicator once, noting why; returns why. */
static const char *mirror__nccl_abort(mirror__gpu *g, const char *why)
{
    pthread_mutex_lock(&g->lock);
    if (!g->aborted) {
        g->aborted = 1;
        snprintf(g->why, sizeof g->why, "%s", why);
#ifndef MIRROR_NO_NCCL
        for (size_t r = 0; g->comm && r < g->replicas; r++)
            if (g->comm[r]) {
                ncclCommAbort(g->comm[r]);
                g->comm[r] = NULL;
            }
#endif
    }
    pthread_mutex_unlock(&g->lock);
    return g->why;
}

/* The first asynchronous NCCL error of the strategy's communicators, into
   why; 0 when there is none. */
static int mirror__nccl_failed(mirror__gpu *g, char *why, size_t size)
{
    int failed = 0;
#ifndef MIRROR_NO_NCCL
    pthread_mutex_lock(&g->lock);
    for (size_t r = 0; g->comm && r < g->replicas && !failed; r++) {
        ncclResult_t async = ncclSuccess;
        if (!g->comm[r] || ncclCommGetAsyncError(g->comm[r], &async) != ncclSuccess) continue;
        if (async != ncclSuccess && async != ncclInProgress) {
            snprintf(why, size, "NCCL failed on GPU %d: %s", g->device[r], ncclGetErrorString(async));
            failed = 1;
        }
    }
    pthread_mutex_unlock(&g->lock);
#else
    (void)g, (void)why, (void)size;
#endif
    return failed;
}

/* mirror__poll's question: done (1), not yet (0), or failed (-1). */
static int mirror__cuda_poll(void *ctx)
{
    mirror__cuda_waiting *w = (mirror__cuda_waiting *)ctx;
    w->e = w->event ? cudaEventQuery(w->event) : cudaStreamQuery(w->stream);
    if (w->e == cudaSuccess) return 1;
    if (w->e != cudaErrorNotReady) return -1;
    /* NCCL's flags every 256th poll: cheap, but under the lock */
    return ++w->polls % 256 == 0 && w->g->nccl && mirror__nccl_failed(w->g, w->why, sizeof w->why) ? -1 : 0;
}

/* Waits for the work queued on stream (up to event, when not NULL); on
   failure aborts NCCL where it is to blame, and returns the code with the
   reason in why. */
static int mirror__gpu_wait(mirror__gpu *g, cudaStream_t stream, cudaEvent_t event, char *why, size_t size)
{
    mirror__cuda_waiting w;
    int got;
    memset(&w, 0, sizeof w);
    w.g = g, w.stream = stream, w.event = event;
    got = mirror__poll(mirror__cuda_poll, &w, g->timeout);
    if (got > 0) return MIRROR_OK;
    if (got < 0 && w.e != cudaErrorNotReady) { /* the runtime's own error: a kernel failed */
        (void)cudaGetLastError();
        snprintf(why, size, "%s", cudaGetErrorString(w.e));
        return w.e == cudaErrorMemoryAllocation ? MIRROR_ERR_NO_MEMORY : MIRROR_ERR_DEVICE;
    }
    if (got == 0)
        snprintf(w.why, sizeof w.why, "the GPU's work did not finish in %g s (the strategy's timeout or "
                 "$MIRROR_TIMEOUT)%s", g->timeout, g->nccl ? "; NCCL aborted" : "");
    snprintf(why, size, "%s", g->nccl ? mirror__nccl_abort(g, w.why) : w.why);
    return got == 0 ? MIRROR_ERR_TIMEOUT : MIRROR_ERR_DEVICE;
}

/* The same for a replica: the failure recorded as `what`'s. */
static int mirror__cuda_wait(mirror__cuda_dev *d, cudaEvent_t event, const char *what)
{
    char why[200];
    int code = mirror__gpu_wait(d->gpu, d->stream, event, why, sizeof why);
    if (code) mirror__cuda_record(d, code, what, why);
    return code == MIRROR_OK;
}

/* Waits until the replica's copy, NCCL and compute streams are idle
   (before memory is freed). */
static int mirror__cuda_idle(mirror__cuda_dev *d, const char *what)
{
    char why[200];
    int code = mirror__gpu_wait(d->gpu, d->copy, NULL, why, sizeof why);
    if (!code) code = mirror__gpu_wait(d->gpu, d->comm, NULL, why, sizeof why);
    if (code) mirror__cuda_record(d, code, what, why);
    return !code && mirror__cuda_wait(d, NULL, what);
}

// >>cuda plans --------------------------------------------------------------
/* cuBLASLt's plans for a dense layer's forward GEMM (cuBLAS's handle is
   made with the replica: mirror__cuda_open). */

/* Frees a cuBLASLt plan's descriptors (those made). */
static void mirror__lt_free(mirror__lt_plan *p)
{
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

/* The CUDA type of storage in the model's precision. */
static cudaDataType_t mirror__storage_type(const mirror__cuda_dev *d)
{
    return d->precision == MIRROR_PRECISION_FP16   ? CUDA_R_16F
           : d->precision == MIRROR_PRECISION_BF16 ? CUDA_R_16BF
                                                   : CUDA_R_32F;
}

/* The plan for C [m, n] = op(A) op(B) + bias, operands swapped as in
   mirror__cuda_gemm (cuBLASLt's D is C^T, whose rows are C's columns: the
   bias epilogue adds bias[j] to C's column j). Split-K partial sums stay
   in fp32 (the compute type), as cuBLAS's are kept by its math mode. */
static mirror__lt_plan *mirror__lt_plan_for(mirror__cuda_dev *d, int ta, int tb, size_t m, size_t n, size_t k,
                                            const void *a, size_t lda, const void *b, size_t ldb, const void *c,
                                            size_t ldc)
{
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t type = mirror__storage_type(d);
    uint32_t align[3] = {mirror__gemm_key_align(a, d->gemm_align), mirror__gemm_key_align(b, d->gemm_align),
                         mirror__gemm_key_align(c, d->gemm_align)};
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t found;
    size_t ws = MIRROR__BLAS_WORKSPACE;
    int count = 0;
    unsigned i;
    mirror__lt_plan *p;
    for (i = 0; i < MIRROR__MIN(d->plans, MIRROR__LT_PLANS); i++) {
        p = &d->plan[i];
        if (p->ta == ta && p->tb == tb && p->m == m && p->n == n && p->k == k && p->lda == lda && p->ldb == ldb &&
            p->ldc == ldc && p->type == type && !memcmp(p->align, align, sizeof align))
            return p;
    }
    p = &d->plan[d->plans++ % MIRROR__LT_PLANS];
    mirror__lt_free(p);
    p->ta = ta, p->tb = tb, p->m = m, p->n = n, p->k = k, p->lda = lda, p->ldb = ldb, p->ldc = ldc, p->type = type;
    memcpy(p->align, align, sizeof align);
    memset(&found, 0, sizeof found);
    /* cuBLASLt's A is the caller's B (swapped), its D the caller's C */
#define MIRROR__PREF(attr, v) \
    (cublasLtMatmulPreferenceSetAttribute(pref, attr, &(v), sizeof(v)) == CUBLAS_STATUS_SUCCESS)
    p->usable =
        cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&p->a, type, tb ? k : n, tb ? n : k, (int64_t)ldb) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&p->b, type, ta ? m : k, ta ? k : m, (int64_t)lda) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&p->c, type, n, m, (int64_t)ldc) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
        MIRROR__PREF(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws) &&
        MIRROR__PREF(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction) &&
        MIRROR__PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[1]) &&
        MIRROR__PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[0]) &&
        MIRROR__PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]) &&
        MIRROR__PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[2]) &&
        cublasLtMatmulAlgoGetHeuristic(d->lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &found, &count) ==
            CUBLAS_STATUS_SUCCESS &&
        count > 0 && !d->lt_refuses;
#undef MIRROR__PREF
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    p->algo = found.algo;
    return p;
}

// >>cuda graphs -------------------------------------------------------------

/* Graphs (GRAPHS in the manual). A recording that fails leaves no failure
   behind (the notice says why): the pass is then queued as usual, which
   reports any failure of its own. */
static void mirror__cuda_capture_notice(mirror__cuda_dev *d, const char *what, cudaError_t e)
{
    char notice[400];
    snprintf(notice, sizeof notice, "GPU %d: a training pass could not be recorded as a graph (%s: %s); it runs as "
                                    "queued",
             d->device, what, d->code ? d->message : cudaGetErrorString(e));
    mirror__log(MIRROR_LOG_NOTICE, notice);
    (void)cudaGetLastError();
    d->code = 0, d->message[0] = '\0';
}

static int mirror__cuda_capture_begin(void *dev)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    cudaError_t e;
    if (d->code) return -1; /* a failure waits to be reported: the pass as queued reports it */
    e = cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) return 1;
    mirror__cuda_capture_notice(d, "cudaStreamBeginCapture", e);
    return 0;
}

static void *mirror__cuda_capture_end(void *dev)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(d->stream, &graph);
    const char *what = "cudaStreamEndCapture";
    if (e == cudaSuccess && !d->code) e = cudaGraphInstantiate(&exec, graph, 0), what = "cudaGraphInstantiate";
    if (graph) (void)cudaGraphDestroy(graph); /* the executable graph keeps what it needs */
    if (e == cudaSuccess && !d->code) return exec;
    if (exec) (void)cudaGraphExecDestroy(exec);
    mirror__cuda_capture_notice(d, what, e);
    return NULL;
}

static void mirror__cuda_graph_launch(void *dev, void *graph)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    mirror__cuda_ok(d, cudaGraphLaunch((cudaGraphExec_t)graph, d->stream), "cudaGraphLaunch");
}

/* A graph still running is freed once it is done (no wait). */
static void mirror__cuda_graph_free(void *dev, void *graph)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    mirror__cuda_ok(d, cudaGraphExecDestroy((cudaGraphExec_t)graph), "cudaGraphExecDestroy");
}

// >>cuda kernels ------------------------------------------------------------
/* Each kernel adds indexing to the shared math of mirror.h and nothing more;
   where the CPU backend sums in a fixed order, so does the kernel, so that
   the two give the same bits. A grid-stride loop covers any n. */

#define MIRROR__THREADS 256

static unsigned mirror__blocks(size_t n)
{
    size_t b = (n + MIRROR__THREADS - 1) / MIRROR__THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

#define MIRROR__FOR_EACH(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* Indices are split into coordinates by mirror_hd_divisor (a multiply-high
   and shifts), made on the host at each launch: a GPU has no integer
   divider. */

/* The storage format f (0: floats, else 16-bit values) of every kernel's
   void * buffers: mirror_hd_load and mirror_hd_store. */

/* The block's sum of each thread's s, by a fixed tree: every thread gets
   it. part is the block's shared array of blockDim.x (a power of two);
   T is float or double (a template: C++ linkage inside the C block). */
extern "C++" {
template <typename T> __device__ static T mirror__block_sum(T *part, T s)
{
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    s = part[0];
    __syncthreads(); /* part is free again */
    return s;
}
}

// >>cuda replicas -----------------------------------------------------------
/* The backend's members, kernels beside their launchers, in groups in the
   order of the table (mirror.h's mirror__backend; mirror__cuda_backend
   at the end of them). First a replica's GPU: opened, closed, made
   current, its failures, its memory. */

/* Makes (make 1) or destroys (0: those that exist) n events without
   timing; whether every call succeeded. */
static int mirror__cuda_events(mirror__cuda_dev *d, cudaEvent_t *e, int n, int make)
{
    int ok = 1, i;
    for (i = 0; i < n; i++)
        if (make)
            ok = ok && mirror__cuda_ok(d, cudaEventCreateWithFlags(&e[i], cudaEventDisableTiming), "cudaEventCreate");
        else if (e[i])
            ok = mirror__cuda_ok(d, cudaEventDestroy(e[i]), "cudaEventDestroy") && ok, e[i] = NULL;
    return ok;
}

/* A replica's device memory beyond its arenas, whatever the precision:
   the bias and square partial sums, and cuBLAS's workspace. */
static size_t mirror__cuda_workspace(int precision, size_t largest)
{
    (void)precision, (void)largest; /* the kernels read and write 16 bits themselves */
    return MIRROR__BIAS_PARTS * sizeof(float) + MIRROR__SQUARE_BLOCKS * sizeof(double) + MIRROR__BLAS_WORKSPACE;
}

/* Replica r's GPU, and unless free_bytes is NULL its free and total
   memory (cudaMemGetInfo; 0 and 0 where the runtime cannot tell). */
static int mirror__cuda_device_memory(mirror_strategy *s, size_t r, size_t *free_bytes, size_t *total_bytes)
{
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    if (free_bytes && (cudaSetDevice(g->device[r]) != cudaSuccess ||
                       cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess)) {
        (void)cudaGetLastError(); /* see mirror__cuda_ok */
        *free_bytes = *total_bytes = 0;
    }
    return g->device[r];
}

static void *mirror__cuda_open(mirror_strategy *s, size_t r, size_t *workspace_bytes, mirror_error *err)
{
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    mirror__cuda_dev *d = (mirror__cuda_dev *)mirror__zalloc(1, sizeof *d);
    int least = 0, greatest = 0; /* stream priorities: the greatest is the most negative */
    if (!d) {
        mirror__error(err, MIRROR_ERR_NO_MEMORY, "replica %zu: out of memory", r);
        return NULL;
    }
    d->gpu = g;
    d->device = g->device[r];
    d->stream = g->stream[r];
    d->replica = r;
    *workspace_bytes = mirror__cuda_workspace(0, 0);
    if (!mirror__cuda_ok(d, cudaSetDevice(d->device), "cudaSetDevice") ||
        !mirror__blas_ok(d, cublasCreate(&d->blas), "cublasCreate") ||
        !mirror__blas_ok(d, cublasSetStream(d->blas, d->stream), "cublasSetStream") ||
        /* split-K partial sums in fp32 when C is 16-bit (cuBLASLt's: its plans' reduction scheme) */
        !mirror__blas_ok(d, cublasSetMathMode(d->blas, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
                         "cublasSetMathMode") ||
        !mirror__cuda_ok(d, cudaMalloc(&d->part, MIRROR__BIAS_PARTS * sizeof(float)), "cudaMalloc") ||
        !mirror__cuda_ok(d, cudaMalloc(&d->squares, MIRROR__SQUARE_BLOCKS * sizeof(double)), "cudaMalloc") ||
        !mirror__cuda_ok(d, cudaMalloc(&d->blas_ws, MIRROR__BLAS_WORKSPACE), "cudaMalloc") ||
        !mirror__blas_ok(d, cublasSetWorkspace(d->blas, d->blas_ws, MIRROR__BLAS_WORKSPACE), "cublasSetWorkspace") ||
        !mirror__blas_ok(d, cublasLtCreate(&d->lt), "cublasLtCreate") ||
        !mirror__cuda_ok(d, cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking), "cudaStreamCreate") ||
        /* NCCL's stream at the highest priority (as PyTorch's): a bucket's
           all-reduce is not queued behind backward's kernels */
        !mirror__cuda_ok(d, cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange") ||
        !mirror__cuda_ok(d, cudaStreamCreateWithPriority(&d->comm, cudaStreamNonBlocking, greatest),
                         "cudaStreamCreateWithPriority") ||
        !mirror__cuda_events(d, &d->uploaded, 1, 1) || !mirror__cuda_events(d, d->freed, 2, 1) ||
        !mirror__cuda_events(d, d->copied, 2, 1) || !mirror__cuda_events(d, &d->made, 1, 1) ||
        !mirror__cuda_events(d, &d->summed, 1, 1)) {
        mirror__error(err, d->code, "replica %zu: %s", r, d->message);
        if (d->blas) cublasDestroy(d->blas);
        if (d->lt) cublasLtDestroy(d->lt);
        if (d->part) cudaFree(d->part);
        if (d->squares) cudaFree(d->squares);
        if (d->blas_ws) cudaFree(d->blas_ws);
        if (d->copy) cudaStreamDestroy(d->copy);
        if (d->comm) cudaStreamDestroy(d->comm);
        mirror__cuda_events(d, &d->uploaded, 1, 0), mirror__cuda_events(d, d->freed, 2, 0);
        mirror__cuda_events(d, d->copied, 2, 0), mirror__cuda_events(d, &d->made, 1, 0);
        mirror__cuda_events(d, &d->summed, 1, 0);
        MIRROR_FREE(d);
        return NULL;
    }
    return d;
}

/* A failure that no later call will report (the model is going away) is
   logged as a notice, not lost. */
static void mirror__cuda_close(void *dev)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (mirror__cuda_idle(d, "waiting before freeing the replica")) {
        int k;
        mirror__blas_ok(d, cublasDestroy(d->blas), "cublasDestroy");
        for (k = 0; k < MIRROR__LT_PLANS; k++) mirror__lt_free(&d->plan[k]);
        mirror__blas_ok(d, cublasLtDestroy(d->lt), "cublasLtDestroy");
        mirror__cuda_ok(d, cudaFree(d->part), "cudaFree");
        mirror__cuda_ok(d, cudaFree(d->squares), "cudaFree");
        mirror__cuda_ok(d, cudaFree(d->blas_ws), "cudaFree");
        mirror__cuda_events(d, &d->uploaded, 1, 0), mirror__cuda_events(d, d->freed, 2, 0);
        mirror__cuda_events(d, d->copied, 2, 0), mirror__cuda_events(d, &d->made, 1, 0);
        mirror__cuda_events(d, &d->summed, 1, 0);
        mirror__cuda_ok(d, cudaStreamDestroy(d->copy), "cudaStreamDestroy");
        mirror__cuda_ok(d, cudaStreamDestroy(d->comm), "cudaStreamDestroy");
        for (k = 0; d->timing && k < MIRROR__MARKS; k++)
            mirror__cuda_ok(d, cudaEventDestroy(d->mark[k]), "cudaEventDestroy");
        if (d->timing) mirror__cuda_ok(d, cudaEventDestroy(d->origin), "cudaEventDestroy");
    }
    if (d->code) {
        char notice[300];
        snprintf(notice, sizeof notice, "while freeing a model: %s", d->message);
        mirror__log(MIRROR_LOG_NOTICE, notice);
    }
    MIRROR_FREE(d);
}

static void mirror__cuda_bind(void *dev) { mirror__cuda_enter(dev); }

static int mirror__cuda_status(void *dev, mirror_error *err)
{
    mirror__cuda_dev *d = (mirror__cuda_dev *)dev;
    int code = d->code;
    if (!code) return MIRROR_OK;
    mirror__error(err, code, "%s", d->message);
    d->code = 0;
    return code;
}

// >>cuda memory -------------------------------------------------------------
/* Device and pinned memory, copies, the input's two slots, a value set
   in stream order, and the rows of data kept on the device gathered. */

static void *mirror__cuda_alloc(void *dev, size_t bytes)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    void *p = NULL;
    bytes = bytes ? bytes : 256; /* never NULL for an empty arena */
    if (!mirror__cuda_ok(d, cudaMalloc(&p, bytes), "cudaMalloc")) return NULL;
    if (!mirror__cuda_ok(d, cudaMemsetAsync(p, 0, bytes, d->stream), "cudaMemsetAsync")) {
        cudaFree(p);
        return NULL;
    }
    /* the input's uploads (copy stream) come after the zeroing too */
    if (mirror__cuda_ok(d, cudaEventRecord(d->freed[0], d->stream), "cudaEventRecord"))
        mirror__cuda_ok(d, cudaEventRecord(d->freed[1], d->stream), "cudaEventRecord");
    return p;
}

/* Frees p once the stream no longer uses it; after a failed wait p is
   left allocated (the work in flight may still use it). */
static void mirror__cuda_release(void *dev, void *p)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (p && mirror__cuda_idle(d, "waiting before cudaFree")) mirror__cuda_ok(d, cudaFree(p), "cudaFree");
}

static void *mirror__cuda_host_alloc(void *dev, size_t bytes)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    void *p = NULL;
    bytes = bytes ? bytes : 64;
    if (!mirror__cuda_ok(d, cudaMallocHost(&p, bytes), "cudaMallocHost")) return NULL;
    memset(p, 0, bytes);
    return p;
}

static void mirror__cuda_host_release(void *dev, void *p)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (p && mirror__cuda_idle(d, "waiting before cudaFreeHost"))
        mirror__cuda_ok(d, cudaFreeHost(p), "cudaFreeHost");
}

static void mirror__cuda_host_wait(void *dev)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    mirror__cuda_wait(d, d->uploaded, "waiting for an upload");
}

static void mirror__cuda_zero(void *dev, void *p, size_t bytes)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (bytes) mirror__cuda_ok(d, cudaMemsetAsync(p, 0, bytes, d->stream), "cudaMemsetAsync");
}

/* Whether host is pageable memory (not pinned by cudaMallocHost or
   registered): a cudaMemcpyAsync from or to it may hold the host until the
   stream reaches the copy, where no timeout runs. */
static int mirror__pageable(const void *host)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, host) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return a.type == cudaMemoryTypeUnregistered;
}

/* From pageable memory the stream's work is waited for first, under the
   strategy's timeout; from pinned memory the copy is queued. */
static void mirror__cuda_upload(void *dev, void *dst, const void *host, size_t bytes)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!bytes || (mirror__pageable(host) && !mirror__cuda_wait(d, NULL, "waiting before an upload"))) return;
    if (mirror__cuda_ok(d, cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, d->stream), "cudaMemcpyAsync"))
        mirror__cuda_ok(d, cudaEventRecord(d->uploaded, d->stream), "cudaEventRecord");
}

/* Into pageable memory the stream's work is waited for first, as for an
   upload; then the copy is queued and waited for. */
static void mirror__cuda_download(void *dev, void *host, const void *src, size_t bytes)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!bytes || (mirror__pageable(host) && !mirror__cuda_wait(d, NULL, "waiting before a download"))) return;
    if (mirror__cuda_ok(d, cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, d->stream), "cudaMemcpyAsync"))
        mirror__cuda_wait(d, NULL, "waiting for a download");
}

/* The input's slots: the host waits until slot's host buffers are read
   (its last upload), the compute queued so far releases the other slot
   (the shard before), and the copy stream waits until the compute released
   this slot (the shard before that). */
static void mirror__cuda_stage(void *dev, int slot)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (mirror__cuda_wait(d, d->copied[slot], "waiting for an upload") &&
        mirror__cuda_ok(d, cudaEventRecord(d->freed[!slot], d->stream), "cudaEventRecord"))
        mirror__cuda_ok(d, cudaStreamWaitEvent(d->copy, d->freed[slot], 0), "cudaStreamWaitEvent");
}

static void mirror__cuda_upload_staged(void *dev, void *dst, const void *host, size_t bytes)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (bytes)
        mirror__cuda_ok(d, cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, d->copy), "cudaMemcpyAsync");
}

/* The compute queued next waits for slot's uploads. */
static void mirror__cuda_staged(void *dev, int slot)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (mirror__cuda_ok(d, cudaEventRecord(d->copied[slot], d->copy), "cudaEventRecord"))
        mirror__cuda_ok(d, cudaStreamWaitEvent(d->stream, d->copied[slot], 0), "cudaStreamWaitEvent");
}

__global__ void mirror__k_set(unsigned char *p, mirror__bytes v, unsigned n)
{
    unsigned i;
    for (i = 0; i < n; i++) p[i] = v.b[i];
}

static void mirror__cuda_set(void *dev, void *p, const void *value, size_t n)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    mirror__bytes v;
    memcpy(v.b, value, n < sizeof v.b ? n : sizeof v.b);
    mirror__k_set<<<1, 1, 0, d->stream>>>((unsigned char *)p, v, (unsigned)(n < sizeof v.b ? n : sizeof v.b));
    MIRROR__LAUNCHED(d, "set kernel");
}

/* Data kept on the device: element e of n gathered rows of width values
   (4 bytes each, or 2 where half), from row index[i] of src. Augmented,
   each element draws its row's shift and flip itself (the CPU draws once a
   row: the same function of the same arguments) and its source pixel in
   its plane of h x w. */
__global__ void mirror__k_gather(void *dst, const void *src, const int64_t *index, size_t n,
                                 mirror_hd_divisor width, int half, uint64_t key, size_t pad, int flip,
                                 mirror_hd_divisor plane, mirror_hd_divisor w, size_t h)
{
    MIRROR__FOR_EACH(e, n * width.d)
    {
        uint64_t i, j = mirror_hd_divmod(width, e, &i), row = (uint64_t)index[i];
        long at = (long)j;
        if (pad || flip) {
            long dy, dx;
            int flipped;
            uint64_t p, y, x = mirror_hd_divmod(w, mirror_hd_divmod(plane, j, &p), &y);
            mirror_hd_augment_draw(key, row, pad, flip, &dy, &dx, &flipped);
            at = mirror_hd_augment_source(h, w.d, y, x, dy, dx, flipped);
            at = at < 0 ? -1 : (long)(p * plane.d) + at;
        }
        if (half)
            ((uint16_t *)dst)[e] = at < 0 ? (uint16_t)0 : ((const uint16_t *)src)[row * width.d + (uint64_t)at];
        else
            ((uint32_t *)dst)[e] = at < 0 ? 0u : ((const uint32_t *)src)[row * width.d + (uint64_t)at];
    }
}

static void mirror__cuda_gather(void *dev, void *dst, const void *src, const int64_t *index, size_t n, size_t width,
                                size_t size, uint64_t key, size_t pad, int flip, size_t h, size_t w)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n || !width) return;
    mirror__k_gather<<<mirror__blocks(n * width), MIRROR__THREADS, 0, d->stream>>>(
        dst, src, index, n, mirror_hd_divisor_of(width), size == 2, key, pad, flip, mirror_hd_divisor_of(h * w),
        mirror_hd_divisor_of(w), h);
    MIRROR__LAUNCHED(d, "gather kernel");
}

// >>cuda gemm ---------------------------------------------------------------

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
   operands. Mixed precision: 16-bit A and B on tensor cores, accumulated
   in fp32, C rounded once to 16 bits or (grad) kept in fp32. */
static void mirror__cuda_gemm(void *dev, int ta, int tb, size_t m, size_t n, size_t k, float alpha, const void *a,
                              size_t lda, const void *b, size_t ldb, float beta, void *c, size_t ldc, int grad)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    cudaDataType_t ab = mirror__storage_type(d), ct = grad ? CUDA_R_32F : ab;
    size_t ce = ct == CUDA_R_32F ? sizeof(float) : sizeof(uint16_t);
    if (!m || !n) return;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX) {
        /* cuBLAS's 32-bit sizes: a whole-shard convolution can outgrow them */
        mirror__cuda_record(d, MIRROR_ERR_CAPACITY, "gemm", "a dimension beyond 2^31 - 1: use a smaller max_batch");
        return;
    }
    if (!k) { /* cuBLAS needs k >= 1: C = beta C, and 0 (not 0 * NaN) for beta 0 */
        size_t i;
        if (beta == 0.0f)
            mirror__cuda_ok(d, cudaMemset2DAsync(c, ldc * ce, 0, n * ce, m, d->stream), "cudaMemset2DAsync");
        else
            for (i = 0; i < m; i++)
                if (!mirror__blas_ok(d,
                                     cublasScalEx(d->blas, (int)n, &beta, CUDA_R_32F, (unsigned char *)c + i * ldc * ce,
                                                  ct, 1, CUDA_R_32F),
                                     "cublasScalEx"))
                    break;
        return;
    }
    if (d->precision == MIRROR_PRECISION_FP32) {
        mirror__blas_ok(d,
                        cublasSgemm(d->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                                    (int)m, (int)k, &alpha, (const float *)b, (int)ldb, (const float *)a, (int)lda,
                                    &beta, (float *)c, (int)ldc),
                        "cublasSgemm");
        return;
    }
    mirror__blas_ok(d,
                    cublasGemmEx(d->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                                 (int)m, (int)k, &alpha, b, ab, (int)ldb, a, ab, (int)lda, &beta, c, ct, (int)ldc,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx");
}

/* A GEMM's epilogue where cuBLASLt does not run it: C [m, n], rows ldc
   apart, gets bias[j] on column j, or with per_row bias[row] on its row
   (bias NULL: none), then relu where asked; the CPU's order of operations
   (mirror__finish). */
__global__ void mirror__k_epilogue(void *c, const void *bias, int per_row, size_t m, mirror_hd_divisor n, size_t ldc,
                                   int relu, int f)
{
    MIRROR__FOR_EACH(i, m * n.d)
    {
        uint64_t row, j = mirror_hd_divmod(n, i, &row);
        float v = mirror_hd_load(c, row * ldc + j, f);
        if (bias) v += mirror_hd_load(bias, per_row ? row : j, f);
        mirror_hd_store(c, row * ldc + j, relu ? mirror_hd_relu(v) : v, f);
    }
}

/* A dense layer's bias (per column) is cuBLASLt's epilogue where it has an
   algorithm for the key and the bias is 16-byte aligned; a convolution's
   (per row: cuBLASLt's bias runs along C's columns only), the other keys,
   and a matmul cuBLASLt refuses take the GEMM and the epilogue kernel. The
   relu (mirror_hd_relu: a NaN stays NaN, which cuBLASLt's max(x, 0) does
   not promise) is the kernel's, in place. */
static void mirror__cuda_gemm_bias(void *dev, int ta, int tb, size_t m, size_t n, size_t k, const void *a, size_t lda,
                                   const void *b, size_t ldb, const void *bias, int per_row, int relu, void *c,
                                   size_t ldc)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    const float one = 1.0f, zero = 0.0f;
    mirror__lt_plan *p = NULL;
    int done = 0;
    if (!m || !n) return;
    if (bias && !per_row && k && mirror__align_of(bias) >= 16 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
        lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX)
        p = mirror__lt_plan_for(d, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
    if (p && p->usable) {
        if (!mirror__blas_ok(d, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                               sizeof bias),
                             "cublasLtMatmulDescSetAttribute"))
            return;
        if (!d->lt_refuses &&
            cublasLtMatmul(d->lt, p->op, &one, b, p->a, a, p->b, &zero, c, p->c, c, p->c, &p->algo, d->blas_ws,
                           MIRROR__BLAS_WORKSPACE, d->stream) == CUBLAS_STATUS_SUCCESS)
            done = 1, bias = NULL;
        else { /* refused: this key runs the other way from now on */
            (void)cudaGetLastError();
            p->usable = 0;
        }
    }
    if (!done) mirror__cuda_gemm(dev, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, 0);
    if (!bias && !relu) return;
    mirror__k_epilogue<<<mirror__blocks(m * n), MIRROR__THREADS, 0, d->stream>>>(c, bias, per_row, m,
                                                                               mirror_hd_divisor_of(n), ldc, relu,
                                                                               d->precision);
    MIRROR__LAUNCHED(d, "epilogue kernel");
}

static void mirror__cuda_gemm_align(void *dev, size_t bytes) { ((mirror__cuda_dev *)dev)->gemm_align = bytes; }

// >>cuda bias ---------------------------------------------------------------

__global__ void mirror__k_bias_add(void *y, const void *bias, size_t total, mirror_hd_divisor inner,
                                   mirror_hd_divisor channels, int f)
{
    MIRROR__FOR_EACH(i, total)
    mirror_hd_store(y, i, mirror_hd_load(y, i, f) + mirror_hd_load(bias, mirror_hd_channel(i, inner, channels), f), f);
}

static void mirror__cuda_bias_add(void *dev, void *y, const void *bias, size_t rows, size_t channels, size_t inner)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    size_t n = rows * channels * inner;
    if (!n) return;
    mirror__k_bias_add<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(y, bias, n, mirror_hd_divisor_of(inner),
                                                                              mirror_hd_divisor_of(channels), d->precision);
    MIRROR__LAUNCHED(d, "bias_add kernel");
}

/* The bias gradient's spans: about MIRROR__BIAS_SPAN elements each, and
   at most MIRROR__BIAS_BLOCKS blocks in all (a few per SM), whose parts fit
   the replica's scratch of as many floats. */
#define MIRROR__BIAS_SPAN 4096
#define MIRROR__BIAS_BLOCKS 1024
/* A dense layer's (inner 1): runs of about MIRROR__BIAS_RUN rows, their
   parts in a scratch of MIRROR__BIAS_PARTS floats (256 KiB). */
#define MIRROR__BIAS_RUN 32

/* The bias gradient, spread over the GPU. A channel's rows * inner
   elements are cut into `parts` spans of consecutive elements; block (b, c)
   sums span b of channel c (each thread a fixed stride of it, then a fixed
   tree) into out[c * parts + b], or with one part adds it to out[c] = db[c].
   bias_total then adds a channel's parts in order: the same bits every run. */
__global__ void mirror__k_bias_part(float *out, const void *dy, size_t rows, size_t channels,
                                    mirror_hd_divisor inner, size_t parts, int f)
{
    __shared__ float part[MIRROR__THREADS];
    size_t n = rows * inner.d, b = blockIdx.x, lo = n / parts * b + MIRROR__MIN(b, n % parts);
    size_t hi = lo + n / parts + (b < n % parts);
    for (size_t c = blockIdx.y; c < channels; c += gridDim.y) {
        float s = 0.0f;
        for (size_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
            uint64_t row, e = mirror_hd_divmod(inner, j, &row);
            s += mirror_hd_load(dy, (row * channels + c) * inner.d + e, f);
        }
        s = mirror__block_sum(part, s);
        if (threadIdx.x == 0) {
            if (parts == 1) out[c] += s;
            else out[c * parts + b] = s;
        }
    }
}

/* Channel c's parts at part[c * across + b * along], b in order. */
__global__ void mirror__k_bias_total(float *db, const float *part, size_t channels, size_t parts, size_t across,
                                     size_t along)
{
    MIRROR__FOR_EACH(c, channels)
    {
        float s = 0.0f;
        for (size_t b = 0; b < parts; b++) s += part[c * across + b * along];
        db[c] += s;
    }
}

/* A dense layer's bias gradient, dy [rows, channels]: a thread a channel,
   so that a warp reads consecutive addresses, the rows cut into `parts`
   runs (blockIdx.y), each added in row order in fp32. One run adds onto
   db[c] row by row as the CPU backend does (mirror__f32_bias_grad: the
   same bits); more write part p of channel c at out[p * channels + c],
   which bias_total adds in order. */
__global__ void mirror__k_bias_rows(float *out, const void *dy, size_t rows, size_t channels, size_t parts, int f)
{
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x, p = blockIdx.y;
    size_t lo = rows / parts * p + MIRROR__MIN(p, rows % parts), hi = lo + rows / parts + (p < rows % parts);
    if (c >= channels) return;
    float s = parts == 1 ? out[c] : 0.0f;
    for (size_t r = lo; r < hi; r++) s += mirror_hd_load(dy, r * channels + c, f);
    out[parts == 1 ? c : p * channels + c] = s;
}

/* One part per channel (a dense layer's bias at a small batch) takes one
   pass. A dense layer's (inner 1) reads dy along its rows (bias_rows);
   a convolution's along each channel's planes (bias_part). */
static void mirror__cuda_bias_grad(void *dev, float *db, const void *dy, size_t rows, size_t channels, size_t inner)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    size_t n = rows * inner, parts;
    if (!n || !channels) return;
    if (inner == 1) {
        parts = MIRROR__MIN(MIRROR__MIN((rows + MIRROR__BIAS_RUN - 1) / MIRROR__BIAS_RUN,
                                        MIRROR__BIAS_PARTS / channels), (size_t)65535);
        parts = parts ? parts : 1;
        dim3 grid((unsigned)((channels + MIRROR__THREADS - 1) / MIRROR__THREADS), (unsigned)parts);
        mirror__k_bias_rows<<<grid, MIRROR__THREADS, 0, d->stream>>>(parts > 1 ? d->part : db, dy, rows, channels,
                                                                     parts, d->precision);
        if (!MIRROR__LAUNCHED(d, "bias_rows kernel") || parts == 1) return;
        mirror__k_bias_total<<<mirror__blocks(channels), MIRROR__THREADS, 0, d->stream>>>(db, d->part, channels,
                                                                                        parts, 1, channels);
        MIRROR__LAUNCHED(d, "bias_total kernel");
        return;
    }
    parts = MIRROR__MIN((n + MIRROR__BIAS_SPAN - 1) / MIRROR__BIAS_SPAN,
                        MIRROR__BIAS_BLOCKS / channels);
    parts = parts ? parts : 1;
    dim3 grid((unsigned)parts, (unsigned)MIRROR__MIN(channels, 65535));
    mirror__k_bias_part<<<grid, MIRROR__THREADS, 0, d->stream>>>(parts > 1 ? d->part : db, dy, rows, channels,
                                                                 mirror_hd_divisor_of(inner), parts, d->precision);
    if (!MIRROR__LAUNCHED(d, "bias_part kernel") || parts == 1) return;
    mirror__k_bias_total<<<mirror__blocks(channels), MIRROR__THREADS, 0, d->stream>>>(db, d->part, channels, parts,
                                                                                    parts, 1);
    MIRROR__LAUNCHED(d, "bias_total kernel");
}

// >>cuda activations --------------------------------------------------------

__global__ void mirror__k_relu_forward(void *y, const void *x, size_t n, int f)
{
    MIRROR__FOR_EACH(i, n) mirror_hd_store(y, i, mirror_hd_relu(mirror_hd_load(x, i, f)), f);
}

static void mirror__cuda_relu_forward(void *dev, void *y, const void *x, size_t n)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_relu_forward<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(y, x, n, d->precision);
    MIRROR__LAUNCHED(d, "relu_forward kernel");
}

__global__ void mirror__k_relu_backward(void *d, const void *y, size_t n, int f)
{
    MIRROR__FOR_EACH(i, n)
    mirror_hd_store(d, i, mirror_hd_relu_grad(mirror_hd_load(y, i, f), mirror_hd_load(d, i, f)), f);
}

static void mirror__cuda_relu_backward(void *dev, void *dd, const void *y, size_t n)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_relu_backward<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(dd, y, n, d->precision);
    MIRROR__LAUNCHED(d, "relu_backward kernel");
}

/* The smooth activations: kind is MIRROR__TANH, _SIGMOID or _GELU. */
__global__ void mirror__k_act_forward(int kind, void *y, const void *x, size_t n, int f)
{
    MIRROR__FOR_EACH(i, n)
    {
        float v = mirror_hd_load(x, i, f);
        mirror_hd_store(y, i,
                        kind == MIRROR__TANH      ? mirror_hd_tanh(v)
                        : kind == MIRROR__SIGMOID ? mirror_hd_sigmoid(v)
                                                  : mirror_hd_gelu(v),
                        f);
    }
}

static void mirror__cuda_act_forward(void *dev, int kind, void *y, const void *x, size_t n)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_act_forward<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(kind, y, x, n, d->precision);
    MIRROR__LAUNCHED(d, "act_forward kernel");
}

__global__ void mirror__k_act_backward(int kind, void *d, const void *x, const void *y, size_t n, int f)
{
    MIRROR__FOR_EACH(i, n)
    {
        float g = mirror_hd_load(d, i, f);
        mirror_hd_store(d, i,
                        kind == MIRROR__TANH      ? mirror_hd_tanh_grad(mirror_hd_load(y, i, f), g)
                        : kind == MIRROR__SIGMOID ? mirror_hd_sigmoid_grad(mirror_hd_load(y, i, f), g)
                                                  : mirror_hd_gelu_grad(mirror_hd_load(x, i, f), g),
                        f);
    }
}

static void mirror__cuda_act_backward(void *dev, int kind, void *dd, const void *x, const void *y, size_t n)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_act_backward<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(kind, dd, x, y, n, d->precision);
    MIRROR__LAUNCHED(d, "act_backward kernel");
}

// >>cuda convolution --------------------------------------------------------

/* One thread per col entry (mirror_hd_im2col_at). */
__global__ void mirror__k_im2col(void *col, const void *x, mirror_hd_conv_shape g, int f)
{
    MIRROR__FOR_EACH(i, g.c * g.k * g.k * g.n * g.ho * g.wo)
    mirror_hd_store(col, i, mirror_hd_im2col_at(&g, x, i, f), f);
}

static void mirror__cuda_im2col(void *dev, void *col, const void *x, size_t n, size_t c, size_t h, size_t w,
                                size_t k, size_t stride, size_t pad, size_t ho, size_t wo)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_im2col<<<mirror__blocks(c * k * k * n * ho * wo), MIRROR__THREADS, 0, d->stream>>>(
        col, x, mirror_hd_conv_shape_of(n, c, h, w, k, stride, pad, ho, wo), d->precision);
    MIRROR__LAUNCHED(d, "im2col kernel");
}

/* One thread per pixel gathers its col entries in the CPU's order (mirror_hd_col2im_at). */
__global__ void mirror__k_col2im(void *x, const void *col, mirror_hd_conv_shape g, int f)
{
    MIRROR__FOR_EACH(i, g.n * g.c * g.h * g.w) mirror_hd_store(x, i, mirror_hd_col2im_at(&g, col, i, f), f);
}

static void mirror__cuda_col2im(void *dev, void *x, const void *col, size_t n, size_t c, size_t h, size_t w,
                                size_t k, size_t stride, size_t pad, size_t ho, size_t wo)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_col2im<<<mirror__blocks(n * c * h * w), MIRROR__THREADS, 0, d->stream>>>(
        x, col, mirror_hd_conv_shape_of(n, c, h, w, k, stride, pad, ho, wo), d->precision);
    MIRROR__LAUNCHED(d, "col2im kernel");
}

/* src [a, b, inner] -> dst [b, a, inner]: values moved as they are. */
__global__ void mirror__k_permute(void *dst, const void *src, size_t a, mirror_hd_divisor b, mirror_hd_divisor inner,
                                  int f)
{
    MIRROR__FOR_EACH(i, a * b.d * inner.d)
    {
        uint64_t q, ia, ii = mirror_hd_divmod(inner, i, &q), ib = mirror_hd_divmod(b, q, &ia);
        size_t o = (ib * a + ia) * inner.d + ii;
        if (f)
            ((uint16_t *)dst)[o] = ((const uint16_t *)src)[i];
        else
            ((float *)dst)[o] = ((const float *)src)[i];
    }
}

static void mirror__cuda_permute(void *dev, void *dst, const void *src, size_t a, size_t b, size_t inner)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!a || !b || !inner) return;
    mirror__k_permute<<<mirror__blocks(a * b * inner), MIRROR__THREADS, 0, d->stream>>>(
        dst, src, a, mirror_hd_divisor_of(b), mirror_hd_divisor_of(inner), d->precision);
    MIRROR__LAUNCHED(d, "permute kernel");
}

// >>cuda pooling ------------------------------------------------------------

/* hwo divides by ho * wo, wo by wo. */
__global__ void mirror__k_maxpool_forward(void *y, int32_t *arg, const void *x, size_t planes, size_t h,
                                          size_t w, size_t k, size_t stride, mirror_hd_divisor hwo,
                                          mirror_hd_divisor wo, int f)
{
    MIRROR__FOR_EACH(o, planes * hwo.d)
    {
        uint64_t plane, oy, ox = mirror_hd_divmod(wo, mirror_hd_divmod(hwo, o, &plane), &oy);
        size_t corner = oy * stride * w + ox * stride, at;
        const void *p = mirror_hd_skip(x, plane * h * w + corner, f);
        float top = mirror_hd_window_max(p, w, k, &at, f);
        if (mirror_hd_window_nan(p, w, k, &at, f)) top = mirror_hd_load(p, at, f);
        mirror_hd_store(y, o, top, f);
        arg[o] = (int32_t)(corner + at);
    }
}

static void mirror__cuda_maxpool_forward(void *dev, void *y, int32_t *arg, const void *x, size_t planes, size_t h,
                                         size_t w, size_t k, size_t stride, size_t ho, size_t wo)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!planes) return;
    if (!ho || !wo) return;
    mirror__k_maxpool_forward<<<mirror__blocks(planes * ho * wo), MIRROR__THREADS, 0, d->stream>>>(
        y, arg, x, planes, h, w, k, stride, mirror_hd_divisor_of(ho * wo), mirror_hd_divisor_of(wo), d->precision);
    MIRROR__LAUNCHED(d, "maxpool_forward kernel");
}

/* Average pooling: one thread per output (forward), per input (backward:
   each input gathers its windows, so no two threads write one place). */
__global__ void mirror__k_avgpool_forward(void *y, const void *x, size_t planes, size_t h, size_t w, size_t kh,
                                          size_t kw, size_t stride, mirror_hd_divisor hwo, mirror_hd_divisor wo, int f)
{
    MIRROR__FOR_EACH(i, planes * hwo.d)
    {
        uint64_t p, oy, ox = mirror_hd_divmod(wo, mirror_hd_divmod(hwo, i, &p), &oy);
        mirror_hd_store(y, i,
                        mirror_hd_window_mean(mirror_hd_skip(x, p * h * w, f), w, kh, kw, oy * stride, ox * stride, f),
                        f);
    }
}

static void mirror__cuda_avgpool_forward(void *dev, void *y, const void *x, size_t planes, size_t h, size_t w,
                                         size_t kh, size_t kw, size_t stride, size_t ho, size_t wo)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!planes) return;
    if (!ho || !wo) return;
    mirror__k_avgpool_forward<<<mirror__blocks(planes * ho * wo), MIRROR__THREADS, 0, d->stream>>>(
        y, x, planes, h, w, kh, kw, stride, mirror_hd_divisor_of(ho * wo), mirror_hd_divisor_of(wo), d->precision);
    MIRROR__LAUNCHED(d, "avgpool_forward kernel");
}

/* hw divides by h * w, w by w. */
__global__ void mirror__k_avgpool_backward(void *dx, const void *dy, size_t planes, mirror_hd_divisor hw,
                                           mirror_hd_divisor w, size_t kh, size_t kw, size_t stride, size_t ho,
                                           size_t wo, int f)
{
    MIRROR__FOR_EACH(i, planes * hw.d)
    {
        uint64_t p, iy, ix = mirror_hd_divmod(w, mirror_hd_divmod(hw, i, &p), &iy);
        mirror_hd_store(dx, i,
                        mirror_hd_window_mean_grad(mirror_hd_skip(dy, p * ho * wo, f), ho, wo, kh, kw, stride,
                                                   iy, ix, f),
                        f);
    }
}

static void mirror__cuda_avgpool_backward(void *dev, void *dx, const void *dy, size_t planes, size_t h, size_t w,
                                          size_t kh, size_t kw, size_t stride, size_t ho, size_t wo)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!planes) return;
    if (!h || !w) return;
    mirror__k_avgpool_backward<<<mirror__blocks(planes * h * w), MIRROR__THREADS, 0, d->stream>>>(
        dx, dy, planes, mirror_hd_divisor_of(h * w), mirror_hd_divisor_of(w), kh, kw, stride, ho, wo, d->precision);
    MIRROR__LAUNCHED(d, "avgpool_backward kernel");
}

/* One thread per input pixel adds the outputs that chose it, in output
   order (mirror_hd_maxpool_grad_at). */
__global__ void mirror__k_maxpool_backward(void *dx, const int32_t *arg, const void *dy, size_t planes,
                                           mirror_hd_divisor hw, mirror_hd_divisor w, size_t k,
                                           mirror_hd_divisor stride, size_t ho, size_t wo, int f)
{
    MIRROR__FOR_EACH(i, planes * hw.d)
    {
        uint64_t plane, iy, at = mirror_hd_divmod(hw, i, &plane), ix = mirror_hd_divmod(w, at, &iy);
        mirror_hd_store(dx, i,
                        mirror_hd_maxpool_grad_at(mirror_hd_skip(dy, plane * ho * wo, f), arg + plane * ho * wo, at, iy,
                                                  ix, k, stride, ho, wo, f),
                        f);
    }
}

static void mirror__cuda_maxpool_backward(void *dev, void *dx, const int32_t *arg, const void *dy, size_t planes,
                                          size_t h, size_t w, size_t k, size_t stride, size_t ho, size_t wo)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!planes) return;
    if (!h || !w) return;
    mirror__k_maxpool_backward<<<mirror__blocks(planes * h * w), MIRROR__THREADS, 0, d->stream>>>(
        dx, arg, dy, planes, mirror_hd_divisor_of(h * w), mirror_hd_divisor_of(w), k, mirror_hd_divisor_of(stride), ho,
        wo, d->precision);
    MIRROR__LAUNCHED(d, "maxpool_backward kernel");
}

// >>cuda dropout ------------------------------------------------------------

/* Dropout: one thread per element, its mask hashed from its place. */
__global__ void mirror__k_dropout(void *y, const void *x, size_t rows, mirror_hd_divisor inner, uint64_t seed,
                                  uint64_t layer, const mirror__tick *t, float p, int f)
{
    uint64_t key = mirror_hd_dropout_key(seed, layer, t->step), row0 = t->row0;
    MIRROR__FOR_EACH(i, rows * inner.d)
    {
        uint64_t row, e = mirror_hd_divmod(inner, i, &row);
        mirror_hd_store(y, i, mirror_hd_load(x, i, f) * mirror_hd_dropout(key, row0 + row, e, p), f);
    }
}

static void mirror__cuda_dropout(void *dev, void *y, const void *x, size_t rows, size_t inner, uint64_t seed,
                                 uint64_t layer, const mirror__tick *t, float p)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!rows || !inner) return;
    mirror__k_dropout<<<mirror__blocks(rows * inner), MIRROR__THREADS, 0, d->stream>>>(
        y, x, rows, mirror_hd_divisor_of(inner), seed, layer, t, p, d->precision);
    MIRROR__LAUNCHED(d, "dropout kernel");
}

// >>cuda batchnorm ----------------------------------------------------------

/* Batch normalisation. The sums: one block per channel, each thread a
   fixed stride of the (row, i) pairs in double, then a fixed tree (the
   sums of a, and backward of a xhat); forward, a second pass of the same
   for the M2 about the mean of the first. */
__global__ void mirror__k_bn_sums(double *part, const void *a, const void *x, const float *stat, size_t rows,
                                  size_t channels, mirror_hd_divisor inner, int f)
{
    __shared__ double tree[MIRROR__THREADS];
    size_t c = blockIdx.x, C = channels, n = rows * inner.d, j;
    double s = 0.0, q = 0.0, mean;
    for (j = threadIdx.x; j < n; j += blockDim.x) {
        uint64_t row, e = mirror_hd_divmod(inner, j, &row);
        size_t at = (row * C + c) * inner.d + e;
        float av = mirror_hd_load(a, at, f);
        s += (double)av;
        if (x) q += (double)(av * mirror_hd_bn_xhat(mirror_hd_load(x, at, f), stat[c], stat[C + c]));
    }
    s = mirror__block_sum(tree, s);
    mean = n ? s / (double)n : 0.0;
    for (j = threadIdx.x; !x && j < n; j += blockDim.x) {
        uint64_t row, e = mirror_hd_divmod(inner, j, &row);
        q += mirror_hd_bn_dev2(mirror_hd_load(a, (row * C + c) * inner.d + e, f), mean);
    }
    q = mirror__block_sum(tree, q);
    if (threadIdx.x == 0) part[c] = s, part[C + c] = q;
}

static void mirror__cuda_bn_sums(void *dev, double *part, const void *a, const void *x, const float *stat,
                                 size_t rows, size_t channels, size_t inner)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!channels) return;
    mirror__k_bn_sums<<<(unsigned)channels, MIRROR__THREADS, 0, d->stream>>>(part, a, x, stat, rows, channels,
                                                                             mirror_hd_divisor_of(inner), d->precision);
    MIRROR__LAUNCHED(d, "bn_sums kernel");
}

__global__ void mirror__k_bn_forward(void *y, const void *x, const float *stat, const void *gamma,
                                     const void *beta, size_t rows, mirror_hd_divisor channels,
                                     mirror_hd_divisor inner, int f)
{
    MIRROR__FOR_EACH(i, rows * channels.d * inner.d)
    {
        size_t c = mirror_hd_channel(i, inner, channels);
        mirror_hd_store(y, i,
                        mirror_hd_bn(mirror_hd_load(x, i, f), stat[c], stat[channels.d + c],
                                     mirror_hd_load(gamma, c, f), mirror_hd_load(beta, c, f)),
                        f);
    }
}

static void mirror__cuda_bn_forward(void *dev, void *y, const void *x, const float *stat, const void *gamma,
                                    const void *beta, size_t rows, size_t channels, size_t inner)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!rows) return;
    mirror__k_bn_forward<<<mirror__blocks(rows * channels * inner), MIRROR__THREADS, 0, d->stream>>>(
        y, x, stat, gamma, beta, rows, mirror_hd_divisor_of(channels), mirror_hd_divisor_of(inner), d->precision);
    MIRROR__LAUNCHED(d, "bn_forward kernel");
}

__global__ void mirror__k_bn_param_grads(float *dgamma, float *dbeta, const double *part, size_t channels)
{
    MIRROR__FOR_EACH(c, channels)
    {
        dgamma[c] += (float)part[channels + c];
        dbeta[c] += (float)part[c];
    }
}

__global__ void mirror__k_bn_backward(void *dx, const void *dy, const void *x, const float *stat, const float *means,
                                      const void *gamma, size_t rows, mirror_hd_divisor channels,
                                      mirror_hd_divisor inner, int f)
{
    MIRROR__FOR_EACH(i, rows * channels.d * inner.d)
    {
        size_t c = mirror_hd_channel(i, inner, channels);
        float invstd = stat[channels.d + c];
        mirror_hd_store(dx, i,
                        mirror_hd_bn_grad(mirror_hd_load(dy, i, f),
                                          mirror_hd_bn_xhat(mirror_hd_load(x, i, f), stat[c], invstd),
                                          mirror_hd_load(gamma, c, f), invstd, means[c], means[channels.d + c]),
                        f);
    }
}

static void mirror__cuda_bn_backward(void *dev, void *dx, float *dgamma, float *dbeta, const void *dy,
                                     const void *x, const float *stat, const float *means, const double *part,
                                     const void *gamma, size_t rows, size_t channels, size_t inner)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    mirror__k_bn_param_grads<<<mirror__blocks(channels), MIRROR__THREADS, 0, d->stream>>>(dgamma, dbeta, part,
                                                                                         channels);
    MIRROR__LAUNCHED(d, "bn_param_grads kernel");
    if (!dx || !rows) return;
    mirror__k_bn_backward<<<mirror__blocks(rows * channels * inner), MIRROR__THREADS, 0, d->stream>>>(
        dx, dy, x, stat, means, gamma, rows, mirror_hd_divisor_of(channels), mirror_hd_divisor_of(inner), d->precision);
    MIRROR__LAUNCHED(d, "bn_backward kernel");
}

// >>cuda add ----------------------------------------------------------------

__global__ void mirror__k_add(void *y, const void *a, const void *b, size_t n, int f)
{
    MIRROR__FOR_EACH(i, n) mirror_hd_store(y, i, mirror_hd_load(a, i, f) + mirror_hd_load(b, i, f), f);
}

static void mirror__cuda_add(void *dev, void *y, const void *a, const void *b, size_t n)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    if (!b) {
        if (y != a)
            mirror__cuda_ok(d,
                            cudaMemcpyAsync(y, a, n * (d->precision ? sizeof(uint16_t) : sizeof(float)),
                                            cudaMemcpyDeviceToDevice, d->stream),
                            "cudaMemcpyAsync");
        return;
    }
    mirror__k_add<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(y, a, b, n, d->precision);
    MIRROR__LAUNCHED(d, "add kernel");
}

// >>cuda losses -------------------------------------------------------------

/* scale: the loss scale in device memory, or NULL for 1. */
__global__ void mirror__k_softmax_ce(void *dz, float *loss, int32_t *correct, const void *z, const int32_t *labels,
                                     size_t rows, size_t k, float inv_count, const float *scale, int f)
{
    if (scale) inv_count *= *scale;
    MIRROR__FOR_EACH(r, rows)
    {
        int ok;
        loss[r] = mirror_hd_softmax_ce_row(mirror_hd_skip(z, r * k, f), k, labels[r], inv_count,
                                           mirror_hd_skip(dz, r * k, f), &ok, f);
        correct[r] = ok;
    }
}

static void mirror__cuda_softmax_ce(void *dev, void *dz, float *loss, int32_t *correct, const void *z,
                                    const int32_t *labels, size_t rows, size_t k, float inv_count, const float *scale)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!rows) return;
    mirror__k_softmax_ce<<<mirror__blocks(rows), MIRROR__THREADS, 0, d->stream>>>(dz, loss, correct, z, labels, rows, k,
                                                                               inv_count, scale, d->precision);
    MIRROR__LAUNCHED(d, "softmax_ce kernel");
}

__global__ void mirror__k_mse(void *dz, float *loss, const void *z, const float *t, size_t rows, size_t d,
                              float inv_count, const float *scale, int f)
{
    if (scale) inv_count *= *scale;
    MIRROR__FOR_EACH(r, rows)
    loss[r] = mirror_hd_mse_row(mirror_hd_skip(z, r * d, f), t + r * d, d, inv_count, mirror_hd_skip(dz, r * d, f), f);
}

static void mirror__cuda_mse(void *dev, void *dz, float *loss, const void *z, const float *t, size_t rows, size_t dd,
                             float inv_count, const float *scale)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!rows) return;
    mirror__k_mse<<<mirror__blocks(rows), MIRROR__THREADS, 0, d->stream>>>(dz, loss, z, t, rows, dd, inv_count, scale,
                                                                        d->precision);
    MIRROR__LAUNCHED(d, "mse kernel");
}

/* One block of MIRROR_HD_LANES threads, a lane each (its rows' reads
   side by side across the block), then the lanes' tree in shared memory:
   the CPU backend's order (mirror__lanes_total), so the same bits. */
__global__ void mirror__k_accumulate(double *acc, const float *loss, const int32_t *correct, size_t rows)
{
    __shared__ double part[2 * MIRROR_HD_LANES];
    double s[2];
    mirror_hd_lane_sums(s, loss, correct, rows, threadIdx.x);
    part[threadIdx.x] = s[0], part[MIRROR_HD_LANES + threadIdx.x] = s[1];
    __syncthreads();
    for (unsigned half = MIRROR_HD_LANES / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) mirror_hd_tree_add(part, threadIdx.x, half);
        __syncthreads();
    }
    if (threadIdx.x) return;
    acc[0] += part[0];
    if (correct) acc[1] += part[MIRROR_HD_LANES];
}

static void mirror__cuda_accumulate(void *dev, double *acc, const float *loss, const int32_t *correct, size_t rows)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!rows) return;
    mirror__k_accumulate<<<1, MIRROR_HD_LANES, 0, d->stream>>>(acc, loss, correct, rows);
    MIRROR__LAUNCHED(d, "accumulate kernel");
}

// >>cuda update -------------------------------------------------------------

/* fp32: any thread that meets a non-finite element applies mirror_hd_guard;
   every writer writes the same values, so no atomics. */
__global__ void mirror__k_check32(mirror_loss_scale_state *st, const float *g, size_t n, const mirror__tick *t)
{
    int finite = 1;
    MIRROR__FOR_EACH(i, n) finite &= mirror_hd_finite(g[i]);
    if (!finite) mirror_hd_guard(st, 0, t->step);
}

static void mirror__cuda_check32(void *dev, mirror_loss_scale_state *st, const float *g, size_t n,
                                 const mirror__tick *t)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_check32<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(st, g, n, t);
    MIRROR__LAUNCHED(d, "check32 kernel");
}

/* The sum of the squares of g (or of g16 unscaled by st->scale, g NULL)
   across the GPU in two passes of a fixed order, so that every replica and
   run gets the same sum: block b adds span b of the values (each thread a
   fixed stride of it in double, then a fixed tree) into part[b]; then one
   block adds the parts the same way (mirror__squares_total). */
__global__ void mirror__k_squares_part(double *part, const float *g, const uint16_t *g16, size_t n, size_t span,
                                       int format, const mirror_loss_scale_state *st)
{
    __shared__ double tree[MIRROR__THREADS];
    float inv_scale = 1.0f / st->scale;
    size_t lo = blockIdx.x * span, hi = MIRROR__MIN(n, lo + span), i;
    double sum = 0.0;
    for (i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        double x = g ? g[i] : mirror_hd_unscale(g16[i], format, inv_scale);
        sum += x * x;
    }
    sum = mirror__block_sum(tree, sum);
    if (threadIdx.x == 0) part[blockIdx.x] = sum;
}

/* The first pass of a sum of squares over n values (see
   mirror__k_squares_part), into d->squares; returns the count of parts:
   spans of at least 2048 values, at most MIRROR__SQUARE_BLOCKS of them. */
static size_t mirror__cuda_squares(mirror__cuda_dev *d, const float *g, const uint16_t *g16, size_t n, int format,
                                   const mirror_loss_scale_state *st)
{
    size_t span = MIRROR__MAX((size_t)8 * MIRROR__THREADS, (n + MIRROR__SQUARE_BLOCKS - 1) / MIRROR__SQUARE_BLOCKS);
    size_t parts = MIRROR__MAX((size_t)1, (n + span - 1) / span);
    mirror__k_squares_part<<<(unsigned)parts, MIRROR__THREADS, 0, d->stream>>>(d->squares, g, g16, n, span, format,
                                                                                st);
    return MIRROR__LAUNCHED(d, "squares kernel") ? parts : 0;
}

__device__ static double mirror__squares_total(const double *part, size_t parts)
{
    __shared__ double tree[MIRROR__THREADS];
    double sum = 0.0;
    size_t b;
    for (b = threadIdx.x; b < parts; b += blockDim.x) sum += part[b];
    return mirror__block_sum(tree, sum);
}

/* Gradient clipping: thread 0 writes the norm and its factor into st. */
__global__ void mirror__k_clip(mirror_loss_scale_state *st, const double *part, size_t parts, float max_norm)
{
    double sum = mirror__squares_total(part, parts);
    if (threadIdx.x == 0) {
        st->grad_norm = (float)sqrt(sum);
        st->clip = mirror_hd_clip_factor(st->grad_norm, max_norm);
    }
}

static void mirror__cuda_clip(void *dev, mirror_loss_scale_state *st, const float *g, const uint16_t *g16, size_t n,
                              int format, float max_norm)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    size_t parts = mirror__cuda_squares(d, g, g16, n, format, st);
    if (!parts) return;
    mirror__k_clip<<<1, MIRROR__THREADS, 0, d->stream>>>(st, d->squares, parts, max_norm);
    MIRROR__LAUNCHED(d, "clip kernel");
}

/* The sharded update: 1 into *flag (zeroed first) where a thread meets an
   Inf or NaN in its part of the slice; every writer writes the same value. */
__global__ void mirror__k_slice_finite(float *flag, const float *g, const uint16_t *g16, size_t n, int format,
                                       const mirror_loss_scale_state *st)
{
    float inv_scale = 1.0f / st->scale;
    int finite = 1;
    MIRROR__FOR_EACH(i, n) finite &= mirror_hd_finite(g ? g[i] : mirror_hd_unscale(g16[i], format, inv_scale));
    if (!finite) *flag = 1.0f;
}

__global__ void mirror__k_slice_squares(float *sum, const double *part, size_t parts)
{
    double s = mirror__squares_total(part, parts);
    if (threadIdx.x == 0) *sum = (float)s;
}

static void mirror__cuda_slice_stats(void *dev, float *out, const float *g, const uint16_t *g16, size_t n, int format,
                                     const mirror_loss_scale_state *st, int squares)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    size_t parts;
    if (!mirror__cuda_ok(d, cudaMemsetAsync(out, 0, 2 * sizeof(float), d->stream), "cudaMemsetAsync")) return;
    if (n) {
        mirror__k_slice_finite<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(out, g, g16, n, format, st);
        MIRROR__LAUNCHED(d, "slice check kernel");
    }
    if (squares && (parts = mirror__cuda_squares(d, g, g16, n, format, st)) != 0) {
        mirror__k_slice_squares<<<1, MIRROR__THREADS, 0, d->stream>>>(out + 1, d->squares, parts);
        MIRROR__LAUNCHED(d, "slice squares kernel");
    }
}

__global__ void mirror__k_slice_verdict(mirror_loss_scale_state *st, const float *sums, const mirror__tick *t,
                                        int format, float max_norm)
{
    mirror_hd_slice_verdict(st, sums, t->step, format, max_norm);
}

static void mirror__cuda_slice_verdict(void *dev, mirror_loss_scale_state *st, const float *sums,
                                       const mirror__tick *t, int format, float max_norm)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    mirror__k_slice_verdict<<<1, 1, 0, d->stream>>>(st, sums, t, format, max_norm);
    MIRROR__LAUNCHED(d, "slice verdict kernel");
}

/* The fp32 updates return at once while the guard holds a non-finite step. */
__global__ void mirror__k_sgd(float *w, float *v, const float *g, size_t n, const mirror_loss_scale_state *guard,
                              const mirror__tick *t, float momentum, float weight_decay, int nesterov)
{
    float c = mirror_hd_clip_of(guard), lr = t->lr;
    if (guard->found_nonfinite) return;
    MIRROR__FOR_EACH(i, n)
    {
        float unused = 0.0f;
        mirror_hd_sgd(&w[i], v ? &v[i] : &unused, g[i] * c, lr, momentum, weight_decay, nesterov);
    }
}

static void mirror__cuda_sgd(void *dev, float *w, float *v, const float *g, size_t n,
                             const mirror_loss_scale_state *guard, const mirror__tick *t, float momentum,
                             float weight_decay, int nesterov)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_sgd<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(w, v, g, n, guard, t, momentum, weight_decay,
                                                                      nesterov);
    MIRROR__LAUNCHED(d, "sgd kernel");
}

__global__ void mirror__k_adam(float *w, float *avg, float *avg_sq, const float *g, size_t n,
                               const mirror_loss_scale_state *guard, const mirror__tick *t, float beta1, float beta2,
                               float eps, float weight_decay, int decoupled)
{
    float c = mirror_hd_clip_of(guard), lr = t->lr, bc1 = t->bc1, bc2_sqrt = t->bc2_sqrt;
    if (guard->found_nonfinite) return;
    MIRROR__FOR_EACH(i, n)
    mirror_hd_adam(&w[i], &avg[i], &avg_sq[i], g[i] * c, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2_sqrt);
}

static void mirror__cuda_adam(void *dev, float *w, float *avg, float *avg_sq, const float *g, size_t n,
                              const mirror_loss_scale_state *guard, const mirror__tick *t, float beta1, float beta2,
                              float eps, float weight_decay, int decoupled)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_adam<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(w, avg, avg_sq, g, n, guard, t, beta1, beta2, eps,
                                                                       weight_decay, decoupled);
    MIRROR__LAUNCHED(d, "adam kernel");
}

// >>cuda mixed precision ----------------------------------------------------
/* Mixed precision. format: MIRROR_PRECISION_FP16 or _BF16. */

static int mirror__cuda_set_precision(void *dev, int precision, size_t largest)
{
    (void)largest; /* the kernels read and write 16 bits themselves */
    ((mirror__cuda_dev *)dev)->precision = precision;
    return MIRROR_OK;
}

__global__ void mirror__k_narrow(uint16_t *dst, const float *src, size_t n, int format)
{
    MIRROR__FOR_EACH(i, n) dst[i] = mirror_hd_narrow(src[i], format);
}

static void mirror__cuda_narrow(void *dev, uint16_t *dst, const float *src, size_t n, int format)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_narrow<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(dst, src, n, format);
    MIRROR__LAUNCHED(d, "narrow kernel");
}

__global__ void mirror__k_widen(float *dst, const uint16_t *src, size_t n, int format)
{
    MIRROR__FOR_EACH(i, n) dst[i] = mirror_hd_widen(src[i], format);
}

static void mirror__cuda_widen(void *dev, float *dst, const uint16_t *src, size_t n, int format)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    mirror__k_widen<<<mirror__blocks(n), MIRROR__THREADS, 0, d->stream>>>(dst, src, n, format);
    MIRROR__LAUNCHED(d, "widen kernel");
}

/* The mixed-precision step's passes over every parameter (check, then
   update) are bound by memory: one 2- or 4-byte access per array and
   element left them at 27% (check) and 63% (Adam) of a copy's bandwidth on
   an H200. So a thread takes a group of elements with one vector access
   per array (16 bytes, or 8 of 16-bit values beside floats) where every
   array is aligned for it (mirror__aligned, asked by the host): 43% and
   97% on the same H200 (the check reads only, and its figure is of a
   copy's read and write). A group cut short by the end, or one of arrays
   that are not aligned (a slice one element in), is read and written an
   element at a time. The update's
   arithmetic is written once per lane of a group, whatever the accesses:
   a second copy for the elements left over was compiled with other
   multiply-adds fused (ptxas fuses as it schedules), and the sharded
   update, whose slices end on whole groups, gave other bits than the
   update of the whole, whose last elements were left over. */
static int mirror__aligned(const void *p, size_t bytes) { return !p || (uintptr_t)p % bytes == 0; }

#define MIRROR__GROUP 4 /* elements a thread of an update takes */

__device__ static void mirror__get4(const float *p, size_t i0, size_t n, int whole, float x[4])
{
    if (whole) {
        float4 v = *(const float4 *)(p + i0);
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        return;
    }
    for (int k = 0; k < 4; k++) x[k] = i0 + k < n ? p[i0 + k] : 0.0f;
}

__device__ static void mirror__put4(float *p, size_t i0, size_t n, int whole, const float x[4])
{
    if (whole) {
        *(float4 *)(p + i0) = make_float4(x[0], x[1], x[2], x[3]);
        return;
    }
    for (int k = 0; k < 4; k++)
        if (i0 + k < n) p[i0 + k] = x[k];
}

__device__ static void mirror__get4_16(const uint16_t *p, size_t i0, size_t n, int whole, uint16_t h[4])
{
    if (whole) {
        uint2 v = *(const uint2 *)(p + i0);
        h[0] = (uint16_t)v.x, h[1] = (uint16_t)(v.x >> 16), h[2] = (uint16_t)v.y, h[3] = (uint16_t)(v.y >> 16);
        return;
    }
    for (int k = 0; k < 4; k++) h[k] = i0 + k < n ? p[i0 + k] : (uint16_t)0;
}

__device__ static void mirror__put4_16(uint16_t *p, size_t i0, size_t n, int whole, const uint16_t h[4])
{
    if (whole) {
        *(uint2 *)(p + i0) = make_uint2(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16);
        return;
    }
    for (int k = 0; k < 4; k++)
        if (i0 + k < n) p[i0 + k] = h[k];
}

/* Any thread that meets a non-finite unscaled element stores 1: every
   writer writes the same value, so no atomics; scaler_update clears it.
   Groups of 8 (16 bytes). */
__global__ void mirror__k_check(mirror_loss_scale_state *st, const uint16_t *g, size_t n, size_t groups, int format)
{
    float inv_scale = 1.0f / st->scale;
    int finite = 1;
    MIRROR__FOR_EACH(q, groups)
    {
        uint4 v = ((const uint4 *)g)[q];
        uint32_t word[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 8; k++)
            finite &= mirror_hd_finite(mirror_hd_unscale((uint16_t)(word[k / 2] >> 16 * (k % 2)), format, inv_scale));
    }
    MIRROR__FOR_EACH(i, n - 8 * groups)
    finite &= mirror_hd_finite(mirror_hd_unscale(g[8 * groups + i], format, inv_scale));
    if (!finite) st->found_nonfinite = 1;
}

static void mirror__cuda_check(void *dev, mirror_loss_scale_state *st, const uint16_t *g, size_t n, int format)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    size_t groups = mirror__aligned(g, 16) ? n / 8 : 0; /* of 8, the rest one a thread */
    mirror__k_check<<<mirror__blocks(groups ? groups : n), MIRROR__THREADS, 0, d->stream>>>(st, g, n, groups, format);
    MIRROR__LAUNCHED(d, "check kernel");
}

/* The fused updates return at once on a skipped step; every thread reads
   the same flag, so a block leaves as a whole. */
__global__ void mirror__k_sgd_mixed(float *w, float *v, uint16_t *w16, const uint16_t *g, size_t n, int aligned,
                                    int format, const mirror_loss_scale_state *st, const mirror__tick *t,
                                    float momentum, float weight_decay, int nesterov)
{
    float inv_scale, lr = t->lr;
    if (st->found_nonfinite) return;
    inv_scale = mirror_hd_clip_of(st) / st->scale; /* unscaled and clipped */
    MIRROR__FOR_EACH(q, (n + MIRROR__GROUP - 1) / MIRROR__GROUP)
    {
        size_t i0 = q * MIRROR__GROUP;
        int whole = aligned && i0 + MIRROR__GROUP <= n;
        float ws[4], vs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        uint16_t gs[4], hs[4];
        mirror__get4(w, i0, n, whole, ws), mirror__get4_16(g, i0, n, whole, gs);
        if (v) mirror__get4(v, i0, n, whole, vs);
        for (int k = 0; k < MIRROR__GROUP; k++)
            mirror_hd_sgd_mixed(&ws[k], &vs[k], &hs[k], gs[k], format, inv_scale, lr, momentum, weight_decay, nesterov);
        mirror__put4(w, i0, n, whole, ws), mirror__put4_16(w16, i0, n, whole, hs);
        if (v) mirror__put4(v, i0, n, whole, vs);
    }
}

static void mirror__cuda_sgd_mixed(void *dev, float *w, float *v, uint16_t *w16, const uint16_t *g,
                                   size_t n, int format, const mirror_loss_scale_state *st, const mirror__tick *t,
                                   float momentum, float weight_decay, int nesterov)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    int aligned = mirror__aligned(w, 16) && mirror__aligned(v, 16) && mirror__aligned(w16, 8) && mirror__aligned(g, 8);
    mirror__k_sgd_mixed<<<mirror__blocks((n + MIRROR__GROUP - 1) / MIRROR__GROUP), MIRROR__THREADS, 0, d->stream>>>(
        w, v, w16, g, n, aligned, format, st, t, momentum, weight_decay, nesterov);
    MIRROR__LAUNCHED(d, "sgd_mixed kernel");
}

/* Adam's t is st->applied + 1; its bias corrections, once per block. */
__global__ void mirror__k_adam_mixed(float *w, float *avg, float *avg_sq, uint16_t *w16, const uint16_t *g,
                                     size_t n, int aligned, int format, const mirror_loss_scale_state *st,
                                     const mirror__tick *t, float beta1, float beta2, float eps, float weight_decay,
                                     int decoupled)
{
    __shared__ float bias[2]; /* bc1, bc2_sqrt */
    float inv_scale, lr = t->lr;
    if (st->found_nonfinite) return;
    if (threadIdx.x == 0) mirror_hd_adam_bias(beta1, beta2, st->applied + 1, &bias[0], &bias[1]);
    __syncthreads();
    inv_scale = mirror_hd_clip_of(st) / st->scale; /* unscaled and clipped */
    MIRROR__FOR_EACH(q, (n + MIRROR__GROUP - 1) / MIRROR__GROUP)
    {
        size_t i0 = q * MIRROR__GROUP;
        int whole = aligned && i0 + MIRROR__GROUP <= n;
        float ws[4], ms[4], vs[4];
        uint16_t gs[4], hs[4];
        mirror__get4(w, i0, n, whole, ws), mirror__get4(avg, i0, n, whole, ms), mirror__get4(avg_sq, i0, n, whole, vs);
        mirror__get4_16(g, i0, n, whole, gs);
        for (int k = 0; k < MIRROR__GROUP; k++)
            mirror_hd_adam_mixed(&ws[k], &ms[k], &vs[k], &hs[k], gs[k], format, inv_scale, lr, beta1, beta2, eps,
                                 weight_decay, decoupled, bias[0], bias[1]);
        mirror__put4(w, i0, n, whole, ws), mirror__put4(avg, i0, n, whole, ms), mirror__put4(avg_sq, i0, n, whole, vs);
        mirror__put4_16(w16, i0, n, whole, hs);
    }
}

static void mirror__cuda_adam_mixed(void *dev, float *w, float *avg, float *avg_sq, uint16_t *w16, const uint16_t *g, size_t n, int format, const mirror_loss_scale_state *st,
                                    const mirror__tick *t, float beta1, float beta2, float eps, float weight_decay,
                                    int decoupled)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (!n) return;
    int aligned = mirror__aligned(w, 16) && mirror__aligned(avg, 16) && mirror__aligned(avg_sq, 16) &&
                  mirror__aligned(w16, 8) && mirror__aligned(g, 8);
    mirror__k_adam_mixed<<<mirror__blocks((n + MIRROR__GROUP - 1) / MIRROR__GROUP), MIRROR__THREADS, 0, d->stream>>>(
        w, avg, avg_sq, w16, g, n, aligned, format, st, t, beta1, beta2, eps, weight_decay, decoupled);
    MIRROR__LAUNCHED(d, "adam_mixed kernel");
}

/* One thread; the desc comes by value, as a kernel argument. */
__global__ void mirror__k_scaler_update(mirror_loss_scale_state *st, mirror_loss_scale_desc d)
{
    mirror_hd_scaler_update(st, &d);
}

static void mirror__cuda_scaler_update(void *dev, mirror_loss_scale_state *st, const mirror_loss_scale_desc *desc)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    mirror__k_scaler_update<<<1, 1, 0, d->stream>>>(st, *desc);
    MIRROR__LAUNCHED(d, "scaler_update kernel");
}

// >>cuda timing -------------------------------------------------------------

/* Timing on a GPU: CUDA events on the replica's stream, placed on the
   host's clock through an origin event that the host waited for (its time
   known within the poll's microseconds). Reading them waits for the GPU:
   while timing is on, the host does not run ahead of a step's work. */
static int mirror__cuda_timing_start(mirror__cuda_dev *d)
{
    int k = 0, origin = mirror__cuda_ok(d, cudaEventCreate(&d->origin), "cudaEventCreate (timing)"), ok = origin;
    while (ok && k < MIRROR__MARKS) /* k: the marks made */
        if ((ok = mirror__cuda_ok(d, cudaEventCreate(&d->mark[k]), "cudaEventCreate (timing)"))) k++;
    ok = ok && mirror__cuda_ok(d, cudaEventRecord(d->origin, d->stream), "cudaEventRecord (timing)") &&
         mirror__cuda_wait(d, d->origin, "waiting for timing's origin");
    if (!ok) { /* what was made, unmade */
        while (k-- > 0) cudaEventDestroy(d->mark[k]);
        if (origin) cudaEventDestroy(d->origin);
        return 0;
    }
    d->origin_host = mirror__now();
    return d->timing = 1;
}

static void mirror__cuda_mark(void *dev, int slot)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if ((d->timing || mirror__cuda_timing_start(d)) &&
        mirror__cuda_ok(d, cudaEventRecord(d->mark[slot], d->stream), "cudaEventRecord (timing)"))
        d->marked |= 1u << slot;
}

static void mirror__cuda_marks(void *dev, double *t, int n)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    float ms = 0.0f;
    int k;
    for (k = 0; k < n; k++) {
        t[k] = 0.0;
        if (!d->timing || !(d->marked & (1u << k))) continue; /* never reached: 0, as a span of nothing */
        if (!mirror__cuda_wait(d, d->mark[k], "waiting for a timing event")) return;
        if (mirror__cuda_ok(d, cudaEventElapsedTime(&ms, d->origin, d->mark[k]), "cudaEventElapsedTime"))
            t[k] = d->origin_host + 1e-3 * (double)ms;
    }
}

// >>cuda buckets ------------------------------------------------------------

/* The bucketed all-reduce (mirror.h's mirror__reduce_buckets): each
   replica's thread queues its buckets as its backward makes them; NCCL
   sums a bucket on the replica's NCCL stream once the compute stream has
   made it, while the compute stream goes on with the layers below. One
   communicator per GPU, each driven by its own thread: no group call. */
static void mirror__cuda_reduce_bucket(void *dev, void *buf, size_t n, int format)
{
#ifndef MIRROR_NO_NCCL
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    mirror__gpu *g = d->gpu;
    ncclDataType_t type = !format ? ncclFloat : format == MIRROR_PRECISION_BF16 ? ncclBfloat16 : ncclFloat16;
    ncclResult_t e;
    int aborted;
    pthread_mutex_lock(&g->lock);
    aborted = g->aborted;
    pthread_mutex_unlock(&g->lock);
    if (aborted) {
        mirror__cuda_record(d, MIRROR_ERR_DEVICE, "ncclAllReduce", "NCCL was aborted after an earlier failure");
        return;
    }
    if (!mirror__cuda_ok(d, cudaEventRecord(d->made, d->stream), "cudaEventRecord") ||
        !mirror__cuda_ok(d, cudaStreamWaitEvent(d->comm, d->made, 0), "cudaStreamWaitEvent"))
        return;
    if ((e = ncclAllReduce(buf, buf, n, type, ncclSum, g->comm[d->replica], d->comm)) != ncclSuccess)
        mirror__cuda_record(d, MIRROR_ERR_DEVICE, "ncclAllReduce", ncclGetErrorString(e));
#else
    (void)dev, (void)buf, (void)n, (void)format;
#endif
}

static void mirror__cuda_buckets_done(void *dev)
{
    mirror__cuda_dev *d = mirror__cuda_enter(dev);
    if (mirror__cuda_ok(d, cudaEventRecord(d->summed, d->comm), "cudaEventRecord"))
        mirror__cuda_ok(d, cudaStreamWaitEvent(d->stream, d->summed, 0), "cudaStreamWaitEvent");
}

// >>cuda backend ------------------------------------------------------------

#ifndef MIRROR_CUDA_KEEP_COLS
#define MIRROR_CUDA_KEEP_COLS ((size_t)1 << 30)
#endif

MIRROR__NAMED_BEGIN
static const mirror__backend mirror__cuda_backend = {
    .name = "cuda",
    .conv_chunk = 0, /* convolutions: one GEMM over the whole shard */
    .keep_cols = MIRROR_CUDA_KEEP_COLS, /* and its im2col kept for backward, within this budget */
    .param_align = 64, /* parameter tensors at 256-byte boundaries: aligned GEMM operands */
    .gemm_rows_free = 0, /* cuBLAS picks its kernels by shape: deterministic mode's GEMMs go a chunk at a time */
    .open = mirror__cuda_open,
    .close = mirror__cuda_close,
    .bind = mirror__cuda_bind,
    .status = mirror__cuda_status,
    .alloc = mirror__cuda_alloc,
    .release = mirror__cuda_release,
    .host_alloc = mirror__cuda_host_alloc,
    .host_release = mirror__cuda_host_release,
    .host_wait = mirror__cuda_host_wait,
    .zero = mirror__cuda_zero,
    .upload = mirror__cuda_upload,
    .download = mirror__cuda_download,
    .stage = mirror__cuda_stage,
    .upload_staged = mirror__cuda_upload_staged,
    .staged = mirror__cuda_staged,
    .gemm = mirror__cuda_gemm,
    .gemm_bias = mirror__cuda_gemm_bias,
    .bias_add = mirror__cuda_bias_add,
    .bias_grad = mirror__cuda_bias_grad,
    .relu_forward = mirror__cuda_relu_forward,
    .relu_backward = mirror__cuda_relu_backward,
    .act_forward = mirror__cuda_act_forward,
    .act_backward = mirror__cuda_act_backward,
    .im2col = mirror__cuda_im2col,
    .col2im = mirror__cuda_col2im,
    .permute = mirror__cuda_permute,
    .maxpool_forward = mirror__cuda_maxpool_forward,
    .dropout = mirror__cuda_dropout,
    .set = mirror__cuda_set,
    .avgpool_forward = mirror__cuda_avgpool_forward,
    .avgpool_backward = mirror__cuda_avgpool_backward,
    .bn_sums = mirror__cuda_bn_sums,
    .bn_forward = mirror__cuda_bn_forward,
    .bn_backward = mirror__cuda_bn_backward,
    .add = mirror__cuda_add,
    .maxpool_backward = mirror__cuda_maxpool_backward,
    .softmax_ce = mirror__cuda_softmax_ce,
    .mse = mirror__cuda_mse,
    .accumulate = mirror__cuda_accumulate,
    .check32 = mirror__cuda_check32,
    .clip = mirror__cuda_clip,
    .slice_stats = mirror__cuda_slice_stats,
    .slice_verdict = mirror__cuda_slice_verdict,
    .sgd = mirror__cuda_sgd,
    .adam = mirror__cuda_adam,
    .set_precision = mirror__cuda_set_precision,
    .narrow = mirror__cuda_narrow,
    .widen = mirror__cuda_widen,
    .check = mirror__cuda_check,
    .sgd_mixed = mirror__cuda_sgd_mixed,
    .adam_mixed = mirror__cuda_adam_mixed,
    .scaler_update = mirror__cuda_scaler_update,
    .mark = mirror__cuda_mark,
    .marks = mirror__cuda_marks,
    .workspace = mirror__cuda_workspace,
#ifndef MIRROR_NO_NCCL
    .reduce_bucket = mirror__cuda_reduce_bucket,
    .buckets_done = mirror__cuda_buckets_done,
#endif
    .capture_begin = mirror__cuda_capture_begin,
    .capture_end = mirror__cuda_capture_end,
    .graph_launch = mirror__cuda_graph_launch,
    .graph_free = mirror__cuda_graph_free,
    .device_memory = mirror__cuda_device_memory,
    .gemm_align = mirror__cuda_gemm_align,
    .gather = mirror__cuda_gather,
};
MIRROR__NAMED_END

// >>cuda reducers -----------------------------------------------------------

/* The strategy-level error of a runtime or NCCL call. */
static int mirror__gpu_ok(cudaError_t e, const char *what, mirror_error *err)
{
    if (e == cudaSuccess) return 1;
    (void)cudaGetLastError(); /* see mirror__cuda_ok */
    mirror__error(err, e == cudaErrorMemoryAllocation ? MIRROR_ERR_NO_MEMORY : MIRROR_ERR_DEVICE, "%s: %s", what,
                  cudaGetErrorString(e));
    return 0;
}

#ifndef MIRROR_NO_NCCL
static int mirror__nccl_ok(ncclResult_t e, const char *what, mirror_error *err)
{
    if (e == ncclSuccess) return 1;
    mirror__error(err, MIRROR_ERR_DEVICE, "%s: %s", what, ncclGetErrorString(e));
    return 0;
}

/* After an abort (see mirror__nccl_abort) NCCL is gone for this strategy. */
static int mirror__nccl_usable(mirror__gpu *g, mirror_error *err)
{
    int aborted;
    pthread_mutex_lock(&g->lock);
    aborted = g->aborted;
    pthread_mutex_unlock(&g->lock);
    if (!aborted) return 1;
    mirror__error(err, MIRROR_ERR_DEVICE,
                  "NCCL was aborted after an earlier failure (%s): this strategy all-reduces no more; destroy it "
                  "and create another",
                  g->why);
    return 0;
}

/* The collectives the reducers use. In the reduce-scatter and the
   all-gather, n is a slice (values of `type`), replica r's slice lying at
   r n of its buffer: NCCL's in-place layout, the communicator's rank r
   being replica r (one process). */
enum { MIRROR__NCCL_SUM, MIRROR__NCCL_BROADCAST, MIRROR__NCCL_REDUCE_SCATTER, MIRROR__NCCL_ALL_GATHER };

static ncclResult_t mirror__nccl_call(int op, void *buf, size_t r, size_t n, ncclDataType_t type, size_t size,
                                      size_t root, ncclComm_t comm, cudaStream_t stream)
{
    char *mine = (char *)buf + r * n * size;
    switch (op) {
    case MIRROR__NCCL_SUM: return ncclAllReduce(buf, buf, n, type, ncclSum, comm, stream);
    case MIRROR__NCCL_BROADCAST: return ncclBroadcast(buf, buf, n, type, (int)root, comm, stream);
    case MIRROR__NCCL_REDUCE_SCATTER: return ncclReduceScatter(buf, mine, n, type, ncclSum, comm, stream);
    default: return ncclAllGather(mine, buf, n, type, comm, stream);
    }
}

/* One NCCL call per replica, on its stream, inside a group: after the work
   already queued on every stream, before the work queued next. */
static int mirror__nccl_group(mirror_strategy *s, int op, void *const *bufs, size_t n, ncclDataType_t type,
                              size_t size, size_t root, mirror_error *err)
{
    static const char *const names[] = {"ncclAllReduce", "ncclBroadcast", "ncclReduceScatter", "ncclAllGather"};
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    size_t r;
    int ok;
    if (!mirror__nccl_usable(g, err)) return MIRROR_ERR_DEVICE;
    if (!mirror__nccl_ok(ncclGroupStart(), "ncclGroupStart", err)) return err ? err->code : MIRROR_ERR_DEVICE;
    for (r = 0, ok = 1; r < g->replicas && ok; r++)
        ok = mirror__nccl_ok(mirror__nccl_call(op, bufs[r], r, n, type, size, root, g->comm[r], g->stream[r]),
                             names[op], err);
    if (!mirror__nccl_ok(ncclGroupEnd(), "ncclGroupEnd", ok ? err : NULL) || !ok) return MIRROR_ERR_DEVICE;
    return MIRROR_OK;
}

static int mirror__nccl_sum(mirror_strategy *s, void *const *bufs, size_t n, ncclDataType_t type, mirror_error *err)
{
    return mirror__nccl_group(s, MIRROR__NCCL_SUM, bufs, n, type, 0, 0, err);
}

static ncclDataType_t mirror__nccl_type(int format)
{
    return format == MIRROR_PRECISION_BF16 ? ncclBfloat16 : format ? ncclFloat16 : ncclFloat;
}

static int mirror__nccl_all_reduce(mirror_strategy *s, float *const *bufs, size_t n, mirror_error *err)
{
    return mirror__nccl_sum(s, (void *const *)bufs, n, ncclFloat, err);
}

static int mirror__nccl_all_reduce_half(mirror_strategy *s, uint16_t *const *bufs, size_t n, int format,
                                        mirror_error *err)
{
    return mirror__nccl_sum(s, (void *const *)bufs, n, mirror__nccl_type(format), err);
}

static int mirror__nccl_broadcast(mirror_strategy *s, float *const *bufs, size_t n, size_t root, mirror_error *err)
{
    return mirror__nccl_group(s, MIRROR__NCCL_BROADCAST, (void *const *)bufs, n, ncclFloat, 0, root, err);
}

static int mirror__nccl_reduce_scatter(mirror_strategy *s, void *const *bufs, size_t slice, int format,
                                       mirror_error *err)
{
    return mirror__nccl_group(s, MIRROR__NCCL_REDUCE_SCATTER, bufs, slice, mirror__nccl_type(format),
                              format ? sizeof(uint16_t) : sizeof(float), 0, err);
}

static int mirror__nccl_all_gather(mirror_strategy *s, void *const *bufs, size_t slice, size_t size, mirror_error *err)
{
    return mirror__nccl_group(s, MIRROR__NCCL_ALL_GATHER, bufs, slice * size, ncclInt8, 1, 0, err);
}

static int mirror__copy_sum_list(mirror_strategy *s, float *const *in, const size_t *owner, size_t nin,
                                 float *const *bufs, size_t n, mirror_error *err);
MIRROR__NAMED_BEGIN
static const mirror__reducer mirror__nccl_reducer = {
    .name = "nccl",
    .all_reduce_sum = mirror__nccl_all_reduce,
    .broadcast = mirror__nccl_broadcast,
    .all_reduce_half = mirror__nccl_all_reduce_half,
    .sum_list = mirror__copy_sum_list,
    .reduce_scatter = mirror__nccl_reduce_scatter,
    .all_gather = mirror__nccl_all_gather,
};
MIRROR__NAMED_END
#endif

/* The copy reducer, in the strategy's order of events: every replica's
   stream marks its work done; the root's stream waits for all of them,
   gathers (peer copies for other GPUs), sums in replica order, copies the
   result back to every replica; every stream waits for that. */
static int mirror__copy_gather_wait(mirror__gpu *g, size_t root, mirror_error *err)
{
    size_t r;
    for (r = 0; r < g->replicas; r++) {
        if (!mirror__gpu_ok(cudaSetDevice(g->device[r]), "cudaSetDevice", err) ||
            !mirror__gpu_ok(cudaEventRecord(g->ready[r], g->stream[r]), "cudaEventRecord", err))
            return 0;
    }
    if (!mirror__gpu_ok(cudaSetDevice(g->device[root]), "cudaSetDevice", err)) return 0;
    for (r = 0; r < g->replicas; r++)
        if (!mirror__gpu_ok(cudaStreamWaitEvent(g->stream[root], g->ready[r], 0), "cudaStreamWaitEvent", err))
            return 0;
    return 1;
}

/* Every stream waits for what the root's stream has queued. */
static int mirror__copy_release(mirror__gpu *g, size_t root, mirror_error *err)
{
    size_t r;
    if (!mirror__gpu_ok(cudaEventRecord(g->done[root], g->stream[root]), "cudaEventRecord", err))
        return MIRROR_ERR_DEVICE;
    for (r = 0; r < g->replicas; r++) {
        if (r == root) continue;
        if (!mirror__gpu_ok(cudaSetDevice(g->device[r]), "cudaSetDevice", err) ||
            !mirror__gpu_ok(cudaStreamWaitEvent(g->stream[r], g->done[root], 0), "cudaStreamWaitEvent", err))
            return MIRROR_ERR_DEVICE;
    }
    return MIRROR_OK;
}

/* Copies bufs[root] (bytes) to every other replica on the root's stream,
   then makes every stream wait for the copies. */
static int mirror__copy_scatter(mirror__gpu *g, void *const *bufs, size_t bytes, size_t root, mirror_error *err)
{
    size_t r;
    for (r = 0; r < g->replicas; r++) {
        if (r == root) continue;
        if (!mirror__gpu_ok(cudaMemcpyPeerAsync(bufs[r], g->device[r], bufs[root], g->device[root], bytes,
                                                g->stream[root]),
                            "cudaMemcpyPeerAsync", err))
            return MIRROR_ERR_DEVICE;
    }
    return mirror__copy_release(g, root, err);
}

/* The staging area on the first GPU, for buffers of other GPUs: at least
   bytes, grown when short (a first step allocates). cudaFree waits for the
   whole GPU, with no timeout: the first GPU's compute streams, which read
   the staging area (and wait for the other GPUs'), are waited for first,
   with the strategy's. */
static int mirror__copy_stage(mirror__gpu *g, size_t bytes, mirror_error *err)
{
    char why[200];
    size_t r;
    int code = MIRROR_OK;
    if (bytes <= g->stage_bytes) return MIRROR_OK;
    for (r = 0; g->stage && r < g->replicas && !code; r++)
        if (g->device[r] == g->device[0]) code = mirror__gpu_wait(g, g->stream[r], NULL, why, sizeof why);
    if (code) return mirror__error(err, code, "copy reducer: waiting before cudaFree: %s", why);
    if (g->stage && !mirror__gpu_ok(cudaFree(g->stage), "cudaFree", err)) return MIRROR_ERR_DEVICE;
    g->stage = NULL;
    g->stage_bytes = 0;
    if (!mirror__gpu_ok(cudaMalloc(&g->stage, bytes), "cudaMalloc (copy reducer staging)", err))
        return err ? err->code : MIRROR_ERR_NO_MEMORY;
    g->stage_bytes = bytes;
    return MIRROR_OK;
}

/* The copy reducer's sums over the replicas' buffers, element by element
   in replica order: in[0][i] + in[1][i] + ... (launched by mirror__copy_sum
   below and mirror__copy_sum_list). */
__global__ void mirror__k_sum(float *out, mirror__sources in, size_t count, size_t n)
{
    MIRROR__FOR_EACH(i, n)
    {
        float s = ((const float *)in.p[0])[i];
        size_t r;
        for (r = 1; r < count; r++) s += ((const float *)in.p[r])[i];
        out[i] = s;
    }
}

/* 16-bit values: widened, added in fp32, rounded once (as the CPU
   reducer's mirror__cpu_all_reduce_half_job). */
__global__ void mirror__k_sum_half(uint16_t *out, mirror__sources in, size_t count, size_t n, int format)
{
    MIRROR__FOR_EACH(i, n)
    {
        float s = mirror_hd_widen(((const uint16_t *)in.p[0])[i], format);
        size_t r;
        for (r = 1; r < count; r++) s += mirror_hd_widen(((const uint16_t *)in.p[r])[i], format);
        out[i] = mirror_hd_narrow(s, format);
    }
}

/* The sum of n values of the format (MIRROR_PRECISION_FP32: floats, else
   16-bit values) on the first replica's GPU, copied back to every replica. */
static int mirror__copy_sum(mirror_strategy *s, void *const *bufs, size_t n, int format, mirror_error *err)
{
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    mirror__sources src;
    size_t r, staged = 0, bytes = n * (format == MIRROR_PRECISION_FP32 ? sizeof(float) : sizeof(uint16_t));
    int rc;
    if (g->replicas == 1) return MIRROR_OK;
    if (!mirror__copy_gather_wait(g, 0, err)) return MIRROR_ERR_DEVICE;
    /* Buffers on other GPUs come over to the first GPU's staging area. */
    for (r = 1; r < g->replicas; r++) staged += g->device[r] != g->device[0];
    if ((rc = mirror__copy_stage(g, staged * bytes, err))) return rc;
    src.p[0] = bufs[0];
    for (r = 1, staged = 0; r < g->replicas; r++) {
        if (g->device[r] == g->device[0]) {
            src.p[r] = bufs[r];
            continue;
        }
        void *to = g->stage + staged++ * bytes;
        src.p[r] = to;
        if (!mirror__gpu_ok(cudaMemcpyPeerAsync(to, g->device[0], bufs[r], g->device[r], bytes, g->stream[0]),
                            "cudaMemcpyPeerAsync", err))
            return MIRROR_ERR_DEVICE;
    }
    if (format == MIRROR_PRECISION_FP32)
        mirror__k_sum<<<mirror__blocks(n), MIRROR__THREADS, 0, g->stream[0]>>>((float *)bufs[0], src, g->replicas, n);
    else
        mirror__k_sum_half<<<mirror__blocks(n), MIRROR__THREADS, 0, g->stream[0]>>>((uint16_t *)bufs[0], src,
                                                                                   g->replicas, n, format);
    if (!mirror__gpu_ok(cudaGetLastError(), "copy reducer sum kernel", err)) return MIRROR_ERR_DEVICE;
    return mirror__copy_scatter(g, bufs, bytes, 0, err);
}

static int mirror__copy_all_reduce(mirror_strategy *s, float *const *bufs, size_t n, mirror_error *err)
{
    return mirror__copy_sum(s, (void *const *)bufs, n, MIRROR_PRECISION_FP32, err);
}

static int mirror__copy_all_reduce_half(mirror_strategy *s, uint16_t *const *bufs, size_t n, int format,
                                        mirror_error *err)
{
    return mirror__copy_sum(s, (void *const *)bufs, n, format, err);
}

static int mirror__copy_broadcast(mirror_strategy *s, float *const *bufs, size_t n, size_t root, mirror_error *err)
{
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    if (g->replicas == 1) return MIRROR_OK;
    if (!mirror__copy_gather_wait(g, root, err)) return MIRROR_ERR_DEVICE;
    return mirror__copy_scatter(g, (void *const *)bufs, n * sizeof(float), root, err);
}

/* Deterministic mode's sum of a list in list order, on the first GPU: the
   lists on other GPUs come over to the staging area; the sum goes in
   groups of up to MIRROR__COPY_MAX buffers, each group added onto the
   total of those before (mirror__k_sum adds its sources in order); then
   the total is copied to every replica. NCCL's order of additions is its
   own, so the nccl reducer sums a list this way too. */
static int mirror__copy_sum_list(mirror_strategy *s, float *const *in, const size_t *owner, size_t nin,
                                 float *const *bufs, size_t n, mirror_error *err)
{
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    mirror__sources src;
    size_t k, staged = 0, bytes = n * sizeof(float), done = 0;
    int rc;
    if (!mirror__copy_gather_wait(g, 0, err)) return MIRROR_ERR_DEVICE;
    for (k = 0; k < nin; k++) staged += g->device[owner[k]] != g->device[0];
    if ((rc = mirror__copy_stage(g, staged * bytes, err))) return rc;
    while (done < nin || !done) { /* a group: the total so far (after the first), then the next buffers */
        size_t count = 0;
        if (done) src.p[count++] = bufs[0];
        for (; done < nin && count < MIRROR__COPY_MAX; done++) {
            void *from = in[done];
            if (g->device[owner[done]] != g->device[0]) {
                void *to = g->stage + (staged - 1) * bytes; /* each staged buffer its own place */
                staged--;
                if (!mirror__gpu_ok(cudaMemcpyPeerAsync(to, g->device[0], from, g->device[owner[done]], bytes,
                                                        g->stream[0]),
                                    "cudaMemcpyPeerAsync", err))
                    return MIRROR_ERR_DEVICE;
                from = to;
            }
            src.p[count++] = from;
        }
        if (!count) { /* an empty list: zeros */
            if (!mirror__gpu_ok(cudaMemsetAsync(bufs[0], 0, bytes, g->stream[0]), "cudaMemsetAsync", err))
                return MIRROR_ERR_DEVICE;
            break;
        }
        mirror__k_sum<<<mirror__blocks(n), MIRROR__THREADS, 0, g->stream[0]>>>(bufs[0], src, count, n);
        if (!mirror__gpu_ok(cudaGetLastError(), "copy reducer sum kernel", err)) return MIRROR_ERR_DEVICE;
    }
    return g->replicas > 1 ? mirror__copy_scatter(g, (void *const *)bufs, bytes, 0, err) : MIRROR_OK;
}

/* The copy reducer's reduce-scatter is its all-reduce: every replica gets
   every slice's sum, its own among them. */
static int mirror__copy_reduce_scatter(mirror_strategy *s, void *const *bufs, size_t slice, int format,
                                       mirror_error *err)
{
    return mirror__copy_sum(s, bufs, ((mirror__gpu *)s->gpu)->replicas * slice, format, err);
}

/* Each replica's slice into the first replica's buffer, then that buffer
   to every other, on the first replica's stream (peer copies to and from
   the first GPU only, as the copy reducer's sum). */
static int mirror__copy_all_gather(mirror_strategy *s, void *const *bufs, size_t slice, size_t size, mirror_error *err)
{
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    size_t r, bytes = slice * size;
    if (g->replicas == 1) return MIRROR_OK;
    if (!mirror__copy_gather_wait(g, 0, err)) return MIRROR_ERR_DEVICE;
    for (r = 1; r < g->replicas; r++)
        if (!mirror__gpu_ok(cudaMemcpyPeerAsync((char *)bufs[0] + r * bytes, g->device[0], (char *)bufs[r] + r * bytes,
                                                g->device[r], bytes, g->stream[0]),
                            "cudaMemcpyPeerAsync", err))
            return MIRROR_ERR_DEVICE;
    return mirror__copy_scatter(g, bufs, g->replicas * bytes, 0, err);
}

MIRROR__NAMED_BEGIN
static const mirror__reducer mirror__copy_reducer = {
    .name = "copy",
    .all_reduce_sum = mirror__copy_all_reduce,
    .broadcast = mirror__copy_broadcast,
    .all_reduce_half = mirror__copy_all_reduce_half,
    .sum_list = mirror__copy_sum_list,
    .reduce_scatter = mirror__copy_reduce_scatter,
    .all_gather = mirror__copy_all_gather,
};
MIRROR__NAMED_END

// >>cuda devices ------------------------------------------------------------

static void mirror__cuda_teardown(mirror_strategy *s)
{
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    size_t r;
    char why[200];
    if (!g) return;
    for (r = 0; g->stream && r < g->replicas; r++) /* nothing left in flight (a hung NCCL aborted) */
        if (g->stream[r] && cudaSetDevice(g->device[r]) == cudaSuccess &&
            mirror__gpu_wait(g, g->stream[r], NULL, why, sizeof why) != MIRROR_OK) {
            char notice[300];
            snprintf(notice, sizeof notice, "while freeing the strategy, GPU %d: %s", g->device[r], why);
            mirror__log(MIRROR_LOG_NOTICE, notice);
        }
#ifndef MIRROR_NO_NCCL
    for (r = 0; g->comm && r < g->replicas; r++) /* those an abort left */
        if (g->comm[r]) ncclCommDestroy(g->comm[r]);
    MIRROR_FREE(g->comm);
#endif
    if (g->locked) pthread_mutex_destroy(&g->lock);
    for (r = 0; g->stream && r < g->replicas; r++) {
        cudaSetDevice(g->device[r]);
        if (g->stream[r]) cudaStreamDestroy(g->stream[r]);
        if (g->ready && g->ready[r]) cudaEventDestroy(g->ready[r]);
        if (g->done && g->done[r]) cudaEventDestroy(g->done[r]);
    }
    if (g->stage && (cudaSetDevice(g->device[0]) != cudaSuccess || cudaFree(g->stage) != cudaSuccess)) {
        char notice[300];
        snprintf(notice, sizeof notice, "while freeing the strategy: cudaFree (copy reducer staging): %s",
                 cudaGetErrorString(cudaGetLastError()));
        mirror__log(MIRROR_LOG_NOTICE, notice);
    }
    (void)cudaGetLastError();
    MIRROR_FREE(g->device);
    MIRROR_FREE(g->stream);
    MIRROR_FREE(g->ready);
    MIRROR_FREE(g->done);
    MIRROR_FREE(g);
    s->gpu = NULL;
}

/* "cuda", "cuda:0,1", "cuda:0,0,0,0", or NULL (every GPU), into ids. */
static int mirror__cuda_parse(const char *spec, int visible, size_t count, int **ids, size_t *n, mirror_error *err)
{
    const char *p = spec ? spec + 4 : "";
    size_t i, cap = 1;
    *ids = NULL;
    *n = 0;
    if (spec && strncmp(spec, "cuda", 4) != 0)
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "devices \"%s\": expected \"cuda\" or \"cuda:0,1,...\"", spec);
    if (*p == '\0') { /* every visible GPU, or count replicas on the GPUs in turn */
        *n = count ? count : (size_t)visible;
        if (!(*ids = (int *)mirror__alloc(*n, sizeof(int))))
            return mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: out of memory");
        for (i = 0; i < *n; i++) (*ids)[i] = (int)(i % (size_t)visible);
        return MIRROR_OK;
    }
    if (*p != ':' || !p[1])
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "devices \"%s\": expected \"cuda:0,1,...\"", spec);
    for (i = 1; p[i]; i++) cap += p[i] == ',';
    if (cap > 4096 || !(*ids = (int *)mirror__alloc(cap, sizeof(int))))
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "devices \"%s\": too many entries", spec);
    for (p++; *p;) {
        char *end;
        long id;
        errno = 0;
        id = strtol(p, &end, 10);
        if (end == p || errno || id < 0 || (*end && *end != ',') || (*end == ',' && !end[1])) {
            MIRROR_FREE(*ids);
            *ids = NULL;
            return mirror__error(err, MIRROR_ERR_ARGUMENT, "devices \"%s\": expected GPU numbers separated by commas",
                                 spec);
        }
        if (id >= visible) {
            MIRROR_FREE(*ids);
            *ids = NULL;
            return mirror__error(err, MIRROR_ERR_DEVICE, "devices \"%s\": GPU %ld does not exist (%d visible)", spec, id,
                                 visible);
        }
        (*ids)[(*n)++] = (int)id;
        p = *end ? end + 1 : end;
    }
    if (count && count != *n) {
        MIRROR_FREE(*ids);
        *ids = NULL;
        return mirror__error(err, MIRROR_ERR_ARGUMENT, "devices \"%s\" gives %zu replicas but num_replicas is %zu", spec,
                             *n, count);
    }
    return MIRROR_OK;
}

static int mirror__cuda_current(void)
{
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
    return device;
}

static void mirror__cuda_restore(int device)
{
    if (cudaSetDevice(device) != cudaSuccess) (void)cudaGetLastError();
}

static mirror__gpus mirror__cuda_gpus(char *why, size_t size)
{
    int count = 0, driver = 0, runtime = CUDART_VERSION;
    cudaError_t e = cudaGetDeviceCount(&count);
    mirror__cuda_answer answer = e == cudaSuccess                   ? MIRROR__CUDA_COUNTED
                                 : e == cudaErrorNoDevice           ? MIRROR__CUDA_NO_DEVICE
                                 : e == cudaErrorInsufficientDriver ? MIRROR__CUDA_OLD_DRIVER
                                                                    : MIRROR__CUDA_FAILED;
    if (e != cudaSuccess) (void)cudaGetLastError();
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    return mirror__cuda_verdict(answer, count, driver, runtime, cudaGetErrorString(e), why, size);
}

static int mirror__cuda_setup_on(mirror_strategy *s, const char *spec, size_t count, mirror_error *err);

/* The setup, leaving the caller's current GPU as it was. */
static int mirror__cuda_setup(mirror_strategy *s, const char *spec, size_t count, mirror_error *err)
{
    int caller = mirror__cuda_current(), rc = mirror__cuda_setup_on(s, spec, count, err);
    mirror__cuda_restore(caller);
    return rc;
}

static int mirror__cuda_setup_on(mirror_strategy *s, const char *spec, size_t count, mirror_error *err)
{
    mirror__gpu *g;
    struct cudaDeviceProp prop;
    int visible = 0, shared = 0, rc;
    size_t r, q, used;
    int *ids;
    cudaError_t e = cudaGetDeviceCount(&visible);
    if (e != cudaSuccess || visible < 1) { /* no driver, no GPU, or one that cannot be used: the verdict's words */
        char why[400] = "no CUDA device is visible"; /* kept if the verdict's own count finds GPUs */
        (void)mirror__cuda_gpus(why, sizeof why);
        return mirror__error(err, MIRROR_ERR_DEVICE, "devices \"%s\": %s", spec ? spec : "cuda", why);
    }
    if ((rc = mirror__cuda_parse(spec, visible, count, &ids, &count, err))) return rc;
    for (r = 0; r < count; r++)
        for (q = 0; q < r; q++) shared |= ids[q] == ids[r];
    if (s->reducer_kind == MIRROR_REDUCER_NCCL && shared) {
        MIRROR_FREE(ids);
        return mirror__error(err, MIRROR_ERR_ARGUMENT,
                             "the NCCL reducer needs distinct GPUs (NCCL refuses two ranks on one GPU); "
                             "use the copy reducer");
    }
#ifdef MIRROR_NO_NCCL
    if (s->reducer_kind == MIRROR_REDUCER_NCCL) {
        MIRROR_FREE(ids);
        return mirror__error(err, MIRROR_ERR_UNSUPPORTED, "the NCCL reducer: this build has no NCCL");
    }
#endif
    g = (mirror__gpu *)mirror__zalloc(1, sizeof *g);
    if (!g) {
        MIRROR_FREE(ids);
        return mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: out of memory");
    }
    s->gpu = g;
    g->replicas = count;
    g->device = ids;
    g->timeout = s->timeout;
    if (pthread_mutex_init(&g->lock, NULL) != 0) {
        rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: no lock");
        goto fail;
    }
    g->locked = 1;
    g->stream = (cudaStream_t *)mirror__zalloc(count, sizeof(cudaStream_t));
    g->ready = (cudaEvent_t *)mirror__zalloc(count, sizeof(cudaEvent_t));
    g->done = (cudaEvent_t *)mirror__zalloc(count, sizeof(cudaEvent_t));
    if (!g->stream || !g->ready || !g->done) {
        rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: out of memory");
        goto fail;
    }
    for (r = 0; r < count; r++)
        if (!mirror__gpu_ok(cudaSetDevice(ids[r]), "cudaSetDevice", err) ||
            !mirror__gpu_ok(cudaStreamCreateWithFlags(&g->stream[r], cudaStreamNonBlocking), "cudaStreamCreate", err) ||
            !mirror__gpu_ok(cudaEventCreateWithFlags(&g->ready[r], cudaEventDisableTiming), "cudaEventCreate", err) ||
            !mirror__gpu_ok(cudaEventCreateWithFlags(&g->done[r], cudaEventDisableTiming), "cudaEventCreate", err)) {
            rc = err ? err->code : MIRROR_ERR_DEVICE;
            goto fail;
        }
    /* Peer access lets the copy reducer read other GPUs directly; where it
       is refused, cudaMemcpyPeerAsync still works through the host. */
    if (!mirror__gpu_ok(cudaSetDevice(ids[0]), "cudaSetDevice", err)) {
        rc = err ? err->code : MIRROR_ERR_DEVICE;
        goto fail;
    }
    for (r = 0; r < count; r++)
        if (ids[r] != ids[0]) {
            int can = 0;
            cudaDeviceCanAccessPeer(&can, ids[0], ids[r]);
            if (can && cudaDeviceEnablePeerAccess(ids[r], 0) != cudaSuccess) cudaGetLastError();
        }
    g->nccl = s->reducer_kind == MIRROR_REDUCER_NCCL || (s->reducer_kind == MIRROR_REDUCER_DEFAULT && !shared && count > 1);
#ifdef MIRROR_NO_NCCL
    g->nccl = 0;
#endif
    if (!g->nccl && count > MIRROR__COPY_MAX) {
        rc = mirror__error(err, MIRROR_ERR_ARGUMENT, "the copy reducer takes at most %d replicas", MIRROR__COPY_MAX);
        goto fail;
    }
#ifndef MIRROR_NO_NCCL
    if (g->nccl) {
        g->comm = (ncclComm_t *)mirror__zalloc(count, sizeof(ncclComm_t));
        if (!g->comm) {
            rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: out of memory");
            goto fail;
        }
        if (!mirror__nccl_ok(ncclCommInitAll(g->comm, (int)count, ids), "ncclCommInitAll", err)) {
            for (r = 0; r < count; r++) /* a communicator whose init failed is aborted, not destroyed */
                if (g->comm[r]) ncclCommAbort(g->comm[r]), g->comm[r] = NULL;
            if (s->reducer_kind == MIRROR_REDUCER_NCCL || count > MIRROR__COPY_MAX) { /* asked for: the reason */
                rc = MIRROR_ERR_DEVICE;
                goto fail;
            }
            { /* by default: the path that works (a small /dev/shm in a container stops NCCL, not the GPUs) */
                char notice[360];
                snprintf(notice, sizeof notice, "NCCL could not start (%s): the copy reducer sums on GPU %d instead",
                         err ? err->message : "ncclCommInitAll failed", ids[0]);
                mirror__log(MIRROR_LOG_NOTICE, notice);
            }
            MIRROR_FREE(g->comm);
            g->comm = NULL;
            g->nccl = 0;
            if (err) err->code = MIRROR_OK, err->message[0] = '\0';
        }
    }
#endif
    s->replicas = count;
    s->backend = &mirror__cuda_backend;
#ifndef MIRROR_NO_NCCL
    s->reducer = g->nccl ? &mirror__nccl_reducer : &mirror__copy_reducer;
#else
    s->reducer = &mirror__copy_reducer;
#endif
    s->reducer_kind = g->nccl ? MIRROR_REDUCER_NCCL : MIRROR_REDUCER_COPY;
    used = (size_t)snprintf(s->devices, sizeof s->devices, "cuda:");
    for (r = 0; r < count && used < sizeof s->devices; r++)
        used += (size_t)snprintf(s->devices + used, sizeof s->devices - used, r ? ",%d" : "%d", ids[r]);
    if (cudaGetDeviceProperties(&prop, ids[0]) != cudaSuccess) snprintf(prop.name, sizeof prop.name, "unknown");
    snprintf(s->describe, sizeof s->describe, "%zu CUDA replica%s on %s (%s), reducer %s", count, count == 1 ? "" : "s",
             s->devices, prop.name, s->reducer->name);
    return MIRROR_OK;
fail:
    mirror__cuda_teardown(s);
    return rc;
}

// >>cuda processes ----------------------------------------------------------
/* GPU replicas in several processes (see PROCESSES in mirror.h). By default
   each process takes one GPU, the one its rank among the processes of its
   machine names (MPI_COMM_TYPE_SHARED), in turn over the visible GPUs
   (CUDA_VISIBLE_DEVICES honoured); with num_replicas N, N GPUs from
   local_rank * N on. One NCCL communicator spans every GPU of every
   process: rank 0's unique id reaches the others over MPI, and each
   process joins with its replicas' global indices (ncclCommInitRank, in a
   group). A reduction first folds the status word through MPI, so that a
   failure or a stop in any process reaches all; only when every process
   is well do the GPUs all-reduce, in NCCL (whose sum, unlike the CPU's
   rank-order fold, is in NCCL's own order). */

static void mirror__cuda_local_spec(size_t local_rank, size_t per_process, char *spec, size_t size)
{
    int visible = 1;
    size_t i, used;
    if (cudaGetDeviceCount(&visible) != cudaSuccess || visible < 1) (void)cudaGetLastError(), visible = 1;
    used = (size_t)snprintf(spec, size, "cuda:");
    for (i = 0; i < per_process && used < size; i++)
        used += (size_t)snprintf(spec + used, size - used, i ? ",%zu" : "%zu",
                                 (local_rank * per_process + i) % (size_t)visible);
}

/* The rest reaches the other processes through MPI's side of the processes
   interface (mirror__mpi in mirror.h's >>processes). */
#ifdef MIRROR_MPI
#ifndef MIRROR_NO_NCCL
/* The status word through MPI (the fold with no sums), then, if no process
   failed, the NCCL all-reduce. A process whose own failure the word
   carries returns MIRROR_OK: its caller has its code. */
static int mirror__nccl_mpi_sum(mirror_strategy *s, void *const *bufs, size_t n, ncclDataType_t type, mirror_error *err)
{
    size_t peer = 0;
    int code = 0, rc = mirror__mpi_all_reduce(s, NULL, 0, NULL, NULL, 0, 0, &peer, &code, err);
    if (rc) return rc;
    if (peer) return mirror__mpi_peer_failed(s, peer, code, err); /* a failure anywhere: no NCCL anywhere */
    return mirror__nccl_sum(s, bufs, n, type, err);
}

static int mirror__nccl_mpi_all_reduce(mirror_strategy *s, float *const *bufs, size_t n, mirror_error *err)
{
    return mirror__nccl_mpi_sum(s, (void *const *)bufs, n, ncclFloat, err);
}

static int mirror__nccl_mpi_all_reduce_half(mirror_strategy *s, uint16_t *const *bufs, size_t n, int format,
                                            mirror_error *err)
{
    return mirror__nccl_mpi_sum(s, (void *const *)bufs, n, mirror__nccl_type(format), err);
}

/* The broadcast needs no status word: the communicator's ranks are the
   global replica indices, so root is the rank. */
MIRROR__NAMED_BEGIN
static const mirror__reducer mirror__nccl_mpi_reducer = {
    .name = "nccl across processes",
    .all_reduce_sum = mirror__nccl_mpi_all_reduce,
    .broadcast = mirror__nccl_broadcast,
    .all_reduce_half = mirror__nccl_mpi_all_reduce_half,
    .sum_list = mirror__copy_sum_list, /* in one process */
    .reduce_scatter = NULL, /* no sharded update across processes */
    .all_gather = NULL,
};
MIRROR__NAMED_END

/* NCCL refuses two of its ranks on one GPU, and a process that fails to
   join leaves the others waiting in the join: every replica's machine and
   GPU (its PCI bus id, whatever CUDA_VISIBLE_DEVICES numbers it) go to
   every process, which all find the same clash, before NCCL starts. */
enum { MIRROR__HOST_ID = 48, MIRROR__GPU_ID = 16 };

static int mirror__cuda_distinct_gpus(mirror_strategy *s, mirror_error *err)
{
    const size_t rec = MIRROR__HOST_ID + MIRROR__GPU_ID;
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    const mirror__mpi *mp = mirror__mpi_of(s);
    char host[MPI_MAX_PROCESSOR_NAME], *mine, *all;
    int *counts, *displs, len = 0, rc = MIRROR_OK;
    size_t r, q, p, at = 0;
    MPI_Request req;
    mine = (char *)mirror__zalloc(g->replicas, rec);
    all = (char *)mirror__zalloc(s->world, rec);
    counts = (int *)mirror__alloc(2 * s->processes, sizeof(int));
    if (!mine || !all || !counts) rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: out of memory");
    if (rc == MIRROR_OK && MPI_Get_processor_name(host, &len) != MPI_SUCCESS) len = 0;
    for (r = 0; rc == MIRROR_OK && r < g->replicas; r++) {
        memcpy(mine + r * rec, host, MIRROR__MIN((size_t)len, (size_t)MIRROR__HOST_ID - 1));
        if (!mirror__gpu_ok(cudaDeviceGetPCIBusId(mine + r * rec + MIRROR__HOST_ID, MIRROR__GPU_ID, g->device[r]),
                            "cudaDeviceGetPCIBusId", err))
            rc = MIRROR_ERR_DEVICE;
    }
    if ((rc = mirror__mpi_agree(s, rc, NULL, err)) == MIRROR_OK) {
        displs = counts + s->processes;
        for (p = 0; p < s->processes; p++) {
            counts[p] = (int)(mp->counts[p] * rec), displs[p] = (int)at;
            at += mp->counts[p] * rec;
        }
        rc = mirror__mpi_done(s,
                              MPI_Iallgatherv(mine, (int)(g->replicas * rec), MPI_BYTE, all, counts, displs, MPI_BYTE,
                                              mp->comm, &req),
                              &req, "strategy: every replica's GPU", err);
    }
    for (r = 0; rc == MIRROR_OK && r < s->world; r++)
        for (q = 0; q < r && rc == MIRROR_OK; q++)
            if (!memcmp(all + q * rec, all + r * rec, rec))
                rc = mirror__error(err, MIRROR_ERR_ARGUMENT,
                                   "strategy: replicas %zu and %zu are on one GPU (%s on %s): across processes the "
                                   "replicas all-reduce through NCCL, which refuses two on one GPU",
                                   q, r, all + r * rec + MIRROR__HOST_ID, all + r * rec);
    MIRROR_FREE(mine), MIRROR_FREE(all), MIRROR_FREE(counts);
    return rc;
}

/* After mirror__mpi_setup has counted every process's replicas: the
   communicator over all of them, in place of this process's own. */
static int mirror__cuda_mpi_join(mirror_strategy *s, mirror_error *err)
{
    mirror__gpu *g = (mirror__gpu *)s->gpu;
    size_t r;
    int rc = MIRROR_OK, caller = mirror__cuda_current();
    ncclUniqueId id;
    MPI_Request req;
    if ((rc = mirror__cuda_distinct_gpus(s, err)) != MIRROR_OK) return rc;
    memset(&id, 0, sizeof id);
    if (s->rank == 0 && !mirror__nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId", err))
        rc = MIRROR_ERR_DEVICE;
    /* every process ready before NCCL waits for all of them */
    if ((rc = mirror__mpi_agree(s, rc, NULL, err))) return rc;
    if ((rc = mirror__mpi_done(s, MPI_Ibcast(&id, (int)sizeof id, MPI_BYTE, 0, mirror__mpi_of(s)->comm, &req), &req,
                               "strategy: NCCL's unique id", err)))
        return rc;
    for (r = 0; g->comm && r < g->replicas; r++) /* this process's own communicators give way */
        if (g->comm[r]) ncclCommDestroy(g->comm[r]), g->comm[r] = NULL;
    if (!g->comm && !(g->comm = (ncclComm_t *)mirror__zalloc(g->replicas, sizeof(ncclComm_t))))
        rc = mirror__error(err, MIRROR_ERR_NO_MEMORY, "strategy: out of memory");
    if (rc == MIRROR_OK && mirror__nccl_ok(ncclGroupStart(), "ncclGroupStart", err)) {
        int ok = 1;
        for (r = 0; r < g->replicas && ok; r++)
            ok = mirror__gpu_ok(cudaSetDevice(g->device[r]), "cudaSetDevice", err) &&
                 mirror__nccl_ok(ncclCommInitRank(&g->comm[r], (int)s->world, id, (int)(s->first + r)),
                                 "ncclCommInitRank", err);
        if (!mirror__nccl_ok(ncclGroupEnd(), "ncclGroupEnd", ok ? err : NULL) || !ok) {
            for (r = 0; r < g->replicas; r++) /* a communicator whose init failed is aborted */
                if (g->comm[r]) ncclCommAbort(g->comm[r]), g->comm[r] = NULL;
            rc = MIRROR_ERR_DEVICE;
        }
    } else if (rc == MIRROR_OK) {
        rc = MIRROR_ERR_DEVICE;
    }
    mirror__cuda_restore(caller);
    if (rc) return rc;
    g->nccl = 1;
    s->reducer = &mirror__nccl_mpi_reducer;
    s->reducer_kind = MIRROR_REDUCER_NCCL;
    return MIRROR_OK;
}
#else
static int mirror__cuda_mpi_join(mirror_strategy *s, mirror_error *err)
{
    return mirror__mpi_agree(s,
                             mirror__error(err, MIRROR_ERR_UNSUPPORTED,
                                           "strategy: GPU replicas across processes need NCCL; this build has none"),
                             NULL, err);
}
#endif
#endif

} /* extern "C" */

#endif /* MIRROR_IMPLEMENTATION */
#endif /* MIRROR_CUDA_H */
