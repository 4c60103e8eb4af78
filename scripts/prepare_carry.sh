#!/usr/bin/env bash
# Copies what a run on the GPU machine needs but that machine lacks (it has no network) into the
# ignored folder .carry/: headers (stb, zlib, nlohmann-json, cxxopts), the Fashion-MNIST files, a
# random-weight VAE (.carry/vae, for the smoke step), torchdiffeq for the official SiT sampler
# (.carry/wheels) and the official DiT / SiT code for the reference trainings (.carry/official).
# The wheels of the Python test oracles that machine lacks (diffusers, pytorch-fid; only the cli-tests
# step installs them) go to a second folder, .carry-cli/wheels: the tree and .carry together come
# close to the 64 MiB a device call carries, and diffusers alone is 6 MB.
# Run after scripts/setup.sh (it uses .venv). Then: device run with carry [".carry"]; for the cli-tests
# step with a prebuilt, carry the parts it needs: [".carry/prebuilt.tar.xz", ".carry/fashion-mnist",
# ".carry/vae", ".carry/wheels", ".carry-cli"] (all of .carry and .carry-cli pass 64 MiB).
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
# the smoke step's Fashion-MNIST: the first 12,000 training images and labels (valid idx files: the
# loader reads the count from the header) and the whole test split, 10 MB instead of 31, so that a call
# carrying a prebuilt (20 MB), it and the VAE stays under 64 MiB (device_build.sh takes it where
# .carry/fashion-mnist is not carried)
if [ ! -f "$dst/fashion-mnist-smoke/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$dst/fashion-mnist-smoke"
  cp "$dst"/fashion-mnist/t10k-*.gz "$dst/fashion-mnist-smoke/"
  python3 - "$dst/fashion-mnist" "$dst/fashion-mnist-smoke" 12000 <<'PY'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, header, item in (("train-images-idx3-ubyte", 16, 784), ("train-labels-idx1-ubyte", 8, 1)):
    data = gzip.open(f"{src}/{name}.gz").read()
    head = bytearray(data[:header])
    head[4:8] = struct.pack(">I", n)  # the count after the magic number
    with gzip.open(f"{dst}/{name}.gz.tmp", "wb") as f:
        f.write(bytes(head) + data[header:header + n * item])
PY
  for f in "$dst"/fashion-mnist-smoke/*.tmp; do mv "$f" "${f%.tmp}"; done
fi
[ -f "$dst/vae/diffusion_pytorch_model.safetensors" ] || "$root/.venv/bin/python" "$root/scripts/make_random_vae.py" "$dst/vae" >/dev/null
# pure-Python wheels for the GPU machine's Python 3.12: torchdiffeq for the official SiT sampler
# (scripts/official_fmnist.py) in .carry; the cli tests' oracles, the same versions as .venv's, in
# .carry-cli (a .carry of an older checkout kept them beside torchdiffeq: moved)
cli="$root/.carry-cli"
wheels() {  # DIR SPEC...
  local d=$1; shift
  [ -f "$d/.complete" ] && return
  "$root/.venv/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
    --platform any -d "$d" "$@"
  touch "$d/.complete"
}
mkdir -p "$cli/wheels"
for w in "$dst"/wheels/diffusers-*.whl "$dst"/wheels/pytorch_fid-*.whl "$dst"/wheels/importlib_metadata-*.whl; do
  [ -f "$w" ] && mv "$w" "$cli/wheels/"
done
rm -f "$dst/wheels/.complete-2"
wheels "$dst/wheels" torchdiffeq==0.2.5
wheels "$cli/wheels" $("$root/.venv/bin/python" -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("diffusers", "pytorch-fid", "importlib_metadata")))')
# the official DiT and SiT code for the reference trainings (#33): not part of nala, fetched for the
# run at the commits the experiment used. OFFICIAL_DIT / OFFICIAL_SIT may name local clones (or
# bare git directories) instead of GitHub.
fetch_official() {  # NAME URL COMMIT LOCAL
  local d="$dst/official/$1"
  [ -f "$d/models.py" ] && return
  local src=${4:-}
  if [ -z "$src" ]; then
    src=$(mktemp -d)
    # only the reference trainings need it: without it the rest of .carry is still made
    git clone -q "$2" "$src" || { echo "prepare_carry: cannot clone $2 (set OFFICIAL_${1^^} to a local clone); .carry/official/$1 left out" >&2; return 0; }
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
du -sh "$dst" "$cli"
# what a call carries: the tree (tracked and untracked-not-ignored files) and the carried folders, ≤ 64 MiB
tree=$(git -C "$root" ls-files -co --exclude-standard -z | (cd "$root" && xargs -0 du -cb 2> /dev/null) | awk '$2 == "total" {s += $1} END {print s + 0}')
for c in "$dst" "$dst $cli"; do
  mib=$(( (tree + $(du -scb $c | tail -1 | cut -f1)) / 1048576 ))
  echo "a device call carrying ${c//$root\//}: ${mib} MiB of 64$([ "$mib" -ge 64 ] && echo ': TOO LARGE')"
done
