// The optimizer pass (ops/adamw_ema.h) on the CPU, where it runs ATen's passes (adamw_ema_reference),
// against its formulas evaluated in float64 from the same inputs: AdamW with weight decay and a
// clipping factor, bf16 and float32 gradients, the EMA on both sides of lerp's 0.5 switch, the casts;
// a skipped step (found_inf) that moves only the EMA and writes the casts; lists that do not match
// are refused with the entry named. The CUDA kernel is compared with these passes bit for bit on the
// GPU (tests/cuda/adamw_ema_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>

#include "ops/adamw_ema.h"

using namespace nala;

namespace {

struct Inputs {
  ops::AdamWEmaStep s;
  std::vector<at::Tensor> p0, g0, m0, v0, e0;  // float64 copies of the inputs
};

Inputs make_inputs(at::ScalarType grad_dtype, double ema_weight, bool skipped) {
  at::manual_seed(3);
  Inputs in;
  for (int64_t n : {1, 7, 130}) {
    in.s.params.push_back(at::randn({n}) * 0.1);
    in.s.grads.push_back((at::randn({n}) * 2.0).to(grad_dtype));
    in.s.exp_avgs.push_back(at::randn({n}) * 1e-2);
    in.s.exp_avg_sqs.push_back(at::rand({n}) * 1e-3);
    in.s.steps.push_back(at::full({}, float(n % 5 + 1)));  // () already advanced: 2, 3, 1
    in.s.emas.push_back(at::randn({n}) * 0.1);
    in.s.casts.push_back(at::zeros({n}, at::kBFloat16));
  }
  in.s.lr_value = 3e-3, in.s.weight_decay = 0.05;
  in.s.grad_scale = at::full({}, 0.37f);
  in.s.found_inf = at::full({1}, skipped ? 1.f : 0.f);
  in.s.ema_weight_value = ema_weight;
  for (size_t i = 0; i < in.s.params.size(); ++i) {
    in.p0.push_back(in.s.params[i].to(at::kDouble)), in.g0.push_back(in.s.grads[i].to(at::kDouble));
    in.m0.push_back(in.s.exp_avgs[i].to(at::kDouble)), in.v0.push_back(in.s.exp_avg_sqs[i].to(at::kDouble));
    in.e0.push_back(in.s.emas[i].to(at::kDouble));
  }
  return in;
}

double rel_to_f64(const at::Tensor& a, const at::Tensor& b) { return ((a.to(at::kDouble) - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>(); }

}  // namespace

TEST(AdamWEma, FollowsItsFormulasInFloat64) {
  for (const auto grad_dtype : {at::kFloat, at::kBFloat16})
    for (double w : {0.1, 0.7})
      for (bool skipped : {false, true}) {
        Inputs in = make_inputs(grad_dtype, w, skipped);
        EXPECT_FALSE(ops::adamw_ema_fused(in.s));  // CPU: ATen's passes
        ops::adamw_ema_step(in.s);
        const auto& s = in.s;
        double worst = 0;
        for (size_t i = 0; i < s.params.size(); ++i) {
          at::Tensor p = in.p0[i], m = in.m0[i], v = in.v0[i];  // float64
          if (!skipped) {
            const double k = s.steps[i].item<double>(), lr = s.lr_value, b1 = s.beta1, b2 = s.beta2;
            const at::Tensor g = in.g0[i] * 0.37;                                 // the clipped gradient
            p = p - lr * s.weight_decay * p;                                      // decoupled weight decay
            m = b1 * m + (1 - b1) * g;
            v = b2 * v + (1 - b2) * g * g;
            p = p - lr / (1 - std::pow(b1, k)) * m / (v.sqrt() / std::sqrt(1 - std::pow(b2, k)) + s.eps);
          }
          const at::Tensor e = in.e0[i] + w * (p - in.e0[i]);  // the EMA toward the updated parameter
          worst = std::max({worst, rel_to_f64(s.params[i], p), rel_to_f64(s.exp_avgs[i], m), rel_to_f64(s.exp_avg_sqs[i], v), rel_to_f64(s.emas[i], e)});
          EXPECT_TRUE(at::equal(s.casts[i], s.params[i].to(at::kBFloat16))) << "cast " << i;
          if (skipped) EXPECT_TRUE(at::equal(s.params[i].to(at::kDouble), in.p0[i])) << "a skipped step moved parameter " << i;
        }
        std::printf("  %s gradients, EMA weight %.1f%s: max relative difference to float64 %.2e\n", c10::toString(grad_dtype), w,
                    skipped ? ", skipped" : "", worst);
        EXPECT_LT(worst, 2e-6);
      }
}

TEST(AdamWEma, MismatchedListsAreRefusedByEntry) {
  Inputs in = make_inputs(at::kFloat, 0.1, false);
  in.s.emas[1] = at::zeros({8});
  try {
    ops::adamw_ema_step(in.s);
    FAIL() << "a 7-element parameter with an 8-element EMA was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[8]"), std::string::npos) << e.what();
  }
  in = make_inputs(at::kFloat, 0.1, false);
  in.s.steps.pop_back();
  EXPECT_THROW(ops::adamw_ema_step(in.s), std::invalid_argument);
}
