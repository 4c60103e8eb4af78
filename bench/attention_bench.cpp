// `nala bench attention`: NaLa attention (the fused path of this build: CUDA kernels on a GPU,
// the fast CPU path on the CPU) next to the ATen reference and softmax attention
// (at::scaled_dot_product_attention: row sdpa with NALA_SDPA_BACKEND's choice, ATen's by default, and
// on a GPU in 16 bits sdpa-cudnn, sdpa-flash, sdpa-efficient, each of ATen's fused kernels alone, and in
// bf16 sdpa-nala, nala's own kernels: forward, and backward up to 256 tokens, ATen's beyond, as training runs it),
// forward and forward+backward, same shapes, dtype and run. Prints a table; asserts nothing.
#include <cstdio>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "attention/nala_attention.h"
#include "attention/nala_reference.h"
#include "attention/sdpa_backend.h"
#ifdef NALA_WITH_CUDA
#include "attention/cuda/nala_cuda.h"
#endif
#include "bench/benchmarks.h"
#include "bench/timing.h"
#include "cli/parse.h"

namespace nala::bench {
namespace {

struct Shape {
  int64_t B, N;
};

std::vector<Shape> parse_shapes(const std::string& s) {
  std::vector<Shape> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto x = item.find('x');
    if (x == std::string::npos) throw std::runtime_error("--shapes entries are BxN, got '" + item + "'");
    out.push_back({std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1))});
  }
  return out;
}

at::ScalarType parse_dtype(const std::string& s) {
  if (s == "bf16") return at::kBFloat16;
  if (s == "fp16") return at::kHalf;
  if (s == "fp32") return at::kFloat;
  throw std::runtime_error("unknown --dtype '" + s + "' (known: bf16, fp16, fp32)");
}

}  // namespace

