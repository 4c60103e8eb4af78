#include "ops/split_heads.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#ifdef NALA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops/cuda/gather_heads.h"
#endif

namespace nala::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

#ifdef NALA_WITH_CUDA
// grads: the P parts' gradients, then (repeat ≥ 0) the repeated part's second gradient.
bool gather_on_cuda(const tensor_list& grads, int64_t repeat, const at::Tensor& dst) {
  if (!dst.is_cuda()) return false;
  const int64_t es = dst.element_size();
  if ((dst.size(4) * es) % 16 != 0) return false;
  cuda::GatherHeadsParams p;
  auto layout_ok = [&](const at::Tensor& g, int64_t (&stride)[3]) {
    if (g.scalar_type() != dst.scalar_type() || g.device() != dst.device() || g.stride(3) != 1 || reinterpret_cast<uintptr_t>(g.data_ptr()) % 16 != 0)
      return false;
    for (int k = 0; k < 3; ++k) {
      if ((g.stride(k) * es) % 16 != 0) return false;
      stride[k] = g.stride(k);
    }
    return true;
  };
  const size_t P = size_t(dst.size(2));
  for (size_t i = 0; i < P; ++i) {
    const at::Tensor& g = grads[i];
    if (!g.defined()) continue;
    if (!layout_ok(g, p.stride[i])) return false;
    p.src[i] = g.data_ptr();
  }
  if (repeat >= 0 && grads[P].defined()) {
    if (!layout_ok(grads[P], p.extra_stride)) return false;
    switch (dst.scalar_type()) {
      case at::kFloat: p.dtype = cuda::GatherHeadsParams::Dtype::f32; break;
      case at::kBFloat16: p.dtype = cuda::GatherHeadsParams::Dtype::bf16; break;
      case at::kHalf: p.dtype = cuda::GatherHeadsParams::Dtype::f16; break;
      default: return false;
    }
    p.extra_part = int(repeat);
    p.extra = grads[P].data_ptr();
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
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& t, int64_t repeat) {
    ctx->saved_data["sizes"] = t.sizes().vec();
    ctx->saved_data["dtype"] = int64_t(t.scalar_type());
    ctx->saved_data["repeat"] = repeat;
    ctx->set_materialize_grads(false);  // an unused part's gradient stays undefined: written as zeros, not read
    tensor_list parts = t.unbind(2);                // P × (B, N, H, d) views
    if (repeat >= 0) parts.push_back(t.select(2, repeat));  // the repeated part's second view
    return parts;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto dtype = at::ScalarType(ctx->saved_data["dtype"].toInt());
    const int64_t repeat = ctx->saved_data["repeat"].toInt();
    at::Tensor ref;
    for (const auto& g : grads)
      if (g.defined()) ref = g;
    if (!ref.defined()) return {at::Tensor(), at::Tensor()};
    at::Tensor dt = at::empty(sizes, ref.options().dtype(dtype));  // (B, N, P, H, d)
#ifdef NALA_WITH_CUDA
    if (gather_on_cuda(grads, repeat, dt)) return {dt, at::Tensor()};
#endif
    const int64_t P = sizes[2];
    for (int64_t i = 0; i < P; ++i) {
      at::Tensor g = grads[size_t(i)];
      if (i == repeat && grads[size_t(P)].defined()) g = g.defined() ? g + grads[size_t(P)] : grads[size_t(P)];  // autograd's sum
      if (g.defined()) dt.select(2, i).copy_(g);
      else dt.select(2, i).zero_();
    }
    return {dt, at::Tensor()};
  }
};

}  // namespace

std::vector<at::Tensor> split_heads(const at::Tensor& t, int64_t repeat_part) {
  TORCH_CHECK(t.dim() == 5 && t.size(2) >= 1 && t.size(2) <= 4, "split_heads: expected a (B, N, P, H, d) tensor with P <= 4, got ", t.sizes());
  TORCH_CHECK(repeat_part >= -1 && repeat_part < t.size(2), "split_heads: repeat_part ", repeat_part, " is not a part of ", t.size(2));
  return SplitHeadsFn::apply(t, repeat_part);
}

}  // namespace nala::ops
