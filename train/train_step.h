// One optimisation step of DiT train.py's recipe (docs/reference.md §4) on one process's share of
// the global batch (with --grad-accum N, in N equal pieces whose gradients add up to the batch's): the objective's loss under bf16 autocast on CUDA, backward with the gradient
// all-reduce (train/grad_buckets.h) overlapped or after it,
// optional clipping, AdamW (skipped inside the fused kernel where the loss or a gradient is not finite; at the
// step's rate of train/lr_schedule.h) and the EMA update. Everything stays on the device; the host reads the loss back only at log steps.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "diffusion/gaussian_diffusion.h"
#include "diffusion/transport.h"
#include "models/dit.h"
#include "ops/weight_casts.h"
#include "train/adamw.h"
#include "train/distributed.h"
#include "train/grad_buckets.h"
#include "models/cuda_graph.h"
#include "train/train_config.h"

namespace nala::train {

struct StepResult {
  at::Tensor loss;       // (1,) float32 on the device; NaN where the step was skipped
  at::Tensor grad_norm;  // () on the device: the norm of all gradients (inf/NaN for a skipped step)
};

class TrainStep {
 public:
  // cfg resolved; model and ema on their device; pg null for one process.
  TrainStep(const TrainConfig& cfg, models::DiT& model, models::DiT& ema, ProcessGroup* pg, bool bf16);
  // x (B, C, h, w) model-space batch, y (B,) labels; the caller seeded the step's global RNG.
  // A step whose loss or any gradient is not finite changes no weight (the EMA still decays toward
  // them) and returns a NaN loss, which the trainer counts.
  // With cfg.cuda_graphs the first kEagerSteps steps run as they are (lazy initialisation: cuBLAS
  // handles, diffusion tables), the next one is captured as a CUDA graph (models/cuda_graph.h) and
  // every later one copies x, y into the graph's input buffers and replays it (a new capture where
  // the batch shape changes). The results are equal to eager steps' (the same kernels, the same
  // random draws from the step's seed).
  StepResult run(int64_t step, const at::Tensor& x, const at::Tensor& y);
  static constexpr int kEagerSteps = 2;
  AdamW& optimizer() { return opt_; }
  bool graph_captured() const { return graph_.captured(); }
  const GradBuckets* grad_buckets() const { return buckets_.get(); }  // null for one process

 private:
  StepResult run_eager(int64_t step, const at::Tensor& x, const at::Tensor& y);
  double ema_decay(int64_t step) const;

  const TrainConfig& cfg_;
  models::DiT& model_;
  models::DiT& ema_;
  ProcessGroup* pg_;
  bool bf16_;
  int64_t rank_, world_;
  std::vector<at::Tensor> trainable_;
  AdamW opt_;
  std::unique_ptr<GradBuckets> buckets_;  // data parallel: the gradient all-reduce (overlapped with --overlap-grads)
  // bf16 on one CUDA process with NALA_WEIGHT_CASTS on (ops/fused_ops.h): the parameters cast in one
  // pass before the forward and their gradients widened in one pass after each backward, or handed to the
  // one-pass optimizer as they are, which also writes the next step's casts (ops/weight_casts.h, ops/adamw_ema.h)
  std::unique_ptr<ops::WeightCasts> casts_;
  diffusion::GaussianDiffusion diffusion_;
  diffusion::Transport transport_;
  // CUDA graphs (cfg.cuda_graphs). Host values are baked into a capture: a constant learning rate,
  // the gradient clip, cfg.global_batch and which parameters have gradients; a new capture happens
  // only when x's or y's shape changes. A scheduled rate is read from lr_, filled before each step.
  models::CudaGraph graph_;
  int64_t eager_steps_ = 0;
  at::Tensor static_x_, static_y_;  // the graph's inputs
  StepResult static_out_;           // its outputs, in its memory pool
  at::Tensor ema_weight_;           // () float32 1 − decay, filled before each replay (EMA warm-up under graphs)
  at::Tensor lr_;                   // () float32 the step's learning rate, filled before each step (a scheduled rate)
  // the EMA model's tensor of each trainable parameter (the one-pass optimizer moves them); the
  // parameters without a gradient and their EMA tensors, moved by one more pass
  EmaPairs ema_pairs_;
};

}  // namespace nala::train
