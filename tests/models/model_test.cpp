// DiT / SiT / NaLa models: parameter counts against the official models, the exact embedding
// layouts, unpatchify, zero initialisation, label dropout and both CFG modes.
#include <gtest/gtest.h>

#include <cmath>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "models/checkpoint.h"
#include "models/dit.h"
#include "ops/fused_ops.h"
#include "ops/linear_fp8.h"

using namespace nala::models;
using nala::io::state_dict;
using nala::io::load_state_dict;

TEST(ModelConfig, NamesAndErrors) {
  auto c = model_config("NaLaSiT-B/4");
  EXPECT_EQ(c.family, "SiT");
  EXPECT_EQ(c.attention, "nala");
  EXPECT_EQ(c.depth, 12);
  EXPECT_EQ(c.hidden, 768);
  EXPECT_EQ(c.patch, 4);
  try {
    model_config("DiT-XXL/2");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model 'DiT-XXL/2'"), std::string::npos);
  }
  c.input_size = 30;
  EXPECT_THROW(validate(c), std::runtime_error);
  c.input_size = 32;
  c.attention = "foo";  // names the value and every choice, softmax among them
  try {
    validate(c);
    FAIL();
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'foo'"), std::string::npos) << m;
    EXPECT_NE(m.find("softmax"), std::string::npos) << m;
    EXPECT_NE(m.find("nala-relu"), std::string::npos) << m;
  }
  c.attention = "softmax";
  EXPECT_NO_THROW(validate(c));
  auto back = config_from_json(config_to_json(model_config("NaLaDiT-S/2")));
  EXPECT_EQ(back.name, "NaLaDiT-S/2");
  EXPECT_EQ(back.nala.lepe_kernel, 5);
}

// Official parameter counts (docs/reference.md §1.1, computed from the shapes of models.py, pos_embed
// included), in millions rounded to 0.01.
TEST(DiT, ParameterCountsEqualTheOfficialModels) {
  const std::vector<std::pair<std::string, double>> counts = {
      {"DiT-S/2", 32.96}, {"DiT-S/4", 32.95}, {"DiT-S/8", 33.15}, {"DiT-B/2", 130.51}, {"DiT-B/4", 130.48}, {"DiT-B/8", 130.88},
      {"DiT-L/2", 458.10}, {"DiT-L/4", 458.05}, {"DiT-L/8", 458.59}, {"DiT-XL/2", 675.13}, {"DiT-XL/4", 675.07}, {"DiT-XL/8", 675.68}};
  for (auto& [name, millions] : counts) {
    DiT m(model_config(name));
    const double got = m.parameter_count() / 1e6;
    std::printf("%-9s %.4fM (official %.2fM)\n", name.c_str(), got, millions);
    EXPECT_NEAR(got, millions, 0.006) << name;
    if (name == "DiT-XL/2") EXPECT_EQ(m.parameter_count() - m.pos_embed.numel(), 674834720);  // docs/reference.md §1.1
  }
}

TEST(DiT, StateDictKeysAreTheOfficialOnes) {
  DiT m(model_config("DiT-XL/2"));
  auto sd = state_dict(m);
  EXPECT_EQ(sd.size(), 292u);  // docs/reference.md §1.8
  EXPECT_EQ(sd[0].first, "pos_embed");
  EXPECT_EQ(sd[1].first, "x_embedder.proj.weight");
  std::map<std::string, at::Tensor> m2(sd.begin(), sd.end());
  EXPECT_EQ(m2.at("blocks.27.adaLN_modulation.1.weight").sizes(), (at::IntArrayRef{6912, 1152}));
  EXPECT_EQ(m2.at("final_layer.linear.weight").sizes(), (at::IntArrayRef{32, 1152}));
  EXPECT_EQ(m2.at("y_embedder.embedding_table.weight").sizes(), (at::IntArrayRef{1001, 1152}));
  EXPECT_EQ(m2.at("t_embedder.mlp.2.weight").sizes(), (at::IntArrayRef{1152, 1152}));
  DiT n(model_config("NaLaDiT-S/2"));
  std::map<std::string, at::Tensor> n2;
  for (auto& [k, v] : state_dict(n)) n2[k] = v;
  EXPECT_EQ(n2.at("blocks.0.attn.qkvg.weight").sizes(), (at::IntArrayRef{1536, 384}));
  EXPECT_EQ(n2.at("blocks.0.attn.lepe.weight").sizes(), (at::IntArrayRef{384, 1, 5, 5}));
  EXPECT_TRUE(n2.count("blocks.11.attn.norm.weight"));
  EXPECT_TRUE(n2.count("blocks.11.mlp.fc2.bias"));
}

