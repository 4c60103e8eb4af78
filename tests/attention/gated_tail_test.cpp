// gated_tail: the fused operation's forward and hand-derived backward (run here in its ATen form,
// the CPU counterpart of the CUDA kernels) against autograd of the plain composition in float64,
// with o, v, g as the gated block makes them (strided views of one qkvg projection), on square and
// non-square grids, LePE 3 / 5 / 7 and none; float32 within float32 rounding; bad shapes rejected
// with the value in the message. The CUDA kernels are tested against this on the GPU
// (tests/cuda/gated_tail_test.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "attention/gated_tail.h"
#include "attention/nala_attention.h"
#include "ops/fused_ops.h"
#include "rel_error.h"

using namespace nala::attention;

namespace {

struct Inputs {
  at::Tensor qkvg, o, lepe_w, lepe_b, norm_w, norm_b;
};

Inputs make(int64_t B, int64_t H, int64_t d, int64_t gh, int64_t gw, int64_t ks, at::ScalarType t) {
  const int64_t N = gh * gw, D = H * d;
  Inputs in;
  in.qkvg = at::randn({B, N, 4, H, d}, t);
  in.o = at::randn({B, H, N, d}, t).transpose(2, 3).contiguous().transpose(2, 3);  // (B, H, N, d), a strided layout
  if (ks > 0) {
    in.lepe_w = at::randn({D, 1, ks, ks}, t) * 0.2;
    in.lepe_b = at::randn({D}, t) * 0.1;
  }
  in.norm_w = 1 + 0.3 * at::randn({D}, t);
  in.norm_b = 0.2 * at::randn({D}, t);
  return in;
}

struct Result {
  at::Tensor y, dqkvg, do_, dlw, dlb, dnw, dnb;
};

Result run(bool fused, const Inputs& in0, int64_t gh, int64_t gw, const at::Tensor& w) {
  auto leaf = [](const at::Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_(true) : at::Tensor(); };
  Inputs in{leaf(in0.qkvg), leaf(in0.o), leaf(in0.lepe_w), leaf(in0.lepe_b), leaf(in0.norm_w), leaf(in0.norm_b)};
  const int64_t B = in.qkvg.size(0), N = in.qkvg.size(1), D = in.qkvg.size(3) * in.qkvg.size(4);
  at::Tensor v = in.qkvg.select(2, 2).reshape({B, N, D}), g = in.qkvg.select(2, 3).reshape({B, N, D});  // (B, N, D) strided views
  auto f = fused ? gated_tail_fused : gated_tail_reference;
  at::Tensor y = f(in.o, v, g, in.lepe_w, in.lepe_b, in.norm_w, in.norm_b, gh, gw, 1e-5);  // (B, N, D)
  (y * w).sum().backward();
  auto grad = [](const at::Tensor& t) { return t.defined() ? t.grad() : at::Tensor(); };
  return {y.detach(), in.qkvg.grad(), in.o.grad(), grad(in.lepe_w), grad(in.lepe_b), in.norm_w.grad(), in.norm_b.grad()};
}

using nala::test::rel;

void expect_close(const Result& a, const Result& b, double tol, const std::string& what) {
  const at::Tensor* x[] = {&a.y, &a.dqkvg, &a.do_, &a.dlw, &a.dlb, &a.dnw, &a.dnb};
  const at::Tensor* y[] = {&b.y, &b.dqkvg, &b.do_, &b.dlw, &b.dlb, &b.dnw, &b.dnb};
  const char* names[] = {"y", "d qkvg", "d o", "d lepe.weight", "d lepe.bias", "d norm.weight", "d norm.bias"};
  for (int i = 0; i < 7; ++i) {
    ASSERT_EQ(x[i]->defined(), y[i]->defined()) << what << " " << names[i];
    if (!x[i]->defined()) continue;
    ASSERT_EQ(x[i]->sizes(), y[i]->sizes()) << what << " " << names[i];
    EXPECT_LT(rel(*x[i], *y[i]), tol) << what << " " << names[i];
  }
}

}  // namespace

