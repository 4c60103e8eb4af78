#!/usr/bin/env bash
# Training's fused operations written in the thirty-first session and made the defaults in the
# thirty-second after this step timed them on an H100: the gated residual + LayerNorm-modulate backward
# as one kernel (NALA_RESIDUAL_NORM_TRAIN_BWD), the qkv projection's bias gradient summed in the heads'
# gather (NALA_SPLIT_HEADS_BIAS: unset, softmax attention's qkv only) and the per-sample vectors'
# gradient sums in one launch (NALA_BLOCK_SUMS_FUSED), all in ops/fused_ops.h.
# First their CUDA tests (bit for bit the two kernels; a chained DiT-S/2 and NaLaDiT-S/2 training step
# equal to the blocks one by one; the bias gradient from the gather; the graphed training step), then
# DiT-S/2 and NaLaDiT-S/2 training (batch 256, 256 px, CUDA graphs), one binary, same run: the
# defaults, each switch off, the split everywhere, all three off (the thirtieth session's step), the
# two operations (NALA_RESIDUAL_NORM_TRAIN=0), the defaults again. One file: residual_train.md.
#   bash scripts/device_build.sh build residual-train
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  run ./build-device/tests/nala_cuda_tests --gtest_brief=1 \
    --gtest_filter='BlockKernels.ResidualLayerNormModulate*:BlockKernels.Dit*:BlockKernels.DiTStep*:BlockKernels.LinearSplitHeads*:BlockKernels.SplitHeads*:BlockKernels.PartialSums*:TrainGraph.*'
  none=NALA_RESIDUAL_NORM_TRAIN_BWD=0,NALA_SPLIT_HEADS_BIAS=0,NALA_BLOCK_SUMS_FUSED=0
  for v in NALA_RESIDUAL_NORM_TRAIN=1 NALA_RESIDUAL_NORM_TRAIN_BWD=0 NALA_SPLIT_HEADS_BIAS=0 NALA_SPLIT_HEADS_BIAS=1 NALA_BLOCK_SUMS_FUSED=0 $none \
           NALA_RESIDUAL_NORM_TRAIN=0 NALA_RESIDUAL_NORM_TRAIN=1; do
    echo "${v//,/ }:"
    run env ${v//,/ } $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  done
} > "$out/residual_train.md" 2>&1
grep -E "^\| (DiT|NaLa)|FAILED|PASSED|^NALA_" "$out/residual_train.md" | cut -c1-150
exit $failed
