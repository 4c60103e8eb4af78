// Samplers on an analytic problem: data ~ N(μ, s²) per element, for which the optimal epsilon,
// velocity, score and noise predictors are known in closed form. A correct sampler then draws
// N(μ, s²). Tolerances: 5 Monte-Carlo standard errors (s/√M for the mean, s²√(2/M) for the
// variance, M values) plus the discretisation bias of the step count, which the table printed by
// each test shows is well inside it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>

#include "diffusion/gaussian_diffusion.h"
#include "diffusion/transport.h"
#include "samplers/ddim.h"
#include "samplers/ddpm.h"
#include "samplers/dopri5.h"
#include "samplers/dpm_solver.h"
#include "samplers/flow_ode.h"
#include "samplers/flow_likelihood.h"
#include "samplers/flow_sde.h"
#include "samplers/guidance.h"

using namespace nala;

namespace {

constexpr double kMu = 0.7, kS = 0.5;
const int64_t kN = 8192;  // samples, each (1, 2, 2): M = 32768 values

struct Moments {
  double mean, var;
};
Moments moments(const at::Tensor& x) {
  at::Tensor d = x.to(at::kDouble);
  return {d.mean().item<double>(), d.var().item<double>()};
}

void check(const char* name, const samplers::SampleResult& r, double bias_allowance) {
  const double M = double(r.x.numel());
  const Moments m = moments(r.x);
  const double tol_mean = 5 * kS / std::sqrt(M) + bias_allowance, tol_var = 5 * kS * kS * std::sqrt(2 / M) + bias_allowance;
  std::printf("%-28s NFE %4ld  mean error %+.4f (tol %.4f)  variance error %+.4f (tol %.4f)\n", name, r.nfe, m.mean - kMu, tol_mean,
              m.var - kS * kS, tol_var);
  EXPECT_NEAR(m.mean, kMu, tol_mean) << name;
  EXPECT_NEAR(m.var, kS * kS, tol_var) << name;
}

// ε*(x_t, t) = √(1−ᾱ)(x − √ᾱ μ)/(ᾱ s² + 1 − ᾱ), ᾱ of the ORIGINAL 1000-step process at index t.
samplers::ModelFn optimal_eps(const diffusion::GaussianDiffusion& base, int64_t out_channels_factor = 1) {
  return [&base, out_channels_factor](const at::Tensor& x, const at::Tensor& t) {
    at::Tensor a = base.extract(base.alphas_cumprod, t, x).to(at::kDouble);
    at::Tensor eps = (at::sqrt(1 - a) * (x.to(at::kDouble) - at::sqrt(a) * kMu) / (a * kS * kS + 1 - a)).to(at::kFloat);
    return out_channels_factor == 1 ? eps : at::cat({eps, -at::ones_like(eps)}, 1);  // v = −1: the posterior variance
  };
}

// Optimal predictions of the interpolant x_t = α x1 + σ x0 with x1 ~ N(μ, s²), x0 ~ N(0, 1).
at::Tensor optimal_flow(const diffusion::Transport& tr, diffusion::Prediction kind, const at::Tensor& x, const at::Tensor& t) {
  auto c = tr.coeffs(t.to(at::kDouble), x.to(at::kDouble));
  at::Tensor xd = x.to(at::kDouble), var = c.alpha * c.alpha * kS * kS + c.sigma * c.sigma, centred = xd - c.alpha * kMu;
  at::Tensor out;
  if (kind == diffusion::Prediction::Velocity) out = c.d_alpha * kMu + (c.d_alpha * c.alpha * kS * kS + c.d_sigma * c.sigma) * centred / var;
  if (kind == diffusion::Prediction::Score) out = -centred / var;
  if (kind == diffusion::Prediction::Noise) out = c.sigma * centred / var;  // E[x0 | x_t]
  return out.to(at::kFloat);
}

at::Tensor noise(int64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn({kN, 1, 2, 2}, gen);
}

}  // namespace

