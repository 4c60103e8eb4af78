// The fast CPU path of NaLa attention: feature maps as whole-tensor ATen ops without autograd
// (vectorised and threaded by ATen), batched matrix products for S, z and the output, and the
// hand-derived backward (docs/nala_attention.md §4) that recomputes φ instead of keeping an autograd graph.
// No N×N matrix anywhere. fp32 inside (fp64 for fp64 inputs).
#pragma once
#include <tuple>

#include <ATen/core/Tensor.h>

#include "attention/nala_options.h"

namespace nala::attention {

struct NalaForward {
  at::Tensor o;    // (B, H, N, d) input dtype
  at::Tensor S;    // (B, H, F, d) fp32: (1/N) Σ φ_k vᵀ
  at::Tensor z;    // (B, H, F)    fp32: (1/N) Σ φ_k
  at::Tensor den;  // (B, H, N)    fp32: φ_q·z + ε
};

NalaForward nala_forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt);

// Returns (dq, dk, dv), each (B, H, N, d) in the input dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> nala_backward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                                  const at::Tensor& S, const at::Tensor& z, const at::Tensor& den,
                                                                  const at::Tensor& grad_o, const NalaOptions& opt);

// φ of every token (..., d) -> (..., F) and its backward (..., F) -> (..., d).
at::Tensor phi_cpu(const at::Tensor& x, bool query, const NalaOptions& opt);
at::Tensor phi_backward_cpu(const at::Tensor& x, const at::Tensor& grad_phi, bool query, const NalaOptions& opt);

}  // namespace nala::attention
