// The fused block operations' CPU path (ops/block_ops.cpp: the formulas the CUDA kernels
// implement, with a hand-written backward) against autograd of the plain ATen composition
// (at::layer_norm, mul, add): forward bit-equal, gradients equal in float64, and within float32
// rounding for the autocast-like dtype mix.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/block_ops.h"

using namespace nala::ops;

namespace {

struct Result {
  at::Tensor out, dx, da, db;  // output and the gradients of its three inputs
};

// Runs f(x, a, b) and backward of <out, w> (a fixed random weight w).
template <typename F>
Result run(F f, const at::Tensor& x0, const at::Tensor& a0, const at::Tensor& b0, const at::Tensor& w) {
  at::Tensor x = x0.detach().clone().requires_grad_(true), a = a0.detach().clone().requires_grad_(true), b = b0.detach().clone().requires_grad_(true);
  at::Tensor out = f(x, a, b);
  (out.to(w.scalar_type()) * w).sum().backward();
  return {out.detach(), x.grad(), a.grad(), b.grad()};
}

double max_rel(const at::Tensor& a, const at::Tensor& ref) {
  return (a.to(at::kDouble) - ref.to(at::kDouble)).abs().max().item<double>() / std::max(ref.to(at::kDouble).abs().max().item<double>(), 1e-30);
}

}  // namespace

TEST(BlockOps, LayerNormModulateEqualsTheComposition) {
  set_fused_block_ops(true);
  torch::manual_seed(0);
  for (auto [N, T, D] : {std::tuple{2, 5, 8}, std::tuple{3, 17, 384}, std::tuple{1, 1, 12}}) {
    auto o = at::TensorOptions().dtype(at::kDouble);
    at::Tensor x = at::randn({N, T, D}, o) * 3 + 1, shift = at::randn({N, D}, o), scale = at::randn({N, D}, o), w = at::randn({N, T, D}, o);
    const double eps = 1e-6;
    Result f = run([&](auto& x, auto& s, auto& c) { return layer_norm_modulate(x, s, c, eps); }, x, shift, scale, w);
    Result r = run([&](auto& x, auto& s, auto& c) { return layer_norm_modulate_reference(x, s, c, eps); }, x, shift, scale, w);
    EXPECT_TRUE(at::equal(f.out, r.out)) << N << "x" << T << "x" << D;  // the same ATen ops forward
    EXPECT_LT(max_rel(f.dx, r.dx), 1e-12) << "dx " << N << "x" << T << "x" << D;
    EXPECT_LT(max_rel(f.da, r.da), 1e-12) << "dshift";
    EXPECT_LT(max_rel(f.db, r.db), 1e-12) << "dscale";
  }
}

TEST(BlockOps, GatedResidualEqualsTheComposition) {
  set_fused_block_ops(true);
  torch::manual_seed(1);
  auto o = at::TensorOptions().dtype(at::kDouble);
  at::Tensor x = at::randn({3, 7, 16}, o), gate = at::randn({3, 16}, o), y = at::randn({3, 7, 16}, o), w = at::randn({3, 7, 16}, o);
  Result f = run([](auto& x, auto& g, auto& y) { return gated_residual(x, g, y); }, x, gate, y, w);
  Result r = run([](auto& x, auto& g, auto& y) { return gated_residual_reference(x, g, y); }, x, gate, y, w);
  EXPECT_TRUE(at::equal(f.out, r.out));
  EXPECT_LT(max_rel(f.dx, r.dx), 1e-14);
  EXPECT_LT(max_rel(f.da, r.da), 1e-12) << "dgate";
  EXPECT_LT(max_rel(f.db, r.db), 1e-14) << "dy";
}

TEST(BlockOps, MixedPrecisionAsUnderAutocast) {
  // float32 residual stream, bf16 modulation vectors and branch output (what CUDA autocast gives):
  // results in the composition's dtypes, gradients in each input's dtype, within float32 rounding
  set_fused_block_ops(true);
  torch::manual_seed(2);
  at::Tensor x = at::randn({2, 33, 64}), w = at::randn({2, 33, 64});
  at::Tensor shift = at::randn({2, 64}).to(at::kBFloat16), scale = at::randn({2, 64}).to(at::kBFloat16);
  Result f = run([](auto& x, auto& s, auto& c) { return layer_norm_modulate(x, s, c, 1e-6); }, x, shift, scale, w);
  Result r = run([](auto& x, auto& s, auto& c) { return layer_norm_modulate_reference(x, s, c, 1e-6); }, x, shift, scale, w);
  // the truth: the same input values in float64
  auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  Result t = run([](auto& x, auto& s, auto& c) { return layer_norm_modulate_reference(x, s, c, 1e-6); }, d(x), d(shift), d(scale), d(w));
  EXPECT_EQ(f.out.scalar_type(), r.out.scalar_type());
  EXPECT_EQ(f.da.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(f.out, r.out));
  // the composition rounds 1 + scale to bf16 in its backward (0.3 % here); the fused backward keeps it in float32
  EXPECT_LT(max_rel(f.dx, t.dx), 1e-5) << "composition's own error " << max_rel(r.dx, t.dx);
  EXPECT_LT(max_rel(f.da, t.da), 1e-2);  // bf16 gradients of bf16 inputs: one rounding
  EXPECT_LT(max_rel(f.db, t.db), 1e-2);
  at::Tensor gate = at::randn({2, 64}).to(at::kBFloat16), y = at::randn({2, 33, 64}).to(at::kBFloat16);
  Result g = run([](auto& x, auto& g, auto& y) { return gated_residual(x, g, y); }, x, gate, y, w);
  Result q = run([](auto& x, auto& g, auto& y) { return gated_residual_reference(x, g, y); }, x, gate, y, w);
  EXPECT_EQ(g.out.scalar_type(), at::kFloat);
  EXPECT_EQ(g.db.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(g.out, q.out));
  EXPECT_LT(max_rel(g.da, q.da), 1e-2);
  EXPECT_LT(max_rel(g.db, q.db), 1e-2);
}

