// Timing for the benchmarks (never for tests): CUDA events on a GPU, a steady clock on the CPU;
// warm-up first, then the median of the repeats. Peak memory from the CUDA caching allocator.
#pragma once
#include <functional>
#include <string>

#include <c10/core/Device.h>

namespace nala::bench {

struct Timing {
  double median_ms = 0, min_ms = 0;
};

Timing time_it(const std::function<void()>& fn, const c10::Device& device, int warmup = 3, int reps = 20);

// Peak bytes allocated on `device` since the last reset (0 on the CPU).
void reset_peak_memory(const c10::Device& device);
double peak_memory_mib(const c10::Device& device);

std::string device_name(const c10::Device& device);
void synchronize(const c10::Device& device);

}  // namespace nala::bench
