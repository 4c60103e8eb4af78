// The one model-call type every objective and sampler uses: a network (or guidance wrapper, or
// ODE drift) as a function of the state x (N, C, H, W) and the time t (N,). DDPM code passes the
// original integer timesteps (as float or long), flow-matching code t in [0, 1].
#pragma once
#include <functional>

#include <ATen/core/Tensor.h>

namespace nala::diffusion {

using ModelFn = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& t)>;

}  // namespace nala::diffusion
