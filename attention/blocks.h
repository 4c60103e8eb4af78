// The attention blocks that sit inside a DiT block (docs/nala_attention.md §5-§6). x: (B, N, D) tokens on a
// grid_h × grid_w grid (row-major), D = H·d. Module and parameter names are checkpoint keys:
//   SoftmaxAttention  qkv (D → 3D, features [3][H][d]), proj       (timm Attention, DiT/SiT)
//   GatedNalaAttention qkvg (D → 4D, features [4][H][d]), lepe (depthwise r×r conv on v),
//                      norm (LayerNorm, affine, eps 1e-5), proj      (NaLa, §5)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "attention/nala_options.h"
#include "attention/nala_rope.h"
#include "ops/linear_fp8.h"

namespace nala::attention {

// What a DiT block calls as `attn`.
class TokenMixer : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& x, int64_t grid_h, int64_t grid_w) = 0;  // (B, N, D) -> (B, N, D)
  // FP8 sampling with NALA_FP8_LN_FUSED=1 (ops/fused_ops.h): whether the mixer's input projection
  // is registered for FP8 so that forward_fp8 takes the input as quantized rows (ops/linear_fp8.h
  // Fp8Input), and that forward: the same result as forward of the tensor the rows quantize.
  virtual bool takes_fp8_input() const { return false; }
  virtual at::Tensor forward_fp8(const ops::Fp8Input& x, int64_t grid_h, int64_t grid_w);  // (B·N, D) rows -> (B, N, D)
};

class SoftmaxAttention : public TokenMixer {
 public:
  SoftmaxAttention(int64_t dim, int64_t heads);
  at::Tensor forward(const at::Tensor& x, int64_t grid_h, int64_t grid_w) override;
  bool takes_fp8_input() const override;
  at::Tensor forward_fp8(const ops::Fp8Input& x, int64_t grid_h, int64_t grid_w) override;
  torch::nn::Linear qkv{nullptr}, proj{nullptr};

 private:
  at::Tensor attend_projected(const at::Tensor& qkv_out, int64_t B, int64_t N, int64_t D);  // (B, N, 3D) -> (B, N, D)
  at::Tensor attend_heads(const std::vector<at::Tensor>& qkv_parts, int64_t B, int64_t N, int64_t D);  // 3 × (B, N, H, d) -> (B, N, D)
  int64_t heads_;
};

struct GatedNalaConfig {
  NalaOptions nala;
  int64_t lepe_kernel = 5;  // 0 disables LePE
  bool rope = false;        // 2-D axial RoPE on the numerator features
};

class GatedNalaAttention : public TokenMixer {
 public:
  GatedNalaAttention(int64_t dim, int64_t heads, const GatedNalaConfig& cfg);
  at::Tensor forward(const at::Tensor& x, int64_t grid_h, int64_t grid_w) override;
  bool takes_fp8_input() const override;
  at::Tensor forward_fp8(const ops::Fp8Input& x, int64_t grid_h, int64_t grid_w) override;
  // What forward runs when training on CUDA with NALA_RECOMPUTE=1 (ops/fused_ops.h): q, k, v from a
  // GEMM of qkvg's first 3·D rows, then the attention, the gate's rows, LePE, LayerNorm, gate and
  // proj as one operation that keeps only q, k, v and x (attention/gated_tail.h
  // nala_mixer_recomputing; with RoPE the attention apart and gated_tail_proj_gate_fused). Any
  // device; the same result as forward.
  at::Tensor forward_recomputing(const at::Tensor& x, int64_t grid_h, int64_t grid_w);
  torch::nn::Linear qkvg{nullptr}, proj{nullptr};
  torch::nn::Conv2d lepe{nullptr};
  torch::nn::LayerNorm norm{nullptr};

 private:
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t grid_h, int64_t grid_w);
  at::Tensor mix_projected(const at::Tensor& qkvg_out, int64_t B, int64_t N, int64_t D, int64_t grid_h, int64_t grid_w);  // (B, N, 4D) -> (B, N, D)
  at::Tensor mix_heads(const std::vector<at::Tensor>& parts, int64_t B, int64_t N, int64_t D, int64_t grid_h, int64_t grid_w);  // 5 × (B, N, H, d) -> (B, N, D)
  int64_t heads_;
  GatedNalaConfig cfg_;
};

// The attention named by `kind`: "softmax", or a feature map ("nala", "nala-relu", "elu", "relu",
// "focused") for the gated linear block.
std::shared_ptr<TokenMixer> make_token_mixer(const std::string& kind, int64_t dim, int64_t heads, const GatedNalaConfig& cfg);

}  // namespace nala::attention
