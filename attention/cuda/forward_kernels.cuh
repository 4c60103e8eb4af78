// Forward kernels of fused NaLa attention: state_kernel (S, z partials per sequence chunk),
// reduce_chunks_kernel (deterministic in-order sum) and output_kernel (o = φ_q S / (φ_q·z + ε)).
// Each kernel's shared-memory layout is a struct of float offsets with leading dims from mma.cuh.
#pragma once
#include "attention/cuda/feature_maps.cuh"
#include "attention/cuda/mma.cuh"
#include "attention/cuda/tiles.cuh"

namespace nala::attention::cuda {

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

}  // namespace nala::attention::cuda
