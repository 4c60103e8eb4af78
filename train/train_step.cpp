#include "train/train_step.h"

#include "ops/fused_ops.h"
#include "train/autocast_scope.h"
#include "train/lr_schedule.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/torch.h>

namespace nala::train {
namespace {


std::vector<at::Tensor> trainable_parameters(models::DiT& m) {
  std::vector<at::Tensor> v;
  for (auto& p : m.parameters())
    if (p.requires_grad()) v.push_back(p);
  return v;
}

AdamWOptions adamw_options(const TrainConfig& cfg) {
  AdamWOptions o;
  o.lr = cfg.lr;
  o.weight_decay = cfg.weight_decay;
  return o;
}

diffusion::TransportConfig transport_config(const TrainConfig& cfg) {
  diffusion::TransportConfig t;
  t.path = diffusion::parse_path_type(cfg.path);
  t.prediction = diffusion::parse_prediction(cfg.prediction);
  t.loss_weight = diffusion::parse_loss_weight(cfg.loss_weight);
  return t;
}

// The norm of all gradients, ‖(‖g_0‖, ‖g_1‖, …)‖, by ATen's multi-tensor norm, one call a dtype (a list
// of mixed dtypes would take its per-tensor path), each in float32: the values of the float32 norms
// of the same gradients widened.
at::Tensor gradient_norm(const std::vector<at::Tensor>& gs) {
  std::vector<at::Tensor> norms(gs.size());
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    std::vector<at::Tensor> group;
    std::vector<size_t> at_;
    for (size_t i = 0; i < gs.size(); ++i)
      if (gs[i].scalar_type() == dtype) group.push_back(gs[i]), at_.push_back(i);
    if (group.empty()) continue;
    const auto n = dtype == at::kFloat ? at::_foreach_norm(group) : at::_foreach_norm(group, 2, at::kFloat);  // () float32 each
    for (size_t k = 0; k < n.size(); ++k) norms[at_[k]] = n[k];
  }
  for (size_t i = 0; i < gs.size(); ++i)
    if (!norms[i].defined())
      throw std::invalid_argument("gradient " + std::to_string(i) + " is " + c10::toString(gs[i].scalar_type()) + ": float32, bf16 or fp16 expected");
  return at::stack(norms).norm();  // ()
}

}  // namespace

TrainStep::TrainStep(const TrainConfig& cfg, models::DiT& model, models::DiT& ema, ProcessGroup* pg, bool bf16)
    : cfg_(cfg), model_(model), ema_(ema), pg_(pg), bf16_(bf16), rank_(pg ? pg->rank() : 0), world_(pg ? pg->world_size() : 1),
      trainable_(trainable_parameters(model)), opt_(trainable_, adamw_options(cfg)),
      diffusion_(cfg.schedule, 1000, "", diffusion::parse_variance_type(model.config().learn_sigma ? cfg.variance : "fixed-small")),
      transport_(transport_config(cfg)) {
  ema_pairs_ = ema_pairs(model.parameters(), ema.parameters());  // trainable_ is its trainable list
  if (cfg.recompute) ops::set_recompute_saved(true);  // NaLa blocks read it at every forward (ops/fused_ops.h)
  if (pg) buckets_ = std::make_unique<GradBuckets>(trainable_, *pg, int64_t(cfg.bucket_mb * (1 << 20)), cfg.overlap_grads);
  // The buckets start their all-reduces in reverse parameter order as they fill, the first holding the
  // final layer's adaLN weights. With the stacked modulation (NALA_STACKED_MODULATION) every adaLN
  // gradient is ready only when the whole backward is done, so no bucket could start during it: a
  // multi-process run makes each block's modulation in the block, with --overlap-grads false too
  // (the same arithmetic either way: both give the same bits, tests/python/test_distributed.py).
  if (pg) ops::set_stacked_modulation(false);
  // (the buckets' all-reduce starts from autograd's gradient hooks, which the kept gradients would bypass)
  if (bf16 && !pg && !trainable_.empty() && trainable_.front().is_cuda() && ops::weight_casts_enabled())
    casts_ = std::make_unique<ops::WeightCasts>(trainable_, at::kBFloat16,
                                                ops::stacked_casts() ? std::vector<std::vector<at::Tensor>>{model.stacked_modulation_weights()}
                                                                     : std::vector<std::vector<at::Tensor>>{});
  if (cfg.grad_accum < 1 || (cfg.global_batch / world_) % cfg.grad_accum != 0)
    throw std::invalid_argument("--grad-accum " + std::to_string(cfg.grad_accum) + " does not divide each process's batch of " +
                                std::to_string(cfg.global_batch / world_) + " (--batch " + std::to_string(cfg.global_batch) + " on " +
                                std::to_string(world_) + " process(es))");
  if (lr_is_scheduled(cfg) && !trainable_.empty()) {  // the rate from a device tensor, filled before each step
    lr_ = at::zeros({}, trainable_.front().options().dtype(at::kFloat));  // ()
    opt_.set_lr_tensor(lr_);
  }
  if (cfg.cuda_graphs) {
    const auto dev = trainable_.empty() ? c10::Device(c10::kCPU) : trainable_.front().device();
    if (!dev.is_cuda() || pg)
      throw std::invalid_argument("--cuda-graphs true needs one process on a CUDA device; this run has " + std::to_string(world_) +
                                  " process(es) on " + dev.str());
    if (cfg.ema_warmup) ema_weight_ = at::zeros({}, trainable_.front().options().dtype(at::kFloat));  // ()
  }
}

