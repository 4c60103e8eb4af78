#!/usr/bin/env bash
# Copies what a run on the GPU machine needs but that machine lacks (it has no network) into the
# ignored folder .carry/: headers (stb, zlib, nlohmann-json, cxxopts), the Fashion-MNIST files, a
# random-weight VAE (.carry/vae, for the smoke step), the wheels of the Python test oracles that
# machine lacks (.carry/wheels: diffusers, pytorch-fid; the cli-tests step installs them there) and
# the official DiT / SiT code for the reference trainings (.carry/official).
# Run after scripts/setup.sh (it uses .venv). Then: device run with carry [".carry"].
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dst="$root/.carry"
mkdir -p "$dst/include/stb" "$dst/fashion-mnist"
cp /usr/include/stb/stb_image.h /usr/include/stb/stb_image_write.h "$dst/include/stb/"
cp /usr/include/zlib.h /usr/include/zconf.h "$dst/include/"
cp -r /usr/include/nlohmann "$dst/include/"
cp /usr/include/cxxopts.hpp "$dst/include/"
cp -r /usr/include/gloo "$dst/include/"
cp /usr/share/datasets/fashion-mnist/*.gz "$dst/fashion-mnist/"
[ -f "$dst/vae/diffusion_pytorch_model.safetensors" ] || "$root/.venv/bin/python" "$root/scripts/make_random_vae.py" "$dst/vae" >/dev/null
# the same versions as .venv's, for the GPU machine's Python 3.12 (pure-Python wheels); torchdiffeq
# for the official SiT sampler (scripts/official_fmnist.py)
if [ ! -f "$dst/wheels/.complete-2" ]; then
  vers=$("$root/.venv/bin/python" -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("diffusers", "pytorch-fid", "importlib_metadata")))')
  "$root/.venv/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
    --platform any -d "$dst/wheels" $vers torchdiffeq==0.2.5
  touch "$dst/wheels/.complete-2"
fi
# the official DiT and SiT code for the reference trainings (#33): not part of nala, fetched for the
# run at the commits the experiment used. OFFICIAL_DIT / OFFICIAL_SIT may name local clones (or
# bare git directories) instead of GitHub.
fetch_official() {  # NAME URL COMMIT LOCAL
  local d="$dst/official/$1"
  [ -f "$d/models.py" ] && return
  local src=${4:-}
  if [ -z "$src" ]; then
    src=$(mktemp -d)
    git clone -q "$2" "$src" || { echo "prepare_carry: cannot clone $2 (set OFFICIAL_${1^^} to a local clone)" >&2; exit 1; }
  fi
  mkdir -p "$d"
  git --git-dir="$( [ -d "$src/.git" ] && echo "$src/.git" || echo "$src")" archive "$3" | tar x -C "$d"
  rm -rf "$d/visuals" "$d"/*.ipynb  # pictures and notebooks: not needed, and the carry is limited to 64 MiB
}
fetch_official DiT https://github.com/facebookresearch/DiT ed81ce2229091fd4ecc9a223645f95cf379d582b "${OFFICIAL_DIT:-}"
fetch_official SiT https://github.com/willisma/SiT 947f95bd3a510e9af441d38c1e9f72e0eee873c5 "${OFFICIAL_SIT:-}"
# CUTLASS's headers for a build on the GPU machine (CMakeLists.txt NALA_CUTLASS_INCLUDE;
# device_build.sh unpacks them), compressed: 27 MB of headers, and the carry holds 64 MiB
if [ -f "$root/.venv/cutlass/include/cutlass/cutlass.h" ] && [ ! -f "$dst/cutlass-include.tar.xz" ]; then
  tar cJf "$dst/cutlass-include.tar.xz.tmp" -C "$root/.venv/cutlass" include VERSION
  mv "$dst/cutlass-include.tar.xz.tmp" "$dst/cutlass-include.tar.xz"
fi
du -sh "$dst"
