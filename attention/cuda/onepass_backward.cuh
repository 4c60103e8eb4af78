// One-pass NaLa attention backward for bf16 inputs (docs/nala_attention.md §4): one kernel per
// (batch, head) cluster, the same rank split as the forward (onepass_kernels.cuh).
//   load     S and z saved by the forward → S as bf16 hi + lo rows f (column D and pads zero), z fp32
//   phase 1  its q, grad_o tiles: φ_q; g = do / den; X = g Sᵀ (mma); c_t = φ_q,t·X_t / den_t
//            (= do_t·o_t / den_t); dφ_q = X − c z → dq through φ_q's backward (from φ_q's bf16 row:
//            nala_query_backward_from_phi); and
//            dS' += φ_qᵀ [g | −c] (the −c column gives dz = −Σ φ_q c in the same product)
//   reduce   dS' = [dS | dz] summed over the ranks in rank order (distributed shared memory)
//   phase 2  its k, v tiles: φ_k; dv = φ_k dS / N; dφ_k = [v | 1] dS'ᵀ / N (the ones column adds
//            dz) → dk through φ_k's backward
// Every product is bf16 mma.sync with fp32 accumulation; S and dS' enter as hi + lo pairs.
// With P.grad_sums, also the column sums of dq, dk, dv as stored over the rank's tokens (qkvg's bias
// gradient without a pass over the gradients): warp_token_sums per tile into registers, the 8 warps
// added in order at the end of each phase (flush_column_sums).
#pragma once
#include "attention/cuda/onepass_kernels.cuh"

namespace nala::attention::cuda {

// LO: S and dS' enter the products as bf16 hi + lo pairs (true) or as bf16 alone (false: less
// shared memory, two CTAs an SM where it fits, half the mma passes; the gradients' error grows by
// the state's bf16 rounding).
template <int D, int FEAT, bool LO>
struct OnePassBwd {
  using O = OnePass<D, FEAT>;
  static constexpr int TILE = O::TILE, THREADS = O::THREADS;
  static constexpr int NHB = O::Fp / 16;   // n8 tiles in each half of the F columns
  static constexpr int LDDP = ld_row(O::Fp);  // dφ tile, fp32 (the feature maps' backward input)
  static constexpr int LDSR = ld_bf16(O::NP);  // S or dS' as bf16 rows f
  // no x tile: φ's backward takes x from the registers the tile's fetch filled (token_features_backward)
  static constexpr int PHI = 0, GS = PHI + TILE * O::LDPH * 2, DPHI = GS + TILE * O::LDV * 2,
                       WORK_END = DPHI + TILE * LDDP * 4;
  static constexpr int SR_HI = ((WORK_END > O::ACC_END ? WORK_END : O::ACC_END) + 15) / 16 * 16;
  static constexpr int SR_LO = SR_HI + O::Fp * LDSR * 2, ZS = SR_LO + (LO ? O::Fp * LDSR * 2 : 0), CPART = ZS + O::Fp * 4,
                       DINV = CPART + 2 * TILE * 4, BYTES = DINV + TILE * 4;
  static constexpr int MIN_BLOCKS = BYTES <= 112 * 1024 ? 2 : 1;  // CTAs an SM that shared memory allows
  // the column sums' per-warp rows at a phase's end (8 warps × D floats, twice): past the partial
  // state, which the reduce writes then, inside the work tiles, which no phase reads then
  static constexpr int SUMS = O::ACC_END;
  static_assert(SUMS + 2 * 8 * D * 4 <= WORK_END && O::THREADS == 256, "the column sums' rows: 8 warps, inside the work tiles");
};

// A phase's column sums (warp_token_sums in acc): every warp's lanes put theirs in red (8 warps × D
// floats), then, after a barrier, thread c < D adds the 8 warps in order into P.grad_sums[row][part][h][c].
// Other threads may still be reading red when one returns: red must stay untouched until the block's
// next barrier.
template <int D, int CPL>
__device__ __forceinline__ void flush_column_sums(const float (&acc)[CPL], float* red, const NalaKernelParams& P, int64_t row, int part, int h) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, first = warp_sum_first<CPL>(lane);
#pragma unroll
  for (int j = 0; j < CPL; ++j) {
    const int ch = warp_sum_channel(lane, first + j);
    if (ch < D) red[warp * D + ch] = acc[j];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) s += red[w * D + c];
    P.grad_sums[((row * 3 + part) * P.H + h) * D + c] = s;
  }
}

