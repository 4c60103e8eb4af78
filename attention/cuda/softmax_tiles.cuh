// Shared pieces of nala's softmax attention kernels (softmax_fwd.cu, softmax_bwd.cu): tiles of bf16
// rows copied into shared memory by cp.async, and fp32 pairs packed as a bf16 mma operand register.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>

#include "ops/cuda/cp_async.cuh"

namespace nala::attention::cuda {

// rows [0, ROWS) of a (rows, D) bf16 matrix whose rows are `stride` elements apart into a tile with
// leading dimension ld, by 16-byte cp.async (this thread's share of THREADS); rows at or past `valid`
// are zero-filled, never read
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void copy_rows(__nv_bfloat16* tile, int ld, const __nv_bfloat16* src, int64_t stride, int valid) {
  constexpr int CH = D / 8;
  for (int i = threadIdx.x; i < ROWS * CH; i += THREADS) {
    const int r = i / CH, c = i - r * CH;
    const bool ok = r < valid;
    nala::cuda_async::cp_async_zfill16(tile + r * ld + 8 * c, ok ? src + int64_t(r) * stride + 8 * c : src, ok);
  }
}

// columns [D, DK) of `rows` tile rows (ld apart) set to zero: the pad of a k16-step product over D < DK
template <int D, int DK, int THREADS>
__device__ __forceinline__ void zero_pad_columns(__nv_bfloat16* tile, int ld, int rows) {
  static_assert(DK - D == 0 || DK - D == 8, "one 16-byte pad a row at most");
  if constexpr (DK > D)
    for (int r = threadIdx.x; r < rows; r += THREADS) *reinterpret_cast<uint4*>(tile + r * ld + D) = make_uint4(0, 0, 0, 0);
}

// two fp32 values as one register of a bf16 mma operand (the lower column in the low half)
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The A fragment (16 × 16, one k16 step) made of two adjacent n8 C fragments c0 (columns 0..7) and c1
// (columns 8..15), rounded to bf16: a product's result fed to the next product (p·v, pᵀ·dO, dsᵀ·q)
__device__ __forceinline__ void c_to_a(const float (&c0)[4], const float (&c1)[4], uint32_t (&a)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]), a[1] = pack_bf16(c0[2], c0[3]), a[2] = pack_bf16(c1[0], c1[1]), a[3] = pack_bf16(c1[2], c1[3]);
}

}  // namespace nala::attention::cuda
