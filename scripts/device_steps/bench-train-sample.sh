#!/usr/bin/env bash
# Training and sampling throughput against the PyTorch baselines, in one step (results in one file).
out=$1
n=./build-device/nala
{
  $n bench train --models DiT-S/2,NaLaDiT-S/2,DiT-B/2,DiT-XL/2,NaLaDiT-XL/2 --batch 256 --image-size 256 --steps 8 --warmup 2
  echo
  python3 scripts/bench_pytorch_train.py --models DiT-S/2,DiT-B/2,DiT-XL/2 --batch 256 --steps 8 --warmup 2
  echo
  $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8
  echo
  python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 8
} > "$out/bench_train_sample.md" 2>&1
