#include "ops/fused_ops.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <ATen/autocast_mode.h>

namespace nala::ops {
namespace {

std::atomic<int> g_fused{-1};  // -1: not read from the environment yet

int fused_from_environment() {
  const char* v = std::getenv("NALA_FUSED_BLOCKS");
  if (!v || !*v) return 1;
  const std::string s(v);
  if (s == "1") return 1;
  if (s == "0") return 0;
  throw std::runtime_error("environment variable NALA_FUSED_BLOCKS='" + s + "' must be 0 or 1");
}

}  // namespace

bool fused_block_ops() {
  int v = g_fused.load();
  if (v < 0) {
    v = fused_from_environment();
    g_fused = v;
  }
  return v == 1;
}

void set_fused_block_ops(bool on) { g_fused = on ? 1 : 0; }

at::ScalarType fused_result_dtype(const at::Tensor& x) {
  if (x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA)) return at::autocast::get_autocast_dtype(at::kCUDA);
  return x.scalar_type();
}

}  // namespace nala::ops
