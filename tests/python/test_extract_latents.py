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


def write_shard(path, n, h, meta):
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(0)
    save_file({"latents": torch.randn(n, 4, h, h, generator=g), "labels": torch.arange(n) % 2}, str(path), metadata=meta)


def test_a_latent_folder_sets_the_image_size(tmp):
    """A latent folder fixes the image size: taken from its shards where no flag gives one (config.json
    recorded the default 32 for 64-px latents), a flag that disagrees with what the shards record is
    refused with both values, and a run that recorded the old default resumes, recording the size."""
    (tmp / "lat").mkdir()
    write_shard(tmp / "lat" / "latents_00000.safetensors", 8, 8, {"image_size": "64", "num_classes": "2"})
    base = ["nala", "train", "--preset", "fashion-mnist-tiny", "--model", "DiT-T/4", "--data", tmp / "lat", "--batch", "4",
            "--device", "cpu", "--sample-every", "0", "--workers", "1"]
    run(*base, "--steps", "1", "--out", tmp / "run")
    cfg = json.loads((tmp / "run" / "config.json").read_text())
    assert cfg["image_size"] == 64
    assert json.loads((tmp / "run" / "model.json").read_text())["input_size"] == 8
    p = run(*base, "--steps", "1", "--out", tmp / "run2", "--image-size", "32", check=False)
    assert p.returncode != 0 and "64-px" in p.stderr and "--image-size is 32" in p.stderr and str(tmp / "lat") in p.stderr, p.stderr
    assert not (tmp / "run2" / "config.json").exists()
    # a run that recorded the old default (32) resumes with the latents' size, and records it
    cfg["image_size"] = 32
    (tmp / "run" / "config.json").write_text(json.dumps(cfg))
    p = run(*base, "--steps", "2", "--out", tmp / "run")
    assert "recorded image_size 32" in p.stderr, p.stderr
    assert json.loads((tmp / "run" / "config.json").read_text())["image_size"] == 64
    assert (tmp / "run" / "checkpoints" / "0000002").is_dir()
    # no record: 8·h by default, a flag taken as given; a second shard of another size is named
    (tmp / "lat2").mkdir()
    write_shard(tmp / "lat2" / "latents_00000.safetensors", 8, 8, {})
    base2 = [*base[:7], tmp / "lat2", *base[8:], "--steps", "1"]
    run(*base2, "--out", tmp / "run3")
    assert json.loads((tmp / "run3" / "config.json").read_text())["image_size"] == 64
    run(*base2, "--out", tmp / "run4", "--image-size", "32")  # (latents of a 4x VAE, say)
    assert json.loads((tmp / "run4" / "config.json").read_text())["image_size"] == 32
    write_shard(tmp / "lat2" / "latents_00001.safetensors", 8, 4, {})
    p = run(*base2, "--out", tmp / "run5", check=False)
    assert p.returncode != 0 and "latents_00001.safetensors" in p.stderr and "one size" in p.stderr, p.stderr
    # metadata that is no whole number is named with its shard (num_classes was LibTorch's "stoll")
    (tmp / "lat3").mkdir()
    write_shard(tmp / "lat3" / "latents_00000.safetensors", 8, 8, {"num_classes": "ten"})
    p = run(*base[:7], tmp / "lat3", *base[8:], "--steps", "1", "--out", tmp / "run6", check=False)
    assert p.returncode != 0 and "latents_00000.safetensors: metadata num_classes" in p.stderr and "'ten'" in p.stderr, p.stderr
