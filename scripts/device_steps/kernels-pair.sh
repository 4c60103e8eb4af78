#!/usr/bin/env bash
# Two models' steady-state training steps kernel by kernel, and where the first spends what the second
# does not: Nsight Compute's duration and DRAM bytes of every kernel of one CUDA-graph step (its
# second replay, NALA_PROFILE_TIMED: bench/timing.h), batch 256, 256 px latents, bf16, for each model,
# then scripts/kernel_table.py's table of each and the first minus the second (--against).
#   bash scripts/device_build.sh prebuilt kernels-pair[:MODEL_A:MODEL_B]   (default NaLaDiT-S/2 against DiT-S/2)
# KERNELS_BANDWIDTH (GB/s, default 2900: what nala's row kernels reach on an H100; 4300 on an H200)
# sets the tables' DRAM floor. The CSVs go to $OUT compressed (kernels_pair_*.csv.gz).
out=$1
a=${2:-NaLaDiT-S/2}
b=${3:-DiT-S/2}
bw=${KERNELS_BANDWIDTH:-2900}
m="--metrics gpu__time_duration.sum,dram__bytes.sum --csv --page raw --cache-control none --clock-control none"
tag() { echo "$1" | tr -c 'A-Za-z0-9\n' '_'; }  # a model's name as a file name
ta=$(tag "$a")
tb=$(tag "$b")
failed=0
for model in "$a" "$b"; do
  t=$(tag "$model")
  NALA_PROFILE_TIMED=1 ncu --profile-from-start off $m ./build-device/nala bench train --models "$model" --batch 256 --image-size 256 \
    --steps 1 --warmup 2 --cuda-graphs on > "$out/kernels_pair_$t.csv" 2> "$out/kernels_pair_$t.err" || { echo "kernels-pair: ncu failed on $model"; failed=1; }
done
python3 scripts/kernel_table.py "$out/kernels_pair_$ta.csv" --title "$a" --top 40 --bandwidth "$bw" \
  --against "$out/kernels_pair_$tb.csv" --against-title "$b" > "$out/kernels_pair.md" 2>&1 || failed=1
python3 scripts/kernel_table.py "$out/kernels_pair_$tb.csv" --title "$b" --top 40 --bandwidth "$bw" >> "$out/kernels_pair.md" 2>&1 || failed=1
gzip -f "$out/kernels_pair_$ta.csv" "$out/kernels_pair_$tb.csv"
grep -A 16 "^### .* − " "$out/kernels_pair.md" | cut -c1-160
exit $failed
