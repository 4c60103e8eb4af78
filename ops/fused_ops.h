// One switch for every fused block operation (the DiT block chains of ops/block_ops.h and the
// gated NaLa block's tail of attention/gated_tail.h): NALA_FUSED_BLOCKS=1 (default) runs the fused
// operations with their own backward (CUDA kernels where they take the tensors); 0 runs the plain
// ATen composition on every device, the unfused reference path. Any other value is an error.
#pragma once
#include <ATen/core/Tensor.h>

namespace nala::ops {

bool fused_block_ops();  // read from NALA_FUSED_BLOCKS at first use
void set_fused_block_ops(bool on);

// cuBLASLt GEMM epilogues in training (ops/mlp.h: fc1's bias + GELU in its GEMM, dGELU in the
// GEMM of fc2's input gradient): NALA_GEMM_EPILOGUES=1 (default: +2.3 % DiT-S/2, +1.7 % DiT-XL/2
// training img/s on the H200, docs/benchmarks.md) runs them, 0 keeps the bias-GELU kernel. Any
// other value is an error.
bool gemm_epilogues();
void set_gemm_epilogues(bool on);

// Memory for time in training: NALA_RECOMPUTE=1 has the gated NaLa block keep less for the
// backward and recompute it there (the attention's float32 state S, z, den from q, k, v:
// attention/nala_attention.h; the output projection's input y from the tail's u, and the gate g
// from the block's input: attention/blocks.h forward_recomputing); 0 (default) keeps it. Measured
// on the H200 for NaLaDiT-XL/2 at batch 256 with S and y recomputed (g and y's kernel came after):
// peak 107,592 → 98,239 MiB, step 507 → 573 ms (docs/benchmarks.md).
// Any other value is an error.
bool recompute_saved();
void set_recompute_saved(bool on);
// How many tensors backward passes have recomputed so far (the attention's state, y, g: one each
// time), so that tests can tell that a recomputation happened.
int64_t recomputations();
void count_recomputation();

// The dtype a fused operation returns for input x: the autocast dtype under CUDA autocast (what
// the next GEMM reads), else x's own.
at::ScalarType fused_result_dtype(const at::Tensor& x);

// A GEMM operand as autocast casts at::linear's inputs: under CUDA autocast t in the autocast
// dtype (autocast's cached cast, so a weight is cast once a forward), else t itself.
at::Tensor autocast_gemm_operand(const at::Tensor& t);

}  // namespace nala::ops
