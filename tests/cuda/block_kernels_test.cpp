// The fused DiT block kernels (ops/cuda/) against float64 truth and against the plain ATen
// composition run on the GPU in the same dtypes: fp32 within 1e-5 relative; bf16/fp16 within 2x of
// the composition's own error (+ a floor of one rounding). Forward and backward, awkward sizes,
// the adaLN chunks as strided views, bitwise repeatable; then a whole DiT-S/2 step fused vs unfused.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "cuda_test_util.h"

#include "ops/block_ops.h"
#include "ops/cuda/block_cuda.h"
#include "ops/cuda/block_kernels.h"
#include "models/dit.h"
#include "ops/offered_sums.h"
#include "ops/split_heads.h"

using namespace nala::ops;
using namespace nala::models;

namespace {

using nala::test::Autocast;
using nala::test::rel;

struct Outs {
  at::Tensor out, dx, da, db;
};

// op(x, a, b) with a, b chunks of one (N, 6D) tensor (the adaLN layout); backward of <out, w>
template <typename F>
Outs run(F op, const at::Tensor& x0, const at::Tensor& ab0, const at::Tensor& w, bool autocast) {
  at::Tensor x = x0.detach().clone().requires_grad_(true), ab = ab0.detach().clone().requires_grad_(true);
  const int64_t D = x.size(2);
  at::Tensor out;
  {
    Autocast ac(autocast);
    out = op(x, ab.narrow(1, 0, D), ab.narrow(1, 2 * D, D));
  }
  (out.to(at::kFloat) * w.to(at::kFloat)).sum().backward();
  at::Tensor g = ab.grad();
  return {out.detach(), x.grad(), g.narrow(1, 0, D), g.narrow(1, 2 * D, D)};
}

struct Case {
  const char* name;
  at::ScalarType x, mod;  // x's dtype; adaLN output's (and the branch's) dtype
  bool autocast;
};

void check(const char* what, const Outs& fused, const Outs& plain, const Outs& truth, double floor_err, double fp32_tol, bool fp32) {
  const char* names[] = {"out", "dx", "d(first)", "d(second)"};
  const at::Tensor* f[] = {&fused.out, &fused.dx, &fused.da, &fused.db};
  const at::Tensor* p[] = {&plain.out, &plain.dx, &plain.da, &plain.db};
  const at::Tensor* t[] = {&truth.out, &truth.dx, &truth.da, &truth.db};
  for (int i = 0; i < 4; ++i) {
    const double ef = rel(*f[i], *t[i]), ep = rel(*p[i], *t[i]);
    std::printf("  %-34s %-9s fused err %.2e  composition err %.2e\n", what, names[i], ef, ep);
    if (fp32) EXPECT_LT(ef, fp32_tol) << what << " " << names[i];
    else EXPECT_LE(ef, 2 * ep + floor_err) << what << " " << names[i];
  }
}

class BlockKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
    set_fused_block_ops(true);
  }
};

}  // namespace

TEST_F(BlockKernels, LayerNormModulateAndGatedResidual) {
  const Case cases[] = {{"fp32", at::kFloat, at::kFloat, false},
                        {"autocast (fp32 x, bf16 out)", at::kFloat, at::kBFloat16, true},
                        {"bf16", at::kBFloat16, at::kBFloat16, false},
                        {"fp16", at::kHalf, at::kHalf, false}};
  // D = 1024 and 576: rows whose lanes' last vectors lie past the row (clamped loads, never summed or stored)
  for (auto [N, T, D] : {std::tuple{4, 256, 384}, std::tuple{3, 37, 1152}, std::tuple{2, 5, 72}, std::tuple{1, 300, 1536}, std::tuple{2, 9, 1024},
                         std::tuple{1, 7, 576}}) {
    torch::manual_seed(N * 1000 + D);
    at::Tensor x64 = at::randn({N, T, D}, at::kDouble) * 2 + 0.5, ab64 = at::randn({N, 6 * D}, at::kDouble) * 0.5;
    at::Tensor w64 = at::randn({N, T, D}, at::kDouble), y64 = at::randn({N, T, D}, at::kDouble);
    for (const Case& c : cases) {
      const auto cu = at::TensorOptions().device(at::kCUDA);
      at::Tensor x = x64.to(cu.dtype(c.x)), ab = ab64.to(cu.dtype(c.mod)), w = w64.to(cu.dtype(at::kFloat)), y = y64.to(cu.dtype(c.mod));
      // the truth: these very (rounded) inputs in float64
      auto d = [](const at::Tensor& t) { return t.to(at::kDouble).cpu(); };
      char what[96];
      std::snprintf(what, sizeof what, "LN+modulate %dx%dx%d %s", N, T, D, c.name);
      {
        auto fused = [](const auto& x, const auto& s, const auto& c) { return layer_norm_modulate(x, s, c, 1e-6); };
        auto plain = [](const auto& x, const auto& s, const auto& c) { return layer_norm_modulate_reference(x, s, c, 1e-6); };
        Outs f = run(fused, x, ab, w, c.autocast), p = run(plain, x, ab, w, c.autocast), t = run(plain, d(x), d(ab), d(w), false);
        if (c.autocast) EXPECT_EQ(f.out.scalar_type(), at::kBFloat16);  // what the next GEMM reads
        Outs f2 = run(fused, x, ab, w, c.autocast);
        EXPECT_TRUE(at::equal(f.out, f2.out) && at::equal(f.dx, f2.dx) && at::equal(f.da, f2.da) && at::equal(f.db, f2.db)) << what << ": not repeatable";
        check(what, f, p, t, c.x == at::kFloat && c.mod == at::kFloat ? 0 : 8e-3, 1e-5, c.mod == at::kFloat);
      }
      std::snprintf(what, sizeof what, "gated residual %dx%dx%d %s", N, T, D, c.name);
      {
        // x, gate (a strided chunk of adaLN's output) and the branch output y, each a leaf
        auto go = [&](bool use_fused, const at::Tensor& x0, const at::Tensor& g0, const at::Tensor& y0, const at::Tensor& w0) {
          at::Tensor xx = x0.detach().clone().requires_grad_(true), gg = g0.detach().clone().requires_grad_(true), yy = y0.detach().clone().requires_grad_(true);
          at::Tensor o = use_fused ? gated_residual(xx, gg, yy) : gated_residual_reference(xx, gg, yy);
          (o.to(at::kFloat) * w0.to(o.device()).to(at::kFloat)).sum().backward();
          return Outs{o.detach(), xx.grad(), gg.grad(), yy.grad()};
        };
        at::Tensor gate = ab.narrow(1, 2 * D, D);  // a strided view, as adaLN's chunk
        Outs f = go(true, x, gate, y, w), p = go(false, x, gate, y, w), t = go(false, d(x), d(gate), d(y), d(w));
        Outs f2 = go(true, x, gate, y, w);
        EXPECT_TRUE(at::equal(f.out, f2.out) && at::equal(f.da, f2.da) && at::equal(f.db, f2.db)) << what << ": not repeatable";
        check(what, f, p, t, c.x == at::kFloat && c.mod == at::kFloat ? 0 : 8e-3, 1e-6, c.mod == at::kFloat);
      }
    }
  }
}

