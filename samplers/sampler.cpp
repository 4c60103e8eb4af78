#include "samplers/sampler.h"

#include <ATen/ATen.h>

namespace nala::samplers {

at::Tensor randn_like_gen(const at::Tensor& x, std::optional<at::Generator> gen) {
  return at::randn(x.sizes(), gen, x.options().dtype(at::kFloat));
}

}  // namespace nala::samplers
