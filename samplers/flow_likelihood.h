// Log-likelihood of data under a flow-matching model (SiT sample_ode_likelihood,
// docs/reference.md §3.8): integrate the probability-flow ODE from the data (t = 1) back to the noise
// (t = 0) together with the change of log density, d log p(x_t)/dt = −∇·v(x_t, t), whose
// divergence is Hutchinson's estimate εᵀ ∂(v·ε)/∂x with a fresh Rademacher ε at every evaluation
// (Grathwohl et al. 2019, FFJORD). log p_1(x) = log N(x_0; 0, I) − ∫_0^1 ∇·v dt, in nats; divided
// by the dimension and ln 2 it is bits per dimension (no dequantisation, as SiT).
#pragma once
#include <optional>

#include <ATen/core/Generator.h>

#include "diffusion/transport.h"
#include "samplers/flow_ode.h"

namespace nala::samplers {

struct Likelihood {
  at::Tensor log_p;   // (N,) nats
  at::Tensor prior;   // (N,) the latent z's log density under N(0, I)
  int64_t nfe = 0;
};

// f must be differentiable in x (the model under autograd). Fixed-grid Heun with num_points points.
Likelihood ode_likelihood(const ModelFn& f, const at::Tensor& x_data, double t0, double t1, int64_t num_points,
                          std::optional<at::Generator> gen = std::nullopt);

}  // namespace nala::samplers
