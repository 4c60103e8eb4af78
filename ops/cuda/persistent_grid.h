// Launch sizes of the persistent row kernels (ops/cuda/quantize_fp8_kernels.cu, ops/cuda/block_kernels.cu),
// asked of the CUDA runtime once and kept: the kernels are launched hundreds of times a sampling
// step, and the three runtime queries took a few µs of host time each launch.
#pragma once
#include <cstddef>

namespace nala::ops::cuda {

// Blocks of `threads` threads and `smem` bytes of dynamic shared memory that fit on the current
// device at once (its SMs × the blocks an SM holds); 0 where none fits. The kernel's limit of dynamic
// shared memory is raised to `smem` on first use (the 48 KB a block gets without asking counts its
// static shared memory too) and never lowered. Throws, naming `what`, where the runtime fails.
int persistent_blocks(const void* kernel, int threads, size_t smem, const char* what = "persistent kernel");

}  // namespace nala::ops::cuda
