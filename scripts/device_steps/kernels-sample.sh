#!/usr/bin/env bash
# Where a sampling step's GPU time goes, kernel by kernel, in bf16 and with the linear layers in FP8
# (`nala bench sample --dtypes bf16` and `--dtypes fp8`, DDPM + CFG 1.5, batch 64, 256 px latents,
# no CUDA graph): Nsight Compute's duration of every kernel, summed by name and by category
# (scripts/kernel_table.py). Each run is the bench's two warm-up steps, one timed step and its one
# float32 forward for the error column, so a sampling step is a third of each table's total less
# that forward's kernels. What #34's FP8 target needs: how much of the step the FP8 GEMMs take
# against the bf16 ones, and what the quantization and the unfused bias-GELU add.
#   bash scripts/device_build.sh prebuilt kernels-sample[:MODEL]
out=$1
model=${2:-DiT-XL/2}
m="--metrics gpu__time_duration.sum --csv --page raw --cache-control none --clock-control none"
for dt in bf16 fp8; do
  ncu $m ./build-device/nala bench sample --models "$model" --batch 64 --measure 1 --dtypes "$dt" --cuda-graphs off \
    > "$out/ks_$dt.csv" 2> "$out/ks_$dt.err" || { tail -5 "$out/ks_$dt.err"; exit 1; }
done
{
  python3 scripts/kernel_table.py "$out/ks_bf16.csv" --title "nala $model sampling, bf16" --top 30
  echo
  python3 scripts/kernel_table.py "$out/ks_fp8.csv" --title "nala $model sampling, fp8 linears" --top 30
} > "$out/kernels_sample.md" 2>&1
rm -f "$out"/ks_*.csv   # big; the tables are what comes back
head -60 "$out/kernels_sample.md"
