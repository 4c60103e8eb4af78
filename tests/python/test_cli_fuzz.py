"""Hostile files never crash a sub-command: truncated and byte-flipped .safetensors, .pt, .npz,
images, config.json and init-noise files fed to forward, sample, eval, train, extract-latents and
convert end with exit code 0 (the damage was harmless) or a clear error naming the file, never a
signal, and leave every other file untouched. Also: guidance on a 1-channel model works with the
default --cfg-channels, and a benchmark whose rows fail exits non-zero."""
import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import torch
from PIL import Image
from safetensors.numpy import save_file

from conftest import BUILD, run
from test_vae import make_vae

ENV = dict(os.environ, OMP_NUM_THREADS="1")


def mutations(data, rng, flips=8):
    """Truncations and byte flips of `data` (bytes)."""
    out = [data[:n] for n in sorted({0, 1, 7, len(data) // 2, len(data) - 1}) if n < len(data)]
    for _ in range(flips):
        b = bytearray(data)
        for i in rng.integers(0, len(b), int(rng.integers(1, 4))):
            b[i] ^= int(rng.integers(1, 256))
        out.append(bytes(b))
    return out


def tree_digest(root, skip):
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and not any(str(p).startswith(str(s)) for s in skip)}


def test_hostile_inputs(tmp):
    rng = np.random.default_rng(7)
    run("nala", "train", "--preset", "fashion-mnist-tiny", "--batch", "16", "--steps", "2", "--sample-every", "0", "--device", "cpu",
        "--out", tmp / "r")
    ckpt = tmp / "r" / "checkpoints" / "0000002"
    good = {
        "weights.safetensors": (ckpt / "ema.safetensors").read_bytes(),
        "config.json": (tmp / "r" / "config.json").read_bytes(),
    }
    from safetensors.numpy import load_file
    sd = {k: torch.from_numpy(v) for k, v in load_file(str(ckpt / "ema.safetensors")).items()}
    torch.save({"ema": sd}, tmp / "w.pt")
    good["weights.pt"] = (tmp / "w.pt").read_bytes()
    np.savez(tmp / "n.npz", noise=rng.standard_normal((2, 1, 32, 32)).astype(np.float32), labels=np.array([1, 2]))
    good["noise.npz"] = (tmp / "n.npz").read_bytes()
    np.savez(tmp / "x.npz", x=rng.standard_normal((2, 1, 32, 32)).astype(np.float32), t=np.array([0.3, 0.6], np.float32),
             y=np.array([1, 2]))
    good["input.npz"] = (tmp / "x.npz").read_bytes()
    np.savez(tmp / "s.npz", arr_0=rng.integers(0, 256, (300, 32, 32, 3), dtype=np.uint8), arr_1=rng.integers(0, 10, 300))
    good["sample.npz"] = (tmp / "s.npz").read_bytes()
    (tmp / "imgs" / "a").mkdir(parents=True)
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp / "imgs" / "a" / "0.png")
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp / "imgs" / "a" / "1.png")
    good["image.png"] = (tmp / "imgs" / "a" / "1.png").read_bytes()
    _, vae = make_vae(tmp)
    good["vae.safetensors"] = vae.read_bytes()

    bad = tmp / "bad"
    bad.mkdir()
    # (file kind, where the mutated file goes, command); outputs go under tmp/out (not compared)
    cases = [
        ("weights.safetensors", bad / "w.safetensors", lambda f: ["forward", "--model", "NaLaSiT-T/4", "--ckpt", f, "--input", tmp / "x.npz",
                                                                "--output", tmp / "out" / "f.npz", "--device", "cpu"]),
        ("input.npz", bad / "x.npz", lambda f: ["forward", "--ckpt", ckpt, "--input", f, "--output", tmp / "out" / "f.npz", "--device", "cpu"]),
        ("weights.pt", bad / "w.pt", lambda f: ["sample", "--model", "NaLaSiT-T/4", "--ckpt", f, "--steps", "2", "--cfg-scale", "2",
                                                "--init-noise", tmp / "n.npz", "--out", tmp / "out" / "g.png", "--device", "cpu"]),
        ("noise.npz", bad / "n.npz", lambda f: ["sample", "--ckpt", ckpt, "--steps", "2", "--init-noise", f, "--out", tmp / "out" / "g.png",
                                               "--device", "cpu"]),
        # (the test split's features cached after the first readable sample: it costs most of an evaluation)
        ("sample.npz", bad / "s.npz", lambda f: ["eval", "--fmnist", "--sample", f, "--classifier", tmp / "cls.safetensors", "--device", "cpu",
                                               "--ref-cache", tmp / "refcache" / "ref.safetensors"]),
        ("config.json", tmp / "out" / "run" / "config.json", lambda f: ["train", "--preset", "fashion-mnist-tiny", "--batch", "16", "--steps", "1",
                                                                      "--sample-every", "0", "--device", "cpu", "--out", tmp / "out" / "run"]),
        ("image.png", tmp / "out" / "imgs" / "a" / "1.png", lambda f: ["extract-latents", "--data", tmp / "out" / "imgs", "--vae", vae,
                                                                     "--image-size", "32", "--out", tmp / "out" / "lat", "--device", "cpu"]),
        ("vae.safetensors", bad / "v.safetensors", lambda f: ["extract-latents", "--data", tmp / "imgs", "--vae", f, "--image-size", "32",
                                                             "--out", tmp / "out" / "lat2", "--device", "cpu"]),
        ("weights.pt", bad / "c.pt", lambda f: ["convert", f, tmp / "out" / "c.safetensors"]),
    ]
    shapes = {"conv1.weight": (16, 1, 3, 3), "conv1.bias": (16,), "conv2.weight": (32, 16, 3, 3), "conv2.bias": (32,),
              "conv3.weight": (64, 32, 3, 3), "conv3.bias": (64,), "conv4.weight": (64, 64, 3, 3), "conv4.bias": (64,),
              "fc1.weight": (256, 1024), "fc1.bias": (256,), "fc2.weight": (10, 256), "fc2.bias": (10,)}
    save_file({k: (rng.standard_normal(v) * 0.1).astype(np.float32) for k, v in shapes.items()}, str(tmp / "cls.safetensors"))
    (tmp / "out").mkdir()
    (tmp / "refcache").mkdir()
    before = tree_digest(tmp, [tmp / "out", bad, tmp / "refcache"])
    tried = crashed = 0
    failures = []
    for kind, path, cmd in cases:
        for data in mutations(good[kind], rng):
            if (tmp / "out").exists():
                shutil.rmtree(tmp / "out")
            (tmp / "out").mkdir()
            if kind == "config.json":
                shutil.copytree(tmp / "r", tmp / "out" / "run")
            if kind == "image.png":
                shutil.copytree(tmp / "imgs", tmp / "out" / "imgs")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            p = subprocess.run([str(BUILD / "nala"), *map(str, cmd(path))], capture_output=True, text=True, errors="replace", env=ENV, timeout=300)
            tried += 1
            if p.returncode < 0:
                crashed += 1
                failures.append(f"{kind} ({len(data)} bytes): killed by signal {-p.returncode}: {p.stderr[-500:]}")
            elif p.returncode != 0:
                names_it = path.name in p.stderr or str(path.parent) in p.stderr
                if not ("error" in p.stderr and names_it):
                    failures.append(f"{kind} ({len(data)} bytes): exit {p.returncode} without naming {path}: {p.stderr[-400:]}")
    print(f"{tried} hostile inputs tried, {crashed} crashes")
    assert tree_digest(tmp, [tmp / "out", bad, tmp / "refcache"]) == before, "a hostile input changed a file it did not own"
    assert not failures, "\n".join(failures[:10])


