// Row-wise FP8 (e4m3) quantization, one pass over the input (parameters: quantize_fp8_kernels.h;
// definition: ops/linear_fp8.h). A warp owns a row: its lanes read the row in 16-byte
// vectors, reduce max |x| across the warp, then read the row again (from L1/L2: a row is at most a
// few KB) and write q = sat(x · i) rounded to nearest even in e4m3, i = 448 / max(amax, 1e-12).
// The product and the rounding are those of ATen's composition (x.float() · i, clamp to ±448,
// .to(float8_e4m3fn)), so the two agree bit for bit (tests/cuda/linear_fp8_test.cpp).
// Instruction diet (these kernels were instruction-bound, not memory-bound: ≈ 40 instructions an
// element in bias_gelu_quantize, 2026-12-04): 16-bit rows take max |x| two at a time on the packed
// words (abs and max.NaN of bf16x2 / f16x2, exact: the values are already in the dtype), float rows
// on the bit patterns (for |x| the unsigned order is the float order, and NaN's pattern lies above
// infinity's, so NaN propagates); two floats convert to e4m3 in one instruction.
#include "ops/cuda/quantize_fp8_kernels.h"

#include "ops/cuda/cp_async.cuh"
#include "ops/cuda/fp8_rows.cuh"
#include "ops/cuda/gelu.cuh"
#include "ops/cuda/persistent_grid.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace nala::ops::cuda {
namespace {

constexpr int kWarps = 8;  // rows a block
using namespace nala::cuda_fp8_rows;  // row_scale, row_inv_scale, to_e4m3x2, max_nan, warp_max
using namespace nala::cuda_async;     // cp_async, cp_async_commit, cp_async_wait

// A 16-byte vector of T as four 32-bit words: a 16-bit T packs a pair of elements a word, float one.
template <typename T>
constexpr int kPairs = 16 / (2 * int(sizeof(T)));  // pairs of elements a vector: 4 (16-bit), 2 (float)

template <typename T>
__device__ __forceinline__ float2 pair_at(const uint4& v, int i) {  // elements 2i and 2i + 1 in float
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  if constexpr (std::is_same_v<T, float>) {
    return make_float2(__uint_as_float(w[2 * i]), __uint_as_float(w[2 * i + 1]));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {  // a bf16 is a float's high half: one shift or mask each
    return make_float2(__uint_as_float(w[i] << 16), __uint_as_float(w[i] & 0xffff0000u));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(w + i));
  }
}

// elements 2i and 2i + 1 stored as T (round to nearest even: what storing them in T keeps)
template <typename T>
__device__ __forceinline__ void set_pair(uint4& v, int i, float a, float b) {
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
  if constexpr (std::is_same_v<T, float>) {
    w[2 * i] = __float_as_uint(a), w[2 * i + 1] = __float_as_uint(b);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
    w[i] = *reinterpret_cast<const uint32_t*>(&p);
  } else {
    const __half2 p = __floats2half2_rn(a, b);
    w[i] = *reinterpret_cast<const uint32_t*>(&p);
  }
}

// running max |x| of vectors of T, NaN-propagating (see the top of the file), kept in one 32-bit word
// that warps reduce as it is (combine: two words' max, shuffled between lanes) and get() reads
template <typename T>
struct AbsMax {
  uint32_t m = 0;  // float: the largest |x|'s bit pattern
  __device__ __forceinline__ static uint32_t combine(uint32_t a, uint32_t b) { return max(a, b); }
  __device__ __forceinline__ void add(const uint4& v) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) m = combine(m, w[i] & 0x7fffffffu);
  }
  __device__ __forceinline__ static float get(uint32_t m) { return __uint_as_float(m); }
};
// 16-bit rows: the packed pairs' abs and max.NaN (T2: __nv_bfloat162 or __half2); +0 in both halves is 0
template <typename T2>
struct AbsMaxPairs {
  uint32_t m = 0;
  __device__ __forceinline__ static uint32_t combine(uint32_t a, uint32_t b) {
    const T2 r = __hmax2_nan(*reinterpret_cast<const T2*>(&a), *reinterpret_cast<const T2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
  }
  __device__ __forceinline__ void add(const uint4& v) {
    const T2* w = reinterpret_cast<const T2*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const T2 a = __habs2(w[i]);
      m = combine(m, *reinterpret_cast<const uint32_t*>(&a));
    }
  }
  __device__ __forceinline__ static float get(uint32_t m) {
    const T2 p = *reinterpret_cast<const T2*>(&m);
    return max_nan(__low2float(p), __high2float(p));
  }
};
template <>
struct AbsMax<__nv_bfloat16> : AbsMaxPairs<__nv_bfloat162> {};
template <>
struct AbsMax<__half> : AbsMaxPairs<__half2> {};

// a warp's max of its lanes' AbsMax words, in every lane
template <typename T>
__device__ __forceinline__ uint32_t warp_abs_max(uint32_t m) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = AbsMax<T>::combine(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}