// LayerNorm-modulate with x also taken as the residual (the blocks' layer_norm_modulate_residual): the
// residual's gradient is added in the kernel's backward (loaded before the row reductions up to 6 vectors
// a lane, after them beyond: D = 1024, 1152, 1536), against the composition in float64, fp32 and under
// bf16 autocast, with rows whose last vectors lie past the row (1024, 576)
TEST_F(BlockKernels, LayerNormModulateResidualGradient) {
  for (auto [N, T, D] : {std::tuple{2, 9, 1024}, std::tuple{1, 7, 576}, std::tuple{3, 37, 1152}, std::tuple{2, 64, 384}, std::tuple{1, 5, 1536}}) {
    torch::manual_seed(N * 100 + D);
    const at::Tensor x64 = at::randn({N, T, D}, at::kDouble) * 2 + 0.5, ab64 = at::randn({N, 6 * D}, at::kDouble) * 0.5;
    const at::Tensor w64 = at::randn({N, T, D}, at::kDouble), r64 = at::randn({N, T, D}, at::kDouble);  // ∂L/∂modulated, ∂L/∂residual
    for (bool autocast : {false, true}) {
      const auto cu = at::TensorOptions().device(at::kCUDA);
      const at::Tensor x = x64.to(cu.dtype(at::kFloat)), ab = ab64.to(cu.dtype(autocast ? at::kBFloat16 : at::kFloat));
      const at::Tensor w = w64.to(cu.dtype(at::kFloat)), rw = r64.to(cu.dtype(at::kFloat));
      auto go = [&](bool fused, const at::Tensor& x0, const at::Tensor& ab0, const at::Tensor& w0, const at::Tensor& rw0, bool ac) {
        at::Tensor xx = x0.detach().clone().requires_grad_(true), aa = ab0.detach().clone().requires_grad_(true);
        at::Tensor out, res;
        {
          Autocast scope(ac);
          if (fused) {
            const auto mr = layer_norm_modulate_residual(xx, aa.narrow(1, 0, D), aa.narrow(1, 2 * D, D), 1e-6);
            out = mr.modulated, res = mr.residual;
          } else {
            out = layer_norm_modulate_reference(xx, aa.narrow(1, 0, D), aa.narrow(1, 2 * D, D), 1e-6), res = xx;
          }
        }
        ((out.to(w0.scalar_type()) * w0).sum() + (res.to(rw0.scalar_type()) * rw0).sum()).backward();
        const at::Tensor g = aa.grad();
        return Outs{out.detach(), xx.grad(), g.narrow(1, 0, D), g.narrow(1, 2 * D, D)};
      };
      auto d = [](const at::Tensor& t) { return t.to(at::kDouble).cpu(); };
      const Outs f = go(true, x, ab, w, rw, autocast), p = go(false, x, ab, w, rw, autocast), t = go(false, d(x), d(ab), d(w), d(rw), false);
      char what[96];
      std::snprintf(what, sizeof what, "LN+modulate+residual %dx%dx%d %s", N, T, D, autocast ? "autocast" : "fp32");
      check(what, f, p, t, autocast ? 8e-3 : 0, 1e-5, !autocast);
    }
  }
}

TEST_F(BlockKernels, DiTStepFusedEqualsUnfused) {
  // a DiT-S/2 (the NaLa variant too) forward + backward on a batch, bf16 autocast and fp32: the
  // fused path against the plain composition (NALA_FUSED_BLOCKS=0), loss and every gradient
  for (const char* name : {"DiT-S/2", "NaLaDiT-S/2"}) {
    ModelConfig mc = model_config(name);
    mc.input_size = 32;
    mc.in_channels = 4;
    mc.num_classes = 10;
    torch::manual_seed(7);
    DiT model(mc);
    model.to(at::kCUDA);
    model.eval();  // no label dropout: both passes see the same labels
    {  // non-zero adaLN and final layers, so every path carries signal
      torch::NoGradGuard ng;
      for (auto& p : model.parameters()) p.add_(at::randn_like(p) * 0.02);
    }
    at::Tensor x = at::randn({8, 4, 32, 32}, at::kCUDA), t = at::randint(0, 1000, {8}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
    at::Tensor y = at::randint(0, 10, {8}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong)), w = at::randn({8, 8, 32, 32}, at::kCUDA);
    for (bool bf16 : {false, true}) {
      auto step = [&](bool fused) {
        set_fused_block_ops(fused);
        model.zero_grad();
        at::Tensor out;
        {
          Autocast ac(bf16);
          out = model.forward(x, t, y);
        }
        at::Tensor loss = (out.to(at::kFloat) * w).mean();
        loss.backward();
        std::vector<at::Tensor> g;
        for (auto& p : model.parameters())
          if (p.grad().defined()) g.push_back(p.grad().flatten().clone());
        return std::pair{out.detach().to(at::kFloat), at::cat(g)};
      };
      auto [of, gf] = step(true);
      auto [op, gp] = step(false);
      const double eo = rel(of, op), eg = rel(gf, gp);
      std::printf("  %s %s: output rel L2 %.2e, gradients rel L2 %.2e (fused vs unfused)\n", name, bf16 ? "bf16 autocast" : "fp32", eo, eg);
      EXPECT_LT(eo, bf16 ? 2e-2 : 1e-5) << name;
      EXPECT_LT(eg, bf16 ? 5e-2 : 1e-4) << name;
    }
  }
  set_fused_block_ops(true);
}

