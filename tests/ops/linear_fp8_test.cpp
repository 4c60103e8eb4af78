// FP8 linear layers (ops/linear_fp8.h) on the CPU: the row quantization against a
// hand-written e4m3 rounding (plain C++ float and double arithmetic, no ATen), the layer against a
// float64 sum over the dequantized operands, and the registration that makes ops::linear
// take the FP8 path (only without gradients, only in the registered dtype, requantized when the
// weight changes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/linear.h"
#include "ops/linear_fp8.h"

using namespace nala::ops;

namespace {

// e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no infinities, largest 448,
// smallest normal 2^-6, subnormal step 2^-9) of a finite v with |v| ≤ 448: round to nearest, ties
// to even, by the grid spacing of v's binade.
double e4m3_round(double v) {
  const double a = std::fabs(v);
  if (a == 0) return 0;
  const int e = std::max(int(std::floor(std::log2(a))), -6);
  const double step = std::ldexp(1.0, e - 3);
  double r = std::nearbyint(a / step) * step;  // the default rounding mode: ties to even
  r = std::min(r, 448.0);
  return std::copysign(r, v);
}

// the definition's steps in float32 as written: s = max(amax, 1e-12) / 448, i = 448 / max(amax, 1e-12),
// x · i, clamp, round
std::vector<double> oracle_rows(const at::Tensor& x, std::vector<float>& scales) {
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  const int64_t R = xf.size(0), K = xf.size(1);
  const float* p = xf.data_ptr<float>();
  std::vector<double> q(R * K);
  scales.assign(R, 0);
  for (int64_t r = 0; r < R; ++r) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(p[r * K + k]));
    const float s = std::max(amax, 1e-12f) / 448.f, inv = 448.f / std::max(amax, 1e-12f);
    scales[r] = s;
    for (int64_t k = 0; k < K; ++k) {
      const float v = std::min(std::max(p[r * K + k] * inv, -448.f), 448.f);
      q[r * K + k] = e4m3_round(v);
    }
  }
  return q;
}

// rows with outliers, exact ties, subnormals and an all-zero row
at::Tensor awkward_rows(int64_t K) {
  at::Tensor x = at::randn({6, K}, at::kDouble);  // (6, K)
  x[1] *= 1e-3;
  x[1][0] = 50;                  // one outlier: most of the row subnormal in e4m3
  x[2].zero_();                  // scale 1e-12 / 448
  x[3].fill_(0);
  x[3][0] = 448;                 // s = 1: the row is e4m3 values and the midpoints between them
  for (int64_t k = 1; k < K; ++k) x[3][k] = (k % 2 ? 1.0625 : 1.1875) * std::pow(2.0, double(k % 7) - 3);  // ties
  x[4] *= 1e4;
  x[5] = x[5].abs() * -1;
  return x;
}

}  // namespace

TEST(QuantizeRowsFp8, MatchesHandWrittenE4m3Rounding) {
  torch::manual_seed(0);
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t K : {16, 48, 1152}) {
      at::Tensor x = awkward_rows(K).to(dt);
      if (dt == at::kHalf) x[4] /= 1e4;  // fp16 holds 65504 at most
      const Fp8Rows got = quantize_rows_fp8(x);
      ASSERT_EQ(got.q.scalar_type(), at::kFloat8_e4m3fn);
      ASSERT_EQ(got.scale.sizes(), (std::vector<int64_t>{6, 1}));
      std::vector<float> scales;
      const std::vector<double> want = oracle_rows(x, scales);
      const at::Tensor q = got.q.to(at::kDouble).contiguous(), s = got.scale.contiguous();
      int64_t wrong = 0;
      for (int64_t i = 0; i < int64_t(want.size()); ++i) wrong += q.data_ptr<double>()[i] != want[i];
      EXPECT_EQ(wrong, 0) << dt << " K " << K;
      for (int64_t r = 0; r < 6; ++r) EXPECT_EQ(s.data_ptr<float>()[r], scales[r]) << "row " << r;
    }
  }
}

TEST(QuantizeRowsFp8, TiesRoundToEven) {
  // s = 1 (amax 448): 1.0625 lies halfway between 1 and 1.125 (mantissa 000 and 001) -> 1;
  // 1.1875 halfway between 1.125 and 1.25 (001, 010) -> 1.25; 2^-10 halfway between 0 and 2^-9 -> 0
  at::Tensor x = at::tensor({448.0, 1.0625, 1.1875, -1.0625, 0.0009765625, 0.0029296875, 300.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}).view({1, 16});
  const at::Tensor q = quantize_rows_fp8(x).q.to(at::kDouble).view({16});
  const std::vector<double> want = {448, 1, 1.25, -1, 0, 0.00390625, 288, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q[i].item<double>(), want[i]) << "element " << i;
}

