// Plain parameter structs of the fused DiT block kernels (no LibTorch types; ops/cuda/
// block_cuda.cpp checks every argument and fills them). Layouts, elements (not bytes):
//   x, y, out, dout, dres, dx, dy (rows = N·T, D) contiguous, D % 4 == 0, 16-byte aligned starts
//   shift, scale, gate          (N, D) SampleVec: one vector per sample, broadcast over T, read
//                               where it lies (an adaLN chunk: rows 6·D apart), any kernel dtype
//   mean, rstd                  (rows,) float32: LayerNorm statistics the forward saves
//   dscale_part, dshift_part, dgate_part  (N, chunks, D) float32: per-chunk sums over the chunk's
//                               tokens; block_cuda.cpp sums them over chunks (in order: deterministic)
#pragma once
#include <cstdint>

namespace nala::ops::cuda {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2 };

// A per-sample vector (shift, scale, gate): sample n's D values start at element n·stride of p, one
// element apart, of type `type`: adaLN's output chunks read in place, with no float32 copy a chunk
// (one launch each, 6 a DiT block). 4-element loads: p and stride keep them aligned (block_cuda.cpp
// checks, and copies where not).
struct SampleVec {
  const void* p = nullptr;
  int64_t stride = 0;  // elements between samples
  DType type = DType::F32;
};

struct RowShape {
  int64_t N = 0;   // samples
  int64_t T = 0;   // tokens per sample
  int D = 0;       // channels
  int rows_per_chunk = 32;  // tokens per block of the reducing backward kernels
  int chunks() const { return int((T + rows_per_chunk - 1) / rows_per_chunk); }
};

// out = LayerNorm(x) · (1 + scale) + shift   (no affine, eps; DiT models.py:19-20, 101-123)
struct LayerNormModulateParams {
  RowShape s;
  float eps = 1e-6f;
  DType x_type = DType::F32, out_type = DType::F32;
  const void* x = nullptr;
  SampleVec shift, scale;
  void* out = nullptr;
  float* mean = nullptr;  // may be null (no backward follows)
  float* rstd = nullptr;
  // backward
  const void* dout = nullptr;
  const void* dres = nullptr;  // may be null: a gradient reaching x by another path (the residual), added to dx
  void* dx = nullptr;
  float* dscale_part = nullptr;
  float* dshift_part = nullptr;
};

// out = x + gate · y   (the gated residual, DiT models.py:117-118)
struct GatedResidualParams {
  RowShape s;
  DType x_type = DType::F32, y_type = DType::F32;  // out and dout have x's type
  const void* x = nullptr;
  const void* y = nullptr;
  SampleVec gate;
  void* out = nullptr;
  // backward: dy = dout · gate, dgate = Σ_T dout · y (dx = dout needs no kernel)
  const void* dout = nullptr;
  void* dy = nullptr;
  float* dgate_part = nullptr;
  // the training backward's option (launch_residual_layer_norm_modulate_training_backward, D ≤ 768):
  // Σ_T dy as stored, per (sample, chunk) as dgate_part, or null
  float* dy_part = nullptr;
};

// Sampling: res = x + gate · y and out = LayerNorm(res) · (1 + scale) + shift in one pass (the gated
// residual and the LayerNorm-modulate after it), x, y, res, out of one type; with q set, out's e4m3
// rows (q (rows, D) bytes, qscale (rows,) float32, as launch_layer_norm_modulate_quantize) instead of out.
struct ResidualNormParams {
  RowShape s;
  float eps = 1e-6f;
  DType type = DType::BF16;
  const void* x = nullptr;
  const void* y = nullptr;
  SampleVec gate, shift, scale;
  void* res = nullptr;
  void* out = nullptr;
  uint8_t* q = nullptr;
  float* qscale = nullptr;
  // the persistent kernel that stages rows in shared memory (ops/fused_ops.h residual_norm_staged)
  // where it takes the tensors; the same bits either way
  bool staged = false;
};

