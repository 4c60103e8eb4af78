// GEMMs with cuBLASLt epilogues for the DiT MLP in training (ops/mlp.h). Row-major tensors; the
// GELU is the tanh approximation (cuBLASLt's GELU epilogues, timm's Mlp with approximate="tanh").
//   gemm_bias_gelu_aux: h = GELU(x wᵀ + b) and aux = x wᵀ + b in one GEMM (CUBLASLT_EPILOGUE_GELU_AUX_BIAS):
//                       fc1 forward, aux kept for the backward
//   gemm_dgelu:         dy = GELU'(aux) ⊙ (g w) in one GEMM (CUBLASLT_EPILOGUE_DGELU): the gradient
//                       of fc1's pre-activation, from the gradient g of fc2's output and fc2's weight w
// The ATen compositions they replace are in ops/mlp.cpp (the CPU twin) and the CUDA tests compare
// the two (tests/cuda/gemm_epilogue_test.cpp).
#pragma once
#include <array>

#include <ATen/core/Tensor.h>

namespace nala::ops::cuda {

// x (R, K), w (N, K) [and aux (R, N)]: CUDA on one device, one dtype (bf16 or fp16), contiguous,
// R, K and N positive, K and N multiples of 8 (16-byte rows, as cuBLASLt's epilogue outputs need):
// gemm_grads_supported below and N % 8.
bool gemm_epilogue_supported(const at::Tensor& x, const at::Tensor& w);

// {h, aux}, both (R, N) in x's dtype; b (N) is cast to x's dtype
// (tune: the algorithm timed once a shape and kept, as gemm_bias's below; training's NALA_GEMM_TUNE_TRAIN=1)
std::array<at::Tensor, 2> gemm_bias_gelu_aux(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool tune = false);
// g (R, M), w (M, N) (fc2's weight: out M = D, in N = hidden), aux (R, N) → dy (R, N). In bf16 with
// NALA_GEMM_DGELU=cutlass-pingpong or cutlass-cooperative (ops/fused_ops.h dgelu_gemm) CUTLASS's kernel
// (ops/cutlass/gemm_dgelu.h) instead of cuBLASLt's, an error where it cannot run the shape.
at::Tensor gemm_dgelu(const at::Tensor& g, const at::Tensor& w, const at::Tensor& aux, bool tune = false);
// how many gemm_dgelu calls CUTLASS's kernel has run in this process (tests)
int64_t gemm_dgelu_cutlass_runs();
// The same GEMM with fc1's bias gradient Σ_rows dy (N) from its epilogue (CUBLASLT_EPILOGUE_DGELU_BGRAD):
// {dy (R, N), db (N) float32}, both undefined where cuBLASLt offers no algorithm (the caller then runs
// gemm_dgelu and the column sum). The bias gradient is written in float32 where cuBLASLt takes that,
// else in dy's dtype (its documented default) and converted: gemm_bias_gradient_runs says which ran.
std::array<at::Tensor, 2> gemm_dgelu_bgrad(const at::Tensor& g, const at::Tensor& w, const at::Tensor& aux, bool tune = false);

// A training linear's two backward GEMMs (ops/linear.cpp linear_grads with NALA_GEMM_TUNE_TRAIN=1), in
// g's dtype with float accumulation, as at::mm computes them; with tune the algorithm is timed and kept
// as gemm_bias's below (on the H200 the heuristic's first is up to 16 % slower than the best of its
// first 8 at DiT-XL/2's training rows: bench/gemm_algo_probe.cu, docs/benchmarks.md). Undefined where
// cuBLASLt offers no algorithm (the caller takes ATen's path).
//   gemm_dgrad: dx (R, N) = g (R, M) · w (M, N)
//   gemm_wgrad: dw (M, N) = gᵀ · x, g (R, M), x (R, N)
// Operands: CUDA, one dtype (bf16 or fp16), contiguous, rows of a multiple of 8 elements, 16-byte aligned.
bool gemm_grads_supported(const at::Tensor& a, const at::Tensor& b);
at::Tensor gemm_dgrad(const at::Tensor& g, const at::Tensor& w, bool tune);
at::Tensor gemm_wgrad(const at::Tensor& g, const at::Tensor& x, bool tune);
// gemm_wgrad with the layer's bias gradient Σ_rows g (M) from its epilogue (CUBLASLT_EPILOGUE_BGRADB: the
// sum of the B operand gᵀ over the GEMM's k = R): {dw (M, N), db (M) float32}, both undefined where
// cuBLASLt offers no algorithm; the bias gradient's dtype as gemm_dgelu_bgrad's. Training's
// NALA_GEMM_BGRAD=1 (ops/fused_ops.h gemm_bias_grads) instead of nala's column-sum pass over g.
std::array<at::Tensor, 2> gemm_wgrad_bgrad(const at::Tensor& g, const at::Tensor& x, bool tune);
// how many bias gradients the two calls above have written in float32 (in_float) or in the output's dtype
int64_t gemm_bias_gradient_runs(bool in_float);

// y = x wᵀ + b, or GELU(x wᵀ + b) with gelu (CUBLASLT_EPILOGUE_BIAS / GELU_BIAS): sampling's linears
// (ops/linear.cpp, ops/linear_gelu.cpp with NALA_GEMM_TUNE=1), (R, N) in x's dtype, b cast to it, as
// at::linear and at::_addmm_activation compute them. With tune, the first call of a shape (sizes,
// dtype, epilogue, operand alignments, device) outside a CUDA graph capture times the heuristic's
// first 8 algorithms (one warm-up and 3 timed runs each, on the current stream), and, in bf16
// without GELU where the build has CUTLASS (gemm_cutlass_built), CUTLASS's GEMM
// (ops/cutlass/gemm_bias.h); every later call takes the fastest. A call inside a capture before that
// takes the heuristic's first, as ATen does. Undefined where cuBLASLt offers no algorithm with the
// epilogue (the caller takes ATen's path).
at::Tensor gemm_bias(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool gelu, bool tune);
// the shapes gemm_bias keeps a timed choice for; with other_only those where CUTLASS won (tests, benchmarks)
int64_t gemm_tuned_shapes(bool other_only = false);
int64_t gemm_timings();  // timings done in this process (a kept choice adds none)
void gemm_tuned_clear();  // forgets the kept choices (tests)
// whether this build has the CUTLASS candidate (CMakeLists.txt: NALA_CUTLASS_INCLUDE)
bool gemm_cutlass_built();

}  // namespace nala::ops::cuda
