#include "data/datasets.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <zlib.h>

#include "io/image.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace nala::data {

// ---- Fashion-MNIST --------------------------------------------------------------------------
std::string default_fashion_mnist_dir() {
  const char* env = std::getenv("NALA_FASHION_MNIST");
  return env && *env ? std::string(env) : std::string("/usr/share/datasets/fashion-mnist");
}

namespace {

std::string read_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open '" + path + "' (install Debian's dataset-fashion-mnist, or set NALA_FASHION_MNIST)");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) throw std::runtime_error(path + ": corrupt gzip data (" + msg + ")");
  return out;
}

uint32_t be32(const std::string& s, size_t off) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + off);
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

}  // namespace

IdxImages read_fashion_mnist(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "test") throw std::runtime_error("unknown Fashion-MNIST split '" + split + "' (known: train, test)");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string ipath = dir + "/" + prefix + "-images-idx3-ubyte.gz", lpath = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  const std::string img = read_gzip(ipath), lab = read_gzip(lpath);
  if (img.size() < 16 || be32(img, 0) != 0x00000803) throw std::runtime_error(ipath + ": not an idx3 image file (bad magic)");
  if (lab.size() < 8 || be32(lab, 0) != 0x00000801) throw std::runtime_error(lpath + ": not an idx1 label file (bad magic)");
  const int64_t n = be32(img, 4), rows = be32(img, 8), cols = be32(img, 12);
  if (rows != 28 || cols != 28 || img.size() != size_t(16 + n * rows * cols))
    throw std::runtime_error(ipath + ": expected " + std::to_string(n) + " images of 28x28, file has " + std::to_string(img.size()) + " bytes");
  if (int64_t(be32(lab, 4)) != n || lab.size() != size_t(8 + n))
    throw std::runtime_error(lpath + ": label count does not match the " + std::to_string(n) + " images");
  IdxImages out;
  out.images = at::empty({n, rows, cols}, at::kByte);
  std::memcpy(out.images.data_ptr(), img.data() + 16, size_t(n * rows * cols));
  at::Tensor l8 = at::empty({n}, at::kByte);
  std::memcpy(l8.data_ptr(), lab.data() + 8, size_t(n));
  out.labels = l8.to(at::kLong);
  if (out.labels.max().item<int64_t>() > 9) throw std::runtime_error(lpath + ": label above 9");
  return out;
}

at::Tensor fashion_mnist_upsample(const at::Tensor& x, int64_t image_size) {
  TORCH_CHECK(x.dim() == 4 && x.size(2) == 32 && x.size(3) == 32, "fashion_mnist_upsample: needs (N, C, 32, 32), got ", x.sizes());
  return at::upsample_bilinear2d(x, {image_size, image_size}, /*align_corners=*/false);  // (N, C, S, S)
}

FashionMNIST::FashionMNIST(const std::string& dir, const std::string& split, int64_t image_size)
    : dir_(dir), split_(split), image_size_(image_size) {
  const bool padded = image_size >= 28 && image_size <= 32 && image_size % 2 == 0;
  const bool upsampled = image_size > 32 && image_size % 32 == 0;
  if (!padded && !upsampled)
    throw std::runtime_error("Fashion-MNIST image size must be 28, 30 or 32 (zero padding) or a multiple of 32 (padded to 32, then upsampled), got " +
                             std::to_string(image_size));
  IdxImages raw = read_fashion_mnist(dir, split);
  const int64_t pad = (std::min<int64_t>(image_size, 32) - 28) / 2;
  images_ = at::constant_pad_nd(raw.images, {pad, pad, pad, pad}, 0).contiguous();  // (N, P, P)
  labels_ = raw.labels;
}

Example FashionMNIST::get(int64_t index) const {
  at::Tensor x = images_[index].unsqueeze(0).to(at::kFloat).div(127.5).sub(1.0);  // (1, P, P) in [-1, 1]
  if (image_size_ > 32) x = fashion_mnist_upsample(x.unsqueeze(0), image_size_).squeeze(0);  // (1, S, S)
  return {x, labels_[index].item<int64_t>()};
}

std::string FashionMNIST::describe() const {
  return "Fashion-MNIST " + split_ + " (" + std::to_string(size()) + " images, 1x" + std::to_string(image_size_) + "x" +
         std::to_string(image_size_) + (image_size_ > 32 ? " upsampled bilinearly from 32" : "") + ", 10 classes) from " + dir_;
}

// ---- ImageNet-style folder -----------------------------------------------------------------
namespace {
bool is_image_file(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), ::tolower);
  return e == ".jpg" || e == ".jpeg" || e == ".png" || e == ".bmp" || e == ".gif" || e == ".tga" || e == ".ppm" ||
         e == ".pgm" || e == ".pnm";
}
}  // namespace

ImageFolder::ImageFolder(const std::string& root, int64_t image_size) : root_(root), image_size_(image_size) {
  if (!fs::is_directory(root)) throw std::runtime_error("image folder '" + root + "' does not exist or is not a directory");
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) classes_.push_back(e.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  if (classes_.empty()) throw std::runtime_error("image folder '" + root + "' has no class sub-folders");
  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(fs::path(root) / classes_[c], fs::directory_options::follow_directory_symlink))
      if (e.is_regular_file() && is_image_file(e.path())) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      files_.push_back(std::move(f));
      labels_.push_back(int64_t(c));
    }
  }
  if (files_.empty()) throw std::runtime_error("image folder '" + root + "' has no image files in its class folders");
}

