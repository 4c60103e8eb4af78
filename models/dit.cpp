#include "models/dit.h"
#include "models/guidance.h"
#include "ops/block_ops.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>

#include "ops/fused_ops.h"
#include "ops/linear.h"
#include "ops/linear_fp8.h"
#include "ops/mlp.h"
#include "ops/patch_embed.h"

namespace nala::models {

at::Tensor timestep_embedding(const at::Tensor& t, int64_t dim, double max_period) {
  const int64_t half = dim / 2;
  auto opt = t.options().dtype(at::kFloat);
  at::Tensor freqs = at::exp(-std::log(max_period) * at::arange(0, half, opt) / double(half));  // (half,)
  at::Tensor args = t.to(at::kFloat).unsqueeze(1) * freqs.unsqueeze(0);                        // (N, half)
  at::Tensor emb = at::cat({at::cos(args), at::sin(args)}, -1);                                 // (N, 2·half) cos first
  if (dim % 2) emb = at::cat({emb, at::zeros_like(emb.narrow(1, 0, 1))}, -1);
  return emb;
}

at::Tensor sincos_pos_embed_2d(int64_t dim, int64_t grid_h, int64_t grid_w) {
  TORCH_CHECK(dim % 4 == 0, "sin-cos position embedding needs a dimension divisible by 4, got ", dim);
  const int64_t q = dim / 4;
  auto o = at::TensorOptions().dtype(at::kDouble);
  at::Tensor omega = 1.0 / at::pow(10000.0, at::arange(q, o) / double(q));       // (D/4,)
  at::Tensor rows = at::arange(grid_h, o).repeat_interleave(grid_w);             // (T,) row i of token n
  at::Tensor cols = at::arange(grid_w, o).repeat({grid_h});                      // (T,) column j
  at::Tensor oc = cols.unsqueeze(1) * omega, orow = rows.unsqueeze(1) * omega;   // (T, D/4)
  // the column comes first (np.meshgrid(grid_w, grid_h) puts w in grid[0]); sin before cos
  return at::cat({at::sin(oc), at::cos(oc), at::sin(orow), at::cos(orow)}, 1).to(at::kFloat);  // (T, D)
}

TimestepEmbedder::TimestepEmbedder(int64_t hidden, int64_t freq_dim_) : freq_dim(freq_dim_) {
  mlp = register_module("mlp", torch::nn::Sequential(torch::nn::Linear(freq_dim, hidden), torch::nn::SiLU(),
                                                     torch::nn::Linear(hidden, hidden)));
}

at::Tensor TimestepEmbedder::forward(const at::Tensor& t) {
  at::Tensor f = timestep_embedding(t, freq_dim);                                 // (N, 256)
  return mlp->forward(f.to(mlp->parameters()[0].scalar_type()));                  // (N, D)
}

LabelEmbedder::LabelEmbedder(int64_t num_classes_, int64_t hidden, double dropout_) : num_classes(num_classes_), dropout(dropout_) {
  embedding_table = register_module("embedding_table", torch::nn::Embedding(num_classes + (dropout > 0 ? 1 : 0), hidden));
}

at::Tensor LabelEmbedder::forward(const at::Tensor& y, bool train, const at::Tensor& force_drop) {
  at::Tensor labels = y;
  if ((train && dropout > 0) || force_drop.defined()) {
    at::Tensor drop = force_drop.defined() ? (force_drop == 1) : (at::rand({y.size(0)}, y.options().dtype(at::kFloat)) < dropout);
    labels = at::where(drop, at::full_like(y, num_classes), y);
  }
  return embedding_table->forward(labels);  // (N, D)
}

Mlp::Mlp(int64_t dim, int64_t hidden) {
  fc1 = register_module("fc1", torch::nn::Linear(dim, hidden));
  fc2 = register_module("fc2", torch::nn::Linear(hidden, dim));
}

at::Tensor Mlp::forward(const at::Tensor& x) {
  return ops::mlp(*fc1, *fc2, x);  // (N, T, D)
}

bool Mlp::takes_fp8_input() const { return ops::fp8_weight(fc1->weight) != nullptr && fc1->bias.defined(); }

at::Tensor Mlp::forward_fp8(const ops::Fp8Input& x) {
  return ops::mlp(*fc1, *fc2, x);  // (N, T, D)
}

namespace {
torch::nn::LayerNorm plain_layer_norm(int64_t d) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).elementwise_affine(false).eps(1e-6));
}
// adaLN_modulation(c), the module's SiLU then its Linear, with the Linear through ops::linear: in
// training its own autograd operation (the step's weight casts, ops/weight_casts.h; the bias gradient
// summed in float32), elsewhere at::linear as the module's forward computes it. The module stays for
// its checkpoint keys (adaLN_modulation.1.weight, .bias).
at::Tensor adaln(torch::nn::Sequential& m, const at::Tensor& c) {
  return ops::linear(*m[1]->as<torch::nn::Linear>(), at::silu(c));  // (N, k·D)
}

}  // namespace

