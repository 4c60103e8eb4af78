#include "samplers/flow_sde.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

namespace nala::samplers {

SdeMethod parse_sde_method(const std::string& s) {
  if (s == "Euler") return SdeMethod::Euler;
  if (s == "Heun") return SdeMethod::Heun;
  throw std::runtime_error("unknown SDE method '" + s + "' (known: Euler, Heun)");
}

LastStep parse_last_step(const std::string& s) {
  if (s == "none" || s == "None") return LastStep::None;
  if (s == "Mean") return LastStep::Mean;
  if (s == "Tweedie") return LastStep::Tweedie;
  if (s == "Euler") return LastStep::Euler;
  throw std::runtime_error("unknown last step '" + s + "' (known: none, Mean, Tweedie, Euler)");
}

SampleResult sample_sde(const ModelFn& model, const diffusion::Transport& tr, const at::Tensor& noise, const SdeOptions& o,
                        std::optional<at::Generator> gen, const ProgressFn& progress) {
  TORCH_CHECK(o.num_points >= 2, "an SDE grid needs at least 2 points, got ", o.num_points);
  const double lss = o.last_step == LastStep::None ? 0.0 : o.last_step_size;
  auto [t0, t1] = tr.interval(true, true, o.diffusion_form, lss);
  at::Tensor x = noise.to(at::kFloat);
  const int64_t n = x.size(0);
  SampleResult r;
  // velocity and score from one model call
  auto parts = [&](const at::Tensor& xx, const at::Tensor& t) {
    at::Tensor out = model(xx, t).to(at::kFloat);
    ++r.nfe;
    return std::make_pair(tr.velocity(out, xx, t), tr.score(out, xx, t));
  };
  auto w = [&](const at::Tensor& xx, const at::Tensor& t) { return tr.diffusion_coefficient(o.diffusion_form, o.diffusion_norm, xx, t); };
  auto sde_drift = [&](const at::Tensor& xx, const at::Tensor& t) {
    auto [v, s] = parts(xx, t);
    return v + w(xx, t) * s;
  };
  at::Tensor grid = at::linspace(t0, t1, o.num_points, at::TensorOptions().dtype(at::kDouble));
  const double dt = grid[1].item<double>() - grid[0].item<double>();
  const int64_t steps = o.num_points - 1;
  for (int64_t i = 0; i < steps; ++i) {
    at::Tensor t = at::full({n}, grid[i].item<double>(), x.options());
    at::Tensor dw = randn_like_gen(x, gen) * std::sqrt(dt);
    if (o.method == SdeMethod::Euler) {
      at::Tensor f = sde_drift(x, t);
      x = x + f * dt + at::sqrt(2 * w(x, t)) * dw;
    } else {
      at::Tensor xh = x + at::sqrt(2 * w(x, t)) * dw;
      at::Tensor k1 = sde_drift(xh, t);
      at::Tensor k2 = sde_drift(xh + dt * k1, t + dt);
      x = xh + 0.5 * dt * (k1 + k2);
    }
    if (progress) progress(i + 1, steps);
  }
  at::Tensor tl = at::full({n}, t1, x.options());
  if (o.last_step == LastStep::Mean) {
    x = x + sde_drift(x, tl) * lss;
  } else if (o.last_step == LastStep::Euler) {
    x = x + parts(x, tl).first * lss;
  } else if (o.last_step == LastStep::Tweedie) {
    auto c = tr.coeffs(tl, x);
    x = x / c.alpha + c.sigma.pow(2) / c.alpha * parts(x, tl).second;
  }
  r.x = x;
  return r;
}

}  // namespace nala::samplers
