// Classifier-free guidance on a doubled batch (Ho & Salimans 2022): the one place its arithmetic
// lives. DiT::forward_with_cfg (the official layout, docs/reference.md §1.7) and the samplers'
// guidance wrapper (samplers/guidance.h) both call it.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace nala::models {

// out: (2N, C', H, W) network outputs, the conditional rows first, then the unconditional ones.
// Returns (N, C', H, W): channels [0, g) are uncond + scale·(cond − uncond), channels [g, C') the
// conditional half's (what the official samplers read as the learned variance).
at::Tensor guided_output(const at::Tensor& out, double scale, int64_t g);

}  // namespace nala::models
