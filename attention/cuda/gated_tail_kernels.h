// Plain parameters of the gated NaLa block's tail kernels (attention/cuda/gated_tail_kernels.cu;
// formulas and the ATen counterpart: attention/gated_tail.cpp). Elements, not bytes:
//   o    (B, H, N, d) attention output, strides o_stride = (b, h, n), unit stride along d
//   v, g (B, N, D) views of the qkvg projection, strides (b, n), unit stride along channels
//   u    (B, N, D) contiguous: o + LePE(v), in the activations' dtype (what the backward reads)
//   y    (B, N, D) contiguous: LayerNorm(u)·SiLU(g)
//   du   (B, H, N, d) contiguous: ∂L/∂u, which is ∂L/∂o, in the layout the attention backward reads
//   lepe_wt (ks·ks, D) float32 (tap-major; tap t = i·ks + j of weight (D, 1, ks, ks)), lepe_b,
//   norm_w, norm_b (D) float32
// D = H·d with d % 4 == 0; every pointer aligned to 4 elements and every stride a multiple of 4.
#pragma once
#include <cstdint>

namespace nala::attention::cuda {

struct GatedTailParams {
  int64_t B = 0, N = 0;
  int D = 0, H = 0, d = 0;
  int grid_h = 0, grid_w = 0;  // N = grid_h · grid_w, row-major
  int ks = 0;                  // LePE kernel size: 0 (none), 3, 5 or 7
  bool bf16 = true;            // activations bf16 (else float32)
  float eps = 1e-5f;
  const void* o = nullptr;
  int64_t o_stride[3] = {};
  const void* v = nullptr;
  int64_t v_stride[2] = {};
  const void* g = nullptr;
  int64_t g_stride[2] = {};
  const float* lepe_wt = nullptr;
  const float* lepe_wt_flipped = nullptr;  // the taps in reverse order (backward only)
  const float* lepe_b = nullptr;
  const float* norm_w = nullptr;
  const float* norm_b = nullptr;
  int sms = 132;  // multiprocessors: sets the grids' token chunks
  int lepe_staged = 0;  // kStage* bits: second inputs staged in shared memory with LePE's windows
  int ln_bwd_blocks_per_sm = 4;  // ln_gate_bwd's grid: about this many blocks an SM
  int64_t dg_row_stride = 0;     // elements from one token's row of dg to the next; 0: D (contiguous)
};

// GatedTailParams::lepe_staged: the forward lepe_conv's residual o (kStageResidual) and lepe_wgrad's
// du (kStageDu) copied to shared memory with the tile's window (cp.async, one group) instead of a
// 4-byte global load a position where it is used; kStageOneBuffer: lepe_wgrad then walks its tiles with
// one window (and du tile) a block, not two (more blocks fit an SM's shared memory). Results are equal
// either way (the same sums in the same order). kStageCopy16: the windows (and staged tiles) copied
// in 16-byte pieces of 8 bf16 / 4 float32 channels, not 4 / 8 bytes a lane, where every input is
// 16-byte aligned with strides of whole pieces and d is a multiple of a piece (else the 4-byte
// copies); the same values land in the same places.
// kStageWgradMma: the bf16 weight gradient on the tensor cores (lepe_wgrad_mma) where the layout allows
// (d a multiple of 8, v and du 16-byte aligned with strides of whole 8-channel pieces), else as above; its
// sums run in another order, so they equal the others' within rounding, not bit for bit.
constexpr int kStageResidual = 1, kStageDu = 2, kStageOneBuffer = 4, kStageCopy16 = 8, kStageWgradMma = 16;

// LePE kernel launches that copied their windows in 16-byte pieces since the process started (the
// tests check that the layouts meant to take them did).
int64_t lepe_copy16_launches();
// lepe_wgrad_mma launches since the process started (the tests check the layouts meant to take it did).
int64_t lepe_wgrad_mma_launches();

// Token chunks of the two reducing backward kernels (their partial sums' first dimension).
int ln_gate_backward_chunks(const GatedTailParams& p);
// du: the backward's ∂L/∂u buffer (it decides whether the weight gradient runs on the tensor cores).
int lepe_backward_chunks(const GatedTailParams& p, const void* du);

// u = o + LePE(v) + lepe_b, then y = (x̂·norm_w + norm_b)·SiLU(g) with x̂ = (u − μ)·r; mean, rstd
// (B·N) float32 are written when not null.
void launch_gated_tail_forward(const GatedTailParams& p, void* u, void* y, float* mean, float* rstd, void* stream);

// y alone from u (the forward's ln_gate_fwd once more, so bit for bit the forward's y): the
// backward's recomputation of y when it was not kept (attention/gated_tail.h gated_tail_proj_fused),
// and the forward's second half when the attention kernel wrote u itself (nala_mixer; then with
// mean, rstd (B·N) float32 written where not null).
void launch_gated_tail_y(const GatedTailParams& p, const void* u, void* y, float* mean, float* rstd, void* stream);

// dy (B, N, D) contiguous. Writes dg (B, N, D) (rows p.dg_row_stride apart, contiguous by default), du (see above), dv (B, N, D) contiguous
// (the LePE part of ∂L/∂v; not written when ks = 0 or dv is null), and the partial sums over token chunks:
// norm_part (ln_gate_backward_chunks, 2, D) = [Σ ∂L/∂norm_w, Σ ∂L/∂norm_b], lepe_part
// (lepe_backward_chunks, ks·ks + 1, D) = [Σ ∂L/∂w per tap, Σ ∂L/∂lepe_b] (not written when ks = 0);
// where dg_part is set, (ln_gate_backward_chunks, D) = Σ dg as stored (rounded to the dtype): the
// qkvg projection's bias gradient for g without a pass over dg (attention/gated_tail.h nala_mixer).
void launch_gated_tail_backward(const GatedTailParams& p, const void* dy, const void* u, const float* mean, const float* rstd, void* dg,
                                void* du, void* dv, float* norm_part, float* lepe_part, float* dg_part, void* stream);

}  // namespace nala::attention::cuda