int bench_attention(int argc, char** argv) {
  cxxopts::Options o("nala bench attention", "NaLa attention kernels against the reference and softmax attention");
  o.add_options()("device", "cpu or cuda", cxxopts::value<std::string>()->default_value(torch::cuda::is_available() ? "cuda" : "cpu"))(
      "dtype", "bf16, fp16 or fp32", cxxopts::value<std::string>()->default_value("bf16"))(
      "heads", "H", cxxopts::value<int64_t>()->default_value("6"))("head-dim", "d (comma list)", cxxopts::value<std::string>()->default_value("64,72"))(
      "shapes", "BxN list", cxxopts::value<std::string>())("feature-map", "nala, nala-relu, elu, relu, focused",
                                                            cxxopts::value<std::string>()->default_value("nala"))(
      "reps", "timed repeats", cxxopts::value<int>()->default_value("20"))("no-reference", "skip the ATen reference path")(
      "h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  int failed_rows = 0;  // a failed row is printed as such and makes the command exit 1
  if (a.count("help")) {
    std::cout << o.help() << "\n";
    return 0;
  }
  const c10::Device dev(a["device"].as<std::string>());
  const auto dt = parse_dtype(a["dtype"].as<std::string>());
  const int64_t H = a["heads"].as<int64_t>();
  const int reps = a["reps"].as<int>();
  std::vector<Shape> shapes = a.count("shapes") ? parse_shapes(a["shapes"].as<std::string>())
                              : dev.is_cuda() ? std::vector<Shape>{{256, 256}, {64, 1024}, {16, 4096}, {2, 16384}, {1, 65536}}
                                              : std::vector<Shape>{{8, 256}, {2, 1024}, {1, 4096}};
  std::vector<int64_t> dims;
  {
    std::stringstream ss(a["head-dim"].as<std::string>());
    std::string t;
    while (std::getline(ss, t, ',')) dims.push_back(std::stoll(t));
  }
  attention::NalaOptions opt;
  opt.feature_map = attention::parse_feature_map(a["feature-map"].as<std::string>());
  const bool with_ref = !a.count("no-reference");
  torch::NoGradGuard no_grad_outer;
  std::printf("# nala bench attention  device: %s  dtype: %s  H=%ld  feature map: %s\n", device_name(dev).c_str(),
              a["dtype"].as<std::string>().c_str(), H, attention::feature_map_name(opt.feature_map).c_str());
  std::printf("| path | B | N | d | fwd ms | fwd+bwd ms | fwd GB/s | fwd vs SDPA | fwd+bwd vs SDPA | peak MiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t d : dims)
    for (Shape s : shapes) {
      auto make = [&] { return torch::randn({s.B, H, s.N, d}, torch::TensorOptions().device(dev).dtype(dt)); };
      at::Tensor q = make(), k = make(), v = make(), go = make();
      struct Path {
        const char* name;
        std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)> fn;
        int kernel = -1;  // a forced attention::NalaCudaKernel, or -1: the automatic choice
      };
      std::vector<Path> paths = {{"sdpa", [](auto& a1, auto& b1, auto& c1) { return attention::softmax_attention(a1, b1, c1); }},
                                 {dev.is_cuda() ? "nala-cuda" : "nala-cpu", [&](auto& a1, auto& b1, auto& c1) { return attention::nala_attention(a1, b1, c1, opt); }}};
      // ATen's three fused softmax kernels one at a time (attention/sdpa_backend.h, NALA_SDPA_BACKEND)
      if (dev.is_cuda() && dt != at::kFloat)
        for (auto b : {attention::SdpaBackend::CuDNN, attention::SdpaBackend::Flash, attention::SdpaBackend::Efficient, attention::SdpaBackend::Nala}) {
          if (b == attention::SdpaBackend::Nala && dt != at::kBFloat16) continue;
          static const std::string names[] = {"", "sdpa-cudnn", "sdpa-flash", "sdpa-efficient", "sdpa-nala"};
          paths.push_back({names[int(b)].c_str(), [b](auto& a1, auto& b1, auto& c1) { return attention::sdpa_with_backend(a1, b1, c1, b); }});
        }
#ifdef NALA_WITH_CUDA
      // the two kernel families forced (forward and backward), next to the automatic choice above
      if (dev.is_cuda()) {
        auto nala_fn = [&](auto& a1, auto& b1, auto& c1) { return attention::nala_attention(a1, b1, c1, opt); };
        paths.push_back({"nala-chunked", nala_fn, int(attention::NalaCudaKernel::Chunked)});
        if (dt == at::kBFloat16) paths.push_back({"nala-onepass", nala_fn, int(attention::NalaCudaKernel::OnePass)});
      }
#endif
      if (with_ref) paths.push_back({"nala-reference", [&](auto& a1, auto& b1, auto& c1) { return attention::nala_attention_reference(a1, b1, c1, opt); }});
      double sdpa_f = 0, sdpa_fb = 0;
      for (auto& p : paths) {
        reset_peak_memory(dev);
        Timing tf, tfb;
#ifdef NALA_WITH_CUDA
        attention::set_nala_cuda_kernel(p.kernel < 0 ? attention::NalaCudaKernel::Auto : attention::NalaCudaKernel(p.kernel));
#endif
        try {
          tf = time_it([&] { p.fn(q, k, v); }, dev, 2, reps);
          at::Tensor qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(), vg = v.detach().requires_grad_();
          tfb = time_it([&] {
            torch::AutoGradMode on(true);
            at::Tensor out = p.fn(qg, kg, vg);
            out.backward(go);
          }, dev, 2, reps);
        } catch (const std::exception& e) {
#ifdef NALA_WITH_CUDA
          attention::set_nala_cuda_kernel(attention::NalaCudaKernel::Auto);
#endif
          ++failed_rows;
          std::printf("| %s | %ld | %ld | %ld | failed: %.60s |\n", p.name, s.B, s.N, d, e.what());
          std::fprintf(stderr, "nala bench attention: %s B %ld N %ld d %ld failed: %s\n", p.name, s.B, s.N, d, e.what());  // the whole message
          continue;
        }
#ifdef NALA_WITH_CUDA
        attention::set_nala_cuda_kernel(attention::NalaCudaKernel::Auto);
#endif
        if (std::string(p.name) == "sdpa") {
          sdpa_f = tf.median_ms;
          sdpa_fb = tfb.median_ms;
        }
        const double bytes = 4.0 * s.B * H * s.N * d * q.element_size();  // q, k, v read + o written
        std::printf("| %s | %ld | %ld | %ld | %.3f | %.3f | %.0f | %.2fx | %.2fx | %.0f |\n", p.name, s.B, s.N, d, tf.median_ms, tfb.median_ms,
                    bytes / (tf.median_ms * 1e-3) / 1e9, tf.median_ms / sdpa_f, tfb.median_ms / sdpa_fb, peak_memory_mib(dev));
        std::fflush(stdout);
      }
    }
  if (failed_rows) std::fprintf(stderr, "nala bench: %d row(s) failed\n", failed_rows);
  return failed_rows ? 1 : 0;
}

}  // namespace nala::bench
