// The Stable Diffusion VAE (diffusers AutoencoderKL; sd-vae-ft-ema / sd-vae-ft-mse), loading the
// published diffusion_pytorch_model.safetensors by its own key names (the old attention names
// query/key/value/proj_attn are accepted too). Latents are scaled by 0.18215 as DiT does
// (docs/reference.md §4.2): encode returns scaled latents, decode takes them.
// Shapes: images (N, 3, H, W) in [-1, 1]; latents (N, 4, H/8, W/8).
// An identity "pixel space" autoencoder stands in where no VAE is used (Fashion-MNIST).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>

namespace nala::models {

struct VaeConfig {
  std::vector<int64_t> block_out_channels = {128, 256, 512, 512};
  int64_t layers_per_block = 2;
  int64_t latent_channels = 4;
  int64_t in_channels = 3;
  int64_t norm_groups = 32;
  double scaling_factor = 0.18215;
};

class Autoencoder {
 public:
  virtual ~Autoencoder() = default;
  // mean: the posterior mean; otherwise a sample mean + std·ε (DiT's latent_dist.sample()).
  virtual at::Tensor encode(const at::Tensor& images, bool mean, std::optional<at::Generator> gen = std::nullopt) = 0;
  virtual at::Tensor decode(const at::Tensor& latents) = 0;
  virtual int64_t downsample() const = 0;       // spatial factor image / latent
  virtual int64_t latent_channels() const = 0;
  virtual void to(const c10::Device& d, at::ScalarType dtype) = 0;
};

// Pixel space: encode and decode are the identity.
class IdentityAutoencoder : public Autoencoder {
 public:
  explicit IdentityAutoencoder(int64_t channels) : channels_(channels) {}
  at::Tensor encode(const at::Tensor& images, bool, std::optional<at::Generator>) override { return images; }
  at::Tensor decode(const at::Tensor& latents) override { return latents; }
  int64_t downsample() const override { return 1; }
  int64_t latent_channels() const override { return channels_; }
  void to(const c10::Device&, at::ScalarType) override {}

 private:
  int64_t channels_;
};

class AutoencoderKL : public Autoencoder, public torch::nn::Module {
 public:
  explicit AutoencoderKL(const VaeConfig& c = {});
  at::Tensor encode(const at::Tensor& images, bool mean, std::optional<at::Generator> gen = std::nullopt) override;
  at::Tensor decode(const at::Tensor& latents) override;
  // Tiled versions for large images: tiles of `tile` pixels (latent tile/8) overlapping by 1/4,
  // blended linearly across the overlap (as diffusers' tiled_encode / tiled_decode).
  at::Tensor decode_tiled(const at::Tensor& latents, int64_t tile = 512);
  at::Tensor encode_tiled(const at::Tensor& images, bool mean, int64_t tile = 512, std::optional<at::Generator> gen = std::nullopt);
  // moments before sampling: (mean, logvar) unscaled
  std::pair<at::Tensor, at::Tensor> encode_moments(const at::Tensor& images);
  at::Tensor decode_unscaled(const at::Tensor& z);
  int64_t downsample() const override { return int64_t(1) << (cfg_.block_out_channels.size() - 1); }
  int64_t latent_channels() const override { return cfg_.latent_channels; }
  void to(const c10::Device& d, at::ScalarType dtype) override { torch::nn::Module::to(d, dtype); }
  const VaeConfig& config() const { return cfg_; }

 private:
  VaeConfig cfg_;
  std::shared_ptr<torch::nn::Module> encoder_, decoder_;
  torch::nn::Conv2d quant_conv{nullptr}, post_quant_conv{nullptr};
  friend struct VaeAccess;
};

// Loads a diffusers AutoencoderKL safetensors file (channel widths and depth from its shapes);
// throws naming the file and the first missing or mismatched key.
std::shared_ptr<AutoencoderKL> load_vae(const std::string& path);

// "none" -> identity with `pixel_channels`; otherwise load_vae(path).
std::shared_ptr<Autoencoder> make_autoencoder(const std::string& spec, int64_t pixel_channels);

}  // namespace nala::models
