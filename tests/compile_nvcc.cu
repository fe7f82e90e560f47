/* compile_nvcc.cu - mirror.h under nvcc: the implementation compiles as CUDA
   C++ and the shared math runs in a kernel (compiled by tests/run.sh when
   nvcc is present; nothing here needs a GPU to build). */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"

__global__ void relu_and_sgd(float *w, float *v, const float *g, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) mirror_hd_sgd(&w[i], &v[i], mirror_hd_relu(g[i]), 0.1f, 0.9f, 0.0f, 1);
}

int main(void) { return 0; }
