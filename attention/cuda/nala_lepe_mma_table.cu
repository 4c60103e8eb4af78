// The table LePE's tensor-core path reads (onepass_kernels.cuh lepe_mma_out; layout: nala_params.h), named nala_* so that
// the Python package's build (python/CMakeLists.txt: attention/cuda/nala_*.cu) compiles it too:
// one thread a 4-byte word of one head's table.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "attention/cuda/nala_params.h"

namespace nala::attention::cuda {
namespace {

// the bf16 pair (x0, x1) (x0 in the low half) of hi = w rounded, or of lo = w − hi rounded (exact in float32)
__device__ __forceinline__ unsigned pair_bits(float w0, float w1, bool lo) {
  const __nv_bfloat16 h0 = __float2bfloat16_rn(w0), h1 = __float2bfloat16_rn(w1);
  const __nv_bfloat16 e0 = lo ? __float2bfloat16_rn(w0 - __bfloat162float(h0)) : h0;
  const __nv_bfloat16 e1 = lo ? __float2bfloat16_rn(w1 - __bfloat162float(h1)) : h1;
  return unsigned(__bfloat16_as_ushort(e0)) | unsigned(__bfloat16_as_ushort(e1)) << 16;
}

__global__ void lepe_mma_table_kernel(const float* __restrict__ taps, int H, int d, int ks, unsigned* __restrict__ out) {
  const int k16_words = lepe_mma_k16_bytes(d, ks) / 4, per_head = lepe_mma_table_bytes(d, ks) / 4;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= H * per_head) return;
  const int h = i / per_head, word = i - h * per_head;
  int row, c, dx, j;
  bool lo;
  if (word < k16_words) {  // entry (row, c) {hi(2g), hi(2g + 1), lo(2g), lo(2g + 1)}
    const int e = word / 4, part = word % 4;
    row = e / (d + 1), c = e - row * (d + 1);
    const int g = row / 8;
    j = row % 8 - 2, dx = g < ks / 2 ? 2 * g + part % 2 : ks;  // (the 2 rows past the last pair: zero)
    lo = part >= 2;
  } else {  // the last tap column's entry (row, c) {hi, lo}
    const int e = (word - k16_words) / 2, part = (word - k16_words) % 2;
    row = e / (d + 1), c = e - row * (d + 1);
    j = row - 2, dx = ks - 1, lo = part == 1;
  }
  auto w = [&](int dy) { return c < d && dx < ks && dy >= 0 && dy < ks ? taps[(dy * ks + dx) * H * d + h * d + c] : 0.f; };  // w[c, dy, dx]
  out[i] = pair_bits(w(j - 1), w(j), lo);
}

}  // namespace

void launch_lepe_mma_table(const float* taps, int H, int d, int ks, void* out, void* stream) {
  const int n = H * lepe_mma_table_bytes(d, ks) / 4;
  lepe_mma_table_kernel<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(taps, H, d, ks, static_cast<unsigned*>(out));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel lepe_mma_table failed to launch: ") + cudaGetErrorString(e));
}

}  // namespace nala::attention::cuda
