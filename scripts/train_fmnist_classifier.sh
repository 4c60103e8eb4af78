#!/usr/bin/env bash
# The recipe of the Fashion-MNIST classifier behind FD-FMNIST, IS-FMNIST and P/R-FMNIST (never
# called FID): 4 conv layers (16-32-64-64) and fc 256 -> 10, Adam lr 1e-3 with the last epoch at
# 1e-4, batch 128, 4 epochs, seed 0. Measured: 91.3% test accuracy, ~2 minutes on 2 CPU cores.
# usage: bash scripts/train_fmnist_classifier.sh [OUT.safetensors] [--device cuda]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/.cache/fmnist_classifier.safetensors}
shift || true
mkdir -p "$(dirname "$out")"
"$root/build/nala" eval --train-fmnist-classifier --out "$out" --epochs 4 --seed 0 "$@"
