// A training step's low-precision copies of the trainable parameters, made in one pass, and their
// gradients taken back in one pass.
//
// Under bf16 autocast every GEMM reads its weight in bf16: autocast casts each float32 weight at
// its first use in a forward (one small kernel a weight), each bias is cast inside its operation's
// forward (another), and in the backward autograd converts each weight's bf16 gradient back to
// float32 (a third). At DiT-S/2's batch of 256 on an H100 that is 148 casts and 108 conversions a
// step, 0.69 ms of a 34.8 ms step (a profiler trace of the CUDA-graph step, docs/benchmarks.md,
// thirty-seventh session), almost all of it launch-bound: the tensors are small.
//
// WeightCasts holds one bf16 buffer for all of them. refresh() fills it with one multi-tensor copy
// (at::_foreach_copy_) at the step's start; while its scope lives, autocast_gemm_operand
// (ops/fused_ops.h) hands out a parameter's cast, connected to the parameter by an autograd node
// whose backward keeps the bf16 gradient here instead of converting it, and bias_operand hands the
// cast to an operation's forward. take_gradients() then converts every kept gradient into the
// parameters' .grad with one more multi-tensor copy (or adds it where .grad is already set: the
// pieces of --grad-accum). The values are the same bits as autocast's: the same rounding to bf16
// before the step, the same exact widening of each gradient after it; a parameter used twice in one
// forward has its two gradients added in bf16, as autograd adds them at autocast's one cached cast.
//
// A parameter whose version moved since refresh() (changed in place) is not handed out: the caller
// falls back to autocast's own cast. A parameter that also reaches the GEMMs another way (autocast's
// own cast, or read in float32) gets that part of its gradient from autograd into .grad and the kept
// part added in float32 by take_gradients: the right sum, not necessarily autocast's bits. The
// autograd nodes point at this object: it must outlive every graph built while its Scope was open
// (TrainStep and `nala bench train` own theirs for the whole run). Views of a parameter (the patch embedding's reshaped kernel)
// are not registered parameters and take autocast's path too.
#pragma once
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

namespace nala::ops {

// Whether the training step uses it: weight_casts_enabled() (NALA_WEIGHT_CASTS, ops/fused_ops.h).
class WeightCasts {
 public:
  // params: float32 leaves that require gradients, all on one device; dtype the GEMMs' (bf16, fp16).
  // stacks: lists of parameters (each in params, of equal trailing sizes) whose casts are laid out
  // one after another in that order, so that stacked_operand() hands them out as one matrix without
  // a copy (a model's adaLN weights: models/dit.h stacked_modulations); the rest in params' order.
  WeightCasts(std::vector<at::Tensor> params, at::ScalarType dtype, const std::vector<std::vector<at::Tensor>>& stacks = {});
  WeightCasts(const WeightCasts&) = delete;
  WeightCasts& operator=(const WeightCasts&) = delete;

  // While a Scope lives (on this thread), operand() and plain() hand out this object's casts.
  class Scope {
   public:
    explicit Scope(WeightCasts* w);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WeightCasts* previous_;
  };
  // Copies every parameter into its cast (one multi-tensor copy; after mark_current() only those whose
  // version moved) and records its version; drops any kept gradient a take_gradients() never collected. Call it
  // after the parameters last changed (the previous step's optimizer) and before the forward, then
  // open a Scope for the forward.
  void refresh();
  // After a backward: every gradient kept since the last call into its parameter's .grad, set where
  // it is undefined and added where it is defined; the kept gradients dropped.
  void take_gradients();
  // take_gradients for an optimizer that reads bf16 gradients itself (train::AdamW::step_with_ema):
  // every parameter's gradient, in the parameters' order: the kept one as it is (bf16) where .grad is
  // undefined, .grad with the kept one added (as take_gradients adds) where both are, .grad alone (or
  // undefined) where nothing was kept. The kept gradients dropped; .grad set only where it was.
  std::vector<at::Tensor> gradients();
  // Every parameter's cast, in the parameters' order (views of one buffer).
  const std::vector<at::Tensor>& casts() const { return casts_; }
  // The casts hold the parameters as they are now (an optimizer pass wrote both: ops/adamw_ema.h):
  // the next refresh() copies only the parameters whose version has moved since.
  void mark_current();

  // The active Scope's cast of t in dtype, or undefined where t is not a registered parameter, its
  // version moved since refresh(), dtype is not the casts' or no Scope is active. With grad mode on
  // it is an autograd node's output (t's gradient kept here); with grad mode off the cast itself.
  static at::Tensor operand(const at::Tensor& t, at::ScalarType dtype);
  // The casts of ts (2-D, equal column counts) as one (Σ rows, cols) matrix, their rows in ts' order:
  // a view of the casts' memory where ts is one of the constructor's stacks (adjacent casts), else
  // undefined (the caller concatenates operand()s). With grad mode on an autograd node's output whose
  // backward keeps each parameter's row range of the gradient, as operand()'s node keeps a whole one.
  static at::Tensor stacked_operand(const std::vector<at::Tensor>& ts, at::ScalarType dtype);
  // How many casts operand() and stacked_operand() have handed out in this process (a test's proof
  // that the path ran; a stack counts once for each of its parameters).
  static int64_t handed_out();
  // How many stacks stacked_operand() has handed out in this process.
  static int64_t stacks_handed_out();
  // What take_gradients() will see: the kept gradients (bf16, or undefined where none came), for tests.
  const std::vector<at::Tensor>& kept_gradients() const { return kept_; }
  int64_t size() const { return int64_t(params_.size()); }

  // the autograd node's backward (ops/weight_casts.cpp): keeps (adds) one gradient of parameter i
  void keep_gradient(int64_t i, const at::Tensor& g);
  const at::Tensor& cast(int64_t i) const { return casts_[size_t(i)]; }
  // the stacked node's forward: rows [offset_i, offset_i + Σ numel) of the casts' memory as (rows, cols)
  at::Tensor flat_rows(int64_t first, int64_t rows, int64_t cols) const;

 private:
  std::vector<at::Tensor> params_, casts_, kept_;
  at::Tensor flat_;                // (total,) every cast, each at offsets_[i]
  std::vector<int64_t> offsets_;   // each cast's first element in flat_
  std::vector<int64_t> versions_;  // each parameter's version at refresh() or mark_current(); −1 before the first
  bool current_ = false;           // mark_current() since the last refresh()
  std::unordered_map<const void*, int64_t> index_;  // TensorImpl* → i
  at::ScalarType dtype_;
  std::mutex mutex_;  // keep_gradient runs on the autograd engine's device thread
};

// b in dtype for an operation's forward: the active step's cast where grad mode is off (inside an
// autograd Function's forward, whose backward returns b's gradient itself) and b is a registered
// parameter, else b.to(dtype) (b itself where it already is).
at::Tensor bias_operand(const at::Tensor& b, at::ScalarType dtype);

}  // namespace nala::ops
