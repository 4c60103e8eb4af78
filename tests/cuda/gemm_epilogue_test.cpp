// cuBLASLt GEMM epilogues of the training MLP (ops/cuda/gemm_epilogue.h, ops/mlp.h) against
// float64 truth and beside the ATen composition they replace (at::linear + at::gelu(tanh);
// at::gelu_backward of the GEMM), in bf16 and fp16; then a DiT-S MLP trained under bf16 autocast
// with the epilogues on against the same with them off (the bias-GELU kernel).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "cuda_test_util.h"

#include "models/cuda_graph.h"
#include "models/dit.h"
#include "models/model_config.h"
#include "ops/cuda/block_cuda.h"
#include "ops/cuda/gemm_epilogue.h"
#ifdef NALA_WITH_CUTLASS
#include "ops/cutlass/gemm_bias.h"
#include "ops/cutlass/gemm_dgelu.h"
#endif
#include "ops/fused_ops.h"
#include "ops/linear.h"
#include "ops/linear_gelu.h"
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
    ops::set_gemm_tuned_training(false);  // the defaults, whatever the environment says
    ops::set_gemm_bias_grads(false);
  }
  void TearDown() override {  // the defaults
    ops::set_gemm_epilogues(true);
    ops::set_gemm_tuned(false);
    ops::set_gemm_tuned_training(false);
    ops::set_gemm_bias_grads(false);
    ops::set_dgelu_gemm(ops::DgeluGemm::cublaslt);
  }
};

at::Tensor d(const at::Tensor& t) { return t.to(at::kDouble).cpu(); }

// One training step of a DiT-S-shaped MLP on x0 with output gradient gy: under bf16 autocast on the
// GPU as the trainer runs it, or (fp64) the plain formula in float64 on the CPU, the truth. Returns
// {out, dx, dW1, db1, dW2, db2}.
std::vector<at::Tensor> mlp_step(nala::models::Mlp& m, const at::Tensor& x0, const at::Tensor& gy, bool fp64) {
  for (auto& p : m.parameters()) p.mutable_grad() = at::Tensor();
  if (fp64) {
    auto p = [](const at::Tensor& t) { return t.detach().to(at::kDouble).cpu().requires_grad_(true); };
    std::vector<at::Tensor> ps = {p(m.fc1->weight), p(m.fc1->bias), p(m.fc2->weight), p(m.fc2->bias)};
    at::Tensor xd = p(x0);
    const at::Tensor y = at::linear(at::gelu(at::linear(xd, ps[0], ps[1]), "tanh"), ps[2], ps[3]);
    (y * d(gy)).sum().backward();
    return {y.detach(), xd.grad(), ps[0].grad(), ps[1].grad(), ps[2].grad(), ps[3].grad()};
  }
  at::Tensor x = x0.clone().requires_grad_(true), y;
  {
    Autocast ac(true);
    y = m.forward(x);  // bf16
  }
  (y.to(at::kFloat) * gy).sum().backward();
  return {y.detach(), x.grad(), m.fc1->weight.grad(), m.fc1->bias.grad(), m.fc2->weight.grad(), m.fc2->bias.grad()};
}

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
    return mlp_step(m, x0, gy, fp64);  // {out (8, 64, 384), dx, dW1, db1, dW2, db2}
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


