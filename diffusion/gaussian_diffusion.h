// ADM Gaussian diffusion as DiT uses it (docs/reference.md §2; Nichol & Dhariwal 2021, "Improved
// DDPM"): beta schedules, float64 tables cast to float32 per step, q_sample, the posterior,
// epsilon-prediction outputs with learned-range / fixed-small / fixed-large variance, the hybrid
// loss (MSE + VLB on the detached mean), and respacing. Samplers live in samplers/.
// Shapes: x (N, C, H, W); t (N,) int64 indices into this (possibly respaced) process.
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <map>
#include <mutex>

#include <ATen/core/Tensor.h>

#include "diffusion/model_fn.h"

namespace nala::diffusion {

enum class VarianceType { LearnedRange, FixedSmall, FixedLarge };
VarianceType parse_variance_type(const std::string& s);  // "learned-range", "fixed-small", "fixed-large"

// "linear" (1e-4..0.02 scaled by 1000/T) or "cosine" (squaredcos_cap_v2, max beta 0.999), float64.
std::vector<double> beta_schedule(const std::string& name, int64_t steps);

// ADM's space_timesteps (respace.py:12-62): "250", "ddim50", or comma sections "10,15,20". Uses
// Python's round-half-to-even on accumulated float strides, so "25" keeps 166, 500, 832.
std::set<int64_t> space_timesteps(int64_t num_timesteps, const std::string& spec);

struct PMeanVariance {
  at::Tensor mean, variance, log_variance, pred_xstart, eps;
};

struct DiffusionLosses {
  at::Tensor loss, mse, vb;  // (N,) each
};

class GaussianDiffusion {
 public:
  // `respacing` "" keeps all steps; otherwise the process over space_timesteps(steps, respacing).
  GaussianDiffusion(const std::string& schedule = "linear", int64_t steps = 1000, const std::string& respacing = "",
                    VarianceType var_type = VarianceType::LearnedRange);
  GaussianDiffusion(std::vector<double> betas, std::vector<int64_t> timestep_map, VarianceType var_type);

  int64_t num_timesteps() const { return int64_t(betas.size()); }
  bool learns_variance() const { return var_type == VarianceType::LearnedRange; }

  // table[t] for each t, float32, shaped (N, 1, 1, 1) to broadcast against x (ADM's _extract_into_tensor).
  at::Tensor extract(const std::vector<double>& table, const at::Tensor& t, const at::Tensor& like) const;
  // The original timestep indices for t (what the model sees; respace.py _WrappedModel).
  at::Tensor model_timesteps(const at::Tensor& t) const;

  at::Tensor q_sample(const at::Tensor& x0, const at::Tensor& t, const at::Tensor& noise) const;
  // mean and log variance (clipped) of q(x_{t-1} | x_t, x_0)
  std::pair<at::Tensor, at::Tensor> q_posterior(const at::Tensor& x0, const at::Tensor& xt, const at::Tensor& t) const;
  // Interprets a model output (N, C or 2C, H, W): eps first, then the variance interpolation v.
  PMeanVariance p_mean_variance(const at::Tensor& model_out, const at::Tensor& xt, const at::Tensor& t, bool clip_denoised) const;
  at::Tensor predict_xstart_from_eps(const at::Tensor& xt, const at::Tensor& t, const at::Tensor& eps) const;
  at::Tensor predict_eps_from_xstart(const at::Tensor& xt, const at::Tensor& t, const at::Tensor& x0) const;

  // The hybrid loss of gaussian_diffusion.py:715-787 for given t and noise.
  DiffusionLosses training_losses(const ModelFn& model, const at::Tensor& x0, const at::Tensor& t, const at::Tensor& noise) const;

  VarianceType var_type;
  std::vector<int64_t> timestep_map;
  std::vector<double> log_betas, fixed_large_variance, fixed_large_log_variance;
  std::vector<double> betas, alphas_cumprod, alphas_cumprod_prev, alphas_cumprod_next, sqrt_alphas_cumprod,
      sqrt_one_minus_alphas_cumprod, log_one_minus_alphas_cumprod, sqrt_recip_alphas_cumprod, sqrt_recipm1_alphas_cumprod,
      posterior_variance, posterior_log_variance_clipped, posterior_mean_coef1, posterior_mean_coef2;

 private:
  void build_tables();
  // A table as a float64 tensor on `device`, uploaded once: indexing it on the device keeps every
  // training and sampling step free of host synchronisation.
  const at::Tensor& device_table(const std::vector<double>& table, const c10::Device& device) const;
  std::vector<double> timestep_map_d_;  // the timestep map as doubles (exact below 2^53), for device_table
  mutable std::map<std::pair<const void*, std::string>, at::Tensor> tables_;
  mutable std::mutex tables_mutex_;
};

// Helpers shared with tests: KL of two diagonal Gaussians, and the discretised decoder likelihood
// (diffusion_utils.py:39-88), elementwise.
at::Tensor normal_kl(const at::Tensor& mean1, const at::Tensor& logvar1, const at::Tensor& mean2, const at::Tensor& logvar2);
at::Tensor discretized_gaussian_log_likelihood(const at::Tensor& x, const at::Tensor& means, const at::Tensor& log_scales);

}  // namespace nala::diffusion
