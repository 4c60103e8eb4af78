#!/usr/bin/env bash
# The summing gather (NALA_SPLIT_HEADS_BIAS, NALA_GATHER_SUM_GROUPED: ops/fused_ops.h) on the split it lost on:
# DiT-S/2 and NaLaDiT-S/2 training (batch 256, 256 px, CUDA graphs), one binary, same run: the defaults
# (the one operation for softmax's qkv only), the one operation everywhere, with the rows' loads grouped (NALA_GATHER_SUM_GROUPED=1, ops/fused_ops.h) everywhere and for softmax's qkv only,
# the defaults again. One file: gather_sum.md.
#   bash scripts/device_build.sh prebuilt gather-sum
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  for v in NALA_SPLIT_HEADS_BIAS= NALA_SPLIT_HEADS_BIAS=1 NALA_SPLIT_HEADS_BIAS=1,NALA_GATHER_SUM_GROUPED=1 \
           NALA_GATHER_SUM_GROUPED=1 NALA_SPLIT_HEADS_BIAS=; do
    echo "${v//,/ }:"
    run env ${v//,/ } $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  done
} > "$out/gather_sum.md" 2>&1
grep -E "^\| (DiT|NaLa)|FAILED|^NALA_" "$out/gather_sum.md" | cut -c1-150
exit $failed