// Sampling's bias GEMM with the algorithm chosen by timing (NALA_GEMM_TUNE=1) against float64 truth
// beside ATen's (at::linear; at::_addmm_activation with GELU), bf16 and fp16, with and without GELU:
// the timed first call, a later call (the kept algorithm) and the untimed heuristic's first are all as
// close to the truth as ATen's result (each is one GEMM in float accumulation rounded to the dtype once).
TEST_F(GemmEpilogue, TunedBiasGemmMatchesFloat64LikeAten) {
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    for (bool gelu : {false, true}) {
      for (auto [R, K, N] : {std::tuple<int64_t, int64_t, int64_t>{4096, 384, 1536}, {37, 64, 256}, {2048, 1152, 3456}}) {
        torch::manual_seed(R + K + gelu);
        const at::Tensor x = at::randn({R, K}, at::kCUDA).to(dt), w = (at::randn({N, K}, at::kCUDA) * 0.05).to(dt);  // (R, K), (N, K)
        const at::Tensor b = (at::randn({N}, at::kCUDA) * 0.5).to(dt);                                           // (N)
        at::Tensor truth = at::linear(d(x), d(w), d(b));                                                        // (R, N)
        if (gelu) truth = at::gelu(truth, "tanh");
        const at::Tensor aten = gelu ? at::_addmm_activation(b, x, w.t(), 1, 1, true) : at::linear(x, w, b);  // (R, N)
        ops::cuda::gemm_tuned_clear();
        const int64_t timings = ops::cuda::gemm_timings();
        const at::Tensor timed = ops::cuda::gemm_bias(x, w, b, gelu, /*tune=*/true);  // (R, N)
        EXPECT_EQ(ops::cuda::gemm_timings(), timings + 1) << "a new shape is timed";
        EXPECT_EQ(ops::cuda::gemm_tuned_shapes(), 1);
        const at::Tensor kept = ops::cuda::gemm_bias(x, w, b, gelu, /*tune=*/true);  // (R, N)
        EXPECT_EQ(ops::cuda::gemm_timings(), timings + 1) << "a kept shape is not timed again";
        const at::Tensor first = ops::cuda::gemm_bias(x, w, b, gelu, /*tune=*/false);  // (R, N)
        const double e_aten = rel(aten, truth);
        std::printf("  gemm_bias %s gelu %d %ldx%ldx%ld: vs float64 timed %.2e, kept %.2e, heuristic's first %.2e; ATen %.2e (CUTLASS chosen: %d)\n",
                    c10::toString(dt), int(gelu), (long)R, (long)K, (long)N, rel(timed, truth), rel(kept, truth), rel(first, truth), e_aten,
                    int(ops::cuda::gemm_tuned_shapes(/*other_only=*/true)));
        for (const at::Tensor* y : {&timed, &kept, &first}) {
          ASSERT_EQ(y->sizes(), aten.sizes());
          EXPECT_LE(rel(*y, truth), 1.25 * e_aten + 1e-5) << dt << " gelu " << gelu << " " << R << "x" << K << "x" << N;
        }
      }
    }
  }
}

// Inside a CUDA graph capture a shape not yet timed takes the heuristic's first algorithm (timing would
// synchronize with the host, which a capture forbids) and is not kept; the replay computes the layer.
// ops::linear and ops::linear_gelu take the tuned GEMM in inference once NALA_GEMM_TUNE is on.
TEST_F(GemmEpilogue, TunedLinearInGraphsAndLayers) {
  ops::set_gemm_tuned(true);
  ops::cuda::gemm_tuned_clear();
  torch::manual_seed(7);
  const at::Tensor x = at::randn({3, 64, 192}, at::kCUDA).to(at::kBFloat16);  // (B, T, D)
  torch::nn::Linear fc(torch::nn::LinearOptions(192, 768));
  fc->to(at::kCUDA, at::kBFloat16);
  const torch::NoGradGuard no_grad;
  const at::Tensor ref = at::linear(x, fc->weight, fc->bias);  // (B, T, 768)
  const int64_t timings = ops::cuda::gemm_timings();
  nala::models::CudaGraph graph;
  at::Tensor captured;
  graph.capture([&] { captured = ops::linear(*fc, x); });
  EXPECT_EQ(ops::cuda::gemm_timings(), timings) << "no timing inside a capture";
  EXPECT_EQ(ops::cuda::gemm_tuned_shapes(), 0);
  graph.replay();
  torch::cuda::synchronize();
  EXPECT_LE(rel(captured, ref), 1e-2);
  const at::Tensor y = ops::linear(*fc, x);  // (B, T, 768): timed now, so linear() took gemm_bias
  EXPECT_EQ(ops::cuda::gemm_timings(), timings + 1);
  EXPECT_EQ(y.sizes(), ref.sizes());
  EXPECT_LE(rel(y, ref), 1e-2);
  const at::Tensor h = ops::linear_gelu(*fc, x);  // (B, T, 768): GELU in the epilogue, another key
  EXPECT_EQ(ops::cuda::gemm_timings(), timings + 2);
  EXPECT_LE(rel(h, at::gelu(ref, "tanh")), 1e-2);
  {  // under autocast the layer stays ATen's (which casts): nothing timed
    const Autocast autocast(true);
    const at::Tensor z = ops::linear(*fc, at::randn({2, 8, 192}, at::kCUDA));  // (2, 8, 768)
    EXPECT_EQ(ops::cuda::gemm_timings(), timings + 2);
    EXPECT_EQ(z.scalar_type(), at::kBFloat16);
  }
}

