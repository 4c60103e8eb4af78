// Linear layers through ATen's at::linear. For a contiguous input of any rank it runs one GEMM with
// the bias fused into the epilogue, and under autocast the bias is cast with the weight. LibTorch's
// torch::nn::Linear::forward (torch::nn::functional::linear) instead runs matmul and then
// `output += bias` for inputs of rank > 2: a second pass over the output, computed in float32 when
// a float32 bias meets a bf16 output under autocast (measured on the H200: 23 ms of a 176 ms
// DiT-S/2 training step at batch 256; docs/benchmarks.md).
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

namespace nala::attention {

// y = x Wᵀ + b of a torch::nn::Linear (parameters as registered, so checkpoint keys are unchanged).
inline at::Tensor linear(const torch::nn::LinearImpl& m, const at::Tensor& x) { return at::linear(x, m.weight, m.bias); }
inline at::Tensor linear(const torch::nn::Linear& m, const at::Tensor& x) { return linear(*m, x); }

}  // namespace nala::attention
