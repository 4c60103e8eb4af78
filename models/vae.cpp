#include "models/vae.h"

#include <cmath>
#include <functional>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <map>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "ops/linear.h"
#include "models/checkpoint.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace nala::models {
namespace {

using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;
using torch::nn::GroupNorm;
using torch::nn::GroupNormOptions;
using torch::nn::Linear;

GroupNorm group_norm(int64_t groups, int64_t ch) { return GroupNorm(GroupNormOptions(groups, ch).eps(1e-6)); }
Conv2d conv3(int64_t in, int64_t out) { return Conv2d(Conv2dOptions(in, out, 3).padding(1)); }

// diffusers ResnetBlock2D (temb None, output scale 1): x + conv2(silu(norm2(conv1(silu(norm1(x))))))
struct ResnetBlock : torch::nn::Module {
  GroupNorm norm1{nullptr}, norm2{nullptr};
  Conv2d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};
  ResnetBlock(int64_t in, int64_t out, int64_t groups) {
    norm1 = register_module("norm1", group_norm(groups, in));
    conv1 = register_module("conv1", conv3(in, out));
    norm2 = register_module("norm2", group_norm(groups, out));
    conv2 = register_module("conv2", conv3(out, out));
    if (in != out) conv_shortcut = register_module("conv_shortcut", Conv2d(Conv2dOptions(in, out, 1)));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = conv1->forward(at::silu(norm1->forward(x)));
    h = conv2->forward(at::silu(norm2->forward(h)));
    return (conv_shortcut ? conv_shortcut->forward(x) : x) + h;
  }
};

// diffusers Attention as the VAE mid block uses it: one head of width C, group norm first, residual.
struct AttentionBlock : torch::nn::Module {
  GroupNorm group_norm_{nullptr};
  Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};
  AttentionBlock(int64_t ch, int64_t groups) {
    group_norm_ = register_module("group_norm", group_norm(groups, ch));
    to_q = register_module("to_q", Linear(ch, ch));
    to_k = register_module("to_k", Linear(ch, ch));
    to_v = register_module("to_v", Linear(ch, ch));
    to_out = register_module("to_out", torch::nn::ModuleList(Linear(ch, ch)));
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    at::Tensor h = group_norm_->forward(x).view({B, C, H * W}).transpose(1, 2);          // (B, HW, C)
    at::Tensor q = ops::linear(to_q, h).unsqueeze(1), k = ops::linear(to_k, h).unsqueeze(1), v = ops::linear(to_v, h).unsqueeze(1);  // (B, 1, HW, C)
    at::Tensor o = at::scaled_dot_product_attention(q, k, v).squeeze(1);                   // (B, HW, C)
    o = ops::linear(*to_out[0]->as<Linear>(), o).transpose(1, 2).reshape({B, C, H, W});
    return o + x;
  }
};

struct MidBlock : torch::nn::Module {
  torch::nn::ModuleList resnets{nullptr}, attentions{nullptr};
  MidBlock(int64_t ch, int64_t groups) {
    resnets = register_module("resnets", torch::nn::ModuleList(std::make_shared<ResnetBlock>(ch, ch, groups),
                                                                std::make_shared<ResnetBlock>(ch, ch, groups)));
    attentions = register_module("attentions", torch::nn::ModuleList(std::make_shared<AttentionBlock>(ch, groups)));
  }
  at::Tensor forward(at::Tensor x) {
    x = resnets[0]->as<ResnetBlock>()->forward(x);
    x = attentions[0]->as<AttentionBlock>()->forward(x);
    return resnets[1]->as<ResnetBlock>()->forward(x);
  }
};

struct Resample : torch::nn::Module {  // Downsample2D (pad (0,1,0,1), stride 2) or Upsample2D (nearest x2)
  Conv2d conv{nullptr};
  bool down;
  Resample(int64_t ch, bool down_) : down(down_) {
    conv = register_module("conv", down ? Conv2d(Conv2dOptions(ch, ch, 3).stride(2)) : conv3(ch, ch));
  }
  at::Tensor forward(const at::Tensor& x) {
    if (down) return conv->forward(at::constant_pad_nd(x, {0, 1, 0, 1}, 0));
    return conv->forward(at::upsample_nearest2d(x, {x.size(2) * 2, x.size(3) * 2}));
  }
};

