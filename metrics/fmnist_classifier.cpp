#include "metrics/fmnist_classifier.h"

#include <chrono>
#include <cstdio>
#include <random>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "models/checkpoint.h"
#include "data/datasets.h"
#include "report/progress.h"
#include "io/safetensors.h"

namespace nala::metrics {

FmnistClassifier::FmnistClassifier() {
  using torch::nn::Conv2dOptions;
  conv1 = register_module("conv1", torch::nn::Conv2d(Conv2dOptions(1, 16, 3).padding(1)));
  conv2 = register_module("conv2", torch::nn::Conv2d(Conv2dOptions(16, 32, 3).padding(1)));
  conv3 = register_module("conv3", torch::nn::Conv2d(Conv2dOptions(32, 64, 3).padding(1)));
  conv4 = register_module("conv4", torch::nn::Conv2d(Conv2dOptions(64, 64, 3).padding(1)));
  fc1 = register_module("fc1", torch::nn::Linear(64 * 4 * 4, 256));
  fc2 = register_module("fc2", torch::nn::Linear(256, 10));
}

at::Tensor FmnistClassifier::features(const at::Tensor& x) {
  at::Tensor h = at::relu(conv1->forward(x));                        // (N, 16, 32, 32)
  h = at::max_pool2d(at::relu(conv2->forward(h)), {2, 2});           // (N, 32, 16, 16)
  h = at::max_pool2d(at::relu(conv3->forward(h)), {2, 2});           // (N, 64, 8, 8)
  h = at::max_pool2d(at::relu(conv4->forward(h)), {2, 2});           // (N, 64, 4, 4)
  return at::relu(fc1->forward(h.flatten(1)));                       // (N, 256)
}

at::Tensor FmnistClassifier::logits(const at::Tensor& x) { return fc2->forward(features(x)); }

ClassifierTraining train_fmnist_classifier(const std::string& dir, const std::string& out_path, int64_t epochs, uint64_t seed,
                                           const c10::Device& device) {
  const auto t0 = std::chrono::steady_clock::now();
  data::FashionMNIST train(dir, "train", 32), test(dir, "test", 32);
  auto to_x = [&](const at::Tensor& u8) { return u8.unsqueeze(1).to(at::kFloat).div(127.5).sub(1.0); };  // (N, 1, 32, 32)
  at::Tensor xtr = to_x(train.images()), ytr = train.labels(), xte = to_x(test.images()), yte = test.labels();
  torch::manual_seed(int64_t(seed));
  auto net = std::make_shared<FmnistClassifier>();
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  const int64_t bs = 128, n = xtr.size(0), steps = epochs * (n / bs);
  report::ProgressBar bar("classifier", steps, "step");
  int64_t step = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    if (e == epochs - 1 && epochs > 1)  // the last epoch at a tenth of the step size
      for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(1e-4);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1000 + uint64_t(e));
    at::Tensor perm = at::randperm(n, gen);
    net->train();
    for (int64_t i = 0; i + bs <= n; i += bs) {
      at::Tensor idx = perm.narrow(0, i, bs);
      at::Tensor loss = at::cross_entropy_loss(net->logits(xtr.index_select(0, idx).to(device)), ytr.index_select(0, idx).to(device));
      opt.zero_grad();
      loss.backward();
      opt.step();
      char s[32];
      std::snprintf(s, sizeof s, "loss %.3f", loss.item<double>());
      bar.update(++step, s);
    }
  }
  bar.finish();
  net->eval();
  torch::NoGradGuard ng;
  int64_t correct = 0;
  for (int64_t i = 0; i < xte.size(0); i += 1000)
    correct += (net->logits(xte.narrow(0, i, 1000).to(device)).argmax(1).cpu() == yte.narrow(0, i, 1000)).sum().item<int64_t>();
  ClassifierTraining r;
  r.test_accuracy = double(correct) / double(xte.size(0));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  net->to(at::kCPU);
  io::save_safetensors(out_path, io::state_dict(*net),
                       {{"test_accuracy", std::to_string(r.test_accuracy)},
                        {"recipe", "conv16-32-64-64 fc256 fc10, Adam 1e-3, batch 128, epochs " + std::to_string(epochs) + ", seed " + std::to_string(seed)}});
  return r;
}

std::shared_ptr<FmnistClassifier> load_fmnist_classifier(const std::string& path) {
  auto net = std::make_shared<FmnistClassifier>();
  io::load_state_dict(*net, io::load_safetensors(path), path);
  net->eval();
  return net;
}

}  // namespace nala::metrics
