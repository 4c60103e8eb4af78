// LibTorch-facing entry of the column-sum kernel (ops/cuda/column_sum_kernels.cu): Σ over the rows
// of a (R, C) matrix, in float32, in a fixed order (bitwise repeatable). The bias gradient of a
// linear layer (ops/linear.h) is this sum of the output's gradient.
#pragma once
#include <ATen/core/Tensor.h>

namespace nala::ops::cuda {

// x (R, C) contiguous on CUDA, float32 / bf16 / fp16, 16-byte aligned with C·element size a
// multiple of 16: what column_sum takes.
bool column_sum_supported(const at::Tensor& x);
// (C) float32: Σ_r x[r, c], per-block partial sums over row ranges added in block order.
at::Tensor column_sum(const at::Tensor& x);
// part (K, ...) float32 contiguous on CUDA, a kernel's partial sums over K token chunks: their sum
// over the first dimension, shape part.shape[1:], in a fixed order (column_sum's second stage).
// ATen's part.sum(0) took 15 µs a launch for the gated tail's (528, 2, 384) (docs/benchmarks.md).
at::Tensor sum_partials(const at::Tensor& part);

}  // namespace nala::ops::cuda
