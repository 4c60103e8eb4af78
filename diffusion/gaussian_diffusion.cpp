#include "diffusion/gaussian_diffusion.h"

#include <cfenv>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>

namespace nala::diffusion {

VarianceType parse_variance_type(const std::string& s) {
  if (s == "learned-range") return VarianceType::LearnedRange;
  if (s == "fixed-small") return VarianceType::FixedSmall;
  if (s == "fixed-large") return VarianceType::FixedLarge;
  throw std::runtime_error("unknown variance type '" + s + "' (known: learned-range, fixed-small, fixed-large)");
}

std::vector<double> beta_schedule(const std::string& name, int64_t T) {
  if (T <= 0) throw std::runtime_error("diffusion steps must be positive, got " + std::to_string(T));
  std::vector<double> b(static_cast<size_t>(T));
  if (name == "linear") {
    // gaussian_diffusion.py:98-108: np.linspace(scale*1e-4, scale*0.02, T)
    const double scale = 1000.0 / double(T), lo = scale * 0.0001, hi = scale * 0.02;
    for (int64_t i = 0; i < T; ++i) b[size_t(i)] = T == 1 ? lo : lo + (hi - lo) * double(i) / double(T - 1);
  } else if (name == "cosine") {
    // squaredcos_cap_v2 (Nichol & Dhariwal 2021, eq. 17): ᾱ(t) = cos²((t + 0.008)/1.008 · π/2)
    auto abar = [](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * M_PI / 2), 2); };
    for (int64_t i = 0; i < T; ++i) b[size_t(i)] = std::min(1 - abar(double(i + 1) / T) / abar(double(i) / T), 0.999);
  } else {
    throw std::runtime_error("unknown beta schedule '" + name + "' (known: linear, cosine)");
  }
  return b;
}

std::set<int64_t> space_timesteps(int64_t T, const std::string& spec) {
  if (spec.empty()) {
    std::set<int64_t> all;
    for (int64_t i = 0; i < T; ++i) all.insert(i);
    return all;
  }
  if (spec.rfind("ddim", 0) == 0) {
    const int64_t want = std::stoll(spec.substr(4));
    for (int64_t stride = 1; stride < T; ++stride)
      if ((T + stride - 1) / stride == want) {
        std::set<int64_t> s;
        for (int64_t i = 0; i < T; i += stride) s.insert(i);
        return s;
      }
    throw std::runtime_error("cannot create exactly " + std::to_string(want) + " steps with an integer stride (respacing '" + spec + "')");
  }
  std::vector<int64_t> counts;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error("invalid respacing '" + spec + "' (examples: 250, ddim50, 10,15,20)");
    counts.push_back(std::stoll(item));
  }
  const int64_t per = T / int64_t(counts.size()), extra = T % int64_t(counts.size());
  std::set<int64_t> out;
  int64_t start = 0;
  const int old_mode = std::fegetround();
  std::fesetround(FE_TONEAREST);
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t size = per + (int64_t(i) < extra ? 1 : 0);
    if (size < counts[i])
      throw std::runtime_error("cannot divide a section of " + std::to_string(size) + " steps into " + std::to_string(counts[i]));
    const double stride = counts[i] <= 1 ? 1.0 : double(size - 1) / double(counts[i] - 1);
    double cur = 0.0;  // accumulated by repeated addition, as in respace.py
    for (int64_t k = 0; k < counts[i]; ++k) {
      out.insert(start + int64_t(std::nearbyint(cur)));  // Python round(): half to even
      cur += stride;
    }
    start += size;
  }
  std::fesetround(old_mode);
  return out;
}

GaussianDiffusion::GaussianDiffusion(const std::string& schedule, int64_t steps, const std::string& respacing, VarianceType vt)
    : var_type(vt) {
  const std::vector<double> base = beta_schedule(schedule, steps);
  const std::set<int64_t> use = space_timesteps(steps, respacing);
  // respace.py:65-114: new β_i = 1 − ᾱ[t_i]/ᾱ[t_{i−1}]
  double last = 1.0, acp = 1.0;
  for (int64_t i = 0; i < steps; ++i) {
    acp *= 1.0 - base[size_t(i)];
    if (use.count(i)) {
      betas.push_back(1.0 - acp / last);
      last = acp;
      timestep_map.push_back(i);
    }
  }
  build_tables();
}

GaussianDiffusion::GaussianDiffusion(std::vector<double> b, std::vector<int64_t> map, VarianceType vt)
    : var_type(vt), timestep_map(std::move(map)), betas(std::move(b)) {
  if (timestep_map.size() != betas.size()) throw std::runtime_error("GaussianDiffusion: timestep map and betas differ in length");
  build_tables();
}

