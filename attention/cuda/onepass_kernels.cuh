// One-pass NaLa attention for bf16 inputs (docs/nala_attention.md §3-§4): one kernel reads q, k, v
// once and writes o once; no state goes through global memory unless the backward needs it.
//
// A (batch, head) is one thread-block cluster of `ranks` CTAs (1..8, the x dimension of the grid),
// each owning a contiguous range of tokens:
//   phase 1  its k, v tiles: φ_k (fp32 math, stored bf16) and S' += φ_kᵀ [v | 1] by bf16 mma.sync
//            with fp32 accumulators in registers. The ones column makes z the column D of S':
//            S' = [S | z], (F × NP).
//   reduce   every CTA writes its partial S' to shared memory; after a cluster barrier each CTA
//            sums all ranks' partials in rank order through distributed shared memory (the same
//            order everywhere: deterministic, identical copies), times 1/N, and keeps S'ᵀ as a
//            bf16 pair hi + lo (16 significant bits) for the products of phase 2.
//   phase 2  its q tiles: φ_q, then [φ_q S | φ_q z] = φ_q S' (hi and lo products) in one mma
//            pass; o = φ_q S / (φ_q z + ε) staged in shared memory and written in 16-byte rows.
// With P.S set (training), rank 0 also writes S, z in the chunked kernels' layout and every CTA
// writes den per token, so the chunked backward (backward_kernels.cuh) runs unchanged.
#pragma once
#include <cooperative_groups.h>

#include "attention/cuda/feature_maps.cuh"
#include "attention/cuda/mma_bf16.cuh"
#include "attention/cuda/mma.cuh"
#include "ops/cuda/cp_async.cuh"

namespace nala::attention::cuda {

template <int D, int FEAT>
struct OnePass {
  static constexpr int F = FEAT * D, Fp = (F + 15) / 16 * 16, Dp = (D + 15) / 16 * 16;
  static constexpr int NP = (D + 1 + 15) / 16 * 16;  // v's columns, the ones column (z), zero pads
  static constexpr int TILE = 64, THREADS = 256, WARPS = 8;
  static constexpr int MT = Fp / 16;                 // m16 tiles of the state (rows f)
  static constexpr int NH = NP / 16;                 // n8 tiles in each half of the state's columns
  static constexpr int UNITS = 2 * MT;               // phase 1 work units: (m tile, column half)
  static constexpr int UPW = (UNITS + WARPS - 1) / WARPS;
  // shared memory (byte offsets): phase 1 / 2 work tiles, aliased by the partial state at the reduce
  static constexpr int LDX = ld_row(Dp);    // x tile, fp32 (the feature maps' input)
  static constexpr int LDPH = ld_bf16(Fp);  // φ tile, bf16
  static constexpr int LDV = ld_bf16(NP);   // [v | 1 | 0] tile (phase 1), o staging (phase 2), bf16
  static constexpr int LDA = NP + 4;        // partial S', fp32
  static constexpr int XS = 0, PHI = XS + TILE * LDX * 4, VS = PHI + TILE * LDPH * 2, WORK_END = VS + TILE * LDV * 2;
  static constexpr int ACC_END = Fp * LDA * 4;
  static constexpr int ST_HI = ((WORK_END > ACC_END ? WORK_END : ACC_END) + 15) / 16 * 16;
  static constexpr int ST_LO = ST_HI + NP * LDPH * 2, DEN = ST_LO + NP * LDPH * 2, BYTES = DEN + TILE * 4;
  static_assert(D % 8 == 0 && LDX % 4 == 0 && LDPH % 8 == 0 && LDV % 8 == 0, "16-byte rows");
};

// A token tile of v as bf16 rows [v | 1 | 0 …] (NP columns; rows past N all zero, so they add
// nothing to S or z), moved in 16-byte chunks: fetch() into registers, commit() into the tile.
template <int D, int NP, int TILE, int THREADS>
struct VTile {
  static constexpr int TPT = THREADS / TILE, CH = D / 8, CPL = (CH + TPT - 1) / TPT;
  uint4 raw[CPL];
  bool valid = false;
  // staged: as TileFetch::fetch (the tile copied to shared memory by stage_first_tile)
  __device__ void fetch(const __nv_bfloat16* base, const int64_t* stride, int b, int h, int t0, int n_end, const __nv_bfloat16* staged = nullptr) {
    const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT, n = t0 + t;
    valid = n < n_end;
    if (!valid) return;
    const __nv_bfloat16* src = staged != nullptr ? staged + t * D : base + b * stride[0] + h * stride[1] + int64_t(n) * stride[2];
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
      const int c = lane + k * TPT;
      if (c < CH) raw[k] = *reinterpret_cast<const uint4*>(src + c * 8);
    }
  }
  template <int LD>
  __device__ void commit(__nv_bfloat16* vs) const {
    const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
    __nv_bfloat16* row = vs + t * LD;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
      const int c = lane + k * TPT;
      if (c < CH) *reinterpret_cast<uint4*>(row + c * 8) = valid ? raw[k] : make_uint4(0, 0, 0, 0);
    }
    for (int c = CH + lane; c < NP / 8; c += TPT)  // bf16 1.0 is 0x3F80 (the low half is element 0)
      *reinterpret_cast<uint4*>(row + c * 8) = make_uint4(c == CH && valid ? 0x3F80u : 0u, 0, 0, 0);
  }
};

// A persistent one-pass grid (P.slots) copies the next (batch, head) pair's first tiles to shared memory
// (P.next_stage) under the current pair's last tile, by cp.async: no registers held across the tile.
// stage_first_tile copies rows t0 … of a (B, H, N, D) bf16 input into stage (TILE rows of D, dense),
// each thread the 16-byte chunks that the tile's fetch() reads (token threadIdx.x / TPT, chunks
// lane + k·TPT), so that a thread reads back only its own copies (after cp_async_wait, no barrier).
// No group is committed here.
template <int D, int TILE, int THREADS>
__device__ __forceinline__ void stage_first_tile(__nv_bfloat16* stage, const void* base, const int64_t* stride, int b, int h, int t0, int n_end) {
  constexpr int TPT = THREADS / TILE, CH = D / 8;
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT, n = t0 + t;
  if (n >= n_end) return;
  const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(base) + b * stride[0] + h * stride[1] + int64_t(n) * stride[2];
  for (int c = lane; c < CH; c += TPT) nala::cuda_async::cp_async<16>(stage + t * D + c * 8, src + c * 8);
}

// Rows of D bf16 from a shared tile (leading dim LD) to an output whose first row is at out, rows
// row_stride elements apart (16-byte aligned), 16 bytes a lane.
template <int D, int LD, int TILE, int THREADS>
__device__ __forceinline__ void copy_rows_out(__nv_bfloat16* out, int64_t row_stride, const __nv_bfloat16* tile, int rows) {
  constexpr int TPT = THREADS / TILE;
  const int t = threadIdx.x / TPT, lane = threadIdx.x % TPT;
  if (t >= rows) return;
  for (int c = lane; c < D / 8; c += TPT)
    *reinterpret_cast<uint4*>(out + t * row_stride + c * 8) = *reinterpret_cast<const uint4*>(tile + t * LD + c * 8);
}

