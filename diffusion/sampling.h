// Sampling from a DiT/SiT model with any of nala's samplers: the glue between a model, its
// objective (DDPM for the DiT family, flow matching for SiT) and samplers/. Returns model-space
// samples (latents, or pixels in [-1, 1] for pixel-space models).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "samplers/sampler.h"

namespace nala::diffusion {

class DiT;

struct SamplingOptions {
  std::string sampler = "auto";  // ddpm, ddim, dpm++, ode-euler, ode-heun, dopri5, sde-euler, sde-heun; auto: ddpm / ode-heun
  std::string objective = "auto";  // ddpm or flow; auto from the model family
  int64_t steps = 250;             // DDPM/DDIM/DPM++: model evaluations; ODE/SDE: grid points
  double cfg_scale = 1.0;
  int64_t cfg_channels = 3;        // 3: the official guidance; -1: all channels
  double eta = 0.0;                // DDIM
  bool clip_denoised = false;      // DDPM/DDIM (the DiT scripts: false)
  std::string schedule = "linear", variance = "auto";  // DDPM process ("auto": learned-range if learn_sigma)
  std::string path = "Linear", prediction = "velocity";  // flow process
  double atol = 1e-6, rtol = 1e-3;                       // dopri5
  std::string diffusion_form = "sigma", last_step = "Mean";
  double last_step_size = 0.04;
  std::string dpm_spacing = "logsnr";
};

// Resolves "auto" fields and checks the names; throws naming the bad value.
SamplingOptions resolve(SamplingOptions o, const DiT& model);

// x_init: (N, C, h, w) noise; y: (N,) labels. The model is called under no_grad in its own dtype.
samplers::SampleResult generate(DiT& model, const SamplingOptions& o, const at::Tensor& x_init, const at::Tensor& y,
                                std::optional<at::Generator> gen = std::nullopt, const samplers::ProgressFn& progress = {});

}  // namespace nala::diffusion
