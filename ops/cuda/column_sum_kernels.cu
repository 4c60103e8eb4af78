// Σ over the rows of a (R, C) matrix (parameters: column_sum_kernels.h). Stage 1: a block owns
// 32·V columns (a lane V = 16 bytes of them) and a range of rows; its 8 warps take every 8th row,
// four rows' loads in flight a lane, and add their float32 sums in warp order into the block's
// partial. Stage 2 (column_sum_final): a block owns 32 columns, its 8 warps take every 8th partial,
// eight loads in flight a lane, and the 8 warp sums are added in warp order. No atomics.
// partial_sums_many: stage 2 of several segments (other kernels' partials) in one launch, a block
// 32 columns of one segment, each column summed as column_sum_final sums it.
#include "ops/cuda/column_sum_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace nala::ops::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;  // rows a lane has in flight

template <typename T>
__device__ __forceinline__ void add_vec(const uint4& raw, float* acc) {
  constexpr int V = 16 / int(sizeof(T));
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] += float(e[i]);
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) column_sum_partial(const T* __restrict__ x, int64_t R, int C, int64_t rows_per_block,
                                                                  float* __restrict__ part) {
  constexpr int V = 16 / int(sizeof(T));
  __shared__ float sums[kWarps][32 * V];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c0 = (blockIdx.x * 32 + lane) * V;
  const bool active = c0 < C;
  const int64_t begin = int64_t(blockIdx.y) * rows_per_block, end = std::min<int64_t>(begin + rows_per_block, R);
  float acc[V];
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = 0;
  if (active) {
    int64_t r = begin + warp;
    for (; r + (kUnroll - 1) * kWarps < end; r += kUnroll * kWarps) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = *reinterpret_cast<const uint4*>(x + (r + u * kWarps) * C + c0);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) add_vec<T>(v[u], acc);
    }
    for (; r < end; r += kWarps) add_vec<T>(*reinterpret_cast<const uint4*>(x + r * C + c0), acc);
  }
#pragma unroll
  for (int i = 0; i < V; ++i) sums[warp][lane * V + i] = acc[i];
  __syncthreads();
  for (int j = threadIdx.x; j < 32 * V; j += blockDim.x) {
    const int c = blockIdx.x * 32 * V + j;
    if (c >= C) continue;
    float s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += sums[w][j];
    part[int64_t(blockIdx.y) * C + c] = s;
  }
}

// A thread a column adding all the partials in turn took 6-10 µs a launch (264 partials of 384
// columns: 2 blocks on 132 SMs, one dependent chain of loads a column; 50 launches a DiT-S/2 step,
// 0.3-0.5 ms, docs/benchmarks.md); 8 warps a column block shorten the chain 8 times.
__global__ void __launch_bounds__(kWarps * 32) column_sum_final(const float* __restrict__ part, int splits, int C, float* __restrict__ out) {
  __shared__ float sums[kWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = blockIdx.x * 32 + lane;
  float s = 0;
  if (c < C) {
#pragma unroll 8
    for (int k = warp; k < splits; k += kWarps) s += part[int64_t(k) * C + c];
  }
  sums[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && c < C) {
    float t = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += sums[w][lane];
    out[c] = t;
  }
}
unsigned final_blocks(int C) { return unsigned((C + 31) / 32); }

// The segments by value (a kernel parameter: no copy to the device), with each one's first block
struct PartialSumsTable {
  PartialSumsSegment seg[kMaxPartialSumsSegments];
  int first_block[kMaxPartialSumsSegments + 1];
  int count;
};
__global__ void __launch_bounds__(kWarps * 32) partial_sums_many(const PartialSumsTable t) {
  __shared__ float sums[kWarps][32];
  int s = 0;
  while (s + 1 < t.count && int(blockIdx.x) >= t.first_block[s + 1]) ++s;
  const PartialSumsSegment& g = t.seg[s];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = (int(blockIdx.x) - t.first_block[s]) * 32 + lane;
  float acc = 0;
  if (c < g.cols) {
#pragma unroll 8
    for (int k = warp; k < g.splits; k += kWarps) acc += g.part[int64_t(k) * g.ld + c];
  }
  sums[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && c < g.cols) {
    float total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += sums[w][lane];
    g.out[int64_t(c / g.width) * g.out_row + int64_t(c % g.width) * g.out_col] = total;
  }
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel ") + what + " failed to launch: " + cudaGetErrorString(e));
}

template <typename T>
void launch_typed(const ColumnSumParams& p, cudaStream_t st) {
  const dim3 grid(unsigned(p.col_blocks), unsigned(p.splits));
  column_sum_partial<T><<<grid, kWarps * 32, 0, st>>>(static_cast<const T*>(p.x), p.R, p.C, p.rows_per_block, p.part);
  check_launch("column_sum_partial");
  column_sum_final<<<final_blocks(p.C), kWarps * 32, 0, st>>>(p.part, p.splits, p.C, p.out);
  check_launch("column_sum_final");
}

}  // namespace

void column_sum_plan(ColumnSumParams& p, int sms) {
  const int V = 16 / p.element_size;
  p.col_blocks = (p.C + 32 * V - 1) / (32 * V);
  // about 4 blocks an SM in all, each with at least kWarps · kUnroll rows
  const int64_t max_splits = std::max<int64_t>(1, (p.R + kWarps * kUnroll - 1) / (kWarps * kUnroll));
  const int64_t want = std::max<int64_t>(1, (4 * sms + p.col_blocks - 1) / p.col_blocks);
  const int64_t splits0 = std::min<int64_t>(want, std::min<int64_t>(max_splits, 65535));
  p.rows_per_block = (p.R + splits0 - 1) / splits0;
  p.splits = int((p.R + p.rows_per_block - 1) / p.rows_per_block);
}

void launch_column_sum_final(const float* part, int splits, int C, float* out, void* stream) {
  column_sum_final<<<final_blocks(C), kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(part, splits, C, out);
  check_launch("column_sum_final");
}

void launch_sum_partials_into(const PartialSumsSegment* segments, int count, void* stream) {
  if (count < 1 || count > kMaxPartialSumsSegments)
    throw std::runtime_error("launch_sum_partials_into: " + std::to_string(count) + " segments (1 to " + std::to_string(kMaxPartialSumsSegments) + ")");
  PartialSumsTable t{};
  t.count = count;
  int blocks = 0;
  for (int i = 0; i < count; ++i) {
    const PartialSumsSegment& g = segments[i];
    if (g.splits < 1 || g.cols < 1 || g.width < 1 || g.cols % g.width != 0 || g.ld < g.cols)
      throw std::runtime_error("launch_sum_partials_into: segment " + std::to_string(i) + " has " + std::to_string(g.splits) + " partials of " +
                               std::to_string(g.cols) + " columns " + std::to_string(g.ld) + " floats apart in rows of " + std::to_string(g.width));
    t.seg[i] = g;
    t.first_block[i] = blocks;
    blocks += int(final_blocks(g.cols));
  }
  t.first_block[count] = blocks;
  partial_sums_many<<<unsigned(blocks), kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(t);
  check_launch("partial_sums_many");
}

void launch_column_sum(const ColumnSumParams& p, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.element_size == 4) launch_typed<float>(p, st);
  else if (p.bf16) launch_typed<__nv_bfloat16>(p, st);
  else launch_typed<__half>(p, st);
}

}  // namespace nala::ops::cuda
