#include "samplers/dopri5.h"

#include <cmath>

#include <ATen/ATen.h>

namespace nala::samplers {
namespace {

// Butcher tableau of Dormand–Prince 5(4)
constexpr double C[7] = {0, 1.0 / 5, 3.0 / 10, 4.0 / 5, 8.0 / 9, 1, 1};
constexpr double A[7][6] = {{},
                            {1.0 / 5},
                            {3.0 / 40, 9.0 / 40},
                            {44.0 / 45, -56.0 / 15, 32.0 / 9},
                            {19372.0 / 6561, -25360.0 / 2187, 64448.0 / 6561, -212.0 / 729},
                            {9017.0 / 3168, -355.0 / 33, 46732.0 / 5247, 49.0 / 176, -5103.0 / 18656},
                            {35.0 / 384, 0, 500.0 / 1113, 125.0 / 192, -2187.0 / 6784, 11.0 / 84}};
constexpr double B5[7] = {35.0 / 384, 0, 500.0 / 1113, 125.0 / 192, -2187.0 / 6784, 11.0 / 84, 0};
constexpr double B4[7] = {5179.0 / 57600, 0, 7571.0 / 16695, 393.0 / 640, -92097.0 / 339200, 187.0 / 2100, 1.0 / 40};

double rms(const at::Tensor& x) { return x.to(at::kDouble).pow(2).mean().sqrt().item<double>(); }

}  // namespace

SampleResult integrate_dopri5(const ModelFn& f, const at::Tensor& x_init, double t0, double t1, double atol, double rtol,
                              Dopri5Stats* stats, int64_t max_steps) {
  TORCH_CHECK(atol > 0 && rtol > 0, "dopri5 tolerances must be positive, got atol ", atol, ", rtol ", rtol);
  at::Tensor y = x_init.to(at::kFloat);
  const int64_t n = y.size(0);
  const double dir = t1 >= t0 ? 1.0 : -1.0;
  SampleResult r;
  auto eval = [&](const at::Tensor& x, double t) {
    ++r.nfe;
    return f(x, at::full({n}, t, x.options()));
  };
  at::Tensor k0 = eval(y, t0);
  // Hairer's initial step (Solving ODEs I, II.4), as torchdiffeq's _select_initial_step
  at::Tensor scale = atol + y.abs() * rtol;
  const double d0 = rms(y / scale), d1 = rms(k0 / scale);
  double h0 = (d0 < 1e-5 || d1 < 1e-5) ? 1e-6 : 0.01 * d0 / d1;
  h0 = std::min(h0, std::fabs(t1 - t0));
  at::Tensor k1 = eval(y + dir * h0 * k0, t0 + dir * h0);
  const double d2 = rms((k1 - k0) / scale) / h0;
  const double h1 = (std::max(d1, d2) <= 1e-15) ? std::max(1e-6, h0 * 1e-3) : std::pow(0.01 / std::max(d1, d2), 1.0 / 5);
  double h = std::min(100 * h0, h1);
  double t = t0;
  Dopri5Stats st;
  while (dir * (t1 - t) > 1e-12) {
    TORCH_CHECK(st.accepted + st.rejected < max_steps, "dopri5: more than ", max_steps, " steps (tolerance too tight?)");
    h = std::min(h, std::fabs(t1 - t));
    const double hs = dir * h;
    at::Tensor k[7];
    k[0] = k0;
    for (int s = 1; s < 7; ++s) {
      at::Tensor acc = y.clone();
      for (int j = 0; j < s; ++j)
        if (A[s][j] != 0) acc.add_(k[j], hs * A[s][j]);
      k[s] = eval(acc, t + C[s] * hs);
    }
    at::Tensor y5 = y.clone(), err = at::zeros_like(y);
    for (int s = 0; s < 7; ++s) {
      if (B5[s] != 0) y5.add_(k[s], hs * B5[s]);
      err.add_(k[s], hs * (B5[s] - B4[s]));
    }
    const double ratio = rms(err / (atol + rtol * at::max(y.abs(), y5.abs())));
    const bool accept = ratio <= 1.0;
    double factor = ratio == 0 ? 10.0 : 0.9 * std::pow(ratio, -1.0 / 5);
    factor = std::min(10.0, std::max(accept ? 1.0 : 0.2, factor));
    if (accept) {
      t += hs;
      y = y5;
      k0 = k[6];  // FSAL
      ++st.accepted;
    } else {
      factor = std::min(factor, 1.0);
      ++st.rejected;
    }
    h *= factor;
  }
  if (stats) *stats = st;
  r.x = y;
  return r;
}

SampleResult sample_ode_dopri5(const ModelFn& model, const diffusion::Transport& tr, const at::Tensor& noise, double atol, double rtol,
                               Dopri5Stats* stats) {
  auto [t0, t1] = tr.interval(true, false);
  return integrate_dopri5(ode_drift(model, tr), noise, t0, t1, atol, rtol, stats);
}

}  // namespace nala::samplers