TEST(DdpmSamplers, AnalyticGaussian) {
  diffusion::GaussianDiffusion base("linear", 1000, "", diffusion::VarianceType::FixedSmall);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  check("DDPM 1000 fixed-small", samplers::sample_ddpm(optimal_eps(base), base, noise(1), false, gen), 0.01);
  diffusion::GaussianDiffusion r250("linear", 1000, "250", diffusion::VarianceType::FixedSmall);
  check("DDPM 250 fixed-small", samplers::sample_ddpm(optimal_eps(base), r250, noise(2), false, gen), 0.01);
  diffusion::GaussianDiffusion r250l("linear", 1000, "250", diffusion::VarianceType::LearnedRange);
  check("DDPM 250 learned (v=-1)", samplers::sample_ddpm(optimal_eps(base, 2), r250l, noise(2), false, gen), 0.01);
  diffusion::GaussianDiffusion d50("linear", 1000, "ddim50", diffusion::VarianceType::FixedSmall);
  // DDIM's measured bias at 50 steps on this target: variance −0.027 (η = 0) and −0.054 (η = 1,
  // the 50-step ancestral sampler with the posterior variance), both converging as steps grow
  check("DDIM 50 eta=0", samplers::sample_ddim(optimal_eps(base), d50, noise(4), 0.0, false), 0.03);
  diffusion::GaussianDiffusion d250("linear", 1000, "ddim250", diffusion::VarianceType::FixedSmall);
  check("DDIM 250 eta=0", samplers::sample_ddim(optimal_eps(base), d250, noise(4), 0.0, false), 0.01);
  check("DDIM 50 eta=1", samplers::sample_ddim(optimal_eps(base), d50, noise(5), 1.0, false, gen), 0.06);
  {
    // DDIM with η = 1 is the ancestral sampler of the same respaced process: σ² is the posterior
    // variance β̃ and its mean the posterior mean (Song et al. 2021 §4.1, eq. 16 with η = 1; ADM's ddim_sample
    // and p_sample draw one normal a step in the same order), so from the same noise and generator
    // seed it must equal DDPM (fixed-small) to float rounding; η = 0 must not
    auto g1 = at::make_generator<at::CPUGeneratorImpl>(21), g2 = at::make_generator<at::CPUGeneratorImpl>(21);
    at::Tensor z = noise(8).narrow(0, 0, 512);
    at::Tensor ddim1 = samplers::sample_ddim(optimal_eps(base), d50, z, 1.0, false, g1).x;
    at::Tensor ddpm = samplers::sample_ddpm(optimal_eps(base), d50, z, false, g2).x;
    const double diff = (ddim1 - ddpm).abs().max().item<double>();
    std::printf("DDIM 50 eta=1 vs DDPM on the same 50 steps: max |difference| %.2e\n", diff);
    EXPECT_LT(diff, 1e-4);
    EXPECT_GT((samplers::sample_ddim(optimal_eps(base), d50, z, 0.0, false).x - ddpm).abs().max().item<double>(), 0.1);
  }
  for (int steps : {10, 20, 25}) {
    auto ts = samplers::dpm_solver_timesteps(base, steps);
    ASSERT_EQ(int64_t(ts.size()), steps);
    EXPECT_EQ(ts.front(), 999);
    EXPECT_EQ(ts.back(), 0);
    auto r = samplers::sample_dpm_solver_pp(optimal_eps(base), base, noise(6), ts);
    EXPECT_EQ(r.nfe, steps);
    // measured discretisation bias of the variance (200k samples): 0.017 at 10 steps, 0.008 at 20, 0.005 at 25
    check(("DPM-Solver++(2M) logSNR " + std::to_string(steps)).c_str(), r, steps >= 20 ? 0.01 : 0.02);
    auto rt = samplers::sample_dpm_solver_pp(optimal_eps(base), base, noise(6), samplers::dpm_solver_timesteps(base, steps, "time"));
    const double var_t = rt.x.to(at::kDouble).var().item<double>() - kS * kS, var_l = r.x.to(at::kDouble).var().item<double>() - kS * kS;
    std::printf("  time-uniform steps instead: variance error %+.4f (logSNR %+.4f)\n", var_t, var_l);
    EXPECT_LT(std::fabs(var_l), std::fabs(var_t));
  }
}

