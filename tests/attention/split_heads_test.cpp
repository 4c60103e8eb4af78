// split_heads: the views equal unbind's, and the one-pass backward equals autograd's backward of
// unbind (stack + copy), with parts unused (zero gradient) and transposed consumers.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "attention/split_heads.h"

using namespace nala::attention;

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
