#include "attention/cuda/gated_tail_cuda.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "attention/cuda/gated_tail_kernels.h"
#include "ops/cuda/column_sum.h"

namespace nala::attention::cuda {
namespace {

// the start aligned to 4 elements (the kernels' widest load: 16 bytes of float32, 8 of bf16)
bool aligned4(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % (4 * t.element_size()) == 0; }

// unit stride along the last dim, the others multiples of 4 elements, the start aligned to 4
bool vector_friendly(const at::Tensor& t) {
  if (t.stride(t.dim() - 1) != 1 || !aligned4(t)) return false;
  for (int64_t i = 0; i + 1 < t.dim(); ++i)
    if (t.stride(i) % 4 != 0) return false;
  return true;
}

// a float32 parameter vector or tap table, contiguous and 16-byte aligned (the kernels' float4 loads)
at::Tensor f32(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0 ? c : c.clone();
}

void check_parameter(const at::Tensor& t, const at::Tensor& like, const char* name) {
  TORCH_CHECK(t.device() == like.device(), "gated_tail: ", name, " is on ", t.device(), ", the activations on ", like.device());
}

std::atomic<int> g_lepe_staged{-1};  // kStage* bits; −1: not read from NALA_LEPE_STAGED yet

int lepe_staged() {
  int s = g_lepe_staged.load();
  if (s < 0) {
    const char* v = std::getenv("NALA_LEPE_STAGED");
    const char* c16 = std::getenv("NALA_LEPE_COPY16");
    const char* mma = std::getenv("NALA_LEPE_WGRAD_MMA");
    int from_env = lepe_staging_of(v ? v : "") | (lepe_copy16_of(c16 ? c16 : "") ? kStageCopy16 : 0) |
                   (lepe_wgrad_mma_of(mma ? mma : "") ? kStageWgradMma : 0);
    // a set_lepe_staged() in between wins over the environment
    s = g_lepe_staged.compare_exchange_strong(s, from_env) ? from_env : s;
  }
  return s;
}

std::atomic<int> g_ln_bwd_blocks{0};  // ln_gate_bwd blocks an SM; 0: not read from NALA_LN_GATE_BWD_BLOCKS yet

int ln_bwd_blocks() {
  int n = g_ln_bwd_blocks.load();
  if (n == 0) {
    const char* v = std::getenv("NALA_LN_GATE_BWD_BLOCKS");
    int from_env = ln_gate_bwd_blocks_of(v ? v : "");
    n = g_ln_bwd_blocks.compare_exchange_strong(n, from_env) ? from_env : n;  // as lepe_staged()
  }
  return n;
}

// sizes from v (B, N, D) and the head count; o's pointer is the forward's to set
GatedTailParams params_of(const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, int64_t heads, int64_t grid_h, int64_t grid_w) {
  GatedTailParams p;
  p.B = v.size(0);
  p.N = v.size(1);
  p.D = int(v.size(2));
  p.H = int(heads);
  p.d = p.D / p.H;
  TORCH_CHECK(grid_h * grid_w == p.N, "gated_tail: ", p.N, " tokens do not fill a ", grid_h, "x", grid_w, " grid");
  p.grid_h = int(grid_h);
  p.grid_w = int(grid_w);
  p.ks = lepe_w.defined() ? int(lepe_w.size(-1)) : 0;
  p.bf16 = v.scalar_type() == at::kBFloat16;
  p.v = v.data_ptr();
  p.v_stride[0] = v.stride(0), p.v_stride[1] = v.stride(1);
  p.g = g.data_ptr();
  p.g_stride[0] = g.stride(0), p.g_stride[1] = g.stride(1);
  p.sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  p.lepe_staged = lepe_staged();
  p.ln_bwd_blocks_per_sm = ln_bwd_blocks();
  return p;
}

void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }

}  // namespace

int lepe_staging_of(const std::string& v) {
  if (v.empty()) return kStageResidual | kStageDu;  // the default since 2026-12-05: docs/benchmarks.md, thirtieth session
  if (v == "0" || v == "off") return 0;
  if (v == "residual") return kStageResidual;
  if (v == "du") return kStageDu;
  if (v == "du1") return kStageDu | kStageOneBuffer;
  if (v == "1" || v == "both") return kStageResidual | kStageDu;
  if (v == "both1") return kStageResidual | kStageDu | kStageOneBuffer;
  TORCH_CHECK(false, "NALA_LEPE_STAGED='", v, "' is not one of 0, off, residual, du, du1, both, both1, 1");
}

