// LibTorch-facing entry points of the fused CUDA kernels (attention/cuda/nala_kernels.cuh): they
// check every argument, allocate outputs and saved state, choose the sequence split, fill the
// plain parameter struct and launch on the current stream.
#pragma once
#include <optional>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>

#include "attention/nala_cpu.h"  // NalaForward
#include "attention/nala_options.h"
#include "ops/partial_sums.h"

namespace nala::attention {

// save_state: also return S, z and den for the backward (without it the one-pass kernel writes
// o only and those three are undefined).
NalaForward nala_forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt,
                              bool save_state = true);
// With lepe_w (H·d, 1, ks, ks) defined, dv also gets LePE's part, the transposed convolution of grad_o
// (= ∂L/∂u of u = o + LePE(v) + b) over the grid_h × grid_w grid, added inside the one-pass backward as
// the tail's own kernel and the gradients' gather would (bit for bit): only where
// nala_lepe_backward_takes says so (else an error). dq_out, dk_out, dv_out (all three or none): where
// the gradients go, (B, H, N, d) bf16 views with one set of strides, unit along d, 16-byte aligned rows
// (the gated block's qkvg layout: nala_mixer with NALA_QKVG_GRADS_IN_PLACE); the one-pass backward writes
// them in place, the chunked kernels into their own tensors, copied there. They are what it returns.
// column_sums (with LePE and the outputs given): where the one-pass backward puts the three gradients'
// sums over the batch's tokens as stored, (3, H, d) float32 (the qkvg projection's bias gradient for
// q, k, v), summed by a kernel of its own as it writes them; left undefined where the one-pass
// backward does not run or has no such kernel (nala_backward_sums_columns). With pending, the sums'
// second stage is left to the caller (as gated_tail_backward's pending): *column_sums, the caller's
// (3, H, d) float32 tensor where it set one (else a new one), and its partials are appended to
// *pending, and it holds the sums once the caller has run ops::cuda::sum_partials_into(*pending).
// lepe_taps: LePE's taps as the forward read them for this lepe_w (NalaLepeForward::taps), so that the
// backward makes no copy of its own; undefined: made here from lepe_w.
std::tuple<at::Tensor, at::Tensor, at::Tensor> nala_backward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                                   const at::Tensor& S, const at::Tensor& z, const at::Tensor& den,
                                                                   const at::Tensor& grad_o, const NalaOptions& opt, const at::Tensor& lepe_w = {},
                                                                   int64_t grid_h = 0, int64_t grid_w = 0, const at::Tensor& dq_out = {},
                                                                   const at::Tensor& dk_out = {}, const at::Tensor& dv_out = {},
                                                                   at::Tensor* column_sums = nullptr,
                                                                   std::vector<nala::ops::PartialSums>* pending = nullptr,
                                                                   const at::Tensor& lepe_taps = {});
// Whether the one-pass backward has the kernel that fills nala_backward_cuda's column_sums for this
// head dim (64; at 72 it lost: attention/cuda/nala_params.h onepass_backward_sums).
bool nala_backward_sums_columns(int64_t head_dim);
// Whether the one-pass backward takes LePE's dv for these q, k, v (bf16, d 64 / 72, the one-pass
// kernel's rule, LePE 3 or 5, the window of ∂L/∂u in the φ tile's memory).
bool nala_lepe_backward_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt, int64_t ks, int64_t grid_h,
                              int64_t grid_w);

