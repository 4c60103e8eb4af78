// Does cuBLASLt hold a faster algorithm than the one its heuristic names first, for the GEMMs of
// DiT-XL/2? (#34.) nala's bf16 linears go through ATen (at::linear, at::_addmm_activation) and its FP8
// linears through at::_scaled_mm; all three run cuBLASLt with the heuristic's first algorithm. The
// twenty-first session's CUTLASS probe (bench/gated_gemm_probe.cu) ran fc2's shape (32,768 × 4,608 →
// 1,152, bias) in 451 µs with a 128×192 tile against cuBLASLt's 475, so the first algorithm is not always
// the fastest one. A standalone probe, not part of nala: for each GEMM of a DiT-XL/2 block (qkv,
// proj, fc1 with its bias-GELU epilogue, fc2) at the sampling rows (batch 64 with CFG: 32,768) and the
// training rows (batch 256: 65,536), forward in bf16 and FP8 (e4m3 rows and weights, row and column
// scales as outer vectors, fast accumulation, bf16 out: at::_scaled_mm's rowwise call), and the
// training's two backward GEMMs (dgrad dx = dy W, wgrad dW = dyᵀ x) in bf16, it asks the heuristic
// for up to 16 algorithms, times each and prints the first's time, the best's time, its rank and its
// tile and stages. A win is a rank > 0 that is faster by more than the timing spread (≈ 1 %).
// Build (CPU machine, CUDA toolkit) and run (GPU machine):
//   bash scripts/dev/build_gemm_algo_probe.sh          -> .carry/gemm_algo_probe
//   bash scripts/device_build.sh probe:gemm_algo_probe  (scripts/device_steps/probe.sh)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "bench/probe_util.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace algo_probe {

#define CHECK_CUDA PROBE_CHECK_CUDA
#define CHECK_LT PROBE_CHECK_LT

// random operands (the tensor cores' power, and so the clock, depends on the bits they multiply):
// bf16 uniform in (−1, 1), e4m3 any finite byte (0x7f and 0xff are NaN)
__device__ uint32_t mix(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return uint32_t(z ^ (z >> 31));
}
__global__ void fill_bf16(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u = float(mix(i, seed) >> 8) * (2.f / 16777216.f) - 1.f;
    p[i] = uint16_t(__float_as_uint(u) >> 16);
  }
}
__global__ void fill_e4m3(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint8_t b = uint8_t(mix(i, seed));
    if ((b & 0x7f) == 0x7f) b ^= 1;
    p[i] = b;
  }
}

// µs a call: the median of 5 timings of 10 calls back to back, after 3 warm-ups; −1 where f fails
float time_us(const std::function<cublasStatus_t()>& f) {
  if (f() != CUBLAS_STATUS_SUCCESS) return -1.f;
  return probe_util::median_us([&] { f(); }, 5, 10, 2);
}

// One GEMM in cuBLASLt's column-major terms: D (m, n) = op(A) (m, k) · op(B) (k, n) [+ bias (m)].
// A row-major (R, C) matrix is a column-major (C, R) one with ld C (see ops/cuda/gemm_epilogue.cpp).
struct Case {
  std::string name;
  bool fp8;
  bool trans_a, trans_b;
  int64_t m, n, k;
  cublasLtEpilogue_t epilogue;
};

std::string algo_config(const cublasLtMatmulAlgo_t& algo) {
  int id = 0, tile = 0, stages = 0, splitk = 0, swizzle = 0, cluster = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster), &w);
  char s[128];
  std::snprintf(s, sizeof(s), "algo %d tile %d stages %d splitk %d swizzle %d cluster %d", id, tile, stages, splitk, swizzle, cluster);
  return s;
}

void run_case(cublasLtHandle_t lt, const Case& c, void* ws, size_t ws_size, void* A, void* B, void* D, void* bias, float* scale_a,
              float* scale_b) {
  cublasLtMatmulDesc_t op{};
  CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof(c.epilogue)));
  if (c.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const cudaDataType_t bt = CUDA_R_16BF;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  const cudaDataType_t in = c.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  if (c.fp8) {  // at::_scaled_mm's rowwise call: outer-vector scales, fast accumulation
    const int8_t fast = 1;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a, sizeof(scale_a)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b, sizeof(scale_b)));
  }
  cublasLtMatrixLayout_t la{}, lb{}, ld{};
  CHECK_LT(c.trans_a ? cublasLtMatrixLayoutCreate(&la, in, c.k, c.m, c.k) : cublasLtMatrixLayoutCreate(&la, in, c.m, c.k, c.m));
  CHECK_LT(c.trans_b ? cublasLtMatrixLayoutCreate(&lb, in, c.n, c.k, c.n) : cublasLtMatrixLayoutCreate(&lb, in, c.k, c.n, c.k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, c.m, c.n, c.m));
  cublasLtMatmulPreference_t pref{};
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size)));
  cublasLtMatmulHeuristicResult_t heur[16]{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 16, heur, &found);
  const double tflop = 2.0 * double(c.m) * double(c.n) * double(c.k) * 1e-12;
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    std::printf("| %s | %lld×%lld×%lld | – | – | – | no algorithm (status %d) |\n", c.name.c_str(), (long long)c.m, (long long)c.n, (long long)c.k, int(st));
  } else {
    const float one = 1.f, zero = 0.f;
    std::vector<float> t(found);
    for (int i = 0; i < found; ++i)
      t[i] = time_us([&] { return cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, D, ld, D, ld, &heur[i].algo, ws, ws_size, nullptr); });
    int best = 0;
    for (int i = 1; i < found; ++i)
      if (t[i] > 0 && (t[best] <= 0 || t[i] < t[best])) best = i;
    std::printf("| %s | %lld×%lld×%lld | %.1f (%.0f TFLOP/s) | %.1f (%.0f TFLOP/s) | %d of %d | %+.1f %% | first: %s; best: %s |\n", c.name.c_str(),
                (long long)c.m, (long long)c.n, (long long)c.k, t[0], tflop / (t[0] * 1e-6), t[best], tflop / (t[best] * 1e-6), best, found,
                100.0 * (t[best] - t[0]) / t[0], algo_config(heur[0].algo).c_str(), algo_config(heur[best].algo).c_str());
  }
  std::fflush(stdout);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
}

}  // namespace algo_probe

