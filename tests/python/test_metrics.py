"""Evaluation against independent implementations: the Inception network against pytorch-fid's
FID blocks (random weights, the same already-resized input); the TF1 resize against a float32
numpy computation; FID, sFID, IS and precision/recall against numpy/scipy computations of the ADM
formulas written here; `nala eval` end to end; and the error paths."""
import json
import os

import numpy as np
import pytest
import scipy.linalg
import torch
from safetensors.torch import save_file

from conftest import run


def pytorch_fid_network():
    """pytorch-fid's FID Inception (fid_inception_v3 without downloading weights), random BN statistics."""
    from pytorch_fid import inception as pi
    m = pi._inception_v3(num_classes=1008, aux_logits=False, weights=None)
    m.Mixed_5b = pi.FIDInceptionA(192, pool_features=32)
    m.Mixed_5c = pi.FIDInceptionA(256, pool_features=64)
    m.Mixed_5d = pi.FIDInceptionA(288, pool_features=64)
    m.Mixed_6b = pi.FIDInceptionC(768, channels_7x7=128)
    m.Mixed_6c = pi.FIDInceptionC(768, channels_7x7=160)
    m.Mixed_6d = pi.FIDInceptionC(768, channels_7x7=160)
    m.Mixed_6e = pi.FIDInceptionC(768, channels_7x7=192)
    m.Mixed_7b = pi.FIDInceptionE_1(1280)
    m.Mixed_7c = pi.FIDInceptionE_2(2048)
    # random weights with BatchNorm statistics calibrated on random images, so that features do not
    # collapse; then random affine BN parameters for non-trivial, distinct per-channel scales
    torch.manual_seed(0)
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.momentum = None
            mod.reset_running_stats()
    m.train()
    with torch.no_grad():
        m(torch.rand(8, 3, 299, 299) * 2 - 1)
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.weight.copy_(torch.rand_like(mod.weight) + 0.5)
                mod.bias.copy_(torch.randn_like(mod.bias) * 0.1)
    return m.eval()


def reference_features(m, x):
    feats = {}
    h = m.Mixed_6d.branch1x1.register_forward_hook(lambda mod, i, o: feats.__setitem__("sp", o))
    with torch.no_grad():
        y = x
        for name in ["Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "maxpool1", "Conv2d_3b_1x1", "Conv2d_4a_3x3", "maxpool2",
                     "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e", "Mixed_7a",
                     "Mixed_7b", "Mixed_7c"]:
            y = getattr(m, name)(y)
        pool = y.mean((2, 3))
    h.remove()
    sp = feats["sp"][:, :7].permute(0, 2, 3, 1).reshape(x.shape[0], -1)
    return pool.numpy(), sp.numpy(), (pool @ m.fc.weight.T).detach().numpy()


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    d = tmp_path_factory.mktemp("inc")
    m = pytorch_fid_network()
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, d / "inception.safetensors")
    return m, d / "inception.safetensors"


def test_features_equal_pytorch_fid(tmp, weights):
    m, path = weights
    g = torch.Generator().manual_seed(1)
    x = torch.rand(3, 3, 299, 299, generator=g) * 2 - 1
    np.savez(tmp / "in.npz", x=x.numpy())
    run("nala_testtool", "inception", path, tmp / "in.npz", tmp / "out.npz")
    o = np.load(tmp / "out.npz")
    pool, sp, logits = reference_features(m, x)
    for name, a, b in (("pool3", o["pool"], pool), ("spatial", o["spatial"], sp), ("logits", o["logits"], logits)):
        e = rel(a, b)
        print(f"{name}: {a.shape}, relative error {e:.2e}")
        assert a.shape == b.shape and e < 1e-4


def tf1_resize(img, oh, ow):
    """TF1 ResizeBilinear (align_corners=False, no half-pixel centres) in float32, written out."""
    n, c, h, w = img.shape
    img = img.astype(np.float32)
    def axis(i, o):
        src = np.arange(o, dtype=np.float32) * np.float32(i / o)
        lo = np.floor(src).astype(np.int64)
        return np.minimum(lo, i - 1), np.minimum(lo + 1, i - 1), (src - lo).astype(np.float32)
    ylo, yhi, dy = axis(h, oh)
    xlo, xhi, dx = axis(w, ow)
    top = img[:, :, ylo][:, :, :, xlo] + (img[:, :, ylo][:, :, :, xhi] - img[:, :, ylo][:, :, :, xlo]) * dx
    bot = img[:, :, yhi][:, :, :, xlo] + (img[:, :, yhi][:, :, :, xhi] - img[:, :, yhi][:, :, :, xlo]) * dx
    return top + (bot - top) * dy[:, None]


