// GEMMs with cuBLASLt epilogues for the DiT MLP in training (ops/mlp.h). Row-major tensors; the
// GELU is the tanh approximation (cuBLASLt's GELU epilogues, timm's Mlp with approximate="tanh").
//   gemm_bias_gelu_aux: h = GELU(x wᵀ + b) and aux = x wᵀ + b in one GEMM (CUBLASLT_EPILOGUE_GELU_AUX_BIAS):
//                       fc1 forward, aux kept for the backward
//   gemm_dgelu:         dy = GELU'(aux) ⊙ (g w) in one GEMM (CUBLASLT_EPILOGUE_DGELU): the gradient
//                       of fc1's pre-activation, from the gradient g of fc2's output and fc2's weight w
// and for sampling the DiT block's gated residual (DiT models.py:117-118) in the GEMM before it:
//   gemm_gated_residual: out = r + gate ⊙ (x wᵀ + b), r the residual stream, gate one vector a sample:
//                       a strided-batched GEMM over the samples with gate as its per-sample alpha
//                       vector (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST,
//                       ALPHA_VECTOR_BATCH_STRIDE), C = r with beta = 1, and the bias epilogue with
//                       a per-sample bias gate ⊙ b (BIAS_BATCH_STRIDE)
// The ATen compositions they replace are in ops/mlp.cpp (the CPU twin) and the CUDA tests compare
// the two (tests/cuda/gemm_epilogue_test.cpp).
#pragma once
#include <array>

#include <ATen/core/Tensor.h>

namespace nala::ops::cuda {

// x (R, K), w (N, K) [and aux (R, N)]: CUDA, one dtype (bf16 or fp16), contiguous, K and N
// multiples of 8 (16-byte rows, as cuBLASLt's epilogue outputs need).
bool gemm_epilogue_supported(const at::Tensor& x, const at::Tensor& w);

// {h, aux}, both (R, N) in x's dtype; b (N) is cast to x's dtype
std::array<at::Tensor, 2> gemm_bias_gelu_aux(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// g (R, M), w (M, N) (fc2's weight: out M = D, in N = hidden), aux (R, N) → dy (R, N)
at::Tensor gemm_dgelu(const at::Tensor& g, const at::Tensor& w, const at::Tensor& aux);

// x (B, T, K), w (M, K), r (B, T, M): CUDA, one dtype (bf16 or fp16), contiguous, K and M multiples of 8
bool gemm_gated_residual_supported(const at::Tensor& x, const at::Tensor& w, const at::Tensor& r);
// r + gate ⊙ (x wᵀ + b), (B, T, M) in x's dtype, for b (M) and gate (B, M) of any float type; an
// undefined tensor where cuBLASLt offers no algorithm or refuses the call (the caller composes the
// two operations; a warning says so once).
// cuBLASLt adds the bias after alpha scales the product, so the bias passed is gate ⊙ b;
// bias_scaled = false passes b itself (for the GPU test that checks which one cuBLASLt does).
at::Tensor gemm_gated_residual(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& r, const at::Tensor& gate,
                               bool bias_scaled = true);

}  // namespace nala::ops::cuda
