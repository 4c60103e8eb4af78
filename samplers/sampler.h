// What every sampler shares: the model as a function of (x, t), a progress callback, and the
// count of model evaluations. Samplers are free functions of (model, schedule, x_init) in the
// style of stable-diffusion.cpp; guidance wraps the model (guidance.h), never a sampler.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "diffusion/model_fn.h"

namespace nala::samplers {

// The model call (diffusion/model_fn.h): DDPM samplers pass the original integer timesteps, flow
// samplers t in [0, 1]; an ODE drift dx/dt has the same type.
using diffusion::ModelFn;
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

struct SampleResult {
  at::Tensor x;     // the sample (N, C, H, W), float32
  int64_t nfe = 0;  // model evaluations (a guided evaluation on a doubled batch counts once)
};

// Standard normal noise like x from an optional generator.
at::Tensor randn_like_gen(const at::Tensor& x, std::optional<at::Generator> gen);

}  // namespace nala::samplers
