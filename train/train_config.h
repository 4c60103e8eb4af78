// Training configuration: one table of fields (train_config_fields) drives the CLI flags, the
// config.json of a run and the resume check; presets are a flat table of field overrides (EDM2
// style); a flag overrides a preset; the resolved config is saved in the run directory.
//   fashion-mnist-tiny   NaLaSiT-T/4 (NaLa attention, flow matching) on the built-in Fashion-MNIST,
//                        32 px pixel space, minutes on a CPU
//   fashion-mnist-s2-flow NaLaSiT-S/2 on Fashion-MNIST for the GPU demo (lr 2e-4, EMA 0.9995 with warm-up)
//   fashion-mnist-s2     NaLaDiT-S/2 on Fashion-MNIST (the quality experiment's setting, GPU)
//   imagenet-{256,512}-{s2,b2,l2,xl2}  DiT's ImageNet recipe: AdamW lr 1e-4, wd 0, batch 256, EMA
//                        0.9999, latents of the SD VAE (image size / 8), 1000 classes
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace nala::train {

struct TrainConfig {
  std::string preset;
  std::string model = "NaLaDiT-T/4";
  std::string objective = "auto";       // "ddpm", "flow", or "auto" (DiT family -> ddpm, SiT -> flow)
  std::string data = "fashion-mnist";   // "fashion-mnist", a Fashion-MNIST folder, a latent folder, an image folder
  std::string vae = "none";             // image folders: the VAE weights to encode online
  int64_t image_size = 32;              // pixels
  int64_t num_classes = 10;
  int64_t global_batch = 64;
  // each process's batch taken in this many equal pieces, forward and backward one at a time, the
  // gradients summed (and, with several processes, all-reduced once) before the update: the same
  // step in less memory
  int64_t grad_accum = 1;
  int64_t steps = 3000;
  double lr = 1e-4, weight_decay = 0.0, grad_clip = 0.0;  // grad_clip 0: off
  // the rate's schedule (train/lr_schedule.h): constant (DiT's), cosine or linear decay toward
  // lr_end over the steps, after a linear warm-up of lr_warmup steps (0: none)
  std::string lr_schedule = "constant";
  int64_t lr_warmup = 0;
  double lr_end = 0.0;
  double ema_decay = 0.9999;
  bool ema_warmup = false;              // decay min(ema_decay, (1 + step)/(10 + step)): short runs need it; DiT has none
  std::string precision = "auto";       // "auto" (bf16 on CUDA, fp32 on CPU), "fp32", "bf16"
  uint64_t seed = 0;
  int64_t log_every = 100, ckpt_every = 5000, keep_last = 3, sample_every = 0;
  int64_t workers = 4;
  // data parallel: gradient buckets (MiB) all-reduced during the backward as they fill (false: all
  // after the backward)
  bool overlap_grads = true;
  double bucket_mb = 25;
  // one process on CUDA: capture the whole step as a CUDA graph after a few eager steps and replay
  // it (models/cuda_graph.h)
  bool cuda_graphs = false;
  // NaLa models: keep less for the backward and recompute it there (ops/fused_ops.h
  // recompute_saved; the same as NALA_RECOMPUTE=1): less memory, slower steps
  bool recompute = false;
  // TensorBoard event files in RUN/tb/ (report/tensorboard.h), beside metrics.jsonl
  bool tensorboard = true;
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
};

// One field of TrainConfig: its JSON key, its CLI flag, help, and whether a resumed run may give
// it a different value (run length and bookkeeping may change; anything that changes the result may not).
struct ConfigField {
  const char* key;
  const char* flag;
  const char* help;
  std::variant<std::string TrainConfig::*, int64_t TrainConfig::*, uint64_t TrainConfig::*, double TrainConfig::*, bool TrainConfig::*> member;
  bool may_change_on_resume;
};

const std::vector<ConfigField>& train_config_fields();
// The field with this JSON key or CLI flag; throws with the known names.
const ConfigField& find_config_field(const std::string& key_or_flag);
// Sets a field from its text form ("true"/"false" for booleans); throws naming the flag and value.
void set_config_field(TrainConfig& c, const ConfigField& f, const std::string& value);
std::string config_field_text(const TrainConfig& c, const ConfigField& f);

std::vector<std::string> preset_names();
TrainConfig train_preset(const std::string& name);  // throws with the known names
// "auto" resolved (objective from the model family); then validate() throws with the bad value.
TrainConfig resolved(TrainConfig c);
void validate(const TrainConfig& c);
std::string train_config_to_json(const TrainConfig& c);
// Fields missing from the file keep their defaults (a config.json from an older nala); unknown keys are errors.
TrainConfig train_config_from_json(const std::string& json, const std::string& source);
// The fields that differ between a saved run and this one, ignoring those that may change on resume
// (and --steps where the learning rate decays over them).
std::vector<std::string> resume_conflicts(const TrainConfig& saved, const TrainConfig& now);

}  // namespace nala::train
