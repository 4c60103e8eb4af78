// The one plain parameter struct the fused NaLa kernels take (no LibTorch types), filled by
// nala_cuda.cpp after it has checked every argument. Layouts (elements, not bytes):
//   q, k, v, grad_o   (B, H, N, D) with strides (b, h, n) and unit stride along D
//   o, dq, dk, dv     (B, H, N, D) contiguous
//   S, dS             (B·H, Fp, Dp) fp32; Dp, Fp = D, F rounded up to 16 (pads hold zeros)
//   z, dz             (B·H, Fp) fp32
//   den               (B·H, N) fp32: φ_q·z + ε per token (saved by the forward for the backward)
//   S_part, z_part    (B·H, chunks, Fp, Dp) / (B·H, chunks, Fp): per-chunk partial sums before the
//                     deterministic reduction (in chunk order) over the sequence split
#pragma once
#include <cstdint>

namespace nala::attention::cuda {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2 };

// The feature map, as the device code sees it. Equal value for value to attention::FeatureMap
// (attention/nala_options.h); nala_cuda.cpp static_asserts that, since this header stays free of
// host-only types.
enum class KernelMap : int { Nala = 0, NalaRelu = 1, Elu = 2, Relu = 3, Focused = 4 };

struct NalaKernelParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* grad_o = nullptr;
  int64_t q_stride[3] = {0, 0, 0}, k_stride[3] = {0, 0, 0}, v_stride[3] = {0, 0, 0}, go_stride[3] = {0, 0, 0};
  void* o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  // the one-pass backward's dq, dk, dv: strides (b, h, n), unit along D, the same for all three (rows 16-byte
  // aligned); the host sets them, (H·N·D, N·D, D) when they are contiguous (B, H, N, D). The chunked
  // kernels write contiguous outputs and do not read them.
  int64_t grad_stride[3] = {0, 0, 0};
  // the one-pass backward's column sums of dq, dk, dv as stored (bf16), over each CTA's tokens:
  // (B·ranks, 3, H, D) float32, row b·ranks + rank (ranks: the cluster, p.chunks), parts q, k, v; null: none
  float* grad_sums = nullptr;
  float* S = nullptr;
  float* z = nullptr;
  float* den = nullptr;
  float* S_part = nullptr;   // forward: partial S; backward: partial dS
  float* z_part = nullptr;   // forward: partial z; backward: partial dz
  float* dS = nullptr;       // backward: ∂L/∂S summed over tokens (no 1/N)
  float* dz = nullptr;       // backward: ∂L/∂z summed over tokens
  int B = 0, H = 0, N = 0, D = 0, F = 0, Fp = 0, Dp = 0;
  int chunks = 1;            // sequence split of the reducing kernels (state, dq)
  int tokens_per_chunk = 0;
  int out_chunks = 1;        // sequence split of the non-reducing kernels (output, dkv)
  int out_tokens_per_chunk = 0;
  KernelMap map = KernelMap::Nala;
  float lambda = 3, tau = 0.5f, alpha = 1, eps = 1e-6f, eps_norm = 1e-6f, focus_power = 3;
  float inv_n = 1;
  bool vec_loads = false;    // every row start is 16-byte aligned: use 16-byte loads
  bool state_lo = true;      // one-pass backward: S and dS' as bf16 hi + lo pairs (else hi only)
  bool early_q = true;       // one-pass forward: the first q tile's loads issued under the last k tile (NALA_ONEPASS_EARLY_Q)
  int reduce_order = 2;      // one-pass forward's reduce (NALA_ONEPASS_REDUCE): 0 a thread's quads along n (S written there),
                             // 1 along f (conflict-free S'ᵀ stores; S written there, 16 bytes a row), 2 along f with S
                             // written by a second pass along n
  bool lepe_blocks = true;   // one-pass kernels with LePE: blocks of 2 × 4 (1 × 8) tokens where a tile is whole grid rows
                             // and the taps are in shared memory (lepe_taps ≥ 0; NALA_LEPE_BLOCKS)
  int slots = 0;             // one-pass kernels: clusters the grid holds (its y dimension), each taking (batch, head)
                             // pairs bh = blockIdx.y + i·gridDim.y in turn: n > 0 n of them, −1 as many as fit the GPU
                             // at once, 0 one cluster a pair (NALA_ONEPASS_PERSISTENT)
  bool persist_backward = false;  // the backward takes slots too (else one cluster a pair)
  int next_stage = -1;       // one-pass kernels, set by the launch: the byte of shared memory where a persistent grid
                             // stages the next pair's first tiles, or −1 (nala_onepass.cu onepass_next_stage)
  DType dtype = DType::F32;
  // One-pass forward with LePE (lepe_ks 3 or 5; 0: none): instead of o the kernel writes
  // u = o + LePE(v) + lepe_b to u, (B, N, H·D) contiguous, where LePE is the depthwise lepe_ks²
  // convolution of v over the grid_h × grid_w token grid (row-major, zero padding) with the taps
  // lepe_wt (lepe_ks², H·D) float32 tap-major and lepe_b (H·D) float32, both 16-byte aligned. A tile's
  // window of v (grid rows, D channels a position) sits at byte lepe_window of shared memory;
  // lepe_smem is the launch's dynamic shared memory (onepass_lepe_layout).
  // One-pass backward with LePE (lepe_ks 3 or 5): dv gets LePE's part, the transposed convolution of
  // grad_o (= ∂L/∂u) with the taps of lepe_wt (the forward's table) reversed as the kernel stages them; the window goes in the φ tile's memory
  // (onepass_lepe_backward_fits); lepe_b, u, lepe_window and lepe_smem are not used.
  void* u = nullptr;
  const float* lepe_wt = nullptr;
  const float* lepe_b = nullptr;
  // Both: the launch sets lepe_taps, the byte of shared memory where the kernel copies its head's taps,
  // or −1 to read them from lepe_wt (nala_onepass.cu onepass_lepe_taps).
  int lepe_ks = 0, grid_h = 0, grid_w = 0, lepe_window = 0, lepe_smem = 0, lepe_taps = -1;
  // One-pass forward with LePE on the tensor cores (NALA_LEPE_MMA; d 64, grid_w 16, not a persistent grid): lepe_mma_table holds
  // every head's taps as bf16 hi + lo pairs in the layout the products read (lepe_mma_table_bytes a head;
  // nala_lepe_mma_table builds it), copied to shared memory at lepe_taps in place of the float32 taps.
  bool lepe_mma = false;
  const void* lepe_mma_table = nullptr;
};

