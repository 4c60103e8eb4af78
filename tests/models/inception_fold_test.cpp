// The FID Inception's BatchNorm folded into the convolutions (metrics/inception.h InceptionSpeed::
// fold_bn, the CPU default) against the BatchNorm layers themselves, and the fold's cache: a
// train-mode forward changes the running statistics without bumping their version counters, and
// the next eval forward must not use weights folded from the old statistics.
#include <gtest/gtest.h>

#include <cstdio>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "metrics/inception.h"
#include "rel_error.h"

using namespace nala;

namespace {

using nala::test::rel;

}  // namespace

TEST(InceptionFold, EqualsTheBatchNormLayersAndFollowsTheStatistics) {
  torch::manual_seed(0);
  metrics::FidInception net;
  at::Tensor images = at::randint(0, 256, {2, 32, 32, 3}, at::TensorOptions().dtype(at::kByte));  // (N, H, W, 3)
  auto pool = [&](bool fold) {
    net.speed.fold_bn = fold;
    return net.forward_uint8(images).pool;  // (N, 2048)
  };
  const at::Tensor folded1 = pool(true), layers1 = pool(false);
  const double e1 = rel(folded1, layers1);
  // recalibrating the statistics in train mode, as a user fine-tuning the network would
  net.train();
  net.forward_uint8(at::randint(0, 256, {4, 32, 32, 3}, at::TensorOptions().dtype(at::kByte)));
  net.eval();
  const at::Tensor folded2 = pool(true), layers2 = pool(false);
  const double e2 = rel(folded2, layers2), moved = rel(layers2, layers1);
  std::printf("folded vs BatchNorm layers: %.2e, after a train-mode pass %.2e (the statistics moved the features by %.2e)\n", e1, e2, moved);
  EXPECT_LT(e1, 1e-5);
  EXPECT_GT(moved, 1e-3);
  EXPECT_LT(e2, 1e-5);
}