// Training's two backward GEMMs with the algorithm chosen by timing (NALA_GEMM_TUNE_TRAIN=1) against
// float64 truth beside ATen's at::mm, bf16 and fp16: dgrad dx = g w and wgrad dw = gᵀ x; the timed
// first call, the kept algorithm and the untimed heuristic's first, each one GEMM in float
// accumulation rounded once, as close to the truth as ATen's. Shapes: DiT-S's qkv, a ragged one,
// DiT-XL's qkv at few rows.
TEST_F(GemmEpilogue, TunedTrainingGemmsMatchFloat64LikeAten) {
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    for (auto [R, M, N] : {std::tuple<int64_t, int64_t, int64_t>{4096, 1152, 384}, {37, 64, 256}, {2048, 3456, 1152}}) {
      torch::manual_seed(R + M + N);
      const at::Tensor g = at::randn({R, M}, at::kCUDA).to(dt);                  // (R, M): ∂L/∂out
      const at::Tensor w = (at::randn({M, N}, at::kCUDA) * 0.05).to(dt);          // (M, N): out × in
      const at::Tensor x = at::randn({R, N}, at::kCUDA).to(dt);                  // (R, N): the layer's input
      const at::Tensor dx_truth = d(g).mm(d(w)), dw_truth = d(g).t().mm(d(x));  // (R, N), (M, N)
      const at::Tensor dx_aten = g.mm(w), dw_aten = g.t().mm(x);                // (R, N), (M, N)
      ops::cuda::gemm_tuned_clear();
      const int64_t timings = ops::cuda::gemm_timings();
      const at::Tensor dx_timed = ops::cuda::gemm_dgrad(g, w, true), dw_timed = ops::cuda::gemm_wgrad(g, x, true);
      EXPECT_EQ(ops::cuda::gemm_timings(), timings + 2) << "two new shapes are timed";
      EXPECT_EQ(ops::cuda::gemm_tuned_shapes(), 2);
      const at::Tensor dx_kept = ops::cuda::gemm_dgrad(g, w, true), dw_kept = ops::cuda::gemm_wgrad(g, x, true);
      EXPECT_EQ(ops::cuda::gemm_timings(), timings + 2) << "kept shapes are not timed again";
      const at::Tensor dx_first = ops::cuda::gemm_dgrad(g, w, false), dw_first = ops::cuda::gemm_wgrad(g, x, false);
      std::printf("  %s %ldx%ldx%ld: dgrad vs float64 timed %.2e kept %.2e first %.2e ATen %.2e; wgrad timed %.2e kept %.2e first %.2e ATen %.2e\n",
                  c10::toString(dt), (long)R, (long)M, (long)N, rel(dx_timed, dx_truth), rel(dx_kept, dx_truth), rel(dx_first, dx_truth),
                  rel(dx_aten, dx_truth), rel(dw_timed, dw_truth), rel(dw_kept, dw_truth), rel(dw_first, dw_truth), rel(dw_aten, dw_truth));
      const std::string what = std::string(c10::toString(dt)) + " " + std::to_string(R) + "x" + std::to_string(M) + "x" + std::to_string(N);
      for (const at::Tensor* y : {&dx_timed, &dx_kept, &dx_first}) {
        ASSERT_TRUE(y->defined()) << what;
        ASSERT_EQ(y->sizes(), dx_aten.sizes()) << what;
        EXPECT_EQ(y->scalar_type(), dt) << what;
        EXPECT_LE(rel(*y, dx_truth), 1.25 * rel(dx_aten, dx_truth) + 1e-5) << what << ": dgrad";
      }
      for (const at::Tensor* y : {&dw_timed, &dw_kept, &dw_first}) {
        ASSERT_TRUE(y->defined()) << what;
        ASSERT_EQ(y->sizes(), dw_aten.sizes()) << what;
        EXPECT_LE(rel(*y, dw_truth), 1.25 * rel(dw_aten, dw_truth) + 1e-5) << what << ": wgrad";
      }
    }
  }
  // operands the GEMMs cannot take are refused by name, not computed wrongly
  const at::Tensor g = at::randn({16, 12}, at::kCUDA).to(at::kBFloat16), w = at::randn({12, 64}, at::kCUDA).to(at::kBFloat16);
  EXPECT_FALSE(ops::cuda::gemm_grads_supported(g, w));  // rows of 12 elements
  EXPECT_THROW(ops::cuda::gemm_dgrad(g, w, true), c10::Error);
}

