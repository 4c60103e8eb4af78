#!/usr/bin/env bash
# CUDA graphs of the training step (--cuda-graphs, models/cuda_graph.h), same run: the graph's replay
# against eager steps (GPU test TrainGraph.*: losses, gradient norms, weights, EMA), then training
# throughput eager and replayed (bench train --cuda-graphs both) for DiT-S/2, NaLaDiT-S/2 and DiT-XL/2,
# and a short Fashion-MNIST run of the trainer itself with graphs on.
out=$1
n=./build-device/nala
{
  ./build-device/tests/nala_cuda_tests --gtest_filter='TrainGraph.*' 2>&1 | grep -E "step|bitwise|OK|FAILED|Failure|error" | head -80
  $n bench train --models DiT-S/2,NaLaDiT-S/2 --batch 256 --image-size 256 --steps 10 --warmup 3 --cuda-graphs both
  $n bench train --models DiT-XL/2 --batch 256 --image-size 256 --steps 4 --warmup 2 --cuda-graphs both
  $n train --preset fashion-mnist-s2 --steps 200 --log-every 50 --sample-every 0 --ckpt-every 200 --cuda-graphs true --out /tmp/nala-graphs-run
} > "$out/graphs.md" 2>&1
grep -E "^\||step|bitwise|FAILED|rror" "$out/graphs.md" | grep -v "^|---" | head -60