TEST(DiT, TimestepEmbeddingIsCosThenSin) {
  at::Tensor t = at::tensor({0.0f, 5.0f, 999.0f});
  at::Tensor e = timestep_embedding(t, 256);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k : {0, 1, 64, 127}) {
      const double f = std::exp(-std::log(10000.0) * k / 128.0), a = t[i].item<double>() * f;
      EXPECT_NEAR(e[i][k].item<double>(), std::cos(a), 2e-5);
      EXPECT_NEAR(e[i][128 + k].item<double>(), std::sin(a), 2e-5);
    }
}

TEST(DiT, PositionEmbeddingIsSinCosColumnFirst) {
  const int64_t D = 16, G = 3;
  at::Tensor pe = sincos_pos_embed_2d(D, G, G);  // (9, 16)
  for (int64_t i = 0; i < G; ++i)
    for (int64_t j = 0; j < G; ++j)
      for (int64_t k = 0; k < D / 4; ++k) {
        const double w = 1.0 / std::pow(10000.0, double(k) / (D / 4));
        const int64_t n = i * G + j;
        EXPECT_NEAR(pe[n][k].item<double>(), std::sin(j * w), 1e-6);
        EXPECT_NEAR(pe[n][D / 4 + k].item<double>(), std::cos(j * w), 1e-6);
        EXPECT_NEAR(pe[n][D / 2 + k].item<double>(), std::sin(i * w), 1e-6);
        EXPECT_NEAR(pe[n][3 * D / 4 + k].item<double>(), std::cos(i * w), 1e-6);
      }
}

TEST(DiT, UnpatchifyLayoutIsPyPxChannel) {
  auto c = model_config("DiT-S/2");
  c.input_size = 4;
  c.in_channels = 3;
  c.learn_sigma = false;
  DiT m(c);
  // token (gh, gw) carries p·p·C values ordered [py][px][c]
  at::Tensor x = at::arange(1 * 4 * 12, at::kFloat).view({1, 4, 12});  // 2x2 tokens
  at::Tensor img = m.unpatchify(x, 2, 2);                              // (1, 3, 4, 4)
  for (int64_t gh = 0; gh < 2; ++gh)
    for (int64_t gw = 0; gw < 2; ++gw)
      for (int64_t py = 0; py < 2; ++py)
        for (int64_t px = 0; px < 2; ++px)
          for (int64_t ch = 0; ch < 3; ++ch)
            EXPECT_EQ(img[0][ch][gh * 2 + py][gw * 2 + px].item<float>(), float((gh * 2 + gw) * 12 + (py * 2 + px) * 3 + ch));
}

