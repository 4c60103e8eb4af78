#include "bench/timing.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#ifdef NALA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#endif

namespace nala::bench {

void synchronize(const c10::Device& device) {
#ifdef NALA_WITH_CUDA
  if (device.is_cuda()) cudaDeviceSynchronize();
#endif
}

namespace {
// NALA_PROFILE_TIMED=1: the profiler collects the timed repeats only (cudaProfilerStart/Stop around
// them), so that `ncu --profile-from-start off` sees the steady state (a CUDA graph's replay, not the
// warm-up's first steps). Off by default; any other value than unset, "" or "0" turns it on.
bool profile_timed() {
  const char* v = std::getenv("NALA_PROFILE_TIMED");
  return v && *v && std::strcmp(v, "0") != 0;
}
struct ProfiledRange {
  bool on;
  explicit ProfiledRange(const c10::Device& device) : on(device.is_cuda() && profile_timed()) {
#ifdef NALA_WITH_CUDA
    if (on) cudaProfilerStart();
#endif
  }
  ~ProfiledRange() {
#ifdef NALA_WITH_CUDA
    if (on) {
      cudaDeviceSynchronize();
      cudaProfilerStop();
    }
#endif
  }
};
}  // namespace

Timing time_it(const std::function<void()>& fn, const c10::Device& device, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  synchronize(device);
  const ProfiledRange profiled(device);
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
