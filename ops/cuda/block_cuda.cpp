#include "ops/cuda/block_cuda.h"

#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops/cuda/block_kernels.h"
#include "ops/cuda/column_sum.h"
#include "ops/fused_ops.h"

namespace nala::ops::cuda {
namespace {

bool kernel_dtype(at::ScalarType t, DType& out) {
  switch (t) {
    case at::kFloat: out = DType::F32; return true;
    case at::kHalf: out = DType::F16; return true;
    case at::kBFloat16: out = DType::BF16; return true;
    default: return false;
  }
}

DType dtype_of(const at::Tensor& t) {
  DType d;
  TORCH_CHECK(kernel_dtype(t.scalar_type(), d), "fused block kernels: unsupported dtype ", t.scalar_type());
  return d;
}

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// (N, T, D) rows, contiguous and aligned (a copy where not)
at::Tensor rows(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return aligned16(c) ? c : c.clone();
}

// One vector per sample (N, D) for the kernels (block_kernels.h SampleVec): read where it lies when
// its layout allows 4-element loads (adaLN's chunks do: (N, 6D) rows, unit stride along D), else a
// contiguous float32 copy, which `copy` keeps alive for the launch.
struct PerSample {
  at::Tensor copy;
  SampleVec v;
};

PerSample per_sample(const at::Tensor& v, const at::Tensor& x, const char* name) {
  TORCH_CHECK(v.dim() == 2 && v.size(0) == x.size(0) && v.size(1) == x.size(2), "fused block op: ", name, " must be (N, D) = (", x.size(0), ", ",
              x.size(2), "), got ", v.sizes());
  TORCH_CHECK(v.device() == x.device(), "fused block op: ", name, " is on ", v.device(), ", x on ", x.device());
  DType t;
  const int64_t stride = v.size(0) == 1 ? 0 : v.stride(0);  // one sample: its stride is never used
  if (kernel_dtype(v.scalar_type(), t) && v.stride(1) == 1 && stride % 4 == 0 && reinterpret_cast<uintptr_t>(v.data_ptr()) % (4 * v.element_size()) == 0)
    return {at::Tensor(), SampleVec{v.data_ptr(), stride, t}};
  at::Tensor c = rows(v.to(at::kFloat));  // (N, D)
  return {c, SampleVec{c.data_ptr(), c.size(1), DType::F32}};
}

RowShape shape_of(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 3, "fused block op: x must be (N, T, D), got ", x.sizes());
  RowShape s;
  s.N = x.size(0);
  s.T = x.size(1);
  s.D = int(x.size(2));
  s.rows_per_chunk = 32;
  return s;
}

void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }

// The backward kernels' (N, chunks, D) float32 partials summed over the chunks into (N, D): with
// NALA_BLOCK_SUMS_FUSED=1 (ops/fused_ops.h) one kernel for all of them, written in dtype (the
// per-sample vectors' type, so the callers' conversions are no-ops); otherwise ATen's sum each, in float32.
std::vector<at::Tensor> sum_chunks(const std::vector<at::Tensor>& parts, at::ScalarType dtype) {
  std::vector<at::Tensor> out;
  DType t;
  if (!block_sums_fused() || !kernel_dtype(dtype, t)) {
    for (const at::Tensor& part : parts) out.push_back(part.sum(1));  // (N, D)
    return out;
  }
  PartialSumsParams p;
  p.N = parts[0].size(0);
  p.chunks = int(parts[0].size(1));
  p.D = int(parts[0].size(2));
  p.out_type = t;
  p.count = int(parts.size());
  TORCH_CHECK(p.count <= PartialSumsParams::kMax, "sum_chunks: ", p.count, " partial arrays, at most ", PartialSumsParams::kMax);
  for (size_t k = 0; k < parts.size(); ++k) {
    TORCH_CHECK(parts[k].sizes() == parts[0].sizes() && parts[k].is_contiguous() && parts[k].scalar_type() == at::kFloat, "sum_chunks: partials ",
                parts[k].sizes(), " ", parts[k].scalar_type(), " vs ", parts[0].sizes());
    out.push_back(at::empty({p.N, p.D}, parts[k].options().dtype(dtype)));  // (N, D)
    p.part[k] = parts[k].data_ptr<float>();
    p.out[k] = out.back().data_ptr();
  }
  launch_partial_sums(p, stream());
  return out;
}

}  // namespace