// The patch embedding (a GEMM of the patches) equals the strided convolution it stands for
// (ATen's conv2d, flattened and transposed as timm's PatchEmbed does), in float64: output and the
// gradients of the input, the weight and the bias, for patch 1, 2, 4 and 8 and 1 or 4 channels;
// its output is contiguous (the first block reads it in place); a size the patch does not divide
// is an error naming it.
TEST(DiT, PatchEmbedEqualsTheStridedConvolution) {
  set_patch_embed_gemm(true);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  for (int64_t p : {1, 2, 4, 8})
    for (int64_t C : {1, 4}) {
      PatchEmbed pe(C, 24, p);
      pe.to(at::kDouble);
      torch::manual_seed(p * 10 + C);
      at::Tensor x = at::randn({3, C, 2 * p, 3 * p}, f64).requires_grad_();  // (N, C, H, W), a 2x3 token grid
      {
        torch::NoGradGuard ng;
        pe.proj->bias.normal_();
      }
      at::Tensor gy = at::randn({3, 6, 24}, f64);                            // (N, T, D)
      at::Tensor y = pe.forward(x);                                          // (N, T, D)
      EXPECT_TRUE(y.is_contiguous()) << "p " << p;
      (y * gy).sum().backward();
      at::Tensor gx = x.grad().clone(), gw = pe.proj->weight.grad().clone(), gb = pe.proj->bias.grad().clone();
      x.mutable_grad().reset();
      pe.proj->weight.mutable_grad().reset();
      pe.proj->bias.mutable_grad().reset();
      at::Tensor ref = at::conv2d(x, pe.proj->weight, pe.proj->bias, {p, p}).flatten(2).transpose(1, 2);  // (N, T, D)
      (ref * gy).sum().backward();
      const std::string what = "p " + std::to_string(p) + " C " + std::to_string(C);
      EXPECT_TRUE(at::allclose(y, ref, 1e-12, 1e-12)) << what << " output, max diff " << (y - ref).abs().max().item<double>();
      EXPECT_TRUE(at::allclose(gx, x.grad(), 1e-12, 1e-12)) << what << " input gradient";
      EXPECT_TRUE(at::allclose(gw, pe.proj->weight.grad(), 1e-12, 1e-12)) << what << " weight gradient";
      EXPECT_TRUE(at::allclose(gb, pe.proj->bias.grad(), 1e-12, 1e-12)) << what << " bias gradient";
    }
  // NALA_PATCH_EMBED: the convolution path (the A/B's other side) is the reference above itself
  EXPECT_TRUE(patch_embed_gemm_of(""));
  EXPECT_TRUE(patch_embed_gemm_of("gemm"));
  EXPECT_FALSE(patch_embed_gemm_of("conv"));
  try {
    patch_embed_gemm_of("cudnn");
    ADD_FAILURE() << "'cudnn' accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("NALA_PATCH_EMBED='cudnn'"), std::string::npos) << e.what();
  }
  PatchEmbed pe(4, 8, 2);
  try {
    pe.forward(at::randn({1, 4, 5, 4}));
    ADD_FAILURE() << "a 5-row input with patch 2 accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 2"), std::string::npos) << e.what();
  }
}

TEST(DiT, ZeroInitialisedModelOutputsExactlyZero) {
  for (const char* name : {"DiT-S/4", "NaLaSiT-S/4"}) {
    auto c = model_config(name);
    c.input_size = 8;
    DiT m(c);
    torch::NoGradGuard ng;
    at::Tensor out = m.forward(at::randn({3, 4, 8, 8}), at::tensor({1.0f, 500.0f, 999.0f}), at::tensor({0L, 5L, 999L}));
    EXPECT_EQ(out.abs().max().item<float>(), 0.0f) << name;
    EXPECT_EQ(out.size(1), c.family == "SiT" ? 4 : 8) << name;
  }
}

TEST(DiT, LabelDropoutOnlyInTraining) {
  auto c = model_config("DiT-S/4");
  c.input_size = 8;
  c.num_classes = 10;
  DiT m(c);
  at::Tensor y = at::zeros({4000}, at::kLong);
  m.eval();
  EXPECT_TRUE(at::equal(m.y_embedder->forward(y, m.is_training()), m.y_embedder->embedding_table->weight[0].expand({4000, c.hidden})));
  m.train();
  at::Tensor e = m.y_embedder->forward(y, m.is_training());
  const double dropped = (e.select(1, 0) == m.y_embedder->embedding_table->weight[10][0]).to(at::kFloat).mean().item<double>();
  EXPECT_NEAR(dropped, 0.1, 0.02);  // probability 0.1, null class = num_classes
}

