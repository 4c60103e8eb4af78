// Launch templates of the fused NaLa kernels: runtime (head dim, feature count) become template
// arguments here. Included by one instantiation file per dtype (nala_kernels_*.cu) so the kernels
// of the three dtypes compile in parallel.
#pragma once
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#include "attention/cuda/nala_kernels.cuh"

namespace nala::attention::cuda {

inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel ") + what + " failed to launch: " + cudaGetErrorString(e));
}

template <typename K>
inline void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA: cannot reserve ") + std::to_string(bytes) +
                                                   " bytes of shared memory: " + cudaGetErrorString(e));
  }
}

inline void reduce_chunks(const float* part, float* out, int chunks, int per_bh, int bh, float scale, cudaStream_t st) {
  const int blocks = std::min((per_bh + 255) / 256, 64);
  reduce_chunks_kernel<<<dim3(blocks, bh), 256, 0, st>>>(part, out, chunks, per_bh, scale);
  check_launch("reduce_chunks");
}

template <typename T, int D, int FEAT, bool SPLIT>
void forward_impl(const NalaKernelParams& P, cudaStream_t st) {
  using S = Shape<D, FEAT>;
  const int BH = P.B * P.H;
  const size_t smem_state = state_smem_floats<D, FEAT>() * sizeof(float);
  allow_smem(state_kernel<T, D, FEAT, SPLIT>, smem_state);
  state_kernel<T, D, FEAT, SPLIT><<<dim3(P.chunks, BH), S::THREADS, smem_state, st>>>(P);
  check_launch("state");
  if (P.chunks > 1) {
    reduce_chunks(P.S_part, P.S, P.chunks, S::Fp * S::Dp, BH, P.inv_n, st);
    reduce_chunks(P.z_part, P.z, P.chunks, S::Fp, BH, P.inv_n, st);
  }
  const size_t smem_out = out_smem_floats<D, FEAT>() * sizeof(float);
  allow_smem(output_kernel<T, D, FEAT, SPLIT>, smem_out);
  output_kernel<T, D, FEAT, SPLIT><<<dim3(P.out_chunks, BH), S::THREADS, smem_out, st>>>(P);
  check_launch("output");
}

template <typename T, int D, int FEAT, bool SPLIT>
void backward_impl(const NalaKernelParams& P, cudaStream_t st) {
  using S = Shape<D, FEAT>;
  const int BH = P.B * P.H;
  const size_t smem_dq = dq_smem_floats<D, FEAT>() * sizeof(float);
  allow_smem(dq_kernel<T, D, FEAT, SPLIT>, smem_dq);
  dq_kernel<T, D, FEAT, SPLIT><<<dim3(P.chunks, BH), S::THREADS, smem_dq, st>>>(P);
  check_launch("dq");
  if (P.chunks > 1) {
    reduce_chunks(P.S_part, P.dS, P.chunks, S::Fp * S::Dp, BH, 1.f, st);
    reduce_chunks(P.z_part, P.dz, P.chunks, S::Fp, BH, 1.f, st);
  }
  const size_t smem_dkv = dkv_smem_floats<D, FEAT>() * sizeof(float);
  allow_smem(dkv_kernel<T, D, FEAT, SPLIT>, smem_dkv);
  dkv_kernel<T, D, FEAT, SPLIT><<<dim3(P.out_chunks, BH), S::THREADS, smem_dkv, st>>>(P);
  check_launch("dkv");
}

template <typename T, bool SPLIT>
void dispatch(const NalaKernelParams& P, cudaStream_t st, bool forward) {
  const int feat = P.F / P.D;
#define NALA_CASE(DD, FF)                                                   \
  if (P.D == DD && feat == FF) {                                            \
    forward ? forward_impl<T, DD, FF, SPLIT>(P, st) : backward_impl<T, DD, FF, SPLIT>(P, st); \
    return;                                                                 \
  }
  NALA_CASE(64, 2) NALA_CASE(72, 2) NALA_CASE(128, 2) NALA_CASE(64, 1) NALA_CASE(72, 1) NALA_CASE(128, 1)
#undef NALA_CASE
  throw std::runtime_error("nala CUDA: no kernel for head dim " + std::to_string(P.D) + " with " + std::to_string(P.F) + " features");
}

void dispatch_f32(const NalaKernelParams& P, cudaStream_t st, bool forward);
void dispatch_f16(const NalaKernelParams& P, cudaStream_t st, bool forward);
void dispatch_bf16(const NalaKernelParams& P, cudaStream_t st, bool forward);

}  // namespace nala::attention::cuda
