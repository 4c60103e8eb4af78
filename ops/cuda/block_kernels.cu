// Fused DiT block kernels: LayerNorm + adaLN modulate, and the gated residual, forward and
// backward. One warp a row (a token's D channels); a lane holds 4·NV channels in registers. The
// backward kernels also sum the per-sample vectors' gradients over tokens: each block sums its
// chunk of one sample's tokens and writes one partial (no atomics: deterministic).
// CPU counterpart and formulas: ops/block_ops.cpp.
#include "ops/cuda/block_kernels.h"

#include "ops/cuda/cp_async.cuh"
#include "ops/cuda/fp8_rows.cuh"
#include "ops/cuda/gelu.cuh"
#include "ops/cuda/persistent_grid.h"
#include "ops/cuda/vec_io.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace nala::ops::cuda {
namespace {

constexpr int kWarps = 4;  // warps a block

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel ") + what + " failed to launch: " + cudaGetErrorString(e));
}

using namespace nala::cuda_vec;   // load4, store4, warp_sum
using namespace nala::cuda_gelu;  // gelu_tanh, gelu_tanh_grad
using namespace nala::cuda_fp8_rows;  // row_scale, row_inv_scale, to_e4m3x2, round_to, warp_max (ln_modulate_quantize)
using namespace nala::cuda_async;     // cp_async, cp_async_commit, cp_async_wait (residual_ln_modulate_staged)

// Sums acc (kWarps warps × D columns, in shared memory) over the warps in warp order and writes
// the block's partial for sample n, chunk c.
__device__ __forceinline__ void write_partial(const float* sm, float* part, int64_t n, int c, int chunks, int D) {
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += sm[w * D + d];
    part[(n * chunks + c) * D + d] = s;
  }
}

// Four channels d … d+3 of sample n's per-sample vector (block_kernels.h SampleVec), in float: a
// bf16 or fp16 chunk converts exactly, as its float32 copy would.
__device__ __forceinline__ void load_sample4(const SampleVec& v, int64_t n, int d, float (&o)[4]) {
  const int64_t i = n * v.stride + d;
  if (v.type == DType::BF16) load4(static_cast<const __nv_bfloat16*>(v.p) + i, o);
  else if (v.type == DType::F16) load4(static_cast<const __half*>(v.p) + i, o);
  else load4(static_cast<const float*>(v.p) + i, o);
}


// o = (o − μ)·r·(1 + scale) + shift with sample vectors of one type V (their row's start);
// SCALE1: `scale` already holds the floats 1 + scale (the same product, one addition fewer a value)
template <typename V, int NV, bool SCALE1 = false>
__device__ __forceinline__ void modulate_with(float (&o)[NV][4], const V* __restrict__ shift, const V* __restrict__ scale, int D4, int lane,
                                              float mean, float rstd) {
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = clamped_vec(lane, j, D4);
    float sc[4], sh[4];
    load4(scale + 4 * c, sc);
    load4(shift + 4 * c, sh);
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = (o[j][e] - mean) * rstd * (SCALE1 ? sc[e] : 1.0f + sc[e]) + sh[e];
  }
}

// ---- LayerNorm + modulate ----
// One warp's row already in float registers o (lane holds channels 4·(lane + 32j) … +3), in place:
// o = (o − μ)·r·(1 + scale) + shift, μ and r = 1/√(var + eps) of the row. o's registers past the
// row's end (D4 < 32·NV) hold no channel: never summed, never stored.
template <int NV>
__device__ __forceinline__ void row_stats(const float (&o)[NV][4], int D, float eps, int lane, float& mean, float& rstd) {
  const int D4 = D / 4;
  float s = 0;
#pragma unroll
  for (int j = 0; j < NV; ++j)
    if (lane + 32 * j < D4) s += o[j][0] + o[j][1] + o[j][2] + o[j][3];
  mean = warp_sum(s) / float(D);
  float q = 0;
#pragma unroll
  for (int j = 0; j < NV; ++j)
    if (lane + 32 * j < D4)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float d = o[j][e] - mean;
        q += d * d;
      }
  rstd = rsqrtf(warp_sum(q) / float(D) + eps);  // biased variance, as nn.LayerNorm
}

template <int NV>
__device__ __forceinline__ void modulate_row(float (&o)[NV][4], const SampleVec& shift, const SampleVec& scale, int64_t n,
                                             int D, float eps, int lane, float& mean, float& rstd) {
  const int D4 = D / 4;
  row_stats<NV>(o, D, eps, lane, mean, rstd);
  // one switch on the vectors' type, outside the loads (adaLN's chunks: one type)
  if (shift.type == scale.type && shift.type == DType::BF16)
    modulate_with<__nv_bfloat16, NV>(o, static_cast<const __nv_bfloat16*>(shift.p) + n * shift.stride,
                                     static_cast<const __nv_bfloat16*>(scale.p) + n * scale.stride, D4, lane, mean, rstd);
  else if (shift.type == scale.type && shift.type == DType::F16)
    modulate_with<__half, NV>(o, static_cast<const __half*>(shift.p) + n * shift.stride, static_cast<const __half*>(scale.p) + n * scale.stride, D4,
                              lane, mean, rstd);
  else if (shift.type == scale.type)
    modulate_with<float, NV>(o, static_cast<const float*>(shift.p) + n * shift.stride, static_cast<const float*>(scale.p) + n * scale.stride, D4,
                             lane, mean, rstd);
  else
#pragma unroll
    for (int j = 0; j < NV; ++j) {  // two types: slower, not a layout the models make
      const int c = clamped_vec(lane, j, D4);
      float sc[4], sh[4];
      load_sample4(scale, n, 4 * c, sc);
      load_sample4(shift, n, 4 * c, sh);
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] = (o[j][e] - mean) * rstd * (1.0f + sc[e]) + sh[e];
    }
}

// The row of x loaded and modulated (modulate_row): shared by the forward, which stores o, and the
// FP8 forward, which quantizes it: the same float o in both.
template <typename TX, int NV>
__device__ __forceinline__ void ln_modulate_row(const TX* __restrict__ x, const SampleVec& shift, const SampleVec& scale,
                                                int64_t row, int64_t n, int D, float eps, int lane, float (&o)[NV][4], float& mean,
                                                float& rstd) {
#pragma unroll
  for (int j = 0; j < NV; ++j) load4(x + row * D + 4 * clamped_vec(lane, j, D / 4), o[j]);
  modulate_row<NV>(o, shift, scale, n, D, eps, lane, mean, rstd);
}