// the vector's e4m3 bytes at q (8 of a 16-bit T, 4 of a float)
template <typename T>
__device__ __forceinline__ void store_e4m3(uint8_t* __restrict__ q, const uint4& v, float inv_s) {
  uint32_t w[kPairs<T> / 2];
#pragma unroll
  for (int i = 0; i < kPairs<T>; i += 2) {
    const float2 a = pair_at<T>(v, i), b = pair_at<T>(v, i + 1);
    w[i / 2] = uint32_t(to_e4m3x2(a.x, a.y, inv_s)) | uint32_t(to_e4m3x2(b.x, b.y, inv_s)) << 16;
  }
  if constexpr (kPairs<T> == 4) {
    *reinterpret_cast<uint2*>(q) = make_uint2(w[0], w[1]);
  } else {
    *reinterpret_cast<uint32_t*>(q) = w[0];
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) quantize_rows_kernel(const T* __restrict__ x, int64_t R, int K, uint8_t* __restrict__ q,
                                                                    float* __restrict__ scale) {
  constexpr int V = 16 / int(sizeof(T));  // elements a vector
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= R) return;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * K);
  const int nvec = K / V;
  AbsMax<T> am;
  for (int v = lane; v < nvec; v += 32) am.add(__ldg(xr + v));
  const float amax = AbsMax<T>::get(warp_abs_max<T>(am.m));
  if (lane == 0) scale[row] = row_scale(amax);
  const float inv_s = row_inv_scale(amax);
  uint8_t* qr = q + row * K;
  for (int v = lane; v < nvec; v += 32) store_e4m3<T>(qr + v * V, __ldg(xr + v), inv_s);
}

// h = round_T(GELU_tanh(x + bias)) quantized row by row as quantize_rows_kernel does; FAST takes
// GELU's sigmoid form with the hardware's exp2 (ops/cuda/gelu.cuh gelu_tanh_fast) instead of the
// accurate tanhf that bias_gelu uses, which FAST = false equals bit for bit.
// A block of blockDim.x threads owns a row at a time and walks the rows blockIdx.x, + gridDim.x, …
// (a persistent grid, as many blocks as fit on the GPU): thread t always handles the row's 16-byte
// vectors t, t + blockDim.x, … (at most NV), so it loads their biases once, into registers. The row
// is copied into shared memory by cp.async kStages − 1 rows ahead of the one being computed (each
// thread copies the vectors it will read itself, so the copies need no barrier), and the thread
// keeps its vectors of h, packed in T, in registers; the block reduces max |h| (warp shuffles, then
// one value a warp through shared memory) and writes the e4m3 bytes. One read of x and one fp8 write,
// against bias_gelu's read and write of h plus quantize_rows' two reads of it. The twentieth
// session's one-row-a-block kernel ran at 57 % of DRAM bandwidth (160 µs for DiT-XL/2's fc1 at
// batch 128): a block's loads, arithmetic and stores came in turn.
constexpr int kStages = 3;           // rows a block has in shared memory: the one computed and the next two in flight
constexpr int kRowThreadsMax = 512;  // threads a row at most (the launcher picks ≈ a sixth of the row's vectors)

