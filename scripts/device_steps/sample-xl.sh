#!/usr/bin/env bash
# The quick same-run check of #34's sampling targets: nala's DiT-XL/2 sampling step (DDPM 250 + CFG
# 1.5, batch 64, CUDA graphs) in bf16 and fp8 beside the official model's step under torch.compile
# (scripts/bench_pytorch_sample.py --compile), then the duration and DRAM throughput of row
# kernels (Nsight Compute, three launches each): SAMPLE_XL_NCU lists KERNEL_REGEX@DTYPE@SKIP (launches
# skipped first; registering the weights launches quantize_rows_kernel over a hundred times), by default the
# residual + LayerNorm-modulate kernel in bf16 and fp8. One file: sample_xl.md. sample-peak adds
# NaLaDiT-XL/2 and the switches off.
#   bash scripts/device_build.sh prebuilt sample-xl
#   SAMPLE_XL_NCU="bias_gelu_quantize_rows@fp8@8 ^quantize_rows_kernel@fp8@200" bash scripts/device_build.sh prebuilt sample-xl
# SAMPLE_XL_TUNE=1 adds nala's bf16 step with NALA_GEMM_TUNE=1 (the linears' cuBLASLt algorithms timed,
# ops/fused_ops.h gemm_tuned) to the same run.
out=$1
n=./build-device/nala
failed=0
run() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
{
  run $n bench sample --models DiT-XL/2 --batch 64 --measure 3 --dtypes bf16,fp8 --cuda-graphs on
  echo
  if [ "${SAMPLE_XL_TUNE:-0}" = 1 ]; then
    echo "NALA_GEMM_TUNE=1:"
    NALA_GEMM_TUNE=1 run $n bench sample --models DiT-XL/2 --batch 64 --measure 3 --dtypes bf16 --cuda-graphs on
    echo
  fi
  run python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 3 --compile
  echo
  for spec in ${SAMPLE_XL_NCU:-residual_ln_modulate_fwd@bf16@8 residual_ln_modulate_fwd@fp8@8}; do
    IFS=@ read -r kernel dt skip <<< "$spec"
    echo "$kernel, $dt:"
    ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread \
        --kernel-name "regex:$kernel" --launch-skip "${skip:-8}" --launch-count 3 \
        $n bench sample --models DiT-XL/2 --batch 64 --measure 1 --dtypes "$dt" --cuda-graphs off 2>&1 | grep -E "$kernel|duration|dram__|registers" | cut -c1-140
  done
} > "$out/sample_xl.md" 2>&1
grep -E "^\||FAILED|^NALA_GEMM_TUNE|, (bf16|fp8|fp32):$|duration|dram__|registers" "$out/sample_xl.md" | grep -v -- "---" | cut -c1-120
exit $failed
