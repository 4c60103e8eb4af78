// Fused NaLa attention kernels (NALA_SPEC.md §3-§4), device code only. Included by the per-dtype
// instantiation files; nala_launch.cu picks the instantiation; nala_cuda.cpp checks arguments.
//
// Algorithm. Per (batch, head) the state is S = (1/N) Σ_i φ_k(k_i) v_iᵀ (F×Dp) and z (F):
//   forward   state_kernel    token tiles of k, v -> φ_k in shared memory -> S, z partials per
//                             sequence chunk (tensor-core tf32 mma, fp32 accumulate)
//             reduce_kernel   partials summed in chunk order (deterministic), times 1/N
//             output_kernel   token tiles of q -> φ_q -> o = φ_q S / (φ_q·z + ε); saves den per token
//   backward  dq_kernel       g = do/den; dφ_q = g Sᵀ − c z with c_t = φ_q,t·(g Sᵀ)_t / den_t
//                             (= do_t·o_t / den_t); dq through φ_q's backward; partials of
//                             dS = Σ φ_qᵀ g and dz = −Σ φ_q c
//             reduce_kernel   dS, dz summed in chunk order
//             dkv_kernel      dv = φ_k dS / N; dφ_k = (v dSᵀ + dz) / N; dk through φ_k's backward
// Nothing O(N²) exists; the only saved tensors are S, z and den.
//
// Layouts: every shared-memory tile is fp32 row-major with a padded leading dimension chosen
// against bank conflicts for the way the products read it (ld_row / ld_col). Token t of a tile is
// handled by TPT = threads / tile consecutive lanes (element j = lane + TPT·i), so per-token
// reductions are warp shuffles. Matrix products use mma.sync m16n8k8 tf32, register-blocked per
// warp; with SPLIT each operand is split into a tf32 high part and a tf32 residual
// (a·b ≈ ah·bh + ah·bl + al·bh), which brings fp32/fp16 inputs to fp32-class accuracy; bf16 inputs
// use plain tf32, whose error is below bf16's output rounding.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "attention/cuda/nala_params.h"

namespace nala::attention::cuda {

using namespace nvcuda;

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

