// nala train: DDPM or flow-matching training from a preset plus flag overrides; re-running the
// same command resumes. Multi-process: launch under torchrun (or any launcher setting RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
#include <chrono>
#include <iostream>

#include <cxxopts.hpp>
#include <torch/cuda.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "diffusion/distributed.h"
#include "diffusion/trainer.h"

namespace nala::cli {

int run_train(int argc, char** argv) {
  cxxopts::Options o("nala train", "Train a DiT/SiT/NaLaDiT/NaLaSiT model. Re-run the same command to resume.");
  std::string presets;
  for (auto& n : diffusion::preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  o.add_options()("preset", "preset: " + presets, cxxopts::value<std::string>()->default_value("fashion-mnist-tiny"))(
      "out", "run directory", cxxopts::value<std::string>())("resume", "resume the run in this directory (same as --out DIR)",
                                                              cxxopts::value<std::string>())(
      "model", "model name, e.g. NaLaDiT-S/2", cxxopts::value<std::string>())("objective", "ddpm, flow or auto", cxxopts::value<std::string>())(
      "data", "fashion-mnist, a latent folder (extract-latents) or an image folder", cxxopts::value<std::string>())(
      "vae", "image folders: VAE weights to encode online (slow; extract-latents is the fast way), or none for pixel space",
      cxxopts::value<std::string>())("image-size", "image size in pixels", cxxopts::value<int64_t>())("num-classes", "classes", cxxopts::value<int64_t>())(
      "batch", "global batch size", cxxopts::value<int64_t>())("steps", "training steps", cxxopts::value<int64_t>())(
      "lr", "learning rate", cxxopts::value<double>())("weight-decay", "AdamW weight decay", cxxopts::value<double>())(
      "grad-clip", "clip the gradient norm (0: off)", cxxopts::value<double>())("ema-decay", "EMA decay", cxxopts::value<double>())(
      "ema-warmup", "EMA decay warm-up: true or false", cxxopts::value<std::string>())(
      "precision", "auto, fp32, bf16", cxxopts::value<std::string>())("seed", "global seed", cxxopts::value<uint64_t>())(
      "log-every", "steps between metric lines", cxxopts::value<int64_t>())("ckpt-every", "steps between checkpoints", cxxopts::value<int64_t>())(
      "keep-last", "checkpoints kept", cxxopts::value<int64_t>())("sample-every", "steps between EMA sample grids (0: off)", cxxopts::value<int64_t>())(
      "workers", "data loader threads", cxxopts::value<int64_t>())("max-minutes", "stop and checkpoint after this long (0: no limit)",
                                                                    cxxopts::value<double>())(
      "attention", "softmax, nala, nala-relu, elu, relu, focused", cxxopts::value<std::string>())("alpha", "NaLa angle scale α", cxxopts::value<double>())(
      "lepe", "LePE kernel size (0: off)", cxxopts::value<int64_t>())("schedule", "DDPM beta schedule: linear, cosine", cxxopts::value<std::string>())(
      "path", "flow path: Linear, GVP, VP", cxxopts::value<std::string>())("prediction", "flow prediction: velocity, noise, score",
                                                                          cxxopts::value<std::string>())(
      "loss-weight", "flow loss weight: none, velocity, likelihood", cxxopts::value<std::string>())(
      "max-nonfinite", "skipped non-finite steps before giving up", cxxopts::value<int64_t>())(
      "dist-timeout", "seconds a collective may wait for the other ranks before the job fails", cxxopts::value<double>()->default_value("300"))(
      "device", "auto, cpu, cuda", cxxopts::value<std::string>()->default_value("auto"))("dry-run", "print the resolved config and exit")(
      "h,help", "help");
  auto a = o.parse(argc, argv);
  if (a.count("help")) {
    std::cout << o.help() << "\n";
    return 0;
  }
  diffusion::TrainConfig c = diffusion::train_preset(a["preset"].as<std::string>());
  auto s = [&](const char* k, std::string& f) { if (a.count(k)) f = a[k].as<std::string>(); };
  auto i = [&](const char* k, int64_t& f) { if (a.count(k)) f = a[k].as<int64_t>(); };
  auto d = [&](const char* k, double& f) { if (a.count(k)) f = a[k].as<double>(); };
  s("model", c.model);
  s("objective", c.objective);
  s("data", c.data);
  s("vae", c.vae);
  i("image-size", c.image_size);
  i("num-classes", c.num_classes);
  i("batch", c.global_batch);
  i("steps", c.steps);
  d("lr", c.lr);
  d("weight-decay", c.weight_decay);
  d("grad-clip", c.grad_clip);
  d("ema-decay", c.ema_decay);
  if (a.count("ema-warmup")) {
    const std::string w = a["ema-warmup"].as<std::string>();
    if (w != "true" && w != "false") throw std::runtime_error("--ema-warmup must be true or false, got '" + w + "'");
    c.ema_warmup = w == "true";
  }
  s("precision", c.precision);
  if (a.count("seed")) c.seed = a["seed"].as<uint64_t>();
  i("log-every", c.log_every);
  i("ckpt-every", c.ckpt_every);
  i("keep-last", c.keep_last);
  i("sample-every", c.sample_every);
  i("workers", c.workers);
  d("max-minutes", c.max_minutes);
  s("attention", c.attention);
  d("alpha", c.alpha);
  i("lepe", c.lepe);
  s("schedule", c.schedule);
  s("path", c.path);
  s("prediction", c.prediction);
  s("loss-weight", c.loss_weight);
  i("max-nonfinite", c.max_nonfinite);
  diffusion::validate(c);
  std::string out = a.count("resume") ? a["resume"].as<std::string>() : a.count("out") ? a["out"].as<std::string>() : "";
  if (out.empty()) throw std::runtime_error("nala train: --out RUN_DIR is required");
  if (a.count("dry-run")) {
    std::cout << diffusion::train_config_to_json(c) << "\n";
    return 0;
  }
  const diffusion::DistEnv env = diffusion::dist_env_from_environment();
  c10::Device dev = pick_device(a["device"].as<std::string>());
  if (dev.is_cuda() && env.world_size > 1) dev = c10::Device(c10::kCUDA, c10::DeviceIndex(env.local_rank % torch::cuda::device_count()));
  std::unique_ptr<diffusion::ProcessGroup> pg;
  const auto timeout = std::chrono::milliseconds(int64_t(a["dist-timeout"].as<double>() * 1000));
  if (dev.is_cuda()) set_current_cuda_device(dev);  // NCCL and the allocator work on this rank's GPU
  if (env.world_size > 1) pg = std::make_unique<diffusion::ProcessGroup>(env, diffusion::default_backend(dev), timeout, dev);
  diffusion::install_stop_handlers();
  auto r = diffusion::train(c, out, dev, pg.get());
  if (env.rank == 0) {
    std::cout << "trained steps " << r.start_step << " -> " << r.final_step << " (" << r.images_per_second << " img/s)"
              << (r.stopped_early ? ", stopped early: " + r.stop_reason : "") << "\n"
              << "run directory: " << out << "\n  checkpoint: " << diffusion::latest_checkpoint(out) << "\n  metrics: " << out
              << "/metrics.jsonl\n  loss curve: " << out << "/loss.png\n  samples: " << out << "/samples/\n";
  }
  return r.stopped_early && r.stop_reason.rfind("signal", 0) == 0 ? 130 : 0;
}

}  // namespace nala::cli
