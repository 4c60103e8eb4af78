// The feature maps of NaLa attention and its baselines on the device, element-parallel over the
// lanes of a token (docs/nala_attention.md §3), forward and backward, for fp32 tiles in shared memory.
#pragma once
#include <type_traits>

#include "attention/cuda/tiles.cuh"
#include "ops/cuda/ptx_math.cuh"
#include "ops/cuda/vec_io.cuh"

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
template <bool FAST> __device__ __forceinline__ float f_tanh(float x) {
  if (!FAST) return tanhf(x);
  float y;  // max relative error 2^-10.99 (PTX ISA), far below bf16 rounding
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// √x and 1/x: the hardware's approximations for bf16 inputs (sqrt.approx.f32, rcp.approx.f32: within
// a float ulp or two, subnormals kept), the IEEE operations otherwise. Once a token, but the IEEE
// forms' slow-path calls and branches cut the one-pass kernels' code into blocks the compiler
// schedules apart (as σ's division did in the gated tail: docs/benchmarks.md, forty-fifth session).
template <bool FAST> __device__ __forceinline__ float f_sqrt(float x) { return FAST ? nala::cuda_ptx::sqrt_approx_keep_subnormals(x) : sqrtf(x); }
template <bool FAST> __device__ __forceinline__ float f_rcp(float x) { return FAST ? nala::cuda_ptx::rcp_approx_keep_subnormals(x) : 1.f / x; }
using nala::cuda_ptx::ex2_approx;
using nala::cuda_ptx::lg2_approx;
// b^e for b > 0, else 0
template <bool FAST> __device__ __forceinline__ float pow_pos(float b, float e) {
  if (FAST) return b > 0.f ? ex2_approx(e * lg2_approx(b)) : 0.f;
  return b > 0.f ? expf(e * logf(b)) : 0.f;
}

// A token's statistics from this lane's elements: sums of x², and for the focused map of relu(x)²
// and relu(x)^(2P), added up over the token's TPT lanes by finish().
template <int TPT, bool FAST>
struct StatSums {
  float s = 0.f, r2 = 0.f, rp2 = 0.f;
  __device__ __forceinline__ void add(float x, bool focused, float power) {
    s += x * x;
    if (focused) {
      const float r = fmaxf(x, 0.f), rp = pow_pos<FAST>(r, power);
      r2 += r * r;
      rp2 += rp * rp;
    }
  }
  __device__ __forceinline__ TokenStats finish(const NalaKernelParams& P, bool query, bool focused) {
    TokenStats st;
    st.n = f_sqrt<FAST>(token_sum<TPT>(s));
    st.inv = f_rcp<FAST>(fmaxf(st.n, P.eps_norm));
    st.tn = tanhf(st.n);
    st.p = query ? P.lambda * (P.tau + st.tn) : P.lambda;
    if (focused) {
      st.nr = sqrtf(token_sum<TPT>(r2));
      st.nrp = sqrtf(token_sum<TPT>(rp2));
    }
    return st;
  }
};

template <int D, int LD, int TPT, bool FAST>
__device__ __forceinline__ TokenStats token_stats(const float* xrow, const NalaKernelParams& P, bool query) {
  const int lane = threadIdx.x % TPT;
  const bool focused = P.map == KernelMap::Focused;
  StatSums<TPT, FAST> sums;
  for (int j = lane; j < D; j += TPT) sums.add(xrow[j], focused, P.focus_power);
  return sums.finish(P, query, focused);
}

// phi[t][·] of every token of a tile; rows past N are zero (they must not enter z).
// φ values are stored as fp32 (the chunked kernels' tf32 products) or bf16 (the one-pass kernels'
// bf16 mma operands), computed in fp32 either way.
__device__ __forceinline__ void put(float* p, float x) { *p = x; }
__device__ __forceinline__ void put(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

// sin and cos of θ ∈ [−π/4, π/4] (the nala angle's range) on the FMA pipe: Taylor polynomials,
// truncation error < 3.7e-5 (sin, θ⁷/7!) and < 3.6e-6 (cos, θ⁸/8!) at |θ| = π/4. The fast path's
// θ comes from tanh.approx, whose error (2^-10.99 relative, PTX ISA) already moves sin θ by up to
// 3.8e-4, and its φ is rounded to bf16 (2^-9): two terms fewer than fp32 would need cost the bf16
// path nothing measurable (the CUDA tests against float64 and the fp32 reference). The accurate
// path keeps sincosf.
template <bool FAST> __device__ __forceinline__ void sincos_quarter(float th, float* s, float* c) {
  if (!FAST) {
    sincosf(th, s, c);
    return;
  }
  const float t2 = th * th;
  *s = th * fmaf(t2, fmaf(t2, 1.f / 120.f, -1.f / 6.f), 1.f);
  *c = fmaf(t2, fmaf(t2, fmaf(t2, -1.f / 720.f, 1.f / 24.f), -0.5f), 1.f);
}
// sin and cos of θ = (π/4)·t for t ∈ [−1, 1] (t = tanh(α x̂)): sincos_quarter's polynomials with π/4
// folded into their coefficients (c = π/4: c, c³/6, c⁵/5!; c²/2, c⁴/4!, c⁶/6!), one multiply fewer
__device__ __forceinline__ void sincos_quarter_turn(float t, float* s, float* c) {
  const float t2 = t * t;
  *s = t * fmaf(t2, fmaf(t2, 0.0024903946f, -0.080745512f), 0.78539816f);
  *c = fmaf(t2, fmaf(t2, fmaf(t2, -0.00032599189f, 0.015854344f), -0.30842514f), 1.f);
}
// |x|^e for the key power: λ = 3 (the default) is |x|·x·x, no special-function unit
template <bool FAST> __device__ __forceinline__ float key_pow(float b, float e) {
  return e == 3.f ? b * b * b : pow_pos<FAST>(b, e);
}

// φ of one element x_j of a token (docs/nala_attention.md §3): f0, and f1 for the nala maps.
template <KernelMap MAP, bool FAST>
__device__ __forceinline__ void feature_of(float xj, const TokenStats& st, const NalaKernelParams& P, bool query, float& f0, float& f1) {
  f1 = 0.f;
  if constexpr (MAP == KernelMap::Elu) {
    f0 = xj > 0.f ? xj + 1.f : f_exp<FAST>(xj);
  } else if constexpr (MAP == KernelMap::Relu) {
    f0 = fmaxf(xj, 0.f);
  } else if constexpr (MAP == KernelMap::Focused) {
    f0 = pow_pos<FAST>(fmaxf(xj, 0.f), P.focus_power) * (st.nr / fmaxf(st.nrp, 1e-12f));
  } else {
    const float xh = xj * st.inv;
    const float sg = query ? xh : xj;
    const float a = query ? pow_pos<FAST>(fabsf(sg), st.p) : key_pow<FAST>(fabsf(sg), st.p);
    if constexpr (MAP == KernelMap::NalaRelu) {
      f0 = sg > 0.f ? a : 0.f;
      f1 = sg < 0.f ? a : 0.f;
    } else {
      float sn, cs;
      sincos_quarter<FAST>(0.78539816f * f_tanh<FAST>(P.alpha * xh), &sn, &cs);
      f0 = a * cs;
      f1 = a * sn;
    }
  }
}

// The one-pass kernels' φ of one element for the nala maps (bf16 inputs): feature_of's math with the
// token's constants folded in: ainv = α / max(n, ε_n) (θ = (π/4) tanh(ainv·x)) and, for a query,
// plinv = p·log2(1 / max(n, ε_n)), so |x̂|^p = 2^(p·log2|x| + plinv) (x̂ itself is never formed). No test
// for x = 0: log2 0 = −∞ and 2^−∞ = 0 (PTX ISA, lg2.approx and ex2.approx), as p ≥ 1 (check_options).
struct NalaTokenConsts {
  float ainv, plinv;
};
__device__ __forceinline__ NalaTokenConsts nala_token_consts(const TokenStats& st, const NalaKernelParams& P, bool query) {
  return {P.alpha * st.inv, query ? st.p * lg2_approx(st.inv) : 0.f};
}
// CUBE (a key, λ = 3, the default): |x|³ with no test of λ an element (token_features tests it once a token).
template <KernelMap MAP, bool CUBE = false>
__device__ __forceinline__ void nala_feature_fast(float xj, const TokenStats& st, const NalaTokenConsts& tc, bool query, float& f0, float& f1) {
  const float b = fabsf(xj);
  const float a = query ? ex2_approx(fmaf(st.p, lg2_approx(b), tc.plinv)) : CUBE ? b * b * b : key_pow<true>(b, st.p);
  if constexpr (MAP == KernelMap::NalaRelu) {
    f0 = xj > 0.f ? a : 0.f;
    f1 = xj < 0.f ? a : 0.f;
  } else {
    float sn, cs;
    sincos_quarter_turn(f_tanh<true>(tc.ainv * xj), &sn, &cs);
    f0 = a * cs;
    f1 = a * sn;
  }
}

// Calls fn(MapTag<m>{}) with the run-time map as a compile-time constant (one uniform branch per
// call instead of one per element); FEAT = 2 kernels see the nala maps only, FEAT = 1 the others.
template <KernelMap M>
struct MapTag {
  static constexpr KernelMap value = M;
};
template <int FEAT, typename Fn>
__device__ __forceinline__ void with_map(KernelMap m, Fn&& fn) {
  if constexpr (FEAT == 2) {
    if (m == KernelMap::NalaRelu) fn(MapTag<KernelMap::NalaRelu>{});
    else fn(MapTag<KernelMap::Nala>{});
  } else {
    if (m == KernelMap::Elu) fn(MapTag<KernelMap::Elu>{});
    else if (m == KernelMap::Relu) fn(MapTag<KernelMap::Relu>{});
    else fn(MapTag<KernelMap::Focused>{});
  }
}

template <int D, int FEAT, int LDX, int LDF, int TILE, int THREADS, bool FAST, typename PhiT>
__device__ __forceinline__ void features_forward(const float* xs, PhiT* phi, const NalaKernelParams& P, bool query, int t0) {
  constexpr int TPT = THREADS / TILE;
  constexpr int Fp = (FEAT * D + 15) / 16 * 16;
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  const float* x = xs + t * LDX;
  PhiT* out = phi + t * LDF;
  const TokenStats st = token_stats<D, LDX, TPT, FAST>(x, P, query);
  const bool valid = t0 + t < P.N;
  with_map<FEAT>(P.map, [&](auto tag) {
#pragma unroll 4
    for (int j = lane; j < D; j += TPT) {
      float f0, f1;
      feature_of<decltype(tag)::value, FAST>(x[j], st, P, query, f0, f1);
      put(out + j, valid ? f0 : 0.f);
      if (FEAT == 2) put(out + D + j, valid ? f1 : 0.f);
    }
  });
  for (int j = FEAT * D + lane; j < Fp; j += TPT) put(out + j, 0.f);
}

// The one-pass kernels' feature map: one token's φ straight from its bf16 elements in registers
// (this lane's 16-byte chunks c = lane + TPT·k of the row, as TileFetch loaded them), written as
// bf16 into its φ row (F columns, zero pads up to Fp) in 16-byte stores; an invalid token (past
// the range) gets a zero row. Math as features_forward with the fast intrinsics (bf16 inputs); the
// nala maps through nala_feature_fast.
// Returns the token's statistics (token_features_backward takes them).
template <int D, int FEAT, int TPT, int CPL>
__device__ __forceinline__ TokenStats token_features(const uint4 (&raw)[CPL], bool valid, __nv_bfloat16* row, const NalaKernelParams& P,
                                                     bool query) {
  constexpr int CH = D / 8, Fp = (FEAT * D + 15) / 16 * 16;
  const int lane = threadIdx.x % TPT;
  float x[CPL][8];
  const bool focused = FEAT == 1 && P.map == KernelMap::Focused;
  StatSums<TPT, true> sums;
#pragma unroll
  for (int k = 0; k < CPL; ++k) {
    const bool have = valid && lane + k * TPT < CH;
    const unsigned* e = reinterpret_cast<const unsigned*>(&raw[k]);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float2 v = have ? cuda_vec::unpack_bf16x2(e[u]) : make_float2(0.f, 0.f);
      x[k][2 * u] = v.x;
      x[k][2 * u + 1] = v.y;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) sums.add(x[k][u], focused, P.focus_power);
  }
  const TokenStats st = sums.finish(P, query, focused);
  const NalaTokenConsts tc = FEAT == 2 ? nala_token_consts(st, P, query) : NalaTokenConsts{0.f, 0.f};
  // a key's power λ tested once here, not an element (λ = 3: the loop with |x|³ inlined)
  const auto maps = [&](auto cube) {
    with_map<FEAT>(P.map, [&](auto tag) {
#pragma unroll
      for (int k = 0; k < CPL; ++k) {
        const int c = lane + k * TPT;
        if (c >= CH) continue;
        uint4 p0, p1;
        __nv_bfloat162* o0 = reinterpret_cast<__nv_bfloat162*>(&p0);
        __nv_bfloat162* o1 = reinterpret_cast<__nv_bfloat162*>(&p1);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          float a0, a1, b0, b1;
          if constexpr (FEAT == 2) {
            nala_feature_fast<decltype(tag)::value, decltype(cube)::value>(x[k][2 * u], st, tc, query, a0, a1);
            nala_feature_fast<decltype(tag)::value, decltype(cube)::value>(x[k][2 * u + 1], st, tc, query, b0, b1);
          } else {
            feature_of<decltype(tag)::value, true>(x[k][2 * u], st, P, query, a0, a1);
            feature_of<decltype(tag)::value, true>(x[k][2 * u + 1], st, P, query, b0, b1);
          }
          // an invalid token's x is 0, so the nala maps' φ is 0 already (|x̂|^p = 0); elu's is not
          const bool keep = FEAT == 2 || valid;
          o0[u] = keep ? __floats2bfloat162_rn(a0, b0) : __floats2bfloat162_rn(0.f, 0.f);
          o1[u] = keep ? __floats2bfloat162_rn(a1, b1) : __floats2bfloat162_rn(0.f, 0.f);
        }
        *reinterpret_cast<uint4*>(row + 8 * c) = p0;
        if (FEAT == 2) *reinterpret_cast<uint4*>(row + D + 8 * c) = p1;
      }
    });
  };
  if (FEAT == 2 && !query && st.p == 3.f) maps(std::true_type{});
  else maps(std::false_type{});
  for (int c = FEAT * D / 8 + lane; c < Fp / 8; c += TPT) *reinterpret_cast<uint4*>(row + 8 * c) = make_uint4(0, 0, 0, 0);
  return st;
}

