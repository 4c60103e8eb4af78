// The column-sum kernel against a float64 sum, and linear() on CUDA (LinearFn with the kernel for
// the bias gradient) against at::linear, fp32 and under bf16 autocast as the trainer runs it; the
// patch embedding (a GEMM of the patches through linear()) against cuDNN's strided convolution.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "cuda_test_util.h"

#include "models/dit.h"
#include "ops/cuda/column_sum.h"
#include "ops/fused_ops.h"
#include "ops/linear.h"

using nala::test::rel;

namespace {

class LinearCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
    nala::ops::set_fused_block_ops(true);
  }
};

}  // namespace

TEST_F(LinearCuda, ColumnSumMatchesFloat64) {
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (auto [R, C] : {std::pair<int64_t, int64_t>{65536, 1536}, {65536, 384}, {37, 8}, {1, 264}, {3000, 1152}, {0, 16}}) {
      torch::manual_seed(R + C);
      at::Tensor x = at::randn({R, C}, at::kCUDA).to(dt);
      ASSERT_TRUE(nala::ops::cuda::column_sum_supported(x));
      at::Tensor s = nala::ops::cuda::column_sum(x), s2 = nala::ops::cuda::column_sum(x);
      at::Tensor truth = x.to(at::kDouble).sum(0);
      EXPECT_EQ(s.scalar_type(), at::kFloat);
      EXPECT_TRUE(at::equal(s, s2)) << "not bitwise repeatable";
      const double e = R == 0 ? s.abs().max().item<double>() : rel(s, truth);
      std::printf("  column_sum %s %lldx%lld rel err %.2e\n", c10::toString(dt), (long long)R, (long long)C, e);
      EXPECT_LT(e, 1e-6) << dt << " " << R << "x" << C;  // float32 accumulation of exact inputs
    }
  }
  EXPECT_FALSE(nala::ops::cuda::column_sum_supported(at::randn({4, 6}, at::kCUDA).to(at::kBFloat16)));  // 12-byte rows
}

// sum_partials (the column sum's second stage on a kernel's own partial sums, as the gated tail's
// backward hands them over): the sum over the first dimension against float64, bitwise repeatable,
// for partial counts around the 8 warps a column block takes and column counts not a multiple of 32.
TEST_F(LinearCuda, SumPartialsMatchesFloat64) {
  for (auto shape : {std::vector<int64_t>{528, 2, 384}, {264, 26, 384}, {1, 2, 72}, {7, 5}, {9, 1}, {0, 3}}) {
    torch::manual_seed(shape[0] + 1);
    const at::Tensor part = at::randn(shape, at::kCUDA);
    const at::Tensor s = nala::ops::cuda::sum_partials(part), s2 = nala::ops::cuda::sum_partials(part);
    const at::Tensor truth = part.to(at::kDouble).sum(0);
    ASSERT_EQ(s.sizes(), truth.sizes());
    EXPECT_TRUE(at::equal(s, s2)) << "not bitwise repeatable";
    const double e = shape[0] == 0 ? s.abs().max().item<double>() : rel(s, truth);
    std::printf("  sum_partials %s rel err %.2e\n", c10::str(shape).c_str(), e);
    EXPECT_LT(e, 1e-6) << c10::str(shape);
  }
  EXPECT_THROW(nala::ops::cuda::sum_partials(at::randn({4, 6}, at::kCUDA).t()), c10::Error);  // not contiguous
}

