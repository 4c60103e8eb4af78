// DPM-Solver++(2M) for epsilon-prediction models (Lu et al. 2022, "DPM-Solver++: Fast Solver for
// Guided Sampling of Diffusion Probabilistic Models", Algorithm 2, data-prediction form).
// With α_t = √ᾱ_t, σ_t = √(1−ᾱ_t), λ_t = log(α_t/σ_t) and the data prediction
// x̂_0(x_t) = (x_t − σ_t ε_θ)/α_t, each step from t_{i−1} to t_i (h_i = λ_{t_i} − λ_{t_{i−1}}) is
//   x_{t_i} = (σ_{t_i}/σ_{t_{i−1}}) x_{t_{i−1}} − α_{t_i} (e^{−h_i} − 1) D_i,
//   D_i = (1 + 1/(2 r_i)) x̂_{0,i−1} − 1/(2 r_i) x̂_{0,i−2},  r_i = h_{i−1}/h_i   (D_1 = x̂_{0,0}),
// over integer timesteps of the model's (unrespaced) process, and a final step to σ = 0, i.e. the
// last data prediction (first order there, as "lower_order_final" in the reference code).
// Step placement: "logsnr" (default) puts the steps uniformly in λ (the paper's recommendation,
// §3.4), "time" uses ADM's respacing (uniform in t). On an analytic Gaussian target the logSNR
// placement is 10-20x more accurate at 10-25 steps (tests/samplers).
#pragma once
#include <string>
#include <vector>

#include "diffusion/gaussian_diffusion.h"
#include "samplers/sampler.h"

namespace nala::samplers {

// Descending original timestep indices (first T−1, last 0) for `steps` model evaluations.
std::vector<int64_t> dpm_solver_timesteps(const diffusion::GaussianDiffusion& base, int64_t steps, const std::string& spacing = "logsnr");

// `base` is the full process the model was trained on (no respacing).
SampleResult sample_dpm_solver_pp(const ModelFn& model, const diffusion::GaussianDiffusion& base, const at::Tensor& x_T,
                                  const std::vector<int64_t>& timesteps, const ProgressFn& progress = {});

}  // namespace nala::samplers
