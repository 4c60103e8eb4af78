// Timing for the benchmarks (never for tests): CUDA events on a GPU, a steady clock on the CPU;
// warm-up first, then the median of the repeats. With NALA_PROFILE_TIMED=1 on a GPU the repeats run
// between cudaProfilerStart and cudaProfilerStop, for `ncu --profile-from-start off`
// (scripts/device_steps/kernels-compiled.sh). With NALA_PROFILE_TRACE=FILE they run under LibTorch's
// profiler and FILE gets its Chrome trace (scripts/kernel_table.py reads it; bench/timing.cpp).
#pragma once
#include <functional>
#include <string>

#include <c10/core/Device.h>

#include "train/device_memory.h"

namespace nala::bench {

struct Timing {
  double median_ms = 0, min_ms = 0;
};

Timing time_it(const std::function<void()>& fn, const c10::Device& device, int warmup = 3, int reps = 20);

using train::peak_memory_mib;  // peak memory since reset_peak_memory (diffusion/device_memory.h)
using train::reset_peak_memory;

std::string device_name(const c10::Device& device);
void synchronize(const c10::Device& device);

}  // namespace nala::bench
