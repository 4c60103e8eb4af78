#!/usr/bin/env bash
# Learning-rate sweep on Fashion-MNIST (32 px, patch 2 = 256 tokens, batch 256, the
# fashion-mnist-s2 preset: EMA 0.9995 with warm-up), several trainings side by side on one GPU
# (they time nothing). Each run: train STEPS steps, draw SAMPLES images from the EMA weights with
# the family's fixed sampler (DiT/NaLaDiT: DPM-Solver++ 25; SiT/NaLaSiT: Heun ODE, 13 grid points,
# as scripts/experiment_curves.py), score them with `nala eval --fmnist`.
#   bash scripts/device_steps/lr-sweep.sh OUT STEPS "LR LR ..." "MODEL MODEL ..." [PARALLEL] [SAMPLES] [EXTRA TRAIN FLAGS...]
# Writes OUT/lr_sweep.md (a row a run) and OUT/lr_sweep.jsonl (the same, with every run's loss
# curve), so the runs' folders need not come back.
out=$1
steps=${2:-1000}
lrs=${3:-"1e-4 3e-4 1e-3"}
models=${4:-"DiT-S/2 NaLaDiT-S/2 SiT-S/2 NaLaSiT-S/2"}
parallel=${5:-4}
samples=${6:-2000}
extra=""
if [ $# -gt 6 ]; then shift 6; extra="$*"; fi
root=$(pwd)
# NALA_BIN, SWEEP_DEVICE, SWEEP_DIR: a dry run elsewhere (the CPU build, a tiny model).
# SWEEP_FLAGS: train flags that change speed, not results (e.g. --cuda-graphs true), kept out of the
# runs' names and the table.
n=${NALA_BIN:-$root/build-device/nala}
dev=${SWEEP_DEVICE:-cuda}
w=${SWEEP_DIR:-$root/build-device/lr-sweep}
mkdir -p "$w"
cls=$w/fmnist_classifier.safetensors
[ -f "$cls" ] || $n eval --train-fmnist-classifier --out "$cls" --device $dev > "$w/classifier.log" 2>&1 || { tail -5 "$w/classifier.log"; exit 1; }

one_run() {  # MODEL LR
  local model=$1 lr=$2
  local tag
  tag=$(echo "${model}-lr${lr}${extra:+-$(echo $extra | tr -c 'a-zA-Z0-9.\n' '_')}" | tr '/' '_')
  local rd=$w/$tag
  rm -rf "$rd"
  $n train --preset fashion-mnist-s2 --model "$model" --lr "$lr" --steps "$steps" --ckpt-every "$steps" --sample-every 0 \
     --log-every 50 --device $dev --workers 2 --tensorboard false $extra ${SWEEP_FLAGS:-} --out "$rd" > "$w/$tag.train.log" 2>&1 || { echo "$tag: train failed"; tail -3 "$w/$tag.train.log"; return; }
  local smp
  if [[ $model == *SiT* ]]; then smp="--sampler ode-heun --steps 13"; else smp="--sampler dpm++ --steps 25"; fi
  $n sample --ckpt "$rd/checkpoints/$(printf %07d "$steps")" $smp --num-samples "$samples" --batch-size 1000 --npz "$rd/samples.npz" \
     --device $dev > "$w/$tag.sample.log" 2>&1 || { echo "$tag: sample failed"; tail -3 "$w/$tag.sample.log"; return; }
  $n eval --fmnist --sample "$rd/samples.npz" --classifier "$cls" --device $dev --json "$rd/eval.json" > "$w/$tag.eval.log" 2>&1 \
     || { echo "$tag: eval failed"; tail -3 "$w/$tag.eval.log"; return; }
  python3 - "$rd" "$tag" "$model" "$lr" "$steps" "$samples" "$extra" >> "$w/results.jsonl" <<'PY'
import json, sys
rd, tag, model, lr, steps, samples, extra = sys.argv[1:]
m = [json.loads(l) for l in open(f"{rd}/metrics.jsonl")]
e = json.load(open(f"{rd}/eval.json"))
print(json.dumps({"run": tag, "model": model, "lr": float(lr), "steps": int(steps), "samples": int(samples), "flags": extra,
                  "eval": e, "loss": [[x["step"], x["loss"]] for x in m],
                  "img_per_s": sum(x["img_per_s"] for x in m[1:]) / max(1, len(m) - 1)}))
PY
}
export -f one_run
export n w steps samples extra dev cls SWEEP_FLAGS
: > "$w/results.jsonl"
for m in $models; do for lr in $lrs; do echo "$m $lr"; done; done | xargs -P "$parallel" -L 1 bash -c 'one_run $0 $1'
cp "$w/results.jsonl" "$out/lr_sweep.jsonl"
python3 - "$w/results.jsonl" > "$out/lr_sweep.md" <<'PY'
import json, sys
rows = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: (r["model"], r["lr"]))
print("| model | lr | flags | steps | samples | FD-FMNIST | precision | recall | IS-FMNIST | class acc. | last loss (mean of 50) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    e = r["eval"]
    print(f"| {r['model']} | {r['lr']:g} | {r['flags'] or '-'} | {r['steps']} | {r['samples']} | {e['fd_fmnist']:.2f} | {e['precision_fmnist']:.3f} | "
          f"{e['recall_fmnist']:.3f} | {e['is_fmnist']:.3f} | {e['class_accuracy']:.3f} | {r['loss'][-1][1]:.4f} |")
PY
cat "$out/lr_sweep.md"
