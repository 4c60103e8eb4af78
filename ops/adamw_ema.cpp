#include "ops/adamw_ema.h"

#include <atomic>
#include <optional>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#ifdef NALA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops/cuda/adamw_ema_kernels.h"
#endif

namespace nala::ops {
namespace {

std::atomic<int64_t> g_kernel_steps{0};

std::string describe(const at::Tensor& t) {
  return t.defined() ? c10::str(t.sizes()) + " " + c10::toString(t.scalar_type()) + " on " + t.device().str() : "undefined";
}

// the lists' lengths and each entry's sizes: a mistake here is the caller's, named
void check_lists(const AdamWEmaStep& s) {
  const size_t n = s.params.size();
  if (s.grads.size() != n || s.exp_avgs.size() != n || s.exp_avg_sqs.size() != n || s.steps.size() != n || s.emas.size() != n ||
      (!s.casts.empty() && s.casts.size() != n))
    throw std::invalid_argument("adamw_ema_step: " + std::to_string(n) + " parameters but " + std::to_string(s.grads.size()) + " gradients, " +
                                std::to_string(s.exp_avgs.size()) + " and " + std::to_string(s.exp_avg_sqs.size()) + " moments, " +
                                std::to_string(s.steps.size()) + " step counts, " + std::to_string(s.emas.size()) + " EMAs, " +
                                std::to_string(s.casts.size()) + " casts");
  for (size_t i = 0; i < n; ++i) {
    const auto& p = s.params[i];
    auto same = [&](const at::Tensor& t) { return t.defined() && t.sizes() == p.sizes(); };
    if (!same(s.grads[i]) || !same(s.exp_avgs[i]) || !same(s.exp_avg_sqs[i]) || !same(s.emas[i]) ||
        (!s.casts.empty() && s.casts[i].defined() && !same(s.casts[i])) || !s.steps[i].defined() || s.steps[i].numel() != 1)
      throw std::invalid_argument("adamw_ema_step: parameter " + std::to_string(i) + " (" + describe(p) + ") has gradient " + describe(s.grads[i]) +
                                  ", moments " + describe(s.exp_avgs[i]) + " and " + describe(s.exp_avg_sqs[i]) + ", EMA " + describe(s.emas[i]) +
                                  ", step " + describe(s.steps[i]) + (s.casts.empty() ? "" : ", cast " + describe(s.casts[i])));
  }
}

#ifdef NALA_WITH_CUDA
std::optional<cuda::StepDtype> step_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return cuda::StepDtype::kFloat;
    case at::kBFloat16: return cuda::StepDtype::kBFloat16;
    case at::kHalf: return cuda::StepDtype::kHalf;
    default: return std::nullopt;
  }
}
#endif

}  // namespace

bool adamw_ema_fused(const AdamWEmaStep& s) {
#ifdef NALA_WITH_CUDA
  if (s.params.empty() || !s.params.front().is_cuda()) return false;
  const auto dev = s.params.front().device();
  auto on = [&](const at::Tensor& t) { return t.device() == dev && t.is_contiguous(); };
  auto f32 = [&](const at::Tensor& t) { return on(t) && t.scalar_type() == at::kFloat; };
  auto scalar = [&](const at::Tensor& t) { return !t.defined() || (f32(t) && t.numel() == 1); };
  if (!scalar(s.lr) || !scalar(s.grad_scale) || !scalar(s.found_inf) || !scalar(s.ema_weight)) return false;
  std::optional<at::ScalarType> cast_type;
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (!f32(s.params[i]) || !f32(s.exp_avgs[i]) || !f32(s.exp_avg_sqs[i]) || !f32(s.emas[i]) || !f32(s.steps[i])) return false;
    if (!on(s.grads[i]) || !step_dtype(s.grads[i])) return false;
    if (s.casts.empty() || !s.casts[i].defined()) continue;
    const auto ct = s.casts[i].scalar_type();
    if (!on(s.casts[i]) || (ct != at::kBFloat16 && ct != at::kHalf) || (cast_type && *cast_type != ct)) return false;
    cast_type = ct;
  }
  return true;
#else
  (void)s;
  return false;
#endif
}

