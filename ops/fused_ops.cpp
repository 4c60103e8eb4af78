#include "ops/fused_ops.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <ATen/autocast_mode.h>

#include "ops/weight_casts.h"

namespace nala::ops {
namespace {

std::atomic<int> g_fused{-1};     // -1: not read from the environment yet
std::atomic<int> g_epilogues{-1};
std::atomic<int> g_gemm_tune{-1};
std::atomic<int> g_gemm_tune_train{-1};
std::atomic<int> g_gemm_bgrad{-1};
std::atomic<int> g_dgelu_gemm{-1};
std::atomic<int> g_recompute{-1};
std::atomic<int> g_fp8_mlp{-1};
std::atomic<int> g_fp8_ln{-1};
std::atomic<int> g_fp8_gelu{-1};
std::atomic<int> g_residual_norm{-1};
std::atomic<int> g_residual_norm_train{-1};
std::atomic<int> g_residual_norm_train_bwd{-1};
std::atomic<int> g_split_heads_bias{-1};
std::atomic<int> g_block_sums{-1};
std::atomic<int> g_gather_sum_grouped{-1};
std::atomic<int> g_residual_staged{-1};
std::atomic<int> g_qkvg_in_place{-1};
std::atomic<int> g_qkvg_column_sums{-1};
std::atomic<int> g_weight_casts{-1};
std::atomic<int> g_residual_dy_sums{-1};
std::atomic<int> g_stacked_modulation{-1};
std::atomic<int> g_stacked_casts{-1};
std::atomic<int> g_fused_optimizer{-1};
std::atomic<int> g_patch_embed_pos{-1};
std::atomic<int64_t> g_recomputations{0};

int switch_from_environment(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const std::string s(v);
  if (s == "1") return 1;
  if (s == "0") return 0;
  throw std::runtime_error(std::string("environment variable ") + name + "='" + s + "' must be 0 or 1");
}

bool read_switch(std::atomic<int>& state, const char* name, int fallback) {
  int v = state.load();
  if (v < 0) {
    v = switch_from_environment(name, fallback);
    state = v;
  }
  return v == 1;
}

}  // namespace

bool fused_block_ops() { return read_switch(g_fused, "NALA_FUSED_BLOCKS", 1); }
void set_fused_block_ops(bool on) { g_fused = on ? 1 : 0; }

bool gemm_epilogues() { return read_switch(g_epilogues, "NALA_GEMM_EPILOGUES", 1); }
void set_gemm_epilogues(bool on) { g_epilogues = on ? 1 : 0; }
bool gemm_tuned() { return read_switch(g_gemm_tune, "NALA_GEMM_TUNE", 0); }
void set_gemm_tuned(bool on) { g_gemm_tune = on ? 1 : 0; }
bool gemm_tuned_training() { return read_switch(g_gemm_tune_train, "NALA_GEMM_TUNE_TRAIN", 0); }
void set_gemm_tuned_training(bool on) { g_gemm_tune_train = on ? 1 : 0; }
bool gemm_bias_grads() { return read_switch(g_gemm_bgrad, "NALA_GEMM_BGRAD", 0); }
void set_gemm_bias_grads(bool on) { g_gemm_bgrad = on ? 1 : 0; }
DgeluGemm dgelu_gemm_from(const std::string& s) {
  DgeluGemm k;
  if (s.empty() || s == "cublaslt") k = DgeluGemm::cublaslt;
  else if (s == "cutlass-pingpong") k = DgeluGemm::cutlass_pingpong;
  else if (s == "cutlass-cooperative") k = DgeluGemm::cutlass_cooperative;
  else throw std::runtime_error("environment variable NALA_GEMM_DGELU='" + s + "' must be cublaslt, cutlass-pingpong or cutlass-cooperative");
#ifndef NALA_WITH_CUTLASS
  if (k != DgeluGemm::cublaslt)
    throw std::runtime_error("environment variable NALA_GEMM_DGELU='" + s + "': this build has no CUTLASS (CMakeLists.txt NALA_CUTLASS_INCLUDE)");
#endif
  return k;
}
DgeluGemm dgelu_gemm() {
  int v = g_dgelu_gemm.load();
  if (v < 0) {
    const char* e = std::getenv("NALA_GEMM_DGELU");
    v = int(dgelu_gemm_from(e ? e : ""));
    g_dgelu_gemm = v;
  }
  return DgeluGemm(v);
}
void set_dgelu_gemm(DgeluGemm k) { g_dgelu_gemm = int(k); }

bool recompute_saved() { return read_switch(g_recompute, "NALA_RECOMPUTE", 0); }
void set_recompute_saved(bool on) { g_recompute = on ? 1 : 0; }
bool fp8_mlp_fused() { return read_switch(g_fp8_mlp, "NALA_FP8_MLP_FUSED", 1); }
void set_fp8_mlp_fused(bool on) { g_fp8_mlp = on ? 1 : 0; }
bool fp8_ln_fused() { return read_switch(g_fp8_ln, "NALA_FP8_LN_FUSED", 1); }
void set_fp8_ln_fused(bool on) { g_fp8_ln = on ? 1 : 0; }
bool fp8_fast_gelu() { return read_switch(g_fp8_gelu, "NALA_FP8_FAST_GELU", 1); }
void set_fp8_fast_gelu(bool on) { g_fp8_gelu = on ? 1 : 0; }
bool residual_norm_fused() { return read_switch(g_residual_norm, "NALA_RESIDUAL_NORM_FUSED", 1); }
void set_residual_norm_fused(bool on) { g_residual_norm = on ? 1 : 0; }
bool residual_norm_fused_training() { return read_switch(g_residual_norm_train, "NALA_RESIDUAL_NORM_TRAIN", 1); }
void set_residual_norm_fused_training(bool on) { g_residual_norm_train = on ? 1 : 0; }
bool residual_norm_training_backward_fused() { return read_switch(g_residual_norm_train_bwd, "NALA_RESIDUAL_NORM_TRAIN_BWD", 1); }
void set_residual_norm_training_backward_fused(bool on) { g_residual_norm_train_bwd = on ? 1 : 0; }
bool split_heads_bias_sums() { return read_switch(g_split_heads_bias, "NALA_SPLIT_HEADS_BIAS", 1); }
void set_split_heads_bias_sums(bool on) { g_split_heads_bias = on ? 1 : 0; }
void reset_split_heads_bias_sums() { g_split_heads_bias = -1; }
bool block_sums_fused() { return read_switch(g_block_sums, "NALA_BLOCK_SUMS_FUSED", 1); }
void set_block_sums_fused(bool on) { g_block_sums = on ? 1 : 0; }
bool gather_sum_grouped() { return read_switch(g_gather_sum_grouped, "NALA_GATHER_SUM_GROUPED", 1); }
void set_gather_sum_grouped(bool on) { g_gather_sum_grouped = on ? 1 : 0; }
bool residual_norm_staged() { return read_switch(g_residual_staged, "NALA_RESIDUAL_NORM_STAGED", 1); }
void set_residual_norm_staged(bool on) { g_residual_staged = on ? 1 : 0; }
bool qkvg_grads_in_place() { return read_switch(g_qkvg_in_place, "NALA_QKVG_GRADS_IN_PLACE", 1); }
void set_qkvg_grads_in_place(bool on) { g_qkvg_in_place = on ? 1 : 0; }
bool qkvg_column_sums_in_kernel() { return read_switch(g_qkvg_column_sums, "NALA_QKVG_COLUMN_SUMS", 1); }
void set_qkvg_column_sums_in_kernel(bool on) { g_qkvg_column_sums = on ? 1 : 0; }

bool residual_dy_sums() { return read_switch(g_residual_dy_sums, "NALA_RESIDUAL_DY_SUMS", 1); }
void set_residual_dy_sums(bool on) { g_residual_dy_sums = on ? 1 : 0; }
bool stacked_modulation() { return read_switch(g_stacked_modulation, "NALA_STACKED_MODULATION", 1); }
void set_stacked_modulation(bool on) { g_stacked_modulation = on ? 1 : 0; }
bool stacked_casts() { return read_switch(g_stacked_casts, "NALA_STACKED_CASTS", 1); }
void set_stacked_casts(bool on) { g_stacked_casts = on ? 1 : 0; }
bool patch_embed_pos_fused() { return read_switch(g_patch_embed_pos, "NALA_PATCH_EMBED_POS", 1); }
void set_patch_embed_pos_fused(bool on) { g_patch_embed_pos = on ? 1 : 0; }
bool fused_optimizer() { return read_switch(g_fused_optimizer, "NALA_FUSED_OPTIMIZER", 1); }
void set_fused_optimizer(bool on) { g_fused_optimizer = on ? 1 : 0; }
bool weight_casts_enabled() { return read_switch(g_weight_casts, "NALA_WEIGHT_CASTS", 1); }
void set_weight_casts_enabled(bool on) { g_weight_casts = on ? 1 : 0; }

int64_t recomputations() { return g_recomputations.load(); }
void count_recomputation() { ++g_recomputations; }

at::ScalarType fused_result_dtype(const at::Tensor& x) {
  if (x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA)) return at::autocast::get_autocast_dtype(at::kCUDA);
  return x.scalar_type();
}

at::Tensor autocast_gemm_operand(const at::Tensor& t) {
  if (t.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA)) {
    const at::ScalarType dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    if (at::Tensor c = WeightCasts::operand(t, dtype); c.defined()) return c;  // the step's cast, made with all the others
    return at::autocast::cached_cast(dtype, t, c10::DeviceType::CUDA);
  }
  return t;
}

at::Tensor autocast_stacked_gemm_operand(const std::vector<at::Tensor>& ts) {
  if (!ts.empty() && ts.front().is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA))
    if (at::Tensor c = WeightCasts::stacked_operand(ts, at::autocast::get_autocast_dtype(at::kCUDA)); c.defined()) return c;  // (Σ rows, cols)
  std::vector<at::Tensor> parts;
  for (const auto& t : ts) parts.push_back(autocast_gemm_operand(t));  // (rows_k, cols)
  return at::cat(parts);                                               // (Σ rows, cols)
}

}  // namespace nala::ops
