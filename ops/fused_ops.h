// One switch for every fused block operation (the DiT block chains of ops/block_ops.h and the
// gated NaLa block's tail of attention/gated_tail.h): NALA_FUSED_BLOCKS=1 (default) runs the fused
// operations with their own backward (CUDA kernels where they take the tensors); 0 runs the plain
// ATen composition on every device, the unfused reference path. Any other value is an error.
#pragma once
#include <string>

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
// Sampling's bf16/fp16 linears with a bias (qkv, proj, fc1 with GELU, fc2) through nala's own cuBLASLt
// call with the algorithm timed (ops/cuda/gemm_epilogue.h gemm_bias): NALA_GEMM_TUNE=1 times the
// heuristic's first 8 algorithms for each shape at its first call outside a CUDA graph capture and
// keeps the fastest; 0 (default, until the H200 shows a gain: bench/gemm_algo_probe.cu) leaves them to
// ATen (at::linear, at::_addmm_activation), which takes the heuristic's first. Any other value is an
// error. Measured on the H200 (twenty-second session): DiT-XL/2 bf16 sampling 55.6 → 55.5 ms a step,
// within run-to-run spread; NALA_GEMM_TUNE_LOG=1 prints each timed shape's candidates and choice.
bool gemm_tuned();
void set_gemm_tuned(bool on);
// Training's bf16/fp16 GEMMs likewise: NALA_GEMM_TUNE_TRAIN=1 runs every linear layer's forward (bias
// epilogue; fc1's GELU_AUX_BIAS) and its two backward GEMMs (dgrad, wgrad; fc2's dgrad with DGELU)
// through nala's cuBLASLt calls with the algorithm timed once a shape, outside a CUDA graph capture
// (the training step's eager warm-up), and kept (ops/cuda/gemm_epilogue.h). 0 (default, until the
// H200 times a training step with it) leaves them to ATen and the heuristic's first. The probe
// (bench/gemm_algo_probe.cu, twenty-third session) found the first up to 16 % slower than the best of
// the first 8 at DiT-XL/2's 65,536 training rows, ≈ 15 ms of a 406 ms step. Any other value is an error.
bool gemm_tuned_training();
void set_gemm_tuned_training(bool on);
// Training's bias gradients from the GEMM epilogues that read the same gradient anyway: NALA_GEMM_BGRAD=1
// has every linear layer's weight-gradient GEMM write Σ_rows ∂L/∂y too (cuBLASLt BGRADB; qkv, proj, fc2,
// the final layer) and fc1's bias gradient come from the DGELU GEMM (DGELU_BGRAD), ops/cuda/gemm_epilogue.h,
// instead of nala's column-sum pass over each (R, out) gradient: for DiT-XL/2 at batch 256 that pass
// reads ≈ 1.36 GB a block (9 × 65,536 × 1,152 bf16), ≈ 8 ms a step at the H200's 4.8 TB/s. 0
// (default, until the H200 times a training step with it) keeps the column sums. With
// NALA_GEMM_TUNE_TRAIN=1 these GEMMs' algorithms are timed too. Any other value is an error.
bool gemm_bias_grads();
void set_gemm_bias_grads(bool on);
// fc1's DGELU GEMM in training, dy = GELU_tanh'(a) ⊙ (g w2) (ops/mlp.cpp, ops/cuda/gemm_epilogue.h
// gemm_dgelu), from NALA_GEMM_DGELU: `cublaslt` (default: cuBLASLt's DGELU epilogue, which at DiT-S/2's
// shape runs a non-warp-specialized kernel at 240 µs against 131 for the plain dgrad GEMM,
// docs/benchmarks.md), `cutlass-pingpong` or `cutlass-cooperative` (ops/cutlass/gemm_dgelu.h, bf16
// GEMMs; fp16 ones stay on cuBLASLt). Not timed on a GPU yet: the default until it is. A CUTLASS value
// in a build without CUTLASS, or any other value, is an error.
enum class DgeluGemm { cublaslt = 0, cutlass_pingpong = 1, cutlass_cooperative = 2 };
DgeluGemm dgelu_gemm();
void set_dgelu_gemm(DgeluGemm k);
DgeluGemm dgelu_gemm_from(const std::string& value);  // NALA_GEMM_DGELU's value ("" the default), or the error

