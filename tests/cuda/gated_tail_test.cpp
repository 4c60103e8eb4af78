// The gated NaLa block's tail kernels (attention/cuda/gated_tail_kernels.cu) against float64 truth
// (the plain composition on the CPU with the same rounded inputs) and against the plain
// composition on the GPU in the same dtypes (bf16 under autocast, as the model runs): fp32 within
// 1e-5 relative; bf16 within 2× the composition's own error plus one bf16 rounding. Forward and
// every gradient (o, the qkvg projection through v and g, LePE weight and bias, LayerNorm weight and
// bias), LePE 0 / 3 / 5 / 7, square and non-square grids, D up to 1536, bitwise repeatable; with
// the LePE kernels' second inputs staged in shared memory (set_lepe_staged) bitwise equal to without;
// with ln_gate_bwd on 1 and 8 blocks an SM (set_ln_gate_bwd_blocks: other partial sums) within the
// same bounds; with the bf16 LePE weight gradient on the tensor cores (kStageWgradMma) within those
// bounds and within fp32 rounding of the FMA kernel's sums, everything else bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "cuda_test_util.h"

#include "attention/cuda/gated_tail_cuda.h"
#include "attention/cuda/gated_tail_kernels.h"
#include "ops/fused_ops.h"
#include "ops/split_heads.h"
#include "attention/blocks.h"
#include "attention/gated_tail.h"
#include "attention/cuda/nala_cuda.h"
#include "attention/nala_attention.h"

using namespace nala::attention;
using namespace nala::ops;

namespace {

using nala::test::Autocast;
using nala::test::rel;

struct Inputs {
  at::Tensor qkvg, o, lepe_w, lepe_b, norm_w, norm_b;
  Inputs to(const at::TensorOptions& act, const at::TensorOptions& par) const {
    auto c = [](const at::Tensor& t, const at::TensorOptions& opt) { return t.defined() ? t.to(opt) : t; };
    return {c(qkvg, act), c(o, act), c(lepe_w, par), c(lepe_b, par), c(norm_w, par), c(norm_b, par)};
  }
};

struct Result {
  at::Tensor y, dqkvg, do_, dlw, dlb, dnw, dnb;
};

Result run(bool fused, const Inputs& in0, int64_t gh, int64_t gw, const at::Tensor& w, bool autocast) {
  auto leaf = [](const at::Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_(true) : at::Tensor(); };
  Inputs in{leaf(in0.qkvg), leaf(in0.o), leaf(in0.lepe_w), leaf(in0.lepe_b), leaf(in0.norm_w), leaf(in0.norm_b)};
  const int64_t B = in.qkvg.size(0), N = in.qkvg.size(1), D = in.qkvg.size(3) * in.qkvg.size(4);
  at::Tensor y;
  {
    Autocast ac(autocast);
    at::Tensor v = in.qkvg.select(2, 2).reshape({B, N, D}), g = in.qkvg.select(2, 3).reshape({B, N, D});  // (B, N, D) strided views
    if (fused && in.o.is_cuda())
      EXPECT_TRUE(cuda::gated_tail_supported(in.o, v, g, in.lepe_w, in.o.scalar_type())) << "the kernels must take these tensors";
    auto f = fused ? gated_tail_fused : gated_tail_reference;
    y = f(in.o, v, g, in.lepe_w, in.lepe_b, in.norm_w, in.norm_b, gh, gw, 1e-5);  // (B, N, D)
  }
  (y.to(w.scalar_type()) * w).sum().backward();
  auto grad = [](const at::Tensor& t) { return t.defined() ? t.grad() : at::Tensor(); };
  return {y.detach(), in.qkvg.grad(), in.o.grad(), grad(in.lepe_w), grad(in.lepe_b), in.norm_w.grad(), in.norm_b.grad()};
}

class GatedTailKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
    set_fused_block_ops(true);
    cuda::set_lepe_staged(0);
    cuda::set_ln_gate_bwd_blocks(4);
  }
  void TearDown() override {  // back to what the environment says
    auto env = [](const char* name) { return std::string(std::getenv(name) ? std::getenv(name) : ""); };
    cuda::set_lepe_staged(cuda::lepe_staging_of(env("NALA_LEPE_STAGED")) | (cuda::lepe_copy16_of(env("NALA_LEPE_COPY16")) ? cuda::kStageCopy16 : 0) |
                          (cuda::lepe_wgrad_mma_of(env("NALA_LEPE_WGRAD_MMA")) ? cuda::kStageWgradMma : 0));
    cuda::set_ln_gate_bwd_blocks(cuda::ln_gate_bwd_blocks_of(env("NALA_LN_GATE_BWD_BLOCKS")));
  }
};

struct Case {
  int64_t B, H, d, gh, gw, ks;
};

