// cuBLASLt GEMM epilogues of the training MLP (ops/cuda/gemm_epilogue.h, ops/mlp.h) against
// float64 truth and beside the ATen composition they replace (at::linear + at::gelu(tanh);
// at::gelu_backward of the GEMM), in bf16 and fp16; then a DiT-S MLP trained under bf16 autocast
// with the epilogues on against the same with them off (the bias-GELU kernel). And sampling's gated
// residual in the GEMM (gemm_gated_residual, NALA_GATED_RESIDUAL_GEMM=1) against float64 and beside
// the two operations it replaces, alone and in a DiT forward.
#include <gtest/gtest.h>

#include <cstdio>

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "cuda_test_util.h"

#include "models/dit.h"
#include "models/model_config.h"
#include "ops/cuda/block_cuda.h"
#include "ops/cuda/gemm_epilogue.h"
#include "ops/fused_ops.h"
#include "ops/linear.h"
#include "ops/mlp.h"

using nala::test::Autocast;
using nala::test::rel;
namespace ops = nala::ops;

namespace {

class GemmEpilogue : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
    at::globalContext().setAllowTF32CuBLAS(false);
    ops::set_fused_block_ops(true);
    ops::set_residual_norm_fused(false);  // the blocks one after another, each through its GEMMs
  }
  void TearDown() override {  // the defaults
    ops::set_gemm_epilogues(true);
    ops::set_gated_residual_gemm(false);
  }
};

at::Tensor d(const at::Tensor& t) { return t.to(at::kDouble).cpu(); }

}  // namespace

TEST_F(GemmEpilogue, BiasGeluAuxAndDgeluMatchFloat64) {
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    for (auto [R, K, N] : {std::tuple<int64_t, int64_t, int64_t>{4096, 384, 1536}, {37, 64, 256}, {1, 1152, 4608}}) {
      torch::manual_seed(R + K);
      const at::Tensor x = at::randn({R, K}, at::kCUDA).to(dt), w = (at::randn({N, K}, at::kCUDA) * 0.05).to(dt);
      const at::Tensor b = at::randn({N}, at::kCUDA) * 0.5;  // float32, as the parameter
      ASSERT_TRUE(ops::cuda::gemm_epilogue_supported(x, w));
      const auto [h, aux] = ops::cuda::gemm_bias_gelu_aux(x, w, b);
      const at::Tensor a64 = at::linear(d(x), d(w), d(b.to(dt)));  // (R, N) the pre-activation, exact inputs
      const at::Tensor h64 = at::gelu(a64, "tanh");
      const at::Tensor a_c = at::linear(x, w, b.to(dt)), h_c = at::gelu(a_c, "tanh");
      const double ea = rel(aux, a64), eh = rel(h, h64), ea_c = rel(a_c, a64), eh_c = rel(h_c, h64);

      // dgelu: g (R, M) the gradient of fc2's output, fc2's weight (M, N), the aux above
      const int64_t M = K;
      const at::Tensor g = at::randn({R, M}, at::kCUDA).to(dt), w2 = (at::randn({M, N}, at::kCUDA) * 0.05).to(dt);
      const at::Tensor dy = ops::cuda::gemm_dgelu(g, w2, aux);
      const at::Tensor dy64 = at::gelu_backward(d(g).mm(d(w2)), d(aux), "tanh");
      const at::Tensor dy_c = at::gelu_backward(g.mm(w2), aux, "tanh");
      const double ed = rel(dy, dy64), ed_c = rel(dy_c, dy64);
      std::printf("  %-8s %ldx%ld->%ld  aux %.2e (ATen %.2e)  h %.2e (ATen %.2e)  dgelu %.2e (ATen %.2e)\n", c10::toString(dt), (long)R,
                  (long)K, (long)N, ea, ea_c, eh, eh_c, ed, ed_c);
      EXPECT_EQ(h.sizes(), (at::IntArrayRef{R, N}));
      EXPECT_LE(ea, 2 * ea_c + 2e-3);
      EXPECT_LE(eh, 2 * eh_c + 2e-3);
      EXPECT_LE(ed, 2 * ed_c + 4e-3);
    }
  }
}

TEST_F(GemmEpilogue, TrainingMlpEqualsTheBiasGeluPath) {
  // a DiT-S MLP (384 → 1536 → 384) under bf16 autocast, float32 parameters as the trainer keeps them
  torch::manual_seed(11);
  nala::models::Mlp m(384, 1536);
  for (auto& p : m.parameters()) p.detach().normal_(0, 0.05);
  m.to(at::kCUDA);
  const at::Tensor x0 = at::randn({8, 64, 384}, at::kCUDA), gy = at::randn({8, 64, 384}, at::kCUDA);
  auto run = [&](bool epilogues, bool fp64) {
    ops::set_gemm_epilogues(epilogues);
    for (auto& p : m.parameters()) p.mutable_grad() = at::Tensor();
    at::Tensor x = x0.clone().requires_grad_(true), y;
    if (fp64) {  // the truth: the plain formula in float64 on the CPU
      auto p = [](const at::Tensor& t) { return t.detach().to(at::kDouble).cpu().requires_grad_(true); };
      std::vector<at::Tensor> ps = {p(m.fc1->weight), p(m.fc1->bias), p(m.fc2->weight), p(m.fc2->bias)};
      at::Tensor xd = p(x0);
      y = at::linear(at::gelu(at::linear(xd, ps[0], ps[1]), "tanh"), ps[2], ps[3]);
      (y * d(gy)).sum().backward();
      return std::vector<at::Tensor>{y.detach(), xd.grad(), ps[0].grad(), ps[1].grad(), ps[2].grad(), ps[3].grad()};
    }
    {
      Autocast ac(true);
      y = m.forward(x);  // (8, 64, 384) bf16
    }
    (y.to(at::kFloat) * gy).sum().backward();
    return std::vector<at::Tensor>{y.detach(), x.grad(), m.fc1->weight.grad(), m.fc1->bias.grad(), m.fc2->weight.grad(), m.fc2->bias.grad()};
  };
  const auto truth = run(false, true), off = run(false, false), on = run(true, false);
  const char* names[] = {"out", "dx", "dW1", "db1", "dW2", "db2"};
  for (int i = 0; i < 6; ++i) {
    const double e_on = rel(on[i], truth[i]), e_off = rel(off[i], truth[i]);
    std::printf("  training MLP bf16 %-4s epilogues %.2e  bias-GELU kernel %.2e\n", names[i], e_on, e_off);
    EXPECT_EQ(on[i].scalar_type(), off[i].scalar_type()) << names[i];
    EXPECT_LE(e_on, 1.5 * e_off + 2e-3) << names[i];
  }
}

