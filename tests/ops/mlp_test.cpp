// mlp_op (ops/mlp.h) on the CPU: the MLP as one autograd op (its epilogue GEMMs there being the ATen
// composition) against autograd of the plain formula fc2(GELU_tanh(fc1(x))) in float64 and float32,
// for every subset of inputs needing a gradient; and mlp() on the CPU, which is that formula.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/fused_ops.h"
#include "ops/mlp.h"
#include "rel_error.h"

using namespace nala::ops;

namespace {

using nala::test::rel;

}  // namespace

TEST(MlpOp, EqualsTheFormulaForwardAndBackward) {
  torch::manual_seed(5);
  for (auto dt : {at::kDouble, at::kFloat}) {
    const at::Tensor x0 = at::randn({3, 7, 16}, dt), w10 = at::randn({40, 16}, dt) * 0.3, b10 = at::randn({40}, dt);
    const at::Tensor w20 = at::randn({16, 40}, dt) * 0.2, b20 = at::randn({16}, dt), gy = at::randn({3, 7, 16}, dt);
    for (int mask = 1; mask < 32; mask += (dt == at::kDouble ? 1 : 5)) {  // which of x, w1, b1, w2, b2 need a gradient
      auto run = [&](bool ours) {
        std::vector<at::Tensor> in = {x0.clone(), w10.clone(), b10.clone(), w20.clone(), b20.clone()};
        for (int i = 0; i < 5; ++i) in[i].requires_grad_(bool(mask & (1 << i)));
        const at::Tensor y = ours ? mlp_op(in[0], in[1], in[2], in[3], in[4])
                                  : at::linear(at::gelu(at::linear(in[0], in[1], in[2]), "tanh"), in[3], in[4]);  // (3, 7, 16)
        (y * gy).sum().backward();
        std::vector<at::Tensor> out = {y.detach()};
        for (auto& t : in) out.push_back(t.grad());
        return out;
      };
      const auto a = run(true), r = run(false);
      const double tol = dt == at::kDouble ? 1e-12 : 2e-5;
      EXPECT_LT(rel(a[0], r[0]), tol) << dt;
      for (int i = 1; i < 6; ++i) {
        ASSERT_EQ(a[i].defined(), r[i].defined()) << "gradient " << i << " mask " << mask;
        if (!a[i].defined()) continue;
        EXPECT_EQ(a[i].scalar_type(), r[i].scalar_type());
        EXPECT_LT(rel(a[i], r[i]), tol) << "gradient " << i << " mask " << mask << " " << dt;
      }
    }
  }
}

TEST(MlpOp, MlpOnTheCpuIsTheFormula) {
  torch::manual_seed(6);
  torch::nn::Linear fc1(16, 40), fc2(40, 16);
  const at::Tensor x = at::randn({2, 5, 16});
  for (bool epilogues : {false, true}) {  // the epilogue switch changes nothing on the CPU
    set_gemm_epilogues(epilogues);
    const at::Tensor y = mlp(*fc1, *fc2, x);  // (2, 5, 16)
    EXPECT_TRUE(at::allclose(y, at::linear(at::gelu(at::linear(x, fc1->weight, fc1->bias), "tanh"), fc2->weight, fc2->bias), 1e-6, 1e-6));
  }
  set_gemm_epilogues(true);  // the default
}

TEST(MlpOp, BadShapesAreAClearError) {
  const at::Tensor x = at::randn({2, 16}), w1 = at::randn({40, 16}), b1 = at::randn({40}), w2 = at::randn({16, 40}), b2 = at::randn({16});
  try {
    mlp_op(x, w1, b1, w2.t(), b2);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit"), std::string::npos) << e.what();
  }
}
