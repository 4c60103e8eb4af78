// Backward kernels of fused NaLa attention: dq_kernel (dq and the dS, dz partials) and dkv_kernel
// (dk, dv from the reduced dS, dz); reduce_chunks_kernel of forward_kernels.cuh sums the partials.
#pragma once
#include "attention/cuda/forward_kernels.cuh"

namespace nala::attention::cuda {

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