// The fused op on CUDA against float64 truth and the composition, every output and gradient.
void check_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const int64_t N = c.gh * c.gw, D = c.H * c.d;
    torch::manual_seed(c.B * 1000 + D + c.ks);
    Inputs in64;
    in64.qkvg = at::randn({c.B, N, 4, c.H, c.d}, at::kDouble);
    in64.o = at::randn({c.B, N, c.H, c.d}, at::kDouble).transpose(1, 2);  // (B, H, N, d) strided, as a token-layout writer would give
    if (c.ks > 0) {
      in64.lepe_w = at::randn({D, 1, c.ks, c.ks}, at::kDouble) * 0.2;
      in64.lepe_b = at::randn({D}, at::kDouble) * 0.1;
    }
    in64.norm_w = 1 + 0.3 * at::randn({D}, at::kDouble);
    in64.norm_b = 0.2 * at::randn({D}, at::kDouble);
    at::Tensor w64 = at::randn({c.B, N, D}, at::kDouble);
    const auto cu = at::TensorOptions().device(at::kCUDA);
    for (bool bf16 : {false, true}) {
      const Inputs in = in64.to(cu.dtype(bf16 ? at::kBFloat16 : at::kFloat), cu.dtype(at::kFloat));
      const at::Tensor w = w64.to(cu.dtype(at::kFloat));
      // truth: these very rounded inputs in float64 on the CPU
      const auto cpu64 = at::TensorOptions().device(at::kCPU).dtype(at::kDouble);
      const Inputs in_t = in.to(cpu64, cpu64);
      Result t = run(false, in_t, c.gh, c.gw, w.to(at::kDouble).cpu(), false);
      Result f = run(true, in, c.gh, c.gw, w, bf16), p = run(false, in, c.gh, c.gw, w, bf16);
      Result f2 = run(true, in, c.gh, c.gw, w, bf16);
      cuda::set_lepe_staged(cuda::kStageResidual | cuda::kStageDu);
      Result fst = run(true, in, c.gh, c.gw, w, bf16);
      cuda::set_lepe_staged(cuda::kStageResidual | cuda::kStageDu | cuda::kStageOneBuffer);
      Result fst1 = run(true, in, c.gh, c.gw, w, bf16);
      // the windows in 16-byte pieces (where the layout allows: d a multiple of 8 for bf16, 4 for
      // float32; d 4 and 12 in bf16 keep the 4-byte copies), staged and not
      const int64_t copies_before = cuda::lepe_copy16_launches();
      cuda::set_lepe_staged(cuda::kStageResidual | cuda::kStageDu | cuda::kStageCopy16);
      Result fv = run(true, in, c.gh, c.gw, w, bf16);
      cuda::set_lepe_staged(cuda::kStageCopy16);
      Result fv0 = run(true, in, c.gh, c.gw, w, bf16);
      cuda::set_lepe_staged(cuda::kStageDu | cuda::kStageOneBuffer | cuda::kStageCopy16);
      Result fv1 = run(true, in, c.gh, c.gw, w, bf16);
      // the bf16 weight gradient on the tensor cores (lepe_wgrad_mma), where the layout takes it: d a
      // multiple of 8 (v, a view of qkvg, and du are then 16-byte aligned with strides of whole pieces)
      const int64_t mma_before = cuda::lepe_wgrad_mma_launches();
      cuda::set_lepe_staged(cuda::kStageResidual | cuda::kStageDu | cuda::kStageCopy16 | cuda::kStageWgradMma);
      Result fm = run(true, in, c.gh, c.gw, w, bf16);
      cuda::set_lepe_staged(0);
      const bool mma = bf16 && c.ks > 0 && c.d % 8 == 0;
      EXPECT_EQ(cuda::lepe_wgrad_mma_launches() - mma_before, mma ? 1 : 0) << "lepe_wgrad_mma taken where it should not be, or not taken, d " << c.d;
      // each of the three runs: the forward's convolution and the weight gradient (the backward's dv
      // convolution too where the tail computes it) in 16-byte pieces where the layout takes them
      const bool pieces = c.ks > 0 && c.d % (bf16 ? 8 : 4) == 0;
      if (pieces) EXPECT_GE(cuda::lepe_copy16_launches() - copies_before, 6) << "16-byte window copies not taken, d " << c.d;
      else EXPECT_EQ(cuda::lepe_copy16_launches(), copies_before) << "16-byte window copies taken where d " << c.d << " does not allow them";
      cuda::set_ln_gate_bwd_blocks(1);  // more tokens a block than 4 an SM gives, in every case of ≥ 1,056 tokens
      Result f1 = run(true, in, c.gh, c.gw, w, bf16);
      cuda::set_ln_gate_bwd_blocks(8);  // fewer, where a block had more than kWarps (BlocksWalkingSeveralTiles)
      Result f8 = run(true, in, c.gh, c.gw, w, bf16);
      cuda::set_ln_gate_bwd_blocks(4);
      char what[128];
      std::snprintf(what, sizeof what, "B%lld H%lld d%lld grid %lldx%lld ks%lld %s", (long long)c.B, (long long)c.H, (long long)c.d,
                    (long long)c.gh, (long long)c.gw, (long long)c.ks, bf16 ? "bf16 autocast" : "fp32");
      const at::Tensor* fs[] = {&f.y, &f.dqkvg, &f.do_, &f.dlw, &f.dlb, &f.dnw, &f.dnb};
      const at::Tensor* f2s[] = {&f2.y, &f2.dqkvg, &f2.do_, &f2.dlw, &f2.dlb, &f2.dnw, &f2.dnb};
      const at::Tensor* fsts[] = {&fst.y, &fst.dqkvg, &fst.do_, &fst.dlw, &fst.dlb, &fst.dnw, &fst.dnb};
      const at::Tensor* fst1s[] = {&fst1.y, &fst1.dqkvg, &fst1.do_, &fst1.dlw, &fst1.dlb, &fst1.dnw, &fst1.dnb};
      const at::Tensor* fvs[] = {&fv.y, &fv.dqkvg, &fv.do_, &fv.dlw, &fv.dlb, &fv.dnw, &fv.dnb};
      const at::Tensor* fv0s[] = {&fv0.y, &fv0.dqkvg, &fv0.do_, &fv0.dlw, &fv0.dlb, &fv0.dnw, &fv0.dnb};
      const at::Tensor* fv1s[] = {&fv1.y, &fv1.dqkvg, &fv1.do_, &fv1.dlw, &fv1.dlb, &fv1.dnw, &fv1.dnb};
      const at::Tensor* fms[] = {&fm.y, &fm.dqkvg, &fm.do_, &fm.dlw, &fm.dlb, &fm.dnw, &fm.dnb};
      const at::Tensor* f1s[] = {&f1.y, &f1.dqkvg, &f1.do_, &f1.dlw, &f1.dlb, &f1.dnw, &f1.dnb};
      const at::Tensor* f8s[] = {&f8.y, &f8.dqkvg, &f8.do_, &f8.dlw, &f8.dlb, &f8.dnw, &f8.dnb};
      const at::Tensor* ps[] = {&p.y, &p.dqkvg, &p.do_, &p.dlw, &p.dlb, &p.dnw, &p.dnb};
      const at::Tensor* ts[] = {&t.y, &t.dqkvg, &t.do_, &t.dlw, &t.dlb, &t.dnw, &t.dnb};
      const char* names[] = {"y", "d qkvg", "d o", "d lepe.w", "d lepe.b", "d norm.w", "d norm.b"};
      for (int i = 0; i < 7; ++i) {
        ASSERT_EQ(fs[i]->defined(), ts[i]->defined()) << what << " " << names[i];
        if (!fs[i]->defined()) continue;
        ASSERT_EQ(fs[i]->sizes(), ts[i]->sizes()) << what << " " << names[i];
        EXPECT_TRUE(at::equal(*fs[i], *f2s[i])) << what << " " << names[i] << ": not bitwise repeatable";
        EXPECT_TRUE(at::equal(*fs[i], *fsts[i])) << what << " " << names[i] << ": staged (NALA_LEPE_STAGED=both) differs from unstaged";
        EXPECT_TRUE(at::equal(*fs[i], *fst1s[i])) << what << " " << names[i] << ": staged, one buffer (both1) differs from unstaged";
        EXPECT_TRUE(at::equal(*fs[i], *fvs[i])) << what << " " << names[i] << ": staged in 16-byte pieces differs from unstaged";
        EXPECT_TRUE(at::equal(*fs[i], *fv0s[i])) << what << " " << names[i] << ": 16-byte window pieces (unstaged) differ from 4-byte copies";
        EXPECT_TRUE(at::equal(*fs[i], *fv1s[i])) << what << " " << names[i] << ": du staged, one buffer, 16-byte pieces differs from unstaged";
        // the tensor cores' weight gradient: LePE's weight and bias gradients (indices 3, 4) are the same exact
        // bf16 products added in fp32 in another order (the tensor cores' own additions among them), so near
        // the FMA kernel's sums: far inside a bf16 rounding (4e-3), where a wrong tap or position is O(1);
        // everything else bit for bit
        if (i == 3 || i == 4) {
          EXPECT_LT(rel(*fms[i], *fs[i]), 1e-3) << what << " " << names[i] << ": tensor-core weight gradient against the FMA kernel's";
          if (mma) std::printf("  %-42s %-9s tensor-core sums against the FMA kernel's %.2e\n", what, names[i], rel(*fms[i], *fs[i]));
        } else {
          EXPECT_TRUE(at::equal(*fs[i], *fms[i])) << what << " " << names[i] << ": changed by the tensor-core weight gradient";
        }
        const double ef = rel(*fs[i], *ts[i]), ep = rel(*ps[i], *ts[i]);
        std::printf("  %-42s %-9s fused err %.2e  composition err %.2e\n", what, names[i], ef, ep);
        if (!bf16) EXPECT_LT(ef, 1e-5) << what << " " << names[i];
        else EXPECT_LE(ef, 2 * ep + 4e-3) << what << " " << names[i];
        if (bf16) EXPECT_LE(rel(*fms[i], *ts[i]), 2 * ep + 4e-3) << what << " " << names[i] << " (tensor-core weight gradient)";
        for (const auto& [blocks, fb] : {std::pair<int, const at::Tensor*>{1, f1s[i]}, {8, f8s[i]}}) {  // other partial sums, same bounds
          const double eb = rel(*fb, *ts[i]);
          if (!bf16) EXPECT_LT(eb, 1e-5) << what << " " << names[i] << " (" << blocks << " ln_gate_bwd blocks an SM)";
          else EXPECT_LE(eb, 2 * ep + 4e-3) << what << " " << names[i] << " (" << blocks << " ln_gate_bwd blocks an SM)";
        }
      }
      if (bf16) EXPECT_EQ(f.y.scalar_type(), at::kBFloat16);  // what the projection reads under autocast
    }
  }
}

}  // namespace