// Memory for time in training: NALA_RECOMPUTE=1 has the gated NaLa block keep less for the
// backward and recompute it there: the block's attention, gate, tail and output projection run as
// one operation that keeps only q, k, v and the block's input (attention/gated_tail.h
// nala_mixer_recomputing), and its backward recomputes the attention's state and output, the gate
// g, the tail's u and the projection's input y (with RoPE the attention recomputes only its state
// and the tail keeps u); 0 (default) keeps them. Measured on the H200 for NaLaDiT-XL/2 at batch 256
// (CUDA graphs) with the state, g and y recomputed but u kept: peak 107,598 → 94,211 MiB (DiT-XL/2
// 93,767), step 497 → 530 ms (docs/benchmarks.md, 2026-12-03).
// Any other value is an error.
bool recompute_saved();
void set_recompute_saved(bool on);
// FP8 sampling's MLP with fc1's bias and GELU joined to fc2's row quantization in one kernel
// (ops/linear_fp8.h mlp_fp8): NALA_FP8_MLP_FUSED=1 (default) runs it, 0 keeps bias_gelu then
// quantize_rows, which it equals bit for bit (LinearFp8Cuda.BiasGeluQuantizeEqualsTheTwoKernels).
// Measured on the H200, DiT-XL/2 DDPM + CFG sampling at batch 64 with CUDA graphs: 51.4 → 49.0 ms
// a step (docs/benchmarks.md, 2026-12-03). Any other value is an error.
bool fp8_mlp_fused();
void set_fp8_mlp_fused(bool on);
// That joined kernel with GELU's sigmoid form and the hardware's exp and reciprocal (ops/cuda/gelu.cuh
// gelu_tanh_fast) instead of the accurate tanhf, which made it instruction-bound (8.0 ms of a 49 ms
// DiT-XL/2 step, 3× its memory floor): NALA_FP8_FAST_GELU=1 (default) runs it, 0 keeps tanhf. Within
// one e4m3 step of the accurate kernel (LinearFp8Cuda.BiasGeluQuantizeEqualsTheTwoKernels); measured
// on the H200, DiT-XL/2 fp8 DDPM + CFG sampling at batch 64 with CUDA graphs: 49.9 → 49.2 ms a step,
// forward error against fp32 5.530 → 5.526 % (docs/benchmarks.md, 2026-12-03, seventeenth session).
// Still instruction-bound (≈ 42 instructions an element, ≈ 260 µs a launch) until the 2026-12-04
// diet (ops/cuda/quantize_fp8_kernels.cu: a product by the row's inverse scale instead of a division
// an element, packed bf16 max and conversions, ex2/rcp in PTX; ≈ 23): 160 µs a launch at 57 % of DRAM
// bandwidth, fp8 sampling 45.1 → 41.0 ms a step; as a persistent grid staging rows by cp.async, 149 µs
// (twenty-first session). Any other value is an error.
bool fp8_fast_gelu();
void set_fp8_fast_gelu(bool on);
// FP8 sampling's LayerNorm-modulate writing the e4m3 rows of qkv's and fc1's input itself
// (ops/linear_fp8.h layer_norm_modulate_fp8; models/dit.cpp DiTBlock): NALA_FP8_LN_FUSED=1 (default)
// runs it, 0 writes the modulated tensor and quantizes it in the next linear, which it equals bit for
// bit (LinearFp8Cuda.DitLayerNormQuantizedInputEqualsTheUnfusedForward). Measured as above, with
// the fast GELU: 49.2 → 48.1 ms a step. Any other value is an error.
bool fp8_ln_fused();
void set_fp8_ln_fused(bool on);
// Sampling: each gated residual of the DiT blocks in one pass with the LayerNorm-modulate after it
// (the block's second, the next block's first, the final layer's; ops/block_ops.h
// gated_residual_layer_norm_modulate, with NALA_FP8_LN_FUSED=1 its e4m3 form in ops/linear_fp8.h;
// models/dit.cpp DiTBlock::forward_chained), one read of the residual stream fewer a residual; bit
// for bit the separate kernels (BlockKernels.DitForwardChainedEqualsTheBlocks). NALA_RESIDUAL_NORM_FUSED=1
// (default) runs it, 0 does not. Measured on the H200, DiT-XL/2 DDPM + CFG sampling at batch 64 with
// CUDA graphs: bf16 59.4 → 58.3 ms a step; fp8 with the two switches above 48.1 → 46.5 ms
// (docs/benchmarks.md, 2026-12-03, seventeenth session). Any other value is an error.
bool residual_norm_fused();
void set_residual_norm_fused(bool on);
// Training, with NALA_RESIDUAL_NORM_FUSED=1 (which chains the blocks the same way in training):
// NALA_RESIDUAL_NORM_TRAIN=1 (default) runs each gated residual and the LayerNorm-modulate after it as
// one autograd operation whose forward is one CUDA kernel (ops/block_ops.h
// gated_residual_layer_norm_modulate: the float32 residual stream not read back, ≈ 100 MB a residual
// at DiT-S/2's batch of 256), bit for bit the two operations forward and backward; 0 runs the two
// operations. Any other value is an error.
bool residual_norm_fused_training();
void set_residual_norm_fused_training(bool on);
// That operation's backward on CUDA: NALA_RESIDUAL_NORM_TRAIN_BWD=1 (default) runs it as one kernel
// (ops/cuda/block_kernels.cu ln_modulate_bwd with the gated residual's backward folded in: the
// residual's gradient dx written once, not read back, ≈ 100 MB a residual at DiT-S/2's batch of 256),
// bit for bit the two backward kernels, which 0 runs. Measured on an H100 (2026-12-05, docs/benchmarks.md,
// thirty-second session): DiT-S/2's step 35.6 -> 34.8 ms, NaLaDiT-S/2's 45.8 -> 45.2 ms. Any other value
// is an error.
bool residual_norm_training_backward_fused();
void set_residual_norm_training_backward_fused(bool on);
// The attention blocks' qkv (qkvg) projection and its split into heads in training on CUDA:
// NALA_SPLIT_HEADS_BIAS=1 (default) runs them as one operation whose backward sums the projection's bias
// gradient inside the gather of the heads' gradients (ops/split_heads.h linear_split_heads): the column
// sum's own pass over the (B·N, 3D) gradient goes (151 MB a DiT-S/2 block at batch 256); with
// NALA_GEMM_BGRAD=1 too, that projection's bias gradient still comes from the gather (its weight
// gradient from the plain GEMM), unless the parts arrive already assembled (NALA_QKVG_GRADS_IN_PLACE), where
// it comes from the weight gradient's epilogue. 0: the linear layer and the split apart. Until the thirty-fifth session
// the default ran the one operation for softmax's plain split only: the gated NaLa block's qkvg (v twice)
// lost 0.4 ms with it until its gather's loads were grouped (NALA_GATHER_SUM_GROUPED below). With both on,
// on an H100 in two runs (2026-12-05 and 2026-12-06, docs/benchmarks.md): DiT-S/2 34.4 -> 34.2 and
// 34.5 -> 34.3 ms a step, NaLaDiT-S/2 44.8 -> 44.4 and 44.6 -> 44.2. Any other value is an error.
bool split_heads_bias_sums();
void set_split_heads_bias_sums(bool on);  // every split, or none
void reset_split_heads_bias_sums();        // back to NALA_SPLIT_HEADS_BIAS's value (read at the next use)
// The block backward kernels' per-sample vector gradients (dshift, dscale, dgate) are written as float32
// partials per 32-token chunk and then summed over the chunks: NALA_BLOCK_SUMS_FUSED=1 (default) sums all of an
// operation's partials in one launch and writes them in the vectors' own type (adaLN's chunks: bf16 under
// autocast), where 0 runs ATen's sum for each and a conversion after it: six small launches of
// the training operation's backward become one (≈ 150 launches a DiT-S/2 step fewer). The same float32
// sums up to their order. Measured on an H100 (2026-12-05, thirty-second session): 0.05–0.1 ms a step
// alone, with the other two switches DiT-S/2's step 34.5 ms against 34.8 with the one-kernel backward
// alone. Any other value is an error.
bool block_sums_fused();
void set_block_sums_fused(bool on);
// The summing gather of NALA_SPLIT_HEADS_BIAS (ops/cuda/gather_heads.cu gather_heads_sum_kernel):
// NALA_GATHER_SUM_GROUPED=1 (default) issues each thread's four rows' loads as one group before their
// adds, where the PTX of 0 waits a memory latency a row for the repeated part's threads (the gated NaLa
// block's v: its two gradients' loads, then the add, then the next row's loads). The same values bit for
// bit (BlockKernels.LinearSplitHeadsBiasFromTheGather runs both). Timed with the switch above
// (scripts/device_steps/gather-sum.sh). Any other value is an error.
bool gather_sum_grouped();
void set_gather_sum_grouped(bool on);
// The gated NaLa block's backward on CUDA with LePE in the attention kernels (attention/gated_tail.h
// nala_mixer): NALA_QKVG_GRADS_IN_PLACE=1 has the one-pass attention backward write ∂L/∂q, ∂L/∂k, ∂L/∂v
// and the LayerNorm-gate kernel ∂L/∂g straight into one (B, N, 4, H, d) buffer in the qkvg projection's
// layout, returned as views; the split's backward (ops/split_heads.h) sees the parts already assembled
// and skips its gather (a read and a write of the whole gradient: ≈ 145 µs a NaLaDiT-S/2 block at batch
// 256 on an H100), summing the bias gradient with the column sum instead. The same values; the bias
// gradient is the same float32 sum in another order. 1 (default): NaLaDiT-S/2's training step 44.1 ->
// 43.0 ms on an H100 (2026-12-06, two alternations, docs/benchmarks.md); 0: the gather. Any other value
// is an error.
bool qkvg_grads_in_place();
void set_qkvg_grads_in_place(bool on);
// With those gradients in place: NALA_QKVG_COLUMN_SUMS=1 (default) has the kernels that write them also
// sum their columns as stored (the one-pass backward with LePE: per-warp sums over a tile's tokens,
// ln_gate_bwd: per-block sums; attention/cuda/onepass_backward.cuh), handed to the split's backward
// (ops/split_heads.h offer_parts_column_sums) as qkvg's bias gradient, so that the column sum's pass
// over the (B, N, 4, H, d) gradient goes (≈ 72 µs a NaLaDiT-S/2 block at batch 256 on an H100,
// 2026-12-06; NaLaDiT-S/2's step 42.5 → 42.1-42.2 ms). Head dim 64 only (NaLaDiT-S/B/L): at 72 (XL) the
// summing kernel lost 1.2 ms a step and is not built (attention/cuda/nala_params.h onepass_backward_sums).
// The same float32 sums of the same bf16 values in another order. 0: the column sum. Any other value
// is an error.
bool qkvg_column_sums_in_kernel();
void set_qkvg_column_sums_in_kernel(bool on);
// That pass as a persistent grid staging each warp's next row of x and y in shared memory by
// cp.async, the block's samples' gate, shift and scale converted to float there once
// (ops/cuda/block_kernels.cu residual_ln_modulate_staged), for 16-bit rows: NALA_RESIDUAL_NORM_STAGED=1
// (default) runs it, 0 keeps the one-pass kernel residual_ln_modulate_fwd. On the H200 for DiT-XL/2's
// 32,768 rows of 1,152 it takes 84–87 µs a launch against 89 (bf16) and 85–87 against 97 (fp8), and
// the sampling step 56.8 → 56.4 ms (bf16), 41.7 → 41.1 ms (fp8) (docs/benchmarks.md, twenty-third
// session). The same bits either way (BlockKernels.StagedResidualNormEqualsTheOnePassKernel).
// Any other value is an error.
bool residual_norm_staged();
void set_residual_norm_staged(bool on);

