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
# the steady state: the step as a CUDA graph, its second replay (NALA_PROFILE_TIMED: bench/timing.h),
# not the first eager step with its one-time kernels (KERNELS_FIRST_STEP=1: the first step, as before 2026-12-05)
if [ "${KERNELS_FIRST_STEP:-0}" = 1 ]; then
  ncu $m ./build-device/nala bench train --models "$model" --batch 256 --image-size 256 --steps 1 --warmup 0 > "$out/k_nala.csv" 2> "$out/k_nala.err"
  what="one step, the first"
else
  NALA_PROFILE_TIMED=1 ncu --profile-from-start off $m ./build-device/nala bench train --models "$model" --batch 256 --image-size 256 \
    --steps 1 --warmup 2 --cuda-graphs on > "$out/k_nala.csv" 2> "$out/k_nala.err"
  what="one CUDA-graph step, steady state"
fi
{
  python3 scripts/kernel_table.py "$out/k_nala.csv" --title "nala $model ($what)" --top 30
  echo
  python3 scripts/profile_pytorch_step.py --model "$model" --top 30
  echo
  python3 scripts/profile_pytorch_step.py --model "$model" --compile --top 30
} > "$out/kernels_compiled.md" 2>&1
