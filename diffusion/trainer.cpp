#include "diffusion/trainer.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "diffusion/adamw.h"
#include "diffusion/checkpoint_io.h"
#include "diffusion/data_loader.h"
#include "diffusion/device_memory.h"
#include "diffusion/distributed.h"
#include "diffusion/dit.h"
#include "diffusion/gaussian_diffusion.h"
#include "diffusion/sampling.h"
#include "diffusion/transport.h"
#include "diffusion/vae.h"
#include "io/atomic_file.h"
#include "io/image.h"
#include "io/plot.h"
#include "io/progress.h"

namespace fs = std::filesystem;

namespace nala::diffusion {
namespace {

std::atomic<int> g_stop_signal{0};
void on_signal(int sig) { g_stop_signal = sig; }

uint64_t mix(uint64_t a, uint64_t b) {  // splitmix64 of a pair: per-step seeds from (seed, rank, step)
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFFull;
}

// bf16 autocast on CUDA for the scope of one training step (as PyTorch's torch.autocast).
struct AutocastScope {
  bool on;
  explicit AutocastScope(bool enable) : on(enable) {
    if (!on) return;
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
  }
};

std::string step_name(int64_t step) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%07ld", step);
  return buf;
}

std::vector<std::pair<int64_t, std::string>> checkpoints_desc(const std::string& out_dir) {
  std::vector<std::pair<int64_t, std::string>> v;
  const fs::path d = fs::path(out_dir) / "checkpoints";
  if (!fs::is_directory(d)) return v;
  for (const auto& e : fs::directory_iterator(d)) {
    const std::string n = e.path().filename().string();
    if (n.size() != 7 || n.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!fs::exists(e.path() / "state.json")) continue;  // incomplete (state.json is written last)
    v.emplace_back(std::stoll(n), e.path().string());
  }
  std::sort(v.rbegin(), v.rend());
  return v;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  io::write_file_atomic(path, [&](std::ostream& o) { o << j.dump(2) << "\n"; });
}

struct RunState {
  int64_t step = 0, epoch = 0, batch_index = 0, nonfinite = 0, images_seen = 0;
};

}  // namespace

void install_stop_handlers() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

std::string latest_checkpoint(const std::string& out_dir) {
  auto v = checkpoints_desc(out_dir);
  return v.empty() ? "" : v.front().second;
}

