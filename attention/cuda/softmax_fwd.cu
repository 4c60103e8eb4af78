// nala's softmax attention forward (attention/cuda/softmax_fwd.h): the FlashAttention-2 forward
// (Dao 2023, "FlashAttention-2", Algorithm 1) written for the DiT blocks' short sequences and head
// dims 64 and 72, where ATen's kernels (cuDNN's on the H200) run well above their floors: at DiT-XL/2's
// sampling shape (128 × 16 heads of 72, 256 tokens) cuDNN's forward took 157 µs a block (docs/benchmarks.md)
// against ≈ 31 µs of memory and ≈ 65 µs of bf16 tensor-core work.
//
// A CTA of 4 warps (or 8: SoftmaxFwdParams::warps) owns 64 (128) queries of one (batch, head); each warp owns 16 of them. The keys go by in
// blocks of 64, K and V double-buffered in shared memory by cp.async (the next block in flight while
// the current one is used). Per block, per warp: s = q kᵀ (bf16 mma.sync m16n8k16, fp32 accumulators;
// head dim 72 zero-padded to 80 for this product), the online softmax of its rows (running max m and
// sum l: o is rescaled by 2^(m_old − m_new) when the max grows), p = 2^(s·scale·log2 e − m) rounded to
// bf16, o += p v. At the end o / l is written as bf16.
#include <stdexcept>
#include <string>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention/cuda/mma_bf16.cuh"
#include "attention/cuda/softmax_fwd.h"
#include "attention/cuda/softmax_tiles.cuh"
#include "ops/cuda/ptx_math.cuh"

namespace nala::attention::cuda {
namespace {

using namespace nala::cuda_async;
using nala::cuda_ptx::ex2_approx;

// WARPS warps a CTA, 16 queries each (4 by default; 8 halves the CTAs that read each (batch, head)'s
// K and V from L2: NALA_SOFTMAX_FWD_WARPS=8, attention/cuda/softmax_cuda.cpp, to time against 4)
template <int D, int WARPS>
struct SoftmaxFwdTile {
  static constexpr int BM = 16 * WARPS, BN = 64, THREADS = 32 * WARPS;
  // CTAs an SM the registers must allow: at 4 warps 4 at d = 64 (128 registers, no spills), 3 at
  // d = 72 (≤ 168; unbounded it took 189, two CTAs an SM); at 8 warps half that
  static constexpr int MIN_BLOCKS = (D == 64 ? 4 : 3) * 4 / WARPS > 0 ? (D == 64 ? 4 : 3) * 4 / WARPS : 1;
  static constexpr int DK = (D + 15) / 16 * 16;  // q·kᵀ's reduction in whole k16 steps (pads are zero)
  static constexpr int LDQK = ld_bf16(DK);       // q and k tile rows, bf16 elements
  static constexpr int LDV = ld_bf16(D);         // v tile rows
  static constexpr int NT = D / 8;               // n8 tiles of a warp's o (16 × D)
  static constexpr int KS = DK / 16;             // k16 steps of q·kᵀ
  static constexpr int SQ = 0, SK = SQ + BM * LDQK, SV = SK + 2 * BN * LDQK, ELEMS = SV + 2 * BN * LDV;
  static constexpr int BYTES = ELEMS * 2;
  static_assert(D % 8 == 0 && LDQK % 8 == 0 && LDV % 8 == 0, "16-byte rows");
};

template <int D, int WARPS>
__global__ void __launch_bounds__(SoftmaxFwdTile<D, WARPS>::THREADS, SoftmaxFwdTile<D, WARPS>::MIN_BLOCKS) softmax_fwd_kernel(const SoftmaxFwdParams p) {
  using Tl = SoftmaxFwdTile<D, WARPS>;
  extern __shared__ __align__(16) unsigned char softmax_smem[];
  __nv_bfloat16* sm = reinterpret_cast<__nv_bfloat16*>(softmax_smem);
  __nv_bfloat16 *sQ = sm + Tl::SQ, *sK = sm + Tl::SK, *sV = sm + Tl::SV;
  const int qblocks = (p.N + Tl::BM - 1) / Tl::BM;
  const int bh = blockIdx.x / qblocks, q0 = (blockIdx.x - bh * qblocks) * Tl::BM;  // consecutive CTAs share a (batch, head): k, v from L2
  const int b = bh / p.H, h = bh - b * p.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1] + int64_t(q0) * p.q_stride[2];
  const auto* k = static_cast<const __nv_bfloat16*>(p.k) + b * p.k_stride[0] + h * p.k_stride[1];
  const auto* v = static_cast<const __nv_bfloat16*>(p.v) + b * p.v_stride[0] + h * p.v_stride[1];

  // the pad columns D..DK of the q tile and both k buffers: zero, so they add nothing to q·kᵀ
  zero_pad_columns<D, Tl::DK, Tl::THREADS>(sQ, Tl::LDQK, Tl::BM);
  zero_pad_columns<D, Tl::DK, Tl::THREADS>(sK, Tl::LDQK, 2 * Tl::BN);
  copy_rows<D, Tl::BM, Tl::THREADS>(sQ, Tl::LDQK, q, p.q_stride[2], p.N - q0);
  copy_rows<D, Tl::BN, Tl::THREADS>(sK, Tl::LDQK, k, p.k_stride[2], p.N);
  copy_rows<D, Tl::BN, Tl::THREADS>(sV, Tl::LDV, v, p.v_stride[2], p.N);
  cp_async_commit();