TEST(DdpmSamplers, DeterminismAndCounts) {
  diffusion::GaussianDiffusion base("linear", 1000, "", diffusion::VarianceType::FixedSmall);
  diffusion::GaussianDiffusion d("linear", 1000, "25", diffusion::VarianceType::FixedSmall);
  at::Tensor z = noise(7).narrow(0, 0, 64);
  auto a = samplers::sample_ddim(optimal_eps(base), d, z, 0.0, false), b = samplers::sample_ddim(optimal_eps(base), d, z, 0.0, false);
  EXPECT_TRUE(at::equal(a.x, b.x));
  EXPECT_EQ(a.nfe, 25);
  auto g1 = at::make_generator<at::CPUGeneratorImpl>(9), g2 = at::make_generator<at::CPUGeneratorImpl>(9);
  auto p = samplers::sample_ddpm(optimal_eps(base), d, z, false, g1), q = samplers::sample_ddpm(optimal_eps(base), d, z, false, g2);
  EXPECT_TRUE(at::equal(p.x, q.x));
  // the model sees the original indices of the kept steps, from 999 down to 0
  std::vector<int64_t> seen;
  samplers::sample_ddim([&](const at::Tensor& x, const at::Tensor& t) { seen.push_back(t[0].item<int64_t>()); return at::zeros_like(x); },
                        d, z, 0.0, false);
  EXPECT_EQ(seen.front(), 999);
  EXPECT_EQ(seen.back(), 0);
  EXPECT_EQ(seen.size(), 25u);
}

TEST(Guidance, CombinesHalvesOnTheGuidedChannels) {
  // net returns y broadcast: cond rows see y, uncond rows the null class 10
  samplers::LabelledNet net = [](const at::Tensor& x, const at::Tensor&, const at::Tensor& y) {
    return y.to(at::kFloat).view({-1, 1, 1, 1}).expand({x.size(0), 4, 2, 2}).contiguous() + at::arange(4, at::kFloat).view({1, 4, 1, 1});
  };
  at::Tensor y = at::tensor({2L, 3L});
  auto f = samplers::classifier_free_guidance(net, y, 10, 1.5, 3, 4);
  at::Tensor out = f(at::zeros({2, 4, 2, 2}), at::zeros({2}));
  // guided: 10 + 1.5 (y − 10) + c; unguided channel 3 keeps the conditional value y + 3
  EXPECT_FLOAT_EQ(out[0][0][0][0].item<float>(), 10 + 1.5f * (2 - 10));
  EXPECT_FLOAT_EQ(out[1][2][1][1].item<float>(), 10 + 1.5f * (3 - 10) + 2);
  EXPECT_FLOAT_EQ(out[1][3][0][0].item<float>(), 3 + 3);
  auto all = samplers::classifier_free_guidance(net, y, 10, 1.5, -1, 4);
  EXPECT_FLOAT_EQ(all(at::zeros({2, 4, 2, 2}), at::zeros({2}))[1][3][0][0].item<float>(), 10 + 1.5f * (3 - 10) + 3);
}

