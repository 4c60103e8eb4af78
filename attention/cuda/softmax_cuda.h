// LibTorch-facing entry of nala's softmax attention forward (attention/cuda/softmax_fwd.h): checks
// the arguments, allocates o and launches on the current stream. For sampling: no autograd.
#pragma once
#include <ATen/core/Tensor.h>

namespace nala::attention {

// Warps a CTA of the forward, 16 queries each: NALA_SOFTMAX_FWD_WARPS=4 (default) or 8 (half the CTAs
// that read a (batch, head)'s K and V from L2, at fewer resident warps), to time the two; tests set it.
void set_softmax_forward_warps(int warps);

// Whether softmax_forward_cuda takes q, k, v: CUDA bf16, one shape (B, H, N, d) with d 64 or 72,
// unit stride along d, 16-byte aligned rows, one device.
bool softmax_forward_cuda_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
// softmax(q kᵀ / √d) v: (B, H, N, d) bf16, a view of a (B, N, H, d) contiguous tensor (what the output
// projection reads as (B, N, H·d) without a copy). Throws, naming what does not fit, where
// softmax_forward_cuda_supported is false. With lse (training) also the softmax's log-sum-exp per
// query in log2 units, (B, H, N) float32, for softmax_backward_cuda.
struct SoftmaxForward {
  at::Tensor o, lse;
};
SoftmaxForward softmax_forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool lse);
inline at::Tensor softmax_forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) { return softmax_forward_cuda(q, k, v, false).o; }

// Whether softmax_backward_cuda takes these: softmax_forward_cuda_supported and N ≤ 256 (one CTA holds
// a (batch, head)'s keys: attention/cuda/softmax_bwd.cu).
bool softmax_backward_cuda_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
// {dq, dk, dv}, each (B, H, N, d) bf16 viewing a (B, N, H, d) tensor, from the forward's o and lse and
// grad_o = ∂L/∂o (any layout with unit stride along d; copied once otherwise).
struct SoftmaxGrads {
  at::Tensor dq, dk, dv;
};
SoftmaxGrads softmax_backward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse,
                                   const at::Tensor& grad_o);

}  // namespace nala::attention
