// The hardware's approximate transcendentals as PTX (one MUFU instruction each; PTX ISA, "Floating
// Point Instructions"), subnormal inputs and results flushed to zero: ex2.approx.ftz (2^x),
// rcp.approx.ftz (1/x), lg2.approx.ftz (log2 x), each within a few float ulp (the ISA gives the bounds);
// and with subnormals kept: sqrt.approx.f32 (√x) and rcp.approx.f32 (1/x), where an IEEE operation's
// slow-path call would cost more than its exactness is worth (attention/cuda/feature_maps.cuh f_sqrt, f_rcp).
// One definition for the kernels that use them (ops/cuda/gelu.cuh; attention/cuda/feature_maps.cuh).
#pragma once

namespace nala::cuda_ptx {

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float sqrt_approx_keep_subnormals(float x) {
  float y;
  asm("sqrt.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx_keep_subnormals(float x) {
  float y;
  asm("rcp.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace nala::cuda_ptx
