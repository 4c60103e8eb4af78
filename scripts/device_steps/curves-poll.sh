#!/usr/bin/env bash
# Waits for a background curves run (scripts/device_steps/curves.sh, launched by curves-start.sh)
# for up to SECONDS, then packs what it has so far into OUT/partial-sSEED.tar.gz (every run's
# metrics.jsonl, evals/ and logs: small) and prints where each training and evaluation stands. A
# device call ends with it, so a lease that runs out keeps every evaluation made before it.
#   bash scripts/device_build.sh prebuilt curves-start:SEED:MODEL,MODEL tests smoke
#   bash scripts/device_steps/curves-poll.sh "$OUT" SEED 585
# With CURVES_POLL_UNTIL=trained it returns once no training runs any more (the evaluations may
# still run), so that `tests smoke` can follow in the same call without slowing a timed training:
#   CURVES_POLL_UNTIL=trained bash scripts/device_steps/curves-poll.sh "$OUT" SEED 585; \
#     bash scripts/device_build.sh tests smoke; bash scripts/device_steps/curves-poll.sh "$OUT" SEED $((585-SECONDS))
# Exit status: 0 done (everything trained, evaluated and packed), 2 still running, 3 no run on this
# machine (a fresh one: the run went with the last), 4 stopped before it was done.
out=$1
seed=${2:-0}
seconds=${3:-540}
root=$(pwd)
w=${CURVES_DIR:-$root/build-device/curves}
. "$root/scripts/device_lib.sh"
t0=$(date +%s)
# a call that lands on a fresh machine (the last one was released while idle) finds no run: say so
# at once instead of waiting out the call (2026-12-03: 580 s of device time waited on nothing)
if [ ! -d "$w" ]; then
  echo "no curves run on this machine ($w does not exist): a fresh machine, the run went with the last one;" \
       "start it again: bash scripts/device_build.sh prebuilt curves-start:$seed:MODEL,MODEL"
  exit 3
fi
# waits while the run's process lives (a training that died at its start leaves failed-sSEED but the
# others train on)
until_trained=0
case "${CURVES_POLL_UNTIL:-done}" in done) ;; trained) until_trained=1 ;; *) echo "CURVES_POLL_UNTIL must be done or trained, got '$CURVES_POLL_UNTIL'" >&2; exit 1 ;; esac
while [ $(( $(date +%s) - t0 )) -lt "$seconds" ] && [ ! -f "$w/done-s$seed" ] && curves_running; do
  [ $until_trained = 1 ] && ! nala_training && break
  sleep 5
done
files=$(cd "$w" 2> /dev/null && ls -d *-s"$seed"/metrics.jsonl *-s"$seed"/evals *-s"$seed"/official.json *-s"$seed"/config.json *-s"$seed"/grid.png \
          *-s"$seed".train.log eval-s"$seed".log classifier.log 2> /dev/null)
[ -n "$files" ] && (cd "$w" && tar czf "$out/partial-s$seed.tar.gz" $files)
cp "$root"/build-device/curves-out/curves-s"$seed".* "$out/" 2> /dev/null
[ -f "$w/failed-s$seed" ] && echo "a training failed at its start (see below)"
status=0
if [ -f "$w/done-s$seed" ]; then echo "done: everything trained, evaluated and packed"
elif curves_running; then echo "still running after $(( $(date +%s) - t0 )) s of waiting"; status=2
else
  echo "stopped before it was done (build-device/curves.log says why); on this machine" \
       "bash scripts/device_build.sh prebuilt curves-start:$seed:MODEL,MODEL resumes it"
  status=4
fi
for log in "$w"/*-s"$seed".train.log; do [ -f "$log" ] && echo "$(basename "$log" .train.log): $(tail -1 "$log" | tr '\r' '\n' | tail -1 | cut -c1-100)"; done
for d in "$w"/*-s"$seed"/evals; do [ -d "$d" ] && echo "$(basename "$(dirname "$d")"): $(ls "$d" | grep -c json) evaluations, last $(ls "$d" | grep json | tail -1)"; done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2> /dev/null
exit $status