TEST_F(BlockKernels, SplitHeadsGatherEqualsTheCopies) {
  // the gather kernel against the CPU path (strided copies), bf16 and fp32, a part unused, the
  // gradients in SDPA's (B, H, N, d) layout and in the projection's own
  for (auto dt : {at::kBFloat16, at::kFloat}) {
    for (int P : {3, 4}) {
      at::Tensor t0 = at::randn({3, 37, P, 6, 64}, at::TensorOptions().dtype(dt).device(at::kCUDA));
      auto run = [&](const at::Tensor& base) {
        at::Tensor t = base.clone().requires_grad_(true);
        auto parts = nala::ops::split_heads(t);
        at::Tensor loss = (parts[0].transpose(1, 2).contiguous().to(at::kFloat) * 1.5).sum() + (parts[2].to(at::kFloat) * parts[2].to(at::kFloat)).sum();
        if (P == 4) loss = loss + parts[3].to(at::kFloat).sum();
        loss.backward();
        return t.grad();
      };
      at::Tensor g_gpu = run(t0), g_cpu = run(t0.cpu());
      EXPECT_TRUE(at::equal(g_gpu.cpu(), g_cpu)) << "P=" << P << " " << dt;
      // part 2 repeated (the gated NaLa block's v): its second gradient, in the token layout the
      // fused tail writes, added in the gather; the CPU path adds with ATen
      auto run_repeat = [&](const at::Tensor& base) {
        at::Tensor t = base.clone().requires_grad_(true);
        auto parts = nala::ops::split_heads(t, 2);
        at::Tensor v_tok = parts[P].reshape({3, 37, 6 * 64});  // (B, N, D) view
        at::Tensor loss = (parts[2].transpose(1, 2).to(at::kFloat) * 0.75).sum() + (v_tok.to(at::kFloat) * v_tok.to(at::kFloat)).sum() +
                          parts[1].to(at::kFloat).sum();
        loss.backward();
        return t.grad();
      };
      at::Tensor r_gpu = run_repeat(t0), r_cpu = run_repeat(t0.cpu());
      EXPECT_TRUE(at::equal(r_gpu.cpu(), r_cpu)) << "repeated part, P=" << P << " " << dt;
    }
  }
}

// The projection and its split as one operation (NALA_SPLIT_HEADS_BIAS=1, ops/split_heads.h
// linear_split_heads): the summing gather kernel writes the projection's gradient bit for bit as the
// plain gather does, so x's and w's gradients equal the composition's (linear_op, split_heads) bit for
// bit; the bias gradient, now summed inside the gather (which ran: counted), within float32 rounding of
// the column sum's. bf16 autocast and fp32, P = 3 and the gated block's P = 4 with v read twice, a part
// unused, rows not a multiple of the kernel's unrolling, and D = 1152 (XL's heads: 3 × 16 × 72). The GEMM
// switches set here (the defaults): with NALA_GEMM_BGRAD=1 the composition's weight gradient would come
// from another GEMM. The summing gather runs both ways (NALA_GATHER_SUM_GROUPED), bit for bit alike.
TEST_F(BlockKernels, LinearSplitHeadsBiasFromTheGather) {
  const bool bgrad = gemm_bias_grads(), tuned = gemm_tuned_training(), grouped_was = gather_sum_grouped();
  set_gemm_bias_grads(false);
  set_gemm_tuned_training(false);
  for (auto [B, N, H, d] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{4, 256, 6, 64}, {3, 37, 16, 72}, {2, 5, 2, 64}})
    for (auto [P, repeat] : {std::pair<int64_t, int64_t>{3, -1}, {4, 2}})
      for (bool bf16 : {true, false}) {
        torch::manual_seed(B * N + P);
        const int64_t D = H * d;
        torch::nn::Linear m(D, P * D);
        m->to(at::kCUDA);
        const at::Tensor x0 = at::randn({B, N, D}, at::kCUDA);
        std::vector<at::Tensor> wt;
        for (int64_t i = 0; i < P + 1; ++i) wt.push_back(at::randn({B, H, N, d}, at::kCUDA));
        auto run = [&](bool one_op) {
          set_split_heads_bias_sums(one_op);
          m->zero_grad();
          at::Tensor x = x0.clone().requires_grad_(true);
          at::Tensor loss;
          {
            Autocast ac(bf16);
            const auto parts = linear_split_heads(*m, x, P, H, repeat);
            loss = at::zeros({}, at::kCUDA);
            for (int64_t i = 0; i < P; ++i)
              if (i != 1) loss = loss + (parts[size_t(i)].transpose(1, 2).to(at::kFloat) * wt[size_t(i)]).sum();  // part 1 unused
            if (repeat >= 0) {
              const at::Tensor v = parts[size_t(P)].reshape({B, N, D}).to(at::kFloat);
              loss = loss + (v * wt[size_t(P)].transpose(1, 2).reshape({B, N, D})).sum();
            }
          }
          loss.backward();
          return std::vector<at::Tensor>{x.grad().clone(), m->weight.grad().clone(), m->bias.grad().clone()};
        };
        const auto plain = run(false);
        const int64_t gathers0 = split_heads_summing_gathers();
        set_gather_sum_grouped(false);
        const auto ours = run(true);
        set_gather_sum_grouped(true);  // the rows' loads as one group: the same values bit for bit, db too (same order)
        const auto ours_grouped = run(true);
        set_gather_sum_grouped(grouped_was);
        set_split_heads_bias_sums(false);
        EXPECT_EQ(split_heads_summing_gathers() - gathers0, 2);
        for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(ours_grouped[i], ours[i])) << "grouped loads, gradient " << i;
        const std::string what = std::to_string(B) + "x" + std::to_string(N) + " H " + std::to_string(H) + " d " + std::to_string(d) + " P " +
                                 std::to_string(P) + (bf16 ? " bf16" : " fp32");
        EXPECT_TRUE(at::equal(ours[0], plain[0])) << what << ": dx";
        EXPECT_TRUE(at::equal(ours[1], plain[1])) << what << ": dw";
        // the bias gradient: the same float32 sum in another order
        const at::Tensor db = ours[2].to(at::kDouble), db_plain = plain[2].to(at::kDouble);
        const double scale = db_plain.abs().max().item<double>();
        EXPECT_LT((db - db_plain).abs().max().item<double>() / scale, 1e-5) << what << ": db";
      }
  reset_split_heads_bias_sums();
  set_gemm_bias_grads(bgrad);
  set_gemm_tuned_training(tuned);
}

