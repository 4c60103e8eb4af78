#include "train/train_config.h"

#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "models/model_config.h"

namespace nala::train {
namespace {

using C = TrainConfig;

// A preset: a name, what it is for, and the fields it sets (JSON keys, text values).
struct Preset {
  std::string name;
  std::vector<std::pair<const char*, std::string>> fields;
};

std::vector<Preset> make_presets() {
  std::vector<Preset> v = {
      // NaLa attention trained with flow matching: on 2 CPU cores, 4.5 minutes (≈800 steps) give
      // recognisable class-conditional samples, where the DDPM objective still gives blobs. lr 1e-3:
      // a 1.4M-parameter model and a short run take a large step; EMA 0.999 with warm-up: a
      // ~1000-step horizon fits a 3000-step run (without warm-up the EMA still holds half of the
      // zero-output initial weights after 700 steps).
      {"fashion-mnist-tiny",
       {{"model", "NaLaSiT-T/4"}, {"global_batch", "64"}, {"steps", "3000"}, {"lr", "1e-3"}, {"ema_decay", "0.999"},
        {"ema_warmup", "true"}, {"log_every", "50"}, {"ckpt_every", "500"}, {"sample_every", "1000"}, {"workers", "2"}}},
      // the GPU demo (scripts/demo.sh): NaLaSiT-S/2 trained for minutes, a step size for a 33M-parameter model
      {"fashion-mnist-s2-flow",
       {{"model", "NaLaSiT-S/2"}, {"global_batch", "256"}, {"steps", "20000"}, {"lr", "2e-4"}, {"ema_decay", "0.9995"},
        {"ema_warmup", "true"}, {"log_every", "100"}, {"ckpt_every", "500"}, {"sample_every", "0"}}},
      {"fashion-mnist-s2",
       {{"model", "NaLaDiT-S/2"}, {"global_batch", "256"}, {"steps", "20000"}, {"lr", "1e-4"}, {"ema_decay", "0.9995"},
        {"ema_warmup", "true"}, {"log_every", "100"}, {"ckpt_every", "5000"}, {"sample_every", "5000"}}},
  };
  // DiT's ImageNet recipe (docs/reference.md §4.3-§4.5); --data must be given (latents or images).
  for (const char* px : {"256", "512"})
    for (auto [s, m] : {std::pair{"s2", "DiT-S/2"}, {"b2", "DiT-B/2"}, {"l2", "DiT-L/2"}, {"xl2", "DiT-XL/2"}})
      v.push_back({std::string("imagenet-") + px + "-" + s,
                   {{"model", m}, {"data", ""}, {"image_size", px}, {"num_classes", "1000"}, {"global_batch", "256"}, {"steps", "400000"},
                    {"lr", "1e-4"}, {"ema_decay", "0.9999"}, {"log_every", "100"}, {"ckpt_every", "50000"}, {"sample_every", "10000"},
                    {"sample_steps", "50"}, {"sample_cfg", "4.0"}}});
  return v;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> v = make_presets();
  return v;
}

std::string json_text(const nlohmann::json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

}  // namespace

const std::vector<ConfigField>& train_config_fields() {
  static const std::vector<ConfigField> fields = {
      {"preset", "", "the preset this run started from", &C::preset, false},
      {"model", "model", "model name, e.g. NaLaDiT-S/2", &C::model, false},
      {"objective", "objective", "ddpm, flow or auto (from the model family)", &C::objective, false},
      {"data", "data", "fashion-mnist, a latent folder (extract-latents) or an image folder", &C::data, false},
      {"vae", "vae", "image folders: VAE weights to encode online (slow; extract-latents is the fast way), or none for pixel space", &C::vae, false},
      {"image_size", "image-size", "image size in pixels", &C::image_size, false},
      {"num_classes", "num-classes", "classes", &C::num_classes, false},
      {"global_batch", "batch", "global batch size", &C::global_batch, false},
      {"grad_accum", "grad-accum", "take each process's batch in this many equal pieces, summing their gradients (the same step in less memory)", &C::grad_accum, true},
      {"steps", "steps", "training steps", &C::steps, true},
      {"lr", "lr", "learning rate", &C::lr, false},
      {"lr_schedule", "lr-schedule", "constant (DiT's), cosine or linear: the rate decays from --lr toward --lr-end over --steps", &C::lr_schedule, false},
      {"lr_warmup", "lr-warmup", "steps of a linear warm-up to --lr (0: none)", &C::lr_warmup, false},
      {"lr_end", "lr-end", "the rate a cosine or linear schedule decays toward (reached one step past the last, as torch's schedulers)", &C::lr_end, false},
      {"weight_decay", "weight-decay", "AdamW weight decay", &C::weight_decay, false},
      {"grad_clip", "grad-clip", "clip the gradient norm (0: off)", &C::grad_clip, false},
      {"ema_decay", "ema-decay", "EMA decay", &C::ema_decay, false},
      {"ema_warmup", "ema-warmup", "EMA decay warm-up: true or false", &C::ema_warmup, false},
      {"precision", "precision", "auto, fp32, bf16", &C::precision, false},
      {"seed", "seed", "global seed", &C::seed, false},
      {"log_every", "log-every", "steps between metric lines", &C::log_every, true},
      {"ckpt_every", "ckpt-every", "steps between checkpoints", &C::ckpt_every, true},
      {"keep_last", "keep-last", "checkpoints kept", &C::keep_last, true},
      {"sample_every", "sample-every", "steps between EMA sample grids (0: off)", &C::sample_every, true},
      {"workers", "workers", "data loader threads", &C::workers, true},
      {"overlap_grads", "overlap-grads", "data parallel: all-reduce gradient buckets during the backward as they fill (false: after it)", &C::overlap_grads, true},
      {"bucket_mb", "bucket-mb", "data parallel: gradient bucket size in MiB (PyTorch DDP's default 25)", &C::bucket_mb, true},
      {"cuda_graphs", "cuda-graphs", "one process on CUDA: replay the training step as a CUDA graph (true or false)", &C::cuda_graphs, true},
      {"recompute", "recompute", "NaLa models: recompute the attention state (and on CUDA the gate and the tail's output) in the backward instead of keeping them: less memory, slower steps (true or false; NALA_RECOMPUTE=1 is the same)", &C::recompute, true},
      {"tensorboard", "tensorboard", "TensorBoard event files in RUN/tb (true or false)", &C::tensorboard, true},
      {"max_nonfinite", "max-nonfinite", "skipped non-finite steps before giving up", &C::max_nonfinite, true},
      {"max_minutes", "max-minutes", "stop and checkpoint after this long (0: no limit)", &C::max_minutes, true},
      {"attention", "attention", "softmax, nala, nala-relu, elu, relu, focused (default: the model's)", &C::attention, false},
      {"alpha", "alpha", "NaLa angle scale α (default: the model's)", &C::alpha, false},
      {"lepe", "lepe", "LePE kernel size (0: off; default: the model's)", &C::lepe, false},
      {"schedule", "schedule", "DDPM beta schedule: linear, cosine", &C::schedule, false},
      {"variance", "variance", "DDPM variance of learn-sigma models: learned-range, fixed-small, fixed-large", &C::variance, false},
      {"path", "path", "flow path: Linear, GVP, VP", &C::path, false},
      {"prediction", "prediction", "flow prediction: velocity, noise, score", &C::prediction, false},
      {"loss_weight", "loss-weight", "flow loss weight: none, velocity, likelihood", &C::loss_weight, false},
      {"sample_steps", "sample-steps", "sampling steps of the periodic grids", &C::sample_steps, false},
      {"sample_cfg", "sample-cfg", "guidance scale of the periodic grids", &C::sample_cfg, false},
  };
  return fields;
}

const ConfigField& find_config_field(const std::string& name) {
  for (const auto& f : train_config_fields())
    if (name == f.key || (f.flag[0] && name == f.flag)) return f;
  std::string known;
  for (const auto& f : train_config_fields()) known += (known.empty() ? "" : ", ") + std::string(f.key);
  throw std::runtime_error("unknown training config field '" + name + "' (known: " + known + ")");
}

void set_config_field(TrainConfig& c, const ConfigField& f, const std::string& value) {
  const std::string who = f.flag[0] ? "--" + std::string(f.flag) : std::string(f.key);
  auto bad = [&](const char* what) { throw std::runtime_error(who + " must be " + what + ", got '" + value + "'"); };
  std::visit(
      [&](auto member) {
        using T = std::decay_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<T, std::string>) {
          c.*member = value;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (value != "true" && value != "false") bad("true or false");
          c.*member = value == "true";
        } else {
          std::istringstream in(value);
          T x{};
          if (std::is_same_v<T, uint64_t> && value.find_first_not_of("0123456789") != std::string::npos) bad("a non-negative integer");
          if (!(in >> x) || !in.eof()) bad(std::is_same_v<T, double> ? "a number" : "an integer");
          c.*member = x;
        }
      },
      f.member);
}

std::string config_field_text(const TrainConfig& c, const ConfigField& f) {
  return std::visit(
      [&](auto member) -> std::string {
        using T = std::decay_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<T, std::string>) return c.*member;
        else return nlohmann::json(c.*member).dump();
      },
      f.member);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& p : presets()) v.push_back(p.name);
  return v;
}

