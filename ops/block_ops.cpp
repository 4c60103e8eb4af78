#include "ops/block_ops.h"
#include "ops/offered_sums.h"

#include <atomic>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#ifdef NALA_WITH_CUDA
#include "ops/cuda/block_cuda.h"
#endif

namespace nala::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// LayerNorm backward through the modulation. With x̂ = (x − μ)·r (r = 1/σ), y = x̂·(1 + s) + b and
// g = ∂L/∂y · (1 + s):  ∂L/∂x = r·(g − mean_D(g) − x̂·mean_D(g·x̂))  (the LayerNorm gradient of
// Ba et al. 2016 with the affine weight 1 + s), ∂L/∂s = Σ_T ∂L/∂y·x̂, ∂L/∂b = Σ_T ∂L/∂y.
tensor_list layer_norm_modulate_backward_aten(const at::Tensor& dout_in, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
                                              const at::Tensor& scale) {
  const at::ScalarType ct = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;  // compute type
  at::Tensor dout = dout_in.to(ct), xf = x.to(ct);
  at::Tensor xhat = (xf - mean.to(ct)) * rstd.to(ct);                                   // (N, T, D)
  at::Tensor g = dout * (1 + scale.to(ct).unsqueeze(1));                                // (N, T, D)
  at::Tensor dx = rstd.to(ct) * (g - g.mean(-1, true) - xhat * (g * xhat).mean(-1, true));  // (N, T, D)
  return {dx.to(x.scalar_type()), dout.sum(1), (dout * xhat).sum(1)};                  // dx, dshift (N, D), dscale (N, D)
}

// The forward and backward passes of the two operations, each the CUDA kernel where it takes the
// tensors and the ATen formulas otherwise; shared by their autograd functions and the fused one below.
// LayerNorm-modulate: {out in out_dtype, mean, rstd (N, T, 1), the statistics when stats}.
std::tuple<at::Tensor, at::Tensor, at::Tensor> ln_modulate_forward(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps,
                                                                   at::ScalarType out_dtype, bool stats) {
#ifdef NALA_WITH_CUDA
  if (cuda::layer_norm_modulate_supported(x, out_dtype)) return cuda::layer_norm_modulate_forward(x, shift, scale, eps, out_dtype, stats);
#endif
  // the plain composition's arithmetic: native_layer_norm is what at::layer_norm runs
  const int64_t D = x.size(-1);
  at::Tensor xc = x.is_cuda() ? x.to(at::kFloat) : x;  // under CUDA autocast LayerNorm runs in float32
  auto [xhat, mean, rstd] = at::native_layer_norm(xc, {D}, {}, {}, eps);                         // (N, T, D), (N, T, 1) ×2
  return {(xhat * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)).to(out_dtype), mean, rstd};  // (N, T, D)
}

// {∂L/∂x (x's dtype, plus dres where defined), ∂L/∂shift, ∂L/∂scale (N, D)}
// (sums_dtype: the type the CUDA path may give dshift and dscale in, ops/cuda/block_cuda.h; the callers convert.)
tensor_list ln_modulate_backward(const at::Tensor& dout, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& scale,
                                 const at::Tensor& dres, at::ScalarType sums_dtype) {
#ifdef NALA_WITH_CUDA
  if (cuda::layer_norm_modulate_supported(x, dout.scalar_type())) {
    auto [dx, dshift, dscale] = cuda::layer_norm_modulate_backward(dout, x, mean, rstd, scale, dres, sums_dtype);
    return {dx, dshift, dscale};
  }
#endif
  (void)sums_dtype;
  tensor_list r = layer_norm_modulate_backward_aten(dout, x, mean, rstd, scale);
  if (dres.defined()) r[0] = r[0] + dres.to(r[0].scalar_type());
  return r;
}

// x + gate·y in x's dtype
at::Tensor gated_residual_forward(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y) {
#ifdef NALA_WITH_CUDA
  if (cuda::gated_residual_supported(x, y)) return cuda::gated_residual_forward(x, gate, y);
#endif
  return x + gate.unsqueeze(1) * y;  // (N, T, D), the plain composition
}

// {∂L/∂y = dout·gate, ∂L/∂gate = Σ_T dout·y (N, D)}, in float32 (float64 for float64) or the kernels' types
std::pair<at::Tensor, at::Tensor> gated_residual_backward(const at::Tensor& dout, const at::Tensor& gate, const at::Tensor& y) {
#ifdef NALA_WITH_CUDA
  if (cuda::gated_residual_supported(dout, y)) {
    auto [dy, dgate] = cuda::gated_residual_backward(dout, gate, y, gate.scalar_type());
    return {dy, dgate};
  }
#endif
  const at::ScalarType ct = dout.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return {dout.to(ct) * gate.to(ct).unsqueeze(1), (dout.to(ct) * y.to(ct)).sum(1)};  // (N, T, D), (N, D)
}

