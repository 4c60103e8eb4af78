#include "attention/blocks.h"

#include <ATen/ATen.h>

#include "attention/feature_maps.h"
#include "attention/gated_tail.h"
#include "ops/fused_ops.h"
#include "ops/linear.h"
#include "attention/nala_attention.h"
#include "attention/nala_reference.h"
#include "ops/split_heads.h"

namespace nala::attention {

SoftmaxAttention::SoftmaxAttention(int64_t dim, int64_t heads) : heads_(heads) {
  TORCH_CHECK(dim % heads == 0, "attention: hidden size ", dim, " is not divisible by ", heads, " heads");
  qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(dim, 3 * dim).bias(true)));
  proj = register_module("proj", torch::nn::Linear(dim, dim));
}

at::Tensor TokenMixer::forward_fp8(const ops::Fp8Input&, int64_t, int64_t) {
  TORCH_CHECK(false, "this token mixer does not take an FP8 input (takes_fp8_input() is false)");
}

at::Tensor SoftmaxAttention::forward(const at::Tensor& x, int64_t, int64_t) {
  return attend_heads(ops::linear_split_heads(*qkv, x, 3, heads_), x.size(0), x.size(1), x.size(2));  // (B, N, D)
}

bool SoftmaxAttention::takes_fp8_input() const { return ops::fp8_weight(qkv->weight) != nullptr; }

at::Tensor SoftmaxAttention::forward_fp8(const ops::Fp8Input& x, int64_t, int64_t) {
  const ops::Fp8Rows* w = ops::fp8_weight(qkv->weight);
  TORCH_CHECK(w && x.shape.size() == 3, "SoftmaxAttention: an FP8 input needs qkv registered for FP8 and a (B, N, D) shape, got ",
              c10::IntArrayRef(x.shape));
  return attend_projected(ops::linear_fp8(x, *w, qkv->bias), x.shape[0], x.shape[1], x.shape[2]);  // (B, N, D)
}

at::Tensor SoftmaxAttention::attend_projected(const at::Tensor& qkv_out, int64_t B, int64_t N, int64_t D) {
  // strided views; the backward writes the projection's gradient in one pass (ops/split_heads.h)
  return attend_heads(ops::split_heads(qkv_out.view({B, N, 3, heads_, D / heads_})), B, N, D);  // (B, N, D)
}

at::Tensor SoftmaxAttention::attend_heads(const std::vector<at::Tensor>& t, int64_t B, int64_t N, int64_t D) {
  at::Tensor o = softmax_attention(t[0].transpose(1, 2), t[1].transpose(1, 2), t[2].transpose(1, 2));  // (B, H, N, d)
  return ops::linear(proj, o.transpose(1, 2).reshape({B, N, D}));                           // (B, N, D)
}

GatedNalaAttention::GatedNalaAttention(int64_t dim, int64_t heads, const GatedNalaConfig& cfg) : heads_(heads), cfg_(cfg) {
  TORCH_CHECK(dim % heads == 0, "attention: hidden size ", dim, " is not divisible by ", heads, " heads");
  TORCH_CHECK(cfg.lepe_kernel == 0 || cfg.lepe_kernel % 2 == 1, "LePE kernel size must be odd (or 0 to disable), got ", cfg.lepe_kernel);
  qkvg = register_module("qkvg", torch::nn::Linear(torch::nn::LinearOptions(dim, 4 * dim).bias(true)));
  if (cfg.lepe_kernel > 0)
    lepe = register_module("lepe", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, cfg.lepe_kernel)
                                                         .padding(cfg.lepe_kernel / 2).groups(dim).bias(true)));
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(1e-5).elementwise_affine(true)));
  proj = register_module("proj", torch::nn::Linear(dim, dim));
}

at::Tensor GatedNalaAttention::forward(const at::Tensor& x, int64_t grid_h, int64_t grid_w) {
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2);
  TORCH_CHECK(N == grid_h * grid_w, "GatedNalaAttention: ", N, " tokens do not fill a ", grid_h, "x", grid_w, " grid");
  if (x.is_cuda() && ops::fused_block_ops() && ops::recompute_saved() && at::GradMode::is_enabled() && proj->weight.requires_grad())
    return forward_recomputing(x, grid_h, grid_w);
  return mix_heads(ops::linear_split_heads(*qkvg, x, 4, heads_, 2), B, N, D, grid_h, grid_w);  // (B, N, D)
}

bool GatedNalaAttention::takes_fp8_input() const { return ops::fp8_weight(qkvg->weight) != nullptr; }

at::Tensor GatedNalaAttention::forward_fp8(const ops::Fp8Input& x, int64_t grid_h, int64_t grid_w) {
  const ops::Fp8Rows* w = ops::fp8_weight(qkvg->weight);
  TORCH_CHECK(w && x.shape.size() == 3, "GatedNalaAttention: an FP8 input needs qkvg registered for FP8 and a (B, N, D) shape, got ",
              c10::IntArrayRef(x.shape));
  TORCH_CHECK(x.shape[1] == grid_h * grid_w, "GatedNalaAttention: ", x.shape[1], " tokens do not fill a ", grid_h, "x", grid_w, " grid");
  return mix_projected(ops::linear_fp8(x, *w, qkvg->bias), x.shape[0], x.shape[1], x.shape[2], grid_h, grid_w);  // (B, N, D)
}

