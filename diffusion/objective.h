// The training objective and its settings, as a nala checkpoint records them (safetensors metadata
// key "nala_objective") so that sampling uses the process the model was trained with. Official
// DiT/SiT checkpoints carry none: they are sampled with the defaults below (DDPM linear for the DiT
// family, Linear velocity flow for SiT).
#pragma once
#include <string>

namespace nala::diffusion {

struct ObjectiveSettings {
  std::string objective = "ddpm";                            // "ddpm" or "flow"
  std::string schedule = "linear", variance = "learned-range";  // DDPM (variance as the loss used it)
  std::string path = "Linear", prediction = "velocity", loss_weight = "none";  // flow
};

constexpr const char* kObjectiveMetadataKey = "nala_objective";

std::string objective_to_json(const ObjectiveSettings& o);
// Throws naming `source` and the field for malformed or unknown values.
ObjectiveSettings objective_from_json(const std::string& json, const std::string& source);

}  // namespace nala::diffusion
