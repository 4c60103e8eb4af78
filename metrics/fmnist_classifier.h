// A small Fashion-MNIST classifier that nala trains itself, for the built-in demo, where the
// Inception weights are not available: its penultimate features (256) give a Fréchet distance,
// precision and recall, and its softmax a class-IS. These are named FD-FMNIST, P/R-FMNIST and
// IS-FMNIST, never FID. Input (N, 1, 32, 32) in [−1, 1] (Fashion-MNIST zero-padded to 32).
// Recipe (scripts/train_fmnist_classifier.sh): 4 conv layers (16-32-64-64, ReLU, max-pool), fc 256,
// fc 10; Adam lr 1e-3 (the last epoch 1e-4), batch 128, 4 epochs, seed 0.
#pragma once
#include <memory>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace nala::metrics {

class FmnistClassifier : public torch::nn::Module {
 public:
  FmnistClassifier();
  at::Tensor features(const at::Tensor& x);  // (N, 256)
  at::Tensor logits(const at::Tensor& x);    // (N, 10)
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr}, conv4{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

struct ClassifierTraining {
  double test_accuracy = 0;
  double seconds = 0;
};
// Trains on the training split, reports accuracy on the 10,000 test images, saves safetensors
// (metadata: test_accuracy, recipe).
ClassifierTraining train_fmnist_classifier(const std::string& data_dir, const std::string& out_path, int64_t epochs, uint64_t seed,
                                           const c10::Device& device);
std::shared_ptr<FmnistClassifier> load_fmnist_classifier(const std::string& path);

}  // namespace nala::metrics
