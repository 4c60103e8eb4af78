"""The Python package `nala` (python/nala over python/csrc/ops.cpp): the op against float64
finite differences (gradcheck) and torch.library.opcheck, torch.compile(fullgraph=True) equal to
eager, the PyTorch NaLaAttention / DiT equal to the C++ models through `nala forward` on the same
weights, load_checkpoint on a nala run, and `pip install` from the repository into a fresh venv.
The in-tree tests load the build's operator library (build/python/nala/_C.so)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from conftest import BUILD, SOURCE, run

os.environ.setdefault("NALA_OPS_LIBRARY", str(BUILD / "python" / "nala" / "_C.so"))
sys.path.insert(0, str(SOURCE / "python"))
import nala  # noqa: E402


def qkv(shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(True) for _ in range(3)]


@pytest.mark.parametrize("fm", list(nala.FEATURE_MAPS))
def test_gradcheck_float64(fm):
    q, k, v = qkv((2, 2, 9, 8))
    assert torch.autograd.gradcheck(lambda a, b, c: nala.attention(a, b, c, feature_map=fm), (q, k, v), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_matches_the_formula_in_torch_ops():
    """docs/nala_attention.md §3 written out in torch ops, float64: the op equals it."""
    q, k, v = qkv((2, 3, 33, 16))
    lam, tau, alpha, eps = 3.0, 0.5, 1.0, 1e-6

    def phi(x, p):
        xh = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        th = torch.pi / 4 * torch.tanh(alpha * xh)
        a = xh.abs() ** p if torch.is_tensor(p) else x.abs() ** p
        return torch.cat([a * torch.cos(th), a * torch.sin(th)], -1)

    n = q.norm(dim=-1, keepdim=True)
    pq, pk = phi(q, lam * (tau + torch.tanh(n))), phi(k, lam)
    S, z = pk.transpose(-1, -2) @ v / q.shape[2], pk.mean(2, keepdim=True)
    ref = (pq @ S) / ((pq * z).sum(-1, keepdim=True) + eps)
    torch.testing.assert_close(nala.attention(q, k, v), ref, rtol=1e-10, atol=1e-12)


def test_opcheck():
    q, k, v = (t.detach().float() for t in qkv((2, 3, 40, 16)))
    args = (q, k, v, 0, 3.0, 0.5, 1.0, 1e-6, 1e-6, 3.0)
    res = torch.library.opcheck(torch.ops.nala.attention_forward.default, args)
    assert all(r == "SUCCESS" for r in res.values()), res
    o, S, z, den = torch.ops.nala.attention_forward(*args)
    res = torch.library.opcheck(torch.ops.nala.attention_backward.default, (q, k, v, S, z, den, torch.randn_like(o), *args[3:]))
    assert all(r == "SUCCESS" for r in res.values()), res


def test_bad_arguments_are_clear_errors():
    q, k, v = (t.detach() for t in qkv((1, 2, 5, 8)))
    with pytest.raises(ValueError, match="unknown feature_map 'softmax'"):
        nala.attention(q, k, v, feature_map="softmax")
    with pytest.raises(RuntimeError, match="lambda must be >= 1"):
        nala.attention(q, k, v, lam=0.5)
    with pytest.raises(RuntimeError, match="k has shape"):
        nala.attention(q, k[:, :, :3], v)


def test_compiled_fullgraph_equals_eager():
    """a block around the op, compiled with fullgraph=True (inductor on the CPU), forward and gradients"""
    torch.manual_seed(0)
    block = nala.NaLaAttention(32, 4).float()
    x = torch.randn(2, 16, 32, requires_grad=True)

    def f(m, x):
        return (m(x, 4, 4) ** 2).sum()

    eager = f(block, x)
    ge = torch.autograd.grad(eager, [x, *block.parameters()])
    compiled = torch.compile(f, fullgraph=True)
    c = compiled(block, x)
    gc = torch.autograd.grad(c, [x, *block.parameters()])
    torch.testing.assert_close(c, eager, rtol=1e-5, atol=1e-6)
    for a, b in zip(gc, ge):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_packed_layout_equals_split_heads():
    q4 = torch.randn(2, 16, 4 * 24)
    B, N, D, H = 2, 16, 24, 3
    t = q4.view(B, N, 4, H, D // H)
    ref = nala.attention(*(t[:, :, i].transpose(1, 2).contiguous() for i in range(3))).transpose(1, 2).reshape(B, N, D)
    torch.testing.assert_close(nala.attention_packed(q4, H, parts=4), ref)
    with pytest.raises(ValueError, match="parts must be 3 or 4"):
        nala.attention_packed(q4, H, parts=2)


def perturbed(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for k, p in model.state_dict().items():
            if k != "pos_embed":
                p.copy_(torch.randn_like(p) * (0.02 if p.dim() > 1 else 0.05))
    return model.eval()


@pytest.mark.parametrize("name,rope", [("NaLaDiT-S/2", False), ("DiT-S/4", False), ("NaLaSiT-T/4", False), ("NaLaSiT-T/4", True)])
def test_models_equal_the_cpp_models(tmp, name, rope):
    """the package's DiT (and its NaLaAttention) with random weights, saved as safetensors with the
    config metadata nala writes: `nala forward` on that file gives the same output"""
    model = perturbed(nala.DiT(name, input_size=16, num_classes=10, rope=rope))
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(3, 4, 16, 16, generator=g), torch.randint(0, 10, (3,), generator=g)
    t = torch.rand(3, generator=g) if "SiT" in name else torch.randint(0, 1000, (3,), generator=g).float()
    with torch.no_grad():
        ref = model(x, t, y).numpy()
    cfg = {"name": name, "family": model.family, "size": name.split("-")[1].split("/")[0], "depth": len(model.blocks),
           "hidden": model.pos_embed.shape[2], "heads": model.blocks[0].attn.heads, "patch": model.patch, "input_size": 16,
           "in_channels": 4, "num_classes": 10, "mlp_ratio": 4.0, "class_dropout": 0.1, "learn_sigma": True,
           "attention": "nala" if "NaLa" in name else "softmax",
           "nala": {"lambda": 3.0, "tau": 0.5, "alpha": 1.0, "eps": 1e-6, "eps_norm": 1e-6, "lepe_kernel": 5, "rope": rope}}
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp / "w.safetensors", metadata={"nala_config": json.dumps(cfg)})
    np.savez(tmp / "in.npz", x=x.numpy(), t=t.numpy(), y=y.numpy())
    run("nala", "forward", "--model", name, "--ckpt", tmp / "w.safetensors", "--input", tmp / "in.npz",
        "--output", tmp / "out.npz", "--device", "cpu")
    ours = np.load(tmp / "out.npz")["out"]
    e = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
    print(f"{name}{' (RoPE)' if rope else ''}: package vs nala forward, relative error {e:.2e}")
    assert e < 1e-5
    back = nala.load_checkpoint(tmp / "w.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(back(x, t, y), torch.from_numpy(ref))


def test_load_checkpoint_of_a_run(tmp):
    run("nala", "train", "--preset", "fashion-mnist-tiny", "--steps", "2", "--batch", "8", "--log-every", "1", "--sample-every", "0",
        "--workers", "1", "--device", "cpu", "--out", tmp / "run")
    model = nala.load_checkpoint(tmp / "run")  # the latest checkpoint's EMA weights
    assert model.name == "NaLaSiT-T/4"
    g = torch.Generator().manual_seed(3)
    x, t, y = torch.randn(2, 1, 32, 32, generator=g), torch.rand(2, generator=g), torch.tensor([1, 7])
    np.savez(tmp / "in.npz", x=x.numpy(), t=t.numpy(), y=y.numpy())
    run("nala", "forward", "--ckpt", tmp / "run", "--input", tmp / "in.npz", "--output", tmp / "out.npz", "--device", "cpu")
    with torch.no_grad():
        ours = model(x, t, y).numpy()
    ref = np.load(tmp / "out.npz")["out"]
    assert float(np.abs(ours - ref).max()) <= 1e-5 * float(np.abs(ref).max()) + 1e-7
    with pytest.raises(FileNotFoundError, match="no checkpoints yet"):
        (tmp / "empty" / "checkpoints").mkdir(parents=True)
        nala.load_checkpoint(tmp / "empty")


BUILD_TOOLS = ("scikit_build_core", "scikit_build_core-", "cmake", "cmake-", "ninja", "ninja-")  # what the README's first line brings


def readme_install_lines():
    """The lines of the README's code block that installs the package, as written."""
    text = (SOURCE / "README.md").read_text()
    m = re.search(r"virtual environment that has torch 2\.11\.0.*?```\n(.*?)```", text, re.S)
    assert m, "README.md: no install block after 'a virtual environment that has torch 2.11.0'"
    return [line for line in m.group(1).splitlines() if line.strip()]


