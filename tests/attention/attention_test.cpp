// NaLa attention: the reference against float64 finite differences, the hand-written backward
// against autograd through the reference, the fast CPU path against the reference on awkward
// sizes, the properties the paper claims, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "attention/blocks.h"
#include "attention/feature_maps.h"
#include "attention/nala_attention.h"
#include "attention/nala_cpu.h"
#include "attention/nala_reference.h"
#include "ops/fused_ops.h"

using namespace nala::attention;

namespace {

const FeatureMap kAllMaps[] = {FeatureMap::Nala, FeatureMap::NalaRelu, FeatureMap::Elu, FeatureMap::Relu, FeatureMap::Focused};

NalaOptions options_for(FeatureMap f, double alpha = 1.0) {
  NalaOptions o;
  o.feature_map = f;
  o.alpha = alpha;
  return o;
}

double rel_err(const at::Tensor& a, const at::Tensor& ref) {
  const double den = ref.to(at::kDouble).norm().item<double>();
  return (a.to(at::kDouble) - ref.to(at::kDouble)).norm().item<double>() / std::max(den, 1e-30);
}

// Random q, k, v (B, H, N, d) as strided views into one (B, N, 3, H, d) projection output,
// the layout the gated block produces.
std::tuple<at::Tensor, at::Tensor, at::Tensor> strided_qkv(int64_t B, int64_t H, int64_t N, int64_t d, at::ScalarType dt,
                                                           double scale = 1.0) {
  at::Tensor t = (at::randn({B, N, 3, H, d}, at::kDouble) * scale).to(dt);
  return {t.select(2, 0).transpose(1, 2), t.select(2, 1).transpose(1, 2), t.select(2, 2).transpose(1, 2)};
}

// Central finite differences of L = Σ w ⊙ f(q, k, v) in float64, against the analytic gradient.
void finite_difference_check(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& f,
                             const std::string& what) {
  at::manual_seed(3);
  const int64_t B = 1, H = 2, N = 5, d = 4;
  std::vector<at::Tensor> x = {at::randn({B, H, N, d}, at::kDouble), at::randn({B, H, N, d}, at::kDouble),
                               at::randn({B, H, N, d}, at::kDouble)};
  at::Tensor w = at::randn({B, H, N, d}, at::kDouble);
  for (auto& t : x) t.requires_grad_(true);
  (f(x[0], x[1], x[2]) * w).sum().backward();
  const double h = 1e-6;
  double worst = 0;
  for (int which = 0; which < 3; ++which) {
    at::Tensor analytic = x[size_t(which)].grad();
    at::NoGradGuard ng;
    for (int64_t i = 0; i < x[size_t(which)].numel(); ++i) {
      std::vector<at::Tensor> xp, xm;
      for (auto& t : x) { xp.push_back(t.detach().clone()); xm.push_back(t.detach().clone()); }
      xp[size_t(which)].view(-1)[i] += h;
      xm[size_t(which)].view(-1)[i] -= h;
      const double lp = (f(xp[0], xp[1], xp[2]) * w).sum().item<double>();
      const double lm = (f(xm[0], xm[1], xm[2]) * w).sum().item<double>();
      const double num = (lp - lm) / (2 * h), ana = analytic.view(-1)[i].item<double>();
      const double err = std::fabs(num - ana) / (1e-6 + std::fabs(num));
      worst = std::max(worst, err);
      EXPECT_NEAR(ana, num, 1e-6 + 1e-5 * std::fabs(num)) << what << " input " << "qkv"[which] << "[" << i << "]";
    }
  }
  std::printf("%-34s gradcheck worst relative error %.2e\n", what.c_str(), worst);
}

// nala_attention and autograd through nala_attention_reference on the same inputs and upstream
// gradient: outputs and the three input gradients (ours first, the reference's second).
struct OursAndReference {
  at::Tensor o_ours, o_ref;
  std::vector<at::Tensor> g_ours, g_ref;  // dq, dk, dv
};
OursAndReference ours_and_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& gout, const NalaOptions& o) {
  std::vector<at::Tensor> a = {q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_()};
  std::vector<at::Tensor> b = {q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_()};
  OursAndReference r;
  r.o_ours = nala_attention(a[0], a[1], a[2], o);
  r.o_ref = nala_attention_reference(b[0], b[1], b[2], o);
  (r.o_ours * gout).sum().backward();
  (r.o_ref * gout).sum().backward();
  for (int i = 0; i < 3; ++i) r.g_ours.push_back(a[size_t(i)].grad()), r.g_ref.push_back(b[size_t(i)].grad());
  return r;
}

}  // namespace