TEST(LinearFp8, EqualsFloat64SumOfDequantizedProducts) {
  torch::manual_seed(1);
  at::Tensor x = at::randn({3, 5, 64}), w = at::randn({32, 64}) * 0.1, b = at::randn({32});  // (3, 5, 64), (32, 64), (32)
  const Fp8Rows wq = quantize_rows_fp8(w);
  const at::Tensor y = linear_fp8(x, wq, b);  // (3, 5, 32)
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, 5, 32}));
  std::vector<float> sx, sw;
  const std::vector<double> qx = oracle_rows(x.view({15, 64}), sx), qw = oracle_rows(w, sw);
  at::Tensor want = at::empty({15, 32}, at::kDouble);
  for (int64_t r = 0; r < 15; ++r)
    for (int64_t o = 0; o < 32; ++o) {
      double acc = 0;
      for (int64_t k = 0; k < 64; ++k) acc += (qx[r * 64 + k] * sx[r]) * (qw[o * 64 + k] * sw[o]);
      want[r][o] = acc + b[o].item<double>();
    }
  const double e = (y.view({15, 32}).to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
  EXPECT_LT(e, 1e-6);  // float32 accumulation of 64 products
  // and FP8 is not the exact layer: a Gaussian input's error is a few percent, not zero
  const double err = ((y - at::linear(x, w, b)).norm() / at::linear(x, w, b).norm()).item<double>();
  EXPECT_GT(err, 1e-3);
  EXPECT_LT(err, 0.08);
  // no rows
  EXPECT_EQ(linear_fp8(at::randn({0, 64}), wq, b).sizes(), (std::vector<int64_t>{0, 32}));
}

TEST(LinearFp8, RegisteredLayersTakeThePathOnlyWithoutGradients) {
  clear_fp8_linears();
  torch::manual_seed(2);
  torch::nn::Sequential m(torch::nn::Linear(64, 32), torch::nn::Linear(32, 8), torch::nn::Linear(8, 16));
  auto* l0 = m[0]->as<torch::nn::Linear>();
  auto* l1 = m[1]->as<torch::nn::Linear>();
  EXPECT_EQ(use_fp8_linears({l0, l1, m[2]->as<torch::nn::Linear>()}), 1);  // 32 -> 8 and 8 -> 16 have a dimension that is no multiple of 16
  EXPECT_NE(fp8_weight(l0->weight), nullptr);
  EXPECT_EQ(fp8_weight(l1->weight), nullptr);
  at::Tensor x = at::randn({4, 64});
  at::Tensor want = linear_fp8(x, quantize_rows_fp8(l0->weight.detach()), l0->bias.detach());
  {
    torch::NoGradGuard ng;
    EXPECT_TRUE(at::equal(linear(*l0, x), want));
    at::Tensor x1 = at::randn({4, 32});
    EXPECT_TRUE(at::equal(linear(*l1, x1), at::linear(x1, l1->weight, l1->bias)));  // not registered: the exact layer
  }
  // with a gradient wanted (training), the exact layer
  at::Tensor exact = linear(*l0, x);
  EXPECT_TRUE(exact.requires_grad());
  EXPECT_TRUE(at::allclose(exact, at::linear(x, l0->weight, l0->bias)));
  torch::NoGradGuard ng;
  // a weight changed in place is quantized again
  l0->weight.mul_(2);
  EXPECT_TRUE(at::equal(linear(*l0, x), linear_fp8(x, quantize_rows_fp8(l0->weight), l0->bias)));
  // in another dtype than registered (an fp64 reference run), the exact layer; back in float32, FP8 again
  m->to(at::kDouble);
  EXPECT_TRUE(at::allclose(linear(*l0, x.to(at::kDouble)), at::linear(x.to(at::kDouble), l0->weight, l0->bias)));
  m->to(at::kFloat);
  EXPECT_TRUE(at::equal(linear(*l0, x), linear_fp8(x, quantize_rows_fp8(l0->weight), l0->bias)));
  EXPECT_TRUE(at::equal(linear_without_bias(*l0, x), linear_fp8(x, quantize_rows_fp8(l0->weight), at::Tensor())));
  clear_fp8_linears();
  EXPECT_EQ(fp8_weight(l0->weight), nullptr);
  EXPECT_TRUE(at::allclose(linear(*l0, x), at::linear(x, l0->weight, l0->bias)));
}

