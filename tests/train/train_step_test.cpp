// One training step (train/train_step.h) on a tiny model on the CPU: a step whose gradients are not
// finite while the loss is changes no weight and reports a NaN loss (which the trainer counts);
// a finite step after it changes the weights and the optimizer exactly as the same step would
// without the skipped one; a scheduled learning rate reaches the optimizer as the step's rate; a
// batch taken in pieces (--grad-accum) gives the whole batch's step.
#include <gtest/gtest.h>

#include <cmath>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "models/dit.h"
#include "models/model_config.h"
#include "ops/fused_ops.h"
#include "train/lr_schedule.h"
#include "train/train_config.h"
#include "train/train_step.h"

using namespace nala;

namespace {

struct StepSetup {
  train::TrainConfig cfg;
  std::shared_ptr<models::DiT> model, ema;
};

StepSetup make(const std::string& objective) {
  StepSetup s;
  s.cfg = train::train_preset("fashion-mnist-tiny");
  s.cfg.model = "NaLaDiT-T/4";
  s.cfg.objective = objective;
  s.cfg.global_batch = 4;
  s.cfg = train::resolved(s.cfg);
  models::ModelConfig mc = models::model_config(s.cfg.model);
  mc.input_size = 8;
  mc.in_channels = 1;
  mc.num_classes = 10;
  torch::manual_seed(0);
  s.model = std::make_shared<models::DiT>(mc);
  s.ema = std::make_shared<models::DiT>(mc);
  for (auto& p : s.ema->parameters()) p.set_requires_grad(false);
  return s;
}

std::vector<at::Tensor> snapshot(models::DiT& m) {
  std::vector<at::Tensor> v;
  for (auto& p : m.parameters()) v.push_back(p.detach().clone());
  return v;
}

bool unchanged(models::DiT& m, const std::vector<at::Tensor>& before) {
  auto ps = m.parameters();
  for (size_t i = 0; i < ps.size(); ++i)
    if (!at::equal(ps[i], before[i])) return false;
  return true;
}

}  // namespace

TEST(TrainStep, NonFiniteGradientSkipsTheStep) {
  for (const char* objective : {"ddpm", "flow"}) {
    StepSetup s = make(objective);
    train::TrainStep step(s.cfg, *s.model, *s.ema, nullptr, false);
    at::Tensor x = at::randn({4, 1, 8, 8}), y = at::tensor({0, 1, 2, 3}, at::kLong);  // (4, 1, 8, 8), (4,)
    // a finite loss whose gradient for one tensor is infinite
    at::Tensor p = s.model->named_parameters()["blocks.0.mlp.fc1.weight"];
    const auto hook = p.register_hook([](at::Tensor g) { return g * INFINITY; });
    const auto before = snapshot(*s.model);
    torch::manual_seed(1);
    train::StepResult r = step.run(0, x, y);
    EXPECT_TRUE(std::isnan(r.loss.item<double>())) << objective << ": a skipped step reports a NaN loss";
    EXPECT_FALSE(std::isfinite(r.grad_norm.item<double>())) << objective;
    EXPECT_TRUE(unchanged(*s.model, before)) << objective << ": weights changed by a step with an infinite gradient";
    p.remove_hook(hook);
    torch::manual_seed(1);
    r = step.run(1, x, y);
    std::printf("%s: finite step loss %.4f, gradient norm %.4f\n", objective, r.loss.item<double>(), r.grad_norm.item<double>());
    EXPECT_TRUE(std::isfinite(r.loss.item<double>())) << objective;
    EXPECT_FALSE(unchanged(*s.model, before)) << objective << ": a finite step changed nothing";
    // the skipped step left no trace in the weights or the optimizer (moments, step count for the
    // bias correction): the same finite step from a fresh start gives bitwise the same state
    StepSetup f = make(objective);
    train::TrainStep fresh(f.cfg, *f.model, *f.ema, nullptr, false);
    torch::manual_seed(1);
    train::StepResult rf = fresh.run(1, x, y);
    EXPECT_TRUE(at::equal(r.loss, rf.loss)) << objective;
    EXPECT_TRUE(unchanged(*s.model, snapshot(*f.model))) << objective << ": weights differ from a run without the skipped step";
    EXPECT_EQ(step.optimizer().steps_taken(), 2) << objective;  // calls of step(), the skipped one included
    const io::NamedTensors sa = step.optimizer().state(), sb = fresh.optimizer().state();
    ASSERT_EQ(sa.size(), sb.size());
    int compared = 0;
    for (size_t i = 0; i < sa.size(); ++i) {
      ASSERT_EQ(sa[i].first, sb[i].first);
      if (sa[i].first == "steps_taken") continue;
      EXPECT_TRUE(at::equal(sa[i].second, sb[i].second)) << objective << " optimizer " << sa[i].first;
      if (sa[i].first.rfind("step.", 0) == 0) EXPECT_EQ(sa[i].second.item<double>(), 1.0) << objective << ": bias-correction count";
      ++compared;
    }
    EXPECT_EQ(compared, int(sa.size()) - 1);
  }
}

