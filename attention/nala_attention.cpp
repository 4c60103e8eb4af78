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
}

bool nala_cuda_kernels_available() {
#ifdef NALA_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

// The options travel through autograd's saved data as named entries (an IValue map holds no structs).
void save_options(torch::autograd::AutogradContext* ctx, const NalaOptions& o) {
  ctx->saved_data["feature_map"] = int64_t(o.feature_map);
  ctx->saved_data["lambda"] = o.lambda;
  ctx->saved_data["tau"] = o.tau;
  ctx->saved_data["alpha"] = o.alpha;
  ctx->saved_data["eps"] = o.eps;
  ctx->saved_data["eps_norm"] = o.eps_norm;
  ctx->saved_data["focus_power"] = o.focus_power;
}

NalaOptions saved_options(torch::autograd::AutogradContext* ctx) {
  NalaOptions o;
  o.feature_map = static_cast<FeatureMap>(ctx->saved_data["feature_map"].toInt());
  o.lambda = ctx->saved_data["lambda"].toDouble();
  o.tau = ctx->saved_data["tau"].toDouble();
  o.alpha = ctx->saved_data["alpha"].toDouble();
  o.eps = ctx->saved_data["eps"].toDouble();
  o.eps_norm = ctx->saved_data["eps_norm"].toDouble();
  o.focus_power = ctx->saved_data["focus_power"].toDouble();
  return o;
}

NalaForward forward_kernels(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt, bool save_state) {
  if (q.is_cuda()) {
#ifdef NALA_WITH_CUDA
    return nala_forward_cuda(q, k, v, opt, save_state);
#else
    TORCH_CHECK(false, "nala_attention: q is on ", q.device(), " but this nala was built without CUDA kernels");
#endif
  }
  return nala_forward_cpu(q, k, v, opt);
}

struct NalaAttentionFunction : public torch::autograd::Function<NalaAttentionFunction> {
  // save_state: a backward may follow (decided before apply(), where grad mode is still visible);
  // recompute: the backward recomputes S, z, den from q, k, v instead of keeping them
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const NalaOptions& opt, bool save_state, bool recompute) {
    NalaForward r = forward_kernels(q, k, v, opt, save_state && !recompute);
    if (recompute) r.S = r.z = r.den = at::Tensor();  // (the chunked CUDA kernels and the CPU make them anyway)
    ctx->save_for_backward({q, k, v, r.S, r.z, r.den});
    save_options(ctx, opt);
    return r.o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const NalaOptions opt = saved_options(ctx);
    at::Tensor go = grads[0];
    if (!saved[3].defined()) {  // recomputed: the forward's state phase once more (its output o is dropped)
      NalaForward r = forward_kernels(saved[0], saved[1], saved[2], opt, true);
      ops::count_recomputation();
      saved[3] = r.S;    // (B, H, Fp, Dp) float32 on CUDA, (B, H, F, d) on the CPU
      saved[4] = r.z;    // (B, H, Fp)
      saved[5] = r.den;  // (B, H, N)
    }
    std::tuple<at::Tensor, at::Tensor, at::Tensor> d;
    if (saved[0].is_cuda()) {
#ifdef NALA_WITH_CUDA
      d = nala_backward_cuda(saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], go, opt);
#endif
    } else {
      d = nala_backward_cpu(saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], go, opt);
    }
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
