// split_heads: the views equal unbind's, and the one-pass backward equals autograd's backward of
// unbind (stack + copy), with parts unused (zero gradient) and transposed consumers; a repeated
// part's two gradients equal autograd's sum of one part read twice.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/fused_ops.h"
#include "ops/split_heads.h"

using namespace nala::ops;

TEST(SplitHeads, EqualsUnbindForwardAndBackward) {
  torch::manual_seed(0);
  for (int P : {3, 4}) {
    at::Tensor t0 = at::randn({2, 5, P, 3, 8}, at::kDouble);
    std::vector<at::Tensor> w;
    for (int i = 0; i < P; ++i) w.push_back(at::randn({2, 3, 5, 8}, at::kDouble));
    auto run = [&](bool ours) {
      at::Tensor t = t0.clone().requires_grad_(true);
      std::vector<at::Tensor> parts = ours ? split_heads(t) : t.unbind(2);
      at::Tensor loss = at::zeros({}, at::kDouble);
      for (int i = 0; i < P; ++i) {
        EXPECT_EQ(parts[i].sizes(), (at::IntArrayRef{2, 5, 3, 8}));
        if (i == 1) continue;  // an unused part: its gradient is zero
        loss = loss + (parts[i].transpose(1, 2) * w[i]).sum();  // consumed as (B, H, N, d), as attention does
      }
      loss.backward();
      return t.grad();
    };
    at::Tensor a = run(true), b = run(false);
    EXPECT_TRUE(at::equal(a, b)) << "P=" << P;
    EXPECT_TRUE(at::equal(split_heads(t0)[P - 1], t0.select(2, P - 1)));
  }
  EXPECT_THROW(split_heads(at::randn({2, 5, 8})), std::exception);
}

TEST(SplitHeads, RepeatedPartGradientsAdd) {
  torch::manual_seed(1);
  for (auto dt : {at::kDouble, at::kBFloat16}) {
    at::Tensor t0 = at::randn({2, 5, 4, 3, 8}).to(dt);
    at::Tensor w_attn = at::randn({2, 3, 5, 8}).to(dt), w_tail = at::randn({2, 5, 24}).to(dt), w_q = at::randn({2, 5, 3, 8}).to(dt);
    // ours: v (part 2) read as parts[2] by one consumer and as parts[4] by the other; autograd's
    // own: unbind's parts[2] read by both (its two gradients summed by autograd, in dt)
    auto run = [&](bool ours) {
      at::Tensor t = t0.clone().requires_grad_(true);
      std::vector<at::Tensor> parts = ours ? split_heads(t, 2) : t.unbind(2);
      EXPECT_EQ(parts.size(), ours ? 5u : 4u);
      const at::Tensor& v2 = ours ? parts[4] : parts[2];
      at::Tensor loss = (parts[2].transpose(1, 2) * w_attn).sum() + (v2.reshape({2, 5, 24}) * w_tail).sum() + (parts[0] * w_q).sum();
      loss.backward();
      return t.grad();
    };
    at::Tensor a = run(true), b = run(false);
    EXPECT_TRUE(at::equal(a, b)) << dt;
    // only the second consumer uses v: its gradient alone
    at::Tensor t = t0.clone().requires_grad_(true);
    auto parts = split_heads(t, 2);
    (parts[4] * parts[4]).sum().backward();
    EXPECT_TRUE(at::equal(t.grad().select(2, 2), 2 * t0.select(2, 2)));
    EXPECT_TRUE(at::equal(t.grad().select(2, 1), at::zeros_like(t0.select(2, 1))));
  }
  EXPECT_THROW(split_heads(at::randn({2, 5, 4, 3, 8}), 4), std::exception);
}

