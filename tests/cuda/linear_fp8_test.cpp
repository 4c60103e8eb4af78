// FP8 linear layers on CUDA (ops/linear_fp8.h): the row-quantization kernel bit for bit
// against its ATen composition; at::_scaled_mm with row-wise scales against the same products of
// dequantized operands in float32; a DiT forward with every fitting layer in FP8 against float32,
// beside bf16's error (what `nala bench sample --dtypes fp8` also prints).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "cuda_test_util.h"

#include "ops/block_ops.h"
#include "ops/cuda/block_cuda.h"
#include "ops/cuda/quantize_fp8.h"
#include "ops/cuda/quantize_fp8_kernels.h"
#include "ops/fused_ops.h"
#include "ops/mlp.h"
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

// A NaN stays NaN through every kernel that writes e4m3 rows, as in the ATen reference: its row's
// scale and every byte of the row are NaN, the other rows are the reference's bit for bit. (A plain
// fmaxf clamp turned NaN into -448 and dropped it from the row's amax: a diverged model sampled finite.)
TEST_F(LinearFp8Cuda, NanRowsStayNan) {
  set_fused_block_ops(true);
  const auto check = [](const at::Tensor& q, const at::Tensor& s, const Fp8Rows& ref, int64_t nan_row, const char* what) {
    const at::Tensor qf = q.to(at::kFloat), rf = ref.q.to(at::kFloat);  // (R, K)
    EXPECT_TRUE(qf[nan_row].isnan().all().item<bool>()) << what;
    EXPECT_TRUE(s[nan_row].isnan().all().item<bool>()) << what;
    EXPECT_TRUE(rf[nan_row].isnan().all().item<bool>()) << what << ": the reference no longer propagates NaN";
    const at::Tensor keep = at::ones({q.size(0)}, at::kCUDA).to(at::kBool).index_put_({at::tensor({nan_row}, at::kLong).cuda()}, false);  // (R)
    EXPECT_TRUE(at::equal(q.index({keep}).view(at::kByte), ref.q.index({keep}).view(at::kByte))) << what;
    EXPECT_TRUE(at::equal(s.index({keep}), ref.scale.index({keep}))) << what;
  };
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    torch::manual_seed(3);
    at::Tensor x = at::randn({6, 1152}, at::kCUDA).to(dt);  // (6, 1152)
    x.index_put_({2, 700}, std::nan(""));
    auto [q, s] = cuda::quantize_rows(x);
    check(q, s, quantize_rows_fp8_reference(x), 2, "quantize_rows");
    const at::Tensor b = at::randn({1152}, at::kCUDA);  // (1152)
    auto [qg, sg] = cuda::bias_gelu_quantize_rows(x, b);
    auto [qg2, sg2] = cuda::quantize_rows(bias_gelu(x, b).contiguous());
    check(qg, sg, Fp8Rows{qg2, sg2}, 2, "bias_gelu_quantize_rows");
  }
  torch::manual_seed(4);
  at::Tensor x = at::randn({2, 3, 384}, at::kCUDA).to(at::kBFloat16);  // (N, T, D)
  x.index_put_({1, 0, 5}, std::nan(""));
  const at::Tensor shift = at::randn({2, 384}, at::kCUDA), scale = at::randn({2, 384}, at::kCUDA);  // (N, D)
  auto [q, s] = cuda::layer_norm_modulate_quantize(x, shift, scale, 1e-6, at::kBFloat16);  // (6, 384), (6, 1)
  auto [q2, s2] = cuda::quantize_rows(layer_norm_modulate(x, shift, scale, 1e-6).reshape({-1, 384}).contiguous());
  check(q, s, Fp8Rows{q2, s2}, 3, "layer_norm_modulate_quantize");
}

// How far two row quantizations of the same rows lie apart: the fraction of bytes that differ and
// the largest difference in e4m3 grid steps (2^(floor(log2 |v|) − 3), 2^-9 below the smallest normal 2^-6).
std::pair<double, double> e4m3_apart(const at::Tensor& q, const at::Tensor& r) {
  const at::Tensor qf = q.to(at::kFloat), rf = r.to(at::kFloat);  // in units of the row's scale
  const at::Tensor d = (qf - rf).abs();
  const at::Tensor step = at::exp2(at::floor(at::log2(at::maximum(qf.abs(), rf.abs()).clamp_min(0.015625))) - 3);
  return {d.gt(0).to(at::kDouble).mean().item<double>(), (d / step).max().item<double>()};
}