TEST_F(GatedTailKernels, MatchFloat64AndTheComposition) {
  // grids wider than the kernels' 16-token strips (several strips a row, a partial last one) too
  check_cases({{8, 6, 64, 16, 16, 5}, {1, 12, 72, 4, 4, 5} /* D 864: a lane's last two vectors past the row */, {3, 2, 72, 5, 9, 3}, {2, 3, 12, 7, 7, 7}, {2, 16, 72, 4, 4, 5}, {1, 24, 64, 3, 5, 5},
               {4, 6, 64, 8, 8, 0}, {1, 1, 4, 1, 1, 5}, {2, 2, 8, 3, 33, 5}, {1, 6, 64, 9, 64, 5}, {1, 2, 72, 40, 3, 7},
               // LePE 7 and 3 wider than a strip, every tap inside the grid (the tensor cores' weight gradient)
               {2, 2, 64, 40, 40, 7}, {16, 2, 64, 9, 40, 3},
               // 1,100 one-token tiles of one channel chunk against ≈ 8 lepe_wgrad blocks an SM (1,056 on
               // 132 SMs): a few blocks walk two tiles (double-buffered windows), small enough for racecheck
               {1100, 1, 4, 1, 1, 5}});
}

TEST_F(GatedTailKernels, BlocksWalkingSeveralTiles) {
  // Many LePE tiles a block: the next window copied in while one is computed. lepe_wgrad launches
  // ≈ 8 blocks an SM over the channel chunks (176 along the tiles for D = 384 on 132 SMs) against
  // 192 (bf16, 8-row tiles) or 384 (fp32, 4-row) tiles here; lepe_conv at most 65,535, fewer
  // than the 65,600 one-token samples here. lepe_wgrad_mma launches 2 blocks an SM (44 along the tiles
  // for D = 384, 132 for D = 128): two buffers at LePE 5, one (refilled after each tile) at LePE 7.
  check_cases({{96, 6, 64, 16, 16, 5}, {65600, 1, 4, 1, 1, 7}, {96, 2, 64, 16, 16, 7}});
}

