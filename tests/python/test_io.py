"""File formats against independent writers and readers: numpy (savez, savez_compressed, .npy
versions), the safetensors package, and Pillow (decode, resize, the ADM centre crop)."""
import os
import io as pyio
import zipfile

import numpy as np
import pytest
from PIL import Image

from conftest import run


def arrays(rng):
    return {
        "u8": rng.integers(0, 256, (4, 5, 6, 3), dtype=np.uint8),
        "f32": rng.standard_normal((3, 7)).astype(np.float32),
        "f64": rng.standard_normal(11),
        "i64": rng.integers(-(2**40), 2**40, (5,), dtype=np.int64),
        "i32": rng.integers(-1000, 1000, (2, 3), dtype=np.int32),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


@pytest.mark.parametrize("writer", ["savez", "savez_compressed"])
def test_npz_written_by_numpy_reads_back_exactly(tmp, writer):
    rng = np.random.default_rng(0)
    a = arrays(rng)
    src, dst = tmp / "in.npz", tmp / "out.npz"
    getattr(np, writer)(src, **a)
    for compress in ("", "compress"):
        run("nala_testtool", "npz-copy", src, dst, compress)
        with np.load(dst) as back:
            assert sorted(back.files) == sorted(a)
            for k, v in a.items():
                assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
                np.testing.assert_array_equal(back[k], v)


def test_npz_streamed_copy_and_npy_version_2(tmp):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (37, 9, 9, 3), dtype=np.uint8)
    # a version-2.0 .npy member inside a zip, written by numpy's format module
    src = tmp / "v2.npz"
    with zipfile.ZipFile(src, "w", compression=zipfile.ZIP_DEFLATED) as z:
        buf = pyio.BytesIO()
        np.lib.format.write_array(buf, x, version=(2, 0))
        z.writestr("arr_0.npy", buf.getvalue())
    run("nala_testtool", "npz-stream-copy", src, "arr_0", 5, tmp / "out.npz")
    with np.load(tmp / "out.npz") as back:
        np.testing.assert_array_equal(back["arr_0"], x)


def test_npz_errors_name_the_file(tmp):
    bad = tmp / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    p = run("nala_testtool", "npz-copy", bad, tmp / "o.npz", check=False)
    assert p.returncode != 0 and str(bad) in p.stderr
    f = tmp / "fortran.npz"
    np.savez(f, arr_0=np.asfortranarray(np.ones((3, 4), np.float32)))
    p = run("nala_testtool", "npz-copy", f, tmp / "o.npz", check=False)
    assert p.returncode != 0 and "Fortran" in p.stderr


def test_safetensors_written_by_the_reference_library(tmp):
    import torch
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    t = {
        "f32": torch.randn(3, 4),
        "f16": torch.randn(5).half(),
        "bf16": torch.randn(2, 2, 2).bfloat16(),
        "f64": torch.randn(3).double(),
        "i64": torch.randint(-5, 5, (4,)),
        "i32": torch.randint(-5, 5, (4,), dtype=torch.int32),
        "u8": torch.randint(0, 255, (6,), dtype=torch.uint8),
        "bool": torch.rand(7) > 0.5,
    }
    save_file(t, tmp / "a.safetensors", metadata={"format": "pt"})
    run("nala_testtool", "safetensors-copy", tmp / "a.safetensors", tmp / "b.safetensors")
    back = load_file(tmp / "b.safetensors")
    assert sorted(back) == sorted(t)
    for k in t:
        assert back[k].dtype == t[k].dtype and torch.equal(back[k], t[k]), k


def test_png_decode_equals_pillow(tmp):
    rng = np.random.default_rng(2)
    for mode, shape in (("RGB", (21, 33, 3)), ("L", (17, 9)), ("RGBA", (8, 12, 4))):
        img = rng.integers(0, 256, shape, dtype=np.uint8)
        Image.fromarray(img, mode).save(tmp / "x.png")
        run("nala_testtool", "image-decode", tmp / "x.png", tmp / "x.npz")
        ours = np.load(tmp / "x.npz")["arr_0"]
        ref = np.asarray(Image.open(tmp / "x.png").convert("RGB"))
        np.testing.assert_array_equal(ours, ref)