bool layer_norm_modulate_supported(const at::Tensor& x, at::ScalarType out_dtype) {
  DType a, b;
  return x.is_cuda() && x.dim() == 3 && x.numel() > 0 && kernel_dtype(x.scalar_type(), a) && kernel_dtype(out_dtype, b) &&
         layer_norm_modulate_supported(a, b, int(x.size(2)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_modulate_forward(const at::Tensor& x_in, const at::Tensor& shift, const at::Tensor& scale,
                                                                           double eps, at::ScalarType out_dtype, bool save_stats) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = rows(x_in);
  LayerNormModulateParams p;
  p.s = shape_of(x);
  const PerSample sh = per_sample(shift, x, "shift"), sc = per_sample(scale, x, "scale");
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(out_dtype));  // (N, T, D)
  at::Tensor mean, rstd;
  if (save_stats) {
    mean = at::empty({p.s.N, p.s.T, 1}, x.options().dtype(at::kFloat));  // (N, T, 1)
    rstd = at::empty_like(mean);
  }
  p.eps = float(eps);
  p.x_type = dtype_of(x);
  p.out_type = dtype_of(out);
  p.x = x.data_ptr();
  p.shift = sh.v;
  p.scale = sc.v;
  p.out = out.data_ptr();
  p.mean = save_stats ? mean.data_ptr<float>() : nullptr;
  p.rstd = save_stats ? rstd.data_ptr<float>() : nullptr;
  launch_layer_norm_modulate_forward(p, stream());
  return {out, mean, rstd};
}

std::pair<at::Tensor, at::Tensor> layer_norm_modulate_quantize(const at::Tensor& x_in, const at::Tensor& shift, const at::Tensor& scale, double eps,
                                                               at::ScalarType out_dtype) {
  TORCH_CHECK(layer_norm_modulate_supported(x_in, out_dtype), "layer_norm_modulate_quantize: the kernels do not take x ", x_in.sizes(), " ",
              x_in.scalar_type(), " with a ", out_dtype, " result");
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = rows(x_in);
  LayerNormModulateParams p;
  p.s = shape_of(x);
  const PerSample sh = per_sample(shift, x, "shift"), sc = per_sample(scale, x, "scale");
  const int64_t R = p.s.N * p.s.T;
  at::Tensor q = at::empty({R, p.s.D}, x.options().dtype(at::kFloat8_e4m3fn));  // (N·T, D)
  at::Tensor s = at::empty({R, 1}, x.options().dtype(at::kFloat));              // (N·T, 1)
  p.eps = float(eps);
  p.x_type = dtype_of(x);
  DType o;
  TORCH_CHECK(kernel_dtype(out_dtype, o), "layer_norm_modulate_quantize: unsupported result dtype ", out_dtype);
  p.out_type = o;
  p.x = x.data_ptr();
  p.shift = sh.v;
  p.scale = sc.v;
  launch_layer_norm_modulate_quantize(p, static_cast<uint8_t*>(q.data_ptr()), s.data_ptr<float>(), stream());
  return {q, s};
}

namespace {
// The LayerNorm-modulate backward's launch parameters, with the tensors they point into kept alive:
// x, dout, dres as rows, the float32 statistics, dx and the (N, chunks, D) dshift and dscale partials.
// Shared by its own entry and the gated one (residual_layer_norm_modulate_training_backward).
struct LnBackward {
  LayerNormModulateParams p;
  at::Tensor x, dout, mu, rs, dres, dx, ds, dh;
  PerSample sc;
};

LnBackward ln_backward(const at::Tensor& dout_in, const at::Tensor& x_in, const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& scale,
                       const at::Tensor& dres_in, const char* what) {
  LnBackward b;
  b.x = rows(x_in);
  b.dout = rows(dout_in);
  LayerNormModulateParams& p = b.p;
  p.s = shape_of(b.x);
  TORCH_CHECK(b.dout.sizes() == b.x.sizes(), what, ": grad ", b.dout.sizes(), " vs x ", b.x.sizes());
  b.sc = per_sample(scale, b.x, "scale");
  b.mu = mean.to(at::kFloat).contiguous();
  b.rs = rstd.to(at::kFloat).contiguous();
  TORCH_CHECK(b.mu.numel() == p.s.N * p.s.T && b.rs.numel() == b.mu.numel(), what, ": statistics of ", b.mu.numel(), " rows, expected ", p.s.N * p.s.T);
  if (dres_in.defined()) {
    b.dres = rows(dres_in.to(b.x.scalar_type()));
    TORCH_CHECK(b.dres.sizes() == b.x.sizes(), what, ": residual grad ", b.dres.sizes(), " vs x ", b.x.sizes());
  }
  b.dx = at::empty_like(b.x);                                                           // (N, T, D)
  b.ds = at::empty({p.s.N, p.s.chunks(), p.s.D}, b.x.options().dtype(at::kFloat));  // (N, chunks, D)
  b.dh = at::empty_like(b.ds);
  p.x_type = dtype_of(b.x);
  p.out_type = dtype_of(b.dout);
  p.x = b.x.data_ptr();
  p.dout = b.dout.data_ptr();
  p.dres = b.dres.defined() ? b.dres.data_ptr() : nullptr;
  p.mean = b.mu.data_ptr<float>();
  p.rstd = b.rs.data_ptr<float>();
  p.scale = b.sc.v;
  p.dx = b.dx.data_ptr();
  p.dscale_part = b.ds.data_ptr<float>();
  p.dshift_part = b.dh.data_ptr<float>();
  return b;
}
}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_modulate_backward(const at::Tensor& dout_in, const at::Tensor& x_in, const at::Tensor& mean,
                                                                            const at::Tensor& rstd, const at::Tensor& scale, const at::Tensor& dres_in,
                                                                            at::ScalarType sums_dtype) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const LnBackward b = ln_backward(dout_in, x_in, mean, rstd, scale, dres_in, "layer_norm_modulate backward");
  launch_layer_norm_modulate_backward(b.p, stream());
  const auto sums = sum_chunks({b.dh, b.ds}, sums_dtype);  // dshift, dscale (N, D)
  return {b.dx, sums[0], sums[1]};
}

