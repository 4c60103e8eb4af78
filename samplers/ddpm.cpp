#include "samplers/ddpm.h"

#include <ATen/ATen.h>

namespace nala::samplers {

SampleResult sample_ddpm(const ModelFn& model, const diffusion::GaussianDiffusion& d, const at::Tensor& x_T, bool clip_denoised,
                         std::optional<at::Generator> gen, const ProgressFn& progress) {
  at::Tensor x = x_T.to(at::kFloat);
  const int64_t T = d.num_timesteps(), n = x.size(0);
  SampleResult r;
  for (int64_t i = T - 1; i >= 0; --i) {
    at::Tensor t = at::full({n}, i, x.options().dtype(at::kLong));
    auto p = d.p_mean_variance(model(x, d.model_timesteps(t)), x, t, clip_denoised);
    ++r.nfe;
    x = i > 0 ? p.mean + at::exp(0.5 * p.log_variance) * randn_like_gen(x, gen) : p.mean;  // no noise at the last step
    if (progress) progress(T - i, T);
  }
  r.x = x;
  return r;
}

}  // namespace nala::samplers
