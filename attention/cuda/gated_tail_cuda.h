// LibTorch-facing entry points of the gated NaLa block's tail kernels (attention/cuda/
// gated_tail_kernels.cu): they check the arguments, allocate outputs and partial sums, and launch
// on the current stream. attention/gated_tail.cpp calls them where gated_tail_supported says the
// kernels take the tensors, and runs the ATen formulas otherwise.
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ops/partial_sums.h"

namespace nala::attention::cuda {

// Which LePE kernels stage their second input in shared memory with the window (gated_tail_kernels.h
// kStage*: 1 the forward convolution's residual o, 2 the weight gradient's du, 4 the weight gradient
// with one buffer a block). NALA_LEPE_STAGED sets it at the first call: 0 / off (neither staged),
// residual, du, du1 (one buffer), both / 1 (the default: the tail's forward −15 % on an H100,
// docs/benchmarks.md), both1; any other value is an error naming it.
// NALA_LEPE_COPY16 (0 or 1, default 1) adds kStageCopy16 (the value 8): LePE's windows copied to shared memory in
// 16-byte pieces where the layout allows (the same values in the same places). set_lepe_staged
// overrides both (the tests run the variants). NALA_LEPE_WGRAD_MMA (0 or 1, default 0) adds kStageWgradMma
// (the value 16): the bf16 LePE weight gradient on the tensor cores (sums within rounding of the others).
int lepe_staging_of(const std::string& value);
bool lepe_copy16_of(const std::string& value);
bool lepe_wgrad_mma_of(const std::string& value);
void set_lepe_staged(int bits);

// Blocks an SM the backward's LayerNorm-gate kernel (ln_gate_bwd) is launched with, each summing
// the norm's parameter gradients over its tokens: 4 by default (16 warps an SM), NALA_LN_GATE_BWD_BLOCKS
// 1–16 at the first call (more warps to hide its loads' latency, more partial sums to add); any other
// value is an error naming it. The sums' order changes with it, so results change within rounding.
int ln_gate_bwd_blocks_of(const std::string& value);
void set_ln_gate_bwd_blocks(int blocks_per_sm);

// o (B, H, N, d); v, g (B, N, D) with unit channel stride; bf16 or float32, all one dtype, which
// is also the result's; LePE kernel size 0 (lepe_w undefined), 3, 5 or 7; d % 4 == 0, D ≤ 1536.
bool gated_tail_supported(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, at::ScalarType out_dtype);

struct GatedTailSaved {
  at::Tensor y;           // (B, N, D)
  at::Tensor u;           // (B, N, D) o + LePE(v), the activations' dtype
  at::Tensor mean, rstd;  // (B, N) float32; undefined unless save
};
GatedTailSaved gated_tail_forward(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                                  const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps, bool save);

// y = LayerNorm(u)·SiLU(g) recomputed from the forward's u (B, N, D) contiguous, bit for bit the
// forward's y (the same kernel); g as in the forward. u's dtype must be one the kernels take.
at::Tensor gated_tail_y(const at::Tensor& u, const at::Tensor& g, const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t heads, double eps);
// The forward's second half from a u (B, N, D) contiguous that the attention kernel wrote with LePE
// in it (nala_forward_lepe_cuda): y, and mean, rstd where save; r.u is u.
GatedTailSaved gated_tail_from_u(const at::Tensor& u, const at::Tensor& g, const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t heads,
                                 double eps, bool save);

struct GatedTailGrads {
  at::Tensor o;                // (B, H, N, d) contiguous
  at::Tensor v;                // (B, N, D) the LePE part; undefined without LePE or lepe_dv
  at::Tensor g;                // (B, N, D)
  at::Tensor lepe_w, lepe_b;   // (D, 1, ks, ks), (D) float32; undefined without LePE
  at::Tensor norm_w, norm_b;   // (D) float32
  at::Tensor g_sum;            // (D) float32: Σ over tokens of ∂L/∂g as stored; with dg_out and dg_sum only
};
// heads: o's H (o itself is not kept for the backward). lepe_dv false: LePE's part of ∂L/∂v is left
// to the attention's backward (nala_backward_cuda with LePE), r.v undefined. dg_out: where ∂L/∂g goes
// (r.g is it), (B, N, D) in g's dtype with unit channel stride, rows a multiple of 4 elements apart and
// aligned to 4 (the qkvg projection's layout: nala_mixer with NALA_QKVG_GRADS_IN_PLACE); undefined: a
// new contiguous tensor. dg_sum (with dg_out): also r.g_sum, its column sums as stored (that projection's
// bias gradient for g), summed by the LayerNorm-gate kernel as it writes them; into g_sum_out where given
// ((D) float32, e.g. a slice of the projection's whole bias gradient).
// The kernels' partial sums (the norm's, LePE's, g's) are added by one launch (ops/cuda/column_sum.h sum_partials_into).
// pending: that launch is left to the caller, who may add its own partials to it: r.lepe_w, r.lepe_b,
// r.norm_w, r.norm_b and r.g_sum are allocated and their (partials, result) pairs appended to *pending;
// they hold their values once the caller has run sum_partials_into(*pending) on this stream.
GatedTailGrads gated_tail_backward(const at::Tensor& dy, int64_t heads, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w,
                                   const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& u, const at::Tensor& mean,
                                   const at::Tensor& rstd, int64_t grid_h, int64_t grid_w, bool lepe_dv = true, const at::Tensor& dg_out = {},
                                   bool dg_sum = false, std::vector<nala::ops::PartialSums>* pending = nullptr,
                                   const at::Tensor& g_sum_out = {});

}  // namespace nala::attention::cuda
