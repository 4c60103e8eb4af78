#include "attention/sdpa_backend.h"

#include <atomic>
#include <cstdlib>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <torch/autograd.h>

#include "attention/cuda/softmax_fwd.h"  // kSoftmaxBwdMaxTokens (a plain header: no CUDA needed)
#ifdef NALA_WITH_CUDA
#include "attention/cuda/softmax_cuda.h"
#endif

namespace nala::attention {
namespace {

std::atomic<int> g_backend{-1};  // -1: not read from the environment yet

// ATen's global enables of its three fused kernels, limited to one for the lifetime of this object
// and then restored (math stays as the user left it: the float32 / float64 path)
class FusedKernelLimit {
 public:
  explicit FusedKernelLimit(SdpaBackend b) {
    at::Context& ctx = at::globalContext();
    flash_ = ctx.userEnabledFlashSDP(), efficient_ = ctx.userEnabledMemEfficientSDP(), cudnn_ = ctx.userEnabledCuDNNSDP();
    ctx.setSDPUseFlash(b == SdpaBackend::Flash);
    ctx.setSDPUseMemEfficient(b == SdpaBackend::Efficient);
    ctx.setSDPUseCuDNN(b == SdpaBackend::CuDNN);
  }
  ~FusedKernelLimit() {
    at::Context& ctx = at::globalContext();
    ctx.setSDPUseFlash(flash_);
    ctx.setSDPUseMemEfficient(efficient_);
    ctx.setSDPUseCuDNN(cudnn_);
  }
  FusedKernelLimit(const FusedKernelLimit&) = delete;
  FusedKernelLimit& operator=(const FusedKernelLimit&) = delete;

 private:
  bool flash_ = true, efficient_ = true, cudnn_ = true;
};

at::SDPBackend aten_backend(SdpaBackend b) {
  switch (b) {
    case SdpaBackend::CuDNN: return at::SDPBackend::cudnn_attention;
    case SdpaBackend::Flash: return at::SDPBackend::flash_attention;
    case SdpaBackend::Efficient: return at::SDPBackend::efficient_attention;
    default: return at::SDPBackend::error;
  }
}

// whether b limits this call to one of ATen's kernels: CUDA 16-bit inputs and a named ATen kernel
bool limited(const at::Tensor& q, SdpaBackend b) {
  return b != SdpaBackend::Auto && b != SdpaBackend::Nala && q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf);
}

bool wants_grad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// whether nala's kernels run this call: NALA_SDPA_BACKEND=nala and CUDA bf16 q, except training past the
// tokens the backward holds (N > 256: ATen's choice, as documented); inputs they do not take are then an
// error, never a silent fallback
constexpr int64_t kNalaTrainingTokens = cuda::kSoftmaxBwdMaxTokens;
bool nala_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, SdpaBackend b) {
  if (b != SdpaBackend::Nala || !q.is_cuda() || q.scalar_type() != at::kBFloat16) return false;
  return !wants_grad(q, k, v) || q.dim() != 4 || q.size(2) <= kNalaTrainingTokens;
}

std::atomic<int64_t> g_nala_calls[2];  // [0] forwards, [1] backwards of nala's kernels

#ifdef NALA_WITH_CUDA
// Training through nala's kernels: the forward keeps o and the log-sum-exp, the backward takes them
struct SoftmaxAttentionFn : torch::autograd::Function<SoftmaxAttentionFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    TORCH_CHECK(softmax_backward_cuda_supported(q, k, v), "NALA_SDPA_BACKEND=nala: nala's softmax attention backward takes CUDA bf16 q, k, v ",
                "(B, H, N, d) with d 64 or 72, N ≤ ", kNalaTrainingTokens, " and 16-byte aligned rows; got q ", q.sizes(), " strides ", q.strides(),
                ". Unset NALA_SDPA_BACKEND for ATen's choice.");
    const SoftmaxForward f = softmax_forward_cuda(q, k, v, /*lse=*/true);  // (B, H, N, d), (B, H, N)
    ++g_nala_calls[0];
    ctx->save_for_backward({q, k, v, f.o, f.lse});
    return f.o;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    TORCH_CHECK(!at::GradMode::is_enabled(), "NALA_SDPA_BACKEND=nala: nala's softmax attention has no double backward (create_graph)");
    const auto s = ctx->get_saved_variables();
    const SoftmaxGrads g = softmax_backward_cuda(s[0], s[1], s[2], s[3], s[4], grads[0]);  // (B, H, N, d) ×3
    ++g_nala_calls[1];
    return {g.dq, g.dk, g.dv};
  }
};
#endif

}  // namespace