template <typename TO, int NV>
__device__ __forceinline__ void store_row(TO* __restrict__ out, const float (&o)[NV][4], int64_t row, int D, int lane) {
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = lane + 32 * j;
    if (c < D / 4) store4(out + row * D + 4 * c, o[j]);
  }
}

// FP8 sampling: o rounded to TO (what storing it in TO would keep) and quantized to e4m3 for the next
// GEMM (ops/cuda/fp8_rows.cuh): the bytes and scale quantize_rows gives the row stored in TO.
template <typename TO, int NV>
__device__ __forceinline__ void store_row_e4m3(uint8_t* __restrict__ q, float* __restrict__ qscale, float (&o)[NV][4], int64_t row, int D,
                                               int lane) {
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < NV; ++j)
    if (lane + 32 * j < D / 4) {
      round4(o[j], TO{});  // round_to<TO> of each value, a pair at a time
#pragma unroll
      for (int e = 0; e < 4; ++e) amax = max_nan(amax, fabsf(o[j][e]));
    }
  amax = warp_max(amax);
  if (lane == 0) qscale[row] = row_scale(amax);
  const float inv_s = row_inv_scale(amax);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = lane + 32 * j;
    if (c < D / 4)
      *reinterpret_cast<uint32_t*>(q + row * D + 4 * c) =
          uint32_t(to_e4m3x2(o[j][0], o[j][1], inv_s)) | uint32_t(to_e4m3x2(o[j][2], o[j][3], inv_s)) << 16;
  }
}

template <typename TX, typename TO, int NV>
__global__ void __launch_bounds__(kWarps * 32) ln_modulate_fwd(const TX* __restrict__ x, const SampleVec shift, const SampleVec scale,
                                                                 TO* __restrict__ out,
                                                                 float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                                                 int64_t rows, int64_t T, int D, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= rows) return;
  float o[NV][4], mean, rstd;
  ln_modulate_row<TX, NV>(x, shift, scale, row, row / T, D, eps, lane, o, mean, rstd);
  store_row<TO, NV>(out, o, row, D, lane);
  if (mean_out && lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// FP8 sampling: the bytes and scales of quantize_rows(ln_modulate(x)) bit for bit, one read of x and
// one e4m3 write (o never written in TO).
template <typename TX, typename TO, int NV>
__global__ void __launch_bounds__(kWarps * 32) ln_modulate_quantize_fwd(const TX* __restrict__ x, const SampleVec shift, const SampleVec scale,
                                                                          uint8_t* __restrict__ q,
                                                                          float* __restrict__ qscale, int64_t rows, int64_t T, int D, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= rows) return;
  float o[NV][4], mean, rstd;
  ln_modulate_row<TX, NV>(x, shift, scale, row, row / T, D, eps, lane, o, mean, rstd);
  store_row_e4m3<TO, NV>(q, qscale, o, row, D, lane);
}

// o = x + gate·y of one row, gate of type V (the sample's vector), loads issued before use (clamped_vec)
template <typename TX, typename TY, typename V, int NV>
__device__ __forceinline__ void gated_row(const TX* __restrict__ x, const TY* __restrict__ y, const V* __restrict__ gate, int64_t row, int D,
                                          int lane, float (&o)[NV][4]) {
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = clamped_vec(lane, j, D / 4);
    float b[4], g[4];
    load4(x + row * D + 4 * c, o[j]);
    load4(y + row * D + 4 * c, b);
    load4(gate + 4 * c, g);
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] += g[e] * b[e];
  }
}

// The residual r = o stored in T, and o rounded to T in place: what ln_modulate_fwd would read back
template <typename T, int NV>
__device__ __forceinline__ void store_residual(T* __restrict__ res, float (&o)[NV][4], int64_t row, int D, int lane) {
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = lane + 32 * j;
    if (c < D / 4) store4_rounded(res + row * D + 4 * c, o[j]);
  }
}

// gated_row with one switch on the gate's type
template <typename TX, typename TY, int NV>
__device__ __forceinline__ void gated_row_any(const TX* __restrict__ x, const TY* __restrict__ y, const SampleVec& gate, int64_t n, int64_t row,
                                              int D, int lane, float (&o)[NV][4]) {
  if (gate.type == DType::BF16) gated_row<TX, TY, __nv_bfloat16, NV>(x, y, static_cast<const __nv_bfloat16*>(gate.p) + n * gate.stride, row, D, lane, o);
  else if (gate.type == DType::F16) gated_row<TX, TY, __half, NV>(x, y, static_cast<const __half*>(gate.p) + n * gate.stride, row, D, lane, o);
  else gated_row<TX, TY, float, NV>(x, y, static_cast<const float*>(gate.p) + n * gate.stride, row, D, lane, o);
}

