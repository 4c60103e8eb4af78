#!/usr/bin/env python3
"""Convert a PyTorch checkpoint that LibTorch cannot read (legacy torch.save format, or a training
checkpoint whose pickle holds Python objects such as argparse.Namespace) to safetensors with the
same key names. Takes "ema" from a training checkpoint dict when present (as DiT's find_model),
else "model", else the dict itself.

usage: python3 scripts/convert_checkpoint.py IN.pt OUT.safetensors [--take ema|model]
"""
import argparse
import sys

import torch
from safetensors.torch import save_file


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--take", default="ema", choices=["ema", "model"])
    a = p.parse_args()
    ckpt = torch.load(a.src, map_location="cpu", weights_only=False)
    if isinstance(ckpt, dict):
        for key in (a.take, "ema", "model"):
            if isinstance(ckpt.get(key), dict):
                ckpt = ckpt[key]
                break
    tensors = {k: v.contiguous() for k, v in ckpt.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        sys.exit(f"{a.src}: no tensors found")
    save_file(tensors, a.dst, metadata={"format": "pt"})
    print(f"wrote {len(tensors)} tensors to {a.dst}")


if __name__ == "__main__":
    main()
