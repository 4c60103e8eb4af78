#!/usr/bin/env bash
# What limits the fused NaLa kernels: Nsight Compute's speed-of-light and occupancy sections for
# each kernel of one forward+backward at B=256, N=256, H=6, d=64, bf16 (clocks left alone).
out=$1
ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --kernel-name regex:"state_kernel|output_kernel|dq_kernel|dkv_kernel|reduce_chunks" --launch-skip 10 --launch-count 8 \
    ./build-device/nala bench attention --shapes 256x256 --head-dim 64 --reps 1 --no-reference > "$out/ncu.txt" 2>&1
grep -E "state_kernel|output_kernel|dq_kernel|dkv_kernel|Duration|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Shared Memory Config" "$out/ncu.txt" \
  | sed -E 's/void nala::attention::cuda::([a-z_]+)<.*/\1/' > "$out/bench_ncu.md"
