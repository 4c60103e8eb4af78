#!/usr/bin/env bash
# Builds bench/gemm_algo_probe.cu (a standalone cuBLASLt probe, not part of nala: does cuBLASLt's
# heuristic list hold a faster algorithm than its first for DiT-XL/2's GEMMs?) for the H200 on this CPU
# machine: nvcc for sm_90, the CUDA runtime linked statically, cuBLASLt dynamically (the GPU machine's
# comes from its torch wheel). Writes .carry/gemm_algo_probe; the GPU machine runs it with
# `bash scripts/device_build.sh probe:gemm_algo_probe` (scripts/device_steps/probe.sh; carry [".carry"]).
#   bash scripts/dev/build_gemm_algo_probe.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$root/.carry"
nvcc -std=c++17 -O3 -arch=sm_90 -I"$root" -cudart static -o "$root/.carry/gemm_algo_probe.tmp" "$root/bench/gemm_algo_probe.cu" -lcublasLt
mv "$root/.carry/gemm_algo_probe.tmp" "$root/.carry/gemm_algo_probe"
echo "built .carry/gemm_algo_probe ($(du -h "$root/.carry/gemm_algo_probe" | cut -f1))"
