#!/usr/bin/env bash
# Launches scripts/device_steps/curves.sh in the background (setsid: it outlives the device call)
# and returns once its trainings have started, so the CUDA tests and smoke can run beside it in the
# same call (the curves time nothing). MODELS is a comma-separated list.
#   bash scripts/device_build.sh build curves-start:SEED:SiT-S/2,NaLaSiT-S/2 tests smoke; \
#     bash scripts/device_steps/curves-poll.sh $OUT SEED $((585-SECONDS))
# then curves-poll.sh calls back to back (the run lives on the machine: a call that comes after the
# machine's idle window finds a fresh one). The log is build-device/curves.log.
out=$1
seed=${2:-0}
models=$(echo "${3:-DiT-S/2,NaLaDiT-S/2}" | tr ',' ' ')
w=${CURVES_DIR:-$(pwd)/build-device/curves}
rm -f "$w/started-s$seed" "$w/failed-s$seed"   # a previous run's
mkdir -p build-device/curves-out
setsid nohup bash scripts/device_steps/curves.sh build-device/curves-out 6000 "$seed" "$models" > build-device/curves.log 2>&1 < /dev/null &
# curves.sh writes failed-sSEED when a training dies at its start, started-sSEED when none did
# (after the Fashion-MNIST classifier, which a fresh machine trains first, and a 20 s check)
t0=$SECONDS
until [ -f "$w/started-s$seed" ] || [ -f "$w/failed-s$seed" ] || ! kill -0 $! 2> /dev/null || [ $((SECONDS - t0)) -ge ${CURVES_START_WAIT_S:-240} ]; do sleep 2; done
if [ ! -f "$w/started-s$seed" ]; then
  echo "curves did not start (seed $seed, $models):"; tail -20 build-device/curves.log; exit 1
fi
echo "curves started: seed $seed, $models (log build-device/curves.log)"
