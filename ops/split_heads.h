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

namespace nala::ops {

// t (B, N, P, H, d) -> P views (B, N, H, d); P <= 4. With repeat_part ≥ 0, a (P+1)-th view of that
// part: a part read by two consumers (the gated NaLa block's v: the attention and LePE) gets its
// two gradients added inside the same one-pass backward, not by autograd in a pass of its own.
std::vector<at::Tensor> split_heads(const at::Tensor& t, int64_t repeat_part = -1);

}  // namespace nala::ops