void GaussianDiffusion::build_tables() {
  const size_t T = betas.size();
  for (double b : betas)
    if (!(b > 0 && b <= 1)) throw std::runtime_error("betas must be in (0, 1], got " + std::to_string(b));
  alphas_cumprod.resize(T);
  double acp = 1.0;
  for (size_t i = 0; i < T; ++i) alphas_cumprod[i] = acp *= (1.0 - betas[i]);
  alphas_cumprod_prev.assign(1, 1.0);
  alphas_cumprod_prev.insert(alphas_cumprod_prev.end(), alphas_cumprod.begin(), alphas_cumprod.end() - 1);
  alphas_cumprod_next.assign(alphas_cumprod.begin() + 1, alphas_cumprod.end());
  alphas_cumprod_next.push_back(0.0);
  auto map = [&](auto f) {
    std::vector<double> v(T);
    for (size_t i = 0; i < T; ++i) v[i] = f(i);
    return v;
  };
  sqrt_alphas_cumprod = map([&](size_t i) { return std::sqrt(alphas_cumprod[i]); });
  sqrt_one_minus_alphas_cumprod = map([&](size_t i) { return std::sqrt(1.0 - alphas_cumprod[i]); });
  log_one_minus_alphas_cumprod = map([&](size_t i) { return std::log(1.0 - alphas_cumprod[i]); });
  sqrt_recip_alphas_cumprod = map([&](size_t i) { return std::sqrt(1.0 / alphas_cumprod[i]); });
  sqrt_recipm1_alphas_cumprod = map([&](size_t i) { return std::sqrt(1.0 / alphas_cumprod[i] - 1.0); });
  posterior_variance = map([&](size_t i) { return betas[i] * (1.0 - alphas_cumprod_prev[i]) / (1.0 - alphas_cumprod[i]); });
  // log of [pv[1], pv[1:]]: the posterior variance is 0 at t = 0
  posterior_log_variance_clipped = map([&](size_t i) { return std::log(T > 1 ? posterior_variance[i == 0 ? 1 : i] : betas[0]); });
  posterior_mean_coef1 = map([&](size_t i) { return betas[i] * std::sqrt(alphas_cumprod_prev[i]) / (1.0 - alphas_cumprod[i]); });
  posterior_mean_coef2 = map([&](size_t i) { return (1.0 - alphas_cumprod_prev[i]) * std::sqrt(1.0 - betas[i]) / (1.0 - alphas_cumprod[i]); });
  log_betas = map([&](size_t i) { return std::log(betas[i]); });
  // FIXED_LARGE: append(posterior_variance[1], betas[1:])
  fixed_large_variance = map([&](size_t i) { return (i == 0 && T > 1) ? posterior_variance[1] : betas[i]; });
  fixed_large_log_variance = map([&](size_t i) { return std::log(fixed_large_variance[i]); });
  timestep_map_d_.assign(timestep_map.begin(), timestep_map.end());
}

const at::Tensor& GaussianDiffusion::device_table(const std::vector<double>& table, const c10::Device& device) const {
  std::lock_guard<std::mutex> lock(tables_mutex_);
  auto key = std::make_pair(static_cast<const void*>(&table), device.str());
  auto it = tables_.find(key);
  if (it == tables_.end()) it = tables_.emplace(key, at::tensor(table, at::TensorOptions().dtype(at::kDouble)).to(device)).first;
  return it->second;
}

at::Tensor GaussianDiffusion::extract(const std::vector<double>& table, const at::Tensor& t, const at::Tensor& like) const {
  const at::Tensor& tab = device_table(table, like.device());                             // (T,) float64
  at::Tensor v = tab.index_select(0, t.to(like.device(), at::kLong)).to(at::kFloat);      // float32, as ADM
  std::vector<int64_t> shape(size_t(like.dim()), 1);
  shape[0] = t.size(0);
  return v.view(shape);
}

at::Tensor GaussianDiffusion::model_timesteps(const at::Tensor& t) const {
  const at::Tensor& map = device_table(timestep_map_d_, t.device());
  return map.index_select(0, t.to(at::kLong)).to(at::kLong);
}

at::Tensor GaussianDiffusion::q_sample(const at::Tensor& x0, const at::Tensor& t, const at::Tensor& noise) const {
  return extract(sqrt_alphas_cumprod, t, x0) * x0 + extract(sqrt_one_minus_alphas_cumprod, t, x0) * noise;
}

std::pair<at::Tensor, at::Tensor> GaussianDiffusion::q_posterior(const at::Tensor& x0, const at::Tensor& xt, const at::Tensor& t) const {
  at::Tensor mean = extract(posterior_mean_coef1, t, xt) * x0 + extract(posterior_mean_coef2, t, xt) * xt;
  return {mean, extract(posterior_log_variance_clipped, t, xt)};
}

at::Tensor GaussianDiffusion::predict_xstart_from_eps(const at::Tensor& xt, const at::Tensor& t, const at::Tensor& eps) const {
  return extract(sqrt_recip_alphas_cumprod, t, xt) * xt - extract(sqrt_recipm1_alphas_cumprod, t, xt) * eps;
}

