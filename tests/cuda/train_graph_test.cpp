// The training step replayed as a CUDA graph (--cuda-graphs, models/cuda_graph.h) against the same
// steps run eagerly: same initial weights, the same per-step seeds (as the trainer sets them) and
// batches; losses, gradient norms, weights and EMA weights after every step compared. DDPM and flow,
// bf16 autocast, with and without the EMA warm-up (whose decay a replay reads from the device),
// and a batch-shape change (a new capture); a cosine learning-rate schedule with a warm-up (whose
// rate a replay reads from the device); the batch in pieces (--grad-accum) as one graph.
#include <gtest/gtest.h>

#include <cstdio>

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "models/dit.h"
#include "models/model_config.h"
#include "ops/adamw_ema.h"
#include "ops/fused_ops.h"
#include "ops/weight_casts.h"
#include "train/train_config.h"
#include "train/train_step.h"

using namespace nala;

namespace {

struct Trace {
  std::vector<double> losses, norms;
  std::vector<at::Tensor> params, ema;
  bool captured = false;
};

Trace train_steps(const std::string& objective, bool graphs, bool ema_warmup, bool scheduled = false, int64_t accum = 1,
                  const std::string& model_name = "", double grad_clip = -1) {
  train::TrainConfig cfg = train::train_preset("fashion-mnist-tiny");
  cfg.model = objective == "flow" ? "NaLaSiT-S/2" : "NaLaDiT-S/2";  // as the trainer pairs them: a flow DiT would need learn_sigma off
  if (!model_name.empty()) cfg.model = model_name;
  cfg.objective = objective;
  cfg.global_batch = 16;
  cfg.ema_warmup = ema_warmup;
  cfg.cuda_graphs = graphs;
  cfg.grad_accum = accum;
  if (grad_clip >= 0) cfg.grad_clip = grad_clip;
  if (scheduled) {  // a different rate at every one of the 7 steps
    cfg.steps = 7;
    cfg.lr_schedule = "cosine";
    cfg.lr_warmup = 2;
  }
  cfg = train::resolved(cfg);
  models::ModelConfig mc = models::model_config(cfg.model);
  mc.input_size = 16;
  mc.in_channels = 4;
  mc.num_classes = 10;
  torch::manual_seed(0);
  auto model = std::make_shared<models::DiT>(mc), ema = std::make_shared<models::DiT>(mc);
  model->to(at::kCUDA);
  ema->to(at::kCUDA);
  for (auto& p : ema->parameters()) p.set_requires_grad(false);
  {
    torch::NoGradGuard ng;
    auto ps = model->parameters(), es = ema->parameters();
    for (size_t i = 0; i < ps.size(); ++i) es[i].copy_(ps[i]);
  }
  model->train();
  train::TrainStep step(cfg, *model, *ema, nullptr, /*bf16=*/true);
  Trace r;
  for (int64_t k = 0; k < 7; ++k) {
    const int64_t B = k < 5 ? 16 : 8;  // steps 5, 6: another batch shape (eager: as is; graphs: a new capture)
    if (B != cfg.global_batch) cfg.global_batch = B;
    torch::manual_seed(1000 + k);
    at::Tensor x = at::randn({B, 4, 16, 16}, at::kCUDA), y = at::randint(0, 10, {B}, at::TensorOptions(at::kCUDA).dtype(at::kLong));
    torch::manual_seed(2000 + k);  // the trainer seeds each step
    train::StepResult s = step.run(k, x, y);
    r.losses.push_back(s.loss.item<double>());
    r.norms.push_back(s.grad_norm.item<double>());
  }
  r.captured = step.graph_captured();
  for (auto& p : model->parameters()) r.params.push_back(p.detach().clone());
  for (auto& p : ema->parameters()) r.ema.push_back(p.detach().clone());
  return r;
}

}  // namespace

TEST(TrainGraph, ReplayEqualsEagerSteps) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  for (const char* objective : {"ddpm", "flow"}) {
    for (bool warmup : {false, true}) {
      const Trace e = train_steps(objective, false, warmup), g = train_steps(objective, true, warmup);
      EXPECT_TRUE(g.captured) << objective;
      for (size_t k = 0; k < e.losses.size(); ++k) {
        std::printf("  %s ema-warmup %d step %zu loss eager %.7f graph %.7f  grad norm %.6f %.6f\n", objective, int(warmup), k, e.losses[k],
                    g.losses[k], e.norms[k], g.norms[k]);
        EXPECT_NEAR(g.losses[k], e.losses[k], 1e-6 * std::abs(e.losses[k]) + 1e-7) << objective << " step " << k;
        EXPECT_NEAR(g.norms[k], e.norms[k], 1e-5 * std::abs(e.norms[k]) + 1e-7) << objective << " step " << k;
      }
      double worst_p = 0, worst_e = 0;
      int bitwise = 0;
      for (size_t i = 0; i < e.params.size(); ++i) {
        bitwise += at::equal(e.params[i], g.params[i]) && at::equal(e.ema[i], g.ema[i]);
        worst_p = std::max(worst_p, (e.params[i] - g.params[i]).abs().max().item<double>());
        worst_e = std::max(worst_e, (e.ema[i] - g.ema[i]).abs().max().item<double>());
      }
      std::printf("  %s ema-warmup %d: %d of %zu parameters bitwise equal; max |diff| weights %.2e, EMA %.2e\n", objective, int(warmup),
                  bitwise, e.params.size(), worst_p, worst_e);
      EXPECT_LT(worst_p, 1e-5) << objective;
      EXPECT_LT(worst_e, 1e-5) << objective;
    }
  }
}

