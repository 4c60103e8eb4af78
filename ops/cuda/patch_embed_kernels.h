// Plain parameters of the patch embedding's kernel (ops/cuda/patch_embed_kernels.cu); the LibTorch
// entry is ops/patch_embed.h.
#pragma once
#include <cstdint>

namespace nala::ops::cuda {

// out (R, D) float32 = float(bf16(Σ_k patches[r, k]·w[d, k] + b[d])) + pos[r mod T, d]: the patch
// embedding's GEMM as autocast runs it (bf16 operands, float32 sums, the bias added before the bf16
// rounding) and the positional embedding's float32 add. patches (R, K), w (D, K) and b (D) bf16,
// pos (T, D) float32, all contiguous; D a multiple of 4, rows 16-byte aligned (patches' and w's rows
// 8-byte aligned).
struct PatchEmbedParams {
  const void* patches = nullptr;
  const void* w = nullptr;
  const void* b = nullptr;
  const float* pos = nullptr;
  float* out = nullptr;
  int64_t R = 0;
  int T = 0, K = 0, D = 0;
};

// K ∈ {4, 8, 12, 16} (C·p·p of 1 to 4 channels at patch 2, 1 channel at patch 4), D a multiple of 4
bool patch_embed_supported(int K, int D);
int64_t patch_embed_max_rows();  // R one launch takes
void launch_patch_embed(const PatchEmbedParams& p, void* stream);

}  // namespace nala::ops::cuda
