// The patch embedding with pos_embed's add in one kernel (ops/patch_embed.h, NALA_PATCH_EMBED_POS)
// against float64 of its formula from the same bf16 operands (tokens within the rounding of their
// bf16 GEMM values) and against the GEMM + add it replaces (DiT-S/2 and DiT-XL/2 widths, patch 2
// and 4, under bf16 autocast): forward within that rounding, the weight's and the bias' gradients
// bit for bit (the same linear backward of the same bf16 gradient).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "models/dit.h"
#include "ops/fused_ops.h"
#include "ops/patch_embed.h"
#include "train/autocast_scope.h"

using namespace nala;

TEST(PatchEmbedPos, MatchesFloat64AndTheGemmWithTheAdd) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  struct Shape {
    int64_t C, D, p, N, L;
  };
  // K = C·p·p 16 (S/2, XL/2), 4 (one channel at patch 2), 12; D 72 (a block's lanes partly idle); 300 rows
  // (a last block partly filled); 2 × 2 latents (one token an image: the rows' image positions wrap
  // every row), 25 and 9 tokens an image over several 256-row blocks (positions that are not a multiple
  // of the kernel's 4 warps apart at a block's start); patch 4 with 4 channels (K 64) is not taken: the GEMM and the add
  const bool fused_default = ops::patch_embed_pos_fused();
  for (const Shape s : {Shape{4, 384, 2, 16, 32}, Shape{4, 1152, 2, 4, 32}, Shape{1, 384, 2, 3, 20}, Shape{3, 72, 2, 3, 16},
                        Shape{4, 384, 4, 8, 32}, Shape{2, 384, 2, 37, 2}, Shape{1, 384, 2, 30, 10}, Shape{4, 384, 2, 40, 6}}) {
    torch::manual_seed(1);
    auto pe = std::make_shared<models::PatchEmbed>(s.C, s.D, s.p);
    pe->to(at::kCUDA);
    {
      torch::NoGradGuard ng;
      pe->proj->bias.normal_(0, 0.1);
    }
    const int64_t T = (s.L / s.p) * (s.L / s.p);
    const at::Tensor x = at::randn({s.N, s.C, s.L, s.L}, at::kCUDA);       // (N, C, L, L)
    const at::Tensor pos = at::randn({1, T, s.D}, at::kCUDA) * 0.5;         // (1, T, D)
    const at::Tensor g = at::randn({s.N, T, s.D}, at::kCUDA);               // (N, T, D) the loss' gradient
    const bool taken = s.C * s.p * s.p <= 16;
    auto run = [&](bool fused) {
      ops::set_patch_embed_pos_fused(fused);
      for (auto& p : pe->parameters()) p.mutable_grad() = at::Tensor();
      at::Tensor h;
      {
        train::AutocastScope ac(true);
        EXPECT_EQ(ops::patch_embed_pos_applies(pe->patches(x), pe->proj->weight.flatten(1), pe->proj->bias, pos), fused && taken);
        h = pe->forward_plus(x, pos);  // (N, T, D)
      }
      (h * g).sum().backward();
      return std::vector<at::Tensor>{h.detach(), pe->proj->weight.grad().clone(), pe->proj->bias.grad().clone()};
    };
    const auto a = run(true), b = run(false);
    ops::set_patch_embed_pos_fused(fused_default);
    EXPECT_EQ(a[0].scalar_type(), at::kFloat);
    // float64 of Σ_k bf16(patch)·bf16(w) + bf16(b), rounded to bf16, + pos: the kernel's value up to the sums' order
    const at::Tensor pb = pe->patches(x).to(at::kBFloat16).to(at::kDouble);                  // (N, T, K)
    const at::Tensor wb = pe->proj->weight.flatten(1).to(at::kBFloat16).to(at::kDouble);     // (D, K)
    const at::Tensor bb = pe->proj->bias.to(at::kBFloat16).to(at::kDouble);                  // (D)
    const at::Tensor gemm = at::matmul(pb, wb.t()) + bb;                                     // (N, T, D) float64
    const at::Tensor tok = a[0].to(at::kDouble) - pos.to(at::kDouble);                       // the kernel's bf16 token values (≈)
    // half a bf16 ulp of the token (2⁻⁸ relative at most), the float32 rounding of its sum with pos, a float32 sum's slack
    const at::Tensor bound = gemm.abs() * std::ldexp(1.0, -8) + (a[0].to(at::kDouble).abs() + pos.to(at::kDouble).abs()) * std::ldexp(1.0, -22) + 1e-7;
    const double ulp = ((tok - gemm).abs() / bound).max().item<double>();
    const double vs_gemm = (a[0] - b[0]).abs().max().item<double>() / b[0].abs().max().item<double>();
    const double same = a[0].eq(b[0]).to(at::kDouble).mean().item<double>();
    std::printf("  C %ld D %ld p %ld: tokens vs float64 at most %.2f of the bound; vs GEMM + add max %.2e, %.1f %% equal\n",
                long(s.C), long(s.D), long(s.p), ulp, vs_gemm, 100 * same);
    EXPECT_LE(ulp, 1.0);
    EXPECT_LT(vs_gemm, 1e-2);
    EXPECT_GT(same, 0.9);
    if (!taken) EXPECT_TRUE(at::equal(a[0], b[0])) << "K " << s.C * s.p * s.p << " is not the kernel's: the same path twice";
    EXPECT_TRUE(at::equal(a[1], b[1])) << "weight gradient, D " << s.D;
    EXPECT_TRUE(at::equal(a[2], b[2])) << "bias gradient, D " << s.D;
  }
}