// Training: r = x + gate·y in TX (y in TY: bf16 branch outputs onto a float32 residual stream under
// autocast), the LayerNorm-modulate of r in TO, and the row's mean and 1/σ for the backward, in one
// pass: gated_residual_fwd then ln_modulate_fwd bit for bit (r rounded to TX before the statistics,
// as ln_modulate_fwd reads it back), with one read of r fewer (ops/block_ops.h
// gated_residual_layer_norm_modulate under autograd).
template <typename TX, typename TY, typename TO, int NV>
__global__ void __launch_bounds__(kWarps * 32) residual_ln_modulate_train_fwd(const TX* __restrict__ x, const TY* __restrict__ y, const SampleVec gate,
                                                                                const SampleVec shift, const SampleVec scale, TX* __restrict__ res,
                                                                                TO* __restrict__ out, float* __restrict__ mean_out,
                                                                                float* __restrict__ rstd_out, int64_t rows, int64_t tokens, int D,
                                                                                float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t n = row / tokens;
  float o[NV][4], mean, rstd;
  gated_row_any<TX, TY, NV>(x, y, gate, n, row, D, lane, o);
  store_residual<TX, NV>(res, o, row, D, lane);
  modulate_row<NV>(o, shift, scale, n, D, eps, lane, mean, rstd);
  store_row<TO, NV>(out, o, row, D, lane);
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Sampling: the gated residual r = x + gate·y (stored in T, as gated_residual_fwd computes and rounds
// it) and the next LayerNorm-modulate of r in the same pass, from r's rounded values in registers:
// out (or, with q, its e4m3 rows) bit for bit what gated_residual_fwd then ln_modulate_fwd (then
// quantize_rows) give, with one read of r fewer.
template <typename T, int NV, bool QUANT>
__global__ void __launch_bounds__(kWarps * 32) residual_ln_modulate_fwd(const T* __restrict__ x, const T* __restrict__ y, const SampleVec gate,
                                                                          const SampleVec shift, const SampleVec scale,
                                                                          T* __restrict__ res, T* __restrict__ out, uint8_t* __restrict__ q,
                                                                          float* __restrict__ qscale, int64_t rows, int64_t tokens, int D, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t n = row / tokens;
  float o[NV][4];
  // o = x + gate·y (gated_residual_fwd's arithmetic), every load issued before the first use
  // (clamped_vec); one switch on the gate's type
  gated_row_any<T, T, NV>(x, y, gate, n, row, D, lane, o);
  store_residual<T, NV>(res, o, row, D, lane);
  float mean, rstd;
  modulate_row<NV>(o, shift, scale, n, D, eps, lane, mean, rstd);
  if constexpr (QUANT) store_row_e4m3<T, NV>(q, qscale, o, row, D, lane);
  else store_row<T, NV>(out, o, row, D, lane);
}

// The same pass as a persistent grid that stages rows by cp.async (NALA_RESIDUAL_NORM_STAGED=1, the default,
// ops/fused_ops.h): block b owns rows [b·chunk, (b+1)·chunk) with chunk ≤ tokens, so at most two
// samples, whose gate, shift and scale it converts to float into shared memory once (exactly, as
// load4 converts them); its warps take the rows in turn, and each warp copies its next row's x and y
// into shared memory while it computes the current one (kStagedRows rows a warp in shared memory;
// each lane copies and reads back only its own 4-element vectors, so the copies need no barrier).
// The arithmetic is residual_ln_modulate_fwd's, in the same order: the same bits. residual_ln_modulate_fwd
// ran at 65 % (bf16) and 53 % (fp8) of DRAM bandwidth on the H200, 88 and 96 µs for DiT-XL/2's
// 32,768 rows of 1,152 (twenty-second session, docs/benchmarks.md): a warp loads its row, reduces it
// and then loads shift and scale from L2, one latency after another. This kernel: 84–87 µs (bf16),
// 85–87 µs (fp8) (twenty-third session); 81 and 74 µs with FULL (below; twenty-fifth session).
constexpr int kStagedWarps = 8;  // warps a block
constexpr int kStagedRows = 2;   // rows a warp has in shared memory: the one computed and the next in flight

// FULL: D = 128·NV, every lane's NV vectors in the row, and D a constant, so the guards, the branches
// around each vector and the index arithmetic compile away (sampling's issue-bound instruction count:
// ≈ 1,470 warp instructions a row of 1,152 before, Nsight Compute, twenty-fifth session); the same
// arithmetic, so the same bits. The shared vectors hold gate, shift and 1 + scale: modulate_with's
// 1.0f + sc, rounded once instead of at every row.
template <typename T, int NV, bool QUANT, bool FULL>
__global__ void __launch_bounds__(kStagedWarps * 32) residual_ln_modulate_staged(const T* __restrict__ x, const T* __restrict__ y, const SampleVec gate,
                                                                                 const SampleVec shift, const SampleVec scale, T* __restrict__ res,
                                                                                 T* __restrict__ out, uint8_t* __restrict__ q, float* __restrict__ qscale,
                                                                                 int64_t rows, int64_t tokens, int D_arg, float eps, int64_t chunk) {
  extern __shared__ float4 staged_smem[];
  float* vecs = reinterpret_cast<float*>(staged_smem);  // (2 samples, 3, D): gate, shift, 1 + scale in float
  constexpr int W = kStagedWarps;
  const int D = FULL ? 128 * NV : D_arg;  // the launcher takes FULL only where D_arg = 128·NV
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, D4 = D / 4;
  T* stage = reinterpret_cast<T*>(vecs + 6 * D) + int64_t(warp) * kStagedRows * 2 * D;  // this warp's (kStagedRows, 2, D): x, y
  const int64_t row0 = int64_t(blockIdx.x) * chunk, row_end = min(rows, row0 + chunk);
  auto copy_row = [&](int64_t row, int s) {  // this lane's vectors of row's x and y into stage s (an empty group past the end)
    if (row < row_end) {
      T* sx = stage + s * 2 * D;
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        const int c = lane + 32 * j;
        if (FULL || c < D4) {
          cp_async<4 * sizeof(T)>(sx + 4 * c, x + row * D + 4 * c);
          cp_async<4 * sizeof(T)>(sx + D + 4 * c, y + row * D + 4 * c);
        }
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kStagedRows - 1; ++s) copy_row(row0 + warp + s * W, s);
  // the block's samples' vectors, while the first rows are in flight (chunk ≤ tokens: one or two samples)
  const int64_t n0 = row0 / tokens;
  const int samples = int((row_end - 1) / tokens - n0) + 1;
  for (int i = threadIdx.x; i < samples * D4; i += blockDim.x) {
    const int k = i / D4, c = i - k * D4;
    float v[4];
    load_sample4(gate, n0 + k, 4 * c, v);
    store4(vecs + (3 * k) * D + 4 * c, v);
    load_sample4(shift, n0 + k, 4 * c, v);
    store4(vecs + (3 * k + 1) * D + 4 * c, v);
    load_sample4(scale, n0 + k, 4 * c, v);
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = 1.0f + v[e];  // modulate_with's factor, the same float
    store4(vecs + (3 * k + 2) * D + 4 * c, v);
  }
  __syncthreads();
  const int64_t second = (n0 + 1) * tokens;  // the block's second sample's first row (no 64-bit division a row)
  int s = 0;
  for (int64_t row = row0 + warp; row < row_end; row += W) {
    copy_row(row + (kStagedRows - 1) * W, s == 0 ? kStagedRows - 1 : s - 1);  // the stage this warp read last row
    cp_async_wait<kStagedRows - 1>();                                           // this row's copies have landed
    const T* sx = stage + s * 2 * D;
    const float* g = vecs + (row < second ? 0 : 3 * D);  // (3, D): gate, shift, 1 + scale of row's sample
    float o[NV][4];
#pragma unroll
    for (int j = 0; j < NV; ++j) {  // o = x + gate·y, gated_row's arithmetic
      const int c = lane + 32 * j;
      if (FULL || c < D4) {
        float b[4], gv[4];
        load4(sx + 4 * c, o[j]);
        load4(sx + D + 4 * c, b);
        load4(g + 4 * c, gv);
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] += gv[e] * b[e];
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] = 0.f;  // no channel: never summed, never stored
      }
    }
    store_residual<T, NV>(res, o, row, D, lane);
    float mean, rstd;
    row_stats<NV>(o, D, eps, lane, mean, rstd);
    modulate_with<float, NV, true>(o, g + D, g + 2 * D, D4, lane, mean, rstd);
    if constexpr (QUANT) store_row_e4m3<T, NV>(q, qscale, o, row, D, lane);
    else store_row<T, NV>(out, o, row, D, lane);
    s = s + 1 == kStagedRows ? 0 : s + 1;
  }
  cp_async_wait<0>();  // never leave a copy in flight (the groups past the end are empty)
}

// The gated residual's backward folded into the LayerNorm-modulate's (training's one operation,
// ops/block_ops.cpp GatedResidualLayerNormModulateFn, where x = res = x₀ + gate·y): with d the row's dx
// as stored (in TX), dy = d·gate (in TY) and dgate = Σ_T d·y, gated_residual_bwd's arithmetic on the
// same rows in the same order, so the same bits, and dx not read back.
// dy_part (optional, NV ≤ 6 only): Σ_T dy as stored, per (sample, chunk) as dgate's: the bias
// gradient of the layer whose output y is (ops/offered_sums.h), instead of a column sum over dy.
template <typename TY>
struct GateBackward {
  const TY* y = nullptr;
  SampleVec gate;
  TY* dy = nullptr;
  float* dgate_part = nullptr;
  float* dy_part = nullptr;
};

// x̂ = (x − μ)·r, g = dout·(1 + scale): dx = r·(g − mean(g) − x̂·mean(g·x̂)), dscale = Σ_T dout·x̂,
// dshift = Σ_T dout (ops/block_ops.cpp derives them); dres, where given, is added to dx.
// GATED: the gated residual's backward too (GateBackward); its dgate sums sit in registers up to
// NV 6 and in shared memory past it (registers: NV 9 already holds ≈ 5·36 floats a lane).
// NV ≤ 3: 4 blocks an SM asked for (128 registers). With dy's sums the bf16 kernel needed 148 and ran
// 3 blocks an SM; capped, it holds 128 without spilling (ptxas, sm_90; the fp16 and float32 variants,
// already past 128 before the sums, spill 24 bytes).
template <typename TX, typename TO, int NV, typename TY = TO, bool GATED = false>
__global__ void __launch_bounds__(kWarps * 32, NV <= 3 ? 4 : 1) ln_modulate_bwd(const TO* __restrict__ dout, const TX* __restrict__ x,
                                                                 const float* __restrict__ mean_in, const float* __restrict__ rstd_in,
                                                                 const SampleVec scale, const TX* __restrict__ dres, TX* __restrict__ dx,
                                                                 float* __restrict__ dscale_part, float* __restrict__ dshift_part,
                                                                 int64_t T, int D, int rows_per_chunk, int chunks, const GateBackward<TY> gb) {
  extern __shared__ float sm[];  // (kWarps, D); GATED past NV 6: then the dgate sums (kWarps, D)
  constexpr bool kGateRegs = NV <= 6;
  constexpr bool kEarlyY = GATED && NV <= 3;  // y's loads with x's and dout's where the registers allow
  float* sm_gate = sm + kWarps * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = blockIdx.y;
  const int chunk = blockIdx.x;
  const int D4 = D / 4;
  float acc_scale[NV][4] = {}, acc_shift[NV][4] = {};
  float acc_gate[GATED && kGateRegs ? NV : 1][4] = {};
  float acc_dy[GATED && kGateRegs ? NV : 1][4] = {};  // Σ dy as stored, where gb.dy_part asks
  if constexpr (GATED && !kGateRegs) {
    // each lane clears, adds to and (before the barrier at the end) leaves only its own channels of its
    // warp's row: no other thread touches them before that barrier
    const float zero[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NV; ++j)
      if (lane + 32 * j < D4) store4(sm_gate + warp * D + 4 * (lane + 32 * j), zero);
  }
  float sc[NV][4];
#pragma unroll
  for (int j = 0; j < NV; ++j) load_sample4(scale, n, 4 * clamped_vec(lane, j, D4), sc[j]);
  const int64_t t_end = T < int64_t(chunk + 1) * rows_per_chunk ? T : int64_t(chunk + 1) * rows_per_chunk;
  for (int64_t t = int64_t(chunk) * rows_per_chunk + warp; t < t_end; t += kWarps) {
    const int64_t row = n * T + t;
    const float mu = mean_in[row], r = rstd_in[row];
    float xh[NV][4], g[NV][4];
    // every vector's x and dout loads issued before the first is used (clamped_vec: no branch between
    // them; a guard around each vector's loads made each wait for the previous one's, as the forward
    // kernels did before the nineteenth session), and the residual gradient with them (before the
    // reductions, not after: one memory latency a row instead of two) where the registers allow it
    constexpr bool kEarlyRes = NV <= 6;
    float res[kEarlyRes ? NV : 1][4];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int c = clamped_vec(lane, j, D4);
      load4(x + row * D + 4 * c, xh[j]);
      load4(dout + row * D + 4 * c, g[j]);  // dout, scaled into g below
    }
    if (kEarlyRes && dres)
#pragma unroll
      for (int j = 0; j < NV; ++j) load4(dres + row * D + 4 * clamped_vec(lane, j, D4), res[kEarlyRes ? j : 0]);
    float yv[kEarlyY ? NV : 1][4];
    if constexpr (kEarlyY)
#pragma unroll
      for (int j = 0; j < NV; ++j) load4(gb.y + row * D + 4 * clamped_vec(lane, j, D4), yv[j]);
    float sg = 0, sgx = 0;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const bool valid = lane + 32 * j < D4;  // a clamped vector re-read: never summed, never stored
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float dy = g[j][e];
        xh[j][e] = (xh[j][e] - mu) * r;
        g[j][e] = dy * (1.0f + sc[j][e]);
        if (valid) {
          sg += g[j][e];
          sgx += g[j][e] * xh[j][e];
        }
        acc_scale[j][e] += dy * xh[j][e];
        acc_shift[j][e] += dy;
      }
    }
    const float mg = warp_sum(sg) / float(D), mgx = warp_sum(sgx) / float(D);
