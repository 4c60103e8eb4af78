// Compile-time traits of the fused NaLa kernels: element conversions of the input dtypes and the
// Shape of one (head dim, feature count) instantiation: padding, warps, tokens per tile.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/cuda/nala_params.h"

namespace nala::attention::cuda {

template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Compile-time shape of one instantiation.
template <int D_, int FEAT_>
struct Shape {
  static constexpr int D = D_;
  static constexpr int F = FEAT_ * D_;                      // features per token
  static constexpr int Dp = (D_ + 15) / 16 * 16;            // D padded for 16-wide mma tiles
  static constexpr int Fp = (F + 15) / 16 * 16;
  static constexpr int WARPS = Dp * Fp > 64 * 128 ? 16 : 8; // more warps keep big accumulators in registers
  static constexpr int THREADS = WARPS * 32;
  static constexpr int TILE_STATE = Dp > 80 ? 32 : 64;       // tokens per tile, per kernel (shared memory budget)
  static constexpr int TILE_OUT = Dp > 80 ? 32 : 64;
  static constexpr int TILE_DQ = Dp > 80 ? 16 : 32;
  static constexpr int TILE_DKV = Dp > 80 ? 16 : 32;
  // resident blocks the state kernel is compiled for (its shared memory allows 3 at d = 64; the
  // register budget must too, or the next-tile prefetch would cost a block per SM)
  static constexpr int STATE_MIN_BLOCKS = WARPS == 8 && Dp == 64 ? 3 : 1;
};

}  // namespace nala::attention::cuda
