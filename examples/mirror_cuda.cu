/* mirror_cuda.cu - the one CUDA file of a mirror program: it compiles the
   library with its CUDA backend. Everything else includes mirror.h from C.

   nvcc -O3 -arch=sm_90 -c examples/mirror_cuda.cu -o mirror_cuda.o */
#define MIRROR_IMPLEMENTATION
#include "../mirror_cuda.h"
