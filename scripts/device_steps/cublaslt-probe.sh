#!/usr/bin/env bash
# Which cuBLASLt configurations the GPU offers an algorithm for (bench/cublaslt_probe.cu): per-row
# alpha vectors (the gated-residual GEMM), and FP8 GEMMs with the bias and GELU in the epilogue
# writing e4m3 or bf16, per-tensor or per-row scales. Built with the machine's nvcc, run against
# torch's cuBLASLt (the library nala's GEMMs use). One file: cublaslt_probe.md. About 20 s.
out=$1
# torch's cu13 wheels keep cuBLASLt in nvidia/cu13/lib (older ones in nvidia/cublas/lib); empty: the system's
lt=$(python3 -c "
import os, nvidia
base = list(nvidia.__path__)[0]
print(next((d for d in (os.path.join(base, 'cu13', 'lib'), os.path.join(base, 'cublas', 'lib')) if os.path.isdir(d)), ''))" 2> /dev/null)
echo "cuBLASLt from: ${lt:-the system library path}" > "$out/cublaslt_probe.md"
nv=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
mkdir -p build-device
$nv -O2 -std=c++17 bench/cublaslt_probe.cu -lcublasLt -o build-device/cublaslt_probe || { echo "cublaslt_probe did not compile" > "$out/cublaslt_probe.md"; exit 1; }
LD_LIBRARY_PATH=$lt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ./build-device/cublaslt_probe >> "$out/cublaslt_probe.md" 2>&1
