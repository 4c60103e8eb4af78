// linear_op (ops/linear.h): the layer as its own autograd operation, whose backward runs the
// two GEMMs and the bias gradient as a column sum; against autograd of at::linear in float64 and
// float32, for 2-D and 3-D inputs and for any subset of inputs needing a gradient.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/fused_ops.h"
#include "ops/linear.h"
#include "ops/mlp.h"
#include "rel_error.h"

using namespace nala::ops;

namespace {

using nala::test::rel;

}  // namespace

TEST(LinearOp, EqualsAtLinearForwardAndBackward) {
  torch::manual_seed(0);
  for (auto dt : {at::kDouble, at::kFloat}) {
    for (auto sizes : {std::vector<int64_t>{7, 12}, std::vector<int64_t>{3, 5, 12}}) {
      for (int mask = 1; mask < 8; ++mask) {  // which of x, w, b need a gradient
        at::Tensor x0 = at::randn(sizes, dt), w0 = at::randn({9, 12}, dt), b0 = at::randn({9}, dt);
        at::Tensor gy = at::randn(sizes, dt).narrow(-1, 0, 9).contiguous();
        auto run = [&](bool ours) {
          at::Tensor x = x0.clone().requires_grad_(mask & 1), w = w0.clone().requires_grad_(mask & 2), b = b0.clone().requires_grad_(mask & 4);
          at::Tensor y = ours ? linear_op(x, w, b) : at::linear(x, w, b);
          (y * gy).sum().backward();
          return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
        };
        auto a = run(true), r = run(false);
        const double tol = dt == at::kDouble ? 1e-13 : 1e-6;
        EXPECT_LT(rel(a[0], r[0]), tol);
        for (int i = 1; i < 4; ++i) {
          ASSERT_EQ(a[i].defined(), r[i].defined()) << "gradient " << i << " mask " << mask;
          if (!a[i].defined()) continue;
          EXPECT_EQ(a[i].scalar_type(), r[i].scalar_type());
          EXPECT_LT(rel(a[i], r[i]), tol) << "gradient " << i << " mask " << mask << " " << dt;
        }
      }
    }
  }
}

TEST(LinearOp, BadShapesAreNamed) {
  try {
    linear_op(at::randn({2, 5}), at::randn({3, 4}), at::randn({3}));
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit"), std::string::npos) << e.what();
  }
  EXPECT_THROW(linear_op(at::randn({2, 4}), at::randn({3, 4}), at::Tensor()), std::exception);
}

TEST(LinearOp, LinearModuleKeepsAtLinearOffCuda) {
  // on the CPU linear() is at::linear itself: bitwise the same output and gradients
  torch::nn::Linear m(6, 4);
  at::Tensor x = at::randn({2, 3, 6}, at::TensorOptions().requires_grad(true));
  at::Tensor y = linear(m, x);
  EXPECT_TRUE(at::equal(y, at::linear(x, m->weight, m->bias)));
}

TEST(LinearOp, TunedGemmSwitchLeavesTheCpuOnAten) {
  // NALA_GEMM_TUNE=1 (ops/fused_ops.h gemm_tuned) concerns CUDA tensors alone: on the CPU
  // tuned_linear declines (undefined) and linear() / linear_gelu() stay at::linear bit for bit
  set_gemm_tuned(true);
  torch::manual_seed(3);
  torch::nn::Linear m(16, 8);
  const torch::NoGradGuard no_grad;
  const at::Tensor x = at::randn({2, 5, 16});  // (B, T, in)
  EXPECT_FALSE(tuned_linear(x, m->weight, m->bias, false).defined());
  EXPECT_TRUE(at::equal(linear(m, x), at::linear(x, m->weight, m->bias)));
  set_gemm_tuned(false);  // the default
}

