// Fused NaLa attention kernels (docs/nala_attention.md §3-§4), device code only. Included by the per-dtype
// instantiation files; nala_launch.cu picks the instantiation; nala_cuda.cpp checks arguments.
//
// Algorithm. Per (batch, head) the state is S = (1/N) Σ_i φ_k(k_i) v_iᵀ (F×Dp) and z (F):
//   forward   state_kernel    token tiles of k, v -> φ_k in shared memory -> S, z partials per
//                             sequence chunk (tensor-core tf32 mma, fp32 accumulate)
//             reduce_kernel   partials summed in chunk order (deterministic), times 1/N
//             output_kernel   token tiles of q -> φ_q -> o = φ_q S / (φ_q·z + ε); saves den per token
//   backward  dq_kernel       g = do/den; dφ_q = g Sᵀ − c z with c_t = φ_q,t·(g Sᵀ)_t / den_t
//                             (= do_t·o_t / den_t); dq through φ_q's backward; partials of
//                             dS = Σ φ_qᵀ g and dz = −Σ φ_q c
//             reduce_kernel   dS, dz summed in chunk order
//             dkv_kernel      dv = φ_k dS / N; dφ_k = (v dSᵀ + dz) / N; dk through φ_k's backward
// Nothing O(N²) exists; the only saved tensors are S, z and den.
//
// Layouts: every shared-memory tile is fp32 row-major with a padded leading dimension chosen
// against bank conflicts for the way the products read it (ld_row / ld_col). Token t of a tile is
// handled by TPT = threads / tile consecutive lanes (element j = lane + TPT·i), so per-token
// reductions are warp shuffles. Matrix products use mma.sync m16n8k8 tf32, register-blocked per
// warp; with SPLIT each operand is split into a tf32 high part and a tf32 residual
// (a·b ≈ ah·bh + ah·bl + al·bh), which brings fp32/fp16 inputs to fp32-class accuracy; bf16 inputs
// use plain tf32, whose error is below bf16's output rounding.
#pragma once
#include "attention/cuda/backward_kernels.cuh"
#include "attention/cuda/forward_kernels.cuh"