// linear_split_heads_op (the projection and the split as one operation, whose backward takes the bias
// gradient from the gathered gradient) against autograd of at::linear and unbind in float64: the parts
// and the gradients of x, w and b, with a part unused and with a repeated part read by two consumers
// (the gated NaLa block's v), float32 within its rounding; linear_split_heads on the CPU, where the one
// operation does not apply (training on CUDA only), is the composition itself with the switch on or off.
TEST(SplitHeads, LinearSplitHeadsEqualsTheComposition) {
  torch::manual_seed(2);
  for (auto dt : {at::kDouble, at::kFloat})
    for (auto [P, repeat] : {std::pair<int64_t, int64_t>{3, -1}, {4, 2}}) {
      const int64_t B = 2, N = 5, H = 3, d = 8, D = 12;
      const at::Tensor x0 = at::randn({B, N, D}, at::kDouble), w0 = at::randn({P * H * d, D}, at::kDouble) * 0.3, b0 = at::randn({P * H * d}, at::kDouble);
      std::vector<at::Tensor> wt;
      for (int64_t i = 0; i < P + 1; ++i) wt.push_back(at::randn({B, H, N, d}, at::kDouble));
      auto run = [&](bool ours, at::ScalarType t) {
        at::Tensor x = x0.to(t).requires_grad_(true), w = w0.to(t).requires_grad_(true), b = b0.to(t).requires_grad_(true);
        std::vector<at::Tensor> parts = ours ? linear_split_heads_op(x, w, b, P, H, repeat) : at::linear(x, w, b).view({B, N, P, H, d}).unbind(2);
        EXPECT_EQ(parts.size(), size_t(ours && repeat >= 0 ? P + 1 : P));
        at::Tensor loss = at::zeros({}, x.options());
        for (int64_t i = 0; i < P; ++i)
          if (i != 1) loss = loss + (parts[size_t(i)].transpose(1, 2) * wt[size_t(i)].to(t)).sum();  // part 1 unused
        if (repeat >= 0) {  // the repeated part's second consumer (ours: its own view; autograd: the same part again)
          const at::Tensor& second = ours ? parts[size_t(P)] : parts[size_t(repeat)];
          loss = loss + (second.reshape({B, N, H * d}) * second.reshape({B, N, H * d})).sum();
        }
        loss.backward();
        std::vector<at::Tensor> r;
        for (int64_t i = 0; i < P; ++i) r.push_back(parts[size_t(i)].detach().to(at::kDouble));
        for (const at::Tensor& g : {x.grad(), w.grad(), b.grad()}) r.push_back(g.to(at::kDouble));
        return r;
      };
      const auto ours = run(true, dt), plain = run(false, dt), truth = run(false, at::kDouble);
      for (size_t i = 0; i < ours.size(); ++i) {
        const double scale = truth[i].abs().max().item<double>();
        const double err = (ours[i] - truth[i]).abs().max().item<double>() / scale, err_plain = (plain[i] - truth[i]).abs().max().item<double>() / scale;
        if (dt == at::kDouble) EXPECT_LT(err, 1e-13) << "output " << i << " P=" << P;
        else EXPECT_LE(err, 2 * err_plain + 1e-6) << "output " << i << " P=" << P << " (the composition's error " << err_plain << ")";
      }
    }
  // on the CPU: the composition, the same tensors bit for bit
  torch::nn::Linear m(12, 3 * 2 * 4);
  const at::Tensor x = at::randn({2, 5, 12});
  const auto ref = at::linear(x, m->weight, m->bias).view({2, 5, 3, 2, 4}).unbind(2);
  for (bool on : {false, true}) {
    set_split_heads_bias_sums(on);
    const auto parts = linear_split_heads(*m, x, 3, 2);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(parts[size_t(i)], ref[size_t(i)]));
  }
  reset_split_heads_bias_sums();
  EXPECT_THROW(linear_split_heads_op(x, m->weight, m->bias, 3, 5), std::exception);  // 24 outputs are not 3 parts of 5 heads
  EXPECT_THROW(linear_split_heads_op(x, m->weight, at::Tensor(), 3, 2), std::exception);
}

