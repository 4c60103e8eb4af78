#!/usr/bin/env python3
"""Where the GPU time of one PyTorch DiT training step goes, kernel by kernel, eager or with
torch.compile(model): the step of scripts/bench_pytorch_train.py under torch.profiler (CUPTI kernel
durations; Nsight Compute cannot follow a compiling process in reasonable time), summed by kernel
name and by category (scripts/kernel_table.py's), as markdown tables. With --trace FILE.json the
profile is also written as a Chrome trace and its timeline printed (kernel_table.py's: the idle time
between kernels), as for nala's NALA_PROFILE_TRACE; --steps K profiles K steps and prints per step.

usage: python3 scripts/profile_pytorch_step.py [--model DiT-S/2] [--batch 256] [--compile] [--top 30] [--steps 1]
                                               [--trace FILE.json]
"""
import argparse
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_pytorch_train  # noqa: E402
import kernel_table  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="DiT-S/2")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=256)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--trace", help="write the profile as a Chrome trace here (.json) and print its timeline")
    a = p.parse_args()
    if a.steps < 1:
        raise SystemExit(f"--steps {a.steps}: must be at least 1")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev, L = "cuda", a.image_size // 8
    diff = bench_pytorch_train.Diffusion(dev)
    step, _ = bench_pytorch_train.training_step(a.model, a.batch, L, a.compile, diff, dev)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    total, count = collections.Counter(), collections.Counter()
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = getattr(e, "device_time_total", None)
        us = e.cuda_time_total if us is None else us
        if us <= 0:
            continue
        k = kernel_table.short(e.key)
        total[k] += us / a.steps  # microseconds a step
        count[k] += round(e.count / a.steps)
    what = "one step" if a.steps == 1 else f"per step of {a.steps}"
    kernel_table.print_tables(total, count, 1.0, f"PyTorch {a.model} {'compiled' if a.compile else 'eager'} ({what}, torch.profiler)", a.top)
    if a.trace:
        prof.export_chrome_trace(a.trace)
        print()
        kernel_table.print_timeline(kernel_table.trace_events(a.trace), a.steps)


if __name__ == "__main__":
    main()
