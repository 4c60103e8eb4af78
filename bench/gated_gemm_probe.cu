// Does a CUTLASS GEMM with the gated residual in its epilogue pay on the H200? (#34: "the gated
// residual x + gate·(y W + b) with a per-sample gate in proj's and fc2's epilogues"; cuBLASLt has no
// per-sample-gate epilogue, docs/benchmarks.md, seventeenth session.) A standalone probe, not part of
// nala: it times, on DiT-XL/2's sampling shapes (128 rows of 256 tokens, width 1,152; proj K = 1,152,
// fc2 K = 4,608; bf16):
//   cublasLt + bias   y = x_in Wᵀ + b (cuBLASLt's BIAS epilogue: what nala runs today)
//   pass 3            res = x + gate[sample] ⊙ y        (reads x, y; writes res)
//   cutlass + bias    y = x_in Wᵀ + b                   (CUTLASS 4 Hopper TMA warp-specialized, EVT)
//   cutlass gated     res = x + gate[sample] ⊙ (x_in Wᵀ + b) in the epilogue (reads x as C)
//   pass 2            out = res (a copy: the bytes of the LayerNorm pass that would remain)
// and checks the gated GEMM against cublasLt + pass 3 (which rounds y to bf16 first: they differ by
// bf16 rounding). Nala today runs cublasLt + bias and then one pass that reads x, y and writes the sum
// and the next LayerNorm-modulated input; with the gated GEMM that pass would read the sum alone. So
// the gated GEMM pays if t(cutlass gated) − t(cublasLt + bias) < t(pass 3) − t(pass 2), about one
// read of a (32,768, 1,152) bf16 tensor (75 MB, ≈ 16–20 µs).
// The batched form carries the per-sample gate: L = 128 samples, M = 256 tokens, B's batch stride 0
// (static), the gate a row broadcast whose batch stride is adaLN's row (6·1,152: the chunk in place).
// Build (CPU machine, CUTLASS headers from the nvidia-cutlass wheel) and run (GPU machine):
//   bash scripts/dev/build_gated_gemm_probe.sh        -> .carry/gated_gemm_probe
//   bash scripts/device_build.sh probe:gated_gemm_probe  (scripts/device_steps/probe.sh)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/probe_util.cuh"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace gated_probe {  // a named namespace: an anonymous one beside cute's makes nvcc's host stubs ambiguous

#define CHECK_CUDA PROBE_CHECK_CUDA
#define CHECK_LT PROBE_CHECK_LT

using namespace cute;
using Bf16 = cutlass::bfloat16_t;
namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// y W^T with W (N, K) row-major: B (N, K, L) K-major, one weight for every batch (static stride 0)
using StrideW = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;

