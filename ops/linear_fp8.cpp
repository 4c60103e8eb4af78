#include "ops/linear_fp8.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include "ops/block_ops.h"
#include "ops/fused_ops.h"

#ifdef NALA_WITH_CUDA
#include "ops/cuda/block_cuda.h"
#include "ops/cuda/quantize_fp8.h"
#endif

namespace nala::ops {
namespace {

constexpr double kE4m3Max = 448.0;  // largest finite float8_e4m3fn

struct Registered {
  at::Tensor weight;  // the parameter itself (kept alive, so its address is not reused)
  at::ScalarType dtype;
  const void* data = nullptr;
  int64_t version = -1;
  Fp8Rows q;
};

std::mutex registry_mutex;
std::unordered_map<const c10::TensorImpl*, Registered> registry;
std::atomic<bool> any_registered{false};
std::atomic<int64_t> mlp_fp8_count{0};
std::atomic<int64_t> ln_fp8_count{0};

bool fits(const torch::nn::LinearImpl& l) { return l.weight.dim() == 2 && l.weight.size(0) % 16 == 0 && l.weight.size(1) % 16 == 0; }

void quantize_weight(Registered& r) {
  const at::NoGradGuard ng;
  r.q = quantize_rows_fp8(r.weight.detach().contiguous());  // (out, in), (out, 1)
  r.data = r.weight.data_ptr();
  r.version = r.weight._version();
}

}  // namespace

Fp8Rows quantize_rows_fp8_reference(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "quantize_rows_fp8: needs a (rows, features) matrix, got ", x.sizes());
  const at::Tensor xf = x.to(at::kFloat);                                                   // (R, K)
  // tensor operands: ATen on CUDA turns division by a Python/C++ scalar into a product with its
  // reciprocal (1/448 is not exact), which differs from amax / 448 in the last bit of some rows
  const at::Tensor amax = xf.abs().amax(1, true).clamp_min(1e-12);                          // (R, 1)
  const at::Tensor e4m3_max = at::full_like(amax, kE4m3Max);                                // (R, 1)
  const at::Tensor s = amax.div(e4m3_max), inv_s = e4m3_max.div(amax);                     // (R, 1) ×2
  return {xf.mul(inv_s).clamp(-kE4m3Max, kE4m3Max).to(at::kFloat8_e4m3fn), s};             // (R, K), (R, 1)
}

Fp8Rows quantize_rows_fp8(const at::Tensor& x) {
#ifdef NALA_WITH_CUDA
  if (cuda::quantize_rows_supported(x)) {
    auto [q, s] = cuda::quantize_rows(x);
    return {q, s};
  }
#endif
  return quantize_rows_fp8_reference(x);
}

bool fp8_fast_accum() {
  static const bool on = [] {
    const char* v = std::getenv("NALA_FP8_FAST_ACCUM");
    if (!v || std::string(v) == "1") return true;
    if (std::string(v) == "0") return false;
    throw std::runtime_error(std::string("NALA_FP8_FAST_ACCUM must be 0 or 1, got '") + v + "'");
  }();
  return on;
}

namespace {
// y = (q_x s_x)(q_W s_W)ᵀ + b (R, out): at::_scaled_mm on CUDA (bf16 result), the dequantized twin elsewhere
at::Tensor gemm_fp8(const Fp8Rows& xq, const Fp8Rows& w, const at::Tensor& b) {
  const int64_t out = w.q.size(0);
  if (xq.q.is_cuda()) {
    // row-wise scales: A (R, in) row-major, B = q_Wᵀ (in, out) column-major, scales (R, 1) and (1, out); bf16 out
    const std::optional<at::Tensor> bias = b.defined() ? std::optional<at::Tensor>(b.to(at::kBFloat16)) : std::nullopt;
    return at::_scaled_mm(xq.q, w.q.t(), xq.scale, w.scale.view({1, out}), bias, std::nullopt, at::kBFloat16, fp8_fast_accum());  // (R, out)
  }
  // the twin: the same products of dequantized operands, accumulated in float32
  return at::linear(xq.q.to(at::kFloat) * xq.scale, w.q.to(at::kFloat) * w.scale, b.defined() ? b.to(at::kFloat) : at::Tensor());  // (R, out)
}
}  // namespace

