#!/usr/bin/env bash
# Runs a standalone probe built on the CPU machine into .carry/NAME (bench/NAME.cu; not part of nala)
# and keeps its table as NAME.md: gated_gemm_probe (CUTLASS gated-residual GEMM vs cuBLASLt,
# scripts/dev/build_gated_gemm_probe.sh), gemm_algo_probe (cuBLASLt's heuristic list timed,
# scripts/dev/build_gemm_algo_probe.sh). cuBLASLt comes from this machine's torch wheel
# (nvidia/cu13/lib) or the toolkit.
#   bash scripts/device_build.sh probe:gemm_algo_probe probe:gated_gemm_probe      (carry [".carry"])
out=$1
name=${2:?usage: probe:NAME (a binary in .carry built by scripts/dev/build_NAME.sh)}
bin=.carry/$name
[ -x "$bin" ] || { echo "probe: no $bin (build it on the CPU machine: bash scripts/dev/build_$name.sh)"; exit 1; }
torch_lib=$(python3 -c 'import os, torch; t = os.path.dirname(torch.__file__); print(os.path.join(os.path.dirname(t), "nvidia", "cu13", "lib"))' 2> /dev/null || true)
LD_LIBRARY_PATH="${torch_lib:+$torch_lib:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin" > "$out/$name.md" 2>&1
rc=$?
cat "$out/$name.md"
exit $rc
