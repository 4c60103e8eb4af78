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
// Layouts: every shared-memory tile is fp32 row-major with a padded leading dimension
// (ld % 4 == 0 for wmma, + 8 floats against bank conflicts). Token t of a tile is handled by TPT =
// threads / tile consecutive lanes (element j = lane + TPT·i), so per-token reductions are warp
// shuffles. Matrix products use wmma 16×16×8 tf32; with SPLIT each operand is split into a tf32
// high part and a tf32 residual (a·b ≈ ah·bh + ah·bl + al·bh), which brings fp32/fp16 inputs to
// fp32-class accuracy; bf16 inputs use plain tf32, whose error is below bf16's output rounding.
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
  static constexpr int WARPS = Dp * Fp > 80 * 160 ? 16 : 8;  // more warps keep big accumulators in registers
  static constexpr int THREADS = WARPS * 32;
  static constexpr int TILE_STATE = Dp > 80 ? 32 : 64;       // tokens per tile, per kernel (shared memory budget)
  static constexpr int TILE_OUT = Dp > 80 ? 32 : 64;
  static constexpr int TILE_DQ = Dp > 80 ? 16 : 32;
  static constexpr int TILE_DKV = Dp > 80 ? 16 : 32;
  static constexpr int LDF = Fp + 8;                        // leading dims of shared tiles
  static constexpr int LDD = Dp + 8;
};

// ---- tensor-core helpers ------------------------------------------------------------------------
template <typename Layout> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, Layout>;
template <typename Layout> using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, Layout>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

template <typename Frag>
__device__ __forceinline__ void split_tf32(Frag& hi, Frag& lo) {
#pragma unroll
  for (int i = 0; i < hi.num_elements; ++i) {
    const float x = hi.x[i];
    const float h = wmma::__float_to_tf32(x);
    hi.x[i] = h;
    lo.x[i] = wmma::__float_to_tf32(x - h);
  }
}
template <typename Frag>
__device__ __forceinline__ void to_tf32(Frag& f) {
#pragma unroll
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = wmma::__float_to_tf32(f.x[i]);
}

// acc += A[m0:m0+16, :K] · B[:K, n0:n0+16]. A_COL: element (m, k) at A[k*lda + m], else A[m*lda + k].
// B_COL: element (k, n) at B[n*ldb + k], else B[k*ldb + n].
template <int K, bool A_COL, bool B_COL, bool SPLIT>
__device__ __forceinline__ void mma_tile(FragC& acc, const float* A, int lda, const float* B, int ldb, int m0, int n0) {
  using LA = std::conditional_t<A_COL, wmma::col_major, wmma::row_major>;
  using LB = std::conditional_t<B_COL, wmma::col_major, wmma::row_major>;
#pragma unroll 2
  for (int k0 = 0; k0 < K; k0 += 8) {
    FragA<LA> a, al;
    FragB<LB> b, bl;
    wmma::load_matrix_sync(a, A_COL ? A + k0 * lda + m0 : A + m0 * lda + k0, lda);
    wmma::load_matrix_sync(b, B_COL ? B + n0 * ldb + k0 : B + k0 * ldb + n0, ldb);
    if constexpr (SPLIT) {
      split_tf32(a, al);
      split_tf32(b, bl);
      wmma::mma_sync(acc, a, bl, acc);
      wmma::mma_sync(acc, al, b, acc);
    } else {
      to_tf32(a);
      to_tf32(b);
    }
    wmma::mma_sync(acc, a, b, acc);
  }
}

// C (M×N, shared, ld ldc) = A · B, output tiles spread over the warps.
template <int M, int N, int K, bool A_COL, bool B_COL, bool SPLIT, int WARPS>
__device__ __forceinline__ void gemm_to_smem(const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  const int warp = threadIdx.x / 32;
  constexpr int NT = N / 16, TILES = (M / 16) * NT;
  for (int t = warp; t < TILES; t += WARPS) {
    const int m0 = (t / NT) * 16, n0 = (t % NT) * 16;
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_tile<K, A_COL, B_COL, SPLIT>(acc, A, lda, B, ldb, m0, n0);
    wmma::store_matrix_sync(C + m0 * ldc + n0, acc, ldc, wmma::mem_row_major);
  }
}

