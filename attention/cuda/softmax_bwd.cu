// nala's softmax attention backward (attention/cuda/softmax_fwd.h SoftmaxBwdParams): FlashAttention-2's
// backward (Dao 2023, Algorithm 2) for the DiT blocks' short sequences, N ≤ 256 tokens, bf16, head dims
// 64 and 72, with one CTA holding a whole (batch, head): its 16 warps own 16 keys each (K, V and the
// accumulators dK, dV stay with the warp), and the queries go by in blocks of 16. Because every key is
// in the CTA, a query block's dQ is complete in it: no atomics, no fp32 dQ buffer, no second pass; and
// D = rowsum(dO ∘ O) of every query is computed once at the start, while K and V land (no
// preprocessing kernel). Per query block, per warp (16 keys):
//   sᵀ = K qᵀ (mma.sync m16n8k16, fp32), pᵀ = 2^(sᵀ·scale·log2 e − lse)      (lse: the forward's, log2)
//   dV += pᵀ dO,  dpᵀ = V dOᵀ,  dsᵀ = pᵀ ∘ (dpᵀ − D),  dK += dsᵀ q
// then dsᵀ goes to shared memory (bf16) and warps 0..D/8−1 each compute an 8-channel slice of
// dQ = ds K (16 × D, k = the keys). dQ and dK are scaled by the softmax's scale once, at the store.
// Head dim 72 is zero-padded to 80 wherever it is a product's reduction (q kᵀ, V dOᵀ).
#include <stdexcept>
#include <string>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention/cuda/mma_bf16.cuh"
#include "attention/cuda/softmax_fwd.h"
#include "attention/cuda/softmax_tiles.cuh"
#include "ops/cuda/cp_async.cuh"
#include "ops/cuda/ptx_math.cuh"