template <typename T, int NV, bool FAST>
__global__ void __launch_bounds__(kRowThreadsMax) bias_gelu_quantize_rows_kernel(const T* __restrict__ x, const float* __restrict__ bias, int64_t R,
                                                                               int K, uint8_t* __restrict__ q, float* __restrict__ scale) {
  constexpr int V = 16 / int(sizeof(T));  // elements a vector
  extern __shared__ uint4 stage[];        // (kStages, nvec) rows of x
  __shared__ uint32_t warp_amax[2][kRowThreadsMax / 32];  // a warp's AbsMax word; two sets, by row parity: a fast warp never overwrites what a slow one reads
  const int nvec = K / V, nt = blockDim.x, nwarps = nt / 32;
  float bv[NV][V];  // the biases of this thread's vectors (16-byte loads: the bias is 16-byte aligned, quantize_fp8.cpp)
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int v = threadIdx.x + j * nt;
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      const float4 b4 = v < nvec ? __ldg(reinterpret_cast<const float4*>(bias + v * V + i)) : make_float4(0.f, 0.f, 0.f, 0.f);
      bv[j][i] = b4.x, bv[j][i + 1] = b4.y, bv[j][i + 2] = b4.z, bv[j][i + 3] = b4.w;
    }
  }
  auto copy_row = [&](int64_t row, int s) {  // start this thread's vectors of row into stage s (an empty group past the end)
    if (row < R) {
      const uint4* xr = reinterpret_cast<const uint4*>(x + row * K);
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        const int v = threadIdx.x + j * nt;
        if (v < nvec) cp_async<16>(stage + s * nvec + v, xr + v);
      }
    }
    cp_async_commit();
  };
  const int64_t first = blockIdx.x, step = gridDim.x;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) copy_row(first + s * step, s);
  int s = 0, parity = 0;
  for (int64_t row = first; row < R; row += step) {
    copy_row(row + (kStages - 1) * step, s == 0 ? kStages - 1 : s - 1);  // the stage this thread read last row
    cp_async_wait<kStages - 1>();                                          // this row's copies have landed
    uint4 h[NV];                                                           // h in T, packed as x is
    AbsMax<T> am;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int v = threadIdx.x + j * nt;
      if (v < nvec) {
        const uint4 raw = stage[s * nvec + v];
#pragma unroll
        for (int i = 0; i < kPairs<T>; ++i) {
          const float2 e = pair_at<T>(raw, i);
          const float u0 = e.x + bv[j][2 * i], u1 = e.y + bv[j][2 * i + 1];
          if constexpr (FAST) {
            set_pair<T>(h[j], i, nala::cuda_gelu::gelu_tanh_fast(u0), nala::cuda_gelu::gelu_tanh_fast(u1));
          } else {
            set_pair<T>(h[j], i, nala::cuda_gelu::gelu_tanh(u0), nala::cuda_gelu::gelu_tanh(u1));
          }
        }
        am.add(h[j]);
      }
    }
    const uint32_t wm = warp_abs_max<T>(am.m);
    if ((threadIdx.x & 31) == 0) warp_amax[parity][threadIdx.x >> 5] = wm;
    __syncthreads();
    const float amax = AbsMax<T>::get(warp_abs_max<T>((threadIdx.x & 31) < nwarps ? warp_amax[parity][threadIdx.x & 31] : 0u));  // 0: +0, neutral
    if (threadIdx.x == 0) scale[row] = row_scale(amax);
    const float inv_s = row_inv_scale(amax);
    uint8_t* qr = q + row * K;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int v = threadIdx.x + j * nt;
      if (v < nvec) store_e4m3<T>(qr + v * V, h[j], inv_s);
    }
    s = s == kStages - 1 ? 0 : s + 1;
    parity ^= 1;
  }
  cp_async_wait<0>();  // never leave a copy in flight (the groups past the end are empty)
}

// threads a row: ≈ a sixth of its 16-byte vectors in whole warps, 64 … 512. Six vectors a thread (48
// elements of a 16-bit row) spread a row's fixed work (its copies' issue, two reductions, the division
// for the scale) thinly: at three vectors it was ≈ 8 of ≈ 23 instructions an element (SASS, sm_90).
int row_threads(int nvec) { return std::min(kRowThreadsMax, std::max(64, (nvec + 6 * 32 - 1) / (6 * 32) * 32)); }

template <typename T, int NV>
void launch_bias_gelu_typed(const QuantizeRowsParams& p, const float* bias, bool fast, int threads, cudaStream_t st) {
  auto kernel = fast ? bias_gelu_quantize_rows_kernel<T, NV, true> : bias_gelu_quantize_rows_kernel<T, NV, false>;
  const size_t smem = size_t(kStages) * size_t(p.K) * sizeof(T);
  // the 48 KB a block gets without asking counts the static warp_amax too: 3 stages of a 16 KB row
  // (8,192 bf16) asked for exactly 48 KB of dynamic memory and the launch failed (2026-12-04);
  // persistent_blocks raises the limit
  const int fit = persistent_blocks(reinterpret_cast<const void*>(kernel), threads, smem, "bias_gelu_quantize_rows");
  if (fit < 1)
    throw std::runtime_error("bias_gelu_quantize_rows: a block of " + std::to_string(threads) + " threads and " + std::to_string(smem) +
                             " bytes of shared memory does not fit on this GPU");
  const int64_t blocks = std::min<int64_t>(p.R, fit);
  kernel<<<unsigned(blocks), threads, smem, st>>>(static_cast<const T*>(p.x), bias, p.R, p.K, p.q, p.scale);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel bias_gelu_quantize_rows failed to launch: ") + cudaGetErrorString(e));
}

template <typename T>
void launch_bias_gelu_by_width(const QuantizeRowsParams& p, const float* bias, bool fast, cudaStream_t st) {
  const int nvec = p.K / (16 / int(sizeof(T)));
  const int threads = row_threads(nvec);
  const int per_thread = (nvec + threads - 1) / threads;  // vectors a thread
  if (per_thread <= 1) return launch_bias_gelu_typed<T, 1>(p, bias, fast, threads, st);
  if (per_thread <= 2) return launch_bias_gelu_typed<T, 2>(p, bias, fast, threads, st);
  if (per_thread <= 3) return launch_bias_gelu_typed<T, 3>(p, bias, fast, threads, st);
  if (per_thread <= 4) return launch_bias_gelu_typed<T, 4>(p, bias, fast, threads, st);
  if (per_thread <= 6) return launch_bias_gelu_typed<T, 6>(p, bias, fast, threads, st);
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
