// Which of ATen's fused softmax-attention kernels the DiT blocks' attention runs on CUDA
// (attention/nala_reference.h softmax_attention). at::scaled_dot_product_attention takes the first
// kernel its priority order allows; on the H200 with torch 2.11 that is cuDNN's (sm90 with cuDNN ≥ 9.9:
// ATen's sdp_utils.cpp check_prefer_cudnn_attention), ahead of FlashAttention-2 ("flash") and the
// CUTLASS memory-efficient kernel ("efficient"). DiT-XL/2's head dim 72 is no power of two, so which
// is fastest there is a measurement, not a given (`nala bench attention` rows sdpa-cudnn, sdpa-flash,
// sdpa-efficient).
//   NALA_SDPA_BACKEND=auto (default): ATen's choice
//   NALA_SDPA_BACKEND=cudnn | flash | efficient: that kernel alone for 16-bit CUDA inputs (float32
//   and float64 inputs, which none of them takes in every case, keep ATen's choice); inputs the kernel
//   does not take are an error naming it, never a silent fallback.
//   NALA_SDPA_BACKEND=nala: nala's own kernels (attention/cuda/softmax_fwd.h, FlashAttention-2's
//   algorithms for short sequences, head dims 64 and 72) for bf16 CUDA inputs: the forward where no
//   gradient is wanted (sampling), forward and backward in training where N ≤ 256 (the backward holds a
//   (batch, head)'s keys in one CTA); training at more tokens, and other dtypes, keep ATen's choice;
//   other bf16 inputs they do not take (head dims, unaligned rows) are an error naming them.
//   Any other value is an error.
// The choice holds for one call (ATen's global enables set and restored around it), so the VAE's
// attention and every other caller keep ATen's default.
#pragma once
#include <string>

#include <ATen/core/Tensor.h>

namespace nala::attention {

enum class SdpaBackend : int { Auto = 0, CuDNN = 1, Flash = 2, Efficient = 3, Nala = 4 };

SdpaBackend sdpa_backend();  // read from NALA_SDPA_BACKEND at first use
void set_sdpa_backend(SdpaBackend b);
// "auto", "cudnn", "flash", "efficient", "nala"; anything else throws, naming `what` and the value
SdpaBackend parse_sdpa_backend(const std::string& name, const std::string& what = "NALA_SDPA_BACKEND");
std::string sdpa_backend_name(SdpaBackend b);

// softmax(q kᵀ / √d) v, q, k, v (B, H, N, d), through at::scaled_dot_product_attention with its fused
// kernels limited to b as above
at::Tensor sdpa_with_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, SdpaBackend b);
// the kernel sdpa_with_backend(q, k, v, b) runs, as at::SDPBackend's value (0 math, 1 flash,
// 2 efficient, 3 cuDNN; ATen's _fused_sdp_choice under the same limits), kNalaSoftmaxKernel, or −1
// where the call is an error (NALA_SDPA_BACKEND=nala and inputs its kernel does not take)
constexpr int64_t kNalaSoftmaxKernel = 100;
int64_t sdpa_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, SdpaBackend b);
// how many times nala's forward (backward = false) or backward kernel has run in this process (tests)
int64_t nala_softmax_calls(bool backward);

}  // namespace nala::attention