// r + gate ⊙ (x wᵀ + b) as one strided-batched GEMM (per-sample alpha vector, C = r, per-sample bias)
// against float64, beside the composition it replaces (at::linear, then the gated-residual kernel):
// proj-like and fc2-like shapes, a ragged token count, bf16 and fp16. The GEMM with the bias not
// scaled by the gate (bias_scaled = false) must be far off: that is how the test knows cuBLASLt adds
// the bias after alpha, as gemm_gated_residual assumes (if this flips, pass b instead of gate ⊙ b).
TEST_F(GemmEpilogue, GatedResidualGemmMatchesFloat64) {
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    for (auto [B, T, K, M] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 17, 384, 384}, {4, 256, 1152, 1152}, {2, 256, 4608, 1152}, {1, 8, 64, 24}}) {
      torch::manual_seed(B * T + K);
      const at::Tensor x = at::randn({B, T, K}, at::kCUDA).to(dt), w = (at::randn({M, K}, at::kCUDA) * 0.05).to(dt);  // (B, T, K), (M, K)
      const at::Tensor b = at::randn({M}, at::kCUDA) * 0.5, gate = at::randn({B, M}, at::kCUDA);                        // (M), (B, M) float32
      const at::Tensor r = (at::randn({B, T, M}, at::kCUDA) * 2).to(dt);                                              // (B, T, M)
      ASSERT_TRUE(ops::cuda::gemm_gated_residual_supported(x, w, r));
      const at::Tensor out = ops::cuda::gemm_gated_residual(x, w, b, r, gate);  // (B, T, M)
      ASSERT_TRUE(out.defined()) << "cuBLASLt offered no algorithm for " << dt << " " << B << "x" << T << "x" << K << "->" << M;
      const at::Tensor truth = d(r) + d(gate).unsqueeze(1) * at::linear(d(x), d(w), d(b.to(dt)));  // (B, T, M) float64
      const at::Tensor composed = ops::cuda::gated_residual_forward(r, gate, at::linear(x, w, b.to(dt)));  // (B, T, M)
      const at::Tensor unscaled = ops::cuda::gemm_gated_residual(x, w, b, r, gate, /*bias_scaled=*/false);
      const double e = rel(out, truth), e_c = rel(composed, truth), e_u = unscaled.defined() ? rel(unscaled, truth) : -1;
      std::printf("  gated residual GEMM %-8s %ldx%ldx%ld->%ld  %.2e (GEMM + kernel %.2e; bias not scaled %.2e)\n", c10::toString(dt), (long)B,
                  (long)T, (long)K, (long)M, e, e_c, e_u);
      EXPECT_EQ(out.scalar_type(), dt);
      EXPECT_LE(e, 1.5 * e_c + 1e-3) << dt << " " << B << "x" << T << "x" << K << "->" << M;
      if (unscaled.defined()) EXPECT_GT(e_u, 10 * e + 1e-2) << "cuBLASLt adds the bias before alpha: pass b, not gate ⊙ b";
    }
  }
}

// A bf16 DiT forward (sampling: no gradient) with NALA_GATED_RESIDUAL_GEMM=1 against the same with it
// off and against float32: every block's two gated residuals go through the GEMM, and the result
// stays as close to float32 as bf16's own (softmax and NaLa blocks).
TEST_F(GemmEpilogue, DitForwardWithTheGatedResidualGemm) {
  for (const char* name : {"DiT-S/2", "NaLaDiT-S/2"}) {
    auto [model, x, t, y] = nala::test::perturbed_dit(name);
    const auto& cfg = model->config();
    torch::NoGradGuard ng;
    const at::Tensor truth = model->forward(x, t, y);  // float32
    model->to(at::kBFloat16);
    const at::Tensor xb = x.to(at::kBFloat16);
    ops::set_gated_residual_gemm(false);
    const at::Tensor off = model->forward(xb, t, y);
    const int64_t calls0 = ops::gated_residual_gemm_calls();
    ops::set_gated_residual_gemm(true);
    const at::Tensor on = model->forward(xb, t, y);
    ops::set_gated_residual_gemm(false);
    EXPECT_EQ(ops::gated_residual_gemm_calls() - calls0, 2 * cfg.depth) << name;
    const double e_on = rel(on, truth), e_off = rel(off, truth);
    std::printf("  %s bf16 forward vs float32: gated residual GEMM %.2e, GEMM + kernel %.2e\n", name, e_on, e_off);
    EXPECT_LE(e_on, 1.25 * e_off + 1e-3) << name;
  }
}
