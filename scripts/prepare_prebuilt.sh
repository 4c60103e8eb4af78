#!/usr/bin/env bash
# Packs this machine's CUDA build (build/: sm_90, the same torch 2.11.0+cu130 as the GPU machine)
# into .carry/prebuilt.tar.xz (≈ 8 MB): nala, nala_testtool, the CUDA tests and the layer libraries,
# with the tree's source digest (scripts/source_digest.sh). scripts/device_build.sh's `prebuilt`
# step unpacks it on the GPU machine instead of building there (141 s of device time a machine,
# 2026-12-03) when the digest matches and the binary runs there; otherwise it builds as `build` does.
# The Python package's operator library is not in it (the package step needs `build`).
#   bash scripts/prepare_prebuilt.sh        (after scripts/setup.sh; then carry [".carry"])
# --baseline first keeps the libraries of the prebuilt already there (those of lib/*.so that differ from
# this build's, and its prebuilt.txt) as .carry/baseline-lib.tar.xz, the baseline that
# scripts/device_steps/ab-lib.sh times a kernel change against in one call; then it packs this tree as usual.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
b=$root/build
[ -f "$b/build.ninja" ] || { echo "prepare_prebuilt: no build in $b (run scripts/setup.sh)" >&2; exit 1; }
grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$b/CMakeCache.txt" || { echo "prepare_prebuilt: $b is not a Release build" >&2; exit 1; }
archs=$(sed -n 's/^NALA_CUDA_ARCHS:[A-Z]*=//p' "$b/CMakeCache.txt")   # unset: cmake/torch.cmake's default, 90
[ -z "$archs" ] || [ "$archs" = 90 ] || { echo "prepare_prebuilt: $b is built for CUDA archs $archs, the H200 needs 90" >&2; exit 1; }
ninja -C "$b" nala nala_testtool nala_cuda_tests > /tmp/prepare_prebuilt.log 2>&1 || { tail -30 /tmp/prepare_prebuilt.log >&2; echo "prepare_prebuilt: the build failed" >&2; exit 1; }
"$b/nala" --version | grep -q "built with CUDA kernels: yes" || { echo "prepare_prebuilt: $b/nala has no CUDA kernels (no nvcc at configure time?)" >&2; exit 1; }
if [ "${1:-}" = --baseline ]; then
  [ -f "$root/.carry/prebuilt.tar.xz" ] || { echo "prepare_prebuilt: no .carry/prebuilt.tar.xz to keep as the baseline" >&2; exit 1; }
  keep=$(mktemp -d)
  tar xJf "$root/.carry/prebuilt.tar.xz" -C "$keep" prebuilt.txt lib
  # only the libraries this build changes (built above): ab-lib puts the baseline's lib/ first on the library
  # path, so an identical library need not travel (the whole set, ≈ 21 MB, took a call's tree past 64 MiB, 2026-12-07)
  for f in "$keep"/lib/*.so; do
    cmp -s "$f" "$b/lib/$(basename "$f")" && rm -f "$f"
  done
  tar cJf "$root/.carry/baseline-lib.tar.xz.tmp" -C "$keep" prebuilt.txt lib
  mv "$root/.carry/baseline-lib.tar.xz.tmp" "$root/.carry/baseline-lib.tar.xz"
  echo "baseline: $(sed -n 2p "$keep/prebuilt.txt"), $(ls "$keep/lib" | paste -sd' ') ($(du -h "$root/.carry/baseline-lib.tar.xz" | cut -f1)) -> .carry/baseline-lib.tar.xz"
  rm -rf "$keep"
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tests" "$stage/lib"
cp "$b/nala" "$b/nala_testtool" "$stage/"
cp "$b/tests/nala_cuda_tests" "$stage/tests/"
cp "$b"/lib/*.so "$stage/lib/"
# the digest (compared there), then for the record: commit, date, the LibTorch it was built against
{ bash "$root/scripts/source_digest.sh"; git -C "$root" rev-parse --short HEAD 2> /dev/null || echo "no git"; date -u +%FT%TZ
  "$b/nala" --version | grep LibTorch; } > "$stage/prebuilt.txt"
mkdir -p "$root/.carry"
tar cJf "$root/.carry/prebuilt.tar.xz.tmp" -C "$stage" prebuilt.txt nala nala_testtool tests lib
mv "$root/.carry/prebuilt.tar.xz.tmp" "$root/.carry/prebuilt.tar.xz"
echo "prebuilt: $(head -1 "$stage/prebuilt.txt") ($(du -h "$root/.carry/prebuilt.tar.xz" | cut -f1)) -> .carry/prebuilt.tar.xz"
