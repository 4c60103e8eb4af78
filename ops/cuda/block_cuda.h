// ATen entry points of the fused DiT block kernels (ops/cuda/block_kernels.cu). Each checks its
// arguments; *_supported says whether the kernels take these tensors (CUDA, dtype pair, D), and the
// callers (ops/block_ops.cpp) use the ATen formulas otherwise.
#pragma once
#include <tuple>
#include <utility>

#include <ATen/core/Tensor.h>

namespace nala::ops::cuda {

bool layer_norm_modulate_supported(const at::Tensor& x, at::ScalarType out_dtype);
// x (N, T, D); shift, scale (N, D) any float type. Returns out (N, T, D) in out_dtype and, when
// save_stats, mean and rstd (N, T, 1) float32.
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_modulate_forward(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
                                                                           double eps, at::ScalarType out_dtype, bool save_stats);
// FP8 sampling: layer_norm_modulate_forward's out (in out_dtype) quantized row by row for the next
// FP8 GEMM without writing it: {q (N·T, D) float8_e4m3fn, scale (N·T, 1) float32}, equal bit for bit
// to quantize_rows (ops/cuda/quantize_fp8.h) of that out viewed as (N·T, D).
std::pair<at::Tensor, at::Tensor> layer_norm_modulate_quantize(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps,
                                                               at::ScalarType out_dtype);
// Returns dx (x's dtype, plus dres where defined), dshift, dscale (N, D) float32, or in sums_dtype with
// NALA_BLOCK_SUMS_FUSED=1 (ops/fused_ops.h; the backward functions below likewise).
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_modulate_backward(const at::Tensor& dout, const at::Tensor& x, const at::Tensor& mean,
                                                                            const at::Tensor& rstd, const at::Tensor& scale, const at::Tensor& dres,
                                                                            at::ScalarType sums_dtype = at::kFloat);

bool gated_residual_supported(const at::Tensor& x, const at::Tensor& y);
// x, y (N, T, D); gate (N, D). Returns x + gate·y in x's dtype.
at::Tensor gated_residual_forward(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y);
// Returns dy (y's dtype) and dgate (N, D) float32 (in sums_dtype with NALA_BLOCK_SUMS_FUSED=1).
std::tuple<at::Tensor, at::Tensor> gated_residual_backward(const at::Tensor& dout, const at::Tensor& gate, const at::Tensor& y,
                                                           at::ScalarType sums_dtype = at::kFloat);

// Sampling: the gated residual and the LayerNorm-modulate after it in one pass, x, y (N, T, D) of
// one dtype, gate, shift, scale (N, D): {res = x + gate·y, out = LayerNorm(res)·(1 + scale) + shift}
// in x's dtype, bit for bit gated_residual_forward then layer_norm_modulate_forward; the _quantize form
// gives {res, q (N·T, D) float8_e4m3fn, scale (N·T, 1) float32} for out, as layer_norm_modulate_quantize.
bool residual_layer_norm_modulate_supported(const at::Tensor& x, const at::Tensor& y);
std::pair<at::Tensor, at::Tensor> residual_layer_norm_modulate(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y,
                                                               const at::Tensor& shift, const at::Tensor& scale, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> residual_layer_norm_modulate_quantize(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& y,
                                                                                     const at::Tensor& shift, const at::Tensor& scale, double eps);

// Training: the same pass with x (the float32 residual stream, or y's dtype) and y of their own dtypes,
// out in y's dtype = out_dtype, and the LayerNorm statistics saved: {res (x's dtype), out, mean, rstd
// (N, T, 1) float32}, bit for bit gated_residual_forward then layer_norm_modulate_forward(save_stats).
bool residual_layer_norm_modulate_training_supported(const at::Tensor& x, const at::Tensor& y, at::ScalarType out_dtype);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> residual_layer_norm_modulate_training(const at::Tensor& x, const at::Tensor& gate,
                                                                                                 const at::Tensor& y, const at::Tensor& shift,
                                                                                                 const at::Tensor& scale, double eps);

// Its backward in one kernel: {dx (res's dtype, dres added where defined), dshift, dscale, dy (y's
// dtype), dgate (N, D) float32}, bit for bit layer_norm_modulate_backward(dout, res, …, dres) then
// gated_residual_backward(dx, gate, y); dout in y's dtype. With dy_sum (where
// residual_norm_dy_sums_supported(D)): *dy_sum = Σ_rows dy as stored, (D) float32, from the same
// kernel (the bias gradient of the layer that made y).
bool residual_layer_norm_modulate_training_backward_supported(const at::Tensor& res, const at::Tensor& y, at::ScalarType dout_dtype);
bool residual_norm_dy_sums_supported(int64_t D);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> residual_layer_norm_modulate_training_backward(
    const at::Tensor& dout, const at::Tensor& res, const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& scale, const at::Tensor& dres,
    const at::Tensor& gate, const at::Tensor& y, at::ScalarType sums_dtype = at::kFloat, at::Tensor* dy_sum = nullptr);

bool bias_gelu_supported(const at::Tensor& y);
// y (..., F); bias (F,). Returns GELU_tanh(y + bias) in y's dtype.
at::Tensor bias_gelu_forward(const at::Tensor& y, const at::Tensor& bias);
// Returns dy (y's dtype) and dbias (F,) float32.
std::tuple<at::Tensor, at::Tensor> bias_gelu_backward(const at::Tensor& dout, const at::Tensor& y, const at::Tensor& bias);

}  // namespace nala::ops::cuda
