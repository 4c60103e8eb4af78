// Improved precision and recall of sample features against reference features.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace nala::metrics {

// Improved precision/recall (Kynkäänniemi et al. 2019) as ADM computes it (evaluator.py:212-391):
// squared L2 distances, radius = the k-th nearest neighbour counting self (k = 3: the 4th smallest),
// membership with <=. Precision: samples inside some reference ball; recall: references inside
// some sample ball. Features (N, D); computed in blocks of `block` rows.
struct PrecisionRecall {
  double precision, recall;
};
// ref_radii: the references' radii (manifold_radii(ref, k, block)) when already known, else computed.
PrecisionRecall precision_recall(const at::Tensor& ref, const at::Tensor& samples, int64_t k = 3, int64_t block = 10000,
                                 const at::Tensor& ref_radii = {});
at::Tensor manifold_radii(const at::Tensor& feats, int64_t k, int64_t block);  // (N,) float32

}  // namespace nala::metrics
