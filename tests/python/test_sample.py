"""`nala sample` end to end with a tiny model trained for a few steps (CPU): grid size, the FID
.npz as numpy reads it, resume equals an uninterrupted run, deterministic samplers reproduce from
given noise, saved latents, and clear errors for bad input."""
import numpy as np
import pytest
from PIL import Image

from conftest import run


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    run("nala", "train", "--preset", "fashion-mnist-tiny", "--model", "NaLaDiT-T/4", "--batch", "8", "--steps", "2", "--ckpt-every", "2",
        "--sample-every", "0", "--workers", "1", "--device", "cpu", "--out", d / "run")
    return d / "run" / "checkpoints" / "0000002"


def test_grid_one_row_per_class(tmp, ckpt):
    run("nala", "sample", "--ckpt", ckpt, "--sampler", "ddim", "--steps", "5", "--device", "cpu", "--out", tmp / "g.png",
        "--save-latents", tmp / "z.npz")
    img = np.asarray(Image.open(tmp / "g.png"))
    # 10 classes x 8 columns of 32 px images with 2 px padding
    assert img.shape == (10 * 34 + 2, 8 * 34 + 2, 3)
    z = np.load(tmp / "z.npz")
    np.testing.assert_array_equal(z["labels"], np.repeat(np.arange(10), 8))   # row r: class r
    # tile (r, c) is sample r·8 + c ([-1, 1] to 0..255; pixel-space model, grey in every channel)
    for i in (0, 7, 8, 45, 79):
        r, c = divmod(i, 8)
        tile = img[2 + 34 * r:2 + 34 * r + 32, 2 + 34 * c:2 + 34 * c + 32].astype(int)
        want = np.clip(np.round((z["latents"][i, 0] + 1) * 127.5), 0, 255)
        assert np.abs(tile - want[..., None]).max() <= 1, i


def test_fid_batch_and_resume(tmp, ckpt):
    args = ["sample", "--ckpt", ckpt, "--sampler", "ddpm", "--steps", "4", "--device", "cpu", "--num-samples", "10", "--batch-size", "4"]
    run("nala", *args, "--npz", tmp / "full.npz")
    with np.load(tmp / "full.npz") as z:
        assert z["arr_0"].dtype == np.uint8 and z["arr_0"].shape == (10, 32, 32, 3)
        assert z["arr_1"].dtype == np.int64 and z["arr_1"].shape == (10,) and z["arr_1"].max() < 10
        full = z["arr_0"].copy(), z["arr_1"].copy()
    # a finished batch is neither sampled again nor replaced, with the same or other settings
    before = (tmp / "full.npz").read_bytes()
    for extra in ([], ["--seed", "7"]):
        p = run("nala", *args, *extra, "--npz", tmp / "full.npz", check=False)
        assert p.returncode != 0 and "full.npz' exists" in p.stderr and "not sampled again" in p.stderr, p.stderr
    assert (tmp / "full.npz").read_bytes() == before and not (tmp / "full.npz.parts").exists()
    # finished parts without a manifest (an older nala, or files put there by hand): their settings
    # are unknown, so the resume is refused (an interrupted run resumes: tests/python/test_sigkill.py)
    parts = tmp / "resumed.npz.parts"
    parts.mkdir()
    run("nala", *args, "--npz", tmp / "first.npz", "--num-samples", "4")  # the same batch 0 of the same seed
    with np.load(tmp / "first.npz") as z:
        np.savez(parts / "batch_0.npz", arr_0=z["arr_0"], arr_1=z["arr_1"])
    p = run("nala", *args, "--npz", tmp / "resumed.npz", check=False)
    assert p.returncode != 0 and "manifest.json" in p.stderr and not (tmp / "resumed.npz").exists()
    for f in parts.iterdir():
        f.unlink()
    parts.rmdir()
    run("nala", *args, "--npz", tmp / "resumed.npz")
    with np.load(tmp / "resumed.npz") as z:
        np.testing.assert_array_equal(z["arr_0"], full[0])
        np.testing.assert_array_equal(z["arr_1"], full[1])
    assert not parts.exists()


@pytest.mark.parametrize("sampler", ["ddim", "dpm++"])
def test_deterministic_from_init_noise(tmp, ckpt, sampler):
    rng = np.random.default_rng(0)
    np.savez(tmp / "noise.npz", noise=rng.standard_normal((3, 1, 32, 32)).astype(np.float32), labels=np.array([1, 5, 9]))
    outs = []
    for i in range(2):
        run("nala", "sample", "--ckpt", ckpt, "--sampler", sampler, "--steps", "6", "--device", "cpu", "--init-noise", tmp / "noise.npz",
            "--save-latents", tmp / f"z{i}.npz", "--seed", str(i), "--out", tmp / f"g{i}.png")
        outs.append(np.load(tmp / f"z{i}.npz")["latents"])
    assert outs[0].shape == (3, 1, 32, 32)
    np.testing.assert_array_equal(outs[0], outs[1])  # a different seed changes nothing for a deterministic sampler


