#include <iostream>

#include <torch/cuda.h>
#include <torch/version.h>
#ifdef NALA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "cli/commands.h"

namespace nala::cli {

void print_version() {
  std::cout << "nala " << NALA_VERSION << "\n";
  std::cout << "LibTorch " << TORCH_VERSION << "\n";
#ifdef NALA_WITH_CUDA
  std::cout << "built with CUDA kernels: yes\n";
  if (torch::cuda::is_available()) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::cout << "CUDA available: yes, " << int(torch::cuda::device_count()) << " device(s); device 0: " << prop.name
              << " (sm_" << prop.major << prop.minor << ")\n";
  } else {
    std::cout << "CUDA available: no (running on the CPU)\n";
  }
#else
  std::cout << "built with CUDA kernels: no (CPU-only build)\n";
  std::cout << "CUDA available: no (running on the CPU)\n";
#endif
}

}  // namespace nala::cli