namespace {
// A DiT-S linear layer (384 → 1152, qkv's shape) and MLP (384 → 1536 → 384) with float32 parameters, one
// training step under bf16 autocast with whatever switches are set, and the float64 truth of that step
// on the CPU: {q, y, dx, dW, db, dW1, db1, dW2, db2}.
struct TrainingLayers {
  int seeded = (torch::manual_seed(13), 0);  // before the layers draw their initial weights
  torch::nn::Linear fc{torch::nn::LinearOptions(384, 1152)};
  nala::models::Mlp mlp{384, 1536};
  at::Tensor x0, gq, gm;
  std::vector<at::Tensor> params, truth;
  static constexpr const char* names[9] = {"q", "y", "dx", "dW", "db", "dW1", "db1", "dW2", "db2"};

  TrainingLayers() {
    for (auto& p : fc->parameters()) p.detach().normal_(0, 0.05);
    for (auto& p : mlp.parameters()) p.detach().normal_(0, 0.05);
    fc->to(at::kCUDA);
    mlp.to(at::kCUDA);
    x0 = at::randn({8, 64, 384}, at::kCUDA);                                   // (B, T, D)
    gq = at::randn({8, 64, 1152}, at::kCUDA), gm = at::randn({8, 64, 384}, at::kCUDA);  // output gradients
    params = {fc->weight, fc->bias, mlp.fc1->weight, mlp.fc1->bias, mlp.fc2->weight, mlp.fc2->bias};
    auto p64 = [](const at::Tensor& t) { return t.detach().to(at::kDouble).cpu().requires_grad_(true); };
    std::vector<at::Tensor> ps;
    for (auto& p : params) ps.push_back(p64(p));
    at::Tensor xd = p64(x0);
    const at::Tensor qd = at::linear(xd, ps[0], ps[1]), yd = at::linear(at::gelu(at::linear(xd, ps[2], ps[3]), "tanh"), ps[4], ps[5]);
    ((qd * d(gq)).sum() + (yd * d(gm)).sum()).backward();
    truth = {qd.detach(), yd.detach(), xd.grad()};
    for (auto& p : ps) truth.push_back(p.grad());
  }

  std::vector<at::Tensor> step() {
    for (auto p : params) p.mutable_grad() = at::Tensor();
    at::Tensor x = x0.clone().requires_grad_(true), q, y;
    {
      Autocast ac(true);
      q = ops::linear(*fc, x);  // (8, 64, 1152) bf16
      y = mlp.forward(x);       // (8, 64, 384) bf16
    }
    ((q.to(at::kFloat) * gq).sum() + (y.to(at::kFloat) * gm).sum()).backward();
    std::vector<at::Tensor> out = {q.detach(), y.detach(), x.grad()};
    for (auto& p : params) out.push_back(p.grad());
    return out;
  }
};
}  // namespace

// The layers trained one step under bf16 autocast with NALA_GEMM_TUNE_TRAIN=1 give what ATen's GEMMs
// give (every output and gradient against float64 truth, as close as with the switch off), and really
// run the timed GEMMs: the linear's forward, dgrad and wgrad (3 shapes), the MLP's fc1 with
// GELU_AUX_BIAS, fc2, fc2's wgrad, the DGELU, fc1's dgrad and wgrad (6 more).
TEST_F(GemmEpilogue, TunedTrainingLayersMatchAten) {
  TrainingLayers layers;
  ops::set_gemm_tuned_training(false);
  const auto off = layers.step();
  ops::set_gemm_tuned_training(true);
  ops::cuda::gemm_tuned_clear();
  const int64_t timings = ops::cuda::gemm_timings();
  const auto on = layers.step();
  EXPECT_EQ(ops::cuda::gemm_timings(), timings + 9) << "the linear's 3 GEMMs and the MLP's 6, each timed once";
  const auto again = layers.step();
  EXPECT_EQ(ops::cuda::gemm_timings(), timings + 9) << "a second step times nothing";
  ASSERT_EQ(on.size(), 9u);
  for (size_t i = 0; i < on.size(); ++i) {
    const char* name = TrainingLayers::names[i];
    const double e_on = rel(on[i], layers.truth[i]), e_off = rel(off[i], layers.truth[i]);
    std::printf("  tuned training %-4s vs float64: tuned %.2e, ATen %.2e\n", name, e_on, e_off);
    EXPECT_EQ(on[i].scalar_type(), off[i].scalar_type()) << name;
    EXPECT_LE(e_on, 1.5 * e_off + 2e-3) << name;
    EXPECT_TRUE(at::equal(again[i], on[i])) << name << ": the kept algorithms repeat bit for bit";
  }
}

