// The fused CUDA kernels against the ATen reference (docs/nala_attention.md §8): fp32 within 1e-5 relative;
// fp16/bf16 within 2x (outputs) and 3x (gradients) of the reference's own error when the
// reference runs on the same low-precision inputs. Awkward sizes, strided inputs read from one
// qkvg projection, every output poisoned with NaN before each launch. Runs on the GPU machine
// (scripts/device_build.sh); CI has no GPU and builds this binary only when CUDA is on.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "attention/cuda/nala_cuda.h"
#include "attention/nala_attention.h"
#include "attention/nala_reference.h"
#include "ops/cuda/column_sum.h"
#include "ops/fused_ops.h"

using namespace nala::attention;

namespace {

double rel_err(const at::Tensor& a, const at::Tensor& ref) {
  at::Tensor r = ref.to(at::kDouble).cpu();
  return (a.to(at::kDouble).cpu() - r).norm().item<double>() / std::max(r.norm().item<double>(), 1e-30);
}

struct Grads {
  at::Tensor o, dq, dk, dv;
};

// Runs f on q, k, v taken from one (B, N, 4, H, d) projection (the gated block's layout).
Grads run(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& f, const at::Tensor& qkvg,
          const at::Tensor& gout) {
  at::Tensor t = qkvg.detach().clone().requires_grad_(true);
  at::Tensor q = t.select(2, 0).transpose(1, 2), k = t.select(2, 1).transpose(1, 2), v = t.select(2, 2).transpose(1, 2);
  at::Tensor o = f(q, k, v);
  (o.to(gout.scalar_type()) * gout).sum().backward();
  at::Tensor g = t.grad();
  return {o.detach(), g.select(2, 0).transpose(1, 2), g.select(2, 1).transpose(1, 2), g.select(2, 2).transpose(1, 2)};
}

struct Case {
  int64_t B, H, N, d;
};

// zero_tokens: q of tokens 0 and N/2 and k of tokens N/2 and N − 1 exactly zero (‖x‖ ≤ ε_n, the
// x̂ = x/ε_n branch of docs/nala_attention.md §1)
void compare(FeatureMap map, at::ScalarType dt, Case c, double alpha = 1.0, bool zero_tokens = false, double lambda = 3.0) {
  NalaOptions opt;
  opt.feature_map = map;
  opt.alpha = alpha;
  opt.lambda = lambda;
  at::Tensor base = at::randn({c.B, c.N, 4, c.H, c.d}, at::kFloat);           // (B, N, 4, H, d)
  if (zero_tokens) {
    for (int64_t n : {int64_t(0), c.N / 2}) base.select(1, n).select(1, 0).zero_();   // q
    for (int64_t n : {c.N / 2, c.N - 1}) base.select(1, n).select(1, 1).zero_();      // k
  }
  at::Tensor gout = at::randn({c.B, c.H, c.N, c.d}, at::kFloat);             // (B, H, N, d)
  auto ref_fn = [&](auto& q, auto& k, auto& v) { return nala_attention_reference(q, k, v, opt); };
  auto our_fn = [&](auto& q, auto& k, auto& v) { return nala_attention(q, k, v, opt); };
  // the truth: the reference in float64 on the same (rounded) inputs; the reference's own error:
  // the same reference run on the kernel's dtype (fp32 inside, output in that dtype)
  Grads ref32 = run(ref_fn, base.to(dt).to(at::kDouble), gout.to(at::kDouble));
  Grads ref_lp = run(ref_fn, base.to(dt), gout);
  Grads ours = run(our_fn, base.to(dt).cuda(), gout.cuda());
  const at::Tensor* o[4] = {&ours.o, &ours.dq, &ours.dk, &ours.dv};
  const at::Tensor* r[4] = {&ref32.o, &ref32.dq, &ref32.dk, &ref32.dv};
  const at::Tensor* l[4] = {&ref_lp.o, &ref_lp.dq, &ref_lp.dk, &ref_lp.dv};
  const char* names[4] = {"o", "dq", "dk", "dv"};
  const double dv_norm = r[3]->norm().item<double>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(o[i]->isnan().any().item<bool>()) << names[i] << " has NaN (unwritten element?)";
    if (c.N == 1 && (i == 1 || i == 2)) {
      // With one token o = v·b/(b + ε): dq and dk are mathematically ~ε/b (≈1e-5 of dv) and every
      // implementation returns rounding noise of the cancelling terms. Relative errors of noise are
      // meaningless; require the noise to stay below the dtype's resolution at the scale of dv.
      const double noise = o[i]->to(at::kDouble).cpu().norm().item<double>() / dv_norm;
      const double limit = dt == at::kFloat ? 1e-4 : 1e-2;
      std::printf("%-9s %-5s N=1 d%c is rounding noise: |d%c| / |dv| = %.2e (limit %.0e)\n", feature_map_name(map).c_str(),
                  dt == at::kFloat ? "fp32" : dt == at::kHalf ? "fp16" : "bf16", names[i][1], names[i][1], noise, limit);
      EXPECT_LE(noise, limit) << names[i];
      continue;
    }
    const double e = rel_err(*o[i], *r[i]), e_ref = rel_err(*l[i], *r[i]);
    // fp32: 1e-5 relative, or twice the fp32 reference's own error where the result is ill-conditioned
    // (for N = 1, o = v and dq, dk are pure rounding noise around 0); low precision: 2x (outputs)
    // and 3x (gradients) of the reference's error in that dtype (docs/nala_attention.md §8)
    const double tol = dt == at::kFloat ? std::max(1e-5, 2.0 * e_ref) : (i == 0 ? 2.0 : 3.0) * e_ref + 1e-6;
    std::printf("%-9s %-5s B=%-3ld H=%ld N=%-5ld d=%-3ld %-2s  err %.2e  (reference in dtype %.2e, limit %.2e)\n",
                feature_map_name(map).c_str(), dt == at::kFloat ? "fp32" : dt == at::kHalf ? "fp16" : "bf16", c.B, c.H, c.N, c.d,
                names[i], e, e_ref, tol);
    EXPECT_LE(e, tol) << feature_map_name(map) << " " << names[i];
  }
}

}  // namespace

class NalaCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
    set_nala_cuda_poison(true);
    at::manual_seed(11);
  }
  void TearDown() override { set_nala_cuda_poison(false); }
};

TEST_F(NalaCuda, Fp32AwkwardSizes) {
  for (Case c : {Case{1, 1, 1, 64}, Case{1, 3, 7, 72}, Case{3, 1, 97, 64}, Case{1, 3, 1025, 72}, Case{2, 3, 257, 128}})
    compare(FeatureMap::Nala, at::kFloat, c);
}

TEST_F(NalaCuda, LowPrecisionAwkwardSizes) {
  for (auto dt : {at::kBFloat16, at::kHalf})
    for (Case c : {Case{1, 1, 1, 64}, Case{1, 3, 7, 72}, Case{3, 1, 97, 64}, Case{1, 3, 1025, 72}, Case{2, 3, 257, 128}})
      compare(FeatureMap::Nala, dt, c);
}

TEST_F(NalaCuda, EveryFeatureMap) {
  for (auto map : {FeatureMap::NalaRelu, FeatureMap::Elu, FeatureMap::Relu, FeatureMap::Focused})
    for (auto dt : {at::kFloat, at::kBFloat16}) compare(map, dt, Case{2, 3, 97, 64});
  compare(FeatureMap::Nala, at::kBFloat16, Case{2, 3, 97, 64}, 20.0);
}

TEST_F(NalaCuda, ZeroTokens) {  // the chunked kernels (NalaCudaOnePass.ZeroTokens: the one-pass ones)
  set_nala_cuda_kernel(NalaCudaKernel::Chunked);
  for (auto map : {FeatureMap::Nala, FeatureMap::NalaRelu, FeatureMap::Elu, FeatureMap::Relu, FeatureMap::Focused}) {
    compare(map, at::kFloat, Case{2, 3, 97, 64}, 1.0, true);
    compare(map, at::kBFloat16, Case{1, 2, 300, 72}, 1.0, true);
  }
  set_nala_cuda_kernel(NalaCudaKernel::Auto);
}

TEST_F(NalaCuda, LongSequenceSplitAcrossBlocks) {
  // many chunks per (batch, head): exercises the partial sums and their reduction
  compare(FeatureMap::Nala, at::kBFloat16, Case{1, 2, 16385, 64});
  compare(FeatureMap::Nala, at::kFloat, Case{1, 1, 9000, 72});
}

TEST_F(NalaCuda, DeterministicAcrossRuns) {
  at::Tensor q = at::randn({1, 2, 5000, 64}, at::kCUDA).to(at::kBFloat16), k = at::randn_like(q), v = at::randn_like(q);
  at::Tensor a = nala_attention(q, k, v), b = nala_attention(q, k, v);
  EXPECT_TRUE(at::equal(a, b));
}