TrainResult train(const TrainConfig& cfg_in, const std::string& out_dir, const c10::Device& device, ProcessGroup* pg) {
  TrainConfig cfg = cfg_in;
  validate(cfg);
  const int64_t rank = pg ? pg->rank() : 0, world = pg ? pg->world_size() : 1;
  const bool main_rank = rank == 0;
  if (cfg.global_batch % world != 0)
    throw std::runtime_error("global batch " + std::to_string(cfg.global_batch) + " is not divisible by the world size " + std::to_string(world));
  const int64_t local_batch = cfg.global_batch / world;
  const std::string objective = cfg.resolved_objective();
  const bool bf16 = device.is_cuda() && (cfg.precision == "auto" || cfg.precision == "bf16");
  if (cfg.precision == "bf16" && !device.is_cuda()) throw std::runtime_error("--precision bf16 needs a CUDA device (CPU training runs in fp32)");

  // ---- run directory: a new run, or the same command again (resume) ----
  const std::string cfg_path = out_dir + "/config.json";
  const std::string cfg_json = train_config_to_json(cfg);
  if (io::file_exists(cfg_path)) {
    const std::string old = io::read_file(cfg_path);
    auto a = nlohmann::json::parse(old), b = nlohmann::json::parse(cfg_json);
    for (const char* k : {"max_minutes", "steps", "log_every", "ckpt_every", "keep_last", "sample_every", "workers", "max_nonfinite"}) {
      a.erase(k);  // run-length and bookkeeping fields may change between resumes
      b.erase(k);
    }
    if (a != b)
      throw std::runtime_error(out_dir + " holds a run with a different configuration (see its config.json); resume with the same flags, or use a new --out");
  }
  if (main_rank) {
    io::make_dirs(out_dir + "/checkpoints");
    io::make_dirs(out_dir + "/samples");
    io::write_file_atomic(cfg_path, [&](std::ostream& o) { o << cfg_json << "\n"; });
  }

  // ---- data and model ----
  auto dataset = data::open_dataset(cfg.data, cfg.image_size);
  // An image folder with --vae is encoded online, every step (DiT train.py's way; extract-latents
  // once is much faster); without a VAE the model works in pixel space.
  auto shape = dataset->sample_shape();  // (C, h, w)
  std::shared_ptr<Autoencoder> ae = make_autoencoder(cfg.vae, shape[0]);
  const bool online_vae = cfg.vae != "none" && !cfg.vae.empty();
  if (online_vae) {
    if (shape[0] != 3) throw std::runtime_error("--vae encodes RGB images, but the data has " + std::to_string(shape[0]) + " channels");
    ae->to(device, device.is_cuda() ? at::kBFloat16 : at::kFloat);
    shape = {ae->latent_channels(), shape[1] / ae->downsample(), shape[2] / ae->downsample()};
  }
  if (shape[1] != shape[2]) throw std::runtime_error("training needs square samples, got " + std::to_string(shape[1]) + "x" + std::to_string(shape[2]));
  ModelConfig mc = model_config(cfg.model);
  mc.input_size = shape[1];
  mc.in_channels = shape[0];
  mc.num_classes = std::max(cfg.num_classes, dataset->num_classes());
  if (!cfg.attention.empty()) mc.attention = cfg.attention;
  if (cfg.alpha > 0) mc.nala.nala.alpha = cfg.alpha;
  if (cfg.lepe >= 0) mc.nala.lepe_kernel = cfg.lepe;
  if (mc.attention != "softmax") mc.nala.nala.feature_map = attention::parse_feature_map(mc.attention);
  if (objective == "flow") mc.learn_sigma = mc.family == "SiT" ? mc.learn_sigma : false;
  validate(mc);
  if (main_rank) io::write_file_atomic(out_dir + "/model.json", [&](std::ostream& o) { o << config_to_json(mc) << "\n"; });

  torch::manual_seed(int64_t(cfg.seed));  // identical initial weights on every rank (and broadcast below)
  auto model = std::make_shared<DiT>(mc);
  model->to(device);
  auto ema = std::make_shared<DiT>(mc);
  ema->to(device);
  load_state_dict(*ema, state_dict(*model), "model");
  ema->eval();
  for (auto& p : ema->parameters()) p.set_requires_grad(false);
  std::vector<at::Tensor> trainable;
  for (auto& p : model->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  AdamWOptions ao;
  ao.lr = cfg.lr;
  ao.weight_decay = cfg.weight_decay;
  AdamW opt(trainable, ao);

  // ---- resume from the latest complete checkpoint (an unreadable one is reported and skipped) ----
  RunState st;
  for (const auto& [step, dir] : checkpoints_desc(out_dir)) {
    try {
      auto state = nlohmann::json::parse(io::read_file(dir + "/state.json"));
      load_state_dict(*model, io::load_safetensors(dir + "/model.safetensors"), dir + "/model.safetensors");
      load_state_dict(*ema, io::load_safetensors(dir + "/ema.safetensors"), dir + "/ema.safetensors");
      opt.load_state(io::load_safetensors(dir + "/optimizer.safetensors"), dir + "/optimizer.safetensors");
      st.step = state.at("step");
      st.epoch = state.at("epoch");
      st.batch_index = state.at("batch_index");
      st.nonfinite = state.at("nonfinite");
      st.images_seen = state.at("images_seen");
      if (main_rank) std::cerr << "resuming from " << dir << " (step " << st.step << ")\n";
      break;
    } catch (const std::exception& e) {
      if (main_rank) std::cerr << "warning: checkpoint " << dir << " is unreadable (" << e.what() << "); trying the previous one\n";
    }
  }
  if (pg) {
    pg->broadcast(state_dict(*model));  // every rank starts from rank 0's weights
    pg->broadcast(state_dict(*ema));
  }

  data::DataLoader loader(dataset, local_batch, cfg.seed, cfg.workers, true, rank, world);
  loader.seek(st.epoch, st.batch_index);
  if (main_rank) {
    std::cerr << "nala train: " << mc.name << " (" << model->parameter_count() / 1e6 << "M parameters, " << mc.attention << " attention), "
              << objective << " objective, " << dataset->describe() << "\n  device " << device << (bf16 ? " bf16" : " fp32")
              << ", global batch " << cfg.global_batch << " on " << world << " process(es), steps " << st.step << " -> " << cfg.steps
              << ", run directory " << out_dir << "\n";
  }

  // metrics of steps after the checkpoint we resumed from are dropped: they will be logged again
  const std::string metrics_path = out_dir + "/metrics.jsonl";
  std::vector<nlohmann::json> metrics;
  if (main_rank && io::file_exists(metrics_path)) {
    std::istringstream in(io::read_file(metrics_path));
    std::string line;
    while (std::getline(in, line)) {
      try {
        auto j = nlohmann::json::parse(line);
        if (j.at("step").get<int64_t>() <= st.step) metrics.push_back(j);
      } catch (...) {
      }
    }
    io::write_file_atomic(metrics_path, [&](std::ostream& o) {
      for (auto& j : metrics) o << j.dump() << "\n";
    });
  }

  GaussianDiffusion diffusion(cfg.schedule, 1000, "", parse_variance_type(mc.learn_sigma ? cfg.variance : "fixed-small"));
  TransportConfig tcfg;
  tcfg.path = parse_path_type(cfg.path);
  tcfg.prediction = parse_prediction(cfg.prediction);
  tcfg.loss_weight = parse_loss_weight(cfg.loss_weight);
  Transport transport(tcfg);

  auto save_checkpoint = [&](int64_t step) {
    if (!main_rank) return;
    const std::string final_dir = out_dir + "/checkpoints/" + step_name(step);
    const std::string tmp = final_dir + ".tmp." + std::to_string(::getpid());
    fs::remove_all(tmp);
    io::make_dirs(tmp);
    save_model(*model, tmp + "/model.safetensors");
    save_model(*ema, tmp + "/ema.safetensors");
    io::save_safetensors(tmp + "/optimizer.safetensors", opt.state());
    write_json(tmp + "/state.json", {{"step", step}, {"epoch", st.epoch}, {"batch_index", st.batch_index}, {"nonfinite", st.nonfinite},
                                     {"images_seen", st.images_seen}, {"model", mc.name}});
    std::error_code ec;
    fs::remove_all(final_dir, ec);
    fs::rename(tmp, final_dir, ec);
    if (ec) throw std::runtime_error("cannot move checkpoint " + tmp + " to " + final_dir + ": " + ec.message());
    auto all = checkpoints_desc(out_dir);
    for (size_t i = size_t(cfg.keep_last); i < all.size(); ++i) fs::remove_all(all[i].second, ec);
  };

  auto sample_grid = [&](int64_t step) {
    if (!main_rank) return;
    const int64_t classes = mc.num_classes, per_row = 8;
    std::vector<int64_t> labels;
    if (classes <= 16) {
      for (int64_t c = 0; c < classes; ++c)
        for (int64_t k = 0; k < per_row; ++k) labels.push_back(c);
    } else {
      for (int64_t c : {207, 360, 387, 974, 88, 979, 417, 279})  // DiT sample.py's classes
        for (int64_t k = 0; k < 4; ++k) labels.push_back(c % classes);
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(cfg.seed + 12345);
    at::Tensor z = at::randn({int64_t(labels.size()), mc.in_channels, mc.input_size, mc.input_size}, gen).to(device);
    at::Tensor y = at::tensor(labels, at::kLong).to(device);
    SamplingOptions so;
    so.objective = objective;
    so.sampler = objective == "ddpm" ? "dpm++" : "ode-heun";
    so.steps = objective == "ddpm" ? cfg.sample_steps : cfg.sample_steps / 2 + 1;
    so.cfg_scale = cfg.sample_cfg;
    so.cfg_channels = -1;
    so.path = cfg.path;
    so.prediction = cfg.prediction;
    so.schedule = cfg.schedule;
    at::Tensor x = generate(*ema, so, z, y).x;
    if (!online_vae && mc.in_channels != 1 && mc.in_channels != 3) return;  // latent shards: grids need the VAE (nala sample)
    at::Tensor img = io::model_to_uint8(ae->decode(x).cpu());  // (N, H, W, C)
    if (img.size(3) == 1) img = img.expand({-1, -1, -1, 3}).contiguous();
    io::write_png(out_dir + "/samples/" + step_name(step) + ".png", io::make_grid(img, labels.size() > 32 ? per_row : 4));
  };

  auto write_plot = [&]() {
    std::vector<double> xs, ys;
    for (auto& j : metrics) {
      xs.push_back(j.at("step").get<double>());
      ys.push_back(j.at("loss").get<double>());
    }
    io::write_png(out_dir + "/loss.png", io::plot_series(xs, ys, "loss"));
  };

  // ---- the loop ----
  // The loss, the non-finite test and gradient clipping stay on the device; the host reads them back
  // only at log steps, so a GPU step never waits for the host.
  TrainResult result;
  result.start_step = st.step;
  io::ProgressBar bar("train", cfg.steps, "img");
  if (cfg.max_minutes > 0) bar.set_deadline(cfg.max_minutes * 60);
  const auto t_start = std::chrono::steady_clock::now();
  auto t_window = t_start;
  std::vector<at::Tensor> window_losses;  // (1,) float32 device tensors of this log window
  int64_t window_first = st.step;
  double last_grad_norm = 0, last_loss = NAN;
  int64_t step = st.step;
  model->train();
  while (step < cfg.steps) {
    // This step's randomness is drawn for the whole global batch from (seed, step) and each rank
    // takes its rows (rank, rank + world, ...), the rows of its data shard: N processes then compute
    // exactly what one process computes with the same global batch.
    torch::manual_seed(int64_t(mix(cfg.seed, uint64_t(step))));
    data::Batch b = loader.next();
    at::Tensor x = b.x.to(device, /*non_blocking=*/true), y = b.y.to(device, true);
    if (online_vae) x = ae->encode(x, /*mean=*/false);  // scaled posterior sample, (B, 4, S/8, S/8)
    const int64_t G = cfg.global_batch;
    auto opts = x.options();
    at::Tensor rows = at::arange(rank, G, world, opts.dtype(at::kLong));                 // (B,)
    auto mine = [&](const at::Tensor& all) { return world == 1 ? all : all.index_select(0, rows); };
    at::Tensor drop = mine((at::rand({G}, opts) < mc.class_dropout).to(at::kLong));       // label dropout, (B,)
    at::Tensor loss;
    {
      AutocastScope ac(bf16);
      auto fn = [&](const at::Tensor& xt, const at::Tensor& tt) { return model->forward(xt, tt, y, drop); };
      if (objective == "ddpm") {
        at::Tensor t = mine(at::randint(0, diffusion.num_timesteps(), {G}, opts.dtype(at::kLong)));
        at::Tensor noise = mine(at::randn({G, x.size(1), x.size(2), x.size(3)}, opts));
        loss = diffusion.training_losses(fn, x, t, noise).loss.mean();
      } else {
        at::Tensor tu = mine(at::rand({G}, opts));
        at::Tensor x0 = mine(at::randn({G, x.size(1), x.size(2), x.size(3)}, opts));
        loss = transport.training_loss(fn, x, tu, x0).mean();
      }
    }
    loss.backward();
    if (pg) pg->allreduce_mean_grads(trainable);
    at::Tensor found_inf = at::logical_not(at::isfinite(loss.detach())).to(at::kFloat).reshape({1});  // (1,)
    if (pg) found_inf = pg->allreduce_max(found_inf);  // every rank skips together
    std::vector<at::Tensor> gs;
    for (auto& p : trainable)
      if (p.grad().defined()) gs.push_back(p.grad());
    const bool log_now = (step + 1) % cfg.log_every == 0 || step + 1 == cfg.steps;
    at::Tensor norm;
    if (cfg.grad_clip > 0 || log_now) {
      norm = at::stack(at::_foreach_norm(gs)).norm();
      if (cfg.grad_clip > 0) at::_foreach_mul_(gs, (cfg.grad_clip / (norm + 1e-6)).clamp_max(1.0));
    }
    opt.step(found_inf);  // skipped inside the fused kernel where the loss was not finite
    opt.zero_grad();
    const double decay = cfg.ema_warmup ? std::min(cfg.ema_decay, (1.0 + double(step)) / (10.0 + double(step))) : cfg.ema_decay;
    update_ema(ema->parameters(), model->parameters(), decay);
    window_losses.push_back(at::where(found_inf > 0, at::full_like(found_inf, NAN), loss.detach().to(at::kFloat).reshape({1})));
    ++step;
    st.step = step;
    st.images_seen += cfg.global_batch;
    st.epoch = b.index + 1 == loader.batches_per_epoch() ? b.epoch + 1 : b.epoch;
    st.batch_index = b.index + 1 == loader.batches_per_epoch() ? 0 : b.index + 1;
    if (main_rank) {
      char status[64] = "";
      if (std::isfinite(last_loss)) std::snprintf(status, sizeof status, "loss %.4f", last_loss);  // the last log window's mean
      bar.update(step, status, cfg.global_batch);
    }
    if (log_now) {
      at::Tensor ls = at::cat(window_losses).cpu().to(at::kDouble);  // the one host sync of the window
      window_losses.clear();
      last_grad_norm = norm.item<double>();
      int64_t bad = 0;
      double sum = 0;
      for (int64_t i = 0; i < ls.size(0); ++i) {
        const double v = ls[i].item<double>();
        result.losses.emplace_back(window_first + i + 1, v);
        if (std::isfinite(v)) sum += v; else ++bad;
      }
      st.nonfinite += bad;
      if (bad && main_rank) std::cerr << "\nwarning: " << bad << " non-finite loss(es) in steps " << window_first + 1 << "-" << step << "; those steps were skipped\n";
      if (st.nonfinite > cfg.max_nonfinite)
        throw std::runtime_error("training diverged: " + std::to_string(st.nonfinite) + " non-finite losses (limit " + std::to_string(cfg.max_nonfinite) +
                                 ", last window ending at step " + std::to_string(step) + "); lower --lr or use --grad-clip");
      double mean_loss = ls.size(0) > bad ? sum / double(ls.size(0) - bad) : NAN;
      if (pg) mean_loss = pg->allreduce_mean_scalar(mean_loss);
      last_loss = mean_loss;
      const auto now = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(now - t_window).count();
      const double steps_done = double(step - window_first);
      if (main_rank) {
        nlohmann::json j = {{"step", step}, {"loss", mean_loss}, {"grad_norm", last_grad_norm}, {"lr", cfg.lr},
                            {"steps_per_s", secs > 0 ? steps_done / secs : 0.0}, {"img_per_s", secs > 0 ? steps_done * cfg.global_batch / secs : 0.0},
                            {"images_seen", st.images_seen}, {"epoch", st.epoch}, {"nonfinite", st.nonfinite}};
        if (device.is_cuda()) j["peak_mib"] = peak_memory_mib(device);
        metrics.push_back(j);
        std::ofstream(metrics_path, std::ios::app) << j.dump() << "\n";
        write_plot();
      }
      t_window = now;
      window_first = step;
    }
    const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() / 60;
    bool stop = g_stop_signal != 0 || (cfg.max_minutes > 0 && minutes >= cfg.max_minutes);
    if (pg) stop = !pg->all_true(!stop);
    if (stop && !window_losses.empty()) {  // flush the partial window
      at::Tensor ls = at::cat(window_losses).cpu().to(at::kDouble);
      window_losses.clear();
      for (int64_t i = 0; i < ls.size(0); ++i) result.losses.emplace_back(window_first + i + 1, ls[i].item<double>());
    }
    if (step % cfg.ckpt_every == 0 || step == cfg.steps || stop) save_checkpoint(step);
    if (cfg.sample_every > 0 && (step % cfg.sample_every == 0 || step == cfg.steps || stop)) sample_grid(step);
    if (stop) {
      result.stopped_early = true;
      result.stop_reason = g_stop_signal != 0 ? "signal " + std::to_string(int(g_stop_signal)) : "time budget of " + std::to_string(cfg.max_minutes) + " minutes";
      break;
    }
  }
  if (main_rank) bar.finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  result.final_step = step;
  result.images_per_second = secs > 0 ? double(step - result.start_step) * cfg.global_batch / secs : 0;
  if (pg) pg->barrier();
  return result;
}

}  // namespace nala::diffusion
