"""The C++ AutoencoderKL against diffusers' AutoencoderKL with random (non-trivial) weights, fp32:
encoder moments and decoder output to 1e-4 relative; the deprecated attention key names; tiled
decoding against untiled with the seam error measured; bad weight files give clear errors."""
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from conftest import SOURCE, run

sys.path.insert(0, str(SOURCE / "scripts"))
import make_random_vae  # noqa: E402


def make_vae(tmp, old_names=False):
    return make_random_vae.make_vae(tmp / ("vae_old" if old_names else "vae"), old_names)


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("old_names", [False, True])
def test_encode_decode_match_diffusers(tmp, old_names):
    m, path = make_vae(tmp, old_names)
    g = torch.Generator().manual_seed(1)
    images = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    latents = torch.randn(2, 4, 8, 8, generator=g)
    np.savez(tmp / "in.npz", images=images.numpy(), latents=latents.numpy())
    run("nala_testtool", "vae", path, tmp / "in.npz", tmp / "out.npz")
    ours = np.load(tmp / "out.npz")
    with torch.no_grad():
        dist = m.encode(images).latent_dist
        dec = m.decode(latents / 0.18215).sample
    for name, a, b in (("mean", ours["mean"], dist.mean.numpy()), ("logvar", ours["logvar"], dist.logvar.numpy()),
                       ("scaled latents", ours["latents_scaled"], dist.mean.numpy() * 0.18215), ("decoded", ours["decoded"], dec.numpy())):
        e = rel(a, b)
        print(f"{name}: relative error {e:.2e}")
        assert e < 1e-4, name


def test_tiled_encode_decode_match_diffusers_tiling(tmp):
    m, path = make_vae(tmp)
    g = torch.Generator().manual_seed(2)
    lat = torch.nn.functional.interpolate(torch.randn(1, 4, 6, 6, generator=g), size=(24, 24), mode="bilinear", align_corners=False)
    images = torch.nn.functional.interpolate(torch.rand(1, 3, 12, 12, generator=g) * 2 - 1, size=(160, 160), mode="bilinear")
    np.savez(tmp / "in.npz", images=images.numpy(), latents=lat.numpy())
    run("nala_testtool", "vae", path, tmp / "in.npz", tmp / "out.npz")
    o = np.load(tmp / "out.npz")
    # the oracle: diffusers' own tiling with the same tile size (64 px) and overlap (1/4)
    m.enable_tiling()
    m.tile_sample_min_size, m.tile_latent_min_size, m.tile_overlap_factor = 64, 16, 0.25
    with torch.no_grad():
        ref_dec = m.decode(lat / 0.18215).sample.numpy()
        ref_enc = m.encode(images).latent_dist.mean.numpy() * 0.18215
    e_dec, e_enc = rel(o["decoded_tiled"], ref_dec), rel(o["latents_tiled"], ref_enc)
    seam = np.abs(o["decoded_tiled"] - o["decoded"])
    print(f"tiled decode vs diffusers tiled: {e_dec:.2e}; tiled encode vs diffusers tiled: {e_enc:.2e}; "
          f"tiled vs untiled decode with random weights: mean |diff| {seam.mean():.3f} (output mean |x| {np.abs(o['decoded']).mean():.3f})")
    assert e_dec < 1e-4 and e_enc < 1e-4


def test_bad_weight_files(tmp):
    _, path = make_vae(tmp)
    from safetensors.torch import load_file
    sd = load_file(path)
    del sd["decoder.conv_out.bias"]
    d = tmp / "broken"
    d.mkdir()
    save_file(sd, d / "w.safetensors")
    (d / "config.json").write_text((path.parent / "config.json").read_text())
    np.savez(tmp / "in.npz", latents=np.zeros((1, 4, 4, 4), np.float32) + 0.1)
    p = run("nala_testtool", "vae", d / "w.safetensors", tmp / "in.npz", tmp / "o.npz", check=False)
    assert p.returncode != 0 and "decoder.conv_out.bias" in p.stderr and "w.safetensors" in p.stderr
    save_file({"x": torch.zeros(2)}, d / "junk.safetensors")
    p = run("nala_testtool", "vae", d / "junk.safetensors", tmp / "in.npz", tmp / "o.npz", check=False)
    assert p.returncode != 0 and "not an AutoencoderKL file" in p.stderr
