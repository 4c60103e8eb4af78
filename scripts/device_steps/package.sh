#!/usr/bin/env bash
# The Python package on the GPU with the build's operator library (build-device/python/nala/_C.so,
# the same sources `pip install .` compiles): CUDA checks and the benchmark of scripts/bench_package.py.
out=$1
[ -f build-device/python/nala/_C.so ] || { echo "package: no build-device/python/nala/_C.so: this step needs device_build.sh's build step (a prebuilt lacks the operator library)"; exit 1; }
NALA_OPS_LIBRARY=build-device/python/nala/_C.so PYTHONPATH=python python3 scripts/bench_package.py > "$out/package.md" 2>&1
rc=$?
cat "$out/package.md" | grep -v Warning | tail -30
exit $rc