at::Tensor GaussianDiffusion::predict_eps_from_xstart(const at::Tensor& xt, const at::Tensor& t, const at::Tensor& x0) const {
  return (extract(sqrt_recip_alphas_cumprod, t, xt) * xt - x0) / extract(sqrt_recipm1_alphas_cumprod, t, xt);
}

PMeanVariance GaussianDiffusion::p_mean_variance(const at::Tensor& out, const at::Tensor& xt, const at::Tensor& t, bool clip) const {
  const int64_t C = xt.size(1);
  PMeanVariance r;
  at::Tensor eps = out.narrow(1, 0, C).to(at::kFloat);
  if (var_type == VarianceType::LearnedRange) {
    TORCH_CHECK(out.size(1) == 2 * C, "learned-range variance needs a model output of ", 2 * C, " channels, got ", out.size(1));
    at::Tensor v = out.narrow(1, C, C).to(at::kFloat);
    at::Tensor min_log = extract(posterior_log_variance_clipped, t, xt);
    at::Tensor max_log = extract(log_betas, t, xt);
    at::Tensor frac = (v + 1) / 2;                                    // v ∈ [−1, 1] interpolates the log variance
    r.log_variance = frac * max_log + (1 - frac) * min_log;
    r.variance = at::exp(r.log_variance);
  } else if (var_type == VarianceType::FixedLarge) {
    r.variance = extract(fixed_large_variance, t, xt).expand_as(xt);
    r.log_variance = extract(fixed_large_log_variance, t, xt).expand_as(xt);
  } else {
    r.variance = extract(posterior_variance, t, xt).expand_as(xt);
    r.log_variance = extract(posterior_log_variance_clipped, t, xt).expand_as(xt);
  }
  at::Tensor x0 = predict_xstart_from_eps(xt, t, eps);
  if (clip) x0 = x0.clamp(-1, 1);
  r.pred_xstart = x0;
  r.eps = eps;
  r.mean = q_posterior(x0, xt, t).first;
  return r;
}

at::Tensor normal_kl(const at::Tensor& m1, const at::Tensor& lv1, const at::Tensor& m2, const at::Tensor& lv2) {
  return 0.5 * (-1.0 + lv2 - lv1 + at::exp(lv1 - lv2) + (m1 - m2).pow(2) * at::exp(-lv2));
}

namespace {
at::Tensor approx_standard_normal_cdf(const at::Tensor& x) {
  return 0.5 * (1.0 + at::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
}
at::Tensor mean_flat(const at::Tensor& x) { return x.flatten(1).mean(1); }
}  // namespace

at::Tensor discretized_gaussian_log_likelihood(const at::Tensor& x, const at::Tensor& means, const at::Tensor& log_scales) {
  at::Tensor centered = x - means, inv_stdv = at::exp(-log_scales);
  at::Tensor cdf_plus = approx_standard_normal_cdf(inv_stdv * (centered + 1.0 / 255.0));
  at::Tensor cdf_min = approx_standard_normal_cdf(inv_stdv * (centered - 1.0 / 255.0));
  at::Tensor log_cdf_plus = at::log(cdf_plus.clamp_min(1e-12));
  at::Tensor log_one_minus_cdf_min = at::log((1.0 - cdf_min).clamp_min(1e-12));
  at::Tensor log_delta = at::log((cdf_plus - cdf_min).clamp_min(1e-12));
  return at::where(x < -0.999, log_cdf_plus, at::where(x > 0.999, log_one_minus_cdf_min, log_delta));
}

DiffusionLosses GaussianDiffusion::training_losses(const ModelFn& model, const at::Tensor& x0, const at::Tensor& t,
                                                   const at::Tensor& noise) const {
  at::Tensor xt = q_sample(x0, t, noise);
  at::Tensor out = model(xt, model_timesteps(t)).to(at::kFloat);        // (N, C or 2C, H, W)
  const int64_t C = x0.size(1);
  DiffusionLosses L;
  at::Tensor eps = out.narrow(1, 0, C);
  L.mse = mean_flat((noise - eps).pow(2));                               // (N,)
  if (learns_variance()) {
    // the VLB term trains only the variance: the mean is detached (gaussian_diffusion.py:758-765)
    at::Tensor frozen = at::cat({eps.detach(), out.narrow(1, C, C)}, 1);
    auto [true_mean, true_logvar] = q_posterior(x0, xt, t);
    PMeanVariance p = p_mean_variance(frozen, xt, t, false);
    at::Tensor kl = mean_flat(normal_kl(true_mean, true_logvar, p.mean, p.log_variance)) / std::log(2.0);
    at::Tensor nll = -mean_flat(discretized_gaussian_log_likelihood(x0, p.mean, 0.5 * p.log_variance)) / std::log(2.0);
    L.vb = at::where(t.to(kl.device()) == 0, nll, kl);
    L.loss = L.mse + L.vb;  // RESCALED_MSE would scale vb by T/1000, which is 1 here
  } else {
    L.vb = at::zeros_like(L.mse);
    L.loss = L.mse;
  }
  return L;
}

}  // namespace nala::diffusion
