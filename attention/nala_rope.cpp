#include "attention/nala_rope.h"

#include <ATen/ATen.h>

#include "attention/feature_maps.h"
#include "attention/nala_attention.h"

namespace nala::attention {

namespace {

// Rotary angles for a grid: the first half of the F features rotate with the row, the second
// with the column (axial 2-D RoPE, Heo et al. 2024), frequencies 10000^{-2i/(F/2)}.
std::pair<at::Tensor, at::Tensor> rope_tables(int64_t F, int64_t gh, int64_t gw, const at::TensorOptions& o) {
  TORCH_CHECK(F % 4 == 0, "2-D RoPE needs a feature count divisible by 4, got ", F);
  const int64_t quarter = F / 4;
  at::Tensor freq = at::pow(10000.0, -at::arange(quarter, o) / double(quarter));           // (F/4,)
  at::Tensor rows = at::arange(gh, o).repeat_interleave(gw), cols = at::arange(gw, o).repeat({gh});  // (N,)
  at::Tensor ang = at::cat({rows.unsqueeze(1) * freq, cols.unsqueeze(1) * freq}, 1);        // (N, F/2)
  return {at::cos(ang), at::sin(ang)};
}

at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  at::Tensor x1 = x.slice(-1, 0, x.size(-1), 2), x2 = x.slice(-1, 1, x.size(-1), 2);        // (..., N, F/2)
  return at::stack({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1).flatten(-2);             // (..., N, F)
}

}  // namespace

at::Tensor nala_attention_rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt,
                               int64_t grid_h, int64_t grid_w) {
  check_qkv(q, k, v, "nala_attention_rope");
  const double n = double(q.size(2));
  at::Tensor pq = phi_query_reference(q, opt), pk = phi_key_reference(k, opt);      // (B, H, N, F)
  auto [cos, sin] = rope_tables(pq.size(-1), grid_h, grid_w, pq.options());
  at::Tensor S = at::matmul(rotate(pk, cos, sin).transpose(-1, -2), v.to(pq.scalar_type())) / n;  // (B, H, F, d)
  at::Tensor z = pk.sum(2, true) / n;                                                // (B, H, 1, F)
  at::Tensor num = at::matmul(rotate(pq, cos, sin), S);                              // (B, H, N, d)
  at::Tensor den = (pq * z).sum(-1, true) + opt.eps;                                 // (B, H, N, 1)
  return (num / den).to(q.scalar_type());
}

}  // namespace nala::attention
