// One pass from P strided (B, N, H, d) gradients into the contiguous (B, N, P, H, d) gradient of
// the projection output they were split from: 16-byte vectors, one thread a vector, destination in
// order (coalesced writes; each source row of d elements is one contiguous run). The summing form
// also adds each destination column over the rows (the projection's bias gradient) on the way.
#include "ops/cuda/gather_heads.h"

#include "ops/cuda/column_sum_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace nala::ops::cuda {
namespace {

// a + b for one 16-byte vector of T, in float, rounded once (as autograd's sum of the two gradients)
template <typename T>
__device__ __forceinline__ uint4 add_vec(uint4 a, uint4 b) {
  constexpr int n = 16 / int(sizeof(T));
  const T* x = reinterpret_cast<const T*>(&a);
  const T* y = reinterpret_cast<const T*>(&b);
  uint4 r;
  T* z = reinterpret_cast<T*>(&r);
#pragma unroll
  for (int i = 0; i < n; ++i) z[i] = T(float(x[i]) + float(y[i]));
  return r;
}
template <>
__device__ __forceinline__ uint4 add_vec<float>(uint4 a, uint4 b) {
  const float4 x = *reinterpret_cast<const float4*>(&a), y = *reinterpret_cast<const float4*>(&b);
  const float4 z = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  return *reinterpret_cast<const uint4*>(&z);
}

// Destination vector v of head h, part `part`, at (b, n): the part's gradient (or zero where it has
// none) with the repeated part's second gradient added (or alone where src is absent). Shared by the
// plain gather and the summing one.
__device__ __forceinline__ uint4 gathered(const GatherHeadsParams& p, int part, int h, int v, int64_t b, int n) {
  uint4 val = make_uint4(0, 0, 0, 0);
  const char* src = static_cast<const char*>(p.src[part]);
  if (src) {
    const int64_t off = (b * p.stride[part][0] + n * p.stride[part][1] + h * p.stride[part][2]) * p.element_size + int64_t(v) * 16;
    val = *reinterpret_cast<const uint4*>(src + off);
  }
  if (part == p.extra_part) {
    const int64_t off = (b * p.extra_stride[0] + n * p.extra_stride[1] + h * p.extra_stride[2]) * p.element_size + int64_t(v) * 16;
    const uint4 e = *reinterpret_cast<const uint4*>(static_cast<const char*>(p.extra) + off);
    if (!src) val = e;
    else if (p.dtype == GatherHeadsParams::Dtype::f32) val = add_vec<float>(val, e);
    else if (p.dtype == GatherHeadsParams::Dtype::bf16) val = add_vec<__nv_bfloat16>(val, e);
    else val = add_vec<__half>(val, e);
  }
  return val;
}

// Index: the type of the destination's vector index, 32-bit where every index fits (the four
// divisions that take it apart are then 32-bit ones, not the many-instruction 64-bit emulation)
template <typename Index>
__global__ void gather_heads_kernel(GatherHeadsParams p, Index vecs, int vec_per_row) {
  const Index i = Index(blockIdx.x) * Index(blockDim.x) + Index(threadIdx.x);
  if (i >= vecs) return;
  // destination order: (b, n, part, h, vector in d)
  Index r = i / Index(vec_per_row);
  const int v = int(i - r * Index(vec_per_row));
  const int h = int(r % Index(p.H));
  r /= Index(p.H);
  const int part = int(r % Index(p.P));
  r /= Index(p.P);
  const int n = int(r % Index(p.N));
  const int64_t b = int64_t(r / Index(p.N));
  reinterpret_cast<uint4*>(p.dst)[i] = gathered(p, part, h, v, b, n);
}

// The vector's 16 / sizeof(T) values added to acc (float)
template <typename T>
__device__ __forceinline__ void add_to(float* acc, const uint4& raw) {
  constexpr int n = 16 / int(sizeof(T));
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < n; ++i) acc[i] += float(e[i]);
}