namespace nala::attention::cuda {
namespace {

using namespace nala::cuda_async;
using nala::cuda_ptx::ex2_approx;

template <int D>
struct SoftmaxBwdTile {
  static constexpr int KEYS = kSoftmaxBwdMaxTokens, WARPS = KEYS / 16, THREADS = 32 * WARPS, BQ = 16;
  static constexpr int DK = (D + 15) / 16 * 16;  // a product's reduction over the head dim in whole k16 steps (pads zero)
  static constexpr int LD = ld_bf16(DK);         // rows of the K, V, q and dO tiles
  static constexpr int LDS = ld_bf16(BQ);        // rows (keys) of dsᵀ, BQ queries each
  static constexpr int NT = D / 8, KS = DK / 16;
  // shared memory, bf16 elements: K, V (all keys), q, dO (two query-block buffers each), dsᵀ; then D and
  // lse of every query (2 × KEYS floats)
  static constexpr int SK = 0, SV = SK + KEYS * LD, SQ = SV + KEYS * LD, SDO = SQ + 2 * BQ * LD;
  static constexpr int SDS = SDO + 2 * BQ * LD, ELEMS = SDS + KEYS * LDS;
  static constexpr int BYTES = ELEMS * 2 + 2 * KEYS * 4;
  static_assert(NT <= WARPS, "a warp a dQ slice");
  static_assert(LD % 8 == 0 && LDS % 8 == 0 && ELEMS % 8 == 0, "16-byte rows");
};

template <int D>
__global__ void __launch_bounds__(SoftmaxBwdTile<D>::THREADS, 1) softmax_bwd_kernel(const SoftmaxBwdParams p) {
  using Tl = SoftmaxBwdTile<D>;
  extern __shared__ __align__(16) unsigned char softmax_bwd_smem[];
  __nv_bfloat16* sm = reinterpret_cast<__nv_bfloat16*>(softmax_bwd_smem);
  __nv_bfloat16 *sK = sm + Tl::SK, *sV = sm + Tl::SV, *sQ = sm + Tl::SQ, *sDO = sm + Tl::SDO, *sDS = sm + Tl::SDS;
  float* sD = reinterpret_cast<float*>(sm + Tl::ELEMS);  // (KEYS): D = rowsum(dO ∘ o) of every query
  float* sL = sD + Tl::KEYS;                              // (KEYS): the forward's lse of every query
  const int bh = blockIdx.x, b = bh / p.H, h = bh - b * p.H, N = p.N;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  auto at = [&](const void* base, const int64_t* st) {
    return static_cast<const __nv_bfloat16*>(base) + b * st[0] + h * st[1];
  };
  const __nv_bfloat16 *q = at(p.q, p.q_stride), *k = at(p.k, p.k_stride), *v = at(p.v, p.v_stride), *o = at(p.o, p.o_stride),
                      *dO = at(p.d_o, p.do_stride);
  const float* lse = p.lse + int64_t(bh) * N;

  // zero pads of every tile that is a product's reduction over the head dim: K, V, q (both buffers), dO (both)
  zero_pad_columns<D, Tl::DK, Tl::THREADS>(sK, Tl::LD, 2 * Tl::KEYS);  // K and V are adjacent
  zero_pad_columns<D, Tl::DK, Tl::THREADS>(sQ, Tl::LD, 4 * Tl::BQ);    // q's and dO's two buffers are adjacent
  auto copy_block = [&](int qb, int buf) {  // query block qb's q and dO tiles into buffer buf
    const int q0 = qb * Tl::BQ, valid = N - q0;
    copy_rows<D, Tl::BQ, Tl::THREADS>(sQ + buf * Tl::BQ * Tl::LD, Tl::LD, q + int64_t(q0) * p.q_stride[2], p.q_stride[2], valid);
    copy_rows<D, Tl::BQ, Tl::THREADS>(sDO + buf * Tl::BQ * Tl::LD, Tl::LD, dO + int64_t(q0) * p.do_stride[2], p.do_stride[2], valid);
  };
  copy_rows<D, Tl::KEYS, Tl::THREADS>(sK, Tl::LD, k, p.k_stride[2], N);
  copy_rows<D, Tl::KEYS, Tl::THREADS>(sV, Tl::LD, v, p.v_stride[2], N);
  copy_block(0, 0);
  cp_async_commit();
  // while those land: D = rowsum(dO ∘ o) and lse of every query into shared memory (visible after the
  // loop's first barrier): computed once a CTA instead of once a query block in every warp. Warp w takes
  // queries w, w + 16, …, 8 at a time with every load issued before the first sum (query index clamped
  // to N − 1: no branch between the loads; a clamped query is never stored); lanes over channel pairs
  // 2·lane (< 64 ≤ D) and, at D = 72, 64 + 2·lane for lanes 0..3 (the others re-read a valid pair and
  // count it 0).
  {
    const float2 zero = make_float2(0.f, 0.f);
    auto pair = [](const __nv_bfloat16* row, int c) { return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + c)); };
    constexpr int QW = Tl::KEYS / Tl::WARPS, QG = 8;  // queries a warp, queries reduced together
    const int c2 = D > 64 ? min(64 + 2 * lane, D - 2) : 0;
    const float tail = D > 64 && 64 + 2 * lane < D ? 1.f : 0.f;
    for (int j0 = 0; j0 < QW && warp + Tl::WARPS * j0 < N; j0 += QG) {
      float2 a[QG], bb[QG], a2[QG], b2[QG];
#pragma unroll
      for (int u = 0; u < QG; ++u) {
        const int qq = min(warp + Tl::WARPS * (j0 + u), N - 1);
        const __nv_bfloat16 *dor = dO + int64_t(qq) * p.do_stride[2], *orow = o + int64_t(qq) * p.o_stride[2];
        a[u] = pair(dor, 2 * lane), bb[u] = pair(orow, 2 * lane);
        if constexpr (D > 64) a2[u] = pair(dor, c2), b2[u] = pair(orow, c2);
        else a2[u] = zero, b2[u] = zero;
      }
#pragma unroll
      for (int u = 0; u < QG; ++u) {
        float acc = a[u].x * bb[u].x + a[u].y * bb[u].y + tail * (a2[u].x * b2[u].x + a2[u].y * b2[u].y);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        const int qq = warp + Tl::WARPS * (j0 + u);
        if (lane == 0 && qq < N) sD[qq] = acc;
      }
    }
  }
  for (int qq = threadIdx.x; qq < N; qq += Tl::THREADS) sL[qq] = lse[qq];

