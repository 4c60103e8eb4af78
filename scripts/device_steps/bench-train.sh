#!/usr/bin/env bash
# Training throughput on the GPU machine: nala's DiT / NaLaDiT steps at batch 256 on 256 px latents,
# the high-resolution comparison (1024 and 2048 px), and the PyTorch baseline script in the same run.
out=$1
n=./build-device/nala
{
  $n bench train --batch 256 --image-size 256
  echo
  $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 16 --image-size 1024 --steps 5 --warmup 2
  echo
  $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 4 --image-size 2048 --steps 3 --warmup 1
  echo
  python3 scripts/bench_pytorch_train.py --models DiT-S/2,DiT-B/2,DiT-XL/2 --batch 256
} > "$out/bench_train.md" 2>&1
