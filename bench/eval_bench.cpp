// `nala bench eval`: Inception feature extraction (img/s, the TF1 resize and normalisation
// included) and VAE encode / decode throughput, with random weights (throughput does not depend
// on them). The pytorch-fid counterpart is scripts/bench_pytorch_inception.py.
#include <cstdio>
#include <iostream>
#include <vector>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "bench/benchmarks.h"
#include "bench/timing.h"
#include "cli/parse.h"
#include "models/vae.h"
#include "metrics/inception.h"

namespace nala::bench {

int bench_eval(int argc, char** argv) {
  cxxopts::Options o("nala bench eval", "Inception and VAE throughput");
  o.add_options()("batch", "Inception batch", cxxopts::value<int64_t>()->default_value("250"))(
      "vae-batch", "VAE batch", cxxopts::value<int64_t>()->default_value("32"))("image-size", "VAE image size", cxxopts::value<int64_t>()->default_value("256"))(
      "reps", "timed repeats", cxxopts::value<int>()->default_value("10"))(
      "device", "cuda or cpu", cxxopts::value<std::string>()->default_value(torch::cuda::is_available() ? "cuda" : "cpu"))("h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  if (a.count("help")) {
    std::cout << o.help() << "\n";
    return 0;
  }
  const c10::Device dev(a["device"].as<std::string>());
  const int reps = a["reps"].as<int>();
  if (dev.is_cuda()) {
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
  }
  std::printf("# nala bench eval  device: %s\n| what | batch | ms/batch | img/s | peak MiB |\n|---|---|---|---|---|\n", device_name(dev).c_str());
  torch::NoGradGuard ng;
  {
    auto net = std::make_shared<metrics::FidInception>();
    net->to(dev);
    const int64_t B = a["batch"].as<int64_t>();
    at::Tensor imgs = at::randint(0, 256, {B, 256, 256, 3}, at::TensorOptions().dtype(at::kByte)).to(dev);
    // the forward's settings (metrics/inception.h InceptionSpeed), the default last
    struct Variant {
      const char* name;
      metrics::InceptionSpeed s;
    };
    std::vector<Variant> variants = {{"BN layers, NCHW", {false, false, false, false}},
                                     {"BN folded, NCHW", {true, false, false, false}},
                                     {"BN folded, NHWC", {true, true, false, false}},
                                     {"BN folded, NHWC, cuDNN benchmark", {true, true, false, true}},
                                     {"BN folded, NHWC, cuDNN benchmark, fused conv+ReLU", {true, true, true, true}}};
    if (!dev.is_cuda()) variants = {{"BN layers", {false, false, false, false}}, {"BN folded", {true, false, false, false}}};
    variants.push_back({"default", metrics::InceptionSpeed{}});
    for (auto& v : variants) {
      net->speed = v.s;
      reset_peak_memory(dev);
      Timing t = time_it([&] { net->forward_uint8(imgs); }, dev, 2, reps);
      std::printf("| Inception features (256 px uint8 -> 299, fp32+TF32), %s | %ld | %.1f | %.0f | %.0f |\n", v.name, B, t.median_ms,
                  B / (t.median_ms / 1e3), peak_memory_mib(dev));
      std::fflush(stdout);
    }
  }
  for (auto dt : {at::kBFloat16, at::kFloat}) {
    auto vae = std::make_shared<models::AutoencoderKL>();
    vae->to(dev, dt);
    vae->eval();
    const int64_t B = a["vae-batch"].as<int64_t>(), S = a["image-size"].as<int64_t>();
    at::Tensor x = at::rand({B, 3, S, S}, at::TensorOptions().device(dev)) * 2 - 1;
    at::Tensor z = at::randn({B, 4, S / 8, S / 8}, at::TensorOptions().device(dev));
    const char* n = dt == at::kBFloat16 ? "bf16" : "fp32";
    reset_peak_memory(dev);
    Timing te = time_it([&] { vae->encode(x, false); }, dev, 1, reps);
    std::printf("| SD-VAE encode %ld px %s | %ld | %.1f | %.0f | %.0f |\n", S, n, B, te.median_ms, B / (te.median_ms / 1e3), peak_memory_mib(dev));
    reset_peak_memory(dev);
    Timing td = time_it([&] { vae->decode(z); }, dev, 1, reps);
    std::printf("| SD-VAE decode %ld px %s | %ld | %.1f | %.0f | %.0f |\n", S, n, B, td.median_ms, B / (td.median_ms / 1e3), peak_memory_mib(dev));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace nala::bench
