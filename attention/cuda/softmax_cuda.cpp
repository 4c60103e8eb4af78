#include "attention/cuda/softmax_cuda.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "attention/cuda/softmax_fwd.h"

namespace nala::attention {
namespace {

bool rows16(const at::Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0 || t.stride(3) != 1) return false;
  for (int i = 0; i < 3; ++i)
    if ((t.stride(i) * t.element_size()) % 16 != 0) return false;
  return true;
}

void set_strides(int64_t (&dst)[3], const at::Tensor& t) {
  for (int i = 0; i < 3; ++i) dst[i] = t.stride(i);
}

}  // namespace

bool softmax_forward_cuda_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return q.is_cuda() && q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes() && q.scalar_type() == at::kBFloat16 &&
         k.scalar_type() == at::kBFloat16 && v.scalar_type() == at::kBFloat16 && k.device() == q.device() && v.device() == q.device() &&
         cuda::softmax_fwd_supported(int(q.size(3))) && q.size(2) > 0 && q.size(0) * q.size(1) > 0 && q.size(2) <= 2147483647 &&
         rows16(q) && rows16(k) && rows16(v);
}

at::Tensor softmax_forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(softmax_forward_cuda_supported(q, k, v), "nala's softmax attention kernel takes CUDA bf16 q, k, v of one shape (B, H, N, d) ",
              "with d 64 or 72 and 16-byte aligned rows; got q ", q.sizes(), " ", q.scalar_type(), " strides ", q.strides(), ", k ", k.sizes(),
              " ", k.scalar_type(), ", v ", v.sizes(), " ", v.scalar_type());
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3);
  const at::Tensor o = at::empty({B, N, H, D}, q.options()).transpose(1, 2);  // (B, H, N, D) view, (B, N, H, D) in memory
  cuda::SoftmaxFwdParams p;
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.o = o.data_ptr();
  set_strides(p.q_stride, q), set_strides(p.k_stride, k), set_strides(p.v_stride, v), set_strides(p.o_stride, o);
  p.B = int(B), p.H = int(H), p.N = int(N), p.D = int(D);
  p.scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));  // log2(e) / √d (at::scaled_dot_product_attention's default scale)
  cuda::launch_softmax_fwd(p, at::cuda::getCurrentCUDAStream().stream());
  return o;
}

}  // namespace nala::attention