TEST(BlockOps, FiniteDifferences) {
  // the hand-written backward against central differences, float64
  set_fused_block_ops(true);
  torch::manual_seed(3);
  auto o = at::TensorOptions().dtype(at::kDouble);
  at::Tensor x = at::randn({2, 3, 8}, o), shift = at::randn({2, 8}, o), scale = at::randn({2, 8}, o), w = at::randn({2, 3, 8}, o);
  auto loss = [&](const at::Tensor& x, const at::Tensor& s, const at::Tensor& c) { return (layer_norm_modulate(x, s, c, 1e-6) * w).sum().item<double>(); };
  Result f = run([&](auto& x, auto& s, auto& c) { return layer_norm_modulate(x, s, c, 1e-6); }, x, shift, scale, w);
  const double h = 1e-6;
  for (int i = 0; i < 12; ++i) {
    const int64_t k = (i * 7) % x.numel();
    at::Tensor xp = x.clone(), xm = x.clone();
    xp.view(-1)[k] += h;
    xm.view(-1)[k] -= h;
    const double fd = (loss(xp, shift, scale) - loss(xm, shift, scale)) / (2 * h);
    EXPECT_NEAR(f.dx.view(-1)[k].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << "dx[" << k << "]";
    const int64_t j = (i * 5) % scale.numel();
    at::Tensor cp = scale.clone(), cm = scale.clone();
    cp.view(-1)[j] += h;
    cm.view(-1)[j] -= h;
    const double fds = (loss(x, shift, cp) - loss(x, shift, cm)) / (2 * h);
    EXPECT_NEAR(f.db.view(-1)[j].item<double>(), fds, 1e-6 * std::max(1.0, std::abs(fds))) << "dscale[" << j << "]";
  }
}

TEST(BlockOps, SwitchAndErrors) {
  set_fused_block_ops(false);
  EXPECT_FALSE(fused_block_ops());
  set_fused_block_ops(true);
  EXPECT_TRUE(fused_block_ops());
  try {
    layer_norm_modulate(at::randn({2, 8}), at::randn({2, 8}), at::randn({2, 8}), 1e-6);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("x must be (N, T, D)"), std::string::npos) << e.what();
  }
}

TEST(BlockOps, ResidualPassThroughAddsItsGradient) {
  // x feeds LayerNorm + modulate and the residual: the fused op's second output carries the
  // residual, and its backward adds that gradient to ∂L/∂x (one pass on CUDA) — equal to autograd
  // summing the two paths of the composition
  set_fused_block_ops(true);
  torch::manual_seed(4);
  auto o = at::TensorOptions().dtype(at::kDouble);
  at::Tensor x0 = at::randn({2, 9, 16}, o), ab0 = at::randn({2, 48}, o), w = at::randn({2, 9, 16}, o);
  auto block = [&](bool fused) {
    at::Tensor x = x0.clone().requires_grad_(true), ab = ab0.clone().requires_grad_(true);
    at::Tensor shift = ab.narrow(1, 0, 16), scale = ab.narrow(1, 16, 16), gate = ab.narrow(1, 32, 16);
    at::Tensor out;
    if (fused) {
      auto a = layer_norm_modulate_residual(x, shift, scale, 1e-6);
      out = gated_residual(a.residual, gate, at::tanh(a.modulated));
    } else {
      out = gated_residual_reference(x, gate, at::tanh(layer_norm_modulate_reference(x, shift, scale, 1e-6)));
    }
    (out * w).sum().backward();
    return std::tuple{out.detach(), x.grad(), ab.grad()};
  };
  auto [of, xf, af] = block(true);
  auto [op, xp, ap] = block(false);
  EXPECT_TRUE(at::equal(of, op));
  EXPECT_LT(max_rel(xf, xp), 1e-12);
  EXPECT_LT(max_rel(af, ap), 1e-12);
}

