#!/usr/bin/env bash
# #34's open question: is nala's DiT-XL/2 step (388 ms measured) 31 ms over the sum of its kernels
# under Nsight Compute (357 ms, each kernel timed alone, clocks free) because of idle time between
# kernels, or because the GPU runs slower clocks in a sustained step (power or thermal limits) than
# for one kernel at a time? nvidia-smi samples the SM clock, power and the clock-event reasons every
# 100 ms while nala's step runs (CUDA graphs, then eager), then the compiled official DiT step (the
# peer), each for ≈ 15 s; a phase's median clock against the idle one answers it.
# CLOCKS_MODEL (default DiT-XL/2), CLOCKS_BATCH (256), CLOCKS_PEER=0 (no peer) change it.
out=$1
n=./build-device/nala
model=${CLOCKS_MODEL:-DiT-XL/2}
batch=${CLOCKS_BATCH:-256}
log=$out/clocks.csv
marks=$out/clocks_marks.txt
: > "$marks"
fields=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits > /dev/null 2>&1 || fields=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active
nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits -lms 100 > "$log" 2> "$out/clocks.err" &
smi=$!
mark() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%N | cut -c1-23) $1" >> "$marks"; }
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  sleep 2; mark idle; sleep 3
  mark "nala graphs"
  run $n bench train --models "$model" --batch "$batch" --image-size 256 --steps 40 --warmup 3 --cuda-graphs on
  mark "nala eager"
  run $n bench train --models "$model" --batch "$batch" --image-size 256 --steps 40 --warmup 3
  mark gap; sleep 3
  if [ "${CLOCKS_PEER:-1}" != 0 ]; then
    official=()
    [ -f .carry/official/DiT/models.py ] && official=(--official .carry/official/DiT)
    mark "peer (compile, then steps)"
    run python3 scripts/bench_pytorch_train.py --models "$model" --batch "$batch" --steps 40 --warmup 3 --compile "${official[@]}"
  fi
  mark end; sleep 1
} > "$out/clocks.md" 2>&1
kill $smi 2> /dev/null
python3 - "$log" "$marks" >> "$out/clocks.md" <<'PY'
import sys, statistics, datetime
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(f[0][:23], "%Y/%m/%d %H:%M:%S.%f")
        rows.append((t, float(f[1]), float(f[2]), float(f[3]), float(f[4]), f[5]))
    except (ValueError, IndexError):
        pass
def bits(v):  # the reasons field as an integer; [N/A] or [Not Supported]: none
    try:
        return int(v, 16)
    except ValueError:
        return 0
marks = []
for line in open(sys.argv[2]):
    d, tm, name = line.split(" ", 2)
    marks.append((datetime.datetime.strptime(d + " " + tm[:12], "%Y/%m/%d %H:%M:%S.%f"), name.strip()))
# A phase also holds process start, compilation and graph capture: only its busy samples (the
# GPU-idle reason bit 0x1 clear, power ≥ half the log's highest) say what clocks a step runs at.
# Reason bits (nvidia-smi): 0x1 idle, 0x4 software power cap, 0x20/0x40 thermal, 0x8 hardware slowdown.
pmax = max((x[3] for x in rows), default=0)
print("\n| phase | samples | busy | SM MHz median (busy) | SM MHz min–max (busy) | power W median (busy) | power W max | °C max | busy with the power cap (0x4) | reasons seen (hex bits: count) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (t0, name), (t1, _) in zip(marks, marks[1:]):
    r = [x for x in rows if t0 <= x[0] < t1]
    if not r:
        print(f"| {name} | 0 | | | | | | | | |"); continue
    reasons = {}
    for x in r: reasons[x[5]] = reasons.get(x[5], 0) + 1
    busy = [x for x in r if not bits(x[5]) & 1 and x[3] >= pmax / 2]
    capped = sum(1 for x in busy if bits(x[5]) & 4)
    clk = (f"{statistics.median(x[1] for x in busy):.0f} | {min(x[1] for x in busy):.0f}–{max(x[1] for x in busy):.0f} | "
           f"{statistics.median(x[3] for x in busy):.0f}") if busy else " | | "
    print(f"| {name} | {len(r)} | {len(busy)} | {clk} | {max(x[3] for x in r):.0f} | {max(x[4] for x in r):.0f} | {capped} | "
          + ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items())) + " |")
PY
grep -E "^\||FAILED" "$out/clocks.md" | grep -v -- "---" | cut -c1-170
exit $failed
