// Which cuBLASLt configurations this GPU and library offer an algorithm for. First the DiT block's
// gated residual as one GEMM: D = alpha ⊙ (A·B) + beta·C with a per-row alpha vector (pointer modes
// ALPHA_DEVICE_VECTOR_*), batched over samples, with and without the bias epilogue (on the H200 with
// cuBLASLt 13.1 none is offered, so nala has no such GEMM: docs/benchmarks.md, seventeenth session).
// Prints a table: mode, epilogue, batch, dtype, heuristic status, algorithms found, and whether a
// launch with the first one returned success. Then the FP8 GEMMs the next step of FP8 sampling would
// need (docs/benchmarks.md, seventeenth session): fc1's e4m3 GEMM with the bias and GELU in its
// epilogue writing e4m3 itself (a per-tensor D scale and the amax of D, for a delayed scale) or bf16,
// with per-tensor (SCALAR_32F) or per-row / per-column (OUTER_VEC_32F) scales of A and B. Needs only
// the CUDA toolkit:
//   nvcc -O2 -std=c++17 bench/cublaslt_probe.cu -lcublasLt -o build-device/cublaslt_probe
// (scripts/device_steps/cublaslt-probe.sh does that on the GPU machine and runs it against torch's cuBLASLt)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace {

// one configuration's cuBLASLt objects, destroyed together (null ones skipped)
struct Lt {
  cublasLtMatmulDesc_t op{};
  cublasLtMatrixLayout_t a{}, b{}, c{}, d{};
  cublasLtMatmulPreference_t pref{};
  ~Lt() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {a, b, c, d})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// the preference (the workspace limit) and up to 8 algorithms for lt's GEMM; C's layout is lt.c where
// set, else D's
cublasStatus_t heuristics(cublasLtHandle_t h, Lt& lt, size_t ws_size, cublasLtMatmulHeuristicResult_t (&heur)[8], int& found) {
  cublasLtMatmulPreferenceCreate(&lt.pref);
  cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size));
  return cublasLtMatmulAlgoGetHeuristic(h, lt.op, lt.a, lt.b, lt.c ? lt.c : lt.d, lt.d, lt.pref, 8, heur, &found);
}

const char* mode_name(int m) {
  switch (m) {
    case CUBLASLT_POINTER_MODE_HOST: return "HOST";
    case CUBLASLT_POINTER_MODE_DEVICE_VECTOR: return "DEVICE_VECTOR";
    case CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO: return "ALPHA_VEC_BETA_ZERO";
    case CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST: return "ALPHA_VEC_BETA_HOST";
  }
  return "?";
}

// one configuration: m × n × k per batch entry (column-major D (m, n)), A transposed as in the project
void probe(cublasLtHandle_t h, cudaDataType_t dt, const char* dt_name, int mode, bool bias, int32_t batch, void* buf, void* ws, size_t ws_size) {
  const int64_t m = 1152, n = 256, k = 1152;
  Lt lt;
  cublasLtMatmulDesc_t& op = lt.op;
  cublasLtMatrixLayout_t &a = lt.a, &b = lt.b, &d = lt.d;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t pm = mode;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof(pm));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  char* base = static_cast<char*>(buf);  // one 256-byte-aligned arena: A, B, C/D, alpha, bias
  void *A = base, *B = base + (64 << 20), *D = base + (128 << 20), *alpha = base + (192 << 20), *biasp = base + (200 << 20);
  if (mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST && batch > 1) {
    const int64_t stride = m;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, &stride, sizeof(stride));
  }
  if (bias) {
    const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &biasp, sizeof(biasp));
    if (batch > 1) {
      const int64_t stride = m;
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &stride, sizeof(stride));
    }
  }
  cublasLtMatrixLayoutCreate(&a, dt, k, m, k);
  cublasLtMatrixLayoutCreate(&b, dt, k, n, k);
  cublasLtMatrixLayoutCreate(&d, dt, m, n, m);
  if (batch > 1) {
    const int64_t sa = 0, sb = n * k, sd = n * m;
    cublasLtMatrixLayoutSetAttribute(a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
    cublasLtMatrixLayoutSetAttribute(a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof(sa));
    cublasLtMatrixLayoutSetAttribute(b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
    cublasLtMatrixLayoutSetAttribute(b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof(sb));
    cublasLtMatrixLayoutSetAttribute(d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
    cublasLtMatrixLayoutSetAttribute(d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd, sizeof(sd));
  }
  cublasLtMatmulHeuristicResult_t heur[8]{};
  int found = 0;
  const cublasStatus_t st = heuristics(h, lt, ws_size, heur, found);
  int run = -1;
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    float host_alpha = 1.f, beta = (mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO) ? 0.f : 1.f;
    const void* al = (mode == CUBLASLT_POINTER_MODE_HOST) ? static_cast<const void*>(&host_alpha) : alpha;
    run = int(cublasLtMatmul(h, op, al, A, a, B, b, &beta, D, d, D, d, &heur[0].algo, ws, ws_size, nullptr));
    cudaDeviceSynchronize();
  }
  std::printf("| %-19s | %-4s | %d | %-4s | %d %-28s | %d | %s |\n", mode_name(mode), bias ? "BIAS" : "none", batch, dt_name, int(st),
              cublasLtGetStatusName(st), found, run < 0 ? "-" : (run == 0 ? "ok" : cublasLtGetStatusName(cublasStatus_t(run))));
}

const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
    default: return "?";
  }
}

