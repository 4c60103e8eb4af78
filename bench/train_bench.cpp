// `nala bench train`: img/s of one training step (DDPM hybrid loss, AdamW, EMA; bf16 autocast on
// CUDA) at a given batch on random latents, per model. The PyTorch counterpart for the comparison
// is scripts/bench_pytorch_train.py (same shapes, bf16 autocast, AdamW), run beside it. With
// --cuda-graphs the step is captured once after the warm-up (models/cuda_graph.h) and the timed steps
// replay it; both modes are printed, one row each, when --cuda-graphs both.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "bench/benchmarks.h"
#include "bench/timing.h"
#include "cli/parse.h"
#include "train/autocast_scope.h"
#include "train/adamw.h"
#include "models/cuda_graph.h"
#include "models/dit.h"
#include "diffusion/gaussian_diffusion.h"
#include "ops/fused_ops.h"
#include "ops/weight_casts.h"

namespace nala::bench {

int bench_train(int argc, char** argv) {
  cxxopts::Options o("nala bench train", "training-step throughput of DiT / NaLaDiT models");
  o.add_options()("models", "comma list", cxxopts::value<std::string>()->default_value("DiT-S/2,NaLaDiT-S/2,DiT-B/2,NaLaDiT-B/2,DiT-XL/2,NaLaDiT-XL/2"))(
      "batch", "batch size", cxxopts::value<int64_t>()->default_value("256"))("image-size", "pixels (latent = /8)", cxxopts::value<int64_t>()->default_value("256"))(
      "steps", "timed steps", cxxopts::value<int>()->default_value("10"))("warmup", "warm-up steps", cxxopts::value<int>()->default_value("3"))(
      "precision", "bf16 or fp32", cxxopts::value<std::string>()->default_value("bf16"))(
      "cuda-graphs", "off, on or both (a row each): replay the step as a CUDA graph", cxxopts::value<std::string>()->default_value("off"))(
      "device", "cuda or cpu", cxxopts::value<std::string>()->default_value(torch::cuda::is_available() ? "cuda" : "cpu"))("h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  int failed_rows = 0;  // a failed row is printed as such and makes the command exit 1
  if (a.count("help")) {
    std::cout << o.help() << "\n";
    return 0;
  }
  const c10::Device dev(a["device"].as<std::string>());
  const int64_t B = a["batch"].as<int64_t>(), L = a["image-size"].as<int64_t>() / 8;
  const bool bf16 = a["precision"].as<std::string>() == "bf16" && dev.is_cuda();
  const std::string graphs_arg = a["cuda-graphs"].as<std::string>();
  std::vector<bool> graph_modes;
  if (graphs_arg == "off") graph_modes = {false};
  else if (graphs_arg == "on") graph_modes = {true};
  else if (graphs_arg == "both") graph_modes = {false, true};
  else throw std::invalid_argument("nala bench train: --cuda-graphs '" + graphs_arg + "' is not off, on or both");
  if (graphs_arg != "off" && !dev.is_cuda()) throw std::invalid_argument("nala bench train: --cuda-graphs " + graphs_arg + " needs --device cuda");
  if (dev.is_cuda()) at::globalContext().setAllowTF32CuBLAS(true);  // as DiT's train.py
  std::printf("# nala bench train  device: %s  batch %ld  latents 4x%ldx%ld  %s\n", device_name(dev).c_str(), B, L, L, bf16 ? "bf16 autocast" : "fp32");
  std::printf("| model | params (M) | ms/step | img/s | peak MiB |\n|---|---|---|---|---|\n");
  std::stringstream ss(a["models"].as<std::string>());
  std::string name;
  while (std::getline(ss, name, ',')) {
    for (const bool graphed : graph_modes) try {
      auto cfg = models::model_config(name);
      cfg.input_size = L;
      torch::manual_seed(0);
      auto model = std::make_shared<models::DiT>(cfg);
      model->to(dev);
      auto ema = std::make_shared<models::DiT>(cfg);
      ema->to(dev);
      const train::EmaPairs pairs = train::ema_pairs(model->parameters(), ema->parameters());  // trainable and fixed, with their EMA tensors
      const std::vector<at::Tensor>& params = pairs.trainable;
      train::AdamW opt(params, {});
      // as train/train_step.cpp: the weights cast in one pass, their gradients widened in one (NALA_WEIGHT_CASTS)
      std::unique_ptr<ops::WeightCasts> casts;
      if (bf16 && ops::weight_casts_enabled())
        casts = std::make_unique<ops::WeightCasts>(params, at::kBFloat16,
                                                   ops::stacked_casts() ? std::vector<std::vector<at::Tensor>>{model->stacked_modulation_weights()}
                                                                        : std::vector<std::vector<at::Tensor>>{});
      diffusion::GaussianDiffusion diff;
      at::Tensor x = at::randn({B, 4, L, L}, at::TensorOptions().device(dev));
      at::Tensor y = at::randint(0, 1000, {B}, at::TensorOptions().device(dev).dtype(at::kLong));
      model->train();
      auto step = [&] {
        at::Tensor loss;
        if (casts) casts->refresh();
        {
          train::AutocastScope ac(bf16);
          ops::WeightCasts::Scope scope(casts.get());
          at::Tensor t = at::randint(0, 1000, {B}, x.options().dtype(at::kLong));
          auto fn = [&](const at::Tensor& xt, const at::Tensor& tt) { return model->forward(xt, tt, y); };
          loss = diff.training_losses(fn, x, t, at::randn_like(x)).loss.mean();
        }
        loss.backward();
        if (ops::fused_optimizer()) {  // as train/train_step.cpp: AdamW, the EMA and the casts in one pass
          std::vector<at::Tensor> grads;
          if (casts) grads = casts->gradients();
          else
            for (const auto& p : params) grads.push_back(p.grad());
          opt.step_with_ema(grads, {}, {}, pairs.trainable_ema, {}, 1.0 - 0.9999, casts ? casts->casts() : std::vector<at::Tensor>{});
          if (casts) casts->mark_current();
          opt.zero_grad();
          train::update_ema(pairs.fixed_ema, pairs.fixed, 0.9999);
          return;
        }
        if (casts) casts->take_gradients();
        opt.step();
        opt.zero_grad();
        train::update_ema(ema->parameters(), model->parameters(), 0.9999);
      };
      reset_peak_memory(dev);
      Timing t;
      if (graphed) {
        for (int i = 0; i < std::max(2, a["warmup"].as<int>()); ++i) step();  // lazy initialisation before the capture
        models::CudaGraph graph;
        graph.capture(step);
        t = time_it([&] { graph.replay(); }, dev, 1, a["steps"].as<int>());
      } else {
        t = time_it(step, dev, a["warmup"].as<int>(), a["steps"].as<int>());
      }
      const std::string row = graphed ? name + " (CUDA graph)" : name;
      std::printf("| %s | %.2f | %.1f | %.0f | %.0f |\n", row.c_str(), model->parameter_count() / 1e6, t.median_ms, B / (t.median_ms / 1e3),
                  peak_memory_mib(dev));
    } catch (const std::exception& e) {
      ++failed_rows;
      std::printf("| %s%s | failed: %.80s |\n", name.c_str(), graphed ? " (CUDA graph)" : "", e.what());
      std::fprintf(stderr, "nala bench train: %s%s failed: %s\n", name.c_str(), graphed ? " (CUDA graph)" : "", e.what());  // the whole message
    }
    std::fflush(stdout);
  }
  if (failed_rows) std::fprintf(stderr, "nala bench: %d row(s) failed\n", failed_rows);
  return failed_rows ? 1 : 0;
}

}  // namespace nala::bench
