// Instantiates the fused NaLa kernels for one input dtype (__half; split tf32: true).
#include "attention/cuda/nala_launch.cuh"

namespace nala::attention::cuda {
void dispatch_f16(const NalaKernelParams& P, cudaStream_t st, bool forward) { dispatch<__half, true>(P, st, forward); }
}  // namespace nala::attention::cuda
