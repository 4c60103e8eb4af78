// The heads of a fused projection as P views, with a one-pass backward. A projection's output
// viewed as (B, N, P, H, d) (P = 3 for softmax q, k, v; 4 for the gated NaLa block's q, k, v, g)
// splits into P strided (B, N, H, d) views without a copy; autograd's own backward of that split
// (unbind) stacks the P gradients into a (P, B, N, H, d) tensor and then copies it again into the
// projection's layout: two passes over the activations, 3.4 + 2.1 ms of a DiT-S/2 step on the H200
// (docs/benchmarks.md). Here the backward writes the projection-layout gradient in one pass (a
// CUDA kernel; on the CPU, and for layouts the kernel does not take, P strided copies).
#pragma once
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/linear.h>

namespace nala::ops {

// t (B, N, P, H, d) -> P views (B, N, H, d); P <= 4. With repeat_part ≥ 0, a (P+1)-th view of that
// part: a part read by two consumers (the gated NaLa block's v: the attention and LePE) gets its
// two gradients added inside the same one-pass backward, not by autograd in a pass of its own.
std::vector<at::Tensor> split_heads(const at::Tensor& t, int64_t repeat_part = -1);

// split_heads of a projection's output x Wᵀ + b viewed as (B, N, P, H, d) (x (B, N, D); m the
// projection, whose registered parameters it reads). Training on CUDA with NALA_SPLIT_HEADS_BIAS's
// setting (ops/fused_ops.h: on by default) it is one autograd operation (linear_split_heads_op) whose backward gathers the parts'
// gradients and sums the bias gradient in the same pass (ops/cuda/gather_heads.h launch_gather_heads_sum);
// otherwise ops::linear then split_heads. The same parts either way; the bias gradient within float32
// rounding of the column sum's (summed in another order).
std::vector<at::Tensor> linear_split_heads(const torch::nn::LinearImpl& m, const at::Tensor& x, int64_t parts, int64_t heads, int64_t repeat_part = -1);
// That operation on any device (the CPU tests check it against autograd of at::linear and the split;
// on the CPU the bias gradient is the column sum of the gathered gradient). b must be defined.
// how many backward passes have summed the bias gradient in the gather kernel so far (tests: that it ran)
int64_t split_heads_summing_gathers();
// Backward passes (of either op above) that found the parts' gradients already in the projection's
// layout, views of one (B, N, P, H, d) buffer (NALA_QKVG_GRADS_IN_PLACE: ops/fused_ops.h), and took that
// buffer as it is instead of gathering (no repeated part's second gradient among them).
int64_t split_heads_assembled_backwards();
// A consumer that wrote the parts' gradients itself into one (B, N, P, H, d) buffer (the assembled case
// above) and summed its columns on the way hands the sums over here: sums (P·H·d) float32, Σ over the
// B·N rows of buffer as stored. The next linear_split_heads backward on this thread that takes that very
// buffer (the same storage, alive, at the same offset and size) takes them as its bias gradient and
// skips the column sum's pass over the buffer (counted); any other backward ignores them. One offer
// is kept at a time (a thread-local weak reference to the buffer's storage, so it holds no memory).
void offer_parts_column_sums(const at::Tensor& buffer, const at::Tensor& sums);
// Backward passes that took offered sums as their bias gradient (tests: that the path ran)
int64_t split_heads_offered_sums_taken();
std::vector<at::Tensor> linear_split_heads_op(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, int64_t parts, int64_t heads,
                                              int64_t repeat_part = -1);

}  // namespace nala::ops
