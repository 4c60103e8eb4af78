#include "metrics/inception_score.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>

namespace nala::metrics {

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

}  // namespace nala::metrics