bool lepe_copy16_of(const std::string& v) {
  if (v.empty() || v == "1") return true;  // the default since 2026-12-06: docs/benchmarks.md, fortieth session
  if (v == "0") return false;
  TORCH_CHECK(false, "NALA_LEPE_COPY16='", v, "' is not one of 0, 1");
}

bool lepe_wgrad_mma_of(const std::string& v) {
  if (v.empty() || v == "0") return false;  // off until a GPU has timed it (docs/benchmarks.md, fifty-second session)
  if (v == "1") return true;
  TORCH_CHECK(false, "NALA_LEPE_WGRAD_MMA='", v, "' is not one of 0, 1");
}

void set_lepe_staged(int bits) {
  constexpr int all = kStageResidual | kStageDu | kStageOneBuffer | kStageCopy16 | kStageWgradMma;
  TORCH_CHECK(bits >= 0 && bits <= all, "set_lepe_staged: bits ", bits, " (0 to ", all, ")");
  g_lepe_staged = bits;
}

int ln_gate_bwd_blocks_of(const std::string& v) {
  if (v.empty()) return 4;
  const bool digits = v.size() <= 2 && v.find_first_not_of("0123456789") == std::string::npos;
  const int n = digits ? std::stoi(v) : 0;
  TORCH_CHECK(n >= 1 && n <= 16, "NALA_LN_GATE_BWD_BLOCKS='", v, "' is not a whole number of blocks an SM from 1 to 16");
  return n;
}

void set_ln_gate_bwd_blocks(int blocks_per_sm) {
  TORCH_CHECK(blocks_per_sm >= 1 && blocks_per_sm <= 16, "set_ln_gate_bwd_blocks: ", blocks_per_sm, " blocks an SM (1 to 16)");
  g_ln_bwd_blocks = blocks_per_sm;
}

bool gated_tail_supported(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, at::ScalarType out_dtype) {
  if (!o.is_cuda() || o.dim() != 4 || v.dim() != 3 || g.dim() != 3 || o.numel() == 0) return false;
  const auto t = o.scalar_type();
  if ((t != at::kBFloat16 && t != at::kFloat) || v.scalar_type() != t || g.scalar_type() != t || out_dtype != t) return false;
  if (!v.is_cuda() || !g.is_cuda() || v.device() != o.device() || g.device() != o.device()) return false;
  const int64_t D = o.size(1) * o.size(3);
  if (o.size(3) % 4 != 0 || D > 1536 || v.sizes() != g.sizes() || v.size(0) != o.size(0) || v.size(1) != o.size(2) || v.size(2) != D) return false;
  if (!vector_friendly(o) || !vector_friendly(v) || !vector_friendly(g)) return false;
  if (lepe_w.defined()) {
    const int64_t ks = lepe_w.size(-1);
    if (lepe_w.dim() != 4 || lepe_w.size(0) != D || lepe_w.size(1) != 1 || lepe_w.size(2) != ks || (ks != 3 && ks != 5 && ks != 7)) return false;
  }
  return true;
}

GatedTailSaved gated_tail_forward(const at::Tensor& o, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w, const at::Tensor& lepe_b,
                                  const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t grid_h, int64_t grid_w, double eps, bool save) {
  const c10::cuda::CUDAGuard guard(o.device());
  GatedTailParams p = params_of(v, g, lepe_w, o.size(1), grid_h, grid_w);
  TORCH_CHECK(o.size(0) == p.B && o.size(2) == p.N && o.size(3) == p.d, "gated_tail: o ", o.sizes(), " does not match v ", v.sizes());
  p.o = o.data_ptr();
  for (int i = 0; i < 3; ++i) p.o_stride[i] = o.stride(i);
  p.eps = float(eps);
  at::Tensor wt, b;
  if (p.ks > 0) {
    check_parameter(lepe_w, o, "lepe.weight");
    if (lepe_b.defined()) check_parameter(lepe_b, o, "lepe.bias");
    wt = f32(lepe_w.reshape({p.D, p.ks * p.ks}).t());  // (ks·ks, D) tap-major
    b = lepe_b.defined() ? f32(lepe_b) : at::zeros({p.D}, o.options().dtype(at::kFloat));
    p.lepe_wt = wt.data_ptr<float>();
    p.lepe_b = b.data_ptr<float>();
  }
  check_parameter(norm_w, o, "norm.weight");
  check_parameter(norm_b, o, "norm.bias");
  const at::Tensor nw = f32(norm_w), nb = f32(norm_b);
  p.norm_w = nw.data_ptr<float>();
  p.norm_b = nb.data_ptr<float>();
  GatedTailSaved r;
  r.u = at::empty({p.B, p.N, p.D}, o.options());  // (B, N, D)
  r.y = at::empty({p.B, p.N, p.D}, o.options());  // (B, N, D)
  if (save) {
    r.mean = at::empty({p.B, p.N}, o.options().dtype(at::kFloat));  // (B, N)
    r.rstd = at::empty({p.B, p.N}, o.options().dtype(at::kFloat));  // (B, N)
  }
  launch_gated_tail_forward(p, r.u.data_ptr(), r.y.data_ptr(), save ? r.mean.data_ptr<float>() : nullptr,
                            save ? r.rstd.data_ptr<float>() : nullptr, stream());
  return r;
}

