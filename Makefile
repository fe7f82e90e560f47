# mirror's Makefile. make help prints the list below: the targets a user
# and a contributor run, and the variables that change the build. It is the
# one list (tests/run.sh checks that each target it names exists, that it
# names every target the README tells a user to run, and each .PHONY one).
define HELP
make TARGET [VARIABLE=value ...]; make info says what the probes found here.

For users:
  make                        build/train, build/hello, build/scaling (+ CUDA, MPI trainers)
  make run                    trains a small CNN on synthetic digits (RUN_ARGS: its options)
  make test                   everything that runs on this machine: "N passed, N failed"
  make labs                   the labs of examples/labs, a course in order
  make bench                  the CPU benchmarks: a step's parts, the GEMM against OpenBLAS
  make install                the headers, mirror.pc and mirror-cuda.pc under PREFIX
  make uninstall              removes those four files, nothing else
  make test-gpu               the CUDA operations against the CPU backend, on this machine's GPUs
  make bench-gpu              the GPU benchmarks, each beside PyTorch's
  make gpu-pack               build/gpu-pack: the GPU programs for a GPU machine without nvcc
  make gpu-report RESULTS=DIR   bench/GPU.md from a GPU run's results (GPU_MD: elsewhere)
  make info                   the compiler, and whether zlib, CBLAS, nvcc, NCCL, MPI were found
  make clean                  removes build/
  make help                   this list