// acc[i] (tile warp + i·WARPS of an M×N result) += A · B, accumulators kept in registers.
template <int M, int N, int K, bool A_COL, bool B_COL, bool SPLIT, int WARPS, int TPW>
__device__ __forceinline__ void gemm_accumulate(FragC (&acc)[TPW], const float* A, int lda, const float* B, int ldb) {
  const int warp = threadIdx.x / 32;
  constexpr int NT = N / 16, TILES = (M / 16) * NT;
#pragma unroll
  for (int i = 0; i < TPW; ++i) {
    const int t = warp + i * WARPS;
    if (t < TILES) mma_tile<K, A_COL, B_COL, SPLIT>(acc[i], A, lda, B, ldb, (t / NT) * 16, (t % NT) * 16);
  }
}

// ---- tiles in and out of global memory ----------------------------------------------------------
// xs[t][j] = x[row(t0 + t)][j] as fp32 for t < rows (zeros for tokens past the end and pad columns).
template <typename T, int D, int LD, int TILE, int THREADS>
__device__ __forceinline__ void load_tile(float* xs, const T* base, const int64_t* stride, int bh_b, int bh_h, int t0, int N,
                                          bool vec) {
  constexpr int TPT = THREADS / TILE;
  constexpr int PADW = (D + 15) / 16 * 16;
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  const int n = t0 + t;
  float* row = xs + t * LD;
  if (n >= N) {
    for (int j = lane; j < PADW; j += TPT) row[j] = 0.f;
    return;
  }
  const T* src = base + bh_b * stride[0] + bh_h * stride[1] + int64_t(n) * stride[2];
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte load
  if (vec && D % V == 0) {
    for (int c = lane; c < D / V; c += TPT) {
      const uint4 raw = *reinterpret_cast<const uint4*>(src + c * V);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int u = 0; u < V; ++u) row[c * V + u] = to_f<T>(e[u]);
    }
  } else {
    for (int j = lane; j < D; j += TPT) row[j] = to_f<T>(src[j]);
  }
  for (int j = D + lane; j < PADW; j += TPT) row[j] = 0.f;
}

// out[(bh·N + t0 + t)·D + j] = ys[t][j] (scaled), for t < rows valid.
template <typename T, int D, int LD, int TILE, int THREADS>
__device__ __forceinline__ void store_tile(T* out, const float* ys, int bh, int t0, int N, float scale) {
  constexpr int TPT = THREADS / TILE;
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  const int n = t0 + t;
  if (n >= N) return;
  T* dst = out + (int64_t(bh) * N + n) * D;
  for (int j = lane; j < D; j += TPT) dst[j] = from_f<T>(ys[t * LD + j] * scale);
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
template <bool FAST> __device__ __forceinline__ float pow_pos(float b, float e) { return b > 0.f ? f_exp<FAST>(e * f_log<FAST>(b)) : 0.f; }

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
        f_sincos<FAST>(0.78539816f * tanhf(P.alpha * xh), &sn, &cs);
        f0 = a * cs;
        f1 = a * sn;
      }
    }
    out[j] = valid ? f0 : 0.f;
    if (FEAT == 2) out[D + j] = valid ? f1 : 0.f;
  }
  for (int j = FEAT * D + lane; j < Fp; j += TPT) out[j] = 0.f;
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
  T* dst = out + (int64_t(bh) * P.N + n) * D;
  if (P.map == 2 || P.map == 3) {
    if (n < n_end)
      for (int j = lane; j < D; j += TPT) {
        const float xj = x[j];
        dst[j] = from_f<T>(P.map == 2 ? g[j] * (xj > 0.f ? 1.f : f_exp<FAST>(xj)) : (xj > 0.f ? g[j] : 0.f));
      }
    return;
  }
  if (P.map == 4) {
    const float pw = P.focus_power;
    float G = 0.f;
    for (int j = lane; j < D; j += TPT) G += g[j] * pow_pos<FAST>(fmaxf(x[j], 0.f), pw);
    G = token_sum<TPT>(G);
    const bool clamped = !(st.nrp > 1e-12f);
    const float Dn = clamped ? 1e-12f : st.nrp, s = st.nr / Dn;
    if (n < n_end)
      for (int j = lane; j < D; j += TPT) {
        const float r = fmaxf(x[j], 0.f);
        float v = 0.f;
        if (r > 0.f) {
          const float rp = pow_pos<FAST>(r, pw), drp = pw * rp / r;
          float ds = (st.nr > 0.f ? r / st.nr : 0.f) / Dn;
          if (!clamped) ds -= st.nr / (Dn * Dn) * (rp * drp / st.nrp);
          v = g[j] * s * drp + G * ds;
        }
        dst[j] = from_f<T>(v);
      }
    return;
  }
  // nala / nala-relu: first pass ∂L/∂x̂ (kept in g[j]) and the direct key-power term (in g[D+j])
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
      const float tt = tanhf(P.alpha * xh);
      float sn, cs;
      f_sincos<FAST>(0.78539816f * tt, &sn, &cs);
      dA = g0 * cs + g1 * sn;
      gxh = a * (g1 * cs - g0 * sn) * 0.78539816f * P.alpha * (1.f - tt * tt);
    }
    const float dpow = base > 0.f ? dA * st.p * a / base * (sg > 0.f ? 1.f : -1.f) : 0.f;
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
  if (n < n_end)
    for (int j = lane; j < D; j += TPT) {
      const float xj = x[j], xh = xj * st.inv;
      float v = above ? (g[j] - xh * dot) * st.inv + gn * xh : g[j] * st.inv + (st.n > 0.f ? gn * xj / st.n : 0.f);
      dst[j] = from_f<T>(v + g[D + j]);
    }
}