struct LayerNormModulateFn : torch::autograd::Function<LayerNormModulateFn> {
  // outputs: the modulated x, and x itself (see layer_norm_modulate_residual)
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps,
                             int64_t out_dtype_int) {
    const auto out_dtype = at::ScalarType(out_dtype_int);
    const bool grad = x.requires_grad() || shift.requires_grad() || scale.requires_grad();
    auto [out, mean, rstd] = ln_modulate_forward(x, shift, scale, eps, out_dtype, grad);
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined (backward handles it)
    if (grad) {
      ctx->save_for_backward({x, mean, rstd, scale});
      ctx->saved_data["shift_dtype"] = int64_t(shift.scalar_type());
      ctx->saved_data["out_dtype"] = int64_t(out_dtype);
    }
    return {out, x};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &mean = saved[1], &rstd = saved[2], &scale = saved[3];
    const at::Tensor& dres = grads[1];  // the residual path's gradient (undefined where x was not used so)
    const at::Tensor dout = grads[0].defined() ? grads[0] : at::zeros_like(x, x.options().dtype(at::ScalarType(ctx->saved_data["out_dtype"].toInt())));
    const auto shift_dtype = at::ScalarType(ctx->saved_data["shift_dtype"].toInt());
    const tensor_list r = ln_modulate_backward(dout, x, mean, rstd, scale, dres, shift_dtype == scale.scalar_type() ? shift_dtype : at::kFloat);
    return {r[0], r[1].to(shift_dtype), r[2].to(scale.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

struct GatedResidualFn : torch::autograd::Function<GatedResidualFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y) {
    const at::Tensor out = gated_residual_forward(x, gate, y);  // (N, T, D)
    if (gate.requires_grad() || y.requires_grad()) ctx->save_for_backward({gate, y});
    ctx->saved_data["x_dtype"] = int64_t(x.scalar_type());
    return out;
  }

  // ∂L/∂x = ∂L/∂out, ∂L/∂y = ∂L/∂out · gate, ∂L/∂gate = Σ_T ∂L/∂out · y
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor& dout = grads[0];
    const auto x_dtype = at::ScalarType(ctx->saved_data["x_dtype"].toInt());
    const auto saved = ctx->get_saved_variables();
    if (saved.empty()) return {dout.to(x_dtype), at::Tensor(), at::Tensor()};
    const at::Tensor &gate = saved[0], &y = saved[1];
    auto [dy, dgate] = gated_residual_backward(dout, gate, y);
    return {dout.to(x_dtype), dgate.to(gate.scalar_type()), dy.to(y.scalar_type())};
  }
};

std::atomic<int64_t> residual_norm_kernel_count{0};
std::atomic<int64_t> residual_norm_backward_kernel_count{0};

