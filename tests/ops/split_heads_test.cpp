// split_heads: the views equal unbind's, and the one-pass backward equals autograd's backward of
// unbind (stack + copy), with parts unused (zero gradient) and transposed consumers; a repeated
// part's two gradients equal autograd's sum of one part read twice.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/split_heads.h"

using namespace nala::ops;

TEST(SplitHeads, EqualsUnbindForwardAndBackward) {
  torch::manual_seed(0);
  for (int P : {3, 4}) {
    at::Tensor t0 = at::randn({2, 5, P, 3, 8}, at::kDouble);
    std::vector<at::Tensor> w;
    for (int i = 0; i < P; ++i) w.push_back(at::randn({2, 3, 5, 8}, at::kDouble));
    auto run = [&](bool ours) {
      at::Tensor t = t0.clone().requires_grad_(true);
      std::vector<at::Tensor> parts = ours ? split_heads(t) : t.unbind(2);
      at::Tensor loss = at::zeros({}, at::kDouble);
      for (int i = 0; i < P; ++i) {
        EXPECT_EQ(parts[i].sizes(), (at::IntArrayRef{2, 5, 3, 8}));
        if (i == 1) continue;  // an unused part: its gradient is zero
        loss = loss + (parts[i].transpose(1, 2) * w[i]).sum();  // consumed as (B, H, N, d), as attention does
      }
      loss.backward();
      return t.grad();
    };
    at::Tensor a = run(true), b = run(false);
    EXPECT_TRUE(at::equal(a, b)) << "P=" << P;
    EXPECT_TRUE(at::equal(split_heads(t0)[P - 1], t0.select(2, P - 1)));
  }
  EXPECT_THROW(split_heads(at::randn({2, 5, 8})), std::exception);
}

TEST(SplitHeads, RepeatedPartGradientsAdd) {
  torch::manual_seed(1);
  for (auto dt : {at::kDouble, at::kBFloat16}) {
    at::Tensor t0 = at::randn({2, 5, 4, 3, 8}).to(dt);
    at::Tensor w_attn = at::randn({2, 3, 5, 8}).to(dt), w_tail = at::randn({2, 5, 24}).to(dt), w_q = at::randn({2, 5, 3, 8}).to(dt);
    // ours: v (part 2) read as parts[2] by one consumer and as parts[4] by the other; autograd's
    // own: unbind's parts[2] read by both (its two gradients summed by autograd, in dt)
    auto run = [&](bool ours) {
      at::Tensor t = t0.clone().requires_grad_(true);
      std::vector<at::Tensor> parts = ours ? split_heads(t, 2) : t.unbind(2);
      EXPECT_EQ(parts.size(), ours ? 5u : 4u);
      const at::Tensor& v2 = ours ? parts[4] : parts[2];
      at::Tensor loss = (parts[2].transpose(1, 2) * w_attn).sum() + (v2.reshape({2, 5, 24}) * w_tail).sum() + (parts[0] * w_q).sum();
      loss.backward();
      return t.grad();
    };
    at::Tensor a = run(true), b = run(false);
    EXPECT_TRUE(at::equal(a, b)) << dt;
    // only the second consumer uses v: its gradient alone
    at::Tensor t = t0.clone().requires_grad_(true);
    auto parts = split_heads(t, 2);
    (parts[4] * parts[4]).sum().backward();
    EXPECT_TRUE(at::equal(t.grad().select(2, 2), 2 * t0.select(2, 2)));
    EXPECT_TRUE(at::equal(t.grad().select(2, 1), at::zeros_like(t0.select(2, 1))));
  }
  EXPECT_THROW(split_heads(at::randn({2, 5, 4, 3, 8}), 4), std::exception);
}