// fc1's bias and GELU joined to fc2's row quantization (bias_gelu_quantize_rows_fp8, the CPU twin)
// against the definition written out in plain C++: h = GELU_tanh(x + b) in double, rounded to x's
// dtype through ATen's cast, then the hand-written e4m3 rounding. GELU in float (the twin) and in
// double can differ in h's last bit, which may move a value across an e4m3 rounding midpoint: at
// most one e4m3 step, in a handful of elements.
TEST(QuantizeRowsFp8, BiasGeluJoinedEqualsTheDefinition) {
  torch::manual_seed(3);
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    const int64_t R = 9, K = 96;
    at::Tensor x = (at::randn({R, K}, at::kDouble) * 3).to(dt), b = at::randn({K}, at::kDouble);  // (R, K), (K)
    x[4].zero_();                                                                                 // h = GELU(b) alone
    const Fp8Rows got = bias_gelu_quantize_rows_fp8(x, b.to(at::kFloat));
    at::Tensor h = at::empty({R, K}, at::kDouble);
    const at::Tensor xd = x.to(at::kDouble).contiguous();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const double u = xd[r][k].item<double>() + double(b[k].item<float>());
        h[r][k] = 0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
      }
    std::vector<float> scales;
    const std::vector<double> want = oracle_rows(h.to(dt), scales);
    const at::Tensor q = got.q.to(at::kDouble).contiguous();
    int64_t off = 0;
    double worst_step = 0;
    for (int64_t i = 0; i < R * K; ++i) {
      const double d = std::fabs(q.data_ptr<double>()[i] - want[i]);
      if (d == 0) continue;
      ++off;
      const double a = std::max(std::fabs(want[i]), 1e-30);
      worst_step = std::max(worst_step, d / std::ldexp(1.0, std::max(int(std::floor(std::log2(a))), -6) - 3));
    }
    EXPECT_LE(off, R * K / 100) << dt;        // a handful of midpoint cases at most
    EXPECT_LE(worst_step, 1.0 + 1e-9) << dt;  // each one e4m3 step
    for (int64_t r = 0; r < R; ++r) EXPECT_NEAR(got.scale[r][0].item<float>(), scales[r], 1e-6 * scales[r]) << dt << " row " << r;
  }
}

// The FP8 MLP (what ops::mlp runs when sampling on CUDA with fc1 and fc2 registered): its CPU twin
// against a float64 sum over the dequantized operands of each step, and within FP8's error of the
// exact float32 MLP.
TEST(LinearFp8, MlpEqualsItsStepsInFloat64) {
  torch::manual_seed(4);
  const int64_t D = 32, H = 128;
  at::Tensor x = at::randn({2, 7, D}), w1 = at::randn({H, D}) * 0.2, b1 = at::randn({H}) * 0.1, w2 = at::randn({D, H}) * 0.1,
             b2 = at::randn({D});
  const Fp8Rows q1 = quantize_rows_fp8(w1), q2 = quantize_rows_fp8(w2);
  const at::Tensor y = mlp_fp8(x, q1, b1, q2, b2);  // (2, 7, D)
  ASSERT_EQ(y.sizes(), x.sizes());
  // fc1 without bias as the twin computes it (float32 products of the dequantized operands: the
  // joined step's input must be the same bits), then the joined step, then fc2 in float64
  auto deq = [](const Fp8Rows& r) { return r.q.to(at::kDouble) * r.scale.to(at::kDouble); };
  const Fp8Rows qx = quantize_rows_fp8(x.view({14, D}));
  const at::Tensor a = at::linear(qx.q.to(at::kFloat) * qx.scale, q1.q.to(at::kFloat) * q1.scale);  // (14, H)
  const Fp8Rows qh = bias_gelu_quantize_rows_fp8(a, b1);
  const at::Tensor want = at::matmul(deq(qh), deq(q2).t()) + b2.to(at::kDouble);  // (14, D)
  EXPECT_LT(((y.view({14, D}).to(at::kDouble) - want).abs().max() / want.abs().max()).item<double>(), 1e-5);
  const at::Tensor exact = at::linear(at::gelu(at::linear(x, w1, b1), "tanh"), w2, b2);
  const double err = ((y - exact).norm() / exact.norm()).item<double>();
  EXPECT_GT(err, 1e-3);  // FP8, not the exact MLP
  EXPECT_LT(err, 0.1);
  EXPECT_EQ(mlp_fp8(at::randn({0, D}), q1, b1, q2, b2).sizes(), (std::vector<int64_t>{0, D}));
}
