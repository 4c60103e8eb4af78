// NaLa attention as PyTorch custom operators (torch.library) for the Python package `nala`
// (python/nala): the same CPU path and CUDA kernels the nala binary runs. Two functional ops; the
// package registers their fake (meta) implementations and the autograd formula in Python
// (python/nala/_ops.py), so torch.compile(fullgraph=True) traces through them.
//   nala::attention_forward(q, k, v, options...)  -> (o, S, z, den)
//   nala::attention_backward(q, k, v, S, z, den, grad_o, options...) -> (dq, dk, dv)
//   nala::attention_rope(q, k, v, options..., grid_h, grid_w) -> o   (2-D RoPE variant, attention/nala_rope.h:
//   ATen ops, registered CompositeImplicitAutograd, so autograd and tracing go through those ops)
// q, k, v (B, H, N, d), one float dtype and device, strided views allowed; o, dq, dk, dv
// contiguous (B, H, N, d) in q's dtype; S, z, den the saved state in the accumulation type
// (float64 for float64 inputs, else float32), on CUDA padded to multiples of 16 (attention/cuda/nala_params.h).
#include <torch/library.h>

#include "attention/nala_attention.h"
#include "attention/nala_cpu.h"
#include "attention/nala_rope.h"
#ifdef NALA_WITH_CUDA
#include "attention/cuda/nala_cuda.h"
#endif

namespace {

using nala::attention::FeatureMap;
using nala::attention::NalaOptions;

NalaOptions options(int64_t feature_map, double lam, double tau, double alpha, double eps, double eps_norm, double focus_power) {
  TORCH_CHECK(feature_map >= 0 && feature_map <= 4, "nala attention: feature_map index ", feature_map, " is not one of 0..4");
  NalaOptions o;
  o.feature_map = static_cast<FeatureMap>(feature_map);
  o.lambda = lam;
  o.tau = tau;
  o.alpha = alpha;
  o.eps = eps;
  o.eps_norm = eps_norm;
  o.focus_power = focus_power;
  nala::attention::check_options(o, "nala.attention");
  return o;
}

using Fwd = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Bwd = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

Fwd contiguous(const nala::attention::NalaForward& r) { return {r.o.contiguous(), r.S.contiguous(), r.z.contiguous(), r.den.contiguous()}; }
Bwd contiguous(const Bwd& d) { return {std::get<0>(d).contiguous(), std::get<1>(d).contiguous(), std::get<2>(d).contiguous()}; }

Fwd forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t fm, double lam, double tau, double alpha, double eps,
                double eps_norm, double focus_power) {
  nala::attention::check_qkv(q, k, v, "nala.attention");
  return contiguous(nala::attention::nala_forward_cpu(q, k, v, options(fm, lam, tau, alpha, eps, eps_norm, focus_power)));
}

Bwd backward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& S, const at::Tensor& z, const at::Tensor& den,
                 const at::Tensor& grad_o, int64_t fm, double lam, double tau, double alpha, double eps, double eps_norm, double focus_power) {
  return contiguous(nala::attention::nala_backward_cpu(q, k, v, S, z, den, grad_o, options(fm, lam, tau, alpha, eps, eps_norm, focus_power)));
}

at::Tensor attention_rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t fm, double lam, double tau, double alpha,
                          double eps, double eps_norm, double focus_power, int64_t grid_h, int64_t grid_w) {
  TORCH_CHECK(grid_h * grid_w == q.size(2), "nala.attention: ", q.size(2), " tokens do not fill a ", grid_h, "x", grid_w, " grid");
  return nala::attention::nala_attention_rope(q, k, v, options(fm, lam, tau, alpha, eps, eps_norm, focus_power), grid_h, grid_w);
}

#ifdef NALA_WITH_CUDA
Fwd forward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t fm, double lam, double tau, double alpha, double eps,
                 double eps_norm, double focus_power) {
  nala::attention::check_qkv(q, k, v, "nala.attention");
  return contiguous(nala::attention::nala_forward_cuda(q, k, v, options(fm, lam, tau, alpha, eps, eps_norm, focus_power)));
}

Bwd backward_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& S, const at::Tensor& z, const at::Tensor& den,
                  const at::Tensor& grad_o, int64_t fm, double lam, double tau, double alpha, double eps, double eps_norm, double focus_power) {
  return contiguous(nala::attention::nala_backward_cuda(q, k, v, S, z, den, grad_o, options(fm, lam, tau, alpha, eps, eps_norm, focus_power)));
}
#endif

}  // namespace

TORCH_LIBRARY(nala, m) {
  m.def("attention_forward(Tensor q, Tensor k, Tensor v, int feature_map, float lam, float tau, float alpha, float eps, float eps_norm, "
        "float focus_power) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("attention_backward(Tensor q, Tensor k, Tensor v, Tensor S, Tensor z, Tensor den, Tensor grad_o, int feature_map, float lam, "
        "float tau, float alpha, float eps, float eps_norm, float focus_power) -> (Tensor, Tensor, Tensor)");
  m.def("attention_rope(Tensor q, Tensor k, Tensor v, int feature_map, float lam, float tau, float alpha, float eps, float eps_norm, "
        "float focus_power, int grid_h, int grid_w) -> Tensor");
  m.def("cuda_kernels_built() -> bool", [] { return nala::attention::nala_cuda_kernels_available(); });
}

TORCH_LIBRARY_IMPL(nala, CompositeImplicitAutograd, m) { m.impl("attention_rope", &attention_rope); }

TORCH_LIBRARY_IMPL(nala, CPU, m) {
  m.impl("attention_forward", &forward_cpu);
  m.impl("attention_backward", &backward_cpu);
}

#ifdef NALA_WITH_CUDA
TORCH_LIBRARY_IMPL(nala, CUDA, m) {
  m.impl("attention_forward", &forward_cuda);
  m.impl("attention_backward", &backward_cuda);
}
#endif
