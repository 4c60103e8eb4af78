#include "samplers/ddim.h"

#include <ATen/ATen.h>

namespace nala::samplers {

SampleResult sample_ddim(const ModelFn& model, const diffusion::GaussianDiffusion& d, const at::Tensor& x_T, double eta,
                         bool clip_denoised, std::optional<at::Generator> gen, const ProgressFn& progress) {
  TORCH_CHECK(eta >= 0, "DDIM eta must be >= 0, got ", eta);
  at::Tensor x = x_T.to(at::kFloat);
  const int64_t T = d.num_timesteps(), n = x.size(0);
  SampleResult r;
  for (int64_t i = T - 1; i >= 0; --i) {
    at::Tensor t = at::full({n}, i, x.options().dtype(at::kLong));
    auto p = d.p_mean_variance(model(x, d.model_timesteps(t)), x, t, clip_denoised);
    ++r.nfe;
    at::Tensor eps = d.predict_eps_from_xstart(x, t, p.pred_xstart);
    at::Tensor a = d.extract(d.alphas_cumprod, t, x), a_prev = d.extract(d.alphas_cumprod_prev, t, x);
    at::Tensor sigma = eta * at::sqrt((1 - a_prev) / (1 - a)) * at::sqrt(1 - a / a_prev);
    at::Tensor mean = p.pred_xstart * at::sqrt(a_prev) + at::sqrt(1 - a_prev - sigma * sigma) * eps;
    x = (i > 0 && eta > 0) ? mean + sigma * randn_like_gen(x, gen) : mean;
    if (progress) progress(T - i, T);
  }
  r.x = x;
  return r;
}

}  // namespace nala::samplers