// sum_partials_into: the gated block's backward's pairs in one launch (attention/gated_tail.cpp): the
// norm's (K, 2, D), LePE's taps from a wider (K, 26, D) partial written transposed into the weight's
// (D, 1, 5, 5) order, LePE's bias row, g's sums into a slice of a longer vector, and the attention's
// (K', 3, H, d); between them a segment of 72 columns (a last column block only partly its own) into a
// strided view. Each result bit for bit sum_partials' of the same partials (the same additions in the
// same order), every element written (NaN-filled first), against float64; bad pairs are errors.
TEST_F(LinearCuda, SumPartialsIntoEqualsSumPartials) {
  using nala::ops::cuda::PartialSums;
  const int64_t K = 264, D = 384, Kq = 513, H = 6, d = 64;
  torch::manual_seed(5);
  const at::Tensor norm_part = at::randn({K, 2, D}, at::kCUDA), lepe_part = at::randn({K, 26, D}, at::kCUDA),
                   g_part = at::randn({K, D}, at::kCUDA), qkv_part = at::randn({Kq, 3, H, d}, at::kCUDA),
                   odd_part = at::randn({9, 3, 24}, at::kCUDA);  // (K, …) float32
  const auto nan = [](std::vector<int64_t> s) { return at::full(s, std::numeric_limits<float>::quiet_NaN(), at::kCUDA); };
  const at::Tensor norm = nan({2, D}), lepe_w = nan({D, 1, 5, 5}), lepe_b = nan({D}), qkvg = nan({4 * D}), odd = nan({3, 48});
  nala::ops::cuda::sum_partials_into({{norm_part, norm},
                                      {lepe_part.narrow(1, 0, 25), lepe_w.view({D, 25}).t()},
                                      {lepe_part.select(1, 25), lepe_b},
                                      {odd_part, odd.narrow(1, 0, 24)},
                                      {g_part, qkvg.narrow(0, 3 * D, D)},
                                      {qkv_part, qkvg.narrow(0, 0, 3 * D).view({3, H, d})}});
  const at::Tensor lepe_sum = nala::ops::cuda::sum_partials(lepe_part);  // (26, D)
  const std::vector<std::pair<at::Tensor, at::Tensor>> checks = {
      {norm, nala::ops::cuda::sum_partials(norm_part)},
      {lepe_w, lepe_sum.narrow(0, 0, 25).t().reshape({D, 1, 5, 5})},
      {lepe_b, lepe_sum[25]},
      {odd.narrow(1, 0, 24), nala::ops::cuda::sum_partials(odd_part)},
      {qkvg, at::cat({nala::ops::cuda::sum_partials(qkv_part).reshape({-1}), nala::ops::cuda::sum_partials(g_part)})}};
  const std::vector<at::Tensor> truths = {norm_part.to(at::kDouble).sum(0), lepe_part.to(at::kDouble).sum(0).narrow(0, 0, 25).t().reshape({D, 1, 5, 5}),
                                          lepe_part.to(at::kDouble).sum(0)[25], odd_part.to(at::kDouble).sum(0),
                                          at::cat({qkv_part.to(at::kDouble).sum(0).reshape({-1}), g_part.to(at::kDouble).sum(0)})};
  for (size_t i = 0; i < checks.size(); ++i) {
    const double e = rel(checks[i].first, truths[i]);
    std::printf("  sum_partials_into result %zu %s: rel err %.2e, bitwise sum_partials' %d\n", i, c10::str(checks[i].first.sizes()).c_str(), e,
                int(at::equal(checks[i].first, checks[i].second)));
    EXPECT_FALSE(checks[i].first.isnan().any().item<bool>()) << "result " << i << " has unwritten elements";
    EXPECT_TRUE(at::equal(checks[i].first, checks[i].second)) << "result " << i;
    EXPECT_LT(e, 1e-6) << "result " << i;
  }
  EXPECT_THROW(nala::ops::cuda::sum_partials_into({{norm_part, nan({2, D + 1})}}), c10::Error);           // wrong shape
  EXPECT_THROW(nala::ops::cuda::sum_partials_into({{norm_part.transpose(1, 2), nan({D, 2})}}), c10::Error);  // a partial not contiguous
  EXPECT_THROW(nala::ops::cuda::sum_partials_into({{qkv_part, nan({H, 3, d}).transpose(0, 1)}}), c10::Error);  // out in three pieces
  EXPECT_THROW(nala::ops::cuda::sum_partials_into({}), c10::Error);
}