// Column sums of the one-pass backward's gradients (qkvg's bias gradient: NalaKernelParams::grad_sums).
// The sum over a warp's 8 tokens (4 lanes a token: lane bits 2-4 pick the token) of each thread's
// values x[k][u] (its chunks c = lane % 4 + 4k of its token, 8 channels each), reduce-scattered: lane
// bits 4, 3 and 2 each halve the values a lane keeps, sending the other half to the lane that keeps it,
// so 7·CPL shuffles a thread (a sum of every value to every lane takes 24·CPL) leave each lane the
// warp's sums of CPL consecutive flat indices j = 8k + u from warp_sum_first, added into acc.
// One halving of warp_token_sums: the lane keeps the half of a[0, 2·HALF) its lane bit BIT picks
// (upper half where set) plus the partner's copy of it, in a[0, HALF). A bitwise blend picks what it
// keeps and sends (a select between a[j] and a[j + HALF] became an indexed load from local memory).
template <int BIT, int HALF, int N>
__device__ __forceinline__ void halve_across_lanes(float (&a)[N]) {
  const unsigned upper = (threadIdx.x & BIT) != 0 ? 0xffffffffu : 0u;
#pragma unroll
  for (int j = 0; j < HALF; ++j) {
    const unsigned lo = __float_as_uint(a[j]), hi = __float_as_uint(a[j + HALF]);
    const float send = __uint_as_float((lo & upper) | (hi & ~upper)), keep = __uint_as_float((hi & upper) | (lo & ~upper));
    a[j] = keep + __shfl_xor_sync(0xffffffffu, send, BIT);
  }
}
template <int CPL>
__device__ __forceinline__ void warp_token_sums(const float (&x)[CPL][8], float (&acc)[CPL]) {
  constexpr int N = 8 * CPL;
  float a[N];
#pragma unroll
  for (int j = 0; j < N; ++j) a[j] = x[j / 8][j % 8];
  halve_across_lanes<16, N / 2>(a);
  halve_across_lanes<8, N / 4>(a);
  halve_across_lanes<4, N / 8>(a);
#pragma unroll
  for (int j = 0; j < CPL; ++j) acc[j] += a[j];
}
// 8 bf16 (a 16-byte chunk, the first in the low half) as floats
__device__ __forceinline__ void unpack_bf16x8(const uint4& raw, float (&x)[8]) {
  const unsigned* w = reinterpret_cast<const unsigned*>(&raw);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const float2 f = cuda_vec::unpack_bf16x2(w[u]);
    x[2 * u] = f.x;
    x[2 * u + 1] = f.y;
  }
}
// The flat index of a lane's first sum (warp_token_sums), and the channel of flat index j
template <int CPL>
__device__ __forceinline__ int warp_sum_first(int lane) {
  return (((lane >> 4) & 1) * 4 + ((lane >> 3) & 1) * 2 + ((lane >> 2) & 1)) * CPL;
}
__device__ __forceinline__ int warp_sum_channel(int lane, int j) { return 8 * (lane % 4 + 4 * (j / 8)) + j % 8; }

