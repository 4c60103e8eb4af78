#include "ops/mlp.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include "ops/block_ops.h"
#include "ops/fused_ops.h"
#include "ops/weight_casts.h"
#include "ops/linear.h"
#include "ops/linear_fp8.h"
#include "ops/linear_gelu.h"

#ifdef NALA_WITH_CUDA
#include "ops/cuda/gemm_epilogue.h"
#endif

namespace nala::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

bool epilogue_gemms(const at::Tensor& x2, const at::Tensor& w1, const at::Tensor& w2) {
#ifdef NALA_WITH_CUDA
  return cuda::gemm_epilogue_supported(x2, w1) && cuda::gemm_epilogue_supported(w2, w2) && w2.scalar_type() == w1.scalar_type();
#else
  return false;
#endif
}

// h, a = GELU_tanh(x2 w1ᵀ + b1), x2 w1ᵀ + b1: (R, H) ×2
std::array<at::Tensor, 2> fc1_forward(const at::Tensor& x2, const at::Tensor& w1, const at::Tensor& b1, bool lt) {
#ifdef NALA_WITH_CUDA
  if (lt) return cuda::gemm_bias_gelu_aux(x2, w1, b1, gemm_tuned_training());
#endif
  const at::Tensor a = at::linear(x2, w1, bias_operand(b1, x2.scalar_type()));  // (R, H)
  return {at::gelu(a, "tanh"), a};
}

// dy = GELU_tanh'(a) ⊙ (g w2): (R, H), and with want_bias and NALA_GEMM_BGRAD=1 fc1's bias gradient Σ_rows dy
// (H, float32) from the same GEMM's epilogue (DGELU_BGRAD), else undefined (the caller sums dy)
std::array<at::Tensor, 2> fc1_pre_activation_grads(const at::Tensor& g, const at::Tensor& w2, const at::Tensor& a, bool lt, bool want_bias) {
#ifdef NALA_WITH_CUDA
  if (lt && want_bias && gemm_bias_grads())
    if (auto dy_db = cuda::gemm_dgelu_bgrad(g, w2, a, gemm_tuned_training()); dy_db[0].defined()) return dy_db;  // (R, H), (H)
  if (lt) return {cuda::gemm_dgelu(g, w2, a, gemm_tuned_training()), at::Tensor()};
#endif
  (void)want_bias;
  return {at::gelu_backward(g.mm(w2), a, "tanh"), at::Tensor()};  // (R, H)
}

struct MlpFn : torch::autograd::Function<MlpFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2,
                            const at::Tensor& b2) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // dtypes are settled
    const int64_t D = w1.size(1);
    const at::Tensor x2 = x.reshape({-1, D}).contiguous();                                // (R, D)
    const bool lt = x2.size(0) > 0 && epilogue_gemms(x2, w1, w2);
    const auto [h, a] = fc1_forward(x2, w1, b1, lt);                                       // (R, H) ×2
    const at::Tensor out = linear_forward(h, w2, b2);                                      // (R, D)
    ctx->save_for_backward({x2, w1, w2, a, h});
    ctx->saved_data["lt"] = lt;
    ctx->saved_data["b1_dtype"] = int64_t(b1.scalar_type());
    ctx->saved_data["b2_dtype"] = int64_t(b2.scalar_type());
    ctx->saved_data["x_shape"] = x.sizes().vec();
    return out.view(x.sizes());  // (…, D)
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x2 = saved[0], &w1 = saved[1], &w2 = saved[2], &a = saved[3], &h = saved[4];
    const at::Tensor g = grads[0].reshape({-1, w2.size(0)}).to(h.scalar_type()).contiguous();  // (R, D)
    // fc2: its input gradient comes fused with dGELU below, so only its weight and bias here
    const LinearGrads fc2 = linear_grads(g, h, w2, at::ScalarType(ctx->saved_data["b2_dtype"].toInt()), false, ctx->needs_input_grad(3),
                                         ctx->needs_input_grad(4));  // (D, H), (D)
    LinearGrads fc1;
    if (ctx->needs_input_grad(0) || ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {
      const at::ScalarType b1_dtype = at::ScalarType(ctx->saved_data["b1_dtype"].toInt());
      const auto [dy, db1] = fc1_pre_activation_grads(g, w2, a, ctx->saved_data["lt"].toBool(), ctx->needs_input_grad(2));  // (R, H), (H)
      fc1 = linear_grads(dy, x2, w1, b1_dtype, ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                         ctx->needs_input_grad(2) && !db1.defined());  // (R, D), (H, D), (H)
      if (db1.defined()) fc1.b = db1.to(b1_dtype);                      // (H)
    }
    const at::Tensor dx = fc1.x.defined() ? fc1.x.view(ctx->saved_data["x_shape"].toIntVector()) : fc1.x;  // (…, D)
    return {dx, fc1.w, fc1.b, fc2.w, fc2.b};
  }
};