TEST_F(BlockKernels, BiasGelu) {
  // fp32 within 1e-5 of float64 truth; bf16/fp16 within 2x the composition's error + one rounding
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (auto [R, F] : {std::pair{8 * 256, 1536}, std::pair{3 * 37, 4608}, std::pair{5, 20}}) {
      torch::manual_seed(R + F);
      at::Tensor y = (at::randn({R, F}, at::kCUDA) * 2).to(dt), b = at::randn({F}, at::kCUDA), w = at::randn({R, F}, at::kCUDA);
      auto go = [&](bool fused, const at::Tensor& y0, const at::Tensor& b0, const at::Tensor& w0) {
        at::Tensor yy = y0.detach().clone().requires_grad_(true), bb = b0.detach().clone().requires_grad_(true);
        at::Tensor o = fused ? bias_gelu(yy, bb) : bias_gelu_reference(yy, bb);
        (o.to(at::kDouble) * w0.to(o.device()).to(at::kDouble)).sum().backward();
        return Outs{o.detach(), yy.grad(), bb.grad(), bb.grad()};
      };
      auto d = [](const at::Tensor& t) { return t.to(at::kDouble).cpu(); };
      Outs f = go(true, y, b, w), p = go(false, y, b, w), t = go(false, d(y), d(b), d(w));
      Outs f2 = go(true, y, b, w);
      EXPECT_TRUE(at::equal(f.out, f2.out) && at::equal(f.dx, f2.dx) && at::equal(f.da, f2.da)) << "not repeatable";
      char what[64];
      std::snprintf(what, sizeof what, "bias+GELU %dx%d %s", R, F, c10::toString(dt));
      check(what, f, p, t, dt == at::kFloat ? 0 : 8e-3, 1e-5, dt == at::kFloat);
    }
  }
}

TEST_F(BlockKernels, SamplingMlpGeluInTheGemmEpilogue) {
  // no gradient wanted on CUDA: fc1's bias and GELU(tanh) in the GEMM epilogue (at::_addmm_activation);
  // against the ATen composition (linear, gelu tanh, linear) in float64 on the same weights
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    torch::manual_seed(7);
    Mlp m(384, 1536);
    for (auto& p : m.parameters()) p.detach().normal_(0, 0.05);
    m.to(at::kCUDA, dt);
    at::Tensor x = at::randn({4, 37, 384}, at::kCUDA).to(dt);
    at::globalContext().setAllowTF32CuBLAS(false);
    torch::NoGradGuard ng;
    const at::Tensor out = m.forward(x);  // (4, 37, 384)
    auto d = [](const at::Tensor& t) { return t.to(at::kDouble).cpu(); };
    const at::Tensor truth = at::linear(at::gelu(at::linear(d(x), d(m.fc1->weight), d(m.fc1->bias)), "tanh"), d(m.fc2->weight), d(m.fc2->bias));
    const at::Tensor comp = at::linear(at::gelu(at::linear(x, m.fc1->weight, m.fc1->bias), "tanh"), m.fc2->weight, m.fc2->bias);
    const double e = rel(out, truth), ec = rel(comp, truth);
    std::printf("  sampling MLP %-9s epilogue err %.2e  composition err %.2e\n", c10::toString(dt), e, ec);
    EXPECT_EQ(out.sizes(), x.sizes());
    if (dt == at::kFloat) EXPECT_LT(e, 1e-5);
    else EXPECT_LE(e, 2 * ec + 4e-3);
  }
}

// Sampling's gated residual + LayerNorm-modulate in one pass (NALA_RESIDUAL_NORM_FUSED=1) against the
// two kernels it replaces, gated_residual then layer_norm_modulate, bit for bit: the residual and the
// modulated rows (and, in e4m3, the bytes and scales quantize_rows gives them); every dtype, the DiT
// widths, a narrow one, a ragged token count, the adaLN chunks as strided views.
TEST_F(BlockKernels, ResidualLayerNormModulateEqualsTheTwoKernels) {
  for (auto dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (auto [N, T, D] : {std::tuple<int64_t, int64_t, int64_t>{2, 256, 384}, {3, 17, 1152}, {1, 5, 72}, {128, 256, 1152}}) {
      torch::manual_seed(N * T + D);
      const at::Tensor x = (at::randn({N, T, D}, at::kCUDA) * 2 + 0.5).to(dt), y = at::randn({N, T, D}, at::kCUDA).to(dt);  // (N, T, D)
      const auto m = (at::randn({N, 3 * D}, at::kCUDA) * 0.5).chunk(3, 1);  // gate, shift, scale: (N, D) strided views
      ASSERT_TRUE(cuda::residual_layer_norm_modulate_supported(x, y)) << dt << " " << D;
      const auto [res, out] = cuda::residual_layer_norm_modulate(x, m[0], y, m[1], m[2], 1e-6);
      const at::Tensor res2 = cuda::gated_residual_forward(x, m[0], y);                                           // (N, T, D)
      const at::Tensor out2 = std::get<0>(cuda::layer_norm_modulate_forward(res2, m[1], m[2], 1e-6, dt, false));  // (N, T, D)
      EXPECT_TRUE(at::equal(res, res2)) << dt << " " << N << "x" << T << "x" << D;
      EXPECT_TRUE(at::equal(out, out2)) << dt << " " << N << "x" << T << "x" << D;
      const auto [res_q, q, s] = cuda::residual_layer_norm_modulate_quantize(x, m[0], y, m[1], m[2], 1e-6);
      const auto [q2, s2] = cuda::layer_norm_modulate_quantize(res2, m[1], m[2], 1e-6, dt);
      EXPECT_TRUE(at::equal(res_q, res2)) << dt << " " << N << "x" << T << "x" << D;
      EXPECT_TRUE(at::equal(q.view(at::kByte), q2.view(at::kByte))) << dt << " " << N << "x" << T << "x" << D;
      EXPECT_TRUE(at::equal(s, s2)) << dt << " " << N << "x" << T << "x" << D;
    }
  }
  EXPECT_FALSE(cuda::residual_layer_norm_modulate_supported(at::randn({1, 4, 64}, at::kCUDA), at::randn({1, 4, 64}, at::kCUDA).to(at::kBFloat16)));
}

