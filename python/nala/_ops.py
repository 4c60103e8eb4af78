"""The operator library (python/csrc/ops.cpp, built as nala/_C.so) and what torch needs to trace and
differentiate it: fake implementations (shapes, dtypes, strides) and the autograd formula, which
calls the hand-derived backward kernel (docs/nala_attention.md §4)."""
import os

import torch

FEATURE_MAPS = {"nala": 0, "nala-relu": 1, "elu": 2, "relu": 3, "focused": 4}


def _library_path():
    env = os.environ.get("NALA_OPS_LIBRARY")
    return env if env else os.path.join(os.path.dirname(os.path.abspath(__file__)), "_C.so")


def _load():
    path = _library_path()
    if not os.path.exists(path):
        raise ImportError(f"nala: the operator library {path} does not exist; install the package with "
                          "`pip install --no-build-isolation .` from the repository, or set NALA_OPS_LIBRARY")
    torch.ops.load_library(path)


_load()


def _round16(n):
    return (n + 15) // 16 * 16


@torch.library.register_fake("nala::attention_forward")
def _attention_forward_fake(q, k, v, feature_map, lam, tau, alpha, eps, eps_norm, focus_power):
    B, H, N, d = q.shape
    F = 2 * d if feature_map in (0, 1) else d
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    Fs, ds = (_round16(F), _round16(d)) if q.device.type == "cuda" else (F, d)  # the CUDA state is padded
    o = q.new_empty((B, H, N, d))
    return o, q.new_empty((B, H, Fs, ds), dtype=acc), q.new_empty((B, H, Fs), dtype=acc), q.new_empty((B, H, N), dtype=acc)


@torch.library.register_fake("nala::attention_backward")
def _attention_backward_fake(q, k, v, S, z, den, grad_o, feature_map, lam, tau, alpha, eps, eps_norm, focus_power):
    shape = q.shape
    return q.new_empty(shape), q.new_empty(shape), q.new_empty(shape)


def _setup_context(ctx, inputs, output):
    q, k, v, *options = inputs
    _, S, z, den = output
    ctx.save_for_backward(q, k, v, S, z, den)
    ctx.options = options
    ctx.mark_non_differentiable(S, z, den)


def _backward(ctx, grad_o, grad_S, grad_z, grad_den):
    q, k, v, S, z, den = ctx.saved_tensors
    if grad_o is None:
        return (None,) * (3 + len(ctx.options))
    dq, dk, dv = torch.ops.nala.attention_backward(q, k, v, S, z, den, grad_o, *ctx.options)
    return (dq, dk, dv) + (None,) * len(ctx.options)


torch.library.register_autograd("nala::attention_forward", _backward, setup_context=_setup_context)


def cuda_kernels_built():
    """True when this build of the package has the CUDA kernels (else CUDA tensors are refused)."""
    return bool(torch.ops.nala.cuda_kernels_built())


def attention(q, k, v, feature_map="nala", lam=3.0, tau=0.5, alpha=1.0, eps=1e-6, eps_norm=1e-6, focus_power=3.0, rope_grid=None):
    """NaLa attention (docs/nala_attention.md §3): q, k, v (B, H, N, d) -> o (B, H, N, d).

    feature_map: "nala" (the paper), "nala-relu" (the authors' public code), or the baselines
    "elu", "relu", "focused". Strided views are read in place; CPU and CUDA (float32, float16,
    bfloat16; float64 on the CPU). Differentiable; torch.compile(fullgraph=True) traces it.
    rope_grid=(grid_h, grid_w): the 2-D axial RoPE variant (the authors' public code; rotary
    position on the numerator's features), in ATen ops rather than the fused kernels."""
    if feature_map not in FEATURE_MAPS:
        raise ValueError(f"nala.attention: unknown feature_map {feature_map!r} (known: {', '.join(FEATURE_MAPS)})")
    if rope_grid is not None:
        gh, gw = rope_grid
        return torch.ops.nala.attention_rope(q, k, v, FEATURE_MAPS[feature_map], float(lam), float(tau), float(alpha), float(eps),
                                             float(eps_norm), float(focus_power), int(gh), int(gw))
    return torch.ops.nala.attention_forward(q, k, v, FEATURE_MAPS[feature_map], float(lam), float(tau), float(alpha), float(eps),
                                            float(eps_norm), float(focus_power))[0]


def attention_packed(qkv, heads, parts=3, **options):
    """NaLa attention on a fused projection's output: qkv (B, N, parts·D), parts = 3 (q, k, v) or 4
    (q, k, v, g of the gated block; g is not used here) -> o (B, N, D), `heads` heads of D/heads
    channels. q, k and v are read in place as strided views (no copies)."""
    if parts not in (3, 4):
        raise ValueError(f"nala.attention_packed: parts must be 3 or 4, got {parts}")
    B, N, PD = qkv.shape
    if PD % parts or (PD // parts) % heads:
        raise ValueError(f"nala.attention_packed: last dimension {PD} is not {parts} x a multiple of {heads} heads")
    D = PD // parts
    split = qkv.view(B, N, parts, heads, D // heads)
    q, k, v = (split[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, N, d) strided views
    return attention(q, k, v, **options).transpose(1, 2).reshape(B, N, D)