// Training: res = x + gate · y (x, res in x_type; y in y_type) and out = LayerNorm(res) · (1 + scale) +
// shift in y_type, with the statistics the backward reads: the gated residual's and the
// LayerNorm-modulate's forward kernels bit for bit, one read of res fewer. Type pairs as the gated
// residual's (x_type == y_type, or x_type float32).
struct ResidualNormTrainParams {
  RowShape s;
  float eps = 1e-6f;
  DType x_type = DType::F32, y_type = DType::BF16;
  const void* x = nullptr;
  const void* y = nullptr;
  SampleVec gate, shift, scale;
  void* res = nullptr;
  void* out = nullptr;
  float* mean = nullptr;  // (rows,)
  float* rstd = nullptr;
};

// out = GELU_tanh(y + bias)   (fc1 of the MLP, DiT models.py uses nn.GELU(approximate="tanh"))
struct BiasGeluParams {
  int64_t rows = 0;  // y viewed as (rows, F)
  int F = 0;         // F % 4 == 0
  int rows_per_chunk = 64;
  int chunks() const { return int((rows + rows_per_chunk - 1) / rows_per_chunk); }
  DType y_type = DType::BF16;  // out, dout and dy have y's type
  const void* y = nullptr;
  const float* bias = nullptr;  // (F,)
  void* out = nullptr;
  // backward: dy = dout · GELU'(y + bias), dbias = Σ_rows dy (partials (chunks, F) float32)
  const void* dout = nullptr;
  void* dy = nullptr;
  float* dbias_part = nullptr;
};

// The backward kernels' per-chunk partials summed: out_k (N, D) = Σ_c part_k (N, chunks, D) in c order,
// float32, written in out_type (the per-sample vectors' own type: no conversion launch after it),
// for up to three partial arrays in one launch (the gated backward's dshift, dscale, dgate).
struct PartialSumsParams {
  static constexpr int kMax = 3;
  const float* part[kMax] = {nullptr, nullptr, nullptr};
  void* out[kMax] = {nullptr, nullptr, nullptr};
  int count = 0;
  int64_t N = 0;
  int chunks = 0, D = 0;
  DType out_type = DType::F32;
};
void launch_partial_sums(const PartialSumsParams& p, void* stream);

// The (x, out) or (x, y) type pairs the kernels are built for; others use the ATen composition.
bool layer_norm_modulate_supported(DType x, DType out, int D);
bool gated_residual_supported(DType x, DType y, int D);

// Launch on `stream` (a cudaStream_t); throw std::runtime_error on launch errors.
void launch_layer_norm_modulate_forward(const LayerNormModulateParams& p, void* stream);
void launch_layer_norm_modulate_backward(const LayerNormModulateParams& p, void* stream);
// FP8 sampling: the forward's out (rounded to out_type, not written) quantized row by row to e4m3
// for the next GEMM (ops/linear_fp8.h): q (rows, D) bytes, qscale (rows,) float32; p.out, mean, rstd unused.
void launch_layer_norm_modulate_quantize(const LayerNormModulateParams& p, uint8_t* q, float* qscale, void* stream);
bool residual_layer_norm_modulate_supported(DType t, int D);
// launches of the staged residual kernel so far (ResidualNormParams::staged): tests see that it ran
int64_t residual_staged_launches();
void launch_residual_layer_norm_modulate(const ResidualNormParams& p, void* stream);
bool residual_layer_norm_modulate_training_supported(DType x, DType y, int D);
void launch_residual_layer_norm_modulate_training(const ResidualNormTrainParams& p, void* stream);
// Training's backward of the same pass: launch_layer_norm_modulate_backward's p (x = res, dout in
// p.out_type = g.y_type, dres may be null) and launch_gated_residual_backward's g (y, gate, dy,
// dgate_part; g.dout unused: dx is p.dx, not read back) in one kernel, the two launches' results bit for bit.
bool residual_layer_norm_modulate_training_backward_supported(DType x, DType y, int D);
void launch_residual_layer_norm_modulate_training_backward(const LayerNormModulateParams& p, const GatedResidualParams& g, void* stream);
void launch_gated_residual_forward(const GatedResidualParams& p, void* stream);
void launch_gated_residual_backward(const GatedResidualParams& p, void* stream);
void launch_bias_gelu_forward(const BiasGeluParams& p, void* stream);
void launch_bias_gelu_backward(const BiasGeluParams& p, void* stream);

}  // namespace nala::ops::cuda
