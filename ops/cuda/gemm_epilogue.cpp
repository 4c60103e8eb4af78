#include "ops/cuda/gemm_epilogue.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "ops/fused_ops.h"
#include "ops/weight_casts.h"

#ifdef NALA_WITH_CUTLASS
#include "ops/cutlass/gemm_bias.h"
#include "ops/cutlass/gemm_dgelu.h"
#endif

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
  bool soft = false;  // an error of the heuristic or of the run means "no algorithm" (a bias gradient's float32 try), not a failure
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

// The algorithms chosen by timing (the GEMMs' tune flag), by shape: m, n, k, dtype, epilogue, the four
// alignments, the device and the operands' transposes (bit 0: A, bit 1: B)
using TuneKey = std::tuple<int64_t, int64_t, int64_t, int, int, uint32_t, uint32_t, uint32_t, uint32_t, int, int>;
struct Choice {
  bool other = false;  // the caller's other kernel (gemm_bias: CUTLASS), not cuBLASLt
  cublasLtMatmulAlgo_t algo{};
};
std::mutex g_tuned_mutex;
std::map<TuneKey, Choice> g_tuned;
int64_t g_timings = 0;  // shapes timed (a cache hit adds nothing): tests

// NALA_GEMM_TUNE_LOG=1: the tuner prints what it timed (benchmarks); read once
bool tune_log() {
  static const bool on = [] {
    const char* v = std::getenv("NALA_GEMM_TUNE_LOG");
    return v && std::string(v) == "1";
  }();
  return on;
}

// µs of one run of `run` on `stream`: the median of 3 after a warm-up (the GEMMs here take 0.1–1 ms);
// −1 where a run or an event call failed (the error is cleared: the caller falls back, untimed)
float time_us(cudaStream_t stream, const std::function<bool()>& run) {
  if (!run()) return -1.f;
  cudaEvent_t a = nullptr, b = nullptr;
  bool ok = cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess;
  std::vector<float> ts;
  for (int r = 0; r < 3 && ok; ++r) {
    ok = cudaEventRecord(a, stream) == cudaSuccess && run() && cudaEventRecord(b, stream) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess;
    float ms = 0;
    ok = ok && cudaEventElapsedTime(&ms, a, b) == cudaSuccess;
    ts.push_back(ms * 1000.f);
  }
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
  if (!ok) {
    (void)cudaGetLastError();
    return -1.f;
  }
  std::sort(ts.begin(), ts.end());
  return ts[1];
}