def test_fp8_linear_layers(tmp, ckpt):
    """--dtype fp8 (on the CPU: the exact emulation of the FP8 GEMMs, ops/linear_fp8.h) samples the
    same noise a little differently from fp32 and says how many layers it switched (an FID batch
    started in fp32 is not resumed in fp8: tests/python/test_sigkill.py)."""
    rng = np.random.default_rng(1)
    np.savez(tmp / "noise.npz", noise=rng.standard_normal((4, 1, 32, 32)).astype(np.float32), labels=np.array([0, 3, 6, 9]))
    z = {}
    for dt in ("fp32", "fp8"):
        p = run("nala", "sample", "--ckpt", ckpt, "--sampler", "ddim", "--steps", "4", "--device", "cpu", "--dtype", dt,
                "--init-noise", tmp / "noise.npz", "--save-latents", tmp / f"z_{dt}.npz", "--out", tmp / f"g_{dt}.png")
        z[dt] = np.load(tmp / f"z_{dt}.npz")["latents"].astype(np.float64)
        if dt == "fp8":
            # NaLaDiT-T/4: 4 blocks x (qkvg, proj, fc1, fc2) and the head (4·4·2 = 32 outputs)
            assert "17 linear layers in fp8" in p.stderr, p.stderr
    d = np.linalg.norm(z["fp8"] - z["fp32"]) / np.linalg.norm(z["fp32"])
    assert 1e-6 < d < 0.05, d


def test_bad_inputs(tmp, ckpt):
    p = run("nala", "sample", "--ckpt", tmp / "missing", "--device", "cpu", check=False)
    assert p.returncode != 0 and "missing" in p.stderr
    p = run("nala", "sample", "--model", "DiT-Q/2", "--ckpt", ckpt / "ema.safetensors", "--device", "cpu", check=False)
    assert p.returncode != 0 and "holds a NaLaDiT-T/4 but --model says DiT-Q/2" in p.stderr
    p = run("nala", "sample", "--ckpt", ckpt, "--image-size", "64", "--device", "cpu", check=False)
    assert p.returncode != 0 and "--image-size 64 does not match" in p.stderr
    (tmp / "bad.safetensors").write_bytes(b"\x00" * 3)
    p = run("nala", "sample", "--model", "DiT-S/2", "--ckpt", tmp / "bad.safetensors", "--device", "cpu", check=False)
    assert p.returncode != 0 and "bad.safetensors" in p.stderr
    p = run("nala", "sample", "--ckpt", ckpt, "--sampler", "ode-heun", "--device", "cpu", check=False)
    assert p.returncode != 0 and "needs a flow-matching model" in p.stderr
    p = run("nala", "sample", "--ckpt", ckpt, "--classes", "3,12", "--device", "cpu", check=False)
    assert p.returncode != 0 and "label 12 outside 0..9" in p.stderr
    # output and selection arguments are refused before the model is loaded and sampled
    for flags, needle in [(["--num-samples", "-3", "--npz", tmp / "n.npz"], "--num-samples must be positive, got -3"),
                          (["--npz", tmp / "n.npz"], "--npz needs --num-samples"),
                          (["--out", tmp / "no" / "such" / "g.png"], f"the folder '{tmp / 'no' / 'such'}' does not exist"),
                          (["--weights", "emma"], "--weights must be ema or model, got 'emma'")]:
        p = run("nala", "sample", "--ckpt", ckpt, "--steps", "2", "--device", "cpu", *flags, check=False)
        assert p.returncode != 0 and needle in p.stderr and "sample [" not in p.stderr, p.stderr
    assert not (tmp / "n.npz").exists() and not (tmp / "no").exists()
    p = run("nala", "sample", "--model", "DiT-S/2", "--device", "cpu", check=False)
    assert p.returncode == 2 and "nala sample needs --ckpt" in p.stderr


def test_weights_choose_the_checkpoint_file(tmp, ckpt):
    # a nala checkpoint folder holds model.safetensors and ema.safetensors (different after training):
    # --weights picks one, exactly as naming the file does
    def latents(src, *flags):
        out = tmp / f"z{len(list(tmp.glob('z*.npz')))}.npz"
        run("nala", "sample", "--ckpt", src, "--sampler", "ddim", "--steps", "3", "--classes", "1,2", "--seed", "5", "--device", "cpu",
            "--out", tmp / "g.png", "--save-latents", out, *flags)
        return np.load(out)["latents"]
    ema, model = latents(ckpt), latents(ckpt, "--weights", "model")
    np.testing.assert_array_equal(ema, latents(ckpt / "ema.safetensors"))
    np.testing.assert_array_equal(model, latents(ckpt / "model.safetensors"))
    assert not np.array_equal(ema, model)
