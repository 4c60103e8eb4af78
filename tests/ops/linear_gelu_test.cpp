// linear_gelu (ops/linear_gelu.h) on the CPU: GELU_tanh(x Wᵀ + b) against the formula written out in
// float64 (0.5·y·(1 + tanh(√(2/π)·(y + 0.044715·y³))), timm's Mlp with approximate="tanh"), forward
// and the gradients of x, W and b against autograd of that formula, with the fused ops on and off
// (on the CPU both are the ATen composition; the CUDA epilogue is tests/cuda/block_kernels_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/fused_ops.h"
#include "ops/linear_gelu.h"
#include "rel_error.h"

using namespace nala::ops;

namespace {

using nala::test::rel;

at::Tensor gelu_tanh_formula(const at::Tensor& y) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * y * (1 + at::tanh(c * (y + 0.044715 * y.pow(3))));  // same shape as y
}

}  // namespace

TEST(LinearGelu, EqualsTheFormulaForwardAndBackward) {
  for (bool fused : {true, false}) {
    set_fused_block_ops(fused);
    torch::manual_seed(3);
    torch::nn::Linear fc1(torch::nn::LinearOptions(12, 20));
    fc1->to(at::kDouble);
    const at::Tensor x0 = at::randn({2, 5, 12}, at::kDouble) * 2, gy = at::randn({2, 5, 20}, at::kDouble);
    at::Tensor x = x0.clone().requires_grad_(true);
    const at::Tensor y = linear_gelu(*fc1, x);  // (2, 5, 20)
    (y * gy).sum().backward();
    const at::Tensor gx = x.grad().clone(), gw = fc1->weight.grad().clone(), gb = fc1->bias.grad().clone();
    fc1->zero_grad();

    at::Tensor xr = x0.clone().requires_grad_(true);
    const at::Tensor w = fc1->weight.detach().clone().requires_grad_(true), b = fc1->bias.detach().clone().requires_grad_(true);
    const at::Tensor yr = gelu_tanh_formula(at::matmul(xr, w.t()) + b);  // (2, 5, 20)
    (yr * gy).sum().backward();
    EXPECT_LT(rel(y.detach(), yr.detach()), 1e-13) << "fused " << fused;
    EXPECT_LT(rel(gx, xr.grad()), 1e-12) << "fused " << fused;
    EXPECT_LT(rel(gw, w.grad()), 1e-12) << "fused " << fused;
    EXPECT_LT(rel(gb, b.grad()), 1e-12) << "fused " << fused;
  }
  set_fused_block_ops(true);
}
