#!/usr/bin/env python3
"""Where the GPU time of one PyTorch DiT training step goes, kernel by kernel, eager or with
torch.compile(model): the step of scripts/bench_pytorch_train.py under torch.profiler (CUPTI kernel
durations; Nsight Compute cannot follow a compiling process in reasonable time), summed by kernel
name and by category (scripts/kernel_table.py's), as markdown tables.

usage: python3 scripts/profile_pytorch_step.py [--model DiT-S/2] [--batch 256] [--compile] [--top 30]
"""
import argparse
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_pytorch_train  # noqa: E402
import kernel_table  # noqa: E402
import reference_dit  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="DiT-S/2")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=256)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev, L = "cuda", a.image_size // 8
    diff = bench_pytorch_train.Diffusion(dev)
    torch.manual_seed(0)
    model = reference_dit.DiT(a.model, input_size=L).to(dev).train()
    ema = reference_dit.DiT(a.model, input_size=L).to(dev).eval().requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0, fused=True)
    net = torch.compile(model) if a.compile else model
    x = torch.randn(a.batch, 4, L, L, device=dev)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    ema_p, model_p = list(ema.parameters()), list(model.parameters())

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = diff.loss(net, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(ema_p, model_p, 1e-4)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
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
        total[k] += us  # microseconds
        count[k] += e.count
    kernel_table.print_tables(total, count, 1.0, f"PyTorch {a.model} {'compiled' if a.compile else 'eager'} (one step, torch.profiler)", a.top)


if __name__ == "__main__":
    main()
