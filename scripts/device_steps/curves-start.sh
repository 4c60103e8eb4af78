#!/usr/bin/env bash
# Launches scripts/device_steps/curves.sh (6,000 steps, lr 1e-3, a checkpoint every 1,000) in the
# background (setsid: it outlives the device call) and returns once its trainings run, so the CUDA
# tests and smoke can run beside it in the same call (the curves time nothing). MODELS is a
# comma-separated list; the official trainers are written official+MODEL (device_build.sh splits a
# step's arguments at ':'); CURVES_STEPS, CURVES_LR, CURVES_EVERY and CURVES_TRAIN_FLAGS (extra
# `nala train` flags, split at spaces) change curves.sh's 6,000 steps, lr 1e-3, a checkpoint every
# 1,000 and none; curves.sh's own CURVES_* settings pass through. The equal-GPU-time run at 4,096
# tokens (docs/experiments.md, one model alone on the GPU, 15 minutes of training, then 4–6
# evaluations of 2,000 samples, ≈ 75 s each for DiT-S/2; batch 64: 256 would not fit at 4,096 tokens;
# lr 3e-4 and a clip: at lr 1e-3 DiT-S/2 diverged at step 2,350, 2026-12-04):
#   CURVES_DIR=build-device/curves-4k CURVES_STEPS=100000 CURVES_EVERY=800 CURVES_BATCH=64 CURVES_LR=3e-4 CURVES_SAMPLES=2000 \
#   CURVES_EVAL_DURING=0 CURVES_UNGUIDED_ONLY=1 CURVES_FP8_LAST=0 CURVES_TRAIN_FLAGS="--image-size 128 --max-minutes 15 --grad-clip 1" \
#     bash scripts/device_build.sh prebuilt curves-start:0:DiT-S/2
# and polls with the same CURVES_DIR (CURVES_POLL_UNTIL=trained before `tests smoke`: curves-poll.sh).
#   bash scripts/device_build.sh prebuilt curves-start:SEED:SiT-S/2,NaLaSiT-S/2 tests smoke; \
#     bash scripts/device_steps/curves-poll.sh $OUT SEED $((585-SECONDS))
# then curves-poll.sh calls back to back (the run lives on the machine: a call that comes after the
# machine's idle window finds a fresh one). The log is build-device/curves.log. A run already going
# on this machine is left alone.
out=$1
seed=${2:-0}
models=$(echo "${3:-DiT-S/2,NaLaDiT-S/2}" | tr ',' ' ' | sed 's/official+/official:/g')
root=$(pwd)
. "$root/scripts/device_lib.sh"
if curves_running; then echo "curves already running on this machine (build-device/curves.log): not started again"; exit 0; fi
w=${CURVES_DIR:-$root/build-device/curves}
rm -f "$w/started-s$seed" "$w/failed-s$seed"   # a previous run's
mkdir -p build-device/curves-out
read -r -a train_flags <<< "${CURVES_TRAIN_FLAGS:-}"
setsid nohup bash scripts/device_steps/curves.sh build-device/curves-out "${CURVES_STEPS:-6000}" "$seed" "$models" "${CURVES_LR:-1e-3}" \
  "${CURVES_EVERY:-1000}" "${train_flags[@]}" > build-device/curves.log 2>&1 < /dev/null &
# curves.sh writes failed-sSEED when a training dies at its start, started-sSEED when none did (after
# a 20 s check, and on a machine without the committed classifier, after training one)
t0=$SECONDS
until [ -f "$w/started-s$seed" ] || [ -f "$w/failed-s$seed" ] || ! kill -0 $! 2> /dev/null || [ $((SECONDS - t0)) -ge ${CURVES_START_WAIT_S:-240} ]; do sleep 2; done
if [ ! -f "$w/started-s$seed" ]; then
  echo "curves did not start (seed $seed, $models):"; tail -20 build-device/curves.log; exit 1
fi
echo "curves started: seed $seed, $models (log build-device/curves.log)"
