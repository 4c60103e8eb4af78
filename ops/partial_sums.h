// A kernel's partial sums and where their total goes: what ops::cuda::sum_partials_into (ops/cuda/
// column_sum.h) adds, several pairs in one launch. Apart from that header so that the kernels' entry
// points can hand pairs to their caller (attention/cuda/gated_tail_cuda.h, nala_cuda.h) without
// declaring ops::cuda where attention::cuda is meant.
#pragma once
#include <ATen/core/Tensor.h>

namespace nala::ops {

// part (K, ...) float32, each part[k] contiguous; out of shape part.shape[1:], any strides
struct PartialSums {
  at::Tensor part, out;
};

}  // namespace nala::ops
