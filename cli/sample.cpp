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
#include "cli/parse.h"
#include "ops/linear_fp8.h"
#include "models/checkpoint.h"
#include "models/dit.h"
#include "models/vae.h"
#include "diffusion/objective.h"
#include "samplers/fid_batches.h"
#include "samplers/generate.h"
#include "samplers/grid_labels.h"
#include "io/atomic_file.h"
#include "io/image.h"
#include "io/manifest.h"
#include "io/npz.h"
#include "report/progress.h"

namespace fs = std::filesystem;

namespace nala::cli {

int run_sample(int argc, char** argv) {
  cxxopts::Options o("nala sample", "Sample images from a DiT/SiT/NaLa checkpoint (grid PNG, or --num-samples to an .npz for FID)");
  o.add_options()("model", "model name (optional for nala checkpoints)", cxxopts::value<std::string>()->default_value(""))(
      "ckpt", "checkpoint: .safetensors, official .pt, or a nala run's checkpoint directory", cxxopts::value<std::string>())(
      "weights", "ema (default) or model, for nala checkpoints", cxxopts::value<std::string>()->default_value("ema"))(
      "vae", "VAE weights (diffusers safetensors) or none for pixel-space models", cxxopts::value<std::string>()->default_value("none"))(
      "image-size", "output image size in pixels (checked against the checkpoint)", cxxopts::value<int64_t>()->default_value("-1"))(
      "sampler", samplers::sampler_names() + " (auto: ddpm for the DiT family, ode-heun for SiT; see below)",
      cxxopts::value<std::string>()->default_value("auto"))("steps", "sampling steps (ODE/SDE: grid points)", cxxopts::value<int64_t>()->default_value("250"))(
      "cfg-scale", "classifier-free guidance scale (1: off)", cxxopts::value<double>()->default_value("1.0"))(
      "cfg-channels", "auto (3, the official guidance that reproduces published FIDs, for 4-channel latents; all channels otherwise), all, or a count",
      cxxopts::value<std::string>()->default_value("auto"))(
      "classes", "comma-separated labels for the grid", cxxopts::value<std::string>()->default_value(""))(
      "seed", "seed", cxxopts::value<uint64_t>()->default_value("0"))("out", "grid PNG", cxxopts::value<std::string>()->default_value("samples.png"))(
      "num-samples", "FID mode: number of samples", cxxopts::value<int64_t>()->default_value("0"))(
      "batch-size", "images per batch", cxxopts::value<int64_t>()->default_value("64"))("npz", "FID mode output .npz", cxxopts::value<std::string>())(
      "init-noise", ".npz with 'noise' (N,C,h,w) [and 'labels']: start from this noise", cxxopts::value<std::string>())(
      "save-latents", "write the model-space samples (before decoding) to this .npz", cxxopts::value<std::string>())(
      "likelihood", "flow models: log-likelihood (bits/dim, Hutchinson) of the model-space arrays 'x' [and 'labels'] of this .npz",
      cxxopts::value<std::string>())("likelihood-steps", "ODE grid points for --likelihood", cxxopts::value<int64_t>()->default_value("101"))(
      "objective", "ddpm or flow (default: the checkpoint's, else from the model family)", cxxopts::value<std::string>()->default_value(""))(
      "schedule", "DDPM beta schedule: linear, cosine (default: the checkpoint's, else linear)", cxxopts::value<std::string>()->default_value(""))(
      "variance", "DDPM variance: learned-range, fixed-small, fixed-large (default: the checkpoint's, else from the model)",
      cxxopts::value<std::string>()->default_value(""))(
      "path", "flow path: Linear, GVP, VP (default: the checkpoint's, else Linear)", cxxopts::value<std::string>()->default_value(""))(
      "prediction", "flow prediction: velocity, noise, score (default: the checkpoint's, else velocity)",
      cxxopts::value<std::string>()->default_value(""))(
      "eta", "DDIM eta", cxxopts::value<double>()->default_value("0"))(
      "diffusion-form", "SDE samplers: w(t) of the reverse SDE: constant, SBDM, sigma, linear, decreasing, increasing-decreasing",
      cxxopts::value<std::string>()->default_value("sigma"))(
      "last-step", "SDE samplers: none, Mean, Tweedie, Euler", cxxopts::value<std::string>()->default_value("Mean"))(
      "last-step-size", "SDE samplers: size of the last step", cxxopts::value<double>()->default_value("0.04"))("dtype",
      "bf16 (CUDA default), fp32, or fp8: the linear layers' GEMMs in float8 e4m3 with row-wise scales, the rest in bf16 "
      "(CUDA sm_90+; on the CPU an exact emulation in fp32, for checking)",
      cxxopts::value<std::string>())(
      "device", "auto, cpu, cuda", cxxopts::value<std::string>()->default_value("auto"))(
      "cuda-graphs", "true: replay the network call as a CUDA graph (one CUDA device; the same samples as false)",
      cxxopts::value<std::string>()->default_value("false"))("h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  if (a.count("help") || !a.count("ckpt")) {
    std::cout << o.help() << "\nSamplers (--sampler):\n" << samplers::sampler_help() << "\n";
    if (!a.count("help")) std::cerr << "error: nala sample needs --ckpt (a .safetensors file, an official .pt, or a nala run's checkpoint folder)\n";
    return a.count("help") ? 0 : 2;
  }
  // output arguments checked before the model is loaded and sampled
  const int64_t n = a["num-samples"].as<int64_t>();
  if (n < 0) throw std::runtime_error("--num-samples must be positive, got " + std::to_string(n));
  if (n == 0 && a.count("npz")) throw std::runtime_error("--npz needs --num-samples N (how many samples to write)");
  if (n == 0) io::check_parent_dir(a["out"].as<std::string>(), "--out");
  if (a.count("npz")) {
    io::check_parent_dir(a["npz"].as<std::string>(), "--npz");
    samplers::refuse_finished_npz(a["npz"].as<std::string>());
  }
  if (a.count("save-latents")) io::check_parent_dir(a["save-latents"].as<std::string>(), "--save-latents");
  if (a["batch-size"].as<int64_t>() <= 0) throw std::runtime_error("--batch-size must be positive, got " + std::to_string(a["batch-size"].as<int64_t>()));
  const c10::Device dev = pick_device(a["device"].as<std::string>());
  const std::string dtype_flag = a.count("dtype") ? a["dtype"].as<std::string>() : dev.is_cuda() ? "bf16" : "fp32";
  const bool fp8 = dtype_flag == "fp8";  // the model in bf16 (fp32 on the CPU), its linear layers' GEMMs in FP8
  const auto dtype = parse_dtype(fp8 ? (dev.is_cuda() ? "bf16" : "fp32") : dtype_flag);
  auto ae_probe = a["vae"].as<std::string>();
  models::ModelOverrides ov;
  const int64_t px = a["image-size"].as<int64_t>();
  std::map<std::string, std::string> meta;
  std::string weights_file;
  auto model = models::load_model(a["model"].as<std::string>(), a["ckpt"].as<std::string>(), ov, a["weights"].as<std::string>(), &meta,
                                  &weights_file);
  const auto& mc = model->config();
  auto ae = models::make_autoencoder(ae_probe, mc.in_channels);
  if (ae->latent_channels() != mc.in_channels)
    throw std::runtime_error("the model works on " + std::to_string(mc.in_channels) + "-channel inputs but the autoencoder (--vae " + ae_probe +
                             ") has " + std::to_string(ae->latent_channels()) + " latent channels");
  if (ae_probe == "none" && mc.in_channels != 1 && mc.in_channels != 3)
    throw std::runtime_error(mc.name + " works on " + std::to_string(mc.in_channels) + "-channel latents: give the VAE with --vae FILE");
  if (px > 0 && px != mc.input_size * ae->downsample())
    throw std::runtime_error("--image-size " + std::to_string(px) + " does not match the checkpoint, which makes " +
                             std::to_string(mc.input_size * ae->downsample()) + " px images");
  model->to(dev, dtype);
  ae->to(dev, dtype);  // the VAE runs in --dtype too (bf16 for fp8: its linear layers are not switched)
  int64_t fp8_layers = 0;
  if (fp8) fp8_layers = model->use_fp8_linears();
  samplers::SamplingOptions so;
  so.sampler = a["sampler"].as<std::string>();
  // the process the model was trained with (nala checkpoints record it); a flag overrides it, said once
  if (meta.count(diffusion::kObjectiveMetadataKey)) {
    const auto rec = diffusion::objective_from_json(meta[diffusion::kObjectiveMetadataKey], weights_file);
    so.objective = rec.objective;
    so.schedule = rec.schedule;
    so.variance = rec.variance;
    so.path = rec.path;
    so.prediction = rec.prediction;
  } else {
    so.objective = "auto";  // official checkpoints: DDPM for the DiT family, flow for SiT, the defaults below
  }
  const bool recorded = meta.count(diffusion::kObjectiveMetadataKey) > 0;
  for (auto [flag, field] : {std::pair<const char*, std::string*>{"objective", &so.objective}, {"schedule", &so.schedule},
                             {"variance", &so.variance}, {"path", &so.path}, {"prediction", &so.prediction}}) {
    const std::string v = a[flag].as<std::string>();
    if (v.empty() || v == *field) continue;
    if (recorded) std::cerr << "note: --" << flag << " " << v << " overrides the checkpoint's " << *field << " (" << weights_file << ")\n";
    *field = v;
  }
  so.steps = a["steps"].as<int64_t>();
  so.cfg_scale = a["cfg-scale"].as<double>();
  const std::string ch = a["cfg-channels"].as<std::string>();
  so.cfg_channels = parse_cfg_channels(ch, mc.in_channels);
  so.eta = a["eta"].as<double>();
  so.diffusion_form = diffusion::parse_diffusion_form(a["diffusion-form"].as<std::string>());
  so.last_step = samplers::parse_last_step(a["last-step"].as<std::string>());
  so.last_step_size = a["last-step-size"].as<double>();
  const std::string graphs = a["cuda-graphs"].as<std::string>();
  if (graphs != "true" && graphs != "false") throw std::runtime_error("--cuda-graphs '" + graphs + "' (known: true, false)");
  so.cuda_graphs = graphs == "true";
  if (so.cuda_graphs && !dev.is_cuda()) throw std::runtime_error("--cuda-graphs true needs a CUDA device; this run is on " + dev.str());
  so = samplers::resolve(so, *model);
  const uint64_t seed = a["seed"].as<uint64_t>();
  const int64_t C = mc.in_channels, L = mc.input_size;
  if (a.count("likelihood")) {
    if (so.objective != "flow") throw std::runtime_error("--likelihood needs a flow-matching (SiT-family) model; " + mc.name + " is sampled as " + so.objective);
    const std::string f = a["likelihood"].as<std::string>();
    std::map<std::string, at::Tensor> in;
    for (auto& [k, v] : io::load_npz(f)) in[k] = v;
    if (!in.count("x") || in["x"].dim() != 4 || in["x"].size(1) != C || in["x"].size(2) != L)
      throw std::runtime_error(f + ": --likelihood needs 'x' of shape (N, " + std::to_string(C) + ", " + std::to_string(L) + ", " + std::to_string(L) + ")");
    at::Tensor x = in["x"].to(dev, at::kFloat);                                                                                  // (N, C, h, w)
    at::Tensor y = in.count("labels") ? in["labels"].to(dev, at::kLong) : at::full({x.size(0)}, mc.num_classes, x.options().dtype(at::kLong));  // (N,)
    check_labels(y, mc.num_classes, mc.class_dropout > 0, f + ": 'labels'");
    model->to(dev, at::kFloat);
    auto r = samplers::likelihood(*model, so, x, y, a["likelihood-steps"].as<int64_t>(), at::make_generator<at::CPUGeneratorImpl>(seed));
    std::printf("log-likelihood of %ld inputs: %.4f bits/dim (mean; std %.4f), %ld model evaluations\n", x.size(0), r.bits_per_dim.mean().item<double>(),
                r.bits_per_dim.std().item<double>(), r.nfe);
    return 0;
  }
  std::cerr << "nala sample: " << mc.name << " on " << dev << " (" << c10::toString(dtype)
            << (fp8 ? ", " + std::to_string(fp8_layers) + " linear layers in fp8" : std::string()) << "), " << so.sampler << " " << so.steps
            << " steps, cfg " << so.cfg_scale << (so.cfg_scale > 1 ? (so.cfg_channels < 0 ? " (all channels)" : " (" + std::to_string(so.cfg_channels) + " channels)") : "") << "\n";

  if (n > 0) {
    // ---- FID mode ----
    if (!a.count("npz")) throw std::runtime_error("--num-samples needs --npz OUT.npz");
    const std::string npz = a["npz"].as<std::string>();
    samplers::FidBatchOptions fo;
    fo.num_samples = n;
    fo.batch_size = a["batch-size"].as<int64_t>();
    fo.seed = seed;
    fo.manifest["weights"] = io::file_fingerprint(weights_file);
    fo.manifest["vae"] = ae_probe == "none" ? "none" : io::file_fingerprint(ae_probe);
    if (fp8) fo.manifest["linear_gemm"] = "fp8 e4m3, row-wise scales";  // absent otherwise: earlier runs' manifests stay valid
    samplers::sample_fid_batches(*model, *ae, so, fo, npz, dev);
    const int64_t H = L * ae->downsample();
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
    if (z.size(0) == 0) throw std::runtime_error(f + ": 'noise' has no rows");
    z = z.to(at::kFloat);
    y = in.count("labels") ? in["labels"].to(at::kLong) : at::Tensor();
    if (y.defined()) check_labels(y, mc.num_classes, mc.class_dropout > 0, f + ": 'labels'");
  }
  std::vector<int64_t> classes = parse_classes(a["classes"].as<std::string>());
  int64_t per_row = 8;
  if (!y.defined()) {
    if (classes.empty()) {
      const samplers::GridLabels g = samplers::default_grid_labels(mc.num_classes);
      classes = g.labels;
      per_row = g.per_row;
    }
    for (int64_t c : classes)
      if (c < 0 || c >= mc.num_classes) throw std::runtime_error("--classes: label " + std::to_string(c) + " outside 0.." + std::to_string(mc.num_classes - 1));
    y = at::tensor(classes, at::kLong);
  }
  if (!z.defined()) z = samplers::batch_noise_and_labels(seed, 0, y.size(0), C, L, mc.num_classes).first;
  if (z.size(0) != y.size(0)) throw std::runtime_error("noise has " + std::to_string(z.size(0)) + " rows but there are " + std::to_string(y.size(0)) + " labels");
  report::ProgressBar bar("sample", so.steps, "step");
  at::Tensor x = samplers::generate(*model, so, z.to(dev), y.to(dev), samplers::sampler_generator(seed, 0),
                                    [&](int64_t d, int64_t t) { bar.update(d * so.steps / std::max<int64_t>(t, 1)); })
                     .x;
  bar.finish();
  if (a.count("save-latents")) io::save_npz(a["save-latents"].as<std::string>(), {{"latents", x.cpu()}, {"labels", y}});
  const std::string out = a["out"].as<std::string>();
  io::write_png(out, io::make_grid(samplers::decode_to_images(*ae, x, dev), per_row));
  std::cout << "wrote a grid of " << y.size(0) << " samples to " << out << "\n";
  return 0;
}

}  // namespace nala::cli