TEST(NalaReference, GradcheckFloat64EveryVariant) {
  for (auto f : kAllMaps)
    for (double alpha : {1.0, 20.0}) {
      if (alpha != 1.0 && f != FeatureMap::Nala) continue;
      const NalaOptions o = options_for(f, alpha);
      finite_difference_check([&](auto& q, auto& k, auto& v) { return nala_attention_reference(q, k, v, o); },
                              "reference " + feature_map_name(f) + " alpha=" + std::to_string(int(alpha)));
    }
}

TEST(NalaAttention, GradcheckFloat64HandWrittenBackward) {
  for (auto f : kAllMaps) {
    const NalaOptions o = options_for(f);
    finite_difference_check([&](auto& q, auto& k, auto& v) { return nala_attention(q, k, v, o); }, "nala_attention " + feature_map_name(f));
  }
}

TEST(NalaAttention, BackwardEqualsAutogradThroughReference) {
  at::manual_seed(4);
  for (auto f : kAllMaps)
    for (auto dt : {at::kFloat, at::kDouble}) {
      const NalaOptions o = options_for(f, f == FeatureMap::Nala ? 20.0 : 1.0);
      auto [q, k, v] = strided_qkv(2, 3, 37, 16, dt);
      at::Tensor gout = at::randn({2, 3, 37, 16}, dt);
      const OursAndReference r = ours_and_reference(q, k, v, gout, o);
      const double tol = dt == at::kDouble ? 1e-10 : 2e-5;
      EXPECT_LT(rel_err(r.o_ours, r.o_ref), tol) << feature_map_name(f);
      for (int i = 0; i < 3; ++i) {
        const double e = rel_err(r.g_ours[size_t(i)], r.g_ref[size_t(i)]);
        std::printf("%-10s %-6s d%c relative error %.2e\n", feature_map_name(f).c_str(), dt == at::kDouble ? "fp64" : "fp32", "qkv"[i], e);
        EXPECT_LT(e, tol) << feature_map_name(f) << " d" << "qkv"[i];
      }
    }
}

// NALA_RECOMPUTE=1: the forward keeps only q, k, v and the backward recomputes S, z, den. The
// gradients equal autograd through the reference, and the kept-state path's bit for bit (the same
// kernels on the same inputs).
TEST(NalaAttention, RecomputedStateGivesTheSameGradients) {
  at::manual_seed(6);
  for (auto f : kAllMaps)
    for (auto dt : {at::kFloat, at::kDouble}) {
      const NalaOptions o = options_for(f);
      auto [q, k, v] = strided_qkv(2, 3, 29, 8, dt);
      at::Tensor gout = at::randn({2, 3, 29, 8}, dt);
      nala::ops::set_recompute_saved(true);
      const int64_t before = nala::ops::recomputations();
      const OursAndReference r = ours_and_reference(q, k, v, gout, o);
      EXPECT_EQ(nala::ops::recomputations() - before, 1) << "the backward recomputed the state once";
      nala::ops::set_recompute_saved(false);
      const OursAndReference kept = ours_and_reference(q, k, v, gout, o);
      EXPECT_EQ(nala::ops::recomputations() - before, 1) << "the kept-state path recomputed something";
      const double tol = dt == at::kDouble ? 1e-10 : 2e-5;
      for (int i = 0; i < 3; ++i) {
        EXPECT_LT(rel_err(r.g_ours[size_t(i)], r.g_ref[size_t(i)]), tol) << feature_map_name(f) << " d" << "qkv"[i];
        EXPECT_TRUE(at::equal(r.g_ours[size_t(i)], kept.g_ours[size_t(i)])) << feature_map_name(f) << " d" << "qkv"[i];
      }
    }
  nala::ops::set_recompute_saved(true);
  finite_difference_check([&](auto& q, auto& k, auto& v) { return nala_attention(q, k, v, options_for(FeatureMap::Nala)); },
                          "nala_attention, state recomputed");
  nala::ops::set_recompute_saved(false);
}

