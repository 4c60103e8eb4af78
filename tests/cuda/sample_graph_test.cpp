// Sampling with the network call replayed as a CUDA graph (--cuda-graphs, samplers/graphed_net.h)
// against the same sampling with eager calls: same model, noise, labels and generator seed; DDPM
// with guidance, DDIM, a flow ODE (Heun: two calls a step, outputs alive together) and a flow SDE
// (random draws between the calls); batches of two sizes (each generate() call its own wrapper and
// capture). The kernels are the eager ones, so the samples must be equal bit for bit.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "models/dit.h"
#include "models/model_config.h"
#include "samplers/generate.h"
#include "samplers/graphed_net.h"

using namespace nala;

namespace {

at::Tensor sample(models::DiT& m, const std::string& sampler, double cfg, bool graphs, int64_t n) {
  samplers::SamplingOptions o;
  o.sampler = sampler;
  o.steps = sampler == "ddpm" || sampler == "ddim" ? 12 : 8;
  o.cfg_scale = cfg;
  o.cuda_graphs = graphs;
  torch::manual_seed(7);
  at::Tensor x = at::randn({n, 4, 16, 16}, at::kCUDA), y = at::randint(0, 10, {n}, at::TensorOptions(at::kCUDA).dtype(at::kLong));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);  // as nala sample draws the sampler's noise
  return samplers::generate(m, o, x, y, gen).x;
}

}  // namespace

TEST(SampleGraph, ReplayEqualsEagerSampling) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  for (const char* name : {"NaLaDiT-S/2", "NaLaSiT-S/2"}) {
    models::ModelConfig c = models::model_config(name);
    c.input_size = 16;
    c.num_classes = 10;
    torch::manual_seed(3);
    models::DiT m(c);
    {
      torch::NoGradGuard ng;
      for (auto& p : m.parameters()) p.add_(at::randn_like(p) * 0.02);
    }
    m.to(at::kCUDA, at::kBFloat16);
    m.eval();
    const bool flow = c.family == "SiT";
    for (const char* sampler : flow ? std::vector<const char*>{"ode-heun", "sde-euler"} : std::vector<const char*>{"ddpm", "ddim"}) {
      for (int64_t n : {6, 3}) {
        const at::Tensor e = sample(m, sampler, 1.5, false, n), g = sample(m, sampler, 1.5, true, n);
        const double diff = (e - g).abs().max().item<double>();
        std::printf("  %s %s batch %ld: max |eager - graph| %.3e, bitwise %s\n", name, sampler, n, diff, at::equal(e, g) ? "yes" : "no");
        EXPECT_TRUE(at::equal(e, g)) << name << " " << sampler << " batch " << n << ": max diff " << diff;
      }
    }
  }
}

TEST(SampleGraph, EveryShapeHasItsGraph) {
  // one wrapper, runs of calls of two shapes (4 a run: two eager calls, the capture, a replay, and
  // later runs replay the shape's graph): every output equals the eager call's
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  samplers::LabelledNet net = [](const at::Tensor& x, const at::Tensor& t, const at::Tensor& y) {
    return at::tanh(x * t.view({-1, 1, 1, 1}).to(x.scalar_type())) + y.view({-1, 1, 1, 1}).to(x.scalar_type());  // (N, C, h, w)
  };
  samplers::LabelledNet g = samplers::graphed(net);
  for (int k = 0; k < 16; ++k) {
    const int64_t n = k / 4 % 2 ? 5 : 4;  // 4 × 4, 4 × 5, 4 × 4, 4 × 5
    at::Tensor x = at::randn({n, 2, 3, 3}, at::kCUDA), t = at::rand({n}, at::kCUDA), y = at::randint(0, 9, {n}, at::TensorOptions(at::kCUDA).dtype(at::kLong));
    EXPECT_TRUE(at::equal(g(x, t, y), net(x, t, y))) << "call " << k << " batch " << n;
  }
}