struct CoderBlock : torch::nn::Module {  // DownEncoderBlock2D / UpDecoderBlock2D
  torch::nn::ModuleList resnets{nullptr}, resamplers{nullptr};
  CoderBlock(int64_t in, int64_t out, int64_t layers, int64_t groups, bool resample, bool down) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    for (int64_t i = 0; i < layers; ++i) resnets->push_back(std::make_shared<ResnetBlock>(i == 0 ? in : out, out, groups));
    if (resample) resamplers = register_module(down ? "downsamplers" : "upsamplers", torch::nn::ModuleList(std::make_shared<Resample>(out, down)));
  }
  at::Tensor forward(at::Tensor x) {
    for (auto& r : *resnets) x = r->as<ResnetBlock>()->forward(x);
    if (resamplers) x = resamplers[0]->as<Resample>()->forward(x);
    return x;
  }
};

struct Encoder : torch::nn::Module {
  Conv2d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList down_blocks{nullptr};
  std::shared_ptr<MidBlock> mid_block;
  GroupNorm conv_norm_out{nullptr};
  explicit Encoder(const VaeConfig& c) {
    const auto& ch = c.block_out_channels;
    conv_in = register_module("conv_in", conv3(c.in_channels, ch[0]));
    down_blocks = register_module("down_blocks", torch::nn::ModuleList());
    for (size_t i = 0; i < ch.size(); ++i)
      down_blocks->push_back(std::make_shared<CoderBlock>(i == 0 ? ch[0] : ch[i - 1], ch[i], c.layers_per_block, c.norm_groups, i + 1 < ch.size(), true));
    mid_block = register_module("mid_block", std::make_shared<MidBlock>(ch.back(), c.norm_groups));
    conv_norm_out = register_module("conv_norm_out", group_norm(c.norm_groups, ch.back()));
    conv_out = register_module("conv_out", conv3(ch.back(), 2 * c.latent_channels));
  }
  at::Tensor forward(at::Tensor x) {
    x = conv_in->forward(x);
    for (auto& b : *down_blocks) x = b->as<CoderBlock>()->forward(x);
    x = mid_block->forward(x);
    return conv_out->forward(at::silu(conv_norm_out->forward(x)));
  }
};

struct Decoder : torch::nn::Module {
  Conv2d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList up_blocks{nullptr};
  std::shared_ptr<MidBlock> mid_block;
  GroupNorm conv_norm_out{nullptr};
  explicit Decoder(const VaeConfig& c) {
    std::vector<int64_t> rev(c.block_out_channels.rbegin(), c.block_out_channels.rend());
    conv_in = register_module("conv_in", conv3(c.latent_channels, rev[0]));
    up_blocks = register_module("up_blocks", torch::nn::ModuleList());
    for (size_t i = 0; i < rev.size(); ++i)
      up_blocks->push_back(std::make_shared<CoderBlock>(i == 0 ? rev[0] : rev[i - 1], rev[i], c.layers_per_block + 1, c.norm_groups, i + 1 < rev.size(), false));
    mid_block = register_module("mid_block", std::make_shared<MidBlock>(rev[0], c.norm_groups));
    conv_norm_out = register_module("conv_norm_out", group_norm(c.norm_groups, rev.back()));
    conv_out = register_module("conv_out", conv3(rev.back(), c.in_channels));
  }
  at::Tensor forward(at::Tensor z) {
    at::Tensor x = conv_in->forward(z);
    x = mid_block->forward(x);
    for (auto& b : *up_blocks) x = b->as<CoderBlock>()->forward(x);
    return conv_out->forward(at::silu(conv_norm_out->forward(x)));
  }
};

// Blends two overlapping tiles linearly over `extent` rows / columns (diffusers blend_v / blend_h).
void blend(at::Tensor& b, const at::Tensor& a, int64_t extent, int dim) {
  extent = std::min({a.size(dim), b.size(dim), extent});
  for (int64_t i = 0; i < extent; ++i) {
    const double w = double(i) / double(extent);
    b.select(dim, i).copy_(a.select(dim, a.size(dim) - extent + i) * (1 - w) + b.select(dim, i) * w);
  }
}

}  // namespace

