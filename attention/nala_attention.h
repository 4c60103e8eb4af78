// nala_attention(q, k, v, options): NaLa attention as an autograd op (docs/nala_attention.md §3-§4).
// q, k, v: (B, H, N, d), the same float dtype and device; strided views (for example slices of
// one qkvg projection) are read in place. Forward saves only q, k, v, S (F×d per head), z (F per
// head) and one scalar per token; the backward is hand-derived (§4). CPU tensors run the fast
// CPU path; CUDA tensors run the fused kernels (attention/cuda/) when nala was built with CUDA.
#pragma once
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "attention/nala_cpu.h"  // NalaForward
#include "attention/nala_options.h"

namespace torch::autograd {
struct AutogradContext;
}

namespace nala::attention {

at::Tensor nala_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt = {});

// Checks shapes, dtypes and devices with the tensor's name in the message; used by every path.
void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const char* who);

// Checks the options (λ ≥ 1, λτ ≥ 1 for the nala variants, positive ε) with `who` in the message.
void check_options(const NalaOptions& opt, const char* who);

// The attention's two halves, for an operation that runs the attention inside its own autograd
// function and recomputes it in its backward (gated_tail.h: nala_mixer_recomputing): the forward
// (o, and the state S, z, den when keep_state; the one-pass CUDA kernel writes o alone otherwise),
// the backward (dq, dk, dv) from that state, and the options through an autograd context's saved
// data (entry names prefixed, so they do not collide with the operation's own). No checks: the
// caller checks with check_qkv and check_options.
NalaForward nala_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt, bool keep_state);
std::tuple<at::Tensor, at::Tensor, at::Tensor> nala_attention_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                                        const NalaForward& state, const at::Tensor& grad_o,
                                                                        const NalaOptions& opt);
void save_nala_options(torch::autograd::AutogradContext* ctx, const NalaOptions& o, const std::string& prefix = "");
NalaOptions saved_nala_options(torch::autograd::AutogradContext* ctx, const std::string& prefix = "");

// True when nala_attention on this device runs a fused CUDA kernel (false on CPU).
bool nala_cuda_kernels_available();

}  // namespace nala::attention
