#include "attention/feature_maps.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

namespace nala::attention {

FeatureMap parse_feature_map(const std::string& name) {
  if (name == "nala") return FeatureMap::Nala;
  if (name == "nala-relu") return FeatureMap::NalaRelu;
  if (name == "elu") return FeatureMap::Elu;
  if (name == "relu") return FeatureMap::Relu;
  if (name == "focused") return FeatureMap::Focused;
  throw std::runtime_error("unknown feature map '" + name + "' (known: nala, nala-relu, elu, relu, focused)");
}

std::string feature_map_name(FeatureMap f) {
  switch (f) {
    case FeatureMap::Nala: return "nala";
    case FeatureMap::NalaRelu: return "nala-relu";
    case FeatureMap::Elu: return "elu";
    case FeatureMap::Relu: return "relu";
    case FeatureMap::Focused: return "focused";
  }
  return "?";
}

namespace {

// |x|^p with the value (and gradient) 0 where x == 0: torch.pow's gradient at 0 with p ≥ 1 is
// already 0, and where(x == 0) keeps it finite for the p-gradient's log|x| term.
at::Tensor abs_pow(const at::Tensor& x, const at::Tensor& p) {
  at::Tensor ax = x.abs();
  at::Tensor zero = ax == 0;
  at::Tensor safe = at::where(zero, at::ones_like(ax), ax);
  return at::where(zero, at::zeros_like(ax), safe.pow(p));
}

// fp32 inside for every input dtype, except float64 stays float64 (for gradcheck).
at::ScalarType compute_dtype(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

at::Tensor unit(const at::Tensor& x, double eps_norm) {
  return x / x.norm(2, -1, true).clamp_min(eps_norm);  // x̂ = x / max(‖x‖, ε_n)
}

// φ for the baselines, shared by queries and keys.
at::Tensor phi_baseline(const at::Tensor& x, const NalaOptions& opt) {
  switch (opt.feature_map) {
    case FeatureMap::Elu: return at::elu(x) + 1.0;
    case FeatureMap::Relu: return at::relu(x);
    case FeatureMap::Focused: {
      // FLatten (Han et al. 2023, eq. 6): f_p(x) = ‖x‖/‖x^p‖ · x^p on relu(x)
      at::Tensor r = at::relu(x);
      at::Tensor rp = r.pow(opt.focus_power);
      return rp * (r.norm(2, -1, true) / rp.norm(2, -1, true).clamp_min(1e-12));
    }
    default: throw std::logic_error("phi_baseline on a nala variant");
  }
}

}  // namespace

at::Tensor phi_query_reference(const at::Tensor& q_in, const NalaOptions& opt) {
  at::Tensor q = q_in.to(compute_dtype(q_in));  // (..., d)
  if (opt.feature_map != FeatureMap::Nala && opt.feature_map != FeatureMap::NalaRelu) return phi_baseline(q, opt);
  at::Tensor n = q.norm(2, -1, true);                                   // (..., 1)
  at::Tensor qh = q / n.clamp_min(opt.eps_norm);                         // (..., d)
  at::Tensor p = opt.lambda * (opt.tau + at::tanh(n));                   // (..., 1)  p(n) = λ(τ + tanh n)
  if (opt.feature_map == FeatureMap::NalaRelu)
    return at::cat({abs_pow(at::relu(qh), p), abs_pow(at::relu(-qh), p)}, -1);  // (..., 2d)
  at::Tensor theta = (M_PI / 4) * at::tanh(opt.alpha * qh);             // (..., d)
  at::Tensor a = abs_pow(qh, p);                                         // (..., d)
  return at::cat({a * at::cos(theta), a * at::sin(theta)}, -1);         // (..., 2d)
}

at::Tensor phi_key_reference(const at::Tensor& k_in, const NalaOptions& opt) {
  at::Tensor k = k_in.to(compute_dtype(k_in));  // (..., d)
  if (opt.feature_map != FeatureMap::Nala && opt.feature_map != FeatureMap::NalaRelu) return phi_baseline(k, opt);
  at::Tensor lam = at::full({}, opt.lambda, k.options());
  if (opt.feature_map == FeatureMap::NalaRelu)
    return at::cat({abs_pow(at::relu(k), lam), abs_pow(at::relu(-k), lam)}, -1);  // (..., 2d)
  at::Tensor theta = (M_PI / 4) * at::tanh(opt.alpha * unit(k, opt.eps_norm));    // (..., d)
  at::Tensor a = abs_pow(k, lam);                                                  // (..., d)  |k_j|^λ keeps the magnitude
  return at::cat({a * at::cos(theta), a * at::sin(theta)}, -1);                   // (..., 2d)
}

}  // namespace nala::attention
