#!/usr/bin/env bash
# nala's training step kernel by kernel (Nsight Compute, the first step) and by category
# (scripts/kernel_table.py); kernels-compiled adds the PyTorch eager and compiled tables.
out=$1
model=${2:-DiT-S/2}
tag=$(echo "$model" | tr -c 'A-Za-z0-9\n' '_')   # a file each model (the step may run twice in one call)
m="--metrics gpu__time_duration.sum --csv --page raw --cache-control none --clock-control none"
ncu $m ./build-device/nala bench train --models "$model" --batch 256 --image-size 256 --steps 1 --warmup 0 > "$out/k_nala_$tag.csv" 2> "$out/k_nala_$tag.err"
python3 scripts/kernel_table.py "$out/k_nala_$tag.csv" --title "nala $model (one step, the first)" --top 40 > "$out/kernels_nala_$tag.md" 2>&1
rm -f "$out/k_nala_$tag.csv"   # (large; the table keeps what it says)
cat "$out/kernels_nala_$tag.md"
