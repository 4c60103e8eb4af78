// The DiT / SiT backbone (facebookresearch/DiT models.py; docs/reference.md §1) with a choice of
// attention (docs/nala_attention.md §6). Module attribute names are the official state_dict keys, so
// official checkpoints load with no renaming table:
//   pos_embed, x_embedder.proj, t_embedder.mlp.{0,2}, y_embedder.embedding_table,
//   blocks.{i}.{attn.*, mlp.fc1, mlp.fc2, adaLN_modulation.1}, final_layer.{linear, adaLN_modulation.1}
// Shapes: x (N, C, H, W) latents, t (N,) timesteps (DiT: integer indices 0..999 as float or int;
// SiT: float in [0, 1]), y (N,) class labels; tokens T = (H/p)·(W/p), hidden D.
#pragma once
#include <memory>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "models/model_config.h"

namespace nala::models {

// Sinusoidal timestep features [cos, sin] (DiT models.py:41-58): t (N,) -> (N, dim).
at::Tensor timestep_embedding(const at::Tensor& t, int64_t dim, double max_period = 10000.0);
// Fixed 2-D sin-cos position embedding (DiT models.py:274-321): (grid_h·grid_w, dim), token
// n = i·grid_w + j holds [sin(jω), cos(jω), sin(iω), cos(iω)]; computed in float64.
at::Tensor sincos_pos_embed_2d(int64_t dim, int64_t grid_h, int64_t grid_w);

class TimestepEmbedder : public torch::nn::Module {
 public:
  explicit TimestepEmbedder(int64_t hidden, int64_t freq_dim = 256);
  at::Tensor forward(const at::Tensor& t);  // (N,) -> (N, D)
  torch::nn::Sequential mlp{nullptr};
  int64_t freq_dim;
};

class LabelEmbedder : public torch::nn::Module {
 public:
  LabelEmbedder(int64_t num_classes, int64_t hidden, double dropout);
  // Labels are replaced by the null class num_classes with probability `dropout` in training
  // mode (or where force_drop is true).
  at::Tensor forward(const at::Tensor& y, bool train, const at::Tensor& force_drop = {});
  torch::nn::Embedding embedding_table{nullptr};
  int64_t num_classes;
  double dropout;
};

class Mlp : public torch::nn::Module {
 public:
  Mlp(int64_t dim, int64_t hidden);
  at::Tensor forward(const at::Tensor& x);  // fc1 -> GELU(tanh) -> fc2
  // FP8 sampling with NALA_FP8_LN_FUSED=1: fc1 registered for FP8, and forward from the input's rows
  // (ops/linear_fp8.h Fp8Input), the same result as forward of the tensor they quantize
  bool takes_fp8_input() const;
  at::Tensor forward_fp8(const ops::Fp8Input& x);
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

class DiTBlock : public torch::nn::Module {
 public:
  DiTBlock(const ModelConfig& c);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& c, int64_t grid_h, int64_t grid_w);  // (N, T, D), (N, D)
  // adaLN_modulation(c) as its six (N, D) parts: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  std::vector<at::Tensor> modulation(const at::Tensor& c);
  // forward with the modulation already made (m: modulation(c)'s six parts, or the model's stacked GEMM's)
  at::Tensor forward(const at::Tensor& x, const std::vector<at::Tensor>& m, int64_t grid_h, int64_t grid_w);
  // A gated residual x + gate·y not yet added (gate undefined: x alone, before the first block).
  struct PendingResidual {
    at::Tensor x, gate, y;  // (N, T, D), (N, D), (N, T, D)
  };
  // With NALA_RESIDUAL_NORM_FUSED=1 (ops/fused_ops.h), sampling and training: forward of
  // in.x + in.gate·in.y with that sum and each of the block's gated residuals added in one pass with
  // the LayerNorm-modulate after it (ops::gated_residual_layer_norm_modulate); the block's last gated
  // residual is returned pending, for the next block or the final layer. Bit for bit forward of the
  // sum, and in training its gradients. `in` by value: moved in, its tensors are freed once the sum
  // is made (sampling's peak memory; autograd keeps what the backward needs).
  // m: the block's modulation (modulation(c)'s six parts, or the model's stacked GEMM's).
  PendingResidual forward_chained(PendingResidual in, const std::vector<at::Tensor>& m, int64_t grid_h, int64_t grid_w);
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  std::shared_ptr<attention::TokenMixer> attn;
  std::shared_ptr<Mlp> mlp;
  torch::nn::Sequential adaLN_modulation{nullptr};
};

class FinalLayer : public torch::nn::Module {
 public:
  FinalLayer(int64_t hidden, int64_t patch, int64_t out_channels);
  std::vector<at::Tensor> modulation(const at::Tensor& c);  // adaLN_modulation(c) as shift, scale: (N, D) each
  // m: modulation(c), or the model's stacked GEMM's two parts
  at::Tensor forward(const at::Tensor& x, const std::vector<at::Tensor>& m);
  // forward of in.x + in.gate·in.y, the sum added in one pass with the LayerNorm-modulate (sampling)
  at::Tensor forward_chained(DiTBlock::PendingResidual in, const std::vector<at::Tensor>& m);
  torch::nn::LayerNorm norm_final{nullptr};
  torch::nn::Linear linear{nullptr};
  torch::nn::Sequential adaLN_modulation{nullptr};
};

// NALA_PATCH_EMBED: `gemm` (default) runs the patch embedding as a GEMM of the patches, `conv` as
// the strided convolution (cuDNN on CUDA) with its output transposed, as before 2026-12-05 (kept
// for the A/B in docs/benchmarks.md, thirtieth session). Read at the first forward; any other value
// is an error naming it.
bool patch_embed_gemm();
void set_patch_embed_gemm(bool on);
bool patch_embed_gemm_of(const std::string& value);  // NALA_PATCH_EMBED's value ("" the default), or the error

class PatchEmbed : public torch::nn::Module {
 public:
  PatchEmbed(int64_t in_channels, int64_t hidden, int64_t patch);
  // (N, C, H, W) -> (N, T, D), tokens row-major, contiguous: the p×p convolution with stride p
  // (DiT's timm PatchEmbed) as one GEMM of the patches, (N·T, C·p·p) · (C·p·p, D) + b (with
  // NALA_PATCH_EMBED=conv the convolution itself, its output a strided transpose)
  at::Tensor forward(const at::Tensor& x);
  // forward(x) + pos (pos (1, T, D) float32, DiT's pos_embed): under CUDA bf16 autocast one kernel
  // (ops/patch_embed.h, NALA_PATCH_EMBED_POS), else the two
  at::Tensor forward_plus(const at::Tensor& x, const at::Tensor& pos);
  // (N, C, H, W) -> (N, T, C·p·p): each token's patch, its values ordered (channel, row, column) as the
  // weight (D, C, p, p) flattens (a view where the reshape allows)
  at::Tensor patches(const at::Tensor& x) const;
  torch::nn::Conv2d proj{nullptr};  // weight (D, C, p, p): the checkpoint's x_embedder.proj