#pragma unroll
    for (int j = 0; j < NV; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) g[j][e] = r * (g[j][e] - mg - xh[j][e] * mgx);  // dx of the LayerNorm; x̂ is dead from here
    if (dres) {
      if constexpr (kEarlyRes) {
#pragma unroll
        for (int j = 0; j < NV; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) g[j][e] += res[j][e];
      } else {  // the row's residual gradient now, every vector's load issued before the first add (x̂'s registers are free)
        float a[NV][4];
#pragma unroll
        for (int j = 0; j < NV; ++j) load4(dres + row * D + 4 * clamped_vec(lane, j, D4), a[j]);
#pragma unroll
        for (int j = 0; j < NV; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) g[j][e] += a[j][e];
      }
    }
    if constexpr (!GATED) {
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        const int c = lane + 32 * j;
        if (c < D4) store4(dx + row * D + 4 * c, g[j]);
      }
    } else {
      // dx stored, and g replaced by what was stored: the value gated_residual_bwd would read back
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        const int c = lane + 32 * j;
        if (c < D4) store4_rounded(dx + row * D + 4 * c, g[j]);
      }
      float b[NV][4];  // y's row (x̂'s registers are free)
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        if constexpr (kEarlyY) {
#pragma unroll
          for (int e = 0; e < 4; ++e) b[j][e] = yv[j][e];
        } else {
          load4(gb.y + row * D + 4 * clamped_vec(lane, j, D4), b[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        const int c = lane + 32 * j;
        if (c < D4) {
          float gv[4], o[4];
          load_sample4(gb.gate, n, 4 * c, gv);  // the sample's gate: cached after the first row
#pragma unroll
          for (int e = 0; e < 4; ++e) o[e] = g[j][e] * gv[e];
          store4_rounded(gb.dy + row * D + 4 * c, o);  // o as stored from here
          if constexpr (kGateRegs) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_gate[j][e] += g[j][e] * b[j][e];
            if (gb.dy_part)
#pragma unroll
              for (int e = 0; e < 4; ++e) acc_dy[j][e] += o[e];
          } else {
            float* sums = sm_gate + warp * D + 4 * c;
            float acc[4];
            load4(sums, acc);  // 16-byte shared-memory accesses: no bank conflicts within a quarter warp
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[e] += g[j][e] * b[j][e];
            store4(sums, acc);
          }
        }
      }
    }
  }
  // per-sample sums over this chunk's tokens: warps' partials through shared memory, in warp order
