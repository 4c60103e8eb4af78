// The training loop (DiT train.py's recipe, docs/reference.md §4, plus what it lacks: resume, bf16,
// non-finite handling, atomic checkpoints). Its pieces: run_directory.h (config, checkpoints),
// model_setup.h (data, autoencoder, model config), train_step.h (one step), metrics_log.h (metrics,
// loss curve). Every step is reseeded from (seed, step) and the data position is saved, so a
// resumed run reproduces the uninterrupted one. SIGINT/SIGTERM write a checkpoint before exiting.
#pragma once
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "train/run_directory.h"
#include "train/train_config.h"

namespace nala::train {

class ProcessGroup;  // distributed.h

struct TrainResult {
  int64_t start_step = 0, final_step = 0;
  bool stopped_early = false;    // signal or time budget
  std::string stop_reason;
  std::vector<std::pair<int64_t, double>> losses;  // (step, loss) of every step this process ran
  double images_per_second = 0;
};

// Runs (or resumes) training into out_dir. `pg` is null for single-process training.
TrainResult run_training(const TrainConfig& cfg, const std::string& out_dir, const c10::Device& device, ProcessGroup* pg = nullptr);

// Installs SIGINT/SIGTERM handlers that ask the running training loop to checkpoint and stop.
void install_stop_handlers();

}  // namespace nala::train