  const int key0 = 16 * warp;                        // this warp's keys: key0 .. key0 + 15
  const bool row_ok[2] = {key0 + g < N, key0 + g + 8 < N};  // its rows g and g + 8 hold real keys
  float dk[Tl::NT][4] = {}, dv[Tl::NT][4] = {};
  const int qblocks = (N + Tl::BQ - 1) / Tl::BQ, kmax = (N + 15) / 16;
  for (int i = 0; i < qblocks; ++i) {
    const int buf = i & 1, q0 = i * Tl::BQ;
    if (i + 1 < qblocks) copy_block(i + 1, buf ^ 1);  // into the buffers read in block i − 1, free since its middle barrier
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const __nv_bfloat16 *tq = sQ + buf * Tl::BQ * Tl::LD, *tdo = sDO + buf * Tl::BQ * Tl::LD;
    // D and lse of this lane's four query columns; lse = ∞ for a query past N (p = 0 there)
    float Dq[4], Lq[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int qq = q0 + 8 * (c >> 1) + 2 * t + (c & 1);  // this lane's query columns: n8 tile c / 2, column 2t + (c & 1)
      Dq[c] = qq < N ? sD[qq] : 0.f;
      Lq[c] = qq < N ? sL[qq] : INFINITY;
    }

    // c (16 keys × 16 queries) = rows · tileᵀ over the head dim: A = this warp's 16 rows of K or V,
    // B(k = channel, n = query) = the query tile's rows
    auto keys_by_queries = [&](const __nv_bfloat16* rows, const __nv_bfloat16* tile, float (&c)[2][4]) {
#pragma unroll
      for (int kk = 0; kk < Tl::KS; ++kk) {
        uint32_t a[4];
        load_a<false>(a, rows, Tl::LD, key0, 16 * kk);
        mma_row<2, false>(c, a, tile, Tl::LD, 0, 16 * kk);
      }
    };
    // sᵀ = K qᵀ
    float s[2][4] = {};
    keys_by_queries(sK, tq, s);
    // pᵀ = 2^(sᵀ·scale·log2 e − lse): 0 for keys past N (their zero rows give s = 0) and queries past N (lse = ∞)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = row_ok[e >> 1] ? ex2_approx(s[n][e] * p.scale_log2 - Lq[2 * n + (e & 1)]) : 0.f;
    // dV += pᵀ dO: pᵀ's C fragments are one k16 step's A fragment; B(k = query, n = channel) = dO's rows (transposed loads)
    {
      uint32_t pa[4];
      c_to_a(s[0], s[1], pa);
      mma_row<Tl::NT, true>(dv, pa, tdo, Tl::LD, 0, 0);
    }
    // dpᵀ = V dOᵀ
    float dp[2][4] = {};
    keys_by_queries(sV, tdo, dp);
    // dsᵀ = pᵀ ∘ (dpᵀ − D), in place of dp
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[n][e] = s[n][e] * (dp[n][e] - Dq[2 * n + (e & 1)]);
    // dK += dsᵀ q: B(k = query, n = channel) = q's rows (transposed loads)
    uint32_t da[4];
    c_to_a(dp[0], dp[1], da);
    mma_row<Tl::NT, true>(dk, da, tq, Tl::LD, 0, 0);
    // dsᵀ to shared memory, rows = keys: rows g, g + 8 of this warp's, columns 2t, 2t + 1 of each n8 tile
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      *reinterpret_cast<uint32_t*>(sDS + (key0 + g) * Tl::LDS + 8 * n + 2 * t) = n == 0 ? da[0] : da[2];
      *reinterpret_cast<uint32_t*>(sDS + (key0 + g + 8) * Tl::LDS + 8 * n + 2 * t) = n == 0 ? da[1] : da[3];
    }
    __syncthreads();
    // dQ (16 queries × D) = ds K: warp w < D/8 takes channels 8w .. 8w + 7; A(m = query, k = key) = dsᵀ's
    // rows (transposed loads), B(k = key, n = channel) = K's rows (transposed loads); keys past N add 0
    if (warp < Tl::NT) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      for (int ks = 0; ks < kmax; ++ks) {
        uint32_t a[4], bb[2];
        load_a<true>(a, sDS, Tl::LDS, 0, 16 * ks);
        ldsm_x2_t(bb, sK + b_cols_at(8 * warp, 16 * ks, Tl::LD));
        mma_bf16(c, a, bb[0], bb[1]);
      }
      auto* dq = static_cast<__nv_bfloat16*>(p.dq) + b * p.dq_stride[0] + h * p.dq_stride[1];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = q0 + g + 8 * r;
        if (row < N)
          *reinterpret_cast<__nv_bfloat162*>(dq + int64_t(row) * p.dq_stride[2] + 8 * warp + 2 * t) =
              __floats2bfloat162_rn(c[2 * r] * p.scale, c[2 * r + 1] * p.scale);
      }
    }
  }
  cp_async_wait<0>();

  // this warp's keys' dK (times the scale) and dV
  auto* dkp = static_cast<__nv_bfloat16*>(p.dk) + b * p.dk_stride[0] + h * p.dk_stride[1];
  auto* dvp = static_cast<__nv_bfloat16*>(p.dv) + b * p.dv_stride[0] + h * p.dv_stride[1];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!row_ok[r]) continue;
    const int64_t key = key0 + g + 8 * r;
