"""scripts/experiment_curves.py on tiny CPU runs: `eval` evaluates every checkpoint (unguided and
guided, the family's sampler) with exactly the numbers `nala sample` + `nala eval --fmnist` give,
and a second call does nothing; `plot` writes the curves, its training seconds are the sum of the
logging windows' step times, and its table averages the seeds of one model; bad input is a clear
error. The classifier has random weights (the plumbing is under test, not the metric: training
the real one takes minutes on 2 cores), and the samplers are cut to a few steps."""
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from conftest import BUILD, SOURCE, run

SCRIPT = SOURCE / "scripts" / "experiment_curves.py"
TRAIN = ["--preset", "fashion-mnist-tiny", "--batch", "16", "--log-every", "1", "--sample-every", "0", "--workers", "1",
         "--device", "cpu", "--ckpt-every", "2", "--keep-last", "10"]
SAMPLERS = ["--dit-sampler", "--sampler ddim --steps 2", "--sit-sampler", "--sampler ode-euler --steps 3"]
EVAL = ["--samples", 256, "--batch-size", 256, "--cfg-scale", 2, "--device", "cpu", "--nala", BUILD / "nala", *SAMPLERS]


def script(*args, check=True):
    p = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=1800)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def random_classifier(path):
    """nala's Fashion-MNIST classifier layout (conv16-32-64-64, fc256, fc10) with random weights."""
    g = torch.Generator().manual_seed(0)
    shapes = {"conv1": (16, 1, 3, 3), "conv2": (32, 16, 3, 3), "conv3": (64, 32, 3, 3), "conv4": (64, 64, 3, 3),
              "fc1": (256, 1024), "fc2": (10, 256)}
    w = {}
    for name, shape in shapes.items():
        fan_in = int(torch.tensor(shape[1:]).prod())
        w[f"{name}.weight"] = torch.randn(shape, generator=g) * (2.0 / fan_in) ** 0.5
        w[f"{name}.bias"] = torch.zeros(shape[0])
    save_file(w, str(path), metadata={"recipe": "random weights (test)", "test_accuracy": "0"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("curves")
    # two seeds of a flow model (one checkpoint each), a DDPM model with two checkpoints
    for name, model, seed, steps in [("flow-s1", "NaLaSiT-T/4", 3, 2), ("flow-s2", "NaLaSiT-T/4", 4, 2), ("ddpm", "NaLaDiT-T/4", 3, 4)]:
        run("nala", "train", *TRAIN, "--model", model, "--seed", seed, "--steps", steps, "--out", root / name)
    cls = root / "cls.safetensors"
    random_classifier(cls)
    script("eval", *(root / n for n in ["flow-s1", "flow-s2", "ddpm"]), "--classifier", cls, *EVAL)
    return root, cls


def test_every_checkpoint_evaluated_with_the_cli_numbers(runs, tmp):
    root, cls = runs
    for name, steps in [("flow-s1", [2]), ("flow-s2", [2]), ("ddpm", [2, 4])]:
        files = sorted(p.name for p in (root / name / "evals").glob("*.json"))
        assert files == sorted(f"{s:07d}_{m}.json" for s in steps for m in ["cfg2", "unguided"]), files
    # the oracle: the same checkpoint sampled and evaluated through the CLI directly
    e = json.loads((root / "ddpm" / "evals" / "0000004_cfg2.json").read_text())
    assert e["sampler"] == "--sampler ddim --steps 2" and e["cfg_scale"] == 2 and e["samples"] == 256 and e["step"] == 4
    run("nala", "sample", "--ckpt", root / "ddpm" / "checkpoints" / "0000004", "--sampler", "ddim", "--steps", 2, "--cfg-scale", 2,
        "--num-samples", 256, "--batch-size", 256, "--seed", 0, "--npz", tmp / "s.npz", "--device", "cpu")
    run("nala", "eval", "--fmnist", "--sample", tmp / "s.npz", "--classifier", cls, "--device", "cpu", "--json", tmp / "e.json")
    direct = json.loads((tmp / "e.json").read_text())
    for key in ["fd_fmnist", "precision_fmnist", "recall_fmnist", "is_fmnist", "class_accuracy"]:
        assert e[key] == direct[key], key
    assert json.loads((root / "flow-s1" / "evals" / "0000002_unguided.json").read_text())["sampler"] == "--sampler ode-euler --steps 3"


def test_a_second_eval_does_nothing(runs):
    root, cls = runs
    before = {p: p.stat().st_mtime_ns for p in (root / "ddpm" / "evals").glob("*.json")}
    p = script("eval", root / "ddpm", "--classifier", cls, *EVAL)
    assert p.stdout == ""
    assert before == {q: q.stat().st_mtime_ns for q in (root / "ddpm" / "evals").glob("*.json")}
    assert not [d for d in (root / "ddpm" / "evals").iterdir() if d.is_dir() or d.suffix == ".tmp"]


def test_plot_curves_seconds_and_seed_table(runs, tmp):
    root, _ = runs
    out = tmp / "plots"
    p = script("plot", root / "flow-s1", root / "flow-s2", root / "ddpm", "--out", out, "--title", "tiny")
    for png in ["fd_vs_images.png", "fd_vs_seconds.png", "metrics_vs_images.png"]:
        assert (out / png).stat().st_size > 5000, png
    table = (out / "table.md").read_text()
    assert table == p.stdout
    # the flow model's row: two seeds, the mean and half range of their final FD-FMNIST
    finals = [json.loads((root / s / "evals" / "0000002_unguided.json").read_text())["fd_fmnist"] for s in ["flow-s1", "flow-s2"]]
    row = next(line for line in table.splitlines() if line.startswith("| flow | unguided |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "2" and cells[3] == "2"
    assert cells[4] == f"{sum(finals) / 2:.3f} ± {abs(finals[0] - finals[1]) / 2:.3f}"
    # every checkpoint both seeds reached: the mean, min and max of their FD-FMNIST (one here, step 2)
    steps = (out / "steps.md").read_text().splitlines()
    row = next(line for line in steps if line.startswith("| flow | unguided | 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4:] == ["2", f"{sum(finals) / 2:.3f}", f"{min(finals):.3f}", f"{max(finals):.3f}"]
    assert [line.split("|")[3].strip() for line in steps if line.startswith("| ddpm | unguided |")] == ["2", "4"]
    assert (out / "fd_seeds_vs_images.png").stat().st_size > 5000
    ddpm = next(line for line in table.splitlines() if line.startswith("| ddpm | cfg2 |"))
    assert "±" not in ddpm and ddpm.split("|")[3].strip() == "1" and ddpm.split("|")[4].strip() == "4"
    # training seconds at step 4: the windows' step counts over their rates, summed (independently here)
    metrics = [json.loads(line) for line in (root / "ddpm" / "metrics.jsonl").read_text().splitlines()]
    expected, prev = 0.0, 0
    for m in metrics:
        expected += (m["step"] - prev) / m["steps_per_s"]
        prev = m["step"]
    sys.path.insert(0, str(SCRIPT.parent))
    import experiment_curves
    curves = experiment_curves.read_run(root / "ddpm")
    assert [e["step"] for e in curves["unguided"]] == [2, 4]
    assert curves["unguided"][1]["train_seconds"] == pytest.approx(expected, rel=1e-12)
    assert 0 < curves["unguided"][0]["train_seconds"] < curves["unguided"][1]["train_seconds"]


def test_unguided_only_skips_the_guided_evaluations(runs, tmp):
    # a copy of the DDPM run without its evaluations: --unguided-only writes the unguided ones alone,
    # equal to the full eval's (the same sampler, noise and checkpoint)
    import shutil
    root, cls = runs
    copy = tmp / "ddpm"
    shutil.copytree(root / "ddpm", copy, ignore=shutil.ignore_patterns("evals"))
    script("eval", copy, "--classifier", cls, *EVAL, "--unguided-only")
    assert sorted(f.name for f in (copy / "evals").glob("*.json")) == ["0000002_unguided.json", "0000004_unguided.json"]
    mine = json.loads((copy / "evals" / "0000004_unguided.json").read_text())
    full = json.loads((root / "ddpm" / "evals" / "0000004_unguided.json").read_text())
    assert mine["fd_fmnist"] == full["fd_fmnist"] and mine["class_accuracy"] == full["class_accuracy"]


def test_bad_input_is_a_clear_error(runs, tmp):
    root, cls = runs
    (tmp / "empty").mkdir()
    p = script("eval", tmp / "empty", "--classifier", cls, "--nala", BUILD / "nala", check=False)
    assert p.returncode != 0 and f"{tmp / 'empty'} has no checkpoints/" in p.stderr
    p = script("eval", root / "ddpm", "--classifier", tmp / "missing.safetensors", check=False)
    assert p.returncode != 0 and "missing.safetensors: no such file" in p.stderr
    p = script("plot", tmp / "empty", "--out", tmp / "o", check=False)
    assert p.returncode != 0 and "has no metrics.jsonl" in p.stderr


def test_fp8_last_samples_the_last_checkpoint_once_more(runs):
    # last in this file: it adds a mode to the shared runs
    root, cls = runs
    p = script("eval", root / "ddpm", "--classifier", cls, *EVAL, "--fp8-last")
    files = sorted(f.name for f in (root / "ddpm" / "evals").glob("*.json"))
    assert files == sorted([f"{s:07d}_{m}.json" for s in (2, 4) for m in ["cfg2", "unguided"]] + ["0000004_unguided-fp8.json"]), files
    assert p.stdout.count("unguided-fp8") == 1
    fp8 = json.loads((root / "ddpm" / "evals" / "0000004_unguided-fp8.json").read_text())
    bf = json.loads((root / "ddpm" / "evals" / "0000004_unguided.json").read_text())
    assert fp8["mode"] == "unguided-fp8" and fp8["step"] == 4 and fp8["fd_fmnist"] != bf["fd_fmnist"]
