#include "attention/gated_tail.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include "attention/nala_attention.h"
#include "ops/fused_ops.h"
#include "ops/linear.h"
#include "ops/partial_sums.h"
#include "ops/split_heads.h"
#include "ops/weight_casts.h"

#ifdef NALA_WITH_CUDA
#include "attention/cuda/gated_tail_cuda.h"
#include "attention/cuda/nala_cuda.h"
#include "ops/cuda/column_sum.h"
#endif

namespace nala::attention {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::atomic<int> g_lepe_in_attention{-1};  // −1: not read from NALA_LEPE_IN_ATTENTION yet
std::atomic<int64_t> g_lepe_in_attention_runs{0}, g_lepe_in_attention_backward_runs{0}, g_qkvg_grads_in_place_runs{0};

at::ScalarType compute_type(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// v (B, N, D) as the image (B, D, grid_h, grid_w) a conv2d reads
at::Tensor as_image(const at::Tensor& v, int64_t grid_h, int64_t grid_w) {
  return v.reshape({v.size(0), grid_h, grid_w, v.size(2)}).permute({0, 3, 1, 2});  // (B, D, Hg, Wg)
}

struct Saved {
  at::Tensor y, u, mean, rstd;  // mean, rstd (B, N) float
  bool kernels = false;         // the CUDA kernels made them (else the ATen formulas)
};

// y = (x̂·w + b)·SiLU(g) with x̂ = (u − μ)·r, from what the forward keeps (u, μ, r): the ATen
// forward's own last step, and the recomputation of gated_tail_proj's backward.
at::Tensor y_from_u(const at::Tensor& u, const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& g, const at::Tensor& norm_w,
                    const at::Tensor& norm_b, at::ScalarType out_dtype) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::ScalarType ct = compute_type(u);
  at::Tensor xh = (u.to(ct) - mean.to(ct).unsqueeze(-1)) * rstd.to(ct).unsqueeze(-1);                    // (B, N, D)
  return ((xh * norm_w.to(ct) + norm_b.to(ct)) * at::silu(g.to(ct))).to(out_dtype);                      // (B, N, D)
}

// The forward in ATen ops: u in o's dtype (what the kernels keep), statistics of that rounded u.
Saved forward_aten(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                   const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps, at::ScalarType out_dtype) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // the compute type is chosen here
  const at::ScalarType ct = compute_type(o);
  const int64_t B = o.size(0), N = o.size(2), D = o.size(1) * o.size(3);
  at::Tensor u = o.transpose(1, 2).reshape({B, N, D}).to(ct);  // (B, N, D)
  if (lepe_w.defined()) {
    const int64_t pad = lepe_w.size(-1) / 2;
    at::Tensor lepe = at::conv2d(as_image(v, grid_h, grid_w).to(ct), lepe_w.to(ct), lepe_b.defined() ? lepe_b.to(ct) : at::Tensor(), 1, pad, 1,
                                 D);                          // (B, D, Hg, Wg)
    u = u + lepe.flatten(2).transpose(1, 2);                  // (B, N, D)
  }
  Saved s;
  s.u = u.to(o.scalar_type());                                                               // (B, N, D)
  auto [var, mean] = at::var_mean(s.u.to(ct), {-1}, /*correction=*/0, /*keepdim=*/false);  // (B, N) ×2, biased (LayerNorm's)
  s.mean = mean;                                                                             // (B, N)
  s.rstd = at::rsqrt(var + eps);                                                             // (B, N)
  s.y = y_from_u(s.u, s.mean, s.rstd, g, norm_w, norm_b, out_dtype);                         // (B, N, D)
  return s;
}

struct Grads {
  at::Tensor o, v, g, lepe_w, lepe_b, norm_w, norm_b;
  at::Tensor g_sum;  // (D) float32 Σ ∂L/∂g as stored: the kernels with dg_out and dg_sum only
};

// The backward by hand. With y = n·s, n = x̂·w + b, s = SiLU(g) = g·σ(g), x̂ = (u − μ)·r:
//   ∂L/∂g = ∂L/∂y · n · σ(g)(1 + g(1 − σ(g)))            (SiLU' = σ + g·σ·(1 − σ))
//   e = ∂L/∂y · s · w,  ∂L/∂u = r·(e − mean_D(e) − x̂·mean_D(e·x̂))   (LayerNorm, Ba et al. 2016)
//   ∂L/∂w = Σ_tokens ∂L/∂y·s·x̂,  ∂L/∂b = Σ_tokens ∂L/∂y·s;  ∂L/∂o = ∂L/∂u in o's (B, H, N, d)
// and LePE's gradients (input, weight, bias) from ATen's convolution backward (an independent oracle
// for the kernels' own tap loops).
Grads backward_aten(const at::Tensor& dy_in, int64_t heads, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w,
                    const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& u, const at::Tensor& mean, const at::Tensor& rstd,
                    int64_t grid_h, int64_t grid_w) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::ScalarType ct = compute_type(v);
  const int64_t B = u.size(0), N = u.size(1), D = u.size(2);
  at::Tensor dy = dy_in.to(ct), gf = g.to(ct), w = norm_w.to(ct);
  at::Tensor xh = (u.to(ct) - mean.to(ct).unsqueeze(-1)) * rstd.to(ct).unsqueeze(-1);  // (B, N, D)
  at::Tensor sg = at::sigmoid(gf);                                                      // (B, N, D)
  Grads r;
  r.g = (dy * (xh * w + norm_b.to(ct)) * sg * (1 + gf * (1 - sg))).to(g.scalar_type());  // (B, N, D)
  at::Tensor dn = dy * gf * sg;                                                          // (B, N, D)
  r.norm_w = (dn * xh).sum(at::IntArrayRef{0, 1}).to(norm_w.scalar_type());                             // (D)
  r.norm_b = dn.sum(at::IntArrayRef{0, 1}).to(norm_b.scalar_type());                                    // (D)
  at::Tensor e = dn * w;                                                                 // (B, N, D)
  at::Tensor du = rstd.to(ct).unsqueeze(-1) * (e - e.mean(-1, true) - xh * (e * xh).mean(-1, true));  // (B, N, D)
  r.o = du.view({B, N, heads, D / heads}).transpose(1, 2).to(u.scalar_type());          // (B, H, N, d)
  if (lepe_w.defined()) {
    const int64_t pad = lepe_w.size(-1) / 2;
    auto [dv, dw, db] = at::convolution_backward(as_image(du, grid_h, grid_w), as_image(v, grid_h, grid_w).to(ct), lepe_w.to(ct),
                                                 at::IntArrayRef{D}, {1, 1}, {pad, pad}, {1, 1}, false, {0, 0}, D, {true, true, true});
    r.v = dv.permute({0, 2, 3, 1}).reshape({B, N, D}).to(v.scalar_type());  // (B, N, D)
    r.lepe_w = dw.to(lepe_w.scalar_type());                                 // (D, 1, ks, ks)
    r.lepe_b = db;                                                          // (D)
  }
  return r;
}