#pragma unroll
  for (int j = 0; j < NV; ++j)
    if (lane + 32 * j < D4) store4(sm + warp * D + 4 * (lane + 32 * j), acc_scale[j]);
  __syncthreads();
  write_partial(sm, dscale_part, n, chunk, chunks, D);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < NV; ++j)
    if (lane + 32 * j < D4) store4(sm + warp * D + 4 * (lane + 32 * j), acc_shift[j]);
  __syncthreads();
  write_partial(sm, dshift_part, n, chunk, chunks, D);
  if constexpr (GATED) {
    if constexpr (kGateRegs) {
      __syncthreads();
#pragma unroll
      for (int j = 0; j < NV; ++j)
        if (lane + 32 * j < D4) store4(sm + warp * D + 4 * (lane + 32 * j), acc_gate[j]);
    }
    __syncthreads();
    write_partial(kGateRegs ? sm : sm_gate, gb.dgate_part, n, chunk, chunks, D);
    if constexpr (kGateRegs) {
      if (gb.dy_part) {  // the same for every thread of the block: the barriers are safe
        __syncthreads();  // dgate's partials read sm
#pragma unroll
        for (int j = 0; j < NV; ++j)
          if (lane + 32 * j < D4) store4(sm + warp * D + 4 * (lane + 32 * j), acc_dy[j]);
        __syncthreads();
        write_partial(sm, gb.dy_part, n, chunk, chunks, D);
      }
    }
  }
}

// ---- gated residual ----
// Index: the vector index's type, 32-bit where every index fits (two divisions a vector: 32-bit ones
// instead of the many-instruction 64-bit emulation)
template <typename TX, typename TY, typename Index>
__global__ void gated_residual_fwd(const TX* __restrict__ x, const TY* __restrict__ y, const SampleVec gate, TX* __restrict__ out,
                                   Index vecs, Index T, int D) {
  const Index D4 = Index(D / 4);
  for (Index i = Index(blockIdx.x) * Index(blockDim.x) + Index(threadIdx.x); i < vecs; i += Index(gridDim.x) * Index(blockDim.x)) {
    const Index row = i / D4;
    const int c = int(i - row * D4);
    const int64_t at = 4 * int64_t(i);  // element offset, 64-bit
    float a[4], b[4], g[4];
    load4(x + at, a);
    load4(y + at, b);
    load_sample4(gate, int64_t(row / T), 4 * c, g);
#pragma unroll
    for (int e = 0; e < 4; ++e) a[e] += g[e] * b[e];
    store4(out + at, a);
  }
}

template <typename TX, typename TY, int NV>
__global__ void __launch_bounds__(kWarps * 32) gated_residual_bwd(const TX* __restrict__ dout, const TY* __restrict__ y,
                                                                    const SampleVec gate, TY* __restrict__ dy,
                                                                    float* __restrict__ dgate_part, int64_t T, int D, int rows_per_chunk,
                                                                    int chunks) {
  extern __shared__ float sm[];  // (kWarps, D)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = blockIdx.y;
  const int chunk = blockIdx.x;
  const int D4 = D / 4;
  float acc[NV][4] = {}, gv[NV][4];
#pragma unroll
  for (int j = 0; j < NV; ++j) load_sample4(gate, n, 4 * clamped_vec(lane, j, D4), gv[j]);
  const int64_t t_end = T < int64_t(chunk + 1) * rows_per_chunk ? T : int64_t(chunk + 1) * rows_per_chunk;
  for (int64_t t = int64_t(chunk) * rows_per_chunk + warp; t < t_end; t += kWarps) {
    const int64_t row = n * T + t;
    // the row's loads all issued before the first is used (clamped_vec, as ln_modulate_bwd)
    float d[NV][4], b[NV][4];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int c = clamped_vec(lane, j, D4);
      load4(dout + row * D + 4 * c, d[j]);
      load4(y + row * D + 4 * c, b[j]);
    }
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int c = lane + 32 * j;
      if (c < D4) {
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          o[e] = d[j][e] * gv[j][e];
          acc[j][e] += d[j][e] * b[j][e];
        }
        store4(dy + row * D + 4 * c, o);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NV; ++j)
    if (lane + 32 * j < D4) store4(sm + warp * D + 4 * (lane + 32 * j), acc[j]);
  __syncthreads();
  write_partial(sm, dgate_part, n, chunk, chunks, D);
}

