#include "bench/timing.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <vector>

#ifdef NALA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <cuda_runtime_api.h>
#endif

namespace nala::bench {

void synchronize(const c10::Device& device) {
#ifdef NALA_WITH_CUDA
  if (device.is_cuda()) cudaDeviceSynchronize();
#endif
}

Timing time_it(const std::function<void()>& fn, const c10::Device& device, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  synchronize(device);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
#ifdef NALA_WITH_CUDA
    if (device.is_cuda()) {
      at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
      auto stream = at::cuda::getCurrentCUDAStream();
      start.record(stream);
      fn();
      stop.record(stream);
      stop.synchronize();
      ms.push_back(start.elapsed_time(stop));
      continue;
    }
#endif
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

std::string device_name(const c10::Device& device) {
#ifdef NALA_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getCurrentDeviceProperties()->name;
#endif
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "cpu";
}

}  // namespace nala::bench
