// Helpers shared by the CUDA kernel tests: relative L2 error against a reference, and bf16 CUDA
// autocast for a scope (as the trainer runs).
#pragma once
#include <algorithm>

#include <ATen/ATen.h>

#include "train/autocast_scope.h"

namespace nala::test {

inline double rel(const at::Tensor& a, const at::Tensor& ref) {
  at::Tensor r = ref.to(at::kDouble).cpu();
  return (a.to(at::kDouble).cpu() - r).norm().item<double>() / std::max(r.norm().item<double>(), 1e-30);
}

using Autocast = train::AutocastScope;  // bf16 CUDA autocast for a scope

}  // namespace nala::test
