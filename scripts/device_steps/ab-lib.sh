#!/usr/bin/env bash
# A kernel change timed against the code before it in one call: the same binaries with the layer
# libraries of a baseline (.carry/baseline-lib.tar.xz: lib/*.so of an earlier prebuilt with the same
# interfaces, made by `scripts/prepare_prebuilt.sh --baseline`) and with this tree's, alternating:
# NaLaDiT-S/2 and DiT-S/2 training (batch 256, 256 px, bf16, CUDA graphs) and the attention alone
# (`nala bench attention`, B 256, N 256, 6 heads of 64). One file: ab_lib.md.
#   bash scripts/device_build.sh prebuilt ab-lib
# AB_MODELS (default DiT-S/2,NaLaDiT-S/2) picks the models; AB_RUNS the runs in order (default
# "baseline new baseline new"): baseline, new, or new with switches, NAME=VALUE[,NAME=VALUE]. Runs
# without `baseline` (a switch against the defaults) need no baseline carried. AB_HEAD_DIMS (default 64; e.g. 64,72)
# the attention's head sizes.
out=$1
n=./build-device/nala
tarball=.carry/baseline-lib.tar.xz
runs=${AB_RUNS:-baseline new baseline new}
base=$(pwd)/build-device/baseline
rm -rf "$base" && mkdir -p "$base"
if [[ " $runs " == *" baseline "* ]]; then
  [ -f "$tarball" ] || { echo "ab-lib: no $tarball (scripts/prepare_prebuilt.sh --baseline makes it)"; exit 1; }
  tar xJf "$tarball" -C "$base"
else
  echo "(no baseline run)" > "$base/prebuilt.txt"
fi
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  echo "baseline: $(head -2 "$base/prebuilt.txt" | paste -sd' ')"
  for which in $runs; do
    echo "$which:"
    lib=$LD_LIBRARY_PATH
    envs=()
    case "$which" in
      baseline) lib=$base/lib:$LD_LIBRARY_PATH ;;
      new) ;;
      *) envs=(${which//,/ }) ;;
    esac
    run env LD_LIBRARY_PATH="$lib" "${envs[@]}" $n bench attention --dtype bf16 --head-dim "${AB_HEAD_DIMS:-64}" --shapes 256x256 --no-reference
    run env LD_LIBRARY_PATH="$lib" "${envs[@]}" $n bench train --models "${AB_MODELS:-DiT-S/2,NaLaDiT-S/2}" --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs on
  done
} > "$out/ab_lib.md" 2>&1
grep -E "^baseline|^new|^[A-Z_]+=|FAILED|^\| (NaLa|DiT|nala-onepass|sdpa \|)" "$out/ab_lib.md" | cut -c1-150
exit $failed
