#!/usr/bin/env python3
"""The pytorch-fid baseline for `nala bench eval`: img/s of pytorch-fid's FID InceptionV3 (random
weights; the speed does not depend on them) on 256 px uint8 batches resized to 299 with
F.interpolate, fp32 + TF32, batch 250; as the layers come (NCHW) and with the two switches a
PyTorch user would flip (channels_last, cudnn.benchmark). pytorch-fid is not on the GPU machine: its FID blocks are
re-declared here from torchvision's Inception3 with the pool changes pytorch-fid makes (the
timing only needs the same layers).

usage: python3 scripts/bench_pytorch_inception.py [--batch 250] [--reps 10]
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=250)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    m = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False, num_classes=1008).cuda().eval()
    imgs = torch.randint(0, 256, (a.batch, 256, 256, 3), dtype=torch.uint8, device="cuda")

    @torch.no_grad()
    def run():
        x = imgs.permute(0, 3, 1, 2).float() / 255
        x = F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False) * 2 - 1
        if torch.backends.cudnn.benchmark:
            x = x.contiguous(memory_format=torch.channels_last)
        m.eval()
        for name in ["Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "maxpool1", "Conv2d_3b_1x1", "Conv2d_4a_3x3", "maxpool2",
                     "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e", "Mixed_7a",
                     "Mixed_7b", "Mixed_7c", "avgpool"]:
            x = getattr(m, name)(x)
        return x.flatten(1) @ m.fc.weight.T

    for variant in ("NCHW", "channels_last + cudnn.benchmark"):
        fast = variant != "NCHW"
        torch.backends.cudnn.benchmark = fast
        m.to(memory_format=torch.channels_last if fast else torch.contiguous_format)
        for _ in range(2):
            run()
        torch.cuda.synchronize()
        times = []
        for _ in range(a.reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            run()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        ms = float(np.median(times))
        print(f"| Inception features, PyTorch {torch.__version__} (torchvision InceptionV3, F.interpolate), {variant} | {a.batch} | "
              f"{ms:.1f} | {a.batch / ms * 1e3:.0f} |")

if __name__ == "__main__":
    main()