@pytest.mark.parametrize("size", [(32, 32), (64, 48), (256, 256), (299, 299), (512, 512)])
def test_tf1_resize(tmp, size):
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (2, 3, *size)).astype(np.float32)
    np.savez(tmp / "in.npz", x=img)
    run("nala_testtool", "tf-resize", tmp / "in.npz", 299, 299, tmp / "out.npz")
    ours = np.load(tmp / "out.npz")["out"]
    ref = tf1_resize(img, 299, 299)
    print(size, "max |diff|", np.abs(ours - ref).max())
    assert np.abs(ours - ref).max() < 1e-3
    if size == (299, 299):
        np.testing.assert_array_equal(ours, img)


def adm_fid(mu1, s1, mu2, s2, eps=1e-6):
    """ADM evaluator's Fréchet distance, including its retry with eps on the diagonals when the square
    root of a singular product is not finite (the GPU machine's scipy gave NaN for these 40 samples)."""
    covmean = np.asarray(scipy.linalg.sqrtm(s1.dot(s2)))  # scipy >= 1.16 returns the array alone
    if not np.isfinite(covmean).all():
        offset = np.eye(s1.shape[0]) * eps
        covmean = np.asarray(scipy.linalg.sqrtm((s1 + offset).dot(s2 + offset)))
    covmean = covmean.real
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def adm_is(logits, split):
    """ADM's IS; with scipy's log-space softmax so that underflowing probabilities add 0."""
    from scipy.special import log_softmax, logsumexp
    lp = log_softmax(logits, axis=1)
    scores = []
    for i in range(0, len(lp), split):
        part = lp[i:i + split]
        log_marg = logsumexp(part, axis=0, keepdims=True) - np.log(len(part))
        scores.append(np.exp((np.exp(part) * (part - log_marg)).sum(1).mean()))
    return float(np.mean(scores))


def adm_pr(ref, sam, k=3):
    def d2(u, v):
        return np.maximum((u ** 2).sum(1)[:, None] - 2 * u @ v.T + (v ** 2).sum(1)[None], 0)
    r_ref = np.partition(d2(ref, ref), k, axis=1)[:, k]
    r_sam = np.partition(d2(sam, sam), k, axis=1)[:, k]
    precision = (d2(sam, ref) <= r_ref[None]).any(1).mean()
    recall = (d2(ref, sam) <= r_sam[None]).any(1).mean()
    return float(precision), float(recall), r_ref