at::Tensor GatedNalaAttention::mix_projected(const at::Tensor& qkvg_out, int64_t B, int64_t N, int64_t D, int64_t grid_h, int64_t grid_w) {
  // strided views; the backward writes the projection's gradient in one pass (ops/split_heads.h), v's
  // two gradients (attention, LePE) added in it: t[4] is v's second view, for the tail
  return mix_heads(ops::split_heads(qkvg_out.view({B, N, 4, heads_, D / heads_}), 2), B, N, D, grid_h, grid_w);  // (B, N, D)
}

// t: q, k, v, g and v's second view, 5 × (B, N, H, d) strided views
at::Tensor GatedNalaAttention::mix_heads(const std::vector<at::Tensor>& t, int64_t B, int64_t N, int64_t D, int64_t grid_h, int64_t grid_w) {
  at::Tensor q = t[0].transpose(1, 2);                                    // (B, H, N, d) strided view
  at::Tensor k = t[1].transpose(1, 2);                                    // (B, H, N, d)
  at::Tensor v = t[2].transpose(1, 2);                                    // (B, H, N, d)
  at::Tensor g = t[3].reshape({B, N, D});                                 // (B, N, D) strided view
  if (lepe && !cfg_.rope && q.is_cuda() && ops::fused_block_ops() && !ops::recompute_saved() && lepe_in_attention() > 0)
    return ops::linear(proj, nala_mixer(q, k, v, t[4].reshape({B, N, D}), g, lepe->weight, lepe->bias, norm->weight, norm->bias, cfg_.nala, grid_h,
                                        grid_w, norm->options.eps(), lepe_in_attention()));  // (B, N, D)
  at::Tensor o = attend(q, k, v, grid_h, grid_w);                         // (B, H, N, d)
  // LePE + residual + LayerNorm + SiLU gate: one fused operation on CUDA (attention/gated_tail.h)
  at::Tensor y = gated_tail(o, t[4].reshape({B, N, D}), g, lepe ? lepe->weight : at::Tensor(), lepe ? lepe->bias : at::Tensor(), norm->weight,
                            norm->bias, grid_h, grid_w, norm->options.eps());  // (B, N, D)
  return ops::linear(proj, y);                                                // (B, N, D)
}

at::Tensor GatedNalaAttention::attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t grid_h, int64_t grid_w) {
  return cfg_.rope ? nala_attention_rope(q, k, v, cfg_.nala, grid_h, grid_w) : nala_attention(q, k, v, cfg_.nala);  // (B, H, N, d)
}

// NALA_RECOMPUTE=1 (ops/fused_ops.h): q, k, v from the qkv rows of qkvg, then the attention, the
// gate's rows, the tail and the output projection as one operation that keeps only q, k, v and x
// (nala_mixer_recomputing: its backward recomputes the attention's state and output, u, y and g).
// With RoPE the attention stays apart (it recomputes its state; the tail keeps u). The same
// parameters, the same result.
at::Tensor GatedNalaAttention::forward_recomputing(const at::Tensor& x, int64_t grid_h, int64_t grid_w) {
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2), d = D / heads_;
  const at::Tensor w = ops::autocast_gemm_operand(qkvg->weight);  // (4D, D), cast once a forward under autocast
  const at::Tensor xc = ops::autocast_gemm_operand(x);             // (B, N, D)
  at::Tensor qkv = ops::linear_op(xc, w.narrow(0, 0, 3 * D), qkvg->bias.narrow(0, 0, 3 * D));  // (B, N, 3D)
  const auto t = ops::split_heads(qkv.view({B, N, 3, heads_, d}), 2);                          // 4 × (B, N, H, d) strided views
  const at::Tensor lepe_w = lepe ? lepe->weight : at::Tensor(), lepe_b = lepe ? lepe->bias : at::Tensor();
  if (!cfg_.rope)
    return nala_mixer_recomputing(t[0].transpose(1, 2), t[1].transpose(1, 2), t[2].transpose(1, 2), t[3].reshape({B, N, D}), xc,
                                  w.narrow(0, 3 * D, D), qkvg->bias.narrow(0, 3 * D, D), lepe_w, lepe_b, norm->weight, norm->bias, proj->weight,
                                  proj->bias, cfg_.nala, grid_h, grid_w, norm->options.eps());  // (B, N, D)
  at::Tensor o = attend(t[0].transpose(1, 2), t[1].transpose(1, 2), t[2].transpose(1, 2), grid_h, grid_w);  // (B, H, N, d)
  return gated_tail_proj_gate_fused(o, t[3].reshape({B, N, D}), xc, w.narrow(0, 3 * D, D), qkvg->bias.narrow(0, 3 * D, D), lepe_w, lepe_b,
                                    norm->weight, norm->bias, proj->weight, proj->bias, grid_h, grid_w, norm->options.eps());  // (B, N, D)
}

std::shared_ptr<TokenMixer> make_token_mixer(const std::string& kind, int64_t dim, int64_t heads, const GatedNalaConfig& cfg) {
  if (kind == "softmax") return std::make_shared<SoftmaxAttention>(dim, heads);
  GatedNalaConfig c = cfg;
  c.nala.feature_map = parse_feature_map(kind);
  return std::make_shared<GatedNalaAttention>(dim, heads, c);
}

}  // namespace nala::attention