bool gated_residual_supported(const at::Tensor& x, const at::Tensor& y) {
  DType a, b;
  return x.is_cuda() && y.is_cuda() && x.dim() == 3 && x.sizes() == y.sizes() && x.numel() > 0 && kernel_dtype(x.scalar_type(), a) &&
         kernel_dtype(y.scalar_type(), b) && gated_residual_supported(a, b, int(x.size(2)));
}

at::Tensor gated_residual_forward(const at::Tensor& x_in, const at::Tensor& gate, const at::Tensor& y_in) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = rows(x_in), y = rows(y_in);
  GatedResidualParams p;
  p.s = shape_of(x);
  TORCH_CHECK(y.sizes() == x.sizes(), "gated_residual: y ", y.sizes(), " vs x ", x.sizes());
  const PerSample g = per_sample(gate, x, "gate");
  at::Tensor out = at::empty_like(x);  // (N, T, D)
  p.x_type = dtype_of(x);
  p.y_type = dtype_of(y);
  p.x = x.data_ptr();
  p.y = y.data_ptr();
  p.gate = g.v;
  p.out = out.data_ptr();
  launch_gated_residual_forward(p, stream());
  return out;
}

std::tuple<at::Tensor, at::Tensor> gated_residual_backward(const at::Tensor& dout_in, const at::Tensor& gate, const at::Tensor& y_in, at::ScalarType sums_dtype) {
  c10::cuda::CUDAGuard guard(y_in.device());
  const at::Tensor y = rows(y_in), dout = rows(dout_in);
  GatedResidualParams p;
  p.s = shape_of(y);
  TORCH_CHECK(dout.sizes() == y.sizes(), "gated_residual backward: grad ", dout.sizes(), " vs y ", y.sizes());
  const PerSample g = per_sample(gate, y, "gate");
  at::Tensor dy = at::empty_like(y);                                                   // (N, T, D)
  at::Tensor dg = at::empty({p.s.N, p.s.chunks(), p.s.D}, y.options().dtype(at::kFloat));  // (N, chunks, D)
  p.x_type = dtype_of(dout);
  p.y_type = dtype_of(y);
  p.dout = dout.data_ptr();
  p.y = y.data_ptr();
  p.gate = g.v;
  p.dy = dy.data_ptr();
  p.dgate_part = dg.data_ptr<float>();
  launch_gated_residual_backward(p, stream());
  return {dy, sum_chunks({dg}, sums_dtype)[0]};
}

