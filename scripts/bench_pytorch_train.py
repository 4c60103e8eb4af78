#!/usr/bin/env python3
"""The PyTorch baseline for `nala bench train`: one DiT training step as DiT's train.py does it
(ADM hybrid loss: MSE + VLB on the detached mean, AdamW lr 1e-4, EMA 0.9999), with bf16 autocast and
TF32, on random 4x32x32 latents, the model from scripts/reference_dit.py (timm layers, fused SDPA).
Fused AdamW and the EMA by torch._foreach_lerp_, as a careful PyTorch user writes them. With
--compile the same step also runs with torch.compile(model) (default options: what a user adds in
one line); the compile time (the warm-up steps) is reported separately and excluded from img/s.
Prints a markdown table: model, mode, ms/step, img/s, peak MiB, compile s.

With --official DIR (a checkout of facebookresearch/DiT) it also times the official step, #34's
peer: the repository's own models.py and create_diffusion(timestep_respacing="").training_losses (its
loss, its numpy-indexed schedule tensors: train.py's step as written), AdamW(fused=True), the same
EMA and bf16 autocast, eager and with torch.compile(model) — the rows marked "(official)".

usage: python3 scripts/bench_pytorch_train.py [--models DiT-S/2,DiT-B/2,DiT-XL/2] [--batch 256] [--image-size 256] [--compile]
                                              [--official DIR]
"""
import time
import argparse
import copy
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import reference_dit  # noqa: E402


class Diffusion:
    """The ADM training loss (gaussian_diffusion.py:715-787), linear schedule, learned-range variance."""

    def __init__(self, device):
        b = np.linspace(1e-4, 0.02, 1000)
        ac = np.cumprod(1 - b)
        acp = np.append(1.0, ac[:-1])
        pv = b * (1 - acp) / (1 - ac)
        t = lambda a: torch.tensor(a, dtype=torch.float32, device=device)
        self.sqrt_ac, self.sqrt_1mac = t(np.sqrt(ac)), t(np.sqrt(1 - ac))
        self.recip, self.recipm1 = t(np.sqrt(1 / ac)), t(np.sqrt(1 / ac - 1))
        self.c1, self.c2 = t(b * np.sqrt(acp) / (1 - ac)), t((1 - acp) * np.sqrt(1 - b) / (1 - ac))
        self.logvar_min, self.log_beta = t(np.log(np.append(pv[1], pv[1:]))), t(np.log(b))

    def loss(self, model, x0, y):
        n = x0.shape[0]
        t = torch.randint(0, 1000, (n,), device=x0.device)
        e = lambda a: a[t].view(-1, 1, 1, 1)
        noise = torch.randn_like(x0)
        xt = e(self.sqrt_ac) * x0 + e(self.sqrt_1mac) * noise
        out = model(xt, t, y).float()
        eps, v = out.chunk(2, dim=1)
        mse = ((noise - eps) ** 2).mean((1, 2, 3))
        x0p = e(self.recip) * xt - e(self.recipm1) * eps.detach()
        mean = e(self.c1) * x0p + e(self.c2) * xt
        frac = (v + 1) / 2
        logvar = frac * e(self.log_beta) + (1 - frac) * e(self.logvar_min)
        tmean, tlv = e(self.c1) * x0 + e(self.c2) * xt, e(self.logvar_min)
        kl = 0.5 * (-1 + logvar - tlv + torch.exp(tlv - logvar) + (tmean - mean) ** 2 * torch.exp(-logvar))
        return (mse + kl.mean((1, 2, 3)) / math.log(2)).mean()  # (the t = 0 decoder term is timing-neutral)


