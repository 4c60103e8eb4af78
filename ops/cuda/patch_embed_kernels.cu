// The patch embedding's GEMM and the positional embedding's add in one pass (parameters:
// patch_embed_kernels.h). K (the patch's C·p·p values: 16 for the latents' 4 channels at patch 2) is
// too short for a GEMM to pay: cuBLASLt's kernel wrote the bf16 tokens (28 µs at DiT-S/2's batch of
// 256 on an H100) and ATen's broadcasting add of the float32 pos_embed read them again and wrote the
// float32 sum with its non-vectorized kernel (125 µs; docs/benchmarks.md, thirty-ninth session).
// A lane owns 4 adjacent channels (a block 32 lanes of them: 128 channels) and holds their K weights
// in registers; the block's 4 warps take every 4th of its kRows rows, 4 rows' loads in flight at a
// time. A row's K patch values are the same for every lane (K / 4 broadcast 8-byte loads); each of
// the lane's 4 outputs is K fmas in k order, the bias, the bf16 rounding, the positional embedding;
// one 16-byte store. (A first version kept w in shared memory and read it with a 16-byte load a k:
// 119 µs a DiT-S/2 step, bound by those loads. A second loaded one row at a time, K 2-byte loads
// each, and waited for them: 170 µs, a round trip a row; docs/benchmarks.md, fortieth session.)
#include "ops/cuda/patch_embed_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace nala::ops::cuda {
namespace {

constexpr int kWarps = 4;   // 145 registers at K = 16: 3 blocks of 4 warps an SM (one of 8 warps)
constexpr int kRows = 256;  // rows a block (64 a warp): the 4 × K weights a lane loads at its start, over 256 rows
constexpr int kBatch = 4;   // rows a warp loads before it computes the first

template <int K>
__global__ void __launch_bounds__(kWarps * 32) patch_embed_pos_kernel(const PatchEmbedParams p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = (blockIdx.x * 32 + lane) * 4;  // the lane's first channel
  if (c >= p.D) return;                        // no barrier below
  const auto* w = static_cast<const __nv_bfloat16*>(p.w);
  const auto* patches = static_cast<const __nv_bfloat16*>(p.patches);
  const auto* b = static_cast<const __nv_bfloat16*>(p.b);
  float wr[4][K], bias[4];  // w's rows as K / 4 8-byte loads each (w 8-byte aligned: patch_embed_pos)
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    bias[j] = __bfloat162float(b[c + j]);
#pragma unroll
    for (int v = 0; v < K / 4; ++v) {
      const uint2 raw = reinterpret_cast<const uint2*>(w + int64_t(c + j) * K)[v];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
      const float2 lo = __bfloat1622float2(h[0]), hi = __bfloat1622float2(h[1]);
      wr[j][4 * v] = lo.x, wr[j][4 * v + 1] = lo.y, wr[j][4 * v + 2] = hi.x, wr[j][4 * v + 3] = hi.y;
    }
  }
  // the warp's rows r0, r0 + kWarps, ...: kBatch of them at a time, every load of a batch issued
  // before the first use (a row's patch as K / 4 8-byte loads, the same address in every lane)
  constexpr int V = K / 4;
  const int64_t r0 = int64_t(blockIdx.y) * kRows + warp, r_end = min(int64_t(blockIdx.y + 1) * kRows, p.R);
  int t = int(r0 % p.T);  // r0's position in the image; then + kWarps a row, wrapped
  for (int64_t r = r0; r < r_end; r += kBatch * kWarps) {
    uint2 x[kBatch][V];
    float4 pe[kBatch];
    int tu = t;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t ru = r + u * kWarps;
      if (ru < r_end) {
#pragma unroll
        for (int v = 0; v < V; ++v) x[u][v] = reinterpret_cast<const uint2*>(patches + ru * K)[v];
        pe[u] = *reinterpret_cast<const float4*>(p.pos + int64_t(tu) * p.D + c);
      }
      tu += kWarps;
      while (tu >= p.T) tu -= p.T;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t ru = r + u * kWarps;
      if (ru >= r_end) break;
      float xf[K];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&x[u][v]);
        const float2 a = __bfloat1622float2(h[0]), bb = __bfloat1622float2(h[1]);
        xf[4 * v] = a.x, xf[4 * v + 1] = a.y, xf[4 * v + 2] = bb.x, xf[4 * v + 3] = bb.y;
      }
      float o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float a = 0.f;
#pragma unroll
        for (int k = 0; k < K; ++k) a = fmaf(xf[k], wr[j][k], a);
        o[j] = __bfloat162float(__float2bfloat16_rn(a + bias[j]));  // the GEMM's bf16 output
      }
      *reinterpret_cast<float4*>(p.out + ru * p.D + c) = make_float4(o[0] + pe[u].x, o[1] + pe[u].y, o[2] + pe[u].z, o[3] + pe[u].w);
    }
    t = tu;
  }
}

}  // namespace

int64_t patch_embed_max_rows() { return int64_t(65535) * kRows; }

bool patch_embed_supported(int K, int D) { return (K == 4 || K == 8 || K == 12 || K == 16) && D % 4 == 0 && D > 0; }

void launch_patch_embed(const PatchEmbedParams& p, void* stream) {
  if (!patch_embed_supported(p.K, p.D)) throw std::invalid_argument("patch_embed: K " + std::to_string(p.K) + ", D " + std::to_string(p.D) + " not taken");
  if (p.R == 0) return;
  const dim3 grid(unsigned((p.D / 4 + 31) / 32), unsigned((p.R + kRows - 1) / kRows));
  if (grid.y > 65535) throw std::invalid_argument("patch_embed: " + std::to_string(p.R) + " rows is more than one launch takes");
  const auto st = static_cast<cudaStream_t>(stream);
  switch (p.K) {
    case 4: patch_embed_pos_kernel<4><<<grid, kWarps * 32, 0, st>>>(p); break;
    case 8: patch_embed_pos_kernel<8><<<grid, kWarps * 32, 0, st>>>(p); break;
    case 12: patch_embed_pos_kernel<12><<<grid, kWarps * 32, 0, st>>>(p); break;
    default: patch_embed_pos_kernel<16><<<grid, kWarps * 32, 0, st>>>(p); break;
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("patch_embed launch failed: ") + cudaGetErrorString(e));
}

}  // namespace nala::ops::cuda
