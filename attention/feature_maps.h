// The reference feature maps of NaLa attention and its baselines (docs/nala_attention.md §3), written with
// plain ATen ops so that autograd differentiates them: the oracle for every fast path.
// In: x (..., d) any float dtype. Out: (..., F) float32 (float64 for float64 input, for gradcheck).
#pragma once
#include <ATen/core/Tensor.h>

#include "attention/nala_options.h"

namespace nala::attention {

at::Tensor phi_query_reference(const at::Tensor& q, const NalaOptions& opt);
at::Tensor phi_key_reference(const at::Tensor& k, const NalaOptions& opt);

}  // namespace nala::attention
