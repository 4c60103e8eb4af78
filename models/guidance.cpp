#include "models/guidance.h"

#include <ATen/ATen.h>

namespace nala::models {

at::Tensor guided_output(const at::Tensor& out, double scale, int64_t g) {
  TORCH_CHECK(out.size(0) % 2 == 0, "classifier-free guidance needs an even batch (conditional half, unconditional half), got ", out.size(0));
  TORCH_CHECK(g > 0 && g <= out.size(1), "cannot guide ", g, " channels of a ", out.size(1), "-channel output");
  const int64_t n = out.size(0) / 2;
  at::Tensor cond = out.narrow(0, 0, n), uncond = out.narrow(0, n, n);                      // (N, C', H, W)
  at::Tensor guided = uncond.narrow(1, 0, g) + scale * (cond.narrow(1, 0, g) - uncond.narrow(1, 0, g));  // (N, g, H, W)
  return g == out.size(1) ? guided : at::cat({guided, cond.narrow(1, g, out.size(1) - g)}, 1);           // (N, C', H, W)
}

}  // namespace nala::models
