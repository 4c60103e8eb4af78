// ATen's fused softmax-attention kernels one at a time (attention/sdpa_backend.h, NALA_SDPA_BACKEND):
// each named kernel really runs (ATen's _fused_sdp_choice under the limit), takes the DiT blocks'
// strided q, k, v views, and gives output and gradients as close to a float64 softmax as ATen's
// default; ATen's global enables are restored after every call; a DiT-S/2 forward with each is as
// close to float32 as with ATen's choice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "cuda_test_util.h"

#include "attention/cuda/softmax_cuda.h"
#include "attention/nala_reference.h"
#include "attention/sdpa_backend.h"

using nala::test::rel;
namespace att = nala::attention;

namespace {

class SdpaBackendCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  }
  void TearDown() override {
    att::set_sdpa_backend(att::SdpaBackend::Auto);
    att::set_softmax_forward_warps(4);
  }
};

const att::SdpaBackend kNamed[] = {att::SdpaBackend::CuDNN, att::SdpaBackend::Flash, att::SdpaBackend::Efficient};

}  // namespace

TEST_F(SdpaBackendCuda, EachKernelRunsAndMatchesFloat64LikeAtensChoice) {
  for (auto dt : {at::kBFloat16, at::kHalf})
    for (int64_t d : {64, 72})
      for (int64_t N : {256, 97}) {
        const int64_t B = 3, H = 4;
        torch::manual_seed(N + d);
        // q, k, v as the blocks make them: strided views of one (B, N, 3, H, d) projection output
        const at::Tensor qkv = at::randn({B, N, 3, H, d}, at::kCUDA).to(dt);
        const at::Tensor go = at::randn({B, H, N, d}, at::kCUDA).to(dt);  // ∂L/∂o
        auto views = [&](const at::Tensor& t) {
          return std::vector<at::Tensor>{t.select(2, 0).transpose(1, 2), t.select(2, 1).transpose(1, 2), t.select(2, 2).transpose(1, 2)};
        };
        // the truth in float64 with autograd
        const at::Tensor qkv64 = qkv.to(at::kDouble).cpu().requires_grad_(true);
        const auto t64 = views(qkv64);
        const at::Tensor p64 = at::softmax(at::matmul(t64[0], t64[1].transpose(-1, -2)) / std::sqrt(double(d)), -1);
        const at::Tensor o64 = at::matmul(p64, t64[2]);  // (B, H, N, d)
        (o64 * go.to(at::kDouble).cpu()).sum().backward();
        auto run = [&](att::SdpaBackend b) {
          const at::Tensor x = qkv.detach().clone().requires_grad_(true);
          const auto t = views(x);
          const at::Tensor o = att::sdpa_with_backend(t[0], t[1], t[2], b);  // (B, H, N, d)
          o.backward(go);
          return std::pair<at::Tensor, at::Tensor>{o.detach(), x.grad()};
        };
        const auto [o_auto, g_auto] = run(att::SdpaBackend::Auto);
        const double eo = rel(o_auto, o64), eg = rel(g_auto, qkv64.grad());
        const std::string what = std::string(c10::toString(dt)) + " d " + std::to_string(d) + " N " + std::to_string(N);
        std::printf("  %s: ATen's choice %ld: out %.2e grads %.2e", what.c_str(), (long)att::sdpa_choice(views(qkv)[0], views(qkv)[1], views(qkv)[2], att::SdpaBackend::Auto), eo, eg);
        at::Context& ctx = at::globalContext();
        const bool flash = ctx.userEnabledFlashSDP(), efficient = ctx.userEnabledMemEfficientSDP(), cudnn = ctx.userEnabledCuDNNSDP();
        for (auto b : kNamed) {
          const auto t = views(qkv);
          const int64_t chosen = att::sdpa_choice(t[0], t[1], t[2], b);
          const int64_t want = b == att::SdpaBackend::CuDNN ? 3 : b == att::SdpaBackend::Flash ? 1 : 2;
          if (chosen != want) {  // the kernel does not take these inputs: a named error, not a fallback
            std::printf("; %s refuses (ATen would run %ld)", att::sdpa_backend_name(b).c_str(), (long)chosen);
            EXPECT_THROW(run(b), c10::Error) << what << " " << att::sdpa_backend_name(b);
            continue;
          }
          const auto [o, g] = run(b);
          std::printf("; %s out %.2e grads %.2e", att::sdpa_backend_name(b).c_str(), rel(o, o64), rel(g, qkv64.grad()));
          EXPECT_LE(rel(o, o64), 1.5 * eo + 1e-3) << what << " " << att::sdpa_backend_name(b);
          EXPECT_LE(rel(g, qkv64.grad()), 1.5 * eg + 2e-3) << what << " " << att::sdpa_backend_name(b);
          EXPECT_EQ(ctx.userEnabledFlashSDP(), flash);
          EXPECT_EQ(ctx.userEnabledMemEfficientSDP(), efficient);
          EXPECT_EQ(ctx.userEnabledCuDNNSDP(), cudnn);
        }
        std::printf("\n");
      }
}

