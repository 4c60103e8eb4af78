#!/usr/bin/env bash
# Every sub-command of `nala` end to end on CUDA, as a user runs it; a step fails on a non-zero exit
# status or a missing or malformed output (checked with numpy, PIL and safetensors, which the GPU
# machine has). Run with `build` in the same call (scripts/device_build.sh build tests smoke):
#   bash scripts/device_steps/smoke.sh OUT
# Needs .carry/ (scripts/prepare_carry.sh): Fashion-MNIST and the random-weight VAE (.carry/vae).
# Writes OUT/smoke.md (one row a step); exits 1 if any step failed.
out=$1
root=$(pwd)
# NALA_BIN, SMOKE_DEVICE, SMOKE_DIR: a dry run elsewhere (e.g. NALA_BIN=build/nala SMOKE_DEVICE=cpu on the CPU machine)
n=${NALA_BIN:-$root/build-device/nala}
dev=${SMOKE_DEVICE:-cuda}
w=${SMOKE_DIR:-$root/build-device/smoke}
# the models and batch of the training steps (the CPU dry run takes tiny ones: NaLaSiT-T/4 DiT-T/4 8)
read -r nala_model dit_model batch <<< "${SMOKE_MODELS:-NaLaSiT-S/2 DiT-S/2 64}"
rm -rf "$w"
mkdir -p "$w"
table=$out/smoke.md
echo "| step | exit | s | check |" > "$table"
echo "|---|---|---|---|" >> "$table"
failed=0

# step NAME CHECK-SCRIPT -- COMMAND...: runs COMMAND (log in $w/NAME.log), then the Python CHECK-SCRIPT
# (empty: none) with $w as its working folder; the row says which failed.
step() {
  local name=$1 check=$2
  shift 3
  local t0=$(date +%s.%N)
  "$@" > "$w/$name.log" 2>&1
  local rc=$?
  local s=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')")
  local verdict=ok
  if [ $rc -ne 0 ]; then
    verdict="FAILED: exit $rc; $(tail -c 300 "$w/$name.log" | tr '\n|' ' /')"
  elif [ -n "$check" ]; then
    verdict=$(cd "$w" && python3 -c "$check" 2>&1 | tail -c 300 | tr '\n|' ' /') || true
    [ -z "$verdict" ] && verdict=ok
  fi
  [ "$verdict" = ok ] || failed=1
  echo "| $name | $rc | $s | $verdict |" >> "$table"
}

# ---- train: both objectives, NaLa and softmax, then a resume to more steps ----------------------
step train-nalasit "
import json
m = [json.loads(l) for l in open('nalasit/metrics.jsonl')]
steps = [x['step'] for x in m if 'loss' in x]
assert steps == sorted(set(steps)) and steps[-1] == 20, steps
import os; assert os.path.isdir('nalasit/checkpoints/0000020'), os.listdir('nalasit/checkpoints')
" -- $n train --preset fashion-mnist-s2 --model $nala_model --steps 20 --batch $batch --log-every 5 --ckpt-every 10 --sample-every 10 \
       --device $dev --out "$w/nalasit"
step train-resume "
import json, os
m = [json.loads(l) for l in open('nalasit/metrics.jsonl')]
steps = [x['step'] for x in m if 'loss' in x]
assert steps == sorted(set(steps)) and steps[-1] == 40, steps
assert os.path.isdir('nalasit/checkpoints/0000040'), os.listdir('nalasit/checkpoints')
assert all(x['loss'] == x['loss'] for x in m if 'loss' in x), 'NaN loss'
" -- $n train --preset fashion-mnist-s2 --model $nala_model --steps 40 --batch $batch --log-every 5 --ckpt-every 10 --sample-every 10 \
       --device $dev --out "$w/nalasit"
step train-dit-graphs "
import json, math, os
assert os.path.isdir('dit/checkpoints/0000020'), os.listdir('dit/checkpoints')
m = [json.loads(l) for l in open('dit/metrics.jsonl')]
lr = {x['step']: x['lr'] for x in m}
# the rate of the step ending at k (step k - 1 counted from 0): warm-up over 5 steps, then cosine over 15
want = {k: 2e-3 * k / 5 if k <= 5 else 2e-3 * (1 + math.cos(math.pi * (k - 6) / 15)) / 2 for k in (5, 10, 15, 20)}
assert all(abs(lr[k] - want[k]) <= 1e-12 + 1e-9 * want[k] for k in want), (lr, want)
assert all(x['loss'] == x['loss'] for x in m), 'NaN loss'
" -- $n train --preset fashion-mnist-s2 --model $dit_model --steps 20 --batch $batch --log-every 5 --ckpt-every 20 --sample-every 0 \
       --lr 2e-3 --lr-schedule cosine --lr-warmup 5 $([ $dev = cuda ] && echo --cuda-graphs true) --device $dev --out "$w/dit"
