// WeightCasts (ops/weight_casts.h): the parameters cast in one pass, their gradients kept in bf16 and
// widened in one pass, against autograd through ATen's own casts (Tensor::to, as autocast casts):
// the same forward values and the same gradient bits, with a weight used twice, over two backward
// passes (--grad-accum's pieces), and the cases where no cast may be handed out.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/weight_casts.h"

using namespace nala::ops;

namespace {

struct Params {
  at::Tensor w1, b1, w2, b2;
  std::vector<at::Tensor> list() const { return {w1, b1, w2, b2}; }
};

Params make_params() {
  torch::manual_seed(3);
  Params p;
  p.w1 = at::randn({16, 8}).requires_grad_();  // (H, D)
  p.b1 = at::randn({16}).requires_grad_();     // (H)
  p.w2 = at::randn({8, 16}).requires_grad_();  // (D, H)
  p.b2 = at::randn({8}).requires_grad_();      // (D)
  return p;
}

// A two-layer net in bf16 whose first weight is read twice (as autocast's one cached cast is read by
// two GEMMs): the casts come from cast(t), the biases as an operation's forward reads them.
at::Tensor net(const at::Tensor& x, const Params& p, const std::function<at::Tensor(const at::Tensor&)>& cast) {
  const at::Tensor w1 = cast(p.w1), w2 = cast(p.w2);              // (H, D), (D, H) bf16
  const at::Tensor h = at::gelu(at::linear(x, w1, cast(p.b1)));   // (R, H)
  const at::Tensor y = at::linear(h, w2, cast(p.b2));             // (R, D)
  const at::Tensor again = at::linear(y, cast(p.w1));             // (R, H): w1 read a second time
  return (again.to(at::kFloat).square().mean() + y.to(at::kFloat).sum() * 1e-2);  // ()
}

std::vector<at::Tensor> grads(const Params& p) {
  std::vector<at::Tensor> g;
  for (const auto& t : p.list()) g.push_back(t.grad().defined() ? t.grad().clone() : at::Tensor());
  return g;
}

}  // namespace

TEST(WeightCasts, GradientsEqualAutogradThroughAtenCasts) {
  const at::Tensor x0 = at::randn({12, 8}).to(at::kBFloat16), x1 = at::randn({12, 8}).to(at::kBFloat16);  // (R, D) ×2: two pieces
  // reference: each piece casts with Tensor::to (w1 once a piece, read twice), autograd widens and accumulates
  Params r = make_params();
  std::vector<at::Tensor> ref_after_one;
  for (const at::Tensor& x : {x0, x1}) {
    const at::Tensor w1c = r.w1.to(at::kBFloat16);
    net(x, r, [&](const at::Tensor& t) { return t.is_same(r.w1) ? w1c : t.to(at::kBFloat16); }).backward();
    if (ref_after_one.empty()) ref_after_one = grads(r);
  }
  // ours: one refresh, a Scope a piece, the gradients taken after each backward
  Params o = make_params();
  WeightCasts casts(o.list(), at::kBFloat16);
  casts.refresh();
  const int64_t before = WeightCasts::handed_out();
  std::vector<at::Tensor> ours_after_one;
  for (const at::Tensor& x : {x0, x1}) {
    {
      WeightCasts::Scope scope(&casts);
      net(x, o, [&](const at::Tensor& t) {
        at::Tensor c = WeightCasts::operand(t, at::kBFloat16);
        EXPECT_TRUE(c.defined());
        EXPECT_TRUE(c.requires_grad());
        EXPECT_TRUE(at::equal(c, t.to(at::kBFloat16)));  // the forward reads autocast's values
        return c;
      }).backward();
    }
    for (const auto& t : o.list()) EXPECT_FALSE(t.grad().defined() && ours_after_one.empty()) << "autograd accumulated a kept gradient";
    casts.take_gradients();
    for (const auto& k : casts.kept_gradients()) EXPECT_FALSE(k.defined());
    if (ours_after_one.empty()) ours_after_one = grads(o);
  }
  EXPECT_EQ(WeightCasts::handed_out() - before, 10);  // 5 casts a piece
  const auto ref = grads(r), ours = grads(o);
  const char* names[] = {"w1", "b1", "w2", "b2"};
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(ours[i].defined()) << names[i];
    EXPECT_EQ(ours[i].scalar_type(), at::kFloat) << names[i];
    EXPECT_TRUE(at::equal(ours_after_one[i], ref_after_one[i])) << names[i] << " after one piece";
    EXPECT_TRUE(at::equal(ours[i], ref[i])) << names[i] << " after two pieces: max |diff| " << (ours[i] - ref[i]).abs().max().item<double>();
  }
}