DiTBlock::DiTBlock(const ModelConfig& c) {
  const int64_t D = c.hidden;
  norm1 = register_module("norm1", plain_layer_norm(D));
  attn = register_module("attn", attention::make_token_mixer(c.attention, D, c.heads, c.nala));
  norm2 = register_module("norm2", plain_layer_norm(D));
  mlp = register_module("mlp", std::make_shared<Mlp>(D, int64_t(D * c.mlp_ratio)));
  adaLN_modulation = register_module("adaLN_modulation", torch::nn::Sequential(torch::nn::SiLU(), torch::nn::Linear(D, 6 * D)));
}

std::vector<at::Tensor> DiTBlock::modulation(const at::Tensor& c) {
  return adaln(adaLN_modulation, c).chunk(6, 1);  // shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp: (N, D)
}

at::Tensor DiTBlock::forward(const at::Tensor& x, const at::Tensor& c, int64_t grid_h, int64_t grid_w) {
  return forward(x, modulation(c), grid_h, grid_w);  // (N, T, D)
}

at::Tensor DiTBlock::forward(const at::Tensor& x, const std::vector<at::Tensor>& m, int64_t grid_h, int64_t grid_w) {
  TORCH_CHECK(m.size() == 6, "DiTBlock: the modulation has 6 parts, got ", m.size());
  // x + gate·mixer(LayerNorm(x)·(1 + scale) + shift), twice (DiT models.py:115-119); ops/block_ops.h fuses the chains
  const double eps = norm1->options.eps();
  if (ops::fp8_ln_fused() && !at::GradMode::is_enabled() && attn->takes_fp8_input() && mlp->takes_fp8_input()) {
    // FP8 sampling: LayerNorm-modulate writes the e4m3 rows that qkv and fc1 read (ops/linear_fp8.h
    // layer_norm_modulate_fp8), not the modulated tensor; the same result as below
    const at::Tensor h = ops::gated_residual(x, m[2], attn->forward_fp8(ops::layer_norm_modulate_fp8(x, m[0], m[1], eps), grid_h, grid_w));  // (N, T, D)
    return ops::gated_residual(h, m[5], mlp->forward_fp8(ops::layer_norm_modulate_fp8(h, m[3], m[4], eps)));  // (N, T, D)
  }
  const auto a = ops::layer_norm_modulate_residual(x, m[0], m[1], eps);                          // (N, T, D) ×2
  const at::Tensor h = ops::gated_residual(a.residual, m[2], attn->forward(a.modulated, grid_h, grid_w));  // (N, T, D)
  const auto b = ops::layer_norm_modulate_residual(h, m[3], m[4], eps);                          // (N, T, D) ×2
  return ops::gated_residual(b.residual, m[5], mlp->forward(b.modulated));                       // (N, T, D)
}

