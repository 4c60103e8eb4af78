// CUTLASS 4 Hopper GEMMs for fc1's backward through GELU, as candidates for cuBLASLt's DGELU epilogue
// (ops/cuda/gemm_epilogue.h gemm_dgelu, chosen by NALA_GEMM_DGELU, ops/fused_ops.h):
//   dy (R, N) = GELU_tanh'(aux) ⊙ (g (R, M) · w (M, N))
// with g the gradient of fc2's output, w fc2's weight as stored (out M = D, in N = hidden), aux fc1's
// pre-activation (R, N) from the forward's GELU_AUX GEMM. At DiT-S/2's shape (R = 65,536, M = 384,
// N = 1,536) cuBLASLt runs this on a non-warp-specialized sm90_xmma kernel at 240 µs a launch, against
// 131 µs for a plain dgrad GEMM of the same shape (docs/benchmarks.md, twenty-sixth session); these are
// TMA warp-specialized kernels whose epilogue reads aux through TMA and applies CUTLASS's
// dGELU (the tanh approximation's derivative, cutlass/epilogue/thread/activation.h) in float.
// Plain types here: CUTLASS's headers stay in the .cu files (sm_90a only; CMakeLists.txt).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nala::ops::cutlass_gemm {

// The kernel's schedule: two consumer warp groups on alternating 128×128 tiles, one's epilogue under
// the other's main loop (ping-pong: for short K, where the epilogue is as long as the main loop), or
// both on one 128×256 tile (cooperative: the tile cuBLAS picks for the plain dgrad at DiT-S/2).
enum class DgeluSchedule { pingpong, cooperative };

// All row-major bf16; M and N multiples of 8, every pointer 16-byte aligned, R < 2^31. Returns false
// with the reason in why where CUTLASS cannot run it (nothing launched then).
size_t gemm_dgelu_bf16_workspace(DgeluSchedule s, int64_t R, int64_t M, int64_t N);
bool gemm_dgelu_bf16(DgeluSchedule s, const void* g, const void* w, const void* aux, void* dy, int64_t R, int64_t M, int64_t N, void* workspace,
                     void* stream, std::string& why);

}  // namespace nala::ops::cutlass_gemm
