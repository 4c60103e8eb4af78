#include "ops/weight_casts.h"

#include <atomic>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace nala::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

thread_local WeightCasts* g_active = nullptr;  // the Scope's object on this thread
std::atomic<int64_t> g_handed_out{0};
std::atomic<int64_t> g_stacks_handed_out{0};
// Each cast starts at a multiple of this many elements (512 bytes in bf16, as the caching allocator
// aligns a tensor of its own): cuBLASLt's heuristics read the operands' alignment (ATen passes up to
// 256 bytes), so a cast aligned as autocast's own gets the same GEMM algorithm, hence the same bits.
constexpr int64_t kAlign = 256;

// p (float32 leaf) → its cast, kept by owner: the cast forward, the gradient kept in the backward
// (nothing returned for p, so autograd neither converts nor accumulates it; take_gradients does)
struct CastFn : torch::autograd::Function<CastFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& p, int64_t owner, int64_t i) {
    ctx->saved_data["owner"] = owner;
    ctx->saved_data["i"] = i;
    return reinterpret_cast<WeightCasts*>(owner)->cast(i).detach();  // p's shape in the casts' dtype, a new tensor on their memory
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    if (grads[0].defined())
      reinterpret_cast<WeightCasts*>(ctx->saved_data["owner"].toInt())->keep_gradient(ctx->saved_data["i"].toInt(), grads[0]);
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// the stacked casts of parameters idx (their rows: rows) → one (Σ rows, cols) view of the casts'
// memory; the backward keeps each parameter's row range of the gradient (nothing returned for them)
struct StackedCastFn : torch::autograd::Function<StackedCastFn> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList params, int64_t owner, std::vector<int64_t> idx) {
    std::vector<int64_t> rows;
    int64_t total = 0;
    for (const auto& p : params) rows.push_back(p.size(0)), total += p.size(0);
    ctx->saved_data["owner"] = owner;
    ctx->saved_data["idx"] = idx;
    ctx->saved_data["rows"] = rows;
    return reinterpret_cast<WeightCasts*>(owner)->flat_rows(idx.front(), total, params.front().size(1)).detach();  // (Σ rows, cols)
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto idx = ctx->saved_data["idx"].toIntVector(), rows = ctx->saved_data["rows"].toIntVector();
    if (grads[0].defined()) {
      auto* w = reinterpret_cast<WeightCasts*>(ctx->saved_data["owner"].toInt());
      int64_t r0 = 0;
      for (size_t k = 0; k < idx.size(); ++k) {
        w->keep_gradient(idx[k], grads[0].narrow(0, r0, rows[k]));  // (rows_k, cols), contiguous where the gradient is
        r0 += rows[k];
      }
    }
    return tensor_list(idx.size() + 2);  // none for the parameters (take_gradients sets them), owner, idx
  }
};

}  // namespace

