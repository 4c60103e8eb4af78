#include "attention/nala_cpu.h"

#include <ATen/ATen.h>
#include <cmath>

namespace nala::attention {
namespace {

at::ScalarType acc_type(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// Per-token quantities shared by the forward and backward of the nala maps.
struct NormParts {
  at::Tensor n, inv, xh;  // ‖x‖ (..., 1), 1/max(‖x‖, ε_n) (..., 1), x̂ (..., d)
};
NormParts norm_parts(const at::Tensor& x, const NalaOptions& o) {
  NormParts r;
  r.n = x.norm(2, -1, true);
  r.inv = r.n.clamp_min(o.eps_norm).reciprocal();
  r.xh = x * r.inv;
  return r;
}

// |b|^p, 0 where b = 0 (exp(p·log 0) = exp(−inf) = 0 for p > 0).
at::Tensor pow_abs(const at::Tensor& b, const at::Tensor& p) { return at::exp(p * at::log(b.abs())); }

}  // namespace

// The maps are written as whole-tensor ATen ops (vectorised, threaded by ATen), without autograd;
// the gradients below are derived by hand from docs/nala_attention.md §3 and tested against autograd.
at::Tensor phi_cpu(const at::Tensor& x_in, bool query, const NalaOptions& o) {
  const at::Tensor x = x_in.to(acc_type(x_in));  // (..., d)
  switch (o.feature_map) {
    case FeatureMap::Elu: return at::elu(x) + 1.0;
    case FeatureMap::Relu: return at::relu(x);
    case FeatureMap::Focused: {
      at::Tensor r = at::relu(x), rp = r.pow(o.focus_power);
      return rp * (r.norm(2, -1, true) / rp.norm(2, -1, true).clamp_min(1e-12));
    }
    default: break;
  }
  NormParts np = norm_parts(x, o);
  at::Tensor sg = query ? np.xh : x;                                              // what carries the power
  at::Tensor p = query ? o.lambda * (o.tau + at::tanh(np.n)) : at::full({}, o.lambda, x.options());
  at::Tensor a = pow_abs(sg, p);                                                  // (..., d)
  if (o.feature_map == FeatureMap::NalaRelu) return at::cat({a * (sg > 0), a * (sg < 0)}, -1);  // (..., 2d)
  at::Tensor th = (M_PI / 4) * at::tanh(o.alpha * np.xh);                        // (..., d)
  return at::cat({a * at::cos(th), a * at::sin(th)}, -1);                         // (..., 2d)
}

// ∂L/∂x from g = ∂L/∂φ. For the nala maps (a = |s|^p on s = q̂ for queries, s = k for keys,
// θ = (π/4) tanh(α x̂)):
//   ∂L/∂a = g₀ cos θ + g₁ sin θ,  ∂L/∂θ = a (g₁ cos θ − g₀ sin θ)
//   ∂L/∂s = ∂L/∂a · p a / s,      ∂L/∂p = Σ ∂L/∂a · a ln|s|,  ∂L/∂n = ∂L/∂p · λ (1 − tanh² n)
//   ∂L/∂x̂ = ∂L/∂θ (π/4) α (1 − tanh²(α x̂)) [+ ∂L/∂s for queries]
//   ∂L/∂x = (∂L/∂x̂ − x̂ (x̂·∂L/∂x̂)) / n + ∂L/∂n x̂ [+ ∂L/∂s for keys]    (n > ε_n; else ∂L/∂x̂ / ε_n + ∂L/∂n x / n)
at::Tensor phi_backward_cpu(const at::Tensor& x_in, const at::Tensor& grad_phi, bool query, const NalaOptions& o) {
  const at::Tensor x = x_in.to(acc_type(x_in));   // (..., d)
  const at::Tensor g = grad_phi.to(acc_type(x_in));  // (..., F)
  const int64_t d = x.size(-1);
  switch (o.feature_map) {
    case FeatureMap::Elu: return g * at::where(x > 0, at::ones_like(x), at::exp(x));
    case FeatureMap::Relu: return g * (x > 0);
    case FeatureMap::Focused: {
      at::Tensor r = at::relu(x), rp = r.pow(o.focus_power);                      // (..., d)
      at::Tensor nr = r.norm(2, -1, true), nrp = rp.norm(2, -1, true);             // (..., 1)
      at::Tensor D = nrp.clamp_min(1e-12), s = nr / D;
      at::Tensor drp = o.focus_power * r.pow(o.focus_power - 1);                   // d(r^P)/dr
      at::Tensor G = (g * rp).sum(-1, true);                                        // Σ g_j r_j^P
      at::Tensor ds = at::where(nr > 0, r / nr, at::zeros_like(r)) / D -           // ∂s/∂r_j
                      at::where(nrp > 1e-12, nr / (D * D) * rp * drp / nrp, at::zeros_like(r));
      return (g * s * drp + G * ds) * (x > 0);
    }
    default: break;
  }
  NormParts np = norm_parts(x, o);
  at::Tensor tn = at::tanh(np.n);                                                 // (..., 1)
  at::Tensor sg = query ? np.xh : x;                                              // (..., d)
  at::Tensor p = query ? o.lambda * (o.tau + tn) : at::full({}, o.lambda, x.options());
  at::Tensor a = pow_abs(sg, p);                                                  // (..., d)
  at::Tensor g0 = g.narrow(-1, 0, d), g1 = g.narrow(-1, d, d);                    // (..., d)
  at::Tensor dA, gxh;
  if (o.feature_map == FeatureMap::NalaRelu) {
    dA = at::where(sg > 0, g0, at::where(sg < 0, g1, at::zeros_like(g0)));
    gxh = at::zeros_like(x);
  } else {
    at::Tensor tt = at::tanh(o.alpha * np.xh), th = (M_PI / 4) * tt, c = at::cos(th), s = at::sin(th);
    dA = g0 * c + g1 * s;
    gxh = a * (g1 * c - g0 * s) * ((M_PI / 4) * o.alpha) * (1 - tt * tt);
  }
  const at::Tensor nz = sg != 0;
  at::Tensor ds = at::where(nz, dA * p * a / at::where(nz, sg, at::ones_like(sg)), at::zeros_like(sg));  // ∂L/∂s
  at::Tensor gn;
  if (query) {
    gxh = gxh + ds;
    at::Tensor gp = at::where(nz, dA * a * at::log(sg.abs()), at::zeros_like(sg)).sum(-1, true);        // ∂L/∂p
    gn = gp * o.lambda * (1 - tn * tn);                                                                  // ∂L/∂n
  } else {
    gn = at::zeros_like(np.n);
  }
  at::Tensor dot = (np.xh * gxh).sum(-1, true);
  at::Tensor above = np.n > o.eps_norm;
  at::Tensor dx = at::where(above, (gxh - np.xh * dot) * np.inv + gn * np.xh,
                            gxh * np.inv + at::where(np.n > 0, gn * x / np.n.clamp_min(1e-38), at::zeros_like(x)));
  return query ? dx : dx + ds;
}

NalaForward nala_forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt) {
  const double N = double(q.size(2));
  const auto acc = acc_type(q);
  at::Tensor pk = phi_cpu(k, false, opt);                                // (B, H, N, F)
  NalaForward r;
  r.S = at::matmul(pk.transpose(-1, -2), v.to(acc)).div_(N);              // (B, H, F, d)
  r.z = pk.sum(2).div_(N);                                                // (B, H, F)
  pk = at::Tensor();
  at::Tensor pq = phi_cpu(q, true, opt);                                 // (B, H, N, F)
  at::Tensor num = at::matmul(pq, r.S);                                  // (B, H, N, d)
  r.den = at::matmul(pq, r.z.unsqueeze(-1)).squeeze(-1).add_(opt.eps);  // (B, H, N)
  r.o = num.div_(r.den.unsqueeze(-1)).to(q.scalar_type());               // (B, H, N, d)
  return r;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nala_backward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                                  const at::Tensor& S, const at::Tensor& z, const at::Tensor& den,
                                                                  const at::Tensor& grad_o, const NalaOptions& opt) {
  const double N = double(q.size(2));
  const auto acc = acc_type(q);
  at::Tensor pq = phi_cpu(q, true, opt);                                  // (B, H, N, F)
  at::Tensor g = grad_o.to(acc) / den.unsqueeze(-1);                      // (B, H, N, d)   do_t / (b_t + ε)
  at::Tensor o = at::matmul(pq, S).div_(den.unsqueeze(-1));               // (B, H, N, d)   recomputed output
  at::Tensor c = (g * o).sum(-1);                                         // (B, H, N)      (do_t·o_t)/(b_t + ε)
  at::Tensor dpq = at::matmul(g, S.transpose(-1, -2));                    // (B, H, N, F)   S do_t/(b_t+ε)
  dpq.sub_(c.unsqueeze(-1) * z.unsqueeze(-2));                            //                − z (do_t·o_t)/(b_t+ε)
  at::Tensor dS = at::matmul(pq.transpose(-1, -2), g);                    // (B, H, F, d)   ∂L/∂S
  at::Tensor dz = -at::matmul(pq.transpose(-1, -2), c.unsqueeze(-1)).squeeze(-1);  // (B, H, F)  ∂L/∂z
  pq = at::Tensor();
  at::Tensor dq = phi_backward_cpu(q, dpq, true, opt);                    // (B, H, N, d)
  dpq = at::Tensor();
  at::Tensor pk = phi_cpu(k, false, opt);                                 // (B, H, N, F)
  at::Tensor vf = v.to(acc);
  at::Tensor dv = at::matmul(pk, dS).div_(N);                             // (B, H, N, d)   (1/N) dSᵀ φ_k,i
  at::Tensor dpk = at::matmul(vf, dS.transpose(-1, -2)).add_(dz.unsqueeze(-2)).div_(N);  // (B, H, N, F)
  at::Tensor dk = phi_backward_cpu(k, dpk, false, opt);                   // (B, H, N, d)
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

}  // namespace nala::attention