ck=$w/nalasit/checkpoints/0000040

# ---- sample: a grid, and an FID batch interrupted and resumed ----------------------------------
step sample-grid "
from PIL import Image
im = Image.open('grid.png'); assert im.size == (8 * 34 + 2, 10 * 34 + 2), im.size
" -- $n sample --ckpt "$ck" --steps 10 --device $dev --out "$w/grid.png"
step sample-npz "
import numpy as np
z = np.load('full.npz'); assert z['arr_0'].shape == (300, 32, 32, 3) and z['arr_0'].dtype == np.uint8, z['arr_0'].shape
assert z['arr_1'].shape == (300,) and z['arr_1'].max() < 10 and z['arr_0'].std() > 1
" -- $n sample --ckpt "$ck" --steps 10 --num-samples 300 --batch-size 50 --device $dev --npz "$w/full.npz"
if [ "$dev" = cuda ]; then  # the network call replayed as a CUDA graph: the same samples as eager
  step sample-npz-graphs "
import numpy as np
a, b = np.load('full.npz'), np.load('graphs.npz')
assert (a['arr_1'] == b['arr_1']).all(), 'labels differ'
d = np.abs(a['arr_0'].astype(int) - b['arr_0'].astype(int)).max()
assert d == 0, f'--cuda-graphs true differs from eager by up to {d}'
" -- $n sample --ckpt "$ck" --steps 10 --num-samples 300 --batch-size 50 --device $dev --cuda-graphs true --npz "$w/graphs.npz"
  # the linear layers' GEMMs in FP8 (as a graph too): the same labels, samples close to bf16's, not equal
  step sample-npz-fp8 "
import numpy as np
a, b = np.load('full.npz'), np.load('fp8.npz')
assert (a['arr_1'] == b['arr_1']).all(), 'labels differ'
assert 'linear layers in fp8' in open('sample-npz-fp8.log').read(), 'no fp8 note'
x, y = a['arr_0'].astype(float), b['arr_0'].astype(float)
d = np.abs(x - y).mean()
assert 0 < d < 0.1 * x.std(), f'fp8 differs from bf16 by {d:.2f} on average (sample std {x.std():.1f})'
" -- $n sample --ckpt "$ck" --steps 10 --num-samples 300 --batch-size 50 --device $dev --dtype fp8 --cuda-graphs true --npz "$w/fp8.npz"
fi
interrupted() {  # kill the sampler once two of its six batches are on disk, then run it again
  $n sample --ckpt "$ck" --steps 10 --num-samples 300 --batch-size 50 --device $dev --npz "$w/resumed.npz" > "$w/interrupted.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    [ "$(ls "$w/resumed.npz.parts" 2>/dev/null | grep -c '^batch_')" -ge 2 ] && break
    sleep 0.05
  done
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  ls "$w/resumed.npz.parts" | grep -c '^batch_' > "$w/parts_before_resume.txt"
  $n sample --ckpt "$ck" --steps 10 --num-samples 300 --batch-size 50 --device $dev --npz "$w/resumed.npz"
}
step sample-npz-resumed "
import numpy as np, os
a, b = np.load('full.npz'), np.load('resumed.npz')
parts = int(open('parts_before_resume.txt').read())
assert 1 <= parts < 6, f'{parts} batches were on disk at the kill: nothing was resumed'
assert (a['arr_1'] == b['arr_1']).all(), 'labels differ'
d = np.abs(a['arr_0'].astype(int) - b['arr_0'].astype(int)).max()
assert d == 0, f'resumed samples differ from the uninterrupted run by up to {d}'
assert not os.path.exists('resumed.npz.parts')
" -- interrupted