TEST_F(LinearCuda, LinearEqualsAtLinear) {
  for (bool bf16 : {false, true}) {
    for (auto sizes : {std::vector<int64_t>{64, 256, 384}, std::vector<int64_t>{5, 7, 384}}) {
      torch::manual_seed(sizes[0]);
      torch::nn::Linear m(384, 1536);
      m->to(at::kCUDA);
      at::Tensor x0 = at::randn(sizes, at::kCUDA), gy = at::randn({sizes[0], sizes[1], 1536}, at::kCUDA);
      auto run = [&](bool fused) {
        nala::ops::set_fused_block_ops(fused);
        for (auto& p : m->parameters()) p.mutable_grad() = at::Tensor();
        at::Tensor x = x0.clone().requires_grad_(true);
        at::Tensor y;
        {
          nala::test::Autocast ac(bf16);
          y = nala::ops::linear(m, x);
          (y.to(at::kFloat) * gy).sum().backward();
        }
        nala::ops::set_fused_block_ops(true);
        return std::vector<at::Tensor>{y.detach(), x.grad(), m->weight.grad().clone(), m->bias.grad().clone()};
      };
      auto f = run(true), p = run(false);
      // truth: float64 on the same (rounded) operands
      at::Tensor xd = (bf16 ? x0.to(at::kBFloat16) : x0).to(at::kDouble), wd = (bf16 ? m->weight.to(at::kBFloat16) : m->weight).to(at::kDouble);
      at::Tensor gd = (bf16 ? gy.to(at::kBFloat16) : gy).to(at::kDouble).reshape({-1, 1536});
      at::Tensor db_t = gd.sum(0), dw_t = gd.t().mm(xd.reshape({-1, 384}));
      const char* names[] = {"y", "dx", "dw", "db"};
      EXPECT_EQ(f[0].scalar_type(), p[0].scalar_type());
      EXPECT_TRUE(at::equal(f[0], p[0])) << "forward differs from at::linear";
      for (int i = 1; i < 4; ++i) {
        EXPECT_EQ(f[i].scalar_type(), p[i].scalar_type()) << names[i];
        const double e = rel(f[i], p[i]);
        std::printf("  linear %s %lldx%lld %-2s fused vs at::linear %.2e\n", bf16 ? "bf16" : "fp32", (long long)sizes[0], (long long)sizes[1],
                    names[i], e);
        EXPECT_LT(e, bf16 ? 8e-3 : 1e-5) << names[i];
      }
      // the bias gradient: float32 sum of the bf16 gradient, closer to float64 than ATen's bf16 result
      EXPECT_LE(rel(f[3], db_t), rel(p[3], db_t) + 1e-6);
      EXPECT_LT(rel(f[2], dw_t), bf16 ? 8e-3 : 1e-5);
    }
  }
}

// models::PatchEmbed on CUDA as the trainer runs it (fused ops on: LinearFn) against the strided
// convolution it replaces (at::conv2d, flattened and transposed), in fp32 and under bf16 autocast,
// output and the weight's and bias' gradients, DiT-S/2's sizes at batch 8 and a patch of 4; each
// error against float64 on the same rounded operands bounded as LinearEqualsAtLinear's.
TEST_F(LinearCuda, PatchEmbedEqualsTheConvolution) {
  for (bool bf16 : {false, true})
    for (int64_t p : {2, 4}) {
      torch::manual_seed(p);
      nala::models::set_patch_embed_gemm(true);
      nala::models::PatchEmbed pe(4, 384, p);
      pe.to(at::kCUDA);
      at::Tensor x = at::randn({8, 4, 32, 32}, at::kCUDA), gy = at::randn({8, (32 / p) * (32 / p), 384}, at::kCUDA);
      auto grads = [&](const at::Tensor& y) {
        for (auto& q : pe.parameters()) q.mutable_grad() = at::Tensor();
        (y.to(at::kFloat) * gy).sum().backward();
        return std::vector<at::Tensor>{y.detach().to(at::kFloat), pe.proj->weight.grad().clone(), pe.proj->bias.grad().clone()};
      };
      std::vector<at::Tensor> mine, conv;
      {
        nala::test::Autocast ac(bf16);
        mine = grads(pe.forward(x));
        conv = grads(at::conv2d(x, pe.proj->weight, pe.proj->bias, {p, p}).flatten(2).transpose(1, 2));
      }
      // float64 on the operands as rounded
      auto r = [&](const at::Tensor& t) { return (bf16 ? t.to(at::kBFloat16) : t).to(at::kDouble); };
      at::Tensor xd = r(x), wd = r(pe.proj->weight), gd = r(gy);
      at::Tensor yd = at::conv2d(xd, wd, pe.proj->bias.to(at::kDouble), {p, p}).flatten(2).transpose(1, 2);
      at::Tensor patches = xd.reshape({8, 4, 32 / p, p, 32 / p, p}).permute({0, 2, 4, 1, 3, 5}).reshape({-1, 4 * p * p});  // (R, C·p·p)
      at::Tensor dw = gd.reshape({-1, 384}).t().mm(patches).view_as(wd), db = gd.reshape({-1, 384}).sum(0);
      const double lim = bf16 ? 8e-3 : 1e-5;
      const at::Tensor truth[] = {yd, dw, db};
      const char* names[] = {"y", "dw", "db"};
      for (int i = 0; i < 3; ++i) {
        const double e = rel(mine[i], truth[i]), ec = rel(conv[i], truth[i]);
        std::printf("  patch embed %s p %lld %-2s err %.2e (convolution %.2e)\n", bf16 ? "bf16" : "fp32", (long long)p, names[i], e, ec);
        EXPECT_LT(e, lim) << names[i] << " p " << p;
      }
    }
}
