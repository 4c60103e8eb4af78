#include "samplers/flow_ode.h"

#include <ATen/ATen.h>

namespace nala::samplers {

ModelFn ode_drift(const ModelFn& model, const diffusion::Transport& tr) {
  return [model, tr](const at::Tensor& x, const at::Tensor& t) { return tr.velocity(model(x, t).to(at::kFloat), x, t); };
}

SampleResult integrate_fixed(const ModelFn& f, const at::Tensor& x_init, double t0, double t1, int64_t num_points, FixedMethod method,
                             const ProgressFn& progress) {
  TORCH_CHECK(num_points >= 2, "an ODE grid needs at least 2 points, got ", num_points);
  at::Tensor x = x_init.to(at::kFloat);
  const int64_t n = x.size(0), steps = num_points - 1;
  SampleResult r;
  at::Tensor grid = at::linspace(t0, t1, num_points, at::TensorOptions().dtype(at::kDouble));  // as torch.linspace
  for (int64_t i = 0; i < steps; ++i) {
    const double ta = grid[i].item<double>(), tb = grid[i + 1].item<double>(), h = tb - ta;
    at::Tensor tv = at::full({n}, ta, x.options());
    at::Tensor k1 = f(x, tv);
    ++r.nfe;
    if (method == FixedMethod::Euler) {
      x = x + h * k1;
    } else {  // Heun (explicit trapezoid, torchdiffeq "heun2")
      at::Tensor k2 = f(x + h * k1, at::full({n}, tb, x.options()));
      ++r.nfe;
      x = x + (h / 2) * (k1 + k2);
    }
    if (progress) progress(i + 1, steps);
  }
  r.x = x;
  return r;
}

SampleResult sample_ode_fixed(const ModelFn& model, const diffusion::Transport& tr, const at::Tensor& noise, int64_t num_points,
                              FixedMethod method, const ProgressFn& progress) {
  auto [t0, t1] = tr.interval(true, false);
  return integrate_fixed(ode_drift(model, tr), noise, t0, t1, num_points, method, progress);
}

}  // namespace nala::samplers