constexpr int kSumUnroll = 4;  // rows a thread has in flight

// A thread owns one 16-byte destination vector column c of the (R, C) destination and walks its
// block's rows, kSumUnroll rows' loads in flight: the gather's stores as gather_heads_kernel's, and the
// column's float32 sum over the rows, written to part (blockIdx.y, C)
// GROUPED: the kSumUnroll rows' loads issued as one group (the part's, then the repeated part's second
// gradient's), and only then added and stored: gathered()'s branches per row (a part without gradient,
// the repeated part, the dtype) kept each row's loads behind the previous row's add in the PTX, so a
// thread of the repeated part (NaLa's v) waited one memory latency a row. The same values, bit for bit.
template <typename T, bool GROUPED>
__global__ void gather_heads_sum_kernel(GatherHeadsParams p, int vec_per_row, int64_t R, int64_t rows_per_block, float* __restrict__ part) {
  constexpr int V = 16 / int(sizeof(T));
  const int row_vecs = p.P * p.H * vec_per_row;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= row_vecs) return;  // no barrier below
  const int part_i = c / (p.H * vec_per_row), rem = c - part_i * p.H * vec_per_row;
  const int h = rem / vec_per_row, v = rem - h * vec_per_row;
  const int64_t begin = int64_t(blockIdx.y) * rows_per_block, end = min(begin + rows_per_block, R);
  uint4* dst = reinterpret_cast<uint4*>(p.dst);
  float acc[V];
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = 0.f;
  int64_t b = begin / p.N;
  int n = int(begin - b * p.N);
  int64_t r = begin;
  for (; r + kSumUnroll <= end; r += kSumUnroll) {
    uint4 val[kSumUnroll];
    if constexpr (GROUPED) {
      const char* src = static_cast<const char*>(p.src[part_i]);
      const char* extra = part_i == p.extra_part ? static_cast<const char*>(p.extra) : nullptr;
      int64_t src_off[kSumUnroll], extra_off[kSumUnroll];  // byte offsets of the rows' vectors
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) {
        src_off[u] = (b * p.stride[part_i][0] + n * p.stride[part_i][1] + h * p.stride[part_i][2]) * p.element_size + int64_t(v) * 16;
        extra_off[u] = (b * p.extra_stride[0] + n * p.extra_stride[1] + h * p.extra_stride[2]) * p.element_size + int64_t(v) * 16;
        if (++n == p.N) n = 0, ++b;
      }
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) val[u] = make_uint4(0, 0, 0, 0);
      if (src)
#pragma unroll
        for (int u = 0; u < kSumUnroll; ++u) val[u] = *reinterpret_cast<const uint4*>(src + src_off[u]);
      if (extra) {
        uint4 e[kSumUnroll];
#pragma unroll
        for (int u = 0; u < kSumUnroll; ++u) e[u] = *reinterpret_cast<const uint4*>(extra + extra_off[u]);
#pragma unroll
        for (int u = 0; u < kSumUnroll; ++u) val[u] = src ? add_vec<T>(val[u], e[u]) : e[u];  // as gathered()
      }
    } else {
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) {
        val[u] = gathered(p, part_i, h, v, b, n);
        if (++n == p.N) n = 0, ++b;
      }
    }
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) {
      dst[(r + u) * row_vecs + c] = val[u];
      add_to<T>(acc, val[u]);
    }
  }
  for (; r < end; ++r) {
    const uint4 val = gathered(p, part_i, h, v, b, n);
    if (++n == p.N) n = 0, ++b;
    dst[r * row_vecs + c] = val;
    add_to<T>(acc, val);
  }
  const int C = row_vecs * V;
#pragma unroll
  for (int i = 0; i < V; ++i) part[int64_t(blockIdx.y) * C + int64_t(c) * V + i] = acc[i];
}

int sum_threads(int row_vecs) { return std::min(256, (row_vecs + 31) / 32 * 32); }

}  // namespace