For contributors:
  make test SAN=address       the suite under ASan and UBSan (thread: TSan; valgrind: memcheck)
  make build/test_layers      one test program (build/chunked_test_layers: a variant's macros)
  make test-targets           GEMM, thread, API tests for other x86-64 levels, clang, arm64
  make test-programs          builds what make test runs, runs nothing
  make test-pack              builds the GPU pack and checks it here: its script on CPU replicas
  make test-crash             kills the trainer 20 times while it checkpoints; it resumes
  make test-install           install to a temporary prefix, build with pkg-config, uninstall
  make test-interop           exports against ONNX Runtime and PyTorch; TensorBoard's reader
  make fuzz                   libFuzzer on the loaders and options (clang; FUZZ_SECONDS)
  make bench-peers            mirror against PyTorch and TensorFlow on the CPU
  make bench-mpi              2 processes against 2 replicas against PyTorch DDP
  make bench-fused            the fused mixed-precision update in GB/s against a copy
  make bench-guard            fails where the GEMM falls below 0.3x OpenBLAS (CI)

Variables:
  CC CFLAGS LDLIBS            the C compiler and extra flags
  OPT DEBUG ARCH              -O3, -g, -march=native unless set (SAN changes them)
  BUILD                       where programs go: build (build/asan etc. under SAN)
  SAN                         address | thread | valgrind
  NO_ZLIB=1                   no zlib, even where it is found (no .gz files)
  MIRROR_CBLAS=1 CBLAS_LIBS   the GEMM from a CBLAS (CBLAS_LIBS: -lopenblas unless set)
  NO_CUDA=1 NO_MPI=1          no CUDA, no MPI programs, even where nvcc, mpicc are
  CUDA_PATH NCCL_HOME NVCC    where CUDA and NCCL are (/usr/local/cuda, else nvcc on the PATH)
  WERROR=1                    nvcc's warnings are errors (make test sets it)
  CUDA_ARCH                   the GPUs: 90, "80 90", native (unset: each major from sm_75)
  PACK_CUDA_ARCH              the GPU pack's (each major from sm_75)
  MPICC MPIRUN CLANG          the MPI compiler and launcher, the fuzzers' compiler
  PREFIX DESTDIR              where make install writes (/usr/local; DESTDIR stages)
  INCLUDEDIR PKGCONFIGDIR     the headers' and .pc files' folders (under PREFIX)
  RUN_ARGS FUZZ_SECONDS       make run's options, make fuzz's seconds a target
  GPU_SECONDS                 make test-gpu's deadline (900)
endef

CC    ?= cc
CXX   ?= c++
OPT   ?= -O3
DEBUG ?= -g
ARCH  ?= -march=native
BUILD ?= build
WARN   = -std=c99 -Wall -Wextra -Wpedantic
CFLAGS_ALL = $(OPT) $(ARCH) -ffp-contract=fast -fno-math-errno $(WARN) $(DEBUG) $(CFLAGS)
LDLIBS_ALL = -lm -lpthread $(LDLIBS)

ifeq ($(SAN),address)
  SAN_FLAGS = -fsanitize=address -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
  BUILD = build/asan
endif
ifeq ($(SAN),thread)
  SAN_FLAGS = -fsanitize=thread
  BUILD = build/tsan
endif
CFLAGS_ALL += $(SAN_FLAGS)
# The sanitizers find the same at -O1, where they compile three times
# faster than at -O3 -g and run as fast.
ifneq ($(SAN_FLAGS),)
  ifeq ($(origin OPT),file)
    OPT = -O1
  endif
endif
# valgrind knows no AVX-512: a baseline build, every binary run under memcheck.
ifeq ($(SAN),valgrind)
  ARCH =
  BUILD = build/valgrind
  TEST_RUNNER = valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect
endif
# The sanitizer and valgrind builds, and the test programs of every build,
# keep line tables only (-g1): each report and backtrace still names its file
# and line, and -O3 compiles a third faster than with -g. DEBUG=-g on make's
# command line gives them all of it.
ifeq ($(origin DEBUG),file)
  ifneq ($(SAN),)
    DEBUG = -g1
  endif
endif

# Detect zlib by compiling a probe, not by asking a package manager.
ifneq ($(NO_ZLIB),1)
  HAVE_ZLIB := $(shell printf '\043include <zlib.h>\nint main(void){return zlibVersion()==0;}\n' | \
                 $(CC) -x c - -o /dev/null -lz >/dev/null 2>&1 && echo 1)
endif
ifeq ($(HAVE_ZLIB),1)
  CFLAGS_ALL += -DMIRROR_ZLIB
  LDLIBS_ALL += -lz
endif
ifeq ($(MIRROR_CBLAS),1)
  CBLAS_LIBS ?= -lopenblas
  CFLAGS_ALL += -DMIRROR_CBLAS
  LDLIBS_ALL += $(CBLAS_LIBS)
endif
# nvcc and NCCL, found by compiling probes. nvcc is CUDA_PATH's, else the
# one on the PATH (a distribution's toolkit: Ubuntu's nvidia-cuda-toolkit
# puts it in /usr/bin), whose folder above bin/ is then CUDA_PATH unless
# CUDA_PATH was given; make info says where it looked when there is none.
CUDA_PATH_GIVEN := $(filter-out undefined,$(origin CUDA_PATH))
CUDA_PATH ?= /usr/local/cuda
ifeq ($(origin NVCC),undefined)
  NVCC := $(or $(wildcard $(CUDA_PATH)/bin/nvcc),$(shell command -v nvcc 2>/dev/null))
  ifeq ($(NVCC),)
    NVCC_LOOKED := $(CUDA_PATH)/bin/nvcc and the PATH
    NVCC := $(CUDA_PATH)/bin/nvcc
  else ifeq ($(CUDA_PATH_GIVEN)$(wildcard $(CUDA_PATH)/bin/nvcc),)
    CUDA_PATH := $(patsubst %/,%,$(dir $(patsubst %/,%,$(dir $(NVCC)))))
  endif
endif
NCCL_HOME ?= $(CUDA_PATH)
# CUDA_ARCH, the GPUs the CUDA programs run on. Unset: SASS for the first
# architecture of each major that nvcc knows, from Turing (sm_75) on (a
# major's SASS runs on its later minors: sm_80's on 8.6 and 8.9), and PTX of
# the newest, which the driver compiles for GPUs newer still. Else compute
# capabilities, "89", "80 90" or "sm_89": SASS for each and PTX of the
# highest; "native": the GPUs of the building machine (nvcc -arch=native;
# with none, nvcc warns and builds for its own default); "all" or
# "all-major" (nvcc's -arch=all, -arch=all-major); or whole nvcc flags,
# starting with '-'.
CUDA_ARCH ?=
comma := ,
CUDA_ARCH_DEFAULT = $(shell $(NVCC) --list-gpu-code 2>/dev/null | sed -n 's/^sm_\([0-9]*\)$$/\1/p' | sort -n | \
                      awk '$$1 >= 75 && int($$1 / 10) != major { major = int($$1 / 10); print }')
ifneq ($(filter -%,$(firstword $(CUDA_ARCH))),)
  CUDA_GENCODE = $(CUDA_ARCH)
else ifneq ($(filter native all all-major,$(strip $(CUDA_ARCH))),)
  CUDA_GENCODE = -arch=$(strip $(CUDA_ARCH))
else
  CUDA_CCS     = $(patsubst compute_%,%,$(patsubst sm_%,%,$(or $(strip $(CUDA_ARCH)),$(CUDA_ARCH_DEFAULT))))
  CUDA_NEWEST  = $(shell printf '%s\n' $(CUDA_CCS) | sort -n | tail -n 1)
  CUDA_GENCODE = $(foreach a,$(CUDA_CCS),-gencode arch=compute_$(a),code=sm_$(a)) \
                 $(if $(CUDA_CCS),-gencode arch=compute_$(CUDA_NEWEST)$(comma)code=compute_$(CUDA_NEWEST))
endif
# The sanitizer and valgrind builds run the CUDA programs' host code (no GPU
# runs under them): unless CUDA_ARCH says otherwise, they compile PTX of the
# oldest architecture alone, which the driver compiles for any later GPU.
ifneq ($(SAN),)
  ifeq ($(strip $(CUDA_ARCH)),)
    CUDA_GENCODE = -gencode arch=compute_$(firstword $(CUDA_ARCH_DEFAULT)),code=compute_$(firstword $(CUDA_ARCH_DEFAULT))
  endif
endif
ifneq ($(NO_CUDA),1)
  HAVE_NVCC := $(shell printf '__global__ void k(void){}\nint main(void){k<<<1,1>>>();return 0;}\n' >/tmp/mirror_probe_$$$$.cu && \
                 $(NVCC) -c /tmp/mirror_probe_$$$$.cu -o /tmp/mirror_probe_$$$$.o >/dev/null 2>&1 && echo 1; \
                 rm -f /tmp/mirror_probe_$$$$.cu /tmp/mirror_probe_$$$$.o)
endif
ifeq ($(HAVE_NVCC),1)
  HAVE_NCCL := $(shell printf '\043include <nccl.h>\nint main(void){int v; return ncclGetVersion(&v);}\n' | \
                 $(CC) -x c - -o /dev/null -I$(NCCL_HOME)/include -I$(CUDA_PATH)/include \
                 -L$(NCCL_HOME)/lib -L$(NCCL_HOME)/lib64 -lnccl >/dev/null 2>&1 && echo 1)
endif
# Warnings are errors in make test (WERROR=1, which it sets) and CI, not
# in a user's make: a newer nvcc or host compiler must not fail the build.
NVCCFLAGS = -O3 $(if $(filter 1,$(WERROR)),-Werror all-warnings) $(CUDA_GENCODE) -I$(NCCL_HOME)/include \
            $(if $(HAVE_ZLIB),-DMIRROR_ZLIB) \
            -Xcompiler $(subst $(eval) ,$(comma),$(strip $(ARCH) -ffp-contract=fast -fno-math-errno $(SAN_FLAGS))) \
            $(if $(HAVE_NCCL),,-DMIRROR_NO_NCCL)
test test-pack: export WERROR ?= 1
CUDA_STDCXX ?= -lstdc++
CUDA_LIBS = -L$(CUDA_PATH)/lib64 -L$(NCCL_HOME)/lib -L$(NCCL_HOME)/lib64 \
            -Wl,-rpath,$(CUDA_PATH)/lib64 -Wl,-rpath,$(NCCL_HOME)/lib -lcudart_static -lcublasLt -lcublas \
            $(if $(HAVE_NCCL),-lnccl) $(CUDA_STDCXX) -ldl -lrt -lpthread

# MPI (build/train_mpi and the tests in tests/mpi), found by compiling a
# probe with mpicc. Plain builds only: the sanitizers do not see into MPI.
MPICC  ?= mpicc
MPIRUN ?= mpirun
ifeq ($(NO_MPI)$(SAN),)
  HAVE_MPI := $(shell printf '\043include <mpi.h>\nint main(int c, char **v){MPI_Init(&c, &v); return MPI_Finalize();}\n' | \
                $(MPICC) -x c - -o /dev/null >/dev/null 2>&1 && command -v $(MPIRUN) >/dev/null && echo 1)
endif

HAVE_OPENBLAS := $(shell printf '\043include <cblas.h>\nint main(void){return 0;}\n' | \
                 $(CC) -x c - -o /dev/null -lopenblas >/dev/null 2>&1 && echo 1)

EXAMPLES = $(BUILD)/train $(BUILD)/hello $(BUILD)/scaling $(if $(HAVE_NVCC),$(BUILD)/train_cuda) $(if $(HAVE_MPI),$(BUILD)/train_mpi) \
           $(if $(HAVE_NVCC),$(if $(HAVE_MPI),$(BUILD)/train_cuda_mpi))
# The labs (examples/labs, a course in order; make labs builds them): the
# plain make test runs each and checks the lines its handout promises. Lab 7
# runs under MPI, built with mpicc where it is found.
LABS = $(patsubst examples/labs/%.c,$(BUILD)/%,$(filter-out %/lab7_processes.c,$(wildcard examples/labs/lab*.c))) \
       $(if $(HAVE_MPI),$(BUILD)/lab7_processes)
TESTS    = $(patsubst tests/%.c,$(BUILD)/%,$(wildcard tests/test_*.c))
TESTS   += $(BUILD)/noatomics_test_replicas # the threads as built without atomics
# GPU-style layouts on the CPU: batched convolutions and GEMMs (plain and
# AddressSanitizer), convolutions that keep their im2col and padded
# parameter arenas (plain; under AddressSanitizer the two tests of the
# packing between padded arenas and packed values: the API's copies and
# checkpoints). They add no threads, so not again under ThreadSanitizer and
# valgrind. The sharded update as GPUs run it (reduce-scatter, a state
# slice per replica, all-gather): plain; the replicas and checkpoints
# under AddressSanitizer; the replicas, whose threads share the slices,
# under ThreadSanitizer. Graphs emulated (replays of recorded passes):
# the replica tests, plain and under AddressSanitizer. The optimizers'
# updates over padded arenas: aligned_test_optim. The convolutions that keep
# their im2col run a CNN's row-wise prefix in groups of one chunk of 4
# samples, whatever the shard (test_layers compares groups with none in
# every build).
ifeq ($(filter $(SAN),thread valgrind),)
  TESTS += $(BUILD)/chunked_test_layers $(BUILD)/chunked_test_replicas # batched convolutions and GEMMs
endif
ifeq ($(filter $(SAN),thread valgrind),)
  TESTS += $(BUILD)/graphs_test_replicas
endif
ifeq ($(SAN),)
  TESTS += $(patsubst %,$(BUILD)/sliced_test_%,replicas checkpoint precision api)
  TESTS += $(BUILD)/keptcols_test_layers $(BUILD)/keptcols_test_replicas
  TESTS += $(patsubst %,$(BUILD)/aligned_test_%,api checkpoint layers replicas precision optim)
endif
ifeq ($(SAN),address)
  TESTS += $(BUILD)/aligned_test_api $(BUILD)/aligned_test_checkpoint
  TESTS += $(BUILD)/sliced_test_replicas $(BUILD)/sliced_test_checkpoint
endif
ifeq ($(SAN),thread)
  TESTS += $(BUILD)/sliced_test_replicas
endif
ifeq ($(HAVE_ZLIB),1)
  TESTS += $(BUILD)/nozlib_test_loaders # the loaders as built without zlib
endif
ifeq ($(origin DEBUG),file)
  $(TESTS): DEBUG = -g1
endif

all: info $(EXAMPLES)

# (why nvcc=no: NO_CUDA, no nvcc where make looked, or one that failed the probe)
NVCC_WHY = $(if $(filter 1,$(NO_CUDA)), (NO_CUDA=1),$(if $(NVCC_LOOKED), (none in $(NVCC_LOOKED)), \
             ($(NVCC) failed a probe compile)))
info:
	@echo "mirror: cc=$(CC) zlib=$(if $(HAVE_ZLIB),yes,no) cblas=$(if $(filter 1,$(MIRROR_CBLAS)),yes,no) nvcc=$(if $(HAVE_NVCC),$(NVCC),no$(NVCC_WHY)) nccl=$(if $(HAVE_NCCL),yes,no) mpi=$(if $(HAVE_MPI),$(MPICC),no) build=$(BUILD)"

help:
	@:$(info $(HELP))

# The headers the programs include, each list once: a change to one
# rebuilds every program that includes it (the examples, the CUDA files
# besides their own, the benchmarks, the test programs).
EXAMPLE_HEADERS = examples/models.h examples/options.h mirror.h
CUDA_HEADERS    = mirror_cuda.h mirror.h
BENCH_HEADERS   = bench/fma_chains.h examples/models.h mirror.h
TEST_HEADERS    = tests/check.h tests/alloc_count.h tests/files.h tests/digits.h tests/helpers.h mirror.h

$(BUILD)/%: examples/%.c $(EXAMPLE_HEADERS) | $(BUILD)
	$(CC) $(CFLAGS_ALL) $< -o $@ $(LDLIBS_ALL)

# At -O1: each lab runs in well under a second, and compiles in a third
# of -O3's time (the whole implementation, once a lab).
LAB_CFLAGS = $(filter-out -O%,$(CFLAGS_ALL)) -O1
$(BUILD)/lab%: examples/labs/lab%.c mirror.h | $(BUILD)
	$(CC) $(LAB_CFLAGS) $< -o $@ $(LDLIBS_ALL)

$(BUILD)/lab7_processes: examples/labs/lab7_processes.c mirror.h | $(BUILD)
	$(MPICC) $(LAB_CFLAGS) -DMIRROR_MPI $< -o $@ $(LDLIBS_ALL)

labs: info $(LABS)

$(BUILD)/test_%: tests/test_%.c $(TEST_HEADERS) | $(BUILD)
	$(CC) $(CFLAGS_ALL) $< -o $@ $(LDLIBS_ALL)

# The table of backend op cases (test_ops here, test_cuda on a GPU).
$(BUILD)/test_ops: tests/ops.h
# The ResNet case that tests/interop/resnet.c trains too.
$(BUILD)/test_norm: tests/resnet_case.h

# The MPI trainer and tests: the same sources with MIRROR_MPI, through mpicc.
$(BUILD)/train_mpi: examples/train.c $(EXAMPLE_HEADERS) | $(BUILD)
	$(MPICC) $(CFLAGS_ALL) -DMIRROR_MPI $< -o $@ $(LDLIBS_ALL)

$(BUILD)/test_mpi: tests/mpi/test_mpi.c tests/check.h tests/digits.h mirror.h | $(BUILD)
	$(MPICC) $(CFLAGS_ALL) -DMIRROR_MPI $< -o $@ $(LDLIBS_ALL)

# The CUDA trainer: examples/train.c from C, the library from the one .cu file.
$(BUILD)/mirror_cuda.o: examples/mirror_cuda.cu $(CUDA_HEADERS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/train_cuda: examples/train.c $(EXAMPLE_HEADERS) $(BUILD)/mirror_cuda.o | $(BUILD)
	$(CC) $(CFLAGS_ALL) -DTRAIN_LINKS_MIRROR $< $(BUILD)/mirror_cuda.o -o $@ $(CUDA_LIBS) $(LDLIBS_ALL)

# The CUDA + MPI trainer, where nvcc and mpicc both are: the library
# compiled by nvcc with MIRROR_MPI and MPI's include flags, linked by mpicc.
MPI_CFLAGS = $(filter -I%,$(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -show 2>/dev/null))
$(BUILD)/mirror_cuda_mpi.o: examples/mirror_cuda.cu $(CUDA_HEADERS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -DMIRROR_MPI -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX $(MPI_CFLAGS) -c $< -o $@

$(BUILD)/train_cuda_mpi: examples/train.c $(EXAMPLE_HEADERS) $(BUILD)/mirror_cuda_mpi.o | $(BUILD)
	$(MPICC) $(CFLAGS_ALL) -DMIRROR_MPI -DTRAIN_LINKS_MIRROR $< $(BUILD)/mirror_cuda_mpi.o -o $@ $(CUDA_LIBS) $(LDLIBS_ALL)

# The GPU tests: built by make test wherever nvcc is, run by make test-gpu.
$(BUILD)/test_cuda.o: tests/gpu/test_cuda.cu tests/check.h tests/helpers.h tests/ops.h $(CUDA_HEADERS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# The programs whose main is in a .cu file (test_cuda, gpu_info, the fused
# update's benchmark), linked by the C++ driver.
CUDA_LINKED = $(BUILD)/test_cuda $(BUILD)/gpu_info $(BUILD)/bench_fused_cuda
$(CUDA_LINKED): %: %.o
	$(CXX) $(SAN_FLAGS) $< -o $@ $(CUDA_LIBS) $(LDLIBS_ALL)

# The versions a GPU run is recorded with, and one kernel launched.
# The GPU code it is built with, as a list (sm_80 compute_120): the words
# after code= in CUDA_GENCODE; empty for -arch=... flags.
CUDA_CODES = $(filter sm_% compute_%,$(subst code=,,$(subst [,,$(subst ],,$(subst $(comma), ,$(CUDA_GENCODE))))))
$(BUILD)/gpu_info.o: tests/gpu/gpu_info.cu | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -DGPU_INFO_CODES='"$(CUDA_CODES)"' -c $< -o $@

# The GPU pack: the GPU programs built here for a GPU machine that may
# have no compiler, no network, no MPI, no NCCL and no AVX-512: host code
# for x86-64-v3, the default build's GPU code (PACK_CUDA_ARCH: SASS for
# the first architecture of each major from sm_75, whose sm_80 SASS also
# runs on 8.6 and 8.9, and PTX of the newest; SASS of sm_86 and sm_89
# would add 4.4 MiB and about a minute of CPU to every make gpu-pack and
# make test-pack), no MPI, the CUDA runtime and
# libstdc++ linked in (cuBLAS and NCCL stay shared: hundreds of MB; so does
# libgcc_s, whose static unwinder would ask for glibc 2.35); a second
# flavour without NCCL in nonccl/; the run script (tests/gpu/pack_run.sh)
# and the benchmarks' scripts. Objects go to build/gpu-pack-obj, never over
# $(BUILD)'s.
PACK          = build/gpu-pack
PACK_OBJ      = build/gpu-pack-obj
PACK_PROGRAMS = test_cuda train_cuda bench_gpu bench_fused_cuda gpu_info
PACK_CUDA_ARCH = $(CUDA_ARCH_DEFAULT)
PACK_MAKE     = $(MAKE) --no-print-directory NO_MPI=1 HAVE_MPI= SAN= OPT=-O3 ARCH=-march=x86-64-v3 \
                CUDA_ARCH="$(PACK_CUDA_ARCH)" \
                CUDA_STDCXX="-static-libstdc++ -Wl,-Bstatic -lstdc++ -Wl,-Bdynamic" \
                HAVE_NVCC=1 HAVE_ZLIB=$(HAVE_ZLIB) HAVE_OPENBLAS= MIRROR_CBLAS=
gpu-pack-nccl gpu-pack-nonccl:
	@test -n "$(HAVE_NVCC)" || { echo "make gpu-pack: needs nvcc ($(NVCC) not found)"; exit 1; }
	+@$(PACK_MAKE) BUILD=$(PACK_OBJ)/$(@:gpu-pack-%=%) HAVE_NCCL=$(if $(filter %nonccl,$@),,$(HAVE_NCCL)) gpu-pack-programs

# (what the sub-make builds, quietly when nothing is to do, and the GPU
# code it holds for PACK.txt)
gpu-pack-programs: $(addprefix $(BUILD)/,$(PACK_PROGRAMS))
	@echo '$(CUDA_CODES)' >$(BUILD)/codes.txt

gpu-pack: gpu-pack-nccl gpu-pack-nonccl
	@NVCC="$(NVCC)" CC="$(CC)" sh tools/gpu_pack.sh $(PACK_OBJ) $(PACK)

# bench/GPU.md from a GPU run's results folder (RESULTS=DIR; GPU_MD=path
# writes elsewhere).
GPU_MD ?= bench/GPU.md
gpu-report:
	@test -n "$(RESULTS)" || { echo "usage: make gpu-report RESULTS=DIR [GPU_MD=bench/GPU.md]"; exit 2; }
	@sh tools/gpu_report.sh "$(RESULTS)" "$(GPU_MD)"

# libFuzzer targets (clang): make fuzz FUZZ_SECONDS=30
CLANG ?= clang
FUZZ_TARGETS = $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h examples/options.h mirror.h
	@mkdir -p $(BUILD)/fuzz
	$(CLANG) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all $< -o $@ -lm -lpthread

fuzz: $(addprefix $(BUILD)/fuzz/fuzz_,$(FUZZ_TARGETS))
	@BUILD="$(BUILD)" FUZZ_SECONDS="$(FUZZ_SECONDS)" sh tests/fuzz/run.sh $(FUZZ_TARGETS)

test-crash: info $(BUILD)/train
	@BUILD="$(BUILD)" sh tests/crash_test.sh

# make install: the two headers into INCLUDEDIR, and pkg-config's mirror.pc
# and mirror-cuda.pc into PKGCONFIGDIR, written from tools/*.pc.in with the
# prefix, mirror.h's MIRROR_VERSION and (mirror-cuda.pc) CUDA_PATH,
# NCCL_HOME and whether the probe found NCCL. The .pc files go to
# share/pkgconfig, pkg-config's place for a package with nothing that
# depends on the architecture: mirror is headers alone (both share/ and
# lib/ are on pkg-config's default path). DESTDIR stages an install. make
# uninstall removes those four files and nothing else; the directories
# stay (install -d does not say which ones it made).
# Paths may hold spaces, & and |: the recipes single-quote them, sed's
# replacements escape & and |, and the .pc files write a space as "\ ",
# pkg-config's escape (its --cflags then prints -I/my\ prefix/include). A
# ' " \ # $ or tab is refused by both targets before they touch a file:
# the quotes, sed or a .pc file (where # starts a comment) cannot hold it.
PREFIX       ?= /usr/local
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(PREFIX)/share/pkgconfig
INSTALL      ?= install
MIRROR_VERSION = $(shell sed -n 's/^.define MIRROR_VERSION "\([^"]*\)"$$/\1/p' mirror.h)
mirror__empty :=
mirror__space := $(mirror__empty) $(mirror__empty)
mirror__tab   := $(mirror__empty)	$(mirror__empty)
mirror__hash  := \#
# The characters refused in a path, and the paths that may hold none.
mirror__odd = $(or $(findstring ',$(1)),$(findstring ",$(1)),$(findstring \,$(1)),$(findstring $(mirror__hash),$(1)),$(findstring $$,$(1)),$(findstring $(mirror__tab),$(1)))
INSTALL_PATHS = DESTDIR PREFIX INCLUDEDIR PKGCONFIGDIR CUDA_PATH NCCL_HOME
INSTALL_CHECK = $(foreach v,$(INSTALL_PATHS),$(if $(call mirror__odd,$($(v))),$(error make $@: $(v) holds a \
                ' " \ $(mirror__hash) $$ or tab, which the install's quoting and the .pc files cannot hold; nothing done)))
# A value for the .pc file through sed: the space escaped for pkg-config,
# then \ & | escaped for sed's replacement.
mirror__pc = $(subst |,\|,$(subst &,\&,$(subst $(mirror__space),\\ ,$(1))))
# INCLUDEDIR under PREFIX as ${prefix}/...: make's word functions see a path
# with spaces whole once its spaces are a refused character ("), % quoted.
mirror__word = $(subst $(mirror__space),",$(1))
PC_INCLUDEDIR = $(subst ",$(mirror__space),$(patsubst $(subst %,\%,$(call mirror__word,$(PREFIX)))/%,$${prefix}/%,$(call mirror__word,$(INCLUDEDIR))))
PC_SED = -e 's|@PREFIX@|$(call mirror__pc,$(PREFIX))|g' -e 's|@INCLUDEDIR@|$(call mirror__pc,$(PC_INCLUDEDIR))|g' \
         -e 's|@VERSION@|$(MIRROR_VERSION)|g' -e 's|@CUDA_PATH@|$(call mirror__pc,$(CUDA_PATH))|g' \
         -e 's|@NCCL_HOME@|$(call mirror__pc,$(NCCL_HOME))|g' \
         -e 's|@NCCL_CFLAGS@|$(if $(HAVE_NCCL),, -DMIRROR_NO_NCCL)|g' -e 's|@NCCL_LIBS@|$(if $(HAVE_NCCL), -lnccl)|g'
INSTALLED = '$(DESTDIR)$(INCLUDEDIR)/mirror.h' '$(DESTDIR)$(INCLUDEDIR)/mirror_cuda.h' \
            '$(DESTDIR)$(PKGCONFIGDIR)/mirror.pc' '$(DESTDIR)$(PKGCONFIGDIR)/mirror-cuda.pc'
install:
	@$(INSTALL_CHECK)test -n "$(MIRROR_VERSION)" || { echo "make install: no #define MIRROR_VERSION in mirror.h"; exit 1; }
	$(INSTALL) -d '$(DESTDIR)$(INCLUDEDIR)' '$(DESTDIR)$(PKGCONFIGDIR)'
	$(INSTALL) -m 644 mirror.h mirror_cuda.h '$(DESTDIR)$(INCLUDEDIR)'
	sed $(PC_SED) tools/mirror.pc.in >'$(DESTDIR)$(PKGCONFIGDIR)/mirror.pc'
	sed $(PC_SED) tools/mirror-cuda.pc.in >'$(DESTDIR)$(PKGCONFIGDIR)/mirror-cuda.pc'
	chmod 644 '$(DESTDIR)$(PKGCONFIGDIR)/mirror.pc' '$(DESTDIR)$(PKGCONFIGDIR)/mirror-cuda.pc'

# uninstall removes a file only where its first line is the one install
# wrote there (another package's mirror.h under a mistaken PREFIX stays,
# named, and make fails).
uninstall:
	@$(INSTALL_CHECK)kept=0; for f in $(INSTALLED); do \
	    test -e "$$f" || continue; \
	    name=$$(basename "$$f"); \
	    case $$name in *.pc) mark="# $$name - written by make install";; *) mark="/* $$name - ";; esac; \
	    case $$(head -n 1 "$$f") in \
	    "$$mark"*) echo "rm -f '$$f'"; rm -f "$$f" || kept=1;; \
	    *) echo "make uninstall: $$f is not the file make install writes (its first line is not mirror's): left"; kept=1;; \
	    esac; \
	done; exit $$kept

# make install into a temporary prefix, a program built with pkg-config's
# flags alone, make uninstall (make test runs it too, in the plain run).
test-install:
	@CUDA_PATH="$(CUDA_PATH)" NVCC="$(if $(HAVE_NVCC),$(NVCC))" sh tests/install.sh

# The GPU pack's script on this build's programs (GPU_SECONDS: its
# deadline), with the CUDA + MPI trainer where it is built; the benchmarks
# are make bench-gpu's.
GPU_SECONDS ?= 900
test-gpu: info $(BUILD)/test_cuda $(BUILD)/train_cuda $(BUILD)/gpu_info $(if $(HAVE_MPI),$(BUILD)/train_cuda_mpi)
	@BUILD="$(BUILD)" CUDA_PATH="$(CUDA_PATH)" GPU_SECONDS="$(GPU_SECONDS)" sh tests/gpu/run.sh

# The variants below (a test program built again with option macros) at
# -O1 unless OPT is given: their macros choose which paths of the code run
# (layouts, the update's mode, no atomics, no zlib), which the checks see
# alike at any optimisation, while -O1 compiles in a third of -O3's time
# (8 s of CPU against 24 for test_replicas.c here) and runs their checks
# in about as long (1.5 s against 1.1). Seventeen of them: 140 s of CPU
# against 416, over a minute of make test on 2 cores. The plain test
# programs stay at OPT (-O3); the sanitizer builds take -O1 anyway.
VARIANT_CFLAGS = $(if $(filter file,$(origin OPT)),$(filter-out -O%,$(CFLAGS_ALL)) -O1,$(CFLAGS_ALL))

$(BUILD)/nozlib_test_loaders: tests/test_loaders.c $(TEST_HEADERS) | $(BUILD)
	$(CC) $(filter-out -DMIRROR_ZLIB,$(VARIANT_CFLAGS)) $< -o $@ $(filter-out -lz,$(LDLIBS_ALL))

# The test programs built again with option macros (the TESTS list above
# says which, and why): build/VARIANT_NAME from tests/NAME.c with
# TEST_VARIANT_VARIANT's macros, for each VARIANT in TEST_VARIANTS.
TEST_VARIANTS = chunked keptcols aligned sliced graphs noatomics
TEST_VARIANT_chunked   = -DMIRROR_CPU_CONV_CHUNK=4 -DMIRROR_CPU_GEMM_ROWS_FREE=0
TEST_VARIANT_keptcols  = -DMIRROR_CPU_CONV_CHUNK=4 -DMIRROR_CPU_KEEP_COLS=0x40000000 -DMIRROR_CPU_GROUP_BYTES=1
TEST_VARIANT_aligned   = -DMIRROR_CPU_PARAM_ALIGN=64
TEST_VARIANT_sliced    = -DMIRROR_CPU_SHARED_UPDATE=0
TEST_VARIANT_graphs    = -DMIRROR_CPU_GRAPHS=1
TEST_VARIANT_noatomics = -DMIRROR_NO_ATOMICS
define TEST_VARIANT_RULE
$$(BUILD)/$(1)_%: tests/%.c $$(TEST_HEADERS) | $$(BUILD)
	$$(CC) $$(VARIANT_CFLAGS) $$(TEST_VARIANT_$(1)) $$< -o $$@ $$(LDLIBS_ALL)
endef
$(foreach v,$(TEST_VARIANTS),$(eval $(call TEST_VARIANT_RULE,$(v))))

# hello without the file formats (test_bare defines the two itself): make test runs both.
$(BUILD)/bare_hello: examples/hello.c mirror.h | $(BUILD)
	$(CC) $(CFLAGS_ALL) -DMIRROR_NO_LOADERS -DMIRROR_NO_OUTPUTS $< -o $@ $(LDLIBS_ALL)

$(BUILD):
	mkdir -p $@

# make run trains with the trainer it builds, and builds no other: the CUDA
# trainer where this machine has an NVIDIA driver with a GPU (nvidia-smi
# lists one, or the driver's /proc has one) and nvcc, built for this GPU
# alone (CUDA_ARCH=native, in $(BUILD)/native: the default build's
# build/train_cuda for every GPU stays as it is) unless CUDA_ARCH is given;
# else the CPU trainer, nvcc never run. Its first line says which, and why.
# RUN_GPU=1 or RUN_GPU= stands for the answer (tests/run.sh's make -n).
RUN_ARGS ?= --model cnn --epochs 3
RUN_GPU = $(eval RUN_GPU := $(shell { nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || ls /proc/driver/nvidia/gpus/* ; } \
            >/dev/null 2>&1 && echo 1))$(RUN_GPU)
RUN_NATIVE  = $(if $(strip $(CUDA_ARCH)),,1)
RUN_TRAINER = $(if $(and $(RUN_GPU),$(HAVE_NVCC)),$(if $(RUN_NATIVE),$(BUILD)/native/train_cuda,$(BUILD)/train_cuda),$(BUILD)/train)
RUN_WHY = $(if $(RUN_GPU),$(if $(HAVE_NVCC),the CUDA trainer for $(if $(RUN_NATIVE),this machine's GPU (CUDA_ARCH=native),CUDA_ARCH=$(strip \
            $(CUDA_ARCH))): an NVIDIA GPU is here,the CPU trainer: an NVIDIA GPU is here but no nvcc (or NO_CUDA=1)),the CPU \
            trainer: no NVIDIA GPU here (nvidia-smi lists none$(comma) the driver's /proc none))
run: info
	@echo "make run: $(RUN_TRAINER), $(RUN_WHY)"
	+@$(MAKE) --no-print-directory HAVE_NVCC=$(HAVE_NVCC) HAVE_NCCL=$(HAVE_NCCL) HAVE_MPI=$(HAVE_MPI) HAVE_ZLIB=$(HAVE_ZLIB) \
	  $(if $(filter %/native/train_cuda,$(RUN_TRAINER)),BUILD=$(BUILD)/native CUDA_ARCH=native) $(RUN_TRAINER)
	./$(RUN_TRAINER) $(RUN_ARGS)

# Every test binary, the header compile checks and the examples; the last
# line is "N passed, N failed". TEST_RUNNER wraps each binary (valgrind).
# The CUDA trainer is built for the default CUDA_ARCH as an example (the
# sanitizer runs: PTX of one architecture, see CUDA_GENCODE); the GPU pack,
# the GPU programs for every architecture in two flavours, is make
# test-pack's. The programs build on every core (NPROC) unless make was
# given -j: the recipe calls make again with -j, as GNU make 4.3 ignores a
# -j that a Makefile adds to MAKEFLAGS; the tests run one at a time (each
# one's replicas take every core).
NPROC := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
TEST_PROGRAMS = $(TESTS) $(EXAMPLES) $(BUILD)/bare_hello $(if $(HAVE_MPI),$(BUILD)/test_mpi) $(if $(SAN),,$(LABS))
# make again for PROGRAMS, on every core unless make was given -j, with
# what the probes found here (the sub-make probes nothing again).
BUILD_ON_EVERY_CORE = $(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC)) HAVE_NVCC=$(HAVE_NVCC) \
                      HAVE_NCCL=$(HAVE_NCCL) HAVE_MPI=$(HAVE_MPI) HAVE_ZLIB=$(HAVE_ZLIB)
test-programs: $(TEST_PROGRAMS)
test: info
	+@$(BUILD_ON_EVERY_CORE) test-programs
	@CC="$(CC)" CXX="$(CXX)" NVCC="$(if $(HAVE_NVCC),$(NVCC))" MPIRUN="$(if $(HAVE_MPI),$(MPIRUN))" BUILD="$(BUILD)" \
	 SAN="$(SAN)" TEST_RUNNER="$(TEST_RUNNER)" sh tests/run.sh $(TESTS)

# The GPU pack checked on this machine (tests/pack_test.sh): its programs'
# code and size, its script without a GPU and on CPU replicas (--cpu), the
# GPU page made from those results. Out of make test (nvcc for every
# architecture in two flavours, 5 minutes of CPU, and the --cpu run, about
# 100 s: over a quarter of make test's time on 2 cores); CI runs it once.
test-pack: info
	+@$(BUILD_ON_EVERY_CORE) gpu-pack
	@BUILD="$(BUILD)" PACK="$(PACK)" sh tests/pack_test.sh

bench: info $(BUILD)/bench_train $(if $(HAVE_OPENBLAS),$(BUILD)/bench_gemm)
	./$(BUILD)/bench_train
	$(if $(HAVE_OPENBLAS),./$(BUILD)/bench_gemm,@echo "bench_gemm: needs OpenBLAS (apt-get install libopenblas-dev)")

bench-gpu: info $(BUILD)/bench_gpu $(BUILD)/bench_fused_cuda
	@BUILD="$(BUILD)" sh bench/gpu.sh

# The fused mixed-precision update in GB/s against the device's copy: one
# body (bench/fused_body.h), on the CPU backend here, on a GPU in bench-gpu.
bench-fused: info $(BUILD)/bench_fused
	./$(BUILD)/bench_fused

$(BUILD)/bench_fused: bench/bench_fused.c bench/fused_body.h mirror.h | $(BUILD)
	$(CC) $(CFLAGS_ALL) $< -o $@ $(LDLIBS_ALL)

$(BUILD)/bench_fused_cuda.o: bench/bench_fused_cuda.cu bench/fused_body.h $(CUDA_HEADERS) | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/bench_gpu: bench/bench_gpu.c examples/models.h $(BUILD)/mirror_cuda.o mirror.h | $(BUILD)
	$(CC) $(CFLAGS_ALL) $< $(BUILD)/mirror_cuda.o -o $@ $(CUDA_LIBS) $(LDLIBS_ALL)

$(BUILD)/bench_train: bench/bench_train.c $(BENCH_HEADERS) | $(BUILD)
	$(CC) $(CFLAGS_ALL) $< -o $@ $(LDLIBS_ALL)

$(BUILD)/bench_gemm: bench/bench_gemm.c mirror.h | $(BUILD)
	$(CC) $(CFLAGS_ALL) -DBENCH_CFLAGS='"$(OPT) $(ARCH) -ffp-contract=fast -fno-math-errno $(CFLAGS)"' $< -o $@ $(LDLIBS_ALL) -lopenblas

# mirror against PyTorch and TensorFlow on the CPU (bench/peers.py); their
# packages come from pip here, never in make test. mirror's builds: the
# default, the same at -O2, and clang's where clang is installed.
HAVE_CLANG := $(shell command -v $(CLANG) >/dev/null 2>&1 && echo 1)
PEER_BUILDS = $(CC) $(OPT)=$(BUILD)/bench_peers;$(CC) -O2=$(BUILD)/bench_peers_O2$(if $(HAVE_CLANG),;$(CLANG) $(OPT)=$(BUILD)/bench_peers_clang)
bench-peers: info $(BUILD)/bench_peers $(BUILD)/bench_peers_O2 $(if $(HAVE_CLANG),$(BUILD)/bench_peers_clang)
	@python3 -c 'import torch, tensorflow, numpy' 2>/dev/null || python3 -m pip install -q torch tensorflow-cpu numpy
	BUILD="$(BUILD)" MIRROR_BUILDS="$(PEER_BUILDS)" python3 bench/peers.py

$(BUILD)/bench_peers: bench/bench_peers.c $(BENCH_HEADERS) | $(BUILD)
	$(CC) $(CFLAGS_ALL) $< -o $@ $(LDLIBS_ALL)

$(BUILD)/bench_peers_O2: bench/bench_peers.c $(BENCH_HEADERS) | $(BUILD)
	$(CC) $(filter-out -O%,$(CFLAGS_ALL)) -O2 $< -o $@ $(LDLIBS_ALL)

$(BUILD)/bench_peers_clang: bench/bench_peers.c $(BENCH_HEADERS) | $(BUILD)
	$(CLANG) $(CFLAGS_ALL) $< -o $@ $(LDLIBS_ALL)

# 2 processes x 1 replica against 1 process x 2 replicas against PyTorch DDP
# (gloo, 2 processes): bench/mpi.py, with build/bench_peers under MPI.
bench-mpi: info $(BUILD)/bench_peers $(BUILD)/bench_peers_mpi
	@python3 -c 'import torch, numpy' 2>/dev/null || python3 -m pip install -q torch numpy
	BUILD="$(BUILD)" MPIRUN="$(MPIRUN)" python3 bench/mpi.py

$(BUILD)/bench_peers_mpi: bench/bench_peers.c $(BENCH_HEADERS) | $(BUILD)
	$(MPICC) $(CFLAGS_ALL) -DMIRROR_MPI $< -o $@ $(LDLIBS_ALL)

# Checkpoints out to ONNX Runtime and PyTorch (tools/mirror_model.py): the
# exports' logits against mirror's; the tool's checks of descriptions,
# files and outputs (test_tool.py, in make test too); fit's TensorBoard
# events through the tensorboard package's reader (tests/interop). Their
# packages come from pip here, never in make test. The torch checks run
# where torch is.
INTEROP_PACKAGES = numpy safetensors onnx onnxruntime tensorboard
test-interop: info $(BUILD)/train $(BUILD)/interop_predict $(BUILD)/interop_resnet
	@python3 -c 'import numpy, safetensors, onnx, onnxruntime, tensorboard' 2>/dev/null || \
	 python3 -m pip install -q $(INTEROP_PACKAGES)
	python3 tests/interop/test_export.py $(BUILD)
	python3 tests/interop/test_tool.py $(BUILD)
	python3 tests/interop/test_tensorboard.py $(BUILD)
	python3 tests/interop/test_resnet.py $(BUILD)

$(BUILD)/interop_predict: tests/interop/predict.c mirror.h | $(BUILD)
	$(CC) $(CFLAGS_ALL) $< -o $@ $(LDLIBS_ALL)

$(BUILD)/interop_resnet: tests/interop/resnet.c tests/digits.h tests/resnet_case.h mirror.h | $(BUILD)
	$(CC) $(CFLAGS_ALL) $< -o $@ $(LDLIBS_ALL)

# The guard against a collapse of the built-in GEMM (CI): below 0.3x
# OpenBLAS at a layer shape fails.
bench-guard: info $(BUILD)/bench_gemm
	./$(BUILD)/bench_gemm --guard 0.3

# The tests of the GEMM, the threads and the API built for other targets:
# the x86-64 baseline (SSE2), x86-64-v3 (AVX2), no FMA, clang, and arm64
# under qemu-user where the cross compiler and qemu are installed.
test-targets:
	@CC="$(CC)" sh tests/targets.sh

clean:
	rm -rf build

.PHONY: all info help labs run test test-programs test-pack test-crash test-gpu test-targets test-interop bench bench-guard bench-peers bench-mpi bench-gpu bench-fused fuzz clean \
        gpu-pack gpu-pack-nccl gpu-pack-nonccl gpu-pack-programs gpu-report install uninstall test-install
.PRECIOUS: $(BUILD)/%