TEST_F(NalaCuda, UnsupportedHeadDimIsAClearError) {
  at::Tensor q = at::randn({1, 1, 8, 48}, at::kCUDA);
  try {
    nala_attention(q, q, q);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("head dims 64, 72 and 128"), std::string::npos) << e.what();
  }
}

// The one-pass forward (attention/cuda/onepass_kernels.cuh, bf16) forced on every case, including
// the ones the automatic choice gives to the chunked kernels; its gradients come from the chunked
// backward fed with the S, z, den that the one-pass forward saved. Cases with few (batch, head)
// pairs and many tokens run as clusters of up to 8 CTAs (the partial-state sum through
// distributed shared memory).
class NalaCudaOnePass : public NalaCuda {
 protected:
  void SetUp() override {
    NalaCuda::SetUp();
    set_nala_cuda_kernel(NalaCudaKernel::OnePass);
    set_nala_onepass_backward_state(OnePassBackwardState::HiLo);  // BackwardWithBf16State covers the other
  }
  void TearDown() override {
    set_nala_cuda_kernel(NalaCudaKernel::Auto);
    set_nala_onepass_backward_state(OnePassBackwardState::Auto);
    set_nala_onepass_early_q(true);  // (the same-bits tests: restored even where an assertion throws)
    set_nala_onepass_reduce_order(2);
    set_nala_onepass_slots(std::nullopt);
    set_nala_onepass_ranks(0);
    NalaCuda::TearDown();
  }
};

TEST_F(NalaCudaOnePass, AwkwardSizesAndClusters) {
  for (Case c : {Case{1, 1, 1, 64}, Case{1, 3, 7, 72}, Case{3, 1, 97, 64}, Case{1, 3, 1025, 72}, Case{2, 3, 257, 64},
                 Case{1, 2, 4099, 64}, Case{1, 1, 16385, 72}})
    compare(FeatureMap::Nala, at::kBFloat16, c);
}

TEST_F(NalaCudaOnePass, EveryFeatureMap) {
  for (auto map : {FeatureMap::NalaRelu, FeatureMap::Elu, FeatureMap::Relu, FeatureMap::Focused}) {
    compare(map, at::kBFloat16, Case{2, 3, 97, 64});
    compare(map, at::kBFloat16, Case{1, 2, 300, 72});
  }
  compare(FeatureMap::Nala, at::kBFloat16, Case{2, 3, 97, 64}, 20.0);
}

TEST_F(NalaCudaOnePass, ZeroTokens) {
  for (auto map : {FeatureMap::Nala, FeatureMap::NalaRelu, FeatureMap::Elu, FeatureMap::Relu, FeatureMap::Focused})
    for (Case c : {Case{2, 3, 97, 64}, Case{1, 2, 300, 72}}) compare(map, at::kBFloat16, c, 1.0, true);
}

TEST_F(NalaCudaOnePass, InferenceForwardEqualsTrainingForwardAndRepeats) {
  // without gradients the kernel writes o only; with them it also saves S, z, den: o must not change
  at::Tensor q = at::randn({2, 3, 3000, 64}, at::kCUDA).to(at::kBFloat16), k = at::randn_like(q), v = at::randn_like(q);
  at::Tensor a, b;
  {
    at::NoGradGuard no_grad;
    a = nala_attention(q, k, v);
    b = nala_attention(q, k, v);
  }
  at::Tensor qg = q.detach().requires_grad_(true);
  at::Tensor c = nala_attention(qg, k, v).detach();
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_TRUE(at::equal(a, c));
  // and the chunked kernels agree to bf16 rounding
  set_nala_cuda_kernel(NalaCudaKernel::Chunked);
  at::Tensor d = nala_attention(q, k, v);
  EXPECT_LE(rel_err(a, d), 1e-2);
}

