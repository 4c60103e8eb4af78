// Small helpers shared by the sub-commands: device and dtype flags, help handling.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace nala::cli {

// "auto" (CUDA when available, else CPU, said once on stderr), "cpu", "cuda", "cuda:N".
c10::Device pick_device(const std::string& flag);
// Makes `device` the current CUDA device of this process (no-op for a CPU build).
void set_current_cuda_device(const c10::Device& device);
// "fp32", "bf16", "fp16"; throws with the known names.
c10::ScalarType parse_dtype(const std::string& flag);
// --cfg-channels: "auto" (3, the official guidance, for 4-channel latents; all channels otherwise),
// "all" (-1), or a count; throws naming the value.
int64_t parse_cfg_channels(const std::string& flag, int64_t in_channels);
// Class labels given to a model of num_classes classes: (N), each in 0..num_classes − 1, or
// num_classes (the null class, unguided) where null_class (the model was trained with label
// dropout); throws naming `what` and the first value outside. (A label past the embedding table was
// LibTorch's "index out of range in self".)
void check_labels(const at::Tensor& y, int64_t num_classes, bool null_class, const std::string& what);
// --classes: comma-separated whole numbers; throws naming the entry that is not one.
std::vector<int64_t> parse_classes(const std::string& s);

}  // namespace nala::cli
