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
  float* lse = nullptr;   // (B·H, N) float32 or null: log2 Σ_j 2^(s_ij·scale·log2 e) per query (the backward's)
  int B = 0, H = 0, N = 0, D = 0;
  float scale_log2 = 0;  // log2(e) · scale: the scores go through exp2
  int warps = 4;         // warps a CTA, 16 queries each: 4 or 8
};

bool softmax_fwd_supported(int D);
// Launch on `stream` (a cudaStream_t); throws std::runtime_error on a launch error.
void launch_softmax_fwd(const SoftmaxFwdParams& p, void* stream);

// The backward (attention/cuda/softmax_bwd.cu): dq, dk, dv from q, k, v, o, do and the forward's lse,
// for N ≤ kSoftmaxBwdMaxTokens (one CTA holds a (batch, head)'s keys), head dims 64 and 72, bf16.
// Layouts as the forward's; o, do (B, H, N, D) with strides (b, h, n); dq, dk, dv likewise.
constexpr int kSoftmaxBwdMaxTokens = 256;
struct SoftmaxBwdParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* d_o = nullptr;
  const float* lse = nullptr;  // (B·H, N), the forward's
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  int64_t q_stride[3] = {0, 0, 0}, k_stride[3] = {0, 0, 0}, v_stride[3] = {0, 0, 0}, o_stride[3] = {0, 0, 0}, do_stride[3] = {0, 0, 0};
  int64_t dq_stride[3] = {0, 0, 0}, dk_stride[3] = {0, 0, 0}, dv_stride[3] = {0, 0, 0};
  int B = 0, H = 0, N = 0, D = 0;
  float scale = 0, scale_log2 = 0;  // the softmax's scale (1/√D) and log2(e) times it
};
bool softmax_bwd_supported(int D, int N);
void launch_softmax_bwd(const SoftmaxBwdParams& p, void* stream);

}  // namespace nala::attention::cuda
