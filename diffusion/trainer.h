// The training loop (DiT train.py's recipe, REFERENCE.md §4, plus what it lacks: resume, bf16,
// non-finite handling, atomic checkpoints). One run directory holds everything:
//   config.json          the resolved TrainConfig (re-running the same command resumes)
//   model.json           the resolved ModelConfig
//   metrics.jsonl        one line per log interval: step, loss, grad_norm, lr, steps_per_s, img_per_s, ...
//   loss.png             the loss curve, redrawn at every log
//   checkpoints/NNNNNNN/ model.safetensors, ema.safetensors, optimizer.safetensors, state.json
//                        (written to a temporary directory, then renamed; the last K are kept)
//   samples/NNNNNNN.png  EMA sample grids, one row per class
// Every step is reseeded from (seed, rank, step), and the data position is saved, so a resumed
// run reproduces the uninterrupted one. SIGINT/SIGTERM write a checkpoint before exiting.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "diffusion/train_config.h"

namespace nala::diffusion {

class ProcessGroup;  // distributed.h

struct TrainResult {
  int64_t start_step = 0, final_step = 0;
  bool stopped_early = false;    // signal or time budget
  std::string stop_reason;
  std::vector<std::pair<int64_t, double>> losses;  // (step, loss) of every step this process ran
  double images_per_second = 0;
};

// Runs (or resumes) training into out_dir. `pg` is null for single-process training.
TrainResult train(const TrainConfig& cfg, const std::string& out_dir, const c10::Device& device, ProcessGroup* pg = nullptr);

// The latest complete checkpoint directory of a run ("" if none).
std::string latest_checkpoint(const std::string& out_dir);

// Installs SIGINT/SIGTERM handlers that ask the running training loop to checkpoint and stop.
void install_stop_handlers();

}  // namespace nala::diffusion
