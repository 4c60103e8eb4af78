// CUTLASS 4 Hopper GEMM with a bias epilogue (ops/cutlass/gemm_bias.h): TMA warp-specialized,
// cooperative (two consumer warp groups on one 128×192×64 tile), no cluster, the epilogue an
// epilogue visitor tree acc + b rounded to bf16. The tile is the one the twenty-first session's probe
// found fastest for fc2's shape (bench/gated_gemm_probe.cu). Compiled for sm_90a alone (wgmma, TMA).
#include "ops/cutlass/gemm_bias.h"

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "ops/cutlass/run_gemm.cuh"

namespace nala::ops::cutlass_gemm {
namespace detail {  // named: an anonymous namespace beside cute's makes nvcc's host stubs ambiguous

using namespace cute;
using Bf16 = cutlass::bfloat16_t;
namespace fusion = cutlass::epilogue::fusion;

using TileShape = Shape<_128, _192, _64>;
using ClusterShape = Shape<_1, _1, _1>;
// b broadcast along the rows (stride 0 across M and L), read as bf16, added in float
using Bias = fusion::Sm90RowBroadcast<0, TileShape, Bf16, float, Stride<_0, _1, _0>>;
using AccPlusBias = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, Bf16, float, cutlass::FloatRoundStyle::round_to_nearest>,
                                    fusion::Sm90AccFetch, Bias>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, cutlass::layout::RowMajor, 8, Bf16, cutlass::layout::RowMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative,
    AccPlusBias>::CollectiveOp;
// A = x (M = R, K) row-major; B = w stored (N, K) row-major, i.e. K-major: CUTLASS's ColumnMajor B
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, cutlass::layout::RowMajor, 8, Bf16, cutlass::layout::ColumnMajor, 8, float,
    TileShape, ClusterShape, cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

typename Gemm::Arguments arguments(const void* x, const void* w, const void* b, void* y, int64_t R, int64_t N, int64_t K) {
  const int m = int(R), n = int(N), k = int(K);
  // packed strides (row, column, batch): x (m, k) and w (n, k) K-major, y (m, n) N-major
  const typename Kernel::StrideA sa{int64_t(k), _1{}, int64_t(m) * k};
  const typename Kernel::StrideB sb{int64_t(k), _1{}, int64_t(n) * k};
  const typename Kernel::StrideD sd{int64_t(n), _1{}, int64_t(m) * n};
  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                {m, n, k, 1},
                                {static_cast<const Bf16*>(x), sa, static_cast<const Bf16*>(w), sb},
                                {{}, nullptr, typename Kernel::StrideC{}, static_cast<Bf16*>(y), sd}};
  args.epilogue.thread = {{}, {static_cast<const Bf16*>(b), Bf16(0), {}}, {}};  // {acc, {bias}, plus}
  args.hw_info = current_device_info();
  return args;
}

}  // namespace detail

size_t gemm_bias_bf16_workspace(int64_t R, int64_t N, int64_t K) {
  return detail::Gemm::get_workspace_size(detail::arguments(nullptr, nullptr, nullptr, nullptr, R, N, K));
}

bool gemm_bias_bf16(const void* x, const void* w, const void* b, void* y, int64_t R, int64_t N, int64_t K, void* workspace, void* stream,
                    std::string& why) {
  if (R < 1 || R > 2147483647 || N % 8 != 0 || K % 8 != 0) {
    why = "rows " + std::to_string(R) + ", N " + std::to_string(N) + ", K " + std::to_string(K) + " (N and K multiples of 8, rows < 2^31)";
    return false;
  }
  return run_gemm<detail::Gemm>(detail::arguments(x, w, b, y, R, N, K), workspace, stream, why);
}

}  // namespace nala::ops::cutlass_gemm