// NALA_LEPE_STAGED's and NALA_LN_GATE_BWD_BLOCKS's values, and an error naming a wrong one
TEST(GatedTailSwitches, Values) {
  // a wrong value is an error that names the variable and the value
  const auto rejected = [](const char* var, const std::string& value, const std::function<void(const std::string&)>& parse) {
    try {
      parse(value);
      ADD_FAILURE() << var << "='" << value << "' accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(var) + "='" + value + "'"), std::string::npos) << e.what();
    }
  };
  EXPECT_EQ(cuda::lepe_staging_of(""), cuda::kStageResidual | cuda::kStageDu);  // the default
  EXPECT_EQ(cuda::lepe_staging_of("off"), 0);
  EXPECT_EQ(cuda::lepe_staging_of("0"), 0);
  EXPECT_EQ(cuda::lepe_staging_of("1"), cuda::kStageResidual | cuda::kStageDu);
  EXPECT_EQ(cuda::lepe_staging_of("du1"), cuda::kStageDu | cuda::kStageOneBuffer);
  EXPECT_EQ(cuda::lepe_staging_of("residual"), cuda::kStageResidual);
  EXPECT_EQ(cuda::lepe_staging_of("du"), cuda::kStageDu);
  EXPECT_EQ(cuda::lepe_staging_of("both"), cuda::kStageResidual | cuda::kStageDu);
  EXPECT_EQ(cuda::lepe_staging_of("both1"), cuda::kStageResidual | cuda::kStageDu | cuda::kStageOneBuffer);
  rejected("NALA_LEPE_STAGED", "yes", [](const std::string& v) { cuda::lepe_staging_of(v); });
  EXPECT_TRUE(cuda::lepe_copy16_of(""));  // the default
  EXPECT_TRUE(cuda::lepe_copy16_of("1"));
  EXPECT_FALSE(cuda::lepe_copy16_of("0"));
  rejected("NALA_LEPE_COPY16", "on", [](const std::string& v) { cuda::lepe_copy16_of(v); });
  EXPECT_FALSE(cuda::lepe_wgrad_mma_of(""));  // the default
  EXPECT_FALSE(cuda::lepe_wgrad_mma_of("0"));
  EXPECT_TRUE(cuda::lepe_wgrad_mma_of("1"));
  rejected("NALA_LEPE_WGRAD_MMA", "yes", [](const std::string& v) { cuda::lepe_wgrad_mma_of(v); });
  EXPECT_EQ(cuda::ln_gate_bwd_blocks_of(""), 4);
  EXPECT_EQ(cuda::ln_gate_bwd_blocks_of("8"), 8);
  EXPECT_EQ(cuda::ln_gate_bwd_blocks_of("16"), 16);
  for (const char* bad : {"0", "17", "8x", "many", " 8", "+8", "-1"})
    rejected("NALA_LN_GATE_BWD_BLOCKS", bad, [](const std::string& v) { cuda::ln_gate_bwd_blocks_of(v); });
}

// The whole NaLaDiT-S/2 step on CUDA, fused (this tail included) vs NALA_FUSED_BLOCKS=0, is
// BlockKernels.DiTStepFusedEqualsUnfused (tests/cuda/block_kernels_test.cpp).

// NALA_RECOMPUTE=1 on the gated block as the trainer runs it (CUDA, bf16 autocast, and float32):
// q, k, v and the gate from two GEMMs of qkvg's rows instead of one, the attention, gate, tail and
// projection as nala_mixer_recomputing (the attention's state and output, the gate, u and y
// recomputed in the backward). The output and the gradients of the
// input and of every parameter equal the kept path's within float32 rounding, and within bf16
// rounding under autocast (cuBLAS may pick other kernels for the narrower GEMMs); the worst
// difference is printed.
TEST_F(GatedTailKernels, RecomputeKeepsTheBlocksGradients) {
  for (bool autocast : {false, true}) {
    torch::manual_seed(11);
    GatedNalaAttention block(384, 6, GatedNalaConfig{});
    block.to(at::kCUDA);
    const at::Tensor x0 = at::randn({4, 256, 384}, at::kCUDA), w = at::randn({4, 256, 384}, at::kCUDA);
    auto run_block = [&](bool recompute) {
      set_recompute_saved(recompute);
      block.zero_grad();
      at::Tensor x = x0.clone().requires_grad_(true), out;
      const int64_t before = recomputations();
      {
        Autocast ac(autocast);
        out = block.forward(x, 16, 16);  // (B, N, D)
      }
      (out.to(at::kFloat) * w).sum().backward();
      EXPECT_EQ(recomputations() - before, recompute ? 3 : 0) << "the state, g, and u with y, each once (forward_recomputing chosen)";
      set_recompute_saved(false);
      std::vector<at::Tensor> r = {out.detach(), x.grad()};
      for (const auto& p : block.parameters()) r.push_back(p.grad().clone());
      return r;
    };
    const auto kept = run_block(false), again = run_block(true);
    double worst = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
      const double e = rel(again[i], kept[i]);
      worst = std::max(worst, e);
      EXPECT_LT(e, autocast ? 1e-2 : 1e-5) << (i == 0 ? "the output" : "gradient " + std::to_string(i - 1)) << ", autocast " << autocast;
    }
    std::printf("recompute vs kept, %s: worst output or gradient difference %.2e\n", autocast ? "bf16 autocast" : "float32", worst);
  }
}

