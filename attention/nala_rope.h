// NaLa attention with 2-D axial rotary position embedding on the numerator's features only (the
// authors' public code): S = (1/N) Σ_i (R_i φ_k,i) v_iᵀ, o_t = (R_t φ_q,t)·S / (φ_q,t·z + ε), z as
// in §4. Plain ATen ops (autograd); q, k, v (B, H, N, d) with N = grid_h·grid_w.
#pragma once
#include <ATen/core/Tensor.h>

#include "attention/nala_options.h"

namespace nala::attention {

at::Tensor nala_attention_rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt,
                               int64_t grid_h, int64_t grid_w);

}  // namespace nala::attention
