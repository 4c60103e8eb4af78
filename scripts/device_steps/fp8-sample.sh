#!/usr/bin/env bash
# FP8 sampling (ops/linear_fp8.h, `nala sample --dtype fp8`): the CUDA tests of the FP8 path,
# then DDPM 250 + CFG 1.5 sampling throughput of DiT-XL/2 and NaLaDiT-XL/2 (batch 64) in bf16 and
# fp8, eager and with the network call as a CUDA graph, fp8 once more with the joined MLP kernel off
# and with LayerNorm-modulate quantizing (NALA_FP8_LN_FUSED=1), and without fast accumulation,
# and the official model's step eager / compiled, all in one run (one file: fp8_sample.md).
out=$1
n=./build-device/nala
{
  ./build-device/tests/nala_cuda_tests --gtest_filter='LinearFp8Cuda.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure|linear_fp8|bias_gelu_quantize|forward vs"
  echo
  $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes bf16,fp8 --cuda-graphs both
  echo
  echo "NALA_FP8_MLP_FUSED=0 (fc1's bias-GELU and fc2's row quantization as two kernels, not ops/linear_fp8.h mlp_fp8):"
  NALA_FP8_MLP_FUSED=0 $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes fp8 --cuda-graphs on
  echo
  echo "NALA_FP8_LN_FUSED=1 (LayerNorm-modulate writes qkv's and fc1's e4m3 rows itself, ops/linear_fp8.h layer_norm_modulate_fp8):"
  NALA_FP8_LN_FUSED=1 $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes fp8 --cuda-graphs on
  echo
  echo "NALA_FP8_FAST_ACCUM=0:"
  NALA_FP8_FAST_ACCUM=0 $n bench sample --models DiT-XL/2 --batch 64 --measure 8 --dtypes fp8 --cuda-graphs on
  echo
  python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 8 --compile
} > "$out/fp8_sample.md" 2>&1