  const int kblocks = (p.N + Tl::BN - 1) / Tl::BN;
  float o[Tl::NT][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8 of this warp: running max (log2 units) and this thread's part of the sum
  for (int j = 0; j < kblocks; ++j) {
    const int buf = j & 1;
    if (j + 1 < kblocks) {  // the next block into the buffer the last iteration read (free since its closing barrier)
      const int n0 = (j + 1) * Tl::BN;
      copy_rows<D, Tl::BN, Tl::THREADS>(sK + (buf ^ 1) * Tl::BN * Tl::LDQK, Tl::LDQK, k + int64_t(n0) * p.k_stride[2], p.k_stride[2], p.N - n0);
      copy_rows<D, Tl::BN, Tl::THREADS>(sV + (buf ^ 1) * Tl::BN * Tl::LDV, Tl::LDV, v + int64_t(n0) * p.v_stride[2], p.v_stride[2], p.N - n0);
    }
    cp_async_commit();  // (an empty group past the last block)
    cp_async_wait<1>();  // every group but the newest: q and block j
    __syncthreads();
    const __nv_bfloat16 *kt = sK + buf * Tl::BN * Tl::LDQK, *vt = sV + buf * Tl::BN * Tl::LDV;

    // s (16 × 64) = q kᵀ: B(k = channel, n = key) is k's rows; q's fragments read again each block
    // (the q tile stays in shared memory) rather than held in 4·KS registers across the loop
    float s[8][4] = {};
#pragma unroll
    for (int kk = 0; kk < Tl::KS; ++kk) {
      uint32_t qa[4];
      load_a<false>(qa, sQ, Tl::LDQK, 16 * warp, 16 * kk);
      mma_row<8, false>(s, qa, kt, Tl::LDQK, 0, 16 * kk);
    }
    // in log2 units; keys past N never count
    const int valid = p.N - j * Tl::BN;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * n + 2 * t + (e & 1);
        s[n][e] = col < valid ? s[n][e] * p.scale_log2 : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // the row's max over its quad (the four lanes holding it)
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      corr[r] = ex2_approx(m[r] - mx[r]);  // 0 at the first block (m = −∞; every block has a valid key, so mx is finite)
      m[r] = mx[r];
      l[r] *= corr[r];
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = ex2_approx(s[n][e] - m[e >> 1]);  // p; 0 for the keys past N
        l[e >> 1] += s[n][e];
      }
#pragma unroll
    for (int n = 0; n < Tl::NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= corr[e >> 1];

    // o (16 × D) += p (16 × 64) v: p's C fragments are the A fragments of the k16 steps; B(k = key, n = channel) is v's rows (transposed loads)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[4];
      c_to_a(s[2 * kk], s[2 * kk + 1], pa);
      mma_row<Tl::NT, true>(o, pa, vt, Tl::LDV, 0, 16 * kk);
    }
    __syncthreads();  // every warp is done with this buffer before the next iteration's copies into it
  }
  cp_async_wait<0>();

  // o / l, the row sums gathered over the quad
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = 1.f / l[r];
  }
  if (p.lse && t == 0)  // the softmax's log-sum-exp in log2 units, m + log2 l, for the backward (one lane a row)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = q0 + 16 * warp + g + 8 * r;
      if (row < p.N) p.lse[int64_t(bh) * p.N + row] = m[r] + log2f(l[r]);
    }
  auto* out = static_cast<__nv_bfloat16*>(p.o) + b * p.o_stride[0] + h * p.o_stride[1];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = q0 + 16 * warp + g + 8 * r;
    if (row >= p.N) continue;
    __nv_bfloat16* dst = out + int64_t(row) * p.o_stride[2] + 2 * t;
#pragma unroll
    for (int n = 0; n < Tl::NT; ++n)
      *reinterpret_cast<__nv_bfloat162*>(dst + 8 * n) = __floats2bfloat162_rn(o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r]);
  }
}

template <int D, int WARPS>
void launch(const SoftmaxFwdParams& p, cudaStream_t st) {
  using Tl = SoftmaxFwdTile<D, WARPS>;
  // every launch (a per-device setting; cheap, and allowed inside a graph capture, as the NaLa kernels do)
  if (Tl::BYTES > 48 * 1024 &&
      cudaFuncSetAttribute(softmax_fwd_kernel<D, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tl::BYTES) != cudaSuccess)
    throw std::runtime_error("softmax_fwd: cannot reserve " + std::to_string(Tl::BYTES) + " bytes of shared memory");
  const int64_t blocks = int64_t(p.B) * p.H * ((p.N + Tl::BM - 1) / Tl::BM);
  if (blocks > 2147483647) throw std::runtime_error("softmax_fwd: " + std::to_string(blocks) + " thread blocks exceed the grid");
  softmax_fwd_kernel<D, WARPS><<<unsigned(blocks), Tl::THREADS, Tl::BYTES, st>>>(p);
}

}  // namespace

bool softmax_fwd_supported(int D) { return D == 64 || D == 72; }

void launch_softmax_fwd(const SoftmaxFwdParams& p, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.warps != 4 && p.warps != 8) throw std::runtime_error("softmax_fwd: " + std::to_string(p.warps) + " warps a CTA (4 or 8)");
  if (p.D == 64) p.warps == 4 ? launch<64, 4>(p, st) : launch<64, 8>(p, st);
  else if (p.D == 72) p.warps == 4 ? launch<72, 4>(p, st) : launch<72, 8>(p, st);
  else throw std::runtime_error("softmax_fwd: head dim " + std::to_string(p.D) + " (64 or 72 only)");
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("softmax_fwd: launch failed: ") + cudaGetErrorString(e));
}

}  // namespace nala::attention::cuda
