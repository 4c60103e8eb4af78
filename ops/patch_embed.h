// The patch embedding and the positional embedding's add as one operation while training or sampling
// under CUDA bf16 autocast: h = patchify(x)·Wᵀ + b + pos_embed (DiT models.py:220, x_embedder(x) +
// pos_embed), the sum in float32 as autocast's bf16 GEMM output plus the float32 pos_embed gives it.
// One kernel (ops/cuda/patch_embed_kernels.cu) instead of a GEMM with K = C·p·p (16 at patch 2) and
// a broadcasting add; its backward is the linear layer's (ops/linear.h linear_grads) of the bf16
// gradient, as autograd gives it through the add and the GEMM. The GEMM's sums come in another order
// than cuBLASLt's: the tokens agree to the rounding of their bf16 values.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace nala::ops {

// patches (N, T, K) float32 (the patchified input, any strides), w (D, K) the weight as the GEMM
// reads it (a parameter or a view of one), b (D) float32, pos (1, T, D) float32: whether
// patch_embed_pos takes them (CUDA, bf16 autocast on, NALA_PATCH_EMBED_POS=1, D a multiple of 4,
// K = C·p·p one of 4, 8, 12, 16: DiT's latent models at patch 2; others take the GEMM and the add).
bool patch_embed_pos_applies(const at::Tensor& patches, const at::Tensor& w, const at::Tensor& b, const at::Tensor& pos);
// (N, T, D) float32; call only where patch_embed_pos_applies.
at::Tensor patch_embed_pos(const at::Tensor& patches, const at::Tensor& w, const at::Tensor& b, const at::Tensor& pos);

}  // namespace nala::ops
