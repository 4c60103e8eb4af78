#!/usr/bin/env bash
# Runs the CUTLASS gated-residual GEMM probe (bench/gated_gemm_probe.cu, built on the CPU machine by
# scripts/dev/build_gated_gemm_probe.sh into .carry/gated_gemm_probe) and keeps its table:
# gated_gemm_probe.md. cuBLASLt comes from this machine's torch wheel (nvidia/cu13/lib) or the toolkit.
#   bash scripts/device_build.sh gated-gemm-probe      (carry [".carry"])
out=$1
bin=.carry/gated_gemm_probe
[ -x "$bin" ] || { echo "gated-gemm-probe: no $bin (build it on the CPU machine: bash scripts/dev/build_gated_gemm_probe.sh)"; exit 1; }
torch_lib=$(python3 -c 'import os, torch; t = os.path.dirname(torch.__file__); print(os.path.join(os.path.dirname(t), "nvidia", "cu13", "lib"))' 2> /dev/null || true)
LD_LIBRARY_PATH="${torch_lib:+$torch_lib:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin" > "$out/gated_gemm_probe.md" 2>&1
rc=$?
cat "$out/gated_gemm_probe.md"
exit $rc
