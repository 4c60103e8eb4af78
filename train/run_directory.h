// A training run's directory (docs/guide.md describes it for users):
//   config.json          the resolved TrainConfig (re-running the same command resumes)
//   model.json           the resolved ModelConfig
//   metrics.jsonl, loss.png   see metrics_log.h
//   checkpoints/NNNNNNN/ model.safetensors, ema.safetensors, optimizer.safetensors, state.json
//                        (written to a temporary directory, then renamed; state.json last; the last K kept)
//   samples/NNNNNNN.png  EMA sample grids
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "diffusion/objective.h"
#include "models/checkpoint.h"
#include "models/dit.h"
#include "train/adamw.h"
#include "train/train_config.h"

namespace nala::train {

// Where a run stands: saved with every checkpoint, restored on resume.
struct RunState {
  int64_t step = 0, epoch = 0, batch_index = 0, nonfinite = 0, images_seen = 0;
};

std::string step_name(int64_t step);  // "0001234"

// Checkpoints are listed by models::list_checkpoints / latest_checkpoint (models/checkpoint.h).
using models::CheckpointRef;
using models::latest_checkpoint;
using models::list_checkpoints;

// Rank 0 (writer): throws when out_dir/config.json records a run that disagrees with cfg in a
// field that may not change on resume (the error lists the differences); writes nothing.
void check_run_directory(const std::string& out_dir, const TrainConfig& cfg, bool writer);
// Rank 0 (writer): check_run_directory, then a new run writes config.json (a resumed one rewrites
// its equal fields). Other ranks: nothing.
void open_run_directory(const std::string& out_dir, const TrainConfig& cfg, bool writer);

// Writes checkpoints/<step> atomically (temporary directory, fsynced, then renamed into place; a
// previous folder of the same step is removed only after) and keeps the last keep_last of this step
// and the earlier ones (never deleting the one it wrote for a later step's folder). The weights
// files carry the objective settings, so `nala sample` uses the process the model was trained with.
void save_checkpoint(const std::string& out_dir, const RunState& st, const models::DiT& model, const models::DiT& ema, const AdamW& opt,
                     const diffusion::ObjectiveSettings& objective, int64_t keep_last);
// Loads the newest readable checkpoint into model, ema and opt; an unreadable one is reported (on
// stderr when `verbose`) and the previous one tried, and once one loads the unreadable later ones
// are renamed <step>.unreadable (kept, no longer listed). Returns the state (step 0 when there is no
// checkpoint); throws, touching nothing, when there are checkpoints and none can be read.
RunState load_latest_checkpoint(const std::string& out_dir, models::DiT& model, models::DiT& ema, AdamW& opt, bool verbose);

}  // namespace nala::train