template <class TileShape, class ClusterShape, bool Gated>
struct CutlassGemm {
  using Bias = fusion::Sm90RowBroadcast<0, TileShape, Bf16, float, Stride<_0, _1, _0>>;
  using Gate = fusion::Sm90RowBroadcast<0, TileShape, Bf16, float, Stride<_0, _1, int64_t>>;  // a row a sample
  using AccPlusBias = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>, fusion::Sm90AccFetch, Bias>;
  using GatedSum = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::homogeneous_multiply_add, Bf16, float, kRound>, Gate, AccPlusBias,
                                   fusion::Sm90SrcFetch<Bf16>>;  // gate·(acc + b) + x
  using BiasOnly = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, Bf16, float, kRound>, fusion::Sm90AccFetch, Bias>;
  using Fusion = cute::conditional_t<Gated, GatedSum, BiasOnly>;
  using ElementC = cute::conditional_t<Gated, Bf16, void>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      ElementC, cutlass::layout::RowMajor, 8, Bf16, cutlass::layout::RowMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative,
      Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, cutlass::layout::RowMajor, 8, Bf16, StrideW, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  // x_in (L·M, K), w (N, K), bias (N), gate rows of stride gate_ld, x and out (L·M, N): all row-major.
  // prepare() checks and initializes once (TMA descriptors are made on the host), launch() only launches.
  Gemm gemm;
  void* workspace = nullptr;
  bool prepare(int L, int M, int N, int K, const Bf16* x_in, const Bf16* w, const Bf16* bias, const Bf16* gate, int64_t gate_ld, const Bf16* x,
               Bf16* out, std::string& why) {
    using StrideA = typename Kernel::StrideA;
    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    StrideA sa{int64_t(K), _1{}, int64_t(M) * K};
    StrideW sb{int64_t(K), _1{}, _0{}};
    StrideC sc{};
    if constexpr (Gated) sc = StrideC{int64_t(N), _1{}, int64_t(M) * N};
    StrideD sd{int64_t(N), _1{}, int64_t(M) * N};
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {M, N, K, L},
                                  {x_in, sa, w, sb},
                                  {{}, Gated ? x : nullptr, sc, out, sd}};
    if constexpr (Gated) {
      // {gate, {acc, bias, plus}, x, multiply_add}: each node's children's arguments, then its own
      args.epilogue.thread = {{gate, Bf16(0), {_0{}, _1{}, gate_ld}}, {{}, {bias, Bf16(0), {}}, {}}, {}, {}};
    } else {
      args.epilogue.thread = {{}, {bias, Bf16(0), {}}, {}};
    }
    args.hw_info.device_id = 0;
    args.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
      why = "can_implement failed";
      return false;
    }
    const size_t need = Gemm::get_workspace_size(args);
    if (need) CHECK_CUDA(cudaMalloc(&workspace, need));
    if (gemm.initialize(args, workspace) != cutlass::Status::kSuccess) {
      why = "initialize failed";
      return false;
    }
    return true;
  }
  bool launch(std::string& why) {
    if (gemm.run() != cutlass::Status::kSuccess) {
      why = std::string("run failed: ") + cudaGetErrorString(cudaGetLastError());
      return false;
    }
    return true;
  }
  ~CutlassGemm() {
    if (workspace) cudaFree(workspace);
  }
};

// res = x + gate[row / T] ⊙ y, eight bf16 a thread (16-byte vectors), float arithmetic
__global__ void gated_residual(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ gate,
                               int64_t gate_ld, __nv_bfloat16* __restrict__ res, int64_t rows, int T, int N) {
  const int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // vector index
  const int per_row = N / 8;
  if (v >= rows * per_row) return;
  const int64_t row = v / per_row;
  const int col = int(v % per_row) * 8;
  const uint4 xv = *reinterpret_cast<const uint4*>(x + row * N + col);
  const uint4 yv = *reinterpret_cast<const uint4*>(y + row * N + col);
  const uint4 gv = *reinterpret_cast<const uint4*>(gate + (row / T) * gate_ld + col);
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&xv);
  const __nv_bfloat162* yp = reinterpret_cast<const __nv_bfloat162*>(&yv);
  const __nv_bfloat162* gp = reinterpret_cast<const __nv_bfloat162*>(&gv);
  uint4 o;
  __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(xp[i]), b = __bfloat1622float2(yp[i]), g = __bfloat1622float2(gp[i]);
    op[i] = __floats2bfloat162_rn(a.x + g.x * b.x, a.y + g.y * b.y);
  }
  *reinterpret_cast<uint4*>(res + row * N + col) = o;
}

// out = res (16-byte vectors): the read and write a LayerNorm-modulate pass over the sum would keep
__global__ void copy_rows(const uint4* __restrict__ in, uint4* __restrict__ out, int64_t n) {
  const int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v < n) out[v] = in[v];
}

