// The learning rate of each training step: DiT's recipe keeps it constant (docs/reference.md §4);
// a run may warm it up linearly and decay it toward a final rate over its steps (reached one step
// past the last, as torch's schedulers), so that a run of a fixed length ends at the quality its
// length allows instead of at a constant rate's noise floor:
//   warm-up  step k < W:  lr · (k + 1) / W
//   then     p = (k − W) / (S − W)  (S = --steps)
//            constant  lr;   cosine  lr_end + (lr − lr_end)(1 + cos πp) / 2;   linear  lr − (lr − lr_end) p
// as torch.optim.lr_scheduler's LinearLR warm-up followed by CosineAnnealingLR or LinearLR
// (SequentialLR), which the tests compare with.
#pragma once
#include <cstdint>

#include "train/train_config.h"

namespace nala::train {

// The rate of step `step` (0-based: the step being taken) of a run configured by cfg.
double scheduled_lr(const TrainConfig& cfg, int64_t step);

// Whether the rate changes from step to step (a schedule other than constant, or a warm-up).
bool lr_is_scheduled(const TrainConfig& cfg);

}  // namespace nala::train
