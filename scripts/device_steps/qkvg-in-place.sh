#!/usr/bin/env bash
# NALA_QKVG_GRADS_IN_PLACE (ops/fused_ops.h): the gated NaLa block's q, k, v and g gradients written in
# qkvg's layout by the kernels, the split's gather gone. First the GPU tests that run that path (with
# the switch on), then NaLaDiT-S/2 training (batch 256, 256 px, CUDA graphs) alternating 0 and 1, one
# binary, same run. One file: qkvg_in_place.md.
#   bash scripts/device_build.sh prebuilt qkvg-in-place
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  run env NALA_QKVG_GRADS_IN_PLACE=1 ./build-device/tests/nala_cuda_tests --gtest_brief=1 \
    --gtest_filter='GatedTailKernels.QkvgGradientsWrittenInPlace:GatedTailKernels.LepeInAttention*:BlockKernels.DiTStepFusedEqualsUnfused'
  for v in 0 1 0 1; do
    echo "NALA_QKVG_GRADS_IN_PLACE=$v:"
    run env NALA_QKVG_GRADS_IN_PLACE=$v $n bench train --models NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  done
} > "$out/qkvg_in_place.md" 2>&1
grep -E "^NALA_|PASSED|FAILED|Failure|relative difference|^\| NaLa" "$out/qkvg_in_place.md" | cut -c1-160
exit $failed
