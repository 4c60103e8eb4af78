#!/usr/bin/env bash
# Where a training step's GPU time goes in nala and in PyTorch with torch.compile (the peer of the
# performance issue), kernel by kernel and by category: nala through Nsight Compute
# (scripts/kernel_table.py), PyTorch eager and compiled through torch.profiler
# (scripts/profile_pytorch_step.py). DiT-S/2 by default, batch 256, 256 px latents, bf16. nala's
# kernels with their DRAM bytes too: kernel_table.py's roofline of the step (GEMMs and attention as
# measured, every other kernel at its bandwidth floor).
out=$1
model=${2:-DiT-S/2}
m="--metrics gpu__time_duration.sum,dram__bytes.sum --csv --page raw --cache-control none --clock-control none"
ncu $m ./build-device/nala bench train --models "$model" --batch 256 --image-size 256 --steps 1 --warmup 0 > "$out/k_nala.csv" 2> "$out/k_nala.err"
{
  python3 scripts/kernel_table.py "$out/k_nala.csv" --title "nala $model (one step, the first)" --top 30
  echo
  python3 scripts/profile_pytorch_step.py --model "$model" --top 30
  echo
  python3 scripts/profile_pytorch_step.py --model "$model" --compile --top 30
} > "$out/kernels_compiled.md" 2>&1
