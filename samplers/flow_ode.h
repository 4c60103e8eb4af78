// Probability-flow ODE samplers for SiT transport (docs/reference.md §3.6): dx/dt = v(x, t) from t0
// (noise) to t1 (data). Fixed-grid Euler and Heun step exactly on linspace(t0, t1, N), i.e. N − 1
// steps (torchdiffeq's fixed-grid solvers); Heun costs 2 model evaluations a step. The adaptive
// Dormand–Prince 5(4) solver is in dopri5.h.
#pragma once
#include "diffusion/transport.h"
#include "samplers/sampler.h"

namespace nala::samplers {

// The ODE drift of a transport model: the model output converted to a velocity.
ModelFn ode_drift(const ModelFn& model, const diffusion::Transport& tr);

enum class FixedMethod { Euler, Heun };
SampleResult integrate_fixed(const ModelFn& f, const at::Tensor& x0, double t0, double t1, int64_t num_points, FixedMethod method,
                             const ProgressFn& progress = {});

// SiT's sample_ode with a fixed-grid method: interval from the transport's rules, num_points grid points.
SampleResult sample_ode_fixed(const ModelFn& model, const diffusion::Transport& tr, const at::Tensor& noise, int64_t num_points,
                              FixedMethod method, const ProgressFn& progress = {});

}  // namespace nala::samplers
