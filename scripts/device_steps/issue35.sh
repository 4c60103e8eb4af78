#!/usr/bin/env bash
# Issue #35's table from one call, one binary: the NaLa attention against softmax attention (SDPA)
# across N at d 64 and 72 (`nala bench attention`, B·N = 65,536, 6 heads, bf16, forward and
# forward+backward); NaLaDiT-S/2 against DiT-S/2 training at 256, 512, 1,024 and 2,048 px (CUDA graphs);
# NaLaDiT-XL/2 against DiT-XL/2 training with the peak memory (batch XL_BATCH, default 128: batch 256
# of DiT-XL/2 needs ≈ 94 GB, more than an H100 has; XL_BATCH=256 on an H200) and sampling (DDPM 250
# steps + CFG 1.5, batch 64, bf16, CUDA graphs). One file: issue35.md.
#   bash scripts/device_build.sh prebuilt issue35
# ISSUE35_XL=0 leaves out the XL rows (the S/2 rows and the attention alone take ≈ 80 s).
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  run $n bench attention --dtype bf16 --head-dim 64,72 --no-reference
  echo
  run $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  run $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 64 --image-size 512 --steps 8 --warmup 2 --cuda-graphs on
  run $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 16 --image-size 1024 --steps 5 --warmup 2 --cuda-graphs on
  run $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 4 --image-size 2048 --steps 3 --warmup 1 --cuda-graphs on
  if [ "${ISSUE35_XL:-1}" != 0 ]; then
    echo
    run $n bench train --models DiT-XL/2,NaLaDiT-XL/2 --batch "${XL_BATCH:-128}" --image-size 256 --steps 6 --warmup 2 --cuda-graphs on
    echo
    run $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 3 --dtypes bf16 --cuda-graphs on
  fi
} > "$out/issue35.md" 2>&1
grep -E "^\| |FAILED|^# nala" "$out/issue35.md" | grep -v -- "---" | cut -c1-170
exit $failed