def test_jpeg_decode_close_to_pillow(tmp):
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[0:64, 0:80]
    img = np.stack([(xx * 3) % 256, (yy * 4) % 256, (xx + yy) % 256], -1).astype(np.uint8)
    img = np.clip(img.astype(int) + rng.integers(-8, 8, img.shape), 0, 255).astype(np.uint8)
    Image.fromarray(img).save(tmp / "x.jpg", quality=90)
    run("nala_testtool", "image-decode", tmp / "x.jpg", tmp / "x.npz")
    ours = np.load(tmp / "x.npz")["arr_0"].astype(int)
    ref = np.asarray(Image.open(tmp / "x.jpg").convert("RGB")).astype(int)
    diff = np.abs(ours - ref)
    print(f"JPEG decode vs Pillow (libjpeg): max |diff| {diff.max()}, mean {diff.mean():.4f}")
    # stb_image and libjpeg use different IDCT / upsampling; a few levels apart at most
    assert diff.mean() < 1.0 and diff.max() <= 16


@pytest.mark.parametrize("filt", ["box", "bilinear", "bicubic"])
def test_resize_is_pillow_exact(tmp, filt):
    rng = np.random.default_rng(4)
    img = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    np.savez(tmp / "in.npz", arr_0=img)
    pil_filter = {"box": Image.BOX, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}[filt]
    for (w, h) in ((20, 13), (53, 80), (101, 37), (26, 18)):
        run("nala_testtool", "pil-resize", tmp / "in.npz", w, h, filt, tmp / "out.npz")
        ours = np.load(tmp / "out.npz")["arr_0"]
        ref = np.asarray(Image.fromarray(img).resize((w, h), resample=pil_filter))
        np.testing.assert_array_equal(ours, ref, err_msg=f"{filt} {w}x{h}")


def adm_center_crop(pil_image, image_size):
    """ADM's center_crop_arr (guided-diffusion), written out here as the oracle."""
    while min(*pil_image.size) >= 2 * image_size:
        pil_image = pil_image.resize(tuple(x // 2 for x in pil_image.size), resample=Image.BOX)
    scale = image_size / min(*pil_image.size)
    pil_image = pil_image.resize(tuple(round(x * scale) for x in pil_image.size), resample=Image.BICUBIC)
    arr = np.array(pil_image)
    cy = (arr.shape[0] - image_size) // 2
    cx = (arr.shape[1] - image_size) // 2
    return arr[cy:cy + image_size, cx:cx + image_size]


@pytest.mark.parametrize("size", [32, 64, 256])
def test_adm_center_crop_equals_pillow(tmp, size):
    rng = np.random.default_rng(5)
    worst = 0
    for (h, w) in ((375, 500), (500, 333), (600, 601), (257, 1025), (300, 300)):
        yy, xx = np.mgrid[0:h, 0:w]
        img = np.stack([(xx * 7 + yy) % 256, (yy * 5) % 256, (xx * yy) % 256], -1).astype(np.uint8)
        img = np.clip(img.astype(int) + rng.integers(-20, 20, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(tmp / "x.png")
        run("nala_testtool", "center-crop", tmp / "x.png", size, tmp / "x.npz")
        ours = np.load(tmp / "x.npz")["arr_0"].astype(int)
        ref = adm_center_crop(Image.open(tmp / "x.png").convert("RGB"), size).astype(int)
        assert ours.shape == ref.shape
        worst = max(worst, np.abs(ours - ref).max())
    print(f"ADM centre crop vs Pillow at {size}: max |diff| = {worst}")
    assert worst == 0


def test_fashion_mnist_matches_an_independent_reader(tmp):
    import gzip
    d = os.environ.get("NALA_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")  # the GPU machine has it in .carry
    run("nala_testtool", "fmnist", d, "test", tmp / "f.npz")
    ours = np.load(tmp / "f.npz")
    with gzip.open(f"{d}/t10k-images-idx3-ubyte.gz") as f:
        imgs = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(f"{d}/t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    np.testing.assert_array_equal(ours["images"], imgs)
    np.testing.assert_array_equal(ours["labels"], labels.astype(np.int64))