TEST(GatedTail, FusedEqualsTheCompositionInFloat64) {
  torch::manual_seed(0);
  struct Case {
    int64_t B, H, d, gh, gw, ks;
  };
  for (const Case& c : {Case{2, 3, 8, 4, 4, 5}, Case{1, 2, 4, 3, 7, 5}, Case{2, 1, 12, 5, 2, 3}, Case{1, 2, 8, 6, 5, 7}, Case{2, 3, 4, 2, 3, 0}}) {
    Inputs in = make(c.B, c.H, c.d, c.gh, c.gw, c.ks, at::kDouble);
    at::Tensor w = at::randn({c.B, c.gh * c.gw, c.H * c.d}, at::kDouble);
    const std::string what = "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " d" + std::to_string(c.d) + " grid " +
                             std::to_string(c.gh) + "x" + std::to_string(c.gw) + " ks" + std::to_string(c.ks);
    expect_close(run(true, in, c.gh, c.gw, w), run(false, in, c.gh, c.gw, w), 1e-12, what);
  }
}

TEST(GatedTail, Float32WithinRounding) {
  torch::manual_seed(1);
  Inputs in64 = make(2, 4, 16, 8, 8, 5, at::kDouble);
  at::Tensor w = at::randn({2, 64, 64}, at::kDouble);
  auto f32 = [](const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; };
  Inputs in32{f32(in64.qkvg), f32(in64.o), f32(in64.lepe_w), f32(in64.lepe_b), f32(in64.norm_w), f32(in64.norm_b)};
  expect_close(run(true, in32, 8, 8, w.to(at::kFloat)), run(false, in64, 8, 8, w), 1e-5, "float32 vs float64");
}

