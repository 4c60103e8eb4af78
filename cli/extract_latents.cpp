// nala extract-latents: encode an image folder once with the VAE into latent shards
// (latents_NNNNN.safetensors: "latents" (n, 4, S/8, S/8) float32 scaled by 0.18215, "labels" (n,),
// "indices" (n,) image index, negative for the flipped copy), the fast way to train. ADM centre
// crop; optional horizontally flipped copies; resumable (finished shards are skipped); corrupt
// images are reported, skipped and counted.
#include <chrono>
#include <filesystem>
#include <iostream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parse.h"
#include "data/datasets.h"
#include "models/vae.h"
#include "diffusion/seed.h"
#include "io/atomic_file.h"
#include "io/manifest.h"
#include "io/output_lock.h"
#include "io/image.h"
#include "report/progress.h"
#include "io/safetensors.h"

namespace nala::cli {

int run_extract_latents(int argc, char** argv) {
  cxxopts::Options o("nala extract-latents", "Encode an ImageNet-style folder with the VAE into latent shards for training");
  o.add_options()("data", "image folder (one sub-folder per class)", cxxopts::value<std::string>())(
      "vae", "VAE weights (diffusers diffusion_pytorch_model.safetensors)", cxxopts::value<std::string>())(
      "image-size", "crop size in pixels", cxxopts::value<int64_t>()->default_value("256"))("out", "output folder", cxxopts::value<std::string>())(
      "flip", "none or both (also store the horizontally flipped image)", cxxopts::value<std::string>()->default_value("none"))(
      "latent", "mean or sample (DiT samples the posterior)", cxxopts::value<std::string>()->default_value("sample"))(
      "shard-size", "images per shard", cxxopts::value<int64_t>()->default_value("10000"))(
      "batch-size", "images per VAE batch", cxxopts::value<int64_t>()->default_value("64"))(
      "seed", "seed of the posterior samples", cxxopts::value<uint64_t>()->default_value("0"))(
      "device", "auto, cpu, cuda", cxxopts::value<std::string>()->default_value("auto"))("h,help", "help");
  auto a = nala::cli::parse_flags(o, argc, argv);
  if (a.count("help") || !a.count("data") || !a.count("vae") || !a.count("out")) {
    std::cout << o.help() << "\n";
    if (!a.count("help")) std::cerr << "error: nala extract-latents needs --data, --vae and --out\n";
    return a.count("help") ? 0 : 2;
  }
  const std::string flip = a["flip"].as<std::string>(), latent = a["latent"].as<std::string>(), out = a["out"].as<std::string>();
  if (flip != "none" && flip != "both") throw std::runtime_error("--flip must be none or both, got '" + flip + "'");
  if (latent != "mean" && latent != "sample") throw std::runtime_error("--latent must be mean or sample, got '" + latent + "'");
  const int64_t size = a["image-size"].as<int64_t>(), shard = a["shard-size"].as<int64_t>(), bs = a["batch-size"].as<int64_t>();
  if (size <= 0 || size % 8 != 0) throw std::runtime_error("--image-size must be a positive multiple of 8, got " + std::to_string(size));
  if (shard <= 0 || bs <= 0) throw std::runtime_error("--shard-size and --batch-size must be positive");
  io::OutputLock lock(out, "latent folder " + out);  // one writer: a second extract-latents on `out` is refused
  const c10::Device dev = pick_device(a["device"].as<std::string>());
  data::ImageFolder folder(a["data"].as<std::string>(), size);
  auto vae = models::load_vae(a["vae"].as<std::string>());
  const at::ScalarType vae_dtype = dev.is_cuda() ? at::kBFloat16 : at::kFloat;
  vae->to(dev, vae_dtype);
  {  // every setting that changes the shards; a resume with another is refused (io/manifest.h)
    bool resuming = false;
    for (const auto& e : std::filesystem::directory_iterator(out))
      resuming = resuming || e.path().filename().string().rfind("latents_", 0) == 0;
    io::Settings m = {{"data", std::filesystem::absolute(a["data"].as<std::string>()).lexically_normal().string()},
                      {"images", std::to_string(folder.size())},
                      {"classes", std::to_string(folder.classes().size())},
                      {"image_size", std::to_string(size)},
                      {"crop", "adm-center"},
                      {"flip", flip},
                      {"latent", latent},
                      {"seed", std::to_string(a["seed"].as<uint64_t>())},
                      {"shard_size", std::to_string(shard)},
                      {"batch_size", std::to_string(bs)},
                      {"vae", io::file_fingerprint(a["vae"].as<std::string>())},
                      {"vae_dtype", c10::toString(vae_dtype)},
                      {"device", c10::DeviceTypeName(dev.type(), true)}};
    io::check_or_write_manifest(out, m, resuming, "latent folder " + out);
  }
  io::write_file_atomic(out + "/classes.json", [&](std::ostream& os) {
    os << nlohmann::json({{"classes", folder.classes()}, {"image_size", size}, {"flip", flip}, {"latent", latent}}).dump(2) << "\n";
  });
  const int64_t n = folder.size(), shards = (n + shard - 1) / shard;
  std::cerr << "extract-latents: " << folder.describe() << " -> " << shards << " shard(s) in " << out << " on " << dev << "\n";
  report::ProgressBar bar("encode", n, "img");
  const auto t0 = std::chrono::steady_clock::now();
  int64_t done = 0, skipped_shards = 0;
  for (int64_t s = 0; s < shards; ++s) {
    char name[32];
    std::snprintf(name, sizeof name, "/latents_%05ld.safetensors", s);
    const int64_t begin = s * shard, end = std::min(n, begin + shard);
    if (io::file_exists(out + name)) {  // finished before an interruption
      done += end - begin;
      ++skipped_shards;
      continue;
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(diffusion::derive_seed(a["seed"].as<uint64_t>(), diffusion::SeedStream::LatentShard, uint64_t(s)));
    std::vector<at::Tensor> lat;
    std::vector<int64_t> labels, indices;
    for (int64_t i = begin; i < end; i += bs) {
      std::vector<at::Tensor> imgs;
      std::vector<int64_t> idx;
      for (int64_t j = i; j < std::min(end, i + bs); ++j) {
        at::Tensor img = folder.load_cropped(j);
        if (!img.defined()) continue;  // reported once and counted by the folder
        imgs.push_back(img);
        idx.push_back(j);
      }
      if (!imgs.empty()) {
        at::Tensor x = io::uint8_to_model(at::stack(imgs)).to(dev);  // (b, 3, S, S) in [-1, 1]
        std::vector<at::Tensor> views = {x};
        if (flip == "both") views.push_back(x.flip({3}));
        for (size_t v = 0; v < views.size(); ++v) {
          lat.push_back(vae->encode(views[v], latent == "mean", gen).cpu());
          for (int64_t j : idx) {
            labels.push_back(folder.label(j));
            indices.push_back(v == 0 ? j : -1 - j);
          }
        }
      }
      done += std::min(end, i + bs) - i;
      bar.update(done);
    }
    if (lat.empty()) continue;
    io::save_safetensors(out + name,
                         {{"latents", at::cat(lat)}, {"labels", at::tensor(labels, at::kLong)}, {"indices", at::tensor(indices, at::kLong)}},
                         {{"num_classes", std::to_string(folder.classes().size())}, {"image_size", std::to_string(size)}});
  }
  bar.finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "encoded " << n << " images (" << folder.bad_count() << " unreadable, skipped; " << skipped_shards
            << " shard(s) already done) in " << secs << " s -> " << out << "\n";
  return 0;
}

}  // namespace nala::cli