// NALA_LEPE_IN_ATTENTION's paths: nala_mixer on CUDA, where the one-pass attention kernel writes
// u = o + LePE(v) + b itself (attention/cuda/onepass_kernels.cuh, lepe_rows_out) and, with
// lepe_kernels = 2, its backward adds LePE's part of dv to its own (onepass_backward.cuh), against the
// block's default path, nala_attention and then gated_tail (the one-pass kernel writes o, lepe_conv
// makes u, lepe_conv's transposed pass LePE's dv, autograd adds v's two gradients). bf16, B·H enough for
// the one-pass kernel. The kernels' sums are lepe_conv's in lepe_conv's order and the gradients' sum
// as autograd rounds it, so y and every gradient (of qkvg through q, k, v, g and v's second view, of
// LePE's and the norm's parameters) are bit for bit equal. Shapes: DiT-S/2's 16 × 16 grid (the
// forward's window in the kernel's unused front, the backward's in the φ tile), a 32 × 32 grid over a
// cluster of ranks (the forward's window past the kernel's shared memory; too large for the backward's,
// which leaves LePE's dv to the tail), a 12 × 24 grid whose tiles end mid-row with LePE 3 (the
// backward's window too large as well), d = 72 and LePE 3 (both in the kernels), a 9 × 14 grid (runs of
// 4 tokens that cross a grid row, a last tile of 62 tokens: lepe_rows_out's per-token path), a 2 × 64 grid
// (one-row tiles: the forward's 1 × 8 token blocks; the 16- and 32-wide grids take 2 × 4 blocks); the backward with the
// hi + lo state and with bf16 alone (NALA_ONEPASS_BWD_STATE's two kernels). The kernel paths are counted
// (lepe_in_attention_runs, lepe_in_attention_backward_runs), so a shape a kernel declines fails here
// instead of passing unfused.
struct LepeCase {
  int64_t B, H, d, gh, gw, ks;
  bool backward;  // the backward's window fits the φ tile
};
// nala_mixer with LePE in the kernels (1, 2) against the two operations, bit for bit, on each case with
// both backward states; every output poisoned, the kernel paths counted.
static void expect_lepe_in_attention_equal(std::initializer_list<LepeCase> cases) {
  using Case = LepeCase;
  set_nala_cuda_poison(true);  // every output NaN before a launch: an element the kernel skips cannot pass as the last run's
  for (const OnePassBackwardState state : {OnePassBackwardState::HiLo, OnePassBackwardState::Bf16})  // both backward kernels, both paths
  for (const Case& c : cases) {
    set_nala_onepass_backward_state(state);
    torch::manual_seed(21);
    const int64_t N = c.gh * c.gw, D = c.H * c.d;
    const auto act = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16), par = at::TensorOptions().device(at::kCUDA);
    const at::Tensor qkvg0 = at::randn({c.B, N, 4, c.H, c.d}, act), w = at::randn({c.B, N, D}, par);
    const at::Tensor lw0 = 0.2 * at::randn({D, 1, c.ks, c.ks}, par), lb0 = 0.1 * at::randn({D}, par);
    const at::Tensor nw0 = 1 + 0.3 * at::randn({D}, par), nb0 = 0.2 * at::randn({D}, par);
    const std::string shape = "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " d" + std::to_string(c.d) + " grid " +
                              std::to_string(c.gh) + "x" + std::to_string(c.gw) + " ks" + std::to_string(c.ks) +
                              (state == OnePassBackwardState::HiLo ? " hi+lo" : " bf16 state");
    auto run_path = [&](int kernels) {  // 0: the two operations; 1, 2: nala_mixer with LePE in the forward, and in the backward
      auto leaf = [](const at::Tensor& t) { return t.detach().clone().requires_grad_(true); };
      at::Tensor qkvg = leaf(qkvg0), lw = leaf(lw0), lb = leaf(lb0), nw = leaf(nw0), nb = leaf(nb0);
      at::Tensor q = qkvg.select(2, 0).transpose(1, 2), k = qkvg.select(2, 1).transpose(1, 2), v = qkvg.select(2, 2).transpose(1, 2);
      at::Tensor v_tok = qkvg.select(2, 2).reshape({c.B, N, D}), g = qkvg.select(2, 3).reshape({c.B, N, D});  // (B, N, D) views
      const NalaOptions opt;
      const int64_t fwd0 = lepe_in_attention_runs(), bwd0 = lepe_in_attention_backward_runs();
      at::Tensor y = kernels > 0 ? nala_mixer(q, k, v, v_tok, g, lw, lb, nw, nb, opt, c.gh, c.gw, 1e-5, kernels)
                                 : gated_tail_fused(nala_attention(q, k, v, opt), v_tok, g, lw, lb, nw, nb, c.gh, c.gw, 1e-5);  // (B, N, D)
      (y.to(at::kFloat) * w).sum().backward();
      EXPECT_EQ(lepe_in_attention_runs() - fwd0, kernels > 0 ? 1 : 0) << shape << ", kernels " << kernels << ": the forward with LePE";
      EXPECT_EQ(lepe_in_attention_backward_runs() - bwd0, kernels == 2 && c.backward ? 1 : 0) << shape << ", kernels " << kernels
                                                                                               << ": the backward with LePE";
      return std::vector<at::Tensor>{y.detach(), qkvg.grad(), lw.grad(), lb.grad(), nw.grad(), nb.grad()};
    };
    const auto two = run_path(0);
    const char* names[] = {"y", "d qkvg", "d lepe.weight", "d lepe.bias", "d norm.weight", "d norm.bias"};
    for (int kernels : {1, 2}) {
      const auto one = run_path(kernels);
      const std::string what = shape + ", LePE in the kernels " + std::to_string(kernels);
      for (size_t i = 0; i < two.size(); ++i) {
        ASSERT_TRUE(one[i].defined() && two[i].defined()) << what << " " << names[i];
        EXPECT_TRUE(at::equal(one[i], two[i])) << what << " " << names[i] << ": relative difference " << rel(one[i], two[i]);
      }
      std::printf("  %-62s y %.2e, d qkvg %.2e relative difference\n", what.c_str(), rel(one[0], two[0]), rel(one[1], two[1]));
    }
  }
  set_nala_onepass_backward_state(OnePassBackwardState::Auto);
  set_nala_cuda_poison(false);
}

TEST_F(GatedTailKernels, LepeInAttentionEqualsTheTwoOperations) {
  expect_lepe_in_attention_equal({{48, 6, 64, 16, 16, 5, true}, {8, 6, 64, 32, 32, 5, false}, {48, 6, 64, 12, 24, 3, false},
                                  {48, 5, 72, 16, 16, 5, true}, {48, 6, 64, 16, 16, 3, true}, {24, 6, 64, 9, 14, 3, true},
                                  {48, 6, 64, 2, 64, 5, true}});
}

// The same shapes at batch 2, the one-pass kernels forced (NALA_ATTENTION_KERNEL=onepass; the automatic
// rule leaves so few (b, h) pairs to the chunked kernels): B·H = 10-12 pairs, each split over a cluster of
// ranks (4 of 64 tokens at 16 × 16, 8 of 128 at 32 × 32, 5 of 64 at 12 × 24). Small enough for
// compute-sanitizer's racecheck, which the test above outruns (a device call's 600 s).
TEST_F(GatedTailKernels, LepeInAttentionOverClusterRanks) {
  set_nala_cuda_kernel(NalaCudaKernel::OnePass);
  for (const bool blocks : {true, false}) {  // LePE over token blocks where tiles are whole grid rows, and runs of 4 everywhere
    set_nala_lepe_blocks(blocks);
    expect_lepe_in_attention_equal({{2, 6, 64, 16, 16, 5, true}, {2, 6, 64, 32, 32, 5, false}, {2, 6, 64, 12, 24, 3, false},
                                    {2, 5, 72, 16, 16, 5, true}, {2, 6, 64, 9, 14, 3, true}, {2, 6, 64, 2, 64, 5, true}});
  }
  set_nala_lepe_blocks(true);
  set_nala_cuda_kernel(NalaCudaKernel::Auto);
}