// Training: gated_residual then layer_norm_modulate_residual of the sum as one operation, outputs
// {modulated, residual}. On CUDA the forward is one kernel (ops/cuda/block_cuda.h
// residual_layer_norm_modulate_training: the residual stream read once, not written and read back);
// with NALA_RESIDUAL_NORM_TRAIN_BWD=1 the backward too (residual_layer_norm_modulate_training_backward),
// else the two operations' backward passes in turn. Every result equals the two operations' bit for bit. Gradients are not
// materialized: the residual output's is undefined where nothing read it (the last block's).
struct GatedResidualLayerNormModulateFn : torch::autograd::Function<GatedResidualLayerNormModulateFn> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y, const at::Tensor& shift,
                             const at::Tensor& scale, double eps, int64_t out_dtype_int) {
    const auto out_dtype = at::ScalarType(out_dtype_int);
    at::Tensor res, out, mean, rstd;
#ifdef NALA_WITH_CUDA
    if (cuda::residual_layer_norm_modulate_training_supported(x, y, out_dtype)) {
      std::tie(res, out, mean, rstd) = cuda::residual_layer_norm_modulate_training(x, gate, y, shift, scale, eps);  // (N, T, D) ×2, (N, T, 1) ×2
      residual_norm_kernel_count.fetch_add(1, std::memory_order_relaxed);
    }
#endif
    if (!res.defined()) {
      res = gated_residual_forward(x, gate, y);                                               // (N, T, D)
      std::tie(out, mean, rstd) = ln_modulate_forward(res, shift, scale, eps, out_dtype, true);  // (N, T, D), (N, T, 1) ×2
    }
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({res, mean, rstd, scale, gate, y});
    ctx->saved_data["x_dtype"] = int64_t(x.scalar_type());
    ctx->saved_data["shift_dtype"] = int64_t(shift.scalar_type());
    ctx->saved_data["out_dtype"] = int64_t(out_dtype);
    return {out, res};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &res = saved[0], &mean = saved[1], &rstd = saved[2], &scale = saved[3], &gate = saved[4], &y = saved[5];
    const at::Tensor dout = grads[0].defined() ? grads[0] : at::zeros_like(res, res.options().dtype(at::ScalarType(ctx->saved_data["out_dtype"].toInt())));
    const auto x_dtype = at::ScalarType(ctx->saved_data["x_dtype"].toInt()), shift_dtype = at::ScalarType(ctx->saved_data["shift_dtype"].toInt());
    at::Tensor dres, dshift, dscale, dy, dgate;  // ∂L/∂res (the residual path's gradient added), …
    const at::ScalarType vec_dtype = shift_dtype == scale.scalar_type() && shift_dtype == gate.scalar_type() ? shift_dtype : at::kFloat;
#ifdef NALA_WITH_CUDA
    if (residual_norm_training_backward_fused() && cuda::residual_layer_norm_modulate_training_backward_supported(res, y, dout.scalar_type())) {
      // Σ_rows dy from the kernel, offered to the backward of the layer that made y (its bias gradient)
      // (not with NALA_GEMM_BGRAD=1, whose weight-gradient GEMM makes the bias gradient and would leave the sums untaken)
      const bool sums = residual_dy_sums() && !gemm_bias_grads() && ctx->needs_input_grad(2) && cuda::residual_norm_dy_sums_supported(y.size(-1));
      at::Tensor dy_sum;  // (D) float32
      std::tie(dres, dshift, dscale, dy, dgate) =
          cuda::residual_layer_norm_modulate_training_backward(dout, res, mean, rstd, scale, grads[1], gate, y, vec_dtype, sums ? &dy_sum : nullptr);
      if (dy_sum.defined() && dy.scalar_type() == y.scalar_type()) offer_column_sums(dy, dy_sum);  // dy is returned as it is below
      residual_norm_backward_kernel_count.fetch_add(1, std::memory_order_relaxed);
    }
#endif
    if (!dres.defined()) {
      const tensor_list r = ln_modulate_backward(dout, res, mean, rstd, scale, grads[1], vec_dtype);
      dres = r[0], dshift = r[1], dscale = r[2];
      std::tie(dy, dgate) = gated_residual_backward(dres, gate, y);
    }
    return {dres.to(x_dtype), dgate.to(gate.scalar_type()), dy.to(y.scalar_type()), dshift.to(shift_dtype), dscale.to(scale.scalar_type()),
            at::Tensor(), at::Tensor()};
  }
};

struct BiasGeluFn : torch::autograd::Function<BiasGeluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, const at::Tensor& bias) {
    at::Tensor out;
#ifdef NALA_WITH_CUDA
    if (cuda::bias_gelu_supported(y)) out = cuda::bias_gelu_forward(y, bias);
#endif
    if (!out.defined()) {
      const at::ScalarType ct = y.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
      out = at::gelu(y.to(ct) + bias.to(ct), "tanh").to(y.scalar_type());  // (..., F)
    }
    ctx->save_for_backward({y, bias});
    return out;
  }

  // ∂L/∂y = ∂L/∂out · GELU'(y + b), ∂L/∂b = Σ_rows ∂L/∂y
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &y = saved[0], &bias = saved[1];
    at::Tensor dy, db;
#ifdef NALA_WITH_CUDA
    if (cuda::bias_gelu_supported(y)) std::tie(dy, db) = cuda::bias_gelu_backward(grads[0], y, bias);
#endif
    if (!dy.defined()) {
      const at::ScalarType ct = y.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
      at::Tensor d = at::gelu_backward(grads[0].to(ct), y.to(ct) + bias.to(ct), "tanh");  // (..., F)
      db = d.reshape({-1, d.size(-1)}).sum(0);
      dy = d.to(y.scalar_type());
    }
    return {dy, db.to(bias.scalar_type())};
  }
};

}  // namespace

at::Tensor layer_norm_modulate_reference(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps) {
  return at::layer_norm(x, {x.size(-1)}, {}, {}, eps) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);  // (N, T, D)
}

at::Tensor gated_residual_reference(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y) {
  return x + gate.unsqueeze(1) * y;  // (N, T, D)
}

