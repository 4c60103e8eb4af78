#!/usr/bin/env bash
# Which of ATen's fused softmax-attention kernels is fastest at the DiT shapes (attention/sdpa_backend.h,
# NALA_SDPA_BACKEND): `nala bench attention` rows sdpa (ATen's choice), sdpa-cudnn, sdpa-flash,
# sdpa-efficient, forward and forward+backward, bf16, 256 tokens: DiT-S/2 training (batch 256, 6 heads
# of 64), DiT-XL/2 training (batch 256, 16 heads of 72) and sampling (batch 64 + CFG = 128). A benchmark:
# alone on the GPU. One file: sdpa.md.
#   bash scripts/device_build.sh prebuilt sdpa
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  run $n bench attention --dtype bf16 --heads 6 --head-dim 64 --shapes 256x256 --no-reference
  echo
  run $n bench attention --dtype bf16 --heads 16 --head-dim 72 --shapes 256x256,128x256 --no-reference
  echo
  echo "NALA_SOFTMAX_FWD_WARPS=8 (nala's forward with 8 warps a CTA; the sdpa-nala rows):"
  run env NALA_SOFTMAX_FWD_WARPS=8 $n bench attention --dtype bf16 --heads 6 --head-dim 64 --shapes 256x256 --no-reference
  run env NALA_SOFTMAX_FWD_WARPS=8 $n bench attention --dtype bf16 --heads 16 --head-dim 72 --shapes 256x256,128x256 --no-reference
} > "$out/sdpa.md" 2>&1
grep -E "^\| (sdpa|nala-cuda)|FAILED|failed|^NALA_" "$out/sdpa.md" | cut -c1-150
exit $failed