// The bias gradients from the GEMM epilogues (ops/cuda/gemm_epilogue.h gemm_dgelu_bgrad: DGELU_BGRAD,
// gemm_wgrad_bgrad: BGRADB) against float64 truth beside nala's column sum of ATen's GEMM output, bf16
// and fp16, timed, kept and the heuristic's first; the GEMM outputs beside them as close to the truth
// as at::mm's. A bias gradient cuBLASLt writes in the output's dtype (its default, where it refuses
// float32) is allowed that dtype's rounding.
TEST_F(GemmEpilogue, BiasGradientEpiloguesMatchFloat64) {
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    const double rounding = dt == at::kBFloat16 ? 4e-3 : 5e-4;  // ≈ a unit in the last place of the dtype, relative
    for (auto [R, M, N] : {std::tuple<int64_t, int64_t, int64_t>{4096, 384, 1536}, {37, 64, 256}, {2048, 1152, 4608}}) {
      torch::manual_seed(R + M + N);
      // dgelu: g (R, M) fc2's output gradient, w2 (M, N) fc2's weight, aux (R, N) fc1's pre-activation
      const at::Tensor g = at::randn({R, M}, at::kCUDA).to(dt), w2 = (at::randn({M, N}, at::kCUDA) * 0.05).to(dt);
      const at::Tensor aux = at::randn({R, N}, at::kCUDA).to(dt);
      const at::Tensor dy64 = at::gelu_backward(d(g).mm(d(w2)), d(aux), "tanh"), db1_64 = dy64.sum(0);  // (R, N), (N)
      const at::Tensor dy_aten = at::gelu_backward(g.mm(w2), aux, "tanh");                              // (R, N)
      const double edy_aten = rel(dy_aten, dy64), edb1_aten = rel(ops::column_sum(dy_aten), db1_64);
      // wgrad: g (R, M) the layer's output gradient, x (R, N) its input
      const at::Tensor x = at::randn({R, N}, at::kCUDA).to(dt);
      const at::Tensor dw64 = d(g).t().mm(d(x)), db_64 = d(g).sum(0);  // (M, N), (M)
      const double edw_aten = rel(g.t().mm(x), dw64), edb_aten = rel(ops::column_sum(g), db_64);
      const std::string what = std::string(c10::toString(dt)) + " " + std::to_string(R) + "x" + std::to_string(M) + "x" + std::to_string(N);

      ops::cuda::gemm_tuned_clear();
      const int64_t timings = ops::cuda::gemm_timings();
      const int64_t runs = ops::cuda::gemm_bias_gradient_runs(true) + ops::cuda::gemm_bias_gradient_runs(false);
      const int64_t in_float = ops::cuda::gemm_bias_gradient_runs(true);
      std::vector<std::array<at::Tensor, 2>> dgelu, wgrad;  // timed, kept, heuristic's first
      for (bool tune : {true, true, false}) {
        dgelu.push_back(ops::cuda::gemm_dgelu_bgrad(g, w2, aux, tune));
        wgrad.push_back(ops::cuda::gemm_wgrad_bgrad(g, x, tune));
        if (tune) EXPECT_EQ(ops::cuda::gemm_timings(), timings + 2) << what << ": two shapes timed once, then kept";
      }
      if (!dgelu[0][0].defined() || !wgrad[0][0].defined()) {
        // cuBLASLt may not offer an epilogue at every shape (then the layers sum the gradient themselves);
        // the DiT shapes (rows a multiple of 8) must have it
        std::printf("  %s: epilogue not offered (dgelu %d, wgrad %d)\n", what.c_str(), int(dgelu[0][0].defined()), int(wgrad[0][0].defined()));
        EXPECT_NE(R % 8, 0) << what << ": cuBLASLt offers no bias-gradient epilogue at a DiT shape";
        continue;
      }
      EXPECT_EQ(ops::cuda::gemm_bias_gradient_runs(true) + ops::cuda::gemm_bias_gradient_runs(false), runs + 6) << what;
      const bool f32 = ops::cuda::gemm_bias_gradient_runs(true) == in_float + 6;
      std::printf("  %s: bias gradient written in %s; dgelu %.2e (ATen %.2e) db1 %.2e (column sum %.2e); wgrad %.2e (ATen %.2e) db %.2e (column sum %.2e)\n",
                  what.c_str(), f32 ? "float32" : c10::toString(dt), rel(dgelu[0][0], dy64), edy_aten, rel(dgelu[0][1], db1_64), edb1_aten,
                  rel(wgrad[0][0], dw64), edw_aten, rel(wgrad[0][1], db_64), edb_aten);
      const double slack = f32 ? 1e-5 : rounding;
      for (int i = 0; i < 3; ++i) {
        for (const auto* r : {&dgelu[i], &wgrad[i]}) {
          ASSERT_TRUE((*r)[0].defined() && (*r)[1].defined()) << what << ": cuBLASLt offers this epilogue on this GPU";
          EXPECT_EQ((*r)[1].scalar_type(), at::kFloat) << what;
        }
        ASSERT_EQ(dgelu[i][0].sizes(), dy_aten.sizes()) << what;
        ASSERT_EQ(wgrad[i][0].sizes(), (at::IntArrayRef{M, N})) << what;
        EXPECT_LE(rel(dgelu[i][0], dy64), 2 * edy_aten + 4e-3) << what << ": dy (cuBLASLt's GELU derivative, as BiasGeluAuxAndDgeluMatchFloat64 allows)";
        EXPECT_LE(rel(dgelu[i][1], db1_64), 1.5 * edb1_aten + slack) << what << ": fc1's bias gradient";
        EXPECT_LE(rel(wgrad[i][0], dw64), 1.25 * edw_aten + 1e-5) << what << ": dw";
        EXPECT_LE(rel(wgrad[i][1], db_64), 1.5 * edb_aten + slack) << what << ": the bias gradient";
      }
    }
  }
  // operands the GEMMs cannot take are refused by name
  const at::Tensor g = at::randn({16, 12}, at::kCUDA).to(at::kBFloat16), x = at::randn({16, 64}, at::kCUDA).to(at::kBFloat16);
  EXPECT_THROW(ops::cuda::gemm_wgrad_bgrad(g, x, false), c10::Error);  // rows of 12 elements
}

