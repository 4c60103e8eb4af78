#include "attention/nala_reference.h"

#include <ATen/ATen.h>

#include "attention/feature_maps.h"
#include "attention/sdpa_backend.h"

namespace nala::attention {

at::Tensor nala_attention_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt) {
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
              "nala_attention_reference: q, k, v must all be (B, H, N, d); got q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  const auto ct = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const double n = double(q.size(2));
  at::Tensor pk = phi_key_reference(k, opt);                       // (B, H, N, F)
  at::Tensor pq = phi_query_reference(q, opt);                     // (B, H, N, F)
  at::Tensor S = at::matmul(pk.transpose(-1, -2), v.to(ct)) / n;   // (B, H, F, d)
  at::Tensor z = pk.sum(2, true) / n;                              // (B, H, 1, F)
  at::Tensor num = at::matmul(pq, S);                              // (B, H, N, d)
  at::Tensor den = (pq * z).sum(-1, true) + opt.eps;               // (B, H, N, 1)
  return (num / den).to(q.scalar_type());                          // (B, H, N, d)
}

at::Tensor softmax_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return sdpa_with_backend(q, k, v, sdpa_backend());  // (B, H, N, d), scale 1/√d
}

at::Tensor nala_attention_weights(const at::Tensor& q, const at::Tensor& k, const NalaOptions& opt) {
  at::Tensor pq = phi_query_reference(q.unsqueeze(0), opt);  // (1, F)
  at::Tensor pk = phi_key_reference(k, opt);                 // (N, F)
  at::Tensor s = (pk * pq).sum(-1);                          // (N,)
  return s / s.sum();
}

}  // namespace nala::attention