// The staged residual + LayerNorm-modulate kernel (NALA_RESIDUAL_NORM_STAGED=1, the default: a persistent grid,
// rows in shared memory by cp.async, the block's samples' vectors in float there) bit for bit the
// one-pass kernel: residual, modulated rows, e4m3 bytes and scales. Shapes where a block's rows cross
// a sample (DiT-XL/2's sampling rows; 300 × 7 tokens), where a sample's tokens cap the block's rows
// (2,000 × 3), where lanes hold no channel (D 64, 72), and one block a row; vectors in the rows'
// dtype and in float32, as strided adaLN chunks. Kernels only (no GEMM): racecheck can take it.
TEST_F(BlockKernels, StagedResidualNormEqualsTheOnePassKernel) {
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    for (auto [N, T, D] : {std::tuple<int64_t, int64_t, int64_t>{128, 256, 1152}, {300, 7, 384}, {2000, 3, 64}, {3, 17, 72}, {4, 64, 1536}}) {
      for (auto vt : {dt, at::kFloat}) {
        torch::manual_seed(N * T + D);
        const auto cu = at::TensorOptions().device(at::kCUDA);
        const at::Tensor x = (at::randn({N, T, D}, cu) * 2 + 0.5).to(dt), y = at::randn({N, T, D}, cu).to(dt);  // (N, T, D)
        const auto m = (at::randn({N, 3 * D}, cu) * 0.5).to(vt).chunk(3, 1);  // gate, shift, scale: (N, D) strided views
        const std::string what = std::string(c10::toString(dt)) + " rows, " + c10::toString(vt) + " vectors, " + std::to_string(N) + "x" +
                                 std::to_string(T) + "x" + std::to_string(D);
        set_residual_norm_staged(false);
        const auto [res1, out1] = cuda::residual_layer_norm_modulate(x, m[0], y, m[1], m[2], 1e-6);
        const auto [resq1, q1, s1] = cuda::residual_layer_norm_modulate_quantize(x, m[0], y, m[1], m[2], 1e-6);
        set_residual_norm_staged(true);
        const int64_t launches = cuda::residual_staged_launches();
        const auto [res2, out2] = cuda::residual_layer_norm_modulate(x, m[0], y, m[1], m[2], 1e-6);
        const auto [resq2, q2, s2] = cuda::residual_layer_norm_modulate_quantize(x, m[0], y, m[1], m[2], 1e-6);
        set_residual_norm_staged(true);  // (its default)
        EXPECT_EQ(cuda::residual_staged_launches() - launches, 2) << what;
        EXPECT_TRUE(at::equal(res2, res1)) << what << ": residual";
        EXPECT_TRUE(at::equal(out2, out1)) << what << ": modulated rows, max |difference| " << (out2 - out1).abs().max().item<double>();
        EXPECT_TRUE(at::equal(resq2, resq1)) << what << ": residual (e4m3 form)";
        EXPECT_TRUE(at::equal(q2.view(at::kByte), q1.view(at::kByte))) << what << ": e4m3 rows";
        EXPECT_TRUE(at::equal(s2, s1)) << what << ": row scales";
      }
    }
  }
}

// The per-sample vectors (shift, scale, gate) are read where adaLN's GEMM wrote them: strided
// chunks of an (N, 6D) tensor in fp32, bf16 or fp16, no float32 copy a chunk (block_kernels.h
// SampleVec). Every entry point, forward and backward, bit for bit what the same vectors give as
// contiguous float32 copies (the layout the kernels took before), and a chunk whose start breaks
// the 4-element loads' alignment (copied, as before) too. Kernels only (no GEMM): racecheck can take it.
TEST_F(BlockKernels, PerSampleVectorsReadInPlaceEqualTheirFloatCopies) {
  for (auto xt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (auto vt : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (auto [N, T, D] : {std::tuple<int64_t, int64_t, int64_t>{3, 37, 1152}, {1, 5, 72}, {2, 64, 384}}) {
        for (int64_t offset : {int64_t(0), int64_t(1)}) {  // 1: a misaligned chunk
          torch::manual_seed(N * T + D + offset);
          const auto cu = at::TensorOptions().device(at::kCUDA);
          const at::Tensor x = (at::randn({N, T, D}, cu) * 2 + 0.5).to(xt), y = at::randn({N, T, D}, cu).to(xt);  // (N, T, D)
          const at::Tensor dout = at::randn({N, T, D}, cu).to(xt);                                                // (N, T, D)
          const at::Tensor ada = (at::randn({N, 6 * D + offset}, cu) * 0.5).to(vt);                               // (N, 6D [+1])
          const at::Tensor shift = ada.narrow(1, offset, D), scale = ada.narrow(1, offset + D, D), gate = ada.narrow(1, offset + 2 * D, D);  // (N, D) views
          auto f32 = [](const at::Tensor& v) { return v.to(at::kFloat).contiguous(); };                          // (N, D)
          const std::string what = std::string(c10::toString(xt)) + " x, " + c10::toString(vt) + " vectors, " + std::to_string(N) + "x" +
                                   std::to_string(T) + "x" + std::to_string(D) + (offset ? ", misaligned" : "");
          auto same = [&](const at::Tensor& a, const at::Tensor& b, const char* name) {
            EXPECT_TRUE(at::equal(a.view(at::kByte), b.view(at::kByte))) << what << ": " << name;
          };
          if (cuda::layer_norm_modulate_supported(x, xt)) {
            const auto [o, mu, rs] = cuda::layer_norm_modulate_forward(x, shift, scale, 1e-6, xt, true);
            const auto [o2, mu2, rs2] = cuda::layer_norm_modulate_forward(x, f32(shift), f32(scale), 1e-6, xt, true);
            same(o, o2, "LayerNorm-modulate");
            same(mu, mu2, "mean");
            const auto [q, qs] = cuda::layer_norm_modulate_quantize(x, shift, scale, 1e-6, xt);
            const auto [q2, qs2] = cuda::layer_norm_modulate_quantize(x, f32(shift), f32(scale), 1e-6, xt);
            same(q, q2, "e4m3 rows");
            same(qs, qs2, "row scales");
            const auto [dx, dsh, dsc] = cuda::layer_norm_modulate_backward(dout, x, mu, rs, scale, y);
            const auto [dx2, dsh2, dsc2] = cuda::layer_norm_modulate_backward(dout, x, mu, rs, f32(scale), y);
            same(dx, dx2, "LayerNorm-modulate dx");
            same(dsc, dsc2, "dscale");
          }
          if (cuda::gated_residual_supported(x, y)) {
            same(cuda::gated_residual_forward(x, gate, y), cuda::gated_residual_forward(x, f32(gate), y), "gated residual");
            const auto [dy, dg] = cuda::gated_residual_backward(dout, gate, y);
            const auto [dy2, dg2] = cuda::gated_residual_backward(dout, f32(gate), y);
            same(dy, dy2, "gated residual dy");
            same(dg, dg2, "dgate");
          }
          if (cuda::residual_layer_norm_modulate_supported(x, y)) {
            const auto [r, o] = cuda::residual_layer_norm_modulate(x, gate, y, shift, scale, 1e-6);
            const auto [r2, o2] = cuda::residual_layer_norm_modulate(x, f32(gate), y, f32(shift), f32(scale), 1e-6);
            same(r, r2, "residual");
            same(o, o2, "residual + LayerNorm-modulate");
            const auto [rq, q, qs] = cuda::residual_layer_norm_modulate_quantize(x, gate, y, shift, scale, 1e-6);
            const auto [rq2, q2, qs2] = cuda::residual_layer_norm_modulate_quantize(x, f32(gate), y, f32(shift), f32(scale), 1e-6);
            same(q, q2, "residual + LayerNorm-modulate e4m3 rows");
            same(qs, qs2, "residual + LayerNorm-modulate row scales");
          }
        }
      }
    }
  }
}