// The one-pass bias + GELU + row quantization kernel against the two kernels it replaces (bias_gelu,
// then quantize_rows) bit for bit, and against the ATen twin within one e4m3 step where ATen's GELU
// rounds h differently; rows of every width the dispatch picks, the DiT MLP widths among them, and a
// bias that starts off the 16-byte alignment the kernel's vector loads need (copied first). With
// fast_gelu (NALA_FP8_FAST_GELU=1: GELU's sigmoid form, ops/cuda/gelu.cuh) a byte may move by one
// e4m3 step where h rounds to the dtype differently, in few bytes, and a row's scale by one ulp of
// the dtype in few rows (the inputs here keep every row's largest |h| far from the cancellation
// regime where the two forms differ more).
TEST_F(LinearFp8Cuda, BiasGeluQuantizeEqualsTheTwoKernels) {
  set_fused_block_ops(true);  // bias_gelu's kernel (NALA_FUSED_BLOCKS=0 would make it the ATen composition)
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (auto [R, K] : {std::pair<int64_t, int64_t>{3, 64}, {5, 1536}, {32768, 4608}, {7, 4096}, {9, 8192}, {11, 1000}}) {
      if (K * int64_t(at::elementSize(dt)) / 16 > cuda::kBiasGeluQuantizeMaxVectors) {
        EXPECT_FALSE(cuda::bias_gelu_quantize_rows_supported(at::empty({R, K}, at::TensorOptions(at::kCUDA).dtype(dt)), at::empty({K}, at::kCUDA)));
        continue;
      }
      if (K * int64_t(at::elementSize(dt)) % 16) continue;
      torch::manual_seed(R + K);
      const at::Tensor x = (at::randn({R, K}, at::kCUDA) * 3).to(dt);
      const at::Tensor b = R == 5 ? at::randn({K + 1}, at::kCUDA).narrow(0, 1, K) : at::randn({K}, at::kCUDA);  // (K), off-aligned once
      ASSERT_TRUE(cuda::bias_gelu_quantize_rows_supported(x, b)) << dt << " " << R << "x" << K;
      auto [q, s] = cuda::bias_gelu_quantize_rows(x, b);
      auto [q2, s2] = cuda::quantize_rows(bias_gelu(x, b).contiguous());
      EXPECT_TRUE(at::equal(q.view(at::kByte), q2.view(at::kByte))) << dt << " " << R << "x" << K;
      EXPECT_TRUE(at::equal(s, s2)) << dt << " " << R << "x" << K;
      const Fp8Rows ref = bias_gelu_quantize_rows_fp8_reference(x, b);
      const auto [off, worst] = e4m3_apart(q, ref.q);
      auto [qf, sf] = cuda::bias_gelu_quantize_rows(x, b, /*fast_gelu=*/true);
      const auto [off_fast, worst_fast] = e4m3_apart(qf, q2);
      std::printf("  bias_gelu_quantize %s %ldx%ld: vs ATen twin %.2e of the bytes differ, by at most %.0f e4m3 step(s); fast GELU vs the two kernels %.2e, %.0f\n",
                  c10::toString(dt), (long)R, (long)K, off, worst, off_fast, worst_fast);
      EXPECT_LT(off, 5e-2) << dt << " " << R << "x" << K;  // a row whose largest h ATen rounds otherwise moves its scale
      EXPECT_LE(worst, 1.0) << dt << " " << R << "x" << K;
      const double n = double(R * K);
      EXPECT_LE(off_fast * n, std::max(2.0, 1e-3 * n)) << dt << " " << R << "x" << K;  // bytes that differ
      EXPECT_LE(worst_fast, 1.0) << dt << " " << R << "x" << K;
      const at::Tensor ds = (sf - s2).abs().div(s2);  // (R, 1)
      EXPECT_LE(ds.gt(0).sum().item<int64_t>(), std::max<int64_t>(1, R / 100)) << dt << " " << R << "x" << K;  // rows whose scale moved
      EXPECT_LE(ds.max().item<double>(), dt == at::kFloat ? 1e-6 : dt == at::kHalf ? 1.0 / 1024 : 1.0 / 128) << dt << " " << R << "x" << K;
    }
  }
}