at::Tensor linear_fp8(const at::Tensor& x, const Fp8Rows& w, const at::Tensor& b) {
  const int64_t out = w.q.size(0), in = w.q.size(1);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == in, "linear_fp8: input ", x.sizes(), " does not fit a weight of ", w.q.sizes());
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out;
  const at::Tensor x2 = x.reshape({-1, in}).contiguous();  // (R, in)
  if (x2.size(0) == 0) return at::zeros(shape, x.options());
  return gemm_fp8(quantize_rows_fp8(x2), w, b).to(x.scalar_type()).view(shape);  // (…, out)
}

Fp8Rows bias_gelu_quantize_rows_fp8_reference(const at::Tensor& x, const at::Tensor& b) {
  TORCH_CHECK(x.dim() == 2 && b.dim() == 1 && b.size(0) == x.size(1), "bias_gelu_quantize_rows_fp8: needs (R, K) and a (K) bias, got ", x.sizes(),
              " and ", b.sizes());
  const at::Tensor h = at::gelu(x.to(at::kFloat) + b.to(at::kFloat), "tanh").to(x.scalar_type());  // (R, K) in x's dtype
  return quantize_rows_fp8_reference(h);                                                            // (R, K), (R, 1)
}

Fp8Rows bias_gelu_quantize_rows_fp8(const at::Tensor& x, const at::Tensor& b) {
#ifdef NALA_WITH_CUDA
  if (cuda::bias_gelu_quantize_rows_supported(x, b)) {
    auto [q, s] = cuda::bias_gelu_quantize_rows(x, b, fp8_fast_gelu());
    return {q, s};
  }
  // rows too long for the one-pass kernel: the two kernels (bias_gelu's own rounding is the kernel's
  // only with fused block ops on; otherwise the composition below, which rounds the same way)
  if (x.is_cuda() && fused_block_ops()) return quantize_rows_fp8(bias_gelu(x, b).contiguous());
#endif
  return bias_gelu_quantize_rows_fp8_reference(x, b);
}

namespace {
// fc1's output a (…, H) without its bias → fc2's (…, D) in dtype: the joined bias-GELU-quantize, then fc2's GEMM
at::Tensor mlp_fp8_tail(const at::Tensor& a, const at::Tensor& b1, const Fp8Rows& w2, const at::Tensor& b2, at::ScalarType dtype) {
  std::vector<int64_t> shape = a.sizes().vec();
  shape.back() = w2.q.size(0);
  const at::Tensor a2 = a.reshape({-1, a.size(-1)}).contiguous();  // (R, H)
  if (a2.size(0) == 0) return at::zeros(shape, a.options().dtype(dtype));
  return gemm_fp8(bias_gelu_quantize_rows_fp8(a2, b1), w2, b2).to(dtype).view(shape);  // (…, D)
}

void check_mlp_fp8(const Fp8Rows& w1, const at::Tensor& b1, const Fp8Rows& w2) {
  TORCH_CHECK(w2.q.size(1) == w1.q.size(0) && b1.dim() == 1 && b1.size(0) == w1.q.size(0), "mlp_fp8: fc1 ", w1.q.sizes(), " + ", b1.sizes(),
              " does not feed fc2 ", w2.q.sizes());
}
}  // namespace

at::Tensor mlp_fp8(const at::Tensor& x, const Fp8Rows& w1, const at::Tensor& b1, const Fp8Rows& w2, const at::Tensor& b2) {
  mlp_fp8_count.fetch_add(1, std::memory_order_relaxed);
  check_mlp_fp8(w1, b1, w2);
  return mlp_fp8_tail(linear_fp8(x, w1, at::Tensor()), b1, w2, b2, x.scalar_type());  // (…, D); fc1 without its bias first
}

at::Tensor mlp_fp8(const Fp8Input& x, const Fp8Rows& w1, const at::Tensor& b1, const Fp8Rows& w2, const at::Tensor& b2) {
  mlp_fp8_count.fetch_add(1, std::memory_order_relaxed);
  check_mlp_fp8(w1, b1, w2);
  return mlp_fp8_tail(linear_fp8(x, w1, at::Tensor()), b1, w2, b2, x.dtype);  // (…, D)
}

