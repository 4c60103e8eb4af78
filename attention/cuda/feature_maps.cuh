// The feature maps of NaLa attention and its baselines on the device, element-parallel over the
// lanes of a token (docs/nala_attention.md §3), forward and backward, for fp32 tiles in shared memory.
#pragma once
#include "attention/cuda/tiles.cuh"

namespace nala::attention::cuda {

// ---- feature maps, element-parallel (docs/nala_attention.md §3; the ATen reference is attention/feature_maps.cpp) -----------
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
    if (P.map == KernelMap::Focused) {
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
  if (P.map == KernelMap::Focused) {
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
    if (P.map == KernelMap::Elu) {
      f0 = xj > 0.f ? xj + 1.f : f_exp<FAST>(xj);
    } else if (P.map == KernelMap::Relu) {
      f0 = fmaxf(xj, 0.f);
    } else if (P.map == KernelMap::Focused) {
      f0 = pow_pos<FAST>(fmaxf(xj, 0.f), P.focus_power) * (st.nr / fmaxf(st.nrp, 1e-12f));
    } else {
      const float xh = xj * st.inv;
      const float sg = query ? xh : xj;
      const float a = pow_pos<FAST>(fabsf(sg), st.p);
      if (P.map == KernelMap::NalaRelu) {
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
    if (P.map == KernelMap::NalaRelu) {
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
  if (P.map == KernelMap::Elu || P.map == KernelMap::Relu) {
    for (int j = lane; j < D; j += TPT) {
      const float xj = x[j];
      g[j] = P.map == KernelMap::Elu ? g[j] * (xj > 0.f ? 1.f : f_exp<FAST>(xj)) : (xj > 0.f ? g[j] : 0.f);
    }
  } else if (P.map == KernelMap::Focused) {
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

}  // namespace nala::attention::cuda
