#!/usr/bin/env bash
# Why the fused NaLa kernels stall: Nsight Compute's warp-state, scheduler, memory-table and source
# sections (stall reasons per instruction) for one forward+backward at B=256, N=256, H=6, d=64, bf16.
out=$1
ncu --clock-control none --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables \
    --section SourceCounters --section ComputeWorkloadAnalysis --section InstructionStats \
    --kernel-name regex:"state_kernel|output_kernel|dq_kernel|dkv_kernel" --launch-skip 4 --launch-count 4 \
    ./build-device/nala bench attention --shapes 256x256 --head-dim 64 --reps 1 --no-reference > "$out/ncu_detail.txt" 2>&1
grep -E "_kernel<|Stall|stall|Warp Cycles|Issued Warp|No Eligible|Active Warps|Eligible Warps|Bank|Executed Ipc|Issue Slots|Pipe|Uncoalesced|Excessive" \
  "$out/ncu_detail.txt" | sed -E 's/void nala::attention::cuda::([a-z_]+)<.*/== \1/' | cut -c1-220 > "$out/bench_ncu_detail.md"
