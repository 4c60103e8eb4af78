// nala's own softmax attention forward for the DiT blocks' sampling (attention/sdpa_backend.h,
// NALA_SDPA_BACKEND=nala): o = softmax(q kᵀ · scale) v, non-causal, no mask, bf16 q, k, v, o with
// fp32 scores and accumulators, head dims 64 and 72. The plain parameter struct (no LibTorch types),
// filled by softmax_cuda.cpp after it has checked every argument. Layouts (elements):
//   q, k, v  (B, H, N, D) with strides (b, h, n) and unit stride along D; every row 16-byte aligned
//   o        likewise (softmax_cuda.cpp allocates it (B, N, H, D) contiguous, which the output
//            projection reads without a copy)
#pragma once
#include <cstdint>

namespace nala::attention::cuda {

struct SoftmaxFwdParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  int64_t q_stride[3] = {0, 0, 0}, k_stride[3] = {0, 0, 0}, v_stride[3] = {0, 0, 0}, o_stride[3] = {0, 0, 0};
  int B = 0, H = 0, N = 0, D = 0;
  float scale_log2 = 0;  // log2(e) · scale: the scores go through exp2
};

bool softmax_fwd_supported(int D);
// Launch on `stream` (a cudaStream_t); throws std::runtime_error on a launch error.
void launch_softmax_fwd(const SoftmaxFwdParams& p, void* stream);

}  // namespace nala::attention::cuda
