// Plain parameters of the column-sum kernels (ops/cuda/column_sum_kernels.cu); the LibTorch
// entry is ops/cuda/column_sum.h.
#pragma once
#include <cstdint>

namespace nala::ops::cuda {

struct ColumnSumParams {
  const void* x = nullptr;  // (R, C) contiguous, rows 16-byte aligned
  int64_t R = 0;
  int C = 0;
  int element_size = 2;  // 4: float32; 2: bf16 (bf16 = true) or fp16
  bool bf16 = true;
  float* part = nullptr;  // (splits, C) scratch
  float* out = nullptr;   // (C)
  // set by column_sum_plan
  int col_blocks = 0, splits = 0;
  int64_t rows_per_block = 0;
};

void column_sum_plan(ColumnSumParams& p, int sms);  // grid and row ranges for this device
void launch_column_sum(const ColumnSumParams& p, void* stream);
// out (C) = Σ_k part (splits, C) in k order: the second stage alone, for kernels that write their
// own partial column sums (ops/cuda/gather_heads.cu's summing gather)
void launch_column_sum_final(const float* part, int splits, int C, float* out, void* stream);

// One segment of launch_sum_partials_into: out = Σ_k part[k·ld + c] over k < splits for c < cols, each
// column's sum column_sum_final's (the same additions in the same order, so the same bits), written
// to out[(c / width)·out_row + (c % width)·out_col]: a (cols / width, width) block of sums laid out
// with any strides (transposed: the gated tail's LePE taps (ks², D) into its weight's (D, ks²) order).
struct PartialSumsSegment {
  const float* part = nullptr;
  int64_t ld = 0;  // floats from one partial to the next (≥ cols)
  int splits = 0, cols = 0, width = 1;
  float* out = nullptr;
  int64_t out_row = 0, out_col = 1;
};
constexpr int kMaxPartialSumsSegments = 8;
// Every segment's sums in one launch (several kernels' partials, instead of a column_sum_final each)
void launch_sum_partials_into(const PartialSumsSegment* segments, int count, void* stream);

}  // namespace nala::ops::cuda