TrainConfig train_preset(const std::string& name) {
  for (const auto& p : presets()) {
    if (p.name != name) continue;
    TrainConfig c;
    c.preset = name;
    for (const auto& [key, value] : p.fields) set_config_field(c, find_config_field(key), value);
    return c;
  }
  std::string known;
  for (auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::runtime_error("unknown preset '" + name + "' (known: " + known + ")");
}

TrainConfig resolved(TrainConfig c) {
  if (c.objective == "auto") c.objective = models::model_config(c.model).family == "SiT" ? "flow" : "ddpm";
  validate(c);
  return c;
}

void validate(const TrainConfig& c) {
  auto bad = [](const std::string& what) { throw std::runtime_error("invalid training config: " + what); };
  models::model_config(c.model);
  if (c.objective != "auto" && c.objective != "ddpm" && c.objective != "flow") bad("--objective '" + c.objective + "' (known: auto, ddpm, flow)");
  if (c.data.empty()) bad("--data is required for preset " + c.preset + " (a latent folder from extract-latents, or an image folder)");
  if (c.global_batch <= 0) bad("--batch must be positive, got " + std::to_string(c.global_batch));
  if (c.grad_accum < 1 || c.global_batch % c.grad_accum != 0)
    bad("--grad-accum must be a positive divisor of --batch " + std::to_string(c.global_batch) + ", got " + std::to_string(c.grad_accum));
  // (each process's share must divide too: TrainStep checks it, where the world size is known)
  if (c.steps <= 0) bad("--steps must be positive, got " + std::to_string(c.steps));
  if (!(c.lr > 0)) bad("--lr must be positive, got " + std::to_string(c.lr));
  if (c.lr_schedule != "constant" && c.lr_schedule != "cosine" && c.lr_schedule != "linear")
    bad("--lr-schedule '" + c.lr_schedule + "' (known: constant, cosine, linear)");
  if (c.lr_warmup < 0 || c.lr_warmup > c.steps)
    bad("--lr-warmup must be in [0, --steps " + std::to_string(c.steps) + "], got " + std::to_string(c.lr_warmup));
  if (!(c.lr_end >= 0 && c.lr_end <= c.lr)) bad("--lr-end must be in [0, --lr " + std::to_string(c.lr) + "], got " + std::to_string(c.lr_end));
  if (c.weight_decay < 0) bad("--weight-decay must be >= 0, got " + std::to_string(c.weight_decay));
  if (c.grad_clip < 0) bad("--grad-clip must be >= 0, got " + std::to_string(c.grad_clip));
  if (!(c.ema_decay >= 0 && c.ema_decay < 1)) bad("--ema-decay must be in [0, 1), got " + std::to_string(c.ema_decay));
  if (c.precision != "auto" && c.precision != "fp32" && c.precision != "bf16") bad("--precision '" + c.precision + "' (known: auto, fp32, bf16)");
  if (c.log_every <= 0 || c.ckpt_every <= 0 || c.keep_last <= 0) bad("--log-every, --ckpt-every and --keep-last must be positive");
  if (c.image_size <= 0 || c.num_classes <= 0) bad("--image-size and --num-classes must be positive");
  if (c.max_minutes < 0) bad("--max-minutes must be >= 0");
  if (c.workers <= 0) bad("--workers must be positive, got " + std::to_string(c.workers));
  if (!(c.bucket_mb > 0 && c.bucket_mb <= 4096)) bad("--bucket-mb must be in (0, 4096], got " + std::to_string(c.bucket_mb));
  if (c.sample_steps <= 0) bad("--sample-steps must be positive, got " + std::to_string(c.sample_steps));
  // a flow model's preview samples take an ODE grid of sample_steps / 2 + 1 points (train/trainer.cpp)
  if (c.objective == "flow" && c.sample_steps < 2) bad("--sample-steps must be at least 2 for a flow-matching model, got " + std::to_string(c.sample_steps));
  if (c.sample_every < 0) bad("--sample-every must be >= 0 (0: no preview samples), got " + std::to_string(c.sample_every));
  if (c.max_nonfinite < 0) bad("--max-nonfinite must be >= 0, got " + std::to_string(c.max_nonfinite));
  // -1 (the defaults) leave the model's own values
  if (!(c.alpha > 0) && c.alpha != -1) bad("--alpha must be positive, got " + std::to_string(c.alpha));
  if (c.lepe < -1) bad("--lepe must be 0 (off) or a kernel size, got " + std::to_string(c.lepe));
  if (c.sample_cfg < 1) bad("--sample-cfg must be >= 1, got " + std::to_string(c.sample_cfg));
}

std::string train_config_to_json(const TrainConfig& c) {
  nlohmann::ordered_json j;
  for (const auto& f : train_config_fields())
    std::visit([&](auto member) { j[f.key] = c.*member; }, f.member);
  return j.dump(2);
}

TrainConfig train_config_from_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw std::runtime_error(source + ": expected a JSON object of training config fields");
  TrainConfig c;
  for (const auto& [key, value] : j.items()) {
    const ConfigField* f = nullptr;
    try {
      f = &find_config_field(key);
    } catch (const std::exception& e) {
      throw std::runtime_error(source + ": " + e.what());
    }
    try {
      set_config_field(c, *f, json_text(value));
    } catch (const std::exception& e) {
      throw std::runtime_error(source + ": field '" + key + "': " + e.what());
    }
  }
  return c;
}

std::vector<std::string> resume_conflicts(const TrainConfig& saved, const TrainConfig& now) {
  std::vector<std::string> v;
  for (const auto& f : train_config_fields()) {
    if (f.may_change_on_resume) continue;
    const std::string a = config_field_text(saved, f), b = config_field_text(now, f);
    if (a != b) v.push_back(std::string(f.key) + " (run: " + a + ", now: " + b + ")");
  }
  // a decaying rate is laid out over the run's steps: other steps would bend the schedule mid-run
  if (saved.lr_schedule != "constant" && saved.steps != now.steps)
    v.push_back("steps (run: " + std::to_string(saved.steps) + ", now: " + std::to_string(now.steps) + "; the " + saved.lr_schedule +
                " learning-rate schedule decays over them)");
  return v;
}

}  // namespace nala::train