// What the blocks run: each kernel in DiT-S/2's sampling forward under bf16 autocast is as close to the
// float32 forward as ATen's choice; at DiT-S/2's head dim 64 and 256 tokens every one of the three takes it.
TEST_F(SdpaBackendCuda, DitForwardWithEachKernel) {
  // (and nala's forward kernel, which the sampling forward takes: no gradient)
  auto c = nala::test::perturbed_dit("DiT-S/2");
  const torch::NoGradGuard no_grad;
  const at::Tensor ref = c.model->forward(c.x, c.t, c.y);  // float32
  auto bf16 = [&] {
    nala::test::Autocast ac(true);
    return c.model->forward(c.x, c.t, c.y).to(at::kFloat);
  };
  const double e_auto = rel(bf16(), ref);
  std::printf("  DiT-S/2 bf16 forward vs float32: auto %.2e", e_auto);
  for (auto b : {att::SdpaBackend::CuDNN, att::SdpaBackend::Flash, att::SdpaBackend::Efficient, att::SdpaBackend::Nala}) {
    att::set_sdpa_backend(b);
    const double e = rel(bf16(), ref);
    std::printf("; %s %.2e", att::sdpa_backend_name(b).c_str(), e);
    EXPECT_LE(e, 1.5 * e_auto + 1e-3) << att::sdpa_backend_name(b);
  }
  std::printf("\n");
}