// Runs the GEMM that `desc` describes (op, layouts a, b and d, d also C's) with the first algorithm
// cuBLASLt's heuristic offers for operands of the given alignments (A, B, C, D), or with `tune` the
// fastest of its first 8 and of `other` (another kernel computing the same D, where given; it returns
// false where it cannot run), timed once a shape outside a graph capture (see gemm_bias); false, and
// nothing run, where cuBLASLt offers no algorithm.
bool launch(Desc& desc, const void* alpha, const void* beta, const void* A, const void* B, const void* C, void* D, const char* name,
            const std::array<uint32_t, 4>& align, const TuneKey* tune = nullptr, const std::function<bool()>* other = nullptr) {
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
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(handle, desc.op, alpha, A, desc.a, B, desc.b, beta, C, desc.d, D, desc.d, &algo, ws, ws_size, stream);
  };
  if (tune) {
    std::unique_lock<std::mutex> lock(g_tuned_mutex);
    const auto it = g_tuned.find(*tune);
    if (it != g_tuned.end()) {
      const Choice c = it->second;
      lock.unlock();
      if (c.other) {
        TORCH_CHECK(other && (*other)(), name, ": the kernel chosen by timing for this shape failed");
      } else {
        check(matmul(c.algo), name);
      }
      return true;
    }
  }
  // time only outside a capture of this stream (timing synchronizes with the host); the callers
  // capture on the stream they run on, from one thread (models/cuda_graph.h)
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (tune) TORCH_CHECK(cudaStreamIsCapturing(stream, &capture) == cudaSuccess, name, ": cudaStreamIsCapturing failed");
  const bool timing = tune && capture == cudaStreamCaptureStatusNone;
  cublasLtMatmulHeuristicResult_t heur[8]{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref, timing ? 8 : 1, heur, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0) || (desc.soft && st != CUBLAS_STATUS_SUCCESS)) return false;
  check(st, "heuristic");
  int best = 0;
  if (timing) {  // every candidate writes the same D; the best one runs last, below
    float best_us = -1.f;
    std::string log;  // NALA_GEMM_TUNE_LOG=1: every candidate's time, then the choice, on stderr
    for (int i = 0; i < found; ++i) {
      const float us = time_us(stream, [&] { return matmul(heur[i].algo) == CUBLAS_STATUS_SUCCESS; });
      if (us > 0 && (best_us < 0 || us < best_us)) best = i, best_us = us;
      if (tune_log()) log += " " + std::to_string(int(us + 0.5f));
    }
    if (best_us < 0) {  // no timing came back (an event call failed): the heuristic's first, untimed and not kept
      const cublasStatus_t rs = matmul(heur[0].algo);
      if (desc.soft && rs != CUBLAS_STATUS_SUCCESS) return false;
      check(rs, name);
      return true;
    }
    Choice choice{false, heur[best].algo};
    float other_us = -1.f;
    if (other) {
      other_us = time_us(stream, *other);
      if (other_us > 0 && other_us < best_us) choice.other = true;
    }
    if (tune_log())
      std::fprintf(stderr, "gemm tune: %s m %lld n %lld k %lld epilogue %d: cuBLASLt µs%s (heuristic's order), other %s → %s\n", name,
                   static_cast<long long>(std::get<0>(*tune)), static_cast<long long>(std::get<1>(*tune)),
                   static_cast<long long>(std::get<2>(*tune)), std::get<4>(*tune), log.c_str(),
                   other ? std::to_string(int(other_us + 0.5f)).c_str() : "none",
                   choice.other ? "other" : ("cuBLASLt #" + std::to_string(best)).c_str());
    {
      std::lock_guard<std::mutex> lock(g_tuned_mutex);
      g_tuned[*tune] = choice;
      ++g_timings;
    }
    if (choice.other) {
      TORCH_CHECK((*other)(), name, ": the kernel chosen by timing failed");
      return true;
    }
  }
  const cublasStatus_t rs = matmul(heur[best].algo);
  if (desc.soft && rs != CUBLAS_STATUS_SUCCESS) return false;  // nothing written: the caller's other try
  check(rs, name);
  return true;
}

// Column-major cuBLASLt terms: D (m, n), ld m, = op(A) (m, k) · op(B) (k, n), with the epilogue set on
// `desc.op` by the caller; A stored (k, m) with ld k when transposed, else (m, k) with ld m; B stored
// (n, k) with ld n when transposed, else (k, n) with ld k. A row-major (R, C) matrix is a column-major
// (C, R) one with ld C. False, and nothing run, where cuBLASLt offers no algorithm.
bool run(Desc& desc, bool trans_a, int64_t m, int64_t n, int64_t k, cudaDataType_t dt, const void* A, const void* B, void* D,
         const char* name, bool tune = false, int epilogue = 0, const std::function<bool()>* other = nullptr, bool trans_b = false) {
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, ta, "TRANSA");
  set(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, tb, "TRANSB");
  check(trans_a ? cublasLtMatrixLayoutCreate(&desc.a, dt, k, m, k) : cublasLtMatrixLayoutCreate(&desc.a, dt, m, k, m), "layout A");
  check(trans_b ? cublasLtMatrixLayoutCreate(&desc.b, dt, n, k, n) : cublasLtMatrixLayoutCreate(&desc.b, dt, k, n, k), "layout B");
  check(cublasLtMatrixLayoutCreate(&desc.d, dt, m, n, m), "layout D");
  const float alpha = 1.f, beta = 0.f;
  const std::array<uint32_t, 4> align{alignment(A), alignment(B), alignment(D), alignment(D)};
  int device = 0;
  cudaGetDevice(&device);
  const TuneKey key{m, n, k, int(dt), epilogue, align[0], align[1], align[2], align[3], device, int(trans_a) | int(trans_b) << 1};
  return launch(desc, &alpha, &beta, A, B, D, D, name, align, tune ? &key : nullptr, other);
}