TEST(WeightCasts, HandsOutOnlyFreshCastsOfItsParametersInItsScope) {
  Params p = make_params();
  WeightCasts casts(p.list(), at::kBFloat16);
  const at::Tensor other = at::randn({8}).requires_grad_();
  EXPECT_FALSE(WeightCasts::operand(p.w1, at::kBFloat16).defined()) << "no Scope";
  {
    WeightCasts::Scope scope(&casts);
    EXPECT_FALSE(WeightCasts::operand(p.w1, at::kBFloat16).defined()) << "never refreshed";
    casts.refresh();
    EXPECT_TRUE(WeightCasts::operand(p.w1, at::kBFloat16).defined());
    EXPECT_FALSE(WeightCasts::operand(p.w1, at::kHalf).defined()) << "another dtype";
    EXPECT_FALSE(WeightCasts::operand(other, at::kBFloat16).defined()) << "not a registered parameter";
    EXPECT_FALSE(WeightCasts::operand(p.w1.narrow(0, 0, 4), at::kBFloat16).defined()) << "a view of a parameter";
    {
      at::NoGradGuard ng;
      // grad mode off: the cast itself, as an operation's forward reads a bias
      const at::Tensor c = WeightCasts::operand(p.b1, at::kBFloat16);
      EXPECT_FALSE(c.requires_grad());
      EXPECT_EQ(c.data_ptr(), casts.cast(1).data_ptr());
      EXPECT_EQ(bias_operand(p.b1, at::kBFloat16).data_ptr(), casts.cast(1).data_ptr());
      EXPECT_TRUE(at::equal(bias_operand(other, at::kBFloat16), other.to(at::kBFloat16))) << "not registered: Tensor::to";
      p.w1.add_(1.0);  // changed in place after refresh
    }
    EXPECT_FALSE(WeightCasts::operand(p.w1, at::kBFloat16).defined()) << "a stale cast handed out after an in-place change";
    EXPECT_TRUE(WeightCasts::operand(p.w2, at::kBFloat16).defined());
    // with grad mode on a bias takes Tensor::to, which autograd sees (the caller's graph needs it)
    const at::Tensor b = bias_operand(p.b2, at::kBFloat16);
    EXPECT_TRUE(b.requires_grad());
    EXPECT_NE(b.data_ptr(), casts.cast(3).data_ptr());
    casts.refresh();
    EXPECT_TRUE(at::equal(WeightCasts::operand(p.w1, at::kBFloat16), p.w1.to(at::kBFloat16))) << "refreshed after the change";
  }
  EXPECT_FALSE(WeightCasts::operand(p.w1, at::kBFloat16).defined()) << "the Scope ended";
  // every cast 512 bytes past the first (cuBLASLt reads the operands' alignment; CUDA's allocator
  // aligns the buffer itself to 512 bytes, the CPU's to 64)
  const auto first = reinterpret_cast<uintptr_t>(casts.cast(0).data_ptr());
  for (int64_t i = 1; i < casts.size(); ++i) EXPECT_EQ((reinterpret_cast<uintptr_t>(casts.cast(i).data_ptr()) - first) % 512, 0u) << i;
}

// A backward whose gradients were never taken (an exception between backward and take_gradients)
// adds nothing to the next step: refresh() drops them.
TEST(WeightCasts, RefreshDropsGradientsNeverTaken) {
  Params p = make_params();
  WeightCasts casts(p.list(), at::kBFloat16);
  const at::Tensor x = at::randn({12, 8}).to(at::kBFloat16);  // (R, D)
  casts.refresh();
  {
    WeightCasts::Scope scope(&casts);
    net(x, p, [](const at::Tensor& t) { return WeightCasts::operand(t, at::kBFloat16); }).backward();
  }
  size_t kept = 0;
  for (const auto& k : casts.kept_gradients()) kept += k.defined();
  EXPECT_EQ(kept, 4u);
  casts.refresh();  // the next step, without take_gradients()
  for (const auto& k : casts.kept_gradients()) EXPECT_FALSE(k.defined());
  casts.take_gradients();
  for (const auto& t : p.list()) EXPECT_FALSE(t.grad().defined());
}

TEST(WeightCasts, RejectsWhatItCannotCast) {
  const at::Tensor ok = at::randn({4}).requires_grad_();
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([&] { WeightCasts({ok, at::randn({3}, at::kDouble).requires_grad_()}, at::kBFloat16); }).find("parameter 1 ([3] Double"),
            std::string::npos);
  EXPECT_NE(message([&] { WeightCasts({at::randn({2, 2})}, at::kBFloat16); }).find("parameter 0 ([2, 2]"), std::string::npos) << "no gradient";
  EXPECT_NE(message([&] { WeightCasts({ok, ok}, at::kBFloat16); }).find("listed twice"), std::string::npos);
  EXPECT_NE(message([&] { WeightCasts({ok}, at::kFloat); }).find("bf16 or fp16, got Float"), std::string::npos);
}

