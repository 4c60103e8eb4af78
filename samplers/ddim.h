// DDIM sampling (Song et al. 2021, eq. 12; ADM ddim_sample, gaussian_diffusion.py:513-560): eps is
// re-derived from the predicted x_0, σ = η·√((1−ᾱ_prev)/(1−ᾱ))·√(1−ᾱ/ᾱ_prev),
// x_prev = x̂_0 √ᾱ_prev + √(1−ᾱ_prev−σ²) ε̂ + 1[t≠0] σ z. η = 0 is deterministic.
#pragma once
#include "diffusion/gaussian_diffusion.h"
#include "samplers/sampler.h"

namespace nala::samplers {

SampleResult sample_ddim(const ModelFn& model, const diffusion::GaussianDiffusion& d, const at::Tensor& x_T, double eta,
                         bool clip_denoised, std::optional<at::Generator> gen = std::nullopt, const ProgressFn& progress = {});

}  // namespace nala::samplers
