#include "models/model_config.h"

#include <regex>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace nala::models {
namespace {

struct SizeRow {
  const char* size;
  int64_t depth, hidden, heads;
};
// DiT models.py:328-370 (depth, hidden size, heads); T is nala's tiny size for CPU runs.
const SizeRow kSizes[] = {{"XL", 28, 1152, 16}, {"L", 24, 1024, 16}, {"B", 12, 768, 12}, {"S", 12, 384, 6}, {"T", 4, 128, 2}};
const char* kFamilies[] = {"DiT", "SiT", "NaLaDiT", "NaLaSiT"};

}  // namespace

std::vector<std::string> known_model_names() {
  std::vector<std::string> out;
  for (const char* f : kFamilies)
    for (const auto& s : kSizes)
      for (int p : {2, 4, 8}) out.push_back(std::string(f) + "-" + s.size + "/" + std::to_string(p));
  return out;
}

ModelConfig model_config(const std::string& name) {
  static const std::regex re("^(NaLaDiT|NaLaSiT|DiT|SiT)-(XL|L|B|S|T)/(2|4|8)$");
  std::smatch m;
  if (!std::regex_match(name, m, re))
    throw std::runtime_error("unknown model '" + name + "' (known: {DiT,SiT,NaLaDiT,NaLaSiT}-{S,B,L,XL,T}/{2,4,8}, e.g. DiT-XL/2, NaLaDiT-S/2)");
  ModelConfig c;
  c.name = name;
  const std::string fam = m[1];
  c.family = (fam == "DiT" || fam == "NaLaDiT") ? "DiT" : "SiT";
  c.attention = fam.rfind("NaLa", 0) == 0 ? "nala" : "softmax";
  c.size = m[2];
  c.patch = std::stoll(m[3]);
  for (const auto& s : kSizes)
    if (c.size == s.size) {
      c.depth = s.depth;
      c.hidden = s.hidden;
      c.heads = s.heads;
    }
  return c;
}

std::string config_to_json(const ModelConfig& c) {
  nlohmann::ordered_json j = {{"name", c.name}, {"family", c.family}, {"size", c.size}, {"depth", c.depth}, {"hidden", c.hidden},
                              {"heads", c.heads}, {"patch", c.patch}, {"input_size", c.input_size}, {"in_channels", c.in_channels},
                              {"num_classes", c.num_classes}, {"mlp_ratio", c.mlp_ratio}, {"class_dropout", c.class_dropout},
                              {"learn_sigma", c.learn_sigma}, {"attention", c.attention},
                              {"nala", {{"lambda", c.nala.nala.lambda}, {"tau", c.nala.nala.tau}, {"alpha", c.nala.nala.alpha},
                                        {"eps", c.nala.nala.eps}, {"eps_norm", c.nala.nala.eps_norm}, {"lepe_kernel", c.nala.lepe_kernel},
                                        {"rope", c.nala.rope}}}};
  return j.dump();
}

ModelConfig config_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("model config is not valid JSON: ") + e.what());
  }
  try {
    ModelConfig c = model_config(j.at("name").get<std::string>());
    c.depth = j.at("depth");
    c.hidden = j.at("hidden");
    c.heads = j.at("heads");
    c.patch = j.at("patch");
    c.input_size = j.at("input_size");
    c.in_channels = j.at("in_channels");
    c.num_classes = j.at("num_classes");
    c.mlp_ratio = j.at("mlp_ratio");
    c.class_dropout = j.at("class_dropout");
    c.learn_sigma = j.at("learn_sigma");
    c.attention = j.at("attention");
    const auto& n = j.at("nala");
    c.nala.nala.lambda = n.at("lambda");
    c.nala.nala.tau = n.at("tau");
    c.nala.nala.alpha = n.at("alpha");
    c.nala.nala.eps = n.at("eps");
    c.nala.nala.eps_norm = n.at("eps_norm");
    c.nala.lepe_kernel = n.at("lepe_kernel");
    c.nala.rope = n.at("rope");
    validate(c);
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("model config JSON lacks or mistypes a field: ") + e.what());
  }
}

void validate(const ModelConfig& c) {
  auto bad = [&](const std::string& what) { throw std::runtime_error("model " + c.name + ": " + what); };
  if (c.input_size <= 0 || c.input_size % c.patch != 0)
    bad("input size " + std::to_string(c.input_size) + " is not a positive multiple of the patch size " + std::to_string(c.patch));
  if (c.hidden % c.heads != 0) bad("hidden size " + std::to_string(c.hidden) + " not divisible by " + std::to_string(c.heads) + " heads");
  if (c.hidden % 4 != 0) bad("hidden size must be divisible by 4 for the 2-D position embedding");
  if (c.in_channels <= 0) bad("in_channels must be positive, got " + std::to_string(c.in_channels));
  if (c.num_classes <= 0) bad("num_classes must be positive, got " + std::to_string(c.num_classes));
  if (c.class_dropout < 0 || c.class_dropout >= 1) bad("class dropout must be in [0, 1), got " + std::to_string(c.class_dropout));
  if (c.attention != "softmax") {
    try {
      attention::parse_feature_map(c.attention);
    } catch (const std::exception& e) {  // the feature maps' list lacks softmax, which a model takes too
      bad(std::string(e.what()) + ", or softmax");
    }
  }
}

}  // namespace nala::models
