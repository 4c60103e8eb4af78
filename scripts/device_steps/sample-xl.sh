#!/usr/bin/env bash
# The quick same-run check of #34's sampling targets: nala's DiT-XL/2 sampling step (DDPM 250 + CFG
# 1.5, batch 64, CUDA graphs) in bf16 and fp8 beside the official model's step under torch.compile
# (scripts/bench_pytorch_sample.py --compile), then the duration and DRAM throughput of row
# kernels (Nsight Compute, three launches each): SAMPLE_XL_NCU lists KERNEL_REGEX@DTYPE@SKIP (launches
# skipped first; registering the weights launches quantize_rows_kernel over a hundred times), by default the
# staged residual + LayerNorm-modulate kernel in bf16 and fp8 (add residual_ln_modulate_fwd@bf16@8@NALA_RESIDUAL_NORM_STAGED=0
# for the one-pass kernel), and the staged kernel's warp states in fp8 (SAMPLE_XL_NCU_DETAIL). One file: sample_xl.md. sample-peak adds
# NaLaDiT-XL/2 and the switches off.
#   bash scripts/device_build.sh prebuilt sample-xl
#   SAMPLE_XL_NCU="bias_gelu_quantize_rows@fp8@8 ^quantize_rows_kernel@fp8@200" bash scripts/device_build.sh prebuilt sample-xl
# SAMPLE_XL_ENV lists switch settings to time in the same run, each nala's bf16 and fp8 steps again with
# them set: entries apart by spaces, one entry's variables by commas, e.g.
#   SAMPLE_XL_ENV="NALA_RESIDUAL_NORM_STAGED=0 NALA_GEMM_TUNE=1,NALA_GEMM_TUNE_LOG=1" (ops/fused_ops.h).
# Default: none (NALA_SDPA_BACKEND=nala and =flash lost to cuDNN's attention at these shapes on 2026-12-05,
# docs/benchmarks.md). SAMPLE_XL_TUNE=1 adds NALA_GEMM_TUNE=1. A SAMPLE_XL_NCU entry may end in @VAR=1[,VAR=1]
# to profile with those switches set. SAMPLE_XL_PAIRS=3 times nala and the peer three times in turn.
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  # SAMPLE_XL_PAIRS=K (default 1): nala's steps and the compiled peer K times in turn, to see the
  # run-to-run spread of the ratio (the peer's compiled step has ranged 63.0–67.0 ms over six calls)
  for ((pair = 1; pair < ${SAMPLE_XL_PAIRS:-1}; ++pair)); do
    echo "pair $pair:"
    run $n bench sample --models DiT-XL/2 --batch 64 --measure 3 --dtypes bf16,fp8 --cuda-graphs on
    run python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 3 --compile
    echo
  done
  run $n bench sample --models DiT-XL/2 --batch 64 --measure 3 --dtypes bf16,fp8 --cuda-graphs on
  echo
  envs=${SAMPLE_XL_ENV-}
  [ "${SAMPLE_XL_TUNE:-0}" = 1 ] && envs="$envs NALA_GEMM_TUNE=1"
  for e in $envs; do
    echo "${e//,/ }:"
    run env ${e//,/ } $n bench sample --models DiT-XL/2 --batch 64 --measure 3 --dtypes bf16,fp8 --cuda-graphs on
    echo
  done
  run python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 3 --compile
  echo
  for spec in ${SAMPLE_XL_NCU-residual_ln_modulate_staged@bf16@8 residual_ln_modulate_staged@fp8@8}; do  # empty: none
    IFS=@ read -r kernel dt skip senv <<< "$spec"
    echo "$kernel, $dt${senv:+, ${senv//,/ }}:"
    env ${senv//,/ } ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread \
        --kernel-name "regex:$kernel" --launch-skip "${skip:-8}" --launch-count 3 \
        $n bench sample --models DiT-XL/2 --batch 64 --measure 1 --dtypes "$dt" --cuda-graphs off 2>&1 | grep -E "$kernel|duration|dram__|registers" | cut -c1-140
  done
  # why a row kernel takes its time: warp states, scheduler and instruction statistics of one launch
  # (SAMPLE_XL_NCU_DETAIL: the same KERNEL@DTYPE@SKIP[@VAR=1] entries; empty: none)
  for spec in ${SAMPLE_XL_NCU_DETAIL-residual_ln_modulate_staged@fp8@8}; do
    IFS=@ read -r kernel dt skip senv <<< "$spec"
    echo "$kernel, $dt${senv:+, ${senv//,/ }}, warp states:"
    env ${senv//,/ } ncu --clock-control none --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis \
        --kernel-name "regex:$kernel" --launch-skip "${skip:-8}" --launch-count 1 \
        $n bench sample --models DiT-XL/2 --batch 64 --measure 1 --dtypes "$dt" --cuda-graphs off 2>&1 |
      grep -E "Stall|Warp Cycles|Issued Warp|No Eligible|Active Warps|Eligible Warps|Executed Ipc|Issue Slots|Executed Instructions|Memory Throughput|Hit Rate" | cut -c1-140
  done
} > "$out/sample_xl.md" 2>&1
grep -E "^\||FAILED|^pair [0-9]+:$|^NALA_[A-Z0-9_]+=|, (bf16|fp8|fp32)(, .*)?:$|, warp states:$|duration|dram__|registers|^gemm tune|Stall|Warp Cycles|Eligible|Issue|Ipc|Instructions|Throughput|Hit Rate" "$out/sample_xl.md" | grep -v -- "---" | cut -c1-120
exit $failed