at::Tensor linear_fp8(const Fp8Input& x, const Fp8Rows& w, const at::Tensor& b) {
  TORCH_CHECK(!x.shape.empty() && x.shape.back() == w.q.size(1) && x.rows.q.dim() == 2 && x.rows.q.size(1) == w.q.size(1),
              "linear_fp8: quantized input of shape ", c10::IntArrayRef(x.shape), " (rows ", x.rows.q.sizes(), ") does not fit a weight of ",
              w.q.sizes());
  std::vector<int64_t> shape = x.shape;
  shape.back() = w.q.size(0);
  if (x.rows.q.size(0) == 0) return at::zeros(shape, x.rows.scale.options().dtype(x.dtype));
  return gemm_fp8(x.rows, w, b).to(x.dtype).view(shape);  // (…, out)
}

Fp8Input layer_norm_modulate_fp8(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps) {
  ln_fp8_count.fetch_add(1, std::memory_order_relaxed);
  TORCH_CHECK(x.dim() == 3 && shift.dim() == 2 && scale.dim() == 2, "layer_norm_modulate_fp8: x must be (N, T, D) and shift, scale (N, D), got ",
              x.sizes(), ", ", shift.sizes(), ", ", scale.sizes());
#ifdef NALA_WITH_CUDA
  const at::ScalarType dt = fused_result_dtype(x);
  if (x.is_cuda() && fused_block_ops() && cuda::layer_norm_modulate_supported(x, dt)) {
    auto [q, s] = cuda::layer_norm_modulate_quantize(x, shift, scale, eps, dt);  // (N·T, D), (N·T, 1)
    return {{q, s}, x.sizes().vec(), dt};
  }
#endif
  const at::Tensor m = layer_norm_modulate(x, shift, scale, eps);                        // (N, T, D)
  return {quantize_rows_fp8(m.reshape({-1, m.size(-1)}).contiguous()), m.sizes().vec(), m.scalar_type()};  // (N·T, D) rows
}

ResidualAndFp8Input gated_residual_layer_norm_modulate_fp8(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y, const at::Tensor& shift,
                                                           const at::Tensor& scale, double eps) {
#ifdef NALA_WITH_CUDA
  if (x.is_cuda() && fused_block_ops() && fused_result_dtype(x) == x.scalar_type() && cuda::residual_layer_norm_modulate_supported(x, y)) {
    ln_fp8_count.fetch_add(1, std::memory_order_relaxed);
    auto [res, q, s] = cuda::residual_layer_norm_modulate_quantize(x, gate, y, shift, scale, eps);  // (N, T, D), (N·T, D), (N·T, 1)
    return {res, {{q, s}, x.sizes().vec(), x.scalar_type()}};
  }
#endif
  const at::Tensor h = gated_residual(x, gate, y);                 // (N, T, D)
  return {h, layer_norm_modulate_fp8(h, shift, scale, eps)};
}

int64_t layer_norm_modulate_fp8_calls() { return ln_fp8_count.load(std::memory_order_relaxed); }

int64_t use_fp8_linears(const std::vector<torch::nn::LinearImpl*>& layers) {
  int64_t n = 0;
  for (auto* l : layers) {
    if (!l || !fits(*l)) continue;
#ifdef NALA_WITH_CUDA
    std::string why;
    if (l->weight.is_cuda() && !cuda::fp8_gemm_available(l->weight.device(), &why)) throw std::runtime_error("FP8 linear layers: " + why);
#endif
    Registered r;
    r.weight = l->weight;
    r.dtype = l->weight.scalar_type();
    quantize_weight(r);
    const std::lock_guard<std::mutex> lock(registry_mutex);
    registry[l->weight.unsafeGetTensorImpl()] = std::move(r);
    ++n;
  }
  if (n) any_registered = true;
  return n;
}

const Fp8Rows* fp8_weight(const at::Tensor& w) {
  if (!any_registered.load(std::memory_order_relaxed) || !w.defined()) return nullptr;
  const std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry.find(w.unsafeGetTensorImpl());
  if (it == registry.end()) return nullptr;
  Registered& r = it->second;
  if (w.scalar_type() != r.dtype) return nullptr;  // the model moved to another dtype (an fp32 reference run, say)
  if (w.data_ptr() != r.data || w._version() != r.version) quantize_weight(r);  // moved or changed in place
  return &r.q;
}

int64_t mlp_fp8_calls() { return mlp_fp8_count.load(std::memory_order_relaxed); }

void clear_fp8_linears() {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  registry.clear();
  any_registered = false;
}

}  // namespace nala::ops