// ---- bias + GELU (tanh approximation, ops/cuda/gelu.cuh) ----
// a thread owns 4 columns (their bias in registers) and walks rows, 4 rows' loads in flight: no
// index division per element (the earlier flat version's 64-bit modulo made it slower than ATen's)
template <typename TY>
__global__ void bias_gelu_fwd(const TY* __restrict__ y, const float* __restrict__ bias, TY* __restrict__ out, int64_t rows, int F) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;  // vector column
  if (c >= F / 4) return;
  float b[4];
  load4(bias + 4 * c, b);
  constexpr int U = 4;
  for (int64_t r0 = int64_t(blockIdx.x) * U; r0 < rows; r0 += int64_t(gridDim.x) * U) {
    float a[U][4];
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (r0 + k < rows) load4(y + (r0 + k) * F + 4 * c, a[k]);
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (r0 + k < rows) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[k][e] = gelu_tanh(a[k][e] + b[e]);
        store4(out + (r0 + k) * F + 4 * c, a[k]);
      }
  }
}

// a thread owns 4 columns of one chunk of rows: its column sums need no shared memory; rows go 4
// at a time, their loads issued together (memory-level parallelism)
template <typename TY>
__global__ void bias_gelu_bwd(const TY* __restrict__ dout, const TY* __restrict__ y, const float* __restrict__ bias, TY* __restrict__ dy,
                              float* __restrict__ dbias_part, int64_t rows, int F, int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;  // vector column
  if (c >= F / 4) return;
  const int chunk = blockIdx.y;
  float b[4], acc[4] = {0, 0, 0, 0};
  load4(bias + 4 * c, b);
  const int64_t r0 = int64_t(chunk) * rows_per_chunk;
  const int64_t r_end = rows < r0 + rows_per_chunk ? rows : r0 + rows_per_chunk;
  constexpr int U = 4;
  for (int64_t r = r0; r < r_end; r += U) {
    float d[U][4], u[U][4];
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (r + k < r_end) {
        load4(dout + (r + k) * F + 4 * c, d[k]);
        load4(y + (r + k) * F + 4 * c, u[k]);
      }
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (r + k < r_end) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          d[k][e] *= gelu_tanh_grad(u[k][e] + b[e]);
          acc[e] += d[k][e];
        }
        store4(dy + (r + k) * F + 4 * c, d[k]);
      }
  }
  store4(dbias_part + int64_t(chunk) * F + 4 * c, acc);
}

// ---- the partials' sums ----
template <typename TO>
__global__ void partial_sums(const PartialSumsParams p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (n, d)
  if (i >= p.N * p.D) return;
  const int64_t n = i / p.D;
  const int d = int(i - n * p.D);
#pragma unroll
  for (int k = 0; k < PartialSumsParams::kMax; ++k) {
    if (k >= p.count) break;
    const float* part = p.part[k] + n * p.chunks * p.D + d;
    float s = 0.f;
    for (int c = 0; c < p.chunks; ++c) s += part[int64_t(c) * p.D];
    if constexpr (std::is_same_v<TO, __nv_bfloat16>) static_cast<TO*>(p.out[k])[i] = __float2bfloat16_rn(s);
    else if constexpr (std::is_same_v<TO, __half>) static_cast<TO*>(p.out[k])[i] = __float2half_rn(s);
    else static_cast<TO*>(p.out[k])[i] = s;
  }
}

// ---- dispatch ----
template <DType> struct Ty;
template <> struct Ty<DType::F32> { using T = float; };
template <> struct Ty<DType::F16> { using T = __half; };
template <> struct Ty<DType::BF16> { using T = __nv_bfloat16; };

// channels a lane holds / 4; the smallest that covers D
int lane_vectors(int D) {
  const int D4 = D / 4;
  for (int nv : {3, 6, 9, 12})
    if (D4 <= 32 * nv) return nv;
  return 0;
}

template <typename F>
void with_nv(int D, F&& f) {
  switch (lane_vectors(D)) {
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 9: f(std::integral_constant<int, 9>{}); break;
    case 12: f(std::integral_constant<int, 12>{}); break;
    default: throw std::runtime_error("fused block kernels: D = " + std::to_string(D) + " is not supported (D % 4 == 0, D <= 1536)");
  }
}

// The type pairs built: (first, second) = (x, out) for LayerNorm + modulate, (x, y) for the residual.
template <typename F>
void with_types(DType a, DType b, const char* what, F&& f) {
  using A = DType;
  if (a == A::F32 && b == A::F32) f(Ty<A::F32>{}, Ty<A::F32>{});
  else if (a == A::F32 && b == A::BF16) f(Ty<A::F32>{}, Ty<A::BF16>{});
  else if (a == A::F32 && b == A::F16) f(Ty<A::F32>{}, Ty<A::F16>{});
  else if (a == A::BF16 && b == A::BF16) f(Ty<A::BF16>{}, Ty<A::BF16>{});
  else if (a == A::F16 && b == A::F16) f(Ty<A::F16>{}, Ty<A::F16>{});
  else throw std::runtime_error(std::string("fused block kernel ") + what + ": unsupported dtype pair");
}

bool pair_supported(DType a, DType b) { return a == b || a == DType::F32; }

template <typename F>
void with_type(DType a, F&& f) {
  if (a == DType::F32) f(Ty<DType::F32>{});
  else if (a == DType::BF16) f(Ty<DType::BF16>{});
  else f(Ty<DType::F16>{});
}

}  // namespace

bool layer_norm_modulate_supported(DType x, DType out, int D) { return pair_supported(x, out) && D % 4 == 0 && lane_vectors(D) > 0; }
bool gated_residual_supported(DType x, DType y, int D) { return pair_supported(x, y) && D % 4 == 0 && lane_vectors(D) > 0; }

void launch_layer_norm_modulate_forward(const LayerNormModulateParams& p, void* stream) {
  const int64_t rows = p.s.N * p.s.T;
  const dim3 grid(unsigned((rows + kWarps - 1) / kWarps));
  with_types(p.x_type, p.out_type, "layer_norm_modulate", [&](auto tx, auto to) {
    using TX = typename decltype(tx)::T;
    using TO = typename decltype(to)::T;
    with_nv(p.s.D, [&](auto nv) {
      ln_modulate_fwd<TX, TO, decltype(nv)::value><<<grid, kWarps * 32, 0, cudaStream_t(stream)>>>(
          static_cast<const TX*>(p.x), p.shift, p.scale, static_cast<TO*>(p.out), p.mean, p.rstd, rows, p.s.T, p.s.D, p.eps);
    });
  });
  check_launch("layer_norm_modulate forward");
}

