// Moving token tiles and states between global and shared memory for the fused NaLa kernels:
// prefetching tile loads (16-byte), row and tile stores, per-token warp sums, cp.async state copies.
#pragma once
#include "attention/cuda/kernel_traits.cuh"

namespace nala::attention::cuda {

// ---- tiles in and out of global memory ----------------------------------------------------------
// One token tile of x (rows t0 + t, t < TILE) in two steps, so the global loads of the next tile
// overlap the work on this one: fetch() issues the 16-byte loads into registers, commit() writes
// xs[t][j] = x[row][j] as fp32 (zeros for tokens at or past N and for pad columns up to Dp).
// Without 16-byte alignment (vec false: an odd view) commit() loads element by element instead.
template <typename T, int D, int TILE, int THREADS>
struct TileFetch {
  static constexpr int TPT = THREADS / TILE, V = 16 / sizeof(T), CH = (D / V + TPT - 1) / TPT;
  static constexpr int PADW = (D + 15) / 16 * 16;
  static_assert(D % V == 0, "16-byte rows");
  uint4 raw[CH];
  const T* src = nullptr;  // the token's row, or null past N

  // staged: the tile already copied to shared memory (rows of D, dense; this thread's own chunks,
  // landed: the one-pass kernels' stage_first_tile), read from there instead of global memory
  __device__ void fetch(const T* base, const int64_t* stride, int bh_b, int bh_h, int t0, int N, bool vec, const T* staged = nullptr) {
    const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
    const int n = t0 + t;
    src = n < N ? base + bh_b * stride[0] + bh_h * stride[1] + int64_t(n) * stride[2] : nullptr;
    if (!vec || src == nullptr) return;
    const T* from = staged != nullptr ? staged + t * D : src;
#pragma unroll
    for (int k = 0; k < CH; ++k) {
      const int c = lane + k * TPT;
      if (c < D / V) raw[k] = *reinterpret_cast<const uint4*>(from + c * V);
    }
  }
  template <int LD>
  __device__ void commit(float* xs, bool vec) const {
    const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
    float* row = xs + t * LD;
    if (src == nullptr) {
      for (int j = lane; j < PADW; j += TPT) row[j] = 0.f;
      return;
    }
    if (vec) {
#pragma unroll
      for (int k = 0; k < CH; ++k) {
        const int c = lane + k * TPT;
        if (c >= D / V) continue;
        const T* e = reinterpret_cast<const T*>(&raw[k]);
#pragma unroll
        for (int u = 0; u < V; u += 4)
          *reinterpret_cast<float4*>(row + c * V + u) = make_float4(to_f<T>(e[u]), to_f<T>(e[u + 1]), to_f<T>(e[u + 2]), to_f<T>(e[u + 3]));
      }
    } else {
      for (int j = lane; j < D; j += TPT) row[j] = to_f<T>(src[j]);
    }
    for (int j = D + lane; j < PADW; j += TPT) row[j] = 0.f;
  }
};

// dst[j] = row[j]·scale for j < D, by the TPT lanes of one token, in 16-byte stores (dst is a row of
// a contiguous (…, D) output that nala allocated: 16-byte aligned since D·sizeof(T) % 16 == 0;
// row is a 16-byte aligned shared-memory row).
template <typename T, int D, int TPT>
__device__ __forceinline__ void store_row(T* dst, const float* row, float scale) {
  constexpr int V = 16 / sizeof(T);
  static_assert(D % V == 0, "16-byte rows");
  const int lane = threadIdx.x % TPT;
  for (int c = lane; c < D / V; c += TPT) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int u = 0; u < V; u += 4) {
      const float4 x = *reinterpret_cast<const float4*>(row + c * V + u);
      e[u] = from_f<T>(x.x * scale);
      e[u + 1] = from_f<T>(x.y * scale);
      e[u + 2] = from_f<T>(x.z * scale);
      e[u + 3] = from_f<T>(x.w * scale);
    }
    *reinterpret_cast<uint4*>(dst + c * V) = raw;
  }
}

// out[(bh·N + t0 + t)·D + j] = ys[t][j] (scaled), for t < rows valid.
template <typename T, int D, int LD, int TILE, int THREADS>
__device__ __forceinline__ void store_tile(T* out, const float* ys, int bh, int t0, int N, float scale) {
  constexpr int TPT = THREADS / TILE;
  const int t = threadIdx.x / TPT;
  const int n = t0 + t;
  if (n >= N) return;
  store_row<T, D, TPT>(out + (int64_t(bh) * N + n) * D, ys + t * LD, scale);
}

// Sum over the TPT lanes of one token.
template <int TPT>
__device__ __forceinline__ float token_sum(float x) {
#pragma unroll
  for (int o = TPT / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}


__device__ __forceinline__ void cp_async16(const float* smem_dst, const float* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src));
}
// Waits for this thread's cp.async copies; a __syncthreads() after it publishes them to the block.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Starts copying a (Fp×Dp) fp32 state and its (Fp) vector of one (batch, head) into smem at s (ld)
// and zo, asynchronously (cp.async, 16-byte chunks; S, z, ld and the offsets are 16-byte aligned):
// the copy overlaps the first token tile's load and feature map. cp_async_wait_all() and a
// __syncthreads() must come before the first read.
template <int Fp, int Dp>
__device__ __forceinline__ void load_state(int s, int ld, int zo, const float* S, const float* z, int bh) {
  extern __shared__ float smem[];
  const float* src = S + int64_t(bh) * Fp * Dp;
  for (int i = threadIdx.x; i < Fp * Dp / 4; i += blockDim.x) {
    const int f = i / (Dp / 4), c = (i % (Dp / 4)) * 4;
    cp_async16(smem + s + f * ld + c, src + 4 * i);
  }
  for (int i = threadIdx.x; i < Fp / 4; i += blockDim.x) cp_async16(smem + zo + 4 * i, z + int64_t(bh) * Fp + 4 * i);
  asm volatile("cp.async.commit_group;\n" ::);
}

// Writes a warp-blocked (Fp×Dp) accumulator, times scale, to a row-major global state.
template <typename G, typename Acc>
__device__ __forceinline__ void store_state(const Acc& acc, float* out, int Dp, float scale) {
  G::for_each(acc, [&](int r, int c, float x) { out[r * Dp + c] = x * scale; });
}

}  // namespace nala::attention::cuda
