#!/usr/bin/env bash
# Where the gated tail's kernels (lepe_conv forward and backward, lepe_wgrad, ln_gate_fwd/bwd) lose
# time against their memory floor: Nsight Compute's speed-of-light, memory, occupancy, warp-state
# and source sections for one forward+backward of `nala bench tail` at NaLaDiT-S/2's shape (B 256,
# 16 × 16 tokens, H 6, d 64, LePE 5 × 5, bf16); per-line stalls of lepe_conv and lepe_wgrad.
out=$1
ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source yes \
    --kernel-name regex:"lepe_conv|lepe_wgrad|ln_gate" --launch-skip 8 --launch-count 5 -f -o "$out/tail" \
    ./build-device/nala bench tail --shapes 256x16 --reps 1 > "$out/ncu_tail.log" 2>&1
ncu -i "$out/tail.ncu-rep" --print-summary none > "$out/ncu_tail_details.txt" 2>>"$out/ncu_tail.log"
grep -E "^  [a-z_]+<|void |Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Dynamic Shared|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Uncoalesced|Excessive|bank" \
  "$out/ncu_tail_details.txt" | cut -c1-200 > "$out/bench_ncu_tail.md"
for k in lepe_conv lepe_wgrad; do
  ncu -i "$out/tail.ncu-rep" --kernel-name regex:"$k" --page source --print-source cuda,sass --csv > "$out/src_$k.csv" 2>>"$out/ncu_tail.log"
  python3 scripts/ncu_source_lines.py "$out/src_$k.csv" --top 20 > "$out/bench_source_$k.md" 2>&1
  rm -f "$out/src_$k.csv"
done
rm -f "$out/tail.ncu-rep" "$out/ncu_tail_details.txt"
tail -3 "$out/ncu_tail.log"
