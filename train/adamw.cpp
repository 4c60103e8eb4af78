#include "train/adamw.h"

#include <map>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ops/adamw_ema.h"

namespace nala::train {

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions o) : params_(std::move(params)), o_(o) {
  if (o.lr <= 0 || o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1 || o.eps <= 0 || o.weight_decay < 0)
    throw std::runtime_error("invalid AdamW options: lr " + std::to_string(o.lr) + ", betas (" + std::to_string(o.beta1) + ", " +
                             std::to_string(o.beta2) + "), eps " + std::to_string(o.eps) + ", weight decay " + std::to_string(o.weight_decay));
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
    exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
    step_t_.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
  }
}

void AdamW::set_lr_tensor(const at::Tensor& lr) {
  if (lr.dim() != 0 || lr.scalar_type() != at::kFloat || (!params_.empty() && lr.device() != params_.front().device()))
    throw std::invalid_argument("AdamW::set_lr_tensor: the rate must be a () float32 tensor on the parameters' device, got " + c10::str(lr.sizes()) +
                                " " + c10::toString(lr.scalar_type()) + " on " + lr.device().str());
  lr_t_ = lr;
}

void AdamW::zero_grad() {
  for (auto& p : params_)
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

void AdamW::step(const at::Tensor& found_inf) {
  torch::NoGradGuard ng;
  std::vector<at::Tensor> ps, gs, ms, vs, ss;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    ps.push_back(params_[i]);
    gs.push_back(params_[i].grad());
    ms.push_back(exp_avg_[i]);
    vs.push_back(exp_avg_sq_[i]);
    ss.push_back(step_t_[i]);
  }
  ++steps_;
  if (ps.empty()) return;
  // As torch.optim's fused path: the caller counts the step, the kernel reads it (and does nothing
  // where found_inf is set), and a skipped step is uncounted again.
  at::_foreach_add_(ss, at::Scalar(1.0));
  const std::optional<at::Tensor> inf = found_inf.defined() ? std::optional<at::Tensor>(found_inf) : std::nullopt;
  if (lr_t_.defined())
    at::_fused_adamw_(ps, gs, ms, vs, {}, ss, lr_t_, o_.beta1, o_.beta2, o_.weight_decay, o_.eps, /*amsgrad=*/false, /*maximize=*/false, std::nullopt, inf);
  else
    at::_fused_adamw_(ps, gs, ms, vs, {}, ss, o_.lr, o_.beta1, o_.beta2, o_.weight_decay, o_.eps, /*amsgrad=*/false, /*maximize=*/false, std::nullopt, inf);
  if (found_inf.defined()) at::_foreach_add_(ss, found_inf.reshape({}), -1);
}

void AdamW::step_with_ema(const std::vector<at::Tensor>& grads, const at::Tensor& grad_scale, const at::Tensor& found_inf,
                          const std::vector<at::Tensor>& emas, const at::Tensor& ema_weight, double ema_weight_value,
                          const std::vector<at::Tensor>& casts) {
  if (grads.size() != params_.size() || emas.size() != params_.size() || (!casts.empty() && casts.size() != params_.size()))
    throw std::invalid_argument("AdamW::step_with_ema: " + std::to_string(params_.size()) + " parameters but " + std::to_string(grads.size()) +
                                " gradients, " + std::to_string(emas.size()) + " EMAs and " + std::to_string(casts.size()) + " casts");
  torch::NoGradGuard ng;
  ops::AdamWEmaStep s;
  std::vector<at::Tensor> idle_emas, idle_params;  // parameters without a gradient: their EMA moves all the same
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) {
      idle_emas.push_back(emas[i]), idle_params.push_back(params_[i]);
      continue;
    }
    s.params.push_back(params_[i]);
    s.grads.push_back(grads[i]);
    s.exp_avgs.push_back(exp_avg_[i]);
    s.exp_avg_sqs.push_back(exp_avg_sq_[i]);
    s.steps.push_back(step_t_[i]);
    s.emas.push_back(emas[i]);
    s.casts.push_back(casts.empty() ? at::Tensor() : casts[i]);
  }
  ++steps_;
  s.lr = lr_t_;
  s.lr_value = o_.lr, s.beta1 = o_.beta1, s.beta2 = o_.beta2, s.eps = o_.eps, s.weight_decay = o_.weight_decay;
  s.grad_scale = grad_scale;
  s.found_inf = found_inf;
  s.ema_weight = ema_weight;
  s.ema_weight_value = ema_weight_value;
  if (!s.params.empty()) {
    at::_foreach_add_(s.steps, at::Scalar(1.0));  // counted before the update reads it, as in step()
    ops::adamw_ema_step(s);
    if (found_inf.defined()) at::_foreach_add_(s.steps, found_inf.reshape({}), -1);
  }
  ema_lerp(idle_emas, idle_params, ema_weight, ema_weight_value);
}

io::NamedTensors AdamW::state() const {
  io::NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + std::to_string(i), exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + std::to_string(i), exp_avg_sq_[i]);
    out.emplace_back("step." + std::to_string(i), step_t_[i]);
  }
  out.emplace_back("steps_taken", at::tensor({steps_}, at::kLong));
  return out;
}

void AdamW::load_state(const io::NamedTensors& state, const std::string& source) {
  std::map<std::string, at::Tensor> m(state.begin(), state.end());
  auto take = [&](const std::string& k, at::Tensor& dst) {
    auto it = m.find(k);
    if (it == m.end()) throw std::runtime_error(source + ": optimizer state lacks '" + k + "'");
    if (it->second.sizes() != dst.sizes())
      throw std::runtime_error(source + ": optimizer state '" + k + "' has shape " + c10::str(it->second.sizes()) + ", expected " + c10::str(dst.sizes()));
    torch::NoGradGuard ng;
    dst.copy_(it->second);
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    take("exp_avg." + std::to_string(i), exp_avg_[i]);
    take("exp_avg_sq." + std::to_string(i), exp_avg_sq_[i]);
    take("step." + std::to_string(i), step_t_[i]);
  }
  auto it = m.find("steps_taken");
  if (it == m.end()) throw std::runtime_error(source + ": optimizer state lacks 'steps_taken'");
  steps_ = it->second.item<int64_t>();
}

void update_ema(const std::vector<at::Tensor>& ema, const std::vector<at::Tensor>& params, double decay) {
  ema_lerp(ema, params, at::Tensor(), 1.0 - decay);  // ema + (1 − decay)(p − ema)
}

void ema_lerp(const std::vector<at::Tensor>& ema, const std::vector<at::Tensor>& params, const at::Tensor& weight, double weight_value) {
  if (params.empty()) return;
  torch::NoGradGuard ng;
  std::vector<at::Tensor> src;
  src.reserve(params.size());
  for (const auto& p : params) src.push_back(p.detach());
  if (weight.defined()) at::_foreach_lerp_(ema, src, std::vector<at::Tensor>(src.size(), weight));
  else at::_foreach_lerp_(ema, src, at::Scalar(weight_value));
}

EmaPairs ema_pairs(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& ema) {
  if (params.size() != ema.size())
    throw std::invalid_argument("the EMA model has " + std::to_string(ema.size()) + " parameters, the model " + std::to_string(params.size()));
  EmaPairs e;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].requires_grad()) e.trainable.push_back(params[i]), e.trainable_ema.push_back(ema[i]);
    else e.fixed.push_back(params[i]), e.fixed_ema.push_back(ema[i]);
  }
  return e;
}

}  // namespace nala::train