// One element's share of the nala / nala-relu backward (docs/nala_attention.md §3): from
// g0 = ∂L/∂φ0_j, g1 = ∂L/∂φ1_j, the gradient with respect to x̂_j (gxh), the key power's direct
// term (direct; 0 for a query) and the query's ∂L/∂p term added to gp.
// CUBE (a key, λ = 3): a = |x|³ and a/|x| = |x|² with no test of λ and no division an element.
template <bool FAST, bool RELU, bool CUBE = false>
__device__ __forceinline__ void nala_element_backward(float xj, const TokenStats& st, float g0, float g1, const NalaKernelParams& P,
                                                      bool query, float& gxh, float& direct, float& gp) {
  const float xh = xj * st.inv;
  const float sg = query ? xh : xj;
  const float base = fabsf(sg);
  const bool cube = CUBE && !query;
  const float a = query ? pow_pos<FAST>(base, st.p) : cube ? base * base * base : key_pow<FAST>(base, st.p);
  float dA;
  gxh = 0.f;
  if constexpr (RELU) {
    dA = sg > 0.f ? g0 : (sg < 0.f ? g1 : 0.f);
  } else {
    const float tt = f_tanh<FAST>(P.alpha * xh);
    float sn, cs;
    sincos_quarter<FAST>(0.78539816f * tt, &sn, &cs);
    dA = g0 * cs + g1 * sn;
    gxh = a * (g1 * cs - g0 * sn) * 0.78539816f * P.alpha * (1.f - tt * tt);
  }
  const float a_over_base = cube ? base * base : FAST ? __fdividef(a, base) : a / base;  // |s|^(p-1)
  const float dpow = base > 0.f ? dA * st.p * a_over_base * (sg > 0.f ? 1.f : -1.f) : 0.f;
  direct = 0.f;
  if (query) {
    gxh += dpow;
    if (base > 0.f) gp += dA * a * f_log<FAST>(base);
  } else {
    direct = dpow;
  }
}