TEST(DiT, GuidanceModes) {
  auto c = model_config("DiT-S/4");
  c.input_size = 8;
  DiT m(c);
  m.eval();  // a module starts in training mode, where labels are dropped at random (class dropout)
  torch::NoGradGuard ng;
  for (auto& p : m.parameters()) p.add_(at::randn_like(p) * 0.02);
  at::Tensor x = at::randn({4, 4, 8, 8}), t = at::full({4}, 300.0f), y = at::tensor({1L, 2L, 1000L, 1000L});
  at::Tensor full = m.forward(at::cat({x.narrow(0, 0, 2), x.narrow(0, 0, 2)}), t, y);
  for (int64_t g : {3L, -1L}) {
    at::Tensor out = m.forward_with_cfg(x, t, y, 1.5, g);
    const int64_t gc = g < 0 ? 4 : 3;
    at::Tensor want = full.narrow(0, 2, 2).narrow(1, 0, gc) + 1.5 * (full.narrow(0, 0, 2).narrow(1, 0, gc) - full.narrow(0, 2, 2).narrow(1, 0, gc));
    EXPECT_TRUE(at::allclose(out.narrow(0, 0, 2).narrow(1, 0, gc), want, 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(out.narrow(0, 2, 2).narrow(1, 0, gc), want, 1e-5, 1e-6));
    // unguided channels keep each half's own values
    EXPECT_TRUE(at::equal(out.narrow(1, gc, 8 - gc), full.narrow(1, gc, 8 - gc)));
  }
}

// FP8 sampling with NALA_FP8_LN_FUSED=1 (ops/fused_ops.h): each block's LayerNorm-modulate hands qkv
// (qkvg) and fc1 their input as quantized rows (ops/linear_fp8.h layer_norm_modulate_fp8) instead
// of the modulated tensor. The oracle is the unfused forward, which quantizes that tensor in the
// linear layers: the same rows, GEMMs and kernels after them, so the two must agree bit for bit, for
// softmax and NaLa blocks, with every block taking the path (two calls a block).
namespace {
// A DiT of `name` at 16 px (4 × 4 tokens) with `depth` blocks and every parameter moved by
// N(0, 0.05²) off its initialisation (adaLN and the head start at zero, which would hide them), in eval mode.
std::shared_ptr<DiT> perturbed_dit(const char* name, int64_t depth, uint64_t seed) {
  auto cfg = model_config(name);
  cfg.input_size = 16;
  cfg.depth = depth;
  torch::manual_seed(seed);
  auto model = std::make_shared<DiT>(cfg);
  torch::NoGradGuard ng;
  for (auto& p : model->parameters()) p.add_(at::randn_like(p) * 0.05);
  model->eval();
  return model;
}
// A training step's output and every parameter's gradient (of mean(out²)), flattened into one vector
at::Tensor step_output_and_gradients(DiT& m, const at::Tensor& x, const at::Tensor& t, const at::Tensor& y) {
  m.zero_grad();
  const at::Tensor out = m.forward(x, t, y);  // (N, C', H, W)
  (out * out).mean().backward();
  std::vector<at::Tensor> g{out.detach().flatten()};
  for (auto& p : m.parameters())
    if (p.grad().defined()) g.push_back(p.grad().flatten().clone());
  return at::cat(g);
}
}  // namespace

TEST(DiT, Fp8LayerNormQuantizedInputEqualsTheUnfusedForward) {
  for (const char* name : {"DiT-S/4", "NaLaDiT-S/4"}) {
    auto model = perturbed_dit(name, 2, 7);
    const auto& cfg = model->config();
    torch::NoGradGuard ng;
    const at::Tensor x = at::randn({2, 4, 16, 16}), t = at::tensor({10.0, 900.0}), y = at::tensor({int64_t(3), int64_t(1000)});  // one null label
    ASSERT_EQ(model->use_fp8_linears(), 2 * 4 + 1) << name;
    nala::ops::set_fp8_ln_fused(false);
    const int64_t calls0 = nala::ops::layer_norm_modulate_fp8_calls();
    const at::Tensor unfused = model->forward(x, t, y);  // (2, 8, 16, 16) with the learned sigma
    EXPECT_EQ(nala::ops::layer_norm_modulate_fp8_calls(), calls0) << name;
    nala::ops::set_fp8_ln_fused(true);
    const at::Tensor fused = model->forward(x, t, y);  // (the switch stays on: its default)
    EXPECT_EQ(nala::ops::layer_norm_modulate_fp8_calls() - calls0, 2 * cfg.depth) << name;
    EXPECT_TRUE(at::equal(fused, unfused)) << name << ": max |difference| " << (fused - unfused).abs().max().item<double>();
    // and FP8 at all: within FP8's error of the exact forward, not equal to it
    nala::ops::clear_fp8_linears();
    const at::Tensor exact = model->forward(x, t, y);
    const double err = ((fused - exact).norm() / exact.norm()).item<double>();
    EXPECT_GT(err, 1e-4) << name;
    EXPECT_LT(err, 0.1) << name;
  }
}

// A block against the plain formula of DiT models.py:115-119 written here with ATen ops and the
// mixer's and MLP's own forward, softmax and NaLa, with and without gradients.
TEST(DiT, BlockIsTheGatedResidualFormula) {
  for (const char* name : {"DiT-S/4", "NaLaDiT-S/4"}) {
    auto model = perturbed_dit(name, 1, 3);
    const auto& cfg = model->config();
    auto& block = *model->blocks[0]->as<DiTBlock>();
    const int64_t D = cfg.hidden;
    const at::Tensor x = at::randn({2, 16, D}), c = at::randn({2, D});  // (N, T, D), (N, D)
    const auto ln = [&](const at::Tensor& v, const at::Tensor& shift, const at::Tensor& scale) {
      return at::layer_norm(v, {D}, {}, {}, 1e-6) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);  // (N, T, D)
    };
    for (bool grad : {false, true}) {
      torch::AutoGradMode mode(grad);
      const auto m = block.adaLN_modulation->forward(c).chunk(6, 1);                                       // 6 × (N, D)
      const at::Tensor h = x + m[2].unsqueeze(1) * block.attn->forward(ln(x, m[0], m[1]), 4, 4);          // (N, T, D)
      const at::Tensor want = h + m[5].unsqueeze(1) * block.mlp->forward(ln(h, m[3], m[4]));              // (N, T, D)
      const at::Tensor got = block.forward(x, c, 4, 4);  // (N, T, D)
      EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << name << " grad " << grad << ": max |difference| "
                                                       << (got - want).abs().max().item<double>();
      EXPECT_EQ(got.requires_grad(), grad) << name;
    }
  }
}