int main() {
  using namespace algo_probe;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const int D = 1152, H = 4608;  // DiT-XL/2's width and MLP width
  const size_t ws_size = size_t(32) << 20;
  // operands big enough for every case, filled with small random bytes (e4m3 and bf16 both finite)
  const size_t big = size_t(65536) * H * 2;
  void *A = nullptr, *B = nullptr, *A8 = nullptr, *B8 = nullptr, *Dout = nullptr, *bias = nullptr, *ws = nullptr;
  float *sa = nullptr, *sb = nullptr;
  for (void** p : {&A, &B, &Dout}) CHECK_CUDA(cudaMalloc(p, big));
  for (void** p : {&A8, &B8}) CHECK_CUDA(cudaMalloc(p, big / 2));
  CHECK_CUDA(cudaMalloc(&bias, H * 2));
  CHECK_CUDA(cudaMalloc(&ws, ws_size));
  CHECK_CUDA(cudaMalloc(&sa, 65536 * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&sb, 65536 * sizeof(float)));
  fill_bf16<<<1024, 256>>>(static_cast<uint16_t*>(A), big / 2, 1);
  fill_bf16<<<1024, 256>>>(static_cast<uint16_t*>(B), big / 2, 2);
  fill_e4m3<<<1024, 256>>>(static_cast<uint8_t*>(A8), big / 2, 3);
  fill_e4m3<<<1024, 256>>>(static_cast<uint8_t*>(B8), big / 2, 4);
  fill_bf16<<<16, 256>>>(static_cast<uint16_t*>(bias), H, 5);
  CHECK_CUDA(cudaMemset(sa, 0, 65536 * sizeof(float)));  // 0: the fp8 products' scale (finite outputs); the time is the same
  CHECK_CUDA(cudaMemset(sb, 0, 65536 * sizeof(float)));
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  cublasLtHandle_t lt{};
  CHECK_LT(cublasLtCreate(&lt));
  int version = int(cublasLtGetVersion());
  std::printf("# gemm_algo_probe  %s  cuBLASLt %d  workspace %zu MiB; times in µs (median of 5 timings of 10 back-to-back calls)\n", prop.name, version,
              ws_size >> 20);
  std::printf("| GEMM | m×n×k (column-major) | heuristic's first | best of the heuristic's list | best's rank | best vs first | configs |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  // forward y (R, N) = x (R, K) Wᵀ + b: yᵀ (N, R) = W-stored (K, N) transposed · xᵀ (K, R)
  struct Layer {
    const char* name;
    int64_t N, K;
    cublasLtEpilogue_t epi;
  };
  const Layer layers[] = {{"qkv", 3 * D, D, CUBLASLT_EPILOGUE_BIAS},
                          {"proj", D, D, CUBLASLT_EPILOGUE_BIAS},
                          {"fc1", H, D, CUBLASLT_EPILOGUE_GELU_BIAS},
                          {"fc2", D, H, CUBLASLT_EPILOGUE_BIAS}};
  std::vector<Case> cases;
  for (int64_t R : {32768, 65536})
    for (const Layer& l : layers) cases.push_back({std::string(l.name) + " fwd bf16 R=" + std::to_string(R), false, true, false, l.N, R, l.K, l.epi});
  for (const Layer& l : layers)  // FP8 sampling: fc1's GELU is a separate kernel there (bias_gelu_quantize_rows), so BIAS alone
    cases.push_back({std::string(l.name) + " fwd fp8 R=32768", true, true, false, l.N, 32768, l.K,
                     l.epi == CUBLASLT_EPILOGUE_GELU_BIAS ? CUBLASLT_EPILOGUE_DEFAULT : CUBLASLT_EPILOGUE_BIAS});
  for (const Layer& l : layers) {
    const int64_t R = 65536;
    // dgrad dx (R, K) = dy (R, N) W (N, K): dxᵀ (K, R) = W-stored (K, N) · dyᵀ (N, R)
    cases.push_back({std::string(l.name) + " dgrad bf16 R=65536", false, false, false, l.K, R, l.N, CUBLASLT_EPILOGUE_DEFAULT});
    // wgrad dW (N, K) = dyᵀ x: dWᵀ (K, N) = xᵀ (K, R) · dy (R, N), dy stored (N, R) column-major, transposed
    cases.push_back({std::string(l.name) + " wgrad bf16 R=65536", false, false, true, l.K, l.N, R, CUBLASLT_EPILOGUE_DEFAULT});
  }
  for (const Case& c : cases) run_case(lt, c, ws, ws_size, c.fp8 ? A8 : A, c.fp8 ? B8 : B, Dout, bias, sa, sb);
  cublasLtDestroy(lt);
  for (void* p : {A, B, A8, B8, Dout, bias, ws, (void*)sa, (void*)sb}) CHECK_CUDA(cudaFree(p));
  return 0;
}