def test_pip_install_into_a_fresh_venv(tmp):
    """The README's install lines, run as written (bash, in the repository's root, the new venv's bin
    first on PATH) in a new venv that has torch 2.11.0 and nothing else: it sees the project venv's
    packages through a .pth file (torch's wheels are a few GB) but not the build tools (a folder of
    links leaves out scikit-build-core, cmake and ninja), so a line the README forgets fails here as
    it would for a newcomer. CMAKE_ARGS=-DNALA_CUDA=OFF keeps CI's build to the CPU path."""
    lines = readme_install_lines()
    assert lines[-1].startswith("pip install --no-build-isolation ."), lines
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()
    torch_site = Path(torch.__file__).resolve().parents[1]
    visible = tmp / "torch-only"
    visible.mkdir()
    for entry in torch_site.iterdir():
        if not entry.name.lower().startswith(BUILD_TOOLS):
            (visible / entry.name).symlink_to(entry)
    (Path(site) / "torch_from_project_venv.pth").write_text(f"{visible}\n")
    # run in tmp: from the repository root, its cmake/ folder would be found as a namespace package
    hidden = subprocess.run([str(py), "-c", "import importlib.util as u; print([m for m in ('scikit_build_core', 'cmake', 'ninja') if u.find_spec(m)])"],
                            capture_output=True, text=True, check=True, cwd=str(tmp)).stdout.strip()
    assert hidden == "[]", f"the fresh venv already has build tools: {hidden}"
    env = {k: v for k, v in os.environ.items() if k not in ("NALA_OPS_LIBRARY", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), CMAKE_ARGS="-DNALA_CUDA=OFF")
    for line in lines:
        p = subprocess.run(["bash", "-c", line], cwd=str(SOURCE), capture_output=True, text=True, timeout=1800, env=env)
        assert p.returncode == 0, f"README line `{line}` failed:\n" + p.stdout[-3000:] + p.stderr[-3000:]
    code = ("import torch, nala, os; torch.manual_seed(0); q = torch.randn(1, 2, 9, 8, dtype=torch.float64); "
            "print(os.path.dirname(nala.__file__)); print(repr(nala.attention(q, q.flip(2), q).sum().item()))")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=str(tmp), env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    where, value = out.stdout.split()
    assert where.startswith(str(venv)), where  # the installed package, not the source tree
    torch.manual_seed(0)
    q = torch.randn(1, 2, 9, 8, dtype=torch.float64)
    assert float(value) == nala.attention(q, q.flip(2), q).sum().item()


