// nala forward: one model forward pass on x, t, y read from an .npz, output written to an .npz
// under "out". The parity tool to run after converting a checkpoint.
#include <iostream>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parse.h"
#include "models/checkpoint.h"
#include "models/dit.h"
#include "io/npz.h"

namespace nala::cli {

int run_forward(int argc, char** argv) {
  cxxopts::Options o("nala forward", "One model forward pass: x (N,C,H,W float32), t (N), y (N int64) from --input; writes 'out'");
  o.add_options()("model", "model name (DiT-XL/2, NaLaDiT-S/2, ...); optional for nala checkpoints", cxxopts::value<std::string>()->default_value(""))(
      "ckpt", "weights: .safetensors, official .pt, or a nala checkpoint directory", cxxopts::value<std::string>())(
      "input", ".npz with x, t, y", cxxopts::value<std::string>())("output", ".npz to write", cxxopts::value<std::string>())(
      "dtype", "fp32 or bf16", cxxopts::value<std::string>()->default_value("fp32"))(
      "device", "auto, cpu, cuda", cxxopts::value<std::string>()->default_value("auto"))(
      "cfg-scale", "guidance scale: read the batch as forward_with_cfg does", cxxopts::value<double>())(
      "cfg-channels", "auto (3, the official guidance, for 4-channel latents; else all), all, or a count",
      cxxopts::value<std::string>()->default_value("auto"))(
      "input-size", "the model's input grid (latents: the image size / 8), checked against the checkpoint",
      cxxopts::value<int64_t>()->default_value("-1"))(
      "h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  if (a.count("help") || !a.count("ckpt") || !a.count("input") || !a.count("output")) {
    std::cout << o.help() << "\n";
    if (!a.count("help")) std::cerr << "error: nala forward needs --ckpt, --input and --output\n";
    return a.count("help") ? 0 : 2;
  }
  const c10::Device dev = pick_device(a["device"].as<std::string>());
  const auto dt = parse_dtype(a["dtype"].as<std::string>());
  models::ModelOverrides ov;
  ov.input_size = a["input-size"].as<int64_t>();
  auto model = models::load_model(a["model"].as<std::string>(), a["ckpt"].as<std::string>(), ov);
  model->to(dev, dt);
  std::map<std::string, at::Tensor> in;
  for (auto& [k, v] : io::load_npz(a["input"].as<std::string>())) in[k] = v;
  for (const char* k : {"x", "t", "y"})
    if (!in.count(k)) throw std::runtime_error(a["input"].as<std::string>() + ": missing array '" + k + "' (needs x, t, y)");
  check_labels(in["y"], model->config().num_classes, model->config().class_dropout > 0, a["input"].as<std::string>() + ": 'y'");
  at::Tensor x = in["x"].to(dev, dt), t = in["t"].to(dev), y = in["y"].to(dev, at::kLong);
  torch::NoGradGuard ng;
  at::Tensor out;
  if (a.count("cfg-scale")) {
    const std::string ch = a["cfg-channels"].as<std::string>();
    out = model->forward_with_cfg(x, t, y, a["cfg-scale"].as<double>(), parse_cfg_channels(ch, model->config().in_channels));
  } else {
    out = model->forward(x, t, y);
  }
  io::save_npz(a["output"].as<std::string>(), {{"out", out.to(at::kCPU, at::kFloat)}});
  std::cout << model->config().name << ": out " << out.sizes() << " -> " << a["output"].as<std::string>() << "\n";
  return 0;
}

}  // namespace nala::cli
