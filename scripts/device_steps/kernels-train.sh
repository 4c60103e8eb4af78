#!/usr/bin/env bash
# Where a training step's GPU time goes, kernel by kernel, in nala and in the PyTorch baseline
# (DiT-S/2, batch 256, 256 px, bf16; one warm-up and one timed step each, model setup included):
# Nsight Compute's duration of every kernel, summed by name (scripts/kernel_table.py).
out=$1
model=${2:-DiT-S/2}
m="--metrics gpu__time_duration.sum --csv --page raw --cache-control none --clock-control none"
ncu $m ./build-device/nala bench train --models "$model" --batch 256 --image-size 256 --steps 1 --warmup 1 > "$out/k_nala.csv" 2> "$out/k_nala.err"
ncu $m python3 scripts/bench_pytorch_train.py --models "$model" --batch 256 --steps 1 --warmup 1 > "$out/k_torch.csv" 2> "$out/k_torch.err"
{
  python3 scripts/kernel_table.py "$out/k_nala.csv" --title "nala $model" --top 40
  echo
  python3 scripts/kernel_table.py "$out/k_torch.csv" --title "PyTorch $model" --top 40
} > "$out/kernels_train.md" 2>&1