// The gated residual + LayerNorm-modulate's training backward (one kernel, NALA_RESIDUAL_NORM_TRAIN_BWD)
// sums dy as it stores it and offers the sums as the bias gradient of the layer that made y (proj,
// fc2; ops/offered_sums.h), which then skips its column sum: NALA_RESIDUAL_DY_SUMS=1 (default), for
// D ≤ 768 (the sums in registers); 0 leaves the column sums. Any other value is an error.
bool residual_dy_sums();
void set_residual_dy_sums(bool on);
// While gradients are wanted, DiT::forward makes every block's adaLN modulation and the final layer's
// from one SiLU(c) and one GEMM of the stacked weights (models/dit.h stacked_modulations) instead of
// a SiLU and a GEMM a block: NALA_STACKED_MODULATION=1 (default); 0 the blocks' own. Sampling (no
// gradient) keeps the blocks' own, which stacking would have to copy each step; so do multi-process runs
// (train/train_step.cpp turns it off: with their all-reduces overlapping the backward every adaLN gradient
// would be ready only at the backward's end, and without they keep the same arithmetic). Any other value is an error.
bool stacked_modulation();
void set_stacked_modulation(bool on);
// The training step's weight casts lay the adaLN weights' casts out one after another, so that the
// stacked modulation GEMM reads them in place (ops/weight_casts.h stacks, stacked_operand) instead of
// a copy of them all (21 MB at DiT-S/2, ≈ 446 MB at XL/2, held until the backward):
// NALA_STACKED_CASTS=1 (default; the S/2 step's peak 12,583 → 12,562 MiB on an H100, the step's
// time unchanged); 0 the copy. Any other value is an error.
bool stacked_casts();
void set_stacked_casts(bool on);