// Sampling with each gated residual added in one pass with the LayerNorm-modulate after it
// (NALA_RESIDUAL_NORM_FUSED=1, DiTBlock::forward_chained): the forward equal bit for bit to the one
// block after another, softmax and NaLa, in float32 and with the FP8 linears and LayerNorm-quantize
// (NALA_FP8_LN_FUSED=1); with gradients on it is forward as before.
TEST(DiT, ChainedResidualNormEqualsTheBlockForward) {
  for (const char* name : {"DiT-S/4", "NaLaDiT-S/4"}) {
    auto model = perturbed_dit(name, 3, 5);
    const auto& cfg = model->config();
    const at::Tensor x = at::randn({2, 4, 16, 16}), t = at::tensor({10.0, 900.0}), y = at::tensor({int64_t(3), int64_t(1000)});
    for (bool fp8 : {false, true}) {
      torch::NoGradGuard ng;
      if (fp8) {
        EXPECT_EQ(model->use_fp8_linears(), 3 * 4 + 1) << name;  // (not ASSERT: the switches must reach their reset below)
        nala::ops::set_fp8_ln_fused(true);
      }
      nala::ops::set_residual_norm_fused(false);
      const at::Tensor blocks = model->forward(x, t, y);  // (2, 8, 16, 16)
      const int64_t calls0 = nala::ops::layer_norm_modulate_fp8_calls();
      nala::ops::set_residual_norm_fused(true);
      const at::Tensor chained = model->forward(x, t, y);
      nala::ops::set_residual_norm_fused(false);
      if (fp8) EXPECT_EQ(nala::ops::layer_norm_modulate_fp8_calls() - calls0, 2 * cfg.depth) << name;
      EXPECT_TRUE(at::equal(chained, blocks)) << name << " fp8 " << fp8 << ": max |difference| " << (chained - blocks).abs().max().item<double>();
      nala::ops::set_fp8_ln_fused(false);
      nala::ops::clear_fp8_linears();
    }
    // with gradients the switch changes nothing: the blocks run forward
    nala::ops::set_residual_norm_fused(true);
    const at::Tensor trained = model->forward(x, t, y);
    nala::ops::set_residual_norm_fused(false);
    EXPECT_TRUE(trained.requires_grad());
    EXPECT_TRUE(at::equal(trained.detach(), model->forward(x, t, y).detach())) << name;
  }
  nala::ops::set_residual_norm_fused(true);  // the defaults
  nala::ops::set_fp8_ln_fused(true);
}