TEST(FlowSamplers, AnalyticGaussianOdeAndSde) {
  using diffusion::PathType;
  using diffusion::Prediction;
  for (PathType path : {PathType::Linear, PathType::GVP, PathType::VP}) {
    for (Prediction pred : {Prediction::Velocity, Prediction::Noise, Prediction::Score}) {
      if (path == PathType::VP && pred != Prediction::Velocity) continue;
      diffusion::TransportConfig cfg;
      cfg.path = path;
      cfg.prediction = pred;
      diffusion::Transport tr(cfg);
      samplers::ModelFn model = [&tr, pred](const at::Tensor& x, const at::Tensor& t) { return optimal_flow(tr, pred, x, t); };
      const std::string tag = std::string(path == PathType::Linear ? "Linear" : path == PathType::GVP ? "GVP" : "VP") + "/" +
                              (pred == Prediction::Velocity ? "velocity" : pred == Prediction::Noise ? "noise" : "score");
      // VP starts at t = 0 with α = e^{-5.05}: the prior is N(0, 1) only up to a tiny mean, and the interval ends at 1 − eps
      const double extra = path == PathType::VP ? 0.01 : 0.0;
      auto heun = samplers::sample_ode_fixed(model, tr, noise(11), 50, samplers::FixedMethod::Heun);
      EXPECT_EQ(heun.nfe, 2 * 49);
      check(("ODE Heun 50 " + tag).c_str(), heun, 0.01 + extra);
      if (pred != Prediction::Velocity) continue;
      auto euler = samplers::sample_ode_fixed(model, tr, noise(12), 250, samplers::FixedMethod::Euler);
      EXPECT_EQ(euler.nfe, 249);
      check(("ODE Euler 250 " + tag).c_str(), euler, 0.01 + extra);
      samplers::Dopri5Stats st;
      auto dp = samplers::sample_ode_dopri5(model, tr, noise(13), 1e-6, 1e-3, &st);
      std::printf("  dopri5: %ld accepted, %ld rejected steps\n", st.accepted, st.rejected);
      check(("ODE dopri5 " + tag).c_str(), dp, 0.01 + extra);
      auto gen = at::make_generator<at::CPUGeneratorImpl>(14);
      samplers::SdeOptions so;
      so.num_points = 250;
      auto em = samplers::sample_sde(model, tr, noise(15), so, gen);
      EXPECT_EQ(em.nfe, 249 + 1);  // one evaluation per step (SiT spends two) + the Mean last step
      check(("SDE Euler-Maruyama 250 " + tag).c_str(), em, 0.02 + extra);
      so.method = samplers::SdeMethod::Heun;
      so.num_points = 100;
      auto sh = samplers::sample_sde(model, tr, noise(16), so, gen);
      EXPECT_EQ(sh.nfe, 2 * 99 + 1);
      check(("SDE Heun 100 " + tag).c_str(), sh, 0.02 + extra);
    }
  }
}

TEST(FlowSamplers, Dopri5MatchesAKnownSolutionWithinTolerance) {
  // dx/dt = −t x: x(t) = x0 exp(−t²/2)
  samplers::ModelFn f = [](const at::Tensor& x, const at::Tensor& t) { return -t.view({-1, 1, 1, 1}) * x; };
  at::Tensor x0 = at::randn({16, 1, 2, 2});
  for (double rtol : {1e-3, 1e-6}) {
    samplers::Dopri5Stats st;
    auto r = samplers::integrate_dopri5(f, x0, 0.0, 2.0, rtol * 1e-3, rtol, &st);
    at::Tensor exact = x0 * std::exp(-2.0);
    const double err = ((r.x - exact).abs() / (rtol * 1e-3 + rtol * exact.abs())).max().item<double>();
    std::printf("dopri5 rtol %.0e: NFE %ld, steps %ld (+%ld rejected), max error / tolerance %.3f\n", rtol, r.nfe, st.accepted, st.rejected, err);
    EXPECT_LT(err, 10.0);  // global error of a locally controlled solver stays within a small multiple of the tolerance
    EXPECT_EQ(r.nfe, 2 + 6 * (st.accepted + st.rejected));  // FSAL: 6 new evaluations a step, plus 2 for the initial step
  }
}

TEST(FlowSamplers, OdeIsDeterministicFromGivenNoise) {
  diffusion::Transport tr;
  samplers::ModelFn model = [&tr](const at::Tensor& x, const at::Tensor& t) { return optimal_flow(tr, diffusion::Prediction::Velocity, x, t); };
  at::Tensor z = noise(21).narrow(0, 0, 32);
  EXPECT_TRUE(at::equal(samplers::sample_ode_fixed(model, tr, z, 20, samplers::FixedMethod::Heun).x,
                        samplers::sample_ode_fixed(model, tr, z, 20, samplers::FixedMethod::Heun).x));
  EXPECT_TRUE(at::equal(samplers::sample_ode_dopri5(model, tr, z).x, samplers::sample_ode_dopri5(model, tr, z).x));
}