bool rows16(const at::Tensor& t) { return t.size(-1) % 8 == 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

}  // namespace

bool gemm_grads_supported(const at::Tensor& a, const at::Tensor& b) {
  return a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2 && a.is_contiguous() && b.is_contiguous() &&
         a.scalar_type() == b.scalar_type() && (a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf) && a.size(0) > 0 &&
         a.size(1) > 0 && b.size(1) > 0 && rows16(a) && rows16(b) && a.get_device() == b.get_device();
}

bool gemm_epilogue_supported(const at::Tensor& x, const at::Tensor& w) { return gemm_grads_supported(x, w) && w.size(0) % 8 == 0; }

std::array<at::Tensor, 2> gemm_bias_gelu_aux(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool tune) {
  TORCH_CHECK(gemm_epilogue_supported(x, w) && x.size(1) == w.size(1) && b.dim() == 1 && b.size(0) == w.size(0),
              "gemm_bias_gelu_aux: input ", x.sizes(), " ", x.scalar_type(), ", weight ", w.sizes(), " ", w.scalar_type(), " and bias ",
              b.sizes(), " do not fit (contiguous CUDA bf16/fp16, sizes multiples of 8)");
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t R = x.size(0), K = x.size(1), N = w.size(0);
  const at::Tensor bias = bias_operand(b, x.scalar_type()).contiguous();  // (N)
  at::Tensor h = at::empty({R, N}, x.options()), aux = at::empty({R, N}, x.options());  // (R, N) ×2
  Desc desc;
  check(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "epilogue");
  set(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data_ptr(), "bias pointer");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.data_ptr(), "aux pointer");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, N, "aux ld");
  // column-major: hᵀ (N, R) = wᵀ-stored (K, N) transposed · xᵀ (K, R)
  TORCH_CHECK(run(desc, true, N, R, K, cuda_dtype(x.scalar_type()), w.data_ptr(), x.data_ptr(), h.data_ptr(), "gemm_bias_gelu_aux", tune,
                  int(CUBLASLT_EPILOGUE_GELU_AUX_BIAS)),
              "gemm_bias_gelu_aux: cuBLASLt has no algorithm for ", R, "x", K, " -> ", N, " with this epilogue");
  return {h, aux};
}

namespace {
void check_dgelu_operands(const at::Tensor& g, const at::Tensor& w, const at::Tensor& aux, const char* name) {
  TORCH_CHECK(g.is_cuda() && g.dim() == 2 && w.dim() == 2 && aux.dim() == 2 && g.size(1) == w.size(0) && aux.size(0) == g.size(0) &&
                  aux.size(1) == w.size(1) && g.scalar_type() == w.scalar_type() && aux.scalar_type() == w.scalar_type() &&
                  g.is_contiguous() && w.is_contiguous() && aux.is_contiguous() && g.size(0) > 0 && rows16(g) && rows16(w) && rows16(aux),
              name, ": gradient ", g.sizes(), " ", g.scalar_type(), ", weight ", w.sizes(), " ", w.scalar_type(), " and aux ", aux.sizes(), " ",
              aux.scalar_type(), " do not fit (contiguous CUDA bf16/fp16, sizes multiples of 8)");
}

// The DGELU GEMM's description (aux read from `aux`, ld N) with `epilogue` (DGELU or DGELU_BGRAD)
void describe_dgelu(Desc& desc, cublasLtEpilogue_t epilogue, const at::Tensor& aux, int64_t N) {
  check(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "epilogue");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.data_ptr(), "aux pointer");
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, N, "aux ld");
}

// The tuning key's bit for a float32 bias gradient (the epilogue's value is below it)
constexpr int kFloatBiasKey = 1 << 20;
std::atomic<int64_t> g_bias_gradient_runs[2];  // [0]: in the output's dtype, [1]: in float32
// (epilogue, dtype, device) where cuBLASLt refused a float32 bias gradient: not asked again. cublasLt.h
// documents the bias gradient in the output's type (CUBLASLT_MATMUL_DESC_BIAS_POINTER), with exceptions
// for IMMA and FP8 kernels only, so the float32 try may well be refused every time.
std::mutex g_float_refused_mutex;
std::set<std::tuple<int, int, int>> g_float_refused;