// LePE on the tensor cores (NALA_LEPE_MMA; d 64, grids 16 tokens wide): its table bit for bit its CPU
// twin's (ATen's casts and copies); u = o + LePE(v) + b within one bf16 rounding of the blocks' path (which
// equals the two operations bit for bit, above) and of a float64 u (o as the one-pass kernel returns it plus
// a float64 conv2d), differing from the blocks' in few elements but in some (the path ran); every output
// poisoned (NaN) first. Tiles of 4, 3 and 1 grid rows (grids of 16, 11 and 9 rows: 64-token tiles of 4 rows, the
// last 3 or 1), one rank and 3-4 ranks a pair, ks 5 and 3.
TEST_F(GatedTailKernels, LepeOnTheTensorCores) {
  for (const int64_t ks : {5, 3}) {
    torch::manual_seed(5);
    const at::Tensor taps = 0.2 * at::randn({ks * ks, 6 * 64}, at::kCUDA);  // (ks², H·d)
    const at::Tensor gpu = nala_lepe_mma_table(taps, 6, 64, ks), twin = nala_lepe_mma_table(taps.cpu(), 6, 64, ks);  // (H, bytes) ×2
    EXPECT_TRUE(at::equal(gpu.cpu(), twin)) << "ks " << ks << ": the table against its CPU twin";
  }
  set_nala_cuda_poison(true);
  set_nala_cuda_kernel(NalaCudaKernel::OnePass);
  struct C {
    int64_t B, gh, ks;
    int ranks;
  };
  for (const C& c : {C{8, 16, 5, 0}, C{8, 16, 3, 0}, C{4, 9, 5, 0}, C{4, 11, 5, 4}, C{2, 16, 5, 4}, C{3, 9, 3, 1}}) {
    set_nala_onepass_ranks(c.ranks);
    torch::manual_seed(13);
    const int64_t H = 6, d = 64, W = 16, N = c.gh * W, D = H * d;
    const std::string what = "B" + std::to_string(c.B) + " grid " + std::to_string(c.gh) + "x16 ks" + std::to_string(c.ks) + " ranks " +
                             std::to_string(c.ranks);
    const auto act = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
    const at::Tensor q = at::randn({c.B, H, N, d}, act), k = at::randn_like(q), v = at::randn_like(q);  // (B, H, N, d)
    const at::Tensor w = 0.2 * at::randn({D, 1, c.ks, c.ks}, at::kCUDA), b = 0.1 * at::randn({D}, at::kCUDA);  // (D, 1, ks, ks), (D)
    const NalaOptions opt;
    set_nala_lepe_mma(false);
    const at::Tensor blocks = nala_forward_lepe_cuda(q, k, v, opt, false, w, b, c.gh, W).u;  // (B, N, D)
    set_nala_lepe_mma(true);
    const at::Tensor mma = nala_forward_lepe_cuda(q, k, v, opt, false, w, b, c.gh, W).u;  // (B, N, D)
    set_nala_lepe_mma(false);
    EXPECT_TRUE(blocks.defined() && mma.defined()) << what << ": the one-pass forward did not take LePE";
    if (!blocks.defined() || !mma.defined()) continue;
    // float64: o as the kernel returns it, plus the convolution of v and the bias
    const at::Tensor o = nala_forward_cuda(q, k, v, opt, false).o.transpose(1, 2).reshape({c.B, N, D}).to(at::kDouble);  // (B, N, D)
    const at::Tensor vi = v.permute({0, 1, 3, 2}).reshape({c.B, D, c.gh, W}).to(at::kDouble);                           // (B, D, gh, W)
    const at::Tensor conv = at::conv2d(vi, w.to(at::kDouble), b.to(at::kDouble), 1, c.ks / 2, 1, D);                     // (B, D, gh, W)
    const at::Tensor u64 = o + conv.reshape({c.B, D, N}).transpose(1, 2);                                                // (B, N, D)
    const at::Tensor m = mma.to(at::kDouble), r = blocks.to(at::kDouble);  // (B, N, D) ×2
    EXPECT_FALSE(at::isnan(m).any().item<bool>()) << what << ": an element of u not written";
    // one bf16 rounding: |x − y| ≤ 2⁻⁷ max(|x|, |y|), + 2e-5 where u is near zero: the taps to 16 significant bits
    // (hi + lo) and float32 sums in another order, over 25 terms |w v| ≲ 1 (5.4e-6 at most on an H100)
    const double apart = ((m - r).abs() - at::maximum(m.abs(), r.abs()) * (1.0 / 128)).max().item<double>();
    const double off64 = ((m - u64).abs() - u64.abs() * (1.0 / 128)).max().item<double>();
    const double differ = (m != r).to(at::kDouble).mean().item<double>();
    EXPECT_LE(apart, 2e-5) << what << ": tensor cores against the blocks";
    EXPECT_LE(off64, 1e-4) << what << ": tensor cores against float64";
    EXPECT_LE(differ, 0.02) << what << ": the fraction of elements that differ from the blocks'";
    EXPECT_GT(differ, 0.0) << what << ": u equals the blocks' bit for bit: the tensor cores did not run";
    const at::Tensor err = ((m - u64).abs() - u64.abs() * (1.0 / 128)).flatten();  // (B·N·D): where the tensor cores are worst
    const int64_t worst = err.argmax().item<int64_t>(), bi = worst / (N * D), n = worst / D % N, ch = worst % D;
    std::printf("  %-36s differ from the blocks in %.4f of u; max |u - u64| %.2e (blocks %.2e); worst at b %lld token %lld (row %lld, "
                "column %lld) channel %lld: %.5f, blocks %.5f, float64 %.5f\n",
                what.c_str(), differ, (m - u64).abs().max().item<double>(), (r - u64).abs().max().item<double>(), (long long)bi, (long long)n,
                (long long)(n / W), (long long)(n % W), (long long)ch, m.flatten()[worst].item<double>(), r.flatten()[worst].item<double>(),
                u64.flatten()[worst].item<double>());
  }
  set_nala_onepass_ranks(0);
  set_nala_cuda_kernel(NalaCudaKernel::Auto);
  set_nala_cuda_poison(false);
}

