#include "ops/split_heads.h"

#include <atomic>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include "ops/fused_ops.h"
#include "ops/linear.h"

#ifdef NALA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops/cuda/gather_heads.h"
#endif

namespace nala::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::atomic<int64_t> summing_gathers{0};
std::atomic<int64_t> assembled_backwards{0};
std::atomic<int64_t> offered_sums_taken{0};

// offer_parts_column_sums' one offer on this thread (the autograd engine runs a device's backward
// functions on one thread: the consumer's, then the split's)
struct OfferedSums {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
  int64_t offset = -1, numel = 0;
  at::Tensor sums;  // (P·H·d) float32
};
thread_local OfferedSums offered;

// The offered sums when whole is the buffer they were offered with (then the offer is used up), else undefined
at::Tensor take_offered_sums(const at::Tensor& whole) {
  if (!offered.sums.defined()) return at::Tensor();
  const c10::intrusive_ptr<c10::StorageImpl> s = offered.storage.lock();
  const bool same = s && s.get() == whole.storage().unsafeGetStorageImpl() && offered.offset == whole.storage_offset() &&
                    offered.numel == whole.numel() && offered.sums.numel() == whole.size(2) * whole.size(3) * whole.size(4);
  if (!same) return at::Tensor();
  at::Tensor r = std::move(offered.sums);
  offered = OfferedSums();
  offered_sums_taken.fetch_add(1, std::memory_order_relaxed);
  return r;
}