// A bias gradient (n) from a GEMM epilogue that writes it (DGELU_BGRAD, BGRADB): `run_with(db, in_float)`
// describes and runs the GEMM with db as the bias pointer. First in float32 (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
// what the float32 bias parameter's gradient wants), then in the output's dtype (cuBLASLt's documented
// type for the bias gradient; what ATen's bf16 sum gives under autocast), returned in float32; undefined
// where cuBLASLt offers an algorithm for neither (the caller then sums the gradient itself).
at::Tensor bias_gradient_epilogue(const at::Tensor& like, int64_t n, int epilogue, const std::function<bool(const at::Tensor&, bool)>& run_with) {
  const std::tuple<int, int, int> kind{epilogue, int(like.scalar_type()), like.get_device()};
  bool try_float = false;
  {
    std::lock_guard<std::mutex> lock(g_float_refused_mutex);
    try_float = g_float_refused.count(kind) == 0;
  }
  for (bool in_float : {true, false}) {
    if (in_float && !try_float) continue;
    const at::Tensor db = at::empty({n}, like.options().dtype(in_float ? at::kFloat : like.scalar_type()));  // (n)
    if (run_with(db, in_float)) {
      ++g_bias_gradient_runs[in_float];
      return db.to(at::kFloat);  // (n)
    }
    if (in_float) {
      std::lock_guard<std::mutex> lock(g_float_refused_mutex);
      g_float_refused.insert(kind);
    }
  }
  return at::Tensor();
}

void set_bias_gradient(Desc& desc, const at::Tensor& db, bool in_float) {
  set(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, db.data_ptr(), "bias gradient pointer");
  if (in_float) set(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_32F), "bias gradient type");
  desc.soft = true;  // an epilogue cuBLASLt does not take is a "no": the other type, then the caller's column sum
}
}  // namespace

namespace {
std::atomic<int64_t> g_dgelu_cutlass_runs{0};
}  // namespace

int64_t gemm_dgelu_cutlass_runs() { return g_dgelu_cutlass_runs.load(); }

at::Tensor gemm_dgelu(const at::Tensor& g, const at::Tensor& w, const at::Tensor& aux, bool tune) {
  check_dgelu_operands(g, w, aux, "gemm_dgelu");
  const c10::cuda::CUDAGuard guard(g.device());
  const int64_t R = g.size(0), M = g.size(1), N = w.size(1);
  at::Tensor dy = at::empty({R, N}, g.options());  // (R, N)
#ifdef NALA_WITH_CUTLASS
  if (const DgeluGemm k = dgelu_gemm(); k != DgeluGemm::cublaslt && g.scalar_type() == at::kBFloat16) {
    const auto s = k == DgeluGemm::cutlass_pingpong ? cutlass_gemm::DgeluSchedule::pingpong : cutlass_gemm::DgeluSchedule::cooperative;
    const at::Tensor ws = at::empty({int64_t(std::max<size_t>(cutlass_gemm::gemm_dgelu_bf16_workspace(s, R, M, N), 1))},
                                    g.options().dtype(at::kByte));  // (bytes)
    std::string why;
    TORCH_CHECK(cutlass_gemm::gemm_dgelu_bf16(s, g.data_ptr(), w.data_ptr(), aux.data_ptr(), dy.data_ptr(), R, M, N, ws.data_ptr(),
                                              at::cuda::getCurrentCUDAStream().stream(), why),
                "gemm_dgelu: NALA_GEMM_DGELU's CUTLASS kernel cannot run ", R, "x", M, " -> ", N, ": ", why);
    ++g_dgelu_cutlass_runs;
    return dy;
  }
#endif
  Desc desc;
  describe_dgelu(desc, CUBLASLT_EPILOGUE_DGELU, aux, N);
  // column-major: dyᵀ (N, R) = w-stored (N, M) · gᵀ (M, R)
  TORCH_CHECK(run(desc, false, N, R, M, cuda_dtype(g.scalar_type()), w.data_ptr(), g.data_ptr(), dy.data_ptr(), "gemm_dgelu", tune,
                  int(CUBLASLT_EPILOGUE_DGELU)),
              "gemm_dgelu: cuBLASLt has no algorithm for ", R, "x", M, " -> ", N, " with this epilogue");
  return dy;
}

