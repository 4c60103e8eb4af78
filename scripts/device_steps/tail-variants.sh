#!/usr/bin/env bash
# The gated tail's kernel switches against the defaults, one binary, same run: LePE's second inputs
# staged in shared memory (NALA_LEPE_STAGED) and ln_gate_bwd's blocks an SM
# (NALA_LN_GATE_BWD_BLOCKS; attention/cuda/gated_tail_cuda.h), each through the tail alone at
# NaLaDiT-S/2's shape (`nala bench tail`, B 256, 16 × 16 tokens, D 384, LePE 5) and NaLaDiT-S/2
# training (batch 256, 256 px, CUDA graphs); DiT-S/2 once as the yardstick. First the GatedTail
# CUDA tests, which check every variant against the default and float64. TAIL_VARIANTS overrides
# the list (space-separated, each VAR=VALUE[,VAR=VALUE]; "-" is the defaults).
out=$1
n=./build-device/nala
variants=${TAIL_VARIANTS:-- NALA_LEPE_STAGED=residual NALA_LEPE_STAGED=du NALA_LEPE_STAGED=du1 NALA_LEPE_STAGED=both NALA_LEPE_STAGED=both1 NALA_LN_GATE_BWD_BLOCKS=6 NALA_LN_GATE_BWD_BLOCKS=8 -}
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  run ./build-device/tests/nala_cuda_tests --gtest_filter='GatedTail*' --gtest_brief=1
  for v in $variants; do
    e=()
    [ "$v" = - ] || e=(${v//,/ })
    echo "variant: ${v/#-/defaults}"
    run env "${e[@]}" $n bench tail --shapes 256x16 --reps 50
    run env "${e[@]}" $n bench train --models NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  done
  run $n bench train --models DiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
} > "$out/tail_variants.md" 2>&1
grep -E "^\||FAILED|^variant|PASSED|FAILED TEST" "$out/tail_variants.md" | grep -v -- "---" | grep -v "^| path\|^| model" | cut -c1-150
exit $failed
