#!/usr/bin/env bash
# Quality curves (the NaLa-versus-softmax comparison): MODELS trained side by side on one GPU with
# one seed (Fashion-MNIST 32 px, patch 2 = 256 tokens, the fashion-mnist-s2 preset, batch 256,
# learning rate LR), a checkpoint every EVERY steps, each checkpoint evaluated while the trainings
# go on by scripts/experiment_curves.py eval (5,000 samples, unguided and with CFG 1.5, the
# family's fixed sampler, the same noise for every model). At the end OUT/curves-sSEED.tar.gz holds
# every run's config.json, metrics.jsonl and evals/ (small), so the checkpoints need not come back;
# the plots are drawn on the CPU machine (experiment_curves.py plot).
#   bash scripts/device_steps/curves.sh OUT STEPS SEED "MODEL ..." [LR] [EVERY] [EXTRA TRAIN FLAGS...]
# A run takes longer than a device call: start it in the background (setsid ... &) and poll;
# W/done-sSEED appears when everything is evaluated and packed (W = CURVES_DIR, default
# build-device/curves). Re-running it resumes the trainings and evaluates what is missing.
# NALA_BIN / CURVES_DEVICE / CURVES_SAMPLES: a dry run on the CPU build with a tiny model.
set -uo pipefail
out=$1
steps=${2:-6000}
seed=${3:-0}
models=${4:-"DiT-S/2 NaLaDiT-S/2 SiT-S/2 NaLaSiT-S/2"}
lr=${5:-1e-3}
every=${6:-1000}
extra=()
if [ $# -gt 6 ]; then shift 6; extra=("$@"); fi
root=$(pwd)
n=${NALA_BIN:-$root/build-device/nala}
dev=${CURVES_DEVICE:-cuda}
samples=${CURVES_SAMPLES:-5000}
w=${CURVES_DIR:-$root/build-device/curves}
mkdir -p "$w" "$out"
rm -f "$w/done-s$seed"
cls=$w/fmnist_classifier.safetensors
[ -f "$cls" ] || $n eval --train-fmnist-classifier --out "$cls" --device "$dev" > "$w/classifier.log" 2>&1 \
  || { tail -5 "$w/classifier.log"; exit 1; }

runs=()
pids=()
for model in $models; do
  rd=$w/$(echo "$model" | tr '/' '_')-s$seed
  runs+=("$rd")
  # OpenMP threads: a few a process, several processes share the machine's cores
  OMP_NUM_THREADS=2 $n train --preset fashion-mnist-s2 --model "$model" --lr "$lr" --seed "$seed" --steps "$steps" \
    --ckpt-every "$every" --keep-last $(( steps / every + 1 )) --sample-every 0 --log-every 50 --workers 2 \
    --cuda-graphs "$([ "$dev" = cuda ] && echo true || echo false)" --device "$dev" "${extra[@]}" --out "$rd" \
    > "$rd.train.log" 2>&1 &
  pids+=($!)
done

evaluate() {
  python3 scripts/experiment_curves.py eval "${runs[@]}" --classifier "$cls" --samples "$samples" --device "$dev" \
    --nala "$n" >> "$w/eval-s$seed.log" 2>&1
}
# evaluate checkpoints as they appear (a run's first checkpoint may come after the loop's first look)
while true; do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && alive=1; done
  [ $alive -eq 0 ] && break
  ready=1
  for rd in "${runs[@]}"; do [ -d "$rd/checkpoints" ] || ready=0; done
  [ $ready -eq 1 ] && evaluate
  sleep 15
done
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { failed=1; echo "${runs[$i]}: train failed"; tail -3 "${runs[$i]}.train.log"; }
done
evaluate || { failed=1; tail -5 "$w/eval-s$seed.log"; }

# small files only: configs, metrics, evaluations, logs
(cd "$w" && tar czf "$out/curves-s$seed.tar.gz" $(for rd in "${runs[@]}"; do b=$(basename "$rd")
   for f in "$b/config.json" "$b/metrics.jsonl" "$b/evals" "$b.train.log"; do [ -e "$f" ] && echo "$f"; done; done) "eval-s$seed.log")
python3 scripts/experiment_curves.py plot "${runs[@]}" --out "$w/plot-s$seed" > /dev/null 2>&1 || true  # the table only, if matplotlib is there
for rd in "${runs[@]}"; do
  last=$(ls "$rd/evals" 2> /dev/null | tail -2 | tr '\n' ' ')
  echo "$(basename "$rd"): $(tail -1 "$rd/metrics.jsonl" 2> /dev/null | python3 -c 'import json,sys; m=json.loads(sys.stdin.read() or "{}"); print("step", m.get("step"), "loss %.4f" % m.get("loss", float("nan")))') evals: $last"
done | tee "$out/curves-s$seed.txt"
touch "$w/done-s$seed"
exit $failed
