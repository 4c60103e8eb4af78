#include "models/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <torch/serialize.h>

#include "models/dit.h"
#include "io/atomic_file.h"

namespace nala::models {
ModelConfig config_from_weights(ModelConfig c, const io::NamedTensors& w, const std::string& source, int64_t given_input_size,
                                int64_t given_in_channels, int64_t given_num_classes, int given_learn_sigma) {
  std::map<std::string, at::Tensor> m(w.begin(), w.end());
  auto need = [&](const std::string& k) -> const at::Tensor& {
    auto it = m.find(k);
    if (it == m.end()) throw std::runtime_error(source + ": no '" + k + "' tensor: not a DiT/SiT checkpoint");
    return it->second;
  };
  auto agree = [&](const char* what, int64_t given, int64_t found) {
    if (given >= 0 && given != found)
      throw std::runtime_error(source + ": --" + what + " " + std::to_string(given) + " contradicts the checkpoint, which has " +
                               std::to_string(found));
  };
  const at::Tensor& xe = need("x_embedder.proj.weight");  // (D, C, p, p)
  if (xe.dim() != 4 || xe.size(0) != c.hidden || xe.size(2) != c.patch)
    throw std::runtime_error(source + ": x_embedder.proj.weight has shape " + c10::str(xe.sizes()) + ", but " + c.name +
                             " has hidden size " + std::to_string(c.hidden) + " and patch " + std::to_string(c.patch));
  agree("in-channels", given_in_channels, xe.size(1));
  c.in_channels = xe.size(1);
  const at::Tensor& ye = need("y_embedder.embedding_table.weight");  // (classes + 1, D)
  const int64_t classes = ye.size(0) - (c.class_dropout > 0 ? 1 : 0);
  agree("num-classes", given_num_classes, classes);
  c.num_classes = classes;
  const at::Tensor& fl = need("final_layer.linear.weight");  // (p·p·outC, D)
  const int64_t out_c = fl.size(0) / (c.patch * c.patch);
  if (out_c != c.in_channels && out_c != 2 * c.in_channels)
    throw std::runtime_error(source + ": final_layer.linear.weight has " + std::to_string(fl.size(0)) + " rows, neither " +
                             std::to_string(c.patch * c.patch * c.in_channels) + " nor twice that");
  const bool ls = out_c == 2 * c.in_channels;
  if (given_learn_sigma >= 0 && bool(given_learn_sigma) != ls)
    throw std::runtime_error(source + std::string(": --learn-sigma ") + (given_learn_sigma ? "on" : "off") +
                             " contradicts the checkpoint's final layer (" + std::to_string(out_c) + " output channels)");
  c.learn_sigma = ls;
  const at::Tensor& pe = need("pos_embed");  // (1, T, D)
  const int64_t g = int64_t(std::llround(std::sqrt(double(pe.size(1)))));
  if (g * g != pe.size(1)) throw std::runtime_error(source + ": pos_embed has " + std::to_string(pe.size(1)) + " tokens, not a square grid");
  agree("input-size", given_input_size, g * c.patch);
  c.input_size = g * c.patch;
  // the attention kind follows the keys: qkvg is the gated NaLa block, qkv softmax
  const bool has_qkvg = m.count("blocks.0.attn.qkvg.weight") > 0, has_qkv = m.count("blocks.0.attn.qkv.weight") > 0;
  if (has_qkvg && !c.is_nala()) throw std::runtime_error(source + ": the checkpoint has NaLa attention (qkvg) but " + c.name + " uses softmax attention");
  if (has_qkv && c.is_nala()) throw std::runtime_error(source + ": the checkpoint has softmax attention (qkv) but " + c.name + " uses NaLa attention");
  if (has_qkvg) {
    auto it = m.find("blocks.0.attn.lepe.weight");  // (D, 1, r, r), absent when LePE is off
    c.nala.lepe_kernel = it == m.end() ? 0 : it->second.size(-1);
  }
  return c;
}

std::vector<CheckpointRef> list_checkpoints(const std::string& run_dir) {
  namespace fs = std::filesystem;
  std::vector<CheckpointRef> v;
  const fs::path d = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(d)) return v;
  for (const auto& e : fs::directory_iterator(d)) {
    const std::string n = e.path().filename().string();
    if (n.size() != 7 || n.find_first_not_of("0123456789") != std::string::npos) continue;  // NNNNNNN only: never a *.tmp.* folder
    if (!fs::exists(e.path() / "state.json")) continue;  // incomplete (state.json is written last)
    v.push_back({std::stoll(n), e.path().string()});
  }
  std::sort(v.begin(), v.end(), [](const CheckpointRef& a, const CheckpointRef& b) { return a.step > b.step; });
  return v;
}