// The warp's column sums of a staged bf16 tile's rows (leading dimension LD; this thread's row my_t,
// its chunks lane % 4 + 4k; an invalid row counts 0) added into acc (warp_token_sums).
template <int D, int LD, int CPL>
__device__ __forceinline__ void tile_column_sums(const __nv_bfloat16* tile, int my_t, bool valid, float (&acc)[CPL]) {
  constexpr int CH = D / 8;
  const int lane = threadIdx.x % 4;
  float x[CPL][8];
#pragma unroll
  for (int k = 0; k < CPL; ++k) {
    const int c = lane + 4 * k;
    unpack_bf16x8(valid && c < CH ? *reinterpret_cast<const uint4*>(tile + my_t * LD + 8 * c) : make_uint4(0, 0, 0, 0), x[k]);
  }
  warp_token_sums(x, acc);
}

// A token tile of grad_o as bf16 rows g = do / den (NP columns, zero from D on; rows past the end
// zero), with 1/den per token kept in dinv: fetch() into registers, commit() into the tile.
// fetch() only issues loads (den's reciprocal waits for commit(): nothing stalls on a load there).
template <int D, int NP, int TILE, int THREADS>
struct GradTile {
  static constexpr int TPT = THREADS / TILE, CH = D / 8, CPL = (CH + TPT - 1) / TPT;
  uint4 raw[CPL];
  float den_v = 0.f;  // den of the token
  bool valid = false;  // the token is before the end
  // staged: as TileFetch::fetch (the tile copied to shared memory by stage_first_tile), and den from
  // staged_den[threadIdx.x] (each thread's own copy: stage_first_den)
  __device__ void fetch(const __nv_bfloat16* base, const int64_t* stride, const float* den, int b, int h, int t0, int n_end,
                        const __nv_bfloat16* staged = nullptr, const float* staged_den = nullptr) {
    const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT, n = t0 + t;
    valid = n < n_end;
    if (!valid) return;
    den_v = staged_den != nullptr ? staged_den[threadIdx.x] : den[n];
    const __nv_bfloat16* src = staged != nullptr ? staged + t * D : base + b * stride[0] + h * stride[1] + int64_t(n) * stride[2];
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
      const int c = lane + k * TPT;
      if (c < CH) raw[k] = *reinterpret_cast<const uint4*>(src + c * 8);
    }
  }
  template <int LD>
  __device__ void commit(__nv_bfloat16* gs, float* dinv) const {
    const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
    const float inv_den = valid ? f_rcp<true>(den_v) : 0.f;  // (bf16 inputs: the hardware reciprocal)
    __nv_bfloat16* row = gs + t * LD;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
      const int c = lane + k * TPT;
      if (c >= CH) continue;
      uint4 out = make_uint4(0, 0, 0, 0);
      if (valid) {
        const unsigned* in = reinterpret_cast<const unsigned*>(&raw[k]);
        __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float2 x = cuda_vec::unpack_bf16x2(in[u]);
          o[u] = __floats2bfloat162_rn(x.x * inv_den, x.y * inv_den);
        }
      }
      *reinterpret_cast<uint4*>(row + c * 8) = out;
    }
    for (int c = CH + lane; c < NP / 8; c += TPT) *reinterpret_cast<uint4*>(row + c * 8) = make_uint4(0, 0, 0, 0);
    if (lane == 0) dinv[t] = inv_den;
  }
};

// den of the tile's tokens from t0 (den: the pair's row), each thread's token into staged_den[threadIdx.x]
// (4 copies a token: each thread reads back its own, GradTile::fetch), by cp.async, no group committed
template <int TILE, int THREADS>
__device__ __forceinline__ void stage_first_den(float* staged_den, const float* den, int t0, int n_end) {
  const int n = t0 + int(threadIdx.x) / (THREADS / TILE);
  if (n < n_end) nala::cuda_async::cp_async<4>(staged_den + threadIdx.x, den + n);
}

