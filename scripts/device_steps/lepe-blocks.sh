#!/usr/bin/env bash
# LePE inside the one-pass kernels over token blocks against runs of 4 (NALA_LEPE_BLOCKS,
# attention/cuda/nala_cuda.cpp): Nsight Compute's duration and executed warp instructions of the
# forward and backward one-pass kernels of NaLaDiT-S/2's training step (batch 256, 256 px, bf16, the
# second step, eager), each setting twice, alternating; a table of the means a kernel and setting.
#   bash scripts/device_build.sh prebuilt lepe-blocks        (LEPE_BLOCKS_RUNS, default "0 all 0 all")
# A run `baseline` takes the defaults with the baseline's libraries, which an ab-lib step earlier in the
# call unpacked into build-device/baseline/lib (a kernel change against the code before it); a run
# NAME=VALUE[,NAME=VALUE] sets those switches with the defaults otherwise (e.g. NALA_LEPE_MMA=1).
out=$1
# the per-run CSVs and logs stay on the machine (build-device/logs/lepe-blocks): $OUT gets the table only, so that a
# later step's files still fit the 8 a call brings back (2026-12-07: ncu-lepe's tables were left out behind them)
raw=build-device/logs/lepe-blocks
rm -rf "$raw" && mkdir -p "$raw"
runs=${LEPE_BLOCKS_RUNS:-0 all 0 all}
failed=0
i=0
for v in $runs; do
  i=$((i + 1))
  case "$v" in
    baseline) set -- env LD_LIBRARY_PATH="$(pwd)/build-device/baseline/lib:$LD_LIBRARY_PATH" ;;
    *=*) set -- env ${v//,/ } ;;
    *) set -- env NALA_LEPE_BLOCKS="$v" ;;
  esac
  "$@" ncu --kernel-name regex:onepass_ --launch-skip 24 --launch-count 24 --clock-control none \
    --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv --page raw \
    ./build-device/nala bench train --models NaLaDiT-S/2 --batch 256 --image-size 256 --steps 1 --warmup 1 --cuda-graphs off \
    > "$raw/lepe_blocks_${i}.csv" 2> "$raw/lepe_blocks_${i}.err" || { echo "lepe-blocks: ncu failed ($v)"; failed=1; }
done
python3 - "$raw" $runs > "$out/lepe_blocks.md" <<'PY' || failed=1
import csv, sys, collections
raw, runs = sys.argv[1], sys.argv[2:]
acc = collections.defaultdict(list)  # (kernel, setting) -> [(µs, warp instructions)]
for i, v in enumerate(runs, 1):
    rows = list(csv.reader(open(f"{raw}/lepe_blocks_{i}.csv")))
    head = next(r for r in rows if "Kernel Name" in r)
    k, t, n = head.index("Kernel Name"), head.index("gpu__time_duration.sum"), head.index("smsp__inst_executed.sum")
    units = rows[rows.index(head) + 1]
    us = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[units[t]]
    for r in rows[rows.index(head) + 2:]:
        if len(r) > max(k, t, n) and "onepass" in r[k]:
            name = "backward" if "backward" in r[k] else "forward"
            acc[(name, v)].append((float(r[t].replace(",", "")) * us, float(r[n].replace(",", ""))))
print("| kernel | run (NALA_LEPE_BLOCKS or switches) | launches | µs a launch | warp instructions a launch |")
print("|---|---|---|---|---|")
for (name, v), xs in sorted(acc.items()):
    print(f"| {name} | {v} | {len(xs)} | {sum(x[0] for x in xs) / len(xs):.1f} | {sum(x[1] for x in xs) / len(xs):.4g} |")
PY
cat "$out/lepe_blocks.md"
exit $failed