TEST(NalaAttention, FastCpuPathEqualsReferenceOnAwkwardSizes) {
  at::manual_seed(5);
  struct Case { int64_t B, H, N, d; };
  for (Case c : {Case{1, 1, 1, 64}, Case{1, 3, 7, 72}, Case{3, 1, 97, 64}, Case{1, 3, 1025, 72}, Case{1, 1, 1025, 64}})
    for (auto f : {FeatureMap::Nala, FeatureMap::NalaRelu, FeatureMap::Elu}) {
      const NalaOptions o = options_for(f);
      auto [q, k, v] = strided_qkv(c.B, c.H, c.N, c.d, at::kFloat);
      at::Tensor ours = nala_attention(q, k, v, o);
      at::Tensor ref = nala_attention_reference(q, k, v, o);
      const double e = rel_err(ours, ref);
      std::printf("B=%ld H=%ld N=%4ld d=%ld %-9s forward relative error %.2e\n", c.B, c.H, c.N, c.d, feature_map_name(f).c_str(), e);
      EXPECT_LT(e, 1e-5);
      EXPECT_EQ(ours.sizes(), q.sizes());
      EXPECT_FALSE(ours.isnan().any().item<bool>());
    }
}

TEST(NalaAttention, ZeroTokensTakeTheEpsilonBranch) {
  // tokens whose q or k is exactly zero (‖x‖ ≤ ε_n: x̂ = x / ε_n, docs/nala_attention.md §1): the
  // fast CPU path and its hand-written backward against autograd through the reference, float64;
  // everything finite
  at::manual_seed(12);
  for (auto f : kAllMaps) {
    const NalaOptions o = options_for(f);
    auto [q, k, v] = strided_qkv(1, 2, 9, 8, at::kDouble);
    at::Tensor qz = q.clone(), kz = k.clone();  // (B, H, N, d)
    qz.select(2, 0).zero_();
    qz.select(2, 4).zero_();
    kz.select(2, 4).zero_();
    kz.select(2, 8).zero_();
    at::Tensor gout = at::randn({1, 2, 9, 8}, at::kDouble);
    const OursAndReference r = ours_and_reference(qz, kz, v, gout, o);
    EXPECT_TRUE(at::isfinite(r.o_ref).all().item<bool>()) << feature_map_name(f);
    EXPECT_LT(rel_err(r.o_ours, r.o_ref), 1e-10) << feature_map_name(f);
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(at::isfinite(r.g_ours[size_t(i)]).all().item<bool>()) << feature_map_name(f) << " d" << "qkv"[i];
      const double e = rel_err(r.g_ours[size_t(i)], r.g_ref[size_t(i)]);
      std::printf("%-10s zero tokens d%c relative error %.2e\n", feature_map_name(f).c_str(), "qkv"[i], e);
      EXPECT_LT(e, 1e-10) << feature_map_name(f) << " d" << "qkv"[i];
    }
  }
}

TEST(NalaAttention, LowPrecisionInputsComputeInFp32) {
  at::manual_seed(6);
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    auto [q, k, v] = strided_qkv(2, 2, 50, 64, dt);
    at::Tensor ours = nala_attention(q, k, v);
    EXPECT_EQ(ours.scalar_type(), dt);
    // the reference in the same dtype is fp32 inside and rounds only its output
    at::Tensor ref32 = nala_attention_reference(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), {});
    const double ref_err = rel_err(nala_attention_reference(q, k, v, {}), ref32), our_err = rel_err(ours, ref32);
    std::printf("%s: ours %.2e, reference in the same dtype %.2e\n", dt == at::kBFloat16 ? "bf16" : "fp16", our_err, ref_err);
    EXPECT_LE(our_err, 2 * ref_err + 1e-7);
  }
}

TEST(NalaAttention, SimilaritiesAreNonNegativeForNalaVariants) {
  at::manual_seed(7);
  for (auto f : {FeatureMap::Nala, FeatureMap::NalaRelu})
    for (double alpha : {1.0, 20.0}) {
      const NalaOptions o = options_for(f, alpha);
      at::Tensor q = at::randn({4000, 64}) * 3, k = at::randn({4000, 64}) * 3;
      at::Tensor s = (phi_query_reference(q, o) * phi_key_reference(k, o)).sum(-1);  // (4000,)
      EXPECT_GE(s.min().item<double>(), 0.0) << feature_map_name(f);
    }
}