at::Tensor ImageFolder::load_cropped(int64_t index) const {
  try {
    return io::center_crop_adm(io::read_image(files_[size_t(index)]), image_size_);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bad_.insert(index).second) std::cerr << "warning: skipping unreadable image: " << e.what() << "\n";
    return at::Tensor();
  }
}

Example ImageFolder::get(int64_t index) const {
  for (int64_t k = 0; k < size(); ++k) {
    const int64_t i = (index + k) % size();
    at::Tensor img = load_cropped(i);
    if (img.defined()) return {io::uint8_to_model(img.unsqueeze(0))[0], labels_[size_t(i)]};
  }
  throw std::runtime_error("image folder '" + root_ + "': no image could be decoded");
}

int64_t ImageFolder::bad_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int64_t(bad_.size());
}

std::string ImageFolder::describe() const {
  return "image folder " + root_ + " (" + std::to_string(size()) + " images, " + std::to_string(classes_.size()) +
         " classes, centre-cropped to " + std::to_string(image_size_) + ")";
}

// ---- latent shards -------------------------------------------------------------------------
namespace {
// A latent folder's shards (latents_*.safetensors), sorted; none when dir is no folder.
std::vector<std::string> latent_shard_files(const std::string& dir) {
  std::vector<std::string> shards;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("latents_", 0) == 0 && e.path().extension() == ".safetensors") shards.push_back(e.path().string());
    }
  std::sort(shards.begin(), shards.end());
  return shards;
}

// A shard's metadata entry `key` as a positive whole number (extract-latents writes image_size and
// num_classes); nullopt without it, an error naming the shard and the value otherwise.
std::optional<int64_t> positive_metadata(const std::string& shard, const std::map<std::string, std::string>& meta, const std::string& key) {
  const auto it = meta.find(key);
  if (it == meta.end()) return std::nullopt;
  const std::string& v = it->second;
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos || std::stoll(v) <= 0)
    throw std::runtime_error(shard + ": metadata " + key + " must be a positive whole number, got '" + v + "'");
  return std::stoll(v);
}
}  // namespace

LatentShards::LatentShards(const std::string& dir) : dir_(dir) {
  const std::vector<std::string> shards = latent_shard_files(dir);
  if (shards.empty()) throw std::runtime_error("latent folder '" + dir + "' holds no latents_*.safetensors shards");
  std::vector<at::Tensor> xs, ys;
  std::map<std::string, std::string> meta;  // the first shard's
  for (const auto& s : shards) {
    at::Tensor x, y;
    for (auto& [name, t] : io::load_safetensors(s, xs.empty() ? &meta : nullptr)) {
      if (name == "latents") x = t;
      if (name == "labels") y = t;
    }
    if (!x.defined() || !y.defined() || x.dim() != 4 || y.dim() != 1 || x.size(0) != y.size(0))
      throw std::runtime_error(s + ": a latent shard needs 'latents' (N, C, h, w) and 'labels' (N,)");
    if (!xs.empty() && x.sizes().slice(1) != xs.front().sizes().slice(1))
      throw std::runtime_error(s + ": latents of " + c10::str(x.sizes().slice(1)) + ", but " + shards.front() + " holds " +
                               c10::str(xs.front().sizes().slice(1)) + ": a latent folder holds one size");
    xs.push_back(x);
    ys.push_back(y.to(at::kLong));
  }
  latents_ = at::cat(xs);
  labels_ = at::cat(ys);
  num_classes_ = labels_.max().item<int64_t>() + 1;
  num_classes_ = std::max(num_classes_, positive_metadata(shards.front(), meta, "num_classes").value_or(0));
  image_size_ = positive_metadata(shards.front(), meta, "image_size");
}

std::optional<int64_t> latent_folder_image_size(const std::string& spec) {
  const std::vector<std::string> shards = latent_shard_files(spec);
  if (shards.empty()) return std::nullopt;
  std::map<std::string, std::string> meta;
  for (const auto& info : io::read_safetensors_header(shards.front(), &meta))
    if (info.name == "latents" && info.shape.size() == 4) return positive_metadata(shards.front(), meta, "image_size").value_or(8 * info.shape[2]);
  throw std::runtime_error(shards.front() + ": a latent shard needs 'latents' (N, C, h, w) and 'labels' (N,)");
}

Example LatentShards::get(int64_t index) const { return {latents_[index].to(at::kFloat), labels_[index].item<int64_t>()}; }

std::vector<int64_t> LatentShards::sample_shape() const { return latents_.sizes().slice(1).vec(); }

std::string LatentShards::describe() const {
  return "latent shards " + dir_ + " (" + std::to_string(size()) + " latents of " + std::to_string(latents_.size(1)) + "x" +
         std::to_string(latents_.size(2)) + "x" + std::to_string(latents_.size(3)) + ", " + std::to_string(num_classes_) + " classes)";
}

std::shared_ptr<Dataset> open_dataset(const std::string& spec, int64_t image_size) {
  if (spec == "fashion-mnist") return std::make_shared<FashionMNIST>(default_fashion_mnist_dir(), "train", image_size);
  if (fs::exists(fs::path(spec) / "train-images-idx3-ubyte.gz")) return std::make_shared<FashionMNIST>(spec, "train", image_size);
  if (fs::is_directory(spec)) {
    for (const auto& e : fs::directory_iterator(spec))
      if (e.path().filename().string().rfind("latents_", 0) == 0) return std::make_shared<LatentShards>(spec);
    return std::make_shared<ImageFolder>(spec, image_size);
  }
  throw std::runtime_error("--data '" + spec + "' is neither 'fashion-mnist', a Fashion-MNIST folder, a latent folder nor an image folder");
}

}  // namespace nala::data
