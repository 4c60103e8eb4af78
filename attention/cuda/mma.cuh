// Tensor-core helpers of the fused NaLa kernels: mma.sync m16n8k8 tf32 products from shared memory,
// register-blocked per warp (WarpGemm), and the leading dimensions that avoid bank conflicts.
#pragma once
#include <mma.h>

#include "attention/cuda/kernel_traits.cuh"

namespace nala::attention::cuda {

using namespace nvcuda;

// ---- tensor-core helpers ------------------------------------------------------------------------
// Products use mma.sync m16n8k8 tf32 with fp32 accumulation, operands read from the dynamic
// shared memory smem[] by float offsets (so the loads are LDS, never generic loads). Fragment
// layouts (PTX ISA, "Matrix fragments for mma.m16n8k8", .tf32), with g = lane / 4, t = lane % 4:
//   A (16×8):  a0 = A(g, t), a1 = A(g+8, t), a2 = A(g, t+4), a3 = A(g+8, t+4)
//   B (8×8):   b0 = B(t, g), b1 = B(t+4, g)
//   C (16×8):  c0 = C(g, 2t), c1 = C(g, 2t+1), c2 = C(g+8, 2t), c3 = C(g+8, 2t+1)
// Bank conflicts: a row-major read (element (r, c) at r·ld + c, lanes spread over r by g) is
// conflict-free when ld % 8 == 4; a column-major read (lanes spread over the contiguous index by g)
// when ld % 16 == 8. Each tile's leading dimension is chosen for the way it is read most.
constexpr int ld_row(int x) { return (x + 3) / 8 * 8 + 4; }    // smallest ≥ x with ld % 8 == 4
constexpr int ld_col(int x) { return (x + 7) / 16 * 16 + 8; }  // smallest ≥ x with ld % 16 == 8

__device__ __forceinline__ float tf32(float x) { return wmma::__float_to_tf32(x); }

__device__ __forceinline__ void mma_tf32(float (&c)[4], const float (&a)[4], const float (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])), "r"(__float_as_uint(a[3])),
        "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
}

// How the 16×16 output tiles of an (MT·16)×(NT·16) product are dealt to the warps: each warp owns
// one MW×NW block of tiles (register blocking: per k-step it loads MW A and 2·NW B fragments for
// MW·NW·2 products). The block is the smallest that lets at most WARPS warps cover the product,
// ties broken by fewer fragment loads.
struct Blocking {
  int mw, nw;
};
constexpr Blocking choose_blocking(int MT, int NT, int warps) {
  Blocking best{MT, NT};
  int best_tiles = MT * NT + 1, best_loads = MT + NT + 1;
  for (int mw = 1; mw <= MT; ++mw)
    for (int nw = 1; nw <= NT; ++nw) {
      const int blocks = ((MT + mw - 1) / mw) * ((NT + nw - 1) / nw);
      if (blocks > warps) continue;
      if (mw * nw < best_tiles || (mw * nw == best_tiles && mw + nw < best_loads)) {
        best = {mw, nw};
        best_tiles = mw * nw;
        best_loads = mw + nw;
      }
    }
  return best;
}

// One warp's share of C (M×N) = A (M×K) · B (K×N). A_COL: A(m, k) at A[k·lda + m], else
// A[m·lda + k]; B_COL: B(k, n) at B[n·ldb + k], else B[k·ldb + n]. SPLIT: each operand is split
// into a tf32 high part and a tf32 residual (a·b ≈ ah·bh + ah·bl + al·bh): fp32-class products.
template <int M, int N, int K, bool A_COL, bool B_COL, bool SPLIT, int WARPS>
struct WarpGemm {
  static constexpr int MT = M / 16, NT = N / 16;
  static constexpr Blocking BL = choose_blocking(MT, NT, WARPS);
  static constexpr int MW = BL.mw, NW = BL.nw, BLOCKS_N = (NT + NW - 1) / NW;
  static constexpr int BLOCKS = ((MT + MW - 1) / MW) * BLOCKS_N;
  static_assert(M % 16 == 0 && N % 16 == 0 && K % 8 == 0, "mma tiles");
  using Acc = float[MW][2 * NW][4];