TEST(GatedTail, BadShapesNameTheValue) {
  Inputs in = make(1, 2, 4, 3, 3, 5, at::kFloat);
  at::Tensor v = in.qkvg.select(2, 2).reshape({1, 9, 8}), g = in.qkvg.select(2, 3).reshape({1, 9, 8});
  try {
    gated_tail_fused(in.o, v, g, in.lepe_w, in.lepe_b, in.norm_w, in.norm_b, 2, 4, 1e-5);
    FAIL() << "a 2x4 grid for 9 tokens was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("9 tokens do not fill a 2x4 grid"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gated_tail_fused(in.o, v.narrow(2, 0, 4), g, in.lepe_w, in.lepe_b, in.norm_w, in.norm_b, 3, 3, 1e-5), std::exception);
  EXPECT_THROW(gated_tail_fused(in.o, v, g, at::randn({8, 1, 4, 4}), in.lepe_b, in.norm_w, in.norm_b, 3, 3, 1e-5), std::exception);
}

// gated_tail_proj_fused (NALA_RECOMPUTE=1's path: y recomputed in the backward, not kept) against
// autograd of the composition followed by at::linear, in float64: the output and every gradient,
// the projection's included; float32 within float32 rounding of the float64 composition.
TEST(GatedTailProj, RecomputedYEqualsTheCompositionInFloat64AndFloat32) {
  torch::manual_seed(2);
  struct Case {
    int64_t B, H, d, gh, gw, ks;
  };
  for (const Case& c : {Case{2, 3, 8, 4, 4, 5}, Case{1, 2, 4, 3, 7, 3}, Case{2, 3, 4, 2, 3, 0}}) {
    const int64_t D = c.H * c.d, N = c.gh * c.gw;
    const Inputs in = make(c.B, c.H, c.d, c.gh, c.gw, c.ks, at::kDouble);
    const at::Tensor pw0 = at::randn({D, D}, at::kDouble) / std::sqrt(double(D)), pb0 = at::randn({D}, at::kDouble) * 0.1;
    const at::Tensor w = at::randn({c.B, N, D}, at::kDouble);
    auto run_proj = [&](bool fused, at::ScalarType t) {
      auto leaf = [&](const at::Tensor& x) { return x.defined() ? x.detach().to(t).clone().requires_grad_(true) : at::Tensor(); };
      Inputs l{leaf(in.qkvg), leaf(in.o), leaf(in.lepe_w), leaf(in.lepe_b), leaf(in.norm_w), leaf(in.norm_b)};
      at::Tensor pw = leaf(pw0), pb = leaf(pb0);
      at::Tensor v = l.qkvg.select(2, 2).reshape({c.B, N, D}), g = l.qkvg.select(2, 3).reshape({c.B, N, D});  // (B, N, D) strided views
      at::Tensor out = fused ? gated_tail_proj_fused(l.o, v, g, l.lepe_w, l.lepe_b, l.norm_w, l.norm_b, pw, pb, c.gh, c.gw, 1e-5)
                             : at::linear(gated_tail_reference(l.o, v, g, l.lepe_w, l.lepe_b, l.norm_w, l.norm_b, c.gh, c.gw, 1e-5), pw, pb);  // (B, N, D)
      const int64_t before = nala::ops::recomputations();
      (out * w.to(t)).sum().backward();
      EXPECT_EQ(nala::ops::recomputations() - before, fused ? 1 : 0) << "y recomputed once";
      auto grad = [](const at::Tensor& x) { return x.defined() ? x.grad() : at::Tensor(); };
      return std::vector<at::Tensor>{out.detach(), l.qkvg.grad(), l.o.grad(), grad(l.lepe_w), grad(l.lepe_b), l.norm_w.grad(), l.norm_b.grad(),
                                     pw.grad(), pb.grad()};
    };
    const char* names[] = {"out", "d qkvg", "d o", "d lepe.weight", "d lepe.bias", "d norm.weight", "d norm.bias", "d proj.weight", "d proj.bias"};
    const auto ref = run_proj(false, at::kDouble), ours = run_proj(true, at::kDouble), ours32 = run_proj(true, at::kFloat);
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(ours[i].defined(), ref[i].defined()) << names[i];
      if (!ref[i].defined()) continue;
      EXPECT_LT(rel(ours[i], ref[i]), 1e-12) << "ks" << c.ks << " " << names[i];
      EXPECT_LT(rel(ours32[i], ref[i]), 1e-5) << "ks" << c.ks << " float32 " << names[i];
    }
  }
}

// nala_mixer (the gated block's attention and tail as one operation; on CUDA the attention kernel adds
// LePE to its output) in its CPU form against autograd of nala_attention followed by the plain tail
// composition, in float64: y and the gradients of q, k, v (through the qkvg projection they are views
// of, v's second view, LePE's input, included), of g, and of every parameter; LePE 5, 3 and none,
// square and non-square grids. The CUDA kernel path is checked against this path on the GPU
// (tests/cuda/gated_tail_test.cpp, GatedTailKernels.LepeInAttentionEqualsTheTwoOperations).
TEST(NalaMixer, EqualsTheAttentionAndTheTailInFloat64) {
  struct Case {
    int64_t B, H, d, gh, gw, ks;
  };
  for (const Case& c : {Case{2, 2, 8, 4, 4, 5}, Case{1, 3, 4, 3, 7, 3}, Case{2, 1, 8, 5, 2, 0}}) {
    torch::manual_seed(5);
    Inputs in0 = make(c.B, c.H, c.d, c.gh, c.gw, c.ks, at::kDouble);
    const int64_t N = c.gh * c.gw, D = c.H * c.d;
    const at::Tensor w = at::randn({c.B, N, D}, at::kDouble);
    const std::string what = "grid " + std::to_string(c.gh) + "x" + std::to_string(c.gw) + " ks" + std::to_string(c.ks);
    auto run_mixer = [&](bool mixer) {
      auto leaf = [](const at::Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_(true) : at::Tensor(); };
      Inputs in{leaf(in0.qkvg), at::Tensor(), leaf(in0.lepe_w), leaf(in0.lepe_b), leaf(in0.norm_w), leaf(in0.norm_b)};
      at::Tensor q = in.qkvg.select(2, 0).transpose(1, 2), k = in.qkvg.select(2, 1).transpose(1, 2), v = in.qkvg.select(2, 2).transpose(1, 2);
      at::Tensor v_tok = in.qkvg.select(2, 2).reshape({c.B, N, D}), g = in.qkvg.select(2, 3).reshape({c.B, N, D});  // (B, N, D) views
      NalaOptions opt;
      at::Tensor y = mixer ? nala_mixer(q, k, v, v_tok, g, in.lepe_w, in.lepe_b, in.norm_w, in.norm_b, opt, c.gh, c.gw, 1e-5)
                           : gated_tail_reference(nala_attention(q, k, v, opt), v_tok, g, in.lepe_w, in.lepe_b, in.norm_w, in.norm_b, c.gh, c.gw,
                                                  1e-5);  // (B, N, D)
      (y * w).sum().backward();
      auto grad = [](const at::Tensor& t) { return t.defined() ? t.grad() : at::Tensor(); };
      // the o slot holds nothing here: q, k, v's gradients are in qkvg's
      return Result{y.detach(), in.qkvg.grad(), at::Tensor(), grad(in.lepe_w), grad(in.lepe_b), in.norm_w.grad(), in.norm_b.grad()};
    };
    expect_close(run_mixer(true), run_mixer(false), 1e-11, what);
  }
}

