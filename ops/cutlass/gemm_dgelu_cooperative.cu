// The cooperative DGELU GEMM (ops/cutlass/gemm_dgelu.h).
#include "ops/cutlass/gemm_dgelu_impl.cuh"

namespace nala::ops::cutlass_gemm::dgelu_detail {
size_t cooperative_workspace(int64_t R, int64_t M, int64_t N) { return Cooperative::workspace(R, M, N); }
bool cooperative_run(const void* g, const void* w, const void* aux, void* dy, int64_t R, int64_t M, int64_t N, void* ws, void* stream,
                     std::string& why) {
  return Cooperative::run(g, w, aux, dy, R, M, N, ws, stream, why);
}
}  // namespace nala::ops::cutlass_gemm::dgelu_detail
