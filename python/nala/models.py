"""DiT / SiT and their NaLa variants in PyTorch, with the official checkpoints' parameter names (as
nala's C++ models have them), and load_checkpoint() for nala's checkpoints and run directories.
Formulas: docs/reference.md §1 (DiT models.py), the NaLa block docs/nala_attention.md §5."""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from .modules import NaLaAttention

# (depth, hidden, heads): DiT models.py:328-370; T is nala's tiny size for CPU runs (models/model_config.cpp)
SIZES = {"XL": (28, 1152, 16), "L": (24, 1024, 16), "B": (12, 768, 12), "S": (12, 384, 6), "T": (4, 128, 2)}


def parse_name(name):
    """'NaLaDiT-S/2' -> (family 'DiT', nala True, size 'S', patch 2)."""
    try:
        fam, rest = name.split("-")
        size, patch = rest.split("/")
        nala = fam.startswith("NaLa")
        family = fam[4:] if nala else fam
        assert family in ("DiT", "SiT") and size in SIZES
        return family, nala, size, int(patch)
    except (ValueError, AssertionError):
        raise ValueError(f"unknown model {name!r} (e.g. DiT-XL/2, SiT-B/4, NaLaDiT-S/2, NaLaSiT-T/4)") from None


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)  # DiT models.py:19-20


def timestep_embedding(t, dim=256, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]                    # (N, half)
    return torch.cat([torch.cos(args), torch.sin(args)], -1)   # (N, dim), cos first


def sincos_pos_embed(dim, grid):
    """(grid², dim) 2-D sin-cos table: column coordinate first, sin before cos per axis."""
    q = dim // 4
    omega = 1.0 / 10000 ** (torch.arange(q, dtype=torch.float64) / q)
    rows = torch.arange(grid, dtype=torch.float64).repeat_interleave(grid)
    cols = torch.arange(grid, dtype=torch.float64).repeat(grid)
    oc, orow = cols[:, None] * omega, rows[:, None] * omega
    return torch.cat([oc.sin(), oc.cos(), orow.sin(), orow.cos()], 1).float()


class PatchEmbed(nn.Module):
    def __init__(self, in_channels, hidden, patch):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, hidden, patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # (N, T, D)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(256, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t):
        return self.mlp(timestep_embedding(t).to(self.mlp[0].weight.dtype))


class LabelEmbedder(nn.Module):
    def __init__(self, num_classes, hidden, dropout):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + int(dropout > 0), hidden)
        self.num_classes, self.dropout = num_classes, dropout

    def forward(self, y, force_drop=None):
        if (self.training and self.dropout > 0) or force_drop is not None:
            drop = torch.rand(y.shape[0], device=y.device) < self.dropout if force_drop is None else force_drop == 1
            y = torch.where(drop, self.num_classes, y)
        return self.embedding_table(y)


