// nala train: DDPM or flow-matching training from a preset plus flag overrides; re-running the
// same command resumes. Multi-process: launch under torchrun (or any launcher setting RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
#include <chrono>
#include <filesystem>
#include <iostream>

#include <cxxopts.hpp>
#include <torch/cuda.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parse.h"
#include "data/datasets.h"
#include "train/distributed.h"
#include "train/trainer.h"

namespace nala::cli {

int run_train(int argc, char** argv) {
  cxxopts::Options o("nala train", "Train a DiT/SiT/NaLaDiT/NaLaSiT model. Re-run the same command to resume.");
  std::string presets;
  for (auto& n : train::preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  o.add_options()("preset", "preset: " + presets, cxxopts::value<std::string>()->default_value("fashion-mnist-tiny"))(
      "out", "run directory", cxxopts::value<std::string>())("resume", "resume the run in this directory (same as --out DIR)",
                                                              cxxopts::value<std::string>());
  // every training-config field is a flag (train/train_config.h's table), overriding the preset
  for (const auto& f : train::train_config_fields())
    if (f.flag[0]) o.add_options()(f.flag, f.help, cxxopts::value<std::string>());
  o.add_options()("dist-timeout", "seconds a collective may wait for the other ranks before the job fails",
                  cxxopts::value<double>()->default_value("300"))("device", "auto, cpu, cuda", cxxopts::value<std::string>()->default_value("auto"))(
      "dry-run", "print the resolved config and exit")("h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  if (a.count("help")) {
    std::cout << o.help() << "\n";
    return 0;
  }
  train::TrainConfig c = train::train_preset(a["preset"].as<std::string>());
  for (const auto& f : train::train_config_fields())
    if (f.flag[0] && a.count(f.flag)) train::set_config_field(c, f, a[f.flag].as<std::string>());
  // a latent folder knows its image size: taken where neither the flag nor the preset gave one
  // (the default would be recorded in config.json, wrong; setup_model refuses a size that differs)
  if (!a.count("image-size") && c.image_size == train::TrainConfig{}.image_size)
    if (const auto px = data::latent_folder_image_size(c.data)) c.image_size = *px;
  c = train::resolved(c);
  std::string out = a.count("resume") ? a["resume"].as<std::string>() : a.count("out") ? a["out"].as<std::string>() : "";
  if (out.empty()) throw std::runtime_error("nala train: --out RUN_DIR is required");
  // --resume names a run that exists (a mistyped folder would start a new run from step 0)
  if (a.count("resume") && !std::filesystem::exists(out + "/config.json"))
    throw std::runtime_error("--resume '" + out + "' holds no run (no config.json there); --out starts a new one");
  if (a.count("dry-run")) {
    std::cout << train::train_config_to_json(c) << "\n";
    return 0;
  }
  const train::DistEnv env = train::dist_env_from_environment();
  c10::Device dev = pick_device(a["device"].as<std::string>());
  if (dev.is_cuda() && env.world_size > 1) dev = c10::Device(c10::kCUDA, c10::DeviceIndex(env.local_rank % torch::cuda::device_count()));
  std::unique_ptr<train::ProcessGroup> pg;
  const auto timeout = std::chrono::milliseconds(int64_t(a["dist-timeout"].as<double>() * 1000));
  if (dev.is_cuda()) set_current_cuda_device(dev);  // NCCL and the allocator work on this rank's GPU
  if (env.world_size > 1) pg = std::make_unique<train::ProcessGroup>(env, train::default_backend(dev), timeout, dev);
  train::install_stop_handlers();
  auto r = train::run_training(c, out, dev, pg.get());
  if (env.rank == 0) {
    std::cout << "trained steps " << r.start_step << " -> " << r.final_step << " (" << r.images_per_second << " img/s)"
              << (r.stopped_early ? ", stopped early: " + r.stop_reason : "") << "\n"
              << "run directory: " << out << "\n  checkpoint: " << train::latest_checkpoint(out) << "\n  metrics: " << out
              << "/metrics.jsonl\n  loss curve: " << out << "/loss.png\n  samples: " << out << "/samples/\n";
  }
  return r.stopped_early && r.stop_reason.rfind("signal", 0) == 0 ? 130 : 0;
}

}  // namespace nala::cli
