#include "attention/nala_attention.h"

#include <torch/autograd.h>

#include "attention/nala_cpu.h"
#include "ops/fused_ops.h"
#ifdef NALA_WITH_CUDA
#include "attention/cuda/nala_cuda.h"
#endif

namespace nala::attention {

void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const char* who) {
  const std::pair<const char*, const at::Tensor*> named[] = {{"q", &q}, {"k", &k}, {"v", &v}};
  for (auto& [name, t] : named) {
    TORCH_CHECK(t->defined(), who, ": ", name, " is undefined");
    TORCH_CHECK(t->dim() == 4, who, ": ", name, " must be (B, H, N, d), got shape ", t->sizes());
    TORCH_CHECK(at::isFloatingType(t->scalar_type()), who, ": ", name, " must be a float tensor, got ", t->scalar_type());
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), who, ": ", name, " has dtype ", t->scalar_type(), " but q has ", q.scalar_type());
    TORCH_CHECK(t->device() == q.device(), who, ": ", name, " is on ", t->device(), " but q is on ", q.device());
    TORCH_CHECK(t->sizes() == q.sizes(), who, ": ", name, " has shape ", t->sizes(), " but q has ", q.sizes());
  }
  TORCH_CHECK(q.size(2) > 0 && q.size(3) > 0, who, ": q has no tokens or zero head dim: ", q.sizes());
}

void check_options(const NalaOptions& opt, const char* who) {
  TORCH_CHECK(opt.lambda >= 1.0, who, ": lambda must be >= 1 (the power's gradient at 0), got ", opt.lambda);
  const bool nala_variant = opt.feature_map == FeatureMap::Nala || opt.feature_map == FeatureMap::NalaRelu;
  TORCH_CHECK(!nala_variant || opt.lambda * opt.tau >= 1.0, who, ": the query power p = lambda*(tau + tanh n) must stay >= 1; ",
              "lambda*tau = ", opt.lambda * opt.tau);
  TORCH_CHECK(opt.eps > 0 && opt.eps_norm > 0, who, ": eps and eps_norm must be positive, got ", opt.eps, ", ", opt.eps_norm);
  // the CUDA kernels take 1/max(n, ε_n) in float: below ≈ 2.9e-39 it overflows (∞·0 = NaN for a zero token)
  TORCH_CHECK(opt.eps_norm >= 1e-30, who, ": eps_norm must be >= 1e-30 (its float reciprocal must be finite), got ", opt.eps_norm);
}

bool nala_cuda_kernels_available() {
#ifdef NALA_WITH_CUDA
  return true;
#else
  return false;
#endif
}

// The options travel through autograd's saved data as named entries (an IValue map holds no structs).
void save_nala_options(torch::autograd::AutogradContext* ctx, const NalaOptions& o, const std::string& prefix) {
  ctx->saved_data[prefix + "feature_map"] = int64_t(o.feature_map);
  ctx->saved_data[prefix + "lambda"] = o.lambda;
  ctx->saved_data[prefix + "tau"] = o.tau;
  ctx->saved_data[prefix + "alpha"] = o.alpha;
  ctx->saved_data[prefix + "eps"] = o.eps;
  ctx->saved_data[prefix + "eps_norm"] = o.eps_norm;
  ctx->saved_data[prefix + "focus_power"] = o.focus_power;
}

NalaOptions saved_nala_options(torch::autograd::AutogradContext* ctx, const std::string& prefix) {
  NalaOptions o;
  o.feature_map = static_cast<FeatureMap>(ctx->saved_data[prefix + "feature_map"].toInt());
  o.lambda = ctx->saved_data[prefix + "lambda"].toDouble();
  o.tau = ctx->saved_data[prefix + "tau"].toDouble();
  o.alpha = ctx->saved_data[prefix + "alpha"].toDouble();
  o.eps = ctx->saved_data[prefix + "eps"].toDouble();
  o.eps_norm = ctx->saved_data[prefix + "eps_norm"].toDouble();
  o.focus_power = ctx->saved_data[prefix + "focus_power"].toDouble();
  return o;
}

NalaForward nala_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt, bool keep_state) {
  if (q.is_cuda()) {
#ifdef NALA_WITH_CUDA
    return nala_forward_cuda(q, k, v, opt, keep_state);
#else
    TORCH_CHECK(false, "nala_attention: q is on ", q.device(), " but this nala was built without CUDA kernels");
#endif
  }
  return nala_forward_cpu(q, k, v, opt);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nala_attention_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                                        const NalaForward& state, const at::Tensor& grad_o,
                                                                        const NalaOptions& opt) {
  TORCH_CHECK(state.S.defined() && state.z.defined() && state.den.defined(), "nala_attention_backward: the forward kept no state");
  if (q.is_cuda()) {
#ifdef NALA_WITH_CUDA
    return nala_backward_cuda(q, k, v, state.S, state.z, state.den, grad_o, opt);
#else
    TORCH_CHECK(false, "nala_attention: q is on ", q.device(), " but this nala was built without CUDA kernels");
#endif
  }
  return nala_backward_cpu(q, k, v, state.S, state.z, state.den, grad_o, opt);
}

namespace {

struct NalaAttentionFunction : public torch::autograd::Function<NalaAttentionFunction> {
  // save_state: a backward may follow (decided before apply(), where grad mode is still visible);
  // recompute: the backward recomputes S, z, den from q, k, v instead of keeping them
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const NalaOptions& opt, bool save_state, bool recompute) {
    NalaForward r = nala_attention_forward(q, k, v, opt, save_state && !recompute);
    if (recompute) r.S = r.z = r.den = at::Tensor();  // (the chunked CUDA kernels and the CPU make them anyway)
    ctx->save_for_backward({q, k, v, r.S, r.z, r.den});
    save_nala_options(ctx, opt);
    return r.o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const NalaOptions opt = saved_nala_options(ctx);
    NalaForward state{at::Tensor(), saved[3], saved[4], saved[5]};
    if (!state.S.defined()) {  // recomputed: the forward's state phase once more (its output o is dropped)
      state = nala_attention_forward(saved[0], saved[1], saved[2], opt, true);  // S (B, H, Fp, Dp) float32 on CUDA, (B, H, F, d) on the CPU
      ops::count_recomputation();
    }
    auto d = nala_attention_backward(saved[0], saved[1], saved[2], state, grads[0], opt);
    return {std::get<0>(d), std::get<1>(d), std::get<2>(d), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor nala_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt) {
  check_qkv(q, k, v, "nala_attention");
  check_options(opt, "nala_attention");
  const bool save_state = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  return NalaAttentionFunction::apply(q, k, v, opt, save_state, save_state && ops::recompute_saved());
}

}  // namespace nala::attention
