// FP8 linear layers for sampling (`nala sample --dtype fp8`): y = x Wᵀ + b with both GEMM operands
// in float8_e4m3fn and float32 scales, one a row of x (a token) and one a row of W (an output
// channel):
//   s_x[r] = max(max_k |x[r, k]|, 1e-12) / 448,   q_x[r, k] = e4m3(clamp(x[r, k] · i_x[r], ±448)),
//   i_x[r] = 448 / max(max_k |x[r, k]|, 1e-12)  (a product, not a division by s_x: the kernels'
//   division an element made them instruction-bound; i_x · s_x = 1 within a float ulp)
//   y[r, o] = Σ_k (q_x[r, k] s_x[r]) (q_W[o, k] s_W[o]) + b[o]
// with e4m3 rounding to nearest even (448 is e4m3's largest finite value). On CUDA the GEMM is
// at::_scaled_mm (FP8 tensor cores, float32 accumulation, bf16 result) and the row quantization
// one kernel (ops/cuda/quantize_fp8.h); elsewhere the same arithmetic runs in ATen on the
// dequantized operands (the CPU twin that CI tests). Everything but these GEMMs (attention,
// LayerNorm, the element-wise ops) stays in the model's dtype.
// A model opts in with use_fp8_linears(): ops::linear (ops/linear.h) then takes this
// path for every registered layer while no gradient is wanted; training never does.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/linear.h>

namespace nala::ops {

struct Fp8Rows {
  at::Tensor q;      // (R, K) float8_e4m3fn
  at::Tensor scale;  // (R, 1) float32
};

// the definition above, row by row: the CUDA kernel where it takes x, ATen elsewhere
Fp8Rows quantize_rows_fp8(const at::Tensor& x);  // x (R, K)
Fp8Rows quantize_rows_fp8_reference(const at::Tensor& x);  // the ATen composition on any device

// y (…, out) in x's dtype; w as made by quantize_rows_fp8 of the weight (out, in); b (out) or undefined
at::Tensor linear_fp8(const at::Tensor& x, const Fp8Rows& w, const at::Tensor& b);

// fc1 → GELU_tanh → fc2 with both layers in FP8 (sampling; ops/mlp.h takes it when both weights are
// registered): fc1's GEMM without its bias, then h = GELU_tanh(a + b1) in float rounded to x's
// dtype and quantized row by row in one pass (bias_gelu_quantize_rows_fp8), then fc2's GEMM. On CUDA
// equal bit for bit to linear_fp8(bias_gelu(linear_fp8(x, w1, {}), b1), w2, b2) without writing h
// and reading it twice (≈ 0.6 GB a DiT-XL/2 block at batch 64 with CFG); with NALA_FP8_FAST_GELU=1
// (ops/fused_ops.h) its GELU is the sigmoid form with the hardware's exp (ops/cuda/gelu.cuh), whose
// bytes may differ where h rounds to x's dtype differently.
at::Tensor mlp_fp8(const at::Tensor& x, const Fp8Rows& w1, const at::Tensor& b1, const Fp8Rows& w2, const at::Tensor& b2);
// how many times mlp_fp8 has run in this process (tests: that ops::mlp took it)
int64_t mlp_fp8_calls();
// quantize_rows_fp8 of round_x(GELU_tanh(x + b)), x (R, K), b (K): the one-pass CUDA kernel where it
// takes x (ops/cuda/quantize_fp8.h), else the ATen composition
Fp8Rows bias_gelu_quantize_rows_fp8(const at::Tensor& x, const at::Tensor& b);
Fp8Rows bias_gelu_quantize_rows_fp8_reference(const at::Tensor& x, const at::Tensor& b);

// Registers the layers whose in and out features are multiples of 16 (what the FP8 GEMM takes);
// returns how many. Weights are quantized now and again whenever they change (data or version); a
// layer is used in FP8 only while its weight has the dtype it had here. Throws for CUDA weights on
// a device without FP8 GEMMs. (A model picks its layers: models::DiT::use_fp8_linears.)
int64_t use_fp8_linears(const std::vector<torch::nn::LinearImpl*>& layers);
// A block's LayerNorm-modulated input already quantized for its next FP8 GEMM (FP8 sampling with
// NALA_FP8_LN_FUSED=1, ops/fused_ops.h): rows (N·T, D) and the (N, T, D) shape and dtype the
// modulated tensor would have had.
struct Fp8Input {
  Fp8Rows rows;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
};
// quantize_rows_fp8 of layer_norm_modulate(x, shift, scale, eps) (ops/block_ops.h) viewed as rows:
// on CUDA with fused block ops one kernel that never writes the modulated tensor (ops/cuda/
// block_cuda.h layer_norm_modulate_quantize), equal to the composition bit for bit; elsewhere the
// composition. x (N, T, D), shift and scale (N, D).
Fp8Input layer_norm_modulate_fp8(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps);
// gated_residual(x, gate, y) and layer_norm_modulate_fp8 of that sum (ops/block_ops.h
// gated_residual_layer_norm_modulate): on CUDA one kernel (ops/cuda/block_cuda.h
// residual_layer_norm_modulate_quantize), bit for bit the composition, which runs elsewhere.
struct ResidualAndFp8Input {
  at::Tensor residual;
  Fp8Input modulated;
};
ResidualAndFp8Input gated_residual_layer_norm_modulate_fp8(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y, const at::Tensor& shift,
                                                           const at::Tensor& scale, double eps);
// how many times layer_norm_modulate_fp8 has run in this process (tests: that a block took it)
int64_t layer_norm_modulate_fp8_calls();
// linear_fp8 of an input already quantized: (…, out) in x.dtype, what linear_fp8 of the tensor gives
at::Tensor linear_fp8(const Fp8Input& x, const Fp8Rows& w, const at::Tensor& b);
// mlp_fp8 of an input already quantized
at::Tensor mlp_fp8(const Fp8Input& x, const Fp8Rows& w1, const at::Tensor& b1, const Fp8Rows& w2, const at::Tensor& b2);

// the registered quantized weight of w, or nullptr
const Fp8Rows* fp8_weight(const at::Tensor& w);
// forgets every registration (tests; a model that goes away)
void clear_fp8_linears();
// NALA_FP8_FAST_ACCUM=1 (default) lets the tensor cores accumulate without periodic promotion
// (at::_scaled_mm's use_fast_accum); 0 promotes. Any other value is an error.
bool fp8_fast_accum();

}  // namespace nala::ops
