#!/usr/bin/env bash
# The samplers' network call as a CUDA graph (--cuda-graphs, samplers/graphed_net.h), same run: the
# GPU tests SampleGraph.* (samples with graphs equal to eager ones, DDPM/DDIM/ODE/SDE, guidance),
# then DDPM+CFG sampling throughput eager and replayed for DiT-S/2, DiT-XL/2 and NaLaDiT-XL/2, and
# the official DiT-XL/2 sampling step in PyTorch, eager and with torch.compile (same run).
out=$1
n=./build-device/nala
{
  ./build-device/tests/nala_cuda_tests --gtest_filter='SampleGraph.*' 2>&1 | grep -E "batch|OK|FAILED|Failure|rror" | head -40
  $n bench sample --models DiT-S/2 --batch 64 --measure 20 --dtypes bf16 --cuda-graphs both
  $n bench sample --models DiT-XL/2,NaLaDiT-XL/2 --batch 64 --measure 8 --dtypes bf16 --cuda-graphs both
  python3 scripts/bench_pytorch_sample.py --model DiT-XL/2 --batch 64 --measure 8 --compile
} > "$out/sample_graphs.md" 2>&1
grep -E "^\||batch|FAILED|rror" "$out/sample_graphs.md" | grep -v "^|---" | head -40
