// bf16 autocast on CUDA for a C++ scope, as PyTorch's `with torch.autocast("cuda", torch.bfloat16)`:
// enabled on entry, and on exit the nesting count dropped, the cast-weight cache cleared at the
// outermost exit and autocast disabled (also when the scope is left by an exception).
#pragma once
#include <ATen/autocast_mode.h>

namespace nala::train {

struct AutocastScope {
  bool on;
  explicit AutocastScope(bool enable) : on(enable) {
    if (!on) return;
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
};

}  // namespace nala::train