// The row of token n of (batch b, head h) in the one-pass backward's dq, dk or dv (P.grad_stride).
__device__ __forceinline__ __nv_bfloat16* grad_row(void* base, const NalaKernelParams& P, int b, int h, int64_t n) {
  return static_cast<__nv_bfloat16*>(base) + b * P.grad_stride[0] + h * P.grad_stride[1] + n * P.grad_stride[2];
}

// Columns col < D of an m16 × (8·NT) accumulator at (m0, n0), times scale(row), as bf16 into a
// staging tile (rows t, leading dimension LD) for copy_rows_out.
template <int D, int NT, int LD, typename Scale>
__device__ __forceinline__ void stage_bf16(const float (&c)[NT][4], int m0, int n0, __nv_bfloat16* tile, Scale scale) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const float sc[2] = {scale(m0 + g), scale(m0 + g + 8)};
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = n0 + 8 * j + 2 * tq;
    if (col >= D) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = m0 + g + 8 * half;
      const float f = sc[half];
      *reinterpret_cast<__nv_bfloat162*>(tile + r * LD + col) = __floats2bfloat162_rn(c[j][2 * half] * f, c[j][2 * half + 1] * f);
    }
  }
}

__device__ __forceinline__ void sync_ranks(int ranks) {
  if (ranks > 1) cooperative_groups::this_cluster().sync();
  else __syncthreads();
}

// The float4 at offset `at` of the cluster's partial states accs, summed over the ranks in rank order
__device__ __forceinline__ float4 summed_quad(const float* accs, int at, int ranks) {
  if (ranks == 1) return *reinterpret_cast<const float4*>(accs + at);
  auto cluster = cooperative_groups::this_cluster();
  float4 s4 = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int r = 0; r < ranks; ++r) {
    const float4 p = *reinterpret_cast<const float4*>(cluster.map_shared_rank(const_cast<float*>(accs), r) + at);
    s4.x += p.x;
    s4.y += p.y;
    s4.z += p.z;
    s4.w += p.w;
  }
  return s4;
}

// The saved state's columns n0..n0+3 of row f: S (B·H, Fp, Dp) and, where n0 is D, z (B·H, Fp). D % 8 == 0:
// a quad is all S or all pads, and column D (z) starts one.
template <int D, int FEAT>
__device__ __forceinline__ void write_state_quad(const NalaKernelParams& P, int bh, int f, int n0, const float (&v)[4]) {
  using O = OnePass<D, FEAT>;
  if (n0 < O::Dp)
    *reinterpret_cast<float4*>(P.S + (int64_t(bh) * O::Fp + f) * O::Dp + n0) = n0 < D ? make_float4(v[0], v[1], v[2], v[3]) : make_float4(0.f, 0.f, 0.f, 0.f);
  if (n0 == D) P.z[int64_t(bh) * O::Fp + f] = v[0];
}

// The reduce step: this (batch, head)'s state summed over the cluster's ranks in rank order (the
// same order in every rank: identical, deterministic copies), times `scale`, kept as a bf16 pair
// hi + lo (16 significant bits; hi only when lo_out is null) with leading dimension ld: ROWS_N stores it transposed (rows n, as
// the forward's φ_q S' product reads it), else as rows f. With P.S set (forward, training), rank
// 0 also writes S (B·H, Fp, Dp) and z (B·H, Fp) for the backward.
template <int D, int FEAT, bool ROWS_N>
__device__ __forceinline__ void reduce_state(const float* accs, __nv_bfloat16* hi_out, __nv_bfloat16* lo_out, int ld, float scale,
                                             const NalaKernelParams& P, int bh, int rank, int ranks, bool write_state) {
  using O = OnePass<D, FEAT>;
  sync_ranks(ranks);  // every rank's partial is in its shared memory
  static_assert(O::NP % 4 == 0 && O::LDA % 4 == 0, "float4 rows");
  constexpr int Q = O::NP / 4;  // float4 quads per row
  const bool along_f = ROWS_N && P.reduce_order != 0;  // (P.reduce_order, NALA_ONEPASS_REDUCE: 0 the earlier order along n)
  for (int i = threadIdx.x; i < O::Fp * Q; i += O::THREADS) {
    // ROWS_N: consecutive threads take consecutive f, the stored rows' contiguous index, so a warp's
    // 2-byte stores fill contiguous bytes of one row (64 where Fp is a multiple of 32; two rows' pieces
    // otherwise) and its float4 reads of accs, rows LDA ≡ 20
    // floats mod 32 apart, meet no bank twice; consecutive quads (rows 4 apart) had hit a bank ≈ 10 times
    // a store, 39 % of the forward's shared-memory wavefronts (Nsight Compute, NaLaDiT-S/2, 2026-12-07)
    const int f = along_f ? i % O::Fp : i / Q, n0 = along_f ? i / O::Fp * 4 : i % Q * 4;
    const float4 s4 = summed_quad(accs, f * O::LDA + n0, ranks);
    const float v[4] = {s4.x * scale, s4.y * scale, s4.z * scale, s4.w * scale};
    __nv_bfloat16 hi[4], lo[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      hi[u] = __float2bfloat16_rn(v[u]);
      lo[u] = __float2bfloat16_rn(v[u] - __bfloat162float(hi[u]));
    }
    if (ROWS_N) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        hi_out[(n0 + u) * ld + f] = hi[u];
        if (lo_out != nullptr) lo_out[(n0 + u) * ld + f] = lo[u];
      }
    } else {
      *reinterpret_cast<uint2*>(hi_out + f * ld + n0) = *reinterpret_cast<const uint2*>(hi);
      if (lo_out != nullptr) *reinterpret_cast<uint2*>(lo_out + f * ld + n0) = *reinterpret_cast<const uint2*>(lo);
    }
    if (write_state && rank == 0 && !(along_f && P.reduce_order == 2)) write_state_quad<D, FEAT>(P, bh, f, n0, v);
  }
  // order 2: S and z by a second pass along n, a warp's float4 stores along S's rows (along f they went 16
  // bytes to a row, rows Dp floats apart); the sums again, in the same rank order: the same values
  if (along_f && P.reduce_order == 2 && write_state && rank == 0)
    for (int i = threadIdx.x; i < O::Fp * Q; i += O::THREADS) {
      const int f = i / Q, n0 = i % Q * 4;
      if (n0 >= O::Dp && n0 != D) continue;  // pads past S's and z's columns
      const float4 s4 = summed_quad(accs, f * O::LDA + n0, ranks);
      const float v[4] = {s4.x * scale, s4.y * scale, s4.z * scale, s4.w * scale};
      write_state_quad<D, FEAT>(P, bh, f, n0, v);
    }
  sync_ranks(ranks);  // no rank reads a partial any more: the work tiles may be overwritten
}

