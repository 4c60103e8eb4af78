// The patch embedding's GEMM and the positional embedding's add in one pass (parameters:
// patch_embed_kernels.h). K (the patch's C·p·p values: 16 for the latents' 4 channels at patch 2) is
// too short for a GEMM to pay: cuBLASLt's kernel wrote the bf16 tokens (28 µs at DiT-S/2's batch of
// 256 on an H100) and ATen's broadcasting add of the float32 pos_embed read them again and wrote the
// float32 sum with its non-vectorized kernel (125 µs; docs/benchmarks.md, thirty-ninth session). Here
// a block holds w (as float32, transposed to (K, D)) and kRows rows of patches in shared memory; a
// thread makes 4 adjacent channels of a row: K fmas each in k order, the bias, the bf16 rounding,
// the positional embedding, one 16-byte store.
#include "ops/cuda/patch_embed_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace nala::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = 64;  // rows of patches a block

__global__ void __launch_bounds__(kThreads) patch_embed_pos_kernel(const PatchEmbedParams p) {
  extern __shared__ __align__(16) float smem[];
  float* wt = smem;                // (K, D): w transposed, so that a thread's 4 channels are one float4
  float* rows = smem + p.K * p.D;  // (kRows, K)
  const auto* w = static_cast<const __nv_bfloat16*>(p.w);
  const auto* patches = static_cast<const __nv_bfloat16*>(p.patches);
  const auto* b = static_cast<const __nv_bfloat16*>(p.b);
  for (int i = threadIdx.x; i < p.K * p.D; i += kThreads) wt[(i % p.K) * p.D + i / p.K] = __bfloat162float(w[i]);
  const int64_t r0 = int64_t(blockIdx.x) * kRows;
  for (int i = threadIdx.x; i < kRows * p.K; i += kThreads) {
    const int64_t r = r0 + i / p.K;
    rows[i] = r < p.R ? __bfloat162float(patches[r * p.K + i % p.K]) : 0.f;
  }
  __syncthreads();
  const int D4 = p.D / 4;
  for (int i = threadIdx.x; i < kRows * D4; i += kThreads) {
    const int rr = i / D4, c = (i % D4) * 4;
    const int64_t r = r0 + rr;
    if (r >= p.R) break;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    const float* pr = rows + rr * p.K;
    for (int k = 0; k < p.K; ++k) {
      const float x = pr[k];
      const float4 wv = *reinterpret_cast<const float4*>(wt + k * p.D + c);
      a0 = fmaf(x, wv.x, a0), a1 = fmaf(x, wv.y, a1), a2 = fmaf(x, wv.z, a2), a3 = fmaf(x, wv.w, a3);
    }
    auto round = [](float v) { return __bfloat162float(__float2bfloat16_rn(v)); };  // the GEMM's bf16 output
    const float4 pe = *reinterpret_cast<const float4*>(p.pos + int64_t(r % p.T) * p.D + c);
    const float4 o = make_float4(round(a0 + __bfloat162float(b[c])) + pe.x, round(a1 + __bfloat162float(b[c + 1])) + pe.y,
                                 round(a2 + __bfloat162float(b[c + 2])) + pe.z, round(a3 + __bfloat162float(b[c + 3])) + pe.w);
    *reinterpret_cast<float4*>(p.out + r * p.D + c) = o;
  }
}

}  // namespace

int64_t patch_embed_smem_bytes(int K, int D) { return (int64_t(K) * D + int64_t(kRows) * K) * int64_t(sizeof(float)); }

void launch_patch_embed(const PatchEmbedParams& p, void* stream) {
  if (p.R == 0) return;
  const int64_t smem = patch_embed_smem_bytes(p.K, p.D);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(patch_embed_pos_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) throw std::runtime_error(std::string("patch_embed: ") + std::to_string(smem) + " bytes of shared memory: " + cudaGetErrorString(e));
  }
  const int64_t blocks = (p.R + kRows - 1) / kRows;
  patch_embed_pos_kernel<<<unsigned(blocks), kThreads, size_t(smem), static_cast<cudaStream_t>(stream)>>>(p);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("patch_embed launch failed: ") + cudaGetErrorString(e));
}

}  // namespace nala::ops::cuda
