#!/usr/bin/env bash
# Copies what a run on the GPU machine needs but that machine lacks (it has no network) into the
# ignored folder .carry/: headers (stb, zlib, nlohmann-json, cxxopts), the Fashion-MNIST files, a
# random-weight VAE (.carry/vae, for the smoke step) and the wheels of the Python test oracles that
# machine lacks (.carry/wheels: diffusers, pytorch-fid; the cli-tests step installs them there).
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
# the same versions as .venv's, for the GPU machine's Python 3.12 (pure-Python wheels)
if [ ! -d "$dst/wheels" ]; then
  vers=$("$root/.venv/bin/python" -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("diffusers", "pytorch-fid", "importlib_metadata")))')
  "$root/.venv/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
    --platform any -d "$dst/wheels" $vers
fi
du -sh "$dst"
