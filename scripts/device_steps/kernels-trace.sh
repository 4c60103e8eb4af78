#!/usr/bin/env bash
# Where a training step's time goes as it runs, nala against the compiled official-recipe peer,
# both measured the same way: a Chrome trace of 3 steady-state steps from LibTorch's / PyTorch's
# profiler (CUPTI: every kernel as it ran back to back, at the clocks the run holds; nala's from its
# CUDA-graph replay, NALA_PROFILE_TRACE in bench/timing.cpp), summed by scripts/kernel_table.py with
# the timeline: busy and idle GPU time a step. Nsight Compute's table (kernels-compiled) times each
# kernel alone instead; the two disagreed by 31 ms a DiT-XL/2 step (docs/benchmarks.md, 2026-12-05).
# Argument: the model (default DiT-XL/2). The traces come back as $OUT/*_trace.json.gz.
# KERNELS_TRACE_BATCH (default 256) lowers the batch where the card is smaller (DiT-XL/2 at 256
# needs ≈ 94 GB: H200 only; 128 fits an H100). KERNELS_TRACE_PEER=0 leaves the compiled peer out.
out=$1
model=${2:-DiT-XL/2}
batch=${KERNELS_TRACE_BATCH:-256}
tag=$(echo "$model" | tr '/' '_')
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  run env NALA_PROFILE_TRACE="$out/nala_${tag}_trace.json" $n bench train --models "$model" --batch "$batch" --image-size 256 --steps 3 --warmup 3 --cuda-graphs on
  echo
  run python3 scripts/kernel_table.py "$out/nala_${tag}_trace.json" --steps 3 --top "${KERNELS_TRACE_TOP:-25}" --title "nala $model (CUDA graph, per step of 3, profiler trace)"
  [ "${KERNELS_TRACE_PEER:-1}" = 0 ] || { echo
  run python3 scripts/profile_pytorch_step.py --model "$model" --batch "$batch" --compile --steps 3 --top 25 --trace "$out/peer_${tag}_trace.json"; }
} > "$out/kernels_trace_${tag}.md" 2>&1
gzip -f "$out"/*_"${tag}"_trace.json 2> /dev/null
grep -E "^###|^Timeline|^Gaps|^\| (GEMM|attention|fused|optimizer|copy|element|reduction|normalization|other) |FAILED|^\| DiT|^\| NaLaDiT" "$out/kernels_trace_${tag}.md" | cut -c1-170
exit $failed
