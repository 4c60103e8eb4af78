#!/usr/bin/env python3
"""The official DiT and SiT code as the reference trainer on Fashion-MNIST (#33's reference rows).

The official repositories (facebookresearch/DiT, willisma/SiT) are fetched for the run, not part
of nala: --repo points at a checkout whose models.py and diffusion/ (DiT) or transport/ (SiT) are
imported as they are. Their train.py loop is followed step for step — labels with the model's own
class dropout, t uniform over the 1,000 DDPM steps (DiT, diffusion.training_losses) or the
transport's own t (SiT, transport.training_losses), the mean loss, AdamW(weight_decay=0), an EMA of
the weights — changed only where the data differ and where the experiment fixes a setting:
  - pixel space, 1 channel, 32 px: Fashion-MNIST zero-padded from 28 px, scaled to [-1, 1], no
    VAE, no flip (nala's Fashion-MNIST pipeline: data/datasets.cpp); `in_channels=1`, 10 classes;
  - the experiment's batch, learning rate, steps and EMA (decay min(D, (1 + step) / (10 + step))
    with --ema-warmup, nala's preset; train.py's is a constant 0.9999);
  - bf16 autocast by default as nala trains (--precision fp32 keeps train.py's fp32 with TF32);
  - one process and one GPU (train.py's DDP with one rank is the same arithmetic).
Checkpoints are the EMA weights under their official names (RUN/checkpoints/STEP/ema.safetensors
with state.json), which `nala sample --model M --ckpt FILE` reads, so the same checkpoint can be
sampled by nala's samplers and by the official ones:

  official_fmnist.py train  --repo DIR --model DiT-S/2 --out RUN [--steps 6000 --batch 256 --lr 1e-3 ...]
  official_fmnist.py sample --repo DIR --model DiT-S/2 --ckpt RUN/checkpoints/0006000 --out S.npz [--num-samples 5000]

sample: DiT with diffusion.p_sample_loop at --sampling-steps respaced steps (sample.py's default
250), SiT with Sampler.sample_ode (sample.py's defaults: dopri5, atol 1e-6, rtol 1e-3); unguided,
random labels; TF32 on, as both repositories' sample.py set it (the DiT row of 2026-12-04 ran before
this, in plain float32); images as sample_ddp.py writes them (clamp(127.5 x + 128), uint8, NHWC) with
the labels as arr_1, for `nala eval --fmnist`.
"""
import argparse
import copy
import gzip
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def fail(msg):
    sys.exit(f"official_fmnist: {msg}")


def official(repo, model_name):
    """(family, model constructor, the objective module) from the official checkout at repo."""
    repo = Path(repo)
    if not (repo / "models.py").is_file():
        fail(f"{repo} has no models.py (a checkout of facebookresearch/DiT or willisma/SiT is expected)")
    sys.path.insert(0, str(repo))
    import models  # noqa: E402  (the official models.py)
    if model_name.startswith("DiT"):
        if not (repo / "diffusion").is_dir():
            fail(f"{model_name} needs the DiT repository (diffusion/), {repo} has none")
        import diffusion  # noqa: E402
        table, family, objective = models.DiT_models, "dit", diffusion
    elif model_name.startswith("SiT"):
        if not (repo / "transport").is_dir():
            fail(f"{model_name} needs the SiT repository (transport/), {repo} has none")
        import transport  # noqa: E402
        table, family, objective = models.SiT_models, "sit", transport
    else:
        fail(f"unknown model {model_name!r}: DiT-* or SiT-*")
    if model_name not in table:
        fail(f"{model_name!r} is not in the official models.py (has {', '.join(table)})")
    return family, lambda: table[model_name](input_size=32, in_channels=1, num_classes=10), objective


