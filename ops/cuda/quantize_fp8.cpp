#include "ops/cuda/quantize_fp8.h"

#include <string>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops/cuda/column_sum.h"
#include "ops/cuda/quantize_fp8_kernels.h"

namespace nala::ops::cuda {

// the layout the column sum reads (a contiguous (R, K) float32 / bf16 / fp16 matrix with 16-byte rows)
bool quantize_rows_supported(const at::Tensor& x) { return column_sum_supported(x); }

namespace {
QuantizeRowsParams params_with_outputs(const at::Tensor& x, at::Tensor& q, at::Tensor& s) {
  q = at::empty(x.sizes(), x.options().dtype(at::kFloat8_e4m3fn));  // (R, K)
  s = at::empty({x.size(0), 1}, x.options().dtype(at::kFloat));     // (R, 1)
  QuantizeRowsParams p;
  p.x = x.data_ptr();
  p.R = x.size(0);
  p.K = int(x.size(1));
  p.dtype = x.scalar_type() == at::kFloat ? QuantizeRowsParams::Dtype::f32
            : x.scalar_type() == at::kBFloat16 ? QuantizeRowsParams::Dtype::bf16 : QuantizeRowsParams::Dtype::f16;
  p.q = static_cast<uint8_t*>(q.data_ptr());
  p.scale = s.data_ptr<float>();
  return p;
}
}  // namespace

std::pair<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x) {
  TORCH_CHECK(quantize_rows_supported(x), "quantize_rows: needs a contiguous (R, K) CUDA float32/bf16/fp16 matrix with 16-byte rows, got ",
              x.sizes(), " ", x.scalar_type());
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor q, s;
  launch_quantize_rows(params_with_outputs(x, q, s), at::cuda::getCurrentCUDAStream().stream());
  return {q, s};
}

bool bias_gelu_quantize_rows_supported(const at::Tensor& x, const at::Tensor& bias) {
  return quantize_rows_supported(x) && x.size(1) * int64_t(x.element_size()) / 16 <= kBiasGeluQuantizeMaxVectors && bias.dim() == 1 &&
         bias.size(0) == x.size(1) && bias.device() == x.device();
}

std::pair<at::Tensor, at::Tensor> bias_gelu_quantize_rows(const at::Tensor& x, const at::Tensor& bias, bool fast_gelu) {
  TORCH_CHECK(bias_gelu_quantize_rows_supported(x, bias), "bias_gelu_quantize_rows: needs a contiguous (R, K) CUDA float32/bf16/fp16 matrix ",
              "with 16-byte rows of at most ", kBiasGeluQuantizeMaxVectors, " vectors and a (K) bias on its device, got ", x.sizes(), " ",
              x.scalar_type(), " and bias ", bias.sizes());
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor b = bias.to(at::kFloat).contiguous();  // (K) float32, as bias_gelu reads it
  if (reinterpret_cast<uintptr_t>(b.data_ptr()) % 16) b = b.clone();  // (K) the kernel reads it in 16-byte vectors
  at::Tensor q, s;
  launch_bias_gelu_quantize_rows(params_with_outputs(x, q, s), b.data_ptr<float>(), fast_gelu, at::cuda::getCurrentCUDAStream().stream());
  return {q, s};
}

bool fp8_gemm_available(const c10::Device& device, std::string* why) {
  if (!device.is_cuda()) return false;
  const auto* prop = at::cuda::getDeviceProperties(device.index() < 0 ? at::cuda::current_device() : device.index());
  if (prop->major >= 9) return true;
  if (why) *why = std::string(prop->name) + " is sm_" + std::to_string(prop->major) + std::to_string(prop->minor) +
                  "; FP8 GEMMs with row-wise scales need sm_90 or newer (H100, H200)";
  return false;
}

}  // namespace nala::ops::cuda