// A key element's share of the nala backward for λ = 3 (CUBE) with the fast intrinsics: nala_element_backward's
// key terms with the token's constants folded (ainv = α / max(n, ε_n), kq = (π/4)·α), θ's sine and cosine
// by sincos_quarter_turn as the forward's φ_k takes them (nala_feature_fast), and the power's direct term
// λ |x|^(λ−1) sign(x) ∂L/∂a as 3·x·|x|·∂L/∂a, 0 at x = 0 with no test.
__device__ __forceinline__ void nala_key_backward_cube(float xj, float ainv, float kq, float g0, float g1, float& gxh, float& direct) {
  const float t = f_tanh<true>(ainv * xj);
  float sn, cs;
  sincos_quarter_turn(t, &sn, &cs);
  const float ax = fabsf(xj), a = xj * xj * ax;
  gxh = (a * (g1 * cs - g0 * sn)) * (kq * (1.f - t * t));
  direct = (g0 * cs + g1 * sn) * (3.f * xj * ax);
}

// A query element's share of the nala / nala-relu backward (as nala_element_backward, query) from its
// φ values f0, f1 as stored (nala: a·cos θ, a·sin θ; nala-relu: a where x̂ > 0, a where x̂ < 0):
//   ∂L/∂a · a = g0 f0 + g1 f1,   a·(g1 cos θ − g0 sin θ) = g1 f0 − g0 f1,
//   ∂L/∂x̂ ∋ p |x̂|^(p−1) sign(x̂) ∂L/∂a = p (∂L/∂a · a) / x̂,   ∂L/∂p ∋ (∂L/∂a · a) ln |x̂|,
// so neither the power nor θ's sine and cosine is computed again; the products used φ as bf16 too.
template <bool RELU>
__device__ __forceinline__ void nala_query_backward_from_phi(float xh, float f0, float f1, const TokenStats& st, float g0, float g1,
                                                             const NalaKernelParams& P, float& gxh, float& gp) {
  const float dAa = g0 * f0 + g1 * f1;
  gxh = 0.f;
  if constexpr (!RELU) {
    const float tt = f_tanh<true>(P.alpha * xh);
    gxh = (g1 * f0 - g0 * f1) * 0.78539816f * P.alpha * (1.f - tt * tt);
  }
  // |x̂|^p and its gradient are 0 at x̂ = 0 (p ≥ 1: check_options): there both terms are left out, by
  // selects on a stand-in x̂ = 1 rather than a branch (a branch an element kept the compiler from
  // interleaving the elements' reciprocal and logarithm: docs/benchmarks.md, forty-fifth session)
  const bool nz = xh != 0.f;
  const float xs = nz ? xh : 1.f;
  const float gxh_p = gxh + __fdividef(dAa * st.p, xs), gp_p = gp + dAa * f_log<true>(fabsf(xs));
  gxh = nz ? gxh_p : gxh;
  gp = nz ? gp_p : gp;
}

