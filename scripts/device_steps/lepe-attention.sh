#!/usr/bin/env bash
# LePE inside the one-pass attention kernels (NALA_LEPE_IN_ATTENTION=1: the forward, =2, the default: the forward and
# the backward's dv; attention/gated_tail.h nala_mixer) against 0 (the attention writes o,
# lepe_conv makes u and, transposed, LePE's dv), one binary, same run, alternating: first the paths'
# test, then NaLaDiT-S/2 training (batch 256, 256 px, CUDA graphs) 0, 1, 2 twice over, then
# NaLaDiT-XL/2 sampling (250 DDPM steps, CFG 1.5, batch 64, bf16) 0 and 1. One file: lepe_attention.md.
#   bash scripts/device_build.sh prebuilt lepe-attention
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  # first the path's own test: the kernel with LePE equals the two operations bit for bit
  run ./build-device/tests/nala_cuda_tests --gtest_filter=GatedTailKernels.LepeInAttentionEqualsTheTwoOperations
  for v in 0 1 2 0 1 2; do
    echo "NALA_LEPE_IN_ATTENTION=$v:"
    run env NALA_LEPE_IN_ATTENTION=$v $n bench train --models NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  done
  for v in 0 1; do
    echo "NALA_LEPE_IN_ATTENTION=$v:"
    run env NALA_LEPE_IN_ATTENTION=$v $n bench sample --models NaLaDiT-XL/2 --batch 64 --measure 5 --dtypes bf16
  done
} > "$out/lepe_attention.md" 2>&1
grep -E "^\| NaLa|FAILED|^NALA_|PASSED|LePE in the kernels" "$out/lepe_attention.md" | cut -c1-150
exit $failed