TEST(TrainStep, ScheduledRateIsTheStepsRate) {
  // A cosine schedule with a 4-step warm-up: step k runs at scheduled_lr(k) (train/lr_schedule.h),
  // the weights after it equal those of a constant-rate step at that rate from the same state.
  for (const int64_t k : {int64_t(0), int64_t(5)}) {
    StepSetup a = make("flow"), b = make("flow");
    a.cfg.lr = 2e-3;
    a.cfg.lr_schedule = "cosine";
    a.cfg.lr_warmup = 4;
    a.cfg.lr_end = 1e-4;
    a.cfg.steps = 10;
    b.cfg.lr = double(float(train::scheduled_lr(a.cfg, k)));  // the rate as the float32 tensor holds it
    EXPECT_TRUE(train::lr_is_scheduled(a.cfg));
    EXPECT_FALSE(train::lr_is_scheduled(b.cfg));
    at::Tensor x = at::randn({4, 1, 8, 8}), y = at::tensor({0, 1, 2, 3}, at::kLong);  // (4, 1, 8, 8), (4,)
    train::TrainStep scheduled(a.cfg, *a.model, *a.ema, nullptr, false), constant(b.cfg, *b.model, *b.ema, nullptr, false);
    torch::manual_seed(4);
    const train::StepResult ra = scheduled.run(k, x, y);
    torch::manual_seed(4);
    const train::StepResult rb = constant.run(k, x, y);
    EXPECT_TRUE(at::equal(ra.loss, rb.loss)) << "step " << k;
    const auto pa = snapshot(*a.model), pb = snapshot(*b.model);
    double worst = 0;
    for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
    std::printf("step %ld at rate %.6g: largest weight difference to the constant-rate step %.2e\n", long(k), b.cfg.lr, worst);
    EXPECT_LT(worst, 1e-7) << "step " << k;
    // and not the configured peak rate: a step at cfg.lr moves the weights elsewhere
    StepSetup c = make("flow");
    c.cfg.lr = 2e-3;
    train::TrainStep peak(c.cfg, *c.model, *c.ema, nullptr, false);
    torch::manual_seed(4);
    peak.run(k, x, y);
    EXPECT_FALSE(unchanged(*c.model, pa)) << "step " << k;
  }
}

TEST(TrainStep, GradientAccumulationEqualsTheWholeBatch) {
  // --grad-accum N: the batch in N pieces, each forward and backward alone, equals the step on the
  // whole batch (the same draws, the gradients summed): loss, gradient norm and weights, within
  // float32 summation order.
  for (const char* objective : {"ddpm", "flow"}) {
    at::Tensor x = at::randn({4, 1, 8, 8}), y = at::tensor({0, 1, 2, 3}, at::kLong);  // (4, 1, 8, 8), (4,)
    StepSetup w = make(objective);
    train::TrainStep whole(w.cfg, *w.model, *w.ema, nullptr, false);
    torch::manual_seed(6);
    const train::StepResult rw = whole.run(0, x, y);
    for (const int64_t pieces : {int64_t(2), int64_t(4)}) {
      StepSetup a = make(objective);
      a.cfg.grad_accum = pieces;
      train::TrainStep accum(a.cfg, *a.model, *a.ema, nullptr, false);
      int backwards = 0;  // gradients one parameter received: one a piece
      at::Tensor p = a.model->named_parameters()["blocks.0.mlp.fc1.weight"];
      const auto hook = p.register_hook([&](const at::Tensor& g) {
        ++backwards;
        return g;
      });
      torch::manual_seed(6);
      const train::StepResult ra = accum.run(0, x, y);
      p.remove_hook(hook);
      EXPECT_EQ(backwards, pieces) << objective;
      const double lw = rw.loss.item<double>(), la = ra.loss.item<double>();
      const double nw = rw.grad_norm.item<double>(), na = ra.grad_norm.item<double>();
      const auto pw = snapshot(*w.model), pa = snapshot(*a.model);
      double worst = 0;
      for (size_t i = 0; i < pw.size(); ++i) worst = std::max(worst, (pw[i] - pa[i]).abs().max().item<double>());
      std::printf("%s, %ld pieces: loss %.7f vs %.7f, gradient norm %.7f vs %.7f, largest weight difference %.2e\n", objective, long(pieces), la, lw,
                  na, nw, worst);
      EXPECT_NEAR(la, lw, 1e-6 * std::abs(lw)) << objective << " " << pieces;
      EXPECT_NEAR(na, nw, 1e-5 * std::abs(nw)) << objective << " " << pieces;
      EXPECT_LT(worst, 1e-6) << objective << " " << pieces;
    }
    StepSetup bad = make(objective);
    bad.cfg.grad_accum = 3;  // 4 rows in 3 pieces
    try {
      train::TrainStep odd(bad.cfg, *bad.model, *bad.ema, nullptr, false);
      ADD_FAILURE() << "3 pieces of 4 rows accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--grad-accum 3 does not divide each process's batch of 4"), std::string::npos) << e.what();
    }
    bad.cfg.grad_accum = 2;  // a batch whose shape changed to 3 rows at run time
    train::TrainStep two(bad.cfg, *bad.model, *bad.ema, nullptr, false);
    try {
      two.run(0, x.narrow(0, 0, 3), y.narrow(0, 0, 3));
      ADD_FAILURE() << "2 pieces of 3 rows accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--grad-accum 2 does not divide this process's batch of 3"), std::string::npos) << e.what();
    }
  }
}

