// Classifier-free guidance as a wrapper around the model (Ho & Salimans 2022): one network call
// on the doubled batch [x, x] with labels [y, null], then uncond + s·(cond − uncond) on the first
// `channels` output channels (3 reproduces DiT/SiT's official forward_with_cfg, models.py:250-266;
// -1 guides every channel of eps / velocity). Channels past those keep the conditional half's
// values, which is what the official samplers use for the learned variance.
#pragma once
#include <functional>

#include <ATen/core/Tensor.h>

#include "samplers/sampler.h"

namespace nala::samplers {

// net(x, t, y) -> output; guidance off (scale 1) calls net once on x.
using LabelledNet = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& t, const at::Tensor& y)>;

ModelFn classifier_free_guidance(LabelledNet net, at::Tensor y, int64_t null_class, double scale, int64_t channels, int64_t model_channels);

}  // namespace nala::samplers
