// Plain parameters of the head-gather kernel (ops/cuda/gather_heads.cu): the backward of
// split_heads (ops/split_heads.h). It writes P gradients, each (B, N, H, d) with strides
// (b, n, h) and unit stride along d (or absent: zeros), into one contiguous (B, N, P, H, d) tensor,
// the layout of the projection they came from, in one pass; optionally with a second gradient of
// one part (a part read twice, as the gated NaLa block reads v) added to it on the way.
#pragma once
#include <cstdint>

namespace nala::ops::cuda {

struct GatherHeadsParams {
  static constexpr int kMaxParts = 4;
  const void* src[kMaxParts] = {nullptr, nullptr, nullptr, nullptr};  // null: that part's gradient is zero
  int64_t stride[kMaxParts][3] = {};                                  // (b, n, h) strides, elements
  void* dst = nullptr;
  int B = 0, N = 0, P = 0, H = 0, d = 0;
  int element_size = 2;  // bytes; d·element_size and every stride·element_size a multiple of 16
  enum class Dtype { f32, bf16, f16 } dtype = Dtype::bf16;  // for the optional sum below
  int extra_part = -1;                                       // ≥ 0: add extra to src[extra_part]
  const void* extra = nullptr;                               // (B, N, H, d), strides (b, n, h), unit d
  int64_t extra_stride[3] = {};
};

void launch_gather_heads(const GatherHeadsParams& p, void* stream);

// The same gather, and the destination's column sums on the way (the bias gradient of the projection
// it came from): dst viewed as (R = B·N, C = P·H·d); the grid's blocks each take a range of rows and
// write their float32 sums to part (splits, C), which a second kernel adds in order into out (C).
// Deterministic; dst bit for bit launch_gather_heads's. gather_heads_sum_plan sets splits and
// rows_per_block for the device (sms multiprocessors); part must hold splits · C floats.
struct GatherSumPlan {
  int splits = 0;
  int64_t rows_per_block = 0;
  bool grouped = false;  // a thread's rows' loads issued as one group (NALA_GATHER_SUM_GROUPED, ops/split_heads.cpp)
};
GatherSumPlan gather_heads_sum_plan(const GatherHeadsParams& p, int sms);
void launch_gather_heads_sum(const GatherHeadsParams& p, const GatherSumPlan& plan, float* part, float* out, void* stream);

}  // namespace nala::ops::cuda