TEST(NalaMixer, BadShapesNameTheValue) {
  Inputs in = make(1, 2, 4, 3, 3, 5, at::kFloat);
  at::Tensor q = in.qkvg.select(2, 0).transpose(1, 2), k = in.qkvg.select(2, 1).transpose(1, 2), v = in.qkvg.select(2, 2).transpose(1, 2);
  at::Tensor v_tok = in.qkvg.select(2, 2).reshape({1, 9, 8}), g = in.qkvg.select(2, 3).reshape({1, 9, 8});
  try {
    nala_mixer(q, k, v, v_tok, g, in.lepe_w, in.lepe_b, in.norm_w, in.norm_b, {}, 2, 4, 1e-5);
    FAIL() << "a 2x4 grid for 9 tokens was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("9 tokens do not fill a 2x4 grid"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nala_mixer(q, k, v, v_tok, g.narrow(2, 0, 4), in.lepe_w, in.lepe_b, in.norm_w, in.norm_b, {}, 3, 3, 1e-5), std::exception);
  try {
    nala_mixer(q, k, v, v_tok, g, in.lepe_w, in.lepe_b, in.norm_w, in.norm_b, {}, 3, 3, 1e-5, 3);
    FAIL() << "lepe_kernels 3 was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("lepe_kernels must be 1 (the forward) or 2 (and the backward), got 3"), std::string::npos) << e.what();
  }
}

// NALA_LEPE_IN_ATTENTION: unset or 0 off, 1 the forward, 2 forward and backward, anything else an error naming the value.
TEST(NalaMixer, SwitchValues) {
  const char* old = std::getenv("NALA_LEPE_IN_ATTENTION");
  const std::string saved = old ? old : "";
  for (const auto& [value, kernels] : {std::pair<const char*, int>{"", 2}, {"0", 0}, {"1", 1}, {"2", 2}}) {
    setenv("NALA_LEPE_IN_ATTENTION", value, 1);
    reset_lepe_in_attention();
    EXPECT_EQ(lepe_in_attention(), kernels) << "'" << value << "'";
  }
  setenv("NALA_LEPE_IN_ATTENTION", "yes", 1);
  reset_lepe_in_attention();
  try {
    lepe_in_attention();
    ADD_FAILURE() << "'yes' accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("NALA_LEPE_IN_ATTENTION must be 0, 1 or 2, got 'yes'"), std::string::npos) << e.what();
  }
  if (old) setenv("NALA_LEPE_IN_ATTENTION", saved.c_str(), 1);
  else unsetenv("NALA_LEPE_IN_ATTENTION");
  reset_lepe_in_attention();
}