at::Tensor layer_norm_modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps) {
  if (!fused_block_ops()) return layer_norm_modulate_reference(x, shift, scale, eps);
  TORCH_CHECK(x.dim() == 3 && shift.dim() == 2 && scale.dim() == 2, "layer_norm_modulate: x must be (N, T, D) and shift, scale (N, D), got ",
              x.sizes(), ", ", shift.sizes(), ", ", scale.sizes());
  return LayerNormModulateFn::apply(x, shift, scale, eps, int64_t(fused_result_dtype(x)))[0];
}

ModulatedAndResidual layer_norm_modulate_residual(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps) {
  if (!fused_block_ops()) return {layer_norm_modulate_reference(x, shift, scale, eps), x};
  TORCH_CHECK(x.dim() == 3 && shift.dim() == 2 && scale.dim() == 2, "layer_norm_modulate: x must be (N, T, D) and shift, scale (N, D), got ",
              x.sizes(), ", ", shift.sizes(), ", ", scale.sizes());
  auto outs = LayerNormModulateFn::apply(x, shift, scale, eps, int64_t(fused_result_dtype(x)));
  return {outs[0], outs[1]};
}

at::Tensor gated_residual(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y) {
  if (!fused_block_ops()) return gated_residual_reference(x, gate, y);
  TORCH_CHECK(x.dim() == 3 && gate.dim() == 2 && y.sizes() == x.sizes(), "gated_residual: x, y must be (N, T, D) and gate (N, D), got ", x.sizes(),
              ", ", gate.sizes(), ", ", y.sizes());
  return GatedResidualFn::apply(x, gate, y);
}

int64_t residual_layer_norm_modulate_kernel_calls() { return residual_norm_kernel_count.load(std::memory_order_relaxed); }
int64_t residual_layer_norm_modulate_backward_kernel_calls() { return residual_norm_backward_kernel_count.load(std::memory_order_relaxed); }

ModulatedAndResidual gated_residual_layer_norm_modulate(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y, const at::Tensor& shift,
                                                        const at::Tensor& scale, double eps) {
  const bool grad = at::GradMode::is_enabled() &&
                    (x.requires_grad() || gate.requires_grad() || y.requires_grad() || shift.requires_grad() || scale.requires_grad());
  if (grad) {
    // the one operation keeps the sum in x's dtype (as the models' float32 stream and autocast give);
    // a sum that promotes past it goes through the two operations
    const bool keeps_dtype = at::promote_types(x.scalar_type(), at::promote_types(gate.scalar_type(), y.scalar_type())) == x.scalar_type();
    if (!fused_block_ops() || !residual_norm_fused_training() || !keeps_dtype)
      return layer_norm_modulate_residual(gated_residual(x, gate, y), shift, scale, eps);
    TORCH_CHECK(x.dim() == 3 && y.sizes() == x.sizes() && gate.dim() == 2 && shift.dim() == 2 && scale.dim() == 2,
                "gated_residual_layer_norm_modulate: x, y must be (N, T, D) and gate, shift, scale (N, D), got ", x.sizes(), ", ", y.sizes(), ", ",
                gate.sizes(), ", ", shift.sizes(), ", ", scale.sizes());
    auto outs = GatedResidualLayerNormModulateFn::apply(x, gate, y, shift, scale, eps, int64_t(fused_result_dtype(x)));
    return {outs[0], outs[1]};
  }
#ifdef NALA_WITH_CUDA
  if (fused_block_ops() && fused_result_dtype(x) == x.scalar_type() && cuda::residual_layer_norm_modulate_supported(x, y)) {
    auto [res, out] = cuda::residual_layer_norm_modulate(x, gate, y, shift, scale, eps);  // (N, T, D) ×2
    residual_norm_kernel_count.fetch_add(1, std::memory_order_relaxed);
    return {out, res};
  }
#endif
  const at::Tensor h = gated_residual(x, gate, y);                   // (N, T, D)
  return {layer_norm_modulate(h, shift, scale, eps), h};             // (N, T, D) ×2
}

}  // namespace nala::ops

namespace nala::ops {

at::Tensor bias_gelu_reference(const at::Tensor& y, const at::Tensor& bias) { return at::gelu(y + bias, "tanh"); }

at::Tensor bias_gelu(const at::Tensor& y, const at::Tensor& bias) {
  if (!fused_block_ops()) return bias_gelu_reference(y, bias);
  TORCH_CHECK(bias.dim() == 1 && y.dim() >= 1 && y.size(-1) == bias.size(0), "bias_gelu: y (..., F) and bias (F,) expected, got ", y.sizes(), ", ",
              bias.sizes());
  return BiasGeluFn::apply(y, bias);
}

}  // namespace nala::ops