#pragma unroll
    for (int n = 0; n < Tl::NT; ++n) {
      *reinterpret_cast<__nv_bfloat162*>(dkp + key * p.dk_stride[2] + 8 * n + 2 * t) = __floats2bfloat162_rn(dk[n][2 * r] * p.scale, dk[n][2 * r + 1] * p.scale);
      *reinterpret_cast<__nv_bfloat162*>(dvp + key * p.dv_stride[2] + 8 * n + 2 * t) = __floats2bfloat162_rn(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

template <int D>
void launch(const SoftmaxBwdParams& p, cudaStream_t st) {
  using Tl = SoftmaxBwdTile<D>;
  if (cudaFuncSetAttribute(softmax_bwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tl::BYTES) != cudaSuccess)
    throw std::runtime_error("softmax_bwd: cannot reserve " + std::to_string(Tl::BYTES) + " bytes of shared memory");
  const int64_t blocks = int64_t(p.B) * p.H;
  if (blocks > 2147483647) throw std::runtime_error("softmax_bwd: " + std::to_string(blocks) + " thread blocks exceed the grid");
  softmax_bwd_kernel<D><<<unsigned(blocks), Tl::THREADS, Tl::BYTES, st>>>(p);
}

}  // namespace

bool softmax_bwd_supported(int D, int N) { return (D == 64 || D == 72) && N >= 1 && N <= kSoftmaxBwdMaxTokens; }

void launch_softmax_bwd(const SoftmaxBwdParams& p, void* stream) {
  if (!softmax_bwd_supported(p.D, p.N))
    throw std::runtime_error("softmax_bwd: head dim " + std::to_string(p.D) + ", " + std::to_string(p.N) + " tokens (64 or 72, at most " +
                             std::to_string(kSoftmaxBwdMaxTokens) + ")");
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.D == 64) launch<64>(p, st);
  else launch<72>(p, st);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("softmax_bwd: launch failed: ") + cudaGetErrorString(e));
}

}  // namespace nala::attention::cuda