AutoencoderKL::AutoencoderKL(const VaeConfig& c) : cfg_(c) {
  encoder_ = register_module("encoder", std::make_shared<Encoder>(c));
  decoder_ = register_module("decoder", std::make_shared<Decoder>(c));
  quant_conv = register_module("quant_conv", Conv2d(Conv2dOptions(2 * c.latent_channels, 2 * c.latent_channels, 1)));
  post_quant_conv = register_module("post_quant_conv", Conv2d(Conv2dOptions(c.latent_channels, c.latent_channels, 1)));
}

std::pair<at::Tensor, at::Tensor> AutoencoderKL::encode_moments(const at::Tensor& images) {
  const auto dt = quant_conv->weight.scalar_type();
  at::Tensor m = quant_conv->forward(std::static_pointer_cast<Encoder>(encoder_)->forward(images.to(dt)));  // (N, 2·4, h, w)
  auto parts = m.chunk(2, 1);
  return {parts[0], parts[1].clamp(-30.0, 20.0)};  // DiagonalGaussianDistribution clamps logvar
}

at::Tensor AutoencoderKL::encode(const at::Tensor& images, bool mean, std::optional<at::Generator> gen) {
  torch::NoGradGuard ng;
  auto [mu, logvar] = encode_moments(images);
  at::Tensor z = mu;
  if (!mean) {
    at::Tensor eps = gen ? at::randn(mu.sizes(), gen, mu.options().dtype(at::kFloat).device(gen->device())).to(mu.device(), mu.scalar_type())
                         : at::randn_like(mu);
    z = mu + at::exp(0.5 * logvar) * eps;
  }
  return (z * cfg_.scaling_factor).to(at::kFloat);
}

at::Tensor AutoencoderKL::decode_unscaled(const at::Tensor& z) {
  const auto dt = post_quant_conv->weight.scalar_type();
  return std::static_pointer_cast<Decoder>(decoder_)->forward(post_quant_conv->forward(z.to(dt))).to(at::kFloat);
}

at::Tensor AutoencoderKL::decode(const at::Tensor& latents) {
  torch::NoGradGuard ng;
  return decode_unscaled(latents / cfg_.scaling_factor);
}

namespace {
// Runs fn on overlapping tiles of x (tile side `in_tile`, stride `stride`), blends each output tile
// into its upper and left neighbours over `blend_n` rows / columns, keeps the first `keep` of each,
// and crops the mosaic to (out_h, out_w) (diffusers' tiled_encode / tiled_decode).
at::Tensor tiled(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x, int64_t in_tile, int64_t stride,
                 int64_t blend_n, int64_t keep, int64_t out_h, int64_t out_w) {
  const int64_t H = x.size(2), W = x.size(3);
  std::vector<std::vector<at::Tensor>> rows;
  for (int64_t i = 0; i < H; i += stride) {
    std::vector<at::Tensor> row;
    for (int64_t j = 0; j < W; j += stride) row.push_back(fn(x.narrow(2, i, std::min(in_tile, H - i)).narrow(3, j, std::min(in_tile, W - j))));
    rows.push_back(row);
  }
  std::vector<at::Tensor> out_rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<at::Tensor> parts;
    for (size_t j = 0; j < rows[i].size(); ++j) {
      at::Tensor t = rows[i][j].clone();
      if (i > 0) blend(t, rows[i - 1][j], blend_n, 2);
      if (j > 0) blend(t, rows[i][j - 1], blend_n, 3);
      rows[i][j] = t;
      parts.push_back(t.narrow(2, 0, std::min(keep, t.size(2))).narrow(3, 0, std::min(keep, t.size(3))));
    }
    out_rows.push_back(at::cat(parts, 3));
  }
  return at::cat(out_rows, 2).narrow(2, 0, out_h).narrow(3, 0, out_w);
}
}  // namespace

at::Tensor AutoencoderKL::decode_tiled(const at::Tensor& latents, int64_t tile) {
  torch::NoGradGuard ng;
  const int64_t f = downsample(), lt = tile / f, blend_px = int64_t(tile * 0.25);
  at::Tensor z = latents / cfg_.scaling_factor;
  if (z.size(2) <= lt && z.size(3) <= lt) return decode_unscaled(z);
  return tiled([&](const at::Tensor& t) { return decode_unscaled(t); }, z, lt, int64_t(lt * 0.75), blend_px, tile - blend_px,
               z.size(2) * f, z.size(3) * f);
}