void launch_layer_norm_modulate_quantize(const LayerNormModulateParams& p, uint8_t* q, float* qscale, void* stream) {
  const int64_t rows = p.s.N * p.s.T;
  const dim3 grid(unsigned((rows + kWarps - 1) / kWarps));
  with_types(p.x_type, p.out_type, "layer_norm_modulate_quantize", [&](auto tx, auto to) {
    using TX = typename decltype(tx)::T;
    using TO = typename decltype(to)::T;
    with_nv(p.s.D, [&](auto nv) {
      ln_modulate_quantize_fwd<TX, TO, decltype(nv)::value><<<grid, kWarps * 32, 0, cudaStream_t(stream)>>>(
          static_cast<const TX*>(p.x), p.shift, p.scale, q, qscale, rows, p.s.T, p.s.D, p.eps);
    });
  });
  check_launch("layer_norm_modulate_quantize");
}

bool residual_layer_norm_modulate_supported(DType t, int D) { return D % 4 == 0 && lane_vectors(D) > 0 && (t == DType::F32 || t == DType::BF16 || t == DType::F16); }

namespace {
std::atomic<int64_t> g_staged_launches{0};

// The staged kernel where it takes the tensors (16-bit rows whose shared memory fits): false otherwise,
// and nothing launched (the caller takes residual_ln_modulate_fwd)
bool launch_residual_staged(const ResidualNormParams& p, int64_t rows, cudaStream_t st) {
  if (p.type == DType::F32 || rows == 0) return false;
  const int D = p.s.D;
  const size_t smem = size_t(6) * D * sizeof(float) + size_t(kStagedWarps) * kStagedRows * 2 * D * 2;  // vectors + rows (16-bit)
  const auto aligned = [](const void* a) { return reinterpret_cast<uintptr_t>(a) % 8 == 0; };  // 4 elements of 16 bits
  if (!aligned(p.x) || !aligned(p.y)) return false;
  bool launched = false;
  with_type(p.type, [&](auto tt) {
    using T = typename decltype(tt)::T;
    if constexpr (sizeof(T) == 2) {
      with_nv(D, [&](auto nv) {
        constexpr int NV = decltype(nv)::value;
        const bool full = D == 128 * NV;  // every lane's NV vectors in the row: the kernel without guards
        const auto kernel = p.q ? (full ? residual_ln_modulate_staged<T, NV, true, true> : residual_ln_modulate_staged<T, NV, true, false>)
                                : (full ? residual_ln_modulate_staged<T, NV, false, true> : residual_ln_modulate_staged<T, NV, false, false>);
        const int per_grid = persistent_blocks(reinterpret_cast<const void*>(kernel), kStagedWarps * 32, smem);
        if (per_grid < 1) return;  // does not fit: the one-pass kernel
        // rows a block: the rows spread over one wave, at most a sample's tokens (≤ two samples a block)
        const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>((rows + per_grid - 1) / per_grid, p.s.T));
        const unsigned blocks = unsigned((rows + chunk - 1) / chunk);
        kernel<<<blocks, kStagedWarps * 32, smem, st>>>(static_cast<const T*>(p.x), static_cast<const T*>(p.y), p.gate, p.shift, p.scale,
                                                        static_cast<T*>(p.res), static_cast<T*>(p.out), p.q, p.qscale, rows, p.s.T, D, p.eps,
                                                        chunk);
        launched = true;
        ++g_staged_launches;
      });
    }
  });
  return launched;
}
}  // namespace

int64_t residual_staged_launches() { return g_staged_launches.load(); }

void launch_residual_layer_norm_modulate(const ResidualNormParams& p, void* stream) {
  const int64_t rows = p.s.N * p.s.T;
  if (p.staged && launch_residual_staged(p, rows, cudaStream_t(stream))) return check_launch("gated_residual + layer_norm_modulate (staged)");
  const dim3 grid(unsigned((rows + kWarps - 1) / kWarps));
  with_type(p.type, [&](auto tt) {
    using T = typename decltype(tt)::T;
    with_nv(p.s.D, [&](auto nv) {
      constexpr int NV = decltype(nv)::value;
      const auto x = static_cast<const T*>(p.x), y = static_cast<const T*>(p.y);
      const auto res = static_cast<T*>(p.res);
      if (p.q)
        residual_ln_modulate_fwd<T, NV, true><<<grid, kWarps * 32, 0, cudaStream_t(stream)>>>(x, y, p.gate, p.shift, p.scale, res, nullptr, p.q,
                                                                                               p.qscale, rows, p.s.T, p.s.D, p.eps);
      else
        residual_ln_modulate_fwd<T, NV, false><<<grid, kWarps * 32, 0, cudaStream_t(stream)>>>(
            x, y, p.gate, p.shift, p.scale, res, static_cast<T*>(p.out), nullptr, nullptr, rows, p.s.T, p.s.D, p.eps);
    });
  });
  check_launch("gated_residual + layer_norm_modulate");
}

bool residual_layer_norm_modulate_training_supported(DType x, DType y, int D) { return gated_residual_supported(x, y, D); }

void launch_residual_layer_norm_modulate_training(const ResidualNormTrainParams& p, void* stream) {
  const int64_t rows = p.s.N * p.s.T;
  if (rows == 0) return;
  const dim3 grid(unsigned((rows + kWarps - 1) / kWarps));
  with_types(p.x_type, p.y_type, "gated_residual + layer_norm_modulate (training)", [&](auto tx, auto ty) {
    using TX = typename decltype(tx)::T;
    using TY = typename decltype(ty)::T;  // the result's type too
    with_nv(p.s.D, [&](auto nv) {
      residual_ln_modulate_train_fwd<TX, TY, TY, decltype(nv)::value><<<grid, kWarps * 32, 0, cudaStream_t(stream)>>>(
          static_cast<const TX*>(p.x), static_cast<const TY*>(p.y), p.gate, p.shift, p.scale, static_cast<TX*>(p.res), static_cast<TY*>(p.out),
          p.mean, p.rstd, rows, p.s.T, p.s.D, p.eps);
    });
  });
  check_launch("gated_residual + layer_norm_modulate (training)");
}

void launch_layer_norm_modulate_backward(const LayerNormModulateParams& p, void* stream) {
  const dim3 grid(unsigned(p.s.chunks()), unsigned(p.s.N));
  const size_t smem = size_t(kWarps) * p.s.D * sizeof(float);
  with_types(p.x_type, p.out_type, "layer_norm_modulate", [&](auto tx, auto to) {
    using TX = typename decltype(tx)::T;
    using TO = typename decltype(to)::T;
    with_nv(p.s.D, [&](auto nv) {
      ln_modulate_bwd<TX, TO, decltype(nv)::value><<<grid, kWarps * 32, smem, cudaStream_t(stream)>>>(
          static_cast<const TO*>(p.dout), static_cast<const TX*>(p.x), p.mean, p.rstd, p.scale, static_cast<const TX*>(p.dres), static_cast<TX*>(p.dx), p.dscale_part,
          p.dshift_part, p.s.T, p.s.D, p.s.rows_per_chunk, p.s.chunks(), GateBackward<TO>{});
    });
  });
  check_launch("layer_norm_modulate backward");
}

