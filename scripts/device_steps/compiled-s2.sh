#!/usr/bin/env bash
# The short form of bench-compiled: nala DiT-S/2 and NaLaDiT-S/2 training against the official
# DiT-S/2 step in PyTorch, eager and with torch.compile(model), same run (batch 256, 256 px latents,
# bf16 autocast; compile time reported apart).
out=$1
n=./build-device/nala
{
  $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 256 --image-size 256 --steps 8 --warmup 2
  echo
  python3 scripts/bench_pytorch_train.py --models DiT-S/2 --batch 256 --steps 8 --warmup 3 --compile
} > "$out/compiled_s2.md" 2>&1
grep -E "^\||error|Error" "$out/compiled_s2.md" | grep -v "^|---" | head -20
