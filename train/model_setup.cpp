#include "train/model_setup.h"

#include <algorithm>
#include <stdexcept>


namespace nala::train {

ModelSetup setup_model(const TrainConfig& cfg, const c10::Device& device) {
  ModelSetup s;
  s.dataset = data::open_dataset(cfg.data, cfg.image_size);
  // latents fix the image size: a run that records another (config.json) would describe images the
  // model does not make (shards without the record: the size given is taken as it is)
  if (const auto* latents = dynamic_cast<const data::LatentShards*>(s.dataset.get())) {
    const auto px = latents->recorded_image_size();
    if (px && *px != cfg.image_size)
      throw std::runtime_error("--data '" + cfg.data + "' holds latents of " + std::to_string(*px) + "-px images (its shards record it), but the run's " +
                               "--image-size is " + std::to_string(cfg.image_size) + ": pass --image-size " + std::to_string(*px) +
                               " or the latents of " + std::to_string(cfg.image_size) + "-px images");
  }
  // An image folder with --vae is encoded online, every step (DiT train.py's way; extract-latents
  // once is much faster); without a VAE the model works in pixel space.
  auto shape = s.dataset->sample_shape();  // (C, h, w)
  s.autoencoder = models::make_autoencoder(cfg.vae, shape[0]);
  s.online_vae = cfg.vae != "none" && !cfg.vae.empty();
  if (s.online_vae) {
    if (shape[0] != 3) throw std::runtime_error("--vae encodes RGB images, but the data has " + std::to_string(shape[0]) + " channels");
    s.autoencoder->to(device, device.is_cuda() ? at::kBFloat16 : at::kFloat);
    shape = {s.autoencoder->latent_channels(), shape[1] / s.autoencoder->downsample(), shape[2] / s.autoencoder->downsample()};
  }
  if (shape[1] != shape[2]) throw std::runtime_error("training needs square samples, got " + std::to_string(shape[1]) + "x" + std::to_string(shape[2]));
  models::ModelConfig& mc = s.model;
  mc = models::model_config(cfg.model);
  mc.input_size = shape[1];
  mc.in_channels = shape[0];
  mc.num_classes = std::max(cfg.num_classes, s.dataset->num_classes());
  if (!cfg.attention.empty()) mc.attention = cfg.attention;
  if (cfg.alpha > 0) mc.nala.nala.alpha = cfg.alpha;
  if (cfg.lepe >= 0) mc.nala.lepe_kernel = cfg.lepe;
  if (cfg.objective == "flow") mc.learn_sigma = mc.family == "SiT" ? mc.learn_sigma : false;
  models::validate(mc);
  return s;
}

}  // namespace nala::train
