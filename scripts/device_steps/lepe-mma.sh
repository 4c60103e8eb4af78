#!/usr/bin/env bash
# LePE on the tensor cores against the blocks in the one-pass forward (NALA_LEPE_MMA, attention/cuda/
# nala_cuda.cpp): Nsight Compute's SpeedOfLight, WarpStateStats and MemoryWorkloadAnalysis sections for
# the forward one-pass kernels of NaLaDiT-S/2's second training step (batch 256, 256 px, bf16, eager),
# each setting in turn; a table of the raw metrics that say where a kernel waits (the warp states a
# issued instruction, shared-memory wavefronts and bank conflicts), the mean over the launches.
#   bash scripts/device_build.sh prebuilt lepe-mma        (LEPE_MMA_RUNS, default "0 1")
out=$1
runs=${LEPE_MMA_RUNS:-0 1}
failed=0
i=0
for v in $runs; do
  i=$((i + 1))
  NALA_LEPE_MMA=$v ncu --kernel-name regex:onepass_forward --launch-skip 12 --launch-count 6 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --csv --page raw \
    ./build-device/nala bench train --models NaLaDiT-S/2 --batch 256 --image-size 256 --steps 1 --warmup 1 --cuda-graphs off \
    > "$out/lepe_mma_$i.csv" 2> "$out/lepe_mma_$i.err" || { echo "lepe-mma: ncu failed ($v)"; failed=1; }
done
python3 - "$out" $runs > "$out/lepe_mma.md" <<'PY' || failed=1
import csv, re, sys
out, runs = sys.argv[1], sys.argv[2:]
want = re.compile(r"gpu__time_duration.sum|smsp__inst_executed.sum$|issue_active.avg.pct|wavefronts_mem_shared.sum$|bank_conflicts_pipe_lsu_mem_shared.sum$|"
                  r"issue_stalled_(barrier|mio_throttle|short_scoreboard|long_scoreboard|lg_throttle|math_pipe_throttle|not_selected|selected|wait|dispatch_stall|no_instruction|membar)_per_issue_active\.ratio")
table = {}
for i, v in enumerate(runs, 1):
    rows = list(csv.reader(open(f"{out}/lepe_mma_{i}.csv")))
    head = next(r for r in rows if "Kernel Name" in r)
    data = [r for r in rows[rows.index(head) + 2:] if len(r) == len(head)]
    for j, name in enumerate(head):
        if want.search(name):
            vals = [float(r[j].replace(",", "")) for r in data if r[j] not in ("", "n/a")]
            if vals:
                table.setdefault(name, {})[v] = sum(vals) / len(vals)
print("| metric (mean of the forward launches) | " + " | ".join(f"NALA_LEPE_MMA={v}" for v in runs) + " |")
print("|---|" + "---|" * len(runs))
for name in sorted(table):
    print(f"| {name} | " + " | ".join(f"{table[name].get(v, float('nan')):.4g}" for v in runs) + " |")
PY
cat "$out/lepe_mma.md"
exit $failed
