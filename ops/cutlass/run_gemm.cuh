// Running a CUTLASS 4 GemmUniversalAdapter (ops/cutlass/*.cu): the device's SM count for the
// arguments, then can_implement, initialize and run on a stream, false with the reason in why where
// any step refuses (nothing launched then).
#pragma once
#include <string>

#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"

namespace nala::ops::cutlass_gemm {

// the current device, for args.hw_info
inline cutlass::KernelHardwareInfo current_device_info() {
  int device = 0;
  cudaGetDevice(&device);
  cutlass::KernelHardwareInfo info;
  info.device_id = device;
  info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  return info;
}

template <class Gemm>
bool run_gemm(const typename Gemm::Arguments& args, void* workspace, void* stream, std::string& why) {
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    why = "CUTLASS cannot implement it";
    return false;
  }
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (gemm.initialize(args, workspace, st) != cutlass::Status::kSuccess) {
    why = "CUTLASS initialize failed";
    return false;
  }
  if (gemm.run(st) != cutlass::Status::kSuccess) {
    why = std::string("CUTLASS run failed: ") + cudaGetErrorString(cudaGetLastError());
    return false;
  }
  return true;
}

}  // namespace nala::ops::cutlass_gemm