// y (rows, N) = x_in (rows, K) Wᵀ + b with cuBLASLt's BIAS epilogue, column-major view: yᵀ = W · x_inᵀ
struct LtLinear {
  cublasLtHandle_t lt{};
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t la{}, lb{}, lc{};
  cublasLtMatmulHeuristicResult_t algo{};
  void* workspace = nullptr;
  size_t workspace_size = size_t(32) << 20;
  LtLinear(int64_t rows, int N, int K, const __nv_bfloat16* bias) {
    CHECK_LT(cublasLtCreate(&lt));
    CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const cudaDataType_t bias_type = CUDA_R_16BF;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K));     // W as (K, N) column-major, transposed
    CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, rows, K));  // x_in as (K, rows) column-major
    CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, rows, N));  // y as (N, rows) column-major
    CHECK_CUDA(cudaMalloc(&workspace, workspace_size));
    cublasLtMatmulPreference_t pref{};
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_size, sizeof(workspace_size)));
    int found = 0;
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &algo, &found));
    if (found == 0) {
      std::fprintf(stderr, "cuBLASLt offers no algorithm for the bias GEMM\n");
      std::exit(1);
    }
    cublasLtMatmulPreferenceDestroy(pref);
  }
  void run(const __nv_bfloat16* x_in, const __nv_bfloat16* w, __nv_bfloat16* y, cudaStream_t s) {
    const float one = 1.f, zero = 0.f;
    CHECK_LT(cublasLtMatmul(lt, desc, &one, w, la, x_in, lb, &zero, y, lc, y, lc, &algo.algo, workspace, workspace_size, s));
  }
};

// µs a call of f: the median over 7 timings of 20 calls back to back (the host's launch cost hidden
// behind the GPU's work), after warm-ups
float time_us(const std::function<void()>& f) { return probe_util::median_us(f, 7, 20, 5); }

__nv_bfloat16* device_random(size_t n, float scale, uint32_t seed) {
  std::vector<__nv_bfloat16> h(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  for (auto& v : h) v = __float2bfloat16(d(rng));
  __nv_bfloat16* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * sizeof(__nv_bfloat16)));
  CHECK_CUDA(cudaMemcpy(p, h.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  return p;
}

std::vector<float> to_host(const __nv_bfloat16* p, size_t n) {
  std::vector<__nv_bfloat16> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), p, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

template <class TileShape, class ClusterShape>
void try_config(const char* name, int L, int T, int N, int K, const Bf16* x_in, const Bf16* w, const Bf16* bias, const Bf16* gate,
                int64_t gate_ld, const Bf16* x, Bf16* out, Bf16* y, const std::vector<float>& y_ref, const std::vector<float>& ref, float t_lt,
                float t_pass3, float t_pass2) {
  std::string why;
  CutlassGemm<TileShape, ClusterShape, false> p;
  CutlassGemm<TileShape, ClusterShape, true> g;
  auto plain = [&] { return p.launch(why); };
  auto gated = [&] { return g.launch(why); };
  if (!p.prepare(L, T, N, K, x_in, w, bias, gate, gate_ld, x, y, why) || !g.prepare(L, T, N, K, x_in, w, bias, gate, gate_ld, x, out, why) ||
      !plain() || !gated()) {
    std::printf("| %d | %s | – | – | – | %s |\n", K, name, why.c_str());
    return;
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  // largest |a − b| against the largest |b|: y against cuBLASLt's, the gated sum against cuBLASLt + pass 3
  auto apart = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, m = 0;
    for (size_t i = 0; i < b.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i]))), m = std::max(m, double(std::fabs(b[i])));
    return d / m;
  };
  const double e_y = apart(to_host(reinterpret_cast<const __nv_bfloat16*>(y), y_ref.size()), y_ref);
  const double e_res = apart(to_host(reinterpret_cast<const __nv_bfloat16*>(out), ref.size()), ref);
  const float t_plain = time_us([&] { plain(); }), t_gated = time_us([&] { gated(); });
  const float gain = (t_lt + t_pass3) - (t_gated + t_pass2);
  std::printf("| %d | %s | %.1f | %.1f | %+.1f | y %.1e, sum %.1e |\n", K, name, t_plain, t_gated, gain, e_y, e_res);
}

}  // namespace gated_probe