void adamw_ema_reference(const AdamWEmaStep& s) {
  check_lists(s);
  if (s.params.empty()) return;
  at::NoGradGuard ng;
  std::vector<at::Tensor> ps, gs;
  for (size_t i = 0; i < s.params.size(); ++i) {
    ps.push_back(s.params[i].detach());
    gs.push_back(s.grads[i].scalar_type() == at::kFloat ? s.grads[i] : s.grads[i].to(at::kFloat));  // exact widening
  }
  if (s.grad_scale.defined()) gs = at::_foreach_mul(gs, s.grad_scale);  // float32 products, the caller's gradients untouched
  const std::optional<at::Tensor> inf = s.found_inf.defined() ? std::optional<at::Tensor>(s.found_inf) : std::nullopt;
  if (s.lr.defined())
    at::_fused_adamw_(ps, gs, s.exp_avgs, s.exp_avg_sqs, {}, s.steps, s.lr, s.beta1, s.beta2, s.weight_decay, s.eps, /*amsgrad=*/false,
                      /*maximize=*/false, std::nullopt, inf);
  else
    at::_fused_adamw_(ps, gs, s.exp_avgs, s.exp_avg_sqs, {}, s.steps, s.lr_value, s.beta1, s.beta2, s.weight_decay, s.eps, /*amsgrad=*/false,
                      /*maximize=*/false, std::nullopt, inf);
  if (s.ema_weight.defined()) at::_foreach_lerp_(s.emas, ps, std::vector<at::Tensor>(ps.size(), s.ema_weight));
  else at::_foreach_lerp_(s.emas, ps, at::Scalar(s.ema_weight_value));
  std::vector<at::Tensor> dst, src;
  for (size_t i = 0; i < s.casts.size(); ++i)
    if (s.casts[i].defined()) dst.push_back(s.casts[i]), src.push_back(ps[i]);
  if (!dst.empty()) at::_foreach_copy_(dst, src);
}

int64_t adamw_ema_kernel_steps() { return g_kernel_steps.load(std::memory_order_relaxed); }

void adamw_ema_step(const AdamWEmaStep& s) {
  check_lists(s);
  if (!adamw_ema_fused(s)) return adamw_ema_reference(s);
#ifdef NALA_WITH_CUDA
  const c10::cuda::CUDAGuard guard(s.params.front().device());
  cuda::AdamWEmaScalars sc;
  sc.lr_ptr = s.lr.defined() ? s.lr.data_ptr<float>() : nullptr;
  sc.lr = float(s.lr_value);  // as ATen's kernel: the double options rounded to float once
  sc.beta1 = float(s.beta1), sc.beta2 = float(s.beta2), sc.weight_decay = float(s.weight_decay), sc.eps = float(s.eps);
  sc.grad_scale = s.grad_scale.defined() ? s.grad_scale.data_ptr<float>() : nullptr;
  sc.found_inf = s.found_inf.defined() ? s.found_inf.data_ptr<float>() : nullptr;
  sc.ema_weight_ptr = s.ema_weight.defined() ? s.ema_weight.data_ptr<float>() : nullptr;
  sc.ema_weight = float(s.ema_weight_value);
  for (const auto& c : s.casts)
    if (c.defined()) sc.cast_dtype = *step_dtype(c);
  const auto stream = at::cuda::getCurrentCUDAStream().stream();
  cuda::AdamWEmaLaunch l;
  int64_t blocks = 0;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const int64_t n = s.params[i].numel();
    if (n == 0) continue;
    cuda::AdamWEmaTensor& t = l.t[l.count];
    t.param = s.params[i].data_ptr<float>();
    t.exp_avg = s.exp_avgs[i].data_ptr<float>();
    t.exp_avg_sq = s.exp_avg_sqs[i].data_ptr<float>();
    t.ema = s.emas[i].data_ptr<float>();
    t.step = s.steps[i].data_ptr<float>();
    t.grad = s.grads[i].data_ptr();
    t.cast = !s.casts.empty() && s.casts[i].defined() ? s.casts[i].data_ptr() : nullptr;
    t.n = n;
    l.grad_dtype[l.count] = *step_dtype(s.grads[i]);
    blocks += (n + cuda::kAdamWEmaChunk - 1) / cuda::kAdamWEmaChunk;
    l.chunk_end[l.count] = blocks;
    if (++l.count == cuda::kAdamWEmaTensors) {
      cuda::launch_adamw_ema(l, sc, stream);
      l = cuda::AdamWEmaLaunch();
      blocks = 0;
    }
  }
  if (l.count > 0) cuda::launch_adamw_ema(l, sc, stream);
  g_kernel_steps.fetch_add(1, std::memory_order_relaxed);
  // written in place, as ATen's in-place passes would have: their versions move
  for (size_t i = 0; i < s.params.size(); ++i)
    for (const at::Tensor* t : {&s.params[i], &s.exp_avgs[i], &s.exp_avg_sqs[i], &s.emas[i]}) t->unsafeGetTensorImpl()->bump_version();
  for (const auto& c : s.casts)
    if (c.defined()) c.unsafeGetTensorImpl()->bump_version();
#endif
}

}  // namespace nala::ops