// The column sums the kernels make as they write the gradients in place (NALA_QKVG_COLUMN_SUMS), each
// against the float64 sum of what they stored: the one-pass backward with LePE (nala_backward_cuda's
// column_sums: dq, dk, dv) and ln_gate_bwd (gated_tail_backward's g_sum). Only nala's kernels and ATen's
// element-wise ones run (no GEMM), so compute-sanitizer's racecheck can take it whole. Shapes: d 64 with
// LePE 5 on a 16 × 16 grid and with LePE 3 on a 9 × 14 grid (a last tile of 62 tokens; at d 72 there is
// no summing kernel, and the sums stay undefined while the gradients are written as before); the
// one-pass kernels forced, over 1, 2 and 4 ranks a (batch, head) (at most one a tile: the 9 × 14 grid
// takes 2) and the automatic split (each CTA its own row of partial sums), both backward states; the
// buffer and the one-pass backward's partial sums poisoned (NaN) first (ln_gate_bwd's are not: a block
// that left its row unwritten would still miss the float64 sum).
TEST_F(GatedTailKernels, ColumnSumsOfTheGradientsAsStored) {
  struct C {
    int64_t B, H, d, gh, gw, ks;
  };
  set_nala_cuda_kernel(NalaCudaKernel::OnePass);
  set_nala_cuda_poison(true);
  for (const int ranks : {1, 2, 4, 0})
  for (const OnePassBackwardState state : {OnePassBackwardState::HiLo, OnePassBackwardState::Bf16})
    for (const C& c : {C{3, 6, 64, 16, 16, 5}, C{2, 5, 64, 9, 14, 3}, C{2, 5, 72, 9, 14, 3}}) {
      set_nala_onepass_ranks(ranks);
      set_nala_onepass_backward_state(state);
      torch::manual_seed(8);
      const int64_t N = c.gh * c.gw, D = c.H * c.d;
      const auto act = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16), par = at::TensorOptions().device(at::kCUDA);
      const at::Tensor qkvg = at::randn({c.B, N, 4, c.H, c.d}, act);
      auto head_view = [&](const at::Tensor& t, int64_t i) { return t.select(2, i).transpose(1, 2); };  // (B, H, N, d)
      const at::Tensor q = head_view(qkvg, 0), k = head_view(qkvg, 1), v = head_view(qkvg, 2);
      const at::Tensor v_tok = qkvg.select(2, 2).reshape({c.B, N, D}), g = qkvg.select(2, 3).reshape({c.B, N, D});  // (B, N, D) views
      const at::Tensor lw = 0.2 * at::randn({D, 1, c.ks, c.ks}, par), lb = 0.1 * at::randn({D}, par);
      const at::Tensor nw = 1 + 0.3 * at::randn({D}, par), nb = 0.2 * at::randn({D}, par);
      const std::string what = "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " d" + std::to_string(c.d) + " grid " +
                               std::to_string(c.gh) + "x" + std::to_string(c.gw) + " ks" + std::to_string(c.ks) +
                               (state == OnePassBackwardState::HiLo ? " hi+lo" : " bf16 state") + (ranks > 0 ? ", ranks " + std::to_string(ranks) : ", ranks by the rule");
      const NalaOptions opt;
      ASSERT_TRUE(nala_lepe_backward_takes(q, k, v, opt, c.ks, c.gh, c.gw)) << what;
      const NalaForward f = nala_forward_cuda(q, k, v, opt, true);  // o and the state (B, H, N, d)
      const cuda::GatedTailSaved t = cuda::gated_tail_forward(f.o, v_tok, g, lw, lb, nw, nb, c.gh, c.gw, 1e-5, true);
      const at::Tensor dy = at::randn({c.B, N, D}, act);
      const at::Tensor buf = at::full({c.B, N, 4, c.H, c.d}, std::numeric_limits<float>::quiet_NaN(), act);  // the gradients in qkvg's layout
      const cuda::GatedTailGrads r =
          cuda::gated_tail_backward(dy, c.H, v_tok, g, lw, nw, nb, t.u, t.mean, t.rstd, c.gh, c.gw, false, buf.select(2, 3).reshape({c.B, N, D}), true);
      at::Tensor sums;  // (3, H, d)
      nala_backward_cuda(q, k, v, f.S, f.z, f.den, r.o, opt, lw, c.gh, c.gw, head_view(buf, 0), head_view(buf, 1), head_view(buf, 2), &sums);
      ASSERT_TRUE(r.g_sum.defined()) << what << ": no column sums of dg";
      ASSERT_EQ(sums.defined(), nala_backward_sums_columns(c.d)) << what;
      if (!sums.defined()) {  // no summing kernel at this head dim: the gradients were written all the same
        EXPECT_FALSE(at::isnan(buf).any().item<bool>()) << what << ": a gradient element not written";
        continue;
      }
      const at::Tensor truth = buf.to(at::kDouble).sum(at::IntArrayRef{0, 1});  // (4, H, d) of what the kernels stored
      ASSERT_EQ(sums.sizes(), truth.narrow(0, 0, 3).sizes());
      const double eq = (sums.to(at::kDouble) - truth.narrow(0, 0, 3)).abs().max().item<double>() / truth.narrow(0, 0, 3).abs().max().item<double>();
      const double eg = (r.g_sum.to(at::kDouble) - truth.select(0, 3).reshape({D})).abs().max().item<double>() / truth.select(0, 3).abs().max().item<double>();
      std::printf("  %-40s column sums of dq, dk, dv %.2e, of dg %.2e relative to float64\n", what.c_str(), eq, eg);
      EXPECT_LT(eq, 1e-5) << what << ": dq, dk, dv";  // float32 sums of ≤ 768 exact bf16 values a column
      EXPECT_LT(eg, 1e-5) << what << ": dg";
      at::Tensor again;
      nala_backward_cuda(q, k, v, f.S, f.z, f.den, r.o, opt, lw, c.gh, c.gw, head_view(buf, 0), head_view(buf, 1), head_view(buf, 2), &again);
      EXPECT_TRUE(at::equal(again, sums)) << what << ": not bitwise repeatable";
    }
  set_nala_onepass_ranks(0);
  set_nala_onepass_backward_state(OnePassBackwardState::Auto);
  set_nala_cuda_kernel(NalaCudaKernel::Auto);
  set_nala_cuda_poison(false);
}

