"""nn.Modules over the NaLa op, with the parameter names of nala's C++ modules (and so of nala's
checkpoints): NaLaAttention is the gated NaLa block of attention/blocks.cpp (docs/nala_attention.md §5)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._ops import FEATURE_MAPS, attention


class NaLaAttention(nn.Module):
    """Gated NaLa attention: x (B, N, dim) on an H×W token grid -> (B, N, dim).

    qkvg = Linear(dim, 4·dim); per head o = NaLa(q, k, v); LePE: o += depthwise k×k conv of v on
    the grid (lepe=0 disables); y = LayerNorm(o) · SiLU(g); proj = Linear(dim, dim)."""

    def __init__(self, dim, num_heads, lepe=5, feature_map="nala", alpha=1.0, lam=3.0, tau=0.5, eps=1e-6, eps_norm=1e-6, rope=False):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"NaLaAttention: dim {dim} is not divisible by {num_heads} heads")
        if lepe and lepe % 2 == 0:
            raise ValueError(f"NaLaAttention: the LePE kernel size must be odd (or 0), got {lepe}")
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"NaLaAttention: unknown feature_map {feature_map!r} (known: {', '.join(FEATURE_MAPS)})")
        self.heads, self.rope = num_heads, rope
        self.options = dict(feature_map=feature_map, lam=lam, tau=tau, alpha=alpha, eps=eps, eps_norm=eps_norm)
        self.qkvg = nn.Linear(dim, 4 * dim)
        self.lepe = nn.Conv2d(dim, dim, lepe, padding=lepe // 2, groups=dim) if lepe else None
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, grid_h=None, grid_w=None):
        B, N, D = x.shape
        if grid_h is None:
            grid_h = grid_w = math.isqrt(N)
        if grid_h * grid_w != N:
            raise ValueError(f"NaLaAttention: {N} tokens do not fill a {grid_h}x{grid_w} grid")
        t = self.qkvg(x).view(B, N, 4, self.heads, D // self.heads)          # (B, N, 4, H, d)
        q, k, v = (t[:, :, i].transpose(1, 2) for i in range(3))             # (B, H, N, d) strided views
        grid = (grid_h, grid_w) if self.rope else None
        o = attention(q, k, v, rope_grid=grid, **self.options).transpose(1, 2).reshape(B, N, D)  # (B, N, D)
        if self.lepe is not None:
            vg = t[:, :, 2].reshape(B, grid_h, grid_w, D).permute(0, 3, 1, 2)  # (B, D, H, W)
            o = o + self.lepe(vg).flatten(2).transpose(1, 2)
        g = t[:, :, 3].reshape(B, N, D)
        return self.proj(self.norm(o) * F.silu(g))
