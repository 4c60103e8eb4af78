// `nala bench tail`: the gated NaLa block's tail (attention/gated_tail.h: u = o + LePE(v),
// y = LayerNorm(u)·SiLU(g)) as the fused operation and as the plain composition (conv2d, add,
// layer_norm, silu, multiply: what runs with NALA_FUSED_BLOCKS=0), forward and forward+backward,
// same shapes and run; o, v, g laid out as in the model (v, g views of one qkvg projection). On
// CUDA with bf16 both run under autocast, as the trainer does. The last column is the fused
// output's relative L2 difference from the composition's. Prints a table; asserts nothing.
#include <cstdio>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "attention/gated_tail.h"
#include "bench/benchmarks.h"
#include "bench/timing.h"
#include "cli/parse.h"
#include "train/autocast_scope.h"

namespace nala::bench {
namespace {

struct GridShape {
  int64_t B, grid;  // batch, square token grid side
};

std::vector<GridShape> parse_grids(const std::string& s) {
  std::vector<GridShape> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto x = item.find('x');
    if (x == std::string::npos) throw std::runtime_error("--shapes entries are BxG (batch x grid side), got '" + item + "'");
    out.push_back({std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1))});
  }
  return out;
}


}  // namespace

int bench_tail(int argc, char** argv) {
  cxxopts::Options o("nala bench tail", "the gated NaLa block's tail: fused operation vs the plain composition");
  o.add_options()("device", "cpu or cuda", cxxopts::value<std::string>()->default_value(torch::cuda::is_available() ? "cuda" : "cpu"))(
      "dtype", "bf16 or fp32", cxxopts::value<std::string>()->default_value("bf16"))("heads", "H", cxxopts::value<int64_t>()->default_value("6"))(
      "head-dim", "d", cxxopts::value<int64_t>()->default_value("64"))("lepe", "LePE kernel size (0: none)", cxxopts::value<int64_t>()->default_value("5"))(
      "shapes", "BxG list: batch x token-grid side", cxxopts::value<std::string>())("reps", "timed repeats", cxxopts::value<int>()->default_value("20"))(
      "h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  if (a.count("help")) {
    std::cout << o.help() << "\n";
    return 0;
  }
  const c10::Device dev(a["device"].as<std::string>());
  const std::string dts = a["dtype"].as<std::string>();
  if (dts != "bf16" && dts != "fp32") throw std::runtime_error("unknown --dtype '" + dts + "' (known: bf16, fp32)");
  const auto dt = dts == "bf16" ? at::kBFloat16 : at::kFloat;
  const bool autocast = dev.is_cuda() && dt == at::kBFloat16;
  const int64_t H = a["heads"].as<int64_t>(), d = a["head-dim"].as<int64_t>(), D = H * d, ks = a["lepe"].as<int64_t>();
  if (ks < 0 || (ks > 0 && ks % 2 == 0)) throw std::runtime_error("--lepe must be 0 or odd, got " + std::to_string(ks));
  const int reps = a["reps"].as<int>();
  const std::vector<GridShape> shapes = a.count("shapes") ? parse_grids(a["shapes"].as<std::string>())
                                    : dev.is_cuda() ? std::vector<GridShape>{{256, 16}, {64, 32}, {16, 64}, {4, 128}}
                                                    : std::vector<GridShape>{{8, 16}, {2, 32}};
  // parameters in float32 under autocast (the trainer's master weights), else in the activations' dtype
  const auto act = torch::TensorOptions().device(dev).dtype(dt), par = torch::TensorOptions().device(dev).dtype(autocast ? at::kFloat : dt);
  std::printf("# nala bench tail  device: %s  dtype: %s%s  H=%ld d=%ld LePE %ld\n", device_name(dev).c_str(), dts.c_str(),
              autocast ? " (autocast)" : "", H, d, ks);
  std::printf("| path | B | tokens | fwd ms | fwd+bwd ms | fwd GB/s | fwd ÷ composition | fwd+bwd ÷ composition | peak MiB | rel. diff |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  int failed_rows = 0;
  for (const GridShape& s : shapes) {
    const int64_t N = s.grid * s.grid;
    torch::manual_seed(0);
    at::Tensor qkvg = torch::randn({s.B, N, 4, H, d}, act);               // (B, N, 4, H, d)
    at::Tensor o_in = torch::randn({s.B, H, N, d}, act);                  // (B, H, N, d)
    at::Tensor lw = ks > 0 ? torch::randn({D, 1, ks, ks}, par) * 0.2 : at::Tensor(), lb = ks > 0 ? torch::randn({D}, par) * 0.1 : at::Tensor();
    at::Tensor nw = 1 + 0.1 * torch::randn({D}, par), nb = 0.1 * torch::randn({D}, par);
    at::Tensor gy = torch::randn({s.B, N, D}, act);                       // (B, N, D) upstream gradient
    struct Path {
      const char* name;
      bool fused;
    };
    double comp_f = 0, comp_fb = 0;
    at::Tensor y_comp;
    for (const Path& p : {Path{"composition", false}, Path{"fused", true}}) {
      auto call = [&](const at::Tensor& qkvg_, const at::Tensor& o_, const at::Tensor& lw_, const at::Tensor& lb_, const at::Tensor& nw_,
                      const at::Tensor& nb_) {
        train::AutocastScope ac(autocast);
        at::Tensor v = qkvg_.select(2, 2).reshape({s.B, N, D}), g = qkvg_.select(2, 3).reshape({s.B, N, D});  // (B, N, D) views
        auto f = p.fused ? attention::gated_tail_fused : attention::gated_tail_reference;
        return f(o_, v, g, lw_, lb_, nw_, nb_, s.grid, s.grid, 1e-5);  // (B, N, D)
      };
      reset_peak_memory(dev);
      Timing tf, tfb;
      at::Tensor y;
      try {
        {
          torch::NoGradGuard ng;
          y = call(qkvg, o_in, lw, lb, nw, nb).to(at::kFloat);
          tf = time_it([&] { call(qkvg, o_in, lw, lb, nw, nb); }, dev, 2, reps);
        }
        auto leaf = [](const at::Tensor& t) { return t.defined() ? t.detach().requires_grad_() : t; };
        at::Tensor q2 = leaf(qkvg), o2 = leaf(o_in), lw2 = leaf(lw), lb2 = leaf(lb), nw2 = leaf(nw), nb2 = leaf(nb);
        tfb = time_it([&] { call(q2, o2, lw2, lb2, nw2, nb2).backward(gy); }, dev, 2, reps);
      } catch (const std::exception& e) {
        ++failed_rows;
        std::printf("| %s | %ld | %ld | failed: %.60s |\n", p.name, s.B, N, e.what());
        std::fprintf(stderr, "nala bench tail: %s B %ld tokens %ld failed: %s\n", p.name, s.B, N, e.what());  // the whole message
        continue;
      }
      if (!p.fused) {
        comp_f = tf.median_ms;
        comp_fb = tfb.median_ms;
        y_comp = y;
      }
      const double diff = y_comp.defined() ? ((y - y_comp).norm() / y_comp.norm().clamp_min(1e-30)).item<double>() : 0.0;
      const double bytes = double(s.B) * N * D * qkvg.element_size() * 4;  // o, v, g read; y written (each once)
      std::printf("| %s | %ld | %ld | %.3f | %.3f | %.0f | %.2fx | %.2fx | %.0f | %.2e |\n", p.name, s.B, N, tf.median_ms, tfb.median_ms,
                  bytes / (tf.median_ms * 1e-3) / 1e9, tf.median_ms / comp_f, tfb.median_ms / comp_fb, peak_memory_mib(dev), diff);
      std::fflush(stdout);
    }
  }
  if (failed_rows) std::fprintf(stderr, "nala bench: %d row(s) failed\n", failed_rows);
  return failed_rows ? 1 : 0;
}

}  // namespace nala::bench
