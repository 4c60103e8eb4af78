#include "samplers/guidance.h"

#include <ATen/ATen.h>

#include "models/guidance.h"

namespace nala::samplers {

ModelFn classifier_free_guidance(LabelledNet net, at::Tensor y, int64_t null_class, double scale, int64_t channels, int64_t model_channels) {
  if (scale == 1.0) return [net, y](const at::Tensor& x, const at::Tensor& t) { return net(x, t, y); };
  const int64_t g = channels < 0 ? model_channels : channels;
  TORCH_CHECK(g > 0 && g <= model_channels, "cannot guide ", g, " channels of a ", model_channels, "-channel model");
  at::Tensor y2 = at::cat({y, at::full_like(y, null_class)});  // (2N,)
  return [net, y2, scale, g](const at::Tensor& x, const at::Tensor& t) {
    const int64_t n = x.size(0);
    at::Tensor out = net(at::cat({x, x}), at::cat({t, t}), y2);                // (2N, C', H, W)
    TORCH_CHECK(out.size(0) == 2 * n, "guidance: the network returned ", out.size(0), " rows for a doubled batch of ", 2 * n);
    return models::guided_output(out, scale, g);                               // (N, C', H, W)
  };
}

}  // namespace nala::samplers