// LePE on the tensor cores (onepass_kernels.cuh, lepe_mma_out): a head's table holds, for the taps as bf16
// pairs hi(dx) = (w[c, j − 1, dx], w[c, j, dx]) rounded to nearest (the lower row in the low half) and
// lo(dx) = their remainders w − hi rounded (w[c, dy, dx] = 0 outside dy 0 … ks − 1):
//   the k16 products' part: for each pair of tap columns (2g, 2g + 1), g < ks / 2, 8 rows j = −2 … 5 (row
//   8g + j + 2; rows 8g + 8, 8g + 9 are the next pair's zero rows j = −2, −1, or 2 zero rows past the last),
//   each of d + 1 entries of 16 bytes {hi(2g), hi(2g + 1), lo(2g), lo(2g + 1)} (entry d zero: a pad that
//   keeps a warp's rows off one bank);
//   for odd ks the last tap column's (the k8 product's): 10 rows j = −2 … 7 of d + 1 entries of 8 bytes {hi, lo}.
constexpr int lepe_mma_k16_bytes(int d, int ks) { return ((ks / 2) * 8 + 2) * (d + 1) * 16; }
constexpr int lepe_mma_table_bytes(int d, int ks) { return lepe_mma_k16_bytes(d, ks) + (ks % 2 == 1 ? 10 * (d + 1) * 8 : 0); }
// Writes every head's table (H · lepe_mma_table_bytes(d, ks) bytes at out) from taps (ks², H·d) float32
// tap-major (lepe_wt's layout), on `stream` (nala_lepe_mma_table.cu).
void launch_lepe_mma_table(const float* taps, int H, int d, int ks, void* out, void* stream);

// Sizes that nala_cuda.cpp needs to allocate buffers and pick the sequence split.
struct NalaKernelShape {
  int F, Fp, Dp, tile_state, tile_out, tile_dq, tile_dkv, threads;
};
// D in {64, 72, 128}; feat 2 for the nala variants, 1 for the baselines. Throws otherwise.
NalaKernelShape nala_kernel_shape(int D, int feat);

// Launch on `stream` (a cudaStream_t). Throw std::runtime_error on launch errors.
void launch_nala_forward(const NalaKernelParams& p, void* stream);
void launch_nala_backward(const NalaKernelParams& p, void* stream);

// The one-pass forward (onepass_kernels.cuh): bf16 inputs with 16-byte aligned rows, head dims 64
// and 72, every feature map. p.chunks is the cluster size (1, 2, 4 or 8 CTAs per (batch, head)),
// p.tokens_per_chunk a multiple of kOnePassTile; with p.S set it also writes S, z and den for the
// chunked backward, else p.z and p.den must be null too.
constexpr int kOnePassTile = 64;
bool onepass_supported(int D, int feat);
void launch_nala_forward_onepass(const NalaKernelParams& p, void* stream);
// The one-pass backward (onepass_backward.cuh): the same split; reads S, z, den as either forward
// saved them.
void launch_nala_backward_onepass(const NalaKernelParams& p, void* stream);
// Whether the one-pass backward with LePE has a kernel that also writes p.grad_sums (the gradients'
// column sums) for head dim D: 64 only. At 72 (NaLaDiT-XL/2) that kernel spilled 714 bytes (the plain
// one 352) and the training step took 258.5 / 258.8 ms with it against 257.4 ms without (H100, batch
// 128, 2026-12-06), so it is not built.
bool onepass_backward_sums(int D);
// Whether holding S and dS' in bf16 alone (p.state_lo = false) lets the one-pass backward run two
// CTAs an SM where the hi + lo pairs allow one.
bool onepass_bf16_state_adds_a_block(int D, int feat);
// Where the one-pass forward with LePE keeps a window of window_bytes: at the front of its shared
// memory, which phase 2 leaves unused (the reduce's partial state only passes through it; offset 0,
// the kernel's shared memory unchanged), or after the kernel's own shared memory. False when the
// kernel has no LePE variant for (D, feat, ks) (the nala maps' feat 2, ks 3 or 5) or the window
// would cost the second CTA an SM.
bool onepass_lepe_layout(int D, int feat, int ks, int window_bytes, int& offset, int& smem_bytes);
// Whether the one-pass backward with LePE takes a window of window_bytes: it must fit the φ tile's
// memory, which phase 2 leaves free once its products have read φ (the kernel's shared memory is unchanged).
bool onepass_lepe_backward_fits(int D, int feat, int ks, int window_bytes);

}  // namespace nala::attention::cuda
