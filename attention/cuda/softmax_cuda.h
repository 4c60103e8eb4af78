// LibTorch-facing entry of nala's softmax attention forward (attention/cuda/softmax_fwd.h): checks
// the arguments, allocates o and launches on the current stream. For sampling: no autograd.
#pragma once
#include <ATen/core/Tensor.h>

namespace nala::attention {

// Whether softmax_forward_cuda takes q, k, v: CUDA bf16, one shape (B, H, N, d) with d 64 or 72,
// unit stride along d, 16-byte aligned rows, one device.
bool softmax_forward_cuda_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
// softmax(q kᵀ / √d) v: (B, H, N, d) bf16, a view of a (B, N, H, d) contiguous tensor (what the output
// projection reads as (B, N, H·d) without a copy). Throws, naming what does not fit, where
// softmax_forward_cuda_supported is false.
at::Tensor softmax_forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

}  // namespace nala::attention
