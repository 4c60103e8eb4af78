// GELU with the tanh approximation and its derivative in float, for the kernels that apply fc1's
// activation (ops/cuda/block_kernels.cu: bias_gelu; ops/cuda/quantize_fp8_kernels.cu: bias, GELU and
// FP8 row quantization in one pass). One definition, so the fused kernel rounds exactly as the
// unfused pair does.
// g(u) = ½u(1 + tanh(c(u + a·u³))), c = √(2/π), a = 0.044715 (Hendrycks & Gimpel 2016);
// g'(u) = ½(1 + t) + ½u(1 − t²)·c(1 + 3a·u²), t = tanh(c(u + a·u³))
#pragma once

namespace nala::cuda_gelu {

__device__ __forceinline__ float gelu_tanh(float u) {
  const float t = tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u));
  return 0.5f * u * (1.0f + t);
}
__device__ __forceinline__ float gelu_tanh_grad(float u) {
  const float t = tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u));
  return 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * u * u);
}

}  // namespace nala::cuda_gelu