WeightCasts::WeightCasts(std::vector<at::Tensor> params, at::ScalarType dtype, const std::vector<std::vector<at::Tensor>>& stacks)
    : params_(std::move(params)), dtype_(dtype) {
  if (dtype != at::kBFloat16 && dtype != at::kHalf)
    throw std::invalid_argument(std::string("WeightCasts: the casts' dtype must be bf16 or fp16, got ") + c10::toString(dtype));
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    if (p.scalar_type() != at::kFloat || !p.is_leaf() || !p.requires_grad() || p.device() != params_.front().device())
      throw std::invalid_argument("WeightCasts: parameter " + std::to_string(i) + " (" + c10::str(p.sizes()) + " " + c10::toString(p.scalar_type()) +
                                  " on " + p.device().str() + ") is not a float32 leaf that requires a gradient on " +
                                  params_.front().device().str());
    if (!index_.emplace(p.unsafeGetTensorImpl(), int64_t(i)).second)
      throw std::invalid_argument("WeightCasts: parameter " + std::to_string(i) + " (" + c10::str(p.sizes()) + ") is listed twice");
    total += (p.numel() + kAlign - 1) / kAlign * kAlign;
  }
  // one buffer for all casts, each a contiguous slice in its parameter's shape
  // the layout: params' order, except that a stack's members follow one another from where its first
  // member comes
  std::vector<int64_t> stack_of(params_.size(), -1);
  for (size_t s = 0; s < stacks.size(); ++s)
    for (const auto& t : stacks[s]) {
      const auto it = index_.find(t.unsafeGetTensorImpl());
      if (it == index_.end() || stack_of[size_t(it->second)] >= 0 || t.dim() != 2 || t.size(1) != stacks[s].front().size(1))
        throw std::invalid_argument("WeightCasts: stack " + std::to_string(s) + " holds a tensor (" + c10::str(t.sizes()) +
                                    ") that is not a listed parameter, is in a stack already or is not 2-D with the stack's columns");
      stack_of[size_t(it->second)] = int64_t(s);
    }
  std::vector<int64_t> order;
  std::vector<bool> placed(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (placed[i]) continue;
    if (stack_of[i] < 0) {
      order.push_back(int64_t(i)), placed[i] = true;
      continue;
    }
    for (const auto& t : stacks[size_t(stack_of[i])]) {
      const int64_t j = index_.at(t.unsafeGetTensorImpl());
      order.push_back(j), placed[size_t(j)] = true;
    }
  }
  // one buffer for all casts, each a contiguous slice in its parameter's shape
  flat_ = params_.empty() ? at::Tensor() : at::empty({total}, params_.front().options().dtype(dtype));  // (total,)
  offsets_.assign(params_.size(), 0);
  casts_.resize(params_.size());
  int64_t at_ = 0;
  for (const int64_t i : order) {
    const at::Tensor& p = params_[size_t(i)];
    offsets_[size_t(i)] = at_;
    casts_[size_t(i)] = flat_.narrow(0, at_, p.numel()).view(p.sizes());  // p's shape
    at_ += (p.numel() + kAlign - 1) / kAlign * kAlign;
  }
  kept_.resize(params_.size());
  versions_.assign(params_.size(), -1);
}

WeightCasts::Scope::Scope(WeightCasts* w) : previous_(g_active) { g_active = w; }
WeightCasts::Scope::~Scope() { g_active = previous_; }

void WeightCasts::refresh() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto& k : kept_) k = at::Tensor();  // a backward whose gradients were never taken (an exception between) adds nothing to this step
  }
  const bool current = current_;
  current_ = false;
  if (params_.empty()) return;
  at::NoGradGuard ng;
  std::vector<at::Tensor> dst, src;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!current || versions_[i] != int64_t(params_[i]._version())) dst.push_back(casts_[i]), src.push_back(params_[i].detach());
  if (!dst.empty()) at::_foreach_copy_(dst, src);  // rounded to dtype_, one multi-tensor launch where ATen takes the lists
  for (size_t i = 0; i < params_.size(); ++i) versions_[i] = int64_t(params_[i]._version());
}

void WeightCasts::mark_current() {
  for (size_t i = 0; i < params_.size(); ++i) versions_[i] = int64_t(params_[i]._version());
  current_ = true;
}

std::vector<at::Tensor> WeightCasts::gradients() {
  const std::lock_guard<std::mutex> lock(mutex_);
  at::NoGradGuard ng;
  std::vector<at::Tensor> out(params_.size()), add_dst, add_src;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& grad = params_[i].grad();
    if (!kept_[i].defined()) {
      out[i] = grad;
    } else if (!grad.defined()) {
      out[i] = kept_[i];  // bf16, read as it is
    } else {
      add_dst.push_back(grad), add_src.push_back(kept_[i]);
      out[i] = grad;
    }
    kept_[i] = at::Tensor();
  }
  if (!add_dst.empty()) at::_foreach_add_(add_dst, add_src);  // the widened gradient added in float32, as AccumulateGrad adds
  return out;
}

