// The FID Inception's CUDA forward under every speed setting (metrics/inception.h InceptionSpeed:
// BatchNorm folded into the convs, NHWC, cuDNN's algorithm search, cuDNN's fused conv + ReLU)
// against the unfused BatchNorm layers in float64 on the CPU: random weights, BatchNorm statistics
// calibrated on random images and random per-channel affines, so that the fold is exercised and
// the features depend on the input; TF32 off, so the only differences are float32 rounding and the
// choice of convolution algorithm.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "metrics/inception.h"
#include "cuda_test_util.h"

using namespace nala;

namespace {
struct Tf32Off {  // TF32 off for the scope, the flags restored even when a check throws
  bool cudnn = at::globalContext().allowTF32CuDNN(), cublas = at::globalContext().allowTF32CuBLAS();
  Tf32Off() {
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
  }
  ~Tf32Off() {
    at::globalContext().setAllowTF32CuDNN(cudnn);
    at::globalContext().setAllowTF32CuBLAS(cublas);
  }
};

// A float64 CPU network with random weights, BatchNorm statistics calibrated on random images (a
// cumulative average, one train-mode pass), so that the features depend on the input through all
// layers, then random per-channel affines
std::shared_ptr<metrics::FidInception> calibrated_net() {
  auto net = std::make_shared<metrics::FidInception>();
  net->to(at::kDouble);
  at::Tensor calib = at::randint(0, 256, {6, 64, 64, 3}, at::TensorOptions().dtype(at::kByte));  // (N, H, W, 3)
  for (auto& m : net->modules(false))
    if (auto* b = dynamic_cast<torch::nn::BatchNorm2dImpl*>(m.get())) {
      b->options.momentum(std::nullopt);
      b->reset_running_stats();
    }
  net->train();
  net->forward_uint8(calib);
  net->eval();
  torch::NoGradGuard ng;
  for (auto& item : net->named_parameters()) {
    at::Tensor& t = item.value();
    if (item.key().find(".bn.weight") != std::string::npos) t.copy_(at::rand_like(t) + 0.5);
    else if (item.key().find(".bn.bias") != std::string::npos) t.copy_(at::randn_like(t) * 0.1);
  }
  return net;
}
}  // namespace

TEST(InceptionCuda, EverySpeedSettingEqualsTheBatchNormLayers) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  torch::manual_seed(0);
  auto net = calibrated_net();
  at::Tensor images = at::randint(0, 256, {3, 64, 64, 3}, at::TensorOptions().dtype(at::kByte));  // (N, H, W, 3)
  net->speed = {false, false, false, false};
  metrics::InceptionFeatures ref = net->forward_uint8(images);  // float64 CPU, the BatchNorm layers
  // the comparison means something: the images' features differ
  EXPECT_GT(test::rel(ref.pool[0], ref.pool[1]), 1e-2);
  EXPECT_GT(test::rel(ref.spatial[0], ref.spatial[2]), 1e-2);
  net->to(at::kCUDA, at::kFloat);
  Tf32Off tf32_off;
  for (metrics::InceptionSpeed s : {metrics::InceptionSpeed{false, false, false, false}, metrics::InceptionSpeed{true, false, false, false},
                                    metrics::InceptionSpeed{true, true, false, false}, metrics::InceptionSpeed{true, true, false, true},
                                    metrics::InceptionSpeed{true, true, true, true}, metrics::InceptionSpeed{}}) {
    net->speed = s;
    for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the folded weights
      metrics::InceptionFeatures f = net->forward_uint8(images.to(at::kCUDA));
      const double e_pool = test::rel(f.pool, ref.pool), e_sp = test::rel(f.spatial, ref.spatial), e_log = test::rel(f.logits, ref.logits);
      std::printf("fold %d NHWC %d fused %d benchmark %d rep %d: rel error pool %.2e spatial %.2e logits %.2e\n", s.fold_bn, s.channels_last,
                  s.fused_relu, s.cudnn_benchmark, rep, e_pool, e_sp, e_log);
      EXPECT_LT(e_pool, 1e-4);
      EXPECT_LT(e_sp, 1e-4);
      EXPECT_LT(e_log, 1e-4);
      EXPECT_EQ(f.pool.scalar_type(), at::kFloat);
    }
  }
  // a weight changed after the fold is seen by the next forward
  {
    torch::NoGradGuard ng;
    for (auto& item : net->named_parameters())
      if (item.key() == "Conv2d_1a_3x3.conv.weight") item.value().mul_(0.5);
  }
  net->speed = metrics::InceptionSpeed{};
  at::Tensor changed = net->forward_uint8(images.to(at::kCUDA)).pool;
  net->to(at::kCPU, at::kDouble);
  net->speed = {false, false, false, false};
  EXPECT_LT(test::rel(changed, net->forward_uint8(images).pool), 1e-4);
}

// cuDNN's fused conv + bias + ReLU (at::cudnn_convolution_relu) takes an input z that ATen fills with
// the uninitialised output tensor, weighted 0: 0·NaN is NaN, so if cuDNN read it, a NaN left in the
// allocator's cache by an earlier tensor would reach the features (as NaN, or as 0 after the ReLU).
// The cache is filled with NaN blocks of many sizes before every forward; the features must still
// equal the unfused BatchNorm layers in float64.
TEST(InceptionCuda, FusedReluReadsNoUninitialisedMemory) {
  if (!torch::cuda::is_available()) GTEST_FAIL() << "no CUDA device: run this binary on the GPU machine";
  torch::manual_seed(1);
  auto net = calibrated_net();
  at::Tensor images = at::randint(0, 256, {4, 80, 80, 3}, at::TensorOptions().dtype(at::kByte));  // (N, H, W, 3)
  net->speed = {false, false, false, false};
  metrics::InceptionFeatures ref = net->forward_uint8(images);  // float64 CPU, the BatchNorm layers
  net->to(at::kCUDA, at::kFloat);
  Tf32Off tf32_off;
  const auto poison_cache = [] {  // NaN-filled blocks of 4 KB … 64 MB, freed into the allocator's cache
    std::vector<at::Tensor> blocks;
    for (int64_t bytes = 4096; bytes <= (int64_t(64) << 20); bytes *= 4)
      for (int i = 0; i < 6; ++i) blocks.push_back(at::full({bytes / 4}, NAN, at::TensorOptions().device(at::kCUDA)));  // (bytes / 4)
    torch::cuda::synchronize();
  };
  // the comparison means something: the features are not all zero after their ReLUs
  ASSERT_GT(ref.pool.abs().max().item<double>(), 0.0);
  ASSERT_GT(ref.spatial.abs().max().item<double>(), 0.0);
  net->speed = metrics::InceptionSpeed{};
  ASSERT_TRUE(net->speed.fused_relu);  // the default takes cuDNN's fused kernel
  for (int rep = 0; rep < 3; ++rep) {
    poison_cache();
    metrics::InceptionFeatures f = net->forward_uint8(images.to(at::kCUDA));
    ASSERT_TRUE(at::isfinite(f.pool).all().item<bool>()) << "rep " << rep;
    ASSERT_TRUE(at::isfinite(f.spatial).all().item<bool>()) << "rep " << rep;
    const double e_pool = test::rel(f.pool, ref.pool), e_sp = test::rel(f.spatial, ref.spatial);
    std::printf("fused conv+ReLU after a NaN-filled cache, rep %d: rel error pool %.2e spatial %.2e\n", rep, e_pool, e_sp);
    EXPECT_LT(e_pool, 1e-4);
    EXPECT_LT(e_sp, 1e-4);
  }
}