#ifdef NALA_WITH_CUDA
// The gather kernel's parameters for grads (the P parts' gradients, then (repeat ≥ 0) the repeated
// part's second gradient) into dst (B, N, P, H, d); false where the kernel does not take the layouts.
// summed: for the summing kernel (float32, bf16 and fp16 only).
bool gather_params(const tensor_list& grads, int64_t repeat, const at::Tensor& dst, bool summed, cuda::GatherHeadsParams& p) {
  if (!dst.is_cuda()) return false;
  const int64_t es = dst.element_size();
  if ((dst.size(4) * es) % 16 != 0) return false;
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
  switch (dst.scalar_type()) {  // the sums (a repeated part's, the columns') need the type; the copy alone does not
    case at::kFloat: p.dtype = cuda::GatherHeadsParams::Dtype::f32; break;
    case at::kBFloat16: p.dtype = cuda::GatherHeadsParams::Dtype::bf16; break;
    case at::kHalf: p.dtype = cuda::GatherHeadsParams::Dtype::f16; break;
    default:
      if (summed || (repeat >= 0 && grads[P].defined())) return false;
  }
  for (size_t i = 0; i < P; ++i) {
    const at::Tensor& g = grads[i];
    if (!g.defined()) continue;
    if (!layout_ok(g, p.stride[i])) return false;
    p.src[i] = g.data_ptr();
  }
  if (repeat >= 0 && grads[P].defined()) {
    if (!layout_ok(grads[P], p.extra_stride)) return false;
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
  return true;
}
#endif

// dst (B, N, P, H, d) = the parts' gradients in the projection's layout, the repeated part's two added
// (autograd's sum); with sums, also *sums (P·H·d) float32 = dst's column sums over B·N where the summing
// kernel takes the layouts (else left undefined: the caller sums dst).
void gather_grads(const tensor_list& grads, int64_t repeat, const at::Tensor& dst, at::Tensor* sums) {
#ifdef NALA_WITH_CUDA
  if (cuda::GatherHeadsParams p; gather_params(grads, repeat, dst, sums != nullptr, p)) {
    c10::cuda::CUDAGuard guard(dst.device());
    if (!sums) {
      cuda::launch_gather_heads(p, at::cuda::getCurrentCUDAStream().stream());
      return;
    }
    cuda::GatherSumPlan plan = cuda::gather_heads_sum_plan(p, at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
    plan.grouped = gather_sum_grouped();
    const int64_t C = dst.size(2) * dst.size(3) * dst.size(4);
    const auto f32 = dst.options().dtype(at::kFloat);
    at::Tensor part = at::empty({plan.splits, C}, f32);  // (splits, C)
    *sums = at::empty({C}, f32);                          // (C)
    cuda::launch_gather_heads_sum(p, plan, part.data_ptr<float>(), sums->data_ptr<float>(), at::cuda::getCurrentCUDAStream().stream());
    summing_gathers.fetch_add(1, std::memory_order_relaxed);
    return;
  }
#endif
  (void)sums;
  const int64_t P = dst.size(2);
  for (int64_t i = 0; i < P; ++i) {
    at::Tensor g = grads[size_t(i)];
    if (i == repeat && grads[size_t(P)].defined()) g = g.defined() ? g + grads[size_t(P)] : grads[size_t(P)];  // autograd's sum
    if (g.defined()) dst.select(2, i).copy_(g);
    else dst.select(2, i).zero_();
  }
}

// The P parts' gradients as one (B, N, P, H, d) tensor when a consumer already wrote them so (views of
// one buffer in the projection's layout: attention/gated_tail.h nala_mixer with NALA_QKVG_GRADS_IN_PLACE),
// none for the repeated part's second view; else undefined (the gather assembles them).
at::Tensor assembled_parts(const tensor_list& grads, int64_t repeat, const std::vector<int64_t>& sizes, at::ScalarType dtype) {
  const int64_t B = sizes[0], N = sizes[1], P = sizes[2], H = sizes[3], d = sizes[4], row = P * H * d;
  if (repeat >= 0 && grads[size_t(P)].defined()) return at::Tensor();
  const at::Tensor& g0 = grads[0];
  if (!g0.defined() || g0.scalar_type() != dtype || g0.dim() != 4) return at::Tensor();
  const std::vector<int64_t> part_sizes{B, N, H, d}, part_strides{N * row, row, d, 1};
  const int64_t es = g0.element_size();
  for (int64_t i = 0; i < P; ++i) {
    const at::Tensor& g = grads[size_t(i)];
    if (!g.defined() || g.scalar_type() != dtype || g.sizes() != c10::IntArrayRef(part_sizes) || g.strides() != c10::IntArrayRef(part_strides) ||
        !g.storage().is_alias_of(g0.storage()) || g.storage_offset() != g0.storage_offset() + i * H * d)
      return at::Tensor();
  }
  if (size_t((g0.storage_offset() + B * N * row) * es) > g0.storage().nbytes()) return at::Tensor();
  return g0.as_strided({B, N, P, H, d}, {N * row, row, H * d, d, 1}, g0.storage_offset());  // (B, N, P, H, d), no copy
}

// The parts' gradients as one (B, N, P, H, d) tensor of dtype on ref's device: as they came where already
// assembled (assembled_parts, counted; with sums: the consumer's column sums where it offered them,
// offer_parts_column_sums), else gathered (with sums: the bias gradient summed on the way where the
// kernel takes the layouts, as gather_grads says). *sums stays undefined where nothing summed it.
at::Tensor parts_gradient(const tensor_list& grads, int64_t repeat, const std::vector<int64_t>& sizes, at::ScalarType dtype, const at::Tensor& ref,
                          at::Tensor* sums) {
  if (at::Tensor whole = assembled_parts(grads, repeat, sizes, dtype); whole.defined()) {
    assembled_backwards.fetch_add(1, std::memory_order_relaxed);
    if (sums != nullptr) *sums = take_offered_sums(whole);  // the consumer's column sums of it, where it offered them
    return whole;
  }
  at::Tensor dt = at::empty(sizes, ref.options().dtype(dtype));  // (B, N, P, H, d)
  gather_grads(grads, repeat, dt, sums);
  return dt;
}

// t (B, N, P, H, d) as P views (B, N, H, d), and the repeated part's second view
tensor_list part_views(const at::Tensor& t, int64_t repeat) {
  tensor_list parts = t.unbind(2);                        // P × (B, N, H, d) views
  if (repeat >= 0) parts.push_back(t.select(2, repeat));  // the repeated part's second view
  return parts;
}

// a defined gradient among grads, or undefined where none is
at::Tensor any_defined(const tensor_list& grads) {
  for (const auto& g : grads)
    if (g.defined()) return g;
  return at::Tensor();
}

struct SplitHeadsFn : torch::autograd::Function<SplitHeadsFn> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& t, int64_t repeat) {
    ctx->saved_data["sizes"] = t.sizes().vec();
    ctx->saved_data["dtype"] = int64_t(t.scalar_type());
    ctx->saved_data["repeat"] = repeat;
    ctx->set_materialize_grads(false);  // an unused part's gradient stays undefined: written as zeros, not read
    return part_views(t, repeat);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor ref = any_defined(grads);
    if (!ref.defined()) return {at::Tensor(), at::Tensor()};
    const at::ScalarType dtype = at::ScalarType(ctx->saved_data["dtype"].toInt());
    return {parts_gradient(grads, ctx->saved_data["repeat"].toInt(), ctx->saved_data["sizes"].toIntVector(), dtype, ref, nullptr),  // (B, N, P, H, d)
            at::Tensor()};
  }
};

