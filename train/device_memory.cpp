#include "train/device_memory.h"

#ifdef NALA_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace nala::train {

void reset_peak_memory(const c10::Device& device) {
#ifdef NALA_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
  }
#endif
}

double peak_memory_mib(const c10::Device& device) {
#ifdef NALA_WITH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    return double(stats.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak) / (1 << 20);
  }
#endif
  return 0.0;
}

}  // namespace nala::train
