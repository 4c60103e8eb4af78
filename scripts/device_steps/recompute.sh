#!/usr/bin/env bash
# NALA_RECOMPUTE=1 (ops/fused_ops.h: NaLa attention's state and the gated tail's y recomputed in the
# backward) against keeping them, same run: its CUDA tests, then NaLaDiT-XL/2 training at batch
# RECOMPUTE_BATCH (default 256; 128 fits an H100's 80 GB) (256 px latents, CUDA graphs on) with each setting, DiT-XL/2 beside (peak memory is the target:
# NaLaDiT-XL/2 ≤ DiT-XL/2). Alone on the GPU (a benchmark).
#   bash scripts/device_steps/recompute.sh OUT [MODELS]
out=$1
models=${2:-DiT-XL/2,NaLaDiT-XL/2}
n=./build-device/nala
{
  ./build-device/tests/nala_cuda_tests --gtest_filter='*Recompute*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure|recompute vs|Expected|Which"
  echo
  echo "### NALA_RECOMPUTE=0"
  NALA_RECOMPUTE=0 $n bench train --models "$models" --batch "${RECOMPUTE_BATCH:-256}" --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  echo
  echo "### NALA_RECOMPUTE=1"
  NALA_RECOMPUTE=1 $n bench train --models "$(echo "$models" | tr ',' '\n' | grep NaLa | paste -sd,)" --batch "${RECOMPUTE_BATCH:-256}" --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
} > "$out/recompute.md" 2>&1
grep -E "^\||^###|PASSED|FAILED|Failure|recompute vs" "$out/recompute.md" | head -40
