#!/usr/bin/env bash
# Quality curves (the NaLa-versus-softmax comparison): MODELS trained side by side on one GPU with
# one seed (Fashion-MNIST 32 px, patch 2 = 256 tokens, the fashion-mnist-s2 preset, batch 256,
# learning rate LR), a checkpoint every EVERY steps, each checkpoint evaluated while the trainings
# go on by scripts/experiment_curves.py eval (5,000 samples, unguided and with CFG 1.5, the
# family's fixed sampler, the same noise for every model). At the end OUT/curves-sSEED.tar.gz holds
# every run's config.json, metrics.jsonl, evals/ and a sample grid (small), so the checkpoints need not come back;
# the plots are drawn on the CPU machine (experiment_curves.py plot).
#   bash scripts/device_steps/curves.sh OUT STEPS SEED "MODEL ..." [LR] [EVERY] [EXTRA TRAIN FLAGS...]
# A MODEL may carry its own train flags, MODEL@KEY=VALUE[@…] (the ablations: NaLaDiT-S/2@alpha=20).
# A MODEL written official:DiT-S/2 or official:SiT-S/2 trains with the official DiT / SiT code
# (scripts/official_fmnist.py, the checkouts in .carry/official/, the same data and settings) and
# its last checkpoint is also sampled with the official sampler (mode official-sampler); nala runs'
# last checkpoints also with `--dtype fp8` (mode unguided-fp8).
# A run takes longer than a device call: start it in the background (setsid ... &) and poll;
# W/done-sSEED appears when everything is evaluated and packed (W = CURVES_DIR, default
# build-device/curves). Re-running it resumes the trainings and evaluates what is missing.
# W/failed-sSEED appears within CURVES_START_CHECK_S (20) seconds when a training dies at its start,
# W/started-sSEED when none did (scripts/device_steps/curves-start.sh launches it and waits for these).
# Poll with scripts/device_steps/curves-poll.sh OUT SEED SECONDS at the end of every call: it packs what
# is there, so a lease that ends first keeps the evaluations made so far.
# CURVES_EVAL_DURING=0 evaluates only after the trainings end, CURVES_UNGUIDED_ONLY=1 skips the
# guided evaluations and CURVES_FP8_LAST=0 the FP8 one: the 4,096-token equal-time runs, one model a
# call sequence, alone on the GPU:
#   CURVES_EVAL_DURING=0 CURVES_UNGUIDED_ONLY=1 CURVES_FP8_LAST=0 CURVES_SAMPLES=2000 CURVES_BATCH=64 CURVES_DIR=build-device/curves-4k \
#     curves.sh OUT 100000 0 DiT-S/2 3e-4 800 --image-size 128 --max-minutes 15 --grad-clip 1
# (lr 1e-3 diverged there at step 2,350 for DiT-S/2, 2026-12-04: docs/experiments.md item 6–7)
# NALA_BIN / CURVES_DEVICE / CURVES_SAMPLES / CURVES_BATCH / CURVES_OFFICIAL_SAMPLER_FLAGS: a dry run
# on the CPU build with small settings.
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
batch=${CURVES_BATCH:-256}   # both trainers
w=${CURVES_DIR:-$root/build-device/curves}
mkdir -p "$w" "$out"
rm -f "$w/done-s$seed" "$w/failed-s$seed" "$w/started-s$seed"
# the data: device_build.sh exports NALA_FASHION_MNIST; launched on its own, take the carried copy
if [ -z "${NALA_FASHION_MNIST:-}" ] && [ -d "$root/.carry/fashion-mnist" ]; then export NALA_FASHION_MNIST=$root/.carry/fashion-mnist; fi
. "$root/scripts/device_lib.sh"
device_library_path "$root" || exit 1   # a prebuilt nala (device_build.sh's prebuilt step) finds its libraries
# the classifier behind FD-FMNIST: the committed one (docs/experiments/fmnist_classifier.safetensors,
# scripts/train_fmnist_classifier.sh's recipe), the same for every run from 2026-12-03 on; trained
# here only where it is missing (CURVES_CLASSIFIER names another)
cls=$w/fmnist_classifier.safetensors
src_cls=${CURVES_CLASSIFIER:-$root/docs/experiments/fmnist_classifier.safetensors}
[ -f "$cls" ] || { [ -f "$src_cls" ] && cp "$src_cls" "$cls"; }
[ -f "$cls" ] || $n eval --train-fmnist-classifier --out "$cls" --device "$dev" > "$w/classifier.log" 2>&1 \
  || { tail -5 "$w/classifier.log"; exit 1; }

