// The FID Inception network (pytorch-fid's InceptionV3: torchvision's Inception3 with the FID
// blocks, 1008 logits; docs/reference.md §6.7), fed the way the ADM evaluator's TF graph is fed:
// uint8 NHWC -> float -> TF1 bilinear resize to 299 (align_corners false, no half-pixel offset)
// -> (x − 128)/128. Module names are the torchvision keys of pt_inception-2015-12-05
// (converted to safetensors by scripts/convert_inception.py).
// Features per image: pool3 (2048, the average of Mixed_7c), spatial (Mixed_6d.branch1x1 after its
// ReLU, first 7 channels, flattened in (h, w, c) order: 2023), logits = pool3 · fc.weightᵀ (no bias).
#pragma once
#include <memory>
#include <string>

#include <torch/nn/module.h>

namespace nala::metrics {

// TF1 ResizeBilinear (align_corners = false, half_pixel_centers = false): src = dst · (in/out) in
// float32, lo = floor(src), hi = min(lo + 1, in − 1). x: (N, C, H, W) float -> (N, C, out_h, out_w).
at::Tensor tf1_resize_bilinear(const at::Tensor& x, int64_t out_h, int64_t out_w);

struct InceptionFeatures {
  at::Tensor pool;     // (N, 2048) float32
  at::Tensor spatial;  // (N, 2023) float32
  at::Tensor logits;   // (N, 1008) float32, without the fc bias
};

// How the eval-mode forward runs; every setting gives the same features to float rounding
// (tests/python/test_metrics.py against pytorch-fid on the CPU; tests/cuda/inception_test.cpp every
// setting on the GPU). The defaults are the fastest measured on the H200 (`nala bench eval`, batch
// 250, 2026-12-05, docs/benchmarks.md): 33.8 ms a batch with all four, 51.7 ms with the BatchNorm
// fold alone, against torchvision's InceptionV3 with channels_last and cudnn.benchmark at 43.8 ms;
// peak memory 13.7 GB against 5.4 GB (cuDNN's workspaces for the algorithms it picks).
struct InceptionSpeed {
  bool fold_bn = true;          // BatchNorm folded into the conv weights and a bias
  bool channels_last = true;    // CUDA: NHWC activations and weights (cuDNN's tensor-core layout)
  bool fused_relu = true;       // CUDA: cuDNN's fused conv + bias + ReLU (needs fold_bn). ATen passes the
                                // uninitialised output as its unused z input with weight 0; that no NaN
                                // there leaks into the output is tested with a NaN-filled allocator cache
                                // (tests/cuda/inception_test.cpp FusedReluReadsNoUninitialisedMemory)
  bool cudnn_benchmark = true;  // CUDA: cuDNN's algorithm search per shape during the forward
};

// One thread at a time: the forward caches folded weights and Mixed_6d's branch output, and sets
// cuDNN's process-wide benchmark flag for its duration when `speed` asks for another value.
class FidInception : public torch::nn::Module {
 public:
  FidInception();
  InceptionSpeed speed;
  // images: (N, H, W, 3) uint8 (any size; resized to 299 inside)
  InceptionFeatures forward_uint8(const at::Tensor& images);
  // x: (N, 3, 299, 299) already normalised to [−1, 1)
  InceptionFeatures forward_normalised(const at::Tensor& x);
  struct Impl;
  std::shared_ptr<Impl> impl;
};

// Loads the 566-tensor state dict (the num_batches_tracked buffers and fc.bias may be absent).
std::shared_ptr<FidInception> load_inception(const std::string& path);

}  // namespace nala::metrics
