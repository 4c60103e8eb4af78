#!/usr/bin/env bash
# The fused gated NaLa block tail end to end, same run: NaLaDiT-S/2 against DiT-S/2 training at
# 256, 512, 1024 and 2048 px (batch 256, 64, 16, 4: the same tokens a batch up to 1024 px), and
# NaLaDiT-XL/2 against DiT-XL/2 training (batch 256, 256 px: speed and peak memory) and DDPM+CFG
# sampling (bf16, batch 64, 250 steps extrapolated); first
# the tail alone, fused against the plain composition (`nala bench tail`), at S (H 6, d 64) and
# XL (H 16, d 72) widths.
out=$1
n=./build-device/nala
{
  $n bench tail --shapes 256x16,64x32,16x64,4x128
  $n bench tail --heads 16 --head-dim 72 --shapes 64x16,16x32
  for sz in 256:256 512:64 1024:16 2048:4; do
    $n bench train --device cuda --models DiT-S/2,NaLaDiT-S/2 --batch "${sz#*:}" --image-size "${sz%%:*}" --steps 6 --warmup 2
  done
  $n bench train --device cuda --models DiT-XL/2,NaLaDiT-XL/2 --batch 256 --image-size 256 --steps 4 --warmup 2
  $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes bf16
} > "$out/tail_e2e.md" 2>&1
grep -E "^\||error" "$out/tail_e2e.md" | grep -v "^|---" | head -60