bool residual_layer_norm_modulate_supported(const at::Tensor& x, const at::Tensor& y) {
  DType a;
  return x.is_cuda() && y.is_cuda() && x.dim() == 3 && x.sizes() == y.sizes() && x.numel() > 0 && x.scalar_type() == y.scalar_type() &&
         kernel_dtype(x.scalar_type(), a) && residual_layer_norm_modulate_supported(a, int(x.size(2)));
}

namespace {
// the kernel's parameters for x, y and the per-sample vectors; res allocated; out or q set by the caller
ResidualNormParams residual_norm_params(const at::Tensor& x, const at::Tensor& y, const PerSample& g, const PerSample& sh, const PerSample& sc,
                                        const at::Tensor& res, double eps) {
  ResidualNormParams p;
  p.s = shape_of(x);
  p.eps = float(eps);
  p.type = dtype_of(x);
  p.x = x.data_ptr();
  p.y = y.data_ptr();
  p.gate = g.v;
  p.shift = sh.v;
  p.scale = sc.v;
  p.res = res.data_ptr();
  p.staged = residual_norm_staged();
  return p;
}
}  // namespace

std::pair<at::Tensor, at::Tensor> residual_layer_norm_modulate(const at::Tensor& x_in, const at::Tensor& gate, const at::Tensor& y_in,
                                                               const at::Tensor& shift, const at::Tensor& scale, double eps) {
  TORCH_CHECK(residual_layer_norm_modulate_supported(x_in, y_in), "residual_layer_norm_modulate: the kernel does not take x ", x_in.sizes(), " ",
              x_in.scalar_type(), " and y ", y_in.sizes(), " ", y_in.scalar_type());
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = rows(x_in), y = rows(y_in);
  const PerSample g = per_sample(gate, x, "gate"), sh = per_sample(shift, x, "shift"), sc = per_sample(scale, x, "scale");
  at::Tensor res = at::empty_like(x), out = at::empty_like(x);  // (N, T, D) ×2
  ResidualNormParams p = residual_norm_params(x, y, g, sh, sc, res, eps);
  p.out = out.data_ptr();
  launch_residual_layer_norm_modulate(p, stream());
  return {res, out};
}

