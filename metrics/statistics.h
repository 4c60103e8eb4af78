// Feature statistics accumulated in float64 (mean, unbiased covariance as np.cov), streamed batch
// by batch: "statistics, then a pure distance function" (frechet_distance.h).
#pragma once
#include <ATen/core/Tensor.h>

namespace nala::metrics {

class RunningStats {
 public:
  explicit RunningStats(int64_t dim);
  void add(const at::Tensor& features);  // (N, dim), any float dtype; NaN/inf is an error
  int64_t count() const { return n_; }
  at::Tensor mean() const;               // (dim,) float64
  at::Tensor covariance() const;         // (dim, dim) float64, divided by n − 1

 private:
  int64_t dim_, n_ = 0;
  at::Tensor sum_, outer_;  // Σx and Σxxᵀ, float64
  at::Tensor shift_;        // the first batch's mean, subtracted before accumulating (stability)
};

}  // namespace nala::metrics
