// Training configuration: a small table of presets (EDM2 style), every field overridable from the
// command line, the resolved config saved as config.json in the run directory.
//   fashion-mnist-tiny   NaLaSiT-T/4 (NaLa attention, flow matching) on the built-in Fashion-MNIST,
//                        32 px pixel space, minutes on a CPU
//   fashion-mnist-s2     NaLaDiT-S/2 on Fashion-MNIST (the quality experiment's setting, GPU)
//   imagenet-{256,512}-{s2,b2,l2,xl2}  DiT's ImageNet recipe: AdamW lr 1e-4, wd 0, batch 256, EMA
//                        0.9999, latents of the SD VAE (image size / 8), 1000 classes
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nala::diffusion {

struct TrainConfig {
  std::string preset;
  std::string model = "NaLaDiT-T/4";
  std::string objective = "auto";       // "ddpm", "flow", or "auto" (DiT family -> ddpm, SiT -> flow)
  std::string data = "fashion-mnist";   // "fashion-mnist", a Fashion-MNIST folder, a latent folder, an image folder
  std::string vae = "none";             // image folders: the VAE weights to encode online
  int64_t image_size = 32;              // pixels
  int64_t num_classes = 10;
  int64_t global_batch = 64;
  int64_t steps = 3000;
  double lr = 1e-4, weight_decay = 0.0, grad_clip = 0.0;  // grad_clip 0: off
  double ema_decay = 0.9999;
  bool ema_warmup = false;              // decay min(ema_decay, (1 + step)/(10 + step)): short runs need it; DiT has none
  std::string precision = "auto";       // "auto" (bf16 on CUDA, fp32 on CPU), "fp32", "bf16"
  uint64_t seed = 0;
  int64_t log_every = 100, ckpt_every = 5000, keep_last = 3, sample_every = 0;
  int64_t workers = 4;
  int64_t max_nonfinite = 20;           // stop after this many skipped non-finite steps
  double max_minutes = 0;               // stop (and checkpoint) after this long; 0: no limit
  // model options
  std::string attention = "";           // override: "softmax" or a feature map
  double alpha = -1;                    // NaLa α override
  int64_t lepe = -1;                    // LePE kernel override (0 disables)
  // objectives
  std::string schedule = "linear", variance = "learned-range";
  std::string path = "Linear", prediction = "velocity", loss_weight = "none";
  // sampling for the periodic grids
  int64_t sample_steps = 25;
  double sample_cfg = 1.0;

  std::string resolved_objective() const;
};

std::vector<std::string> preset_names();
TrainConfig train_preset(const std::string& name);  // throws with the known names
void validate(const TrainConfig& c);                // throws with the value
std::string train_config_to_json(const TrainConfig& c);
TrainConfig train_config_from_json(const std::string& json);

}  // namespace nala::diffusion
