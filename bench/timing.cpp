#include "bench/timing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <stdexcept>
#include <vector>

#include <torch/csrc/autograd/profiler_kineto.h>

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
// NALA_PROFILE_TRACE=FILE: the timed repeats under LibTorch's profiler (Kineto: CPU operators, and
// on a GPU every kernel and copy as CUPTI records them, those a CUDA graph's replay launches
// included), written to FILE as a Chrome trace (JSON), the format torch.profiler's
// export_chrome_trace writes for the PyTorch peer. Unlike Nsight Compute, which times each kernel
// alone, it sees the kernels as they run back to back: scripts/kernel_table.py FILE sums them and
// reports the idle time between them. The folder must exist; the file is written whole (a temporary
// file renamed).
class TracedRange {
 public:
  explicit TracedRange(const c10::Device& device) {
    const char* v = std::getenv("NALA_PROFILE_TRACE");
    if (!v || !*v) return;
    path_ = v;
    const std::filesystem::path parent = std::filesystem::absolute(path_).parent_path();
    if (!std::filesystem::is_directory(parent))
      throw std::invalid_argument("NALA_PROFILE_TRACE='" + path_ + "': the folder " + parent.string() + " does not exist");
    namespace pi = torch::profiler::impl;
    std::set<pi::ActivityType> activities{pi::ActivityType::CPU};
    if (device.is_cuda()) activities.insert(pi::ActivityType::CUDA);
    const pi::ProfilerConfig config(pi::ProfilerState::KINETO);
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    on_ = true;
  }
  // stops the profiler and writes the trace; the device work is finished by then (the caller synchronized)
  void finish() {
    if (!on_) return;
    on_ = false;
    const std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = torch::autograd::profiler::disableProfiler();
    const std::string tmp = path_ + ".tmp";
    result->save(tmp);
    std::error_code ec;
    std::filesystem::rename(tmp, path_, ec);
    if (ec) throw std::runtime_error("NALA_PROFILE_TRACE: could not write " + path_ + ": " + ec.message());
    std::fprintf(stderr, "nala: profiler trace of the timed repeats (%zu events) written to %s\n", result->events().size(), path_.c_str());
  }
  ~TracedRange() {
    if (on_) torch::autograd::profiler::disableProfiler();  // an exception in the repeats: stop, write nothing
  }

 private:
  std::string path_;
  bool on_ = false;
};
}  // namespace

Timing time_it(const std::function<void()>& fn, const c10::Device& device, int warmup, int reps) {
  // the benchmarks' --measure / --steps / --reps and --warmup arrive here (a median of no timings was a crash)
  if (reps < 1) throw std::invalid_argument("the timed repetitions (--measure / --steps / --reps) must be at least 1, got " + std::to_string(reps));
  if (warmup < 0) throw std::invalid_argument("the warm-up repetitions (--warmup) must be at least 0, got " + std::to_string(warmup));
  for (int i = 0; i < warmup; ++i) fn();
  synchronize(device);
  const ProfiledRange profiled(device);
  TracedRange traced(device);
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
  synchronize(device);
  traced.finish();
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
