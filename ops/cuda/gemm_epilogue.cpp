#include "ops/cuda/gemm_epilogue.h"

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>

namespace nala::ops::cuda {
namespace {

void check(cublasStatus_t st, const char* what) {
  TORCH_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt ", what, " failed with status ", int(st));
}

cudaDataType_t cuda_dtype(at::ScalarType t) {
  TORCH_CHECK(t == at::kBFloat16 || t == at::kHalf, "gemm epilogue: bf16 or fp16 only, got ", t);
  return t == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
}

struct Desc {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Desc() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename T>
void set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& v, const char* what) {
  check(cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof(v)), what);
}

// The alignment cuBLASLt may assume of an operand: the largest power of two up to 256 (its default
// assumption) that divides the address.
uint32_t alignment(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// Runs the GEMM that `desc` describes (op, layouts a, b and d, d also C's) with the first algorithm
// cuBLASLt's heuristic offers for operands of the given alignments (A, B, C, D); false, and nothing
// run, where it offers none.
bool launch(Desc& desc, const void* alpha, const void* beta, const void* A, const void* B, const void* C, void* D, const char* name,
            const std::array<uint32_t, 4>& align) {
  const size_t ws_size = at::cuda::getCUDABlasLtWorkspaceSize();
  void* ws = at::cuda::getCUDABlasLtWorkspace();
  check(cublasLtMatmulPreferenceCreate(&desc.pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size)), "workspace");
  const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    check(cublasLtMatmulPreferenceSetAttribute(desc.pref, align_attr[i], &align[i], sizeof(align[i])), "alignment");
  cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref, 1, &heur, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  check(st, "heuristic");
  check(cublasLtMatmul(handle, desc.op, alpha, A, desc.a, B, desc.b, beta, C, desc.d, D, desc.d, &heur.algo, ws, ws_size,
                       at::cuda::getCurrentCUDAStream().stream()),
        name);
  return true;
}

// Column-major cuBLASLt terms: D (m, n), ld m, = op(A) (m, k) · B (k, n), with the epilogue set on
// `desc.op` by the caller; A stored (k, m) with ld k when transposed, else (m, k) with ld m; B (k, n)
// with ld k. A row-major (R, C) matrix is a column-major (C, R) one with ld C.
void run(Desc& desc, bool trans_a, int64_t m, int64_t n, int64_t k, cudaDataType_t dt, const void* A, const void* B, void* D,
         const char* name) {
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  set(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, ta, "TRANSA");
  set(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, tb, "TRANSB");
  check(trans_a ? cublasLtMatrixLayoutCreate(&desc.a, dt, k, m, k) : cublasLtMatrixLayoutCreate(&desc.a, dt, m, k, m), "layout A");
  check(cublasLtMatrixLayoutCreate(&desc.b, dt, k, n, k), "layout B");
  check(cublasLtMatrixLayoutCreate(&desc.d, dt, m, n, m), "layout D");
  const float alpha = 1.f, beta = 0.f;
  TORCH_CHECK(launch(desc, &alpha, &beta, A, B, D, D, name, {alignment(A), alignment(B), alignment(D), alignment(D)}), name,
              ": cuBLASLt has no algorithm for m=", m, " n=", n, " k=", k, " with this epilogue");
}

bool rows16(const at::Tensor& t) { return t.size(-1) % 8 == 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

}  // namespace

bool gemm_epilogue_supported(const at::Tensor& x, const at::Tensor& w) {
  if (!x.is_cuda() || !w.is_cuda() || x.dim() != 2 || w.dim() != 2 || !x.is_contiguous() || !w.is_contiguous()) return false;
  if (x.scalar_type() != w.scalar_type() || (x.scalar_type() != at::kBFloat16 && x.scalar_type() != at::kHalf)) return false;
  return x.size(0) > 0 && rows16(x) && rows16(w) && w.size(0) % 8 == 0;
}

std::array<at::Tensor, 2> gemm_bias_gelu_aux(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  TORCH_CHECK(gemm_epilogue_supported(x, w) && x.size(1) == w.size(1) && b.dim() == 1 && b.size(0) == w.size(0),
              "gemm_bias_gelu_aux: input ", x.sizes(), " ", x.scalar_type(), ", weight ", w.sizes(), " ", w.scalar_type(), " and bias ",
              b.sizes(), " do not fit (contiguous CUDA bf16/fp16, sizes multiples of 8)");
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t R = x.size(0), K = x.size(1), N = w.size(0);
  const at::Tensor bias = b.to(x.scalar_type()).contiguous();  // (N)
  at::Tensor h = at::empty({R, N}, x.options()), aux = at::empty({R, N}, x.options());  // (R, N) ×2
  Desc desc;
  check(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "epilogue");
  set(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data_ptr(), "bias pointer");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.data_ptr(), "aux pointer");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, N, "aux ld");
  // column-major: hᵀ (N, R) = wᵀ-stored (K, N) transposed · xᵀ (K, R)
  run(desc, true, N, R, K, cuda_dtype(x.scalar_type()), w.data_ptr(), x.data_ptr(), h.data_ptr(), "gemm_bias_gelu_aux");
  return {h, aux};
}

