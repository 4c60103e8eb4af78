// nala convert: official DiT/SiT .pt checkpoints (torch.save zip archives) to safetensors with the
// same key names. Files LibTorch cannot read are converted by scripts/convert_checkpoint.py.
#include <iostream>

#include <cxxopts.hpp>

#include "cli/commands.h"
#include "cli/parse.h"
#include "models/checkpoint.h"

namespace nala::cli {

int run_convert(int argc, char** argv) {
  cxxopts::Options o("nala convert", "Convert a checkpoint (.pt state dict, or a dict with 'ema'/'model') to safetensors");
  o.add_options()("in", "input .pt / .pth / .safetensors", cxxopts::value<std::string>())(
      "out", "output .safetensors", cxxopts::value<std::string>())("take", "entry of a training checkpoint: ema or model",
                                                                   cxxopts::value<std::string>()->default_value("ema"))("h,help", "help");
  o.parse_positional({"in", "out"});
  o.positional_help("IN.pt OUT.safetensors");
  auto a = nala::cli::parse_flags(o, argc, argv);
  if (a.count("help") || !a.count("in") || !a.count("out")) {
    std::cout << o.help() << "\n";
    if (!a.count("help")) std::cerr << "error: nala convert needs --in and --out\n";
    return a.count("help") ? 0 : 2;
  }
  const std::string take = a["take"].as<std::string>();
  if (take != "ema" && take != "model") throw std::runtime_error("--take must be ema or model, got '" + take + "'");
  auto w = io::load_weights(a["in"].as<std::string>(), take);
  int64_t n = 0;
  for (auto& [k, t] : w) n += t.numel();
  io::save_safetensors(a["out"].as<std::string>(), w, {{"format", "pt"}});
  std::cout << "wrote " << w.size() << " tensors (" << n << " values) to " << a["out"].as<std::string>() << "\n";
  return 0;
}

}  // namespace nala::cli