// Function::apply takes defined tensors only: "no LePE" (or no LePE bias) travels as an empty one.
at::Tensor absent_as_empty(const at::Tensor& t, const at::Tensor& like) { return t.defined() ? t : at::empty({0}, like.options()); }
at::Tensor empty_as_absent(const at::Tensor& t) { return t.numel() > 0 ? t : at::Tensor(); }

// The tail's forward: the kernels where they take the tensors, else the ATen formulas.
Saved tail_forward(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                   const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps, at::ScalarType out_dtype) {
#ifdef NALA_WITH_CUDA
  if (cuda::gated_tail_supported(o, v, g, lepe_w, out_dtype)) {
    auto k = cuda::gated_tail_forward(o, v, g, lepe_w, lepe_b, norm_w, norm_b, grid_h, grid_w, eps, true);
    return {k.y, k.u, k.mean, k.rstd, true};
  }
#endif
  return forward_aten(o, v, g, lepe_w, lepe_b, norm_w, norm_b, grid_h, grid_w, eps, out_dtype);
}

#ifdef NALA_WITH_CUDA
// Whether the tail's backward runs the kernels for what the forward kept
bool tail_backward_kernels(int64_t heads, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& u,
                           const at::Tensor& mean) {
  return u.is_cuda() && u.is_contiguous() && mean.scalar_type() == at::kFloat &&
         cuda::gated_tail_supported(u.view({u.size(0), u.size(1), heads, -1}).transpose(1, 2), v, g, lepe_w, u.scalar_type());
}
#endif

// The tail's backward from ∂L/∂y (B, N, D): the kernels where they take the tensors, else ATen.
// lepe_dv false (the kernels only): LePE's part of ∂L/∂v is left out (r.v undefined) for the
// attention's backward to add (nala_mixer).
// pending, g_sum_out: as cuda::gated_tail_backward's (the kernels only).
Grads tail_backward(const at::Tensor& dy, int64_t heads, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w,
                    const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& u, const at::Tensor& mean, const at::Tensor& rstd,
                    int64_t gh, int64_t gw, bool lepe_dv = true, const at::Tensor& dg_out = {}, bool dg_sum = false,
                    std::vector<ops::PartialSums>* pending = nullptr, const at::Tensor& g_sum_out = {}) {
#ifdef NALA_WITH_CUDA
  if (tail_backward_kernels(heads, v, g, lepe_w, u, mean)) {
    auto k = cuda::gated_tail_backward(dy, heads, v, g, lepe_w, norm_w, norm_b, u, mean, rstd, gh, gw, lepe_dv, dg_out, dg_sum, pending, g_sum_out);
    return {k.o, k.v, k.g, k.lepe_w, k.lepe_b, k.norm_w, k.norm_b, k.g_sum};
  }
#endif
  TORCH_CHECK(lepe_dv && !dg_out.defined() && pending == nullptr && !g_sum_out.defined(),
              "gated_tail: LePE's input gradient can be left to the attention, ∂L/∂g written in place and the partial sums' ",
              "second stage left to the caller only where the tail's kernels run");
  return backward_aten(dy, heads, v, g, lepe_w, norm_w, norm_b, u, mean, rstd, gh, gw);
}

at::Tensor grad_as(const at::Tensor& grad, const at::Tensor& like) {
  return grad.defined() && like.defined() ? grad.to(like.scalar_type()) : at::Tensor();
}

void save_tail(AutogradContext* ctx, const Saved& s, const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w_in,
               const at::Tensor& lepe_b_in, const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w,
               std::vector<at::Tensor> more = {}) {
  std::vector<at::Tensor> keep = {v, g, lepe_w_in, lepe_b_in, norm_w, norm_b, s.u, s.mean, s.rstd};
  keep.insert(keep.end(), more.begin(), more.end());
  ctx->save_for_backward(keep);
  ctx->saved_data["heads"] = o.size(1);
  ctx->saved_data["grid_h"] = grid_h;
  ctx->saved_data["grid_w"] = grid_w;
}