def training_step(name, batch, L, compiled, diff, dev):
    """One DiT training step on random latents as a closure (and the model it calls): bf16 autocast,
    the ADM loss, fused AdamW, EMA by _foreach_lerp_; the model compiled with torch.compile if asked."""
    torch.manual_seed(0)
    model = reference_dit.DiT(name, input_size=L).to(dev).train()
    ema = reference_dit.DiT(name, input_size=L).to(dev).eval().requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0, fused=True)
    net = torch.compile(model) if compiled else model
    x = torch.randn(batch, 4, L, L, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    return optimizer_step(lambda: diff.loss(net, x, y), opt, ema, model), net


def optimizer_step(loss_fn, opt, ema, model):
    """One training step as a closure: loss_fn() under bf16 autocast, backward, the optimizer, the EMA
    by _foreach_lerp_ (decay 0.9999)."""
    ema_p, model_p = list(ema.parameters()), list(model.parameters())

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(ema_p, model_p, 1e-4)

    return step


def official_training_step(repo, name, batch, L, compiled, dev):
    """The official DiT step (repo: a facebookresearch/DiT checkout) as a closure, like training_step:
    its models.py DiT (4 latent channels, 1,000 classes, learned sigma: the defaults) and its
    diffusion's training_losses, under bf16 autocast, fused AdamW, the EMA by _foreach_lerp_."""
    if repo not in sys.path:
        sys.path.insert(0, repo)
    import models  # noqa: E402  (the official models.py)
    import diffusion  # noqa: E402  (the official diffusion package)
    if name not in models.DiT_models:
        raise SystemExit(f"bench_pytorch_train: {name!r} is not in {repo}/models.py (has {', '.join(models.DiT_models)})")
    torch.manual_seed(0)
    model = models.DiT_models[name](input_size=L).to(dev).train()
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    objective = diffusion.create_diffusion(timestep_respacing="")  # train.py's: 1,000 steps, linear, learned sigma
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0, fused=True)
    net = torch.compile(model) if compiled else model
    x = torch.randn(batch, 4, L, L, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def loss():
        t = torch.randint(0, objective.num_timesteps, (batch,), device=dev)
        return objective.training_losses(net, x, t, dict(y=y))["loss"].mean()

    return optimizer_step(loss, opt, ema, model), net


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="DiT-S/2,DiT-B/2,DiT-XL/2")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="also time torch.compile(model)")
    p.add_argument("--official", metavar="DIR", help="also time the official DiT step from this checkout of facebookresearch/DiT")
    a = p.parse_args()
    if a.official and not os.path.isfile(os.path.join(a.official, "models.py")):
        raise SystemExit(f"bench_pytorch_train: --official {a.official}: no models.py there (a facebookresearch/DiT checkout is expected)")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    # NaLa models: the feature maps in float32 and the matmuls under autocast, as a user would write
    # them (the module's default, float64, is the tests' oracle)
    reference_dit.ATTENTION_DTYPE = torch.float32
    dev = "cuda"
    L = a.image_size // 8
    diff = Diffusion(dev)
    print(f"# PyTorch {torch.__version__} DiT training step, {torch.cuda.get_device_name()}, batch {a.batch}, latents 4x{L}x{L}, bf16 autocast")
    print("| model | mode | ms/step | img/s | peak MiB | compile s |\n|---|---|---|---|---|---|")
    modes = ["eager", "compiled"] if a.compile else ["eager"]
    kinds = ["lean", "official"] if a.official else ["lean"]
    for name, kind, mode in [(n, k, m) for n in a.models.split(",") for k in kinds for m in modes]:
        if kind == "official":
            step, net = official_training_step(a.official, name, a.batch, L, mode == "compiled", dev)
        else:
            step, net = training_step(name, a.batch, L, mode == "compiled", diff, dev)
        torch.cuda.synchronize()
        t0 = time.time()
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        compile_s = time.time() - t0
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(a.steps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        ms = float(np.median(times))
        print(f"| {name} ({'official' if kind == 'official' else 'PyTorch'}) | {mode} | {ms:.1f} | {a.batch / ms * 1e3:.0f} | {torch.cuda.max_memory_allocated() / 2**20:.0f} | "
              f"{compile_s:.0f} |", flush=True)
        del step, net
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