bool residual_layer_norm_modulate_training_supported(const at::Tensor& x, const at::Tensor& y, at::ScalarType out_dtype) {
  DType a, b;
  return x.is_cuda() && y.is_cuda() && x.dim() == 3 && x.sizes() == y.sizes() && x.numel() > 0 && out_dtype == y.scalar_type() &&
         kernel_dtype(x.scalar_type(), a) && kernel_dtype(y.scalar_type(), b) && residual_layer_norm_modulate_training_supported(a, b, int(x.size(2)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> residual_layer_norm_modulate_training(const at::Tensor& x_in, const at::Tensor& gate,
                                                                                                 const at::Tensor& y_in, const at::Tensor& shift,
                                                                                                 const at::Tensor& scale, double eps) {
  TORCH_CHECK(residual_layer_norm_modulate_training_supported(x_in, y_in, y_in.scalar_type()), "residual_layer_norm_modulate_training: the kernel does not take x ",
              x_in.sizes(), " ", x_in.scalar_type(), " and y ", y_in.sizes(), " ", y_in.scalar_type());
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = rows(x_in), y = rows(y_in);
  const PerSample g = per_sample(gate, x, "gate"), sh = per_sample(shift, x, "shift"), sc = per_sample(scale, x, "scale");
  at::Tensor res = at::empty_like(x), out = at::empty_like(y);                     // (N, T, D): x's dtype, y's dtype
  at::Tensor mean = at::empty({x.size(0), x.size(1), 1}, x.options().dtype(at::kFloat));  // (N, T, 1)
  at::Tensor rstd = at::empty_like(mean);
  ResidualNormTrainParams p;
  p.s = shape_of(x);
  p.eps = float(eps);
  p.x_type = dtype_of(x);
  p.y_type = dtype_of(y);
  p.x = x.data_ptr();
  p.y = y.data_ptr();
  p.gate = g.v;
  p.shift = sh.v;
  p.scale = sc.v;
  p.res = res.data_ptr();
  p.out = out.data_ptr();
  p.mean = mean.data_ptr<float>();
  p.rstd = rstd.data_ptr<float>();
  launch_residual_layer_norm_modulate_training(p, stream());
  return {res, out, mean, rstd};
}

bool residual_norm_dy_sums_supported(int64_t D) { return D > 0 && D <= 768 && D % 4 == 0; }  // NV ≤ 6: the sums in registers (ln_modulate_bwd)

bool residual_layer_norm_modulate_training_backward_supported(const at::Tensor& res, const at::Tensor& y, at::ScalarType dout_dtype) {
  DType a, b;
  return res.is_cuda() && y.is_cuda() && res.dim() == 3 && res.sizes() == y.sizes() && res.numel() > 0 && dout_dtype == y.scalar_type() &&
         kernel_dtype(res.scalar_type(), a) && kernel_dtype(y.scalar_type(), b) && residual_layer_norm_modulate_training_backward_supported(a, b, int(res.size(2)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> residual_layer_norm_modulate_training_backward(
    const at::Tensor& dout_in, const at::Tensor& res_in, const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& scale, const at::Tensor& dres_in,
    const at::Tensor& gate, const at::Tensor& y_in, at::ScalarType sums_dtype, at::Tensor* dy_sum) {
  TORCH_CHECK(residual_layer_norm_modulate_training_backward_supported(res_in, y_in, dout_in.scalar_type()),
              "residual_layer_norm_modulate_training_backward: the kernel does not take res ", res_in.sizes(), " ", res_in.scalar_type(), ", y ",
              y_in.sizes(), " ", y_in.scalar_type(), " and a ", dout_in.scalar_type(), " gradient");
  c10::cuda::CUDAGuard guard(res_in.device());
  const LnBackward b = ln_backward(dout_in, res_in, mean, rstd, scale, dres_in, "gated_residual + layer_norm_modulate backward");
  const at::Tensor y = rows(y_in);
  TORCH_CHECK(y.sizes() == b.x.sizes(), "gated_residual + layer_norm_modulate backward: y ", y.sizes(), " vs res ", b.x.sizes());
  const PerSample g = per_sample(gate, b.x, "gate");
  at::Tensor dy = at::empty_like(y), dg = at::empty_like(b.ds);  // (N, T, D), (N, chunks, D)
  GatedResidualParams q;
  q.s = b.p.s;
  q.x_type = b.p.x_type;
  q.y_type = dtype_of(y);
  q.y = y.data_ptr();
  q.gate = g.v;
  q.dy = dy.data_ptr();
  q.dgate_part = dg.data_ptr<float>();
  at::Tensor dy_part;  // (N, chunks, D) where dy's sums are asked for
  if (dy_sum) {
    TORCH_CHECK(residual_norm_dy_sums_supported(y.size(2)), "gated_residual + layer_norm_modulate backward: dy's sums need D ≤ 768, got ", y.size(2));
    dy_part = at::empty_like(b.ds);
    q.dy_part = dy_part.data_ptr<float>();
  }
  launch_residual_layer_norm_modulate_training_backward(b.p, q, stream());
  if (dy_sum) {
    // (N·chunks, D) partial rows: column_sum's two stages spread them over the SMs; sum_partials
    // alone adds them with one block per 32 columns (≈ 14 µs for DiT-S/2's 2,048 rows, docs/benchmarks.md).
    const at::Tensor rows_of_sums = dy_part.view({-1, dy_part.size(2)});  // (N·chunks, D)
    *dy_sum = column_sum_supported(rows_of_sums) ? column_sum(rows_of_sums) : sum_partials(rows_of_sums);  // (D)
  }
  const auto sums = sum_chunks({b.dh, b.ds, dg}, sums_dtype);  // dshift, dscale, dgate (N, D)
  return {b.dx, sums[0], sums[1], dy, sums[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> residual_layer_norm_modulate_quantize(const at::Tensor& x_in, const at::Tensor& gate, const at::Tensor& y_in,
                                                                                     const at::Tensor& shift, const at::Tensor& scale, double eps) {
  TORCH_CHECK(residual_layer_norm_modulate_supported(x_in, y_in), "residual_layer_norm_modulate_quantize: the kernel does not take x ", x_in.sizes(),
              " ", x_in.scalar_type(), " and y ", y_in.sizes(), " ", y_in.scalar_type());
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = rows(x_in), y = rows(y_in);
  const PerSample g = per_sample(gate, x, "gate"), sh = per_sample(shift, x, "shift"), sc = per_sample(scale, x, "scale");
  const int64_t R = x.size(0) * x.size(1), D = x.size(2);
  at::Tensor res = at::empty_like(x);                                              // (N, T, D)
  at::Tensor q = at::empty({R, D}, x.options().dtype(at::kFloat8_e4m3fn));         // (N·T, D)
  at::Tensor s = at::empty({R, 1}, x.options().dtype(at::kFloat));                 // (N·T, 1)
  ResidualNormParams p = residual_norm_params(x, y, g, sh, sc, res, eps);
  p.q = static_cast<uint8_t*>(q.data_ptr());
  p.qscale = s.data_ptr<float>();
  launch_residual_layer_norm_modulate(p, stream());
  return {res, q, s};
}

bool bias_gelu_supported(const at::Tensor& y) {
  DType a;
  return y.is_cuda() && y.dim() >= 1 && y.numel() > 0 && y.size(-1) % 4 == 0 && kernel_dtype(y.scalar_type(), a);
}

namespace {
BiasGeluParams bias_gelu_params(const at::Tensor& y, const at::Tensor& b) {
  TORCH_CHECK(b.dim() == 1 && b.size(0) == y.size(-1), "bias_gelu: bias must be (", y.size(-1), ",), got ", b.sizes());
  BiasGeluParams p;
  p.F = int(y.size(-1));
  p.rows = y.numel() / p.F;
  p.y_type = dtype_of(y);
  p.y = y.data_ptr();
  p.bias = b.data_ptr<float>();
  return p;
}
}  // namespace

at::Tensor bias_gelu_forward(const at::Tensor& y_in, const at::Tensor& bias) {
  c10::cuda::CUDAGuard guard(y_in.device());
  const at::Tensor y = rows(y_in), b = rows(bias.to(at::kFloat));
  BiasGeluParams p = bias_gelu_params(y, b);
  at::Tensor out = at::empty_like(y);  // (..., F)
  p.out = out.data_ptr();
  launch_bias_gelu_forward(p, stream());
  return out;
}

std::tuple<at::Tensor, at::Tensor> bias_gelu_backward(const at::Tensor& dout_in, const at::Tensor& y_in, const at::Tensor& bias) {
  c10::cuda::CUDAGuard guard(y_in.device());
  const at::Tensor y = rows(y_in), b = rows(bias.to(at::kFloat)), dout = rows(dout_in.to(y_in.scalar_type()));
  TORCH_CHECK(dout.sizes() == y.sizes(), "bias_gelu backward: grad ", dout.sizes(), " vs y ", y.sizes());
  BiasGeluParams p = bias_gelu_params(y, b);
  at::Tensor dy = at::empty_like(y);                                              // (..., F)
  at::Tensor part = at::empty({p.chunks(), p.F}, y.options().dtype(at::kFloat));  // (chunks, F)
  p.dout = dout.data_ptr();
  p.dy = dy.data_ptr();
  p.dbias_part = part.data_ptr<float>();
  launch_bias_gelu_backward(p, stream());
  return {dy, part.sum(0)};
}

}  // namespace nala::ops::cuda