TEST(BlockOps, BiasGeluEqualsTheComposition) {
  set_fused_block_ops(true);
  torch::manual_seed(5);
  auto o = at::TensorOptions().dtype(at::kDouble);
  at::Tensor y0 = at::randn({2, 7, 24}, o) * 2, b0 = at::randn({24}, o), w = at::randn({2, 7, 24}, o);
  auto run = [&](bool fused) {
    at::Tensor y = y0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
    at::Tensor out = fused ? bias_gelu(y, b) : bias_gelu_reference(y, b);
    (out * w).sum().backward();
    return std::tuple{out.detach(), y.grad(), b.grad()};
  };
  auto [of, yf, bf] = run(true);
  auto [op, yp, bp] = run(false);
  EXPECT_TRUE(at::allclose(of, op, 0, 1e-15));
  EXPECT_LT(max_rel(yf, yp), 1e-12);
  EXPECT_LT(max_rel(bf, bp), 1e-12);
  // mixed: bf16 activations, float32 bias (autocast's GEMM output and the parameter)
  at::Tensor yb = y0.to(at::kBFloat16).requires_grad_(true), bb = b0.to(at::kFloat).requires_grad_(true);
  bias_gelu(yb, bb).to(at::kDouble).mul(w).sum().backward();
  EXPECT_EQ(yb.grad().scalar_type(), at::kBFloat16);
  EXPECT_EQ(bb.grad().scalar_type(), at::kFloat);
  EXPECT_LT(max_rel(bb.grad(), bp), 2e-2);
}

// The gated residual and the LayerNorm-modulate after it as one training operation
// (gated_residual_layer_norm_modulate under autograd, NALA_RESIDUAL_NORM_TRAIN=1) against the two
// operations (=0): both outputs and the five gradients bit for bit, with both outputs feeding the loss,
// the residual output unused (the final layer's use: its gradient stays undefined, the functions do not
// materialize it) and the modulated output unused; and against autograd of the plain composition in
// float64. A float32 x with float32 branch vectors too (the CPU's dtype mix).
TEST(BlockOps, GatedResidualLayerNormModulateTrainingEqualsTheTwoOps) {
  set_fused_block_ops(true);
  for (auto dt : {at::kDouble, at::kFloat})
    for (int uses : {3, 1, 2}) {  // bit 1: the modulated output feeds the loss, bit 2: the residual
      const bool use_modulated = uses & 1, use_residual = uses & 2;
      torch::manual_seed(10 + uses);
      auto o = at::TensorOptions().dtype(dt);
      const at::Tensor x0 = at::randn({3, 7, 24}, o), y0 = at::randn({3, 7, 24}, o), v0 = at::randn({3, 72}, o) * 0.5;
      const at::Tensor w1 = at::randn({3, 7, 24}, o), w2 = at::randn({3, 7, 24}, o);
      auto run = [&](int mode) {  // 0: the two operations, 1: the one operation, 2: the plain composition
        at::Tensor x = x0.clone().requires_grad_(true), y = y0.clone().requires_grad_(true), v = v0.clone().requires_grad_(true);
        const at::Tensor gate = v.narrow(1, 0, 24), shift = v.narrow(1, 24, 24), scale = v.narrow(1, 48, 24);
        at::Tensor mod, res;
        if (mode == 2) {
          res = gated_residual_reference(x, gate, y);
          mod = layer_norm_modulate_reference(res, shift, scale, 1e-6);
        } else {
          set_residual_norm_fused_training(mode == 1);
          auto r = gated_residual_layer_norm_modulate(x, gate, y, shift, scale, 1e-6);
          mod = r.modulated, res = r.residual;
        }
        at::Tensor loss = use_modulated ? (mod * w1).sum() : at::zeros({}, o);
        if (use_residual) loss = loss + (at::tanh(res) * w2).sum();
        loss.backward();
        set_residual_norm_fused_training(true);
        return std::vector<at::Tensor>{mod.detach(), res.detach(), x.grad(), y.grad(), v.grad()};
      };
      const auto two = run(0), one = run(1), plain = run(2);
      const char* names[] = {"modulated", "residual", "dx", "dy", "d(gate, shift, scale)"};
      for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(at::equal(one[i], two[i])) << names[i] << " " << dt << " uses " << uses;
        if (dt == at::kDouble) EXPECT_LT(max_rel(one[i], plain[i]), 1e-12) << names[i] << " uses " << uses;
      }
    }
  // a sum that promotes past x's dtype (a bf16 x, float32 gate and branch) keeps the two operations' dtypes
  const at::Tensor xb = at::randn({2, 5, 8}).to(at::kBFloat16).requires_grad_(true), yf = at::randn({2, 5, 8}).requires_grad_(true);
  const at::Tensor v = at::randn({2, 24}).requires_grad_(true);
  auto r = gated_residual_layer_norm_modulate(xb, v.narrow(1, 0, 8), yf, v.narrow(1, 8, 8), v.narrow(1, 16, 8), 1e-6);
  auto r2 = layer_norm_modulate_residual(gated_residual(xb, v.narrow(1, 0, 8), yf), v.narrow(1, 8, 8), v.narrow(1, 16, 8), 1e-6);
  EXPECT_EQ(r.residual.scalar_type(), at::kFloat);
  EXPECT_EQ(r.modulated.scalar_type(), r2.modulated.scalar_type());
  EXPECT_TRUE(at::equal(r.modulated, r2.modulated));
  EXPECT_TRUE(residual_norm_fused_training());
}