// Writes this warp's phase-1 style accumulators (units of (m tile, column half)) as fp32 rows f.
template <int D, int FEAT, typename Acc>
__device__ __forceinline__ void store_partial(const Acc& acc, float* accs) {
  using O = OnePass<D, FEAT>;
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int u = 0; u < O::UPW; ++u) {
    const int unit = warp + u * O::WARPS;
    if (unit < O::UNITS)
      for_each_c_pair<O::NH>(acc[u], unit / 2 * 16, unit % 2 * O::NH * 8,
                             [&](int r, int c, float2 x) { *reinterpret_cast<float2*>(accs + r * O::LDA + c) = x; });
  }
}

// acc += Aᵀ B over one token tile, A = φ (rows t, F columns), B = a (rows t, NP columns) tile: the
// state products S' += φ_kᵀ [v | 1] (forward) and dS' += φ_qᵀ [g | −c] (backward).
template <int D, int FEAT, typename Acc>
__device__ __forceinline__ void accumulate_state(Acc& acc, const __nv_bfloat16* phi, const __nv_bfloat16* b) {
  using O = OnePass<D, FEAT>;
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int u = 0; u < O::UPW; ++u) {
    const int unit = warp + u * O::WARPS;
    if (unit >= O::UNITS) continue;
    const int m0 = unit / 2 * 16, n0 = unit % 2 * O::NH * 8;
#pragma unroll
    for (int k0 = 0; k0 < O::TILE; k0 += 16) {
      uint32_t a[4];
      load_a<true>(a, phi, O::LDPH, m0, k0);              // φᵀ: rows f, stored as rows t
      mma_row<O::NH, true>(acc[u], a, b, O::LDV, n0, k0);  // stored as rows t
    }
  }
}

// ---- LePE in the one-pass kernels (KS = P.lepe_ks > 0; docs/nala_attention.md §10).
// Forward: a tile's outputs become u = o + Σ_taps w·v + b as they are written, so o never goes to
// memory and the tail's separate convolution pass (read v and o, write u) goes. Backward
// (onepass_backward.cuh): a tile's dv becomes the attention's dv plus LePE's, Σ_taps w'·du with the
// taps reversed (the transposed convolution), so the tail's second convolution pass goes and v's two
// gradients are one. The sums are lepe_conv's (attention/cuda/gated_tail_kernels.cu) in its order:
// the bias (forward; none backward), then the taps row by row (fmaf; a tap outside the grid adds
// w·0); forward + the attention's bf16 o, rounded once to bf16; backward rounded to bf16 and then
// added to the attention's bf16 dv in float and rounded (the gradients' gather, ops/cuda/gather_heads.cu).
struct LepeRows {
  int y0, y1;  // the grid rows of the input a tile's outputs read
};
__device__ __forceinline__ LepeRows lepe_rows(const NalaKernelParams& P, int t0, int t_end, int R) {
  return {max(0, t0 / P.grid_w - R), min(P.grid_h - 1, (t_end - 1) / P.grid_w + R)};
}

// This (batch, head)'s rows r.y0..r.y1 of a (B, H, N, D) input (strides (b, h, n), unit along D):
// every column, into win (positions × D bf16, dense) by 16-byte cp.async, one group.
template <int D, int THREADS>
__device__ __forceinline__ void lepe_stage_window(__nv_bfloat16* win, const void* src, const int64_t* stride, const NalaKernelParams& P, int b,
                                                  int h, LepeRows r) {
  constexpr int CH = D / 8;
  const __nv_bfloat16* base = static_cast<const __nv_bfloat16*>(src) + b * stride[0] + h * stride[1];
  const int n0 = r.y0 * P.grid_w, count = (r.y1 - r.y0 + 1) * P.grid_w * CH;
  for (int i = threadIdx.x; i < count; i += THREADS) {
    const int pos = i / CH, c = i - pos * CH;
    nala::cuda_async::cp_async<16>(win + pos * D + 8 * c, base + int64_t(n0 + pos) * stride[2] + 8 * c);
  }
  nala::cuda_async::cp_async_commit();
}

// This head's taps (ks², D float32 of P.lepe_wt (ks², H·D)) copied to shared memory at byte
// P.lepe_taps by cp.async, one group, when the launch placed them there (P.lepe_taps ≥ 0; the host's
// onepass_lepe_taps): returns where lepe_rows_out reads them and their tap stride. The copies land
// by the tile's cp_async_wait<0> and barrier that precede the first lepe_rows_out.
// REV (the backward's transposed convolution): tap t is P.lepe_wt's tap ks² − 1 − t, so the backward
// reads the forward's table (no reversed copy of it).
struct LepeTaps {
  const float* w;  // tap 0, this head's channel 0
  int stride;      // floats from one tap to the next
};
template <int D, int KS, int THREADS, bool REV = false>
__device__ __forceinline__ LepeTaps lepe_stage_taps(const NalaKernelParams& P, char* sm, int h) {
  const float* src = P.lepe_wt + h * D;
  if (P.lepe_taps < 0) return REV ? LepeTaps{src + (KS * KS - 1) * P.H * D, -P.H * D} : LepeTaps{src, P.H * D};
  float* dst = reinterpret_cast<float*>(sm + P.lepe_taps);
  constexpr int C4 = D / 4;
  for (int i = threadIdx.x; i < KS * KS * C4; i += THREADS) {
    const int tap = i / C4, c = i - tap * C4;
    nala::cuda_async::cp_async<16>(dst + tap * D + 4 * c, src + int64_t(REV ? KS * KS - 1 - tap : tap) * P.H * D + 4 * c);
  }
  nala::cuda_async::cp_async_commit();
  return {dst, D};
}

// An output channel pair of LePE in the one-pass kernels from its sums (a0, a1) and the staged tile's
// pair tf, as bf16: forward u = sums + o, rounded once; backward LePE's dv rounded as its own kernel
// rounds it (+ its zero residual), then added to the attention's dv as the gradients' gather adds them
// (ops/cuda/gather_heads.cu). Both LePE paths (lepe_blocks_out, lepe_rows_out) store through it.
template <bool BWD>
__device__ __forceinline__ __nv_bfloat162 lepe_out_pair(float a0, float a1, float2 tf) {
  if (!BWD) return __floats2bfloat162_rn(a0 + tf.x, a1 + tf.y);
  const __nv_bfloat162 lr = __floats2bfloat162_rn(a0 + 0.f, a1 + 0.f);
  const float2 lf = cuda_vec::unpack_bf16x2(*reinterpret_cast<const unsigned*>(&lr));
  return __floats2bfloat162_rn(tf.x + lf.x, tf.y + lf.y);
}

