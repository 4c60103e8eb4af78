// The optimizer and the EMA (train/adamw.h) against independent implementations: LibTorch's own
// torch::optim::AdamW (ATen ops, not the fused kernel ours runs) over several steps with weight
// decay, a skipped step (found_inf) that changes nothing, a state() / load_state() round trip that
// continues exactly; a rate read from a tensor and changed between steps against torch::optim::AdamW
// with its group's rate changed the same way; and the EMA update against its formula in float64.
#include <gtest/gtest.h>

#include <cstdio>

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include "train/adamw.h"

using namespace nala;

namespace {

std::vector<at::Tensor> params(int64_t seed) {
  torch::manual_seed(seed);
  return {at::randn({7, 5}).requires_grad_(), at::randn({13}).requires_grad_(), at::randn({2, 3, 4}).requires_grad_()};
}

void set_grads(std::vector<at::Tensor>& ps, int64_t step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + step);
  for (auto& p : ps) p.mutable_grad() = at::randn(p.sizes(), gen) * (step % 2 ? 0.01 : 3.0);  // (shape of p)
}

double max_rel(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, ((a[i] - b[i]).abs().max() / b[i].abs().max()).item<double>());
  return worst;
}

}  // namespace

TEST(AdamW, EqualsTorchOptimAdamW) {
  for (double wd : {0.0, 0.05}) {
    train::AdamWOptions o;
    o.lr = 3e-3;
    o.weight_decay = wd;
    auto ours = params(1), ref = params(1);
    train::AdamW opt(ours, o);
    torch::optim::AdamW oracle(ref, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd));
    for (int64_t k = 0; k < 6; ++k) {
      set_grads(ours, k);
      set_grads(ref, k);
      opt.step();
      oracle.step();
    }
    const double e = max_rel(ours, ref);
    std::printf("weight decay %.2f: 6 steps, max relative difference to torch::optim::AdamW %.2e\n", wd, e);
    EXPECT_LT(e, 1e-5);
    EXPECT_GT(max_rel(ours, params(1)), 1e-3);  // the steps moved the weights
  }
}

TEST(AdamW, RateFromATensorChangedBetweenSteps) {
  train::AdamWOptions o;
  o.lr = 1.0;  // not used once the tensor is set
  o.weight_decay = 0.05;
  auto ours = params(3), ref = params(3);
  train::AdamW opt(ours, o);
  at::Tensor lr = at::zeros({}, at::kFloat);  // ()
  opt.set_lr_tensor(lr);
  torch::optim::AdamW oracle(ref, torch::optim::AdamWOptions(1e-3).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  const double rates[] = {1e-3, 4e-3, 2.5e-3, 5e-4, 3e-3};
  for (int64_t k = 0; k < 5; ++k) {
    // a rate a float32 holds exactly, so that the oracle's double rate is the same number
    const double r = double(float(rates[k]));
    lr.fill_(r);
    static_cast<torch::optim::AdamWOptions&>(oracle.param_groups()[0].options()).lr(r);
    set_grads(ours, k);
    set_grads(ref, k);
    opt.step();
    oracle.step();
  }
  const double e = max_rel(ours, ref);
  std::printf("a rate changed between 5 steps: max relative difference to torch::optim::AdamW %.2e\n", e);
  EXPECT_LT(e, 1e-5);
  EXPECT_THROW(opt.set_lr_tensor(at::zeros({1}, at::kFloat)), std::invalid_argument);   // not ()
  EXPECT_THROW(opt.set_lr_tensor(at::zeros({}, at::kDouble)), std::invalid_argument);  // not float32
}

TEST(AdamW, SkippedStepAndStateRoundTrip) {
  train::AdamWOptions o;
  o.lr = 1e-2;
  auto a = params(2), b = params(2), c = params(2);
  train::AdamW oa(a, o), ob(b, o);
  // a: step 0, a skipped step, step 1; b: step 0, step 1
  set_grads(a, 0);
  oa.step(at::zeros({1}));
  set_grads(b, 0);
  ob.step(at::zeros({1}));
  auto before = std::vector<at::Tensor>{a[0].detach().clone(), a[1].detach().clone(), a[2].detach().clone()};
  set_grads(a, 7);
  for (auto& p : a) p.mutable_grad().view(-1)[0].fill_(INFINITY);
  oa.step(at::ones({1}));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], before[i])) << "a skipped step changed parameter " << i;
  set_grads(a, 1);
  oa.step(at::zeros({1}));
  set_grads(b, 1);
  ob.step(at::zeros({1}));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
  // c starts from b's state (as a resumed run) and takes step 2 as b does
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < c.size(); ++i) c[i].copy_(b[i]);
  }
  train::AdamW oc(c, o);
  oc.load_state(ob.state(), "test");
  set_grads(b, 2);
  ob.step();
  set_grads(c, 2);
  oc.step();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(at::equal(b[i], c[i])) << "resumed parameter " << i;
}