GatherSumPlan gather_heads_sum_plan(const GatherHeadsParams& p, int sms) {
  const int row_vecs = p.P * p.H * (p.d * p.element_size / 16);
  const int threads = sum_threads(row_vecs);
  const int col_blocks = (row_vecs + threads - 1) / threads;
  const int64_t R = int64_t(p.B) * p.N;
  // about 4 blocks an SM in all, each with at least 8 · kSumUnroll rows (8 and 16 were slower on an H100,
  // docs/benchmarks.md, thirty-second session)
  const int64_t max_splits = std::max<int64_t>(1, (R + 8 * kSumUnroll - 1) / (8 * kSumUnroll));
  const int64_t want = std::max<int64_t>(1, (4 * int64_t(sms) + col_blocks - 1) / col_blocks);
  const int64_t splits0 = std::min<int64_t>(want, std::min<int64_t>(max_splits, 65535));
  GatherSumPlan plan;
  plan.rows_per_block = std::max<int64_t>(1, (R + splits0 - 1) / splits0);
  plan.splits = int(std::max<int64_t>(1, (R + plan.rows_per_block - 1) / plan.rows_per_block));
  return plan;
}

void launch_gather_heads_sum(const GatherHeadsParams& p, const GatherSumPlan& plan, float* part, float* out, void* stream) {
  const int vec_per_row = p.d * p.element_size / 16;
  const int row_vecs = p.P * p.H * vec_per_row;
  const int64_t R = int64_t(p.B) * p.N;
  const int C = row_vecs * (16 / p.element_size);
  if (R == 0) {
    if (cudaMemsetAsync(out, 0, sizeof(float) * size_t(C), cudaStream_t(stream)) != cudaSuccess)
      throw std::runtime_error("nala CUDA gather_heads_sum: clearing the sums failed");
    return;
  }
  const int threads = sum_threads(row_vecs);
  const dim3 grid(unsigned((row_vecs + threads - 1) / threads), unsigned(plan.splits));
  auto launch = [&](auto grouped) {
    constexpr bool G = decltype(grouped)::value;
    if (p.element_size == 4)
      gather_heads_sum_kernel<float, G><<<grid, threads, 0, cudaStream_t(stream)>>>(p, vec_per_row, R, plan.rows_per_block, part);
    else if (p.dtype == GatherHeadsParams::Dtype::bf16)
      gather_heads_sum_kernel<__nv_bfloat16, G><<<grid, threads, 0, cudaStream_t(stream)>>>(p, vec_per_row, R, plan.rows_per_block, part);
    else
      gather_heads_sum_kernel<__half, G><<<grid, threads, 0, cudaStream_t(stream)>>>(p, vec_per_row, R, plan.rows_per_block, part);
  };
  if (plan.grouped) launch(std::true_type{});
  else launch(std::false_type{});
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel gather_heads_sum failed to launch: ") + cudaGetErrorString(e));
  launch_column_sum_final(part, plan.splits, C, out, stream);
}

void launch_gather_heads(const GatherHeadsParams& p, void* stream) {
  const int vec_per_row = p.d * p.element_size / 16;
  const int64_t vecs = int64_t(p.B) * p.N * p.P * p.H * vec_per_row;
  if (vecs == 0) return;
  const int threads = 256;
  const unsigned blocks = unsigned((vecs + threads - 1) / threads);
  if (vecs <= int64_t(UINT32_MAX) - threads)
    gather_heads_kernel<uint32_t><<<blocks, threads, 0, cudaStream_t(stream)>>>(p, uint32_t(vecs), vec_per_row);
  else
    gather_heads_kernel<uint64_t><<<blocks, threads, 0, cudaStream_t(stream)>>>(p, uint64_t(vecs), vec_per_row);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel gather_heads failed to launch: ") + cudaGetErrorString(e));
}

}  // namespace nala::ops::cuda