DiTBlock::PendingResidual DiTBlock::forward_chained(PendingResidual in, const std::vector<at::Tensor>& m, int64_t grid_h, int64_t grid_w) {
  TORCH_CHECK(m.size() == 6, "DiTBlock: the modulation has 6 parts, got ", m.size());
  const double eps = norm1->options.eps();
  if (ops::fp8_ln_fused() && !at::GradMode::is_enabled() && attn->takes_fp8_input() && mlp->takes_fp8_input()) {
    // FP8 sampling: each LayerNorm-modulate writes the e4m3 rows the next GEMM reads, as in forward
    ops::ResidualAndFp8Input b;
    {
      ops::ResidualAndFp8Input a = in.gate.defined() ? ops::gated_residual_layer_norm_modulate_fp8(in.x, in.gate, in.y, m[0], m[1], eps)
                                                     : ops::ResidualAndFp8Input{in.x, ops::layer_norm_modulate_fp8(in.x, m[0], m[1], eps)};
      in = PendingResidual{};  // the sum lives in a.residual now: the pending x and y go before the block's work
      b = ops::gated_residual_layer_norm_modulate_fp8(a.residual, m[2], attn->forward_fp8(a.modulated, grid_h, grid_w), m[3], m[4], eps);
    }  // a's tensors go before the MLP, whose hidden layer is the block's largest
    return {b.residual, m[5], mlp->forward_fp8(b.modulated)};  // (N, T, D), (N, D), (N, T, D)
  }
  ops::ModulatedAndResidual b;
  {
    const ops::ModulatedAndResidual a = in.gate.defined() ? ops::gated_residual_layer_norm_modulate(in.x, in.gate, in.y, m[0], m[1], eps)
                                                          : ops::layer_norm_modulate_residual(in.x, m[0], m[1], eps);  // (N, T, D) ×2
    in = PendingResidual{};  // as above
    b = ops::gated_residual_layer_norm_modulate(a.residual, m[2], attn->forward(a.modulated, grid_h, grid_w), m[3], m[4], eps);
  }
  return {b.residual, m[5], mlp->forward(b.modulated)};  // (N, T, D), (N, D), (N, T, D)
}

FinalLayer::FinalLayer(int64_t hidden, int64_t patch, int64_t out_channels) {
  norm_final = register_module("norm_final", plain_layer_norm(hidden));
  linear = register_module("linear", torch::nn::Linear(hidden, patch * patch * out_channels));
  adaLN_modulation = register_module("adaLN_modulation", torch::nn::Sequential(torch::nn::SiLU(), torch::nn::Linear(hidden, 2 * hidden)));
}

std::vector<at::Tensor> FinalLayer::modulation(const at::Tensor& c) {
  return adaln(adaLN_modulation, c).chunk(2, 1);  // shift, scale: (N, D)
}

at::Tensor FinalLayer::forward(const at::Tensor& x, const std::vector<at::Tensor>& m) {
  TORCH_CHECK(m.size() == 2, "FinalLayer: the modulation has 2 parts, got ", m.size());
  return ops::linear(linear, ops::layer_norm_modulate(x, m[0], m[1], norm_final->options.eps()));  // (N, T, p·p·outC)
}

at::Tensor FinalLayer::forward_chained(DiTBlock::PendingResidual in, const std::vector<at::Tensor>& m) {
  TORCH_CHECK(m.size() == 2, "FinalLayer: the modulation has 2 parts, got ", m.size());
  const double eps = norm_final->options.eps();
  const at::Tensor a = in.gate.defined() ? ops::gated_residual_layer_norm_modulate(in.x, in.gate, in.y, m[0], m[1], eps).modulated
                                         : ops::layer_norm_modulate(in.x, m[0], m[1], eps);  // (N, T, D)
  in = DiTBlock::PendingResidual{};
  return ops::linear(linear, a);                                                           // (N, T, p·p·outC)
}

namespace {
std::atomic<int> g_patch_embed_gemm{-1};  // −1: not read from NALA_PATCH_EMBED yet
std::atomic<int64_t> g_stacked_modulation_calls{0};
}  // namespace

bool patch_embed_gemm_of(const std::string& v) {
  if (v.empty() || v == "gemm") return true;
  if (v == "conv") return false;
  throw std::runtime_error("NALA_PATCH_EMBED='" + v + "' is not one of gemm, conv");
}

bool patch_embed_gemm() {
  int s = g_patch_embed_gemm.load();
  if (s < 0) {
    const char* v = std::getenv("NALA_PATCH_EMBED");
    const int from_env = patch_embed_gemm_of(v ? v : "") ? 1 : 0;
    s = g_patch_embed_gemm.compare_exchange_strong(s, from_env) ? from_env : s;  // a setter in between wins
  }
  return s == 1;
}

