#include "metrics/frechet_distance.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

namespace nala::metrics {

namespace {

at::Tensor sqrtm_psd(const at::Tensor& s) {
  auto [w, v] = at::linalg_eigh(s);
  return (v * at::sqrt(w.clamp_min(0)).unsqueeze(0)).mm(v.t());
}

double trace_sqrt_product(const at::Tensor& s1, const at::Tensor& s2) {
  at::Tensor a = sqrtm_psd(s1);
  at::Tensor m = a.mm(s2).mm(a);
  m = (m + m.t()) / 2;  // symmetric up to rounding
  at::Tensor w = at::linalg_eigvalsh(m);
  return at::sqrt(w.clamp_min(0)).sum().item<double>();
}

}  // namespace

double frechet_distance(const at::Tensor& mu1_, const at::Tensor& s1_, const at::Tensor& mu2_, const at::Tensor& s2_) {
  at::Tensor mu1 = mu1_.to(at::kDouble), mu2 = mu2_.to(at::kDouble), s1 = s1_.to(at::kDouble), s2 = s2_.to(at::kDouble);
  if (mu1.sizes() != mu2.sizes() || s1.sizes() != s2.sizes() || s1.size(0) != mu1.size(0))
    throw std::runtime_error("Fréchet distance: statistics of different sizes (" + c10::str(mu1.sizes()) + " vs " + c10::str(mu2.sizes()) + ")");
  const double diff = (mu1 - mu2).pow(2).sum().item<double>();
  double tr = trace_sqrt_product(s1, s2);
  if (!std::isfinite(tr)) {
    at::Tensor off = at::eye(s1.size(0), s1.options()) * 1e-6;
    tr = trace_sqrt_product(s1 + off, s2 + off);
  }
  return diff + s1.trace().item<double>() + s2.trace().item<double>() - 2 * tr;
}

}  // namespace nala::metrics
