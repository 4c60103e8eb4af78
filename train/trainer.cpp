#include "train/trainer.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <optional>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "data/data_loader.h"
#include "diffusion/seed.h"
#include "io/atomic_file.h"
#include "io/image.h"
#include "io/output_lock.h"
#include "io/weights.h"
#include "report/progress.h"
#include "report/tensorboard.h"
#include "samplers/generate.h"
#include "samplers/grid_labels.h"
#include "train/device_memory.h"
#include "train/distributed.h"
#include "train/lr_schedule.h"
#include "train/metrics_log.h"
#include "train/model_setup.h"
#include "train/train_step.h"

namespace nala::train {
namespace {

std::atomic<int> g_stop_signal{0};
void on_signal(int sig) { g_stop_signal = sig; }

// The EMA model's grid at `step`: one row per class, the objective's fast sampler. Returns the
// PNG's bytes and size (empty when the run has no grids).
struct GridPng {
  std::string png;
  int64_t height = 0, width = 0;
};
GridPng write_sample_grid(const TrainConfig& cfg, const ModelSetup& s, models::DiT& ema, const c10::Device& device, const std::string& path) {
  const auto& mc = s.model;
  if (!s.online_vae && mc.in_channels != 1 && mc.in_channels != 3) return {};  // latent shards: grids need the VAE (nala sample)
  const samplers::GridLabels g = samplers::default_grid_labels(mc.num_classes);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(diffusion::derive_seed(cfg.seed, diffusion::SeedStream::PreviewGrid, 0));
  at::Tensor z = at::randn({int64_t(g.labels.size()), mc.in_channels, mc.input_size, mc.input_size}, gen).to(device);  // (N, C, h, w)
  at::Tensor y = at::tensor(g.labels, at::kLong).to(device);                                                            // (N,)
  samplers::SamplingOptions so;
  so.objective = cfg.objective;
  so.sampler = cfg.objective == "ddpm" ? "dpm++" : "ode-heun";
  so.steps = cfg.objective == "ddpm" ? cfg.sample_steps : cfg.sample_steps / 2 + 1;
  so.cfg_scale = cfg.sample_cfg;
  so.cfg_channels = -1;
  so.path = cfg.path;
  so.prediction = cfg.prediction;
  so.schedule = cfg.schedule;
  so.variance = mc.learn_sigma ? cfg.variance : "fixed-small";  // as the training loss uses it
  at::Tensor x = samplers::generate(ema, so, z, y).x;
  at::Tensor img = io::model_to_uint8(s.autoencoder->decode(x).cpu());  // (N, H, W, C)
  if (img.size(3) == 1) img = img.expand({-1, -1, -1, 3}).contiguous();
  const at::Tensor grid = io::make_grid(img, g.per_row);  // (H, W, 3)
  GridPng out{io::encode_png(grid, path), grid.size(0), grid.size(1)};
  io::write_file_atomic(path, [&](std::ostream& o) { o.write(out.png.data(), std::streamsize(out.png.size())); });
  return out;
}

// The TensorBoard scalars of a metrics.jsonl line: every numeric field but the step, as train/<key>
// (docs/guide.md lists them).
void log_scalars(report::EventFileWriter& tb, const nlohmann::json& line, int64_t step) {
  for (const auto& [key, value] : line.items())
    if (key != "step" && value.is_number()) tb.add_scalar("train/" + key, value.get<double>(), step);
  tb.flush();
}

}  // namespace

void install_stop_handlers() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

TrainResult run_training(const TrainConfig& cfg_in, const std::string& out_dir, const c10::Device& device, ProcessGroup* pg) {
  const TrainConfig cfg = resolved(cfg_in);
  const int64_t rank = pg ? pg->rank() : 0, world = pg ? pg->world_size() : 1;
  const bool main_rank = rank == 0;
  if (cfg.global_batch % world != 0)
    throw std::runtime_error("global batch " + std::to_string(cfg.global_batch) + " is not divisible by the world size " + std::to_string(world));
  const int64_t local_batch = cfg.global_batch / world;
  const bool bf16 = device.is_cuda() && (cfg.precision == "auto" || cfg.precision == "bf16");
  if (cfg.precision == "bf16" && !device.is_cuda()) throw std::runtime_error("--precision bf16 needs a CUDA device (CPU training runs in fp32)");

  // one writer a run directory: a second trainer on it is refused before it writes anything (rank 0
  // holds the lock for a data-parallel job)
  std::optional<io::OutputLock> lock;
  if (main_rank) lock.emplace(out_dir, "run directory " + out_dir);
  // a conflicting run, a data set that cannot be opened or a model that cannot be built is refused
  // before the run directory records this configuration (config.json would bind every later resume)
  check_run_directory(out_dir, cfg, main_rank);
  const ModelSetup setup = setup_model(cfg, device);
  data::DataLoader::batches_per_rank(setup.dataset->size(), local_batch, world);  // a data set smaller than a batch, too
  open_run_directory(out_dir, cfg, main_rank);
  const models::ModelConfig& mc = setup.model;
  diffusion::ObjectiveSettings objective;  // recorded in every checkpoint
  objective.objective = cfg.objective;
  objective.schedule = cfg.schedule;
  objective.variance = mc.learn_sigma ? cfg.variance : "fixed-small";  // as the loss uses it
  objective.path = cfg.path;
  objective.prediction = cfg.prediction;
  objective.loss_weight = cfg.loss_weight;
  if (main_rank) io::write_file_atomic(out_dir + "/model.json", [&](std::ostream& o) { o << models::config_to_json(mc) << "\n"; });

  torch::manual_seed(int64_t(cfg.seed));  // identical initial weights on every rank (and broadcast below)
  auto model = std::make_shared<models::DiT>(mc);
  model->to(device);
  auto ema = std::make_shared<models::DiT>(mc);
  ema->to(device);
  io::load_state_dict(*ema, io::state_dict(*model), "model");
  ema->eval();
  for (auto& p : ema->parameters()) p.set_requires_grad(false);
  TrainStep train_step(cfg, *model, *ema, pg, bf16);

  // Rank 0 alone reads the checkpoint and sends the whole state (position, optimizer, weights) to
  // the others: ranks need no shared file system to resume, and they cannot start from different
  // checkpoints. (The data set must be readable on every node.)
  RunState st;
  if (main_rank) st = load_latest_checkpoint(out_dir, *model, *ema, train_step.optimizer(), true);
  if (pg) {
    at::Tensor rs = at::tensor({st.step, st.epoch, st.batch_index, st.nonfinite, st.images_seen}, at::kLong).to(device);  // (5,)
    pg->broadcast({{"run_state", rs}});
    rs = rs.cpu();
    st = {rs[0].item<int64_t>(), rs[1].item<int64_t>(), rs[2].item<int64_t>(), rs[3].item<int64_t>(), rs[4].item<int64_t>()};
    io::NamedTensors opt_state = train_step.optimizer().state();
    for (auto& [name, t] : opt_state) t = t.to(device);  // the step counter lives on the host
    pg->broadcast(opt_state);
    if (!main_rank) train_step.optimizer().load_state(opt_state, "rank 0's optimizer state");
    pg->broadcast(io::state_dict(*model));
    pg->broadcast(io::state_dict(*ema));
  }

  data::DataLoader loader(setup.dataset, local_batch, cfg.seed, cfg.workers, true, rank, world);
  loader.seek(st.epoch, st.batch_index);
  if (main_rank) {
    std::cerr << "nala train: " << mc.name << " (" << model->parameter_count() / 1e6 << "M parameters, " << mc.attention << " attention), "
              << cfg.objective << " objective, " << setup.dataset->describe() << "\n  device " << device << (bf16 ? " bf16" : " fp32")
              << ", global batch " << cfg.global_batch << " on " << world << " process(es)"
              << (cfg.grad_accum > 1 ? " in " + std::to_string(cfg.grad_accum) + " pieces a step" : std::string()) << ", steps " << st.step << " -> " << cfg.steps
              << ", run directory " << out_dir << "\n";
  }
  MetricsLog metrics(out_dir);
  if (main_rank) metrics.keep_until(st.step);  // steps after the checkpoint will be logged again
  std::optional<report::EventFileWriter> tb;   // the same rule for the TensorBoard files
  if (main_rank && cfg.tensorboard) tb.emplace(out_dir + "/tb", st.step);

  // ---- the loop ----
  TrainResult result;
  result.start_step = st.step;
  report::ProgressBar bar("train", cfg.steps, "img");
  if (cfg.max_minutes > 0) bar.set_deadline(cfg.max_minutes * 60);
  const auto t_start = std::chrono::steady_clock::now();
  auto t_window = t_start;
  std::vector<at::Tensor> window_losses;  // (1,) float32 device tensors of this log window
  int64_t window_first = st.step;
  double last_loss = NAN;
  int64_t step = st.step;
  model->train();
  auto flush_window = [&]() {  // the one host sync of a log window
    at::Tensor ls = at::cat(window_losses).cpu().to(at::kDouble);  // (steps,)
    window_losses.clear();
    std::vector<double> v(size_t(ls.size(0)));
    for (int64_t i = 0; i < ls.size(0); ++i) {
      v[size_t(i)] = ls[i].item<double>();
      result.losses.emplace_back(window_first + i + 1, v[size_t(i)]);
    }
    return v;
  };
  while (step < cfg.steps) {
    torch::manual_seed(int64_t(diffusion::derive_seed(cfg.seed, diffusion::SeedStream::TrainStep, uint64_t(step))));
    data::Batch b = loader.next();
    at::Tensor x = b.x.to(device, /*non_blocking=*/true), y = b.y.to(device, true);  // (B, C, h, w), (B,)
    if (setup.online_vae) x = setup.autoencoder->encode(x, /*mean=*/false);          // scaled posterior sample, (B, 4, S/8, S/8)
    const bool log_now = (step + 1) % cfg.log_every == 0 || step + 1 == cfg.steps;
    StepResult r = train_step.run(step, x, y);
    window_losses.push_back(r.loss);
    if (main_rank && step == st.step && pg) {
      const GradBuckets* gb = train_step.grad_buckets();
      if (cfg.overlap_grads) std::cerr << "data parallel: " << gb->bucket_count() << " gradient bucket(s) of about " << cfg.bucket_mb << " MiB, "
                        << gb->started_during_backward() << " of them all-reduced during the backward\n";
      else std::cerr << "data parallel: gradients all-reduced after the backward (--overlap-grads false)\n";
    }
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
    const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() / 60;
    bool stop = g_stop_signal != 0 || (cfg.max_minutes > 0 && minutes >= cfg.max_minutes);
    // ranks agree on stopping every 10 steps (and at log steps): an agreement is a host sync, which
    // every step would keep the host from queueing the next step while the device runs this one
    if (pg && (step % 10 == 0 || log_now || step == cfg.steps)) stop = !pg->all_true(!stop);
    else if (pg) stop = false;
    // a stop logs its partial window: a run cut short by --max-minutes or a signal before its first
    // --log-every steps still has a metrics line (and loss.png, TensorBoard scalars) at its checkpoint
    if (log_now || stop) {
      const double grad_norm = r.grad_norm.item<double>();
      const std::vector<double> ls = flush_window();
      int64_t bad = 0;
      double sum = 0;
      for (double v : ls) {
        if (std::isfinite(v)) sum += v;
        else ++bad;
      }
      st.nonfinite += bad;
      if (bad && main_rank) std::cerr << "\nwarning: " << bad << " step(s) with a non-finite loss or gradient in steps " << window_first + 1 << "-" << step << "; those steps were skipped\n";
      if (st.nonfinite > cfg.max_nonfinite)
        throw std::runtime_error("training diverged: " + std::to_string(st.nonfinite) + " steps with a non-finite loss or gradient (limit " + std::to_string(cfg.max_nonfinite) +
                                 ", last window ending at step " + std::to_string(step) + "); lower --lr or use --grad-clip");
      double mean_loss = int64_t(ls.size()) > bad ? sum / double(int64_t(ls.size()) - bad) : NAN;
      if (pg) mean_loss = pg->allreduce_mean_scalar(mean_loss);
      last_loss = mean_loss;
      const auto now = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(now - t_window).count();
      const double steps_done = double(step - window_first);
      if (main_rank) {
        nlohmann::json j = {{"step", step}, {"loss", mean_loss}, {"grad_norm", grad_norm}, {"lr", scheduled_lr(cfg, step - 1)},
                            {"steps_per_s", secs > 0 ? steps_done / secs : 0.0}, {"img_per_s", secs > 0 ? steps_done * cfg.global_batch / secs : 0.0},
                            {"images_seen", st.images_seen}, {"epoch", st.epoch}, {"nonfinite", st.nonfinite}};
        if (device.is_cuda()) j["peak_mib"] = peak_memory_mib(device);
        metrics.append(j);
        if (tb) log_scalars(*tb, j, step);
      }
      t_window = now;
      window_first = step;
    }
    if (main_rank && (step % cfg.ckpt_every == 0 || step == cfg.steps || stop))
      save_checkpoint(out_dir, st, *model, *ema, train_step.optimizer(), objective, cfg.keep_last);
    if (main_rank && cfg.sample_every > 0 && (step % cfg.sample_every == 0 || step == cfg.steps || stop)) {
      const GridPng g = write_sample_grid(cfg, setup, *ema, device, out_dir + "/samples/" + step_name(step) + ".png");
      if (tb && !g.png.empty()) {
        tb->add_png("samples/ema_grid", g.png, g.height, g.width, step);
        tb->flush();
      }
    }
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

}  // namespace nala::train