// A stack (the constructor's third argument) is laid out one cast after another, in the stack's
// order, wherever its members stand in the parameter list; stacked_operand hands it out as one
// matrix without a copy, and its backward keeps each member's rows of the gradient: bit for bit the
// gradients of autograd through Tensor::to and at::cat. Anything not one stack in its order gets
// nothing (the caller then concatenates).
TEST(WeightCasts, StackedOperandIsOneViewOfAdjacentCasts) {
  torch::manual_seed(4);
  auto param = [](std::vector<int64_t> shape) { return at::randn(shape).requires_grad_(); };
  const at::Tensor wa = param({32, 8}), b = param({16}), wb = param({64, 8}), wc = param({32, 8});  // 256, 16, 512, 256 values
  WeightCasts casts({wa, b, wb, wc}, at::kBFloat16, {{wb, wa}});
  casts.refresh();
  const at::Tensor x = at::randn({12, 8}).to(at::kBFloat16);  // (R, 8)
  EXPECT_FALSE(WeightCasts::stacked_operand({wb, wa}, at::kBFloat16).defined()) << "no Scope";
  const int64_t before = WeightCasts::handed_out(), stacks_before = WeightCasts::stacks_handed_out();
  {
    WeightCasts::Scope scope(&casts);
    EXPECT_FALSE(WeightCasts::stacked_operand({wa, wb}, at::kBFloat16).defined()) << "not the stack's order";
    EXPECT_FALSE(WeightCasts::stacked_operand({wa, wc}, at::kBFloat16).defined()) << "not adjacent";
    EXPECT_FALSE(WeightCasts::stacked_operand({wb, wa}, at::kHalf).defined()) << "another dtype";
    {
      at::NoGradGuard ng;
      const at::Tensor w = WeightCasts::stacked_operand({wb, wa}, at::kBFloat16);  // (96, 8)
      ASSERT_TRUE(w.defined());
      EXPECT_FALSE(w.requires_grad());
      EXPECT_EQ(w.data_ptr(), casts.cast(2).data_ptr()) << "a view of the casts, starting at the stack's first";
      EXPECT_EQ(static_cast<const char*>(casts.cast(0).data_ptr()) - static_cast<const char*>(casts.cast(2).data_ptr()), 64 * 8 * 2);
    }
    const at::Tensor w = WeightCasts::stacked_operand({wb, wa}, at::kBFloat16);  // (96, 8)
    ASSERT_TRUE(w.defined());
    EXPECT_TRUE(w.requires_grad());
    EXPECT_TRUE(at::equal(w, at::cat({wb.to(at::kBFloat16), wa.to(at::kBFloat16)})));
    at::linear(x, w).to(at::kFloat).square().mean().backward();  // (R, 96) -> ()
  }
  EXPECT_EQ(WeightCasts::handed_out() - before, 4);  // two stacks of two
  EXPECT_EQ(WeightCasts::stacks_handed_out() - stacks_before, 2);
  EXPECT_FALSE(wa.grad().defined()) << "autograd accumulated a kept gradient";
  casts.take_gradients();
  // reference: the same parameters' copies through Tensor::to and at::cat
  const at::Tensor ra = wa.detach().clone().requires_grad_(), rb = wb.detach().clone().requires_grad_();
  at::linear(x, at::cat({rb.to(at::kBFloat16), ra.to(at::kBFloat16)})).to(at::kFloat).square().mean().backward();
  ASSERT_TRUE(wa.grad().defined() && wb.grad().defined());
  EXPECT_TRUE(at::equal(wa.grad(), ra.grad())) << "max |diff| " << (wa.grad() - ra.grad()).abs().max().item<double>();
  EXPECT_TRUE(at::equal(wb.grad(), rb.grad())) << "max |diff| " << (wb.grad() - rb.grad()).abs().max().item<double>();
  EXPECT_FALSE(b.grad().defined());
  EXPECT_FALSE(wc.grad().defined());
  // a stack must be listed parameters, each once, 2-D with the stack's columns
  auto fails = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find("stack 0") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(fails([&] { WeightCasts({wa}, at::kBFloat16, {{wa, param({4, 8})}}); })) << "not listed";
  EXPECT_TRUE(fails([&] { WeightCasts({wa, wb}, at::kBFloat16, {{wa, wa}}); })) << "twice";
  EXPECT_TRUE(fails([&] { WeightCasts({wa, b}, at::kBFloat16, {{wa, b}}); })) << "1-D";
}
