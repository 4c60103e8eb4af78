#!/usr/bin/env bash
# nala against the peer a user would pick instead, in the same run: the official DiT step in PyTorch,
# eager and with torch.compile(model) (compile time reported apart), for training (batch 256, 256 px
# latents) and DDPM+CFG sampling of DiT-XL/2 (batch 64, 250 steps extrapolated).
out=$1
n=./build-device/nala
{
  $n bench train --models DiT-S/2,NaLaDiT-S/2,DiT-XL/2 --batch 256 --image-size 256 --steps 8 --warmup 2
  echo
  python3 scripts/bench_pytorch_train.py --models DiT-S/2,NaLaDiT-S/2,DiT-XL/2 --batch 256 --steps 8 --warmup 3 --compile
  echo
  $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8
  echo
  python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 8 --compile
} > "$out/bench_compiled.md" 2>&1