TEST(Ema, UpdateEqualsItsFormula) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  std::vector<at::Tensor> ema = {at::randn({4, 3}, gen), at::randn({9}, gen)}, p = {at::randn({4, 3}, gen), at::randn({9}, gen)};
  std::vector<at::Tensor> want;
  const double decay = 0.9999;
  for (size_t i = 0; i < ema.size(); ++i) want.push_back(decay * ema[i].to(at::kDouble) + (1 - decay) * p[i].to(at::kDouble));
  train::update_ema(ema, p, decay);
  for (size_t i = 0; i < ema.size(); ++i) EXPECT_TRUE(at::allclose(ema[i].to(at::kDouble), want[i], 1e-6, 1e-7)) << i;
}

TEST(AdamW, StepWithEmaEqualsTheSeparatePasses) {
  // step_with_ema (gradients handed in, one of them missing and one in bf16, a clipping factor, the
  // EMA and casts) against the gradients scaled in .grad, step(), update_ema over every parameter and
  // a copy into the casts: the same bits, a skipped step (found_inf) included.
  train::AdamWOptions o;
  o.lr = 3e-3;
  o.weight_decay = 0.05;
  auto ours = params(4), ref = params(4);
  train::AdamW a(ours, o), b(ref, o);
  std::vector<at::Tensor> ema_a, ema_b, casts_a, casts_b;
  for (size_t i = 0; i < ours.size(); ++i) {
    ema_a.push_back(ours[i].detach() * 0.5), ema_b.push_back(ref[i].detach() * 0.5);
    casts_a.push_back(at::zeros(ours[i].sizes(), at::kBFloat16)), casts_b.push_back(at::zeros(ref[i].sizes(), at::kBFloat16));
  }
  const at::Tensor scale = at::full({}, 0.4f);
  for (int64_t k = 0; k < 4; ++k) {
    const at::Tensor found_inf = at::full({1}, k == 2 ? 1.f : 0.f);
    set_grads(ref, k);
    ref[1].mutable_grad() = at::Tensor();  // a parameter without a gradient this step
    ref[2].mutable_grad() = ref[2].grad().to(at::kBFloat16).to(at::kFloat);
    std::vector<at::Tensor> grads;
    for (auto& p : ref) grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    grads[2] = grads[2].to(at::kBFloat16);  // handed in as bf16, widened inside
    {
      torch::NoGradGuard ng;
      for (auto& p : ref)
        if (p.grad().defined()) p.mutable_grad().mul_(scale);
    }
    b.step(found_inf);
    train::update_ema(ema_b, ref, 0.8);
    {
      torch::NoGradGuard ng;
      for (size_t i = 0; i < ref.size(); ++i)
        if (ref[i].grad().defined()) casts_b[i].copy_(ref[i]);
    }
    a.step_with_ema(grads, scale, found_inf, ema_a, at::Tensor(), 1.0 - 0.8, casts_a);
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_TRUE(at::equal(ours[i], ref[i])) << "parameter " << i;
    EXPECT_TRUE(at::equal(ema_a[i], ema_b[i])) << "EMA " << i;
    EXPECT_TRUE(at::equal(casts_a[i], casts_b[i])) << "cast " << i;
  }
  const auto sa = a.state(), sb = b.state();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(at::equal(sa[i].second, sb[i].second)) << sa[i].first;
  EXPECT_GT(max_rel(ours, params(4)), 1e-4);  // the steps moved the weights
  EXPECT_THROW(a.step_with_ema({}, {}, {}, ema_a, {}, 0.1), std::invalid_argument);
}