// The saved tail's backward from ∂L/∂y: its seven gradients (o, v, g, lepe.weight, lepe.bias,
// norm.weight, norm.bias) in the inputs' dtypes.
tensor_list saved_tail_backward(AutogradContext* ctx, const std::vector<at::Tensor>& sv, const at::Tensor& dy) {
  const at::Tensor &v = sv[0], &g = sv[1], &norm_w = sv[4], &norm_b = sv[5], &u = sv[6], &mean = sv[7], &rstd = sv[8];
  const at::Tensor lepe_w = empty_as_absent(sv[2]), lepe_b = empty_as_absent(sv[3]);
  const int64_t heads = ctx->saved_data["heads"].toInt(), gh = ctx->saved_data["grid_h"].toInt(), gw = ctx->saved_data["grid_w"].toInt();
  const Grads r = tail_backward(dy, heads, v, g, lepe_w, norm_w, norm_b, u, mean, rstd, gh, gw);
  return {r.o, r.v, r.g, grad_as(r.lepe_w, lepe_w), grad_as(r.lepe_b, lepe_b), grad_as(r.norm_w, norm_w), grad_as(r.norm_b, norm_b)};
}

struct GatedTailFn : torch::autograd::Function<GatedTailFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w_in,
                            const at::Tensor& lepe_b_in, const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps,
                            int64_t out_dtype_int) {
    const Saved s = tail_forward(o, v, g, empty_as_absent(lepe_w_in), empty_as_absent(lepe_b_in), norm_w, norm_b, grid_h, grid_w, eps,
                                 at::ScalarType(out_dtype_int));
    save_tail(ctx, s, o, v, g, lepe_w_in, lepe_b_in, norm_w, norm_b, grid_h, grid_w);
    return s.y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    tensor_list r = saved_tail_backward(ctx, ctx->get_saved_variables(), grads[0]);
    r.resize(r.size() + 4);  // grid_h, grid_w, eps, out dtype
    return r;
  }
};

// g = x·gate_wᵀ + gate_b (B, N, D) contiguous, in gate_w's dtype (the gate part of the qkvg
// projection, computed apart when it is not kept)
at::Tensor gate_of(const at::Tensor& x, const at::Tensor& gate_w, const at::Tensor& gate_b) {
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // dtypes are settled
  return at::linear(x, gate_w, ops::bias_operand(gate_b, gate_w.scalar_type()));                        // (B, N, D)
}

// y recomputed from u for gated_tail_proj's backward, as the forward made it (bit for bit): the
// forward's own LayerNorm-gate kernel when the forward ran the kernels, else y_from_u.
at::Tensor recompute_y(bool kernels, const at::Tensor& u, const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& g,
                       const at::Tensor& norm_w, const at::Tensor& norm_b, at::ScalarType out_dtype, int64_t heads, double eps) {
  ops::count_recomputation();
#ifdef NALA_WITH_CUDA
  if (kernels) return cuda::gated_tail_y(u, g, norm_w, norm_b, heads, eps);  // (B, N, D)
#else
  TORCH_CHECK(!kernels, "gated_tail_proj: the forward ran CUDA kernels in a build without them");
#endif
  return y_from_u(u, mean, rstd, g, norm_w, norm_b, out_dtype);  // (B, N, D)
}

// The tail and the output projection, out = y·Wᵀ + b, keeping u (which the tail's backward needs)
// but not y (which the projection's weight gradient needs): the backward recomputes y from u, μ, r
// and g (recompute_y), one element-wise pass, instead of keeping a second (B, N, D) tensor per block.
// w is in y's dtype (autocast's cast happens before, where autograd sees it); b in its own.
// With a gate projection (gate_w (D, D) non-empty) the third input is not g but the block's
// projection input x (B, N, D): g = x·gate_wᵀ + gate_b is computed in the forward, dropped, and
// recomputed in the backward (one (R × D × D) GEMM), so g is not kept either; its gradient goes to
// x, gate_w and gate_b.
struct GatedTailProjFn : torch::autograd::Function<GatedTailProjFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& o, const at::Tensor& v, const at::Tensor& g_or_x, const at::Tensor& lepe_w_in,
                            const at::Tensor& lepe_b_in, const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& w, const at::Tensor& b,
                            const at::Tensor& gate_w_in, const at::Tensor& gate_b_in, int64_t grid_h, int64_t grid_w, double eps) {
    const at::Tensor gate_w = empty_as_absent(gate_w_in), gate_b = empty_as_absent(gate_b_in);
    const at::Tensor g = gate_w.defined() ? gate_of(g_or_x, gate_w, gate_b) : g_or_x;  // (B, N, D)
    const Saved s = tail_forward(o, v, g, empty_as_absent(lepe_w_in), empty_as_absent(lepe_b_in), norm_w, norm_b, grid_h, grid_w, eps,
                                 w.scalar_type());
    save_tail(ctx, s, o, v, g_or_x, lepe_w_in, lepe_b_in, norm_w, norm_b, grid_h, grid_w, {w, gate_w_in, gate_b_in});
    ctx->saved_data["b_dtype"] = int64_t(b.scalar_type());
    ctx->saved_data["kernels"] = s.kernels;
    ctx->saved_data["eps"] = eps;
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // dtypes are settled
    return at::linear(s.y, w, ops::bias_operand(b, w.scalar_type()));                                    // (B, N, D)
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto sv = ctx->get_saved_variables();
    const at::Tensor x = sv[1];  // g, or x with a gate projection
    const at::Tensor &norm_w = sv[4], &norm_b = sv[5], &u = sv[6], &mean = sv[7], &rstd = sv[8], &w = sv[9];
    const at::Tensor gate_w = empty_as_absent(sv[10]), gate_b = empty_as_absent(sv[11]);
    const int64_t B = u.size(0), N = u.size(1), D = u.size(2);
    if (gate_w.defined()) {
      sv[1] = gate_of(x, gate_w, gate_b);  // g (B, N, D), recomputed
      ops::count_recomputation();
    }
    const at::Tensor g2 = grads[0].reshape({-1, w.size(0)}).contiguous().to(w.scalar_type());  // (R, D)
    const at::Tensor y = recompute_y(ctx->saved_data["kernels"].toBool(), u, mean, rstd, sv[1], norm_w, norm_b, w.scalar_type(),
                                     ctx->saved_data["heads"].toInt(), ctx->saved_data["eps"].toDouble());  // (B, N, D)
    const ops::LinearGrads proj = ops::linear_grads(g2, y.reshape({B * N, D}), w, at::ScalarType(ctx->saved_data["b_dtype"].toInt()), true,
                                                    ctx->needs_input_grad(7), ctx->needs_input_grad(8));  // ∂L/∂y (R, D), (D, D), (D)
    tensor_list r = saved_tail_backward(ctx, sv, proj.x.view({B, N, D}));  // o, v, g, lepe.weight, lepe.bias, norm.weight, norm.bias
    r.push_back(proj.w);
    r.push_back(proj.b);
    at::Tensor dgate_w, dgate_b;
    if (gate_w.defined()) {  // g = x·gate_wᵀ + gate_b: the gradient of g goes to its three inputs
      const at::Tensor dg2 = r[2].reshape({B * N, D}).contiguous().to(gate_w.scalar_type());  // (R, D)
      const ops::LinearGrads gate = ops::linear_grads(dg2, x.reshape({B * N, D}), gate_w, gate_b.scalar_type(), ctx->needs_input_grad(2),
                                                      ctx->needs_input_grad(9), ctx->needs_input_grad(10));  // (R, D), (D, D), (D)
      r[2] = gate.x.defined() ? gate.x.view({B, N, D}).to(x.scalar_type()) : gate.x;  // ∂L/∂x (B, N, D)
      dgate_w = gate.w;
      dgate_b = gate.b;
    }
    r.push_back(dgate_w);
    r.push_back(dgate_b);
    r.resize(r.size() + 3);  // grid_h, grid_w, eps
    return r;
  }
};

