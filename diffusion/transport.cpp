#include "diffusion/transport.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

namespace nala::diffusion {

PathType parse_path_type(const std::string& s) {
  if (s == "Linear" || s == "linear") return PathType::Linear;
  if (s == "GVP" || s == "gvp") return PathType::GVP;
  if (s == "VP" || s == "vp") return PathType::VP;
  throw std::runtime_error("unknown path type '" + s + "' (known: Linear, GVP, VP)");
}
Prediction parse_prediction(const std::string& s) {
  if (s == "velocity") return Prediction::Velocity;
  if (s == "noise") return Prediction::Noise;
  if (s == "score") return Prediction::Score;
  throw std::runtime_error("unknown prediction '" + s + "' (known: velocity, noise, score)");
}
LossWeight parse_loss_weight(const std::string& s) {
  if (s == "none" || s == "None") return LossWeight::None;
  if (s == "velocity") return LossWeight::Velocity;
  if (s == "likelihood") return LossWeight::Likelihood;
  throw std::runtime_error("unknown loss weight '" + s + "' (known: none, velocity, likelihood)");
}

DiffusionForm parse_diffusion_form(const std::string& s) {
  if (s == "constant") return DiffusionForm::Constant;
  if (s == "SBDM") return DiffusionForm::SBDM;
  if (s == "sigma") return DiffusionForm::Sigma;
  if (s == "linear") return DiffusionForm::Linear;
  if (s == "decreasing") return DiffusionForm::Decreasing;
  if (s == "increasing-decreasing") return DiffusionForm::IncreasingDecreasing;
  throw std::runtime_error("unknown diffusion form '" + s + "' (known: constant, SBDM, sigma, linear, decreasing, increasing-decreasing)");
}

namespace {
constexpr double kSigmaMin = 0.1, kSigmaMax = 20.0;  // VP (path.py VPCPlan)
at::Tensor expand_like(const at::Tensor& t, const at::Tensor& x) {
  std::vector<int64_t> shape(size_t(x.dim()), 1);
  shape[0] = t.size(0);
  return t.to(x.device(), at::kDouble).view(shape);  // float64 math, cast at the end
}
}  // namespace

Transport::Transport(TransportConfig cfg) : cfg_(cfg) {
  // transport/__init__.py:44-54, with the bug fixed: an explicit value is always kept, except that
  // velocity prediction on Linear/GVP forces both to 0.
  double tr = 0, sa = 0;
  if (cfg.path == PathType::VP) {
    tr = 1e-5;
    sa = 1e-3;
  } else if (cfg.prediction != Prediction::Velocity) {
    tr = 1e-3;
    sa = 1e-3;
  }
  train_eps_ = cfg.train_eps >= 0 ? cfg.train_eps : tr;
  sample_eps_ = cfg.sample_eps >= 0 ? cfg.sample_eps : sa;
  if (cfg.path != PathType::VP && cfg.prediction == Prediction::Velocity) train_eps_ = sample_eps_ = 0;
}

Transport::Coeffs Transport::coeffs(const at::Tensor& t_in, const at::Tensor& like) const {
  at::Tensor t = expand_like(t_in, like);
  Coeffs c;
  switch (cfg_.path) {
    case PathType::Linear:
      c.alpha = t;
      c.d_alpha = at::ones_like(t);
      c.sigma = 1 - t;
      c.d_sigma = -at::ones_like(t);
      break;
    case PathType::GVP:
      c.alpha = at::sin(t * M_PI / 2);
      c.d_alpha = (M_PI / 2) * at::cos(t * M_PI / 2);
      c.sigma = at::cos(t * M_PI / 2);
      c.d_sigma = -(M_PI / 2) * at::sin(t * M_PI / 2);
      break;
    case PathType::VP: {
      at::Tensor lmc = -0.25 * (1 - t).pow(2) * (kSigmaMax - kSigmaMin) - 0.5 * (1 - t) * kSigmaMin;
      at::Tensor dlmc = 0.5 * (1 - t) * (kSigmaMax - kSigmaMin) + 0.5 * kSigmaMin;
      c.alpha = at::exp(lmc);
      c.d_alpha = c.alpha * dlmc;
      c.sigma = at::sqrt(1 - at::exp(2 * lmc));
      c.d_sigma = at::exp(2 * lmc) * (2 * dlmc) / (-2 * c.sigma);
      break;
    }
  }
  const auto dt = like.scalar_type();
  c.alpha = c.alpha.to(dt);
  c.d_alpha = c.d_alpha.to(dt);
  c.sigma = c.sigma.to(dt);
  c.d_sigma = c.d_sigma.to(dt);
  return c;
}

std::pair<at::Tensor, at::Tensor> Transport::drift_parts(const at::Tensor& x, const at::Tensor& t) const {
  if (cfg_.path == PathType::VP) {
    at::Tensor beta = (kSigmaMin + (1 - expand_like(t, x)) * (kSigmaMax - kSigmaMin)).to(x.scalar_type());
    return {-0.5 * beta * x, beta / 2};
  }
  Coeffs c = coeffs(t, x);
  at::Tensor ratio = c.d_alpha / c.alpha;  // α̇/α
  return {-ratio * x, ratio * c.sigma * c.sigma - c.sigma * c.d_sigma};
}

at::Tensor Transport::diffusion_coefficient(DiffusionForm form, double norm, const at::Tensor& x, const at::Tensor& t) const {
  at::Tensor te = expand_like(t, x).to(x.scalar_type());
  switch (form) {
    case DiffusionForm::Constant: return at::full_like(te, norm);
    case DiffusionForm::SBDM: return norm * drift_parts(x, t).second;
    case DiffusionForm::Sigma: return norm * coeffs(t, x).sigma;
    case DiffusionForm::Linear: return norm * (1 - te);
    case DiffusionForm::Decreasing: return 0.25 * (norm * at::cos(M_PI * te) + 1).pow(2);
    case DiffusionForm::IncreasingDecreasing: return norm * at::sin(M_PI * te).pow(2);
  }
  throw std::logic_error("diffusion_coefficient: invalid DiffusionForm");
}

at::Tensor Transport::score_from_velocity(const at::Tensor& v, const at::Tensor& x, const at::Tensor& t) const {
  Coeffs c = coeffs(t, x);
  at::Tensor r = c.alpha / c.d_alpha;                   // α/α̇ (path.py:70-84)
  at::Tensor var = c.sigma * c.sigma - r * c.d_sigma * c.sigma;
  return (r * v - x) / var;
}

at::Tensor Transport::noise_from_velocity(const at::Tensor& v, const at::Tensor& x, const at::Tensor& t) const {
  Coeffs c = coeffs(t, x);
  at::Tensor r = c.alpha / c.d_alpha;                   // path.py:86-100
  at::Tensor var = r * c.d_sigma - c.sigma;
  return (r * v - x) / var;
}

at::Tensor Transport::velocity_from_score(const at::Tensor& s, const at::Tensor& x, const at::Tensor& t) const {
  auto [mean, var] = drift_parts(x, t);                 // path.py:102-112: v = var·s − drift
  return var * s - mean;
}

at::Tensor Transport::velocity(const at::Tensor& out, const at::Tensor& x, const at::Tensor& t) const {
  switch (cfg_.prediction) {
    case Prediction::Velocity: return out;
    case Prediction::Score: return velocity_from_score(out, x, t);
    case Prediction::Noise: return velocity_from_score(out / -coeffs(t, x).sigma, x, t);
  }
  return out;
}

at::Tensor Transport::score(const at::Tensor& out, const at::Tensor& x, const at::Tensor& t) const {
  switch (cfg_.prediction) {
    case Prediction::Velocity: return score_from_velocity(out, x, t);
    case Prediction::Score: return out;
    case Prediction::Noise: return out / -coeffs(t, x).sigma;
  }
  return out;
}

std::pair<double, double> Transport::interval(bool sampling, bool sde, DiffusionForm form, double last_step_size) const {
  double t0 = 0, t1 = 1;
  const double eps = sampling ? sample_eps_ : train_eps_;
  if (cfg_.path == PathType::VP) {
    t1 = (sde && last_step_size > 0) ? 1 - last_step_size : 1 - eps;
  } else if (cfg_.prediction != Prediction::Velocity || sde) {
    t0 = ((form == DiffusionForm::SBDM && sde) || cfg_.prediction != Prediction::Velocity) ? eps : 0;
    t1 = (sde && last_step_size > 0) ? 1 - last_step_size : 1 - eps;
  }
  return {t0, t1};
}

Transport::Sample Transport::sample_path(const at::Tensor& x1, const at::Tensor& t_uniform, const at::Tensor& x0) const {
  auto [t0, t1] = interval(false, false);
  Sample s;
  s.t = t_uniform.to(x1.device(), x1.scalar_type()) * (t1 - t0) + t0;  // (N,)
  s.x0 = x0;
  Coeffs c = coeffs(s.t, x1);
  s.xt = c.alpha * x1 + c.sigma * x0;
  s.ut = c.d_alpha * x1 + c.d_sigma * x0;
  return s;
}

at::Tensor Transport::training_loss(const ModelFn& model, const at::Tensor& x1, const at::Tensor& t_uniform, const at::Tensor& x0) const {
  Sample s = sample_path(x1, t_uniform, x0);
  at::Tensor out = model(s.xt, s.t).to(at::kFloat);
  auto mean_flat = [](const at::Tensor& a) { return a.flatten(1).mean(1); };
  if (cfg_.prediction == Prediction::Velocity) return mean_flat((out - s.ut.to(at::kFloat)).pow(2));
  auto [drift_mean, drift_var] = drift_parts(s.xt, s.t);
  at::Tensor sigma = coeffs(s.t, s.xt).sigma;
  at::Tensor w = at::ones_like(sigma);
  if (cfg_.loss_weight == LossWeight::Velocity) w = (drift_var / sigma).pow(2);
  else if (cfg_.loss_weight == LossWeight::Likelihood) w = drift_var / sigma.pow(2);
  w = w.to(at::kFloat);
  if (cfg_.prediction == Prediction::Noise) return mean_flat(w * (out - x0.to(at::kFloat)).pow(2));
  return mean_flat(w * (out * sigma.to(at::kFloat) + x0.to(at::kFloat)).pow(2));  // score
}

}  // namespace nala::diffusion
