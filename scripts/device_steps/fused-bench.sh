#!/usr/bin/env bash
# The fused block kernels (ops/block_ops.h) in the same run as the unfused path
# (NALA_FUSED_BLOCKS=0) and the compiled PyTorch peer: training (batch 256, 256 px latents) and
# DDPM+CFG sampling of DiT-XL/2 (batch 64, 250 steps extrapolated).
out=$1
n=./build-device/nala
{
  for f in 0 1; do
    echo "### nala, NALA_FUSED_BLOCKS=$f"
    NALA_FUSED_BLOCKS=$f $n bench train --models DiT-S/2,NaLaDiT-S/2,DiT-XL/2 --batch 256 --image-size 256 --steps 8 --warmup 2
    echo
  done
  python3 scripts/bench_pytorch_train.py --models DiT-S/2,DiT-XL/2 --batch 256 --steps 8 --warmup 3 --compile
  echo
  for f in 0 1; do
    echo "### nala, NALA_FUSED_BLOCKS=$f"
    NALA_FUSED_BLOCKS=$f $n bench sample --models DiT-XL/2 --batch 64 --measure 8 --dtypes bf16
    echo
  done
  python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 8 --compile
} > "$out/fused_bench.md" 2>&1
cat "$out/fused_bench.md" | grep -E "^\||^###|img/s|error" | head -60
