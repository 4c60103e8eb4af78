// Asynchronous global → shared copies (sm_80+ cp.async) for the row kernels that stage rows ahead of
// the one they compute (ops/cuda/quantize_fp8_kernels.cu, ops/cuda/block_kernels.cu). A thread's
// copies land for that thread after cp_async_wait; other threads see them only after a barrier, so
// the kernels here have each thread read back only what it copied itself.
#pragma once

namespace nala::cuda_async {

// BYTES = 4, 8 or 16 from a global address aligned to BYTES; 16-byte copies bypass L1 (.cg: the
// rows are read once), the smaller ones cannot (.ca is the only form for them)
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem_dst, const void* gmem_src) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  if constexpr (BYTES == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src));
  else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(gmem_src), "n"(BYTES));
}
// 16 bytes, or 16 zero bytes where !valid (src is then not read: pass any address)
__device__ __forceinline__ void cp_async_zfill16(void* smem_dst, const void* gmem_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {  // all but this thread's N newest groups have landed
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace nala::cuda_async
