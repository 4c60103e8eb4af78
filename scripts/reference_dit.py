"""An independent PyTorch implementation of DiT / SiT (facebookresearch/DiT models.py, as described
in docs/reference.md §1) and of the gated NaLa block (docs/nala_attention.md §5), built from
timm's Attention / Mlp / PatchEmbed as the official code is. It is the oracle the C++ models are
tested against (tests/python/test_models.py); it is not used by nala itself.

Shapes: x (N, C, H, W), t (N,), y (N,); tokens T = (H/p)^2; hidden D.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models.vision_transformer import Attention, Mlp, PatchEmbed

SIZES = {"XL": (28, 1152, 16), "L": (24, 1024, 16), "B": (12, 768, 12), "S": (12, 384, 6), "T": (6, 192, 3)}


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def timestep_features(t, dim=256, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def pos_embed_2d(dim, grid):
    """MAE-style 2-D sin-cos table, float64: columns first, [sin, cos] per axis."""
    omega = 1.0 / 10000 ** (np.arange(dim // 4, dtype=np.float64) / (dim // 4))
    gw, gh = np.meshgrid(np.arange(grid, dtype=np.float64), np.arange(grid, dtype=np.float64))
    def axis(pos):
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)
    return np.concatenate([axis(gw), axis(gh)], axis=1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(256, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t):
        return self.mlp(timestep_features(t))


class LabelEmbedder(nn.Module):
    def __init__(self, num_classes, hidden, dropout):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + int(dropout > 0), hidden)
        self.num_classes, self.dropout = num_classes, dropout

    def forward(self, y, train, force_drop_ids=None):
        if (train and self.dropout > 0) or force_drop_ids is not None:
            drop = torch.rand(y.shape[0], device=y.device) < self.dropout if force_drop_ids is None else force_drop_ids == 1
            y = torch.where(drop, self.num_classes, y)
        return self.embedding_table(y)


def phi_query(q, alpha=1.0, lam=3.0, tau=0.5, variant="nala"):
    n = q.norm(dim=-1, keepdim=True)
    qh = q / n.clamp_min(1e-6)
    p = lam * (tau + torch.tanh(n))
    if variant == "nala-relu":
        return torch.cat([F.relu(qh) ** p, F.relu(-qh) ** p], -1)
    a = qh.abs() ** p
    th = math.pi / 4 * torch.tanh(alpha * qh)
    return torch.cat([a * torch.cos(th), a * torch.sin(th)], -1)


def phi_key(k, alpha=1.0, lam=3.0, variant="nala"):
    if variant == "nala-relu":
        return torch.cat([F.relu(k) ** lam, F.relu(-k) ** lam], -1)
    kh = k / k.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    a = k.abs() ** lam
    th = math.pi / 4 * torch.tanh(alpha * kh)
    return torch.cat([a * torch.cos(th), a * torch.sin(th)], -1)


# The dtype nala_attention computes in: float64 for the tests' oracle; the PyTorch training
# benchmark (scripts/bench_pytorch_train.py) sets float32, what a user would write (fp32 feature maps).
ATTENTION_DTYPE = torch.float64


def nala_attention(q, k, v, alpha=1.0, variant="nala", eps=1e-6):
    """docs/nala_attention.md §4 in ATTENTION_DTYPE; q, k, v (B, H, N, d)."""
    dt = q.dtype
    q, k, v = q.to(ATTENTION_DTYPE), k.to(ATTENTION_DTYPE), v.to(ATTENTION_DTYPE)
    pq, pk = phi_query(q, alpha, variant=variant), phi_key(k, alpha, variant=variant)
    n = q.shape[2]
    S = pk.transpose(-1, -2) @ v / n
    z = pk.sum(2, keepdim=True) / n
    return ((pq @ S) / ((pq * z).sum(-1, keepdim=True) + eps)).to(dt)


def nala_attention_rope(q, k, v, grid_h, grid_w, alpha=1.0, variant="nala", eps=1e-6):
    """docs/nala_attention.md §5, the 2-D axial RoPE variant, as the quadratic form it defines (N x N
    scores of complex-rotated features), in float64; q, k, v (B, H, N, d), N = grid_h * grid_w."""
    dt = q.dtype
    q, k, v = q.double(), k.double(), v.double()
    pq, pk = phi_query(q, alpha, variant=variant), phi_key(k, alpha, variant=variant)   # (B, H, N, F)
    n, f = q.shape[2], pq.shape[-1]
    pos = torch.arange(n, dtype=torch.float64)
    row, col = pos.div(grid_w, rounding_mode="floor"), pos.remainder(grid_w)
    omega = 10000.0 ** (-torch.arange(f // 4, dtype=torch.float64) / (f // 4))
    theta = torch.cat([row[:, None] * omega, col[:, None] * omega], 1)                  # (N, F/2)
    turn = torch.polar(torch.ones_like(theta), theta)                                    # e^{iθ}
    cq = torch.complex(pq[..., 0::2], pq[..., 1::2]) * turn                             # (B, H, N, F/2)
    ck = torch.complex(pk[..., 0::2], pk[..., 1::2]) * turn
    scores = torch.einsum("bhnj,bhmj->bhnm", cq, ck.conj()).real                          # (B, H, N, N)
    den = (pq * pk.mean(2, keepdim=True)).sum(-1, keepdim=True) + eps
    return ((scores @ v) / n / den).to(dt)


class GatedNala(nn.Module):
    """docs/nala_attention.md §5: qkvg, per-head NaLa attention, LePE on v, LayerNorm(o) * SiLU(g), proj."""

    def __init__(self, dim, heads, lepe=5, alpha=1.0, variant="nala"):
        super().__init__()
        self.heads, self.alpha, self.variant = heads, alpha, variant
        self.qkvg = nn.Linear(dim, 4 * dim)
        self.lepe = nn.Conv2d(dim, dim, lepe, padding=lepe // 2, groups=dim) if lepe else None
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, D = x.shape
        g = int(math.isqrt(N))
        q, k, v, gate = self.qkvg(x).chunk(4, dim=-1)
        heads = lambda a: a.reshape(B, N, self.heads, D // self.heads).transpose(1, 2)
        o = nala_attention(heads(q), heads(k), heads(v), self.alpha, self.variant).transpose(1, 2).reshape(B, N, D)
        if self.lepe is not None:
            o = o + self.lepe(v.reshape(B, g, g, D).permute(0, 3, 1, 2)).flatten(2).transpose(1, 2)
        return self.proj(self.norm(o) * F.silu(gate))


class DiTBlock(nn.Module):
    def __init__(self, hidden, heads, attention="softmax", **nala):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden, num_heads=heads, qkv_bias=True) if attention == "softmax" else GatedNala(hidden, heads, variant=attention, **nala)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(in_features=hidden, hidden_features=4 * hidden, act_layer=lambda: nn.GELU(approximate="tanh"), drop=0)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c):
        s1, c1, g1, s2, c2, g2 = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(modulate(self.norm1(x), s1, c1))
        return x + g2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), s2, c2))


class FinalLayer(nn.Module):
    def __init__(self, hidden, patch, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden, patch * patch * out_channels)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class DiT(nn.Module):
    def __init__(self, name, input_size=32, in_channels=4, num_classes=1000, learn_sigma=True, class_dropout=0.1, **nala):
        super().__init__()
        fam, rest = name.split("-")
        size, patch = rest.split("/")
        depth, hidden, heads = SIZES[size]
        self.family = "SiT" if fam.endswith("SiT") else "DiT"
        attention = "softmax" if not fam.startswith("NaLa") else nala.pop("variant", "nala")
        self.patch, self.in_channels, self.learn_sigma = int(patch), in_channels, learn_sigma
        self.out_channels = 2 * in_channels if learn_sigma else in_channels
        self.x_embedder = PatchEmbed(input_size, self.patch, in_channels, hidden, bias=True)
        self.t_embedder = TimestepEmbedder(hidden)
        self.y_embedder = LabelEmbedder(num_classes, hidden, class_dropout)
        grid = input_size // self.patch
        self.pos_embed = nn.Parameter(torch.from_numpy(pos_embed_2d(hidden, grid)).float().unsqueeze(0), requires_grad=False)
        self.blocks = nn.ModuleList([DiTBlock(hidden, heads, attention, **nala) for _ in range(depth)])
        self.final_layer = FinalLayer(hidden, self.patch, self.out_channels)

    def unpatchify(self, x):
        c, p = self.out_channels, self.patch
        h = w = int(x.shape[1] ** 0.5)
        x = x.reshape(x.shape[0], h, w, p, p, c)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(x.shape[0], c, h * p, w * p)

    def forward(self, x, t, y):
        x = self.x_embedder(x) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(y, self.training)
        for b in self.blocks:
            x = b(x, c)
        x = self.unpatchify(self.final_layer(x, c))
        if self.family == "SiT" and self.learn_sigma:
            x, _ = x.chunk(2, dim=1)
        return x

    def forward_with_cfg(self, x, t, y, scale, channels=3):
        half = x[: len(x) // 2]
        out = self.forward(torch.cat([half, half]), t, y)
        eps, rest = out[:, :channels], out[:, channels:]
        cond, uncond = torch.split(eps, len(eps) // 2, dim=0)
        half_eps = uncond + scale * (cond - uncond)
        return torch.cat([torch.cat([half_eps, half_eps]), rest], dim=1)
