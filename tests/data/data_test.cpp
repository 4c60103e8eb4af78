// Fashion-MNIST reader, image folder reader and the data loader's deterministic order.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <ATen/ATen.h>

#include "data/data_loader.h"
#include "data/datasets.h"
#include "io/atomic_file.h"
#include "io/image.h"

namespace fs = std::filesystem;
using namespace nala;

TEST(FashionMNIST, CountsShapesAndLabels) {
  auto train = data::read_fashion_mnist(data::default_fashion_mnist_dir(), "train");
  auto test = data::read_fashion_mnist(data::default_fashion_mnist_dir(), "test");
  EXPECT_EQ(train.images.sizes(), (at::IntArrayRef{60000, 28, 28}));
  EXPECT_EQ(test.images.sizes(), (at::IntArrayRef{10000, 28, 28}));
  // every class has exactly 6000 training and 1000 test images (the data set's design)
  EXPECT_TRUE(at::equal(at::bincount(train.labels), at::full({10}, 6000, at::kLong)));
  EXPECT_TRUE(at::equal(at::bincount(test.labels), at::full({10}, 1000, at::kLong)));
  // The first labels, as published in the data set's README figure and read by every loader:
  // train starts ankle boot (9), T-shirt (0), T-shirt (0), dress (3).
  EXPECT_TRUE(at::equal(train.labels.slice(0, 0, 4), at::tensor({9, 0, 0, 3}, at::kLong)));
}

TEST(FashionMNIST, PaddedDatasetIsInRange) {
  data::FashionMNIST ds(data::default_fashion_mnist_dir(), "test", 32);
  auto e = ds.get(0);
  EXPECT_EQ(e.x.sizes(), (at::IntArrayRef{1, 32, 32}));
  EXPECT_FLOAT_EQ(e.x[0][0][0].item<float>(), -1.0f);  // padding is background
  EXPECT_LE(e.x.max().item<float>(), 1.0f);
  EXPECT_THROW(data::FashionMNIST(data::default_fashion_mnist_dir(), "valid", 32), std::runtime_error);
  EXPECT_THROW(data::FashionMNIST("/nonexistent", "train", 32), std::runtime_error);
}

TEST(FashionMNIST, UpsampledIsBilinearFromThePaddedImage) {
  // 128 px: the 32 px image upsampled 4x, bilinear with half-pixel centres (align_corners false),
  // against the interpolation written out in double here
  data::FashionMNIST small(data::default_fashion_mnist_dir(), "test", 32), big(data::default_fashion_mnist_dir(), "test", 128);
  EXPECT_EQ(big.sample_shape(), (std::vector<int64_t>{1, 128, 128}));
  EXPECT_NE(big.describe().find("upsampled"), std::string::npos);
  for (int64_t i : {0, 4321}) {
    const at::Tensor a = small.get(i).x[0].to(at::kDouble).contiguous(), b = big.get(i).x;  // (32, 32), (1, 128, 128)
    ASSERT_EQ(b.sizes(), (at::IntArrayRef{1, 128, 128}));
    EXPECT_EQ(big.get(i).y, small.get(i).y);
    const double* A = a.data_ptr<double>();
    auto src = [](int64_t o) {  // source coordinate of output pixel o, clamped at the border: (lo, hi, weight of hi)
      const double c = std::max((o + 0.5) / 4.0 - 0.5, 0.0);
      const int64_t lo = std::min<int64_t>(int64_t(c), 31);
      return std::make_tuple(lo, std::min<int64_t>(lo + 1, 31), c - double(lo));
    };
    double worst = 0;
    for (int64_t y = 0; y < 128; ++y)
      for (int64_t x = 0; x < 128; ++x) {
        auto [y0, y1, wy] = src(y);
        auto [x0, x1, wx] = src(x);
        const double v = (1 - wy) * ((1 - wx) * A[y0 * 32 + x0] + wx * A[y0 * 32 + x1]) + wy * ((1 - wx) * A[y1 * 32 + x0] + wx * A[y1 * 32 + x1]);
        worst = std::max(worst, std::abs(v - b[0][y][x].item<double>()));
      }
    EXPECT_LT(worst, 1e-5) << "image " << i;
  }
  for (int64_t bad : {26, 33, 40, 96 + 2}) {
    try {
      data::FashionMNIST(data::default_fashion_mnist_dir(), "test", bad);
      FAIL() << bad << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("got " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(data::FashionMNIST(data::default_fashion_mnist_dir(), "test", 64));
}

TEST(ImageFolder, LabelsBySortedFolderAndCorruptFilesSkipped) {
  const std::string root = (fs::temp_directory_path() / ("nala_folder_" + std::to_string(::getpid()))).string();
  for (const char* c : {"zebra", "apple"}) fs::create_directories(root + "/" + c);
  io::write_png(root + "/zebra/a.png", at::full({40, 50, 3}, 200, at::kByte));
  io::write_png(root + "/apple/b.png", at::full({64, 64, 3}, 10, at::kByte));
  std::ofstream(root + "/apple/c.png") << "garbage";
  data::ImageFolder ds(root, 32);
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"apple", "zebra"}));
  EXPECT_EQ(ds.label(0), 0);
  EXPECT_EQ(ds.label(2), 1);
  // index 1 is the corrupt file: replaced by the next readable image (zebra), counted once
  auto e = ds.get(1);
  EXPECT_EQ(e.y, 1);
  ds.get(1);
  EXPECT_EQ(ds.bad_count(), 1);
  io::remove_tree(root);
}

TEST(DataLoader, OrderIsDeterministicAndShardedLikeDistributedSampler) {
  auto a = data::epoch_order(10, 5, 0, true), b = data::epoch_order(10, 5, 0, true), c = data::epoch_order(10, 5, 1, true);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<int64_t> s(a.begin(), a.end());
  EXPECT_EQ(s.size(), 10u);
  auto r0 = data::epoch_order(10, 5, 0, true, 0, 3), r1 = data::epoch_order(10, 5, 0, true, 1, 3);
  EXPECT_EQ(r0.size(), 4u);  // padded to 12 by wrapping
  EXPECT_EQ(r0[0], a[0]);
  EXPECT_EQ(r1[0], a[1]);
  EXPECT_EQ(r0[3], a[9]);
  EXPECT_EQ(r1[3], a[0]);  // padded by wrapping: position (1 + 3*3) % 10
}

TEST(DataLoader, SeekReproducesTheSameBatches) {
  auto ds = std::make_shared<data::FashionMNIST>(data::default_fashion_mnist_dir(), "test", 32);
  data::DataLoader loader(ds, 16, 7, 2);
  std::vector<at::Tensor> first;
  for (int i = 0; i < 5; ++i) first.push_back(loader.next().y);
  loader.seek(0, 3);
  auto b = loader.next();
  EXPECT_EQ(b.index, 3);
  EXPECT_TRUE(at::equal(b.y, first[3]));
  data::DataLoader other(ds, 16, 7, 3);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(at::equal(other.next().y, first[size_t(i)]));
}