GatedTailSaved gated_tail_from_u(const at::Tensor& u, const at::Tensor& g, const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t heads,
                                 double eps, bool save) {
  const c10::cuda::CUDAGuard guard(u.device());
  TORCH_CHECK(u.is_contiguous() && aligned4(u) && vector_friendly(g) && g.sizes() == u.sizes() && g.scalar_type() == u.scalar_type(),
              "gated_tail: u ", u.sizes(), " must be contiguous and g ", g.sizes(), " of its shape and dtype with unit channel stride");
  GatedTailParams p = params_of(u, g, at::Tensor(), heads, 1, u.size(1));  // the grid plays no part in y
  p.eps = float(eps);
  check_parameter(norm_w, u, "norm.weight");
  check_parameter(norm_b, u, "norm.bias");
  const at::Tensor nw = f32(norm_w), nb = f32(norm_b);
  p.norm_w = nw.data_ptr<float>();
  p.norm_b = nb.data_ptr<float>();
  GatedTailSaved r;
  r.u = u;
  r.y = at::empty_like(u);  // (B, N, D)
  if (save) {
    r.mean = at::empty({p.B, p.N}, u.options().dtype(at::kFloat));  // (B, N)
    r.rstd = at::empty({p.B, p.N}, u.options().dtype(at::kFloat));  // (B, N)
  }
  launch_gated_tail_y(p, u.data_ptr(), r.y.data_ptr(), save ? r.mean.data_ptr<float>() : nullptr, save ? r.rstd.data_ptr<float>() : nullptr,
                      stream());
  return r;
}

at::Tensor gated_tail_y(const at::Tensor& u, const at::Tensor& g, const at::Tensor& norm_w, const at::Tensor& norm_b, int64_t heads, double eps) {
  return gated_tail_from_u(u, g, norm_w, norm_b, heads, eps, false).y;  // (B, N, D)
}