// The layers trained one step under bf16 autocast with NALA_GEMM_BGRAD=1, alone and with
// NALA_GEMM_TUNE_TRAIN=1: every output and gradient as close to float64 as with the column sums, the
// three bias gradients (the linear's, fc2's, fc1's) from the epilogues, and with tuning nine shapes
// timed as without it.
TEST_F(GemmEpilogue, BiasGradientLayersMatchAten) {
  TrainingLayers layers;
  const auto off = layers.step();  // the column sums (the default)
  for (bool tuned : {false, true}) {
    ops::set_gemm_bias_grads(true);
    ops::set_gemm_tuned_training(tuned);
    ops::cuda::gemm_tuned_clear();
    const int64_t timings = ops::cuda::gemm_timings();
    const int64_t runs = ops::cuda::gemm_bias_gradient_runs(true) + ops::cuda::gemm_bias_gradient_runs(false);
    const auto on = layers.step();
    EXPECT_EQ(ops::cuda::gemm_bias_gradient_runs(true) + ops::cuda::gemm_bias_gradient_runs(false), runs + 3)
        << "the linear's, fc2's and fc1's bias gradients from the epilogues";
    EXPECT_EQ(ops::cuda::gemm_timings(), timings + (tuned ? 9 : 0));
    ASSERT_EQ(on.size(), 9u);
    for (size_t i = 0; i < on.size(); ++i) {
      const char* name = TrainingLayers::names[i];
      const double e_on = rel(on[i], layers.truth[i]), e_off = rel(off[i], layers.truth[i]);
      std::printf("  bias gradients from the epilogues (tuned %d) %-4s vs float64: %.2e, column sums %.2e\n", int(tuned), name, e_on, e_off);
      EXPECT_EQ(on[i].scalar_type(), off[i].scalar_type()) << name;
      EXPECT_LE(e_on, 1.5 * e_off + 4e-3) << name;
    }
  }
}