def fashion_mnist(folder, device):
    """Fashion-MNIST train split as (N, 1, 32, 32) float in [-1, 1] and (N,) labels, on device."""
    path = lambda name: Path(folder) / name
    for n in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        if not path(n).is_file():
            fail(f"cannot open {path(n)} (set NALA_FASHION_MNIST or --data)")
    with gzip.open(path("train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(path("train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    x = torch.from_numpy(np.pad(images, ((0, 0), (2, 2), (2, 2))))  # (N, 32, 32) uint8, zero border
    x = x.to(device).float().div(127.5).sub(1.0).unsqueeze(1)       # (N, 1, 32, 32) in [-1, 1]
    return x, torch.from_numpy(labels).to(device)                   # (N,)


def save_checkpoint(run, step, images_seen, model_name, ema):
    from safetensors.torch import save_file
    dst = run / "checkpoints" / f"{step:07d}"
    tmp = Path(tempfile.mkdtemp(dir=run / "checkpoints", prefix=f".{step:07d}."))
    save_file({k: v.detach().float().contiguous().cpu() for k, v in ema.state_dict().items()}, str(tmp / "ema.safetensors"))
    (tmp / "state.json").write_text(json.dumps({"step": step, "images_seen": images_seen, "model": model_name}))
    os.replace(tmp, dst)  # whole or absent


def train(a):
    family, make_model, objective = official(a.repo, a.model)
    run = Path(a.out)
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
        fail(f"{run} already has checkpoints; this reference trainer does not resume (use a new --out)")
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True  # train.py's settings
    torch.backends.cudnn.allow_tf32 = True
    data, labels = fashion_mnist(a.data, dev)

    model = make_model().to(dev)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0)
    if family == "dit":
        diffusion = objective.create_diffusion(timestep_respacing="")  # 1,000 steps, linear, learned sigma
        loss_fn = lambda m, x, y: diffusion.training_losses(
            m, x, torch.randint(0, diffusion.num_timesteps, (x.shape[0],), device=dev), dict(y=y))["loss"].mean()
    else:
        transport = objective.create_transport("Linear", "velocity", None, None, None)  # train.py's defaults
        loss_fn = lambda m, x, y: transport.training_losses(m, x, dict(y=y))["loss"].mean()
    forward = torch.compile(model) if a.compile else model
    ema_params, params = list(ema.parameters()), list(model.parameters())
    (run / "official.json").write_text(json.dumps({**vars(a), "family": family, "parameters": sum(p.numel() for p in params)}))

    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    n, per_epoch = data.shape[0], data.shape[0] // a.batch  # drop_last=True, as train.py's loader
    order, losses, t_window, log = None, [], time.time(), open(run / "metrics.jsonl", "w")
    model.train()
    for step in range(1, a.steps + 1):
        i = (step - 1) % per_epoch
        if i == 0:
            order = torch.randperm(n, device=dev, generator=gen)  # a new shuffle every epoch
        idx = order[i * a.batch:(i + 1) * a.batch]
        with autocast:
            loss = loss_fn(forward, data[idx], labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        decay = min(a.ema_decay, (1 + step) / (10 + step)) if a.ema_warmup else a.ema_decay
        with torch.no_grad():
            torch._foreach_lerp_(ema_params, params, 1 - decay)  # ema = decay·ema + (1 − decay)·θ, train.py's update_ema
        losses.append(loss.detach())
        if step % a.log_every == 0 or step == a.steps:
            mean = torch.stack(losses).float().mean().item()
            dt = time.time() - t_window
            k = len(losses)
            if not math.isfinite(mean):
                fail(f"{a.model}: non-finite loss at step {step} (lr {a.lr})")
            log.write(json.dumps({"step": step, "loss": mean, "images_seen": step * a.batch, "steps_per_s": k / dt,
                                  "img_per_s": k * a.batch / dt, "epoch": (step - 1) // per_epoch, "lr": a.lr}) + "\n")
            log.flush()
            print(f"step {step}: loss {mean:.4f}, {k * a.batch / dt:.0f} img/s", flush=True)
            losses, t_window = [], time.time()
        if step % a.ckpt_every == 0 or step == a.steps:
            save_checkpoint(run, step, step * a.batch, a.model, ema)
    log.close()


def sample(a):
    family, make_model, objective = official(a.repo, a.model)
    from safetensors.torch import load_file
    dev = torch.device(a.device)
    ckpt = Path(a.ckpt)
    weights = ckpt / "ema.safetensors" if ckpt.is_dir() else ckpt
    if not weights.is_file():
        fail(f"{weights} does not exist")
    torch.backends.cuda.matmul.allow_tf32 = True  # sample.py's settings (DiT and SiT alike)
    torch.backends.cudnn.allow_tf32 = True
    model = make_model().to(dev).eval()
    model.load_state_dict(load_file(str(weights)))
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    images, labels = [], []
    for start in range(0, a.num_samples, a.batch_size):
        b = min(a.batch_size, a.num_samples - start)
        z = torch.randn(b, 1, 32, 32, device=dev, generator=gen)  # (B, 1, 32, 32)
        y = torch.randint(0, 10, (b,), device=dev, generator=gen)  # (B,)
        with torch.no_grad():
            if family == "dit":
                diffusion = objective.create_diffusion(str(a.sampling_steps))
                x = diffusion.p_sample_loop(model.forward, z.shape, z, clip_denoised=False, model_kwargs=dict(y=y),
                                            progress=False, device=dev)
            else:
                transport = objective.create_transport("Linear", "velocity", None, None, None)
                fn = objective.Sampler(transport).sample_ode(sampling_method="dopri5", num_steps=a.sampling_steps,
                                                             atol=1e-6, rtol=1e-3)
                x = fn(z, model.forward, y=y)[-1]
        images.append(torch.clamp(127.5 * x + 128.0, 0, 255).permute(0, 2, 3, 1).to("cpu", torch.uint8).numpy())  # (B, 32, 32, 1)
        labels.append(y.cpu().numpy())
        print(f"{start + b}/{a.num_samples} samples", flush=True)
    out = Path(a.out)
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez(tmp, arr_0=np.concatenate(images), arr_1=np.concatenate(labels))
    os.replace(tmp, out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    s = sub.add_parser("sample")
    for q in (t, s):
        q.add_argument("--repo", required=True, help="checkout of facebookresearch/DiT (DiT-*) or willisma/SiT (SiT-*)")
        q.add_argument("--model", required=True, help="official model name, e.g. DiT-S/2 or SiT-S/2")
        q.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
        q.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", required=True)
    t.add_argument("--data", default=os.environ.get("NALA_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))
    t.add_argument("--steps", type=int, default=6000)
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--ema-decay", type=float, default=0.9995)
    t.add_argument("--ema-warmup", type=lambda v: v == "true", default=True, help="true or false")
    t.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    t.add_argument("--compile", action="store_true", help="torch.compile the model (speed only)")
    t.add_argument("--log-every", type=int, default=50)
    t.add_argument("--ckpt-every", type=int, default=1000)
    s.add_argument("--ckpt", required=True, help="RUN/checkpoints/STEP or an ema.safetensors")
    s.add_argument("--out", required=True, help=".npz for nala eval --fmnist")
    s.add_argument("--num-samples", type=int, default=5000)
    s.add_argument("--batch-size", type=int, default=1000)
    s.add_argument("--sampling-steps", type=int, default=250, help="DiT: respaced DDPM steps; SiT: dopri5's saved points")
    a = p.parse_args()
    train(a) if a.cmd == "train" else sample(a)


if __name__ == "__main__":
    main()
