#include "attention/split_heads.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#ifdef NALA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "attention/cuda/gather_heads.h"
#endif

namespace nala::attention {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

#ifdef NALA_WITH_CUDA
bool gather_on_cuda(const tensor_list& grads, const at::Tensor& dst) {
  if (!dst.is_cuda()) return false;
  const int64_t es = dst.element_size();
  if ((dst.size(4) * es) % 16 != 0) return false;
  cuda::GatherHeadsParams p;
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& g = grads[i];
    if (!g.defined()) continue;
    if (g.scalar_type() != dst.scalar_type() || g.device() != dst.device() || g.stride(3) != 1 || reinterpret_cast<uintptr_t>(g.data_ptr()) % 16 != 0)
      return false;
    for (int k = 0; k < 3; ++k) {
      if ((g.stride(k) * es) % 16 != 0) return false;
      p.stride[i][k] = g.stride(k);
    }
    p.src[i] = g.data_ptr();
  }
  p.dst = dst.data_ptr();
  p.B = int(dst.size(0));
  p.N = int(dst.size(1));
  p.P = int(dst.size(2));
  p.H = int(dst.size(3));
  p.d = int(dst.size(4));
  p.element_size = int(es);
  c10::cuda::CUDAGuard guard(dst.device());
  cuda::launch_gather_heads(p, at::cuda::getCurrentCUDAStream().stream());
  return true;
}
#endif

struct SplitHeadsFn : torch::autograd::Function<SplitHeadsFn> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& t) {
    ctx->saved_data["sizes"] = t.sizes().vec();
    ctx->saved_data["dtype"] = int64_t(t.scalar_type());
    return t.unbind(2);  // P × (B, N, H, d) views
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto dtype = at::ScalarType(ctx->saved_data["dtype"].toInt());
    at::Tensor ref;
    for (const auto& g : grads)
      if (g.defined()) ref = g;
    if (!ref.defined()) return {at::Tensor()};
    at::Tensor dt = at::empty(sizes, ref.options().dtype(dtype));  // (B, N, P, H, d)
#ifdef NALA_WITH_CUDA
    if (gather_on_cuda(grads, dt)) return {dt};
#endif
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) dt.select(2, int64_t(i)).copy_(grads[i]);
      else dt.select(2, int64_t(i)).zero_();
    }
    return {dt};
  }
};

}  // namespace

std::vector<at::Tensor> split_heads(const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 5 && t.size(2) >= 1 && t.size(2) <= 4, "split_heads: expected a (B, N, P, H, d) tensor with P <= 4, got ", t.sizes());
  return SplitHeadsFn::apply(t);
}

}  // namespace nala::attention
