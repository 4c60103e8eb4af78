// Instantiates the fused NaLa kernels for one input dtype (float; split tf32: true).
#include "attention/cuda/nala_launch.cuh"

namespace nala::attention::cuda {
void dispatch_f32(const NalaKernelParams& P, cudaStream_t st, bool forward) { dispatch<float, true>(P, st, forward); }
}  // namespace nala::attention::cuda
