// LibTorch-facing entry of the column-sum kernel (ops/cuda/column_sum_kernels.cu): Σ over the rows
// of a (R, C) matrix, in float32, in a fixed order (bitwise repeatable). The bias gradient of a
// linear layer (ops/linear.h) is this sum of the output's gradient.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "ops/partial_sums.h"

namespace nala::ops::cuda {

using nala::ops::PartialSums;

// x (R, C) contiguous on CUDA, float32 / bf16 / fp16, 16-byte aligned with C·element size a
// multiple of 16: what column_sum takes.
bool column_sum_supported(const at::Tensor& x);
// (C) float32: Σ_r x[r, c], per-block partial sums over row ranges added in block order.
at::Tensor column_sum(const at::Tensor& x);
// part (K, ...) float32 contiguous on CUDA, a kernel's partial sums over K token chunks: their sum
// over the first dimension, shape part.shape[1:], in a fixed order (column_sum's second stage).
// ATen's part.sum(0) took 15 µs a launch for the gated tail's (528, 2, 384) (docs/benchmarks.md).
at::Tensor sum_partials(const at::Tensor& part);

// sum_partials for several kernels' partials in one launch, each result written in place: out =
// Σ_k part[k] (the same bits as sum_partials). part (K, ...) float32 on CUDA with each part[k]
// contiguous (stride(0) ≥ its numel: a slice of a wider partial); out float32 on the same device,
// part.shape[1:] as one or two dimensions ((C) or (R, W), trailing unit dimensions dropped), with
// any strides (a transposed view writes the sums transposed). At most kMaxPartialSumsSegments pairs.
// The gated block's backward: its tail's, LePE's and the attention's partial sums in one launch
// (attention/gated_tail.cpp), where a launch each took ≈ 4 µs (docs/benchmarks.md).
void sum_partials_into(const std::vector<PartialSums>& sums);

}  // namespace nala::ops::cuda