// The one-pass backward's feature map: one token's ∂L/∂x from ∂L/∂φ (its fp32 row grow: F
// columns in shared memory) with x still in registers (this lane's 16-byte chunks, as
// token_features read them) and the statistics token_features returned; ∂L/∂x goes as bf16
// straight to out_row (D elements, 16-byte stores), nothing when !valid; with sum, the warp's column
// sums of what it stores (0 for an invalid token) added into acc (warp_token_sums: every lane of the
// warp must take part). Math as features_backward
// with the fast intrinsics, rearranged so one value per element waits for the token's sums:
//   nala:    dx_j = e_j + x_j·c with e_j = ∂L/∂x̂_j / max(n, ε_n) + direct_j and, for n > ε_n,
//            c = (gn − Σ x̂·∂L/∂x̂ / n) / n, else c = gn / n (0 at n = 0): features_backward's two
//            branches with the common factor taken out.
// FROM_PHI (FEAT = 2, a query only): phi_row is the token's φ row as token_features wrote it (bf16, what
// the products read); a·cos θ and a·sin θ come from it (nala_query_backward_from_phi) instead of being
// computed again in fp32 (nala_element_backward).
// FEAT = 1 instances hold the elu / relu / focused code only, FEAT = 2 the nala maps' (with_map): a
// kernel carries no code for maps it never runs.
template <int D, int FEAT, int TPT, bool FROM_PHI = false, int CPL>
__device__ __forceinline__ void token_features_backward(const uint4 (&raw)[CPL], bool valid, const TokenStats& st, const float* grow,
                                                        const NalaKernelParams& P, bool query, __nv_bfloat16* out_row, bool sum,
                                                        float (&acc)[CPL], const __nv_bfloat16* phi_row = nullptr) {
  constexpr int CH = D / 8;
  const int lane = threadIdx.x % TPT;
  float e[CPL][8];
  float c = 0.f;
  const auto xval = [&](int k, int u) {  // element 8·(lane + k·TPT) + u of the token, fp32 (0 for an invalid token)
    const __nv_bfloat162 pr = reinterpret_cast<const __nv_bfloat162*>(&raw[k])[u / 2];
    return valid && lane + k * TPT < CH ? (u % 2 ? __high2float(pr) : __low2float(pr)) : 0.f;
  };
  const auto gval = [&](int k, int u, int part) { return grow[part * D + 8 * (lane + k * TPT) + u]; };
  // chunk k's 8 values of part `part` of grow by two 16-byte loads (the row, D and a chunk are 16-byte
  // aligned): element by element, a warp's 8 tokens × 4 lanes hit each bank 4 times over at d 64 (rows
  // 132 floats ≡ 4 mod 32 apart, lanes 8 floats apart), 4 shared-memory wavefronts a load
  const auto gchunk = [&](int k, int part, float(&gv)[8]) {
    const float4* p4 = reinterpret_cast<const float4*>(grow + part * D + 8 * (lane + k * TPT));
    const float4 lo4 = p4[0], hi4 = p4[1];
    gv[0] = lo4.x, gv[1] = lo4.y, gv[2] = lo4.z, gv[3] = lo4.w, gv[4] = hi4.x, gv[5] = hi4.y, gv[6] = hi4.z, gv[7] = hi4.w;
  };
  if (FEAT == 1 && (P.map == KernelMap::Elu || P.map == KernelMap::Relu)) {
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
      if (lane + k * TPT >= CH) continue;
      float gv[8];
      gchunk(k, 0, gv);
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const float xj = xval(k, u), g = gv[u];
        e[k][u] = P.map == KernelMap::Elu ? g * (xj > 0.f ? 1.f : __expf(xj)) : (xj > 0.f ? g : 0.f);
      }
    }
  } else if (FEAT == 1) {  // focused
    const float pw = P.focus_power;
    float G = 0.f;
#pragma unroll
    for (int k = 0; k < CPL; ++k)
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (lane + k * TPT < CH) G += gval(k, u, 0) * pow_pos<true>(fmaxf(xval(k, u), 0.f), pw);
    G = token_sum<TPT>(G);
    const bool clamped = !(st.nrp > 1e-12f);
    const float Dn = clamped ? 1e-12f : st.nrp, s = st.nr / Dn;
#pragma unroll
    for (int k = 0; k < CPL; ++k)
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (lane + k * TPT >= CH) continue;
        const float r = fmaxf(xval(k, u), 0.f);
        float v = 0.f;
        if (r > 0.f) {
          const float rp = pow_pos<true>(r, pw), drp = pw * rp / r;
          float ds = (st.nr > 0.f ? r / st.nr : 0.f) / Dn;
          if (!clamped) ds -= st.nr / (Dn * Dn) * (rp * drp / st.nrp);
          v = gval(k, u, 0) * s * drp + G * ds;
        }
        e[k][u] = v;
      }
  } else {
    float dot = 0.f, gp = 0.f;
    const float key_ainv = P.alpha * st.inv, key_kq = 0.78539816f * P.alpha;  // nala_key_backward_cube's token constants
    const auto elements = [&](auto relu, auto cube) {
#pragma unroll
      for (int k = 0; k < CPL; ++k) {
        if (lane + k * TPT >= CH) continue;
        uint4 praw[2];  // the φ row's chunk (phi_row), both halves, unpacked element by element
        if constexpr (FROM_PHI) {
          praw[0] = *reinterpret_cast<const uint4*>(phi_row + 8 * (lane + k * TPT));
          praw[1] = *reinterpret_cast<const uint4*>(phi_row + D + 8 * (lane + k * TPT));
        }
        float g0[8], g1[8];  // ∂L/∂φ of the chunk's elements: the cos and sin parts (nala), or the two signs (nala-relu)
        gchunk(k, 0, g0);
        gchunk(k, 1, g1);
        const auto fval = [&](int part, int u) {
          const __nv_bfloat162 pr = reinterpret_cast<const __nv_bfloat162*>(&praw[part])[u / 2];
          return u % 2 ? __high2float(pr) : __low2float(pr);
        };
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const float xj = xval(k, u);
          float gxh, direct = 0.f;
          if constexpr (FROM_PHI)
            nala_query_backward_from_phi<decltype(relu)::value>(xj * st.inv, fval(0, u), fval(1, u), st, g0[u], g1[u], P, gxh, gp);
          else if constexpr (decltype(cube)::value && !decltype(relu)::value)  // a key, λ = 3 (cube is never set for a query)
            nala_key_backward_cube(xj, key_ainv, key_kq, g0[u], g1[u], gxh, direct);
          else
            nala_element_backward<true, decltype(relu)::value, decltype(cube)::value>(xj, st, g0[u], g1[u], P, query, gxh,
                                                                                      direct, gp);
          dot += xj * st.inv * gxh;
          e[k][u] = gxh * st.inv + direct;
        }
      }
    };
    // a key's power λ tested once a token (λ = 3: |x|³ and |x|² inlined), not an element
    const bool cube = !FROM_PHI && !query && st.p == 3.f;
    if (P.map == KernelMap::NalaRelu) {
      if (cube) elements(std::true_type{}, std::true_type{});
      else elements(std::true_type{}, std::false_type{});
    } else {
      if (cube) elements(std::false_type{}, std::true_type{});
      else elements(std::false_type{}, std::false_type{});
    }
    dot = token_sum<TPT>(dot);
    gp = token_sum<TPT>(gp);
    const float gn = query ? gp * P.lambda * (1.f - st.tn * st.tn) : 0.f;
    c = st.n > P.eps_norm ? st.inv * (gn - dot * st.inv) : (st.n > 0.f ? gn / st.n : 0.f);
  }
  if (!sum) {
    if (!valid) return;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
      const int ch = lane + k * TPT;
      if (ch >= CH) continue;
      uint4 o;
      __nv_bfloat162* ob = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int u = 0; u < 4; ++u) ob[u] = __floats2bfloat162_rn(fmaf(xval(k, 2 * u), c, e[k][2 * u]), fmaf(xval(k, 2 * u + 1), c, e[k][2 * u + 1]));
      *reinterpret_cast<uint4*>(out_row + 8 * ch) = o;
    }
    return;
  }
  static_assert(TPT == 4, "warp_token_sums takes 4 lanes a token");
  float stored[CPL][8];  // what goes to memory, in float (0 for an invalid token or a chunk past D)