// KS > 0 (P.lepe_ks == KS): LePE's part of dv added as phase 2 writes dv (onepass_kernels.cuh
// lepe_rows_out): the tile's window of grad_o (= ∂L/∂u) copied into the φ tile's memory once the
// products have read φ, P.lepe_wt the forward's taps, staged reversed (lepe_stage_taps REV).
// SUMS (P.grad_sums set): the column sums too, a kernel of its own so that the plain one keeps its registers.
// A cluster takes the (batch, head) pairs bh = blockIdx.y, blockIdx.y + gridDim.y, … (P.slots, as the
// forward); with P.next_stage ≥ 0 a pair's first q and grad_o tiles and den are copied to shared memory
// under the previous pair's last k tile. PERSIST false: the pair blockIdx.y alone (as the forward).
template <int D, int FEAT, bool LO, int KS = 0, bool SUMS = false, bool PERSIST = false>
__global__ void __launch_bounds__(256, OnePassBwd<D, FEAT, LO>::MIN_BLOCKS) onepass_backward_kernel(const NalaKernelParams P) {
  using O = OnePass<D, FEAT>;
  using L = OnePassBwd<D, FEAT, LO>;
  using T = __nv_bfloat16;
  constexpr int TILE = O::TILE, NHB = L::NHB;
  extern __shared__ float4 smem_f4[];
  char* sm = reinterpret_cast<char*>(smem_f4);
  T* phi = reinterpret_cast<T*>(sm + L::PHI);
  T* gs = reinterpret_cast<T*>(sm + L::GS);  // [g | −c] (phase 1), [v | 1] and the dv staging (phase 2)
  float* dphi = reinterpret_cast<float*>(sm + L::DPHI);
  float* accs = reinterpret_cast<float*>(sm);  // the partial dS' (aliases the work tiles)
  T* sr_hi = reinterpret_cast<T*>(sm + L::SR_HI);
  T* sr_lo = LO ? reinterpret_cast<T*>(sm + L::SR_LO) : nullptr;
  float* zs = reinterpret_cast<float*>(sm + L::ZS);
  float* cpart = reinterpret_cast<float*>(sm + L::CPART);
  float* dinv = reinterpret_cast<float*>(sm + L::DINV);
  T* next_q = PERSIST && P.next_stage >= 0 ? reinterpret_cast<T*>(sm + P.next_stage) : nullptr;  // the next pair's first q tile, then grad_o's, den
  float* next_den = reinterpret_cast<float*>(next_q + 2 * TILE * D);
  const int BH = P.B * P.H;
  const int rank = blockIdx.x, ranks = gridDim.x;
  const int begin = rank * P.tokens_per_chunk, end = min(P.N, begin + P.tokens_per_chunk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int mt = warp % 4, nh = warp / 4;  // 4 m16 token tiles × 2 column halves
  const T* qp = static_cast<const T*>(P.q);
  const T* gp = static_cast<const T*>(P.grad_o);
  for (int bh = blockIdx.y; bh < BH; bh += gridDim.y) {
    const int b = bh / P.H, h = bh % P.H, next = bh + gridDim.y;
    const bool staged = next_q != nullptr && bh != int(blockIdx.y);  // this pair's first tiles were staged
    if (staged) nala::cuda_async::cp_async_wait<0>();
    LepeTaps taps{nullptr, 0};
    if constexpr (KS > 0) taps = lepe_stage_taps<D, KS, O::THREADS, true>(P, sm, h);  // reversed; lands under phase 1

    // the first q, grad_o tile's loads fly while S is read
    const float* denp = P.den + int64_t(bh) * P.N;
    // fq_next holds the next q tile's loads and, from the last q tile on, phase 2's first k tile's (fk: the same
    // registers, no copy that would wait for them). Issued before phase 1's reduce they had not landed when phase 2's
    // first φ_k needed them (Nsight Compute, NaLaDiT-S/2: ≈ 5 % of the backward's stall samples, forty-eighth session).
    TileFetch<T, D, TILE, O::THREADS> fq, fq_next;
    GradTile<D, O::NP, TILE, O::THREADS> fg, fg_next;
    const T* kp = static_cast<const T*>(P.k);
    const T* vp = static_cast<const T*>(P.v);
    fq.fetch(qp, P.q_stride, b, h, begin, end, true, staged ? next_q : nullptr);
    fg.fetch(gp, P.go_stride, denp, b, h, begin, end, staged ? next_q + TILE * D : nullptr, staged ? next_den : nullptr);

    // ---- S (rows f, columns d; column D and the pads zero) and z from the forward, 4 columns a
    // thread (D % 8 == 0: a quad is all data or all pad). Every load issued before the first is used:
    // four at a time, and z's after S's, they had made three or four round trips in a row
    constexpr int Q = O::NP / 4, S_ITER = (O::Fp * Q + O::THREADS - 1) / O::THREADS;
    static_assert(O::Fp <= O::THREADS, "z: one value a thread");
    const float z_mine = threadIdx.x < O::Fp ? P.z[int64_t(bh) * O::Fp + threadIdx.x] : 0.f;
    float4 s_quads[S_ITER];
#pragma unroll
    for (int it = 0; it < S_ITER; ++it) {
      const int i = threadIdx.x + it * O::THREADS, f = i / Q, n0 = i % Q * 4;
      s_quads[it] = i < O::Fp * Q && n0 < D ? *reinterpret_cast<const float4*>(P.S + (int64_t(bh) * O::Fp + f) * O::Dp + n0)
                                            : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int it = 0; it < S_ITER; ++it) {
      const int i = threadIdx.x + it * O::THREADS, f = i / Q, n0 = i % Q * 4;
      if (i >= O::Fp * Q) continue;
      const float4 x = s_quads[it];
      const __nv_bfloat162 h01 = __floats2bfloat162_rn(x.x, x.y), h23 = __floats2bfloat162_rn(x.z, x.w);
      __nv_bfloat162* hi = reinterpret_cast<__nv_bfloat162*>(sr_hi + f * L::LDSR + n0);
      hi[0] = h01;
      hi[1] = h23;
      if (LO) {
        const float2 r01 = cuda_vec::unpack_bf16x2(*reinterpret_cast<const unsigned*>(&h01)),
                     r23 = cuda_vec::unpack_bf16x2(*reinterpret_cast<const unsigned*>(&h23));
        __nv_bfloat162* lo = reinterpret_cast<__nv_bfloat162*>(sr_lo + f * L::LDSR + n0);
        lo[0] = __floats2bfloat162_rn(x.x - r01.x, x.y - r01.y);
        lo[1] = __floats2bfloat162_rn(x.z - r23.x, x.w - r23.y);
      }
    }
    if (threadIdx.x < O::Fp) zs[threadIdx.x] = z_mine;

    // ---- phase 1: dq, and dS' = Σ φ_qᵀ [g | −c] over this rank's tokens
    float acc[O::UPW][O::NH][4] = {};
    constexpr int TPT = O::THREADS / TILE;
    const int my_t = threadIdx.x / TPT;  // this thread's token of a tile
    T* phi_row = phi + my_t * O::LDPH;    // its row of the φ tile
    const float* dphi_row = dphi + my_t * L::LDDP;
    constexpr int CPL = TileFetch<T, D, TILE, O::THREADS>::CH;  // a thread's 16-byte chunks of its token
    constexpr bool sums = SUMS;
    const int64_t sum_row = int64_t(b) * ranks + rank;  // this CTA's row of P.grad_sums
    float qsum[CPL] = {};
    for (int t0 = begin; t0 < end; t0 += TILE) {
      const bool last = t0 + TILE >= end;
      if (!last) {  // the next tile's loads fly while this one is worked on
        fq_next.fetch(qp, P.q_stride, b, h, t0 + TILE, end, true);
        fg_next.fetch(gp, P.go_stride, denp, b, h, t0 + TILE, end);
      } else {  // phase 2's first k tile: under this tile's work, the column sums and the reduce
        fq_next.fetch(kp, P.k_stride, b, h, begin, end, true);
      }
      fg.template commit<O::LDV>(gs, dinv);
      const TokenStats stq = token_features<D, FEAT, TPT>(fq.raw, fq.src != nullptr, phi_row, P, true);
      __syncthreads();
      // X = g Sᵀ over this warp's (16 tokens, F/2 features); the column D of g is still zero
      float x[NHB][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < O::Dp; k0 += 16) {
        uint32_t a[4];
        load_a<false>(a, gs, O::LDV, mt * 16, k0);                  // g: rows t
        mma_row<NHB, false>(x, a, sr_hi, L::LDSR, nh * NHB * 8, k0);  // Sᵀ: S stored as rows f
        if (LO) mma_row<NHB, false>(x, a, sr_lo, L::LDSR, nh * NHB * 8, k0);
      }
      // c_t = φ_q,t · X_t / den_t: this half's share per row, summed over the quad, halves in smem
      float part[2] = {0.f, 0.f};
#pragma unroll
      for (int j = 0; j < NHB; ++j)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {  // the fragment's two adjacent columns as one bf16 pair
          const int r = mt * 16 + g + hf * 8, f = nh * NHB * 8 + 8 * j + 2 * tq;
          const float2 ph = cuda_vec::unpack_bf16x2(*reinterpret_cast<const unsigned*>(phi + r * O::LDPH + f));
          part[hf] += ph.x * x[j][2 * hf] + ph.y * x[j][2 * hf + 1];
        }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        part[hf] += __shfl_xor_sync(0xffffffffu, part[hf], 1);
        part[hf] += __shfl_xor_sync(0xffffffffu, part[hf], 2);
      }
      if (tq == 0) {
        cpart[nh * TILE + mt * 16 + g] = part[0];
        cpart[nh * TILE + mt * 16 + g + 8] = part[1];
      }
      __syncthreads();  // every warp is past its reads of g's column D and has its share of c
      float c_row[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = mt * 16 + g + hf * 8;
        c_row[hf] = (cpart[r] + cpart[TILE + r]) * dinv[r];
      }
#pragma unroll
      for (int j = 0; j < NHB; ++j) {
        const int f = nh * NHB * 8 + 8 * j + 2 * tq;
        const float2 zf = *reinterpret_cast<const float2*>(zs + f);
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = mt * 16 + g + hf * 8;
          *reinterpret_cast<float2*>(dphi + r * L::LDDP + f) =
              make_float2(x[j][2 * hf] - c_row[hf] * zf.x, x[j][2 * hf + 1] - c_row[hf] * zf.y);
        }
      }
      if (nh == 0 && tq == 0) {
        gs[(mt * 16 + g) * O::LDV + D] = __float2bfloat16_rn(-c_row[0]);
        gs[(mt * 16 + g + 8) * O::LDV + D] = __float2bfloat16_rn(-c_row[1]);
      }
      __syncthreads();
      accumulate_state<D, FEAT>(acc, phi, gs);
      // φ_q's row is still this tile's (each thread reads back the chunks it wrote): a·cos θ, a·sin θ from it
      token_features_backward<D, FEAT, TPT, FEAT == 2>(fq.raw, fq.src != nullptr, stq, dphi_row, P, true, grad_row(P.dq, P, b, h, t0 + my_t),
                                                       sums, qsum, phi_row);
      __syncthreads();
      if (last) break;  // (a branch: the moves below would wait for the k loads)
      fq = fq_next;
      fg = fg_next;
    }
    if constexpr (SUMS) flush_column_sums<D>(qsum, reinterpret_cast<float*>(sm + L::SUMS), P, sum_row, 0, h);  // SUMS: past what store_partial writes
    store_partial<D, FEAT>(acc, accs);
    TileFetch<T, D, TILE, O::THREADS>& fk = fq_next;  // phase 2's first k tile (every rank has a tile: begin < end)
    TileFetch<T, D, TILE, O::THREADS> fk_next;
    // the first v tile's loads fly through the reduce and the first φ_k (a v tile held from the last q tile on took
    // registers the loop's other values needed: spills)
    VTile<D, O::NP, TILE, O::THREADS> fv, fv_next;
    fv.fetch(vp, P.v_stride, b, h, begin, end);
    reduce_state<D, FEAT, false>(accs, sr_hi, sr_lo, L::LDSR, 1.f, P, bh, rank, ranks, false);

    // ---- phase 2: dv = φ_k dS / N and dk through dφ_k = [v | 1] dS'ᵀ / N for this rank's tokens
    float ksum[CPL] = {}, vsum[CPL] = {};
    for (int t0 = begin; t0 < end; t0 += TILE) {
      if (t0 + TILE < end) {
        fk_next.fetch(kp, P.k_stride, b, h, t0 + TILE, end, true);
        fv_next.fetch(vp, P.v_stride, b, h, t0 + TILE, end);
      }
      const TokenStats stk = token_features<D, FEAT, TPT>(fk.raw, fk.src != nullptr, phi_row, P, false);
      fv.template commit<O::LDV>(gs);  // (after φ_k: the first tile's v loads, issued last, land under it)
      __syncthreads();
      float dv[O::NH][4] = {}, dp[NHB][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < O::Fp; k0 += 16) {  // φ_k dS': B(k = f, n) stored as rows f
        uint32_t a[4];
        load_a<false>(a, phi, O::LDPH, mt * 16, k0);
        mma_row<O::NH, true>(dv, a, sr_hi, L::LDSR, nh * O::NH * 8, k0);
        if (LO) mma_row<O::NH, true>(dv, a, sr_lo, L::LDSR, nh * O::NH * 8, k0);
      }
#pragma unroll
      for (int k0 = 0; k0 < O::NP; k0 += 16) {  // [v | 1] dS'ᵀ: B(k = n, f) stored as rows f
        uint32_t a[4];
        load_a<false>(a, gs, O::LDV, mt * 16, k0);
        mma_row<NHB, false>(dp, a, sr_hi, L::LDSR, nh * NHB * 8, k0);
        if (LO) mma_row<NHB, false>(dp, a, sr_lo, L::LDSR, nh * NHB * 8, k0);
      }
      __syncthreads();  // [v | 1] is read: its tile takes the dv staging; φ is read: its memory takes LePE's window
      LepeRows lr{0, 0};
      if constexpr (KS > 0) {
        lr = lepe_rows(P, t0, min(end, t0 + TILE), KS / 2);
        lepe_stage_window<D, O::THREADS>(phi, P.grad_o, P.go_stride, P, b, h, lr);
      }
      // the next pair's first q, grad_o tiles and den, a group after the window's: they fly under this tile's work
      const bool stage_next = next_q != nullptr && next < BH && t0 + TILE >= end;
      if (stage_next) {
        stage_first_tile<D, TILE, O::THREADS>(next_q, P.q, P.q_stride, next / P.H, next % P.H, begin, end);
        stage_first_tile<D, TILE, O::THREADS>(next_q + TILE * D, P.grad_o, P.go_stride, next / P.H, next % P.H, begin, end);
        stage_first_den<TILE, O::THREADS>(next_den, P.den + int64_t(next) * P.N, begin, end);
        nala::cuda_async::cp_async_commit();
      }
      stage_bf16<D, O::NH, O::LDV>(dv, mt * 16, nh * O::NH * 8, gs, [&](int) { return P.inv_n; });
      for_each_c_pair<NHB>(dp, mt * 16, nh * NHB * 8, [&](int r, int f, float2 v) {
        *reinterpret_cast<float2*>(dphi + r * L::LDDP + f) = make_float2(v.x * P.inv_n, v.y * P.inv_n);
      });
      if constexpr (KS > 0) {  // the window (not the next pair's tiles)
        if (stage_next) nala::cuda_async::cp_async_wait<1>();
        else nala::cuda_async::cp_async_wait<0>();
      }
      __syncthreads();
      if constexpr (KS > 0) lepe_rows_out<D, KS, O::LDV, O::THREADS, true>(P, phi, lr, taps, gs, b, h, t0, min(TILE, end - t0), sums ? gs : nullptr);
      else copy_rows_out<D, O::LDV, TILE, O::THREADS>(grad_row(P.dv, P, b, h, t0), P.grad_stride[2], gs, end - t0);
      token_features_backward<D, FEAT, TPT>(fk.raw, fk.src != nullptr, stk, dphi_row, P, false, grad_row(P.dk, P, b, h, t0 + my_t), sums, ksum);
      if constexpr (SUMS) {
        if constexpr (KS > 0) __syncthreads();  // every row of gs holds dv as stored (lepe_rows_out's back)
        tile_column_sums<D, O::LDV>(gs, my_t, t0 + my_t < end, vsum);
      }
      __syncthreads();
      fk = fk_next;
      fv = fv_next;
    }
    if constexpr (SUMS) {
      flush_column_sums<D>(ksum, reinterpret_cast<float*>(sm + L::SUMS), P, sum_row, 1, h);
      flush_column_sums<D>(vsum, reinterpret_cast<float*>(sm + L::SUMS) + 8 * D, P, sum_row, 2, h);
    }
    if constexpr (!PERSIST) break;
    if (next < BH) __syncthreads();  // every read of this pair's shared memory is done before the next pair writes it
  }
}

}  // namespace nala::attention::cuda
