// Helpers shared by the CUDA kernel tests: relative L2 error against a reference (rel_error.h), and bf16 CUDA
// autocast for a scope (as the trainer runs).
#pragma once
#include <algorithm>
#include <memory>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "models/dit.h"
#include "models/model_config.h"
#include "train/autocast_scope.h"
#include "rel_error.h"

namespace nala::test {

using Autocast = train::AutocastScope;  // bf16 CUDA autocast for a scope

// A DiT of `name` at 32 px (256 tokens), every parameter moved by N(0, 0.02²) off its
// initialisation (adaLN and the head start at zero, which would hide them), on CUDA in eval mode,
// and a batch for it: x (8, 4, 32, 32) float32, t and y (8,) ids.
struct DitCase {
  std::shared_ptr<models::DiT> model;
  at::Tensor x, t, y;
};
inline DitCase perturbed_dit(const char* name) {
  auto cfg = models::model_config(name);
  cfg.input_size = 32;
  torch::manual_seed(0);
  DitCase c{std::make_shared<models::DiT>(cfg), {}, {}, {}};
  torch::NoGradGuard ng;
  for (auto& p : c.model->parameters()) p.add_(at::randn_like(p) * 0.02);
  c.model->to(at::kCUDA);
  c.model->eval();
  const auto ids = at::TensorOptions().device(at::kCUDA).dtype(at::kLong);
  c.x = at::randn({8, 4, 32, 32}, at::kCUDA);
  c.t = at::randint(0, 1000, {8}, ids);
  c.y = at::randint(0, 1000, {8}, ids);
  return c;
}

}  // namespace nala::test