GatedTailGrads gated_tail_backward(const at::Tensor& dy_in, int64_t heads, const at::Tensor& v, const at::Tensor& g, const at::Tensor& lepe_w,
                                   const at::Tensor& norm_w, const at::Tensor& norm_b, const at::Tensor& u, const at::Tensor& mean,
                                   const at::Tensor& rstd, int64_t grid_h, int64_t grid_w, bool lepe_dv, const at::Tensor& dg_out, bool dg_sum,
                                   std::vector<nala::ops::PartialSums>* pending, const at::Tensor& g_sum_out) {
  const c10::cuda::CUDAGuard guard(v.device());
  GatedTailParams p = params_of(v, g, lepe_w, heads, grid_h, grid_w);
  at::Tensor dy = dy_in.to(v.scalar_type()).contiguous();  // (B, N, D)
  if (!aligned4(dy)) dy = dy.clone();
  TORCH_CHECK(u.is_contiguous() && mean.is_contiguous() && rstd.is_contiguous(), "gated_tail backward: saved u, mean, rstd must be contiguous");
  at::Tensor wt_flipped;  // (ks·ks, D) taps reversed: only the transposed convolution reads taps (the weight gradient does not)
  if (p.ks > 0 && lepe_dv) {
    wt_flipped = f32(lepe_w.reshape({p.D, p.ks * p.ks}).t()).flip({0}).contiguous();
    p.lepe_wt_flipped = wt_flipped.data_ptr<float>();
  }
  const at::Tensor nw = f32(norm_w), nb = f32(norm_b);
  p.norm_w = nw.data_ptr<float>();
  p.norm_b = nb.data_ptr<float>();
  const auto f = v.options().dtype(at::kFloat);
  GatedTailGrads r;
  r.o = at::empty({p.B, p.H, p.N, p.d}, v.options());  // (B, H, N, d)
  if (dg_out.defined()) {
    TORCH_CHECK(dg_out.dim() == 3 && dg_out.size(0) == p.B && dg_out.size(1) == p.N && dg_out.size(2) == p.D && dg_out.scalar_type() == v.scalar_type() &&
                    dg_out.device() == v.device() && dg_out.stride(2) == 1 && dg_out.stride(1) % 4 == 0 && dg_out.stride(1) >= p.D &&
                    dg_out.stride(0) == p.N * dg_out.stride(1) && aligned4(dg_out),
                "gated_tail backward: dg_out must be (", p.B, ", ", p.N, ", ", p.D, ") ", v.scalar_type(), " with rows of unit stride, ",
                "a multiple of 4 elements apart; got ", dg_out.sizes(), " ", dg_out.scalar_type(), " strides ", dg_out.strides());
    r.g = dg_out;
    p.dg_row_stride = dg_out.stride(1);
  } else {
    r.g = at::empty({p.B, p.N, p.D}, v.options());  // (B, N, D)
  }
  at::Tensor norm_part = at::empty({ln_gate_backward_chunks(p), 2, p.D}, f), lepe_part;  // (chunks, 2, D)
  if (p.ks > 0) {
    if (lepe_dv) r.v = at::empty({p.B, p.N, p.D}, v.options());                           // (B, N, D)
    lepe_part = at::empty({lepe_backward_chunks(p, r.o.data_ptr()), p.ks * p.ks + 1, p.D}, f);  // (chunks, ks·ks + 1, D)
  }
  at::Tensor dg_part;  // (chunks, D): with dg_out, Σ dg as stored
  if (dg_out.defined() && dg_sum) dg_part = at::empty({ln_gate_backward_chunks(p), p.D}, f);
  launch_gated_tail_backward(p, dy.data_ptr(), u.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(), r.g.data_ptr(), r.o.data_ptr(),
                             r.v.defined() ? r.v.data_ptr() : nullptr, norm_part.data_ptr<float>(),
                             p.ks > 0 ? lepe_part.data_ptr<float>() : nullptr, dg_part.defined() ? dg_part.data_ptr<float>() : nullptr, stream());
  // the partial sums' second stage, chunks added in order, all in one launch (here or the caller's)
  std::vector<nala::ops::PartialSums> sums;
  if (dg_part.defined()) {
    TORCH_CHECK(!g_sum_out.defined() || (g_sum_out.dim() == 1 && g_sum_out.size(0) == p.D && g_sum_out.scalar_type() == at::kFloat &&
                                         g_sum_out.device() == v.device()),
                "gated_tail backward: g_sum_out must be (", p.D, ") float32 on ", v.device(), ", got ", g_sum_out.sizes(), " ",
                g_sum_out.scalar_type(), " on ", g_sum_out.device());
    r.g_sum = g_sum_out.defined() ? g_sum_out : at::empty({p.D}, f);  // (D)
    sums.push_back({dg_part, r.g_sum});
  }
  const at::Tensor norm_sum = at::empty({2, p.D}, f);  // (2, D)
  sums.push_back({norm_part, norm_sum});
  r.norm_w = norm_sum[0];
  r.norm_b = norm_sum[1];
  if (p.ks > 0) {
    const int64_t taps = p.ks * p.ks;
    r.lepe_w = at::empty({p.D, 1, p.ks, p.ks}, f);                                        // (D, 1, ks, ks)
    r.lepe_b = at::empty({p.D}, f);                                                       // (D)
    sums.push_back({lepe_part.narrow(1, 0, taps), r.lepe_w.view({p.D, taps}).t()});    // tap-major sums into (D, ks·ks) order
    sums.push_back({lepe_part.select(1, taps), r.lepe_b});
  }
  if (pending != nullptr) pending->insert(pending->end(), sums.begin(), sums.end());
  else nala::ops::cuda::sum_partials_into(sums);
  return r;
}

}  // namespace nala::attention::cuda
