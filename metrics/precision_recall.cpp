#include "metrics/precision_recall.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

namespace nala::metrics {

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

PrecisionRecall precision_recall(const at::Tensor& ref_in, const at::Tensor& sam_in, int64_t k, int64_t block, const at::Tensor& ref_radii) {
  at::Tensor ref = ref_in.to(at::kFloat), sam = sam_in.to(sam_in.device(), at::kFloat).to(ref.device());
  if (ref.size(1) != sam.size(1)) throw std::runtime_error("precision/recall: feature sizes differ");
  if (ref_radii.defined() && (ref_radii.dim() != 1 || ref_radii.size(0) != ref.size(0)))
    throw std::runtime_error("precision/recall: " + std::to_string(ref_radii.numel()) + " reference radii for " + std::to_string(ref.size(0)) +
                             " references");
  at::Tensor r_ref = ref_radii.defined() ? ref_radii.to(ref.device(), at::kFloat) : manifold_radii(ref, k, block);  // (Nr,)
  at::Tensor r_sam = manifold_radii(sam, k, block);                                                                // (Ns,)
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