def test_metric_formulas_on_synthetic_features(tmp):
    rng = np.random.default_rng(3)
    d = 24
    A = rng.standard_normal((d, d)) * 0.3
    a = (rng.standard_normal((500, d)) @ A + 0.1).astype(np.float32)
    b = (rng.standard_normal((300, d)) @ (A + 0.05 * rng.standard_normal((d, d))) + 0.2).astype(np.float32)
    logits = (rng.standard_normal((1234, 17)) * 2).astype(np.float32)
    np.savez(tmp / "in.npz", a=a, b=b, logits=logits, split=np.array(500))
    run("nala_testtool", "metrics", tmp / "in.npz", tmp / "out.npz")
    o = {k: (v.item() if v.size == 1 else v) for k, v in np.load(tmp / "out.npz").items()}
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(o["mu_a"], a64.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(o["sigma_a"], np.cov(a64, rowvar=False), rtol=1e-9, atol=1e-12)
    fid = adm_fid(b64.mean(0), np.cov(b64, rowvar=False), a64.mean(0), np.cov(a64, rowvar=False))
    is_ref = adm_is(logits.astype(np.float64), 500)
    p, r, radii = adm_pr(a, b)
    print(f"FID ours {float(o['fid']):.8f} scipy {fid:.8f}; IS ours {float(o['is']):.6f} numpy {is_ref:.6f}; "
          f"P ours {float(o['precision']):.4f} numpy {p:.4f}; R ours {float(o['recall']):.4f} numpy {r:.4f}")
    assert abs(float(o["fid"]) - fid) < 1e-6 * max(1.0, fid)
    assert abs(float(o["is"]) - is_ref) < 1e-6 * is_ref
    np.testing.assert_allclose(o["radii_a"], radii, rtol=1e-4, atol=1e-4)
    assert abs(float(o["precision"]) - p) < 1e-9 and abs(float(o["recall"]) - r) < 1e-9


def test_nala_eval_end_to_end(tmp, weights):
    m, path = weights
    rng = np.random.default_rng(4)
    ref = rng.integers(0, 256, (24, 64, 64, 3), dtype=np.uint8)
    sam = np.clip(ref.astype(int) + rng.integers(-40, 40, ref.shape), 0, 255).astype(np.uint8)[::-1].copy()
    np.savez(tmp / "ref.npz", arr_0=ref)
    np.savez(tmp / "sam.npz", arr_0=sam, arr_1=np.arange(24))
    run("nala", "eval", "--ref", tmp / "ref.npz", "--sample", tmp / "sam.npz", "--inception", path, "--json", tmp / "m.json",
        "--device", "cpu", "--batch-size", "16", "--allow-few-samples")
    ours = json.loads((tmp / "m.json").read_text())
    # the same pipeline in Python: TF1 resize, (x - 128)/128, pytorch-fid's network, ADM's formulas
    def feats(imgs):
        x = torch.from_numpy(tf1_resize(imgs.transpose(0, 3, 1, 2), 299, 299))
        return reference_features(m, (x - 128) / 128)
    pr_, sr_, _ = feats(ref)
    ps_, ss_, ls_ = feats(sam)
    f64 = lambda z: z.astype(np.float64)
    fid = adm_fid(f64(ps_).mean(0), np.cov(f64(ps_), rowvar=False), f64(pr_).mean(0), np.cov(f64(pr_), rowvar=False))
    sfid = adm_fid(f64(ss_).mean(0), np.cov(f64(ss_), rowvar=False), f64(sr_).mean(0), np.cov(f64(sr_), rowvar=False))
    p, r, _ = adm_pr(pr_, ps_)
    ref_vals = {"fid": fid, "sfid": sfid, "is": adm_is(f64(ls_), 5000), "precision": p, "recall": r}
    print({k: (round(ours[k], 6), round(v, 6)) for k, v in ref_vals.items()})
    for k, v in ref_vals.items():
        tol = 2e-3 * abs(v) + 1e-6 if k in ("fid", "sfid", "is") else 1.05 / 24  # P/R: one image of 24 may flip at a tie
        assert abs(ours[k] - v) <= tol, (k, ours[k], v)
    # --save-stats then evaluation from the stored statistics gives the same FID
    run("nala", "eval", "--save-stats", tmp / "ref.npz", "--out", tmp / "ref_stats.npz", "--inception", path, "--device", "cpu",
        "--allow-few-samples")
    z = np.load(tmp / "ref_stats.npz")
    assert set(z.files) == {"arr_0", "mu", "sigma", "mu_s", "sigma_s"} and z["sigma"].shape == (2048, 2048)
    run("nala", "eval", "--ref", tmp / "ref_stats.npz", "--sample", tmp / "sam.npz", "--inception", path, "--json", tmp / "m2.json",
        "--device", "cpu", "--allow-few-samples")
    assert abs(json.loads((tmp / "m2.json").read_text())["fid"] - ours["fid"]) < 1e-6 * ours["fid"]


def test_eval_errors(tmp, weights):
    m, path = weights
    rng = np.random.default_rng(5)
    np.savez(tmp / "a.npz", arr_0=rng.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8))
    np.savez(tmp / "b.npz", arr_0=rng.integers(0, 256, (6, 48, 48, 3), dtype=np.uint8))
    base = ["eval", "--inception", path, "--device", "cpu"]
    p = run("nala", *base, "--ref", tmp / "a.npz", "--sample", tmp / "a.npz", check=False)
    assert p.returncode != 0 and "fewer than the 2048 feature dimensions" in p.stderr
    p = run("nala", *base, "--ref", tmp / "a.npz", "--sample", tmp / "b.npz", check=False)
    assert p.returncode != 0 and "image sizes differ" in p.stderr
    np.savez(tmp / "f.npz", arr_0=rng.random((6, 32, 32, 3)).astype(np.float32))
    p = run("nala", *base, "--ref", tmp / "a.npz", "--sample", tmp / "f.npz", check=False)
    assert p.returncode != 0 and "must be uint8 images" in p.stderr
    (tmp / "bad.npz").write_bytes(b"not a zip at all, really")
    p = run("nala", *base, "--ref", tmp / "a.npz", "--sample", tmp / "bad.npz", check=False)
    assert p.returncode != 0 and "bad.npz" in p.stderr
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    sd["Conv2d_1a_3x3.conv.weight"] = sd["Conv2d_1a_3x3.conv.weight"] * float("nan")
    save_file(sd, tmp / "nan.safetensors")
    p = run("nala", "eval", "--inception", tmp / "nan.safetensors", "--device", "cpu", "--ref", tmp / "a.npz", "--sample", tmp / "a.npz",
            "--allow-few-samples", check=False)
    assert p.returncode != 0 and "NaN" in p.stderr


