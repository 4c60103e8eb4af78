#!/usr/bin/env bash
# One-time (idempotent) setup of a fresh Debian machine for nala:
#   1. Debian packages: compilers, ccache, stb, cxxopts, nlohmann-json, zlib, GoogleTest, Fashion-MNIST
#   2. the project's Python virtual environment (.venv): torch==2.11.0 (LibTorch for the build) plus the
#      test oracles (numpy, scipy, safetensors, pillow, diffusers, pytorch-fid, tensorboard)
#   2b. with nvcc: CUTLASS 4 headers from the nvidia-cutlass wheel (.venv/cutlass/include)
#   3. configure and build (build/nala)
# A second run skips what is already there. Usage: bash scripts/setup.sh [--no-build]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=1
[ "${1:-}" = "--no-build" ] && build=0

log() { printf '[setup] %s\n' "$*"; }
t0=$(date +%s)

# 1. Debian packages ---------------------------------------------------------------------------
pkgs=(build-essential cmake ninja-build ccache pkg-config git libstb-dev libcxxopts-dev
      nlohmann-json3-dev zlib1g-dev libgtest-dev libgloo-dev dataset-fashion-mnist)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  sudo_=""; [ "$(id -u)" -ne 0 ] && sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present"
fi

# 2. Python virtual environment ------------------------------------------------------------------
venv="$root/.venv"
# torchvision is pinned with torch: pytorch-fid pulls in torchvision, whose newest release would
# otherwise replace torch 2.11.0 with a newer torch than the GPU machine has.
want="torch==2.11.0 torchvision==0.26.0 numpy scipy safetensors pillow pytest diffusers pytorch-fid timm scikit-build-core matplotlib tensorboard"
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import torch, numpy, scipy, safetensors, PIL, pytest, diffusers, pytorch_fid, timm, scikit_build_core, matplotlib, tensorboard; assert torch.__version__.startswith("2.11.0")' 2>/dev/null; then
  log "installing Python packages into .venv (torch is large; the first run downloads a few GB)"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q $want
else
  log "Python packages present"
fi

# 2b. CUTLASS 4 headers (CUDA builds only): the nvidia-cutlass wheel's include folder, unpacked into
# .venv/cutlass/include (the wheel alone, without its Python dependencies; CMakeLists.txt finds it)
cutlass_version=4.2.0.0
if command -v nvcc > /dev/null && [ ! -f "$venv/cutlass/include/cutlass/cutlass.h" ]; then
  log "fetching CUTLASS $cutlass_version headers into .venv/cutlass"
  tmp=$(mktemp -d)
  "$venv/bin/python" -m pip download -q --no-deps -d "$tmp" "nvidia-cutlass==$cutlass_version"
  "$venv/bin/python" -m zipfile -e "$tmp"/nvidia_cutlass-*.whl "$tmp/unpacked"
  [ -f "$tmp/unpacked/cutlass_library/source/include/cutlass/cutlass.h" ] || { echo "setup: no CUTLASS headers in the nvidia-cutlass wheel" >&2; exit 1; }
  rm -rf "$venv/cutlass"
  mkdir -p "$venv/cutlass"
  mv "$tmp/unpacked/cutlass_library/source/include" "$venv/cutlass/include"
  echo "$cutlass_version" > "$venv/cutlass/VERSION"
  rm -rf "$tmp"
fi

# 3. configure and build -------------------------------------------------------------------------
if [ "$build" = 1 ]; then
  prefix=$("$venv/bin/python" -c 'import torch;print(torch.utils.cmake_prefix_path)')
  if [ ! -f build/build.ninja ]; then
    log "configuring build/"
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
          -DPython3_EXECUTABLE="$venv/bin/python"
  fi
  log "building (2 cores: the first build takes a while; later ones are incremental)"
  cmake --build build -j "$(nproc)"
fi
log "done in $(( $(date +%s) - t0 )) s"
