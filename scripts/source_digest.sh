#!/usr/bin/env bash
# One SHA-256 over every C++/CUDA source and build file of the tree (path and content), the same on
# this machine and on the GPU machine (which has no .git): a prebuilt (scripts/prepare_prebuilt.sh)
# is used there only when its digest equals the tree's.
set -euo pipefail
cd "$(dirname "$0")/.."
find . \( -name .git -o -name .venv -o -name .carry -o -name .cache -o -name runs -o -name 'build' -o -name 'build-*' -o -name __pycache__ \) -prune -o \
  -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name CMakeLists.txt -o -name '*.cmake' \) -print |
  LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum | cut -d' ' -f1