TEST(TrainStep, CudaGraphsNeedOneProcessOnCuda) {
  // --cuda-graphs on a CPU model is a named error, not a silent eager run
  StepSetup s = make("ddpm");
  s.cfg.cuda_graphs = true;
  try {
    train::TrainStep step(s.cfg, *s.model, *s.ema, nullptr, false);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--cuda-graphs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

TEST(TrainStep, RecomputeTurnsTheSwitchOnAndChangesNoResult) {
  // --recompute true (cfg.recompute) turns ops::recompute_saved on; on the CPU the NaLa attention
  // then recomputes its state in the backward, and a step's loss and weights equal a step without
  nala::ops::set_recompute_saved(false);
  StepSetup a = make("flow"), b = make("flow");
  a.cfg.recompute = true;
  at::Tensor x = at::randn({4, 1, 8, 8}), y = at::tensor({0, 1, 2, 3}, at::kLong);  // (4, 1, 8, 8), (4,)
  train::TrainStep plain(b.cfg, *b.model, *b.ema, nullptr, false);
  torch::manual_seed(3);
  const train::StepResult rb = plain.run(0, x, y);
  EXPECT_FALSE(nala::ops::recompute_saved());
  train::TrainStep recomputing(a.cfg, *a.model, *a.ema, nullptr, false);
  EXPECT_TRUE(nala::ops::recompute_saved());
  torch::manual_seed(3);
  const int64_t before = nala::ops::recomputations();
  const train::StepResult ra = recomputing.run(0, x, y);
  EXPECT_GT(nala::ops::recomputations(), before) << "the step recomputed nothing";
  nala::ops::set_recompute_saved(false);
  EXPECT_TRUE(at::equal(ra.loss, rb.loss));
  EXPECT_TRUE(unchanged(*a.model, snapshot(*b.model))) << "weights after one step differ with --recompute";
}

TEST(TrainStep, FusedOptimizerChangesNoResult) {
  // NALA_FUSED_OPTIMIZER (ops/fused_ops.h): AdamW, the EMA and the casts through AdamW::step_with_ema.
  // On the CPU that runs ATen's passes (ops/adamw_ema.h), so three steps with clipping and the EMA's
  // warm-up give the bits of the separate passes: losses, gradient norms, weights, EMA (the fixed
  // positional embedding's included) and the optimizer's state.
  const bool fused_default = ops::fused_optimizer();
  auto run = [&](bool fused) {
    ops::set_fused_optimizer(fused);
    StepSetup s = make("ddpm");
    s.cfg.grad_clip = 0.05;  // below the first steps' norms: the factor scales every gradient
    s.cfg.ema_warmup = true;
    {
      torch::NoGradGuard ng;
      auto ps = s.model->parameters(), es = s.ema->parameters();
      for (size_t i = 0; i < ps.size(); ++i) es[i].copy_(ps[i] + 0.01);  // the EMA away from the weights: its update shows
    }
    train::TrainStep step(s.cfg, *s.model, *s.ema, nullptr, false);
    std::vector<at::Tensor> out;
    for (int64_t k = 0; k < 3; ++k) {
      torch::manual_seed(10 + k);
      at::Tensor x = at::randn({4, 1, 8, 8}), y = at::tensor({0, 1, 2, 3}, at::kLong);  // (4, 1, 8, 8), (4,)
      const train::StepResult r = step.run(k, x, y);
      out.push_back(r.loss.clone()), out.push_back(r.grad_norm.clone());
    }
    for (auto& t : snapshot(*s.model)) out.push_back(t);
    for (auto& t : snapshot(*s.ema)) out.push_back(t);
    for (auto& [name, t] : step.optimizer().state()) out.push_back(t.clone());
    ops::set_fused_optimizer(fused_default);
    return out;
  };
  const auto a = run(false), b = run(true);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_GT(a[1].item<double>(), 0.05) << "the gradient norm is below the clip: no factor was applied";
  int equal = 0;
  for (size_t i = 0; i < a.size(); ++i) equal += at::equal(a[i], b[i]);
  EXPECT_EQ(size_t(equal), a.size()) << "of " << a.size() << " results " << equal << " bit for bit";
}