double TrainStep::ema_decay(int64_t step) const {
  return cfg_.ema_warmup ? std::min(cfg_.ema_decay, (1.0 + double(step)) / (10.0 + double(step))) : cfg_.ema_decay;
}

StepResult TrainStep::run(int64_t step, const at::Tensor& x, const at::Tensor& y) {
  if (lr_.defined()) lr_.fill_(scheduled_lr(cfg_, step));  // read by AdamW, eager or replayed
  if (!cfg_.cuda_graphs) return run_eager(step, x, y);
  if (ema_weight_.defined()) ema_weight_.fill_(1.0 - ema_decay(step));  // read by the EMA update, eager or replayed
  if (eager_steps_ < kEagerSteps) {
    ++eager_steps_;
    return run_eager(step, x, y);
  }
  if (!graph_.captured() || x.sizes() != static_x_.sizes() || y.sizes() != static_y_.sizes()) {
    static_x_ = x.contiguous().clone();  // (B, C, h, w)
    static_y_ = y.contiguous().clone();  // (B,)
    // host code of the step runs once here (AdamW counts this step); the device work runs in replay()
    graph_.capture([&] { static_out_ = run_eager(step, static_x_, static_y_); });
  } else {
    static_x_.copy_(x);
    static_y_.copy_(y);
    opt_.count_replayed_step();
  }
  graph_.replay();
  return {static_out_.loss.clone(), static_out_.grad_norm.clone()};  // the next replay overwrites the graph's own
}

