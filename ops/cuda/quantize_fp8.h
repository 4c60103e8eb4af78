// LibTorch-facing entry of the row-wise FP8 quantization kernel (ops/cuda/quantize_fp8_kernels.cu)
// and the device check of the FP8 GEMM (at::_scaled_mm). The definition and its ATen twin are in
// ops/linear_fp8.h.
#pragma once
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>

namespace nala::ops::cuda {

// x (R, K) contiguous on CUDA, float32 / bf16 / fp16, 16-byte aligned, K·element size a multiple of 16
bool quantize_rows_supported(const at::Tensor& x);
// {q (R, K) float8_e4m3fn, scale (R, 1) float32}
std::pair<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x);
// x as quantize_rows takes it, K within one block's registers (quantize_fp8_kernels.h), bias (K) on x's device
bool bias_gelu_quantize_rows_supported(const at::Tensor& x, const at::Tensor& bias);
// quantize_rows(bias_gelu(x, bias)) in one pass, equal to it bit for bit: {q (R, K), scale (R, 1)}.
// fast_gelu: GELU's sigmoid form with the hardware's exp (ops/cuda/gelu.cuh gelu_tanh_fast), whose
// bytes may differ where h rounds to x's dtype differently (LinearFp8Cuda.BiasGeluQuantizeEqualsTheTwoKernels).
std::pair<at::Tensor, at::Tensor> bias_gelu_quantize_rows(const at::Tensor& x, const at::Tensor& bias, bool fast_gelu = false);
// the device has FP8 tensor cores that at::_scaled_mm uses with row-wise scales (sm_90 or newer)
bool fp8_gemm_available(const c10::Device& device, std::string* why = nullptr);

}  // namespace nala::ops::cuda
