// The CUTLASS DGELU GEMM of ops/cutlass/gemm_dgelu.h for one schedule: included by
// gemm_dgelu_pingpong.cu and gemm_dgelu_cooperative.cu (one kernel a file: the two compile in parallel).
#pragma once
#include "ops/cutlass/gemm_dgelu.h"

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "ops/cutlass/run_gemm.cuh"

namespace nala::ops::cutlass_gemm::dgelu_detail {

using namespace cute;
using Bf16 = cutlass::bfloat16_t;

// GEMM terms: m = R, n = N, k = M. A = g (m, k) row-major (k-major); B = w stored (k, n) row-major, i.e.
// n-major: CUTLASS's RowMajor B; D and aux (m, n) row-major.
template <class TileShape, class MainloopSchedule, class EpilogueSchedule>
struct DgeluGemm {
  using ClusterShape = Shape<_1, _1, _1>;
  // dy = dGELU(acc, aux): LinCombDeEltAct with alpha 1, beta 0 and no C (cutlass/epilogue/fusion/operations.hpp)
  using Fusion = cutlass::epilogue::fusion::LinCombDeEltAct<cutlass::layout::RowMajor, cutlass::epilogue::thread::dGELU, Bf16, float, Bf16>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float,
      float, void, cutlass::layout::RowMajor, 8, Bf16, cutlass::layout::RowMajor, 8, EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, cutlass::layout::RowMajor, 8, Bf16, cutlass::layout::RowMajor, 8, float,
      TileShape, ClusterShape, cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const void* g, const void* w, const void* aux, void* dy, int64_t R, int64_t M, int64_t N) {
    const int m = int(R), n = int(N), k = int(M);
    // packed strides (the modes' order: A (m, k, l), B (n, k, l), D and aux (m, n, l))
    const typename Kernel::StrideA sa{int64_t(k), _1{}, int64_t(m) * k};
    const typename Kernel::StrideB sb{_1{}, int64_t(n), int64_t(n) * k};
    const typename Kernel::StrideD sd{int64_t(n), _1{}, int64_t(m) * n};
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {m, n, k, 1},
                                  {static_cast<const Bf16*>(g), sa, static_cast<const Bf16*>(w), sb},
                                  {{}, nullptr, typename Kernel::StrideC{}, static_cast<Bf16*>(dy), sd}};
    auto& t = args.epilogue.thread;
    t.alpha = 1.0f;
    t.beta = 0.0f;
    t.aux_ptr = static_cast<const Bf16*>(aux);
    t.dAux = sd;  // aux is laid out as dy
    args.hw_info = current_device_info();
    return args;
  }

  static size_t workspace(int64_t R, int64_t M, int64_t N) { return Gemm::get_workspace_size(arguments(nullptr, nullptr, nullptr, nullptr, R, M, N)); }

  static bool run(const void* g, const void* w, const void* aux, void* dy, int64_t R, int64_t M, int64_t N, void* ws, void* stream,
                  std::string& why) {
    if (R < 1 || R > 2147483647 || M % 8 != 0 || N % 8 != 0 || M < 8 || N < 8) {
      why = "rows " + std::to_string(R) + ", M " + std::to_string(M) + ", N " + std::to_string(N) + " (M and N multiples of 8, rows < 2^31)";
      return false;
    }
    return run_gemm<Gemm>(arguments(g, w, aux, dy, R, M, N), ws, stream, why);
  }
};

using Pingpong = DgeluGemm<Shape<_128, _128, _64>, cutlass::gemm::KernelTmaWarpSpecializedPingpong, cutlass::epilogue::TmaWarpSpecialized>;
using Cooperative =
    DgeluGemm<Shape<_128, _256, _64>, cutlass::gemm::KernelTmaWarpSpecializedCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative>;

// defined in gemm_dgelu_pingpong.cu and gemm_dgelu_cooperative.cu
size_t pingpong_workspace(int64_t R, int64_t M, int64_t N);
bool pingpong_run(const void* g, const void* w, const void* aux, void* dy, int64_t R, int64_t M, int64_t N, void* ws, void* stream, std::string& why);
size_t cooperative_workspace(int64_t R, int64_t M, int64_t N);
bool cooperative_run(const void* g, const void* w, const void* aux, void* dy, int64_t R, int64_t M, int64_t N, void* ws, void* stream,
                     std::string& why);

}  // namespace nala::ops::cutlass_gemm::dgelu_detail