// The sampling forward with that kernel for every gated residual (NALA_RESIDUAL_NORM_FUSED=1,
// models/dit.cpp DiTBlock::forward_chained) bit for bit the blocks one after another, in bf16.
// Apart from the kernel test above so that compute-sanitizer's racecheck can take the kernels alone:
// under racecheck the two as one test ended the process with no report (memcheck: 0 errors;
// docs/benchmarks.md, seventeenth session).
TEST_F(BlockKernels, DitForwardChainedEqualsTheBlocks) {
  for (const char* name : {"DiT-S/2", "NaLaDiT-S/2"}) {
    auto [model, x32, t, y] = nala::test::perturbed_dit(name);
    torch::NoGradGuard ng;
    model->to(at::kBFloat16);
    const at::Tensor x = x32.to(at::kBFloat16);
    set_residual_norm_fused(false);
    const at::Tensor blocks = model->forward(x, t, y);
    const int64_t calls0 = residual_layer_norm_modulate_kernel_calls();
    set_residual_norm_fused(true);
    const at::Tensor chained = model->forward(x, t, y);  // (the switch stays on: its default)
    // the kernel ran for every gated residual (the first block's first LayerNorm has none before it, the final layer's adds the last): 2 · depth
    EXPECT_EQ(residual_layer_norm_modulate_kernel_calls() - calls0, 2 * model->config().depth) << name;
    EXPECT_TRUE(at::equal(chained, blocks)) << name << ": max |difference| " << (chained - blocks).abs().max().item<double>();
  }
}

// Training's gated residual + LayerNorm-modulate kernel (residual_layer_norm_modulate_training) bit for
// bit the two kernels it replaces, gated_residual_forward then layer_norm_modulate_forward with the
// statistics: residual, modulated rows, mean and rstd. The autocast mix (float32 x, bf16 or fp16 y
// and result), one dtype throughout, awkward sizes (D 72, 17 tokens), gate, shift and scale as
// strided adaLN chunks in float32 and in bf16.
TEST_F(BlockKernels, ResidualLayerNormModulateTrainingEqualsTheTwoKernels) {
  for (auto [xt, yt] : {std::pair{at::kFloat, at::kBFloat16}, {at::kFloat, at::kHalf}, {at::kFloat, at::kFloat}, {at::kBFloat16, at::kBFloat16}})
    for (auto [N, T, D] : {std::tuple<int64_t, int64_t, int64_t>{2, 256, 384}, {3, 17, 1152}, {1, 5, 72}, {16, 256, 1536}})
      for (auto vt : {at::kFloat, at::kBFloat16}) {
        torch::manual_seed(N * T + D);
        const at::Tensor x = (at::randn({N, T, D}, at::kCUDA) * 2 + 0.5).to(xt), y = at::randn({N, T, D}, at::kCUDA).to(yt);  // (N, T, D)
        const auto m = (at::randn({N, 3 * D}, at::kCUDA) * 0.5).to(vt).chunk(3, 1);  // gate, shift, scale: (N, D) strided views
        ASSERT_TRUE(cuda::residual_layer_norm_modulate_training_supported(x, y, yt)) << xt << " " << yt << " " << D;
        const auto [res, out, mean, rstd] = cuda::residual_layer_norm_modulate_training(x, m[0], y, m[1], m[2], 1e-6);
        const at::Tensor res2 = cuda::gated_residual_forward(x, m[0], y);                                           // (N, T, D)
        const auto [out2, mean2, rstd2] = cuda::layer_norm_modulate_forward(res2, m[1], m[2], 1e-6, yt, true);     // (N, T, D), (N, T, 1) ×2
        const std::string what = std::string(c10::toString(xt)) + "/" + c10::toString(yt) + " " + std::to_string(N) + "x" + std::to_string(T) + "x" +
                                 std::to_string(D) + " vectors " + c10::toString(vt);
        EXPECT_EQ(res.scalar_type(), xt) << what;
        EXPECT_EQ(out.scalar_type(), yt) << what;
        EXPECT_TRUE(at::equal(res, res2)) << what;
        EXPECT_TRUE(at::equal(out, out2)) << what;
        EXPECT_TRUE(at::equal(mean, mean2)) << what;
        EXPECT_TRUE(at::equal(rstd, rstd2)) << what;
      }
  const at::Tensor x = at::randn({1, 4, 64}, at::kCUDA);
  EXPECT_FALSE(cuda::residual_layer_norm_modulate_training_supported(x, x.to(at::kBFloat16), at::kFloat));  // the result in y's dtype only
  EXPECT_FALSE(cuda::residual_layer_norm_modulate_training_supported(x.to(at::kBFloat16), x, at::kFloat));  // a float32 branch onto a bf16 stream
}