void set_patch_embed_gemm(bool on) { g_patch_embed_gemm = on ? 1 : 0; }

PatchEmbed::PatchEmbed(int64_t in_channels, int64_t hidden, int64_t patch) : patch_(patch) {
  proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, hidden, patch).stride(patch).bias(true)));
}

// The convolution's windows do not overlap, so each token is one patch times the weight. As a
// convolution (cuDNN, NCHW) the output came out (N, D, T) and was transposed: the sum with pos_embed
// and every kernel of the first block then read or wrote that strided layout (five strided passes
// over (N, T, D) and the convolution's own layout changes: ≈ 1.3 ms of a 38.6 ms DiT-S/2 training
// step on an H100, docs/benchmarks.md, thirtieth session). The GEMM writes (N, T, D) directly.
at::Tensor PatchEmbed::forward(const at::Tensor& x) {
  if (!patch_embed_gemm()) return proj->forward(x).flatten(2).transpose(1, 2);  // (N, T, D) strided: NALA_PATCH_EMBED=conv
  return ops::linear(patches(x), proj->weight.flatten(1), proj->bias);  // (N, T, D)
}

at::Tensor PatchEmbed::patches(const at::Tensor& x) const {
  const int64_t p = patch_;
  TORCH_CHECK(x.dim() == 4 && x.size(2) % p == 0 && x.size(3) % p == 0, "PatchEmbed: input ", x.sizes(), " is not (N, C, H, W) with H and W multiples of ", p);
  const int64_t n = x.size(0), c = x.size(1), gh = x.size(2) / p, gw = x.size(3) / p;
  // each patch's values ordered (channel, row, column), as the weight (D, C, p, p) flattens
  return x.reshape({n, c, gh, p, gw, p}).permute({0, 2, 4, 1, 3, 5}).reshape({n, gh * gw, c * p * p});  // (N, T, C·p·p)
}

at::Tensor PatchEmbed::forward_plus(const at::Tensor& x, const at::Tensor& pos) {
  if (patch_embed_gemm()) {
    const at::Tensor ps = patches(x);  // (N, T, C·p·p)
    if (ops::patch_embed_pos_applies(ps, proj->weight.flatten(1), proj->bias, pos)) return ops::patch_embed_pos(ps, proj->weight.flatten(1), proj->bias, pos);
  }
  return forward(x) + pos;  // (N, T, D)
}

DiT::DiT(const ModelConfig& config) : config_(config) {
  validate(config_);
  const auto& c = config_;
  pos_embed = register_parameter("pos_embed", at::zeros({1, c.tokens(), c.hidden}), /*requires_grad=*/false);
  x_embedder = register_module("x_embedder", std::make_shared<PatchEmbed>(c.in_channels, c.hidden, c.patch));
  t_embedder = register_module("t_embedder", std::make_shared<TimestepEmbedder>(c.hidden));
  y_embedder = register_module("y_embedder", std::make_shared<LabelEmbedder>(c.num_classes, c.hidden, c.class_dropout));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.depth; ++i) blocks->push_back(std::make_shared<DiTBlock>(c));
  final_layer = register_module("final_layer", std::make_shared<FinalLayer>(c.hidden, c.patch, c.out_channels()));
  initialize_weights();
}

void DiT::initialize_weights() {
  torch::NoGradGuard ng;
  for (auto& m : modules(/*include_self=*/false))
    if (auto* lin = m->as<torch::nn::Linear>()) {
      torch::nn::init::xavier_uniform_(lin->weight);
      if (lin->bias.defined()) lin->bias.zero_();
    }
  pos_embed.copy_(sincos_pos_embed_2d(config_.hidden, config_.grid(), config_.grid()).unsqueeze(0));
  // patch embedding: xavier on the weight viewed as (D, C·p·p) (DiT commit c9f545c)
  at::Tensor w = x_embedder->proj->weight;
  w.copy_(torch::nn::init::xavier_uniform_(w.detach().view({w.size(0), -1}).clone()).view_as(w));
  x_embedder->proj->bias.zero_();
  torch::nn::init::normal_(y_embedder->embedding_table->weight, 0.0, 0.02);
  for (int i : {0, 2}) torch::nn::init::normal_(t_embedder->mlp[i]->as<torch::nn::Linear>()->weight, 0.0, 0.02);
  for (auto& b : *blocks) {
    auto* lin = b->as<DiTBlock>()->adaLN_modulation[1]->as<torch::nn::Linear>();
    lin->weight.zero_();
    lin->bias.zero_();
  }
  auto* fl = final_layer->adaLN_modulation[1]->as<torch::nn::Linear>();
  fl->weight.zero_();
  fl->bias.zero_();
  final_layer->linear->weight.zero_();
  final_layer->linear->bias.zero_();
}

