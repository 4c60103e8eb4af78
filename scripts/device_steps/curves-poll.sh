#!/usr/bin/env bash
# Waits for a background curves.sh run (scripts/device_steps/curves.sh) for up to SECONDS, then packs
# what it has so far into OUT/partial-sSEED.tar.gz (every run's metrics.jsonl, evals/ and logs:
# small) and prints where each training and evaluation stands. A device call ends with it, so a
# lease that runs out keeps every evaluation made before it.
#   setsid nohup bash scripts/device_steps/curves.sh build-device/curves-out 6000 SEED > build-device/curves.log 2>&1 < /dev/null &
#   bash scripts/device_steps/curves-poll.sh "$OUT" SEED 540
out=$1
seed=${2:-0}
seconds=${3:-540}
w=${CURVES_DIR:-$(pwd)/build-device/curves}
t0=$(date +%s)
# a call that lands on a fresh machine (the last one was released while idle) finds no run: say so
# at once instead of waiting out the call (2026-12-03: 580 s of device time waited on nothing)
running() { pgrep -f '^(/usr)?(/bin/)?bash [^ ]*device_steps/curves\.sh' > /dev/null; }   # the run itself, not a command line that names it
if [ ! -f "$w/done-s$seed" ] && [ ! -f "$w/failed-s$seed" ] && ! running; then
  if [ -d "$w" ]; then
    echo "no curves.sh is running and $w has no done-s$seed: the run stopped (see build-device/curves.log); packing what is there"
  else
    echo "no curves run on this machine ($w does not exist): a fresh machine, the run went with the last one; start curves.sh again"
    exit 3
  fi
  seconds=0
fi
while [ $(( $(date +%s) - t0 )) -lt "$seconds" ] && [ ! -f "$w/done-s$seed" ] && [ ! -f "$w/failed-s$seed" ] && running; do sleep 5; done
files=$(cd "$w" 2> /dev/null && ls -d *-s"$seed"/metrics.jsonl *-s"$seed"/evals *-s"$seed"/official.json *-s"$seed"/config.json *-s"$seed"/grid.png \
          *-s"$seed".train.log eval-s"$seed".log classifier.log 2> /dev/null)
[ -n "$files" ] && (cd "$w" && tar czf "$out/partial-s$seed.tar.gz" $files)
cp "$(pwd)"/build-device/curves-out/curves-s"$seed".* "$out/" 2> /dev/null
[ -f "$w/failed-s$seed" ] && echo "a training failed at its start (see below)"
if [ -f "$w/done-s$seed" ]; then echo "done: everything trained, evaluated and packed"
elif running; then echo "still running after $(( $(date +%s) - t0 )) s of waiting"
else echo "stopped before it was done (build-device/curves.log says why); re-running curves.sh on this machine resumes it"; fi
for log in "$w"/*-s"$seed".train.log; do [ -f "$log" ] && echo "$(basename "$log" .train.log): $(tail -1 "$log" | tr '\r' '\n' | tail -1 | cut -c1-100)"; done
for d in "$w"/*-s"$seed"/evals; do [ -d "$d" ] && echo "$(basename "$(dirname "$d")"): $(ls "$d" | grep -c json) evaluations, last $(ls "$d" | grep json | tail -1)"; done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2> /dev/null