// ---- kernels ------------------------------------------------------------------------------------
template <int D, int FEAT>
constexpr int state_smem_floats() {
  using S = Shape<D, FEAT>;
  return S::TILE_STATE * S::LDD /*xs*/ + S::TILE_STATE * S::LDF /*phi*/ + S::TILE_STATE * S::LDD /*vs*/;
}

template <typename T, int D, int FEAT, bool SPLIT>
__global__ void __launch_bounds__(Shape<D, FEAT>::THREADS) state_kernel(const NalaKernelParams P) {
  using S = Shape<D, FEAT>;
  constexpr int TILE = S::TILE_STATE, TPW = (S::Fp / 16 * S::Dp / 16 + S::WARPS - 1) / S::WARPS;
  extern __shared__ float smem[];
  float* xs = smem;
  float* phi = xs + TILE * S::LDD;
  float* vs = phi + TILE * S::LDF;
  const int bh = blockIdx.y, b = bh / P.H, h = bh % P.H, chunk = blockIdx.x;
  const int begin = chunk * P.tokens_per_chunk, end = min(P.N, begin + P.tokens_per_chunk);
  FragC acc[TPW];
#pragma unroll
  for (int i = 0; i < TPW; ++i) wmma::fill_fragment(acc[i], 0.0f);
  float zacc = 0.f;  // thread f < F accumulates z_f
  for (int t0 = begin; t0 < end; t0 += TILE) {
    load_tile<T, D, S::LDD, TILE, S::THREADS>(xs, static_cast<const T*>(P.k), P.k_stride, b, h, t0, end, P.vec_loads);
    load_tile<T, D, S::LDD, TILE, S::THREADS>(vs, static_cast<const T*>(P.v), P.v_stride, b, h, t0, end, P.vec_loads);
    __syncthreads();
    NalaKernelParams Q = P;
    Q.N = end;  // rows past this chunk's end are zero
    features_forward<D, FEAT, S::LDD, S::LDF, TILE, S::THREADS, !SPLIT>(xs, phi, Q, false, t0);
    __syncthreads();
    // S_part (F×Dp) += φ_kᵀ (F×TILE) · V (TILE×Dp)
    gemm_accumulate<S::Fp, S::Dp, TILE, true, false, SPLIT, S::WARPS, TPW>(acc, phi, S::LDF, vs, S::LDD);
    if (threadIdx.x < S::Fp)
      for (int t = 0; t < TILE; ++t) zacc += phi[t * S::LDF + threadIdx.x];
    __syncthreads();
  }
  // write the partial (or, with one chunk, the final scaled state)
  const bool final = P.chunks == 1;
  float* Sout = final ? P.S + int64_t(bh) * S::Fp * S::Dp : P.S_part + (int64_t(bh) * P.chunks + chunk) * S::Fp * S::Dp;
  float* zout = final ? P.z + int64_t(bh) * S::Fp : P.z_part + (int64_t(bh) * P.chunks + chunk) * S::Fp;
  const float scale = final ? P.inv_n : 1.f;
  const int warp = threadIdx.x / 32;
  constexpr int NT = S::Dp / 16;
#pragma unroll
  for (int i = 0; i < TPW; ++i) {
    const int t = warp + i * S::WARPS;
    if (t < (S::Fp / 16) * NT) {
      for (int e = 0; e < acc[i].num_elements; ++e) acc[i].x[e] *= scale;
      wmma::store_matrix_sync(Sout + (t / NT) * 16 * S::Dp + (t % NT) * 16, acc[i], S::Dp, wmma::mem_row_major);
    }
  }
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
constexpr int out_smem_floats() {
  using S = Shape<D, FEAT>;
  return S::Fp * S::LDD /*S*/ + S::Fp /*z*/ + S::TILE_OUT * S::LDD /*xs*/ + S::TILE_OUT * S::LDF /*phi*/ + S::TILE_OUT * S::LDD /*os*/;
}

// Loads S (Fp×Dp) and z (Fp) of one (batch, head) into shared memory.
template <int D, int FEAT>
__device__ __forceinline__ void load_state(float* Ss, float* zs, const float* S, const float* z, int bh) {
  using Sh = Shape<D, FEAT>;
  const float4* src = reinterpret_cast<const float4*>(S + int64_t(bh) * Sh::Fp * Sh::Dp);
  for (int i = threadIdx.x; i < Sh::Fp * Sh::Dp / 4; i += blockDim.x) {
    const int f = i / (Sh::Dp / 4), c = (i % (Sh::Dp / 4)) * 4;
    *reinterpret_cast<float4*>(Ss + f * Sh::LDD + c) = src[i];
  }
  for (int f = threadIdx.x; f < Sh::Fp; f += blockDim.x) zs[f] = z[int64_t(bh) * Sh::Fp + f];
}

template <typename T, int D, int FEAT, bool SPLIT>
__global__ void __launch_bounds__(Shape<D, FEAT>::THREADS) output_kernel(const NalaKernelParams P) {
  using S = Shape<D, FEAT>;
  constexpr int TILE = S::TILE_OUT, TPT = S::THREADS / TILE;
  extern __shared__ float smem[];
  float* Ss = smem;
  float* zs = Ss + S::Fp * S::LDD;
  float* xs = zs + S::Fp;
  float* phi = xs + TILE * S::LDD;
  float* os = phi + TILE * S::LDF;
  const int bh = blockIdx.y, b = bh / P.H, h = bh % P.H;
  const int begin = blockIdx.x * P.out_tokens_per_chunk, end = min(P.N, begin + P.out_tokens_per_chunk);
  load_state<D, FEAT>(Ss, zs, P.S, P.z, bh);
  for (int t0 = begin; t0 < end; t0 += TILE) {
    load_tile<T, D, S::LDD, TILE, S::THREADS>(xs, static_cast<const T*>(P.q), P.q_stride, b, h, t0, P.N, P.vec_loads);
    __syncthreads();
    features_forward<D, FEAT, S::LDD, S::LDF, TILE, S::THREADS, !SPLIT>(xs, phi, P, true, t0);
    __syncthreads();
    gemm_to_smem<TILE, S::Dp, S::Fp, false, false, SPLIT, S::WARPS>(phi, S::LDF, Ss, S::LDD, os, S::LDD);  // φ_q S
    // den_t = φ_q,t·z + ε, fp32
    const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
    float part = 0.f;
    for (int f = lane; f < S::F; f += TPT) part += phi[t * S::LDF + f] * zs[f];
    const float den = token_sum<TPT>(part) + P.eps;
    __syncthreads();
    if (t0 + t < end && lane == 0) P.den[int64_t(bh) * P.N + t0 + t] = den;
    {
      const int n = t0 + t;
      if (n < end) {
        T* dst = static_cast<T*>(P.o) + (int64_t(bh) * P.N + n) * D;
        const float inv = 1.f / den;
        for (int j = lane; j < D; j += TPT) dst[j] = from_f<T>(os[t * S::LDD + j] * inv);
      }
    }
    __syncthreads();
  }
}

template <int D, int FEAT>
constexpr int dq_smem_floats() {
  using S = Shape<D, FEAT>;
  return S::Fp * S::LDD + S::Fp + S::TILE_DQ * S::LDD /*xs*/ + S::TILE_DQ * S::LDF /*phi*/ + S::TILE_DQ * S::LDD /*g*/ +
         S::TILE_DQ * S::LDF /*dphi*/ + S::TILE_DQ /*c*/;
}

template <typename T, int D, int FEAT, bool SPLIT>
__global__ void __launch_bounds__(Shape<D, FEAT>::THREADS) dq_kernel(const NalaKernelParams P) {
  using S = Shape<D, FEAT>;
  constexpr int TILE = S::TILE_DQ, TPT = S::THREADS / TILE, TPW = (S::Fp / 16 * S::Dp / 16 + S::WARPS - 1) / S::WARPS;
  extern __shared__ float smem[];
  float* Ss = smem;
  float* zs = Ss + S::Fp * S::LDD;
  float* xs = zs + S::Fp;
  float* phi = xs + TILE * S::LDD;
  float* gs = phi + TILE * S::LDF;
  float* dphi = gs + TILE * S::LDD;
  float* cs = dphi + TILE * S::LDF;
  const int bh = blockIdx.y, b = bh / P.H, h = bh % P.H, chunk = blockIdx.x;
  const int begin = chunk * P.tokens_per_chunk, end = min(P.N, begin + P.tokens_per_chunk);
  load_state<D, FEAT>(Ss, zs, P.S, P.z, bh);
  FragC acc[TPW];
#pragma unroll
  for (int i = 0; i < TPW; ++i) wmma::fill_fragment(acc[i], 0.0f);
  float dzacc = 0.f;
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  for (int t0 = begin; t0 < end; t0 += TILE) {
    load_tile<T, D, S::LDD, TILE, S::THREADS>(xs, static_cast<const T*>(P.q), P.q_stride, b, h, t0, end, P.vec_loads);
    load_tile<T, D, S::LDD, TILE, S::THREADS>(gs, static_cast<const T*>(P.grad_o), P.go_stride, b, h, t0, end, P.vec_loads);
    __syncthreads();
    NalaKernelParams Q = P;
    Q.N = end;
    features_forward<D, FEAT, S::LDD, S::LDF, TILE, S::THREADS, !SPLIT>(xs, phi, Q, true, t0);
    const float inv_den = t0 + t < end ? 1.f / P.den[int64_t(bh) * P.N + t0 + t] : 0.f;
    for (int j = lane; j < S::Dp; j += TPT) gs[t * S::LDD + j] *= inv_den;  // g = do / den
    __syncthreads();
    gemm_to_smem<TILE, S::Fp, S::Dp, false, true, SPLIT, S::WARPS>(gs, S::LDD, Ss, S::LDD, dphi, S::LDF);  // g Sᵀ
    __syncthreads();
    float part = 0.f;
    for (int f = lane; f < S::F; f += TPT) part += phi[t * S::LDF + f] * dphi[t * S::LDF + f];
    const float c = token_sum<TPT>(part) * inv_den;  // do·o / den
    if (lane == 0) cs[t] = c;
    for (int f = lane; f < S::Fp; f += TPT) dphi[t * S::LDF + f] -= c * zs[f];
    __syncthreads();
    // dS (F×Dp) += φ_qᵀ g;  dz_f −= Σ_t φ_q[t][f] c_t
    gemm_accumulate<S::Fp, S::Dp, TILE, true, false, SPLIT, S::WARPS, TPW>(acc, phi, S::LDF, gs, S::LDD);
    if (threadIdx.x < S::Fp)
      for (int r = 0; r < TILE; ++r) dzacc -= phi[r * S::LDF + threadIdx.x] * cs[r];
    features_backward<T, D, FEAT, S::LDD, S::LDF, TILE, S::THREADS, !SPLIT>(xs, dphi, P, true, static_cast<T*>(P.dq), bh, t0, end);
    __syncthreads();
  }
  const bool final = P.chunks == 1;
  float* Sout = final ? P.dS + int64_t(bh) * S::Fp * S::Dp : P.S_part + (int64_t(bh) * P.chunks + chunk) * S::Fp * S::Dp;
  float* zout = final ? P.dz + int64_t(bh) * S::Fp : P.z_part + (int64_t(bh) * P.chunks + chunk) * S::Fp;
  const int warp = threadIdx.x / 32;
  constexpr int NT = S::Dp / 16;
#pragma unroll
  for (int i = 0; i < TPW; ++i) {
    const int tt = warp + i * S::WARPS;
    if (tt < (S::Fp / 16) * NT)
      wmma::store_matrix_sync(Sout + (tt / NT) * 16 * S::Dp + (tt % NT) * 16, acc[i], S::Dp, wmma::mem_row_major);
  }
  if (threadIdx.x < S::Fp) zout[threadIdx.x] = dzacc;
}

template <int D, int FEAT>
constexpr int dkv_smem_floats() {
  using S = Shape<D, FEAT>;
  return S::Fp * S::LDD + S::Fp + S::TILE_DKV * S::LDD /*xs*/ + S::TILE_DKV * S::LDF /*phi*/ + S::TILE_DKV * S::LDD /*vs*/ +
         S::TILE_DKV * S::LDD /*dvs*/ + S::TILE_DKV * S::LDF /*dphi*/;
}

template <typename T, int D, int FEAT, bool SPLIT>
__global__ void __launch_bounds__(Shape<D, FEAT>::THREADS) dkv_kernel(const NalaKernelParams P) {
  using S = Shape<D, FEAT>;
  constexpr int TILE = S::TILE_DKV, TPT = S::THREADS / TILE;
  extern __shared__ float smem[];
  float* dSs = smem;
  float* dzs = dSs + S::Fp * S::LDD;
  float* xs = dzs + S::Fp;
  float* phi = xs + TILE * S::LDD;
  float* vs = phi + TILE * S::LDF;
  float* dvs = vs + TILE * S::LDD;
  float* dphi = dvs + TILE * S::LDD;
  const int bh = blockIdx.y, b = bh / P.H, h = bh % P.H;
  const int begin = blockIdx.x * P.out_tokens_per_chunk, end = min(P.N, begin + P.out_tokens_per_chunk);
  load_state<D, FEAT>(dSs, dzs, P.dS, P.dz, bh);
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  for (int t0 = begin; t0 < end; t0 += TILE) {
    load_tile<T, D, S::LDD, TILE, S::THREADS>(xs, static_cast<const T*>(P.k), P.k_stride, b, h, t0, P.N, P.vec_loads);
    load_tile<T, D, S::LDD, TILE, S::THREADS>(vs, static_cast<const T*>(P.v), P.v_stride, b, h, t0, P.N, P.vec_loads);
    __syncthreads();
    features_forward<D, FEAT, S::LDD, S::LDF, TILE, S::THREADS, !SPLIT>(xs, phi, P, false, t0);
    __syncthreads();
    gemm_to_smem<TILE, S::Dp, S::Fp, false, false, SPLIT, S::WARPS>(phi, S::LDF, dSs, S::LDD, dvs, S::LDD);   // φ_k dS
    gemm_to_smem<TILE, S::Fp, S::Dp, false, true, SPLIT, S::WARPS>(vs, S::LDD, dSs, S::LDD, dphi, S::LDF);   // v dSᵀ
    __syncthreads();
    store_tile<T, D, S::LDD, TILE, S::THREADS>(static_cast<T*>(P.dv), dvs, bh, t0, P.N, P.inv_n);
    for (int f = lane; f < S::Fp; f += TPT) dphi[t * S::LDF + f] = (dphi[t * S::LDF + f] + dzs[f]) * P.inv_n;
    __syncthreads();
    features_backward<T, D, FEAT, S::LDD, S::LDF, TILE, S::THREADS, !SPLIT>(xs, dphi, P, false, static_cast<T*>(P.dk), bh, t0, end);
    __syncthreads();
  }
}

}  // namespace nala::attention::cuda
