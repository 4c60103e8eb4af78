#include "samplers/fid_batches.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include <ATen/ATen.h>

#include "diffusion/seed.h"
#include "io/atomic_file.h"
#include "io/image.h"
#include "io/npz.h"
#include "io/output_lock.h"
#include "report/progress.h"
#include "samplers/generate.h"

namespace nala::samplers {

at::Tensor decode_to_images(models::Autoencoder& ae, const at::Tensor& x, const c10::Device& device) {
  at::Tensor img = io::model_to_uint8(ae.decode(x.to(device)).cpu());  // (N, H, W, C)
  return img.size(3) == 1 ? img.expand({-1, -1, -1, 3}).contiguous() : img;
}

std::pair<at::Tensor, at::Tensor> batch_noise_and_labels(uint64_t seed, int64_t b, int64_t n, int64_t channels, int64_t size, int64_t num_classes) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(diffusion::derive_seed(seed, diffusion::SeedStream::SampleBatch, uint64_t(b)));
  at::Tensor z = at::randn({n, channels, size, size}, gen);  // (n, C, h, w)
  at::Tensor y = at::randint(0, num_classes, {n}, gen);      // (n,)
  return {z, y};
}

at::Generator sampler_generator(uint64_t seed, int64_t b) {
  return at::make_generator<at::CPUGeneratorImpl>(diffusion::derive_seed(seed, diffusion::SeedStream::SamplerNoise, uint64_t(b)));
}

void refuse_finished_npz(const std::string& npz) {
  if (io::file_exists(npz))
    throw std::runtime_error("'" + npz + "' exists (a finished sample batch): it is not sampled again or replaced; remove it or name another --npz");
}

void sample_fid_batches(models::DiT& model, models::Autoencoder& ae, const SamplingOptions& so, const FidBatchOptions& o,
                        const std::string& npz, const c10::Device& device) {
  if (o.num_samples <= 0) throw std::runtime_error("--num-samples must be positive, got " + std::to_string(o.num_samples));
  if (o.batch_size <= 0) throw std::runtime_error("--batch-size must be positive, got " + std::to_string(o.batch_size));
  const auto& mc = model.config();
  const int64_t n = o.num_samples, bs = o.batch_size, C = mc.in_channels, L = mc.input_size;
  const std::string parts = npz + ".parts";
  // a finished batch is the user's data: re-running (the same command, or other settings) would
  // sample it again and replace it. Checked again under the lock: a run that held it may have just
  // finished (its parts folder, the lock's, is then removed again)
  refuse_finished_npz(npz);
  io::OutputLock lock(parts, "sample batch " + npz);  // one writer: a second `nala sample --npz` on it is refused
  if (io::file_exists(npz)) {
    const auto entries = std::filesystem::directory_iterator(parts);
    std::string err;
    if (std::all_of(begin(entries), end(entries), [](const auto& e) { return e.path().filename() == ".nala.lock"; }))
      io::remove_tree(parts, &err);  // (the folder our lock made, nothing in it)
    refuse_finished_npz(npz);
  }
  bool resuming = false;
  for (const auto& e : std::filesystem::directory_iterator(parts))
    resuming = resuming || e.path().filename().string().rfind("batch_", 0) == 0;
  io::Settings m = o.manifest;
  m["model"] = mc.name;
  m["model_dtype"] = c10::toString(model.parameters()[0].scalar_type());
  m["device"] = c10::DeviceTypeName(device.type(), true);
  m["num_samples"] = std::to_string(n);
  m["batch_size"] = std::to_string(bs);
  m["seed"] = std::to_string(o.seed);
  m["image_size"] = std::to_string(L * ae.downsample());
  m["sampler"] = so.sampler;
  m["objective"] = so.objective;
  m["steps"] = std::to_string(so.steps);
  m["cfg_scale"] = c10::str(so.cfg_scale);
  m["cfg_channels"] = std::to_string(so.cfg_channels);
  m["eta"] = c10::str(so.eta);
  m["clip_denoised"] = so.clip_denoised ? "true" : "false";
  m["schedule"] = so.schedule;
  m["variance"] = so.variance;
  m["path"] = so.path;
  m["prediction"] = so.prediction;
  m["atol"] = c10::str(so.atol);
  m["rtol"] = c10::str(so.rtol);
  m["diffusion_form"] = std::to_string(int(so.diffusion_form));
  m["last_step"] = std::to_string(int(so.last_step));
  m["last_step_size"] = c10::str(so.last_step_size);
  m["dpm_spacing"] = so.dpm_spacing;
  io::check_or_write_manifest(parts, m, resuming, "sample batch " + npz);
  const int64_t batches = (n + bs - 1) / bs;
  report::ProgressBar bar("sample", n, "img");
  int64_t done = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const std::string part = parts + "/batch_" + std::to_string(b) + ".npz";
    const int64_t m = std::min(bs, n - b * bs);
    if (io::file_exists(part)) {  // finished before an interruption
      done += m;
      continue;
    }
    auto [z, y] = batch_noise_and_labels(o.seed, b, m, C, L, mc.num_classes);
    at::Tensor x = generate(model, so, z.to(device), y.to(device), sampler_generator(o.seed, b)).x;  // (m, C, h, w)
    io::save_npz(part, {{"arr_0", decode_to_images(ae, x, device)}, {"arr_1", y}});
    done += m;
    if (o.progress) bar.update(done, "batch " + std::to_string(b + 1) + "/" + std::to_string(batches));
    if (o.on_batch) o.on_batch(b);
  }
  if (o.progress) bar.finish();
  // assemble, streaming batch by batch, then remove the parts
  io::NpzWriter w(npz);
  const int64_t H = L * ae.downsample();
  w.begin("arr_0", at::kByte, {n, H, H, 3});
  std::vector<at::Tensor> labels;
  for (int64_t b = 0; b < batches; ++b) {
    auto p = io::load_npz(parts + "/batch_" + std::to_string(b) + ".npz");
    w.append(p[0].second);
    labels.push_back(p[1].second);
  }
  w.add("arr_1", at::cat(labels));
  w.close();
  std::string err;  // the .npz is complete: leftover parts cost disk space, not data
  if (!io::remove_tree(parts, &err)) std::cerr << "warning: " << err << "\n";
}

}  // namespace nala::samplers
