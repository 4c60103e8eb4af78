// GELU_tanh(x Wᵀ + b): the first layer of the DiT block's MLP with its activation (timm's Mlp, fc1 +
// GELU(approximate="tanh"), DiT models.py:111-112), as the device and the pass allow:
//   - CUDA, fused ops on, no gradient wanted, fc1 not in FP8: one cuBLASLt GEMM with the bias and
//     the GELU in its epilogue (GELU_BIAS, through at::_addmm_activation): sampling;
//   - CUDA, fused ops on otherwise: the GEMM without bias (ops/linear.h, FP8 when registered), then
//     bias + GELU in one kernel with its own backward (ops/block_ops.h bias_gelu): training;
//   - otherwise (CPU, NALA_FUSED_BLOCKS=0): the GEMM adds the bias, then at::gelu, as the official model.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/linear.h>

namespace nala::ops {

at::Tensor linear_gelu(const torch::nn::LinearImpl& fc1, const at::Tensor& x);  // x (…, in) → (…, hidden)

}  // namespace nala::ops