// lepe_rows_out's path where the tile is whole grid rows (t0 and rows multiples of the grid's width W,
// rows a multiple of BR·W, W of BC) and the head's taps are in shared memory (P.lepe_taps ≥ 0): a thread
// takes 2 channels of a block of BR rows × BC columns of tokens (BR·BC = 8; the tile's 64 tokens and
// d 64 are 256 blocks × channel pairs, one a thread) at a time, consecutive threads along the channel pairs (a warp reads 128 contiguous bytes a position).
// Each of the block's BR + ks − 1 window rows is read once, BC + ks − 1 positions, for every tap row
// of every block row it serves: (BR + ks − 1)(BC + ks − 1) positions for 8 tokens where runs of 4 read
// ks (4 + ks − 1) for 4, and each position's bf16 pair unpacked once (Nsight Compute, forty-fifth
// session: LePE's loads, bounds and unpacks were half its instructions). Only the 2R halo columns
// are tested against the grid's sides, once a block. The sums are lepe_rows_out's: an output's taps
// row by row (its block row's window rows in order), fmaf, a tap outside the grid adding w·0.
template <int D, int KS, int LD, int THREADS, bool BWD, int BR, int BC>
__device__ __forceinline__ void lepe_blocks_out(const NalaKernelParams& P, const __nv_bfloat16* win, LepeRows r, const __nv_bfloat16* tile, int b, int h, int t0, int rows, __nv_bfloat16* back) {
  constexpr int C2 = D / 2, R = KS / 2, SPAN = BC + KS - 1, WROWS = BR + KS - 1;
  static_assert(BR * BC == 8, "8 tokens a block");
  const int W = P.grid_w, Dm = P.H * D;
  const int bw = W / BC, blocks = rows / W / BR * bw;  // blocks a block row, blocks in the tile
  // blk / bw by a float reciprocal: exact while blk < 2^22 (the quotient's rounding error stays below the
  // 0.5 / bw that blk + 0.5 keeps it from an integer), where the integer division was ≈ 50 instructions a block
  const float inv_bw = 1.f / float(bw);
  for (int i = threadIdx.x; i < blocks * C2; i += THREADS) {
    const int blk = i / C2, cp = i - blk * C2;
    const int by = int((float(blk) + 0.5f) * inv_bw), y = t0 / W + by * BR, x = (blk - by * bw) * BC;
    const int ch = h * D + 2 * cp;  // the model channel of this thread's first
    // the taps in shared memory (lepe_rows_out takes this path only where P.lepe_taps ≥ 0), tap t's pair at
    // wc + t·D: a pointer the compiler sees is shared (ld.shared at constant offsets, no generic 64-bit
    // address a tap as from taps.w)
    extern __shared__ float4 smem_f4[];
    const float* wc = reinterpret_cast<const float*>(reinterpret_cast<const char*>(smem_f4) + P.lepe_taps) + 2 * cp;
    float2 b2 = make_float2(0.f, 0.f);
    if (!BWD) b2 = __ldg(reinterpret_cast<const float2*>(P.lepe_b + ch));
    float2 acc[BR][BC];
#pragma unroll
    for (int rr = 0; rr < BR; ++rr)
#pragma unroll
      for (int p = 0; p < BC; ++p) acc[rr][p] = b2;
    bool col_in[SPAN];  // window position q is column x − R + q: inside the block for R ≤ q < R + BC
#pragma unroll
    for (int q = 0; q < SPAN; ++q) col_in[q] = (q >= R && q < R + BC) || (x - R + q >= 0 && x - R + q < W);
    // window row wr serves tap row wr of block row 0 (weights wn, read here) and tap row wr − 1 of block
    // row 1 (wp: the previous window row's wn), so each tap's weights are read once a block
    float2 wn[KS], wp[KS];
#pragma unroll
    for (int wr = 0; wr < WROWS; ++wr) {
      asm volatile("" ::: "memory");  // a compiler fence: without it every window row's loads went up front (spills)
      const int yy = y - R + wr;
      const bool row_in = yy >= 0 && yy < P.grid_h;
      const __nv_bfloat16* src = win + (int64_t(yy - r.y0) * W + x - R) * D + 2 * cp;  // read only where row_in and col_in
      float2 v[SPAN];  // the positions' channel pairs, unpacked once for every tap and block row
#pragma unroll
      for (int q = 0; q < SPAN; ++q)
        v[q] = cuda_vec::unpack_bf16x2(row_in && col_in[q] ? *reinterpret_cast<const unsigned*>(src + q * D) : 0u);
      if (wr < KS) {  // block row 0, tap row wr
#pragma unroll
        for (int tj = 0; tj < KS; ++tj) {
          wn[tj] = *reinterpret_cast<const float2*>(wc + (wr * KS + tj) * D);
#pragma unroll
          for (int p = 0; p < BC; ++p) {
            acc[0][p].x = fmaf(wn[tj].x, v[p + tj].x, acc[0][p].x);
            acc[0][p].y = fmaf(wn[tj].y, v[p + tj].y, acc[0][p].y);
          }
        }
      }
      if (BR == 2 && wr > 0) {  // block row 1, tap row wr − 1
#pragma unroll
        for (int tj = 0; tj < KS; ++tj)
#pragma unroll
          for (int p = 0; p < BC; ++p) {
            acc[BR - 1][p].x = fmaf(wp[tj].x, v[p + tj].x, acc[BR - 1][p].x);
            acc[BR - 1][p].y = fmaf(wp[tj].y, v[p + tj].y, acc[BR - 1][p].y);
          }
      }
#pragma unroll
      for (int tj = 0; tj < KS; ++tj) wp[tj] = wn[tj];
    }
#pragma unroll
    for (int rr = 0; rr < BR; ++rr)
#pragma unroll
      for (int p = 0; p < BC; ++p) {
        const int n = (y + rr) * W + x + p, t = n - t0;
        const float2 tf = cuda_vec::unpack_bf16x2(*reinterpret_cast<const unsigned*>(tile + t * LD + 2 * cp));
        const __nv_bfloat162 o2 = lepe_out_pair<BWD>(acc[rr][p].x, acc[rr][p].y, tf);
        __nv_bfloat16* dst = BWD ? grad_row(P.dv, P, b, h, n) + 2 * cp : static_cast<__nv_bfloat16*>(P.u) + (int64_t(b) * P.N + n) * Dm + ch;
        *reinterpret_cast<__nv_bfloat162*>(dst) = o2;
        if (BWD && back != nullptr) *reinterpret_cast<__nv_bfloat162*>(back + t * LD + 2 * cp) = o2;
      }
  }
}

