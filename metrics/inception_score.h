// Inception Score of classifier logits.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace nala::metrics {

// ADM's Inception Score (evaluator.py:179-192): softmax of the logits, contiguous chunks of
// `split`, exp(mean KL(p ‖ mean p)) per chunk, the mean over chunks. logits (N, K).
double inception_score(const at::Tensor& logits, int64_t split = 5000);

}  // namespace nala::metrics
