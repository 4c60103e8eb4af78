#!/usr/bin/env bash
# The one script for the GPU machine (H100/H200): configure, build (sm_90), run the CUDA tests,
# run the benchmarks, print a short table last. Run from the repository root there, with the
# .carry folder carried (scripts/prepare_carry.sh makes it here):
#   bash scripts/device_build.sh [steps...]     steps: build tests sanitize bench-attention
#                                               bench-train bench-sample experiment (default: build tests bench-attention)
# Logs go to $OUT (when set) so the device tool brings them back.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/build-device/out}
mkdir -p "$out"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build tests bench-attention)
export NALA_FASHION_MNIST="$root/.carry/fashion-mnist"
summary="$out/summary.txt"
: > "$summary"
note() { printf '%s\n' "$*" | tee -a "$summary"; }
t_start=$(date +%s)

for step in "${steps[@]}"; do
  t0=$(date +%s)
  case "$step" in
    build)
      py=$(command -v python3)
      prefix=$($py -c 'import torch;print(torch.utils.cmake_prefix_path)')
      if [ ! -f build-device/build.ninja ]; then
        cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DNALA_CUDA=ON -DNALA_GPU_TESTS=ON \
              -DPython3_EXECUTABLE="$py" -DCMAKE_PREFIX_PATH="$prefix" > "$out/configure.log" 2>&1 \
          || { tail -30 "$out/configure.log"; note "configure FAILED"; exit 1; }
      fi
      ninja -C build-device -j "$(nproc)" nala nala_cuda_tests > "$out/build.log" 2>&1 \
        || { grep -E "error|FAILED" "$out/build.log" | head -30; note "build FAILED"; exit 1; }
      note "build: ok ($(( $(date +%s) - t0 )) s)"
      ./build-device/nala --version | tee -a "$summary"
      ;;
    tests)
      ./build-device/tests/nala_cuda_tests > "$out/cuda_tests.log" 2>&1
      rc=$?
      grep -E "^\[  (PASSED|FAILED) |tests? ran" "$out/cuda_tests.log" | tee -a "$summary"
      grep -E "err .*limit" "$out/cuda_tests.log" | awk '{ if ($0 ~ /err/) print }' > "$out/cuda_errors.txt"
      note "cuda tests: rc=$rc ($(( $(date +%s) - t0 )) s)"
      ;;
    sanitize)
      filter='NalaCuda.EveryFeatureMap'
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --print-limit 10 ./build-device/tests/nala_cuda_tests --gtest_filter="$filter" \
          > "$out/sanitize_$tool.log" 2>&1
        note "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize_$tool.log" | tail -1)"
      done
      ;;
    bench-attention)
      ./build-device/nala bench attention --dtype bf16 --head-dim 64,72 > "$out/bench_attention.md" 2>&1
      note "bench attention: rc=$? ($(( $(date +%s) - t0 )) s)"
      ;;
    *)
      name=${step%%:*}; args=${step#"$name"}; args=${args//:/ }
      [ -x "scripts/device_steps/$name.sh" ] && { bash "scripts/device_steps/$name.sh" "$out" $args; note "$step: rc=$? ($(( $(date +%s) - t0 )) s)"; continue; }
      note "unknown step '$step'"
      ;;
  esac
done

echo
echo "===== summary ($(( $(date +%s) - t_start )) s) ====="
cat "$summary"
[ -f "$out/cuda_errors.txt" ] && { echo "--- worst kernel errors ---"; sort -g -k11 "$out/cuda_errors.txt" 2>/dev/null | tail -5; }
for f in "$out"/bench_*.md "$out"/experiment_*.md; do
  [ -f "$f" ] && { echo "--- $(basename "$f") ---"; cat "$f"; }
done
exit 0
