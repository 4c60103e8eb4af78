#!/usr/bin/env bash
# Why the NaLaDiT-S/2 step's largest NaLa kernels take their time: Nsight Compute's warp-state,
# scheduler, memory and instruction sections for the one-pass attention backward (B=256, N=256,
# H=6, d=64, bf16) and the LePE convolution of the fused tail (B=256, 16×16 grid, D=384), one
# launch each after warm-up.
out=$1
s="--clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
   --section MemoryWorkloadAnalysis_Tables --section InstructionStats --section LaunchStats --section SourceCounters"
{
  ncu $s --kernel-name regex:"onepass_backward" --launch-skip 2 --launch-count 1 \
    ./build-device/nala bench attention --shapes 256x256 --head-dim 64 --dtype bf16 --reps 3 --no-reference
  ncu $s --kernel-name regex:"lepe_conv|lepe_wgrad" --launch-skip 6 --launch-count 3 \
    ./build-device/nala bench tail --shapes 256x16
} > "$out/ncu_nala.txt" 2>&1
grep -E "onepass_backward|lepe_conv<|lepe_wgrad<|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Eligible Warps|Executed Ipc A|Issue Slots Busy|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Bank" \
  "$out/ncu_nala.txt" | cut -c1-200 | head -90
