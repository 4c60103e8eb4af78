// One pass from P strided (B, N, H, d) gradients into the contiguous (B, N, P, H, d) gradient of
// the projection output they were split from: 16-byte vectors, one thread a vector, destination in
// order (coalesced writes; each source row of d elements is one contiguous run).
#include "ops/cuda/gather_heads.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

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
  uint4 val = make_uint4(0, 0, 0, 0);
  const char* src = static_cast<const char*>(p.src[part]);
  if (src) {
    const int64_t off = (b * p.stride[part][0] + n * p.stride[part][1] + h * p.stride[part][2]) * p.element_size + int64_t(v) * 16;
    val = *reinterpret_cast<const uint4*>(src + off);
  }
  if (part == p.extra_part) {  // the part's second gradient: added (or alone where src is absent)
    const int64_t off = (b * p.extra_stride[0] + n * p.extra_stride[1] + h * p.extra_stride[2]) * p.element_size + int64_t(v) * 16;
    const uint4 e = *reinterpret_cast<const uint4*>(static_cast<const char*>(p.extra) + off);
    if (!src) val = e;
    else if (p.dtype == GatherHeadsParams::Dtype::f32) val = add_vec<float>(val, e);
    else if (p.dtype == GatherHeadsParams::Dtype::bf16) val = add_vec<__nv_bfloat16>(val, e);
    else val = add_vec<__half>(val, e);
  }
  reinterpret_cast<uint4*>(p.dst)[i] = val;
}

}  // namespace

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