// While gradients are wanted DiT::forward makes every adaLN modulation from one SiLU and one GEMM of
// the stacked weights (NALA_STACKED_MODULATION=1, DiT::stacked_modulations). In float64 its parts are
// each block's own modulation (and the final layer's), and a training step's output and every
// parameter's gradient equal those of the blocks' own modulations (=0) to rounding: softmax and gated
// NaLa blocks, the blocks chained and not. The oracle is the module's own composition, SiLU then
// at::linear, block by block.
TEST(DiT, StackedModulationTrainsLikeTheBlocks) {
  nala::ops::set_fused_block_ops(true);
  const bool stacked_was = nala::ops::stacked_modulation(), chained_was = nala::ops::residual_norm_fused();
  for (const char* name : {"DiT-S/4", "NaLaSiT-S/4"}) {
    auto c = model_config(name);
    c.input_size = 8;
    c.depth = 3;
    torch::manual_seed(5);
    DiT m(c);
    m.to(at::kDouble);
    {
      torch::NoGradGuard ng;
      for (auto& p : m.parameters()) p.add_(at::randn_like(p) * 0.05);  // non-zero adaLN and final layers
    }
    m.eval();  // no label dropout
    const at::Tensor cond = at::randn({2, c.hidden}, at::kDouble);  // (2, D)
    {
      const std::vector<at::Tensor> parts = m.stacked_modulations(cond);
      ASSERT_EQ(parts.size(), size_t(6 * c.depth + 2)) << name;
      for (int64_t i = 0; i <= c.depth; ++i) {
        torch::nn::Sequential& seq = i < c.depth ? m.blocks[i]->as<DiTBlock>()->adaLN_modulation : m.final_layer->adaLN_modulation;
        auto* lin = seq[1]->as<torch::nn::Linear>();
        const at::Tensor want = at::linear(at::silu(cond), lin->weight, lin->bias);  // (2, k·D)
        const int64_t k = want.size(1) / c.hidden;
        const at::Tensor got = at::cat(std::vector<at::Tensor>(parts.begin() + 6 * i, parts.begin() + 6 * i + k), 1);  // (2, k·D)
        EXPECT_LT((got - want).abs().max().item<double>(), 1e-13) << name << " block " << i;
      }
    }
    const at::Tensor x = at::randn({2, 4, 8, 8}, at::kDouble), t = at::tensor({3.0, 700.0}), y = at::tensor({1L, 7L});
    auto step = [&](bool stacked, bool chained) {
      nala::ops::set_stacked_modulation(stacked);
      nala::ops::set_residual_norm_fused(chained);
      return step_output_and_gradients(m, x, t, y);
    };
    for (bool chained : {false, true}) {
      const int64_t calls0 = DiT::stacked_modulation_calls();
      const at::Tensor own = step(false, chained);
      const int64_t calls1 = DiT::stacked_modulation_calls();
      const at::Tensor stacked = step(true, chained);
      EXPECT_EQ(calls1, calls0) << name << ": stacked with the switch off";
      EXPECT_EQ(DiT::stacked_modulation_calls(), calls1 + 1) << name << ": the forward did not stack";
      ASSERT_EQ(own.numel(), stacked.numel()) << name;
      const double scale = own.abs().max().item<double>();
      EXPECT_LT((stacked - own).abs().max().item<double>(), 1e-12 * scale) << name << " chained " << chained;
      EXPECT_GT(scale, 0) << name;
    }
  }
  nala::ops::set_stacked_modulation(stacked_was);
  nala::ops::set_residual_norm_fused(chained_was);
}

// A training forward and backward with the blocks chained (NALA_RESIDUAL_NORM_FUSED=1: each gated
// residual and the LayerNorm-modulate after it as one operation, DiTBlock::forward_chained) equals
// the blocks one by one (=0) bit for bit on the CPU: output and every parameter's gradient, with the
// one operation (NALA_RESIDUAL_NORM_TRAIN=1) and with the two (=0). Softmax and gated NaLa blocks.
TEST(DiT, ChainedTrainingStepEqualsTheBlocks) {
  nala::ops::set_fused_block_ops(true);
  for (const char* name : {"DiT-S/4", "NaLaSiT-S/4"}) {
    auto c = model_config(name);
    c.input_size = 8;
    torch::manual_seed(3);
    DiT m(c);
    {
      torch::NoGradGuard ng;
      for (auto& p : m.parameters()) p.add_(at::randn_like(p) * 0.02);  // non-zero adaLN and final layers
    }
    m.eval();  // no label dropout
    const at::Tensor x = at::randn({2, 4, 8, 8}), t = at::tensor({3.0f, 700.0f}), y = at::tensor({1L, 7L});
    auto step = [&](bool chained, bool one_op) {
      nala::ops::set_residual_norm_fused(chained);
      nala::ops::set_residual_norm_fused_training(one_op);
      return step_output_and_gradients(m, x, t, y);
    };
    const at::Tensor blocks = step(false, true), chained = step(true, true), two_ops = step(true, false);
    nala::ops::set_residual_norm_fused(true);
    nala::ops::set_residual_norm_fused_training(true);
    EXPECT_TRUE(at::equal(chained, blocks)) << name << ": max |difference| " << (chained - blocks).abs().max().item<double>();
    EXPECT_TRUE(at::equal(two_ops, blocks)) << name;
  }
}