std::array<at::Tensor, 2> gemm_dgelu_bgrad(const at::Tensor& g, const at::Tensor& w, const at::Tensor& aux, bool tune) {
  check_dgelu_operands(g, w, aux, "gemm_dgelu_bgrad");
  const c10::cuda::CUDAGuard guard(g.device());
  const int64_t R = g.size(0), M = g.size(1), N = w.size(1);
  at::Tensor dy = at::empty({R, N}, g.options());  // (R, N)
  // column-major: dyᵀ (N, R) = w-stored (N, M) · gᵀ (M, R); the bias gradient sums D's rows' (N) entries over its R columns
  const at::Tensor db = bias_gradient_epilogue(g, N, int(CUBLASLT_EPILOGUE_DGELU_BGRAD), [&](const at::Tensor& b, bool in_float) {
    Desc desc;
    describe_dgelu(desc, CUBLASLT_EPILOGUE_DGELU_BGRAD, aux, N);
    set_bias_gradient(desc, b, in_float);
    return run(desc, false, N, R, M, cuda_dtype(g.scalar_type()), w.data_ptr(), g.data_ptr(), dy.data_ptr(), "gemm_dgelu_bgrad", tune,
               int(CUBLASLT_EPILOGUE_DGELU_BGRAD) | (in_float ? kFloatBiasKey : 0));
  });
  if (!db.defined()) return {};
  return {dy, db};
}

at::Tensor gemm_bias(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool gelu, bool tune) {
  TORCH_CHECK(gemm_epilogue_supported(x, w) && x.size(1) == w.size(1) && b.dim() == 1 && b.size(0) == w.size(0),
              "gemm_bias: input ", x.sizes(), " ", x.scalar_type(), ", weight ", w.sizes(), " ", w.scalar_type(), " and bias ", b.sizes(),
              " do not fit (contiguous CUDA bf16/fp16, sizes multiples of 8)");
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t R = x.size(0), K = x.size(1), N = w.size(0);
  const at::Tensor bias = bias_operand(b, x.scalar_type()).contiguous();  // (N)
  at::Tensor y = at::empty({R, N}, x.options());                // (R, N)
  Desc desc;
  check(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasLtEpilogue_t epilogue = gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "epilogue");
  set(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data_ptr(), "bias pointer");
  // CUTLASS's GEMM as one more candidate where it is built and computes this (bf16, no GELU)
  std::function<bool()> cutlass;
#ifdef NALA_WITH_CUTLASS
  if (tune && !gelu && x.scalar_type() == at::kBFloat16 && R <= 2147483647) {
    const size_t ws_bytes = cutlass_gemm::gemm_bias_bf16_workspace(R, N, K);
    const at::Tensor ws = at::empty({int64_t(std::max<size_t>(ws_bytes, 1))}, x.options().dtype(at::kByte));  // (bytes)
    cutlass = [&, ws] {
      std::string why;
      return cutlass_gemm::gemm_bias_bf16(x.data_ptr(), w.data_ptr(), bias.data_ptr(), y.data_ptr(), R, N, K, ws.data_ptr(),
                                          at::cuda::getCurrentCUDAStream().stream(), why);
    };
  }
#endif
  // column-major: yᵀ (N, R) = w-stored (K, N) transposed · xᵀ (K, R)
  if (!run(desc, true, N, R, K, cuda_dtype(x.scalar_type()), w.data_ptr(), x.data_ptr(), y.data_ptr(), "gemm_bias", tune, int(epilogue),
           cutlass ? &cutlass : nullptr))
    return at::Tensor();  // no algorithm with this epilogue: the caller takes ATen's path
  return y;
}

