"""The C++ DiT / SiT / NaLaDiT / NaLaSiT (through `nala forward`) against an independent PyTorch
implementation built on timm's layers (scripts/reference_dit.py), with non-trivial weights: every
tensor perturbed, the zero-initialised ones included. fp32, tolerance 1e-5 relative."""
import json
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from conftest import SOURCE, run

sys.path.insert(0, str(SOURCE / "scripts"))
import reference_dit  # noqa: E402


def make_model(name, **kw):
    torch.manual_seed(0)
    m = reference_dit.DiT(name, **kw).eval()
    with torch.no_grad():
        for k, p in m.state_dict().items():
            if k != "pos_embed":
                p.copy_(torch.randn_like(p) * (0.02 if p.dim() > 1 else 0.05))
    return m


def nala_config(name, kw):
    depth, hidden, heads = reference_dit.SIZES[name.split("-")[1].split("/")[0]]
    return {"name": name, "family": "SiT" if "SiT" in name else "DiT", "size": "S", "depth": depth, "hidden": hidden,
            "heads": heads, "patch": int(name.split("/")[1]), "input_size": kw["input_size"], "in_channels": 4,
            "num_classes": kw["num_classes"], "mlp_ratio": 4.0, "class_dropout": 0.1, "learn_sigma": kw.get("learn_sigma", True),
            "attention": "nala", "nala": {"lambda": 3.0, "tau": 0.5, "alpha": kw.get("alpha", 1.0), "eps": 1e-6,
                                         "eps_norm": 1e-6, "lepe_kernel": 5, "rope": False}}


def inputs(m, n, size, family, classes):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, m.in_channels, size, size, generator=g)
    t = torch.randint(0, 1000, (n,), generator=g).float() if family == "DiT" else torch.rand(n, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, t, y


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("name,kw", [
    ("DiT-S/2", dict(input_size=8, num_classes=10)),
    ("SiT-S/4", dict(input_size=16, num_classes=10)),
    ("DiT-B/2", dict(input_size=4, num_classes=7, learn_sigma=False)),
    ("NaLaDiT-S/2", dict(input_size=8, num_classes=10)),
])
@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_forward_matches_reference(tmp, name, kw, fmt):
    m = make_model(name, **kw)
    family = "SiT" if "SiT" in name else "DiT"
    x, t, y = inputs(m, 4, kw["input_size"], family, kw["num_classes"])
    with torch.no_grad():
        ref = m(x, t, y).numpy()
    ckpt = tmp / f"w.{fmt}"
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    alpha = kw.get("alpha", 1.0)
    if fmt == "pt":
        # a training checkpoint: "ema" is taken (the raw weights differ, so taking them would fail)
        torch.save({"model": {k: v + 0.5 for k, v in sd.items()}, "ema": sd, "opt": {"note": 1}}, ckpt)
    elif alpha != 1.0:
        # α is not visible in tensor shapes: nala's own checkpoints carry the config as metadata
        save_file(sd, ckpt, metadata={"nala_config": json.dumps(nala_config(name, kw))})
    else:
        save_file(sd, ckpt)
    np.savez(tmp / "in.npz", x=x.numpy(), t=t.numpy(), y=y.numpy())
    args = ["forward", "--model", name, "--ckpt", ckpt, "--input", tmp / "in.npz", "--output", tmp / "out.npz", "--device", "cpu"]
    run("nala", *args)
    ours = np.load(tmp / "out.npz")["out"]
    assert ours.shape == ref.shape
    e = rel(ours, ref)
    print(f"{name} ({fmt}): relative error {e:.2e}")
    assert e < 1e-5


def test_nala_config_in_metadata_sets_alpha(tmp):
    test_forward_matches_reference(tmp, "NaLaSiT-S/2", dict(input_size=8, num_classes=10, alpha=20.0), "safetensors")


@pytest.mark.parametrize("channels", ["3", "all"])
@pytest.mark.parametrize("name", ["DiT-S/2", "SiT-S/2"])
def test_forward_with_cfg_both_modes(tmp, channels, name):
    m = make_model(name, input_size=8, num_classes=10)
    family = "SiT" if "SiT" in name else "DiT"
    x, t, y = inputs(m, 4, 8, family, 10)
    y[2:] = 10  # second half: the null class
    with torch.no_grad():
        ref = m.forward_with_cfg(x, t, y, 4.0, 3 if channels == "3" else 4).numpy()
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, tmp / "w.safetensors")
    np.savez(tmp / "in.npz", x=x.numpy(), t=t.numpy(), y=y.numpy())
    run("nala", "forward", "--model", name, "--ckpt", tmp / "w.safetensors", "--input", tmp / "in.npz",
        "--output", tmp / "out.npz", "--device", "cpu", "--cfg-scale", 4.0, "--cfg-channels", channels)
    ours = np.load(tmp / "out.npz")["out"]
    e = rel(ours, ref)
    print(f"{name} cfg on {channels} channels: relative error {e:.2e}")
    assert e < 1e-5
    # the two halves are equal in the guided channels
    g = 3 if channels == "3" else 4
    np.testing.assert_array_equal(ours[:2, :g], ours[2:, :g])


