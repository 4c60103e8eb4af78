// `nala eval` as a library: Inception features streamed out of sample / reference .npz batches,
// statistics, then FID, sFID, IS, precision and recall exactly as the ADM evaluator combines them
// (docs/reference.md §6, §8.2): the reference's precomputed mu/sigma/mu_s/sigma_s are used when present,
// IS is computed on the samples only, P/R on pool3 features of all reference and sample images.
// And the Fashion-MNIST counterparts (FD-FMNIST etc.) with nala's own classifier.
#pragma once
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace nala::metrics {

class FidInception;
class FmnistClassifier;

struct EvalOptions {
  int64_t batch = 250;
  bool allow_few_samples = false;    // fewer samples than feature dimensions is an error unless set
  bool allow_size_mismatch = false;  // different image sizes in the two batches is an error unless set
  c10::Device device = c10::Device("cpu");
  bool progress = true;
  // --fmnist only: keep the Fashion-MNIST test split's classifier features and P/R radii in this
  // safetensors file and reuse them (keyed by hashes of the classifier's weights and of the test
  // images with the sample size); empty: computed every call
  std::string fmnist_ref_cache;
};

struct InceptionMetrics {
  double fid = 0, sfid = 0, inception_score = 0, precision = 0, recall = 0;
  int64_t samples = 0, references = 0;
  bool reference_stats_from_file = false;
  double images_per_second = 0;
};

InceptionMetrics evaluate_inception(FidInception& net, const std::string& ref_npz, const std::string& sample_npz, const EvalOptions& o);

// Writes a reference batch in ADM's layout: arr_0 (copied) plus mu, sigma, mu_s, sigma_s.
void save_reference_stats(FidInception& net, const std::string& in_npz, const std::string& out_npz, const EvalOptions& o);

struct FmnistMetrics {
  double fd = 0, precision = 0, recall = 0, class_is = 0, class_accuracy = -1;  // accuracy: -1 without labels
  int64_t samples = 0, references = 0;
};
// Samples (arr_0 uint8 (N, 32, 32, C), arr_1 labels optional) against the Fashion-MNIST test split.
FmnistMetrics evaluate_fmnist(FmnistClassifier& net, const std::string& sample_npz, const std::string& fmnist_dir, const EvalOptions& o);

}  // namespace nala::metrics
