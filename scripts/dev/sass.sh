#!/usr/bin/env bash
# A kernel's machine code on the CPU machine, without a GPU: compiles one .cu file for sm_90 with the
# project's CUDA flags (CMakeLists.txt: -O3 -lineinfo --expt-relaxed-constexpr), disassembles it and
# prints, for every kernel whose mangled name matches REGEX, its registers, its SASS instruction
# count and its most frequent opcodes. Counting instructions an element this way found the
# nineteenth session's branch between loads and the twentieth's division an element (docs/benchmarks.md).
# cuobjdump and the nvdisasm it calls are not in the CUDA toolkit here; they come from the
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels, fetched once into ~/.cache/nala-sass (pip).
#   bash scripts/dev/sass.sh ops/cuda/quantize_fp8_kernels.cu 'bias_gelu_quantize_rows_kernelI13__nv_bfloat16Li6ELb1'
#   SASS_KEEP=/tmp/k.sass bash scripts/dev/sass.sh FILE.cu REGEX   (also writes the matching kernels' SASS)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bash scripts/dev/sass.sh FILE.cu [KERNEL_REGEX] (run from the repository root)" >&2; exit 1; }
root=$(cd "$(dirname "$0")/../.." && pwd)
src=$1
regex=${2:-.}
[ -f "$src" ] || { echo "sass.sh: no file $src" >&2; exit 1; }
command -v nvcc > /dev/null || { echo "sass.sh: nvcc is not on PATH" >&2; exit 1; }
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nala-sass
cuobjdump=$(find "$cache" -name cuobjdump -type f 2> /dev/null | head -1 || true)
if [ -z "$cuobjdump" ]; then
  mkdir -p "$cache"
  python3 -m pip download -q --no-deps -d "$cache" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  for w in "$cache"/*.whl; do python3 -m zipfile -e "$w" "$cache/unpacked"; done
  cuobjdump=$(find "$cache" -name cuobjdump -type f | head -1)
  [ -n "$cuobjdump" ] || { echo "sass.sh: the nvidia-cuda-cuobjdump wheel holds no cuobjdump" >&2; exit 1; }
fi
chmod +x "$(dirname "$cuobjdump")"/*
export PATH="$(dirname "$cuobjdump"):$PATH"  # cuobjdump -sass runs nvdisasm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvcc -std=c++17 -O3 -lineinfo --expt-relaxed-constexpr -arch=sm_90 -cubin -I"$root" -Xptxas -v -o "$tmp/k.cubin" "$src" 2> "$tmp/ptxas.txt" ||
  { cat "$tmp/ptxas.txt" >&2; exit 1; }
"$cuobjdump" -sass "$tmp/k.cubin" > "$tmp/k.sass"
# ptxas -v: "Compiling entry function 'NAME'" then "Used N registers"
awk '/Compiling entry function/ {match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2)}
     /Used [0-9]+ registers/ {match($0, /Used [0-9]+/); print name, substr($0, RSTART + 5, RLENGTH - 5)}' "$tmp/ptxas.txt" > "$tmp/regs.txt"
[ -n "${SASS_KEEP:-}" ] && : > "$SASS_KEEP"
found=0
for fn in $(grep -oP 'Function : \K\S+' "$tmp/k.sass" | grep -E -- "$regex" || true); do
  found=1
  awk -v f="$fn" '/Function : / {p = ($3 == f)} p' "$tmp/k.sass" > "$tmp/one.sass"
  [ -n "${SASS_KEEP:-}" ] && cat "$tmp/one.sass" >> "$SASS_KEEP"
  n=$(grep -cP '^\s+/\*[0-9a-f]{4,}\*/\s+\S' "$tmp/one.sass" || true)
  regs=$(awk -v f="$fn" '$1 == f {print $2}' "$tmp/regs.txt")
  echo "$fn"
  echo "  registers ${regs:-?}, SASS instructions $n"
  printf '  '
  grep -oP '^\s+/\*[0-9a-f]{4,}\*/\s+(@!?U?P[0-9T]\s+)?\K[A-Z0-9]+' "$tmp/one.sass" | sort | uniq -c | sort -rn | head -14 |
    awk '{printf "%s %s  ", $2, $1} END {print ""}'
done
[ $found = 1 ] || { echo "sass.sh: no kernel of $src matches '$regex'; its kernels:" >&2; grep -oP 'Function : \K\S+' "$tmp/k.sass" >&2; exit 1; }