def test_bad_inputs_give_clear_errors(tmp):
    m = make_model("DiT-S/2", input_size=8, num_classes=10)
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, tmp / "w.safetensors")
    x, t, y = inputs(m, 2, 8, "DiT", 10)
    np.savez(tmp / "in.npz", x=x.numpy(), t=t.numpy(), y=y.numpy())
    base = ["forward", "--ckpt", tmp / "w.safetensors", "--input", tmp / "in.npz", "--output", tmp / "o.npz", "--device", "cpu"]
    p = run("nala", *base, "--model", "DiT-Q/2", check=False)
    assert p.returncode != 0 and "unknown model 'DiT-Q/2'" in p.stderr
    p = run("nala", *base, "--model", "DiT-B/2", check=False)
    assert p.returncode != 0 and "x_embedder.proj.weight" in p.stderr
    p = run("nala", *base, "--model", "DiT-S/2", "--input-size", "16", check=False)
    assert p.returncode != 0 and "contradicts the checkpoint" in p.stderr and "--input-size 16" in p.stderr
    np.savez(tmp / "bad.npz", x=np.zeros((2, 3, 8, 8), np.float32), t=t.numpy(), y=y.numpy())
    p = run("nala", "forward", "--model", "DiT-S/2", "--ckpt", tmp / "w.safetensors", "--input", tmp / "bad.npz",
            "--output", tmp / "o.npz", "--device", "cpu", check=False)
    assert p.returncode != 0 and "x must be (N, 4, H, W)" in p.stderr
    (tmp / "corrupt.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    p = run("nala", "forward", "--model", "DiT-S/2", "--ckpt", tmp / "corrupt.safetensors", "--input", tmp / "in.npz",
            "--output", tmp / "o.npz", "--device", "cpu", check=False)
    assert p.returncode != 0 and "corrupt.safetensors" in p.stderr
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    del sd["blocks.3.mlp.fc1.bias"]
    sd["extra.weight"] = torch.zeros(3)
    save_file(sd, tmp / "partial.safetensors")
    p = run("nala", "forward", "--model", "DiT-S/2", "--ckpt", tmp / "partial.safetensors", "--input", tmp / "in.npz",
            "--output", tmp / "o.npz", "--device", "cpu", check=False)
    assert p.returncode != 0 and "missing keys (1): blocks.3.mlp.fc1.bias" in p.stderr and "extra.weight" in p.stderr


def test_convert_pt_to_safetensors(tmp):
    m = make_model("DiT-S/4", input_size=8, num_classes=10)
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    torch.save(sd, tmp / "w.pt")
    run("nala", "convert", tmp / "w.pt", tmp / "w.safetensors")
    from safetensors.torch import load_file
    back = load_file(tmp / "w.safetensors")
    assert list(back) == list(sd) or sorted(back) == sorted(sd)
    for k in sd:
        assert torch.equal(back[k], sd[k]), k