class Attention(nn.Module):
    """Softmax multi-head attention with timm's parameter names (qkv, proj)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, grid_h=None, grid_w=None):
        B, N, D = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)  # (B, H, N, d) each
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, D))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class DiTBlock(nn.Module):
    def __init__(self, hidden, heads, mlp_ratio, attn):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = attn
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(hidden, int(hidden * mlp_ratio))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c, grid):
        s1, c1, g1, s2, c2, g2 = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(modulate(self.norm1(x), s1, c1), grid, grid)
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
    """DiT / SiT (name e.g. 'DiT-XL/2', 'NaLaSiT-S/2'): forward(x (N, C, H, W), t (N,), y (N,)) ->
    (N, C', H, W); for learn-sigma SiT only the first C channels, as SiT models.py returns."""

    def __init__(self, name, input_size=32, in_channels=4, num_classes=1000, learn_sigma=True, class_dropout=0.1, mlp_ratio=4.0,
                 attention=None, lepe=5, alpha=1.0, lam=3.0, tau=0.5, eps=1e-6, eps_norm=1e-6, rope=False, depth=None, hidden=None, heads=None):
        super().__init__()
        family, nala, size, patch = parse_name(name)
        d0, h0, n0 = SIZES[size]
        depth, hidden, heads = depth or d0, hidden or h0, heads or n0
        attention = attention or ("nala" if nala else "softmax")
        self.name, self.family, self.patch, self.in_channels, self.learn_sigma = name, family, patch, in_channels, learn_sigma
        self.out_channels = 2 * in_channels if learn_sigma else in_channels
        self.grid = input_size // patch
        self.x_embedder = PatchEmbed(in_channels, hidden, patch)
        self.t_embedder = TimestepEmbedder(hidden)
        self.y_embedder = LabelEmbedder(num_classes, hidden, class_dropout)
        self.pos_embed = nn.Parameter(sincos_pos_embed(hidden, self.grid).unsqueeze(0), requires_grad=False)

        def mixer():
            if attention == "softmax":
                return Attention(hidden, heads)
            return NaLaAttention(hidden, heads, lepe=lepe, feature_map=attention, alpha=alpha, lam=lam, tau=tau, eps=eps, eps_norm=eps_norm,
                                 rope=rope)

        self.blocks = nn.ModuleList([DiTBlock(hidden, heads, mlp_ratio, mixer()) for _ in range(depth)])
        self.final_layer = FinalLayer(hidden, patch, self.out_channels)

    def unpatchify(self, x):
        n, c, p, g = x.shape[0], self.out_channels, self.patch, self.grid
        x = x.reshape(n, g, g, p, p, c)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(n, c, g * p, g * p)

    def forward(self, x, t, y, force_drop=None):
        h = self.x_embedder(x) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(y, force_drop)
        for b in self.blocks:
            h = b(h, c, self.grid)
        out = self.unpatchify(self.final_layer(h, c))
        if self.family == "SiT" and self.learn_sigma:
            out = out[:, : self.in_channels]
        return out


def model_from_config(cfg):
    """A DiT from the JSON model config nala writes (model.json of a run; 'nala_config' metadata)."""
    n = cfg.get("nala", {})
    return DiT(cfg["name"], input_size=cfg["input_size"], in_channels=cfg["in_channels"], num_classes=cfg["num_classes"],
               learn_sigma=cfg["learn_sigma"], class_dropout=cfg["class_dropout"], mlp_ratio=cfg["mlp_ratio"],
               attention=cfg["attention"], lepe=n.get("lepe_kernel", 5), alpha=n.get("alpha", 1.0), lam=n.get("lambda", 3.0),
               tau=n.get("tau", 0.5), eps=n.get("eps", 1e-6), eps_norm=n.get("eps_norm", 1e-6), rope=bool(n.get("rope", False)), depth=cfg["depth"], hidden=cfg["hidden"],
               heads=cfg["heads"])


def _resolve(path, ema):
    """A .safetensors file, a checkpoint folder, or a run directory (its latest checkpoint)."""
    if os.path.isdir(os.path.join(path, "checkpoints")):
        steps = sorted(d for d in os.listdir(os.path.join(path, "checkpoints")) if d.isdigit())
        if not steps:
            raise FileNotFoundError(f"{path}: the run directory has no checkpoints yet")
        path = os.path.join(path, "checkpoints", steps[-1])
    if os.path.isdir(path):
        path = os.path.join(path, "ema.safetensors" if ema else "model.safetensors")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    return path


def load_checkpoint(path, ema=True, map_location="cpu"):
    """A PyTorch DiT/NaLaDiT with the weights of a nala checkpoint: a run directory (latest
    checkpoint), a checkpoint folder, or a .safetensors file written by nala (its 'nala_config'
    metadata gives the model). ema: the EMA weights (what sampling uses) or the trained ones."""
    from safetensors import safe_open

    file = _resolve(os.fspath(path), ema)
    with safe_open(file, framework="pt", device=str(map_location)) as f:
        meta = f.metadata() or {}
        if "nala_config" not in meta:
            raise ValueError(f"{file}: no 'nala_config' metadata (not written by nala); build nala.DiT(name, ...) and load_state_dict yourself")
        state = {k: f.get_tensor(k) for k in f.keys()}
    model = model_from_config(json.loads(meta["nala_config"]))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{file}: weights do not fit {model.name}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.to(map_location).eval()
