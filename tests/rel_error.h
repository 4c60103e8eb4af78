// Relative L2 error ‖a − ref‖ / ‖ref‖, computed in float64 on the CPU whatever the inputs' dtype and
// device: the one measure the C++ tests hold kernels and ops to against their references.
#pragma once
#include <algorithm>

#include <ATen/ATen.h>

namespace nala::test {

inline double rel(const at::Tensor& a, const at::Tensor& ref) {
  const at::Tensor r = ref.to(at::kDouble).cpu();  // same shape as a
  return (a.to(at::kDouble).cpu() - r).norm().item<double>() / std::max(r.norm().item<double>(), 1e-300);
}

}  // namespace nala::test
