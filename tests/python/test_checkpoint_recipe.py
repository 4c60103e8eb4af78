"""nala checkpoints carry the objective they were trained with, and `nala sample` uses it: for each
objective setting the trainer accepts, a short CPU run's checkpoint sampled with no process flags
equals sampling with the training settings given explicitly (the library's process), and differs
from sampling with the defaults (what nala did before). A flag still overrides, with a note."""
import numpy as np
import pytest

from conftest import run

SETTINGS = [
    ("NaLaDiT-T/4", ["--schedule", "cosine"], "ddim"),
    ("NaLaDiT-T/4", ["--variance", "fixed-large"], "ddpm"),
    ("NaLaSiT-T/4", ["--path", "GVP"], "sde-euler"),  # the ODE drift is the velocity whatever the path; the SDE needs the score
    ("NaLaSiT-T/4", ["--path", "VP"], "sde-heun"),
    ("NaLaSiT-T/4", ["--prediction", "noise"], "ode-heun"),
    ("NaLaSiT-T/4", ["--prediction", "score"], "ode-euler"),
    ("NaLaDiT-T/4", ["--objective", "flow"], "ode-heun"),
]
DEFAULTS = {"--schedule": "linear", "--variance": "learned-range", "--path": "Linear", "--prediction": "velocity", "--objective": "ddpm"}


@pytest.mark.parametrize("model,setting,sampler", SETTINGS, ids=[s[1][0][2:] + "-" + s[1][1] for s in SETTINGS])
def test_sampling_uses_the_recorded_objective(tmp, model, setting, sampler):
    run("nala", "train", "--preset", "fashion-mnist-tiny", "--model", model, *setting, "--steps", "20", "--batch", "16", "--lr", "3e-3",
        "--ckpt-every", "20", "--log-every", "10", "--sample-every", "0", "--workers", "1", "--device", "cpu", "--out", tmp / "r")
    rng = np.random.default_rng(0)
    np.savez(tmp / "noise.npz", noise=rng.standard_normal((4, 1, 32, 32)).astype(np.float32), labels=np.array([0, 3, 5, 9]))

    def sample(name, *flags):
        p = run("nala", "sample", "--ckpt", tmp / "r", "--sampler", sampler, "--steps", "6", "--init-noise", tmp / "noise.npz", "--seed", "1",
                "--save-latents", tmp / f"{name}.npz", "--out", tmp / f"{name}.png", "--device", "cpu", *flags)
        return np.load(tmp / f"{name}.npz")["latents"], p.stderr

    recorded, _ = sample("recorded")
    explicit, note = sample("explicit", *setting)
    assert np.array_equal(recorded, explicit)
    assert "overrides" not in note  # the same value as recorded: no note
    flag = setting[0]
    if flag == "--objective":  # a DiT-family model trained as flow: the old default sampled it as DDPM, which this sampler refuses
        p = run("nala", "sample", "--ckpt", tmp / "r", "--objective", "ddpm", "--sampler", "ddim", "--steps", "6", "--init-noise",
                tmp / "noise.npz", "--out", tmp / "d.png", "--device", "cpu")
        assert "overrides the checkpoint's flow" in p.stderr
        return
    default, note = sample("default", flag, DEFAULTS[flag])
    assert f"overrides the checkpoint's {setting[1]}" in note
    print(f"{setting}: |recorded - default| max {np.abs(recorded - default).max():.3e}")
    assert not np.allclose(recorded, default, atol=1e-4)