bool wants_grad(const at::Tensor& x, const torch::nn::LinearImpl& fc1, const torch::nn::LinearImpl& fc2) {
  return at::GradMode::is_enabled() &&
         (x.requires_grad() || fc1.weight.requires_grad() || fc1.bias.requires_grad() || fc2.weight.requires_grad() || fc2.bias.requires_grad());
}

}  // namespace

at::Tensor mlp_op(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2, const at::Tensor& b2) {
  TORCH_CHECK(w1.dim() == 2 && w2.dim() == 2 && x.dim() >= 1 && x.size(-1) == w1.size(1) && w2.size(1) == w1.size(0) &&
                  w2.size(0) == w1.size(1) && b1.dim() == 1 && b1.size(0) == w1.size(0) && b2.dim() == 1 && b2.size(0) == w2.size(0),
              "mlp_op: input ", x.sizes(), ", fc1 ", w1.sizes(), " + ", b1.sizes(), " and fc2 ", w2.sizes(), " + ", b2.sizes(), " do not fit");
  const at::Tensor xc = autocast_gemm_operand(x);                                     // (…, D)
  const at::Tensor w1c = autocast_gemm_operand(w1), w2c = autocast_gemm_operand(w2);  // (H, D), (D, H)
  TORCH_CHECK(xc.scalar_type() == w1c.scalar_type() && w1c.scalar_type() == w2c.scalar_type(), "mlp_op: input ", xc.scalar_type(),
              " and weights ", w1c.scalar_type(), ", ", w2c.scalar_type(), " differ");
  return MlpFn::apply(xc, w1c, b1, w2c, b2);
}

at::Tensor mlp(const torch::nn::LinearImpl& fc1, const torch::nn::LinearImpl& fc2, const at::Tensor& x) {
  if (x.is_cuda() && fused_block_ops() && gemm_epilogues() && wants_grad(x, fc1, fc2))
    return mlp_op(x, fc1.weight, fc1.bias, fc2.weight, fc2.bias);  // (…, D)
  if (x.is_cuda() && fused_block_ops() && fp8_mlp_fused() && !wants_grad(x, fc1, fc2) && fc1.bias.defined() && fc2.bias.defined())
    if (const Fp8Rows* q1 = fp8_weight(fc1.weight))
      if (const Fp8Rows* q2 = fp8_weight(fc2.weight)) return mlp_fp8(x, *q1, fc1.bias, *q2, fc2.bias);  // (…, D)
  return linear(fc2, linear_gelu(fc1, x));                           // (…, D)
}

at::Tensor mlp(const torch::nn::LinearImpl& fc1, const torch::nn::LinearImpl& fc2, const Fp8Input& x) {
  const Fp8Rows* q1 = fp8_weight(fc1.weight);
  TORCH_CHECK(q1 && fc1.bias.defined(), "mlp: an FP8 input needs fc1 registered for FP8 with a bias (weight ", fc1.weight.sizes(), ")");
  const bool cuda = x.rows.q.is_cuda();
  // as mlp() above and linear_gelu (ops/linear_gelu.cpp) choose for the tensor, with fc1's GEMM on the rows
  if (cuda && fused_block_ops() && fp8_mlp_fused() && fc2.bias.defined())
    if (const Fp8Rows* q2 = fp8_weight(fc2.weight)) return mlp_fp8(x, *q1, fc1.bias, *q2, fc2.bias);  // (…, D)
  const at::Tensor h = cuda && fused_block_ops() ? bias_gelu(linear_fp8(x, *q1, at::Tensor()), fc1.bias)  // (…, H)
                                                 : at::gelu(linear_fp8(x, *q1, fc1.bias), "tanh");       // (…, H)
  return linear(fc2, h);                                                                                   // (…, D)
}

}  // namespace nala::ops