@pytest.mark.parametrize("size", [32, 128])
def test_fmnist_eval_equals_an_independent_computation(tmp, size):
    """`nala eval --fmnist` (FD-FMNIST, P/R, IS-FMNIST, class accuracy) against the same numbers
    computed here: the classifier's layers in torch, Fashion-MNIST read with numpy (test split as
    the reference, zero-padded to 32), FD with scipy, ADM's P/R and IS. Samples are real training
    images (labelled), so precision, recall and accuracy are far from 0; random classifier weights
    (the plumbing is under test, not the classifier). At 128 px (the upsampled data set, nala's
    data/datasets.h) samples and references are upsampled by torch's bilinear interpolation, written
    as uint8 as samplers write them, and averaged back over 4x4 blocks here."""
    import gzip
    d = os.environ.get("NALA_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
    def read(split):
        with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz") as f:
            x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
        with gzip.open(f"{d}/{split}-labels-idx1-ubyte.gz") as f:
            y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
        return np.pad(x, ((0, 0), (2, 2), (2, 2))), y                        # (N, 32, 32) zero padding
    ref, _ = read("t10k")
    train, labels = read("train")
    rng = np.random.default_rng(7)
    pick = rng.choice(len(train), 600, replace=False)
    sam, sam_y = train[pick], labels[pick]
    if size != 32:
        def up(u8):  # (N, 32, 32) uint8 -> (N, S, S) uint8: bilinear, then clamp(127.5 x + 128) truncated
            x = torch.from_numpy(u8).float()[:, None] / 127.5 - 1
            x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
            return x.mul(127.5).add(128.0).clamp(0, 255).to(torch.uint8)[:, 0].numpy()
        m = size // 32
        down = lambda u8: (u8.astype(np.float32) / 127.5 - 1).reshape(-1, 32, m, 32, m).mean(axis=(2, 4))  # (N, 32, 32) in [-1, 1]
        sam_big = up(sam)
        np.savez(tmp / "s.npz", arr_0=np.repeat(sam_big[..., None], 3, axis=3), arr_1=sam_y)   # (600, S, S, 3) RGB
        sam, ref = down(sam_big), down(up(ref))
    else:
        np.savez(tmp / "s.npz", arr_0=np.repeat(sam[..., None], 3, axis=3), arr_1=sam_y)   # (600, 32, 32, 3) RGB
        sam, ref = sam.astype(np.float32) / 127.5 - 1, ref.astype(np.float32) / 127.5 - 1
    torch.manual_seed(0)
    net = torch.nn.ModuleDict({"conv1": torch.nn.Conv2d(1, 16, 3, padding=1), "conv2": torch.nn.Conv2d(16, 32, 3, padding=1),
                               "conv3": torch.nn.Conv2d(32, 64, 3, padding=1), "conv4": torch.nn.Conv2d(64, 64, 3, padding=1),
                               "fc1": torch.nn.Linear(1024, 256), "fc2": torch.nn.Linear(256, 10)})
    with torch.no_grad():  # He initialisation and spread logits: features and class scores that vary between images
        for k, m in net.items():
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            m.bias.normal_(0, 0.05)
        net["fc2"].weight.mul_(4)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, tmp / "cls.safetensors",
              metadata={"recipe": "random weights (test)", "test_accuracy": "0"})
    # at 128 px through --ref-cache, pre-filled with a stale cache (another classifier's keys, zero
    # features): it must be recomputed, or the numbers below would not hold (check_ref_cache)
    cache = tmp / "ref.safetensors"
    if size == 128:
        save_file({"features": torch.zeros(10000, 256), "radii": torch.zeros(10000)}, cache, metadata=stale_cache_keys())
    proc = run("nala", "eval", "--fmnist", "--sample", tmp / "s.npz", "--classifier", tmp / "cls.safetensors", "--device", "cpu",
               "--json", tmp / "e.json", *(["--ref-cache", cache] if size == 128 else []))
    ours = json.loads((tmp / "e.json").read_text())

    F = torch.nn.functional
    @torch.no_grad()
    def feats(x):
        x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[:, None]  # (N, 1, 32, 32) in [-1, 1]
        h = F.relu(net["conv1"](x))
        for c in ("conv2", "conv3", "conv4"):
            h = F.max_pool2d(F.relu(net[c](h)), 2)
        h = F.relu(net["fc1"](h.flatten(1)))                                  # (N, 256)
        return h.numpy(), net["fc2"](h).numpy().astype(np.float64)
    fr, _ = feats(ref)
    fs, ls = feats(sam)
    f64 = lambda z: z.astype(np.float64)
    fd = adm_fid(f64(fs).mean(0), np.cov(f64(fs), rowvar=False), f64(fr).mean(0), np.cov(f64(fr), rowvar=False))
    p, r, _ = adm_pr(fr, fs)
    want = {"fd_fmnist": fd, "precision_fmnist": p, "recall_fmnist": r, "is_fmnist": adm_is(ls, 5000),
            "class_accuracy": float((ls.argmax(1) == sam_y).mean())}
    print({k: (round(ours[k], 6), round(v, 6)) for k, v in want.items()})
    assert ours["samples"] == 600 and ours["references"] == 10000
    # the comparison means something: non-degenerate features, spread class scores, P/R away from 0 and 1
    assert fd > 0.1 and want["is_fmnist"] > 1.05 and 0.05 < p < 0.99 and 0.05 < r < 0.99
    for k, v in want.items():
        # FD, IS: float32 features against float64 statistics; P/R and accuracy: a few images may flip at a tie
        tol = 1e-3 * abs(v) + 1e-6 if k in ("fd_fmnist", "is_fmnist") else 3 / 600
        assert abs(ours[k] - v) <= tol, (k, ours[k], v)
    if size == 128:
        assert "another classifier, image size, device or format; recomputing" in proc.stderr, proc.stderr
        check_ref_cache(tmp, cache, ours, fr)