def test_guidance_on_one_channel_model_and_failing_bench_rows(tmp):
    run("nala", "train", "--preset", "fashion-mnist-tiny", "--batch", "16", "--steps", "2", "--sample-every", "0", "--device", "cpu",
        "--out", tmp / "r")
    run("nala", "sample", "--ckpt", tmp / "r", "--steps", "3", "--cfg-scale", "2", "--classes", "1,2", "--out", tmp / "g.png", "--device", "cpu")
    p = run("nala", "bench", "train", "--models", "DiT-Q/2", "--batch", "2", "--image-size", "64", "--device", "cpu", check=False)
    assert p.returncode != 0 and "failed" in p.stdout


def test_bench_tail_rows_agree_with_the_composition():
    """`nala bench tail` on the CPU: both rows print, and the fused operation's output (its ATen
    form here) equals the plain composition's within float32 rounding (the table's last column)."""
    p = run("nala", "bench", "tail", "--device", "cpu", "--dtype", "fp32", "--heads", "2", "--head-dim", "8", "--shapes", "2x5", "--reps", "1")
    rows = [line.split("|")[1:-1] for line in p.stdout.splitlines() if line.startswith("| composition") or line.startswith("| fused")]
    assert [r[0].strip() for r in rows] == ["composition", "fused"], p.stdout
    assert float(rows[1][-1]) < 1e-5, p.stdout
    bad = run("nala", "bench", "tail", "--device", "cpu", "--lepe", "4", check=False)
    assert bad.returncode != 0 and "--lepe must be 0 or odd, got 4" in bad.stderr, bad.stderr
