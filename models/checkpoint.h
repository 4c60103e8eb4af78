// Model weights in and out: safetensors (nala's format), official DiT/SiT .pt files (torch.save
// zip archives holding a state dict, or a dict with "ema"/"model", "ema" preferred as DiT's
// find_model does), and strict state-dict loading with a clear report of every mismatch.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "models/model_config.h"
#include "io/safetensors.h"
#include "io/weights.h"

namespace nala::models {

// Fills in_channels, num_classes, learn_sigma and input_size from the tensor shapes of a state
// dict (x_embedder.proj.weight, y_embedder.embedding_table.weight, final_layer.linear.weight,
// pos_embed). A value the user gave explicitly (given_* >= 0) must agree, else a clear error.
ModelConfig config_from_weights(ModelConfig c, const io::NamedTensors& w, const std::string& source, int64_t given_input_size = -1,
                                int64_t given_in_channels = -1, int64_t given_num_classes = -1, int given_learn_sigma = -1);

struct ModelOverrides {
  int64_t input_size = -1, in_channels = -1, num_classes = -1;
  int learn_sigma = -1;  // -1: from the checkpoint
};

// The checkpoints of a training run directory (RUN/checkpoints/NNNNNNN/, complete once state.json
// is in place; temporary folders never count), newest first; and the newest ("" if none). This is
// the one rule every tool and script uses to pick "the latest checkpoint".
struct CheckpointRef {
  int64_t step;
  std::string dir;
};
std::vector<CheckpointRef> list_checkpoints(const std::string& run_dir);
std::string latest_checkpoint(const std::string& run_dir);

class DiT;
// Builds the model a checkpoint holds and loads it strictly. `ckpt` is a .safetensors file (nala's
// own carry their full config in the metadata key "nala_config"), an official .pt, or a nala
// checkpoint directory (its ema.safetensors, or model.safetensors with prefer = "model"), or a run
// directory (its latest complete checkpoint). `name`
// may be empty for nala's own checkpoints; otherwise it must agree with them.
// `metadata` (optional) receives the safetensors metadata (empty for .pt files), e.g. the training
// objective nala checkpoints record; `resolved_path` the weights file actually read.
std::shared_ptr<DiT> load_model(const std::string& name, const std::string& ckpt, const ModelOverrides& o = {},
                                const std::string& prefer = "ema", std::map<std::string, std::string>* metadata = nullptr,
                                std::string* resolved_path = nullptr);

// Writes a model's weights as safetensors with its config in the metadata (atomically), plus
// `extra_metadata` (the trainer's objective settings).
void save_model(const DiT& model, const std::string& path, const std::map<std::string, std::string>& extra_metadata = {});

}  // namespace nala::models