if [[ " $models " == *" official:"* ]] && [ -z "${CURVES_PYTHONPATH:-}" ]; then
  # the official SiT sampler imports torchdiffeq, which the GPU machine lacks: .carry/wheels has it
  python3 -m pip install -q --no-index --no-deps --target /tmp/nala-official "$root"/.carry/wheels/torchdiffeq-*.whl > /dev/null 2>&1
  CURVES_PYTHONPATH=/tmp/nala-official
fi
runs=()
pids=()
rcs=()
official_runs=()
for model in $models; do
  rd=$w/$(echo "$model" | sed 's|/|_|g; s|[:@=]|-|g')-s$seed
  runs+=("$rd")
  # MODEL@KEY=VALUE[@KEY=VALUE…]: the ablations (#33), nala train's --KEY VALUE for that run alone, e.g.
  # NaLaDiT-S/2@alpha=20, NaLaDiT-S/2@attention=nala-relu, NaLaDiT-S/2@lepe=0, NaLaDiT-S/2@attention=elu
  # (run folder NaLaDiT-S_2-alpha-20-sSEED: its own line in experiment_curves.py's plots)
  own=()
  if [[ $model == *@* ]]; then
    IFS=@ read -r -a parts <<< "$model"
    model=${parts[0]}
    for kv in "${parts[@]:1}"; do
      [[ $kv == *=* ]] || { echo "curves.sh: '$kv' in a model entry is not KEY=VALUE" >&2; exit 1; }
      own+=("--${kv%%=*}" "${kv#*=}")
    done
  fi
  # OpenMP threads: a few a process, several processes share the machine's cores
  if [[ $model == official:* ]]; then
    # the official trainer (scripts/official_fmnist.py) with the checkout prepare_carry.sh put in .carry/official
    m=${model#official:}
    official_runs+=("$rd:$m")
    [ -d "$rd/checkpoints" ] && [ -f "$rd/checkpoints/$(printf %07d "$steps")/state.json" ] && { pids+=(0); continue; }
    rm -rf "$rd"  # it does not resume: an unfinished run starts again
    OMP_NUM_THREADS=2 PYTHONPATH=${CURVES_PYTHONPATH:-} python3 scripts/official_fmnist.py train --repo "$root/.carry/official/${m%%-*}" \
      --model "$m" --lr "$lr" --seed "$seed" --steps "$steps" --batch "$batch" --ckpt-every "$every" --device "$dev" \
      $([ "$dev" = cuda ] && echo --compile || echo --precision fp32) --out "$rd" > "$rd.train.log" 2>&1 &
  else
    OMP_NUM_THREADS=2 $n train --preset fashion-mnist-s2 --model "$model" --lr "$lr" --seed "$seed" --steps "$steps" --batch "$batch" \
      --ckpt-every "$every" --keep-last $(( steps / every + 1 )) --sample-every 0 --log-every 50 --workers 2 \
      --cuda-graphs "$([ "$dev" = cuda ] && echo true || echo false)" --device "$dev" "${extra[@]}" "${own[@]}" --out "$rd" \
      > "$rd.train.log" 2>&1 &
  fi
  pids+=($!)
done

# a run that dies at its start (bad data path, out of memory) says so now, not after the call that waits for it
sleep ${CURVES_START_CHECK_S:-20}
for i in "${!pids[@]}"; do
  p=${pids[$i]}
  if [ "$p" != 0 ] && ! kill -0 "$p" 2> /dev/null; then
    wait "$p"; rcs[$i]=$?   # waited once: the final loop reads the status from here
    [ "${rcs[$i]}" != 0 ] && { echo "${runs[$i]}: train failed at its start"; tail -3 "${runs[$i]}.train.log"; touch "$w/failed-s$seed"; }
  fi
done
[ -f "$w/failed-s$seed" ] || touch "$w/started-s$seed"   # curves-start.sh waits for one of the two

evaluate() {
  python3 scripts/experiment_curves.py eval "${runs[@]}" --classifier "$cls" --samples "$samples" --device "$dev" \
    --nala "$n" $([ "${CURVES_UNGUIDED_ONLY:-0}" = 1 ] && echo --unguided-only) "$@" >> "$w/eval-s$seed.log" 2>&1
}
# evaluate checkpoints as they appear (a run's first checkpoint may come after the loop's first look)
while true; do
  alive=0
  for p in "${pids[@]}"; do [ "$p" != 0 ] && kill -0 "$p" 2> /dev/null && alive=1; done
  [ $alive -eq 0 ] && break
  ready=1
  for rd in "${runs[@]}"; do [ -d "$rd/checkpoints" ] || ready=0; done
  [ $ready -eq 1 ] && [ "${CURVES_EVAL_DURING:-1}" = 1 ] && evaluate
  sleep 15
done
failed=0
for i in "${!pids[@]}"; do
  [ "${pids[$i]}" = 0 ] && continue
  if [ -n "${rcs[$i]:-}" ]; then rc=${rcs[$i]}; else wait "${pids[$i]}"; rc=$?; fi
  [ "$rc" = 0 ] || { failed=1; echo "${runs[$i]}: train failed"; tail -3 "${runs[$i]}.train.log"; }
done
# the last checkpoints also with the linear layers in FP8 (mode unguided-fp8: `nala sample --dtype fp8`, the same
# noise); CURVES_FP8_LAST=0: only what is missing in bf16 (the equal-time runs at 4,096 tokens)
if [ "${CURVES_FP8_LAST:-1}" = 1 ]; then evaluate --fp8-last; else evaluate; fi || { failed=1; tail -5 "$w/eval-s$seed.log"; }
# a sample grid of each nala run's last checkpoint (unguided, the family's sampler, seed 0): grid.png
for rd in "${runs[@]}"; do
  [ -f "$rd/official.json" ] || [ -f "$rd/grid.png" ] && continue
  last=$(ls -d "$rd"/checkpoints/*/ 2> /dev/null | tail -1)
  [ -n "$last" ] || continue
  case $(basename "$rd") in *SiT*) smp=(--sampler ode-heun --steps 13) ;; *) smp=(--sampler dpm++ --steps 25) ;; esac
  $n sample --ckpt "$last" "${smp[@]}" --seed 0 --device "$dev" --out "$rd/grid.png" >> "$w/eval-s$seed.log" 2>&1 \
    || { failed=1; tail -3 "$w/eval-s$seed.log"; }
done
# the official runs' last checkpoint also with the official sampler (DiT: 250 DDPM steps; SiT: dopri5), unguided
for entry in "${official_runs[@]}"; do
  rd=${entry%%:*}; m=${entry#*:}; ck=$rd/checkpoints/$(printf %07d "$steps"); dst=$rd/evals/$(printf %07d "$steps")_official-sampler.json
  [ -f "$dst" ] || [ ! -d "$ck" ] && continue
  PYTHONPATH=${CURVES_PYTHONPATH:-} python3 scripts/official_fmnist.py sample --repo "$root/.carry/official/${m%%-*}" --model "$m" \
      --ckpt "$ck" --num-samples "$samples" --device "$dev" ${CURVES_OFFICIAL_SAMPLER_FLAGS:-} --out "$rd/official_samples.npz" >> "$w/eval-s$seed.log" 2>&1 \
    && $n eval --fmnist --sample "$rd/official_samples.npz" --classifier "$cls" --device "$dev" --json "$rd/official_eval.json" >> "$w/eval-s$seed.log" 2>&1 \
    && python3 - "$rd/official_eval.json" "$ck/state.json" "$dst" "$samples" <<'PY' || { failed=1; tail -5 "$w/eval-s$seed.log"; }
import json, os, sys
ev, state, dst, samples = sys.argv[1:]
e, s = json.load(open(ev)), json.load(open(state))
sampler = "official p_sample_loop, 250 steps" if s["model"].startswith("DiT") else "official sample_ode, dopri5"
e.update({"step": s["step"], "images_seen": s["images_seen"], "model": s["model"], "mode": "official-sampler", "cfg_scale": 1.0,
          "samples": int(samples), "sampler": sampler})
json.dump(e, open(dst + ".tmp", "w"))
os.replace(dst + ".tmp", dst)
PY
done

# small files only: configs, metrics, evaluations, logs
(cd "$w" && tar czf "$out/curves-s$seed.tar.gz" $(for rd in "${runs[@]}"; do b=$(basename "$rd")
   for f in "$b/config.json" "$b/official.json" "$b/metrics.jsonl" "$b/evals" "$b/grid.png" "$b.train.log"; do [ -e "$f" ] && echo "$f"; done; done) "eval-s$seed.log")
python3 scripts/experiment_curves.py plot "${runs[@]}" --out "$w/plot-s$seed" > /dev/null 2>&1 || true  # the table only, if matplotlib is there
for rd in "${runs[@]}"; do
  last=$(ls "$rd/evals" 2> /dev/null | tail -2 | tr '\n' ' ')
  echo "$(basename "$rd"): $(tail -1 "$rd/metrics.jsonl" 2> /dev/null | python3 -c 'import json,sys; m=json.loads(sys.stdin.read() or "{}"); print("step", m.get("step"), "loss %.4f" % m.get("loss", float("nan")))') evals: $last"
done | tee "$out/curves-s$seed.txt"
touch "$w/done-s$seed"
exit $failed