void WeightCasts::keep_gradient(int64_t i, const at::Tensor& g) {
  const std::lock_guard<std::mutex> lock(mutex_);
  at::Tensor& k = kept_[size_t(i)];
  const at::Tensor gc = g.to(dtype_).contiguous();  // (p's shape) as autograd hands the cast's gradient: in its dtype
  k = k.defined() ? k + gc : gc;  // a parameter used twice: added in dtype_, as autograd adds at one cached cast
}

void WeightCasts::take_gradients() {
  const std::vector<at::Tensor> gs = gradients();  // kept ones already added where .grad was set
  at::NoGradGuard ng;
  std::vector<at::Tensor> set_dst, set_src;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    if (!gs[i].defined() || grad.defined()) continue;
    grad = at::empty_like(params_[i], at::MemoryFormat::Contiguous);  // (p's shape) float32
    set_dst.push_back(grad);
    set_src.push_back(gs[i]);
  }
  if (!set_dst.empty()) at::_foreach_copy_(set_dst, set_src);  // exact widening, one multi-tensor launch
}

at::Tensor WeightCasts::operand(const at::Tensor& t, at::ScalarType dtype) {
  WeightCasts* w = g_active;
  if (!w || dtype != w->dtype_ || !t.defined()) return at::Tensor();
  const auto it = w->index_.find(t.unsafeGetTensorImpl());
  if (it == w->index_.end()) return at::Tensor();
  const int64_t i = it->second;
  if (w->versions_[size_t(i)] != int64_t(t._version())) return at::Tensor();  // changed since refresh(), or never refreshed
  g_handed_out.fetch_add(1, std::memory_order_relaxed);
  if (at::GradMode::is_enabled()) return CastFn::apply(t, reinterpret_cast<int64_t>(w), i);
  return w->casts_[size_t(i)].detach();
}

at::Tensor WeightCasts::flat_rows(int64_t first, int64_t rows, int64_t cols) const {
  return flat_.narrow(0, offsets_[size_t(first)], rows * cols).view({rows, cols});  // (rows, cols)
}

at::Tensor WeightCasts::stacked_operand(const std::vector<at::Tensor>& ts, at::ScalarType dtype) {
  WeightCasts* w = g_active;
  if (!w || dtype != w->dtype_ || ts.empty()) return at::Tensor();
  std::vector<int64_t> idx;
  for (size_t k = 0; k < ts.size(); ++k) {
    const at::Tensor& t = ts[k];
    if (!t.defined() || t.dim() != 2 || t.size(1) != ts.front().size(1)) return at::Tensor();
    const auto it = w->index_.find(t.unsafeGetTensorImpl());
    if (it == w->index_.end() || w->versions_[size_t(it->second)] != int64_t(t._version())) return at::Tensor();
    // adjacent: this cast starts where the previous one ends (no alignment gap between them)
    if (k > 0 && w->offsets_[size_t(it->second)] != w->offsets_[size_t(idx.back())] + ts[k - 1].numel()) return at::Tensor();
    idx.push_back(it->second);
  }
  g_handed_out.fetch_add(int64_t(ts.size()), std::memory_order_relaxed);
  g_stacks_handed_out.fetch_add(1, std::memory_order_relaxed);
  if (at::GradMode::is_enabled()) return StackedCastFn::apply(at::TensorList(ts), reinterpret_cast<int64_t>(w), idx);  // a TensorList: one edge a parameter
  int64_t rows = 0;
  for (const auto& t : ts) rows += t.size(0);
  return w->flat_rows(idx.front(), rows, ts.front().size(1)).detach();  // (Σ rows, cols)
}

int64_t WeightCasts::handed_out() { return g_handed_out.load(std::memory_order_relaxed); }
int64_t WeightCasts::stacks_handed_out() { return g_stacks_handed_out.load(std::memory_order_relaxed); }

at::Tensor bias_operand(const at::Tensor& b, at::ScalarType dtype) {
  if (!b.defined() || b.scalar_type() == dtype) return b;
  if (!at::GradMode::is_enabled())
    if (at::Tensor c = WeightCasts::operand(b, dtype); c.defined()) return c;
  return b.to(dtype);
}

}  // namespace nala::ops
