#!/usr/bin/env bash
# FP8 sampling (ops/linear_fp8.h, `nala sample --dtype fp8`) and the sampling switches: the CUDA tests
# of the FP8 path and of the residual-norm kernel (skipped with FP8_SAMPLE_SKIP_TESTS=1), then DDPM
# 250 + CFG 1.5 sampling throughput of DiT-XL/2 and NaLaDiT-XL/2 (batch 64) in bf16 and fp8, eager
# and with the network call as a CUDA graph, with the defaults, and the official model's step eager
# and compiled; then each default turned off in turn (ops/fused_ops.h): each gated residual in its
# own pass (NALA_RESIDUAL_NORM_FUSED=0, bf16 and fp8), LayerNorm-modulate writing bf16 for the GEMM
# to quantize (NALA_FP8_LN_FUSED=0), the accurate GELU (NALA_FP8_FAST_GELU=0), the MLP's bias-GELU
# and quantization as two kernels (NALA_FP8_MLP_FUSED=0), no fast accumulation. All in one run (one
# file: fp8_sample.md); exits non-zero when a test or a bench row failed.
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
bench() { run $n bench sample --models "$1" --batch 64 --measure 8 --dtypes "${2:-fp8}" --cuda-graphs on; }
{
  if [ -z "${FP8_SAMPLE_SKIP_TESTS:-}" ]; then  # set when the call ran `tests` before this step
    ./build-device/tests/nala_cuda_tests --gtest_filter='LinearFp8Cuda.*:BlockKernels.ResidualLayerNormModulateEqualsTheTwoKernels:BlockKernels.DitForwardChainedEqualsTheBlocks' > "$out/.fp8_tests.log" 2>&1 || { echo "FAILED: LinearFp8Cuda / residual-norm tests"; failed=1; }
    grep -E "^\[  (PASSED|FAILED)|Failure|linear_fp8|bias_gelu_quantize|forward vs" "$out/.fp8_tests.log"
    rm -f "$out/.fp8_tests.log"
    echo
  fi
  echo "Defaults (NALA_RESIDUAL_NORM_FUSED=1 NALA_FP8_LN_FUSED=1 NALA_FP8_FAST_GELU=1 NALA_FP8_MLP_FUSED=1):"
  run $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes bf16,fp8 --cuda-graphs both
  echo
  run python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 8 --compile
  echo
  echo "NALA_RESIDUAL_NORM_FUSED=0 (each gated residual in its own pass, not with the LayerNorm-modulate after it):"
  NALA_RESIDUAL_NORM_FUSED=0 bench DiT-XL/2,NaLaDiT-XL/2 bf16,fp8
  echo
  echo "NALA_RESIDUAL_NORM_FUSED=0 NALA_FP8_LN_FUSED=0 (LayerNorm-modulate writes bf16, qkv's and fc1's GEMMs quantize it):"
  NALA_RESIDUAL_NORM_FUSED=0 NALA_FP8_LN_FUSED=0 bench DiT-XL/2,NaLaDiT-XL/2
  echo
  echo "NALA_RESIDUAL_NORM_FUSED=0 NALA_FP8_LN_FUSED=0 NALA_FP8_FAST_GELU=0 (the joined MLP kernel with tanhf):"
  NALA_RESIDUAL_NORM_FUSED=0 NALA_FP8_LN_FUSED=0 NALA_FP8_FAST_GELU=0 bench DiT-XL/2,NaLaDiT-XL/2
  echo
  echo "NALA_FP8_MLP_FUSED=0 (fc1's bias-GELU and fc2's row quantization as two kernels, not ops/linear_fp8.h mlp_fp8):"
  NALA_FP8_MLP_FUSED=0 bench DiT-XL/2
  echo
  echo "NALA_FP8_FAST_ACCUM=0:"
  NALA_FP8_FAST_ACCUM=0 bench DiT-XL/2
} > "$out/fp8_sample.md" 2>&1
exit $failed
