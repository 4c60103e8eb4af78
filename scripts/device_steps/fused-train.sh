#!/usr/bin/env bash
# Training only, fused nala against compiled PyTorch in the same run (a shorter fused-bench).
out=$1
n=./build-device/nala
{
  $n bench train --models DiT-S/2,NaLaDiT-S/2,DiT-XL/2 --batch 256 --image-size 256 --steps 8 --warmup 2
  echo
  python3 scripts/bench_pytorch_train.py --models DiT-S/2 --batch 256 --steps 8 --warmup 3 --compile
} > "$out/fused_train.md" 2>&1
grep -E "^\|" "$out/fused_train.md"
