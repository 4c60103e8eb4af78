// Peak device memory from the CUDA caching allocator, for training metrics and the benchmarks.
#pragma once
#include <c10/core/Device.h>

namespace nala::train {

// Empties the allocator's cache and restarts the peak count on `device` (no-op on the CPU).
void reset_peak_memory(const c10::Device& device);
// Peak MiB allocated on `device` since the last reset (0 on the CPU).
double peak_memory_mib(const c10::Device& device);

}  // namespace nala::train
