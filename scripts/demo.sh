#!/usr/bin/env bash
# The built-in demo: set up, then train a small NaLa-attention diffusion transformer (NaLaSiT: the
# NaLaDiT architecture with the flow-matching objective, which learns fastest) on Fashion-MNIST for a bounded time, sample
# a class-conditional grid (one row per class), and measure FD-FMNIST (Fréchet distance in the
# features of nala's own Fashion-MNIST classifier; not FID). Uses the GPU when there is one.
#   bash scripts/demo.sh [--minutes M] [--out DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
minutes=8
out=runs/demo
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: bash scripts/demo.sh [--minutes M] [--out DIR]" >&2; exit 2 ;;
  esac
done
t0=$(date +%s)
bash scripts/setup.sh
nala=build/nala
"$nala" --version
if "$nala" --version | grep -q "CUDA available: yes"; then
  device=cuda; preset=fashion-mnist-s2-flow; steps=20000; nsamples=10000
else
  device=cpu; preset=fashion-mnist-tiny; steps=100000; nsamples=2000
fi
classifier=.cache/fmnist_classifier.safetensors
if [ ! -f "$classifier" ]; then
  echo "== 1/4 training the Fashion-MNIST classifier for FD-FMNIST (once)"
  bash scripts/train_fmnist_classifier.sh "$classifier" --device "$device"
fi
echo "== 2/4 training preset $preset on Fashion-MNIST for up to $minutes minutes ($device)"
"$nala" train --preset "$preset" --steps "$steps" --max-minutes "$minutes" --ckpt-every 500 --sample-every 0 --device "$device" --out "$out"
echo "== 3/4 sampling a grid, one row per class (classifier-free guidance 3 on all channels)"
"$nala" sample --ckpt "$out" --sampler ode-heun --steps 13 --cfg-scale 3 --device "$device" --out "$out/grid.png"
echo "== 4/4 FD-FMNIST of $nsamples samples against the 10,000 test images"
rm -rf "$out/samples.npz" "$out/samples.npz.parts"  # a re-run's checkpoint is newer: nala sample refuses to replace a finished batch
"$nala" sample --ckpt "$out" --sampler ode-heun --steps 13 --cfg-scale 3 --num-samples "$nsamples" --batch-size 500 \
  --npz "$out/samples.npz" --device "$device"
"$nala" eval --fmnist --sample "$out/samples.npz" --classifier "$classifier" --device "$device" --json "$out/fd_fmnist.json"
echo
echo "done in $(( $(date +%s) - t0 )) s. Outputs:"
echo "  sample grid   $out/grid.png  (rows: T-shirt, trouser, pullover, dress, coat, sandal, shirt, sneaker, bag, ankle boot)"
echo "  metrics       $out/fd_fmnist.json, training log $out/metrics.jsonl, loss curve $out/loss.png"
echo "  curves        .venv/bin/tensorboard --logdir $(dirname "$out")   (TensorBoard files in $out/tb/)"
echo "  checkpoints   $out/checkpoints/ (resume: run the same command again)"
