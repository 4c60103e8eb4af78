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

}  // namespace nala::metrics
