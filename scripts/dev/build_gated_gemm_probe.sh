#!/usr/bin/env bash
# Builds bench/gated_gemm_probe.cu (a standalone CUTLASS-vs-cuBLASLt probe, not part of nala) for the
# H200 on this CPU machine: CUTLASS 4's headers from the nvidia-cutlass wheel (pip, the Python package
# index; unpacked once into ~/.cache/nala-cutlass), nvcc for sm_90a, the CUDA runtime linked
# statically and cuBLASLt from the toolkit. Writes .carry/gated_gemm_probe; the GPU machine runs it with
# `bash scripts/device_build.sh probe:gated_gemm_probe` (scripts/device_steps/probe.sh; carry [".carry"]).
#   bash scripts/dev/build_gated_gemm_probe.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
version=${CUTLASS_WHEEL_VERSION:-4.2.0.0}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nala-cutlass/$version
inc=$cache/unpacked/cutlass_library/source/include
if [ ! -f "$inc/cutlass/cutlass.h" ]; then
  mkdir -p "$cache"
  python3 -m pip download -q --no-deps -d "$cache" "nvidia-cutlass==$version"
  python3 -m zipfile -e "$cache"/nvidia_cutlass-*.whl "$cache/unpacked"
  [ -f "$inc/cutlass/cutlass.h" ] || { echo "build_gated_gemm_probe: no CUTLASS headers in the nvidia-cutlass $version wheel" >&2; exit 1; }
fi
mkdir -p "$root/.carry"
nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -DNDEBUG -I"$root" -I"$inc" -cudart static -o "$root/.carry/gated_gemm_probe.tmp" \
  "$root/bench/gated_gemm_probe.cu" -lcublasLt
mv "$root/.carry/gated_gemm_probe.tmp" "$root/.carry/gated_gemm_probe"
echo "built .carry/gated_gemm_probe ($(du -h "$root/.carry/gated_gemm_probe" | cut -f1), CUTLASS $version)"
