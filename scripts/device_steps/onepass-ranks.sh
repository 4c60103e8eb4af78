#!/usr/bin/env bash
# The one-pass kernels' rank split (NALA_ONEPASS_RANKS: attention/cuda/nala_cuda.cpp) at NaLaDiT-S/2's
# shape: the NalaCudaOnePass tests with each forced split (against float64, as with the automatic one),
# then the attention alone (`nala bench attention`, B 256, N 256, 6 heads of 64, bf16) and NaLaDiT-S/2
# training (batch 256, 256 px, CUDA graphs) with auto (1 rank there), 2 and 4, auto again. One file:
# onepass_ranks.md.
#   bash scripts/device_build.sh prebuilt onepass-ranks
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  for r in 2 4; do
    echo "tests, NALA_ONEPASS_RANKS=$r:"
    run env NALA_ONEPASS_RANKS=$r ./build-device/tests/nala_cuda_tests --gtest_filter='NalaCudaOnePass.*' --gtest_brief=1
  done
  for r in auto 2 4 auto; do
    echo "NALA_ONEPASS_RANKS=$r:"
    run env NALA_ONEPASS_RANKS=$r $n bench attention --dtype bf16 --head-dim 64 --shapes 256x256 --no-reference
    run env NALA_ONEPASS_RANKS=$r $n bench train --models NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  done
} > "$out/onepass_ranks.md" 2>&1
grep -E "^NALA_|^tests|PASSED|FAILED|^\| (NaLa|nala-cuda|sdpa)" "$out/onepass_ranks.md" | cut -c1-150
exit $failed