// NALA_QKVG_GRADS_IN_PLACE (ops/fused_ops.h): the gated block as the model runs it (qkvg's projection and
// split, nala_mixer with LePE in both attention kernels, the projection), bf16 autocast, the one-pass
// kernels forced; with the switch the one-pass backward and the LayerNorm-gate kernel write q's, k's,
// v's and g's gradients into one buffer in qkvg's layout and the split takes it without a gather. The
// output and every gradient equal the gathered path's bit for bit, but qkvg's bias gradient (the same
// float32 sum in another order: the column sum, not the summing gather) within 1e-5 of its largest
// element; the paths taken are counted. The attention kernels' outputs are poisoned (NaN) before they
// run, and the in-place path runs first, after a NaN tensor of the buffer's size went back to the
// allocator (whose block the buffer likely gets), so a row no kernel writes shows as NaN, not as the
// gathered path's values left in freed memory. With NALA_QKVG_COLUMN_SUMS the kernels also sum the
// buffer's columns as they write it (the one-pass backward per warp and tile, its partial sums poisoned
// too; ln_gate_bwd per block) and the split takes those as qkvg's bias gradient (counted): again
// every other gradient bit for bit, the bias within 1e-5 (at d 72, which has no summing kernel, the
// column sum runs: nothing offered). The shapes: 1-4 ranks a (batch, head), d 64 and 72, LePE 5 and 3,
// and 126 tokens (a last tile of 62).
TEST_F(GatedTailKernels, QkvgGradientsWrittenInPlace) {
  struct C {
    int64_t B, H, d, gh, gw, ks;
  };
  const bool was = qkvg_grads_in_place(), sums_was = qkvg_column_sums_in_kernel(), recompute_was = recompute_saved();
  set_lepe_in_attention(2);  // the path under test, whatever the environment says
  set_recompute_saved(false);
  set_nala_cuda_kernel(NalaCudaKernel::OnePass);
  set_nala_cuda_poison(true);
  for (const C& c : {C{4, 6, 64, 16, 16, 5}, C{2, 5, 72, 16, 16, 5}, C{3, 6, 64, 9, 14, 3}}) {
    const int64_t N = c.gh * c.gw, D = c.H * c.d;
    torch::manual_seed(5);
    GatedNalaConfig cfg;
    cfg.lepe_kernel = c.ks;
    auto blk = std::make_shared<GatedNalaAttention>(D, c.H, cfg);
    blk->to(at::kCUDA);
    const at::Tensor x0 = at::randn({c.B, N, D}, at::TensorOptions().device(at::kCUDA)), w = at::randn({c.B, N, D}, x0.options());
    const std::string what = "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " d" + std::to_string(c.d) + " grid " + std::to_string(c.gh) +
                             "x" + std::to_string(c.gw) + " ks" + std::to_string(c.ks);
    auto run = [&](bool in_place, bool sums) {
      set_qkvg_grads_in_place(in_place);
      set_qkvg_column_sums_in_kernel(sums);
      blk->zero_grad();
      const at::Tensor x = x0.clone().requires_grad_(true);
      at::full({c.B, N, 4, c.H, c.d}, std::numeric_limits<float>::quiet_NaN(), x0.options().dtype(at::kBFloat16));  // freed at once
      const int64_t bwd0 = lepe_in_attention_backward_runs(), placed0 = qkvg_grads_in_place_runs(), taken0 = split_heads_assembled_backwards(),
                    summed0 = split_heads_offered_sums_taken();
      at::Tensor y;
      {
        Autocast ac(true);
        y = blk->forward(x, c.gh, c.gw);  // (B, N, D)
      }
      (y.to(at::kFloat) * w).sum().backward();
      EXPECT_EQ(lepe_in_attention_backward_runs() - bwd0, 1) << what << ": the backward with LePE in the kernel did not run";
      EXPECT_EQ(qkvg_grads_in_place_runs() - placed0, in_place ? 1 : 0) << what << ", in place " << in_place;
      EXPECT_EQ(split_heads_assembled_backwards() - taken0, in_place ? 1 : 0) << what << ", in place " << in_place;
      EXPECT_EQ(split_heads_offered_sums_taken() - summed0, in_place && sums && nala_backward_sums_columns(c.d) ? 1 : 0)
          << what << ", in place " << in_place << ", sums " << sums;
      std::vector<std::pair<std::string, at::Tensor>> r{{"y", y.detach()}, {"d x", x.grad()}};
      for (const auto& p : blk->named_parameters()) r.emplace_back("d " + p.key(), p.value().grad().clone());
      return r;
    };
    const auto summed = run(true, true), placed = run(true, false), gathered = run(false, false);
    for (const auto* other : {&placed, &summed}) {
      const std::string how = other == &summed ? "in place with the kernels' sums" : "in place, column sum";
      ASSERT_EQ(gathered.size(), other->size());
      for (size_t i = 0; i < gathered.size(); ++i) {
        const auto& [name, a] = gathered[i];
        const at::Tensor& b = (*other)[i].second;
        ASSERT_TRUE(a.defined() && b.defined()) << what << " " << name;
        if (name == "d qkvg.bias") {
          const double err = (a - b).abs().max().item<double>() / a.abs().max().item<double>();
          EXPECT_LE(err, 1e-5) << what << " " << name << ", " << how;
          std::printf("  %-34s qkvg.bias relative difference %.2e (%s)\n", what.c_str(), err, how.c_str());
        } else {
          EXPECT_TRUE(at::equal(a, b)) << what << " " << name << ", " << how << ": relative difference " << rel(a, b);
        }
      }
    }
  }
  set_qkvg_grads_in_place(was);
  set_qkvg_column_sums_in_kernel(sums_was);
  set_recompute_saved(recompute_was);
  reset_lepe_in_attention();
  set_nala_cuda_poison(false);
  set_nala_cuda_kernel(NalaCudaKernel::Auto);
}
