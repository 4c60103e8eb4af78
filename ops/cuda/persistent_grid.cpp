#include "ops/cuda/persistent_grid.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

namespace nala::ops::cuda {
namespace {
std::mutex g_mutex;
std::map<std::tuple<const void*, int>, size_t> g_smem_limit;           // (kernel, device) → the dynamic shared memory allowed
std::map<std::tuple<const void*, int, size_t, int>, int> g_blocks;       // (kernel, threads, smem, device) → blocks

void check(cudaError_t e, const char* what, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + call + " failed: " + cudaGetErrorString(e));
}
}  // namespace

int persistent_blocks(const void* kernel, int threads, size_t smem, const char* what) {
  int device = 0;
  check(cudaGetDevice(&device), what, "cudaGetDevice");
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto key = std::make_tuple(kernel, threads, smem, device);
  if (const auto it = g_blocks.find(key); it != g_blocks.end()) return it->second;
  size_t& limit = g_smem_limit[std::make_tuple(kernel, device)];
  if (smem > limit) {  // raise only: a launch with more, kept earlier, must still fit
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) {  // more than the device offers a block: nothing fits
      (void)cudaGetLastError();
      g_blocks[key] = 0;
      return 0;
    }
    limit = smem;
  }
  int sms = 0, per_sm = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), what, "cudaDeviceGetAttribute");
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem), what, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  const int blocks = sms * per_sm;
  g_blocks[key] = blocks;
  return blocks;
}

}  // namespace nala::ops::cuda