// The paper's central claim: with the direction fixed, a larger ‖q‖ gives a spikier attention
// distribution (lower entropy) over random keys. Softmax does this through the temperature; NaLa
// through p(‖q‖). Measured over many random key sets.
TEST(NalaAttention, EntropyFallsAsQueryNormGrows) {
  at::manual_seed(8);
  const int64_t d = 64, N = 256, trials = 64;
  at::Tensor dir = at::randn({d});
  dir = dir / dir.norm();
  const double norms[] = {0.1, 0.5, 1.0, 2.0, 4.0, 8.0};
  std::printf("  ‖q‖   entropy(nala)  entropy(elu)  (max %.3f)\n", std::log(double(N)));
  std::vector<double> nala_h;
  at::Tensor keys = at::randn({trials, N, d});  // the same key sets for every norm
  for (double n : norms) {
    double h_nala = 0, h_elu = 0;
    for (int64_t t = 0; t < trials; ++t) {
      at::Tensor k = keys[t];
      for (auto f : {FeatureMap::Nala, FeatureMap::Elu}) {
        at::Tensor w = nala_attention_weights(dir * n, k, options_for(f));
        const double h = -(w * at::log(w.clamp_min(1e-30))).sum().item<double>();
        (f == FeatureMap::Nala ? h_nala : h_elu) += h / trials;
      }
    }
    std::printf("  %4.1f   %.4f         %.4f\n", n, h_nala, h_elu);
    nala_h.push_back(h_nala);
  }
  // strictly falling while p(n) = λ(τ + tanh n) still grows (n ≤ 2); flat, never rising, once tanh saturates
  for (size_t i = 1; i < nala_h.size(); ++i) {
    if (norms[i] <= 2.0) EXPECT_LT(nala_h[i], nala_h[i - 1] - 1e-3) << "at ‖q‖ = " << norms[i];
    else EXPECT_LE(nala_h[i], nala_h[i - 1] + 1e-6) << "at ‖q‖ = " << norms[i];
  }
  EXPECT_LT(nala_h.back(), nala_h.front() - 0.05);
}

TEST(NalaAttention, ClearErrorsNameTheTensor) {
  at::Tensor q = at::randn({1, 2, 5, 8}), k = at::randn({1, 2, 5, 8}), v = at::randn({1, 2, 5, 8});
  auto expect_msg = [](const std::function<void()>& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_msg([&] { nala_attention(q, k, v.view({2, 5, 8})); }, "v must be (B, H, N, d)");
  expect_msg([&] { nala_attention(q, k.to(at::kDouble), v); }, "k has dtype Double");
  expect_msg([&] { nala_attention(q, k, at::randn({1, 2, 6, 8})); }, "v has shape");
  expect_msg([&] { nala_attention(q.to(at::kLong), k, v); }, "q must be a float tensor");
  NalaOptions bad;
  bad.tau = 0.1;
  expect_msg([&] { nala_attention(q, k, v, bad); }, "lambda*tau");
  NalaOptions tiny;
  tiny.eps_norm = 1e-40;  // positive, but its float reciprocal overflows
  expect_msg([&] { nala_attention(q, k, v, tiny); }, "eps_norm must be >= 1e-30");
  EXPECT_THROW(parse_feature_map("cosine"), std::runtime_error);
}

TEST(Blocks, ParameterNamesAreCheckpointKeys) {
  GatedNalaConfig cfg;
  auto nala_block = make_token_mixer("nala", 32, 4, cfg);
  std::vector<std::string> names;
  for (auto& p : nala_block->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"qkvg.weight", "qkvg.bias", "lepe.weight", "lepe.bias", "norm.weight", "norm.bias",
                                             "proj.weight", "proj.bias"}));
  EXPECT_EQ(nala_block->named_parameters()["lepe.weight"].sizes(), (at::IntArrayRef{32, 1, 5, 5}));
  auto sm = make_token_mixer("softmax", 32, 4, cfg);
  names.clear();
  for (auto& p : sm->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}));
}