at::Tensor DiT::unpatchify(const at::Tensor& x, int64_t gh, int64_t gw) const {
  const int64_t p = config_.patch, c = config_.out_channels(), n = x.size(0);
  // each token's vector is ordered [py][px][channel] (DiT models.py:218-231)
  return x.reshape({n, gh, gw, p, p, c}).permute({0, 5, 1, 3, 2, 4}).reshape({n, c, gh * p, gw * p});  // (N, C, H, W)
}

at::Tensor DiT::forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& y, const at::Tensor& force_drop) {
  const auto& c = config_;
  TORCH_CHECK(x.dim() == 4 && x.size(1) == c.in_channels, c.name, ": x must be (N, ", c.in_channels, ", H, W), got ", x.sizes());
  TORCH_CHECK(x.size(2) == c.input_size && x.size(3) == c.input_size, c.name, ": input is ", x.size(2), "x", x.size(3),
              " but the model was built for ", c.input_size, "x", c.input_size, " (pos_embed has ", c.tokens(), " tokens)");
  TORCH_CHECK(t.dim() == 1 && t.size(0) == x.size(0) && y.dim() == 1 && y.size(0) == x.size(0), c.name,
              ": t and y must be (N,) with N = ", x.size(0), ", got t ", t.sizes(), ", y ", y.sizes());
  const int64_t gh = c.grid(), gw = c.grid();
  at::Tensor h = x_embedder->forward_plus(x, pos_embed);                               // (N, T, D)
  at::Tensor cond = t_embedder->forward(t) + y_embedder->forward(y, is_training(), force_drop);  // (N, D)
  // each block's modulation: made in the block from cond, or all at once while training (stacked_modulations)
  const bool stacked = ops::stacked_modulation() && at::GradMode::is_enabled();
  const std::vector<at::Tensor> mods = stacked ? stacked_modulations(cond) : std::vector<at::Tensor>{};  // (N, D) each
  const auto block_mod = [&](size_t i) {
    return stacked ? std::vector<at::Tensor>(mods.begin() + 6 * i, mods.begin() + 6 * i + 6) : blocks[i]->as<DiTBlock>()->modulation(cond);
  };
  const auto final_mod = [&] { return stacked ? std::vector<at::Tensor>(mods.end() - 2, mods.end()) : final_layer->modulation(cond); };
  at::Tensor out;
  if (ops::residual_norm_fused()) {
    // each gated residual added with the LayerNorm-modulate after it (DiTBlock::forward_chained)
    DiTBlock::PendingResidual p{std::move(h), {}, {}};
    for (size_t i = 0; i < blocks->size(); ++i) p = blocks[i]->as<DiTBlock>()->forward_chained(std::move(p), block_mod(i), gh, gw);  // the old pending sum freed inside
    out = unpatchify(final_layer->forward_chained(std::move(p), final_mod()), gh, gw);  // (N, outC, H, W)
  } else {
    for (size_t i = 0; i < blocks->size(); ++i) h = blocks[i]->as<DiTBlock>()->forward(h, block_mod(i), gh, gw);  // (N, T, D)
    out = unpatchify(final_layer->forward(h, final_mod()), gh, gw);                                               // (N, outC, H, W)
  }
  if (c.family == "SiT" && c.learn_sigma) out = out.narrow(1, 0, c.in_channels);     // SiT models.py:245-246
  return out;
}

