// The three leading strides of a (B, H, N, D) tensor, in elements, as the CUDA kernels' plain
// parameter structs (nala_params.h, softmax_fwd.h) take them; the head dim's stride is 1 by then.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace nala::attention {

inline void set_strides(int64_t (&dst)[3], const at::Tensor& t) {
  for (int i = 0; i < 3; ++i) dst[i] = t.stride(i);
}

}  // namespace nala::attention
