#!/usr/bin/env bash
# Copies what a run on the GPU machine needs but that machine lacks (it has no network) into the
# ignored folder .carry/: headers (stb, zlib, nlohmann-json, cxxopts) and the Fashion-MNIST files.
# Then: device run with carry [".carry"].
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
du -sh "$dst"
