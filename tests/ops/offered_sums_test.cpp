// Offered column sums (ops/offered_sums.h): taken only for the very tensor they were offered with
// (a view of it qualifies; a copy, another tensor or the tensor changed in place does not), once; and a
// linear layer's backward takes them as its bias gradient instead of summing the gradient itself.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/linear.h"
#include "ops/offered_sums.h"

using namespace nala::ops;

TEST(OfferedSums, TakenOnlyForTheTensorTheyWereOfferedWith) {
  const at::Tensor g = at::randn({6, 4}), sums = at::randn({4});  // (R, C), (C)
  offer_column_sums(g, sums);
  EXPECT_FALSE(take_column_sums(g.clone()).defined()) << "a copy";
  EXPECT_FALSE(take_column_sums(at::randn({6, 4})).defined()) << "another tensor";
  EXPECT_FALSE(take_column_sums(g.narrow(0, 1, 5)).defined()) << "part of it";
  const int64_t before = column_sums_taken();
  const at::Tensor t = take_column_sums(g.view({2, 3, 4}));  // a view of the whole: the same storage, offset and size
  ASSERT_TRUE(t.defined());
  EXPECT_TRUE(at::equal(t, sums));
  EXPECT_EQ(column_sums_taken() - before, 1);
  EXPECT_FALSE(take_column_sums(g).defined()) << "used up";

  offer_column_sums(g, sums);
  g.mul_(2);  // changed in place after the offer: the sums are stale
  EXPECT_FALSE(take_column_sums(g).defined()) << "a tensor changed since the offer";

  // the last kMaxOffers kept, the oldest dropped
  std::vector<at::Tensor> gs;
  for (int i = 0; i <= kMaxOffers; ++i) {
    gs.push_back(at::randn({3, 2}));
    offer_column_sums(gs.back(), at::full({2}, double(i)));
  }
  EXPECT_FALSE(take_column_sums(gs.front()).defined()) << "the oldest offer is dropped";
  for (int i = kMaxOffers; i >= 1; --i) {
    const at::Tensor s = take_column_sums(gs[size_t(i)]);
    ASSERT_TRUE(s.defined()) << i;
    EXPECT_EQ(s[0].item<double>(), double(i));
  }
  // a square gradient's transposed alias: the same storage, offset, size and width, the other axis's sums
  const at::Tensor sq = at::randn({4, 4});
  offer_column_sums(sq, sq.sum(0));
  EXPECT_FALSE(take_column_sums(sq.t()).defined()) << "a transposed alias";
  EXPECT_TRUE(take_column_sums(sq).defined());
  EXPECT_THROW(offer_column_sums(sq.t(), sq.sum(1)), c10::Error) << "a gradient that is not contiguous";
  EXPECT_THROW(offer_column_sums(g, at::randn({3})), c10::Error) << "sums of another width";
  EXPECT_THROW(offer_column_sums(g, at::randn({4}, at::kDouble)), c10::Error) << "not float32";
}

TEST(OfferedSums, LinearLayerTakesThemAsItsBiasGradient) {
  torch::manual_seed(0);
  for (bool offered : {false, true}) {
    const at::Tensor x = at::randn({5, 3}).requires_grad_(), w = at::randn({4, 3}).requires_grad_(), b = at::randn({4}).requires_grad_();
    const at::Tensor y = linear_op(x, w, b);  // (5, 4)
    const at::Tensor g = at::randn({5, 4});   // ∂L/∂y
    const at::Tensor marker = at::arange(4, at::kFloat) + 100;  // not Σ_rows g: shows where the gradient came from
    if (offered) offer_column_sums(g, marker);
    const int64_t before = column_sums_taken();
    y.backward(g);
    EXPECT_EQ(column_sums_taken() - before, offered ? 1 : 0);
    EXPECT_TRUE(at::allclose(b.grad(), offered ? marker : g.sum(0))) << (offered ? "offered" : "summed");
    EXPECT_TRUE(at::allclose(w.grad(), g.t().mm(x.detach())));  // the rest as ever
  }
}
