#!/usr/bin/env bash
# The NaLaDiT-versus-DiT quality experiment on Fashion-MNIST (32 px, pixel space, patch 2: 256
# tokens): every model trained with the same data, seed, batch (256) and number of steps, sampled
# (DDPM models: DPM-Solver++ 25 steps; flow models: Heun ODE, 13 grid points = 24 evaluations),
# and measured with nala's Fashion-MNIST classifier (FD-FMNIST, P/R, class accuracy).
#   bash scripts/device_steps/experiment.sh OUT [main|ablations] [STEPS]
out=$1
which=${2:-main}
steps=${3:-1000}
n=./build-device/nala
w=build-device/experiment
mkdir -p "$w"
cls=$w/fmnist_classifier.safetensors
[ -f "$cls" ] || $n eval --train-fmnist-classifier --out "$cls" --device cuda > "$w/classifier.log" 2>&1
if [ "$which" = main ]; then
  runs="dit:DiT-S/2: naladit:NaLaDiT-S/2: sit:SiT-S/2: nalasit:NaLaSiT-S/2:"
else
  runs="naladit-alpha20:NaLaDiT-S/2:--alpha=20 naladit-relu:NaLaDiT-S/2:--attention=nala-relu naladit-nolepe:NaLaDiT-S/2:--lepe=0 dit-elu:NaLaDiT-S/2:--attention=elu"
fi
table=$out/experiment_$which.md
echo "| run | model | flags | train img/s | peak MiB | FD-FMNIST | precision | recall | IS-FMNIST | class acc. |" > "$table"
echo "|---|---|---|---|---|---|---|---|---|---|" >> "$table"
for r in $runs; do
  tag=${r%%:*}; rest=${r#*:}; model=${rest%%:*}; flags=${rest#*:}; flags=${flags//=/ }
  rd=$w/$tag
  $n train --preset fashion-mnist-s2 --model "$model" $flags --steps "$steps" --batch 256 --sample-every 0 --ckpt-every "$steps" \
     --log-every 100 --device cuda --out "$rd" > "$w/$tag.train.log" 2>&1 || { echo "| $tag | $model | $flags | train failed |" >> "$table"; tail -5 "$w/$tag.train.log"; continue; }
  ck=$rd/checkpoints/$(printf "%07d" "$steps")
  if [[ $model == *SiT* ]]; then smp="--sampler ode-heun --steps 13"; else smp="--sampler dpm++ --steps 25"; fi
  rm -rf "$rd/samples.npz" "$rd/samples.npz.parts"  # (a re-run: nala sample refuses to replace a finished batch)
  $n sample --ckpt "$ck" $smp --num-samples 5000 --batch-size 1000 --npz "$rd/samples.npz" --device cuda > "$w/$tag.sample.log" 2>&1
  $n sample --ckpt "$ck" $smp --device cuda --out "$w/grid_$tag.png" >> "$w/$tag.sample.log" 2>&1
  $n eval --fmnist --sample "$rd/samples.npz" --classifier "$cls" --device cuda --json "$rd/eval.json" > "$w/$tag.eval.log" 2>&1
  python3 - "$rd" "$tag" "$model" "$flags" >> "$table" <<'PY'
import json, sys
rd, tag, model, flags = sys.argv[1:]
m = [json.loads(l) for l in open(f"{rd}/metrics.jsonl")]
e = json.load(open(f"{rd}/eval.json"))
ips = sum(x["img_per_s"] for x in m[1:]) / max(1, len(m) - 1)  # the first window includes warm-up
peak = max(x.get("peak_mib", 0) for x in m)
print(f"| {tag} | {model} | {flags or '-'} | {ips:.0f} | {peak:.0f} | {e['fd_fmnist']:.3f} | {e['precision_fmnist']:.3f} | "
      f"{e['recall_fmnist']:.3f} | {e['is_fmnist']:.3f} | {e['class_accuracy']:.3f} |")
PY
done
grep -E "test accuracy" "$w/classifier.log" | tail -1 >> "$table"
# one picture: the grids side by side, each under its run name (rows: the 10 classes)
python3 - "$w" "$out/grids_$which.png" $runs <<'PY'
import sys
from PIL import Image, ImageDraw
w, dst, runs = sys.argv[1], sys.argv[2], [r.split(":")[0] for r in sys.argv[3:]]
ims = [(r, Image.open(f"{w}/grid_{r}.png")) for r in runs if __import__("os").path.exists(f"{w}/grid_{r}.png")]
if ims:
    W = sum(i.width for _, i in ims) + 10 * (len(ims) - 1); H = max(i.height for _, i in ims) + 20
    canvas = Image.new("RGB", (W, H), "white"); d = ImageDraw.Draw(canvas); x = 0
    for r, i in ims:
        canvas.paste(i, (x, 20)); d.text((x + 2, 4), r, fill="black"); x += i.width + 10
    canvas.save(dst)
PY