  __device__ static void zero(Acc& c) {
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
      for (int j = 0; j < 2 * NW; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[i][j][e] = 0.f;
  }
  __device__ static bool active() { return int(threadIdx.x / 32) < BLOCKS; }
  __device__ static int m_tile0() { return int(threadIdx.x / 32) / BLOCKS_N * MW; }
  __device__ static int n_tile0() { return int(threadIdx.x / 32) % BLOCKS_N * NW; }

  // c += A · B over this warp's block; a, b: float offsets into smem[].
  __device__ static void accumulate(Acc& c, int a, int lda, int b, int ldb) {
    extern __shared__ float smem[];
    if (!active()) return;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int mt0 = m_tile0(), nt0 = n_tile0();
#pragma unroll 2
    for (int k0 = 0; k0 < K; k0 += 8) {
      float af[MW][4], bf[2 * NW][2];
#pragma unroll
      for (int i = 0; i < MW; ++i) {
        if (mt0 + i >= MT) continue;
        const int m = (mt0 + i) * 16 + g;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int mm = m + (e & 1) * 8, kk = k0 + t + (e >> 1) * 4;
          af[i][e] = smem[a + (A_COL ? kk * lda + mm : mm * lda + kk)];
        }
      }
#pragma unroll
      for (int j = 0; j < 2 * NW; ++j) {
        if (nt0 + j / 2 >= NT) continue;
        const int n = nt0 * 16 + j * 8 + g;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int kk = k0 + t + e * 4;
          bf[j][e] = smem[b + (B_COL ? n * ldb + kk : kk * ldb + n)];
        }
      }
      if constexpr (SPLIT) {
        float al[MW][4], bl[2 * NW][2];
#pragma unroll
        for (int i = 0; i < MW; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float h = tf32(af[i][e]);
            al[i][e] = tf32(af[i][e] - h);
            af[i][e] = h;
          }
#pragma unroll
        for (int j = 0; j < 2 * NW; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float h = tf32(bf[j][e]);
            bl[j][e] = tf32(bf[j][e] - h);
            bf[j][e] = h;
          }
#pragma unroll
        for (int i = 0; i < MW; ++i)
#pragma unroll
          for (int j = 0; j < 2 * NW; ++j)
            if (mt0 + i < MT && nt0 + j / 2 < NT) {
              mma_tf32(c[i][j], af[i], bl[j]);
              mma_tf32(c[i][j], al[i], bf[j]);
            }
      } else {
#pragma unroll
        for (int i = 0; i < MW; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) af[i][e] = tf32(af[i][e]);
#pragma unroll
        for (int j = 0; j < 2 * NW; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) bf[j][e] = tf32(bf[j][e]);
      }
#pragma unroll
      for (int i = 0; i < MW; ++i)
#pragma unroll
        for (int j = 0; j < 2 * NW; ++j)
          if (mt0 + i < MT && nt0 + j / 2 < NT) mma_tf32(c[i][j], af[i], bf[j]);
    }
  }

  // Visits every element of this warp's block: f(row, col, value) with (row, col) < (M, N).
  template <typename Fn>
  __device__ static void for_each(const Acc& c, Fn f) {
    if (!active()) return;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int mt0 = m_tile0(), nt0 = n_tile0();
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
      for (int j = 0; j < 2 * NW; ++j)
        if (mt0 + i < MT && nt0 + j / 2 < NT)
#pragma unroll
          for (int e = 0; e < 4; ++e) f((mt0 + i) * 16 + g + (e >> 1) * 8, nt0 * 16 + j * 8 + 2 * t + (e & 1), c[i][j][e]);
  }

  // smem[cout + row·ldc + col] = A · B (the whole product; every warp of the block calls it).
  __device__ static void to_smem(int a, int lda, int b, int ldb, int cout, int ldc) {
    extern __shared__ float smem[];
    Acc c;
    zero(c);
    accumulate(c, a, lda, b, ldb);
    for_each(c, [&](int r, int col, float x) { smem[cout + r * ldc + col] = x; });
  }
};

}  // namespace nala::attention::cuda
