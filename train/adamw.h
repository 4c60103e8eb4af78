// AdamW (Loshchilov & Hutter 2019) with PyTorch's semantics and defaults (torch.optim.AdamW;
// DiT uses lr 1e-4, weight decay 0, betas (0.9, 0.999), eps 1e-8):
//   p ← p − lr·wd·p;  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;
//   p ← p − lr · (m / (1−β1^k)) / (√(v / (1−β2^k)) + eps)
// The state is explicit (m, v, step per parameter) so checkpoints hold it exactly; the update is
// ATen's fused multi-tensor AdamW kernel (at::_fused_adamw_) on every device that has one.
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "io/safetensors.h"

namespace nala::train {

struct AdamWOptions {
  double lr = 1e-4, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class AdamW {
 public:
  AdamW(std::vector<at::Tensor> params, AdamWOptions o);
  // One update from the parameters' .grad(); parameters without a gradient are skipped. Where
  // found_inf (a (1,) float tensor on the parameters' device) is non-zero the kernel changes nothing.
  void step(const at::Tensor& found_inf = {});
  // One update from the given gradients instead of .grad (grads[i] for the i-th parameter; undefined:
  // skipped, as step() skips a parameter without .grad), in float32 or bf16/fp16 (widened exactly),
  // each multiplied by grad_scale where defined (a () float32 tensor: the clipping factor). Then the
  // EMA of every parameter, emas[i], moves toward it, ema ← ema + w·(p − ema) with w = ema_weight (a
  // () float32 tensor, read on the device) or ema_weight_value where undefined, skipped updates
  // included (as update_ema after step()); and casts[i] (where given and defined) takes the updated
  // parameter rounded to its dtype. ops::adamw_ema_step: one pass over each parameter on CUDA, the
  // bits of _foreach_mul_, step(), update_ema and a copy into the casts.
  void step_with_ema(const std::vector<at::Tensor>& grads, const at::Tensor& grad_scale, const at::Tensor& found_inf,
                     const std::vector<at::Tensor>& emas, const at::Tensor& ema_weight, double ema_weight_value,
                     const std::vector<at::Tensor>& casts = {});
  void zero_grad();
  // calls of step(), skipped ones included; the bias correction reads the per-parameter counts
  // ("step.<i>" in state()), which a skipped step does not advance
  int64_t steps_taken() const { return steps_; }
  // a replayed CUDA graph of step() (models/cuda_graph.h) ran on the device without this host code
  void count_replayed_step() { ++steps_; }
  AdamWOptions& options() { return o_; }
  // A () float32 tensor on the parameters' device that every later step() reads as its rate instead
  // of options().lr: a schedule's rate, changed in place between steps (a CUDA graph's replay reads
  // it there too). The fused kernel's tensor-rate overload.
  void set_lr_tensor(const at::Tensor& lr);

  // State as named tensors ("exp_avg.<i>", "exp_avg_sq.<i>", "step") for checkpoints, and back.
  io::NamedTensors state() const;
  void load_state(const io::NamedTensors& state, const std::string& source);

 private:
  std::vector<at::Tensor> params_, exp_avg_, exp_avg_sq_, step_t_;
  at::Tensor lr_t_;  // () float32, or undefined: options().lr
  AdamWOptions o_;
  int64_t steps_ = 0;
};

// EMA of parameters: ema ← decay·ema + (1 − decay)·param, every tensor (DiT train.py:39-49,
// pos_embed included).
void update_ema(const std::vector<at::Tensor>& ema, const std::vector<at::Tensor>& params, double decay);
// The same move by a weight w = 1 − decay: ema ← ema + w·(p − ema), w the () float32 tensor weight where
// defined (read on the device: a CUDA graph's replay), else weight_value. One multi-tensor lerp.
void ema_lerp(const std::vector<at::Tensor>& ema, const std::vector<at::Tensor>& params, const at::Tensor& weight, double weight_value);

// A model's parameters (params) and its EMA model's (ema, in the same order), split into those that
// want gradients (what AdamW updates) and the rest (the fixed pos_embed), each beside its EMA tensor.
struct EmaPairs {
  std::vector<at::Tensor> trainable, trainable_ema, fixed, fixed_ema;
};
EmaPairs ema_pairs(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& ema);

}  // namespace nala::train
