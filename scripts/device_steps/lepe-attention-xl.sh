#!/usr/bin/env bash
# NaLaDiT-XL/2 training (256 px, bf16, CUDA graphs; batch XL_BATCH, default 128, which fits an H100)
# with LePE in the attention kernels (NALA_LEPE_IN_ATTENTION=2, the default) and without (0),
# alternating, one binary, same run. One file: lepe_attention_xl.md.
#   bash scripts/device_build.sh prebuilt lepe-attention-xl
out=$1
failed=0
for v in 0 2 0 2; do
  echo "NALA_LEPE_IN_ATTENTION=$v:"
  env NALA_LEPE_IN_ATTENTION=$v ./build-device/nala bench train --models NaLaDiT-XL/2 --batch "${XL_BATCH:-128}" --image-size 256 --steps 6 --warmup 2 \
    --cuda-graphs on || { echo "FAILED (rc=$?): NALA_LEPE_IN_ATTENTION=$v"; failed=1; }
done > "$out/lepe_attention_xl.md" 2>&1
grep -E "^\| NaLa|FAILED|^NALA_" "$out/lepe_attention_xl.md" | cut -c1-150
exit $failed
