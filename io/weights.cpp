// Weights in and out of a torch::nn::Module: safetensors or torch.save zip archives (.pt/.pth,
// LibTorch's pickle reader), state dicts in registration order, and strict loading that reports
// every missing, unexpected and mis-shaped key. Nothing here knows a model architecture.
#include "io/weights.h"

#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <torch/serialize.h>

#include "io/atomic_file.h"

namespace nala::io {
namespace {

bool ends_with(const std::string& s, const std::string& e) { return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0; }

NamedTensors dict_to_tensors(const c10::impl::GenericDict& d, const std::string& path) {
  NamedTensors out;
  for (const auto& kv : d) {
    if (!kv.key().isString()) continue;
    if (!kv.value().isTensor()) continue;
    out.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
  }
  if (out.empty()) throw std::runtime_error(path + ": no tensors in the checkpoint's state dict");
  return out;
}

}  // namespace

NamedTensors load_weights(const std::string& path, const std::string& prefer) {
  if (!file_exists(path)) throw std::runtime_error("checkpoint '" + path + "' does not exist");
  if (ends_with(path, ".safetensors")) return load_safetensors(path);
  std::string bytes = read_file(path);
  if (bytes.size() < 4) throw std::runtime_error(path + ": file too short to be a checkpoint");
  if (bytes.compare(0, 4, "PK\x03\x04") != 0)
    throw std::runtime_error(path + ": not a torch.save zip archive (a legacy-format .pt?). Convert it with "
                                    "`python3 scripts/convert_checkpoint.py " + path + " OUT.safetensors`");
  c10::IValue v;
  try {
    v = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": LibTorch cannot read this checkpoint (" + std::string(e.what()).substr(0, 200) +
                             "). Convert it with `python3 scripts/convert_checkpoint.py " + path + " OUT.safetensors`");
  }
  if (!v.isGenericDict()) throw std::runtime_error(path + ": the checkpoint is not a dict of tensors");
  auto d = v.toGenericDict();
  for (const std::string& key : {prefer, std::string("ema"), std::string("model")})
    for (const auto& kv : d)
      if (kv.key().isString() && kv.key().toStringRef() == key && kv.value().isGenericDict()) {
        if (key != prefer) std::cerr << "note: " << path << " has no '" << prefer << "' weights; using its '" << key << "' weights\n";
        return dict_to_tensors(kv.value().toGenericDict(), path);
      }
  return dict_to_tensors(d, path);
}

NamedTensors state_dict(const torch::nn::Module& m) {
  NamedTensors out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

void load_state_dict(torch::nn::Module& m, const NamedTensors& weights, const std::string& source, bool strict) {
  std::map<std::string, at::Tensor> given(weights.begin(), weights.end());
  std::vector<std::string> missing, mismatched, unexpected;
  auto own = state_dict(m);
  std::set<std::string> own_names;
  for (auto& [name, t] : own) {
    own_names.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (it->second.sizes() != t.sizes()) {
      std::ostringstream ss;
      ss << name << " (checkpoint " << it->second.sizes() << ", model " << t.sizes() << ")";
      mismatched.push_back(ss.str());
    }
  }
  for (auto& [name, t] : weights)
    if (!own_names.count(name)) unexpected.push_back(name);
  if (!mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()))) {
    std::ostringstream ss;
    ss << source << ": the weights do not match the model";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      ss << "\n  " << what << " (" << v.size() << "): ";
      for (size_t i = 0; i < v.size() && i < 12; ++i) ss << (i ? ", " : "") << v[i];
      if (v.size() > 12) ss << ", ...";
    };
    list("missing keys", missing);
    list("unexpected keys", unexpected);
    list("shape mismatches", mismatched);
    throw std::runtime_error(ss.str());
  }
  torch::NoGradGuard ng;
  for (auto& [name, t] : own) {
    auto it = given.find(name);
    if (it != given.end()) t.copy_(it->second.to(t.device(), t.scalar_type()));
  }
}

}  // namespace nala::io
