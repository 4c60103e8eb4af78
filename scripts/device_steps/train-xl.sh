#!/usr/bin/env bash
# The same-run check of #34's training targets: nala's DiT-S/2 and DiT-XL/2 training steps (batch 256,
# 256 px latents, bf16, CUDA graphs) with the defaults and again with each TRAIN_XL_ENV entry set,
# then the compiled PyTorch steps (scripts/bench_pytorch_train.py --compile, compile time excluded):
# the lean step and, with the official checkout carried (.carry/official/DiT, scripts/prepare_carry.sh),
# the official DiT step that #34's targets are set against (--official; TRAIN_XL_OFFICIAL=0 skips it).
# A benchmark: alone on the GPU. One file: train_xl.md.
#   bash scripts/device_build.sh prebuilt train-xl
# TRAIN_XL_ENV lists switch settings, entries apart by spaces, one entry's variables by commas
# (default: none. On 2026-12-05 every switch lost to the defaults: NALA_GEMM_TUNE_TRAIN=1, NALA_GEMM_BGRAD=1,
# both; nala's and FlashAttention-2's attention lost to cuDNN's in the `sdpa` step; docs/benchmarks.md):
#   TRAIN_XL_ENV="NALA_GEMM_TUNE_TRAIN=1,NALA_GEMM_TUNE_LOG=1 NALA_GEMM_EPILOGUES=0"
# TRAIN_XL_MODELS (default DiT-S/2,DiT-XL/2) and TRAIN_XL_PEER=0 (no compiled peer) shorten it. TRAIN_XL_BATCH
# (default 256, #34's size) lowers the batch where the card is smaller (DiT-XL/2 at 256 needs ≈ 94 GB: H200 only).
out=$1
n=./build-device/nala
models=${TRAIN_XL_MODELS:-DiT-S/2,DiT-XL/2}
batch=${TRAIN_XL_BATCH:-256}
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  run $n bench train --models "$models" --batch "$batch" --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  echo
  for e in ${TRAIN_XL_ENV-}; do
    echo "${e//,/ }:"
    run env ${e//,/ } $n bench train --models "$models" --batch "$batch" --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
    echo
  done
  official=()
  [ "${TRAIN_XL_OFFICIAL:-1}" != 0 ] && [ -f .carry/official/DiT/models.py ] && official=(--official .carry/official/DiT)
  [ "${TRAIN_XL_PEER:-1}" = 0 ] || run python3 scripts/bench_pytorch_train.py --models "$models" --batch "$batch" --steps 8 --warmup 3 --compile "${official[@]}"
} > "$out/train_xl.md" 2>&1
grep -E "^\||FAILED|^NALA_[A-Z0-9_]+=|^gemm tune" "$out/train_xl.md" | grep -v -- "---" | cut -c1-160
exit $failed
