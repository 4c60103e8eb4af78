// GEMMs with cuBLASLt epilogues for the DiT MLP in training (ops/mlp.h). Row-major tensors; the
// GELU is the tanh approximation (cuBLASLt's GELU epilogues, timm's Mlp with approximate="tanh").
//   gemm_bias_gelu_aux: h = GELU(x wᵀ + b) and aux = x wᵀ + b in one GEMM (CUBLASLT_EPILOGUE_GELU_AUX_BIAS):
//                       fc1 forward, aux kept for the backward
//   gemm_dgelu:         dy = GELU'(aux) ⊙ (g w) in one GEMM (CUBLASLT_EPILOGUE_DGELU): the gradient
//                       of fc1's pre-activation, from the gradient g of fc2's output and fc2's weight w
// The ATen compositions they replace are in ops/mlp.cpp (the CPU twin) and the CUDA tests compare
// the two (tests/cuda/gemm_epilogue_test.cpp).
// And for FP8 sampling, not yet wired into ops/linear_fp8 (its plan: docs/benchmarks.md, seventeenth
// session), fc1's GEMM with the bias, GELU and fc2's input quantization in its epilogue:
//   gemm_fp8_bias_gelu_e4m3: out = e4m3(d_scale · GELU(x wᵀ + b)) from e4m3 x and w with a scale a
//                       row (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F), CUBLASLT_EPILOGUE_GELU_BIAS,
//                       one scale for the whole output (D_SCALE) and its amax (AMAX_D)
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

// out (R, N) float8_e4m3fn = e4m3(d_scale · GELU(Σ_k xq[r, k] xs[r] · wq[n, k] ws[n] + b[n])), the
// conversion saturating at ±448; amax (1) = max |GELU(…)| over the output before d_scale (what a
// delayed scale for the next call is made from). xq (R, K) and wq (N, K) float8_e4m3fn, xs (R, 1)
// and ws (N, 1) float32 (ops/linear_fp8.h Fp8Rows), b (N) bf16, d_scale (1) float32: all CUDA,
// contiguous, K and N multiples of 16. False, nothing written, where cuBLASLt offers no algorithm
// (bench/cublaslt_probe.cu asks the same question on its own).
bool gemm_fp8_bias_gelu_e4m3(const at::Tensor& xq, const at::Tensor& xs, const at::Tensor& wq, const at::Tensor& ws, const at::Tensor& b,
                             const at::Tensor& d_scale, const at::Tensor& out, const at::Tensor& amax, bool fast_accum);

}  // namespace nala::ops::cuda
