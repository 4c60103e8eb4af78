#include "cli/common.h"

#include <algorithm>
#include <iostream>
#include <stdexcept>

#include <ATen/ATen.h>

#include <torch/cuda.h>
#ifdef NALA_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace nala::cli {
namespace {

// s as a whole number (digits only, at most 9: no sign, no spaces), or −1
int64_t whole_number(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(s);
}

}  // namespace

c10::Device pick_device(const std::string& flag) {
  if (flag == "auto") {
    if (torch::cuda::is_available()) return c10::Device("cuda");
    std::cerr << "note: no CUDA device available, running on the CPU\n";
    return c10::Device("cpu");
  }
  c10::Device d("cpu");
  try {
    d = c10::Device(flag);
  } catch (const std::exception&) {
    throw std::runtime_error("--device '" + flag + "' is not one of auto, cpu, cuda, cuda:N");
  }
  if (d.is_cuda() && !torch::cuda::is_available()) throw std::runtime_error("--device " + flag + ": no CUDA device is available");
  return d;
}

void set_current_cuda_device(const c10::Device& device) {
#ifdef NALA_WITH_CUDA
  if (device.is_cuda()) c10::cuda::set_device(device.index() < 0 ? 0 : device.index());
#endif
}

c10::ScalarType parse_dtype(const std::string& flag) {
  if (flag == "fp32") return c10::kFloat;
  if (flag == "bf16") return c10::kBFloat16;
  if (flag == "fp16") return c10::kHalf;
  throw std::runtime_error("unknown --dtype '" + flag + "' (known: fp32, bf16, fp16)");
}

int64_t parse_cfg_channels(const std::string& flag, int64_t in_channels) {
  if (flag == "auto") return in_channels == 4 ? 3 : -1;
  if (flag == "all") return -1;
  const int64_t n = whole_number(flag);
  if (n < 1 || n > in_channels)
    throw std::runtime_error("--cfg-channels must be auto, all or a count from 1 to " + std::to_string(in_channels) + ", got '" + flag + "'");
  return n;
}

void check_labels(const at::Tensor& y, int64_t num_classes, bool null_class, const std::string& what) {
  if (y.dim() != 1) throw std::runtime_error(what + ": labels must be one-dimensional (N), got " + std::to_string(y.dim()) + " dimensions");
  if (y.numel() == 0) return;
  const int64_t top = null_class ? num_classes : num_classes - 1;
  const at::Tensor yc = y.to(at::kCPU, at::kLong);  // (N)
  const at::Tensor bad = (yc < 0).logical_or(yc > top).nonzero();
  if (bad.numel() == 0) return;
  const int64_t i = bad[0][0].item<int64_t>();
  throw std::runtime_error(what + ": label " + std::to_string(yc[i].item<int64_t>()) + " (entry " + std::to_string(i) + ") outside 0.." +
                           std::to_string(top) + (null_class ? " (" + std::to_string(num_classes) + ": the null class, unguided)" : ""));
}

std::vector<int64_t> parse_classes(const std::string& s) {
  std::vector<int64_t> v;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    const std::string t = s.substr(start, end - start);
    if (!t.empty()) {
      const int64_t c = whole_number(t);
      if (c < 0) throw std::runtime_error("--classes: '" + t + "' is not a class label (a whole number from 0)");
      v.push_back(c);
    }
    start = end + 1;
  }
  return v;
}

}  // namespace nala::cli
