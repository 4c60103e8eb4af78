// GELU with the tanh approximation and its derivative in float, for the kernels that apply fc1's
// activation (ops/cuda/block_kernels.cu: bias_gelu; ops/cuda/quantize_fp8_kernels.cu: bias, GELU and
// FP8 row quantization in one pass). One definition, so the fused kernel (with the accurate form)
// rounds exactly as the unfused pair does.
// g(u) = ½u(1 + tanh(c(u + a·u³))), c = √(2/π), a = 0.044715 (Hendrycks & Gimpel 2016);
// g'(u) = ½(1 + t) + ½u(1 − t²)·c(1 + 3a·u²), t = tanh(c(u + a·u³))
#pragma once
#include "ops/cuda/ptx_math.cuh"

namespace nala::cuda_gelu {

__device__ __forceinline__ float gelu_tanh(float u) {
  const float t = tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u));
  return 0.5f * u * (1.0f + t);
}
__device__ __forceinline__ float gelu_tanh_grad(float u) {
  const float t = tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u));
  return 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * u * u);
}

// The same GELU in the sigmoid form ½u(1 + tanh z) = u·σ(2z) = u / (1 + 2^w), w = −2z·log2(e), with
// the hardware's exp2 and reciprocal (ex2.approx.ftz, rcp.approx.ftz: a few ulp; one MUFU each), for
// FP8 sampling's bias-GELU-quantize kernel (NALA_FP8_FAST_GELU=1, ops/fused_ops.h), which the
// accurate tanhf made instruction-bound. w = u·(k + k·a·u²) with k = −2c·log2(e) folded: 7
// instructions. Where |h| is not tiny the two forms agree to a few float ulp, so h rounded to bf16
// differs in a small fraction of the values by one bf16 ulp and an e4m3 byte by at most one step. For
// u ≲ −3 the accurate form loses its digits to the cancellation in 1 + tanh z (it is 0 from u ≈ −5.1)
// while this form keeps them (−0 only from u ≈ −10, where 2^w overflows and its reciprocal is 0): a
// row whose every u is that negative quantizes to other bytes, with a scale ≤ 1e-6 of a typical row's,
// so the dequantized values differ by less than that. Finite u never gives NaN.
__device__ __forceinline__ float gelu_tanh_fast(float u) {
  constexpr float k = -2.0f * 0.7978845608028654f * 1.4426950408889634f;  // −2c·log2(e)
  const float w = u * fmaf(u * u, k * 0.044715f, k);                      // −2z·log2(e)
  return u * nala::cuda_ptx::rcp_approx(1.0f + nala::cuda_ptx::ex2_approx(w));
}

}  // namespace nala::cuda_gelu
