#!/usr/bin/env bash
# Where the one-pass kernels with LePE (NALA_LEPE_IN_ATTENTION=2) spend their stalls, per CUDA source
# line: Nsight Compute's source counters and warp states for the first forward and the first backward
# one-pass kernel of a NaLaDiT-S/2 training step (batch 256, 256 px, bf16, no CUDA graphs), summarised
# per line by scripts/ncu_source_lines.py. A second argument 0 profiles the kernels without LePE.
#   bash scripts/device_build.sh prebuilt ncu-lepe[:2|:0]
out=$1
v=${2:-2}
for k in forward backward; do
  NALA_LEPE_IN_ATTENTION=$v ncu --clock-control none --section SpeedOfLight --section SourceCounters --section WarpStateStats --section LaunchStats --section Occupancy \
      --import-source yes --kernel-name regex:"onepass_${k}_kernel" --launch-skip 0 --launch-count 1 -f -o "$out/prof" \
      ./build-device/nala bench train --models NaLaDiT-S/2 --batch 256 --image-size 256 --steps 1 --warmup 0 --cuda-graphs off >> "$out/ncu_lepe.log" 2>&1
  ncu -i "$out/prof.ncu-rep" --page details 2>>"$out/ncu_lepe.log" | grep -E "onepass_|Duration|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Dynamic Shared" | cut -c1-160
  ncu -i "$out/prof.ncu-rep" --page source --print-source cuda,sass --csv > "$out/source_$k.csv" 2>>"$out/ncu_lepe.log"
  python3 scripts/ncu_source_lines.py "$out/source_$k.csv" --top "${NCU_TOP:-25}" > "$out/lepe_source_$k.md" 2>&1
  rm -f "$out/source_$k.csv" "$out/prof.ncu-rep"
  echo "== $k"; head -22 "$out/lepe_source_$k.md" | cut -c1-200
  sed -n '/^shared-memory wavefronts/,$p' "$out/lepe_source_$k.md" | head -${NCU_WF_TOP:-18} | cut -c1-200
done
