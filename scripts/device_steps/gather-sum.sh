#!/usr/bin/env bash
# The summing gather (NALA_SPLIT_HEADS_BIAS, NALA_GATHER_SUM_GROUPED: ops/fused_ops.h, both on by default):
# DiT-S/2 and NaLaDiT-S/2 training (batch 256, 256 px, CUDA graphs), one binary, same run: the defaults,
# the projection and the split apart (NALA_SPLIT_HEADS_BIAS=0), the gather's loads one row at a time
# (NALA_GATHER_SUM_GROUPED=0), the defaults again. One file: gather_sum.md (gather_sum_2.md, … when the
# step runs again in one call).
#   bash scripts/device_build.sh prebuilt gather-sum
out=$1
n=./build-device/nala
failed=0
f=$out/gather_sum.md; i=1
while [ -f "$f" ]; do i=$((i + 1)); f=$out/gather_sum_$i.md; done
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  for v in defaults NALA_SPLIT_HEADS_BIAS=0 NALA_GATHER_SUM_GROUPED=0 defaults; do
    echo "$v:"
    [ "$v" = defaults ] && v=
    run env ${v//,/ } $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  done
} > "$f" 2>&1
grep -E "^\| (DiT|NaLa)|FAILED|^NALA_" "$f" | cut -c1-150
exit $failed
