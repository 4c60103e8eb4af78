#!/usr/bin/env bash
# Inception feature extraction and SD-VAE throughput, next to a PyTorch Inception baseline.
out=$1
{
  ./build-device/nala bench eval --batch 250 --vae-batch 32
  python3 scripts/bench_pytorch_inception.py --batch 250
} > "$out/bench_eval.md" 2>&1