  __device__ void fetch(const T* base, const int64_t* stride, int bh_b, int bh_h, int t0, int N, bool vec) {
    const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
    const int n = t0 + t;
    src = n < N ? base + bh_b * stride[0] + bh_h * stride[1] + int64_t(n) * stride[2] : nullptr;
    if (!vec || src == nullptr) return;
#pragma unroll
    for (int k = 0; k < CH; ++k) {
      const int c = lane + k * TPT;
      if (c < D / V) raw[k] = *reinterpret_cast<const uint4*>(src + c * V);
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

// ---- feature maps, element-parallel (the same formulas as attention/feature_map_math.h) -----------
struct TokenStats {
  float inv, p, tn, n;  // 1/max(n, ε_n), power, tanh n, n
  float nr, nrp;        // focused: ‖relu x‖, ‖relu(x)^P‖
};

// Transcendentals: fast intrinsics for bf16 inputs (their error is far below bf16 rounding),
// accurate libm versions for fp32/fp16 (FAST = false), so fp32 stays at fp32-class accuracy.
template <bool FAST> __device__ __forceinline__ float f_exp(float x) { return FAST ? __expf(x) : expf(x); }
template <bool FAST> __device__ __forceinline__ float f_log(float x) { return FAST ? __logf(x) : logf(x); }
template <bool FAST> __device__ __forceinline__ void f_sincos(float x, float* s, float* c) {
  if (FAST) __sincosf(x, s, c); else sincosf(x, s, c);
}
template <bool FAST> __device__ __forceinline__ float f_tanh(float x) {
  if (!FAST) return tanhf(x);
  float y;  // max relative error 2^-10.99 (PTX ISA), far below bf16 rounding
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// b^e for b > 0, else 0
template <bool FAST> __device__ __forceinline__ float pow_pos(float b, float e) {
  if (FAST) return b > 0.f ? ex2_approx(e * lg2_approx(b)) : 0.f;
  return b > 0.f ? expf(e * logf(b)) : 0.f;
}

template <int D, int LD, int TPT, bool FAST>
__device__ __forceinline__ TokenStats token_stats(const float* xrow, const NalaKernelParams& P, bool query) {
  const int lane = threadIdx.x % TPT;
  float s = 0.f, r2 = 0.f, rp2 = 0.f;
  for (int j = lane; j < D; j += TPT) {
    const float x = xrow[j];
    s += x * x;
    if (P.map == 4) {
      const float r = fmaxf(x, 0.f), rp = pow_pos<FAST>(r, P.focus_power);
      r2 += r * r;
      rp2 += rp * rp;
    }
  }
  TokenStats st;
  st.n = sqrtf(token_sum<TPT>(s));
  st.inv = 1.f / fmaxf(st.n, P.eps_norm);
  st.tn = tanhf(st.n);
  st.p = query ? P.lambda * (P.tau + st.tn) : P.lambda;
  if (P.map == 4) {
    st.nr = sqrtf(token_sum<TPT>(r2));
    st.nrp = sqrtf(token_sum<TPT>(rp2));
  }
  return st;
}

// phi[t][·] of every token of a tile; rows past N are zero (they must not enter z).
template <int D, int FEAT, int LDX, int LDF, int TILE, int THREADS, bool FAST>
__device__ __forceinline__ void features_forward(const float* xs, float* phi, const NalaKernelParams& P, bool query, int t0) {
  constexpr int TPT = THREADS / TILE;
  constexpr int Fp = (FEAT * D + 15) / 16 * 16;
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  const float* x = xs + t * LDX;
  float* out = phi + t * LDF;
  const TokenStats st = token_stats<D, LDX, TPT, FAST>(x, P, query);
  const bool valid = t0 + t < P.N;
  for (int j = lane; j < D; j += TPT) {
    const float xj = x[j];
    float f0 = 0.f, f1 = 0.f;
    if (P.map == 2) {
      f0 = xj > 0.f ? xj + 1.f : f_exp<FAST>(xj);
    } else if (P.map == 3) {
      f0 = fmaxf(xj, 0.f);
    } else if (P.map == 4) {
      f0 = pow_pos<FAST>(fmaxf(xj, 0.f), P.focus_power) * (st.nr / fmaxf(st.nrp, 1e-12f));
    } else {
      const float xh = xj * st.inv;
      const float sg = query ? xh : xj;
      const float a = pow_pos<FAST>(fabsf(sg), st.p);
      if (P.map == 1) {
        f0 = sg > 0.f ? a : 0.f;
        f1 = sg < 0.f ? a : 0.f;
      } else {
        float sn, cs;
        f_sincos<FAST>(0.78539816f * f_tanh<FAST>(P.alpha * xh), &sn, &cs);
        f0 = a * cs;
        f1 = a * sn;
      }
    }
    out[j] = valid ? f0 : 0.f;
    if (FEAT == 2) out[D + j] = valid ? f1 : 0.f;
  }
  for (int j = FEAT * D + lane; j < Fp; j += TPT) out[j] = 0.f;
}

// nala / nala-relu part of features_backward: g[j] (j < D) becomes ∂L/∂x_j.
template <int D, int TPT, bool FAST>
__device__ __forceinline__ void features_backward_nala(const float* x, float* g, const TokenStats& st, const NalaKernelParams& P,
                                                       bool query) {
  const int lane = threadIdx.x % TPT;
  // first pass ∂L/∂x̂ (kept in g[j]) and the direct key-power term (in g[D+j])
  float dot = 0.f, gp = 0.f;
  for (int j = lane; j < D; j += TPT) {
    const float xj = x[j], xh = xj * st.inv;
    const float sg = query ? xh : xj;
    const float base = fabsf(sg);
    const float a = pow_pos<FAST>(base, st.p);
    const float g0 = g[j], g1 = g[D + j];
    float dA, gxh = 0.f;
    if (P.map == 1) {
      dA = sg > 0.f ? g0 : (sg < 0.f ? g1 : 0.f);
    } else {
      const float tt = f_tanh<FAST>(P.alpha * xh);
      float sn, cs;
      f_sincos<FAST>(0.78539816f * tt, &sn, &cs);
      dA = g0 * cs + g1 * sn;
      gxh = a * (g1 * cs - g0 * sn) * 0.78539816f * P.alpha * (1.f - tt * tt);
    }
    const float a_over_base = FAST ? __fdividef(a, base) : a / base;  // |s|^(p-1)
    const float dpow = base > 0.f ? dA * st.p * a_over_base * (sg > 0.f ? 1.f : -1.f) : 0.f;
    float direct = 0.f;
    if (query) {
      gxh += dpow;
      if (base > 0.f) gp += dA * a * f_log<FAST>(base);
    } else {
      direct = dpow;
    }
    g[j] = gxh;
    g[D + j] = direct;
    dot += xh * gxh;
  }
  dot = token_sum<TPT>(dot);
  gp = token_sum<TPT>(gp);
  const float gn = query ? gp * P.lambda * (1.f - st.tn * st.tn) : 0.f;
  const bool above = st.n > P.eps_norm;
  for (int j = lane; j < D; j += TPT) {
    const float xj = x[j], xh = xj * st.inv;
    const float v = above ? (g[j] - xh * dot) * st.inv + gn * xh : g[j] * st.inv + (st.n > 0.f ? gn * xj / st.n : 0.f);
    g[j] = v + g[D + j];
  }
}

// dx[t][j] from g = ∂L/∂φ (gphi[t][·]); written to global `out` (dtype T, contiguous (B·H, N, D))
// for the tokens t0 + t < n_end.
template <typename T, int D, int FEAT, int LDX, int LDF, int TILE, int THREADS, bool FAST>
__device__ __forceinline__ void features_backward(const float* xs, float* gphi, const NalaKernelParams& P, bool query, T* out, int bh,
                                                  int t0, int n_end) {
  constexpr int TPT = THREADS / TILE;
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  const float* x = xs + t * LDX;
  float* g = gphi + t * LDF;
  const TokenStats st = token_stats<D, LDX, TPT, FAST>(x, P, query);
  const int n = t0 + t;
  // dx of the token overwrites g[0..D) (each element by the lane that read it), then the token's
  // lanes store the row with 16-byte stores
  if (P.map == 2 || P.map == 3) {
    for (int j = lane; j < D; j += TPT) {
      const float xj = x[j];
      g[j] = P.map == 2 ? g[j] * (xj > 0.f ? 1.f : f_exp<FAST>(xj)) : (xj > 0.f ? g[j] : 0.f);
    }
  } else if (P.map == 4) {
    const float pw = P.focus_power;
    float G = 0.f;
    for (int j = lane; j < D; j += TPT) G += g[j] * pow_pos<FAST>(fmaxf(x[j], 0.f), pw);
    G = token_sum<TPT>(G);
    const bool clamped = !(st.nrp > 1e-12f);
    const float Dn = clamped ? 1e-12f : st.nrp, s = st.nr / Dn;
    for (int j = lane; j < D; j += TPT) {
      const float r = fmaxf(x[j], 0.f);
      float v = 0.f;
      if (r > 0.f) {
        const float rp = pow_pos<FAST>(r, pw), drp = pw * rp / r;
        float ds = (st.nr > 0.f ? r / st.nr : 0.f) / Dn;
        if (!clamped) ds -= st.nr / (Dn * Dn) * (rp * drp / st.nrp);
        v = g[j] * s * drp + G * ds;
      }
      g[j] = v;
    }
  } else {
    features_backward_nala<D, TPT, FAST>(x, g, st, P, query);
  }
  __syncwarp();
  if (n < n_end) store_row<T, D, TPT>(out + (int64_t(bh) * P.N + n) * D, g, 1.f);
}

// ---- kernels ------------------------------------------------------------------------------------
// Each kernel's shared-memory layout (float offsets into smem[], leading dimensions chosen for the
// way each tile is read by the products; see ld_row / ld_col).

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

template <int D, int FEAT>
struct StateLayout {
  using S = Shape<D, FEAT>;
  static constexpr int TILE = S::TILE_STATE;
  static constexpr int LDX = ld_row(S::Dp), LDP = ld_col(S::Fp), LDV = ld_col(S::Dp);
  static constexpr int XS = 0, PHI = XS + TILE * LDX, VS = PHI + TILE * LDP, FLOATS = VS + TILE * LDV;
  using G = WarpGemm<S::Fp, S::Dp, TILE, true, false, false, S::WARPS>;  // S += φ_kᵀ V (SPLIT set per use)
};
template <int D, int FEAT>
constexpr int state_smem_floats() { return StateLayout<D, FEAT>::FLOATS; }

template <typename T, int D, int FEAT, bool SPLIT>
__global__ void __launch_bounds__(Shape<D, FEAT>::THREADS, Shape<D, FEAT>::STATE_MIN_BLOCKS) state_kernel(const NalaKernelParams P) {
  using S = Shape<D, FEAT>;
  using L = StateLayout<D, FEAT>;
  using G = WarpGemm<S::Fp, S::Dp, L::TILE, true, false, SPLIT, S::WARPS>;
  constexpr int TILE = L::TILE;
  extern __shared__ float smem[];
  float* xs = smem + L::XS;
  float* phi = smem + L::PHI;
  float* vs = smem + L::VS;
  const int bh = blockIdx.y, b = bh / P.H, h = bh % P.H, chunk = blockIdx.x;
  const int begin = chunk * P.tokens_per_chunk, end = min(P.N, begin + P.tokens_per_chunk);
  typename G::Acc acc;
  G::zero(acc);
  float zacc = 0.f;  // thread f < F accumulates z_f
  const T* kp = static_cast<const T*>(P.k);
  const T* vp = static_cast<const T*>(P.v);
  TileFetch<T, D, TILE, S::THREADS> fk, fv;
  fk.fetch(kp, P.k_stride, b, h, begin, end, P.vec_loads);
  fv.fetch(vp, P.v_stride, b, h, begin, end, P.vec_loads);
  for (int t0 = begin; t0 < end; t0 += TILE) {
    fk.template commit<L::LDX>(xs, P.vec_loads);
    fv.template commit<L::LDV>(vs, P.vec_loads);
    if (t0 + TILE < end) {  // the next tile's loads fly while this one is worked on
      fk.fetch(kp, P.k_stride, b, h, t0 + TILE, end, P.vec_loads);
      fv.fetch(vp, P.v_stride, b, h, t0 + TILE, end, P.vec_loads);
    }
    __syncthreads();
    NalaKernelParams Q = P;
    Q.N = end;  // rows past this chunk's end are zero
    features_forward<D, FEAT, L::LDX, L::LDP, TILE, S::THREADS, !SPLIT>(xs, phi, Q, false, t0);
    __syncthreads();
    G::accumulate(acc, L::PHI, L::LDP, L::VS, L::LDV);  // S_part (Fp×Dp) += φ_kᵀ (Fp×TILE) · V (TILE×Dp)
    if (threadIdx.x < S::Fp)
      for (int t = 0; t < TILE; ++t) zacc += phi[t * L::LDP + threadIdx.x];
    __syncthreads();
  }
  // write the partial (or, with one chunk, the final scaled state)
  const bool final = P.chunks == 1;
  float* Sout = final ? P.S + int64_t(bh) * S::Fp * S::Dp : P.S_part + (int64_t(bh) * P.chunks + chunk) * S::Fp * S::Dp;
  float* zout = final ? P.z + int64_t(bh) * S::Fp : P.z_part + (int64_t(bh) * P.chunks + chunk) * S::Fp;
  const float scale = final ? P.inv_n : 1.f;
  store_state<G>(acc, Sout, S::Dp, scale);
  if (threadIdx.x < S::Fp) zout[threadIdx.x] = zacc * scale;
}

// out[bh][i] = scale · Σ_c part[bh][c][i], c in order (deterministic).
static __global__ void reduce_chunks_kernel(const float* part, float* out, int chunks, int per_bh, float scale) {
  const int bh = blockIdx.y;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < per_bh; i += gridDim.x * blockDim.x) {
    const float* p = part + int64_t(bh) * chunks * per_bh + i;
    float s = 0.f;
    for (int c = 0; c < chunks; ++c) s += p[int64_t(c) * per_bh];
    out[int64_t(bh) * per_bh + i] = s * scale;
  }
}

template <int D, int FEAT>
struct OutLayout {
  using S = Shape<D, FEAT>;
  static constexpr int TILE = S::TILE_OUT;
  static constexpr int LDS_ = ld_col(S::Dp), LDX = ld_row(S::Dp), LDP = ld_row(S::Fp), LDO = ld_col(S::Dp);
  static constexpr int SS = 0, ZS = SS + S::Fp * LDS_, XS = ZS + S::Fp, PHI = XS + TILE * LDX, OS = PHI + TILE * LDP,
                       FLOATS = OS + TILE * LDO;
};
template <int D, int FEAT>
constexpr int out_smem_floats() { return OutLayout<D, FEAT>::FLOATS; }

template <typename T, int D, int FEAT, bool SPLIT>
__global__ void __launch_bounds__(Shape<D, FEAT>::THREADS) output_kernel(const NalaKernelParams P) {
  using S = Shape<D, FEAT>;
  using L = OutLayout<D, FEAT>;
  constexpr int TILE = L::TILE, TPT = S::THREADS / TILE;
  extern __shared__ float smem[];
  const float* zs = smem + L::ZS;
  float* xs = smem + L::XS;
  float* phi = smem + L::PHI;
  const float* os = smem + L::OS;
  const int bh = blockIdx.y, b = bh / P.H, h = bh % P.H;
  const int begin = blockIdx.x * P.out_tokens_per_chunk, end = min(P.N, begin + P.out_tokens_per_chunk);
  load_state<S::Fp, S::Dp>(L::SS, L::LDS_, L::ZS, P.S, P.z, bh);
  const T* qp = static_cast<const T*>(P.q);
  TileFetch<T, D, TILE, S::THREADS> fq;
  fq.fetch(qp, P.q_stride, b, h, begin, end, P.vec_loads);
  for (int t0 = begin; t0 < end; t0 += TILE) {
    fq.template commit<L::LDX>(xs, P.vec_loads);
    if (t0 + TILE < end) fq.fetch(qp, P.q_stride, b, h, t0 + TILE, end, P.vec_loads);
    __syncthreads();
    features_forward<D, FEAT, L::LDX, L::LDP, TILE, S::THREADS, !SPLIT>(xs, phi, P, true, t0);
    cp_async_wait_all();  // the state (a no-op after the first tile)
    __syncthreads();
    WarpGemm<TILE, S::Dp, S::Fp, false, false, SPLIT, S::WARPS>::to_smem(L::PHI, L::LDP, L::SS, L::LDS_, L::OS, L::LDO);  // φ_q S
    // den_t = φ_q,t·z + ε, fp32
    const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
    float part = 0.f;
    for (int f = lane; f < S::F; f += TPT) part += phi[t * L::LDP + f] * zs[f];
    const float den = token_sum<TPT>(part) + P.eps;
    __syncthreads();
    if (t0 + t < end && lane == 0) P.den[int64_t(bh) * P.N + t0 + t] = den;
    if (t0 + t < end) store_row<T, D, TPT>(static_cast<T*>(P.o) + (int64_t(bh) * P.N + t0 + t) * D, os + t * L::LDO, 1.f / den);
    __syncthreads();
  }
  cp_async_wait_all();  // never leave a copy in flight (a block always has tokens; kept for safety)
}

template <int D, int FEAT>
struct DqLayout {
  using S = Shape<D, FEAT>;
  static constexpr int TILE = S::TILE_DQ;
  static constexpr int LDS_ = ld_row(S::Dp), LDX = ld_row(S::Dp), LDP = ld_col(S::Fp), LDG = ld_col(S::Dp), LDDP = ld_col(S::Fp);
  static constexpr int SS = 0, ZS = SS + S::Fp * LDS_, XS = ZS + S::Fp, PHI = XS + TILE * LDX, GS = PHI + TILE * LDP,
                       DPHI = GS + TILE * LDG, CS = DPHI + TILE * LDDP, FLOATS = CS + TILE;
};
template <int D, int FEAT>
constexpr int dq_smem_floats() { return DqLayout<D, FEAT>::FLOATS; }

template <typename T, int D, int FEAT, bool SPLIT>
__global__ void __launch_bounds__(Shape<D, FEAT>::THREADS) dq_kernel(const NalaKernelParams P) {
  using S = Shape<D, FEAT>;
  using L = DqLayout<D, FEAT>;
  using G = WarpGemm<S::Fp, S::Dp, L::TILE, true, false, SPLIT, S::WARPS>;  // dS += φ_qᵀ g
  constexpr int TILE = L::TILE, TPT = S::THREADS / TILE;
  extern __shared__ float smem[];
  const float* zs = smem + L::ZS;
  float* xs = smem + L::XS;
  float* phi = smem + L::PHI;
  float* gs = smem + L::GS;
  float* dphi = smem + L::DPHI;
  float* cs = smem + L::CS;
  const int bh = blockIdx.y, b = bh / P.H, h = bh % P.H, chunk = blockIdx.x;
  const int begin = chunk * P.tokens_per_chunk, end = min(P.N, begin + P.tokens_per_chunk);
  load_state<S::Fp, S::Dp>(L::SS, L::LDS_, L::ZS, P.S, P.z, bh);
  typename G::Acc acc;
  G::zero(acc);
  float dzacc = 0.f;
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  const T* qp = static_cast<const T*>(P.q);
  const T* gp = static_cast<const T*>(P.grad_o);
  const float* denp = P.den + int64_t(bh) * P.N;
  TileFetch<T, D, TILE, S::THREADS> fq, fg;
  fq.fetch(qp, P.q_stride, b, h, begin, end, P.vec_loads);
  fg.fetch(gp, P.go_stride, b, h, begin, end, P.vec_loads);
  float den_next = begin + t < end ? denp[begin + t] : 1.f;
  for (int t0 = begin; t0 < end; t0 += TILE) {
    fq.template commit<L::LDX>(xs, P.vec_loads);
    fg.template commit<L::LDG>(gs, P.vec_loads);
    const float den = den_next;
    if (t0 + TILE < end) {  // the next tile's loads fly while this one is worked on
      fq.fetch(qp, P.q_stride, b, h, t0 + TILE, end, P.vec_loads);
      fg.fetch(gp, P.go_stride, b, h, t0 + TILE, end, P.vec_loads);
      den_next = t0 + TILE + t < end ? denp[t0 + TILE + t] : 1.f;
    }
    __syncthreads();
    NalaKernelParams Q = P;
    Q.N = end;
    features_forward<D, FEAT, L::LDX, L::LDP, TILE, S::THREADS, !SPLIT>(xs, phi, Q, true, t0);
    const float inv_den = t0 + t < end ? 1.f / den : 0.f;
    for (int j = lane; j < S::Dp; j += TPT) gs[t * L::LDG + j] *= inv_den;  // g = do / den
    cp_async_wait_all();  // the state (a no-op after the first tile)
    __syncthreads();
    WarpGemm<TILE, S::Fp, S::Dp, false, true, SPLIT, S::WARPS>::to_smem(L::GS, L::LDG, L::SS, L::LDS_, L::DPHI, L::LDDP);  // g Sᵀ
    __syncthreads();
    float part = 0.f;
    for (int f = lane; f < S::F; f += TPT) part += phi[t * L::LDP + f] * dphi[t * L::LDDP + f];
    const float c = token_sum<TPT>(part) * inv_den;  // do·o / den
    if (lane == 0) cs[t] = c;
    for (int f = lane; f < S::Fp; f += TPT) dphi[t * L::LDDP + f] -= c * zs[f];
    __syncthreads();
    // dS (Fp×Dp) += φ_qᵀ g;  dz_f −= Σ_t φ_q[t][f] c_t
    G::accumulate(acc, L::PHI, L::LDP, L::GS, L::LDG);
    if (threadIdx.x < S::Fp)
      for (int r = 0; r < TILE; ++r) dzacc -= phi[r * L::LDP + threadIdx.x] * cs[r];
    features_backward<T, D, FEAT, L::LDX, L::LDDP, TILE, S::THREADS, !SPLIT>(xs, dphi, P, true, static_cast<T*>(P.dq), bh, t0, end);
    __syncthreads();
  }
  cp_async_wait_all();
  const bool final = P.chunks == 1;
  float* Sout = final ? P.dS + int64_t(bh) * S::Fp * S::Dp : P.S_part + (int64_t(bh) * P.chunks + chunk) * S::Fp * S::Dp;
  float* zout = final ? P.dz + int64_t(bh) * S::Fp : P.z_part + (int64_t(bh) * P.chunks + chunk) * S::Fp;
  store_state<G>(acc, Sout, S::Dp, 1.f);
  if (threadIdx.x < S::Fp) zout[threadIdx.x] = dzacc;
}

template <int D, int FEAT>
struct DkvLayout {
  using S = Shape<D, FEAT>;
  static constexpr int TILE = S::TILE_DKV;
  static constexpr int LDS_ = ld_col(S::Dp), LDX = ld_row(S::Dp), LDP = ld_row(S::Fp), LDV = ld_row(S::Dp), LDDV = ld_col(S::Dp),
                       LDDP = ld_col(S::Fp);
  static constexpr int SS = 0, ZS = SS + S::Fp * LDS_, XS = ZS + S::Fp, PHI = XS + TILE * LDX, VS = PHI + TILE * LDP,
                       DVS = VS + TILE * LDV, DPHI = DVS + TILE * LDDV, FLOATS = DPHI + TILE * LDDP;
};
template <int D, int FEAT>
constexpr int dkv_smem_floats() { return DkvLayout<D, FEAT>::FLOATS; }

template <typename T, int D, int FEAT, bool SPLIT>
__global__ void __launch_bounds__(Shape<D, FEAT>::THREADS) dkv_kernel(const NalaKernelParams P) {
  using S = Shape<D, FEAT>;
  using L = DkvLayout<D, FEAT>;
  constexpr int TILE = L::TILE, TPT = S::THREADS / TILE;
  extern __shared__ float smem[];
  const float* dzs = smem + L::ZS;
  float* xs = smem + L::XS;
  float* phi = smem + L::PHI;
  float* vs = smem + L::VS;
  const float* dvs = smem + L::DVS;
  float* dphi = smem + L::DPHI;
  const int bh = blockIdx.y, b = bh / P.H, h = bh % P.H;
  const int begin = blockIdx.x * P.out_tokens_per_chunk, end = min(P.N, begin + P.out_tokens_per_chunk);
  load_state<S::Fp, S::Dp>(L::SS, L::LDS_, L::ZS, P.dS, P.dz, bh);
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  const T* kp = static_cast<const T*>(P.k);
  const T* vp = static_cast<const T*>(P.v);
  TileFetch<T, D, TILE, S::THREADS> fk, fv;
  fk.fetch(kp, P.k_stride, b, h, begin, end, P.vec_loads);
  fv.fetch(vp, P.v_stride, b, h, begin, end, P.vec_loads);
  for (int t0 = begin; t0 < end; t0 += TILE) {
    fk.template commit<L::LDX>(xs, P.vec_loads);
    fv.template commit<L::LDV>(vs, P.vec_loads);
    if (t0 + TILE < end) {  // the next tile's loads fly while this one is worked on
      fk.fetch(kp, P.k_stride, b, h, t0 + TILE, end, P.vec_loads);
      fv.fetch(vp, P.v_stride, b, h, t0 + TILE, end, P.vec_loads);
    }
    __syncthreads();
    features_forward<D, FEAT, L::LDX, L::LDP, TILE, S::THREADS, !SPLIT>(xs, phi, P, false, t0);
    cp_async_wait_all();  // dS, dz (a no-op after the first tile)
    __syncthreads();
    WarpGemm<TILE, S::Dp, S::Fp, false, false, SPLIT, S::WARPS>::to_smem(L::PHI, L::LDP, L::SS, L::LDS_, L::DVS, L::LDDV);   // φ_k dS
    WarpGemm<TILE, S::Fp, S::Dp, false, true, SPLIT, S::WARPS>::to_smem(L::VS, L::LDV, L::SS, L::LDS_, L::DPHI, L::LDDP);    // v dSᵀ
    __syncthreads();
    store_tile<T, D, L::LDDV, TILE, S::THREADS>(static_cast<T*>(P.dv), dvs, bh, t0, P.N, P.inv_n);
    for (int f = lane; f < S::Fp; f += TPT) dphi[t * L::LDDP + f] = (dphi[t * L::LDDP + f] + dzs[f]) * P.inv_n;
    __syncthreads();
    features_backward<T, D, FEAT, L::LDX, L::LDDP, TILE, S::THREADS, !SPLIT>(xs, dphi, P, false, static_cast<T*>(P.dk), bh, t0, end);
    __syncthreads();
  }
  cp_async_wait_all();
}

}  // namespace nala::attention::cuda
