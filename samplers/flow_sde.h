// SDE samplers for SiT transport (docs/reference.md §3.7): dx = [v(x,t) + w(t) s(x,t)] dt + √(2 w(t)) dW
// from t0 to t1 = 1 − last_step_size, then one last step. v and s come from ONE model evaluation
// (SiT evaluates the model twice per drift; the results are identical).
//   Euler–Maruyama: x ← x + f dt + √(2w) √dt z
//   Heun: x̂ = x + √(2w) √dt z; K1 = f(x̂, t); K2 = f(x̂ + dt K1, t + dt); x ← x̂ + ½dt(K1 + K2)
// Grid linspace(t0, t1, N): N − 1 steps. Last step at t1: "none", "Mean" (x + f·Δ), "Tweedie"
// (x/α + σ²/α · s), "Euler" (x + v·Δ), Δ = last_step_size.
#pragma once
#include <string>

#include "diffusion/transport.h"
#include "samplers/sampler.h"

namespace nala::samplers {

enum class SdeMethod { Euler, Heun };                 // Euler: Euler–Maruyama
enum class LastStep { None, Mean, Tweedie, Euler };

// Names as SiT's CLI spells them; throw with the known names.
SdeMethod parse_sde_method(const std::string& s);      // "Euler", "Heun"
LastStep parse_last_step(const std::string& s);        // "none" (or "None"), "Mean", "Tweedie", "Euler"

struct SdeOptions {
  SdeMethod method = SdeMethod::Euler;
  diffusion::DiffusionForm diffusion_form = diffusion::DiffusionForm::Sigma;  // SiT's CLI default
  double diffusion_norm = 1.0;
  LastStep last_step = LastStep::Mean;
  double last_step_size = 0.04;
  int64_t num_points = 250;
};

SampleResult sample_sde(const ModelFn& model, const diffusion::Transport& tr, const at::Tensor& noise, const SdeOptions& o,
                        std::optional<at::Generator> gen = std::nullopt, const ProgressFn& progress = {});

}  // namespace nala::samplers
