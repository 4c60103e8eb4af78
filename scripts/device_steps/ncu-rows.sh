#!/usr/bin/env bash
# Why the sampling step's row kernels (the residual + LayerNorm-modulate pass and the FP8 bias-GELU)
# run below the memory bandwidth: Nsight Compute's speed of light, memory, compute (the pipes'
# utilization: is the FP8 bias-GELU's exp2/reciprocal on the XU pipe its limit? 2026-12-04),
# occupancy, launch and warp-state sections for a few launches of each in a DiT-XL/2 sampling step
# (`nala bench sample`, batch 64 + CFG = 128 rows of 256 tokens, no CUDA graph), bf16 and fp8.
#   bash scripts/device_build.sh prebuilt ncu-rows
out=$1
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats"
# quantize_rows_kernel also quantizes the weights once when the bench registers them for FP8 (≈ 4
# a block): the regex leaves it out, so that the launches profiled are the sampling step's
for dt in bf16 fp8; do
  ncu --clock-control none $sections --kernel-name regex:"residual_ln_modulate_fwd|bias_gelu_quantize_rows" \
      --launch-skip 8 --launch-count 4 \
      ./build-device/nala bench sample --models DiT-XL/2 --batch 64 --measure 1 --dtypes "$dt" --cuda-graphs off > "$out/ncu_rows_$dt.txt" 2>&1 ||
    { tail -5 "$out/ncu_rows_$dt.txt"; exit 1; }
done
grep -hE "^  [a-z_:<>, 0-9A-Za-z]*(residual_ln|bias_gelu|quantize_rows)|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Waves Per SM|L2 Hit|Mem Busy|Max Bandwidth|Stall|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc|SM Busy|pipeline" \
  "$out"/ncu_rows_bf16.txt "$out"/ncu_rows_fp8.txt | cut -c1-200 > "$out/ncu_rows.md"
cat "$out/ncu_rows.md" | head -120
