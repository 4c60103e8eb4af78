// LibTorch-facing entry points of the fused CUDA kernels (attention/cuda/nala_kernels.cuh): they
// check every argument, allocate outputs and saved state, choose the sequence split, fill the
// plain parameter struct and launch on the current stream.
#pragma once
#include <tuple>

#include <ATen/core/Tensor.h>

#include "attention/nala_cpu.h"  // NalaForward
#include "attention/nala_options.h"

namespace nala::attention {

NalaForward nala_forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt);
std::tuple<at::Tensor, at::Tensor, at::Tensor> nala_backward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                                   const at::Tensor& S, const at::Tensor& z, const at::Tensor& den,
                                                                   const at::Tensor& grad_o, const NalaOptions& opt);

// Tests: fill every output and intermediate buffer with NaN before each launch, so an element a
// kernel forgets to write shows up as NaN instead of stale memory.
void set_nala_cuda_poison(bool on);

}  // namespace nala::attention
