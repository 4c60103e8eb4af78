#!/usr/bin/env bash
# Where the fused NaLa kernels spend their instructions and stalls, per CUDA source line: Nsight
# Compute's source counters for two kernels (default dq, dkv) (B=256, N=256, H=6, d=64, bf16), as CSV,
# summarised per line by scripts/ncu_source_lines.py. NCU_DTYPE=bf16 profiles the bf16 inputs (the
# one-pass kernels: ncu-source:onepass_backward:onepass_backward).
out=$1
ncu --clock-control none --section SourceCounters --section WarpStateStats --import-source yes \
    --kernel-name regex:"${2:-dq_kernel|dkv_kernel}" --launch-skip 0 --launch-count 2 -f -o "$out/prof" \
    ./build-device/nala bench attention --shapes 256x256 --head-dim 64 ${NCU_DTYPE:+--dtype $NCU_DTYPE} --reps 1 --no-reference > "$out/ncu_source.log" 2>&1
for k in ${3:-dq_kernel dkv_kernel}; do
  ncu -i "$out/prof.ncu-rep" --kernel-name regex:"$k" --page source --print-source cuda,sass --csv > "$out/source_$k.csv" 2>>"$out/ncu_source.log" \
    || ncu -i "$out/prof.ncu-rep" --kernel-name regex:"$k" --page source --csv > "$out/source_$k.csv" 2>>"$out/ncu_source.log"
  echo "$k: $(wc -l < "$out/source_$k.csv") lines" >> "$out/ncu_source.log"
  python3 scripts/ncu_source_lines.py "$out/source_$k.csv" --top 25 > "$out/bench_source_$k.md" 2>&1
done
rm -f "$out/prof.ncu-rep"
tail -5 "$out/ncu_source.log"
