// Adaptive Dormand–Prince 5(4) (Dormand & Prince 1980; Hairer, Nørsett & Wanner, "Solving ODEs I",
// §II.4-5) with error control as torchdiffeq's dopri5 (SiT's default ODE sampler): error ratio =
// RMS over all elements of (y5 − y4)/(atol + rtol·max(|y0|, |y1|)); a step is accepted when the
// ratio ≤ 1; the next step is h · clamp(0.9 · ratio^(−1/5), 0.2, 10) (no growth after a
// rejection); Hairer's initial step selection; FSAL (the 7th stage is the next step's 1st).
#pragma once
#include "samplers/flow_ode.h"

namespace nala::samplers {

struct Dopri5Stats {
  int64_t accepted = 0, rejected = 0;
};

SampleResult integrate_dopri5(const ModelFn& f, const at::Tensor& x0, double t0, double t1, double atol, double rtol,
                              Dopri5Stats* stats = nullptr, int64_t max_steps = 100000);

SampleResult sample_ode_dopri5(const ModelFn& model, const diffusion::Transport& tr, const at::Tensor& noise, double atol = 1e-6,
                               double rtol = 1e-3, Dopri5Stats* stats = nullptr);

}  // namespace nala::samplers
