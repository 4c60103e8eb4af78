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

}  // namespace nala::ops::cuda