def test_rope_variant():
    """rope_grid: the 2-D RoPE variant (attention/nala_rope.h) differs from plain NaLa, passes
    gradcheck in float64 and opcheck"""
    q, k, v = qkv((1, 2, 16, 8))
    assert float((nala.attention(q, k, v) - nala.attention(q, k, v, rope_grid=(4, 4))).abs().max()) > 1e-2
    assert torch.autograd.gradcheck(lambda a, b, c: nala.attention(a, b, c, rope_grid=(4, 4)), (q, k, v), eps=1e-6, atol=1e-6, rtol=1e-4)
    args = tuple(t.detach().float() for t in (q, k, v)) + (0, 3.0, 0.5, 1.0, 1e-6, 1e-6, 3.0, 4, 4)
    res = torch.library.opcheck(torch.ops.nala.attention_rope.default, args)
    assert all(r == "SUCCESS" for r in res.values()), res
    with pytest.raises(RuntimeError, match="do not fill a 3x4 grid"):
        nala.attention(q, k, v, rope_grid=(3, 4))


@pytest.mark.parametrize("grid", [(4, 4), (2, 8)])
def test_rope_variant_equals_its_quadratic_form(grid):
    """the RoPE variant against scripts/reference_dit.py's quadratic form (complex-rotated features,
    N x N scores; float64), and the rotation's point: a score depends on the tokens' offset only"""
    sys.path.insert(0, str(SOURCE / "scripts"))
    import reference_dit
    q, k, v = qkv((2, 2, 16, 8))
    ours = nala.attention(q, k, v, rope_grid=grid)
    ref = reference_dit.nala_attention_rope(q, k, v, *grid)
    e = float((ours - ref).norm() / ref.norm())
    print(f"grid {grid}: relative error {e:.2e}")
    assert e < 1e-10
    # one query and one key repeated at every token: the numerator's score of (n, m) is then a
    # function of the offset; equal offsets give equal outputs on a one-hot v
    gh, gw = grid
    n = gh * gw
    q1 = q[:, :, :1].expand(-1, -1, n, -1).contiguous()
    k1 = k[:, :, :1].expand(-1, -1, n, -1).contiguous()
    onehot = torch.eye(n, dtype=torch.float64)[:, :8].expand(2, 2, n, 8).contiguous()   # v[m] = e_m for m < 8
    with torch.no_grad():
        o = nala.attention(q1, k1, onehot, rope_grid=grid)                                  # o[n, m] ∝ score(n, m)
    # (n, m) = (gw + 1, 1) and (gw + 2, 2) share the offset (1 row, 0 columns); (gw + 1, 2) does not
    assert torch.allclose(o[..., gw + 1, 1], o[..., gw + 2, 2], rtol=1e-12, atol=0)
    assert not torch.allclose(o[..., gw + 1, 1], o[..., gw + 1, 2], rtol=1e-6, atol=0)
