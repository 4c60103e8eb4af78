// Helpers shared by the CUDA kernel tests: relative L2 error against a reference, and bf16 CUDA
// autocast for a scope (as the trainer runs).
#pragma once
#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

namespace nala::test {

inline double rel(const at::Tensor& a, const at::Tensor& ref) {
  at::Tensor r = ref.to(at::kDouble).cpu();
  return (a.to(at::kDouble).cpu() - r).norm().item<double>() / std::max(r.norm().item<double>(), 1e-30);
}

struct Autocast {
  bool on;
  explicit Autocast(bool enable) : on(enable) {
    if (!on) return;
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
  }
  ~Autocast() {
    if (on) at::autocast::set_autocast_enabled(at::kCUDA, false);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;
};

}  // namespace nala::test