// The outputs of tokens t0 .. t0 + rows − 1 (rows ≤ the tile's) from the window and a staged tile
// (bf16 rows t, leading dimension LD: o forward, the attention's dv backward). A thread takes 4
// channels of a run of LEPE_RUN consecutive tokens at a time, consecutive threads along the
// channels: each tap's 4 weights (taps: lepe_stage_taps; reversed for the backward as it stages them) are
// read once for the run, and where the run lies in one grid row each window row's LEPE_RUN + ks − 1
// positions are read once for all its taps (a run that crosses a row or the end reads per token).
// Each output's sum is the same either way: bias (forward), then the taps row by row, fmaf.
// Forward: u (B, N, H·D) at P.u; backward: dv at P.dv (strides P.grad_stride), and where back is
// set (the staging tile itself: each output goes back to the position it read) dv as stored.
constexpr int LEPE_RUN = 4;
__device__ __forceinline__ void bf16x4_to_float(uint2 raw, float (&f)[4]) {
  const float2 a = cuda_vec::unpack_bf16x2(raw.x), c = cuda_vec::unpack_bf16x2(raw.y);
  f[0] = a.x, f[1] = a.y, f[2] = c.x, f[3] = c.y;
}
__device__ __forceinline__ void fma4(float (&acc)[4], const float4& w, uint2 raw) {
  float e[4];
  bf16x4_to_float(raw, e);
  acc[0] = fmaf(w.x, e[0], acc[0]);
  acc[1] = fmaf(w.y, e[1], acc[1]);
  acc[2] = fmaf(w.z, e[2], acc[2]);
  acc[3] = fmaf(w.w, e[3], acc[3]);
}
template <int D, int KS, int LD, int THREADS, bool BWD>
__device__ __forceinline__ void lepe_rows_out(const NalaKernelParams& P, const __nv_bfloat16* win, LepeRows r, LepeTaps taps,
                                              const __nv_bfloat16* tile, int b, int h, int t0, int rows, __nv_bfloat16* back = nullptr) {
  constexpr int C4 = D / 4, R = KS / 2, RUN = LEPE_RUN, SPAN = RUN + KS - 1;
  static_assert(D % 4 == 0, "LePE in the kernels reads 4 channels at a time");
  if (P.lepe_blocks && P.lepe_taps >= 0 && t0 % P.grid_w == 0) {  // whole grid rows, taps in shared memory: blocks of 2 × 4 or 1 × 8 tokens
    if (P.grid_w % 4 == 0 && rows % (2 * P.grid_w) == 0) return lepe_blocks_out<D, KS, LD, THREADS, BWD, 2, 4>(P, win, r, tile, b, h, t0, rows, back);
    // 1 × 8 blocks (tiles of an odd number of rows): the forward only, one kernel variant fewer in the backward
    // (chosen, not measured; at DiT's sizes the backward's tiles are 4 or 2 rows, or its window does not fit)
    if constexpr (!BWD)
      if (P.grid_w % 8 == 0 && rows % P.grid_w == 0) return lepe_blocks_out<D, KS, LD, THREADS, BWD, 1, 8>(P, win, r, tile, b, h, t0, rows, back);
  }
  const int Dm = P.H * D, runs = (rows + RUN - 1) / RUN;
  for (int i = threadIdx.x; i < runs * C4; i += THREADS) {
    const int s = i / C4, c = i - s * C4, t = s * RUN, n = t0 + t;
    const int count = min(RUN, rows - t);  // tokens in this run
    const int y = n / P.grid_w, x = n - y * P.grid_w;
    const int ch = h * D + 4 * c;  // the model channel of this thread's first
    const float* wc = taps.w + 4 * c;
    float acc[RUN][4];
    {
      float4 b4 = make_float4(0.f, 0.f, 0.f, 0.f);
      if (!BWD) b4 = __ldg(reinterpret_cast<const float4*>(P.lepe_b + ch));
#pragma unroll
      for (int p = 0; p < RUN; ++p) acc[p][0] = b4.x, acc[p][1] = b4.y, acc[p][2] = b4.z, acc[p][3] = b4.w;
    }
    // the window's 4 channels at grid position (yy, xx), zeros outside the grid
    auto at = [&](int yy, int xx) {
      uint2 raw = make_uint2(0, 0);
      if (yy >= 0 && yy < P.grid_h && xx >= 0 && xx < P.grid_w)
        raw = *reinterpret_cast<const uint2*>(win + ((yy - r.y0) * P.grid_w + xx) * D + 4 * c);
      return raw;
    };
    if (count == RUN && x + RUN <= P.grid_w) {  // one grid row: a window row's span read once for its taps
#pragma unroll 1
      for (int ti = 0; ti < KS; ++ti) {
        uint2 v[SPAN];  // window row y + ti − R, columns x − R .. x + RUN − 1 + R
#pragma unroll
        for (int q = 0; q < SPAN; ++q) v[q] = at(y + ti - R, x - R + q);
#pragma unroll
        for (int tj = 0; tj < KS; ++tj) {
          const float4 w = *reinterpret_cast<const float4*>(wc + (ti * KS + tj) * taps.stride);
#pragma unroll
          for (int p = 0; p < RUN; ++p) fma4(acc[p], w, v[p + tj]);
        }
      }
    } else {  // per token (past the run's count: its last token again, never stored)
      int yp[RUN], xp[RUN];
#pragma unroll
      for (int p = 0; p < RUN; ++p) {
        const int np = n + min(p, count - 1);
        yp[p] = np / P.grid_w, xp[p] = np - yp[p] * P.grid_w;
      }
#pragma unroll 1
      for (int ti = 0; ti < KS; ++ti)
#pragma unroll
        for (int tj = 0; tj < KS; ++tj) {
          const float4 w = *reinterpret_cast<const float4*>(wc + (ti * KS + tj) * taps.stride);
#pragma unroll
          for (int p = 0; p < RUN; ++p) fma4(acc[p], w, at(yp[p] + ti - R, xp[p] + tj - R));
        }
    }
#pragma unroll
    for (int p = 0; p < RUN; ++p) {
      if (p >= count) break;
      float tf[4];
      bf16x4_to_float(*reinterpret_cast<const uint2*>(tile + (t + p) * LD + 4 * c), tf);
      __nv_bfloat162 o2[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) o2[u] = lepe_out_pair<BWD>(acc[p][2 * u], acc[p][2 * u + 1], make_float2(tf[2 * u], tf[2 * u + 1]));
      __nv_bfloat16* dst = BWD ? grad_row(P.dv, P, b, h, n + p) + 4 * c
                               : static_cast<__nv_bfloat16*>(P.u) + (int64_t(b) * P.N + n + p) * Dm + ch;
      *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(o2);
      if (BWD && back != nullptr) *reinterpret_cast<uint2*>(back + (t + p) * LD + 4 * c) = *reinterpret_cast<const uint2*>(o2);
    }
  }
}