#ifdef NALA_WITH_CUTLASS
// The CUTLASS GEMM alone (ops/cutlass/gemm_bias.h) against float64 truth beside cuBLASLt's (at::linear)
// on DiT-XL/2's fc2 shape at a few rows, a row count off the 128-row tile, and a small one.
TEST_F(GemmEpilogue, CutlassBiasGemmMatchesFloat64LikeAten) {
  ASSERT_TRUE(ops::cuda::gemm_cutlass_built());
  for (auto [R, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1024, 4608, 1152}, {1000, 1152, 3456}, {8, 64, 8}}) {
    torch::manual_seed(R + K);
    const at::Tensor x = at::randn({R, K}, at::kCUDA).to(at::kBFloat16), w = (at::randn({N, K}, at::kCUDA) * 0.05).to(at::kBFloat16);  // (R, K), (N, K)
    const at::Tensor b = (at::randn({N}, at::kCUDA) * 0.5).to(at::kBFloat16);                                                     // (N)
    const at::Tensor truth = at::linear(d(x), d(w), d(b)), aten = at::linear(x, w, b);                                         // (R, N) ×2
    at::Tensor y = at::full({R, N}, std::nan(""), x.options());  // (R, N): every element must be written
    const at::Tensor ws = at::empty({int64_t(std::max<size_t>(ops::cutlass_gemm::gemm_bias_bf16_workspace(R, N, K), 1))}, x.options().dtype(at::kByte));
    std::string why;
    ASSERT_TRUE(ops::cutlass_gemm::gemm_bias_bf16(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), R, N, K, ws.data_ptr(),
                                                   at::cuda::getCurrentCUDAStream().stream(), why))
        << why;
    torch::cuda::synchronize();
    std::printf("  cutlass gemm_bias %ldx%ldx%ld: vs float64 %.2e, ATen %.2e, equal to ATen's bits: %d\n", (long)R, (long)K, (long)N, rel(y, truth),
                rel(aten, truth), int(at::equal(y, aten)));
    EXPECT_FALSE(y.isnan().any().item<bool>());
    EXPECT_LE(rel(y, truth), 1.25 * rel(aten, truth) + 1e-5) << R << "x" << K << "x" << N;
  }
  std::string why;
  EXPECT_FALSE(ops::cutlass_gemm::gemm_bias_bf16(nullptr, nullptr, nullptr, nullptr, 16, 12, 64, nullptr, nullptr, why));  // N % 8
  EXPECT_NE(why.find("N 12"), std::string::npos) << why;
}

