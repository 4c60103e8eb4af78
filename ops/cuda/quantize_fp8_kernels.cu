// Row-wise FP8 (e4m3) quantization, one pass over the input (parameters: quantize_fp8_kernels.h;
// definition: ops/linear_fp8.h). A warp owns a row: its lanes read the row in 16-byte
// vectors, reduce max |x| across the warp, then read the row again (from L1/L2: a row is at most a
// few KB) and write q = sat(x / s) rounded to nearest even in e4m3, s = max(amax, 1e-12) / 448.
// The division and the rounding are those of ATen's composition (x.float() / s, clamp to ±448,
// .to(float8_e4m3fn)), so the two agree bit for bit (tests/cuda/linear_fp8_test.cpp).
#include "ops/cuda/quantize_fp8_kernels.h"

#include "ops/cuda/fp8_rows.cuh"
#include "ops/cuda/gelu.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace nala::ops::cuda {
namespace {

constexpr int kWarps = 8;  // rows a block
using namespace nala::cuda_fp8_rows;  // row_scale, to_e4m3, round_to, warp_max

template <typename T>
__device__ __forceinline__ float to_f(T v) { return float(v); }
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) quantize_rows_kernel(const T* __restrict__ x, int64_t R, int K, uint8_t* __restrict__ q,
                                                                    float* __restrict__ scale) {
  constexpr int V = 16 / int(sizeof(T));  // elements a vector
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= R) return;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * K);
  const int nvec = K / V;
  float amax = 0.f;
  for (int v = lane; v < nvec; v += 32) {
    const uint4 raw = __ldg(xr + v);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) amax = max_nan(amax, fabsf(to_f(e[i])));
  }
  amax = warp_max(amax);
  const float s = row_scale(amax);
  if (lane == 0) scale[row] = s;
  uint8_t* qr = q + row * K;
  for (int v = lane; v < nvec; v += 32) {
    const uint4 raw = __ldg(xr + v);
    const T* e = reinterpret_cast<const T*>(&raw);
    alignas(8) uint8_t out[V];  // read back as one word
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = to_e4m3(to_f(e[i]), s);
    if constexpr (V == 8) {
      *reinterpret_cast<uint2*>(qr + v * V) = *reinterpret_cast<const uint2*>(out);
    } else {
      *reinterpret_cast<uint32_t*>(qr + v * V) = *reinterpret_cast<const uint32_t*>(out);
    }
  }
}

// h = round_T(GELU_tanh(x + bias)) quantized row by row as quantize_rows_kernel does; FAST takes
// GELU's sigmoid form with the hardware's exp (ops/cuda/gelu.cuh gelu_tanh_fast) instead of the
// accurate tanhf that bias_gelu uses, which FAST = false equals bit for bit. A block of
// kRowThreads owns a row: each thread keeps up to NV 16-byte vectors of h in registers, the block
// reduces max |h| (warp shuffles, then one value a warp through shared memory), and the threads
// write their vectors' e4m3 bytes. One read of x and one fp8 write, against bias_gelu's read and
// write of h plus quantize_rows' two reads of it.
constexpr int kRowThreads = 128;
template <typename T, int NV, bool FAST>
__global__ void __launch_bounds__(kRowThreads) bias_gelu_quantize_rows_kernel(const T* __restrict__ x, const float* __restrict__ bias, int K,
                                                                            uint8_t* __restrict__ q, float* __restrict__ scale) {
  constexpr int V = 16 / int(sizeof(T));  // elements a vector
  const int64_t row = blockIdx.x;
  const int nvec = K / V;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * K);
  float h[NV][V];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int v = threadIdx.x + j * kRowThreads;
    if (v < nvec) {
      const uint4 raw = __ldg(xr + v);
      const T* e = reinterpret_cast<const T*>(&raw);
      float bv[V];  // the vector's V biases in 16-byte loads (the bias is 16-byte aligned: quantize_fp8.cpp)
#pragma unroll
      for (int i = 0; i < V; i += 4) {
        const float4 b4 = __ldg(reinterpret_cast<const float4*>(bias + v * V + i));
        bv[i] = b4.x, bv[i + 1] = b4.y, bv[i + 2] = b4.z, bv[i + 3] = b4.w;
      }
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float u = to_f(e[i]) + bv[i];
        h[j][i] = round_to<T>(FAST ? nala::cuda_gelu::gelu_tanh_fast(u) : nala::cuda_gelu::gelu_tanh(u));
        amax = max_nan(amax, fabsf(h[j][i]));
      }
    }
  }
  amax = warp_max(amax);
  __shared__ float warp_amax[kRowThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_amax[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = warp_amax[0];
#pragma unroll
  for (int w = 1; w < kRowThreads / 32; ++w) amax = max_nan(amax, warp_amax[w]);
  const float s = row_scale(amax);
  if (threadIdx.x == 0) scale[row] = s;
  uint8_t* qr = q + row * K;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int v = threadIdx.x + j * kRowThreads;
    if (v < nvec) {
      alignas(8) uint8_t out[V];  // read back as one word
#pragma unroll
      for (int i = 0; i < V; ++i) out[i] = to_e4m3(h[j][i], s);
      if constexpr (V == 8) {
        *reinterpret_cast<uint2*>(qr + v * V) = *reinterpret_cast<const uint2*>(out);
      } else {
        *reinterpret_cast<uint32_t*>(qr + v * V) = *reinterpret_cast<const uint32_t*>(out);
      }
    }
  }
}