TEST(Transport, PathIdentitiesAgainstFloat64Formulas) {
  using diffusion::PathType;
  at::Tensor x = at::randn({5, 1, 2, 2}, at::kDouble), t = at::tensor({0.1, 0.3, 0.5, 0.77, 0.95}, at::kDouble);
  for (PathType path : {PathType::Linear, PathType::GVP, PathType::VP}) {
    diffusion::TransportConfig cfg;
    cfg.path = path;
    diffusion::Transport tr(cfg);
    auto c = tr.coeffs(t, x);
    for (int64_t i = 0; i < 5; ++i) {
      const double ti = t[i].item<double>();
      double a, da, s, ds;
      if (path == PathType::Linear) { a = ti; da = 1; s = 1 - ti; ds = -1; }
      else if (path == PathType::GVP) { a = std::sin(M_PI * ti / 2); da = M_PI / 2 * std::cos(M_PI * ti / 2); s = std::cos(M_PI * ti / 2); ds = -M_PI / 2 * std::sin(M_PI * ti / 2); }
      else {
        const double lmc = -0.25 * (1 - ti) * (1 - ti) * 19.9 - 0.5 * (1 - ti) * 0.1, dl = 0.5 * (1 - ti) * 19.9 + 0.05;
        a = std::exp(lmc); da = a * dl; s = std::sqrt(1 - a * a); ds = -a * a * dl / s;  // d/dt √(1 − α²)
      }
      EXPECT_NEAR(c.alpha[i].item<double>(), a, 1e-12);
      EXPECT_NEAR(c.d_alpha[i].item<double>(), da, 1e-9);
      EXPECT_NEAR(c.sigma[i].item<double>(), s, 1e-12);
      EXPECT_NEAR(c.d_sigma[i].item<double>(), ds, 1e-9);
    }
    // conversions: the optimal noise and score predictions give the optimal velocity
    at::Tensor v = optimal_flow(tr, diffusion::Prediction::Velocity, x, t).to(at::kDouble);
    at::Tensor s_opt = optimal_flow(tr, diffusion::Prediction::Score, x, t).to(at::kDouble);
    EXPECT_TRUE(at::allclose(tr.velocity_from_score(s_opt, x, t), v, 1e-5, 1e-5));
    EXPECT_TRUE(at::allclose(tr.score_from_velocity(v, x, t), s_opt, 1e-4, 1e-4));
  }
  // eps rules: velocity on Linear forces 0; VP uses 1e-5 / 1e-3
  diffusion::TransportConfig v;
  v.train_eps = 0.5;
  EXPECT_EQ(diffusion::Transport(v).train_eps(), 0.0);
  diffusion::TransportConfig vp;
  vp.path = PathType::VP;
  EXPECT_EQ(diffusion::Transport(vp).train_eps(), 1e-5);
  EXPECT_EQ(diffusion::Transport(vp).sample_eps(), 1e-3);
  // SDE interval with a last step: [0, 0.96] for Linear velocity
  auto iv = diffusion::Transport().interval(true, true, diffusion::DiffusionForm::Sigma, 0.04);
  EXPECT_DOUBLE_EQ(iv.first, 0.0);
  EXPECT_DOUBLE_EQ(iv.second, 0.96);
}

