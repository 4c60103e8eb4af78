// Chooses the dtype instantiation; the compile-time tile sizes are exported for the host side.
#include "attention/cuda/nala_launch.cuh"

namespace nala::attention::cuda {

NalaKernelShape nala_kernel_shape(int D, int feat) {
#define NALA_SHAPE(DD, FF)                                                                                 \
  if (D == DD && feat == FF) {                                                                             \
    using S = Shape<DD, FF>;                                                                               \
    return {S::F, S::Fp, S::Dp, S::TILE_STATE, S::TILE_OUT, S::TILE_DQ, S::TILE_DKV, S::THREADS};          \
  }
  NALA_SHAPE(64, 2) NALA_SHAPE(72, 2) NALA_SHAPE(128, 2) NALA_SHAPE(64, 1) NALA_SHAPE(72, 1) NALA_SHAPE(128, 1)
#undef NALA_SHAPE
  throw std::runtime_error("nala CUDA kernels support head dims 64, 72 and 128; got " + std::to_string(D));
}

static void run(const NalaKernelParams& p, void* stream, bool forward) {
  auto st = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::F32: dispatch_f32(p, st, forward); break;
    case DType::F16: dispatch_f16(p, st, forward); break;
    case DType::BF16: dispatch_bf16(p, st, forward); break;
  }
}

void launch_nala_forward(const NalaKernelParams& p, void* stream) { run(p, stream, true); }
void launch_nala_backward(const NalaKernelParams& p, void* stream) { run(p, stream, false); }

}  // namespace nala::attention::cuda
