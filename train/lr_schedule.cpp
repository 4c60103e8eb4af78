#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace nala::train {

bool lr_is_scheduled(const TrainConfig& cfg) { return cfg.lr_schedule != "constant" || cfg.lr_warmup > 0; }

double scheduled_lr(const TrainConfig& cfg, int64_t step) {
  const int64_t W = cfg.lr_warmup;
  if (step < W) return cfg.lr * double(step + 1) / double(W);
  if (cfg.lr_schedule == "constant") return cfg.lr;
  const double p = std::min(1.0, double(step - W) / double(std::max<int64_t>(1, cfg.steps - W)));  // decay progress, [0, 1]
  if (cfg.lr_schedule == "cosine") return cfg.lr_end + (cfg.lr - cfg.lr_end) * (1.0 + std::cos(M_PI * p)) / 2.0;
  return cfg.lr - (cfg.lr - cfg.lr_end) * p;  // linear (validate() admits no other)
}

}  // namespace nala::train
