#include "samplers/sampler.h"

#include <ATen/ATen.h>

namespace nala::samplers {

at::Tensor randn_like_gen(const at::Tensor& x, std::optional<at::Generator> gen) {
  if (gen && gen->device() != x.device())  // e.g. a CPU generator for reproducible noise on any device
    return at::randn(x.sizes(), gen, at::TensorOptions().dtype(at::kFloat).device(gen->device())).to(x.device());
  return at::randn(x.sizes(), gen, x.options().dtype(at::kFloat));
}

}  // namespace nala::samplers
