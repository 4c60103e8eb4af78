// Row-wise e4m3 quantization in float registers, one definition for every kernel that writes FP8
// rows for the next GEMM (ops/cuda/quantize_fp8_kernels.cu: quantize_rows, bias_gelu_quantize_rows;
// ops/cuda/block_kernels.cu: ln_modulate_quantize): s = max(amax, 1e-12) / 448, the row's inverse
// scale i = 448 / max(amax, 1e-12) and q = e4m3(clamp(v · i, ±448)) rounded to nearest even, as
// ops/linear_fp8.h defines them and quantize_rows_fp8_reference computes them (one IEEE division a
// row, then a product an element: the division an element was ≈ 10 instructions of the ≈ 40 that
// made bias_gelu_quantize instruction-bound, 2026-12-04).
// round_to<T> is T's round-to-nearest-even of a float, back in float: what storing v as T and
// reading it again gives, so that a kernel quantizing values it never writes rounds them as a
// kernel that writes them in T followed by quantize_rows would.
// NaN propagates as in the ATen reference: a NaN in a row makes its amax and scale NaN and every
// byte of the row NaN (fmaxf alone would drop it and write a finite row from a diverged model).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace nala::cuda_fp8_rows {

constexpr float kE4m3Max = 448.f;  // largest finite float8_e4m3fn

// max(a, b) that returns NaN when either is NaN, as torch's amax and clamp_min do (fmaxf returns the other)
// (PTX max.NaN, sm_80+: one FMNMX, where the compare-and-select took three instructions; a NaN
// comes back as the canonical NaN)
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float row_scale(float amax) { return max_nan(amax, 1e-12f) / kE4m3Max; }
__device__ __forceinline__ float row_inv_scale(float amax) { return kE4m3Max / max_nan(amax, 1e-12f); }

// clamp(v · i, ±448) then e4m3 (i = row_inv_scale) for two values in one conversion
// (cvt.rn.satfinite.e4m3x2.f32), a's byte low and b's high, as stored: the satfinite conversion
// clamps (|v · i| ≤ 448 but for rounding) and keeps NaN NaN, where an explicit fminf/fmaxf clamp
// would turn NaN into −448
__device__ __forceinline__ uint16_t to_e4m3x2(float a, float b, float inv_s) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a * inv_s, b * inv_s), __NV_SATFINITE, __NV_E4M3);
}

template <typename T>
__device__ __forceinline__ float round_to(float v) { return v; }
template <>
__device__ __forceinline__ float round_to<__nv_bfloat16>(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
template <>
__device__ __forceinline__ float round_to<__half>(float v) { return __half2float(__float2half_rn(v)); }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace nala::cuda_fp8_rows