int64_t nala_softmax_calls(bool backward) { return g_nala_calls[backward].load(); }

SdpaBackend parse_sdpa_backend(const std::string& name, const std::string& what) {
  if (name == "auto") return SdpaBackend::Auto;
  if (name == "cudnn") return SdpaBackend::CuDNN;
  if (name == "flash") return SdpaBackend::Flash;
  if (name == "efficient") return SdpaBackend::Efficient;
  if (name == "nala") return SdpaBackend::Nala;
  TORCH_CHECK(false, what, "='", name, "' is not a softmax-attention kernel: auto, cudnn, flash, efficient or nala");
}

std::string sdpa_backend_name(SdpaBackend b) {
  switch (b) {
    case SdpaBackend::CuDNN: return "cudnn";
    case SdpaBackend::Flash: return "flash";
    case SdpaBackend::Efficient: return "efficient";
    case SdpaBackend::Nala: return "nala";
    default: return "auto";
  }
}

SdpaBackend sdpa_backend() {
  int v = g_backend.load();
  if (v < 0) {
    const char* env = std::getenv("NALA_SDPA_BACKEND");
    v = int(env && *env ? parse_sdpa_backend(env) : SdpaBackend::Auto);
    g_backend = v;
  }
  return SdpaBackend(v);
}

void set_sdpa_backend(SdpaBackend b) { g_backend = int(b); }

int64_t sdpa_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, SdpaBackend b) {
  if (nala_kernel(q, k, v, b)) {
#ifdef NALA_WITH_CUDA
    if (wants_grad(q, k, v) ? softmax_backward_cuda_supported(q, k, v) : softmax_forward_cuda_supported(q, k, v)) return kNalaSoftmaxKernel;
#endif
    return int64_t(at::SDPBackend::error);  // sdpa_with_backend refuses these inputs
  }
  if (!limited(q, b)) return at::_fused_sdp_choice(q, k, v);
  const FusedKernelLimit limit(b);
  return at::_fused_sdp_choice(q, k, v);
}

at::Tensor sdpa_with_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, SdpaBackend b) {
  if (nala_kernel(q, k, v, b)) {
#ifdef NALA_WITH_CUDA
    if (wants_grad(q, k, v)) return SoftmaxAttentionFn::apply(q, k, v);  // (B, H, N, d); an error naming what does not fit
    const at::Tensor o = softmax_forward_cuda(q, k, v);                  // (B, H, N, d); likewise
    ++g_nala_calls[0];
    return o;
#else
    TORCH_CHECK(false, "NALA_SDPA_BACKEND=nala: this build has no CUDA kernels");
#endif
  }
  if (!limited(q, b)) return at::scaled_dot_product_attention(q, k, v);  // (B, H, N, d)
  const FusedKernelLimit limit(b);
  const int64_t chosen = at::_fused_sdp_choice(q, k, v);
  TORCH_CHECK(chosen == int64_t(aten_backend(b)), "NALA_SDPA_BACKEND=", sdpa_backend_name(b), ": ATen's ", sdpa_backend_name(b),
              " attention kernel does not take q ", q.sizes(), " (strides ", q.strides(), ", ", q.scalar_type(), ") on this GPU; ATen would run its backend ",
              chosen, " (0 math, 1 flash, 2 efficient, 3 cudnn). Unset NALA_SDPA_BACKEND for ATen's own choice.");
  return at::scaled_dot_product_attention(q, k, v);  // (B, H, N, d)
}

}  // namespace nala::attention