// The FP8 MLP as sampling runs it (fused block ops on, as by default): ops::mlp with both layers
// registered takes mlp_fp8 and equals linear_fp8 ∘ bias_gelu ∘ linear_fp8 bit for bit (within FP8's
// rounding with NALA_FP8_FAST_GELU=1), which NALA_FP8_MLP_FUSED=0 runs.
TEST_F(LinearFp8Cuda, MlpTakesTheJoinedKernel) {
  const bool was_fused = fp8_mlp_fused(), was_fast = fp8_fast_gelu();
  set_fused_block_ops(true);
  set_fp8_mlp_fused(true);
  set_fp8_fast_gelu(false);
  torch::manual_seed(5);
  torch::nn::Linear fc1(384, 1536), fc2(1536, 384);
  fc1->to(at::kCUDA, at::kBFloat16);
  fc2->to(at::kCUDA, at::kBFloat16);
  ASSERT_EQ(use_fp8_linears({fc1.get(), fc2.get()}), 2);
  torch::NoGradGuard ng;
  const at::Tensor x = at::randn({4, 256, 384}, at::kCUDA).to(at::kBFloat16);  // (4, 256, 384)
  const int64_t before = mlp_fp8_calls();
  const at::Tensor fused = mlp(*fc1, *fc2, x);  // (4, 256, 384)
  EXPECT_EQ(mlp_fp8_calls() - before, 1) << "ops::mlp did not take mlp_fp8";
  const at::Tensor joined = mlp_fp8(x, *fp8_weight(fc1->weight), fc1->bias, *fp8_weight(fc2->weight), fc2->bias);  // (4, 256, 384)
  EXPECT_TRUE(at::equal(fused, joined));
  const at::Tensor composed = linear_fp8(bias_gelu(linear_fp8(x, *fp8_weight(fc1->weight), at::Tensor()), fc1->bias), *fp8_weight(fc2->weight),
                                         fc2->bias);  // (4, 256, 384)
  EXPECT_TRUE(at::equal(fused, composed));  // the accurate GELU (NALA_FP8_FAST_GELU=0): the same bits
  set_fp8_fast_gelu(true);
  const at::Tensor fast = mlp(*fc1, *fc2, x);  // (4, 256, 384)
  set_fp8_fast_gelu(was_fast);
  EXPECT_LT(rel(fast.to(at::kFloat), composed.to(at::kFloat)), 1e-2);
  set_fp8_mlp_fused(false);
  const int64_t before_off = mlp_fp8_calls();
  EXPECT_TRUE(at::equal(mlp(*fc1, *fc2, x), composed));
  EXPECT_EQ(mlp_fp8_calls(), before_off) << "NALA_FP8_MLP_FUSED=0 still took mlp_fp8";
  set_fp8_mlp_fused(was_fused);
}

