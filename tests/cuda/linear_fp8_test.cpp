// FP8 linear layers on CUDA (ops/linear_fp8.h): the row-quantization kernel bit for bit
// against its ATen composition; at::_scaled_mm with row-wise scales against the same products of
// dequantized operands in float32; a DiT forward with every fitting layer in FP8 against float32,
// beside bf16's error (what `nala bench sample --dtypes fp8` also prints).
#include <gtest/gtest.h>

#include <cstdio>

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "cuda_test_util.h"

#include "ops/cuda/quantize_fp8.h"
#include "ops/linear_fp8.h"
#include "models/dit.h"
#include "models/model_config.h"

using nala::test::rel;
using namespace nala::ops;

namespace {

class LinearFp8Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
    clear_fp8_linears();
  }
  void TearDown() override { clear_fp8_linears(); }
};

}  // namespace

TEST_F(LinearFp8Cuda, KernelEqualsAtenBitForBit) {
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (auto [R, K] : {std::pair<int64_t, int64_t>{1, 16}, {5, 1152}, {32771, 1152}, {7, 4608}, {9, 24}, {0, 64}}) {
      if (dt == at::kFloat && K == 24) continue;  // 96-byte rows are fine; 24 bf16 = 48 bytes too: both below
      torch::manual_seed(R + K);
      at::Tensor x = (at::randn({R, K}, at::kCUDA) * at::rand({R, 1}, at::kCUDA).mul(100)).to(dt);  // rows of different ranges
      if (R > 3) x.narrow(0, 2, 1).zero_();
      ASSERT_TRUE(cuda::quantize_rows_supported(x)) << R << "x" << K;
      auto [q, s] = cuda::quantize_rows(x);
      const Fp8Rows ref = quantize_rows_fp8_reference(x);
      EXPECT_TRUE(at::equal(q.view(at::kByte), ref.q.view(at::kByte))) << dt << " " << R << "x" << K;
      EXPECT_TRUE(at::equal(s, ref.scale)) << dt << " " << R << "x" << K;
    }
  }
  EXPECT_FALSE(cuda::quantize_rows_supported(at::randn({4, 12}, at::kCUDA).to(at::kBFloat16)));  // 24-byte rows
}

TEST_F(LinearFp8Cuda, ScaledMmEqualsDequantizedProducts) {
  std::string why;
  ASSERT_TRUE(cuda::fp8_gemm_available(c10::Device(at::kCUDA), &why)) << why;
  at::globalContext().setAllowTF32CuBLAS(false);
  for (auto [R, in, out] : {std::tuple<int64_t, int64_t, int64_t>{32768, 1152, 3456}, {5, 1152, 4608}, {77, 4608, 1152}, {16, 256, 384}}) {
    torch::manual_seed(in + out);
    at::Tensor x = at::randn({R, in}, at::kCUDA).to(at::kBFloat16), w = (at::randn({out, in}, at::kCUDA) * 0.02).to(at::kBFloat16);
    at::Tensor b = at::randn({out}, at::kCUDA);
    const Fp8Rows wq = quantize_rows_fp8(w), xq = quantize_rows_fp8(x);
    const at::Tensor y = linear_fp8(x, wq, b);                                                          // (R, out) bf16
    const at::Tensor twin = at::linear(xq.q.to(at::kFloat) * xq.scale, wq.q.to(at::kFloat) * wq.scale, b);  // (R, out) float32
    const at::Tensor exact = at::linear(x.to(at::kFloat), w.to(at::kFloat), b);
    const double e_twin = rel(y, twin), e_exact = rel(y, exact), e_bf16 = rel(at::linear(x, w, b.to(at::kBFloat16)), exact);
    std::printf("  linear_fp8 %ldx%ld->%ld (fast accum %d): vs dequantized twin %.2e; vs exact %.2e (bf16 GEMM %.2e)\n", (long)R, (long)in,
                (long)out, int(fp8_fast_accum()), e_twin, e_exact, e_bf16);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_LT(e_twin, 1e-2);  // bf16 output rounding (2^-9) and the accumulation order
    EXPECT_LT(e_exact, 0.06);
  }
}

TEST_F(LinearFp8Cuda, DitForwardErrorBesideBf16) {
  auto cfg = nala::models::model_config("DiT-S/2");
  cfg.input_size = 32;
  torch::manual_seed(0);
  auto model = std::make_shared<nala::models::DiT>(cfg);
  torch::NoGradGuard ng;
  for (auto& p : model->parameters()) p.add_(at::randn_like(p) * 0.02);  // non-trivial weights (adaLN and the head start at zero)
  model->to(at::kCUDA, at::kFloat);
  model->eval();
  const auto ids = at::TensorOptions().device(at::kCUDA).dtype(at::kLong);  // randint's default dtype is float
  at::Tensor x = at::randn({16, 4, 32, 32}, at::kCUDA), t = at::randint(0, 1000, {16}, ids), y = at::randint(0, 1000, {16}, ids);
  at::globalContext().setAllowTF32CuBLAS(false);
  const at::Tensor ref = model->forward(x, t, y);
  model->to(at::kBFloat16);
  const at::Tensor bf16 = model->forward(x.to(at::kBFloat16), t, y).to(at::kFloat);
  const int64_t n = model->use_fp8_linears();
  const at::Tensor fp8 = model->forward(x.to(at::kBFloat16), t, y).to(at::kFloat);
  const double e16 = rel(bf16, ref), e8 = rel(fp8, ref);
  std::printf("  DiT-S/2 forward vs float32: bf16 %.2e, fp8 (%ld layers) %.2e\n", e16, (long)n, e8);
  EXPECT_EQ(n, 12 * 4 + 1);  // qkv, proj, fc1, fc2 a block and the head (2·2·8 = 32 outputs)
  EXPECT_GT(e8, e16);            // FP8 is used (and coarser)
  EXPECT_LT(e8, 0.1);
}
