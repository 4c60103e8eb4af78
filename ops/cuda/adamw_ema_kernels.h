// Plain parameters of the one-pass optimizer kernel (ops/cuda/adamw_ema_kernels.cu): AdamW, the EMA
// and the weight casts of a training step. The LibTorch entry is ops/adamw_ema.h.
#pragma once
#include <cstdint>

namespace nala::ops::cuda {

enum class StepDtype : uint8_t { kFloat = 0, kBFloat16 = 1, kHalf = 2 };  // a gradient's, the casts'

// One parameter's tensors, each contiguous with n elements.
struct AdamWEmaTensor {
  float* param = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  float* ema = nullptr;
  const float* step = nullptr;  // () the update's count, already advanced (ATen's fused kernel reads it so)
  const void* grad = nullptr;   // grad_dtype
  void* cast = nullptr;         // the launch's cast_dtype, or null: no cast
  int64_t n = 0;
};

constexpr int kAdamWEmaTensors = 48;  // tensors a launch (its parameters stay under 4 KB)
constexpr int64_t kAdamWEmaChunk = 4096;  // elements a block

struct AdamWEmaLaunch {
  AdamWEmaTensor t[kAdamWEmaTensors];
  int64_t chunk_end[kAdamWEmaTensors] = {};  // blocks of tensors 0..i, cumulative
  StepDtype grad_dtype[kAdamWEmaTensors] = {};
  int count = 0;
};

struct AdamWEmaScalars {
  const float* lr_ptr = nullptr;  // () the rate, or null: lr
  float lr = 0, beta1 = 0, beta2 = 0, weight_decay = 0, eps = 0;
  const float* grad_scale = nullptr;  // () every gradient's factor (clipping), or null
  const float* found_inf = nullptr;   // (1,) where 1: parameters and moments unchanged (the EMA and casts still run)
  const float* ema_weight_ptr = nullptr;  // () 1 − decay, or null: ema_weight
  float ema_weight = 0;
  StepDtype cast_dtype = StepDtype::kBFloat16;
};

void launch_adamw_ema(const AdamWEmaLaunch& l, const AdamWEmaScalars& s, void* stream);

}  // namespace nala::ops::cuda