# ---- eval: the Fashion-MNIST classifier, then FD-FMNIST of the samples -------------------------
step eval-train-classifier "
import os; assert os.path.getsize('cls.safetensors') > 1000
" -- $n eval --train-fmnist-classifier --epochs 1 --out "$w/cls.safetensors" --device $dev
step eval-fmnist "
import json, math
e = json.load(open('eval.json'))
for k in ('fd_fmnist', 'precision_fmnist', 'recall_fmnist', 'is_fmnist', 'class_accuracy'):
    assert k in e and math.isfinite(e[k]), (k, e.get(k))
" -- $n eval --fmnist --sample "$w/full.npz" --classifier "$w/cls.safetensors" --device $dev --json "$w/eval.json"

# ---- extract-latents: an image folder through the random-weight VAE, then training on it -------
python3 - "$w/images" <<'PY'
import sys, numpy as np
from pathlib import Path
from PIL import Image
rng = np.random.default_rng(0)
for c in ("ant", "cat"):
    d = Path(sys.argv[1]) / c
    d.mkdir(parents=True)
    for i in range(6):
        h, w = rng.integers(40, 90, 2)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(d / f"{i}.png")
PY
step extract-latents "
from safetensors.numpy import load_file
import glob
s = sorted(glob.glob('latents/latents_*.safetensors')); assert len(s) == 3, s
n = sum(load_file(f)['latents'].shape[0] for f in s); assert n == 12, n
t = load_file(s[0]); assert t['latents'].shape[1:] == (4, 8, 8), t['latents'].shape  # the random VAE halves the size twice
" -- $n extract-latents --data "$w/images" --vae "$root/.carry/vae/diffusion_pytorch_model.safetensors" --image-size 32 \
       --out "$w/latents" --shard-size 4 --batch-size 5 --device $dev
step train-latents "
import os; assert os.path.isdir('latrun/checkpoints/0000004')
" -- $n train --preset fashion-mnist-tiny --model DiT-T/2 --data "$w/latents" --num-classes 2 --steps 4 --batch 4 --ckpt-every 4 \
       --sample-every 0 --device $dev --out "$w/latrun"
step sample-vae "
from PIL import Image
im = Image.open('vae_grid.png'); assert im.size[0] == 8 * 34 + 2, im.size
" -- $n sample --ckpt "$w/latrun/checkpoints/0000004" --vae "$root/.carry/vae/diffusion_pytorch_model.safetensors" --steps 5 \
       --device $dev --out "$w/vae_grid.png"

# ---- forward and convert ------------------------------------------------------------------------
python3 - "$w" "$ck" <<'PY'
import sys, numpy as np, torch
from safetensors.torch import load_file
w, ck = sys.argv[1:]
rng = np.random.default_rng(1)
np.savez(f"{w}/fwd_in.npz", x=rng.standard_normal((4, 1, 32, 32)).astype(np.float32), t=rng.random(4).astype(np.float32),
         y=rng.integers(0, 10, 4).astype(np.int64))
sd = load_file(f"{ck}/ema.safetensors")
torch.save({"model": sd, "ema": sd, "opt": {}, "args": None}, f"{w}/official_layout.pt")  # DiT's train.py checkpoint layout
PY
step forward "
import numpy as np
o = np.load('fwd_out.npz'); k = o.files[0]; a = o[k]
assert a.shape[0] == 4 and a.shape[-2:] == (32, 32) and np.isfinite(a).all(), (o.files, a.shape)
" -- $n forward --ckpt "$ck" --input "$w/fwd_in.npz" --output "$w/fwd_out.npz" --device $dev
step convert "
import torch
from safetensors.torch import load_file
a = load_file('converted.safetensors'); b = torch.load('official_layout.pt', weights_only=False)['ema']
assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), 'converted weights differ'
" -- $n convert --in "$w/official_layout.pt" --out "$w/converted.safetensors" --take ema

# ---- bench and version --------------------------------------------------------------------------
step bench-attention "
t = open('bench-attention.log').read()
rows = [l for l in t.splitlines() if l.startswith('| nala-')]
assert rows and all(' 64 | 256 | 64 |' in l for l in rows), t[-300:]
" -- $n bench attention --shapes 64x256 --head-dim 64 --reps 5
step version "
import re
t = open('version.log').read()
assert re.search(r'CUDA available: (yes, [1-9][0-9]* device\(s\); device 0: \S|no)', t), t
" -- $n --version

cat "$table"
exit $failed
