// Weights in and out of any torch::nn::Module (no model architecture here): reading
// .safetensors and torch.save archives, state dicts, strict loading with a full mismatch report.
#pragma once
#include <string>

#include <torch/nn/module.h>

#include "io/safetensors.h"

namespace nala::io {

// Reads weights from .safetensors or a torch.save archive (.pt/.pth). For a training checkpoint
// dict, `prefer` names the entry to take ("ema" by default, else "model"). Throws naming the file.
NamedTensors load_weights(const std::string& path, const std::string& prefer = "ema");

// Parameters and buffers of a module, in registration order (the state_dict order).
NamedTensors state_dict(const torch::nn::Module& m);

// Copies weights into the module. Strict: every key must match by name and shape; otherwise the
// error lists the missing, unexpected and mis-shaped keys (with both shapes).
void load_state_dict(torch::nn::Module& m, const NamedTensors& weights, const std::string& source, bool strict = true);

}  // namespace nala::io
