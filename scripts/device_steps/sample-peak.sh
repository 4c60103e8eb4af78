#!/usr/bin/env bash
# Sampling's peak memory (DiT-XL/2 and NaLaDiT-XL/2, DDPM 250 + CFG 1.5, batch 64, CUDA graphs): the
# defaults against NALA_RESIDUAL_NORM_FUSED=0, bf16 and fp8, then the official model's step eager and
# compiled (scripts/bench_pytorch_sample.py). Peak memory does not depend on the GPU being free, so
# this step may share a call with the curves' evaluations; its timings then mean nothing and are
# not quoted (fp8-sample times the same rows alone on the GPU). One file: sample_peak.md.
#   bash scripts/device_build.sh prebuilt sample-peak
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  echo "Defaults:"
  run $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 2 --dtypes bf16,fp8 --cuda-graphs on
  echo
  echo "NALA_RESIDUAL_NORM_FUSED=0:"
  NALA_RESIDUAL_NORM_FUSED=0 run $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 2 --dtypes bf16,fp8 --cuda-graphs on
  echo
  run python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 2 --compile
} > "$out/sample_peak.md" 2>&1
cat "$out/sample_peak.md" | grep -E "^\||FAILED" | grep -v -- "---" | cut -c1-110
exit $failed