at::Tensor AutoencoderKL::encode_tiled(const at::Tensor& images, bool mean, int64_t tile, std::optional<at::Generator> gen) {
  torch::NoGradGuard ng;
  const int64_t f = downsample(), lt = tile / f, blend_l = int64_t(lt * 0.25);
  if (images.size(2) <= tile && images.size(3) <= tile) return encode(images, mean, gen);
  auto moments = [&](const at::Tensor& t) {
    auto [mu, logvar] = encode_moments(t);
    return at::cat({mu, logvar}, 1).to(at::kFloat);
  };
  at::Tensor m = tiled(moments, images, tile, int64_t(tile * 0.75), blend_l, lt - blend_l, images.size(2) / f, images.size(3) / f);
  auto parts = m.chunk(2, 1);
  at::Tensor z = parts[0];
  if (!mean) {
    at::Tensor eps = gen ? at::randn(z.sizes(), gen, z.options().device(gen->device())).to(z.device()) : at::randn_like(z);
    z = z + at::exp(0.5 * parts[1]) * eps;
  }
  return z * cfg_.scaling_factor;
}

std::shared_ptr<AutoencoderKL> load_vae(const std::string& path) {
  io::NamedTensors raw = io::load_safetensors(path);
  // the deprecated attention names of older diffusers files
  const std::pair<std::string, std::string> renames[] = {{".query.", ".to_q."}, {".key.", ".to_k."}, {".value.", ".to_v."}, {".proj_attn.", ".to_out.0."}};
  std::map<std::string, at::Tensor> w;
  for (auto& [k, t] : raw) {
    std::string name = k;
    for (auto& [o, n] : renames) {
      auto p = name.find(o);
      if (p != std::string::npos) name.replace(p, o.size(), n);
    }
    at::Tensor v = t;
    if (name.find("attentions.0.to_") != std::string::npos && v.dim() == 4) v = v.flatten(1);  // 1x1 conv weights of old files
    w[name] = v;
  }
  VaeConfig c;
  auto need = [&](const std::string& k) -> const at::Tensor& {
    auto it = w.find(k);
    if (it == w.end()) throw std::runtime_error(path + ": not an AutoencoderKL file: no '" + k + "'");
    return it->second;
  };
  c.block_out_channels.clear();
  for (int i = 0;; ++i) {
    auto it = w.find("encoder.down_blocks." + std::to_string(i) + ".resnets.0.conv1.weight");
    if (it == w.end()) break;
    c.block_out_channels.push_back(it->second.size(0));
  }
  if (c.block_out_channels.empty()) need("encoder.down_blocks.0.resnets.0.conv1.weight");
  c.layers_per_block = 0;
  while (w.count("encoder.down_blocks.0.resnets." + std::to_string(c.layers_per_block) + ".conv1.weight")) ++c.layers_per_block;
  c.latent_channels = need("post_quant_conv.weight").size(0);
  c.in_channels = need("encoder.conv_in.weight").size(1);
  // GroupNorm groups and the latent scale are not in the tensors: diffusers' config.json beside
  // the weights has them; without it, the SD VAE's values (32 groups, 0.18215)
  const std::string cfg_path = (std::filesystem::path(path).parent_path() / "config.json").string();
  if (std::filesystem::exists(cfg_path)) {
    try {
      auto j = nlohmann::json::parse(io::read_file(cfg_path));
      if (j.contains("norm_num_groups")) c.norm_groups = j["norm_num_groups"];
      if (j.contains("scaling_factor") && j["scaling_factor"].is_number()) c.scaling_factor = j["scaling_factor"];
    } catch (const std::exception& e) {
      throw std::runtime_error(cfg_path + ": cannot read the VAE config (" + e.what() + ")");
    }
  }
  for (int64_t ch : c.block_out_channels)
    if (ch % c.norm_groups != 0)
      throw std::runtime_error(path + ": " + std::to_string(c.norm_groups) + " GroupNorm groups do not divide the width " + std::to_string(ch) +
                               " (put the diffusers config.json beside the weights)");
  auto vae = std::make_shared<AutoencoderKL>(c);
  io::NamedTensors named(w.begin(), w.end());
  io::load_state_dict(*vae, named, path);
  vae->eval();
  return vae;
}

std::shared_ptr<Autoencoder> make_autoencoder(const std::string& spec, int64_t pixel_channels) {
  if (spec.empty() || spec == "none") return std::make_shared<IdentityAutoencoder>(pixel_channels);
  return load_vae(spec);
}

}  // namespace nala::models
