// The sampling library calls a user reaches through `nala sample`: the sampler table, generate(),
// resumable FID batches and likelihood(), on a tiny DiT/SiT on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "io/atomic_file.h"
#include "io/npz.h"
#include "models/dit.h"
#include "models/model_config.h"
#include "models/vae.h"
#include "samplers/ddim.h"
#include "samplers/fid_batches.h"
#include "samplers/generate.h"
#include "samplers/graphed_net.h"
#include "samplers/guidance.h"

namespace fs = std::filesystem;
using namespace nala;

namespace {

models::DiT tiny(const std::string& name, bool perturb) {
  models::ModelConfig c = models::model_config(name);
  c.input_size = 8;
  c.in_channels = 1;
  c.num_classes = 3;
  torch::manual_seed(3);
  models::DiT m(c);
  m.eval();
  if (perturb) {  // the official init zeroes the output layer; make every output depend on the input
    torch::NoGradGuard ng;
    for (auto& p : m.parameters()) p.add_(at::randn_like(p) * 0.02);
  }
  return m;
}

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("nala_generate_test_" + tag + "_" + std::to_string(::getpid()));
  io::remove_tree(d.string());
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(SamplerTable, NamesResolveAndUnknownOnesListTheKnown) {
  for (const auto& s : samplers::sampler_table()) EXPECT_EQ(std::string(samplers::find_sampler(s.name).name), s.name);
  try {
    samplers::find_sampler("euler-a");
    FAIL() << "no error for an unknown sampler";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("dpm++"), std::string::npos) << e.what();
  }
  auto m = tiny("DiT-T/4", false);
  samplers::SamplingOptions o;
  o.sampler = "ode-heun";  // a flow sampler for a DDPM model
  EXPECT_THROW(samplers::resolve(o, m), std::runtime_error);
}

TEST(Generate, DdimThroughTheTableEqualsTheSamplerCalledDirectly) {
  auto m = tiny("DiT-T/4", true);
  at::Tensor z = at::randn({4, 1, 8, 8}), y = at::tensor({0, 1, 2, 1}, at::kLong);  // (4, 1, 8, 8), (4,)
  samplers::SamplingOptions o;
  o.sampler = "ddim";
  o.steps = 5;
  o.cfg_scale = 2.0;
  o.cfg_channels = -1;
  at::Tensor a = samplers::generate(m, o, z, y).x;
  torch::NoGradGuard ng;
  samplers::LabelledNet net = [&](const at::Tensor& x, const at::Tensor& t, const at::Tensor& yy) { return m.forward(x, t, yy); };
  auto f = samplers::classifier_free_guidance(net, y, 3, 2.0, -1, 1);
  diffusion::GaussianDiffusion d("linear", 1000, "ddim5", diffusion::VarianceType::LearnedRange);
  at::Tensor b = samplers::sample_ddim(f, d, z, 0.0, false).x;
  std::printf("generate(ddim) vs sample_ddim: max |diff| %.3e\n", (a - b).abs().max().item<double>());
  EXPECT_TRUE(at::equal(a, b));
}

