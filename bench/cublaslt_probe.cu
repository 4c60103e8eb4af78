// Which cuBLASLt configurations this GPU and library offer an algorithm for, for the gated-residual
// GEMM of ops/cuda/gemm_epilogue.cpp: D = alpha ⊙ (A·B) + beta·C with a per-row alpha vector
// (pointer modes ALPHA_DEVICE_VECTOR_*), batched over samples, with and without the bias epilogue.
// Prints a table: mode, epilogue, batch, dtype, heuristic status, algorithms found, and whether a
// launch with the first one returned success. Needs only the CUDA toolkit:
//   nvcc -O2 -std=c++17 bench/cublaslt_probe.cu -lcublasLt -o build-device/cublaslt_probe
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <utility>

namespace {

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
  cublasLtMatmulDesc_t op{};
  cublasLtMatrixLayout_t a{}, b{}, d{};
  cublasLtMatmulPreference_t pref{};
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
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size));
  cublasLtMatmulHeuristicResult_t heur[8]{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, op, a, b, d, d, pref, 8, heur, &found);
  int run = -1;
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    float host_alpha = 1.f, beta = (mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO) ? 0.f : 1.f;
    const void* al = (mode == CUBLASLT_POINTER_MODE_HOST) ? static_cast<const void*>(&host_alpha) : alpha;
    run = int(cublasLtMatmul(h, op, al, A, a, B, b, &beta, D, d, D, d, &heur[0].algo, ws, ws_size, nullptr));
    cudaDeviceSynchronize();
  }
  std::printf("| %-19s | %-4s | %d | %-4s | %d %-28s | %d | %s |\n", mode_name(mode), bias ? "BIAS" : "none", batch, dt_name, int(st),
              cublasLtGetStatusName(st), found, run < 0 ? "-" : (run == 0 ? "ok" : cublasLtGetStatusName(cublasStatus_t(run))));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatmulDescDestroy(op);
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
  cudaFree(buf);
  cudaFree(ws);
  cublasLtDestroy(h);
  return 0;
}