at::Tensor DiT::forward_with_cfg(const at::Tensor& x, const at::Tensor& t, const at::Tensor& y, double cfg_scale, int64_t guide_channels) {
  TORCH_CHECK(x.size(0) % 2 == 0, "forward_with_cfg needs an even batch (conditional half, unconditional half), got ", x.size(0));
  const int64_t half = x.size(0) / 2;
  at::Tensor hx = x.narrow(0, 0, half);
  at::Tensor out = forward(at::cat({hx, hx}), t, y);                                  // (N, C', H, W)
  const int64_t g = guide_channels < 0 ? config_.in_channels : guide_channels;  // all: the in_channels of eps / velocity
  at::Tensor guided = guided_output(out, cfg_scale, g);                               // (N/2, C', H, W)
  // the official layout: both halves carry the guided channels, each keeps its own other channels
  at::Tensor second = g == out.size(1) ? guided : at::cat({guided.narrow(1, 0, g), out.narrow(0, half, half).narrow(1, g, out.size(1) - g)}, 1);
  return at::cat({guided, second});                                                   // (N, C', H, W)
}

// One SiLU and one GEMM for the 6·depth + 2 modulation vectors: c (N, D) times the adaLN weights
// stacked in block order, [W_0; …; W_{depth−1}; W_final] (6·depth·D + 2D, D), plus the stacked biases.
// At DiT-S/2's batch of 256 each block's own GEMMs are small (M = 256) and its SiLU, bias sum and
// gradient adds launch-bound: 13 forward GEMMs, 26 backward GEMMs, 13 SiLU forwards and backwards,
// 13 bias sums and 12 gradient adds for c become 3 GEMMs, one SiLU each way, one bias sum, the
// biases' stacking copy and one copy for the split's backward. The weights are read in place where the
// training step's casts lie one after another (NALA_STACKED_CASTS=1 lays them out so:
// stacked_modulation_weights), else copied into one matrix. Each weight's part of the stacked gradient is a row range of it, which the
// casts (ops/weight_casts.h) keep as they keep a layer's own.
std::vector<at::Tensor> DiT::stacked_modulations(const at::Tensor& c) {
  g_stacked_modulation_calls.fetch_add(1, std::memory_order_relaxed);
  std::vector<at::Tensor> w, b;
  std::vector<int64_t> parts;
  for (auto* l : modulation_linears()) {
    w.push_back(l->weight);                                           // (k·D, D)
    b.push_back(l->bias);                                             // (k·D)
    parts.insert(parts.end(), l->weight.size(0) / c.size(1), c.size(1));
  }
  // the weights as one operand: a view of the step's casts where they are stacked, else a copy
  const at::Tensor stacked = ops::autocast_stacked_gemm_operand(w);  // (6·depth·D + 2D, D)
  const at::Tensor all = ops::linear(at::silu(c), stacked, at::cat(b));                   // (N, 6·depth·D + 2D)
  return at::split_with_sizes(all, parts, 1);                                             // (N, D) each, one backward node for all
}

int64_t DiT::stacked_modulation_calls() { return g_stacked_modulation_calls.load(std::memory_order_relaxed); }

std::vector<torch::nn::LinearImpl*> DiT::modulation_linears() {
  std::vector<torch::nn::LinearImpl*> v;
  for (auto& blk : *blocks) v.push_back(blk->as<DiTBlock>()->adaLN_modulation[1]->as<torch::nn::Linear>());
  v.push_back(final_layer->adaLN_modulation[1]->as<torch::nn::Linear>());
  return v;
}

std::vector<at::Tensor> DiT::stacked_modulation_weights() {
  std::vector<at::Tensor> v;
  for (auto* l : modulation_linears()) v.push_back(l->weight);  // (k·D, D)
  return v;
}

int64_t DiT::use_fp8_linears() {
  std::vector<torch::nn::LinearImpl*> layers;
  for (auto& b : *blocks)
    for (const auto& item : b->named_modules("", /*include_self=*/false))
      if (auto* l = item.value()->as<torch::nn::Linear>(); l && item.key().rfind("adaLN_modulation", 0) != 0) layers.push_back(l);
  layers.push_back(final_layer->linear.get());
  return ops::use_fp8_linears(layers);
}

int64_t DiT::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace nala::models