at::Tensor gemm_dgelu(const at::Tensor& g, const at::Tensor& w, const at::Tensor& aux) {
  TORCH_CHECK(g.is_cuda() && g.dim() == 2 && w.dim() == 2 && aux.dim() == 2 && g.size(1) == w.size(0) && aux.size(0) == g.size(0) &&
                  aux.size(1) == w.size(1) && g.scalar_type() == w.scalar_type() && aux.scalar_type() == w.scalar_type() &&
                  g.is_contiguous() && w.is_contiguous() && aux.is_contiguous() && g.size(0) > 0 && rows16(g) && rows16(w) && rows16(aux),
              "gemm_dgelu: gradient ", g.sizes(), " ", g.scalar_type(), ", weight ", w.sizes(), " ", w.scalar_type(), " and aux ",
              aux.sizes(), " ", aux.scalar_type(), " do not fit (contiguous CUDA bf16/fp16, sizes multiples of 8)");
  const c10::cuda::CUDAGuard guard(g.device());
  const int64_t R = g.size(0), M = g.size(1), N = w.size(1);
  at::Tensor dy = at::empty({R, N}, g.options());  // (R, N)
  Desc desc;
  check(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU, "epilogue");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.data_ptr(), "aux pointer");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, N, "aux ld");
  // column-major: dyᵀ (N, R) = w-stored (N, M) · gᵀ (M, R)
  run(desc, false, N, R, M, cuda_dtype(g.scalar_type()), w.data_ptr(), g.data_ptr(), dy.data_ptr(), "gemm_dgelu");
  return dy;
}