// Training's backward in one kernel (the gated residual's backward folded into the LayerNorm-modulate's)
// equals the two backward kernels bit for bit: dx, dshift, dscale, dy, dgate, with and without a
// residual gradient, at D of every lane-vector count (3, 6, 9 with its dgate sums in shared memory, 12)
// and T not a multiple of the 32-token chunks.
TEST_F(BlockKernels, ResidualLayerNormModulateTrainingBackwardEqualsTheTwoKernels) {
  for (auto [xt, yt] : {std::pair{at::kFloat, at::kBFloat16}, {at::kFloat, at::kHalf}, {at::kFloat, at::kFloat}, {at::kBFloat16, at::kBFloat16}})
    for (auto [N, T, D] : {std::tuple<int64_t, int64_t, int64_t>{2, 256, 384}, {3, 17, 1152}, {1, 5, 72}, {2, 70, 768}, {4, 256, 1536}})
      for (bool with_dres : {true, false}) {
        torch::manual_seed(N * T + D + with_dres);
        const auto vt = with_dres ? at::kBFloat16 : at::kFloat;
        const at::Tensor res = (at::randn({N, T, D}, at::kCUDA) * 2 + 0.5).to(xt), y = at::randn({N, T, D}, at::kCUDA).to(yt);  // (N, T, D)
        const at::Tensor dout = at::randn({N, T, D}, at::kCUDA).to(yt);                                                          // (N, T, D)
        const at::Tensor dres = with_dres ? at::randn({N, T, D}, at::kCUDA).to(xt) : at::Tensor();                              // (N, T, D)
        const auto m = (at::randn({N, 3 * D}, at::kCUDA) * 0.5).to(vt).chunk(3, 1);  // gate, shift, scale: (N, D) strided views
        const auto [out, mean, rstd] = cuda::layer_norm_modulate_forward(res, m[1], m[2], 1e-6, yt, true);  // the statistics
        ASSERT_TRUE(cuda::residual_layer_norm_modulate_training_backward_supported(res, y, yt)) << xt << " " << yt << " " << D;
        const auto [dx, dshift, dscale, dy, dgate] =
            cuda::residual_layer_norm_modulate_training_backward(dout, res, mean, rstd, m[2], dres, m[0], y);
        const auto [dx2, dshift2, dscale2] = cuda::layer_norm_modulate_backward(dout, res, mean, rstd, m[2], dres);
        const auto [dy2, dgate2] = cuda::gated_residual_backward(dx2, m[0], y);
        const std::string what = std::string(c10::toString(xt)) + "/" + c10::toString(yt) + " " + std::to_string(N) + "x" + std::to_string(T) + "x" +
                                 std::to_string(D) + (with_dres ? " with dres" : " without dres");
        EXPECT_EQ(dx.scalar_type(), xt) << what;
        EXPECT_EQ(dy.scalar_type(), yt) << what;
        EXPECT_TRUE(at::equal(dx, dx2)) << what;
        EXPECT_TRUE(at::equal(dshift, dshift2)) << what;
        EXPECT_TRUE(at::equal(dscale, dscale2)) << what;
        EXPECT_TRUE(at::equal(dy, dy2)) << what;
        EXPECT_TRUE(at::equal(dgate, dgate2)) << what << ": max |difference| " << (dgate - dgate2).abs().max().item<double>();
        // with dy's sums (NALA_RESIDUAL_DY_SUMS, D ≤ 768): every output as before, and the sums those of dy as
        // stored, against float64 (float32 partials over 32-token chunks: a few float32 units of Σ |dy|)
        ASSERT_EQ(cuda::residual_norm_dy_sums_supported(D), D <= 768) << what;
        if (D <= 768) {
          at::Tensor dy_sum;
          const auto [dx3, dshift3, dscale3, dy3, dgate3] =
              cuda::residual_layer_norm_modulate_training_backward(dout, res, mean, rstd, m[2], dres, m[0], y, at::kFloat, &dy_sum);
          EXPECT_TRUE(at::equal(dx3, dx) && at::equal(dshift3, dshift) && at::equal(dscale3, dscale) && at::equal(dy3, dy) && at::equal(dgate3, dgate))
              << what << ": the sums changed another output";
          ASSERT_TRUE(dy_sum.defined()) << what;
          EXPECT_EQ(dy_sum.scalar_type(), at::kFloat) << what;
          const at::Tensor want = dy.to(at::kDouble).sum(at::IntArrayRef{0, 1}), bound = dy.to(at::kDouble).abs().sum(at::IntArrayRef{0, 1}) * 1e-6 + 1e-9;  // (D) ×2
          EXPECT_TRUE(((dy_sum.to(at::kDouble) - want).abs() <= bound).all().item<bool>())
              << what << ": dy's sums, max |difference| " << (dy_sum.to(at::kDouble) - want).abs().max().item<double>();
        }
      }
  const at::Tensor x = at::randn({1, 4, 64}, at::kCUDA);
  EXPECT_FALSE(cuda::residual_layer_norm_modulate_training_backward_supported(x, x.to(at::kBFloat16), at::kFloat));  // dout in y's dtype only
  EXPECT_FALSE(cuda::residual_layer_norm_modulate_training_backward_supported(x.to(at::kBFloat16), x, at::kFloat));  // a float32 y on a bf16 stream
}

