// The ping-pong DGELU GEMM (ops/cutlass/gemm_dgelu.h), and the schedule dispatch of the two.
#include "ops/cutlass/gemm_dgelu_impl.cuh"

namespace nala::ops::cutlass_gemm {
namespace dgelu_detail {
size_t pingpong_workspace(int64_t R, int64_t M, int64_t N) { return Pingpong::workspace(R, M, N); }
bool pingpong_run(const void* g, const void* w, const void* aux, void* dy, int64_t R, int64_t M, int64_t N, void* ws, void* stream, std::string& why) {
  return Pingpong::run(g, w, aux, dy, R, M, N, ws, stream, why);
}
}  // namespace dgelu_detail

size_t gemm_dgelu_bf16_workspace(DgeluSchedule s, int64_t R, int64_t M, int64_t N) {
  return s == DgeluSchedule::pingpong ? dgelu_detail::pingpong_workspace(R, M, N) : dgelu_detail::cooperative_workspace(R, M, N);
}

bool gemm_dgelu_bf16(DgeluSchedule s, const void* g, const void* w, const void* aux, void* dy, int64_t R, int64_t M, int64_t N, void* workspace,
                     void* stream, std::string& why) {
  return s == DgeluSchedule::pingpong ? dgelu_detail::pingpong_run(g, w, aux, dy, R, M, N, workspace, stream, why)
                                      : dgelu_detail::cooperative_run(g, w, aux, dy, R, M, N, workspace, stream, why);
}

}  // namespace nala::ops::cutlass_gemm
