#include "metrics/statistics.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

namespace nala::metrics {

RunningStats::RunningStats(int64_t dim) : dim_(dim) {
  sum_ = at::zeros({dim}, at::kDouble);
  outer_ = at::zeros({dim, dim}, at::kDouble);
}

void RunningStats::add(const at::Tensor& f_in) {
  TORCH_CHECK(f_in.dim() == 2 && f_in.size(1) == dim_, "features must be (N, ", dim_, "), got ", f_in.sizes());
  at::Tensor f = f_in.to(at::kCPU, at::kDouble);
  if (!at::isfinite(f).all().item<bool>()) throw std::runtime_error("features contain NaN or inf (a broken image batch or network weights?)");
  if (!shift_.defined()) shift_ = f.mean(0);
  at::Tensor c = f - shift_;        // (N, D)
  sum_ += c.sum(0);
  outer_ += c.t().mm(c);            // (D, D)
  n_ += f.size(0);
}

at::Tensor RunningStats::mean() const {
  TORCH_CHECK(n_ > 0, "no features accumulated");
  return sum_ / double(n_) + shift_;
}

at::Tensor RunningStats::covariance() const {
  if (n_ < 2) throw std::runtime_error("a covariance needs at least 2 samples, got " + std::to_string(n_));
  at::Tensor m = sum_ / double(n_);  // of the shifted data
  return (outer_ - double(n_) * at::outer(m, m)) / double(n_ - 1);
}

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

double inception_score(const at::Tensor& logits, int64_t split) {
  TORCH_CHECK(logits.dim() == 2 && logits.size(0) > 0, "inception_score: logits must be (N, K), got ", logits.sizes());
  // in log space (float64), so that probabilities that underflow contribute 0 instead of NaN/inf
  at::Tensor logp = at::log_softmax(logits.to(at::kDouble), 1);  // (N, K)
  double total = 0;
  int64_t chunks = 0;
  for (int64_t i = 0; i < logp.size(0); i += split) {
    at::Tensor lp = logp.narrow(0, i, std::min(split, logp.size(0) - i));
    at::Tensor log_marg = at::logsumexp(lp, 0, true) - std::log(double(lp.size(0)));  // log mean_i p_i
    at::Tensor kl = (at::exp(lp) * (lp - log_marg)).sum(1).mean();
    total += std::exp(kl.item<double>());
    ++chunks;
  }
  return total / double(chunks);
}

namespace {
// squared distances ‖u‖² − 2 u·v + ‖v‖², clamped at 0 (evaluator.py:414-430), float32
at::Tensor sq_dist(const at::Tensor& u, const at::Tensor& v) {
  at::Tensor nu = u.pow(2).sum(1, true), nv = v.pow(2).sum(1, true);
  return (nu - 2 * u.mm(v.t()) + nv.t()).clamp_min(0);
}
}  // namespace

at::Tensor manifold_radii(const at::Tensor& f, int64_t k, int64_t block) {
  TORCH_CHECK(f.size(0) > k, "precision/recall needs more than k = ", k, " points, got ", f.size(0));
  at::Tensor x = f.to(at::kFloat);
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < x.size(0); i += block) {
    at::Tensor d = sq_dist(x.narrow(0, i, std::min(block, x.size(0) - i)), x);  // (b, N)
    out.push_back(std::get<0>(d.kthvalue(k + 1, 1)));                            // k-th neighbour, self included
  }
  return at::cat(out);
}

PrecisionRecall precision_recall(const at::Tensor& ref_in, const at::Tensor& sam_in, int64_t k, int64_t block) {
  at::Tensor ref = ref_in.to(at::kFloat), sam = sam_in.to(sam_in.device(), at::kFloat).to(ref.device());
  if (ref.size(1) != sam.size(1)) throw std::runtime_error("precision/recall: feature sizes differ");
  at::Tensor r_ref = manifold_radii(ref, k, block), r_sam = manifold_radii(sam, k, block);
  int64_t in_ref = 0, in_sam = 0;
  for (int64_t i = 0; i < sam.size(0); i += block) {  // precision: a sample inside some reference ball
    at::Tensor d = sq_dist(sam.narrow(0, i, std::min(block, sam.size(0) - i)), ref);  // (b, Nr)
    in_ref += (d <= r_ref.unsqueeze(0)).any(1).sum().item<int64_t>();
  }
  for (int64_t i = 0; i < ref.size(0); i += block) {  // recall: a reference inside some sample ball
    at::Tensor d = sq_dist(ref.narrow(0, i, std::min(block, ref.size(0) - i)), sam);  // (b, Ns)
    in_sam += (d <= r_sam.unsqueeze(0)).any(1).sum().item<int64_t>();
  }
  return {double(in_ref) / double(sam.size(0)), double(in_sam) / double(ref.size(0))};
}

}  // namespace nala::metrics
