#!/usr/bin/env python3
"""The PyTorch baseline for `nala bench sample`: the official sampling step (forward_with_cfg on the
doubled batch, 3-channel guidance, ADM p_sample with learned-range variance), DiT-XL/2 from
scripts/reference_dit.py with random weights, batch 64, timed over a few steps and extrapolated to
a 250-step run, in bf16 autocast and in fp32+TF32; with --compile also bf16 with the model call
compiled (torch.compile of forward_with_cfg, default options; compile time reported separately).

usage: python3 scripts/bench_pytorch_sample.py [--model DiT-XL/2] [--batch 64] [--measure 10] [--compile]
"""
import time
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import reference_dit  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="DiT-XL/2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--measure", type=int, default=10)
    p.add_argument("--cfg-scale", type=float, default=1.5)
    p.add_argument("--compile", action="store_true", help="also time torch.compile of the model call (bf16)")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    dev, L, n = "cuda", a.image_size // 8, a.batch
    torch.manual_seed(0)
    model = reference_dit.DiT(a.model, input_size=L).to(dev).eval()
    with torch.no_grad():
        for q in model.parameters():
            q.add_(torch.randn_like(q) * 0.02)
    # respaced 250-step tables (ADM), float64 -> float32 per step
    b = np.linspace(1e-4, 0.02, 1000)
    ac = np.cumprod(1 - b)
    keep = sorted({int(round(i * 999 / (a.steps - 1))) for i in range(a.steps)})
    acs = ac[keep]
    nb = 1 - acs / np.append(1.0, acs[:-1])
    acp = np.append(1.0, acs[:-1])
    pv = nb * (1 - acp) / (1 - acs)
    tab = {k: torch.tensor(v, dtype=torch.float32, device=dev) for k, v in dict(
        recip=np.sqrt(1 / acs), recipm1=np.sqrt(1 / acs - 1), c1=nb * np.sqrt(acp) / (1 - acs), c2=(1 - acp) * np.sqrt(1 - nb) / (1 - acs),
        lmin=np.log(np.append(pv[1], pv[1:])), lmax=np.log(nb)).items()}
    tmap = torch.tensor(keep, device=dev)
    y = torch.randint(0, 1000, (n,), device=dev)
    y2 = torch.cat([y, torch.full_like(y, 1000)])
    print(f"# PyTorch {torch.__version__} DDPM+CFG sampling step, {torch.cuda.get_device_name()}, {a.model}, batch {n}, cfg {a.cfg_scale}")
    print(f"| model | mode | ms/step | img/s ({a.steps} steps) | peak MiB | compile s |\n|---|---|---|---|---|---|")
    compiled = torch.compile(model.forward_with_cfg) if a.compile else None
    for mode in ("bf16", "fp32+tf32") + (("bf16 compiled",) if a.compile else ()):
        fwd = compiled if mode == "bf16 compiled" else model.forward_with_cfg
        z = torch.randn(2 * n, 4, L, L, device=dev)
        i = [a.steps - 1]

        @torch.no_grad()
        def step():
            t = torch.full((2 * n,), i[0], device=dev, dtype=torch.long)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode != "fp32+tf32"):
                out = fwd(z, tmap[t], y2, a.cfg_scale).float()
            e = lambda k: tab[k][t].view(-1, 1, 1, 1)
            eps, v = out.chunk(2, dim=1)
            x0 = e("recip") * z - e("recipm1") * eps
            mean = e("c1") * x0 + e("c2") * z
            frac = (v + 1) / 2
            logvar = frac * e("lmax") + (1 - frac) * e("lmin")
            z.copy_(mean + torch.exp(0.5 * logvar) * torch.randn_like(z))
            i[0] = i[0] - 1 if i[0] > 1 else a.steps - 1

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()  # the peak of this mode's steps (the model's weights included)
        t0 = time.time()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        compile_s = time.time() - t0
        times = []
        for _ in range(a.measure):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        ms = float(np.median(times))
        peak = torch.cuda.max_memory_allocated() / 2**20
        print(f"| {a.model} (PyTorch) | {mode} | {ms:.1f} | {n / (ms * a.steps / 1e3):.2f} | {peak:.0f} | {compile_s:.0f} |", flush=True)


if __name__ == "__main__":
    main()
