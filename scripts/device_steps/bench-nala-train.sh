#!/usr/bin/env bash
# What the attention kernels change end to end: DiT-S/2 against NaLaDiT-S/2 and NaLaDiT-XL/2
# training steps at 256 px (batch 256), and DiT-S/2 against NaLaDiT-S/2 at 1024 and 2048 px.
out=$1
n=./build-device/nala
{
  $n bench train --device cuda --models DiT-S/2,NaLaDiT-S/2,NaLaDiT-XL/2 --batch 256 --image-size 256 --steps 8 --warmup 2
  echo
  $n bench train --device cuda --models DiT-S/2,NaLaDiT-S/2 --batch 16 --image-size 1024 --steps 5 --warmup 2
  echo
  $n bench train --device cuda --models DiT-S/2,NaLaDiT-S/2 --batch 4 --image-size 2048 --steps 3 --warmup 1
} > "$out/bench_nala_train.md" 2>&1