bool residual_layer_norm_modulate_training_backward_supported(DType x, DType y, int D) { return gated_residual_supported(x, y, D); }

void launch_residual_layer_norm_modulate_training_backward(const LayerNormModulateParams& p, const GatedResidualParams& g, void* stream) {
  if (p.s.N * p.s.T == 0) return;
  const dim3 grid(unsigned(p.s.chunks()), unsigned(p.s.N));
  const int nv = lane_vectors(p.s.D);
  // the dgate sums past NV 6 (ln_modulate_bwd): at D 1,536 the 48 KiB a block may have without opting in, exactly
  const size_t smem = size_t(nv <= 6 ? 1 : 2) * kWarps * p.s.D * sizeof(float);
  if (p.out_type != g.y_type) throw std::runtime_error("gated_residual + layer_norm_modulate backward: the result's type must be y's");
  with_types(p.x_type, g.y_type, "gated_residual + layer_norm_modulate backward", [&](auto tx, auto ty) {
    using TX = typename decltype(tx)::T;
    using TY = typename decltype(ty)::T;  // dout's type too
    with_nv(p.s.D, [&](auto nv) {
      if (g.dy_part && decltype(nv)::value > 6) throw std::runtime_error("gated_residual + layer_norm_modulate backward: dy's sums need D ≤ 768");
      const GateBackward<TY> gb{static_cast<const TY*>(g.y), g.gate, static_cast<TY*>(g.dy), g.dgate_part, g.dy_part};
      ln_modulate_bwd<TX, TY, decltype(nv)::value, TY, true><<<grid, kWarps * 32, smem, cudaStream_t(stream)>>>(
          static_cast<const TY*>(p.dout), static_cast<const TX*>(p.x), p.mean, p.rstd, p.scale, static_cast<const TX*>(p.dres), static_cast<TX*>(p.dx),
          p.dscale_part, p.dshift_part, p.s.T, p.s.D, p.s.rows_per_chunk, p.s.chunks(), gb);
    });
  });
  check_launch("gated_residual + layer_norm_modulate backward");
}

void launch_partial_sums(const PartialSumsParams& p, void* stream) {
  const int64_t n = p.N * p.D;
  if (n == 0 || p.count == 0) return;
  const int threads = 256;
  const unsigned blocks = unsigned((n + threads - 1) / threads);
  with_type(p.out_type, [&](auto to) {
    using TO = typename decltype(to)::T;
    partial_sums<TO><<<blocks, threads, 0, cudaStream_t(stream)>>>(p);
  });
  check_launch("partial sums");
}

void launch_gated_residual_forward(const GatedResidualParams& p, void* stream) {
  const int64_t vecs = p.s.N * p.s.T * (p.s.D / 4);
  const int threads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>((vecs + threads - 1) / threads, 132 * 16));
  with_types(p.x_type, p.y_type, "gated_residual", [&](auto tx, auto ty) {
    using TX = typename decltype(tx)::T;
    using TY = typename decltype(ty)::T;
    // (the grid-stride loop's last step stays below 2³² when vecs leaves room for one more grid)
    if (vecs + int64_t(blocks) * threads <= int64_t(UINT32_MAX))
      gated_residual_fwd<TX, TY, uint32_t><<<blocks, threads, 0, cudaStream_t(stream)>>>(
          static_cast<const TX*>(p.x), static_cast<const TY*>(p.y), p.gate, static_cast<TX*>(p.out), uint32_t(vecs), uint32_t(p.s.T), p.s.D);
    else
      gated_residual_fwd<TX, TY, uint64_t><<<blocks, threads, 0, cudaStream_t(stream)>>>(
          static_cast<const TX*>(p.x), static_cast<const TY*>(p.y), p.gate, static_cast<TX*>(p.out), uint64_t(vecs), uint64_t(p.s.T), p.s.D);
  });
  check_launch("gated_residual forward");
}

void launch_gated_residual_backward(const GatedResidualParams& p, void* stream) {
  const dim3 grid(unsigned(p.s.chunks()), unsigned(p.s.N));
  const size_t smem = size_t(kWarps) * p.s.D * sizeof(float);
  with_types(p.x_type, p.y_type, "gated_residual", [&](auto tx, auto ty) {
    using TX = typename decltype(tx)::T;
    using TY = typename decltype(ty)::T;
    with_nv(p.s.D, [&](auto nv) {
      gated_residual_bwd<TX, TY, decltype(nv)::value><<<grid, kWarps * 32, smem, cudaStream_t(stream)>>>(
          static_cast<const TX*>(p.dout), static_cast<const TY*>(p.y), p.gate, static_cast<TY*>(p.dy), p.dgate_part, p.s.T, p.s.D,
          p.s.rows_per_chunk, p.s.chunks());
    });
  });
  check_launch("gated_residual backward");
}

}  // namespace nala::ops::cuda

namespace nala::ops::cuda {

void launch_bias_gelu_forward(const BiasGeluParams& p, void* stream) {
  const int threads = 128;
  // columns along y, rows along x: 4 rows a block a pass, at most 4096 blocks along the rows
  const dim3 grid(unsigned(std::max<int64_t>(1, std::min<int64_t>((p.rows + 3) / 4, 4096))), unsigned((p.F / 4 + threads - 1) / threads));
  with_type(p.y_type, [&](auto ty) {
    using TY = typename decltype(ty)::T;
    bias_gelu_fwd<TY><<<grid, threads, 0, cudaStream_t(stream)>>>(static_cast<const TY*>(p.y), p.bias, static_cast<TY*>(p.out), p.rows, p.F);
  });
  check_launch("bias_gelu forward");
}

void launch_bias_gelu_backward(const BiasGeluParams& p, void* stream) {
  const int threads = 128;
  const dim3 grid(unsigned((p.F / 4 + threads - 1) / threads), unsigned(p.chunks()));
  with_type(p.y_type, [&](auto ty) {
    using TY = typename decltype(ty)::T;
    bias_gelu_bwd<TY><<<grid, threads, 0, cudaStream_t(stream)>>>(static_cast<const TY*>(p.dout), static_cast<const TY*>(p.y), p.bias,
                                                                  static_cast<TY*>(p.dy), p.dbias_part, p.rows, p.F, p.rows_per_chunk);
  });
  check_launch("bias_gelu backward");
}

}  // namespace nala::ops::cuda