// ---- LePE on the tensor cores (P.lepe_mma: the forward, d 64, a grid 16 tokens wide; NALA_LEPE_MMA).
// A depthwise convolution shares no operand across channels, but within one channel each tap column dx is
// a product over the window's rows: with the tile's RT ≤ 4 grid rows and its window rows y' = 0 … 7 (grid
// row t0/16 − R + y', zeros outside the grid and past RT + ks − 1),
//   C_c[x][y] = Σ_dx Σ_y' V_c[y'][x + dx − R] · w_c[y' − y][dx]      (x < 16, y < RT; w_c = 0 outside 0 … ks − 1)
// one mma.m16n8k16 per channel and pair of tap columns (M = the 16 columns x, K = y' of dx | y' of dx + 1,
// N = the 8 rows y, RT of them kept), an m16n8k8 for an odd last dx; the taps as bf16 hi + lo pairs (two
// products: w to 16 significant bits, v's bf16 exact), fp32 accumulation. Not lepe_conv's order of sums:
// within rounding of it, not the same bits. ≈ 30 warp instructions a channel and tile against ≈ 100 for the
// blocks (lepe_blocks_out: 400 FMAs a thread item, half its instructions).
// Shared memory: v's window by cp.async as 8 rows × 16 columns × d (chunk k of position (y', x) at
// 16-byte slot k ^ y': the transposing loads below read 8 rows of one chunk without bank conflicts), then
// transposed by ldmatrix.trans into the φ tile's memory (φ_q is read by then) as channel-major slots of
// the 8 window rows, a slot a (channel, column) and a zero slot (x = 16) a channel; the table of
// nala_lepe_mma_table (P.lepe_taps, per head; layout: nala_params.h).
template <int D, int KS>
struct LepeMma {
  static constexpr int R = KS / 2, W = 16, WROWS = 8, CH = D / 8;
  static constexpr int SLOT = WROWS * 2;                // bytes: a (channel, column)'s 8 window rows
  static constexpr int CH_BYTES = (W + 1) * SLOT;       // a channel's columns and its zero slot: 272, 68 words (≡ 4 mod 32)
  static constexpr int T_BYTES = D * CH_BYTES;          // the transposed window
  static constexpr int ROW16 = (D + 1) * 16, ROW8 = (D + 1) * 8;  // a table row of the k16 part, of the k8 part
  static constexpr int K16_BYTES = lepe_mma_k16_bytes(D, KS), TABLE_BYTES = lepe_mma_table_bytes(D, KS);
  static constexpr int GROUPS = (KS + 1) / 2;           // tap columns in pairs (k16), an odd last one (k8)
  static_assert(D == 64, "the transposed window fills the φ tile at d 64 (and the window's swizzle needs 8 chunks)");
  static_assert(OnePass<D, 2>::TILE / W + KS - 1 <= WROWS, "a tile's window rows fit one k8 step");
  static_assert(T_BYTES <= OnePass<D, 2>::TILE * OnePass<D, 2>::LDPH * 2, "the transposed window in the φ tile's memory");
  static_assert(TABLE_BYTES % 16 == 0, "the table by 16-byte copies");
};

// This head's table (P.lepe_mma_table) to shared memory at P.lepe_taps, one cp.async group (lands, as
// lepe_stage_taps' copies, by the tile's wait and barrier before the first products).
template <int D, int KS, int THREADS>
__device__ __forceinline__ void lepe_mma_stage_table(const NalaKernelParams& P, char* sm, int h) {
  constexpr int BYTES = LepeMma<D, KS>::TABLE_BYTES;
  const char* src = static_cast<const char*>(P.lepe_mma_table) + int64_t(h) * BYTES;
  for (int i = threadIdx.x; i < BYTES / 16; i += THREADS) nala::cuda_async::cp_async<16>(sm + P.lepe_taps + 16 * i, src + 16 * i);
  nala::cuda_async::cp_async_commit();
}

// v's window of the tile t0 … t0 + rows − 1 (rows a multiple of 16): position (y', x) = grid (t0/16 − R + y', x),
// y' < 8, zero-filled outside the grid and past rows/16 + ks − 1, chunk k at win + (16 y' + x)·D + 8 (k ^ y').
template <int D, int KS, int THREADS>
__device__ __forceinline__ void lepe_mma_stage_window(__nv_bfloat16* win, const NalaKernelParams& P, int b, int h, int t0, int rows) {
  using L = LepeMma<D, KS>;
  const __nv_bfloat16* base = static_cast<const __nv_bfloat16*>(P.v) + b * P.v_stride[0] + h * P.v_stride[1];
  const int y_first = t0 / L::W - L::R, y_rows = rows / L::W + KS - 1;
  for (int i = threadIdx.x; i < L::WROWS * L::W * L::CH; i += THREADS) {
    const int pos = i / L::CH, k = i - pos * L::CH, yw = pos / L::W, Y = y_first + yw;
    const bool valid = yw < y_rows && Y >= 0 && Y < P.grid_h;
    const __nv_bfloat16* src = valid ? base + int64_t(Y * L::W + pos % L::W) * P.v_stride[2] + 8 * k : base;
    nala::cuda_async::cp_async_zfill16(win + pos * D + 8 * (k ^ yw), src, valid);
  }
  nala::cuda_async::cp_async_commit();
}

// u = o + LePE(v) + b for the tile's rows (a multiple of 16, ≤ 64) on the tensor cores, o staged in tile (rows t,
// leading dimension LD), rewritten there in place and then copied to P.u. win: lepe_mma_stage_window's (landed
// and visible); wt: the φ tile's memory (free); table: the head's, in shared memory. Two barriers.
template <int D, int KS, int LD, int THREADS>
__device__ __forceinline__ void lepe_mma_out(const NalaKernelParams& P, const __nv_bfloat16* win, char* wt, const char* table,
                                             __nv_bfloat16* tile, int b, int h, int t0, int rows) {
  using L = LepeMma<D, KS>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  // 1. transpose: 8 × 8 matrices (window rows y' × channels 8k …) at column x, x4 a time; lane (g, t) gets
  //    rows 2t, 2t + 1 of channel 8k + g, one 4-byte store into its slot
  constexpr int MATRICES = L::W * L::CH, PER_WARP = MATRICES / (THREADS / 32);
  static_assert(PER_WARP % 4 == 0, "whole x4 loads a warp");
#pragma unroll
  for (int i = 0; i < PER_WARP / 4; ++i) {
    const int mine = warp * PER_WARP + 4 * i + lane / 8, x = mine / L::CH, k = mine % L::CH, r = lane % 8;  // this lane's row address
    uint32_t m[4];
    ldsm_x4_t(m, win + (L::W * r + x) * D + 8 * (k ^ r));
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int mq = warp * PER_WARP + 4 * i + q, xq = mq / L::CH, kq = mq % L::CH;
      *reinterpret_cast<uint32_t*>(wt + (8 * kq + g) * L::CH_BYTES + xq * L::SLOT + 4 * t) = m[q];
    }
  }
  if (threadIdx.x < D) *reinterpret_cast<uint4*>(wt + threadIdx.x * L::CH_BYTES + L::W * L::SLOT) = make_uint4(0, 0, 0, 0);
  __syncthreads();
  // 2. the products: warp w takes channels 8w … 8w + 7 (d 64, 8 warps), a pair at a time
  int aoff[L::GROUPS];  // this lane's ldmatrix row in a channel's slots: matrix q = lane / 8 is rows m = 8 (q & 1) + lane % 8 of dx 2·grp + (q >> 1)