TEST(LinearOp, TunedTrainingSwitchLeavesTheCpuOnAten) {
  // NALA_GEMM_TUNE_TRAIN=1 (ops/fused_ops.h gemm_tuned_training) concerns CUDA tensors alone: on the
  // CPU linear_op's forward (through linear_forward) and backward (linear_grads) give the bits they
  // give with the switch off, which LinearOp's other tests hold against at::linear's autograd
  torch::manual_seed(5);
  const at::Tensor x0 = at::randn({2, 5, 16}), w0 = at::randn({8, 16}), b0 = at::randn({8}), g = at::randn({2, 5, 8});
  auto step = [&](bool tuned) {
    set_gemm_tuned_training(tuned);
    const at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
    const at::Tensor y = linear_op(x, w, b);  // (2, 5, 8)
    (y * g).sum().backward();
    return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  const auto on = step(true), off = step(false);  // off last: the default
  for (size_t i = 0; i < on.size(); ++i) EXPECT_TRUE(at::equal(on[i], off[i])) << "output/gradient " << i;
  EXPECT_TRUE(at::equal(linear_forward(x0.view({10, 16}), w0, b0), at::linear(x0.view({10, 16}), w0, b0)));
}

TEST(LinearOp, BiasGradientSwitchLeavesTheCpuOnAten) {
  // NALA_GEMM_BGRAD=1 (ops/fused_ops.h gemm_bias_grads: bias gradients from cuBLASLt's epilogues)
  // concerns CUDA tensors alone: on the CPU linear_op's and mlp_op's outputs and gradients are the
  // bits they are with the switch off, which LinearOp's and the MLP's other tests hold against
  // autograd of the plain formulas
  torch::manual_seed(6);
  const at::Tensor x0 = at::randn({2, 5, 16}), w0 = at::randn({8, 16}), b0 = at::randn({8}), g = at::randn({2, 5, 8});
  const at::Tensor w1 = at::randn({32, 16}), b1 = at::randn({32}), w2 = at::randn({16, 32}), b2 = at::randn({16}), gm = at::randn({2, 5, 16});
  auto step = [&](bool bgrad) {
    set_gemm_bias_grads(bgrad);
    auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
    const at::Tensor x = leaf(x0), w = leaf(w0), b = leaf(b0), v1 = leaf(w1), c1 = leaf(b1), v2 = leaf(w2), c2 = leaf(b2);
    const at::Tensor y = linear_op(x, w, b), m = mlp_op(x, v1, c1, v2, c2);  // (2, 5, 8), (2, 5, 16)
    ((y * g).sum() + (m * gm).sum()).backward();
    return std::vector<at::Tensor>{y.detach(), m.detach(), x.grad(), w.grad(), b.grad(), v1.grad(), c1.grad(), v2.grad(), c2.grad()};
  };
  const auto on = step(true), off = step(false);  // off last: the default
  for (size_t i = 0; i < on.size(); ++i) {
    ASSERT_TRUE(on[i].defined()) << "output/gradient " << i;
    EXPECT_TRUE(at::equal(on[i], off[i])) << "output/gradient " << i;
  }
}

TEST(LinearOp, DgeluGemmSwitchIsCheckedAndLeavesTheCpuOnAten) {
  // NALA_GEMM_DGELU (ops/fused_ops.h dgelu_gemm: fc1's DGELU GEMM from CUTLASS instead of cuBLASLt)
  // concerns bf16 CUDA GEMMs alone: on the CPU mlp_op's output and gradients are the bits they are
  // with the default, which the MLP's other tests hold against autograd of the plain formulas. Its
  // values: the three names, "" the default; anything else (and a CUTLASS name in a build without
  // CUTLASS) an error naming the variable and the value.
  EXPECT_EQ(dgelu_gemm_from(""), DgeluGemm::cublaslt);
  EXPECT_EQ(dgelu_gemm_from("cublaslt"), DgeluGemm::cublaslt);
#ifdef NALA_WITH_CUTLASS
  EXPECT_EQ(dgelu_gemm_from("cutlass-pingpong"), DgeluGemm::cutlass_pingpong);
  EXPECT_EQ(dgelu_gemm_from("cutlass-cooperative"), DgeluGemm::cutlass_cooperative);
#else
  try {
    dgelu_gemm_from("cutlass-pingpong");
    ADD_FAILURE() << "a CUTLASS kernel accepted in a build without CUTLASS";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no CUTLASS"), std::string::npos) << e.what();
  }
#endif
  try {
    dgelu_gemm_from("cutlass");
    ADD_FAILURE() << "NALA_GEMM_DGELU=cutlass accepted";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("NALA_GEMM_DGELU"), std::string::npos) << m;
    EXPECT_NE(m.find("'cutlass'"), std::string::npos) << m;
  }
  torch::manual_seed(7);
  const at::Tensor x0 = at::randn({2, 5, 16}), w1 = at::randn({32, 16}), b1 = at::randn({32}), w2 = at::randn({16, 32}), b2 = at::randn({16});
  const at::Tensor gm = at::randn({2, 5, 16});
  auto step = [&](DgeluGemm k) {
    set_dgelu_gemm(k);
    auto leaf = [](const at::Tensor& t) { return t.clone().requires_grad_(true); };
    const at::Tensor x = leaf(x0), v1 = leaf(w1), c1 = leaf(b1), v2 = leaf(w2), c2 = leaf(b2);
    const at::Tensor m = mlp_op(x, v1, c1, v2, c2);  // (2, 5, 16)
    (m * gm).sum().backward();
    return std::vector<at::Tensor>{m.detach(), x.grad(), v1.grad(), c1.grad(), v2.grad(), c2.grad()};
  };
  const auto on = step(DgeluGemm::cutlass_pingpong), off = step(DgeluGemm::cublaslt);  // off last: the default
  for (size_t i = 0; i < on.size(); ++i) {
    ASSERT_TRUE(on[i].defined()) << "output/gradient " << i;
    EXPECT_TRUE(at::equal(on[i], off[i])) << "output/gradient " << i;
  }
}
