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
