// Linear layers. For a contiguous input of any rank at::linear runs one GEMM with the bias fused
// into the epilogue, and under autocast the bias is cast with the weight. LibTorch's
// torch::nn::Linear::forward (torch::nn::functional::linear) instead runs matmul and then
// `output += bias` for inputs of rank > 2: a second pass over the output, computed in float32 when
// a float32 bias meets a bf16 output under autocast (measured on the H200: 23 ms of a 176 ms
// DiT-S/2 training step at batch 256; docs/benchmarks.md).
// Training on CUDA with the fused block operations on (ops/fused_ops.h), the layer is one
// autograd operation whose backward runs the two GEMMs as at::linear's does and the bias gradient
// Σ_rows ∂L/∂y with nala's column-sum kernel (ops/cuda/column_sum.h), in float32 straight
// into the float32 bias' gradient: ATen's bf16 reduction of the same sum was 2.6 ms of a
// NaLaDiT-S/2 step on the H200 (docs/benchmarks.md).
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/linear.h>

namespace nala::ops {

// y = x Wᵀ + b of a torch::nn::Linear (parameters as registered, so checkpoint keys are unchanged).
// A layer registered by use_fp8_linears (ops/linear_fp8.h) runs its FP8 GEMM while no
// gradient is wanted.
at::Tensor linear(const torch::nn::LinearImpl& m, const at::Tensor& x);
inline at::Tensor linear(const torch::nn::Linear& m, const at::Tensor& x) { return linear(*m, x); }
// The same for parameters not held by a torch::nn::Linear (the patch embedding's convolution weight
// viewed as (out, in): models/dit.cpp PatchEmbed); b may be undefined.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// x Wᵀ + b, or GELU(x Wᵀ + b) with gelu, through the timed cuBLASLt algorithm (ops/cuda/gemm_epilogue.h
// gemm_bias) where NALA_GEMM_TUNE=1 (ops/fused_ops.h gemm_tuned) and it takes the tensors: CUDA, x
// contiguous in w's dtype (bf16/fp16), sizes multiples of 8, b defined. Undefined otherwise: the
// caller takes ATen's path. For inference only (no autograd).
at::Tensor tuned_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool gelu);
// x Wᵀ without the bias (for a fused bias + activation after it), likewise in FP8 where registered
at::Tensor linear_without_bias(const torch::nn::LinearImpl& m, const at::Tensor& x);

// Σ over the rows of g2 (R, C), in float32 (float64 for float64): the column-sum kernel on CUDA
// where it takes the tensor, ATen elsewhere. A bias gradient.
at::Tensor column_sum(const at::Tensor& g2);

// The three gradients of out = x·wᵀ + b from dout2 = ∂L/∂out (R, out) and x2 (R, in), each only
// where its flag asks (else undefined): x (R, in) = dout2·w, w (out, in) = dout2ᵀ·x2 and
// b (out) = column_sum(dout2) in b_dtype (on CUDA with NALA_GEMM_BGRAD=1, from the w GEMM's epilogue:
// ops/cuda/gemm_epilogue.h gemm_wgrad_bgrad). dout2, x2 and w of one dtype. The backward of linear_op
// and of the fused operations that end or begin with a linear layer.
// y (R, out) = x2 (R, in) · wᵀ + b, x2 and w of one dtype, b cast to it: a training layer's forward GEMM
// (linear_op, the MLP's fc2), through the timed cuBLASLt algorithm where NALA_GEMM_TUNE_TRAIN=1 and the
// operands allow (ops/cuda/gemm_epilogue.h gemm_bias), else at::linear.
at::Tensor linear_forward(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& b);
// The same for x of any rank (…, in) -> (…, out): linear_op's forward (autocast's casts already made).
at::Tensor linear_training_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// Whether linear() takes linear_op for these tensors: training on CUDA with the fused block operations,
// x contiguous, b defined.
bool linear_op_applies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

struct LinearGrads {
  at::Tensor x, w, b;
};
LinearGrads linear_grads(const at::Tensor& dout2, const at::Tensor& x2, const at::Tensor& w, at::ScalarType b_dtype, bool need_x = true,
                         bool need_w = true, bool need_b = true);

// The layer as its own autograd operation on any device (what linear() uses on CUDA when training;
// the CPU tests check its backward against autograd of at::linear). b must be defined.
at::Tensor linear_op(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

}  // namespace nala::ops
