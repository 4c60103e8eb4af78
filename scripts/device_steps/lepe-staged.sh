#!/usr/bin/env bash
# LePE's second inputs staged in shared memory (NALA_LEPE_STAGED, attention/cuda/gated_tail_cuda.h)
# against the default, one binary, same run: the gated tail alone at NaLaDiT-S/2's shape
# (`nala bench tail`, B 256, 16 × 16 tokens, D 384, LePE 5) and NaLaDiT-S/2 training (batch 256,
# 256 px, CUDA graphs); DiT-S/2 once as the yardstick. First the GatedTail CUDA tests, which check
# every variant bitwise against the default. LEPE_STAGED_VALUES overrides the variants.
out=$1
n=./build-device/nala
values=${LEPE_STAGED_VALUES:-0 residual du du1 both both1}
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  run ./build-device/tests/nala_cuda_tests --gtest_filter='GatedTail*' --gtest_brief=1
  for v in $values; do
    echo "NALA_LEPE_STAGED=$v:"
    run env NALA_LEPE_STAGED="$v" $n bench tail --shapes 256x16 --reps 50
    run env NALA_LEPE_STAGED="$v" $n bench train --models NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  done
  run $n bench train --models DiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
} > "$out/lepe_staged.md" 2>&1
grep -E "^\||FAILED|^NALA_LEPE|PASSED|FAILED TEST" "$out/lepe_staged.md" | grep -v -- "---" | grep -v "^| path\|^| model" | cut -c1-150
exit $failed
