// The one-pass optimizer kernel (ops/adamw_ema.h, ops/cuda/adamw_ema_kernels.cu) against its CPU twin
// run on the same device, ATen's passes (adamw_ema_reference: the gradients widened and scaled,
// at::_fused_adamw_, at::_foreach_lerp_, at::_foreach_copy_): parameters, moments, EMA and casts bit
// for bit, over 60 tensors (two launches) of sizes that leave tails (1, 3, 4,097 elements) and of
// pointers that are not 16-byte aligned (the one-element path); gradients in float32, bf16 and fp16;
// a clipping factor; the rate and the EMA weight from device tensors, the EMA weight on both sides of
// lerp's 0.5 switch; a skipped step (found_inf); weight decay.
#include <gtest/gtest.h>

#include <cstdio>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "ops/adamw_ema.h"

using namespace nala;

namespace {

struct Case {
  at::ScalarType grad_dtype = at::kBFloat16, cast_dtype = at::kBFloat16;
  double weight_decay = 0, ema_weight = 1e-4;
  bool scaled = false, lr_tensor = false, ema_tensor = false, skipped = false;
};

// a contiguous tensor of n elements whose first element is `shift` elements past an allocation's start
at::Tensor shifted(int64_t n, int64_t shift, at::ScalarType dtype) {
  return at::empty({n + shift}, at::TensorOptions(at::kCUDA).dtype(dtype)).narrow(0, shift, n);  // (n,)
}

ops::AdamWEmaStep make_step(const Case& c, int64_t seed) {
  at::manual_seed(seed);
  ops::AdamWEmaStep s;
  const int64_t sizes[] = {1, 3, 4097, 3 * 4096 + 5, 384 * 384, 35, 1152, 4096};
  for (int i = 0; i < 60; ++i) {
    const int64_t n = sizes[i % 8];
    const int64_t shift = i % 7 == 3 ? 1 : 0;  // every seventh tensor starts off a 16-byte boundary
    auto f32 = [&](double scale) { return shifted(n, shift, at::kFloat).copy_(at::randn({n}, at::kCUDA) * scale); };  // (n,)
    s.params.push_back(f32(0.1));
    s.grads.push_back(shifted(n, i % 5 == 2 ? 1 : 0, c.grad_dtype).copy_(at::randn({n}, at::kCUDA) * (i % 2 ? 1e-3 : 3.0)));
    s.exp_avgs.push_back(f32(1e-2));
    s.exp_avg_sqs.push_back(f32(1e-3).abs_());
    s.steps.push_back(at::full({}, float(1 + i % 4), at::TensorOptions(at::kCUDA)));  // () counts 1..4
    s.emas.push_back(f32(0.1));
    s.casts.push_back(i % 6 == 5 ? at::Tensor() : shifted(n, shift, c.cast_dtype).zero_());  // some parameters without a cast
  }
  const auto f = at::TensorOptions(at::kCUDA);
  s.lr_value = 3e-3;
  if (c.lr_tensor) s.lr = at::full({}, 2e-3f, f);  // () read instead of lr_value
  s.weight_decay = c.weight_decay;
  if (c.scaled) s.grad_scale = at::full({}, 0.37f, f);
  s.found_inf = at::full({1}, c.skipped ? 1.f : 0.f, f);
  s.ema_weight_value = c.ema_weight;
  if (c.ema_tensor) s.ema_weight = at::full({}, float(c.ema_weight), f);
  return s;
}

std::vector<at::Tensor> outputs(const ops::AdamWEmaStep& s) {
  std::vector<at::Tensor> v;
  for (size_t i = 0; i < s.params.size(); ++i) {
    v.push_back(s.params[i].clone()), v.push_back(s.exp_avgs[i].clone()), v.push_back(s.exp_avg_sqs[i].clone()), v.push_back(s.emas[i].clone());
    if (s.casts[i].defined()) v.push_back(s.casts[i].clone());
  }
  return v;
}

}  // namespace

TEST(AdamWEmaKernel, EqualsATensPassesBitForBit) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  std::vector<std::pair<const char*, Case>> cases;
  cases.push_back({"bf16 gradients, DiT's options", Case{}});
  Case c;
  c.grad_dtype = at::kFloat;
  cases.push_back({"float32 gradients", c});
  c = Case{};
  c.grad_dtype = at::kHalf, c.cast_dtype = at::kHalf;
  cases.push_back({"fp16 gradients and casts", c});
  c = Case{};
  c.scaled = true, c.lr_tensor = true, c.ema_tensor = true;
  cases.push_back({"clipped, rate and EMA weight on the device", c});
  c = Case{};
  c.ema_weight = 0.7;
  cases.push_back({"EMA weight 0.7 (lerp's other form)", c});
  c = Case{};
  c.skipped = true, c.scaled = true;
  cases.push_back({"skipped step (found_inf)", c});
  for (const auto& [what, cs] : cases) {
    ops::AdamWEmaStep fused = make_step(cs, 7), ref = make_step(cs, 7);
    const std::vector<at::Tensor> before = outputs(fused);
    ASSERT_TRUE(ops::adamw_ema_fused(fused)) << what;
    ops::adamw_ema_step(fused);
    ops::adamw_ema_reference(ref);
    const std::vector<at::Tensor> a = outputs(fused), b = outputs(ref);
    int equal = 0, moved = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      equal += at::equal(a[k], b[k]);
      moved += !at::equal(a[k], before[k]);
    }
    std::printf("  %s: %d of %zu tensors bit for bit ATen's, %d moved\n", what, equal, a.size(), moved);
    EXPECT_EQ(size_t(equal), a.size()) << what;
    if (cs.skipped) {  // parameters and moments as they were; the EMA moved toward them, the casts written
      const ops::AdamWEmaStep orig = make_step(cs, 7);
      for (size_t i = 0; i < fused.params.size(); ++i) {
        EXPECT_TRUE(at::equal(fused.params[i], orig.params[i]) && at::equal(fused.exp_avgs[i], orig.exp_avgs[i]) &&
                    at::equal(fused.exp_avg_sqs[i], orig.exp_avg_sqs[i]))
            << what << " tensor " << i;
        if (fused.casts[i].defined()) EXPECT_TRUE(at::equal(fused.casts[i], orig.params[i].to(cs.cast_dtype))) << what << " tensor " << i;
      }
      continue;
    }
    EXPECT_GT(moved, int(a.size()) / 2) << what << ": the step moved nothing";
  }
}

TEST(AdamWEmaKernel, WeightDecayWithinOneRounding) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  // p − lr·wd·p: whether the compiler contracts it into an fma as ATen's build did is not ours to
  // fix; the result is the same to within a rounding of the parameter
  Case c;
  c.weight_decay = 0.05;
  ops::AdamWEmaStep fused = make_step(c, 11), ref = make_step(c, 11);
  ops::adamw_ema_step(fused);
  ops::adamw_ema_reference(ref);
  int equal = 0;
  double worst = 0;
  for (size_t i = 0; i < fused.params.size(); ++i) {
    equal += at::equal(fused.params[i], ref.params[i]);
    worst = std::max(worst, ((fused.params[i] - ref.params[i]).abs() / ref.params[i].abs().clamp_min(1e-30)).max().item<double>());
    EXPECT_TRUE(at::equal(fused.exp_avgs[i], ref.exp_avgs[i])) << "tensor " << i;
  }
  std::printf("  weight decay 0.05: %d of %zu parameters bit for bit, max relative difference %.2e\n", equal, fused.params.size(), worst);
  EXPECT_LT(worst, 3e-7);
}
