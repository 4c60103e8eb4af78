// A training step's optimizer pass as one operation: AdamW's update of every parameter, the EMA's move
// toward the updated parameters, and the parameters' low-precision casts for the next forward.
//
//   g ← s·g (s: the clipping factor, where given)
//   p ← p − lr·wd·p;  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;
//   p ← p − lr/(1−β1^k) · m / (√v / √(1−β2^k) + eps)        (AdamW, Loshchilov & Hutter 2019; train/adamw.h)
//   ema ← ema + w·(p − ema)                                  (w = 1 − decay; DiT train.py:39-49)
//   cast ← p rounded to bf16 / fp16                          (ops/weight_casts.h)
//
// In a training step these were four multi-tensor passes over the parameters (the gradients widened to
// float32, ATen's fused AdamW, _foreach_lerp_ for the EMA, _foreach_copy_ for the next step's casts):
// at DiT-S/2 ≈ 56 bytes an element. The CUDA kernel (ops/cuda/adamw_ema_kernels.cu) reads each
// element's parameter, bf16 gradient, moments and EMA once and writes them and the cast once: 36
// bytes. Its arithmetic is that of the four passes, element by element (ATen's adam_math and lerp),
// so the bits are theirs; adamw_ema_reference is those passes themselves, the CPU twin.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace nala::ops {

struct AdamWEmaStep {
  // One entry a parameter: float32 parameters, moments and EMAs of one shape; the gradient in
  // float32, bf16 or fp16 (widened exactly); the step count, a () float32 tensor already advanced
  // for this update (as ATen's fused kernel reads it); the cast (bf16 or fp16, one dtype for all) or
  // undefined where none is kept.
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps, emas, casts;
  at::Tensor lr;  // () float32 on the parameters' device, read instead of lr_value where defined
  double lr_value = 1e-4, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  at::Tensor grad_scale;  // () float32 factor of every gradient (clipping), or undefined: none
  at::Tensor found_inf;   // (1,) float32, or undefined: where 1 no parameter or moment changes (the EMA and casts still move)
  at::Tensor ema_weight;  // () float32 1 − decay, read instead of ema_weight_value where defined
  double ema_weight_value = 1e-4;
};

// One pass (the CUDA kernel) where every tensor is on one CUDA device, contiguous, of the dtypes
// above; else adamw_ema_reference. Throws, naming the entry and its shape, where the lists differ
// in length or an entry's tensors differ in size.
void adamw_ema_step(const AdamWEmaStep& s);
// The same step by ATen's passes: the gradients widened to float32 (scaled by _foreach_mul_),
// at::_fused_adamw_, at::_foreach_lerp_, the casts by at::_foreach_copy_. Runs on any device.
void adamw_ema_reference(const AdamWEmaStep& s);
// Whether adamw_ema_step takes the kernel for s.
bool adamw_ema_fused(const AdamWEmaStep& s);
// How many adamw_ema_step calls took the kernel in this process (a test's proof that it ran).
int64_t adamw_ema_kernel_steps();

}  // namespace nala::ops
