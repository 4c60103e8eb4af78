#include "samplers/flow_likelihood.h"

#include <cmath>

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace nala::samplers {

Likelihood ode_likelihood(const ModelFn& f, const at::Tensor& x_data, double t0, double t1, int64_t num_points,
                          std::optional<at::Generator> gen) {
  TORCH_CHECK(num_points >= 2, "likelihood grid needs at least 2 points, got ", num_points);
  const int64_t n = x_data.size(0);
  Likelihood r;
  // (v, Hutchinson divergence) at (x, t)
  auto eval = [&](const at::Tensor& x, double t) {
    torch::AutoGradMode on(true);
    at::Tensor xr = x.detach().requires_grad_(true);
    at::Tensor v = f(xr, at::full({n}, t, x.options()));
    at::Tensor eps = at::randint(0, 2, x.sizes(), gen, x.options()) * 2 - 1;  // Rademacher
    at::Tensor g = torch::autograd::grad({(v * eps).sum()}, {xr})[0];
    ++r.nfe;
    return std::make_pair(v.detach(), (g * eps).flatten(1).sum(1).detach());  // (N, ...), (N,)
  };
  at::Tensor x = x_data.to(at::kFloat);
  at::Tensor delta = at::zeros({n}, x.options());  // ∫ div v dt
  // backwards in time: from t1 (data) to t0 (noise)
  for (int64_t i = num_points - 1; i > 0; --i) {
    const double ta = t0 + (t1 - t0) * double(i) / double(num_points - 1), tb = t0 + (t1 - t0) * double(i - 1) / double(num_points - 1);
    const double h = tb - ta;  // negative
    auto [v1, d1] = eval(x, ta);
    auto [v2, d2] = eval(x + h * v1, tb);
    x = x + (h / 2) * (v1 + v2);
    delta = delta - (h / 2) * (d1 + d2);  // −h > 0: accumulates ∫ div over [tb, ta]
  }
  const double D = double(x[0].numel());
  r.prior = -0.5 * D * std::log(2 * M_PI) - 0.5 * x.flatten(1).pow(2).sum(1);
  r.log_p = r.prior - delta;
  return r;
}

}  // namespace nala::samplers
