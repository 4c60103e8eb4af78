#!/usr/bin/env bash
# FP8 sampling (ops/linear_fp8.h, `nala sample --dtype fp8`): the CUDA tests of the FP8 path,
# then DDPM 250 + CFG 1.5 sampling throughput of DiT-XL/2 and NaLaDiT-XL/2 (batch 64) in bf16 and
# fp8, eager and with the network call as a CUDA graph; fp8 once more with the joined MLP kernel
# off, with its fast GELU (NALA_FP8_FAST_GELU=1), with LayerNorm-modulate quantizing as well
# (NALA_FP8_LN_FUSED=1), and without fast accumulation; bf16 with the gated residual in the GEMM
# (NALA_GATED_RESIDUAL_GEMM=1, its tests GemmEpilogue.* first) and with each gated residual added in
# the LayerNorm-modulate after it (NALA_RESIDUAL_NORM_FUSED=1, bf16 and fp8); the official model's step eager /
# compiled; all in one run (one file: fp8_sample.md). Exits non-zero when a test or a bench row failed.
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
bench() { run $n bench sample --models "$1" --batch 64 --measure 8 --dtypes fp8 --cuda-graphs on; }
{
  ./build-device/tests/nala_cuda_tests --gtest_filter='LinearFp8Cuda.*:GemmEpilogue.*:BlockKernels.ResidualLayerNormModulateEqualsTheTwoKernels' > "$out/.fp8_tests.log" 2>&1 || { echo "FAILED: LinearFp8Cuda / GemmEpilogue / residual-norm tests"; failed=1; }
  grep -E "^\[  (PASSED|FAILED)|Failure|linear_fp8|bias_gelu_quantize|forward vs|gated residual" "$out/.fp8_tests.log"
  rm -f "$out/.fp8_tests.log"
  echo
  echo "cuBLASLt per-row alpha (the gated-residual GEMM's pointer mode), bench/cublaslt_probe.cu, against torch's cuBLASLt:"
  lt=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2> /dev/null)
  nv=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if $nv -O2 -std=c++17 bench/cublaslt_probe.cu -lcublasLt -o build-device/cublaslt_probe; then
    LD_LIBRARY_PATH=$lt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ./build-device/cublaslt_probe
  else echo "FAILED: cublaslt_probe did not compile"; fi
  echo
  run $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes bf16,fp8 --cuda-graphs both
  echo
  echo "NALA_FP8_MLP_FUSED=0 (fc1's bias-GELU and fc2's row quantization as two kernels, not ops/linear_fp8.h mlp_fp8):"
  NALA_FP8_MLP_FUSED=0 bench DiT-XL/2,NaLaDiT-XL/2
  echo
  echo "NALA_FP8_FAST_GELU=1 (the joined kernel's GELU in its sigmoid form with the hardware's exp, ops/cuda/gelu.cuh):"
  NALA_FP8_FAST_GELU=1 bench DiT-XL/2,NaLaDiT-XL/2
  echo
  echo "NALA_FP8_FAST_GELU=1 NALA_FP8_LN_FUSED=1 (and LayerNorm-modulate writes qkv's and fc1's e4m3 rows, ops/linear_fp8.h layer_norm_modulate_fp8):"
  NALA_FP8_FAST_GELU=1 NALA_FP8_LN_FUSED=1 bench DiT-XL/2,NaLaDiT-XL/2
  echo
  echo "NALA_GATED_RESIDUAL_GEMM=1 (bf16: the gated residual written by proj's and fc2's GEMM, ops/cuda/gemm_epilogue.h gemm_gated_residual):"
  NALA_GATED_RESIDUAL_GEMM=1 run $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes bf16 --cuda-graphs on
  echo
  echo "NALA_RESIDUAL_NORM_FUSED=1 (each gated residual in one pass with the next LayerNorm-modulate, models/dit.cpp forward_chained), bf16:"
  NALA_RESIDUAL_NORM_FUSED=1 run $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes bf16 --cuda-graphs on
  echo
  echo "NALA_FP8_FAST_GELU=1 NALA_FP8_LN_FUSED=1 NALA_RESIDUAL_NORM_FUSED=1 (all of the FP8 sampling's joined passes):"
  NALA_FP8_FAST_GELU=1 NALA_FP8_LN_FUSED=1 NALA_RESIDUAL_NORM_FUSED=1 bench DiT-XL/2,NaLaDiT-XL/2
  echo
  echo "NALA_FP8_FAST_ACCUM=0:"
  NALA_FP8_FAST_ACCUM=0 bench DiT-XL/2
  echo
  run python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 8 --compile
} > "$out/fp8_sample.md" 2>&1
exit $failed