// The gated block's token mixer after the q, k, v and gate projections as one operation that keeps
// only its inputs: o = NaLa(q, k, v), g = x·gate_wᵀ + gate_b, the tail, out = y·Wᵀ + b. Its backward
// runs the attention's forward again (with the state, as NalaAttentionFunction's recomputing backward
// does anyway) and the tail's forward on that o, so neither u nor y nor g nor the state is kept: per
// token and block it keeps nothing beyond q, k, v and x, which the projections' backwards keep anyway.
// q, k, v (B, H, N, d) and v_tok (B, N, D): views of one projection output (v_tok is v's second view,
// LePE's input); the weights already in the GEMMs' dtype (w, gate_w), biases in their own.
struct NalaMixerRecomputingFn : torch::autograd::Function<NalaMixerRecomputingFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& v_tok,
                            const at::Tensor& x, const at::Tensor& gate_w, const at::Tensor& gate_b, const at::Tensor& lepe_w_in,
                            const at::Tensor& lepe_b_in, const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& w, const at::Tensor& b,
                            const NalaOptions& opt, int64_t grid_h, int64_t grid_w, double eps) {
    const at::Tensor o = nala_attention_forward(q, k, v, opt, false).o;  // (B, H, N, d)
    const at::Tensor g = gate_of(x, gate_w, gate_b);                       // (B, N, D)
    const Saved s = tail_forward(o, v_tok, g, empty_as_absent(lepe_w_in), empty_as_absent(lepe_b_in), norm_w, norm_b, grid_h, grid_w, eps,
                                 w.scalar_type());
    ctx->save_for_backward({q, k, v, v_tok, x, gate_w, gate_b, lepe_w_in, lepe_b_in, norm_w, norm_b, w});
    save_nala_options(ctx, opt, "nala_");
    ctx->saved_data["grid_h"] = grid_h;
    ctx->saved_data["grid_w"] = grid_w;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["b_dtype"] = int64_t(b.scalar_type());
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // dtypes are settled
    return at::linear(s.y, w, ops::bias_operand(b, w.scalar_type()));                                    // (B, N, D)
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sv = ctx->get_saved_variables();
    const at::Tensor &q = sv[0], &k = sv[1], &v = sv[2], &v_tok = sv[3], &x = sv[4], &gate_w = sv[5], &gate_b = sv[6];
    const at::Tensor lepe_w = empty_as_absent(sv[7]), lepe_b = empty_as_absent(sv[8]);
    const at::Tensor &norm_w = sv[9], &norm_b = sv[10], &w = sv[11];
    const NalaOptions opt = saved_nala_options(ctx, "nala_");
    const int64_t B = v_tok.size(0), N = v_tok.size(1), D = v_tok.size(2), heads = q.size(1);
    const int64_t gh = ctx->saved_data["grid_h"].toInt(), gw = ctx->saved_data["grid_w"].toInt();
    // the forward once more: the attention with its state, g, then u, μ, r and y from that o. Each
    // recomputed tensor is let go as soon as its last reader is done: the backward of the last block
    // runs while every block's saved tensors are alive, so its transients set the step's peak.
    NalaForward a = nala_attention_forward(q, k, v, opt, true);  // o (B, H, N, d), S, z, den
    at::Tensor g = gate_of(x, gate_w, gate_b);                     // (B, N, D)
    Saved s = tail_forward(a.o, v_tok, g, lepe_w, lepe_b, norm_w, norm_b, gh, gw, ctx->saved_data["eps"].toDouble(), w.scalar_type());
    a.o.reset();
    for (int i = 0; i < 3; ++i) ops::count_recomputation();  // the state (with o), g, and the tail's u and y
    ops::LinearGrads proj = ops::linear_grads(grads[0].reshape({-1, D}).contiguous().to(w.scalar_type()), s.y.reshape({B * N, D}), w,
                                              at::ScalarType(ctx->saved_data["b_dtype"].toInt()), true, ctx->needs_input_grad(11),
                                              ctx->needs_input_grad(12));  // ∂L/∂y (R, D), (D, D), (D)
    s.y.reset();
    Grads t = tail_backward(proj.x.view({B, N, D}), heads, v_tok, g, lepe_w, norm_w, norm_b, s.u, s.mean, s.rstd, gh, gw);
    proj.x.reset();
    s = Saved{};
    g.reset();
    auto [dq, dk, dv] = nala_attention_backward(q, k, v, a, t.o, opt);  // (B, H, N, d) ×3
    a = NalaForward{};
    t.o.reset();
    const ops::LinearGrads gate = ops::linear_grads(t.g.reshape({B * N, D}).contiguous().to(gate_w.scalar_type()), x.reshape({B * N, D}), gate_w,
                                                    gate_b.scalar_type(), ctx->needs_input_grad(4), ctx->needs_input_grad(5),
                                                    ctx->needs_input_grad(6));  // (R, D), (D, D), (D)
    t.g.reset();
    const at::Tensor dx = gate.x.defined() ? gate.x.view({B, N, D}).to(x.scalar_type()) : gate.x;  // (B, N, D)
    return {dq, dk, dv, t.v, dx, gate.w, gate.b, grad_as(t.lepe_w, lepe_w), grad_as(t.lepe_b, lepe_b), grad_as(t.norm_w, norm_w),
            grad_as(t.norm_b, norm_b), proj.w, proj.b, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Where q, k, v (B, H, N, d) and g (B, N, H·d) are the four parts of one (B, N, 4, H, d) tensor in that
// order (the gated block's qkvg projection output, split by ops/split_heads.h): a new tensor of that
// layout, empty, whose parts take their gradients (NALA_QKVG_GRADS_IN_PLACE); else undefined.
at::Tensor qkvg_gradient_buffer(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g) {
  if (q.dim() != 4 || g.dim() != 3) return at::Tensor();
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), d = q.size(3), row = 4 * H * d;
  const std::vector<int64_t> strides{N * row, d, row, 1};
  for (const at::Tensor* t : {&q, &k, &v})
    if (t->sizes() != q.sizes() || t->strides() != c10::IntArrayRef(strides) || t->scalar_type() != q.scalar_type()) return at::Tensor();
  if (g.sizes() != c10::IntArrayRef({B, N, H * d}) || g.strides() != c10::IntArrayRef({N * row, row, 1}) || g.scalar_type() != q.scalar_type())
    return at::Tensor();
  const auto* base = static_cast<const char*>(q.data_ptr());
  const int64_t part = H * d * q.element_size();
  if (k.data_ptr() != base + part || v.data_ptr() != base + 2 * part || g.data_ptr() != base + 3 * part) return at::Tensor();
  return at::empty({B, N, 4, H, d}, q.options());  // (B, N, 4, H, d)
}

// The gated block's attention and tail as one operation (nala_mixer): o = NaLa(q, k, v), then u and
// y as the tail makes them. On CUDA the one-pass attention kernel adds LePE as it writes its output
// (nala_forward_lepe_cuda), so o never goes to memory and the tail runs its LayerNorm-gate kernel
// alone; for tensors that kernel does not take, and on the CPU, the attention and the tail run apart
// (nala_attention_forward, tail_forward). It keeps q, k, v, the attention's state, v_tok, g, u and u's
// statistics. The backward is the tail's (∂L/∂u, LePE's and the norm's gradients, ∂L/∂g, ∂L/∂v_tok),
// then the attention's with ∂L/∂o = ∂L/∂u (u = o + LePE(v_tok) + b); with lepe_kernels = 2, where the
// one-pass backward takes it, LePE's ∂L/∂v_tok is added to ∂L/∂v inside the attention's backward and
// v_tok's gradient is undefined (v and v_tok are views of one tensor: the sum autograd would form).
struct NalaMixerFn : torch::autograd::Function<NalaMixerFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& v_tok,
                            const at::Tensor& g, const at::Tensor& lepe_w_in, const at::Tensor& lepe_b_in, const at::Tensor& norm_w,
                            const at::Tensor& norm_b, const NalaOptions& opt, int64_t grid_h, int64_t grid_w, double eps, bool keep,
                            int64_t out_dtype_int, int64_t lepe_kernels) {
    const at::Tensor lepe_w = empty_as_absent(lepe_w_in), lepe_b = empty_as_absent(lepe_b_in);
    const at::ScalarType out_dtype = at::ScalarType(out_dtype_int);
    NalaForward a;
    Saved s;
    at::Tensor taps;        // (ks², H·d) float32: LePE's taps as the attention kernel read them (with lepe_bwd its backward reads them too)
    bool lepe_bwd = false;  // the backward adds LePE's dv in the attention kernel
#ifdef NALA_WITH_CUDA
    // the kernel reads LePE's input through v: v_tok must be v's second view (the same memory); in
    // gated_tail_supported q stands for o (the same shape, dtype and device as the attention's output)
    const bool same_v = v_tok.data_ptr() == v.data_ptr() && v_tok.stride(0) == v.stride(0) && v_tok.stride(1) == v.stride(2) &&
                        v_tok.stride(2) == 1 && v.stride(3) == 1 && v.stride(1) == v.size(3);
    if (q.is_cuda() && lepe_w.defined() && same_v && out_dtype == q.scalar_type() && cuda::gated_tail_supported(q, v_tok, g, lepe_w, out_dtype)) {
      NalaLepeForward f = nala_forward_lepe_cuda(q, k, v, opt, keep, lepe_w, lepe_b, grid_h, grid_w);
      if (f.u.defined()) {
        a = f.state;
        taps = f.taps;
        const cuda::GatedTailSaved t = cuda::gated_tail_from_u(f.u, g, norm_w, norm_b, q.size(1), eps, true);
        s = {t.y, t.u, t.mean, t.rstd, true};
        ++g_lepe_in_attention_runs;
        // LePE's ∂L/∂v_tok goes to v's gradient: both views of one tensor that needs it (same_v, and both require it)
        lepe_bwd = keep && lepe_kernels >= 2 && v.requires_grad() && v_tok.requires_grad() &&
                   nala_lepe_backward_takes(q, k, v, opt, lepe_w.size(-1), grid_h, grid_w) && tail_backward_kernels(q.size(1), v_tok, g, lepe_w, s.u, s.mean);
      }
    }
#endif
    if (!s.y.defined()) {
      a = nala_attention_forward(q, k, v, opt, keep);  // o (B, H, N, d), and the state where kept
      s = tail_forward(a.o, v_tok, g, lepe_w, lepe_b, norm_w, norm_b, grid_h, grid_w, eps, out_dtype);
      a.o.reset();
    }
    ctx->save_for_backward({q, k, v, a.S, a.z, a.den, v_tok, g, lepe_w_in, lepe_b_in, norm_w, norm_b, s.u, s.mean, s.rstd, lepe_bwd ? taps : at::Tensor()});
    save_nala_options(ctx, opt, "nala_");
    ctx->saved_data["heads"] = q.size(1);
    ctx->saved_data["grid_h"] = grid_h;
    ctx->saved_data["grid_w"] = grid_w;
    ctx->saved_data["lepe_bwd"] = lepe_bwd;
    return s.y;  // (B, N, D)
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sv = ctx->get_saved_variables();
    const at::Tensor &q = sv[0], &k = sv[1], &v = sv[2], &v_tok = sv[6], &g = sv[7], &norm_w = sv[10], &norm_b = sv[11];
    const at::Tensor lepe_w = empty_as_absent(sv[8]), lepe_b = empty_as_absent(sv[9]);
    const NalaOptions opt = saved_nala_options(ctx, "nala_");
    const int64_t heads = ctx->saved_data["heads"].toInt(), gh = ctx->saved_data["grid_h"].toInt(), gw = ctx->saved_data["grid_w"].toInt();
    const bool lepe_bwd = ctx->saved_data["lepe_bwd"].toBool();
    // with lepe_bwd and NALA_QKVG_GRADS_IN_PLACE, the four gradients written into one buffer in qkvg's
    // layout (ops/fused_ops.h), so that the split's backward has nothing to gather
    const at::Tensor whole = lepe_bwd && ops::qkvg_grads_in_place() ? qkvg_gradient_buffer(q, k, v, g) : at::Tensor();  // (B, N, 4, H, d)
    // and with NALA_QKVG_COLUMN_SUMS the kernels that write them sum their columns too (qkvg's bias
    // gradient), where the one-pass backward has its summing kernel (head dim 64: nala_backward_sums_columns)
    bool sums = false;
#ifdef NALA_WITH_CUDA
    sums = whole.defined() && ops::qkvg_column_sums_in_kernel() && nala_backward_sums_columns(q.size(3));
#endif
    // with lepe_bwd, the kernels' partial sums (the tail's norm, LePE and g sums, the attention's q, k, v sums)
    // are added by one launch after both backwards (pending), the sums of qkvg's four parts straight into one
    // (4·H·d) bias gradient [q | k | v | g] (a launch each and a cat took ≈ 4 µs apiece: docs/benchmarks.md)
    std::vector<ops::PartialSums> pending;
    const int64_t Dm = v_tok.size(2);
    const at::Tensor qkvg_sum = sums ? at::empty({4 * Dm}, v_tok.options().dtype(at::kFloat)) : at::Tensor();  // (4·H·d) [q | k | v | g]
    // ∂L/∂u as t.o (B, H, N, d); with lepe_bwd LePE's ∂L/∂v is the attention backward's to add (t.v undefined)
    Grads t = tail_backward(grads[0], heads, v_tok, g, lepe_w, norm_w, norm_b, sv[12], sv[13], sv[14], gh, gw, !lepe_bwd,
                            whole.defined() ? whole.select(2, 3).reshape(g.sizes()) : at::Tensor(), sums, lepe_bwd ? &pending : nullptr,
                            sums ? qkvg_sum.narrow(0, 3 * Dm, Dm) : at::Tensor());
    const NalaForward state{at::Tensor(), sv[3], sv[4], sv[5]};
    at::Tensor dq, dk, dv;  // (B, H, N, d) ×3
#ifdef NALA_WITH_CUDA
    if (lepe_bwd) {
      const at::Tensor& taps = sv[15];  // the forward kernel's taps
      if (whole.defined()) {
        auto part = [&](int64_t i) { return whole.select(2, i).transpose(1, 2); };  // (B, H, N, d) view
        at::Tensor qkv_sums = sums ? qkvg_sum.narrow(0, 0, 3 * Dm).view({3, heads, Dm / heads}) : at::Tensor();  // (3, H, d) of dq, dk, dv
        const size_t before = pending.size();
        std::tie(dq, dk, dv) = nala_backward_cuda(q, k, v, state.S, state.z, state.den, t.o, opt, lepe_w, gh, gw, part(0), part(1), part(2),
                                                  sums ? &qkv_sums : nullptr, &pending, taps);
        ops::cuda::sum_partials_into(pending);
        ++g_qkvg_grads_in_place_runs;
        // with g's, all of qkvg's bias gradient: the split's backward takes it instead of summing the buffer
        if (pending.size() > before && t.g_sum.defined()) ops::offer_parts_column_sums(whole, qkvg_sum);
      } else {
        std::tie(dq, dk, dv) = nala_backward_cuda(q, k, v, state.S, state.z, state.den, t.o, opt, lepe_w, gh, gw, {}, {}, {}, nullptr, nullptr, taps);
        ops::cuda::sum_partials_into(pending);
      }
      ++g_lepe_in_attention_backward_runs;
    }
#endif
    if (!lepe_bwd) std::tie(dq, dk, dv) = nala_attention_backward(q, k, v, state, t.o, opt);
    return {dq, dk, dv, t.v, t.g, grad_as(t.lepe_w, lepe_w), grad_as(t.lepe_b, lepe_b), grad_as(t.norm_w, norm_w), grad_as(t.norm_b, norm_b),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_args(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, int64_t grid_h, int64_t grid_w) {
  TORCH_CHECK(o.dim() == 4, "gated_tail: o must be (B, H, N, d), got ", o.sizes());
  const int64_t B = o.size(0), N = o.size(2), D = o.size(1) * o.size(3);
  TORCH_CHECK(v.dim() == 3 && v.size(0) == B && v.size(1) == N && v.size(2) == D, "gated_tail: v must be (B, N, D) = (", B, ", ", N, ", ", D,
              "), got ", v.sizes());
  TORCH_CHECK(g.sizes() == v.sizes(), "gated_tail: g must be (B, N, D) = ", v.sizes(), ", got ", g.sizes());
  TORCH_CHECK(grid_h * grid_w == N, "gated_tail: ", N, " tokens do not fill a ", grid_h, "x", grid_w, " grid");
  if (lepe_w.defined())
    TORCH_CHECK(lepe_w.dim() == 4 && lepe_w.size(0) == D && lepe_w.size(1) == 1 && lepe_w.size(2) == lepe_w.size(3) && lepe_w.size(2) % 2 == 1,
                "gated_tail: lepe weight must be (D, 1, k, k) with D = ", D, " and odd k, got ", lepe_w.sizes());
}

}  // namespace

at::Tensor gated_tail_reference(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                                const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps) {
  const int64_t B = o.size(0), N = o.size(2), D = o.size(1) * o.size(3);
  at::Tensor u = o.transpose(1, 2).reshape({B, N, D});  // (B, N, D)
  if (lepe_w.defined())
    u = u + at::conv2d(as_image(v, grid_h, grid_w), lepe_w, lepe_b, 1, lepe_w.size(-1) / 2, 1, D).flatten(2).transpose(1, 2);  // (B, N, D)
  return at::layer_norm(u, {D}, norm_w, norm_b, eps) * at::silu(g);  // (B, N, D)
}

at::Tensor gated_tail_fused(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                            const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps) {
  check_args(o, v, g, lepe_w, grid_h, grid_w);
  return GatedTailFn::apply(o, v, g, absent_as_empty(lepe_w, norm_w), absent_as_empty(lepe_b, norm_w), norm_w, norm_b, grid_h, grid_w, eps,
                            int64_t(ops::fused_result_dtype(o)));
}

namespace {
at::Tensor tail_proj(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& x, const at::Tensor& gate_w,
                     const at::Tensor& gate_b, const at::Tensor& lepe_w, const at::Tensor& lepe_b, const at::Tensor& norm_w, const at::Tensor& norm_b,
                     const at::Tensor& proj_w, const at::Tensor& proj_b, int64_t grid_h, int64_t grid_w, double eps) {
  check_args(o, v, g.defined() ? g : v, lepe_w, grid_h, grid_w);
  const int64_t D = v.size(2);
  TORCH_CHECK(proj_w.dim() == 2 && proj_w.size(0) == D && proj_w.size(1) == D && proj_b.dim() == 1 && proj_b.size(0) == D,
              "gated_tail_proj: the projection must be (D, D) + (D) with D = ", D, ", got ", proj_w.sizes(), " + ", proj_b.sizes());
  const at::ScalarType yt = ops::fused_result_dtype(o);
  const at::Tensor w = ops::autocast_gemm_operand(proj_w);  // (D, D) in the autocast dtype under CUDA autocast
  TORCH_CHECK(w.scalar_type() == yt, "gated_tail_proj: the projection weight is ", w.scalar_type(), " but y is ", yt);
  at::Tensor gx = g, gw, gb;
  if (!g.defined()) {
    TORCH_CHECK(x.sizes() == v.sizes() && gate_w.dim() == 2 && gate_w.size(0) == D && gate_w.size(1) == D && gate_b.dim() == 1 && gate_b.size(0) == D,
                "gated_tail_proj: x must be ", v.sizes(), " and the gate projection (D, D) + (D) with D = ", D, ", got x ", x.sizes(), ", ",
                gate_w.sizes(), " + ", gate_b.sizes());
    gx = ops::autocast_gemm_operand(x);  // (B, N, D)
    gw = ops::autocast_gemm_operand(gate_w);
    gb = gate_b;
    TORCH_CHECK(gx.scalar_type() == gw.scalar_type() && gw.scalar_type() == v.scalar_type(), "gated_tail_proj: x ", gx.scalar_type(),
                ", the gate weight ", gw.scalar_type(), " and v ", v.scalar_type(), " must share a dtype");
  }
  return GatedTailProjFn::apply(o, v, gx, absent_as_empty(lepe_w, norm_w), absent_as_empty(lepe_b, norm_w), norm_w, norm_b, w, proj_b,
                                absent_as_empty(gw, norm_w), absent_as_empty(gb, norm_w), grid_h, grid_w, eps);
}
}  // namespace

at::Tensor gated_tail_proj_fused(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                                 const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& proj_w, const at::Tensor& proj_b, int64_t grid_h,
                                 int64_t grid_w, double eps) {
  return tail_proj(o, v, g, {}, {}, {}, lepe_w, lepe_b, norm_w, norm_b, proj_w, proj_b, grid_h, grid_w, eps);
}

at::Tensor gated_tail_proj_gate_fused(const at::Tensor& o, const at::Tensor& v, const at::Tensor& x, const at::Tensor& gate_w,
                                      const at::Tensor& gate_b, const at::Tensor& lepe_w, const at::Tensor& lepe_b, const at::Tensor& norm_w,
                                      const at::Tensor& norm_b, const at::Tensor& proj_w, const at::Tensor& proj_b, int64_t grid_h, int64_t grid_w,
                                      double eps) {
  return tail_proj(o, v, at::Tensor(), x, gate_w, gate_b, lepe_w, lepe_b, norm_w, norm_b, proj_w, proj_b, grid_h, grid_w, eps);
}

at::Tensor nala_mixer_recomputing(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& v_tok, const at::Tensor& x,
                                  const at::Tensor& gate_w, const at::Tensor& gate_b, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                                  const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& proj_w, const at::Tensor& proj_b,
                                  const NalaOptions& opt, int64_t grid_h, int64_t grid_w, double eps) {
  check_qkv(q, k, v, "nala_mixer_recomputing");
  check_options(opt, "nala_mixer_recomputing");
  check_args(q, v_tok, v_tok, lepe_w, grid_h, grid_w);
  const int64_t D = v_tok.size(2);
  TORCH_CHECK(proj_w.dim() == 2 && proj_w.size(0) == D && proj_w.size(1) == D && proj_b.dim() == 1 && proj_b.size(0) == D,
              "nala_mixer_recomputing: the projection must be (D, D) + (D) with D = ", D, ", got ", proj_w.sizes(), " + ", proj_b.sizes());
  TORCH_CHECK(x.sizes() == v_tok.sizes() && gate_w.dim() == 2 && gate_w.size(0) == D && gate_w.size(1) == D && gate_b.dim() == 1 &&
                  gate_b.size(0) == D,
              "nala_mixer_recomputing: x must be ", v_tok.sizes(), " and the gate projection (D, D) + (D) with D = ", D, ", got x ", x.sizes(),
              ", ", gate_w.sizes(), " + ", gate_b.sizes());
  const at::ScalarType yt = ops::fused_result_dtype(q);
  const at::Tensor w = ops::autocast_gemm_operand(proj_w), gx = ops::autocast_gemm_operand(x), gw = ops::autocast_gemm_operand(gate_w);
  TORCH_CHECK(w.scalar_type() == yt && gx.scalar_type() == yt && gw.scalar_type() == yt && v_tok.scalar_type() == yt,
              "nala_mixer_recomputing: the projection weight (", w.scalar_type(), "), x (", gx.scalar_type(), "), the gate weight (",
              gw.scalar_type(), ") and v (", v_tok.scalar_type(), ") must share the result dtype ", yt);
  return NalaMixerRecomputingFn::apply(q, k, v, v_tok, gx, gw, gate_b, absent_as_empty(lepe_w, norm_w), absent_as_empty(lepe_b, norm_w), norm_w,
                                       norm_b, w, proj_b, opt, grid_h, grid_w, eps);
}

at::Tensor nala_mixer(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& v_tok, const at::Tensor& g,
                      const at::Tensor& lepe_w, const at::Tensor& lepe_b, const at::Tensor& norm_w, const at::Tensor& norm_b, const NalaOptions& opt,
                      int64_t grid_h, int64_t grid_w, double eps, int lepe_kernels) {
  TORCH_CHECK(lepe_kernels == 1 || lepe_kernels == 2, "nala_mixer: lepe_kernels must be 1 (the forward) or 2 (and the backward), got ", lepe_kernels);
  check_qkv(q, k, v, "nala_mixer");
  check_options(opt, "nala_mixer");
  check_args(q, v_tok, g, lepe_w, grid_h, grid_w);  // q has o's shape
  bool grads = false;
  for (const at::Tensor* t : {&q, &k, &v, &v_tok, &g, &lepe_w, &lepe_b, &norm_w, &norm_b}) grads = grads || (t->defined() && t->requires_grad());
  const bool keep = at::GradMode::is_enabled() && grads;  // decided here: a Function's forward runs without grad mode
  return NalaMixerFn::apply(q, k, v, v_tok, g, absent_as_empty(lepe_w, norm_w), absent_as_empty(lepe_b, norm_w), norm_w, norm_b, opt, grid_h, grid_w,
                            eps, keep, int64_t(ops::fused_result_dtype(q)), int64_t(lepe_kernels));
}

int lepe_in_attention() {
  int s = g_lepe_in_attention.load();
  if (s < 0) {
    const char* e = std::getenv("NALA_LEPE_IN_ATTENTION");
    const std::string v = e ? e : "";
    TORCH_CHECK(v.empty() || v == "0" || v == "1" || v == "2", "NALA_LEPE_IN_ATTENTION must be 0, 1 or 2, got '", v, "'");
    const int from_env = v.empty() ? 2 : v[0] - '0';  // unset: both kernels (docs/benchmarks.md)
    s = g_lepe_in_attention.compare_exchange_strong(s, from_env) ? from_env : s;  // a set_lepe_in_attention() in between wins
  }
  return s;
}
void set_lepe_in_attention(int kernels) {
  TORCH_CHECK(kernels >= 0 && kernels <= 2, "set_lepe_in_attention: ", kernels, " (0, 1 or 2)");
  g_lepe_in_attention = kernels;
}
void reset_lepe_in_attention() { g_lepe_in_attention = -1; }
int64_t lepe_in_attention_runs() { return g_lepe_in_attention_runs.load(); }
int64_t lepe_in_attention_backward_runs() { return g_lepe_in_attention_backward_runs.load(); }
int64_t qkvg_grads_in_place_runs() { return g_qkvg_grads_in_place_runs.load(); }

at::Tensor gated_tail(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                      const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps) {
  if (!o.is_cuda() || !ops::fused_block_ops()) return gated_tail_reference(o, v, g, lepe_w, lepe_b, norm_w, norm_b, grid_h, grid_w, eps);
  return gated_tail_fused(o, v, g, lepe_w, lepe_b, norm_w, norm_b, grid_h, grid_w, eps);
}

}  // namespace nala::attention
