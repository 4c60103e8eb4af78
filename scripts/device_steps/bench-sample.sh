#!/usr/bin/env bash
# Sampling throughput: 250-step DDPM with CFG 1.5, batch 64, DiT-XL/2 and NaLaDiT-XL/2, next to the
# PyTorch baseline loop, same run.
out=$1
{
  ./build-device/nala bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 10
  echo
  python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 10
} > "$out/bench_sample.md" 2>&1