TEST(Transport, TrainingLossAgainstFloat64Formulas) {
  // SiT transport.py:116-158 written out per sample in float64: x_t = α x1 + σ x0, u_t = α̇ x1 + σ̇ x0;
  // velocity: |f − u_t|²; noise: w |f − x0|²; score: w |f σ + x0|²; w = 1, (drift_var/σ)² or
  // drift_var/σ², drift_var = (α̇/α) σ² − σ σ̇ (ICPlan) or β_t/2 (VPCPlan), all means over elements.
  // The model is a fixed function of (x_t, t), so every term of the loss is exercised.
  using diffusion::LossWeight;
  using diffusion::PathType;
  using diffusion::Prediction;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(41);
  at::Tensor x1 = at::randn({6, 1, 2, 2}, gen).to(at::kDouble), x0 = at::randn({6, 1, 2, 2}, gen).to(at::kDouble);
  at::Tensor tu = at::tensor({0.02, 0.2, 0.4, 0.6, 0.8, 0.98}, at::kDouble);
  diffusion::ModelFn f = [](const at::Tensor& x, const at::Tensor& t) { return 0.5 * x + 0.1 * t.view({-1, 1, 1, 1}) - 0.2; };
  int checked = 0;
  for (PathType path : {PathType::Linear, PathType::GVP, PathType::VP})
    for (Prediction pred : {Prediction::Velocity, Prediction::Noise, Prediction::Score})
      for (LossWeight lw : {LossWeight::None, LossWeight::Velocity, LossWeight::Likelihood}) {
        if (pred == Prediction::Velocity && lw != LossWeight::None) continue;  // SiT never weights velocity
        diffusion::TransportConfig cfg;
        cfg.path = path;
        cfg.prediction = pred;
        cfg.loss_weight = lw;
        diffusion::Transport tr(cfg);
        at::Tensor ours = tr.training_loss(f, x1, tu, x0);                    // (6,)
        auto [t0, t1] = tr.interval(false, false);
        for (int64_t i = 0; i < 6; ++i) {
          const double t = tu[i].item<double>() * (t1 - t0) + t0;
          double a, da, s, ds, dv;
          if (path == PathType::Linear) { a = t; da = 1; s = 1 - t; ds = -1; }
          else if (path == PathType::GVP) { a = std::sin(M_PI * t / 2); da = M_PI / 2 * std::cos(M_PI * t / 2); s = std::cos(M_PI * t / 2); ds = -M_PI / 2 * std::sin(M_PI * t / 2); }
          else {
            const double lmc = -0.25 * (1 - t) * (1 - t) * 19.9 - 0.5 * (1 - t) * 0.1, dl = 0.5 * (1 - t) * 19.9 + 0.05;
            a = std::exp(lmc); da = a * dl; s = std::sqrt(1 - a * a); ds = -a * a * dl / s;
          }
          dv = path == PathType::VP ? (0.1 + (1 - t) * 19.9) / 2 : da / a * s * s - s * ds;
          const double w = pred == Prediction::Velocity || lw == LossWeight::None ? 1.0 : lw == LossWeight::Velocity ? (dv / s) * (dv / s) : dv / (s * s);
          double sum = 0;
          for (int64_t e = 0; e < 4; ++e) {
            const double xa = x1.view(-1)[i * 4 + e].item<double>(), xb = x0.view(-1)[i * 4 + e].item<double>();
            const double xt = a * xa + s * xb, out = 0.5 * xt + 0.1 * t - 0.2;
            const double r = pred == Prediction::Velocity ? out - (da * xa + ds * xb) : pred == Prediction::Noise ? out - xb : out * s + xb;
            sum += w * r * r;
          }
          const double want = sum / 4;
          EXPECT_NEAR(ours[i].item<double>(), want, 1e-5 * std::max(1.0, std::fabs(want)))
              << "path " << int(path) << " prediction " << int(pred) << " weight " << int(lw) << " t " << t;
          ++checked;
        }
      }
  EXPECT_EQ(checked, 3 * 7 * 6);
}

TEST(FlowSamplers, HutchinsonLikelihoodOfAnAnalyticGaussian) {
  // data ~ N(μ, s²) per element: the exact log density is known; the Hutchinson estimate is
  // unbiased, so its mean over many points must match the exact mean log density.
  diffusion::Transport tr;
  samplers::ModelFn f = [&tr](const at::Tensor& x, const at::Tensor& t) { return optimal_flow(tr, diffusion::Prediction::Velocity, x, t); };
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  at::Tensor x = kMu + kS * at::randn({2048, 1, 2, 2}, gen);
  auto r = samplers::ode_likelihood(f, x, 0.0, 1.0, 101, gen);
  at::Tensor exact = (-0.5 * std::log(2 * M_PI * kS * kS) - (x - kMu).pow(2) / (2 * kS * kS)).flatten(1).sum(1);  // (N,)
  const double est = r.log_p.mean().item<double>(), ex = exact.mean().item<double>();
  const double per_point = (r.log_p - exact).abs().mean().item<double>();
  std::printf("Hutchinson likelihood: mean log p %.4f (exact %.4f), mean |error| per point %.4f nats, NFE %ld\n", est, ex, per_point, r.nfe);
  EXPECT_NEAR(est, ex, 0.05);
  EXPECT_EQ(r.nfe, 200);
}