// Gradients that arrive already in the projection's layout (views of one (B, N, P, H, d) buffer, as
// nala_mixer writes them with NALA_QKVG_GRADS_IN_PLACE) are taken as they are, no gather: the input,
// weight and bias gradients equal those from the same values as separate tensors (gathered), bit for
// bit on the CPU (the same GEMMs and column sum of the same values), and the backward counts itself.
// Views of the wrong layout, a second gradient of the repeated part, or separate tensors are gathered.
TEST(SplitHeads, GradientsAlreadyInTheProjectionLayoutAreTakenAsTheyAre) {
  torch::manual_seed(3);
  const int64_t B = 2, N = 5, P = 4, H = 3, d = 4, D = 6;
  torch::nn::Linear m(D, P * H * d);
  const at::Tensor x0 = at::randn({B, N, D});
  const at::Tensor buf = at::randn({B, N, P, H, d});  // the gradients, in the projection's layout
  for (int64_t repeat : {int64_t(-1), int64_t(2)}) {
    // kind 0: views of buf; 1: separate contiguous copies of the same values; 2: views of buf's transpose (wrong layout);
    // 3: views of buf, and a second gradient of the repeated part
    auto run = [&](int kind) {
      const at::Tensor x = x0.clone().requires_grad_(true);
      m->zero_grad();
      const auto parts = linear_split_heads_op(x, m->weight, m->bias, P, H, repeat);  // P (+1) × (B, N, H, d)
      std::vector<at::Tensor> outs, grads;
      const at::Tensor src = kind == 2 ? buf.transpose(0, 1).contiguous().transpose(0, 1) : buf;  // the same values, other strides
      for (int64_t i = 0; i < P; ++i) {
        outs.push_back(parts[size_t(i)]);
        grads.push_back(kind == 1 ? src.select(2, i).contiguous() : src.select(2, i));
      }
      if (kind == 3) {
        outs.push_back(parts[size_t(P)]);
        grads.push_back(at::ones({B, N, H, d}));
      }
      const int64_t before = split_heads_assembled_backwards();
      torch::autograd::backward(outs, grads);
      const bool taken = split_heads_assembled_backwards() > before;
      return std::make_tuple(taken, x.grad().clone(), m->weight.grad().clone(), m->bias.grad().clone());
    };
    const auto [taken0, dx0, dw0, db0] = run(0);
    const auto [taken1, dx1, dw1, db1] = run(1);
    const auto [taken2, dx2, dw2, db2] = run(2);
    EXPECT_TRUE(taken0) << "repeat " << repeat << ": views of one buffer in the layout not taken";
    EXPECT_FALSE(taken1) << "repeat " << repeat << ": separate tensors taken as one buffer";
    EXPECT_FALSE(taken2) << "repeat " << repeat << ": views in another layout taken";
    for (const auto& [a, b, name] : {std::tuple{dx0, dx1, "x"}, {dw0, dw1, "weight"}, {db0, db1, "bias"}, {dx2, dx1, "x (other layout)"},
                                     {dw2, dw1, "weight (other layout)"}, {db2, db1, "bias (other layout)"}})
      EXPECT_TRUE(at::equal(a, b)) << "repeat " << repeat << ", " << name << " gradient: " << (a - b).abs().max().item<double>();
    if (repeat >= 0) {
      const auto [taken3, dx3, dw3, db3] = run(3);
      EXPECT_FALSE(taken3) << "a second gradient of the repeated part must be added by the gather";
      EXPECT_FALSE(at::equal(dx3, dx1)) << "the repeated part's second gradient was dropped";
    }
  }
}

