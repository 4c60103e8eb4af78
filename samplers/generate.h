// Sampling from a DiT/SiT model with any sampler of the table (samplers/sampler_table.h): the glue
// between a model, its objective (DDPM for the DiT family, flow matching for SiT) and a sampler.
// Returns model-space samples (latents, or pixels in [-1, 1] for pixel-space models).
#pragma once
#include <optional>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "samplers/sampler_table.h"

namespace nala::models {
class DiT;
}

namespace nala::samplers {

// Resolves "auto" fields against the model and checks the names; throws naming the bad value.
SamplingOptions resolve(SamplingOptions o, const models::DiT& model);

// x_init: (N, C, h, w) noise; y: (N,) labels. The model is called under no_grad in its own dtype.
SampleResult generate(models::DiT& model, const SamplingOptions& o, const at::Tensor& x_init, const at::Tensor& y,
                      std::optional<at::Generator> gen = std::nullopt, const ProgressFn& progress = {});

// Log-likelihood of model-space data x (N, C, h, w) with labels y (N,) under a flow-matching model
// (samplers/flow_likelihood.h: Hutchinson divergence, fixed-grid Heun on num_points points), in
// bits per dimension. The model runs in float32 with autograd; so must be resolved (objective flow).
struct ModelLikelihood {
  at::Tensor bits_per_dim;  // (N,) on the CPU
  int64_t nfe = 0;
};
ModelLikelihood likelihood(models::DiT& model, const SamplingOptions& so, const at::Tensor& x, const at::Tensor& y, int64_t num_points,
                           at::Generator gen);

}  // namespace nala::samplers