 private:
  int64_t patch_;
};

class DiT : public torch::nn::Module {
 public:
  explicit DiT(const ModelConfig& config);
  // The raw network output: (N, out_channels, H, W) for DiT; SiT returns the first in_channels
  // channels when learn_sigma (SiT models.py:245-246).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& y, const at::Tensor& force_drop = {});
  // Classifier-free guidance as the official forward_with_cfg (DiT models.py:250-266): the first
  // half of x is used for both halves; y's second half holds the null class. guide_channels = 3
  // reproduces the official code (published FIDs), -1 guides every model channel
  // (the first in_channels: eps for DiT, velocity for SiT), as the official comment describes.
  at::Tensor forward_with_cfg(const at::Tensor& x, const at::Tensor& t, const at::Tensor& y, double cfg_scale,
                              int64_t guide_channels = 3);
  // The official initialisation (DiT models.py:182-216): xavier-uniform linears, zero biases, sin-cos
  // pos_embed, N(0, 0.02) embeddings, zero adaLN and final layer (the model starts at output 0).
  void initialize_weights();
  at::Tensor unpatchify(const at::Tensor& x, int64_t grid_h, int64_t grid_w) const;  // (N, T, p·p·C) -> (N, C, H, W)

  const ModelConfig& config() const { return config_; }
  int64_t parameter_count() const;
  // FP8 sampling (ops/linear_fp8.h): the token-wise linear layers (M = batch × tokens: the
  // attention's projections, the MLP, the head) run their GEMMs in FP8 from now on while no gradient
  // is wanted; the per-sample conditioning layers (timestep MLP, adaLN, M = batch) stay in the
  // model's dtype: their GEMMs are small and their error would reach every token. Returns how many
  // layers were switched (those with in and out features multiples of 16).
  int64_t use_fp8_linears();
  // Every block's adaLN_modulation(c) and the final layer's, as the blocks would make them one by
  // one (DiTBlock::modulation, FinalLayer::modulation), but from one SiLU(c) and one GEMM of the
  // stacked weights: depth·6 + 2 parts of (N, D), in block order, the final layer's two last. The
  // forward's path while gradients are wanted with NALA_STACKED_MODULATION=1 (ops/fused_ops.h).
  std::vector<at::Tensor> stacked_modulations(const at::Tensor& c);
  // The adaLN weights in stacked_modulations' order (blocks, then the final layer's): the stack the
  // training step's weight casts lay out one after another with NALA_STACKED_CASTS=1
  // (ops/weight_casts.h), so that the stacked GEMM reads them in place.
  std::vector<at::Tensor> stacked_modulation_weights();
  // How many times stacked_modulations has run in this process (a test's proof that forward took it).
  static int64_t stacked_modulation_calls();

  at::Tensor pos_embed;
  std::shared_ptr<PatchEmbed> x_embedder;
  std::shared_ptr<TimestepEmbedder> t_embedder;
  std::shared_ptr<LabelEmbedder> y_embedder;
  torch::nn::ModuleList blocks{nullptr};
  std::shared_ptr<FinalLayer> final_layer;

 private:
  ModelConfig config_;
  std::vector<torch::nn::LinearImpl*> modulation_linears();  // every adaLN Linear, blocks then the final layer
};

}  // namespace nala::models