// CUTLASS's DGELU GEMMs (ops/cutlass/gemm_dgelu.h), both schedules, through gemm_dgelu with
// NALA_GEMM_DGELU set: dy = GELU_tanh'(aux) ⊙ (g w) against float64 truth beside cuBLASLt's DGELU epilogue
// (the default) on DiT-S/2's and DiT-XL/2's fc1 shapes at a few rows, rows off the 128-row tile, and a
// tiny one; every element written (the output starts as NaN where CUTLASS writes it directly).
TEST_F(GemmEpilogue, CutlassDgeluMatchesFloat64LikeCublasLt) {
  ASSERT_TRUE(ops::cuda::gemm_cutlass_built());
  for (auto [R, M, N] : {std::tuple<int64_t, int64_t, int64_t>{4096, 384, 1536}, {1000, 1152, 4608}, {129, 64, 264}, {8, 8, 8}}) {
    torch::manual_seed(R + M);
    const at::Tensor g = at::randn({R, M}, at::kCUDA).to(at::kBFloat16), w = (at::randn({M, N}, at::kCUDA) * 0.05).to(at::kBFloat16);  // (R, M), (M, N)
    const at::Tensor aux = (at::randn({R, N}, at::kCUDA) * 2).to(at::kBFloat16);                                                   // (R, N)
    const at::Tensor truth = at::gelu_backward(d(g).mm(d(w)), d(aux), "tanh");                                                  // (R, N)
    const at::Tensor lt = ops::cuda::gemm_dgelu(g, w, aux);                                                                         // (R, N)
    const double e_lt = rel(lt, truth);
    for (auto k : {ops::DgeluGemm::cutlass_pingpong, ops::DgeluGemm::cutlass_cooperative}) {
      ops::set_dgelu_gemm(k);
      const int64_t runs = ops::cuda::gemm_dgelu_cutlass_runs();
      const at::Tensor dy = ops::cuda::gemm_dgelu(g, w, aux);  // (R, N)
      torch::cuda::synchronize();
      EXPECT_EQ(ops::cuda::gemm_dgelu_cutlass_runs(), runs + 1) << "the CUTLASS kernel did not run";
      const double e = rel(dy, truth);
      std::printf("  cutlass dgelu %-11s %ldx%ld->%ld: vs float64 %.2e, cuBLASLt %.2e\n",
                  k == ops::DgeluGemm::cutlass_pingpong ? "ping-pong" : "cooperative", (long)R, (long)M, (long)N, e, e_lt);
      EXPECT_FALSE(dy.isnan().any().item<bool>());
      EXPECT_LE(e, 1.5 * e_lt + 2e-3) << R << "x" << M << "x" << N;
    }
    ops::set_dgelu_gemm(ops::DgeluGemm::cublaslt);
    // the kernel alone writes every element of its output (no NaN left from the fill)
    at::Tensor y = at::full({R, N}, std::nan(""), g.options());  // (R, N)
    const auto s = ops::cutlass_gemm::DgeluSchedule::pingpong;
    const at::Tensor ws = at::empty({int64_t(std::max<size_t>(ops::cutlass_gemm::gemm_dgelu_bf16_workspace(s, R, M, N), 1))}, g.options().dtype(at::kByte));
    std::string why;
    ASSERT_TRUE(ops::cutlass_gemm::gemm_dgelu_bf16(s, g.data_ptr(), w.data_ptr(), aux.data_ptr(), y.data_ptr(), R, M, N, ws.data_ptr(),
                                                    at::cuda::getCurrentCUDAStream().stream(), why))
        << why;
    EXPECT_FALSE(y.isnan().any().item<bool>());
  }
  std::string why;
  EXPECT_FALSE(ops::cutlass_gemm::gemm_dgelu_bf16(ops::cutlass_gemm::DgeluSchedule::cooperative, nullptr, nullptr, nullptr, nullptr, 16, 64, 12,
                                                   nullptr, nullptr, why));  // N % 8
  EXPECT_NE(why.find("N 12"), std::string::npos) << why;
}

// The DiT-S MLP trained one step under bf16 autocast with NALA_GEMM_DGELU=cutlass-pingpong and
// =cutlass-cooperative: every output and gradient as close to float64 as with cuBLASLt's DGELU (the
// default), and the CUTLASS kernel ran once a backward.
TEST_F(GemmEpilogue, TrainingMlpWithCutlassDgeluMatchesCublasLt) {
  torch::manual_seed(12);
  nala::models::Mlp m(384, 1536);
  for (auto& p : m.parameters()) p.detach().normal_(0, 0.05);
  m.to(at::kCUDA);
  const at::Tensor x0 = at::randn({8, 64, 384}, at::kCUDA), gy = at::randn({8, 64, 384}, at::kCUDA);
  auto run = [&](ops::DgeluGemm k, bool fp64) {
    ops::set_dgelu_gemm(k);
    return mlp_step(m, x0, gy, fp64);  // {out (8, 64, 384), dx, dW1, db1, dW2, db2}
  };
  const auto truth = run(ops::DgeluGemm::cublaslt, true), lt = run(ops::DgeluGemm::cublaslt, false);
  const char* names[] = {"out", "dx", "dW1", "db1", "dW2", "db2"};
  for (auto k : {ops::DgeluGemm::cutlass_pingpong, ops::DgeluGemm::cutlass_cooperative}) {
    const int64_t runs = ops::cuda::gemm_dgelu_cutlass_runs();
    const auto c = run(k, false);
    EXPECT_EQ(ops::cuda::gemm_dgelu_cutlass_runs(), runs + 1);
    for (int i = 0; i < 6; ++i) {
      const double e = rel(c[i], truth[i]), e_lt = rel(lt[i], truth[i]);
      std::printf("  training MLP bf16 %-4s CUTLASS dgelu (%d) %.2e  cuBLASLt %.2e\n", names[i], int(k), e, e_lt);
      EXPECT_EQ(c[i].scalar_type(), lt[i].scalar_type()) << names[i];
      EXPECT_LE(e, 1.5 * e_lt + 2e-3) << names[i];
    }
    EXPECT_TRUE(at::equal(c[0], lt[0])) << "the forward does not depend on the switch";
  }
  ops::set_dgelu_gemm(ops::DgeluGemm::cublaslt);
}
#endif