// Every output of the one-pass kernels under each of `settings` (set(i) applies setting i) compared
// bit for bit with setting 0's: o, S, z, den, the inference o, the gradients, and LePE's u with its S and
// den and the backward with LePE (dq, dk, dv in qkvg's layout, the column sums), for one rank (no
// cluster), clusters of 4 and the automatic split, d 64 and 72, N of whole tiles, of a last tile partly
// past N, and of many tiles a rank.
// Each setting set(i), i < settings, gives the same bits as setting 0 at every rank split (1, 4, the rule's 0),
// d 64 and 72 and the sequence lengths Ns (256: the 16 × 16 grid LePE takes; 97: a partial tile; 3,000: long).
static void expect_same_bits(int settings, const std::function<void(int)>& set,
                             std::initializer_list<int64_t> Ns = {256, 97, 3000}) {
  const NalaOptions opt{};
  int lepe_cases = 0;  // (the LePE forward compared at least once: it returns no u where it does not take the shape)
  for (int ranks : {1, 4, 0}) {
    set_nala_onepass_ranks(ranks);
    for (int64_t d : {64, 72})
      for (int64_t N : Ns) {
        at::Tensor q = at::randn({2, 3, N, d}, at::kCUDA).to(at::kBFloat16), k = at::randn_like(q), v = at::randn_like(q);  // (B, H, N, d)
        at::Tensor go = at::randn_like(q);                                                                                  // (B, H, N, d)
        at::Tensor w = at::randn({3 * d, 1, 5, 5}, at::kCUDA) * 0.1, bias = at::randn({3 * d}, at::kCUDA) * 0.1;          // LePE 5 × 5
        std::vector<std::vector<at::Tensor>> out(settings);
        for (int i = 0; i < settings; ++i) {
          set(i);
          const NalaForward f = nala_forward_cuda(q, k, v, opt, true), fi = nala_forward_cuda(q, k, v, opt, false);
          at::Tensor qg = q.detach().requires_grad_(true), kg = k.detach().requires_grad_(true), vg = v.detach().requires_grad_(true);
          at::Tensor o = nala_attention(qg, kg, vg);  // (B, H, N, d)
          o.backward(go);
          out[i] = {f.o, f.S, f.z, f.den, fi.o, o.detach(), qg.grad(), kg.grad(), vg.grad()};
          if (N == 256) {  // a 16 × 16 grid: LePE inside the forward where the kernel takes it
            const NalaLepeForward l = nala_forward_lepe_cuda(q, k, v, opt, true, w, bias, 16, 16);
            if (l.u.defined()) {
              out[i].insert(out[i].end(), {l.u, l.state.S, l.state.den});
              // and the backward with LePE's dv, into qkvg's layout as the gated block runs it, with the column sums (d 64)
              at::Tensor buf = at::zeros({2, N, 4, 3, d}, q.options());                    // (B, N, 4, H, d)
              auto head = [&](int64_t j) { return buf.select(2, j).transpose(1, 2); };  // (B, H, N, d)
              at::Tensor sums;                                                            // (3, H, d)
              nala_backward_cuda(q, k, v, l.state.S, l.state.z, l.state.den, go, opt, w, 16, 16, head(0), head(1), head(2), &sums);
              out[i].push_back(buf);
              if (sums.defined()) out[i].push_back(sums);
              // as the gated block runs it: the forward's taps handed over, the sums' second stage left to one later launch
              at::Tensor buf2 = at::zeros_like(buf), sums2;                                // (B, N, 4, H, d), (3, H, d)
              auto head2 = [&](int64_t j) { return buf2.select(2, j).transpose(1, 2); };  // (B, H, N, d)
              std::vector<nala::ops::PartialSums> pending;
              nala_backward_cuda(q, k, v, l.state.S, l.state.z, l.state.den, go, opt, w, 16, 16, head2(0), head2(1), head2(2), &sums2, &pending,
                                 l.taps);
              if (!pending.empty()) nala::ops::cuda::sum_partials_into(pending);
              EXPECT_TRUE(at::equal(buf, buf2)) << "the forward's taps gave other gradients, d " << d << ", ranks " << ranks;
              EXPECT_EQ(sums.defined(), sums2.defined());
              if (sums.defined() && sums2.defined()) EXPECT_TRUE(at::equal(sums, sums2)) << "the pending sums differ, d " << d << ", ranks " << ranks;
              lepe_cases += i == 1;
            }
          }
        }
        for (int i = 1; i < settings; ++i) {
          ASSERT_EQ(out[0].size(), out[i].size()) << "setting " << i << ", ranks " << ranks << ", d " << d << ", N " << N;
          for (size_t j = 0; j < out[0].size(); ++j)
            EXPECT_TRUE(at::equal(out[0][j], out[i][j])) << "setting " << i << ", ranks " << ranks << ", d " << d << ", N " << N << ", tensor " << j;
        }
      }
  }
  EXPECT_GT(lepe_cases, 0);
}

TEST_F(NalaCudaOnePass, EarlyQLoadsGiveTheSameBits) {
  // NALA_ONEPASS_EARLY_Q moves only when the first q tile's loads are issued
  expect_same_bits(2, [](int i) { set_nala_onepass_early_q(i == 1); });
}

