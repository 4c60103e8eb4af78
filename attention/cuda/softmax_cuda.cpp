#include "attention/cuda/softmax_cuda.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "attention/cuda/softmax_fwd.h"
#include "attention/cuda/tensor_strides.h"

namespace nala::attention {
namespace {

bool rows16(const at::Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0 || t.stride(3) != 1) return false;
  for (int i = 0; i < 3; ++i)
    if ((t.stride(i) * t.element_size()) % 16 != 0) return false;
  return true;
}

std::atomic<int> g_forward_warps{0};  // 0: not read from NALA_SOFTMAX_FWD_WARPS yet

int forward_warps() {
  int w = g_forward_warps.load();
  if (w == 0) {
    const char* v = std::getenv("NALA_SOFTMAX_FWD_WARPS");
    const std::string s = v && *v ? v : "4";
    TORCH_CHECK(s == "4" || s == "8", "NALA_SOFTMAX_FWD_WARPS='", s, "' must be 4 or 8");
    w = std::stoi(s);
    g_forward_warps = w;
  }
  return w;
}

}  // namespace

void set_softmax_forward_warps(int warps) {
  TORCH_CHECK(warps == 4 || warps == 8, "set_softmax_forward_warps: ", warps, " warps (4 or 8)");
  g_forward_warps = warps;
}

bool softmax_forward_cuda_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return q.is_cuda() && q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes() && q.scalar_type() == at::kBFloat16 &&
         k.scalar_type() == at::kBFloat16 && v.scalar_type() == at::kBFloat16 && k.device() == q.device() && v.device() == q.device() &&
         cuda::softmax_fwd_supported(int(q.size(3))) && q.size(2) > 0 && q.size(0) * q.size(1) > 0 && q.size(2) <= 2147483647 &&
         rows16(q) && rows16(k) && rows16(v);
}

SoftmaxForward softmax_forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool with_lse) {
  TORCH_CHECK(softmax_forward_cuda_supported(q, k, v), "nala's softmax attention kernel takes CUDA bf16 q, k, v of one shape (B, H, N, d) ",
              "with d 64 or 72 and 16-byte aligned rows; got q ", q.sizes(), " ", q.scalar_type(), " strides ", q.strides(), ", k ", k.sizes(),
              " ", k.scalar_type(), ", v ", v.sizes(), " ", v.scalar_type());
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3);
  SoftmaxForward r;
  r.o = at::empty({B, N, H, D}, q.options()).transpose(1, 2);  // (B, H, N, D) view, (B, N, H, D) in memory
  if (with_lse) r.lse = at::empty({B, H, N}, q.options().dtype(at::kFloat));  // (B, H, N)
  cuda::SoftmaxFwdParams p;
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.o = r.o.data_ptr();
  p.lse = with_lse ? r.lse.data_ptr<float>() : nullptr;
  set_strides(p.q_stride, q), set_strides(p.k_stride, k), set_strides(p.v_stride, v), set_strides(p.o_stride, r.o);
  p.B = int(B), p.H = int(H), p.N = int(N), p.D = int(D);
  p.scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));  // log2(e) / √d (at::scaled_dot_product_attention's default scale)
  p.warps = forward_warps();
  cuda::launch_softmax_fwd(p, at::cuda::getCurrentCUDAStream().stream());
  return r;
}

bool softmax_backward_cuda_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return softmax_forward_cuda_supported(q, k, v) && cuda::softmax_bwd_supported(int(q.size(3)), int(q.size(2)));
}

SoftmaxGrads softmax_backward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse,
                                   const at::Tensor& grad_o) {
  TORCH_CHECK(softmax_backward_cuda_supported(q, k, v), "nala's softmax attention backward takes CUDA bf16 q, k, v of one shape (B, H, N, d) ",
              "with d 64 or 72, N ≤ ", cuda::kSoftmaxBwdMaxTokens, " and 16-byte aligned rows; got q ", q.sizes(), " ", q.scalar_type(), " strides ",
              q.strides());
  TORCH_CHECK(o.sizes() == q.sizes() && o.scalar_type() == at::kBFloat16 && o.device() == q.device() && rows16(o) &&
                  lse.scalar_type() == at::kFloat && lse.is_contiguous() && lse.device() == q.device() &&
                  lse.sizes() == at::IntArrayRef({q.size(0), q.size(1), q.size(2)}),
              "softmax_backward_cuda: o ", o.sizes(), " ", o.scalar_type(), " and lse ", lse.sizes(), " ", lse.scalar_type(),
              " are not the forward's");
  TORCH_CHECK(grad_o.sizes() == q.sizes() && grad_o.device() == q.device(), "softmax_backward_cuda: grad_o ", grad_o.sizes(), " on ",
              grad_o.device(), " for q ", q.sizes(), " on ", q.device());
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor go = grad_o.scalar_type() == at::kBFloat16 ? grad_o : grad_o.to(at::kBFloat16);  // (B, H, N, D)
  if (!rows16(go)) go = go.clone(at::MemoryFormat::Contiguous);  // a fresh allocation: aligned (contiguous() may keep an offset view)
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), D = q.size(3);
  auto fresh = [&] { return at::empty({B, N, H, D}, q.options()).transpose(1, 2); };  // (B, H, N, D) view of (B, N, H, D)
  SoftmaxGrads r{fresh(), fresh(), fresh()};
  cuda::SoftmaxBwdParams p;
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.o = o.data_ptr(), p.d_o = go.data_ptr(), p.lse = lse.data_ptr<float>();
  p.dq = r.dq.data_ptr(), p.dk = r.dk.data_ptr(), p.dv = r.dv.data_ptr();
  set_strides(p.q_stride, q), set_strides(p.k_stride, k), set_strides(p.v_stride, v), set_strides(p.o_stride, o), set_strides(p.do_stride, go);
  set_strides(p.dq_stride, r.dq), set_strides(p.dk_stride, r.dk), set_strides(p.dv_stride, r.dv);
  p.B = int(B), p.H = int(H), p.N = int(N), p.D = int(D);
  p.scale = float(1.0 / std::sqrt(double(D)));
  p.scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));  // as the forward's, whose lse is in these units
  cuda::launch_softmax_bwd(p, at::cuda::getCurrentCUDAStream().stream());
  return r;
}

}  // namespace nala::attention