namespace {
// D (rows, cols) row-major = the column-major product run() describes with m = cols, n = rows, no
// epilogue: the two backward GEMMs below; undefined where cuBLASLt offers no algorithm
at::Tensor plain_gemm(const at::Tensor& like, int64_t rows, int64_t cols, int64_t k, const at::Tensor& A, const at::Tensor& B, bool trans_b,
                      const char* name, bool tune) {
  const c10::cuda::CUDAGuard guard(like.device());
  at::Tensor out = at::empty({rows, cols}, like.options());  // (rows, cols)
  Desc desc;
  check(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  if (!run(desc, false, cols, rows, k, cuda_dtype(like.scalar_type()), A.data_ptr(), B.data_ptr(), out.data_ptr(), name, tune,
           int(CUBLASLT_EPILOGUE_DEFAULT), nullptr, trans_b))
    return at::Tensor();
  return out;
}

void check_wgrad_operands(const at::Tensor& g, const at::Tensor& x, const char* name) {
  TORCH_CHECK(gemm_grads_supported(g, x) && g.size(0) == x.size(0), name, ": gradient ", g.sizes(), " ", g.scalar_type(), " and input ",
              x.sizes(), " ", x.scalar_type(), " do not fit (contiguous CUDA bf16/fp16, rows multiples of 8)");
}
}  // namespace

at::Tensor gemm_dgrad(const at::Tensor& g, const at::Tensor& w, bool tune) {
  TORCH_CHECK(gemm_grads_supported(g, w) && g.size(1) == w.size(0), "gemm_dgrad: gradient ", g.sizes(), " ", g.scalar_type(),
              " and weight ", w.sizes(), " ", w.scalar_type(), " do not fit (contiguous CUDA bf16/fp16, rows multiples of 8)");
  // column-major: dxᵀ (N, R) = w-stored (N, M) · gᵀ (M, R)
  return plain_gemm(g, g.size(0), w.size(1), g.size(1), w, g, /*trans_b=*/false, "gemm_dgrad", tune);  // (R, N)
}

at::Tensor gemm_wgrad(const at::Tensor& g, const at::Tensor& x, bool tune) {
  check_wgrad_operands(g, x, "gemm_wgrad");
  // column-major: dwᵀ (N, M) = x-stored (N, R) · (g-stored (M, R))ᵀ
  return plain_gemm(g, g.size(1), x.size(1), g.size(0), x, g, /*trans_b=*/true, "gemm_wgrad", tune);  // (M, N)
}

std::array<at::Tensor, 2> gemm_wgrad_bgrad(const at::Tensor& g, const at::Tensor& x, bool tune) {
  check_wgrad_operands(g, x, "gemm_wgrad_bgrad");
  const c10::cuda::CUDAGuard guard(g.device());
  const int64_t R = g.size(0), M = g.size(1), N = x.size(1);
  at::Tensor dw = at::empty({M, N}, g.options());  // (M, N)
  // column-major: dwᵀ (N, M) = x-stored (N, R) · (g-stored (M, R))ᵀ: B = gᵀ (R, M), whose sum over the
  // GEMM's k = R is Σ_rows g (M), the bias gradient BGRADB writes
  const at::Tensor db = bias_gradient_epilogue(g, M, int(CUBLASLT_EPILOGUE_BGRADB), [&](const at::Tensor& b, bool in_float) {
    Desc desc;
    check(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    set(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BGRADB, "epilogue");
    set_bias_gradient(desc, b, in_float);
    return run(desc, false, N, M, R, cuda_dtype(g.scalar_type()), x.data_ptr(), g.data_ptr(), dw.data_ptr(), "gemm_wgrad_bgrad", tune,
               int(CUBLASLT_EPILOGUE_BGRADB) | (in_float ? kFloatBiasKey : 0), nullptr, /*trans_b=*/true);
  });
  if (!db.defined()) return {};
  return {dw, db};
}

int64_t gemm_bias_gradient_runs(bool in_float) { return g_bias_gradient_runs[in_float].load(); }

int64_t gemm_timings() {
  std::lock_guard<std::mutex> lock(g_tuned_mutex);
  return g_timings;
}

void gemm_tuned_clear() {
  std::lock_guard<std::mutex> lock(g_tuned_mutex);
  g_tuned.clear();
}

int64_t gemm_tuned_shapes(bool other_only) {
  std::lock_guard<std::mutex> lock(g_tuned_mutex);
  int64_t n = 0;
  for (const auto& [key, choice] : g_tuned) n += !other_only || choice.other;
  return n;
}

bool gemm_cutlass_built() {
#ifdef NALA_WITH_CUTLASS
  return true;
#else
  return false;
#endif
}

}  // namespace nala::ops::cuda
