// Model configurations keyed by the published names (docs/reference.md §1.1; docs/nala_attention.md §6):
//   {DiT, SiT, NaLaDiT, NaLaSiT}-{S, B, L, XL}/{2, 4, 8}, plus T (tiny, ours) for CPU demos.
// DiT*/NaLaDiT* are trained with the DDPM objective, SiT*/NaLaSiT* with flow matching; NaLa*
// swap only the attention (softmax -> gated NaLa block).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attention/blocks.h"

namespace nala::models {

struct ModelConfig {
  std::string name;            // e.g. "NaLaDiT-S/2"
  std::string family;          // "DiT" or "SiT": the objective the model is made for
  std::string size;            // "S", "B", "L", "XL", "T"
  int64_t depth = 28, hidden = 1152, heads = 16, patch = 2;
  int64_t input_size = 32;     // latent (or pixel) side length
  int64_t in_channels = 4;
  int64_t num_classes = 1000;
  double mlp_ratio = 4.0;
  double class_dropout = 0.1;
  bool learn_sigma = true;
  std::string attention = "softmax";  // "softmax" or a NaLa feature map ("nala", "nala-relu", "elu", ...):
                                      // the one home of the kind; the block derives nala.nala.feature_map from it
  attention::GatedNalaConfig nala;    // options of the gated NaLa block

  int64_t out_channels() const { return learn_sigma ? 2 * in_channels : in_channels; }
  int64_t grid() const { return input_size / patch; }
  int64_t tokens() const { return grid() * grid(); }
  bool is_nala() const { return attention != "softmax"; }
};

// Parses a model name; throws with the known names for anything else.
ModelConfig model_config(const std::string& name);
std::vector<std::string> known_model_names();
// The whole config as JSON (saved with every checkpoint and run) and back.
std::string config_to_json(const ModelConfig& c);
ModelConfig config_from_json(const std::string& json);
// Checks a config for consistency (divisibility, positive sizes); throws with the value.
void validate(const ModelConfig& c);

}  // namespace nala::models
