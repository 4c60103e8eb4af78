// Data sets for training and latent extraction. Every data set yields (x, y): x a float tensor in
// model space (C, H, W) and y an integer class label.
//   FashionMNIST  the gzip idx files of /usr/share/datasets/fashion-mnist (Debian's
//                 dataset-fashion-mnist), 28x28 gray, zero-padded to 32x32, scaled to [-1, 1]
//   ImageFolder   ImageNet-style: one sub-folder per class, labels by sorted folder name; each image
//                 decoded with stb and ADM-centre-cropped; an unreadable image is reported once and
//                 replaced by the next readable one (deterministically), and counted
//   LatentShards  the output of `nala extract-latents` (latents_NNNNN.safetensors shards)
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace nala::data {

struct Example {
  at::Tensor x;   // (C, H, W) float32
  int64_t y = 0;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  virtual std::vector<int64_t> sample_shape() const = 0;  // (C, H, W)
  virtual int64_t num_classes() const = 0;
  virtual std::string describe() const = 0;
};

// ---- Fashion-MNIST --------------------------------------------------------------------------
std::string default_fashion_mnist_dir();  // $NALA_FASHION_MNIST or /usr/share/datasets/fashion-mnist

struct IdxImages {
  at::Tensor images;  // (N, 28, 28) uint8
  at::Tensor labels;  // (N,) int64
};
// split: "train" (60,000) or "test" (10,000)
IdxImages read_fashion_mnist(const std::string& dir, const std::string& split);
// x (N, C, 32, 32) in [-1, 1] -> (N, C, S, S): the bilinear upsampling of FashionMNIST at S > 32
at::Tensor fashion_mnist_upsample(const at::Tensor& x, int64_t image_size);

// Fashion-MNIST at image_size S: S = 28, 30 or 32 zero-pads the 28 px images (the experiments use
// 32); S > 32, a multiple of 32, pads to 32 and then upsamples bilinearly (align_corners false) by
// S / 32, for runs with more tokens (128 px with patch 2: 4,096). Any other S is an error.
class FashionMNIST : public Dataset {
 public:
  FashionMNIST(const std::string& dir, const std::string& split, int64_t image_size = 32);
  int64_t size() const override { return images_.size(0); }
  Example get(int64_t index) const override;
  std::vector<int64_t> sample_shape() const override { return {1, image_size_, image_size_}; }
  int64_t num_classes() const override { return 10; }
  std::string describe() const override;
  const at::Tensor& images() const { return images_; }  // (N, P, P) uint8, padded (P = min(S, 32); get() upsamples)
  const at::Tensor& labels() const { return labels_; }

 private:
  std::string dir_, split_;
  int64_t image_size_;
  at::Tensor images_, labels_;
};

// ---- ImageNet-style folder -----------------------------------------------------------------
class ImageFolder : public Dataset {
 public:
  ImageFolder(const std::string& root, int64_t image_size);
  int64_t size() const override { return int64_t(files_.size()); }
  Example get(int64_t index) const override;
  std::vector<int64_t> sample_shape() const override { return {3, image_size_, image_size_}; }
  int64_t num_classes() const override { return int64_t(classes_.size()); }
  std::string describe() const override;
  // The centre-cropped uint8 image (S, S, 3), or an undefined tensor if the file cannot be decoded
  // (reported once on stderr and counted).
  at::Tensor load_cropped(int64_t index) const;
  const std::string& file(int64_t i) const { return files_[size_t(i)]; }
  int64_t label(int64_t i) const { return labels_[size_t(i)]; }
  const std::vector<std::string>& classes() const { return classes_; }
  int64_t bad_count() const;

 private:
  std::string root_;
  int64_t image_size_;
  std::vector<std::string> classes_, files_;
  std::vector<int64_t> labels_;
  mutable std::mutex mutex_;
  mutable std::set<int64_t> bad_;
};

// ---- latent shards -------------------------------------------------------------------------
class LatentShards : public Dataset {
 public:
  explicit LatentShards(const std::string& dir);
  int64_t size() const override { return latents_.size(0); }
  Example get(int64_t index) const override;
  std::vector<int64_t> sample_shape() const override;
  int64_t num_classes() const override { return num_classes_; }
  std::string describe() const override;
  // The pixel size of the images the latents encode as the shards record it ("image_size"
  // metadata: extract-latents writes it); nullopt where they do not.
  std::optional<int64_t> recorded_image_size() const { return image_size_; }

 private:
  std::string dir_;
  std::optional<int64_t> image_size_;
  at::Tensor latents_;  // (N, C, h, w) float32 or bfloat16, all shards concatenated
  at::Tensor labels_;   // (N,) int64
  int64_t num_classes_ = 0;
};

// The pixel size a latent folder's latents encode, read from its first shard's header alone: the
// recorded size (LatentShards::recorded_image_size), else 8·h (the Stable Diffusion VAE's
// downsampling, a default); nullopt when spec is no latent folder.
std::optional<int64_t> latent_folder_image_size(const std::string& spec);

// Opens a data set from a --data argument: "fashion-mnist" (or a directory holding the idx files),
// a latent directory (holding latents_*.safetensors), or an image folder.
std::shared_ptr<Dataset> open_dataset(const std::string& spec, int64_t image_size);

}  // namespace nala::data
