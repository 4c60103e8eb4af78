#include "train/grad_buckets.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace nala::train {
namespace {

struct ReadyHook : torch::autograd::PostAccumulateGradHook {
  GradBuckets* owner;
  size_t index;
  ReadyHook(GradBuckets* o, size_t i) : owner(o), index(i) {}
  void operator()(const torch::autograd::Variable&) override { owner->mark_ready(index); }
};

}  // namespace

GradBuckets::GradBuckets(const std::vector<at::Tensor>& params, ProcessGroup& pg, int64_t bucket_bytes, bool overlap)
    : params_(params), pg_(pg), views_(params.size()), bucket_of_(params.size()), overlap_(overlap) {
  if (bucket_bytes <= 0) throw std::runtime_error("gradient bucket size must be positive, got " + std::to_string(bucket_bytes) + " bytes");
  // reverse order: the last layers' gradients are ready first
  std::vector<std::vector<size_t>> buckets;
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const at::Tensor& p = params_[k];
    const bool same_kind = !buckets.empty() && params_[buckets.back().front()].options().type_equal(p.options());
    if (buckets.empty() || bytes >= bucket_bytes || !same_kind) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(k);
    bytes += p.numel() * p.element_size();
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t n = 0;
    for (size_t k : buckets[b]) n += params_[k].numel();
    flat_.push_back(at::zeros({n}, params_[buckets[b].front()].options().requires_grad(false)));  // (n,)
    size_.push_back(int64_t(buckets[b].size()));
    int64_t off = 0;
    for (size_t k : buckets[b]) {
      views_[k] = flat_[b].narrow(0, off, params_[k].numel()).view(params_[k].sizes());  // the parameter's shape
      off += params_[k].numel();
      bucket_of_[k] = b;
    }
  }
  waiting_ = size_;
  if (overlap_)
    for (size_t k = 0; k < params_.size(); ++k) torch::autograd::impl::set_post_acc_grad_hooks(params_[k], std::make_unique<ReadyHook>(this, k));
}

GradBuckets::~GradBuckets() {
  if (overlap_)
    for (auto& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradBuckets::prepare() {
  for (auto& f : flat_) f.zero_();
  for (size_t k = 0; k < params_.size(); ++k) {
    const at::Tensor& g = params_[k].grad();
    if (!g.defined() || !g.is_same(views_[k])) params_[k].mutable_grad() = views_[k];
  }
  waiting_ = size_;
  next_ = 0;
  started_in_backward_ = 0;
  counting_ = true;
}

void GradBuckets::mark_ready(size_t k) {
  const size_t b = bucket_of_[k];
  if (!params_[k].grad().is_same(views_[k]))
    throw std::runtime_error("data parallel: the gradient of parameter " + std::to_string(k) +
                             " is no longer a view of its bucket (was .grad() replaced during the backward?)");
  if (!counting_) return;  // an earlier piece of an accumulated step: its gradient stays in the bucket
  if (--waiting_[b] < 0) throw std::runtime_error("data parallel: parameter " + std::to_string(k) + " got two gradients in one backward");
  while (next_ < flat_.size() && waiting_[next_] == 0) {
    start(next_++);
    ++started_in_backward_;
  }
}

void GradBuckets::start(size_t b) { pg_.start_allreduce_sum(flat_[b]); }

void GradBuckets::finish() {
  while (next_ < flat_.size()) start(next_++);  // every bucket without overlap; else those with parameters that got no gradient
  pg_.wait_started("gradient all-reduce");
  for (auto& f : flat_) f.div_(double(pg_.world_size()));
}

}  // namespace nala::train