TEST(TrainGraph, ScheduledRateReplayEqualsEagerSteps) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  const Trace e = train_steps("flow", false, false, true), g = train_steps("flow", true, false, true);
  const Trace c = train_steps("flow", true, false, false);  // the constant rate, for contrast
  EXPECT_TRUE(g.captured);
  for (size_t k = 0; k < e.losses.size(); ++k)
    EXPECT_NEAR(g.losses[k], e.losses[k], 1e-6 * std::abs(e.losses[k]) + 1e-7) << "step " << k;
  double worst = 0, moved = 0;
  for (size_t i = 0; i < e.params.size(); ++i) {
    worst = std::max(worst, (e.params[i] - g.params[i]).abs().max().item<double>());
    moved = std::max(moved, (c.params[i] - g.params[i]).abs().max().item<double>());
  }
  std::printf("  cosine schedule: max |diff| weights graph vs eager %.2e; vs the constant rate %.2e\n", worst, moved);
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(moved, 1e-5) << "the schedule changed nothing: the replay did not read the rate";
}

TEST(TrainGraph, GradientAccumulationReplayEqualsEagerSteps) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  // 2 pieces a step captured as one graph; and against the unsplit eager steps (bf16: other GEMM
  // shapes round differently, so a looser bound there)
  const Trace e = train_steps("ddpm", false, false, false, 2), g = train_steps("ddpm", true, false, false, 2);
  const Trace whole = train_steps("ddpm", false, false, false, 1);
  EXPECT_TRUE(g.captured);
  for (size_t k = 0; k < e.losses.size(); ++k) {
    EXPECT_NEAR(g.losses[k], e.losses[k], 1e-6 * std::abs(e.losses[k]) + 1e-7) << "step " << k;
    EXPECT_NEAR(e.losses[k], whole.losses[k], 2e-2 * std::abs(whole.losses[k])) << "step " << k;
  }
  double worst = 0;
  for (size_t i = 0; i < e.params.size(); ++i) worst = std::max(worst, (e.params[i] - g.params[i]).abs().max().item<double>());
  std::printf("  2 pieces a step: max |diff| weights graph vs eager %.2e\n", worst);
  EXPECT_LT(worst, 1e-5);
}

