#!/usr/bin/env bash
# The training, sampling and evaluation benchmarks in one step (results in one file).
out=$1
n=./build-device/nala
{
  $n bench train --models DiT-S/2,NaLaDiT-S/2,DiT-B/2,DiT-XL/2,NaLaDiT-XL/2 --batch 256 --image-size 256 --steps 8 --warmup 2
  echo
  $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 4 --image-size 2048 --steps 3 --warmup 1
  echo
  python3 scripts/bench_pytorch_train.py --models DiT-S/2,DiT-XL/2 --batch 256 --steps 8 --warmup 2
  echo
  $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8
  echo
  python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 8
  echo
  $n bench eval --batch 250 --vae-batch 32 --reps 5
  python3 scripts/bench_pytorch_inception.py --batch 250 --reps 5
} > "$out/bench.md" 2>&1