#pragma unroll
  for (int grp = 0; grp < L::GROUPS; ++grp) {
    const int q = lane / 8, X = 8 * (q & 1) + lane % 8 + 2 * grp + (q >> 1) - L::R;
    aoff[grp] = (X >= 0 && X < L::W ? X : L::W) * L::SLOT;
  }
  // B(k = 2t, 2t + 1; n = g) = (w[2t − g], w[2t + 1 − g]) = the tap column's pair j = 2t − g + 1 (row j + 2 of
  // its rows in the table); n = g ≥ 4 are rows y ≥ 4, never kept: any finite entry (j = 0)
  const int jrow = (g < 4 ? 2 * t - g + 1 : 0) + 2;
  const char* t16 = table + jrow * L::ROW16;                 // entry c of tap columns (2grp, 2grp + 1) at + grp·8·ROW16 + 16c
  const char* t8 = table + L::K16_BYTES + jrow * L::ROW8;    // entry c of the last tap column (odd ks) at + 8c
  const int RT = rows / L::W;
#pragma unroll 2
  for (int pr = 0; pr < 4; ++pr) {
    const int c = 8 * warp + 2 * pr;
    const float2 b2 = __ldg(reinterpret_cast<const float2*>(P.lepe_b + h * D + c));
    float acc[2][4];
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][e] = b2.x, acc[1][e] = b2.y;
#pragma unroll
    for (int ch = 0; ch < 2; ++ch) {
      const char* wc = wt + (c + ch) * L::CH_BYTES;
#pragma unroll
      for (int grp = 0; grp < L::GROUPS; ++grp) {
        if (2 * grp + 1 < KS) {  // {hi(dx), hi(dx + 1), lo(dx), lo(dx + 1)}: the B fragments of the two products
          uint32_t a[4];
          ldsm_x4(a, wc + aoff[grp]);
          const uint4 e = *reinterpret_cast<const uint4*>(t16 + grp * 8 * L::ROW16 + (c + ch) * 16);
          mma_bf16(acc[ch], a, e.x, e.y);
          mma_bf16(acc[ch], a, e.z, e.w);
        } else {  // {hi, lo}
          uint32_t a[2];
          ldsm_x2(a, wc + aoff[grp]);
          const uint2 e = *reinterpret_cast<const uint2*>(t8 + (c + ch) * 8);
          mma_bf16_k8(acc[ch], a, e.x);
          mma_bf16_k8(acc[ch], a, e.y);
        }
      }
    }
    // C(m = x, n = y): e = 0 … 3 are (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int x = g + 8 * (e >> 1), y = 2 * t + (e & 1);
      if (y >= RT) continue;
      __nv_bfloat16* o = tile + (y * L::W + x) * LD + c;
      const float2 of = cuda_vec::unpack_bf16x2(*reinterpret_cast<const unsigned*>(o));
      *reinterpret_cast<__nv_bfloat162*>(o) = lepe_out_pair<false>(acc[0][e], acc[1][e], of);
    }
  }
  __syncthreads();  // every u in the tile, every read of the transposed window done
  copy_rows_out<D, LD, OnePass<D, 2>::TILE, THREADS>(static_cast<__nv_bfloat16*>(P.u) + (int64_t(b) * P.N + t0) * P.H * D + h * D,
                                                      int64_t(P.H) * D, tile, rows);
}