bool gemm_fp8_bias_gelu_e4m3(const at::Tensor& xq, const at::Tensor& xs, const at::Tensor& wq, const at::Tensor& ws, const at::Tensor& b,
                             const at::Tensor& d_scale, const at::Tensor& out, const at::Tensor& amax, bool fast_accum) {
  const auto e4m3 = at::kFloat8_e4m3fn;
  const bool fits = xq.is_cuda() && xq.dim() == 2 && wq.dim() == 2 && xq.scalar_type() == e4m3 && wq.scalar_type() == e4m3 &&
                    xq.size(1) == wq.size(1) && xq.size(1) % 16 == 0 && wq.size(0) % 16 == 0 && xq.size(0) > 0 &&
                    xs.scalar_type() == at::kFloat && xs.numel() == xq.size(0) && ws.scalar_type() == at::kFloat && ws.numel() == wq.size(0) &&
                    b.scalar_type() == at::kBFloat16 && b.numel() == wq.size(0) && d_scale.scalar_type() == at::kFloat && d_scale.numel() == 1 &&
                    amax.scalar_type() == at::kFloat && amax.numel() == 1 && out.scalar_type() == e4m3 && out.dim() == 2 &&
                    out.size(0) == xq.size(0) && out.size(1) == wq.size(0);
  bool contiguous = true, on_device = true;
  for (const at::Tensor* t : {&xq, &xs, &wq, &ws, &b, &d_scale, &out, &amax}) {
    contiguous = contiguous && t->is_contiguous();
    on_device = on_device && t->is_cuda() && t->device() == xq.device();
  }
  TORCH_CHECK(fits && contiguous && on_device, "gemm_fp8_bias_gelu_e4m3: input ", xq.sizes(), " ", xq.scalar_type(), " with scales ", xs.sizes(),
              ", weight ", wq.sizes(), " ", wq.scalar_type(), " with scales ", ws.sizes(), ", bias ", b.sizes(), " ", b.scalar_type(), ", output ",
              out.sizes(), " ", out.scalar_type(), ", d_scale ", d_scale.sizes(), " and amax ", amax.sizes(),
              " do not fit (contiguous, one CUDA device; e4m3 (R, K) and (N, K), float32 scales a row, bf16 bias, float32 scalars, K and N multiples of 16)");
  const c10::cuda::CUDAGuard guard(xq.device());
  const int64_t R = xq.size(0), K = xq.size(1), N = wq.size(0);
  Desc desc;
  check(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  // column-major: outᵀ (N, R) = wq-stored (K, N) transposed · xqᵀ (K, R), the TN layout FP8 GEMMs take;
  // A is the weight, so A's scales are ws (one an output feature) and B's xs (one a token)
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  set(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, ta, "TRANSA");
  set(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, tb, "TRANSB");
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  set(desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, outer, "A scale mode");
  set(desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, outer, "B scale mode");
  set(desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ws.data_ptr(), "A scales");
  set(desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, xs.data_ptr(), "B scales");
  set(desc.op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale.data_ptr(), "D scale");
  set(desc.op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax.data_ptr(), "amax of D");
  set(desc.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(fast_accum ? 1 : 0), "fast accumulation");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_BIAS, "epilogue");
  set(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, b.data_ptr(), "bias pointer");
  set(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_16BF), "bias type");
  check(cublasLtMatrixLayoutCreate(&desc.a, CUDA_R_8F_E4M3, K, N, K), "layout A");
  check(cublasLtMatrixLayoutCreate(&desc.b, CUDA_R_8F_E4M3, K, R, K), "layout B");
  check(cublasLtMatrixLayoutCreate(&desc.d, CUDA_R_8F_E4M3, N, R, N), "layout D");
  // C: bf16 as FP8 GEMMs with an e4m3 D want it, never read (beta 0); its own layout
  cublasLtMatrixLayout_t c = nullptr;
  check(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, R, N), "layout C");
  const std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, decltype(&cublasLtMatrixLayoutDestroy)> c_owner(c, &cublasLtMatrixLayoutDestroy);
  const size_t ws_size = at::cuda::getCUDABlasLtWorkspaceSize();
  void* workspace = at::cuda::getCUDABlasLtWorkspace();
  check(cublasLtMatmulPreferenceCreate(&desc.pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size)), "workspace");
  cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, c, desc.d, desc.pref, 1, &heur, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  check(st, "heuristic");
  const float alpha = 1.f, beta = 0.f;
  check(cublasLtMatmul(handle, desc.op, &alpha, wq.data_ptr(), desc.a, xq.data_ptr(), desc.b, &beta, out.data_ptr(), c, out.data_ptr(), desc.d,
                       &heur.algo, workspace, ws_size, at::cuda::getCurrentCUDAStream().stream()),
        "gemm_fp8_bias_gelu_e4m3");
  return true;
}

}  // namespace nala::ops::cuda
