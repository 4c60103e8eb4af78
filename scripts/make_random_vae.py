#!/usr/bin/env python3
"""A small Stable-Diffusion-layout VAE with random weights (diffusers' AutoencoderKL, 3 blocks of
32/64/64 channels, 4 latent channels, 8x downsampling), written as diffusers writes one:
DIR/diffusion_pytorch_model.safetensors and DIR/config.json. For tests and the GPU smoke run, which
need a VAE of the real architecture but not its weights. Usage:
  python3 scripts/make_random_vae.py DIR [--old-names]
--old-names writes the attention weights under diffusers' pre-0.14 names (query, key, value,
proj_attn), which nala also reads."""
import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file


def make_vae(d, old_names=False, seed=0):
    """Writes the VAE into folder d; returns (the diffusers module, the safetensors path)."""
    from diffusers import AutoencoderKL
    torch.manual_seed(seed)
    m = AutoencoderKL(block_out_channels=(32, 64, 64), down_block_types=("DownEncoderBlock2D",) * 3,
                      up_block_types=("UpDecoderBlock2D",) * 3, layers_per_block=2, norm_num_groups=8, latent_channels=4).eval()
    with torch.no_grad():
        for p in m.parameters():  # away from the initialisation's zeros and ones
            p.add_(torch.randn_like(p) * 0.05)
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    if old_names:
        renamed = {"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"}
        new = {}
        for k, v in sd.items():
            for a, b in renamed.items():
                k = k.replace(f"attentions.0.{a}.", f"attentions.0.{b}.")
            new[k] = v
        sd = new
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    save_file(sd, d / "diffusion_pytorch_model.safetensors")
    (d / "config.json").write_text(json.dumps(dict(m.config)))
    return m, d / "diffusion_pytorch_model.safetensors"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--old-names", action="store_true")
    a = ap.parse_args()
    print(make_vae(a.dir, a.old_names)[1])