// nala's forward kernel (attention/cuda/softmax_fwd.h, NALA_SDPA_BACKEND=nala) against a float64 softmax
// beside ATen's choice: bf16, head dims 64 and 72, one key block, a ragged last block, many blocks, one
// token, on the blocks' strided views and on contiguous tensors; o is (B, N, H, d) in memory; every
// element written (the output is allocated fresh: a missed one shows as garbage against the truth).
TEST_F(SdpaBackendCuda, NalaKernelMatchesFloat64LikeAtensChoice) {
  const torch::NoGradGuard no_grad;
  for (int warps : {4, 8})  // the forward's CTA of 4 or 8 warps (NALA_SOFTMAX_FWD_WARPS)
  for (int64_t d : {64, 72})
    for (int64_t N : {256, 97, 1, 1000, 64})
      for (bool strided : {true, false}) {
        att::set_softmax_forward_warps(warps);
        const int64_t B = 3, H = 5;
        torch::manual_seed(N + d + strided);
        const at::Tensor qkv = (at::randn({B, N, 3, H, d}, at::kCUDA) * 1.5).to(at::kBFloat16);  // scores of a few units: a peaked softmax
        std::vector<at::Tensor> t = {qkv.select(2, 0).transpose(1, 2), qkv.select(2, 1).transpose(1, 2), qkv.select(2, 2).transpose(1, 2)};
        if (!strided)
          for (auto& x : t) x = x.contiguous();
        const at::Tensor q64 = t[0].to(at::kDouble).cpu(), k64 = t[1].to(at::kDouble).cpu(), v64 = t[2].to(at::kDouble).cpu();
        const at::Tensor truth = at::matmul(at::softmax(at::matmul(q64, k64.transpose(-1, -2)) / std::sqrt(double(d)), -1), v64);  // (B, H, N, d)
        const at::Tensor aten = att::sdpa_with_backend(t[0], t[1], t[2], att::SdpaBackend::Auto);
        ASSERT_EQ(att::sdpa_choice(t[0], t[1], t[2], att::SdpaBackend::Nala), att::kNalaSoftmaxKernel);
        const at::Tensor o = att::sdpa_with_backend(t[0], t[1], t[2], att::SdpaBackend::Nala);
        const std::string what = std::to_string(warps) + " warps, d " + std::to_string(d) + " N " + std::to_string(N) + (strided ? " strided" : " contiguous");
        std::printf("  nala softmax kernel %s: vs float64 %.2e, ATen's choice %.2e\n", what.c_str(), rel(o, truth), rel(aten, truth));
        ASSERT_EQ(o.sizes(), aten.sizes()) << what;
        EXPECT_EQ(o.scalar_type(), at::kBFloat16) << what;
        EXPECT_TRUE(o.transpose(1, 2).is_contiguous()) << what << ": (B, N, H, d) in memory";
        EXPECT_FALSE(o.isnan().any().item<bool>()) << what;
        EXPECT_LE(rel(o, truth), 1.5 * rel(aten, truth) + 1e-3) << what;
      }
  // what the kernel does not take is an error naming it, not a silent fallback
  const at::Tensor x = at::randn({2, 3, 16, 48}, at::kCUDA).to(at::kBFloat16);  // head dim 48
  EXPECT_THROW(att::sdpa_with_backend(x, x, x, att::SdpaBackend::Nala), c10::Error);
  EXPECT_EQ(att::sdpa_choice(x, x, x, att::SdpaBackend::Nala), -1);
  // with a gradient wanted past 256 tokens ATen's choice runs (the backward holds a (batch, head)'s keys in one CTA)
  const at::Tensor y = at::randn({2, 3, 300, 64}, at::kCUDA).to(at::kBFloat16).requires_grad_(true);
  torch::AutoGradMode grad(true);
  EXPECT_NE(att::sdpa_choice(y, y, y, att::SdpaBackend::Nala), att::kNalaSoftmaxKernel);
  const int64_t calls = att::nala_softmax_calls(false);
  const at::Tensor oy = att::sdpa_with_backend(y, y, y, att::SdpaBackend::Nala);
  EXPECT_EQ(att::nala_softmax_calls(false), calls) << "ATen's kernel ran, not nala's";
  EXPECT_TRUE(oy.requires_grad());
}

// nala's forward and backward in training (NALA_SDPA_BACKEND=nala, N ≤ 256): output and the gradients of
// q, k, v (through the blocks' strided views of one projection output) against float64 autograd beside
// ATen's choice, bf16, head dims 64 and 72, a full 256 tokens, ragged counts (a partial query block, keys
// past N in every warp) and one token; scores of a few units, so the softmax is peaked.
TEST_F(SdpaBackendCuda, NalaKernelsTrainLikeFloat64) {
  for (int64_t d : {64, 72})
    for (int64_t N : {256, 97, 200, 1, 16}) {
      const int64_t B = 2, H = 3;
      torch::manual_seed(N + d + 7);
      const at::Tensor qkv0 = (at::randn({B, N, 3, H, d}, at::kCUDA) * 1.5).to(at::kBFloat16);
      const at::Tensor go = at::randn({B, H, N, d}, at::kCUDA).to(at::kBFloat16);  // ∂L/∂o
      auto views = [&](const at::Tensor& t) {
        return std::vector<at::Tensor>{t.select(2, 0).transpose(1, 2), t.select(2, 1).transpose(1, 2), t.select(2, 2).transpose(1, 2)};
      };
      const at::Tensor qkv64 = qkv0.to(at::kDouble).cpu().requires_grad_(true);
      const auto t64 = views(qkv64);
      const at::Tensor o64 = at::matmul(at::softmax(at::matmul(t64[0], t64[1].transpose(-1, -2)) / std::sqrt(double(d)), -1), t64[2]);
      (o64 * go.to(at::kDouble).cpu()).sum().backward();
      const at::Tensor g64 = qkv64.grad();  // (B, N, 3, H, d)
      auto run = [&](att::SdpaBackend b, int64_t* choice) {
        const at::Tensor x = qkv0.detach().clone().requires_grad_(true);
        const auto t = views(x);
        if (choice) *choice = att::sdpa_choice(t[0], t[1], t[2], b);
        const at::Tensor o = att::sdpa_with_backend(t[0], t[1], t[2], b);  // (B, H, N, d)
        o.backward(go);
        return std::pair<at::Tensor, at::Tensor>{o.detach(), x.grad()};
      };
      int64_t choice = 0;
      const auto [o_aten, g_aten] = run(att::SdpaBackend::Auto, nullptr);
      const auto [o, g] = run(att::SdpaBackend::Nala, &choice);
      const std::string what = "d " + std::to_string(d) + " N " + std::to_string(N);
      EXPECT_EQ(choice, att::kNalaSoftmaxKernel) << what;
      std::vector<double> e(3), e_aten(3);
      for (int part = 0; part < 3; ++part) {  // q, k, v
        e[part] = rel(g.select(2, part), g64.select(2, part));
        e_aten[part] = rel(g_aten.select(2, part), g64.select(2, part));
      }
      std::printf("  nala softmax training %s: out %.2e (ATen %.2e); dq %.2e (%.2e) dk %.2e (%.2e) dv %.2e (%.2e)\n", what.c_str(), rel(o, o64),
                  rel(o_aten, o64), e[0], e_aten[0], e[1], e_aten[1], e[2], e_aten[2]);
      EXPECT_LE(rel(o, o64), 1.5 * rel(o_aten, o64) + 1e-3) << what;
      const char* names[] = {"dq", "dk", "dv"};
      for (int part = 0; part < 3; ++part) {
        EXPECT_FALSE(g.select(2, part).isnan().any().item<bool>()) << what << " " << names[part];
        if (g64.select(2, part).norm().item<double>() == 0) {
          // one token: p = 1 exactly, so dq = dk = 0 exactly (dS = dP − D = 0); relative errors are
          // noise over zero there: bounded absolutely against dv's size
          const double bound = 1e-3 * g64.select(2, 2).abs().max().item<double>();
          EXPECT_LE(g.select(2, part).abs().max().item<float>(), bound) << what << " " << names[part];
          continue;
        }
        EXPECT_LE(e[part], 1.5 * e_aten[part] + 2e-3) << what << " " << names[part];
      }
    }
}

