#!/usr/bin/env bash
# nala's training step kernel by kernel (Nsight Compute, the first step) and by category
# (scripts/kernel_table.py); kernels-compiled adds the PyTorch eager and compiled tables.
out=$1
model=${2:-DiT-S/2}
m="--metrics gpu__time_duration.sum --csv --page raw --cache-control none --clock-control none"
ncu $m ./build-device/nala bench train --models "$model" --batch 256 --image-size 256 --steps 1 --warmup 0 > "$out/k_nala.csv" 2> "$out/k_nala.err"
python3 scripts/kernel_table.py "$out/k_nala.csv" --title "nala $model (one step, the first)" --top 40 > "$out/kernels_nala.md" 2>&1
cat "$out/kernels_nala.md"