// linear then split_heads as one operation (x (B, N, D), w (P·H·d, D), b (P·H·d) -> the parts), so that
// its backward takes the bias gradient from the gather: on CUDA the summing gather kernel adds each
// column of the gathered gradient on the way, and the column sum's own pass over it (151 MB a DiT-S/2
// block at batch 256) goes. The GEMMs are linear_op's.
struct LinearSplitHeadsFn : torch::autograd::Function<LinearSplitHeadsFn> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, int64_t P, int64_t H, int64_t repeat) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // dtypes are settled
    const at::Tensor y = linear_training_forward(x, w, b);                                 // (B, N, P·H·d)
    ctx->save_for_backward({x, w});
    ctx->saved_data["b_dtype"] = int64_t(b.scalar_type());
    ctx->saved_data["repeat"] = repeat;
    const std::vector<int64_t> sizes{x.size(0), x.size(1), P, H, w.size(0) / (P * H)};
    ctx->saved_data["sizes"] = sizes;
    ctx->set_materialize_grads(false);
    return part_views(y.view(sizes), repeat);  // P (+1) × (B, N, H, d) views
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor ref = any_defined(grads);
    if (!ref.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const auto b_dtype = at::ScalarType(ctx->saved_data["b_dtype"].toInt());
    at::Tensor db;  // (P·H·d) float32, where the gather sums it
    const at::Tensor dt = parts_gradient(grads, ctx->saved_data["repeat"].toInt(), ctx->saved_data["sizes"].toIntVector(), w.scalar_type(), ref,
                                         ctx->needs_input_grad(2) ? &db : nullptr);  // (B, N, P, H, d)
    const at::Tensor dt2 = dt.view({-1, w.size(0)});  // (R, P·H·d)
    // a bias gradient the gather did not sum comes with the GEMMs: the column sum, or with NALA_GEMM_BGRAD=1
    // the weight gradient's epilogue (ops/linear.h linear_grads)
    const LinearGrads d = linear_grads(dt2, x.reshape({-1, w.size(1)}), w, b_dtype, ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                       ctx->needs_input_grad(2) && !db.defined());
    if (!db.defined()) db = d.b;
    return {d.x.defined() ? d.x.view(x.sizes()) : d.x, d.w, db.defined() ? db.to(b_dtype) : db, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::vector<at::Tensor> split_heads(const at::Tensor& t, int64_t repeat_part) {
  TORCH_CHECK(t.dim() == 5 && t.size(2) >= 1 && t.size(2) <= 4, "split_heads: expected a (B, N, P, H, d) tensor with P <= 4, got ", t.sizes());
  TORCH_CHECK(repeat_part >= -1 && repeat_part < t.size(2), "split_heads: repeat_part ", repeat_part, " is not a part of ", t.size(2));
  return SplitHeadsFn::apply(t, repeat_part);
}

std::vector<at::Tensor> linear_split_heads_op(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, int64_t parts, int64_t heads,
                                              int64_t repeat_part) {
  TORCH_CHECK(x.dim() == 3 && w.dim() == 2 && b.defined() && b.dim() == 1 && x.size(2) == w.size(1) && b.size(0) == w.size(0),
              "linear_split_heads: x (B, N, D), w (out, D) and b (out) expected, got ", x.sizes(), ", ", w.sizes(), ", ", b.sizes());
  TORCH_CHECK(parts >= 1 && parts <= 4 && heads >= 1 && w.size(0) % (parts * heads) == 0, "linear_split_heads: ", w.size(0), " outputs are not ", parts,
              " parts of ", heads, " heads");
  TORCH_CHECK(repeat_part >= -1 && repeat_part < parts, "linear_split_heads: repeat_part ", repeat_part, " is not a part of ", parts);
  const at::Tensor xc = autocast_gemm_operand(x), wc = autocast_gemm_operand(w);  // (B, N, D), (out, D)
  TORCH_CHECK(xc.scalar_type() == wc.scalar_type(), "linear_split_heads: input ", xc.scalar_type(), " and weight ", wc.scalar_type(), " differ");
  return LinearSplitHeadsFn::apply(xc, wc, b, parts, heads, repeat_part);
}

int64_t split_heads_summing_gathers() { return summing_gathers.load(std::memory_order_relaxed); }
int64_t split_heads_assembled_backwards() { return assembled_backwards.load(std::memory_order_relaxed); }
int64_t split_heads_offered_sums_taken() { return offered_sums_taken.load(std::memory_order_relaxed); }

void offer_parts_column_sums(const at::Tensor& buffer, const at::Tensor& sums) {
  TORCH_CHECK(buffer.dim() == 5 && sums.dim() == 1 && sums.scalar_type() == at::kFloat &&
                  sums.numel() == buffer.size(2) * buffer.size(3) * buffer.size(4) && sums.device() == buffer.device(),
              "offer_parts_column_sums: sums must be (P·H·d) float32 beside a (B, N, P, H, d) buffer, got ", sums.sizes(), " ", sums.scalar_type(),
              " for ", buffer.sizes());
  offered.storage = buffer.storage().getWeakStorageImpl();
  offered.offset = buffer.storage_offset();
  offered.numel = buffer.numel();
  offered.sums = sums;
}

std::vector<at::Tensor> linear_split_heads(const torch::nn::LinearImpl& m, const at::Tensor& x, int64_t parts, int64_t heads, int64_t repeat_part) {
  if (x.dim() == 3 && split_heads_bias_sums() && linear_op_applies(x, m.weight, m.bias))
    return linear_split_heads_op(x, m.weight, m.bias, parts, heads, repeat_part);  // P (+1) × (B, N, H, d)
  const at::Tensor y = linear(m, x);                                                   // (B, N, P·H·d)
  return split_heads(y.view({x.size(0), x.size(1), parts, heads, y.size(2) / (parts * heads)}), repeat_part);
}

}  // namespace nala::ops