TEST(FidBatches, ResumedRunEqualsUninterruptedOne) {
  auto m = tiny("DiT-T/4", true);
  models::IdentityAutoencoder ae(1);
  samplers::SamplingOptions so;
  so.sampler = "ddpm";  // stochastic: the per-batch sampler generator matters too
  so.steps = 4;
  so = samplers::resolve(so, m);
  samplers::FidBatchOptions fo;
  fo.num_samples = 5;
  fo.batch_size = 2;
  fo.seed = 11;
  fo.progress = false;
  const fs::path d = temp_dir("fid");
  const std::string full = (d / "full.npz").string(), resumed = (d / "resumed.npz").string();
  samplers::sample_fid_batches(m, ae, so, fo, full, c10::Device("cpu"));
  // an interrupted run: stopped after its first batch was saved
  samplers::FidBatchOptions stop_early = fo;
  stop_early.on_batch = [](int64_t b) { throw std::runtime_error("stopped after batch " + std::to_string(b)); };
  EXPECT_THROW(samplers::sample_fid_batches(m, ae, so, stop_early, resumed, c10::Device("cpu")), std::runtime_error);
  EXPECT_TRUE(fs::exists(resumed + ".parts/batch_0.npz"));
  EXPECT_FALSE(fs::exists(resumed));
  // a resume with another seed is refused, naming it
  samplers::FidBatchOptions other = fo;
  other.seed = 12;
  try {
    samplers::sample_fid_batches(m, ae, so, other, resumed, c10::Device("cpu"));
    ADD_FAILURE() << "a resume with another seed was not refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("seed: 11 before, 12 now"), std::string::npos) << e.what();
  }
  samplers::sample_fid_batches(m, ae, so, fo, resumed, c10::Device("cpu"));
  auto a = io::load_npz(full), b = io::load_npz(resumed);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].second.sizes(), at::IntArrayRef({5, 8, 8, 3}));
  EXPECT_EQ(a[0].second.scalar_type(), at::kByte);
  EXPECT_TRUE(at::equal(a[0].second, b[0].second));
  EXPECT_TRUE(at::equal(a[1].second, b[1].second));
  EXPECT_FALSE(fs::exists(resumed + ".parts"));
  // different batches draw different noise
  EXPECT_FALSE(at::equal(a[0].second.narrow(0, 0, 2), a[0].second.narrow(0, 2, 2)));
  io::remove_tree(d.string());
}

TEST(Likelihood, ZeroVelocityModelGivesTheStandardNormalDensity) {
  // SiT's official init zeroes the final layer: v ≡ 0, so x_0 = x and the divergence vanishes;
  // log p(x) = log N(x; 0, I) exactly.
  auto m = tiny("SiT-T/4", false);
  samplers::SamplingOptions so = samplers::resolve(samplers::SamplingOptions{}, m);
  at::Tensor x = at::randn({3, 1, 8, 8}) * 0.7, y = at::tensor({0, 2, 1}, at::kLong);  // (3, 1, 8, 8), (3,)
  auto r = samplers::likelihood(m, so, x, y, 11, at::make_generator<at::CPUGeneratorImpl>(5));
  const double D = 64;
  at::Tensor logn = -0.5 * x.to(at::kDouble).pow(2).flatten(1).sum(1) - 0.5 * D * std::log(2 * M_PI);  // (3,)
  at::Tensor expect = -logn / (D * std::log(2.0));
  const double err = (r.bits_per_dim.to(at::kDouble) - expect).abs().max().item<double>();
  std::printf("likelihood of a zero-velocity model: max |bpd - exact| %.2e, NFE %ld\n", err, r.nfe);
  EXPECT_LT(err, 1e-5);
  EXPECT_EQ(r.nfe, 2 * 10);
  samplers::SamplingOptions ddpm;
  ddpm.objective = "ddpm";
  ddpm.sampler = "ddpm";
  EXPECT_THROW(samplers::likelihood(m, samplers::resolve(ddpm, m), x, y, 11, at::make_generator<at::CPUGeneratorImpl>(5)), std::runtime_error);
}

TEST(Generate, CudaGraphsOnTheCpuAreANamedError) {
  // --cuda-graphs on a CPU model is refused on the first call with the device named, not run eagerly
  auto m = tiny("DiT-T/4", true);
  samplers::SamplingOptions o;
  o.steps = 3;
  o.cuda_graphs = true;
  torch::manual_seed(0);
  at::Tensor x = at::randn({2, 1, 8, 8}), y = at::tensor({0, 1}, at::kLong);
  try {
    samplers::generate(m, o, x, y);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--cuda-graphs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
  // the wrapper alone, the same
  samplers::LabelledNet net = [](const at::Tensor& xx, const at::Tensor&, const at::Tensor&) { return xx; };
  EXPECT_THROW(samplers::graphed(net)(x, at::zeros({2}), y), std::invalid_argument);
}
