#!/usr/bin/env bash
# bf16 inference against fp32 on the GPU (same random, non-trivial weights and inputs), with the
# sampling step time.
out=$1
./build-device/nala bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 3 --dtypes bf16 > "$out/bf16_check.md" 2>&1