StepResult TrainStep::run_eager(int64_t step, const at::Tensor& x, const at::Tensor& y) {
  // This step's randomness is drawn for the whole global batch and each rank takes its rows (rank,
  // rank + world, ...), the rows of its data shard: N processes compute what one process computes.
  const int64_t G = cfg_.global_batch;
  auto opts = x.options();
  at::Tensor rows = at::arange(rank_, G, world_, opts.dtype(at::kLong));                 // (B,)
  auto mine = [&](const at::Tensor& all) { return world_ == 1 ? all : all.index_select(0, rows); };
  at::Tensor drop = mine((at::rand({G}, opts) < model_.config().class_dropout).to(at::kLong));  // label dropout, (B,)
  at::Tensor loss;
  const bool fused = ops::fused_optimizer();
  std::vector<at::Tensor> grads;  // the trainable parameters' gradients, in their order (undefined: none)
  if (buckets_) buckets_->prepare();
  const int64_t pieces = cfg_.grad_accum, B = x.size(0);
  if (B % pieces != 0)
    throw std::invalid_argument("--grad-accum " + std::to_string(pieces) + " does not divide this process's batch of " + std::to_string(B));
  // the step's draws for the whole batch, in the order of an unsplit step, then taken in pieces:
  // ddpm's timesteps and noise, or flow's times and x0
  const at::Tensor t = cfg_.objective == "ddpm" ? mine(at::randint(0, diffusion_.num_timesteps(), {G}, opts.dtype(at::kLong)))  // (B,)
                                                : mine(at::rand({G}, opts));                                                    // (B,)
  const at::Tensor noise = mine(at::randn({G, x.size(1), x.size(2), x.size(3)}, opts));                                     // (B, C, h, w)
  if (casts_) casts_->refresh();  // the weights as AdamW left them, cast for every piece's forward
  for (int64_t i = 0; i < pieces; ++i) {
    // rows [i·B/pieces, (i+1)·B/pieces): every tensor of the step sliced alike (pieces 1: the whole batch)
    auto part = [&](const at::Tensor& a) { return pieces == 1 ? a : a.narrow(0, i * (B / pieces), B / pieces); };
    at::Tensor piece_loss;  // () this piece's mean loss
    {
      AutocastScope ac(bf16_);
      ops::WeightCasts::Scope casts(casts_.get());
      const at::Tensor yi = part(y), di = part(drop);  // (B/pieces,)
      auto fn = [&](const at::Tensor& xt, const at::Tensor& tt) { return model_.forward(xt, tt, yi, di); };
      if (cfg_.objective == "ddpm") piece_loss = diffusion_.training_losses(fn, part(x), part(t), part(noise)).loss.mean();
      else piece_loss = transport_.training_loss(fn, part(x), part(t), part(noise)).mean();
    }
    if (buckets_) buckets_->set_counting(i + 1 == pieces);  // the all-reduce waits for the last piece's gradients
    // the batch's mean loss is the pieces' mean: each piece's gradient scaled by 1/pieces
    const at::Tensor scaled = pieces == 1 ? piece_loss : piece_loss / double(pieces);  // ()
    scaled.backward();
    // the weights' gradients from their casts': into .grad, or (the last piece, for the one-pass
    // optimizer) as they are, bf16 where nothing else added to them
    if (casts_ && fused && i + 1 == pieces) grads = casts_->gradients();
    else if (casts_) casts_->take_gradients();
    loss = i == 0 ? scaled.detach() : loss + scaled.detach();
  }
  if (buckets_) buckets_->finish();
  if (grads.empty())
    for (auto& p : trainable_) grads.push_back(p.grad());
  std::vector<at::Tensor> gs;
  for (const auto& g : grads)
    if (g.defined()) gs.push_back(g);
  // A step is skipped (inside the fused AdamW kernel, no host sync) when the loss or any gradient is
  // not finite: the norm over all gradients is inf/NaN exactly then. It is also what clipping and
  // the log use.
  StepResult r;
  r.grad_norm = gradient_norm(gs);  // ()
  at::Tensor found_inf = at::logical_not(at::isfinite(loss.detach()) & at::isfinite(r.grad_norm)).to(at::kFloat).reshape({1});  // (1,)
  if (pg_) found_inf = pg_->allreduce_max(found_inf);  // every rank skips together
  const at::Tensor clip = cfg_.grad_clip > 0 ? (cfg_.grad_clip / (r.grad_norm + 1e-6)).clamp_max(1.0) : at::Tensor();  // ()
  if (fused) {
    // AdamW, the trainable parameters' EMA and the next step's casts in one pass (ops/adamw_ema.h);
    // the EMA of the rest (the fixed positional embedding) here
    opt_.step_with_ema(grads, clip, found_inf, ema_pairs_.trainable_ema, ema_weight_, 1.0 - ema_decay(step),
                       casts_ ? casts_->casts() : std::vector<at::Tensor>{});
    if (casts_) casts_->mark_current();
    if (!buckets_) opt_.zero_grad();
    ema_lerp(ema_pairs_.fixed_ema, ema_pairs_.fixed, ema_weight_, 1.0 - ema_decay(step));
    r.loss = at::where(found_inf > 0, at::full_like(found_inf, NAN), loss.detach().to(at::kFloat).reshape({1}));
    return r;
  }
  if (clip.defined()) at::_foreach_mul_(gs, clip);
  opt_.step(found_inf);  // skipped inside the fused kernel where found_inf is set
  if (!buckets_) opt_.zero_grad();  // the buckets are zeroed by the next prepare()
  // (with CUDA graphs and a decay that changes per step, 1 − decay read from the device: ema_weight_)
  ema_lerp(ema_.parameters(), model_.parameters(), ema_weight_, 1.0 - ema_decay(step));
  r.loss = at::where(found_inf > 0, at::full_like(found_inf, NAN), loss.detach().to(at::kFloat).reshape({1}));
  return r;
}

}  // namespace nala::train
