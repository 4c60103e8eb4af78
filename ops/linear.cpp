#include "ops/linear.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include "ops/fused_ops.h"
#include "ops/weight_casts.h"
#include "ops/linear_fp8.h"
#include "ops/offered_sums.h"

#ifdef NALA_WITH_CUDA
#include "ops/cuda/column_sum.h"
#include "ops/cuda/gemm_epilogue.h"
#endif

namespace nala::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// x (…, in) and w (out, in) of one dtype (autocast's casts happen before, where autograd sees
// them); b (out) in its own dtype, cast inside; its gradient is returned in b's dtype.
struct LinearFn : torch::autograd::Function<LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // dtypes are settled
    ctx->save_for_backward({x, w});
    ctx->saved_data["b_dtype"] = int64_t(b.scalar_type());
    return linear_training_forward(x, w, b);  // (…, out)
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const int64_t out = w.size(0), in = w.size(1);
    const at::Tensor g2 = grads[0].reshape({-1, out}).contiguous();  // (R, out)
    const LinearGrads d = linear_grads(g2, x.reshape({-1, in}), w, at::ScalarType(ctx->saved_data["b_dtype"].toInt()),
                                       ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2));
    return {d.x.defined() ? d.x.view(x.sizes()) : d.x, d.w, d.b};  // (…, in), (out, in), (out)
  }
};

}  // namespace

namespace {
bool wants_grad(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad()));
}
}  // namespace

at::Tensor column_sum(const at::Tensor& g2) {
#ifdef NALA_WITH_CUDA
  if (cuda::column_sum_supported(g2)) return cuda::column_sum(g2);
#endif
  return g2.sum(0, false, g2.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);  // (C)
}

at::Tensor linear_training_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (gemm_tuned_training() && x.dim() >= 2 && x.is_contiguous()) {  // the timed algorithm (linear_forward)
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    return linear_forward(x.view({-1, x.size(-1)}), w, b).view(shape);  // (…, out)
  }
  return at::linear(x, w, bias_operand(b, x.scalar_type()));  // (…, out)
}

bool linear_op_applies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() && x.is_cuda() && wants_grad(x, w, b) && fused_block_ops() && x.is_contiguous();
}

at::Tensor linear_forward(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b) {
#ifdef NALA_WITH_CUDA
  if (gemm_tuned_training() && x2.is_cuda() && x2.dim() == 2 && cuda::gemm_epilogue_supported(x2, w))
    if (at::Tensor y = cuda::gemm_bias(x2, w, b, /*gelu=*/false, /*tune=*/true); y.defined()) return y;  // (R, out)
#endif
  return at::linear(x2, w, bias_operand(b, x2.scalar_type()));  // (R, out)
}

LinearGrads linear_grads(const at::Tensor& dout2, const at::Tensor& x2, const at::Tensor& w, at::ScalarType b_dtype, bool need_x, bool need_w,
                         bool need_b) {
  LinearGrads d;
#ifdef NALA_WITH_CUDA
  // NALA_GEMM_TUNE_TRAIN=1: the timed algorithms (ops/cuda/gemm_epilogue.h); undefined: ATen's below
  const bool tuned = gemm_tuned_training() && dout2.is_cuda();
  if (tuned && need_x && cuda::gemm_grads_supported(dout2, w) && dout2.size(1) == w.size(0)) d.x = cuda::gemm_dgrad(dout2, w, true);  // (R, in)
  const bool wgrad_lt = dout2.is_cuda() && need_w && cuda::gemm_grads_supported(dout2, x2) && dout2.size(0) == x2.size(0);
  // NALA_GEMM_BGRAD=1: the bias gradient from the weight gradient's epilogue (BGRADB); undefined: the column sum below
  if (wgrad_lt && need_b && gemm_bias_grads())
    if (auto [dw, db] = cuda::gemm_wgrad_bgrad(dout2, x2, tuned); dw.defined()) d.w = dw, d.b = db.to(b_dtype);  // (out, in), (out)
  if (tuned && wgrad_lt && !d.w.defined()) d.w = cuda::gemm_wgrad(dout2, x2, true);  // (out, in)
#endif
  if (need_x && !d.x.defined()) d.x = dout2.mm(w);         // (R, in)
  if (need_w && !d.w.defined()) d.w = dout2.t().mm(x2);    // (out, in)
  if (need_b && !d.b.defined()) {
    const at::Tensor offered = take_column_sums(dout2);  // (out): a backward that wrote dout2 summed it (ops/offered_sums.h)
    d.b = (offered.defined() ? offered : column_sum(dout2)).to(b_dtype);  // (out)
  }
  return d;
}

at::Tensor linear_op(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  TORCH_CHECK(b.defined(), "linear_op: needs a bias");
  TORCH_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1) && b.dim() == 1 && b.size(0) == w.size(0), "linear_op: input ", x.sizes(), ", weight ", w.sizes(),
              " and bias ", b.sizes(), " do not fit");
  const at::Tensor xc = autocast_gemm_operand(x), wc = autocast_gemm_operand(w);  // (…, in), (out, in)
  TORCH_CHECK(xc.scalar_type() == wc.scalar_type(), "linear_op: input ", xc.scalar_type(), " and weight ", wc.scalar_type(), " differ");
  return LinearFn::apply(xc, wc, b);
}

at::Tensor tuned_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool gelu) {
#ifdef NALA_WITH_CUDA
  // only where ATen's path would cast nothing (no autocast, one dtype) and the operands share x's device
  if (x.is_cuda() && b.defined() && gemm_tuned() && fused_block_ops() && x.dim() >= 2 && x.is_contiguous() && x.scalar_type() == w.scalar_type() &&
      b.scalar_type() == w.scalar_type() && w.device() == x.device() && b.device() == x.device() && !at::autocast::is_autocast_enabled(at::kCUDA)) {
    const at::Tensor x2 = x.view({-1, x.size(-1)});  // (R, in)
    if (cuda::gemm_epilogue_supported(x2, w)) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape.back() = w.size(0);
      const at::Tensor y = cuda::gemm_bias(x2, w, b, gelu, /*tune=*/true);  // (R, out), undefined: no algorithm
      if (y.defined()) return y.view(shape);                                   // (…, out)
    }
  }
#endif
  (void)x, (void)w, (void)b, (void)gelu;
  return at::Tensor();
}

at::Tensor linear(const torch::nn::LinearImpl& m, const at::Tensor& x) { return linear(x, m.weight, m.bias); }

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const bool training = wants_grad(x, w, b);
  if (!training)
    if (const Fp8Rows* q = fp8_weight(w)) return linear_fp8(x, *q, b);
  if (!training)
    if (at::Tensor y = tuned_linear(x, w, b, false); y.defined()) return y;  // (…, out)
  if (linear_op_applies(x, w, b)) return linear_op(x, w, b);
  return at::linear(x, w, b);
}

at::Tensor linear_without_bias(const torch::nn::LinearImpl& m, const at::Tensor& x) {
  if (!wants_grad(x, m.weight, at::Tensor()))
    if (const Fp8Rows* q = fp8_weight(m.weight)) return linear_fp8(x, *q, at::Tensor());
  return at::linear(x, m.weight);
}

}  // namespace nala::ops