// fc1 of DiT-XL/2 sampling: D (m = 4608 features, n = 2048 tokens) = W (stored (k, m), transposed) ·
// x (k = 1152, n), both e4m3, the TN layout Hopper's FP8 GEMMs take; C bf16 (unused, beta 0)
void probe_fp8(cublasLtHandle_t h, int32_t scale_mode, cublasLtEpilogue_t epi, cudaDataType_t d_type, void* buf, void* ws, size_t ws_size) {
  const int64_t m = 4608, n = 2048, k = 1152;
  Lt lt;
  cublasLtMatmulDesc_t& op = lt.op;
  cublasLtMatrixLayout_t &a = lt.a, &b = lt.b, &c = lt.c, &d = lt.d;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  char* base = static_cast<char*>(buf);  // A, B, C, D, the scales, the bias, amax: one arena
  void *A = base, *B = base + (16 << 20), *C = base + (32 << 20), *D = base + (64 << 20);
  void *a_scale = base + (96 << 20), *b_scale = base + (97 << 20), *d_scale = base + (98 << 20), *bias = base + (99 << 20), *amax = base + (100 << 20);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &scale_mode, sizeof(scale_mode));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &scale_mode, sizeof(scale_mode));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale));
  const int8_t fast = 1;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast));
  if (d_type == CUDA_R_8F_E4M3) {
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &d_scale, sizeof(d_scale));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax, sizeof(amax));
  }
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    const int32_t bias_type = CUDA_R_16BF;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type));
  }
  cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, k, m, k);
  cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, m, n, m);
  cublasLtMatrixLayoutCreate(&d, d_type, m, n, m);
  cublasLtMatmulHeuristicResult_t heur[8]{};
  int found = 0;
  const cublasStatus_t st = heuristics(h, lt, ws_size, heur, found);
  int run = -1;
  float ms = 0;
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    const float alpha = 1.f, beta = 0.f;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    run = int(cublasLtMatmul(h, op, &alpha, A, a, B, b, &beta, C, c, D, d, &heur[0].algo, ws, ws_size, nullptr));
    cudaEventRecord(e0);
    for (int i = 0; i < 20 && run == 0; ++i) cublasLtMatmul(h, op, &alpha, A, a, B, b, &beta, C, c, D, d, &heur[0].algo, ws, ws_size, nullptr);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  std::printf("| %-10s | %-9s | %-4s | %d %-28s | %d | %s | %s |\n", scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ? "SCALAR" : "OUTER_VEC",
              epilogue_name(epi), d_type == CUDA_R_8F_E4M3 ? "e4m3" : "bf16", int(st), cublasLtGetStatusName(st), found,
              run < 0 ? "-" : (run == 0 ? "ok" : cublasLtGetStatusName(cublasStatus_t(run))), run == 0 ? std::to_string(ms / 20 * 1000).c_str() : "-");
}

}  // namespace

int main() {
  cublasLtHandle_t h{};
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublaslt_probe: cublasLtCreate failed\n");
    return 1;
  }
  void *buf = nullptr, *ws = nullptr;
  const size_t ws_size = size_t(32) << 20;
  if (cudaMalloc(&buf, size_t(256) << 20) != cudaSuccess || cudaMalloc(&ws, ws_size) != cudaSuccess) {
    std::fprintf(stderr, "cublaslt_probe: cudaMalloc failed\n");
    return 1;
  }
  cudaMemset(buf, 0, size_t(256) << 20);
  std::printf("cuBLASLt %zu, m=1152 n=256 k=1152, compute 32F\n\n", cublasLtGetVersion());
  std::printf("| pointer mode | epilogue | batch | dtype | heuristic status | found | launch |\n|---|---|---|---|---|---|---|\n");
  const int modes[] = {CUBLASLT_POINTER_MODE_HOST, CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO,
                       CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST, CUBLASLT_POINTER_MODE_DEVICE_VECTOR};
  for (auto [dt, name] : {std::pair<cudaDataType_t, const char*>{CUDA_R_16BF, "bf16"}, {CUDA_R_16F, "fp16"}, {CUDA_R_32F, "fp32"}})
    for (int mode : modes)
      for (bool bias : {false, true})
        for (int32_t batch : {1, 4}) probe(h, dt, name, mode, bias, batch, buf, ws, ws_size);
  std::printf("\nFP8 (e4m3 A and B, fast accumulation), m=4608 n=2048 k=1152 (fc1 of DiT-XL/2, 2048 tokens); bias bf16; "
              "e4m3 D with a per-tensor D scale and the amax of D\n\n");
  std::printf("| A, B scales | epilogue | D | heuristic status | found | launch | us a GEMM |\n|---|---|---|---|---|---|---|\n");
  cudaMemset(buf, 0, size_t(256) << 20);  // zero operands; the scales as zero floats still run
  for (int32_t mode : {int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F), int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F)})
    for (cublasLtEpilogue_t epi : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS})
      for (cudaDataType_t d_type : {CUDA_R_16BF, CUDA_R_8F_E4M3}) probe_fp8(h, mode, epi, d_type, buf, ws, ws_size);
  cudaFree(buf);
  cudaFree(ws);
  cublasLtDestroy(h);
  return 0;
}
