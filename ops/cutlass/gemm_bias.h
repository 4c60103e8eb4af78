// A CUTLASS 4 GEMM for the bf16 bias linears of sampling, as one more candidate beside cuBLASLt's
// algorithms when NALA_GEMM_TUNE=1 times them (ops/cuda/gemm_epilogue.h gemm_bias). On the H200 its
// 128×192 tile ran fc2's GEMM of DiT-XL/2 sampling (32,768 × 4,608 → 1,152) in 451 µs against the
// 475 of cuBLASLt's first algorithm, with bit-identical outputs (bench/gated_gemm_probe.cu,
// docs/benchmarks.md, twenty-first session). Plain types here: CUTLASS's headers stay in
// ops/cutlass/gemm_bias.cu, compiled for sm_90a only where the build found them (CMakeLists.txt,
// NALA_CUTLASS_INCLUDE; scripts/setup.sh fetches the nvidia-cutlass wheel's headers).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nala::ops::cutlass_gemm {

// y (R, N) = x (R, K) wᵀ + b: x, w (N, K) and y row-major bf16, b (N) bf16, rounded once to bf16 as
// cuBLASLt's BIAS epilogue rounds it. K and N multiples of 8, every pointer 16-byte aligned.
// Returns false with the reason in why where CUTLASS cannot run it (nothing launched then).
size_t gemm_bias_bf16_workspace(int64_t R, int64_t N, int64_t K);
bool gemm_bias_bf16(const void* x, const void* w, const void* b, void* y, int64_t R, int64_t N, int64_t K, void* workspace, void* stream,
                    std::string& why);

}  // namespace nala::ops::cutlass_gemm
