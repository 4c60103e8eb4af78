// nala sample: images from a checkpoint, to a PNG grid or (FID mode) N samples in an .npz whose
// arr_0 is uint8 NHWC and arr_1 the labels, as the ADM evaluator reads them. FID mode resumes:
// each batch's noise and labels come from (seed, batch index) and finished batches are kept under
// OUT.npz.parts/, so an interrupted run finishes with exactly the samples of an uninterrupted one.
#include <filesystem>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "diffusion/checkpoint_io.h"
#include "diffusion/dit.h"
#include "diffusion/sampling.h"
#include "diffusion/transport.h"
#include "diffusion/vae.h"
#include "samplers/flow_likelihood.h"
#include "io/atomic_file.h"
#include "io/image.h"
#include "io/npz.h"
#include "io/progress.h"

namespace fs = std::filesystem;

namespace nala::cli {
namespace {

uint64_t batch_seed(uint64_t seed, int64_t batch) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + uint64_t(batch) * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  return (z ^ (z >> 29)) & 0x7FFFFFFFFFFFFFFFull;
}

std::vector<int64_t> parse_classes(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ','))
    if (!t.empty()) v.push_back(std::stoll(t));
  return v;
}

}  // namespace

int run_sample(int argc, char** argv) {
  cxxopts::Options o("nala sample", "Sample images from a DiT/SiT/NaLa checkpoint (grid PNG, or --num-samples to an .npz for FID)");
  o.add_options()("model", "model name (optional for nala checkpoints)", cxxopts::value<std::string>()->default_value(""))(
      "ckpt", "checkpoint: .safetensors, official .pt, or a nala run's checkpoint directory", cxxopts::value<std::string>())(
      "weights", "ema (default) or model, for nala checkpoints", cxxopts::value<std::string>()->default_value("ema"))(
      "vae", "VAE weights (diffusers safetensors) or none for pixel-space models", cxxopts::value<std::string>()->default_value("none"))(
      "image-size", "output image size in pixels (checked against the checkpoint)", cxxopts::value<int64_t>()->default_value("-1"))(
      "sampler", "ddpm, ddim, dpm++, ode-euler, ode-heun, dopri5, sde-euler, sde-heun (auto: ddpm / ode-heun)",
      cxxopts::value<std::string>()->default_value("auto"))("steps", "sampling steps (ODE/SDE: grid points)", cxxopts::value<int64_t>()->default_value("250"))(
      "cfg-scale", "classifier-free guidance scale (1: off)", cxxopts::value<double>()->default_value("1.0"))(
      "cfg-channels", "3 (official, reproduces published FIDs) or all", cxxopts::value<std::string>()->default_value("3"))(
      "classes", "comma-separated labels for the grid", cxxopts::value<std::string>()->default_value(""))(
      "seed", "seed", cxxopts::value<uint64_t>()->default_value("0"))("out", "grid PNG", cxxopts::value<std::string>()->default_value("samples.png"))(
      "num-samples", "FID mode: number of samples", cxxopts::value<int64_t>()->default_value("0"))(
      "batch-size", "images per batch", cxxopts::value<int64_t>()->default_value("64"))("npz", "FID mode output .npz", cxxopts::value<std::string>())(
      "init-noise", ".npz with 'noise' (N,C,h,w) [and 'labels']: start from this noise", cxxopts::value<std::string>())(
      "save-latents", "write the model-space samples (before decoding) to this .npz", cxxopts::value<std::string>())(
      "likelihood", "flow models: log-likelihood (bits/dim, Hutchinson) of the model-space arrays 'x' [and 'labels'] of this .npz",
      cxxopts::value<std::string>())("likelihood-steps", "ODE grid points for --likelihood", cxxopts::value<int64_t>()->default_value("101"))(
      "objective", "ddpm or flow (auto from the model family)", cxxopts::value<std::string>()->default_value("auto"))(
      "eta", "DDIM eta", cxxopts::value<double>()->default_value("0"))("dtype", "bf16 (CUDA default) or fp32", cxxopts::value<std::string>())(
      "device", "auto, cpu, cuda", cxxopts::value<std::string>()->default_value("auto"))("h,help", "help");
  auto a = o.parse(argc, argv);
  if (a.count("help") || !a.count("ckpt")) {
    std::cout << o.help() << "\n";
    return a.count("help") ? 0 : 2;
  }
  const c10::Device dev = pick_device(a["device"].as<std::string>());
  const auto dtype = parse_dtype(a.count("dtype") ? a["dtype"].as<std::string>() : dev.is_cuda() ? "bf16" : "fp32");
  auto ae_probe = a["vae"].as<std::string>();
  diffusion::ModelOverrides ov;
  const int64_t px = a["image-size"].as<int64_t>();
  auto model = diffusion::load_model(a["model"].as<std::string>(), a["ckpt"].as<std::string>(), ov, a["weights"].as<std::string>());
  const auto& mc = model->config();
  auto ae = diffusion::make_autoencoder(ae_probe, mc.in_channels);
  if (ae->latent_channels() != mc.in_channels)
    throw std::runtime_error("the model works on " + std::to_string(mc.in_channels) + "-channel inputs but the autoencoder (--vae " + ae_probe +
                             ") has " + std::to_string(ae->latent_channels()) + " latent channels");
  if (ae_probe == "none" && mc.in_channels != 1 && mc.in_channels != 3)
    throw std::runtime_error(mc.name + " works on " + std::to_string(mc.in_channels) + "-channel latents: give the VAE with --vae FILE");
  if (px > 0 && px != mc.input_size * ae->downsample())
    throw std::runtime_error("--image-size " + std::to_string(px) + " does not match the checkpoint, which makes " +
                             std::to_string(mc.input_size * ae->downsample()) + " px images");
  model->to(dev, dtype);
  ae->to(dev, dev.is_cuda() ? at::kBFloat16 : at::kFloat);
  diffusion::SamplingOptions so;
  so.sampler = a["sampler"].as<std::string>();
  so.objective = a["objective"].as<std::string>();
  so.steps = a["steps"].as<int64_t>();
  so.cfg_scale = a["cfg-scale"].as<double>();
  const std::string ch = a["cfg-channels"].as<std::string>();
  so.cfg_channels = ch == "all" ? -1 : std::stoll(ch);
  so.eta = a["eta"].as<double>();
  so = diffusion::resolve(so, *model);
  const uint64_t seed = a["seed"].as<uint64_t>();
  const int64_t C = mc.in_channels, L = mc.input_size;
  if (a.count("likelihood")) {
    if (so.objective != "flow") throw std::runtime_error("--likelihood needs a flow-matching (SiT-family) model; " + mc.name + " is sampled as " + so.objective);
    const std::string f = a["likelihood"].as<std::string>();
    std::map<std::string, at::Tensor> in;
    for (auto& [k, v] : io::load_npz(f)) in[k] = v;
    if (!in.count("x") || in["x"].dim() != 4 || in["x"].size(1) != C || in["x"].size(2) != L)
      throw std::runtime_error(f + ": --likelihood needs 'x' of shape (N, " + std::to_string(C) + ", " + std::to_string(L) + ", " + std::to_string(L) + ")");
    at::Tensor x = in["x"].to(dev, at::kFloat);
    at::Tensor y = in.count("labels") ? in["labels"].to(dev, at::kLong) : at::full({x.size(0)}, mc.num_classes, x.options().dtype(at::kLong));
    diffusion::TransportConfig tc;
    diffusion::Transport tr(tc);
    auto [t0, t1] = tr.interval(true, false);
    model->to(dev, at::kFloat);
    samplers::DriftFn drift = [&](const at::Tensor& xx, const at::Tensor& t) { return tr.velocity(model->forward(xx, t, y), xx, t); };
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto r = samplers::ode_likelihood(drift, x, t0, t1, a["likelihood-steps"].as<int64_t>(), gen);
    const double dims = double(x[0].numel());
    at::Tensor bpd = -r.log_p.cpu() / (dims * std::log(2.0));
    std::printf("log-likelihood of %ld inputs: %.4f bits/dim (mean; std %.4f), %ld model evaluations\n", x.size(0), bpd.mean().item<double>(),
                bpd.std().item<double>(), r.nfe);
    return 0;
  }
  std::cerr << "nala sample: " << mc.name << " on " << dev << " (" << c10::toString(dtype) << "), " << so.sampler << " " << so.steps
            << " steps, cfg " << so.cfg_scale << (so.cfg_scale > 1 ? (so.cfg_channels < 0 ? " (all channels)" : " (3 channels)") : "") << "\n";

  auto to_images = [&](const at::Tensor& x) {  // model space -> uint8 (N, H, W, 3)
    at::Tensor img = io::model_to_uint8(ae->decode(x.to(dev)).cpu());
    return img.size(3) == 1 ? img.expand({-1, -1, -1, 3}).contiguous() : img;
  };
  auto sample_batch = [&](const at::Tensor& z, const at::Tensor& y, uint64_t s, const samplers::ProgressFn& pf) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(s ^ 0x5bd1e995u);
    return diffusion::generate(*model, so, z.to(dev), y.to(dev), gen, pf).x;
  };

  const int64_t n = a["num-samples"].as<int64_t>();
  if (n > 0) {
    // ---- FID mode ----
    if (!a.count("npz")) throw std::runtime_error("--num-samples needs --npz OUT.npz");
    const std::string npz = a["npz"].as<std::string>(), parts = npz + ".parts";
    const int64_t bs = a["batch-size"].as<int64_t>();
    if (bs <= 0) throw std::runtime_error("--batch-size must be positive");
    io::make_dirs(parts);
    const int64_t batches = (n + bs - 1) / bs;
    io::ProgressBar bar("sample", n, "img");
    int64_t done_imgs = 0;
    for (int64_t b = 0; b < batches; ++b) {
      const std::string part = parts + "/batch_" + std::to_string(b) + ".npz";
      const int64_t m = std::min(bs, n - b * bs);
      if (io::file_exists(part)) {  // finished before an interruption
        done_imgs += m;
        continue;
      }
      auto gen = at::make_generator<at::CPUGeneratorImpl>(batch_seed(seed, b));
      at::Tensor z = at::randn({m, C, L, L}, gen);
      at::Tensor y = at::randint(0, mc.num_classes, {m}, gen);
      at::Tensor x = sample_batch(z, y, batch_seed(seed, b), {});
      io::save_npz(part, {{"arr_0", to_images(x)}, {"arr_1", y}});
      done_imgs += m;
      bar.update(done_imgs, "batch " + std::to_string(b + 1) + "/" + std::to_string(batches));
    }
    bar.finish();
    // assemble, streaming batch by batch, then remove the parts
    io::NpzWriter w(npz);
    const int64_t H = L * ae->downsample();
    w.begin("arr_0", at::kByte, {n, H, H, 3});
    std::vector<at::Tensor> labels;
    for (int64_t b = 0; b < batches; ++b) {
      auto p = io::load_npz(parts + "/batch_" + std::to_string(b) + ".npz");
      w.append(p[0].second);
      labels.push_back(p[1].second);
    }
    w.add("arr_1", at::cat(labels));
    w.close();
    fs::remove_all(parts);
    std::cout << "wrote " << n << " samples to " << npz << " (arr_0 uint8 " << n << "x" << H << "x" << H << "x3, arr_1 labels)\n";
    return 0;
  }

  // ---- grid mode ----
  at::Tensor z, y;
  if (a.count("init-noise")) {
    std::map<std::string, at::Tensor> in;
    for (auto& [k, v] : io::load_npz(a["init-noise"].as<std::string>())) in[k] = v;
    const std::string f = a["init-noise"].as<std::string>();
    z = in.count("noise") ? in["noise"] : in.count("arr_0") ? in["arr_0"] : at::Tensor();
    if (!z.defined() || z.dim() != 4 || z.size(1) != C || z.size(2) != L || z.size(3) != L)
      throw std::runtime_error(f + ": needs 'noise' of shape (N, " + std::to_string(C) + ", " + std::to_string(L) + ", " + std::to_string(L) + ")");
    z = z.to(at::kFloat);
    y = in.count("labels") ? in["labels"].to(at::kLong) : at::Tensor();
  }
  std::vector<int64_t> classes = parse_classes(a["classes"].as<std::string>());
  int64_t per_row = 8;
  if (!y.defined()) {
    if (classes.empty()) {
      if (mc.num_classes <= 16) {
        for (int64_t c = 0; c < mc.num_classes; ++c)
          for (int64_t k = 0; k < per_row; ++k) classes.push_back(c);
      } else {
        classes = {207, 360, 387, 974, 88, 979, 417, 279};  // DiT sample.py
        per_row = 4;
      }
    }
    for (int64_t c : classes)
      if (c < 0 || c >= mc.num_classes) throw std::runtime_error("--classes: label " + std::to_string(c) + " outside 0.." + std::to_string(mc.num_classes - 1));
    y = at::tensor(classes, at::kLong);
  }
  if (!z.defined()) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(batch_seed(seed, 0));
    z = at::randn({y.size(0), C, L, L}, gen);
  }
  if (z.size(0) != y.size(0)) throw std::runtime_error("noise has " + std::to_string(z.size(0)) + " rows but there are " + std::to_string(y.size(0)) + " labels");
  io::ProgressBar bar("sample", so.steps, "step");
  at::Tensor x = sample_batch(z, y, batch_seed(seed, 0), [&](int64_t d, int64_t t) { bar.update(d * so.steps / std::max<int64_t>(t, 1)); });
  bar.finish();
  if (a.count("save-latents")) io::save_npz(a["save-latents"].as<std::string>(), {{"latents", x.cpu()}, {"labels", y}});
  const std::string out = a["out"].as<std::string>();
  io::write_png(out, io::make_grid(to_images(x), per_row));
  std::cout << "wrote a grid of " << y.size(0) << " samples to " << out << "\n";
  return 0;
}

}  // namespace nala::cli
