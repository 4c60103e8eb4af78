#!/usr/bin/env bash
# The one-pass NaLa kernels end to end, same run: NaLaDiT-S/2 against DiT-S/2 training at 256 px
# (batch 256) and 1024 px (batch 16), the chunked kernels forced for comparison
# (NALA_ATTENTION_KERNEL=chunked), and NaLaDiT-XL/2 against DiT-XL/2 DDPM+CFG sampling (bf16,
# batch 64, 250 steps extrapolated).
out=$1
n=./build-device/nala
{
  for k in auto chunked; do
    echo "### NALA_ATTENTION_KERNEL=$k"
    NALA_ATTENTION_KERNEL=$k $n bench train --device cuda --models DiT-S/2,NaLaDiT-S/2 --batch 256 --image-size 256 --steps 8 --warmup 2
    NALA_ATTENTION_KERNEL=$k $n bench train --device cuda --models NaLaDiT-S/2 --batch 16 --image-size 1024 --steps 5 --warmup 2
    echo
  done
  $n bench train --device cuda --models DiT-S/2 --batch 16 --image-size 1024 --steps 5 --warmup 2
  for k in auto chunked; do
    echo "### NALA_ATTENTION_KERNEL=$k"
    NALA_ATTENTION_KERNEL=$k $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes bf16
  done
} > "$out/onepass_e2e.md" 2>&1
grep -E "^\||^###|error" "$out/onepass_e2e.md" | grep -v "^|---" | head -40