def stale_cache_keys():
    return {"format": "nala fmnist reference features 2", "classifier_fnv1a64": "0" * 16, "references_fnv1a64": "0" * 16}


def check_ref_cache(tmp, cache, ours, fr):
    """--ref-cache after the stale cache was recomputed (the numbers checked above): it now holds the
    test split's features (equal to the ones computed here) and their P/R radii under new keys; a
    second evaluation reads it (the same numbers; zeroed features change FD); a file that is no
    cache is an error and left as it was; --ref-cache without --fmnist is an error."""
    from safetensors.torch import load_file
    from safetensors import safe_open
    with safe_open(str(cache), "pt") as f:
        meta = f.metadata()
    stale = stale_cache_keys()
    assert meta["format"] == stale["format"] and meta["classifier_fnv1a64"] != stale["classifier_fnv1a64"] and \
        meta["references_fnv1a64"] != stale["references_fnv1a64"], meta
    stored = load_file(cache)
    feats = stored["features"].numpy()
    assert feats.shape == fr.shape and rel(feats, fr) < 1e-4, rel(feats, fr)  # float32 features of the same images
    # the P/R radii: the 4th smallest squared distance to the references, self included (ADM's k = 3)
    f = torch.from_numpy(fr)
    sq = f.pow(2).sum(1)
    radii = torch.cat([(sq[i:i + 2000, None] - 2 * f[i:i + 2000] @ f.T + sq).clamp_min(0).kthvalue(4, dim=1).values
                       for i in range(0, len(f), 2000)]).numpy()
    assert rel(stored["radii"].numpy(), radii) < 1e-4, rel(stored["radii"].numpy(), radii)
    args = ["nala", "eval", "--fmnist", "--sample", tmp / "s.npz", "--classifier", tmp / "cls.safetensors", "--device", "cpu",
            "--ref-cache", cache]
    p = run(*args, "--json", tmp / "c1.json")
    assert "recomputing" not in p.stderr and json.loads((tmp / "c1.json").read_text()) == ours
    # the same keys, other features: read, not recomputed
    save_file({"features": torch.zeros(10000, 256), "radii": stored["radii"]}, cache, metadata=meta)
    p = run(*args, "--json", tmp / "c2.json")
    assert "recomputing" not in p.stderr and json.loads((tmp / "c2.json").read_text())["fd_fmnist"] != ours["fd_fmnist"]
    before = (tmp / "cls.safetensors").read_bytes()
    p = run(*args[:-1], tmp / "cls.safetensors", check=False)
    assert p.returncode != 0 and "cls.safetensors: not a nala Fashion-MNIST reference cache" in p.stderr, p.stderr
    assert (tmp / "cls.safetensors").read_bytes() == before
    p = run("nala", "eval", "--ref", tmp / "s.npz", "--sample", tmp / "s.npz", "--ref-cache", cache, check=False)
    assert p.returncode != 0 and "--ref-cache is for --fmnist evaluations only" in p.stderr, p.stderr
    p = run(*args[:-1], tmp / "missing" / "c.safetensors", check=False)  # refused before any work
    assert p.returncode != 0 and "--ref-cache" in p.stderr and "missing" in p.stderr and "does not exist" in p.stderr, p.stderr