// The patch embedding and pos_embed's add in one kernel under CUDA bf16 autocast (ops/patch_embed.h):
// NALA_PATCH_EMBED_POS=1 (default; off in the fortieth session until the rewritten kernel's tests ran
// on a GPU: docs/benchmarks.md); 0 the GEMM and ATen's broadcasting add. Any other value is an error.
bool patch_embed_pos_fused();
void set_patch_embed_pos_fused(bool on);

// The training step's optimizer pass in one kernel a parameter group (ops/adamw_ema.h): AdamW, the
// EMA and the next step's weight casts from the kept bf16 gradients (train/adamw.h step_with_ema):
// NALA_FUSED_OPTIMIZER=1; 0 the four multi-tensor passes (the gradients widened, ATen's fused AdamW,
// _foreach_lerp_, the casts' copy). Default 1 (DiT-S/2 33.0 → 32.7 ms a step on an H100, the same bits:
// TrainGraph.WeightCastsGiveAutocastsBits). Any other value is an error.
bool fused_optimizer();
void set_fused_optimizer(bool on);

// The training step's casts of its parameters in one pass (ops/weight_casts.h): NALA_WEIGHT_CASTS=1
// (default) has the training step (train/train_step.cpp, `nala bench train`) use them under bf16
// autocast on one CUDA process; 0 leaves every cast to autocast. Any other value is an error.
bool weight_casts_enabled();
void set_weight_casts_enabled(bool on);

// How many tensors backward passes have recomputed so far (the attention's state, g, y or the
// tail's u and y: one each time), so that tests can tell that a recomputation happened.
int64_t recomputations();
void count_recomputation();

// The dtype a fused operation returns for input x: the autocast dtype under CUDA autocast (what
// the next GEMM reads), else x's own.
at::ScalarType fused_result_dtype(const at::Tensor& x);

// A GEMM operand as autocast casts at::linear's inputs: under CUDA autocast t in the autocast
// dtype (autocast's cached cast, so a weight is cast once a forward), else t itself.
at::Tensor autocast_gemm_operand(const at::Tensor& t);
// The 2-D weights ts (equal column counts) stacked by rows, [t_0; t_1; …], as a GEMM operand in
// autocast_gemm_operand's dtype: the training step's casts as one view where they lie one after
// another (ops/weight_casts.h stacked_operand), else the concatenation of each one's operand.
at::Tensor autocast_stacked_gemm_operand(const std::vector<at::Tensor>& ts);

}  // namespace nala::ops
