// SiT's interpolant transport (Ma et al. 2024, "SiT"; willisma/SiT transport/, docs/reference.md §3).
// t = 0 is noise x0 ~ N(0, I), t = 1 is data x1: x_t = α_t x1 + σ_t x0, target u_t = α̇_t x1 + σ̇_t x0.
//   Linear  α = t, σ = 1 − t
//   GVP     α = sin(πt/2), σ = cos(πt/2)
//   VP      α = exp(lmc(t)), σ = √(1 − α²), lmc = −¼(1−t)²(σmax−σmin) − ½(1−t)σmin, σmin 0.1, σmax 20
// The model predicts the velocity (default), the noise x0, or the score. Shapes: x (N, C, H, W),
// t (N,) float in [0, 1].
#pragma once
#include <functional>
#include <string>

#include <ATen/core/Tensor.h>

#include "diffusion/model_fn.h"

namespace nala::diffusion {

enum class PathType { Linear, GVP, VP };
enum class Prediction { Velocity, Noise, Score };
enum class LossWeight { None, Velocity, Likelihood };
// w(t) of the reverse SDE (SiT path.py compute_diffusion; "increasing-decreasing" works here, SiT's key is misspelt).
enum class DiffusionForm { Constant, SBDM, Sigma, Linear, Decreasing, IncreasingDecreasing };

PathType parse_path_type(const std::string& s);         // "Linear", "GVP", "VP"
Prediction parse_prediction(const std::string& s);      // "velocity", "noise", "score"
LossWeight parse_loss_weight(const std::string& s);     // "none", "velocity", "likelihood"
DiffusionForm parse_diffusion_form(const std::string& s);  // "constant", "SBDM", "sigma", "linear", "decreasing", "increasing-decreasing"

struct TransportConfig {
  PathType path = PathType::Linear;
  Prediction prediction = Prediction::Velocity;
  LossWeight loss_weight = LossWeight::None;
  double train_eps = -1, sample_eps = -1;  // -1: SiT's rules (transport/__init__.py:44-54)
};

class Transport {
 public:
  explicit Transport(TransportConfig cfg = {});

  // α_t, α̇_t, σ_t, σ̇_t broadcast like x (t (N,) -> (N, 1, 1, 1)); float64 math cast to x's dtype.
  struct Coeffs {
    at::Tensor alpha, d_alpha, sigma, d_sigma;
  };
  Coeffs coeffs(const at::Tensor& t, const at::Tensor& like) const;
  // The reverse-SDE pieces (path.py compute_drift): (−(α̇/α) x, (α̇/α) σ² − σ σ̇); VP: (−½β_t x, β_t/2).
  std::pair<at::Tensor, at::Tensor> drift_parts(const at::Tensor& x, const at::Tensor& t) const;
  // w(t) of the SDE diffusion.
  at::Tensor diffusion_coefficient(DiffusionForm form, double norm, const at::Tensor& x, const at::Tensor& t) const;

  // Conversions of a model output to the probability-flow drift (velocity) and to the score.
  at::Tensor velocity(const at::Tensor& out, const at::Tensor& x, const at::Tensor& t) const;
  at::Tensor score(const at::Tensor& out, const at::Tensor& x, const at::Tensor& t) const;
  at::Tensor score_from_velocity(const at::Tensor& v, const at::Tensor& x, const at::Tensor& t) const;
  at::Tensor noise_from_velocity(const at::Tensor& v, const at::Tensor& x, const at::Tensor& t) const;
  at::Tensor velocity_from_score(const at::Tensor& s, const at::Tensor& x, const at::Tensor& t) const;

  // The time interval (t0, t1) of check_interval (transport.py:73-100).
  std::pair<double, double> interval(bool sampling, bool sde, DiffusionForm diffusion_form = DiffusionForm::SBDM, double last_step_size = 0) const;

  struct Sample {
    at::Tensor t, x0, xt, ut;  // (N,), noise, x_t, target velocity
  };
  // t ~ U[t0, t1], x0 ~ N(0, I) from uniforms/normals given (so a caller can seed them).
  Sample sample_path(const at::Tensor& x1, const at::Tensor& t_uniform, const at::Tensor& x0) const;
  // Per-sample loss (N,) for the prediction type and weight (transport.py:116-158). Velocity
  // prediction is never weighted, as in SiT.
  at::Tensor training_loss(const ModelFn& model, const at::Tensor& x1, const at::Tensor& t_uniform, const at::Tensor& x0) const;

  const TransportConfig& config() const { return cfg_; }
  double train_eps() const { return train_eps_; }
  double sample_eps() const { return sample_eps_; }

 private:
  TransportConfig cfg_;
  double train_eps_ = 0, sample_eps_ = 0;
};

}  // namespace nala::diffusion