// The one-pass forward with the gated block's LePE added as it writes its output (attention/gated_tail.h
// nala_mixer): u = o + LePE(v) + lepe_b, (B, N, H·d) contiguous, where LePE is the depthwise conv of
// v over the grid_h × grid_w token grid (lepe_w (H·d, 1, ks, ks), lepe_b (H·d) or undefined); o is
// never written; S, z, den in state as nala_forward_cuda keeps them (state.o undefined). An undefined
// u: the kernel does not take these tensors (not bf16, d not 64 or 72, too few (batch, head) pairs for
// the one-pass kernel, ks not 3 or 5, or v's window would cost the kernel its second CTA an SM), and
// the caller runs the attention and the LePE apart.
// taps: LePE's taps as the kernel read them, (ks², H·d) float32 tap-major, for nala_backward_cuda's lepe_taps.
struct NalaLepeForward {
  NalaForward state;
  at::Tensor u;
  at::Tensor taps;
};
NalaLepeForward nala_forward_lepe_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt, bool save_state,
                                       const at::Tensor& lepe_w, const at::Tensor& lepe_b, int64_t grid_h, int64_t grid_w);

// Tests: fill every output and intermediate buffer with NaN before each launch, so an element a
// kernel forgets to write shows up as NaN instead of stale memory.
void set_nala_cuda_poison(bool on);

// Which forward kernel runs: Auto (the default) takes the one-pass kernel for bf16, d 64 / 72,
// when the (batch, head) pairs fill the GPU, else the chunked kernels; the environment variable
// NALA_ATTENTION_KERNEL=auto|chunked|onepass sets the start value; tests and benchmarks force one.
enum class NalaCudaKernel { Auto, Chunked, OnePass };
void set_nala_cuda_kernel(NalaCudaKernel k);
NalaCudaKernel nala_cuda_kernel();
// How the one-pass backward holds S and dS': bf16 hi + lo pairs, bf16 alone, or Auto (the default:
// bf16 alone where that fits a second CTA on an SM, d = 64; NALA_ONEPASS_BWD_STATE=auto|hilo|bf16
// sets the start value).
enum class OnePassBackwardState { Auto, HiLo, Bf16 };
void set_nala_onepass_backward_state(OnePassBackwardState s);
// The one-pass kernels' ranks a (batch, head), as NALA_ONEPASS_RANKS sets them (tests): 0 the automatic
// rule, 1, 2, 4 or 8 (at most one a tile).
void set_nala_onepass_ranks(int ranks);
// Whether the one-pass forward issues its first q tile's loads under the last k tile's work
// (NALA_ONEPASS_EARLY_Q, default on; tests).
void set_nala_onepass_early_q(bool on);
// How the one-pass forward's reduce walks the state (NALA_ONEPASS_REDUCE: 0, 1 or 2, default 2; tests: the same
// bits every way).
void set_nala_onepass_reduce_order(int order);
// Whether LePE in the one-pass kernels takes blocks of 2 × 4 (1 × 8) tokens where a tile is whole grid
// rows and the taps are in shared memory, or runs of 4 tokens everywhere (NALA_LEPE_BLOCKS, default on;
// tests: the same bits either way).
void set_nala_lepe_blocks(bool on);
// Whether the one-pass forward computes LePE on the tensor cores where it can (d 64, a grid 16 tokens
// wide, one cluster a pair: not a persistent grid; NALA_LEPE_MMA; tests). Within rounding of the other
// paths, not the same bits.
void set_nala_lepe_mma(bool on);
// The table of LePE's tensor-core path (layout: attention/cuda/nala_params.h) from taps (ks², H·d)
// float32 tap-major, as uint8 (H, lepe_mma_table_bytes(d, ks)) on the taps' device: a CUDA kernel
// (nala_lepe_mma_table.cu) on the GPU, ATen's casts and copies on the CPU (its twin in the tests).
at::Tensor nala_lepe_mma_table(const at::Tensor& taps, int64_t H, int64_t d, int64_t ks);
// The one-pass kernels' grids (tests), forward and backward: 0 one cluster a (batch, head) pair, n > 0
// n clusters each taking pairs in turn, −1 as many as fit the GPU at once; nullopt as
// NALA_ONEPASS_PERSISTENT sets it (default: one cluster a pair).
void set_nala_onepass_slots(std::optional<int> slots);

}  // namespace nala::attention
