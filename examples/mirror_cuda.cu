/* mirror_cuda.cu - the one CUDA file of a mirror program: it compiles the
   library with its CUDA backend. Everything else includes mirror.h from C.

   make build/mirror_cuda.o (every GPU from Turing on: the README's nvcc
   line), or for one kind of GPU (here an 8.9: L4, L40, RTX 40xx):
   nvcc -O3 -arch=sm_89 -Xcompiler -march=native,-ffp-contract=fast,-fno-math-errno \
        -c examples/mirror_cuda.cu -o mirror_cuda.o */
#define MIRROR_IMPLEMENTATION
#include "../mirror_cuda.h"
