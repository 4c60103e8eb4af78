// Data-parallel gradient all-reduce overlapped with the backward, as PyTorch DDP's reducer does it
// (torch/csrc/distributed/c10d/reducer.cpp): the parameters are split, in reverse registration
// order (about the order their gradients become ready), into flat buckets of about bucket_bytes;
// every parameter's .grad() is a view into its bucket, so autograd accumulates straight into it; a
// post-accumulate-grad hook counts the ready gradients, and a full bucket starts its all-reduce at
// once (asynchronously: NCCL runs it on its own stream while the backward goes on), buckets always
// in index order so every rank issues the same collectives in the same order. finish() starts the
// buckets still waiting (parameters that got no gradient this step: theirs stays zero), waits, and
// divides by the world size. Without overlap (--overlap-grads false) no hooks are registered and
// finish() starts every bucket after the backward: the same sums, bit for bit. With gradient
// accumulation the hooks count only the last piece's backward (set_counting).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "train/distributed.h"

namespace nala::train {

class GradBuckets {
 public:
  GradBuckets(const std::vector<at::Tensor>& params, ProcessGroup& pg, int64_t bucket_bytes, bool overlap);
  ~GradBuckets();  // removes the hooks
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Before the backward: zero the buckets and make every parameter's .grad() its view.
  void prepare();
  // After the backward: the mean gradient over ranks is in every .grad().
  void finish();
  // Gradient accumulation (several backwards a step): while false, the hooks let gradients accumulate
  // in the buckets without counting them ready; the last piece's backward runs with it true (the
  // default after prepare()), so each bucket starts once, holding every piece's sum.
  void set_counting(bool counting) { counting_ = counting; }

  int64_t bucket_count() const { return int64_t(flat_.size()); }
  int64_t started_during_backward() const { return started_in_backward_; }  // buckets of the last step

  void mark_ready(size_t param_index);  // called by the hooks (the autograd thread)

 private:
  void start(size_t bucket);
  std::vector<at::Tensor> params_;
  ProcessGroup& pg_;
  std::vector<at::Tensor> flat_;       // (numel of the bucket,) one per bucket
  std::vector<at::Tensor> views_;      // per parameter: its slice of its bucket, shaped as the parameter
  std::vector<size_t> bucket_of_;      // per parameter
  std::vector<int64_t> size_, waiting_;  // per bucket: parameters, gradients not yet ready
  size_t next_ = 0;                    // the next bucket to start
  int64_t started_in_backward_ = 0;
  bool overlap_;
  bool counting_ = true;
};

}  // namespace nala::train