TEST(Blocks, GatedBlockEqualsItsDefinitionInAtenOps) {
  at::manual_seed(9);
  const int64_t B = 2, Hg = 3, Wg = 4, N = Hg * Wg, D = 16, H = 2, d = D / H;
  GatedNalaConfig cfg;
  GatedNalaAttention blk(D, H, cfg);
  at::Tensor x = at::randn({B, N, D});
  at::Tensor out = blk.forward(x, Hg, Wg);
  // §5 written out: split, attention per head, LePE on v's grid, LayerNorm ⊙ SiLU(g), proj
  at::Tensor t = at::linear(x, blk.qkvg->weight, blk.qkvg->bias);             // (B, N, 4D)
  auto part = [&](int i) { return t.slice(2, i * D, (i + 1) * D); };           // (B, N, D)
  auto heads = [&](const at::Tensor& a) { return a.view({B, N, H, d}).transpose(1, 2); };
  at::Tensor o = nala_attention_reference(heads(part(0)), heads(part(1)), heads(part(2)), {}).transpose(1, 2).reshape({B, N, D});
  at::Tensor vimg = part(2).reshape({B, Hg, Wg, D}).permute({0, 3, 1, 2});
  o = o + at::conv2d(vimg, blk.lepe->weight, blk.lepe->bias, 1, 2, 1, D).flatten(2).transpose(1, 2);
  at::Tensor y = at::layer_norm(o, {D}, blk.norm->weight, blk.norm->bias, 1e-5) * at::silu(part(3));
  at::Tensor ref = at::linear(y, blk.proj->weight, blk.proj->bias);
  EXPECT_LT(rel_err(out, ref), 1e-5);
  // and it trains: gradients reach every parameter
  out.pow(2).sum().backward();
  for (auto& p : blk.named_parameters()) EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
}

TEST(Blocks, RopeVariantIsTranslationAwareAndDifferentiable) {
  at::manual_seed(10);
  auto [q, k, v] = strided_qkv(1, 2, 12, 8, at::kDouble);
  at::Tensor plain = nala_attention_reference(q, k, v, {});
  at::Tensor rope = nala_attention_rope(q, k, v, {}, 3, 4);
  EXPECT_EQ(rope.sizes(), plain.sizes());
  EXPECT_GT(rel_err(rope, plain), 1e-3);  // positions change the numerator
  finite_difference_check([](auto& a, auto& b, auto& c) { return nala_attention_rope(a, b, c, {}, 1, 5); }, "nala_attention_rope");
}

// NALA_RECOMPUTE=1's block (forward_recomputing: q, k, v and the gate from separate GEMMs of qkvg's
// rows; without RoPE the attention, gate, tail and projection as nala_mixer_recomputing, whose
// backward recomputes the attention's state and output, g, u and y; with RoPE the attention apart
// and gated_tail_proj_gate_fused recomputing g and y) against the plain
// forward in float64: the output and the gradients of the input and of every parameter, with LePE
// and without.
TEST(Blocks, RecomputingBlockEqualsTheBlockInFloat64) {
  for (bool rope : {false, true})
  for (int64_t ks : {5, 0}) {
    at::manual_seed(12);
    GatedNalaConfig cfg;
    cfg.lepe_kernel = ks;
    cfg.rope = rope;
    GatedNalaAttention blk(16, 2, cfg);
    blk.to(at::kDouble);
    const at::Tensor x0 = at::randn({2, 12, 16}, at::kDouble), w = at::randn({2, 12, 16}, at::kDouble);
    auto run_block = [&](bool recomputing) {
      blk.zero_grad();
      nala::ops::set_recompute_saved(recomputing);
      at::Tensor x = x0.clone().requires_grad_(true);
      const int64_t before = nala::ops::recomputations();
      at::Tensor out = recomputing ? blk.forward_recomputing(x, 3, 4) : blk.forward(x, 3, 4);  // (B, N, D)
      (out * w).sum().backward();
      // without RoPE the state, g, and y with u, each once; RoPE's attention is an autograd composition
      EXPECT_EQ(nala::ops::recomputations() - before, recomputing ? (rope ? 2 : 3) : 0) << "rope " << rope;
      nala::ops::set_recompute_saved(false);
      std::vector<std::pair<std::string, at::Tensor>> r = {{"out", out.detach()}, {"d x", x.grad()}};
      for (const auto& p : blk.named_parameters()) r.emplace_back("d " + p.key(), p.value().grad().clone());
      return r;
    };
    const auto ref = run_block(false), ours = run_block(true);
    ASSERT_EQ(ref.size(), ours.size());
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_LT(rel_err(ours[i].second, ref[i].second), 1e-12) << "rope " << rope << " ks " << ks << " " << ref[i].first;
  }
}