std::string latest_checkpoint(const std::string& run_dir) {
  auto v = list_checkpoints(run_dir);
  return v.empty() ? "" : v.front().dir;
}

std::shared_ptr<DiT> load_model(const std::string& name, const std::string& ckpt_in, const ModelOverrides& o, const std::string& prefer,
                                std::map<std::string, std::string>* metadata, std::string* resolved_path) {
  if (prefer != "ema" && prefer != "model") throw std::runtime_error("--weights must be ema or model, got '" + prefer + "'");
  std::string ckpt = ckpt_in;
  if (std::filesystem::is_directory(ckpt + "/checkpoints")) {  // a run directory: its latest complete checkpoint
    const std::string latest = latest_checkpoint(ckpt);
    if (latest.empty()) throw std::runtime_error("run directory '" + ckpt + "' has no complete checkpoint yet");
    std::cerr << "nala: " << ckpt << " is a run directory; using its latest checkpoint " << latest << "\n";
    ckpt = latest;
  }
  if (std::filesystem::is_directory(ckpt)) {
    const std::string f = ckpt + "/" + (prefer == "model" ? "model" : "ema") + ".safetensors";
    if (!io::file_exists(f)) throw std::runtime_error("checkpoint directory '" + ckpt + "' has no " + f);
    ckpt = f;
  }
  ModelConfig cfg;
  std::map<std::string, std::string> meta;
  io::NamedTensors w;
  if (c10::ends_with(ckpt, std::string(".safetensors"))) {
    if (!io::file_exists(ckpt)) throw std::runtime_error("checkpoint '" + ckpt + "' does not exist");
    w = io::load_safetensors(ckpt, &meta);
  } else {
    w = io::load_weights(ckpt, prefer);
  }
  if (meta.count("nala_config")) {
    cfg = config_from_json(meta["nala_config"]);
    if (!name.empty() && name != cfg.name)
      throw std::runtime_error(ckpt + ": holds a " + cfg.name + " but --model says " + name);
    auto agree = [&](const char* what, int64_t given, int64_t found) {
      if (given >= 0 && given != found)
        throw std::runtime_error(ckpt + ": --" + what + " " + std::to_string(given) + " contradicts the checkpoint, which has " + std::to_string(found));
    };
    agree("input-size", o.input_size, cfg.input_size);
    agree("in-channels", o.in_channels, cfg.in_channels);
    agree("num-classes", o.num_classes, cfg.num_classes);
    if (o.learn_sigma >= 0) agree("learn-sigma", o.learn_sigma, cfg.learn_sigma);
  } else {
    if (name.empty()) throw std::runtime_error(ckpt + ": not a nala checkpoint; say which model it holds with --model (e.g. DiT-XL/2)");
    cfg = config_from_weights(model_config(name), w, ckpt, o.input_size, o.in_channels, o.num_classes, o.learn_sigma);
  }
  auto model = std::make_shared<DiT>(cfg);
  io::load_state_dict(*model, w, ckpt);
  model->eval();
  if (metadata) *metadata = meta;
  if (resolved_path) *resolved_path = ckpt;
  return model;
}

void save_model(const DiT& model, const std::string& path, const std::map<std::string, std::string>& extra_metadata) {
  std::map<std::string, std::string> meta = extra_metadata;
  meta["format"] = "pt";
  meta["nala_config"] = config_to_json(model.config());
  io::save_safetensors(path, io::state_dict(model), meta);
}

}  // namespace nala::models
