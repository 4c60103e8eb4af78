"""ADM Gaussian diffusion against independent float64 numpy computations written here from the
formulas of docs/reference.md §2 (gaussian_diffusion.py, respace.py, diffusion_utils.py)."""
import numpy as np
import pytest

from conftest import run


def adm_tables(schedule, T):
    if schedule == "linear":
        scale = 1000 / T
        betas = np.linspace(scale * 0.0001, scale * 0.02, T, dtype=np.float64)
    else:
        f = lambda t: np.cos((t + 0.008) / 1.008 * np.pi / 2) ** 2
        betas = np.array([min(1 - f((i + 1) / T) / f(i / T), 0.999) for i in range(T)])
    return betas


def space_timesteps(T, spec):
    """ADM's respace.space_timesteps, written out (Python's round: half to even)."""
    if spec.startswith("ddim"):
        want = int(spec[4:])
        for i in range(1, T):
            if len(range(0, T, i)) == want:
                return set(range(0, T, i))
        raise ValueError
    counts = [int(x) for x in spec.split(",")]
    per, extra = divmod(T, len(counts))
    start, out = 0, []
    for i, c in enumerate(counts):
        size = per + (1 if i < extra else 0)
        stride = 1 if c <= 1 else (size - 1) / (c - 1)
        cur = 0.0
        for _ in range(c):
            out.append(start + round(cur))
            cur += stride
        start += size
    return set(out)


def derived(betas):
    ac = np.cumprod(1.0 - betas)
    acp = np.append(1.0, ac[:-1])
    pv = betas * (1.0 - acp) / (1.0 - ac)
    return {
        "betas": betas, "alphas_cumprod": ac, "alphas_cumprod_prev": acp, "alphas_cumprod_next": np.append(ac[1:], 0.0),
        "sqrt_recipm1_alphas_cumprod": np.sqrt(1.0 / ac - 1), "posterior_variance": pv,
        "posterior_log_variance_clipped": np.log(np.append(pv[1], pv[1:])),
        "posterior_mean_coef1": betas * np.sqrt(acp) / (1.0 - ac),
        "posterior_mean_coef2": (1.0 - acp) * np.sqrt(1 - betas) / (1.0 - ac),
    }


@pytest.mark.parametrize("schedule,respacing", [("linear", "-"), ("cosine", "-"), ("linear", "250"), ("linear", "ddim50"),
                                                ("linear", "25"), ("cosine", "10,15,20")])
def test_tables_and_respacing(tmp, schedule, respacing):
    run("nala_testtool", "diffusion-tables", schedule, 1000, respacing, "fixed-small", tmp / "t.npz")
    ours = np.load(tmp / "t.npz")
    betas = adm_tables(schedule, 1000)
    if respacing != "-":
        keep = space_timesteps(1000, respacing)
        ac = np.cumprod(1 - betas)
        last, nb, tmap = 1.0, [], []
        for i, a in enumerate(ac):
            if i in keep:
                nb.append(1 - a / last)
                last = a
                tmap.append(i)
        betas = np.array(nb)
        np.testing.assert_array_equal(ours["timestep_map"], tmap)
    ref = derived(betas)
    worst = 0.0
    for k, v in ref.items():
        err = np.max(np.abs(ours[k] - v) / np.maximum(np.abs(v), 1e-300))
        worst = max(worst, err)
        assert err < 1e-12, (k, err)
    print(f"{schedule} {respacing}: {len(betas)} steps, worst relative table error {worst:.1e}")


def test_respacing_tie_cases():
    # exact ties of the float stride: Python rounds 166.5 -> 166, 499.5 -> 500, 832.5 -> 832
    s = space_timesteps(1000, "25")
    assert {166, 500, 832} <= s and not ({167, 833} & s)


