#!/usr/bin/env bash
# The training MLP's cuBLASLt epilogues (ops/mlp.h, NALA_GEMM_EPILOGUES=1) against the bias-GELU
# kernel (=0), same run: their CUDA tests (float64 truth, the composition beside), then training
# throughput of MODELS (default DiT-S/2,NaLaDiT-S/2,DiT-XL/2; batch 256, 256 px latents, CUDA
# graphs on) with each setting and, unless PEER=0, the compiled official step last. Alone on the
# GPU (a benchmark).
#   bash scripts/device_build.sh build epilogues            # or: epilogues.sh OUT [MODELS] (PEER=0: no peer)
out=$1
models=${2:-DiT-S/2,NaLaDiT-S/2,DiT-XL/2}
n=./build-device/nala
{
  ./build-device/tests/nala_cuda_tests --gtest_filter='GemmEpilogue.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure|aux|training MLP|Expected|Which"
  echo
  for e in 0 1; do
    echo "### nala, NALA_GEMM_EPILOGUES=$e"
    NALA_GEMM_EPILOGUES=$e $n bench train --models "$models" --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
    echo
  done
  peer=$(echo "$models" | tr ',' '\n' | grep -v NaLa | paste -sd,)
  [ "${PEER:-1}" != 0 ] && [ -n "$peer" ] && python3 scripts/bench_pytorch_train.py --models "$peer" --batch 256 --steps 8 --warmup 3 --compile
} > "$out/epilogues.md" 2>&1
grep -E "^\||^###|PASSED|FAILED|Failure" "$out/epilogues.md" | head -60
