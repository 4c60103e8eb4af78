// The DiT block's element-wise chains as single operations with their own backward:
//   layer_norm_modulate(x, shift, scale) = LayerNorm(x) · (1 + scale) + shift   (DiT models.py:19-20)
//   gated_residual(x, gate, y)           = x + gate · y                         (DiT models.py:117-118)
//   bias_gelu(y, b)                      = GELU_tanh(y + b)                      (fc1 + act of timm's Mlp)
// with shift, scale, gate (N, D) broadcast over the T tokens of x, y (N, T, D). On CUDA they run the
// fused kernels of ops/cuda/ (one pass each way instead of LayerNorm, float32 mul/add and a cast
// to bf16 under autocast, and the same again backward); on the CPU, and for tensors the kernels do
// not take, the same formulas in ATen ops, which CI tests against autograd of the plain
// composition. NALA_FUSED_BLOCKS=0 (or set_fused_block_ops(false)) runs the plain composition
// instead, on every device: the unfused reference path.
#pragma once
#include <ATen/core/Tensor.h>

#include "ops/fused_ops.h"

namespace nala::ops {

// Under CUDA autocast the result is in the autocast dtype (what the next GEMM reads), else in x's dtype.
at::Tensor layer_norm_modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps);
// The same, and x itself as a second output to feed the residual path (gated_residual's x): autograd
// then hands the residual's gradient to this op's backward, which adds it to ∂L/∂x in the same pass
// instead of a separate float32 add.
struct ModulatedAndResidual {
  at::Tensor modulated, residual;
};
ModulatedAndResidual layer_norm_modulate_residual(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps);
// The result has the type of x + gate·y (x's dtype for a float32 residual stream).
at::Tensor gated_residual(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y);
// gated_residual(x, gate, y) and layer_norm_modulate of that sum, {modulated, residual}, equal bit for
// bit to the two operations (which run where the kernels do not take the tensors).
// Sampling (no gradient wanted): on CUDA with fused block ops, x and y of one dtype and no autocast,
// one kernel that reads the sum from registers (ops/cuda/block_cuda.h residual_layer_norm_modulate).
// Training: with NALA_RESIDUAL_NORM_TRAIN=1 (ops/fused_ops.h) one autograd operation, whose forward on
// CUDA is one kernel for x in float32 (or y's dtype) and y in the result's dtype
// (residual_layer_norm_modulate_training) and whose backward is the two operations' backward passes in
// turn, or on CUDA with NALA_RESIDUAL_NORM_TRAIN_BWD=1 (default, ops/fused_ops.h) one kernel (residual_layer_norm_modulate_training_backward); the residual output's gradient is added in the LayerNorm's backward pass,
// as layer_norm_modulate_residual's, and where it has none (the last block's sum, which only the final
// layer reads) none is made up: no zero tensor is allocated and read.
ModulatedAndResidual gated_residual_layer_norm_modulate(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y, const at::Tensor& shift,
                                                        const at::Tensor& scale, double eps);
// how many times it has run one of its kernels in this process, sampling's or training's (tests: that the blocks took it)
int64_t residual_layer_norm_modulate_kernel_calls();
// how many times training's backward has run as the one kernel (tests: that the backward took it)
int64_t residual_layer_norm_modulate_backward_kernel_calls();

// GELU_tanh(y + bias): fc1's bias joined to the activation, so that its backward also gives the
// bias gradient (one pass instead of GELU backward + a column-sum reduction). The result has y's dtype.
at::Tensor bias_gelu(const at::Tensor& y, const at::Tensor& bias);

// The plain compositions (the reference path; what the fused path must equal).
at::Tensor layer_norm_modulate_reference(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps);
at::Tensor gated_residual_reference(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y);
at::Tensor bias_gelu_reference(const at::Tensor& y, const at::Tensor& bias);


}  // namespace nala::ops
