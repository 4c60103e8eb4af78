// NaLa attention written with plain ATen ops (docs/nala_attention.md §4): the oracle. Autograd gives its
// gradients; every fast path (CPU, CUDA) is tested against it.
//   S = (1/N) Σ_i φ_k(k_i) v_iᵀ,  z = (1/N) Σ_i φ_k(k_i),  o_t = φ_q(q_t)·S / (φ_q(q_t)·z + ε)
// q, k, v: (B, H, N, d) any float dtype; computed in fp32 (fp64 for fp64 input); output in the
// input dtype.
#pragma once
#include <ATen/core/Tensor.h>

#include "attention/nala_options.h"

namespace nala::attention {

at::Tensor nala_attention_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt);

// Exact softmax attention, softmax(q kᵀ / √d) v, through at::scaled_dot_product_attention (on CUDA
// with the fused kernel NALA_SDPA_BACKEND names, attention/sdpa_backend.h).
at::Tensor softmax_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// The attention weights w_i = φ_q(q)·φ_k(k_i) / Σ_j φ_q(q)·φ_k(k_j) that NaLa gives one query over
// N keys: q (d), k (N, d) -> (N). For the entropy experiment of the paper's central claim.
at::Tensor nala_attention_weights(const at::Tensor& q, const at::Tensor& k, const NalaOptions& opt);

}  // namespace nala::attention