TEST_F(NalaCudaOnePass, PersistentGridGivesTheSameBits) {
  // NALA_ONEPASS_PERSISTENT: one cluster a (batch, head) pair (0), then grids that hold fewer clusters than
  // the 6 pairs, each taking pairs in turn (one cluster all 6; 4 clusters, two of them a second pair), and
  // as many as fit the GPU (−1); early q loads off and on
  const int slots[] = {0, 1, 4, -1, 1};
  expect_same_bits(5, [&](int i) {
    set_nala_onepass_slots(slots[i]);
    set_nala_onepass_early_q(i != 4);
  });
}

TEST_F(NalaCudaOnePass, EverySwitchOnShortSequences) {
  // The two tests above without N = 3,000 (≈ 90 % of their tokens), for compute-sanitizer: racecheck had not
  // finished EarlyQLoadsGiveTheSameBits with the query-backward test after 270 s on an H100 (2026-12-07).
  // Default, early q loads off, persistent grids of 1 and 4 clusters and as many as fit: the same bits.
  const int slots[] = {0, 0, 1, 4, -1};
  expect_same_bits(5, [&](int i) {
    set_nala_onepass_slots(slots[i]);
    set_nala_onepass_early_q(i != 1);
  }, {256, 97});
}

TEST_F(NalaCudaOnePass, ReduceOrdersGiveTheSameBits) {
  // NALA_ONEPASS_REDUCE: the forward's reduce along f with S written by a second pass (2, the default), S written
  // in the same pass (1), along n (0): the same sums in the same rank order, stored elsewhere or later
  expect_same_bits(3, [](int i) { set_nala_onepass_reduce_order(2 - i); }, {256, 97});
}

TEST_F(NalaCudaOnePass, QueryBackwardFromPhiAgreesWithTheChunkedBackward) {
  // The one-pass backward takes a query's a·cos θ and a·sin θ for its feature-map backward from the bf16
  // φ row its products read (nala_query_backward_from_phi); the chunked backward computes them again in
  // fp32. From the same forward state, both maps and head dims: dq, dk, dv agree within bf16 rounding
  // (the float64 tolerances: AwkwardSizesAndClusters, EveryFeatureMap, ZeroTokens).
  for (auto map : {FeatureMap::Nala, FeatureMap::NalaRelu})
    for (int64_t d : {64, 72}) {
      // the key power λ ≠ 3 (the kernels' general key path; λ = 3 takes |x|³ inlined) against float64
      compare(map, at::kBFloat16, Case{2, 3, 97, d}, 1.0, false, 2.0);
      // query norms from ≈ 0.25 to ≈ 8 (d 64): where n is small, 1 − tanh² n is not, and the power's
      // ∂L/∂p term (∂L/∂a·a · ln |x̂|) reaches dq; at randn's n ≈ 8 it would vanish
      at::Tensor scale = at::rand({2, 3, 600, 1}, at::kCUDA) * 0.97 + 0.03;                  // (B, H, N, 1)
      at::Tensor q = (at::randn({2, 3, 600, d}, at::kCUDA) * scale).to(at::kBFloat16);       // (B, H, N, d)
      at::Tensor k = at::randn_like(q), v = at::randn_like(q), go = at::randn_like(q);
      NalaOptions opt;
      opt.feature_map = map;
      auto grads = [&](NalaCudaKernel bwd) {
        at::Tensor qg = q.detach().requires_grad_(true), kg = k.detach().requires_grad_(true), vg = v.detach().requires_grad_(true);
        set_nala_cuda_kernel(NalaCudaKernel::OnePass);
        at::Tensor o = nala_attention(qg, kg, vg, opt);
        set_nala_cuda_kernel(bwd);
        o.backward(go);
        set_nala_cuda_kernel(NalaCudaKernel::OnePass);
        return std::vector<at::Tensor>{qg.grad(), kg.grad(), vg.grad()};
      };
      auto onepass = grads(NalaCudaKernel::OnePass), chunked = grads(NalaCudaKernel::Chunked);
      for (int i = 0; i < 3; ++i) EXPECT_LE(rel_err(onepass[i], chunked[i]), 1e-2) << "gradient " << i << ", d " << d;
    }
}

