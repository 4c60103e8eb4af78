#include "diffusion/objective.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "diffusion/gaussian_diffusion.h"
#include "diffusion/transport.h"

namespace nala::diffusion {

std::string objective_to_json(const ObjectiveSettings& o) {
  return nlohmann::ordered_json{{"objective", o.objective}, {"schedule", o.schedule},     {"variance", o.variance},
                                {"path", o.path},           {"prediction", o.prediction}, {"loss_weight", o.loss_weight}}
      .dump();
}

ObjectiveSettings objective_from_json(const std::string& text, const std::string& source) {
  ObjectiveSettings o;
  try {
    const auto j = nlohmann::json::parse(text);
    o.objective = j.at("objective");
    o.schedule = j.at("schedule");
    o.variance = j.at("variance");
    o.path = j.at("path");
    o.prediction = j.at("prediction");
    o.loss_weight = j.at("loss_weight");
  } catch (const std::exception& e) {
    throw std::runtime_error(source + ": malformed '" + kObjectiveMetadataKey + "' metadata (" + e.what() + ")");
  }
  try {
    if (o.objective != "ddpm" && o.objective != "flow") throw std::runtime_error("unknown objective '" + o.objective + "'");
    parse_variance_type(o.variance);
    GaussianDiffusion check(o.schedule, 1000, "", parse_variance_type(o.variance));  // a known schedule name
    parse_path_type(o.path);
    parse_prediction(o.prediction);
    parse_loss_weight(o.loss_weight);
  } catch (const std::exception& e) {
    throw std::runtime_error(source + ": '" + kObjectiveMetadataKey + "' metadata: " + e.what());
  }
  return o;
}

}  // namespace nala::diffusion