#pragma unroll
  for (int k = 0; k < CPL; ++k) {
    const int ch = lane + k * TPT;
    uint4 o = make_uint4(0, 0, 0, 0);
    if (ch < CH) {
      __nv_bfloat162* ob = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int u = 0; u < 4; ++u) ob[u] = __floats2bfloat162_rn(fmaf(xval(k, 2 * u), c, e[k][2 * u]), fmaf(xval(k, 2 * u + 1), c, e[k][2 * u + 1]));
      if (valid) *reinterpret_cast<uint4*>(out_row + 8 * ch) = o;
      else o = make_uint4(0, 0, 0, 0);
    }
    unpack_bf16x8(o, stored[k]);
  }
  warp_token_sums(stored, acc);
}

// nala / nala-relu part of features_backward: g[j] (j < D) becomes ∂L/∂x_j.
template <int D, int TPT, bool FAST, bool RELU>
__device__ __forceinline__ void features_backward_nala(const float* x, float* g, const TokenStats& st, const NalaKernelParams& P,
                                                       bool query) {
  const int lane = threadIdx.x % TPT;
  // first pass ∂L/∂x̂ (kept in g[j]) and the direct key-power term (in g[D+j])
  float dot = 0.f, gp = 0.f;
#pragma unroll 4
  for (int j = lane; j < D; j += TPT) {
    const float xj = x[j];
    float gxh, direct;
    nala_element_backward<FAST, RELU>(xj, st, g[j], g[D + j], P, query, gxh, direct, gp);
    g[j] = gxh;
    g[D + j] = direct;
    dot += xj * st.inv * gxh;
  }
  dot = token_sum<TPT>(dot);
  gp = token_sum<TPT>(gp);
  const float gn = query ? gp * P.lambda * (1.f - st.tn * st.tn) : 0.f;
  const bool above = st.n > P.eps_norm;
#pragma unroll 4
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
    if (P.map == KernelMap::NalaRelu) features_backward_nala<D, TPT, FAST, true>(x, g, st, P, query);
    else features_backward_nala<D, TPT, FAST, false>(x, g, st, P, query);
  }
  __syncwarp();
  if (n < n_end) store_row<T, D, TPT>(out + (int64_t(bh) * P.N + n) * D, g, 1.f);
}

}  // namespace nala::attention::cuda