int main() {
  using namespace gated_probe;
  int dev = 0;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  if (prop.major != 9) {
    std::fprintf(stderr, "gated_gemm_probe: needs a Hopper GPU (sm_90), found %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    return 1;
  }
  const int L = 128, T = 256, N = 1152;  // DiT-XL/2 sampling: batch 64 with CFG, 256 tokens, width 1,152
  const int64_t rows = int64_t(L) * T, gate_ld = 6 * N;
  std::printf("# gated_gemm_probe  %s  rows %lld (%d samples x %d tokens), N %d, bf16; times in us (median of 7 timings of 20 back-to-back calls)\n", prop.name, (long long)rows, L, T, N);
  std::printf("| K | path | cutlass + bias | cutlass gated | gain: (cublasLt + pass 3) - (gated + pass 2) | largest error / largest value |\n|---|---|---|---|---|---|\n");
  for (int K : {1152, 4608}) {
    __nv_bfloat16* x_in = device_random(size_t(rows) * K, 1.f, 1 + K);
    __nv_bfloat16* w = device_random(size_t(N) * K, 1.f / std::sqrt(float(K)), 2 + K);
    __nv_bfloat16* bias = device_random(N, 0.1f, 3);
    __nv_bfloat16* gate = device_random(size_t(L) * gate_ld, 0.5f, 4);  // adaLN's (L, 6N) output; the gate is a chunk of it
    __nv_bfloat16* x = device_random(size_t(rows) * N, 1.f, 5);
    __nv_bfloat16 *y = nullptr, *res = nullptr, *out = nullptr;
    CHECK_CUDA(cudaMalloc(&y, size_t(rows) * N * 2));
    CHECK_CUDA(cudaMalloc(&res, size_t(rows) * N * 2));
    CHECK_CUDA(cudaMalloc(&out, size_t(rows) * N * 2));
    const __nv_bfloat16* gate_chunk = gate + 2 * N;  // gate_msa's place in the chunk order
    LtLinear lin(rows, N, K, bias);
    const int64_t vecs = rows * N / 8;
    const unsigned blocks = unsigned((vecs + 255) / 256);
    auto pass3 = [&] { gated_residual<<<blocks, 256>>>(x, y, gate_chunk, gate_ld, res, rows, T, N); };
    auto pass2 = [&] { copy_rows<<<blocks, 256>>>(reinterpret_cast<const uint4*>(res), reinterpret_cast<uint4*>(out), vecs); };
    lin.run(x_in, w, y, nullptr);
    pass3();
    CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> y_ref = to_host(y, size_t(rows) * N), ref = to_host(res, size_t(rows) * N);
    const float t_lt = time_us([&] { lin.run(x_in, w, y, nullptr); });
    const float t_pass3 = time_us(pass3), t_pass2 = time_us(pass2);
    std::printf("| %d | cublasLt + bias %.1f, pass 3 %.1f, pass 2 %.1f | | | | |\n", K, t_lt, t_pass3, t_pass2);
    const auto* cx_in = reinterpret_cast<const Bf16*>(x_in);
    const auto* cw = reinterpret_cast<const Bf16*>(w);
    const auto* cb = reinterpret_cast<const Bf16*>(bias);
    const auto* cg = reinterpret_cast<const Bf16*>(gate_chunk);
    const auto* cx = reinterpret_cast<const Bf16*>(x);
    auto* co = reinterpret_cast<Bf16*>(out);
    auto* cy = reinterpret_cast<Bf16*>(y);
    try_config<Shape<_128, _128, _64>, Shape<_2, _1, _1>>("128x128x64, cluster 2x1", L, T, N, K, cx_in, cw, cb, cg, gate_ld, cx, co, cy, y_ref, ref, t_lt,
                                                          t_pass3, t_pass2);
    try_config<Shape<_128, _192, _64>, Shape<_1, _1, _1>>("128x192x64, cluster 1x1", L, T, N, K, cx_in, cw, cb, cg, gate_ld, cx, co, cy, y_ref, ref, t_lt,
                                                          t_pass3, t_pass2);
    try_config<Shape<_128, _256, _64>, Shape<_1, _1, _1>>("128x256x64, cluster 1x1", L, T, N, K, cx_in, cw, cb, cg, gate_ld, cx, co, cy, y_ref, ref, t_lt,
                                                          t_pass3, t_pass2);
    for (void* p : {(void*)x_in, (void*)w, (void*)bias, (void*)gate, (void*)x, (void*)y, (void*)res, (void*)out}) CHECK_CUDA(cudaFree(p));
  }
  return 0;
}
