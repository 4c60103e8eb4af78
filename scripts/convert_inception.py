#!/usr/bin/env python3
"""Convert pytorch-fid's Inception weights (pt_inception-2015-12-05-6726825d.pth, the TF FID graph's
parameters exported by pytorch-fid's author) to safetensors with the same torchvision key names,
for `nala eval --inception`. The .pth is a legacy torch.save file that LibTorch cannot read.

usage: python3 scripts/convert_inception.py pt_inception-2015-12-05-6726825d.pth inception.safetensors
Get the .pth from pytorch-fid's release page (FID_WEIGHTS_URL in pytorch_fid/inception.py); its
SHA-256 is 6726825d0af5f729cebd5821db510b11b1cfad8faad88a03f1befd49fb9129b2.
"""
import hashlib
import sys

import torch
from safetensors.torch import save_file


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1:]
    digest = hashlib.sha256(open(src, "rb").read()).hexdigest()
    if digest != "6726825d0af5f729cebd5821db510b11b1cfad8faad88a03f1befd49fb9129b2":
        print(f"warning: {src} has SHA-256 {digest}, not the published pt_inception-2015-12-05 file", file=sys.stderr)
    sd = torch.load(src, map_location="cpu", weights_only=False)
    tensors = {k: v.contiguous() for k, v in sd.items() if isinstance(v, torch.Tensor) and not k.startswith("AuxLogits")}
    save_file(tensors, dst, metadata={"source": "pt_inception-2015-12-05", "sha256": digest})
    print(f"wrote {len(tensors)} tensors to {dst}")


if __name__ == "__main__":
    main()