// KS > 0: LePE in the output (P.lepe_ks == KS; the block above), u written instead of o.
// A cluster takes the (batch, head) pairs bh = blockIdx.y, blockIdx.y + gridDim.y, … (P.slots: a
// persistent grid; one pair a cluster where gridDim.y = B·H). With P.next_stage ≥ 0 a pair's first k
// and v tiles are copied to shared memory under the previous pair's last q tile (stage_first_tile).
// PERSIST false: the pair blockIdx.y alone (the loop's registers would spill in the one-pair kernels).
// MMA: LePE on the tensor cores (P.lepe_mma; d 64, the nala maps, LePE; its own kernel, so that the others
// keep their registers and code).
template <int D, int FEAT, int KS = 0, bool PERSIST = false, bool MMA = false>
__global__ void __launch_bounds__(256, 2) onepass_forward_kernel(const NalaKernelParams P) {
  using O = OnePass<D, FEAT>;
  using T = __nv_bfloat16;
  constexpr int TILE = O::TILE;
  extern __shared__ float4 smem_f4[];
  char* sm = reinterpret_cast<char*>(smem_f4);
  T* phi = reinterpret_cast<T*>(sm + O::PHI);
  T* vs = reinterpret_cast<T*>(sm + O::VS);
  float* accs = reinterpret_cast<float*>(sm);  // the partial S' (aliases the work tiles)
  T* st_hi = reinterpret_cast<T*>(sm + O::ST_HI);
  T* st_lo = reinterpret_cast<T*>(sm + O::ST_LO);
  float* dens = reinterpret_cast<float*>(sm + O::DEN);
  T* next_k = PERSIST && P.next_stage >= 0 ? reinterpret_cast<T*>(sm + P.next_stage) : nullptr;  // the next pair's first k tile, then v's
  const int BH = P.B * P.H;
  const int rank = blockIdx.x, ranks = gridDim.x;  // a cluster spans the grid's x dimension
  const int begin = rank * P.tokens_per_chunk, end = min(P.N, begin + P.tokens_per_chunk);
  const int warp = threadIdx.x / 32;
  const T* kp = static_cast<const T*>(P.k);
  const T* vp = static_cast<const T*>(P.v);
  const T* qp = static_cast<const T*>(P.q);
  constexpr int TPT = O::THREADS / TILE;
  T* phi_row = phi + threadIdx.x / TPT * O::LDPH;  // this thread's token row of the φ tile
  for (int bh = blockIdx.y; bh < BH; bh += gridDim.y) {
    const int b = bh / P.H, h = bh % P.H, next = bh + gridDim.y;
    const bool staged = next_k != nullptr && bh != int(blockIdx.y);  // this pair's first tiles were staged
    if (staged) nala::cuda_async::cp_async_wait<0>();
    TileFetch<T, D, TILE, O::THREADS> fk, fk_next;
    VTile<D, O::NP, TILE, O::THREADS> fv, fv_next;
    fk.fetch(kp, P.k_stride, b, h, begin, end, true, staged ? next_k : nullptr);
    fv.fetch(vp, P.v_stride, b, h, begin, end, staged ? next_k + TILE * D : nullptr);
    LepeTaps taps{nullptr, 0};
    constexpr bool MMA_OK = MMA && KS > 0 && D == 64 && FEAT == 2;
    static_assert(MMA_OK || !MMA, "LePE on the tensor cores: d 64, the nala maps, LePE");
    if constexpr (MMA_OK) {
      lepe_mma_stage_table<D, KS, O::THREADS>(P, sm, h);  // the head's table in place of its taps; lands under phase 1
    } else if constexpr (KS > 0) {
      taps = lepe_stage_taps<D, KS, O::THREADS>(P, sm, h);  // lands under phase 1
    }

    // ---- phase 1: S' = Σ_i φ_k(k_i) [v_i | 1] over this rank's tokens
    float acc[O::UPW][O::NH][4] = {};
    // fk_next holds the next k tile's loads, and from the last k tile on the first q tile's (phase 2's
    // fq: the same registers, no copy that would wait for them). P.early_q issues those under the last
    // k tile's work: the partial store and the reduce alone did not hide them (Nsight Compute, NaLaDiT-S/2:
    // ≈ 8 % of the forward's stall samples waited on the first q tile at φ_q).
    for (int t0 = begin; t0 < end; t0 += TILE) {
      const bool last = t0 + TILE >= end;
      if (!last) {  // the next tile's loads fly while this one is worked on
        fk_next.fetch(kp, P.k_stride, b, h, t0 + TILE, end, true);
        fv_next.fetch(vp, P.v_stride, b, h, t0 + TILE, end);
      } else if (P.early_q) {
        fk_next.fetch(qp, P.q_stride, b, h, begin, end, true);
      }
      fv.template commit<O::LDV>(vs);
      token_features<D, FEAT, TPT>(fk.raw, fk.src != nullptr, phi_row, P, false);
      __syncthreads();
      accumulate_state<D, FEAT>(acc, phi, vs);
      __syncthreads();
      if (last) break;  // (a branch: the moves below would wait for the q loads)
      fk = fk_next;
      fv = fv_next;
    }
    store_partial<D, FEAT>(acc, accs);
    TileFetch<T, D, TILE, O::THREADS>& fq = fk_next;
    TileFetch<T, D, TILE, O::THREADS> fq_next;
    if (!P.early_q) fq.fetch(qp, P.q_stride, b, h, begin, end, true);  // the first q tile's loads fly through the reduce
    reduce_state<D, FEAT, true>(accs, st_hi, st_lo, O::LDPH, P.inv_n, P, bh, rank, ranks, P.S != nullptr);

    // ---- phase 2: o = φ_q S / (φ_q z + ε) for this rank's tokens
    const int mt = warp % 4, nh = warp / 4;  // 4 m16 token tiles × 2 column halves
    constexpr int DEN_HALF = D / (O::NH * 8), DEN_TILE = D % (O::NH * 8) / 8, DEN_COL = D % 8;
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    T* lepe_win = reinterpret_cast<T*>(sm + P.lepe_window);  // KS > 0: v's window (the front of shared memory or past BYTES)
    for (int t0 = begin; t0 < end; t0 += TILE) {
      if (t0 + TILE < end) fq_next.fetch(qp, P.q_stride, b, h, t0 + TILE, end, true);
      token_features<D, FEAT, TPT>(fq.raw, fq.src != nullptr, phi_row, P, true);
      __syncthreads();  // also: every thread is past the previous tile's window reads
      LepeRows lr{0, 0};
      if constexpr (KS > 0) {  // the window's copies fly under the products
        lr = lepe_rows(P, t0, min(end, t0 + TILE), KS / 2);
        if constexpr (MMA_OK) lepe_mma_stage_window<D, KS, O::THREADS>(lepe_win, P, b, h, t0, min(TILE, end - t0));
        else lepe_stage_window<D, O::THREADS>(lepe_win, P.v, P.v_stride, P, b, h, lr);
      }
      // the next pair's first k, v tiles, a group after the window's: they fly under this tile's work
      const bool stage_next = next_k != nullptr && next < BH && t0 + TILE >= end;
      if (stage_next) {
        stage_first_tile<D, TILE, O::THREADS>(next_k, P.k, P.k_stride, next / P.H, next % P.H, begin, end);
        stage_first_tile<D, TILE, O::THREADS>(next_k + TILE * D, P.v, P.v_stride, next / P.H, next % P.H, begin, end);
        nala::cuda_async::cp_async_commit();
      }
      float c[O::NH][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < O::Fp; k0 += 16) {
        uint32_t a[4];
        load_a<false>(a, phi, O::LDPH, mt * 16, k0);                       // φ_q: rows t
        mma_row<O::NH, false>(c, a, st_hi, O::LDPH, nh * O::NH * 8, k0);  // S'ᵀ: rows n
        mma_row<O::NH, false>(c, a, st_lo, O::LDPH, nh * O::NH * 8, k0);
      }
      if (nh == DEN_HALF && tq == DEN_COL / 2) {  // column D of φ_q S' is φ_q·z
        dens[mt * 16 + g] = c[DEN_TILE][DEN_COL % 2] + P.eps;
        dens[mt * 16 + g + 8] = c[DEN_TILE][2 + DEN_COL % 2] + P.eps;
      }
      __syncthreads();
      stage_bf16<D, O::NH, O::LDV>(c, mt * 16, nh * O::NH * 8, vs, [&](int r) { return f_rcp<true>(dens[r]); });
      if (P.den != nullptr && threadIdx.x < TILE && t0 + int(threadIdx.x) < end) P.den[int64_t(bh) * P.N + t0 + threadIdx.x] = dens[threadIdx.x];
      if constexpr (KS > 0) {  // the window (not the next pair's tiles)
        if (stage_next) nala::cuda_async::cp_async_wait<1>();
        else nala::cuda_async::cp_async_wait<0>();
      }
      __syncthreads();  // the o tile (and the window) visible to every thread
      if constexpr (MMA_OK) lepe_mma_out<D, KS, O::LDV, O::THREADS>(P, lepe_win, sm + O::PHI, sm + P.lepe_taps, vs, b, h, t0, min(TILE, end - t0));
      else if constexpr (KS > 0) lepe_rows_out<D, KS, O::LDV, O::THREADS, false>(P, lepe_win, lr, taps, vs, b, h, t0, min(TILE, end - t0));
      else copy_rows_out<D, O::LDV, TILE, O::THREADS>(static_cast<T*>(P.o) + (int64_t(bh) * P.N + t0) * D, D, vs, end - t0);
      fq = fq_next;
    }
    if constexpr (!PERSIST) break;
    if (next < BH) __syncthreads();  // the last tile's o staging, window and taps are read before the next pair writes them
  }
}

}  // namespace nala::attention::cuda
