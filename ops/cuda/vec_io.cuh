// Small vectors of consecutive elements to and from float registers, and a warp sum: the loads and
// stores of the row kernels (attention/cuda/gated_tail_kernels.cu, ops/cuda/block_kernels.cu).
// load4/store4 move 4 elements (16 bytes of float, 8 of bf16/fp16: the pointer must be aligned to
// that); load2/store2 move 2.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace nala::cuda_vec {

// The vector index (of 4 channels) a lane's j-th registers hold in the row kernels (lane holds vectors
// lane + 32j), clamped to the row: a lane past the row's end re-reads its last vector (a valid address)
// and never sums or stores it. Loads with no branch around them can all be issued before the first
// result is used; with `if (c < D / 4)` and a switch on a vector's type around each, every vector's
// loads waited for the previous one's (one memory round trip a vector: 2.8 TB/s, 81 % of the time
// stalled on L1TEX; Nsight Compute, nineteenth session in docs/benchmarks.md).
__device__ __forceinline__ int clamped_vec(int lane, int j, int D4) { return min(lane + 32 * j, D4 - 1); }

__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
// Two bf16 packed in a word (low half first) as floats: a bf16 is a float's high 16 bits, so one
// shift or one mask a value (__bfloat1622float2 compiles to a byte permute and a shift for the high
// half); the same values.
__device__ __forceinline__ float2 unpack_bf16x2(unsigned w) { return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u)); }

// 4 values packed as T (round to nearest even), 2 a word, and back: the words load4/store4 move
__device__ __forceinline__ uint2 pack4(const float (&v)[4], __nv_bfloat16) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
  return make_uint2(*reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi));
}
__device__ __forceinline__ uint2 pack4(const float (&v)[4], __half) {
  const __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);
  return make_uint2(*reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi));
}
__device__ __forceinline__ void unpack4(uint2 w, float (&v)[4], __nv_bfloat16) {
  const float2 lo = unpack_bf16x2(w.x), hi = unpack_bf16x2(w.y);
  v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
}
__device__ __forceinline__ void unpack4(uint2 w, float (&v)[4], __half) {
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&w.x)), hi = __half22float2(*reinterpret_cast<const __half2*>(&w.y));
  v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
}

__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&v)[4]) { unpack4(*reinterpret_cast<const uint2*>(p), v, __nv_bfloat16{}); }
__device__ __forceinline__ void load4(const __half* p, float (&v)[4]) { unpack4(*reinterpret_cast<const uint2*>(p), v, __half{}); }
__device__ __forceinline__ void store4(float* p, const float (&v)[4]) { *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]); }
__device__ __forceinline__ void store4(__nv_bfloat16* p, const float (&v)[4]) { *reinterpret_cast<uint2*>(p) = pack4(v, __nv_bfloat16{}); }
__device__ __forceinline__ void store4(__half* p, const float (&v)[4]) { *reinterpret_cast<uint2*>(p) = pack4(v, __half{}); }

// v rounded to T (round to nearest even) and back in float, in place: what storing v as T and
// reading it again gives, one conversion a pair (not one a value and a shift each, as round_to)
__device__ __forceinline__ void round4(float (&)[4], float) {}
template <typename T>
__device__ __forceinline__ void round4(float (&v)[4], T t) { unpack4(pack4(v, t), v, t); }

// store4, and v replaced by what was stored (round4), from the same packed words
__device__ __forceinline__ void store4_rounded(float* p, float (&v)[4]) { store4(p, v); }
template <typename T>
__device__ __forceinline__ void store4_rounded(T* p, float (&v)[4]) {
  const uint2 w = pack4(v, T{});
  *reinterpret_cast<uint2*>(p) = w;
  unpack4(w, v, T{});
}

__device__ __forceinline__ float2 load2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) { return unpack_bf16x2(*reinterpret_cast<const unsigned*>(p)); }
__device__ __forceinline__ void store2(float* p, float2 v) { *reinterpret_cast<float2*>(p) = v; }
__device__ __forceinline__ void store2(__nv_bfloat16* p, float2 v) { *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v.x, v.y); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace nala::cuda_vec