// A DiT-S/2 training step's gradients under bf16 autocast with nala's kernels as close to the float32
// step's as with ATen's choice (every parameter's gradient, relative L2).
TEST_F(SdpaBackendCuda, DitTrainingStepWithNalasKernels) {
  auto c = nala::test::perturbed_dit("DiT-S/2");  // eval mode: no label dropout, so the three steps see one batch; gradients on
  const at::Tensor gy = at::randn({8, 8, 32, 32}, at::kCUDA);  // ∂L/∂(model output): learn-sigma DiT, 8 channels
  auto grads = [&](bool bf16) {
    c.model->zero_grad();
    at::Tensor out;
    {
      nala::test::Autocast ac(bf16);
      out = c.model->forward(c.x, c.t, c.y);
    }
    (out.to(at::kFloat) * gy).sum().backward();
    std::vector<at::Tensor> gs;
    for (const auto& p : c.model->parameters())
      if (p.grad().defined()) gs.push_back(p.grad().clone());
    return gs;
  };
  const auto ref = grads(false);  // float32 (math / ATen's float32 path)
  const auto g_auto = grads(true);
  att::set_sdpa_backend(att::SdpaBackend::Nala);
  const int64_t fwd = att::nala_softmax_calls(false), bwd = att::nala_softmax_calls(true);
  const auto g_nala = grads(true);
  EXPECT_EQ(att::nala_softmax_calls(false), fwd + 12) << "DiT-S/2's 12 blocks through nala's forward";
  EXPECT_EQ(att::nala_softmax_calls(true), bwd + 12) << "and its backward";
  ASSERT_EQ(ref.size(), g_nala.size());
  ASSERT_EQ(ref.size(), g_auto.size());
  double worst = 0, worst_auto = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i].norm().item<double>() == 0) continue;
    const double e = rel(g_nala[i], ref[i]), ea = rel(g_auto[i], ref[i]);
    worst = std::max(worst, e), worst_auto = std::max(worst_auto, ea);
    EXPECT_LE(e, 1.5 * ea + 2e-3) << "parameter " << i;
  }
  std::printf("  DiT-S/2 bf16 training step vs float32, worst parameter gradient: nala's kernels %.2e, ATen's choice %.2e\n", worst, worst_auto);
}

