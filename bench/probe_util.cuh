// What the standalone GPU probes (bench/*_probe.cu, built on the CPU machine by scripts/dev/build_*.sh,
// not part of nala) share: exit-on-error checks of CUDA and cuBLASLt calls, and the median time of
// back-to-back calls by CUDA events.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define PROBE_CHECK_CUDA(x)                                                                    \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
#define PROBE_CHECK_LT(x)                                                                     \
  do {                                                                                        \
    cublasStatus_t s_ = (x);                                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, int(s_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace probe_util {

// µs a call of f on the default stream: the median over `reps` timings of `calls` calls back to back
// (the host's launch cost hidden behind the GPU's work), after `warmups` calls
inline float median_us(const std::function<void()>& f, int reps, int calls, int warmups) {
  for (int i = 0; i < warmups; ++i) f();
  cudaEvent_t a, b;
  PROBE_CHECK_CUDA(cudaEventCreate(&a));
  PROBE_CHECK_CUDA(cudaEventCreate(&b));
  std::vector<float> ts;
  for (int r = 0; r < reps; ++r) {
    PROBE_CHECK_CUDA(cudaEventRecord(a));
    for (int i = 0; i < calls; ++i) f();
    PROBE_CHECK_CUDA(cudaEventRecord(b));
    PROBE_CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    PROBE_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms * 1000.f / float(calls));
  }
  PROBE_CHECK_CUDA(cudaEventDestroy(a));
  PROBE_CHECK_CUDA(cudaEventDestroy(b));
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace probe_util
