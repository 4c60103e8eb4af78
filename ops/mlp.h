// The DiT block's MLP, fc2(GELU_tanh(fc1(x))) (timm's Mlp, DiT models.py:111-112), as one operation.
// Training on CUDA (unless NALA_GEMM_EPILOGUES=0: ops/fused_ops.h) it is one autograd op whose GEMMs
// carry the element-wise work in cuBLASLt epilogues (ops/cuda/gemm_epilogue.h):
//   forward:  h, a = GELU(x W₁ᵀ + b₁), x W₁ᵀ + b₁   one GEMM (GELU_AUX_BIAS); a is kept
//             out = h W₂ᵀ + b₂                         at::linear (bias epilogue)
//   backward: dW₂ = gᵀ h, db₂ = Σ_rows g              (g = ∂L/∂out; the column-sum kernel)
//             dy = GELU'(a) ⊙ (g W₂)                  one GEMM (DGELU epilogue)
//             db₁ = Σ_rows dy, dW₁ = dyᵀ x, dx = dy W₁
// which spares the bias-GELU kernel's passes over the (tokens, hidden) activation: one forward
// (y written and read again) and one backward (∂L/∂h written and read again). Sampling on CUDA with
// both layers in FP8 (`--dtype fp8`) it is ops::mlp_fp8 (NALA_FP8_MLP_FUSED=0 turns it off:
// ops/fused_ops.h) (ops/linear_fp8.h: fc1's bias and GELU joined
// to fc2's row quantization). Everywhere else it is ops::linear(fc2, ops::linear_gelu(fc1, x))
// (ops/linear_gelu.h). mlp_op is the autograd op on any
// device: on the CPU its two epilogue GEMMs are the ATen composition, which CI tests against
// autograd of the plain formula.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/linear.h>

namespace nala::ops {

struct Fp8Input;  // ops/linear_fp8.h

at::Tensor mlp(const torch::nn::LinearImpl& fc1, const torch::nn::LinearImpl& fc2, const at::Tensor& x);  // (…, D) → (…, D)
// The same from an input already quantized for fc1 (FP8 sampling with NALA_FP8_LN_FUSED=1, ops/linear_fp8.h
// layer_norm_modulate_fp8); fc1 must be registered for FP8. Equal bit for bit to mlp() of the
// tensor x.rows quantizes: the same kernels after fc1's GEMM on every device.
at::Tensor mlp(const torch::nn::LinearImpl& fc1, const torch::nn::LinearImpl& fc2, const Fp8Input& x);

// x (…, D), w1 (H, D), b1 (H), w2 (D, H), b2 (D); weights in x's dtype after autocast's cast
at::Tensor mlp_op(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2, const at::Tensor& b2);

}  // namespace nala::ops
