// The training step's optimizer pass in one kernel (parameters: adamw_ema_kernels.h): for every
// element of every parameter, AdamW's update with the arithmetic of ATen's fused kernel
// (ATen/native/cuda/fused_adam_utils.cuh adam_math: float math, the moments by two fmas, the bias
// corrections from the float step count by powf), then the EMA's lerp toward the updated value
// (ATen/native/Lerp.h lerp, which _foreach_lerp_ runs), then the value's cast for the next forward,
// rounded to nearest even as _foreach_copy_ rounds. A block owns kAdamWEmaChunk elements of one
// tensor (found by a binary search over the launch's cumulative block counts); each thread moves 4
// consecutive elements at a time (16-byte float loads, 8-byte bf16) where the tensor's pointers
// allow, else one. Each element is read once (parameter, gradient, moments, EMA: 18 bytes with a
// bf16 gradient) and written once (parameter, moments, EMA, cast: 18 bytes).
#include "ops/cuda/adamw_ema_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace nala::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load_grad(const void* g, int64_t i, StepDtype t) {
  switch (t) {
    case StepDtype::kBFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(g)[i]);
    case StepDtype::kHalf: return __half2float(static_cast<const __half*>(g)[i]);
    default: return static_cast<const float*>(g)[i];
  }
}

__device__ __forceinline__ void load_grad4(const void* g, int64_t i, StepDtype t, float (&v)[4]) {
  if (t == StepDtype::kFloat) {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(g) + i);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    return;
  }
  const uint2 w = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(g) + i);
  if (t == StepDtype::kBFloat16) {  // a bf16 is a float's high 16 bits
    v[0] = __uint_as_float(w.x << 16), v[1] = __uint_as_float(w.x & 0xffff0000u);
    v[2] = __uint_as_float(w.y << 16), v[3] = __uint_as_float(w.y & 0xffff0000u);
  } else {
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&w.x)), hi = __half22float2(*reinterpret_cast<const __half2*>(&w.y));
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
  }
}