// NALA_BLOCK_SUMS_FUSED=1: the backward functions' per-sample vector gradients summed over the chunks in
// one launch and written in the vectors' type equal ATen's float32 sums converted to that type, within the
// float32 sum's reordering (float32) and one rounding of the type (bf16, fp16); with the switch on and a
// float32 type the three functions still give float32. The switch restored after.
TEST_F(BlockKernels, PartialSumsInOneLaunchEqualAtensSums) {
  const bool was = block_sums_fused();
  for (auto [N, T, D] : {std::tuple<int64_t, int64_t, int64_t>{4, 256, 384}, {3, 17, 1152}, {1, 5, 72}})
    for (auto vt : {at::kBFloat16, at::kHalf, at::kFloat}) {
      torch::manual_seed(N * T + D);
      const at::Tensor res = at::randn({N, T, D}, at::kCUDA) * 2 + 0.5, y = at::randn({N, T, D}, at::kCUDA).to(at::kBFloat16);  // (N, T, D)
      const at::Tensor dout = at::randn({N, T, D}, at::kCUDA).to(at::kBFloat16), dres = at::randn({N, T, D}, at::kCUDA);          // (N, T, D)
      const auto m = (at::randn({N, 3 * D}, at::kCUDA) * 0.5).to(vt).chunk(3, 1);  // gate, shift, scale
      const auto [out, mean, rstd] = cuda::layer_norm_modulate_forward(res, m[1], m[2], 1e-6, at::kBFloat16, true);
      auto all = [&](bool fused) {
        set_block_sums_fused(fused);
        const auto [dx, dsh, dsc] = cuda::layer_norm_modulate_backward(dout, res, mean, rstd, m[2], dres, vt);
        const auto [dy, dg] = cuda::gated_residual_backward(dx, m[0], y, vt);
        const auto [dx2, dsh2, dsc2, dy2, dg2] = cuda::residual_layer_norm_modulate_training_backward(dout, res, mean, rstd, m[2], dres, m[0], y, vt);
        return std::vector<at::Tensor>{dsh, dsc, dg, dsh2, dsc2, dg2};
      };
      const auto aten = all(false), fused = all(true);
      const std::string what = std::to_string(N) + "x" + std::to_string(T) + "x" + std::to_string(D) + " " + c10::toString(vt);
      for (size_t i = 0; i < aten.size(); ++i) {
        EXPECT_EQ(aten[i].scalar_type(), at::kFloat) << what << " " << i;
        EXPECT_EQ(fused[i].scalar_type(), vt) << what << " " << i;
        const at::Tensor want = aten[i].to(vt).to(at::kDouble), got = fused[i].to(at::kDouble);
        // one unit in the last place of the type at the value's size, and the float32 sum's reordering, which
        // does not shrink where the sum cancels: a few float32 units of the largest sum
        const double ulp = vt == at::kBFloat16 ? 1.0 / 128 : vt == at::kHalf ? 1.0 / 1024 : 1e-5;
        const at::Tensor bound = want.abs() * ulp + 1e-5 * want.abs().max().item<double>();
        EXPECT_TRUE(((got - want).abs() <= bound).all().item<bool>()) << what << " output " << i << ": max |difference| "
                                                                       << (got - want).abs().max().item<double>();
      }
    }
  set_block_sums_fused(was);
}

// A DiT-S/2 and a NaLaDiT-S/2 training forward and backward on CUDA with the blocks chained and each
// gated residual + LayerNorm-modulate one operation (NALA_RESIDUAL_NORM_FUSED=1,
// NALA_RESIDUAL_NORM_TRAIN=1, the defaults) equal the blocks one by one bit for bit: output and every
// parameter's gradient, bf16 autocast and float32; the training kernel ran for every gated residual. With
// the backward as the two kernels and as one (NALA_RESIDUAL_NORM_TRAIN_BWD=1, which then ran for every one).
TEST_F(BlockKernels, DitTrainingChainedEqualsTheBlocks) {
  for (const char* name : {"DiT-S/2", "NaLaDiT-S/2"}) {
    auto [model, x, t, y] = nala::test::perturbed_dit(name);
    const at::Tensor w = at::randn({8, model->config().out_channels(), 32, 32}, at::kCUDA);
    for (bool bf16 : {true, false}) {
      auto step = [&, &model = model, &x = x, &t = t, &y = y](bool chained) {
        set_residual_norm_fused(chained);
        model->zero_grad();
        at::Tensor out;
        {
          Autocast ac(bf16);
          out = model->forward(x, t, y);
        }
        (out.to(at::kFloat) * w).mean().backward();
        std::vector<at::Tensor> g{out.detach().to(at::kFloat).flatten()};
        for (auto& p : model->parameters())
          if (p.grad().defined()) g.push_back(p.grad().flatten().clone());
        return at::cat(g);
      };
      const bool dy_sums = residual_dy_sums();
      set_residual_dy_sums(false);  // the bias gradients of proj and fc2 as column sums, as the blocks one by one sum them
      const at::Tensor blocks = step(false);
      const bool bwd_fused = residual_norm_training_backward_fused();
      for (bool one_kernel : {false, true}) {  // the backward as the two kernels, then as one (NALA_RESIDUAL_NORM_TRAIN_BWD)
        set_residual_norm_training_backward_fused(one_kernel);
        const int64_t calls0 = residual_layer_norm_modulate_kernel_calls(), bwd0 = residual_layer_norm_modulate_backward_kernel_calls();
        const at::Tensor chained = step(true);
        const std::string what = std::string(name) + (bf16 ? " bf16" : " fp32") + (one_kernel ? ", backward one kernel" : ", backward two kernels");
        EXPECT_EQ(residual_layer_norm_modulate_kernel_calls() - calls0, 2 * model->config().depth) << what;
        // every backward one kernel where asked, the last block's (whose residual output nothing reads: no gradient) included
        EXPECT_EQ(residual_layer_norm_modulate_backward_kernel_calls() - bwd0, one_kernel ? 2 * model->config().depth : 0) << what;
        EXPECT_TRUE(at::equal(chained, blocks)) << what << ": max |difference| " << (chained - blocks).abs().max().item<double>();
        if (!one_kernel) continue;
        // NALA_RESIDUAL_DY_SUMS=1: proj's and fc2's bias gradients from the one kernel's sums of dy, taken
        // by every gated residual's layer; they alone move, by the float32 sum's reordering
        set_residual_dy_sums(true);
        const int64_t taken0 = column_sums_taken();
        const at::Tensor summed = step(true);
        set_residual_dy_sums(false);
        EXPECT_EQ(column_sums_taken() - taken0, 2 * model->config().depth) << what;
        const at::Tensor diff = (summed - chained).abs();
        const int64_t moved = (diff > 0).sum().item<int64_t>();
        std::printf("  %s, dy's sums: %ld values moved (the two biases a block hold %ld), max |difference| %.2e of max %.2e\n", what.c_str(),
                    long(moved), long(2 * model->config().depth * model->config().hidden), diff.max().item<double>(), chained.abs().max().item<double>());
        EXPECT_LE(moved, 2 * model->config().depth * model->config().hidden) << what;
        EXPECT_LT(diff.max().item<double>(), 1e-5 * chained.abs().max().item<double>()) << what;
      }
      set_residual_dy_sums(dy_sums);
      set_residual_norm_training_backward_fused(bwd_fused);
    }
  }
  set_residual_norm_fused(true);
}