template <typename T, int NV>
void launch_bias_gelu_typed(const QuantizeRowsParams& p, const float* bias, bool fast, cudaStream_t st) {
  if (fast)
    bias_gelu_quantize_rows_kernel<T, NV, true><<<unsigned(p.R), kRowThreads, 0, st>>>(static_cast<const T*>(p.x), bias, p.K, p.q, p.scale);
  else
    bias_gelu_quantize_rows_kernel<T, NV, false><<<unsigned(p.R), kRowThreads, 0, st>>>(static_cast<const T*>(p.x), bias, p.K, p.q, p.scale);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel bias_gelu_quantize_rows failed to launch: ") + cudaGetErrorString(e));
}

template <typename T>
void launch_bias_gelu_by_width(const QuantizeRowsParams& p, const float* bias, bool fast, cudaStream_t st) {
  const int per_thread = (p.K / (16 / int(sizeof(T))) + kRowThreads - 1) / kRowThreads;  // vectors a thread
  if (per_thread <= 1) return launch_bias_gelu_typed<T, 1>(p, bias, fast, st);
  if (per_thread <= 2) return launch_bias_gelu_typed<T, 2>(p, bias, fast, st);
  if (per_thread <= 4) return launch_bias_gelu_typed<T, 4>(p, bias, fast, st);
  if (per_thread <= 6) return launch_bias_gelu_typed<T, 6>(p, bias, fast, st);
  if (per_thread <= 8) return launch_bias_gelu_typed<T, 8>(p, bias, fast, st);
  throw std::runtime_error("bias_gelu_quantize_rows: rows of " + std::to_string(p.K) + " elements are too long for one block");
}

template <typename T>
void launch_typed(const QuantizeRowsParams& p, cudaStream_t st) {
  const unsigned blocks = unsigned((p.R + kWarps - 1) / kWarps);
  quantize_rows_kernel<T><<<blocks, kWarps * 32, 0, st>>>(static_cast<const T*>(p.x), p.R, p.K, p.q, p.scale);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel quantize_rows failed to launch: ") + cudaGetErrorString(e));
}

}  // namespace

void launch_bias_gelu_quantize_rows(const QuantizeRowsParams& p, const float* bias, bool fast_gelu, void* stream) {
  if (p.R == 0) return;
  if (p.R > int64_t(2147483647)) throw std::runtime_error("bias_gelu_quantize_rows: " + std::to_string(p.R) + " rows are too many for one launch");
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case QuantizeRowsParams::Dtype::f32: launch_bias_gelu_by_width<float>(p, bias, fast_gelu, st); break;
    case QuantizeRowsParams::Dtype::bf16: launch_bias_gelu_by_width<__nv_bfloat16>(p, bias, fast_gelu, st); break;
    case QuantizeRowsParams::Dtype::f16: launch_bias_gelu_by_width<__half>(p, bias, fast_gelu, st); break;
  }
}

void launch_quantize_rows(const QuantizeRowsParams& p, void* stream) {
  if (p.R == 0) return;
  if (p.R > int64_t(2147483647) * kWarps) throw std::runtime_error("quantize_rows: " + std::to_string(p.R) + " rows are too many for one launch");
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case QuantizeRowsParams::Dtype::f32: launch_typed<float>(p, st); break;
    case QuantizeRowsParams::Dtype::bf16: launch_typed<__nv_bfloat16>(p, st); break;
    case QuantizeRowsParams::Dtype::f16: launch_typed<__half>(p, st); break;
  }
}

}  // namespace nala::ops::cuda
