#include "samplers/dpm_solver.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <ATen/ATen.h>

namespace nala::samplers {

std::vector<int64_t> dpm_solver_timesteps(const diffusion::GaussianDiffusion& base, int64_t steps, const std::string& spacing) {
  const int64_t T = base.num_timesteps();
  TORCH_CHECK(steps >= 2 && steps <= T, "DPM-Solver++ needs between 2 and ", T, " steps, got ", steps);
  TORCH_CHECK(base.timestep_map.size() == size_t(T) && base.timestep_map.back() == T - 1,
              "DPM-Solver++ runs on the model's full (unrespaced) process");
  std::vector<int64_t> ts;
  if (spacing == "time") {
    for (int64_t i : diffusion::space_timesteps(T, std::to_string(steps))) ts.push_back(i);
  } else if (spacing == "logsnr") {
    std::vector<double> lam(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) lam[size_t(i)] = 0.5 * std::log(base.alphas_cumprod[size_t(i)] / (1 - base.alphas_cumprod[size_t(i)]));
    std::set<int64_t> picked;
    for (int64_t k = 0; k < steps; ++k) {
      const double target = lam[size_t(T - 1)] + (lam[0] - lam[size_t(T - 1)]) * double(k) / double(steps - 1);
      // λ falls monotonically with t: the nearest index by binary search
      int64_t lo = 0, hi = T - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (lam[size_t(mid)] > target) lo = mid + 1; else hi = mid;
      }
      int64_t best = lo;
      if (lo > 0 && std::fabs(lam[size_t(lo - 1)] - target) < std::fabs(lam[size_t(lo)] - target)) best = lo - 1;
      picked.insert(best);
    }
    ts.assign(picked.begin(), picked.end());
  } else {
    TORCH_CHECK(false, "unknown DPM-Solver++ spacing '", spacing, "' (known: logsnr, time)");
  }
  std::reverse(ts.begin(), ts.end());
  return ts;
}

SampleResult sample_dpm_solver_pp(const ModelFn& model, const diffusion::GaussianDiffusion& base, const at::Tensor& x_T,
                                  const std::vector<int64_t>& timesteps, const ProgressFn& progress) {
  at::Tensor x = x_T.to(at::kFloat);
  const int64_t n = x.size(0), C = x.size(1), S = int64_t(timesteps.size());
  auto alpha = [&](int64_t t) { return std::sqrt(base.alphas_cumprod[size_t(t)]); };
  auto sigma = [&](int64_t t) { return std::sqrt(1.0 - base.alphas_cumprod[size_t(t)]); };
  auto lambda = [&](int64_t t) { return std::log(alpha(t) / sigma(t)); };
  SampleResult r;
  at::Tensor x0_prev;  // x̂_0 at the previous step
  double h_prev = 0;
  for (int64_t k = 0; k < S; ++k) {
    const int64_t t = timesteps[size_t(k)];
    at::Tensor eps = model(x, at::full({n}, t, x.options().dtype(at::kLong))).narrow(1, 0, C).to(at::kFloat);
    ++r.nfe;
    at::Tensor x0 = (x - sigma(t) * eps) / alpha(t);  // data prediction
    if (k == S - 1) {
      x = x0;  // final step to σ = 0 (first order): x = x̂_0
    } else {
      const int64_t tn = timesteps[size_t(k + 1)];
      const double h = lambda(tn) - lambda(t);
      at::Tensor D = x0;
      if (x0_prev.defined()) {
        const double rr = h_prev / h;
        D = (1 + 1 / (2 * rr)) * x0 - (1 / (2 * rr)) * x0_prev;
      }
      x = (sigma(tn) / sigma(t)) * x - alpha(tn) * std::expm1(-h) * D;
      h_prev = h;
    }
    x0_prev = x0;
    if (progress) progress(k + 1, S);
  }
  r.x = x;
  return r;
}

}  // namespace nala::samplers