// The weights cast in one pass and their gradients widened in one (ops/weight_casts.h,
// NALA_WEIGHT_CASTS) against autocast's own casts and autograd's conversions: the same bits (losses,
// gradient norms, weights, EMA), eager and replayed, in one piece and in two, with NaLa blocks (whose
// kernels are deterministic). Softmax blocks run cuDNN's attention backward, whose dq accumulates with
// atomics, so two runs of DiT-S/2 differ by rounding whatever the casts: near there, as eager and graph.
// The same with the stacked adaLN casts and with the one-pass optimizer (its kernel counted).
TEST(TrainGraph, WeightCastsGiveAutocastsBits) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  struct Case {
    const char* objective;
    bool graphs;
    int64_t accum;
    const char* model;
  };
  for (const Case c : {Case{"ddpm", false, 1, ""}, Case{"flow", true, 1, ""}, Case{"ddpm", false, 2, ""}, Case{"ddpm", true, 1, "DiT-S/2"}}) {
    const bool stacked_default = ops::stacked_casts(), fused_default = ops::fused_optimizer();
    ops::set_weight_casts_enabled(false);  // autocast's casts, autograd's conversions, the separate optimizer passes
    ops::set_stacked_casts(false);
    ops::set_fused_optimizer(false);
    const Trace a = train_steps(c.objective, c.graphs, false, false, c.accum, c.model);
    ops::set_weight_casts_enabled(true);
    // the casts as they are; with the adaLN weights' casts stacked for the stacked modulation GEMM
    // (NALA_STACKED_CASTS); with the one-pass optimizer reading the kept gradients and writing the next
    // step's casts (NALA_FUSED_OPTIMIZER, ops/adamw_ema.h); both
    for (const auto [stacked, fused] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      ops::set_stacked_casts(stacked);
      ops::set_fused_optimizer(fused);
      const int64_t before = ops::WeightCasts::handed_out(), stacks_before = ops::WeightCasts::stacks_handed_out();
      const int64_t kernels_before = ops::adamw_ema_kernel_steps();
      const Trace b = train_steps(c.objective, c.graphs, false, false, c.accum, c.model);
      const int64_t handed = ops::WeightCasts::handed_out() - before, stacks = ops::WeightCasts::stacks_handed_out() - stacks_before;
      const int64_t kernel_steps = ops::adamw_ema_kernel_steps() - kernels_before;
      // one stack a forward where they are laid out (eager: a forward a step and piece; a graph: its captures)
      if (stacked) EXPECT_GT(stacks, 0) << "no stacked cast was handed out";
      else EXPECT_EQ(stacks, 0) << "a stacked cast without NALA_STACKED_CASTS";
      if (fused) EXPECT_GT(kernel_steps, 0) << "the one-pass optimizer's kernel never ran";
      else EXPECT_EQ(kernel_steps, 0) << "the one-pass optimizer's kernel ran without NALA_FUSED_OPTIMIZER";
      ops::set_stacked_casts(stacked_default);  // the defaults
      ops::set_fused_optimizer(fused_default);
      const std::string what = std::string(c.objective) + (c.graphs ? " graphs" : " eager") + " accum " + std::to_string(c.accum) + " " + c.model +
                               (stacked ? " stacked casts" : "") + (fused ? " fused optimizer" : "");
      EXPECT_GT(handed, 0) << what << ": no cast was handed out";
      int bitwise = 0;
      double worst = 0;
      for (size_t i = 0; i < a.params.size(); ++i) {
        bitwise += at::equal(a.params[i], b.params[i]) && at::equal(a.ema[i], b.ema[i]);
        worst = std::max(worst, (a.params[i] - b.params[i]).abs().max().item<double>());
      }
      std::printf("  %s: %ld casts handed out; %d of %zu parameters and EMA bitwise equal, max |diff| %.2e\n", what.c_str(), long(handed), bitwise,
                  a.params.size(), worst);
      const bool deterministic = std::string(c.model).empty();  // the NaLa models
      if (deterministic) EXPECT_EQ(size_t(bitwise), a.params.size()) << what;
      EXPECT_LT(worst, 1e-5) << what;
      for (size_t k = 0; k < a.losses.size(); ++k) {
        if (deterministic) {
          EXPECT_EQ(a.losses[k], b.losses[k]) << what << " step " << k;
          EXPECT_EQ(a.norms[k], b.norms[k]) << what << " step " << k;
        }
        EXPECT_NEAR(a.losses[k], b.losses[k], 1e-6 * std::abs(a.losses[k]) + 1e-7) << what << " step " << k;
      }
    }
  }
}

// The one-pass optimizer (NALA_FUSED_OPTIMIZER, ops/adamw_ema.h) with the gradients clipped (the factor
// read on the device) and the EMA's warm-up (its weight read on the device under graphs), eager and
// replayed, against the separate passes: the same bits (NaLa blocks, whose kernels are deterministic).
TEST(TrainGraph, FusedOptimizerClipsLikeTheSeparatePasses) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  const bool fused_default = ops::fused_optimizer();
  for (bool graphs : {false, true}) {
    ops::set_fused_optimizer(false);
    const Trace a = train_steps("ddpm", graphs, true, false, 1, "", 0.05);
    ops::set_fused_optimizer(true);
    const int64_t before = ops::adamw_ema_kernel_steps();
    const Trace b = train_steps("ddpm", graphs, true, false, 1, "", 0.05);
    const int64_t kernel_steps = ops::adamw_ema_kernel_steps() - before;
    ops::set_fused_optimizer(fused_default);
    EXPECT_GT(kernel_steps, 0) << "the kernel never ran";
    EXPECT_GT(a.norms[0], 0.05) << "the gradient norm is below the clip: no factor was applied";
    int equal = 0;
    for (size_t i = 0; i < a.params.size(); ++i) equal += at::equal(a.params[i], b.params[i]) && at::equal(a.ema[i], b.ema[i]);
    std::printf("  clip 0.05, EMA warm-up, %s: %d of %zu parameters and EMA bit for bit\n", graphs ? "graphs" : "eager", equal, a.params.size());
    EXPECT_EQ(size_t(equal), a.params.size());
    for (size_t k = 0; k < a.losses.size(); ++k) {
      EXPECT_EQ(a.losses[k], b.losses[k]) << "step " << k;
      EXPECT_EQ(a.norms[k], b.norms[k]) << "step " << k;
    }
  }
}
