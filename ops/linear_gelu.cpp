#include "ops/linear_gelu.h"

#include <ATen/ATen.h>

#include "ops/block_ops.h"
#include "ops/fused_ops.h"
#include "ops/linear.h"
#include "ops/linear_fp8.h"

namespace nala::ops {

at::Tensor linear_gelu(const torch::nn::LinearImpl& fc1, const at::Tensor& x) {
  TORCH_CHECK(fc1.bias.defined(), "linear_gelu: fc1 needs a bias (weight ", fc1.weight.sizes(), ")");
  if (!x.is_cuda() || !fused_block_ops()) return at::gelu(linear(fc1, x), "tanh");  // (…, hidden)
  const at::Tensor &w = fc1.weight, &b = fc1.bias;
  const bool grad = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() || b.requires_grad());
  if (!grad && !fp8_weight(w))
    if (at::Tensor h = tuned_linear(x, w, b, /*gelu=*/true); h.defined()) return h;  // (…, hidden)
  if (!grad && !fp8_weight(w) && x.scalar_type() == w.scalar_type() && b.scalar_type() == w.scalar_type()) {
    const at::Tensor h = at::_addmm_activation(b, x.reshape({-1, x.size(-1)}), w.t(), 1, 1, /*use_gelu=*/true);  // (R, hidden)
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = h.size(1);
    return h.view(shape);  // (…, hidden)
  }
  return bias_gelu(linear_without_bias(fc1, x), b);  // (…, hidden)
}

}  // namespace nala::ops
