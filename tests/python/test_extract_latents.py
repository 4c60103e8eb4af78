"""`nala extract-latents` with a random-weight VAE (diffusers AutoencoderKL as the oracle): the
latents equal diffusers' encoding of the ADM centre crop, flipped copies are stored, corrupt images
are skipped and counted, and an interrupted extraction resumes to byte-identical shards."""
import hashlib
import json

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file

from conftest import run
from test_io import adm_center_crop as adm_crop
from test_vae import make_vae


def make_folder(root, rng):
    for c in ("cat", "ant"):
        (root / c).mkdir(parents=True)
        for i in range(5):
            h, w = rng.integers(40, 90, 2)
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / c / f"{i}.png")
    (root / "ant" / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")


def digest(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.glob("latents_*.safetensors"))}


def test_extract_latents(tmp):
    rng = np.random.default_rng(0)
    make_folder(tmp / "imgs", rng)
    m, vae = make_vae(tmp)
    args = ["extract-latents", "--data", tmp / "imgs", "--vae", vae, "--image-size", "32", "--out", tmp / "lat", "--shard-size", "4",
            "--batch-size", "3", "--flip", "both", "--latent", "mean", "--device", "cpu"]
    p = run("nala", *args)
    assert "1 unreadable" in p.stdout and "broken.jpg" in p.stderr
    shards = sorted((tmp / "lat").glob("latents_*.safetensors"))
    assert len(shards) == 3  # 11 files in shards of 4
    allx = {}
    for s in shards:
        t = load_file(s)
        for lat, lab, idx in zip(t["latents"], t["labels"], t["indices"]):
            allx[int(idx)] = (lat, int(lab))
    assert len(allx) == 20  # 10 readable images, each with its flipped copy
    # sorted class folders: ant = 0 (6 files, one broken), cat = 1
    files = sorted((tmp / "imgs" / "ant").iterdir()) + sorted((tmp / "imgs" / "cat").iterdir())
    for idx, f in enumerate(files):
        if f.name == "broken.jpg":
            assert idx not in allx
            continue
        crop = adm_crop(Image.open(f).convert("RGB"), 32)
        x = torch.from_numpy(crop).permute(2, 0, 1)[None].float() / 127.5 - 1
        with torch.no_grad():
            want = m.encode(x).latent_dist.mean * 0.18215
            want_flip = m.encode(x.flip(3)).latent_dist.mean * 0.18215
        got, lab = allx[idx]
        assert lab == (0 if f.parent.name == "ant" else 1)
        assert torch.allclose(got, want[0], rtol=1e-4, atol=1e-5), f
        assert torch.allclose(allx[-1 - idx][0], want_flip[0], rtol=1e-4, atol=1e-5)
    # an interrupted extraction: the last shard missing and a stale temporary file left behind
    first = digest(tmp / "lat")
    shards[-1].unlink()
    (tmp / "lat" / "latents_00002.safetensors.tmp.999").write_bytes(b"partial")
    p = run("nala", *args)
    assert "2 shard(s) already done" in p.stdout
    assert digest(tmp / "lat") == first
    # and training reads the shards
    run("nala", "train", "--preset", "fashion-mnist-tiny", "--model", "DiT-T/4", "--data", tmp / "lat", "--steps", "2", "--batch", "4",
        "--out", tmp / "run", "--device", "cpu", "--sample-every", "0", "--workers", "1")


def test_train_on_an_image_folder_with_online_vae(tmp):
    rng = np.random.default_rng(1)
    make_folder(tmp / "imgs", rng)
    _, vae = make_vae(tmp)
    p = run("nala", "train", "--preset", "fashion-mnist-tiny", "--model", "DiT-T/2", "--data", tmp / "imgs", "--vae", vae,
            "--image-size", "32", "--steps", "3", "--batch", "4", "--log-every", "1", "--out", tmp / "run", "--device", "cpu",
            "--sample-every", "3", "--workers", "1")
    assert "1 unreadable" not in p.stdout  # the corrupt file is reported on stderr, once
    assert p.stderr.count("broken.jpg") <= 1
    model = json.loads((tmp / "run" / "model.json").read_text())
    assert model["in_channels"] == 4 and model["input_size"] == 8  # the test VAE downsamples by 4: 32 px -> 8x8 latents
