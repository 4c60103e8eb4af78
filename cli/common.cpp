#include "cli/common.h"

#include <iostream>
#include <stdexcept>

#include <torch/cuda.h>
#ifdef NALA_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace nala::cli {

c10::Device pick_device(const std::string& flag) {
  if (flag == "auto") {
    if (torch::cuda::is_available()) return c10::Device("cuda");
    std::cerr << "note: no CUDA device available, running on the CPU\n";
    return c10::Device("cpu");
  }
  c10::Device d(flag);
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
  if (flag.empty() || flag.find_first_not_of("0123456789") != std::string::npos || std::stoll(flag) < 1 || std::stoll(flag) > in_channels)
    throw std::runtime_error("--cfg-channels must be auto, all or a count from 1 to " + std::to_string(in_channels) + ", got '" + flag + "'");
  return std::stoll(flag);
}

}  // namespace nala::cli
