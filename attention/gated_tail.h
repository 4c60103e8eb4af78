// The gated NaLa block's tail (docs/nala_attention.md §5), from the attention output to the input
// of the output projection:
//   u = o + LePE(v)                 LePE: depthwise ks×ks conv of v over the token grid, zero
//                                   padding ks/2, with bias (lepe.weight (D, 1, ks, ks), lepe.bias)
//   y = LayerNorm(u)·SiLU(g)        LayerNorm with affine norm.weight, norm.bias and eps
// o: (B, H, N, d), the attention output as nala_attention returns it (strided views are read in
// place, unit stride along d); v, g: (B, N, D) views of the qkvg projection (unit channel stride);
// N = grid_h·grid_w tokens in row-major order, D = H·d. Without LePE, lepe_w and lepe_b are
// undefined. On CUDA with fused block ops on (ops/fused_ops.h) this is one operation with a
// hand-derived backward (four kernels in all: attention/cuda/gated_tail_kernels.cu; o, u and the
// gradients never go through a layout copy); elsewhere it is the plain composition below.
#pragma once
#include <ATen/core/Tensor.h>

#include "attention/nala_options.h"

namespace nala::attention {

// Under CUDA autocast the result is in the autocast dtype (what the projection reads), else in o's.
at::Tensor gated_tail(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                      const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps);

// The fused operation itself on every device (on the CPU, and for tensors the kernels do not take,
// its forward and hand-derived backward in ATen ops): what the CPU tests check against autograd of
// the plain composition.
at::Tensor gated_tail_fused(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                            const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps);

// The tail and the block's output projection, out = y·Wᵀ + b (proj_w (D, D), proj_b (D)), as one
// operation that keeps u but not y for the backward and recomputes y there from u, its LayerNorm
// statistics and g (one element-wise pass instead of a second (B, N, D) tensor kept per block).
// What the gated block runs when training on CUDA with NALA_RECOMPUTE=1 (ops/fused_ops.h); any
// device (the CPU tests check it against autograd of the composition). Under CUDA autocast the
// weight is cast as at::linear casts it.
at::Tensor gated_tail_proj_fused(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                                 const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& proj_w, const at::Tensor& proj_b, int64_t grid_h,
                                 int64_t grid_w, double eps);

// The same with the gate computed inside from the block's projection input x (B, N, D) and the
// gate's rows of the qkvg projection (gate_w (D, D), gate_b (D)): g = x·gate_wᵀ + gate_b is not kept
// either but recomputed in the backward (one (B·N × D × D) GEMM); its gradient goes to x, gate_w and
// gate_b. What the gated block runs with NALA_RECOMPUTE=1, its q, k, v from a separate GEMM.
at::Tensor gated_tail_proj_gate_fused(const at::Tensor& o, const at::Tensor& v, const at::Tensor& x, const at::Tensor& gate_w,
                                      const at::Tensor& gate_b, const at::Tensor& lepe_w, const at::Tensor& lepe_b, const at::Tensor& norm_w,
                                      const at::Tensor& norm_b, const at::Tensor& proj_w, const at::Tensor& proj_b, int64_t grid_h, int64_t grid_w,
                                      double eps);

// The gated block's whole token mixer after its projections, for NALA_RECOMPUTE=1 (ops/fused_ops.h):
// o = nala_attention(q, k, v, opt), g = x·gate_wᵀ + gate_b, the tail above and out = y·Wᵀ + b as one
// operation that keeps only q, k, v and x (views the projections' backwards keep anyway). Its
// backward runs the attention's forward once more, with the state (the recomputing attention does
// that anyway), and the tail's forward on that o: u, y and g are recomputed, not kept, which saves
// one (B, N, D) tensor per block against gated_tail_proj_gate_fused with a recomputing attention.
// q, k, v: (B, H, N, d); v_tok: v as (B, N, D) (LePE's input; a second view of the same projection
// output); x: the projections' input (B, N, D). Any device (the CPU tests check it against the
// composition in float64); no RoPE (the block keeps the composition there). Under CUDA autocast the
// weights are cast as at::linear casts them.
at::Tensor nala_mixer_recomputing(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& v_tok, const at::Tensor& x,
                                  const at::Tensor& gate_w, const at::Tensor& gate_b, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                                  const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& proj_w, const at::Tensor& proj_b,
                                  const NalaOptions& opt, int64_t grid_h, int64_t grid_w, double eps);

// The gated block's token mixer between its projections and the output projection: o =
// nala_attention(q, k, v, opt), then gated_tail(o, v_tok, g, …) → y (B, N, D), as one operation. On
// CUDA (bf16, d 64 or 72, LePE 3 or 5, the one-pass kernel's shapes) the attention kernel adds LePE as
// it writes its output, u = o + LePE(v) + lepe_b: o never goes to memory and the tail's convolution
// pass goes (attention/cuda/onepass_kernels.cuh); with lepe_kernels = 2 the attention's backward also
// adds LePE's part of ∂L/∂v to its own dv, so the tail's transposed convolution pass goes and v's two
// gradients are one (where the window fits; else the tail's kernel): v_tok's gradient is then
// undefined and v's holds both, which is the sum autograd forms when v and v_tok are views of one
// tensor, as in the block (the kernel path needs both to require gradients). Otherwise the two run apart, the
// same formulas. v_tok is v as (B, N, H·d): the same values (the block passes a second view of the
// same projection output; the CUDA kernel reads LePE's input through v). What the block runs on CUDA
// unless NALA_LEPE_IN_ATTENTION=0 (lepe_in_attention; not with RoPE or NALA_RECOMPUTE=1). Any device (the
// CPU tests check it against autograd of the composition in float64).
at::Tensor nala_mixer(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& v_tok, const at::Tensor& g,
                      const at::Tensor& lepe_w, const at::Tensor& lepe_b, const at::Tensor& norm_w, const at::Tensor& norm_b, const NalaOptions& opt,
                      int64_t grid_h, int64_t grid_w, double eps, int lepe_kernels = 1);
// NALA_LEPE_IN_ATTENTION: 1 the gated block runs nala_mixer with LePE in the attention's forward; 2 or
// unset (the default: NaLaDiT-S/2 training 0.3-0.5 ms a step faster than 0 on an H100, docs/benchmarks.md)
// in its forward and backward; 0: nala_attention, then gated_tail. Any other value is an error, at first use.
int lepe_in_attention();
void set_lepe_in_attention(int kernels);
void reset_lepe_in_attention();  // back to the environment's value (read at the next use)
// How many nala_mixer forwards (backwards) ran the attention kernel with LePE inside (tests: the path was taken).
int64_t lepe_in_attention_runs();
int64_t lepe_in_attention_backward_runs();
// How many of those backwards wrote the qkvg gradients in place (NALA_QKVG_GRADS_IN_PLACE: ops/fused_ops.h).
int64_t qkvg_grads_in_place_runs();

// The plain composition (the reference path): transpose o, conv2d, add, layer_norm, silu, multiply.
at::Tensor gated_tail_reference(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                                const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps);

}  // namespace nala::attention