// offer_parts_column_sums: sums offered with the very buffer whose views come back as the parts'
// gradients become the bias gradient (counted), once: the next backward with the same buffer, and one
// whose buffer is another tensor of the same values, take the column sum. x's and w's gradients never
// change. Sums of the wrong size are an error naming the sizes.
TEST(SplitHeads, OfferedColumnSumsBecomeTheBiasGradient) {
  torch::manual_seed(5);
  const int64_t B = 2, N = 5, P = 4, H = 3, d = 4, D = 6;
  torch::nn::Linear m(D, P * H * d);
  const at::Tensor x0 = at::randn({B, N, D});
  const at::Tensor buf = at::randn({B, N, P, H, d}), twin = buf.clone();  // the gradients, in the projection's layout
  const at::Tensor column_sum = buf.to(at::kDouble).reshape({B * N, -1}).sum(0);  // (P·H·d), the oracle in float64
  const at::Tensor offer = at::arange(P * H * d, at::kFloat) + 0.5;          // values no column sum has here
  auto run = [&](const at::Tensor& src) {
    const at::Tensor x = x0.clone().requires_grad_(true);
    m->zero_grad();
    const auto parts = linear_split_heads_op(x, m->weight, m->bias, P, H);  // P × (B, N, H, d)
    std::vector<at::Tensor> grads;
    for (int64_t i = 0; i < P; ++i) grads.push_back(src.select(2, i));
    const int64_t before = split_heads_offered_sums_taken();
    torch::autograd::backward({parts.begin(), parts.end()}, grads);
    return std::make_tuple(split_heads_offered_sums_taken() - before, x.grad().clone(), m->weight.grad().clone(), m->bias.grad().clone());
  };
  offer_parts_column_sums(buf, offer);
  const auto [taken, dx, dw, db] = run(buf);
  EXPECT_EQ(taken, 1) << "the offer for this very buffer was not taken";
  EXPECT_TRUE(at::equal(db, offer)) << "the bias gradient is not the offered sums";
  const auto [taken_again, dx_again, dw_again, db_again] = run(buf);
  EXPECT_EQ(taken_again, 0) << "an offer was taken twice";
  EXPECT_LT((db_again.to(at::kDouble) - column_sum).abs().max().item<double>(), 1e-4) << "without an offer: the column sum";
  offer_parts_column_sums(buf, offer);
  const auto [taken_twin, dx_twin, dw_twin, db_twin] = run(twin);
  EXPECT_EQ(taken_twin, 0) << "an offer for another buffer was taken";
  EXPECT_TRUE(at::equal(db_twin, db_again));
  for (const auto& [a, b, name] : {std::tuple{dx, dx_again, "x"}, {dw, dw_again, "weight"}, {dx_twin, dx_again, "x (twin)"}, {dw_twin, dw_again, "weight (twin)"}})
    EXPECT_TRUE(at::equal(a, b)) << name << " gradient changed with the offer";
  EXPECT_THROW(offer_parts_column_sums(buf, at::zeros({P * H * d + 1})), c10::Error);
}

// The same for split_heads alone (no projection): parts' gradients that are views of one buffer in
// the (B, N, P, H, d) layout, here at a non-zero storage offset, come back as that buffer, equal to the
// gathered result of the same values; a second gradient of the repeated part is gathered and added.
TEST(SplitHeads, SplitAloneTakesGradientsAlreadyInItsLayout) {
  torch::manual_seed(4);
  const int64_t B = 2, N = 3, P = 4, H = 2, d = 4;
  const at::Tensor big = at::randn({B + 1, N, P, H, d});
  const at::Tensor buf = big.narrow(0, 1, B);  // (B, N, P, H, d) at storage offset N·P·H·d
  ASSERT_GT(buf.storage_offset(), 0);
  for (int64_t repeat : {int64_t(-1), int64_t(1)}) {
    for (bool second : {false, true}) {
      if (second && repeat < 0) continue;
      const at::Tensor t = at::randn({B, N, P, H, d}).requires_grad_(true);
      const auto parts = split_heads(t, repeat);
      std::vector<at::Tensor> outs(parts.begin(), parts.begin() + P), grads;
      for (int64_t i = 0; i < P; ++i) grads.push_back(buf.select(2, i));
      if (second) {
        outs.push_back(parts[size_t(P)]);
        grads.push_back(at::ones({B, N, H, d}));
      }
      const int64_t before = split_heads_assembled_backwards();
      torch::autograd::backward(outs, grads);
      EXPECT_EQ(split_heads_assembled_backwards() - before, second ? 0 : 1) << "repeat " << repeat << ", second gradient " << second;
      at::Tensor expect = buf.clone();
      if (second) expect.select(2, repeat).add_(1);
      EXPECT_TRUE(at::equal(t.grad(), expect)) << "repeat " << repeat << ", second gradient " << second;
    }
  }
}
