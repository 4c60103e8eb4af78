// `nala bench sample`: the DDPM sampling step with classifier-free guidance (forward on the
// doubled batch, guidance, p_sample update) timed over a number of steps, extrapolated to img/s of
// a full 250-step run. The PyTorch counterpart is scripts/bench_pytorch_sample.py. With
// --cuda-graphs on the network call is replayed as a CUDA graph (samplers/graphed_net.h), captured
// during the warm-up.
#include <cstdio>
#include <stdexcept>
#include <vector>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "bench/benchmarks.h"
#include "bench/timing.h"
#include "cli/parse.h"
#include "ops/linear_fp8.h"
#include "models/dit.h"
#include "diffusion/gaussian_diffusion.h"
#include "samplers/graphed_net.h"
#include "samplers/guidance.h"

namespace nala::bench {

int bench_sample(int argc, char** argv) {
  cxxopts::Options o("nala bench sample", "DDPM+CFG sampling throughput");
  o.add_options()("models", "comma list", cxxopts::value<std::string>()->default_value("DiT-XL/2,NaLaDiT-XL/2"))(
      "batch", "images", cxxopts::value<int64_t>()->default_value("64"))("image-size", "pixels", cxxopts::value<int64_t>()->default_value("256"))(
      "sampling-steps", "steps of the full run the img/s refers to", cxxopts::value<int64_t>()->default_value("250"))(
      "measure", "steps timed", cxxopts::value<int>()->default_value("10"))("cfg-scale", "guidance", cxxopts::value<double>()->default_value("1.5"))(
      "dtypes", "comma list of bf16, fp32, fp8 (bf16 with the linear layers' GEMMs in FP8, ops/linear_fp8.h)",
      cxxopts::value<std::string>()->default_value("bf16,fp32"))(
      "cuda-graphs", "off, on or both: the network call as a CUDA graph", cxxopts::value<std::string>()->default_value("off"))(
      "device", "cuda or cpu", cxxopts::value<std::string>()->default_value(torch::cuda::is_available() ? "cuda" : "cpu"))("h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  int failed_rows = 0;  // a failed row is printed as such and makes the command exit 1
  if (a.count("help")) {
    std::cout << o.help() << "\n";
    return 0;
  }
  const c10::Device dev(a["device"].as<std::string>());
  const std::string graphs_flag = a["cuda-graphs"].as<std::string>();
  std::vector<bool> graph_modes;
  if (graphs_flag == "off" || graphs_flag == "both") graph_modes.push_back(false);
  if (graphs_flag == "on" || graphs_flag == "both") graph_modes.push_back(true);
  if (graph_modes.empty()) throw std::runtime_error("--cuda-graphs '" + graphs_flag + "' (known: off, on, both)");
  const int64_t B = a["batch"].as<int64_t>(), L = a["image-size"].as<int64_t>() / 8, S = a["sampling-steps"].as<int64_t>();
  if (dev.is_cuda()) at::globalContext().setAllowTF32CuBLAS(true);  // fp32 rows are fp32+TF32, as the official sampler
  std::printf("# nala bench sample  device: %s  batch %ld  %ldx%ld latents  %ld DDPM steps  cfg %.2f\n", device_name(dev).c_str(), B, L, L, S,
              a["cfg-scale"].as<double>());
  std::printf("| model | dtype | ms/step | img/s (%ld steps) | peak MiB | forward rel. error vs fp32 |\n|---|---|---|---|---|---|\n", S);
  std::stringstream ss(a["models"].as<std::string>());
  std::string name;
  torch::NoGradGuard ng;
  while (std::getline(ss, name, ',')) {
    std::stringstream ds(a["dtypes"].as<std::string>());
    std::string dts;
    while (std::getline(ds, dts, ',')) {
      for (const bool graphs : graph_modes) {
        const std::string row = graphs ? name + " (CUDA graph)" : name;
        try {
          if (dts != "bf16" && dts != "fp32" && dts != "fp8") throw std::runtime_error("unknown dtype '" + dts + "' (known: bf16, fp32, fp8)");
          const auto dt = dts == "fp32" ? at::kFloat : at::kBFloat16;
          ops::clear_fp8_linears();  // the previous row's model and its FP8 weights go away
          auto cfg = models::model_config(name);
          cfg.input_size = L;
          torch::manual_seed(0);
          auto model = std::make_shared<models::DiT>(cfg);
          for (auto& p : model->parameters()) p.add_(at::randn_like(p) * 0.02);  // non-trivial weights
          model->to(dev, dt);
          model->eval();
          if (dts == "fp8") model->use_fp8_linears();  // while the weights are bf16 (not in the fp32 reference pass below)
          diffusion::GaussianDiffusion d("linear", 1000, std::to_string(S));
          at::Tensor y = at::randint(0, 1000, {B}, at::TensorOptions().dtype(at::kLong)).to(dev);
          samplers::LabelledNet net = [&](const at::Tensor& x, const at::Tensor& t, const at::Tensor& yy) { return model->forward(x.to(dt), t, yy).to(at::kFloat); };
          if (graphs) net = samplers::graphed(net);
          auto f = samplers::classifier_free_guidance(net, y, 1000, a["cfg-scale"].as<double>(), 3, 4);
          at::Tensor x = at::randn({B, 4, L, L}, at::TensorOptions().device(dev));
          int64_t i = S - 1;
          auto step = [&] {
            at::Tensor t = at::full({B}, i, x.options().dtype(at::kLong));
            auto p = d.p_mean_variance(f(x, d.model_timesteps(t)), x, t, false);
            x = p.mean + at::exp(0.5 * p.log_variance) * at::randn_like(x);
            i = i > 1 ? i - 1 : S - 1;
          };
          // accuracy of this dtype's forward against the same weights in fp32 (guided batch, t = 500)
          double rel = 0;
          if (dt != at::kFloat) {
            at::Tensor xin = at::randn({2 * B, 4, L, L}, at::TensorOptions().device(dev));
            at::Tensor tin = at::full({2 * B}, 500, xin.options().dtype(at::kLong)), yin = at::cat({y, at::full_like(y, 1000)});
            at::Tensor low = model->forward(xin.to(dt), tin, yin).to(at::kFloat);
            model->to(dev, at::kFloat);
            at::Tensor ref = model->forward(xin, tin, yin);
            model->to(dev, dt);
            rel = ((low - ref).norm() / ref.norm()).item<double>();
          }
          reset_peak_memory(dev);
          Timing t = time_it(step, dev, graphs ? 4 : 2, a["measure"].as<int>());  // graphs: 2 eager calls, the capture, a replay
          std::printf("| %s | %s | %.1f | %.2f | %.0f | %s |\n", row.c_str(), dts.c_str(), t.median_ms, B / (t.median_ms * S / 1e3), peak_memory_mib(dev),
                      dt == at::kFloat ? "-" : c10::str(rel).c_str());
        } catch (const std::exception& e) {
          ++failed_rows;
          std::printf("| %s | %s | failed: %.80s |\n", row.c_str(), dts.c_str(), e.what());
          std::fprintf(stderr, "nala bench sample: %s %s failed: %s\n", row.c_str(), dts.c_str(), e.what());  // the whole message
        }
        std::fflush(stdout);
      }
    }
  }
  ops::clear_fp8_linears();
  if (failed_rows) std::fprintf(stderr, "nala bench: %d row(s) failed\n", failed_rows);
  return failed_rows ? 1 : 0;
}

}  // namespace nala::bench
