// Instantiates the fused NaLa kernels for one input dtype (__nv_bfloat16; split tf32: false).
#include "attention/cuda/nala_launch.cuh"

namespace nala::attention::cuda {
void dispatch_bf16(const NalaKernelParams& P, cudaStream_t st, bool forward) { dispatch<__nv_bfloat16, false>(P, st, forward); }
}  // namespace nala::attention::cuda