def test_respacing_in_cpp_keeps_the_tie_cases(tmp):
    run("nala_testtool", "diffusion-tables", "linear", 1000, "25", "fixed-small", tmp / "t.npz")
    tmap = set(np.load(tmp / "t.npz")["timestep_map"].tolist())
    assert tmap == space_timesteps(1000, "25")
    assert {166, 500, 832} <= tmap
    run("nala_testtool", "diffusion-tables", "linear", 1000, "250", "fixed-small", tmp / "t.npz")
    tmap = np.load(tmp / "t.npz")["timestep_map"]
    assert tmap[0] == 0 and tmap[1] == 4 and tmap[-1] == 999 and len(tmap) == 250


def approx_cdf(x):
    return 0.5 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def test_hybrid_loss_terms(tmp):
    rng = np.random.default_rng(0)
    n = 6
    x0 = np.clip(rng.standard_normal((n, 2, 4, 4)) * 0.5, -1, 1).astype(np.float32)
    x0[0, 0, 0, :2] = [-1.0, 1.0]  # the edge bins of the decoder
    t = np.array([0, 0, 1, 10, 500, 999], dtype=np.int64)
    noise = rng.standard_normal(x0.shape).astype(np.float32)
    out = np.concatenate([rng.standard_normal(x0.shape), np.tanh(rng.standard_normal(x0.shape))], 1).astype(np.float32)
    np.savez(tmp / "in.npz", x0=x0, t=t, noise=noise, model_out=out)
    run("nala_testtool", "diffusion-loss", tmp / "in.npz", "learned-range", tmp / "out.npz")
    ours = np.load(tmp / "out.npz")
    d = derived(adm_tables("linear", 1000))
    ex = lambda k: d[k][t].reshape(-1, 1, 1, 1)
    ac = ex("alphas_cumprod")
    xt = np.sqrt(ac) * x0 + np.sqrt(1 - ac) * noise
    np.testing.assert_allclose(ours["xt"], xt, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ours["t_model"], t)
    eps, v = out[:, :2].astype(np.float64), out[:, 2:].astype(np.float64)
    mse = ((noise - eps) ** 2).reshape(n, -1).mean(1)
    min_log = ex("posterior_log_variance_clipped")
    max_log = np.log(ex("betas"))
    frac = (v + 1) / 2
    log_var = frac * max_log + (1 - frac) * min_log
    pred_x0 = np.sqrt(1 / ac) * xt - ex("sqrt_recipm1_alphas_cumprod") * eps
    mean = ex("posterior_mean_coef1") * pred_x0 + ex("posterior_mean_coef2") * xt
    true_mean = ex("posterior_mean_coef1") * x0 + ex("posterior_mean_coef2") * xt
    true_lv = min_log
    kl = 0.5 * (-1 + log_var - true_lv + np.exp(true_lv - log_var) + (true_mean - mean) ** 2 * np.exp(-log_var))
    kl = kl.reshape(n, -1).mean(1) / np.log(2)
    # the decoder term in float32, as ADM evaluates it on float32 tensors: its CDF differences
    # underflow to the 1e-12 clamp for some bins, which float64 would resolve differently
    f32 = np.float32
    inv = np.exp(f32(-0.5) * log_var.astype(f32))
    c = (x0 - mean.astype(f32)).astype(f32)
    cdf = lambda z: (f32(0.5) * (f32(1) + np.tanh(f32(np.sqrt(2 / np.pi)) * (z + f32(0.044715) * z ** 3)))).astype(f32)
    cdf_plus, cdf_min = cdf(inv * (c + f32(1 / 255))), cdf(inv * (c - f32(1 / 255)))
    logp = np.where(x0 < -0.999, np.log(np.maximum(cdf_plus, f32(1e-12))),
                    np.where(x0 > 0.999, np.log(np.maximum(f32(1) - cdf_min, f32(1e-12))),
                             np.log(np.maximum(cdf_plus - cdf_min, f32(1e-12))))).astype(np.float64)
    nll = -logp.reshape(n, -1).mean(1) / np.log(2)
    vb = np.where(t == 0, nll, kl)
    for name, ref in (("mse", mse), ("vb", vb), ("loss", mse + vb)):
        err = np.abs(ours[name] - ref) / np.maximum(np.abs(ref), 1e-6)
        print(name, "relative error per sample", np.array2string(err, precision=2))
        assert err.max() < 2e-4, (name, ours[name], ref)
