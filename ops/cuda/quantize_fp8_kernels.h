// Plain parameters of the row-wise FP8 quantization kernel (ops/cuda/quantize_fp8_kernels.cu);
// the LibTorch entry is ops/cuda/quantize_fp8.h, the definition ops/linear_fp8.h.
#pragma once
#include <cstdint>

namespace nala::ops::cuda {

struct QuantizeRowsParams {
  const void* x = nullptr;  // (R, K) contiguous, 16-byte aligned, K·element size a multiple of 16
  int64_t R = 0;
  int K = 0;
  enum class Dtype { f32, bf16, f16 } dtype = Dtype::bf16;
  uint8_t* q = nullptr;    // (R, K) float8_e4m3fn bits
  float* scale = nullptr;  // (R) float32: max(max_k |x[r, k]|, 1e-12) / 448
};

void launch_quantize_rows(const QuantizeRowsParams& p, void* stream);

// The same quantization of h = GELU_tanh(x + bias) rounded to x's dtype (fc1's bias and activation
// before fc2's FP8 GEMM; ops/linear_fp8.h bias_gelu_quantize_rows_fp8): equal bit for bit to the
// bias_gelu kernel followed by quantize_rows (with fast_gelu, see ops/cuda/gelu.cuh), without
// writing h and reading it back. A block owns a row at a time (a persistent grid) and holds its h in
// registers: K / (elements a 16-byte vector) ≤ kBiasGeluQuantizeMaxVectors.
constexpr int kBiasGeluQuantizeMaxVectors = 1024;  // K ≤ 8,192 in bf16 / fp16, 4,096 in float32
// fast_gelu: GELU's sigmoid form with the hardware's exp (ops/cuda/gelu.cuh gelu_tanh_fast) instead
// of bias_gelu's accurate tanhf (ops/fused_ops.h fp8_fast_gelu).
void launch_bias_gelu_quantize_rows(const QuantizeRowsParams& p, const float* bias, bool fast_gelu, void* stream);

}  // namespace nala::ops::cuda