TEST_F(NalaCudaOnePass, BackwardRepeatsAndTakesEitherForwardsState) {
  // the one-pass backward reads S, z, den as either forward saved them; it is bitwise repeatable
  // (every sum in a fixed order, the cluster's in rank order), and agrees with the chunked backward
  at::Tensor q = at::randn({2, 3, 3000, 72}, at::kCUDA).to(at::kBFloat16), k = at::randn_like(q), v = at::randn_like(q);
  at::Tensor go = at::randn_like(q);
  auto grads = [&](NalaCudaKernel fwd, NalaCudaKernel bwd) {
    at::Tensor qg = q.detach().requires_grad_(true), kg = k.detach().requires_grad_(true), vg = v.detach().requires_grad_(true);
    set_nala_cuda_kernel(fwd);
    at::Tensor o = nala_attention(qg, kg, vg);
    set_nala_cuda_kernel(bwd);
    o.backward(go);
    set_nala_cuda_kernel(NalaCudaKernel::OnePass);
    return std::vector<at::Tensor>{qg.grad(), kg.grad(), vg.grad()};
  };
  auto a = grads(NalaCudaKernel::OnePass, NalaCudaKernel::OnePass), b = grads(NalaCudaKernel::OnePass, NalaCudaKernel::OnePass);
  auto mixed = grads(NalaCudaKernel::Chunked, NalaCudaKernel::OnePass), chunked = grads(NalaCudaKernel::Chunked, NalaCudaKernel::Chunked);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(at::equal(a[i], b[i])) << i;
    EXPECT_LE(rel_err(mixed[i], chunked[i]), 1e-2) << i;
    EXPECT_LE(rel_err(a[i], chunked[i]), 1e-2) << i;
  }
}

TEST_F(NalaCudaOnePass, BackwardWithBf16State) {
  // the variant that holds S and dS' in bf16 alone (NALA_ONEPASS_BWD_STATE=bf16; the automatic
  // choice at d = 72) must meet the same gradient tolerances as the hi + lo pairs
  set_nala_onepass_backward_state(OnePassBackwardState::Bf16);
  for (Case c : {Case{3, 1, 97, 64}, Case{1, 3, 1025, 72}, Case{2, 3, 257, 64}, Case{1, 2, 4099, 64}}) compare(FeatureMap::Nala, at::kBFloat16, c);
  for (auto map : {FeatureMap::NalaRelu, FeatureMap::Elu, FeatureMap::Relu, FeatureMap::Focused}) compare(map, at::kBFloat16, Case{2, 3, 97, 64});
  compare(FeatureMap::Nala, at::kBFloat16, Case{2, 3, 97, 64}, 20.0);
  set_nala_onepass_backward_state(OnePassBackwardState::Auto);
}

// NALA_RECOMPUTE=1 (ops/fused_ops.h): the forward keeps q, k, v only and the backward runs the
// forward's state phase again; the kernels are deterministic, so the gradients equal the kept-state
// path's bit for bit, on both kernel families.
TEST_F(NalaCuda, RecomputedStateGivesTheSameGradients) {
  at::Tensor q = at::randn({2, 3, 1000, 72}, at::kCUDA).to(at::kBFloat16), k = at::randn_like(q), v = at::randn_like(q);
  at::Tensor go = at::randn_like(q);
  auto grads = [&](bool recompute) {
    nala::ops::set_recompute_saved(recompute);
    at::Tensor qg = q.detach().requires_grad_(true), kg = k.detach().requires_grad_(true), vg = v.detach().requires_grad_(true);
    const int64_t before = nala::ops::recomputations();
    nala_attention(qg, kg, vg).backward(go);
    EXPECT_EQ(nala::ops::recomputations() - before, recompute ? 1 : 0);
    nala::ops::set_recompute_saved(false);
    return std::vector<at::Tensor>{qg.grad(), kg.grad(), vg.grad()};
  };
  for (auto kernel : {NalaCudaKernel::OnePass, NalaCudaKernel::Chunked}) {
    set_nala_cuda_kernel(kernel);
    // nala_mixer_recomputing's backward takes o from the forward run again with the state kept:
    // it must be the output the forward without the state gave, bit for bit
    EXPECT_TRUE(at::equal(nala_attention_forward(q, k, v, {}, false).o, nala_attention_forward(q, k, v, {}, true).o))
        << (kernel == NalaCudaKernel::OnePass ? "one-pass" : "chunked");
    auto kept = grads(false), again = grads(true);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(kept[i], again[i])) << "d" << "qkv"[i] << (kernel == NalaCudaKernel::OnePass ? " one-pass" : " chunked");
  }
  set_nala_cuda_kernel(NalaCudaKernel::Auto);
}
