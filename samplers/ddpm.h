// Ancestral DDPM sampling (Ho et al. 2020, Alg. 2; ADM p_sample_loop, gaussian_diffusion.py:376-511):
// x_{t-1} = μ_θ(x_t, t) + 1[t ≠ 0] · exp(½ log σ²_t) · z over the (respaced) process, model called
// with the original timestep indices. The DiT scripts use clip_denoised = false.
#pragma once
#include "diffusion/gaussian_diffusion.h"
#include "samplers/sampler.h"

namespace nala::samplers {

SampleResult sample_ddpm(const ModelFn& model, const diffusion::GaussianDiffusion& d, const at::Tensor& x_T, bool clip_denoised,
                         std::optional<at::Generator> gen = std::nullopt, const ProgressFn& progress = {});

}  // namespace nala::samplers