__device__ __forceinline__ uint16_t cast_bits(float x, StepDtype t) {
  if (t == StepDtype::kHalf) return __half_as_ushort(__float2half_rn(x));
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

struct Coefficients {
  float lr, beta1, beta2, weight_decay, eps, bias_correction1, bias_correction2_sqrt, scale, ema_weight;
  bool scaled, update;
};

// One element: AdamW as adam_math (ADAMW mode, no amsgrad, no maximize), written as it is so that
// the compiler contracts the same products; then the EMA's lerp.
__device__ __forceinline__ void step_element(const Coefficients& c, float& param, float grad, float& exp_avg, float& exp_avg_sq, float& ema) {
  if (c.scaled) grad = grad * c.scale;  // _foreach_mul_ of the gradients by the clipping factor
  if (c.update) {
    if (c.weight_decay != 0) param -= c.lr * c.weight_decay * param;
    exp_avg = fmaf(c.beta1, exp_avg, fmaf(-c.beta1, grad, grad));
    exp_avg_sq = fmaf(c.beta2, exp_avg_sq, fmaf(-c.beta2, grad * grad, grad * grad));
    const float step_size = c.lr / c.bias_correction1;
    const float denom = (sqrtf(exp_avg_sq) / c.bias_correction2_sqrt) + c.eps;
    param -= step_size * exp_avg / denom;
  }
  const float w = c.ema_weight;
  ema = fabsf(w) < 0.5f ? ema + w * (param - ema) : param - (param - ema) * (1.f - w);
}

__global__ void __launch_bounds__(kThreads) adamw_ema_kernel(const AdamWEmaLaunch l, const AdamWEmaScalars s) {
  int lo = 0, hi = l.count - 1;  // the first tensor whose cumulative block count passes this block
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (l.chunk_end[mid] > int64_t(blockIdx.x)) hi = mid;
    else lo = mid + 1;
  }
  const AdamWEmaTensor& t = l.t[lo];
  const StepDtype gt = l.grad_dtype[lo];
  const int64_t begin = (int64_t(blockIdx.x) - (lo > 0 ? l.chunk_end[lo - 1] : 0)) * kAdamWEmaChunk;
  const int64_t end = min(begin + kAdamWEmaChunk, t.n);

  Coefficients c;
  c.lr = s.lr_ptr ? *s.lr_ptr : s.lr;
  c.beta1 = s.beta1, c.beta2 = s.beta2, c.weight_decay = s.weight_decay, c.eps = s.eps;
  const float step = *t.step;
  c.bias_correction1 = 1 - powf(c.beta1, step);
  c.bias_correction2_sqrt = sqrtf(1 - powf(c.beta2, step));
  c.scaled = s.grad_scale != nullptr;
  c.scale = c.scaled ? *s.grad_scale : 1.f;
  c.update = !(s.found_inf && *s.found_inf == 1);
  c.ema_weight = s.ema_weight_ptr ? *s.ema_weight_ptr : s.ema_weight;

  float* __restrict__ p = t.param;
  float* __restrict__ m = t.exp_avg;
  float* __restrict__ v = t.exp_avg_sq;
  float* __restrict__ e = t.ema;
  uint16_t* __restrict__ cast = static_cast<uint16_t*>(t.cast);
  const size_t gsize = gt == StepDtype::kFloat ? 4 : 2;
  const bool vec = (reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v) |
                    reinterpret_cast<uintptr_t>(e)) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(t.grad) % (4 * gsize) == 0 && reinterpret_cast<uintptr_t>(cast) % 8 == 0;
  int64_t i = begin;
  if (vec) {
    const int64_t vec_end = begin + (end - begin) / 4 * 4;
#pragma unroll 2
    for (int64_t j = begin + 4 * int64_t(threadIdx.x); j < vec_end; j += 4 * kThreads) {
      const float4 p4 = *reinterpret_cast<const float4*>(p + j), m4 = *reinterpret_cast<const float4*>(m + j);
      const float4 v4 = *reinterpret_cast<const float4*>(v + j), e4 = *reinterpret_cast<const float4*>(e + j);
      float g[4];
      load_grad4(t.grad, j, gt, g);
      float pa[4] = {p4.x, p4.y, p4.z, p4.w}, ma[4] = {m4.x, m4.y, m4.z, m4.w}, va[4] = {v4.x, v4.y, v4.z, v4.w},
            ea[4] = {e4.x, e4.y, e4.z, e4.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) step_element(c, pa[k], g[k], ma[k], va[k], ea[k]);
      *reinterpret_cast<float4*>(p + j) = make_float4(pa[0], pa[1], pa[2], pa[3]);
      *reinterpret_cast<float4*>(m + j) = make_float4(ma[0], ma[1], ma[2], ma[3]);
      *reinterpret_cast<float4*>(v + j) = make_float4(va[0], va[1], va[2], va[3]);
      *reinterpret_cast<float4*>(e + j) = make_float4(ea[0], ea[1], ea[2], ea[3]);
      if (cast) {
        const uint2 w = make_uint2(unsigned(cast_bits(pa[0], s.cast_dtype)) | unsigned(cast_bits(pa[1], s.cast_dtype)) << 16,
                                   unsigned(cast_bits(pa[2], s.cast_dtype)) | unsigned(cast_bits(pa[3], s.cast_dtype)) << 16);
        *reinterpret_cast<uint2*>(cast + j) = w;
      }
    }
    i = vec_end;
  }
  for (int64_t j = i + threadIdx.x; j < end; j += kThreads) {  // the rest, one element a thread
    float pj = p[j], mj = m[j], vj = v[j], ej = e[j];
    step_element(c, pj, load_grad(t.grad, j, gt), mj, vj, ej);
    p[j] = pj, m[j] = mj, v[j] = vj, e[j] = ej;
    if (cast) cast[j] = cast_bits(pj, s.cast_dtype);
  }
}

}  // namespace

void launch_adamw_ema(const AdamWEmaLaunch& l, const AdamWEmaScalars& s, void* stream) {
  if (l.count <= 0) return;
  const int64_t blocks = l.chunk_end[l.count - 1];
  if (blocks <= 0) return;
  if (blocks > INT32_MAX) throw std::runtime_error("adamw_ema: " + std::to_string(blocks) + " blocks in one launch");
  adamw_ema_kernel<<<unsigned(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(l, s);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("adamw_ema launch failed: ") + cudaGetErrorString(e));
}

}  // namespace nala::ops::cuda
