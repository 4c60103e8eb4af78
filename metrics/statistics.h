// Feature statistics accumulated in float64 (mean, unbiased covariance as np.cov), streamed batch
// by batch, and the distances computed from them: "statistics, then a pure distance function".
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

// Fréchet distance ‖μ1 − μ2‖² + tr Σ1 + tr Σ2 − 2 tr √(Σ1 Σ2) (Heusel et al. 2017, eq. 6), with
// tr √(Σ1Σ2) = Σ √λ_i(A Σ2 A), A = Σ1^½ by symmetric eigendecompositions in float64 (negative
// eigenvalues clamped to 0). If the result is not finite, ε = 1e-6 is added to both diagonals,
// as ADM's evaluator does (evaluator.py:96-104).
double frechet_distance(const at::Tensor& mu1, const at::Tensor& sigma1, const at::Tensor& mu2, const at::Tensor& sigma2);

// ADM's Inception Score (evaluator.py:179-192): softmax of the logits, contiguous chunks of
// `split`, exp(mean KL(p ‖ mean p)) per chunk, the mean over chunks. logits (N, K).
double inception_score(const at::Tensor& logits, int64_t split = 5000);

// Improved precision/recall (Kynkäänniemi et al. 2019) as ADM computes it (evaluator.py:212-391):
// squared L2 distances, radius = the k-th nearest neighbour counting self (k = 3: the 4th smallest),
// membership with <=. Precision: samples inside some reference ball; recall: references inside
// some sample ball. Features (N, D); computed in blocks of `block` rows.
struct PrecisionRecall {
  double precision, recall;
};
PrecisionRecall precision_recall(const at::Tensor& ref, const at::Tensor& samples, int64_t k = 3, int64_t block = 10000);
at::Tensor manifold_radii(const at::Tensor& feats, int64_t k, int64_t block);  // (N,) float32

}  // namespace nala::metrics