// LayerNorm-modulate writing e4m3 rows for the next GEMM (FP8 sampling, NALA_FP8_LN_FUSED=1) against
// the two kernels it replaces, layer_norm_modulate then quantize_rows, bit for bit: bytes and
// scales; every dtype, the DiT widths (S 384, XL 1,152) and a narrow one, a ragged token count.
TEST_F(LinearFp8Cuda, LayerNormModulateQuantizeEqualsTheTwoKernels) {
  set_fused_block_ops(true);
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (auto [N, T, D] : {std::tuple<int64_t, int64_t, int64_t>{2, 256, 384}, {3, 17, 1152}, {1, 5, 72}, {128, 256, 1152}}) {
      torch::manual_seed(N * T + D);
      const at::Tensor x = (at::randn({N, T, D}, at::kCUDA) * 2 + 0.5).to(dt);              // (N, T, D)
      const at::Tensor shift = at::randn({N, D}, at::kCUDA), scale = at::randn({N, D}, at::kCUDA) * 0.5;  // (N, D)
      ASSERT_TRUE(cuda::layer_norm_modulate_supported(x, dt)) << dt << " " << D;
      auto [q, s] = cuda::layer_norm_modulate_quantize(x, shift, scale, 1e-6, dt);             // (N·T, D), (N·T, 1)
      const at::Tensor m = layer_norm_modulate(x, shift, scale, 1e-6);                          // (N, T, D) in dt
      ASSERT_EQ(m.scalar_type(), dt);
      auto [q2, s2] = cuda::quantize_rows(m.reshape({-1, D}).contiguous());
      EXPECT_TRUE(at::equal(q.view(at::kByte), q2.view(at::kByte))) << dt << " " << N << "x" << T << "x" << D;
      EXPECT_TRUE(at::equal(s, s2)) << dt << " " << N << "x" << T << "x" << D;
    }
  }
  // a float32 residual stream with a bf16 / fp16 result (autocast's pairing)
  for (auto out : {at::kBFloat16, at::kHalf}) {
    torch::manual_seed(11);
    const at::Tensor x = at::randn({2, 33, 384}, at::kCUDA) * 2;                                  // (N, T, D) float32
    const at::Tensor shift = at::randn({2, 384}, at::kCUDA), scale = at::randn({2, 384}, at::kCUDA);  // (N, D)
    auto [q, s] = cuda::layer_norm_modulate_quantize(x, shift, scale, 1e-6, out);
    const at::Tensor m = std::get<0>(cuda::layer_norm_modulate_forward(x, shift, scale, 1e-6, out, false));  // (N, T, D) in out
    auto [q2, s2] = cuda::quantize_rows(m.reshape({-1, 384}).contiguous());
    EXPECT_TRUE(at::equal(q.view(at::kByte), q2.view(at::kByte))) << out;
    EXPECT_TRUE(at::equal(s, s2)) << out;
  }
}

// The DiT forward in FP8 with LayerNorm-modulate quantizing qkv's (qkvg's) and fc1's input against
// the unfused FP8 forward on the GPU: bit for bit, softmax and NaLa blocks, each block taking the path.
TEST_F(LinearFp8Cuda, DitLayerNormQuantizedInputEqualsTheUnfusedForward) {
  set_fused_block_ops(true);
  for (const char* name : {"DiT-S/2", "NaLaDiT-S/2"}) {
    auto [model, x32, t, y] = nala::test::perturbed_dit(name);
    const auto& cfg = model->config();
    torch::NoGradGuard ng;
    model->to(at::kBFloat16);
    const at::Tensor x = x32.to(at::kBFloat16);
    ASSERT_EQ(model->use_fp8_linears(), 12 * 4 + 1) << name;
    const bool was = fp8_ln_fused();
    set_fp8_ln_fused(false);
    set_residual_norm_fused(false);  // the blocks one after another
    const at::Tensor unfused = model->forward(x, t, y);
    const int64_t calls0 = layer_norm_modulate_fp8_calls();
    set_fp8_ln_fused(true);
    const at::Tensor fused = model->forward(x, t, y);
    EXPECT_EQ(layer_norm_modulate_fp8_calls() - calls0, 2 * cfg.depth) << name;
    EXPECT_TRUE(at::equal(fused, unfused)) << name;
    // and with each gated residual in the LayerNorm-quantize after it (NALA_RESIDUAL_NORM_FUSED=1):
    // the same bits, every block's two e4m3 inputs from the joined kernels
    const int64_t calls1 = layer_norm_modulate_fp8_calls();
    set_residual_norm_fused(true);  // (its default)
    const at::Tensor chained = model->forward(x, t, y);
    set_fp8_ln_fused(was);
    EXPECT_EQ(layer_norm_modulate_fp8_calls() - calls1, 2 * cfg.depth) << name;
    EXPECT_TRUE(at::equal(chained, unfused)) << name << ": max |difference| " << (chained - unfused).abs().max().item<double>();
    clear_fp8_linears();
  }
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
