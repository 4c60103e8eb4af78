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

// The same GELU in the sigmoid form ½u(1 + tanh z) = u·σ(2z) = u / (1 + e^(−2z)) with the hardware's
// exp and reciprocal (ex2.approx, rcp.approx: a few ulp), for FP8 sampling's bias-GELU-quantize
// kernel, which the accurate tanhf made instruction-bound (8.0 ms of a 49 ms DiT-XL/2 step on the
// H200 against a 2.6 ms memory floor; docs/benchmarks.md, 2026-12-03). Where the two round h to
// bf16 differently, the e4m3 byte fc2 reads moves by at most one step, in ≈ 1e-4 of the bytes or
// fewer (LinearFp8Cuda.BiasGeluQuantizeEqualsTheTwoKernels). For u → −∞ it gives −0 where
// gelu_tanh's 1 + tanh cancels to 0: both quantize to 0.
__device__ __forceinline__ float gelu_tanh_fast(float u) {
  const float z = 0.7978845608028654f * (u + 0.044715f * u * u * u);
  return __fdividef(u, 1.0f + __expf(-2.0f * z));
}

}  // namespace nala::cuda_gelu
