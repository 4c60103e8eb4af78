"""Out-of-range values and wrong paths given to the sub-commands end in a clear error naming the flag
and the value, before any long computation, and never in a crash (a signal), a LibTorch-internal
message or a silent fallback: the cases a review of the command line found (zero timed repetitions
in the benchmarks, labels past the model's classes, --classes that are not whole numbers, an empty
or folder --out, an --npz or --json in a missing folder, training settings out of range, a data set
smaller than one batch leaving no config.json behind, unknown --take and --device values, a --resume
of a folder with no run, an --init-noise of no rows, an FD-FMNIST sample of no images)."""
import os

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from conftest import run

ENV_TINY = ["--preset", "fashion-mnist-tiny", "--batch", "16", "--sample-every", "0", "--workers", "1", "--device", "cpu"]


def fails(*args, says):
    """Runs nala with args; asserts an error exit (not a signal) whose output holds every string of `says`."""
    p = run("nala", *args, check=False, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode > 0, f"{args}: exit {p.returncode}\n{out}"
    for s in says:
        assert s in out, f"{args}: '{s}' not in\n{out}"
    assert "index out of range in self" not in out and "stoll" not in out, out
    return p


def test_bad_values(tmp):
    run("nala", "train", *ENV_TINY, "--steps", "1", "--out", tmp / "r")
    ckpt = tmp / "r"
    rng = np.random.default_rng(0)

    # benchmarks: no timed repetitions (a median of nothing was a segfault)
    fails("bench", "sample", "--models", "DiT-S/8", "--image-size", "64", "--dtypes", "fp32", "--device", "cpu", "--batch", "1", "--measure", "0",
          says=["at least 1, got 0"])
    fails("bench", "train", "--models", "DiT-S/8", "--image-size", "64", "--precision", "fp32", "--device", "cpu", "--batch", "1", "--steps", "0",
          says=["at least 1, got 0"])

    # labels past the model's 10 classes (10 itself is the null class) in every file that gives labels
    np.savez(tmp / "noise.npz", noise=rng.standard_normal((2, 1, 32, 32)).astype(np.float32), labels=np.array([1, 500]))
    fails("sample", "--ckpt", ckpt, "--device", "cpu", "--steps", "2", "--init-noise", tmp / "noise.npz", "--out", tmp / "g.png",
          says=["noise.npz", "label 500", "0..10"])
    np.savez(tmp / "lik.npz", x=rng.standard_normal((2, 1, 32, 32)).astype(np.float32), labels=np.array([-7, 2]))
    fails("sample", "--ckpt", ckpt, "--device", "cpu", "--likelihood", tmp / "lik.npz", "--likelihood-steps", "2", says=["lik.npz", "label -7"])
    np.savez(tmp / "fw.npz", x=rng.standard_normal((2, 1, 32, 32)).astype(np.float32), t=np.array([0.3, 0.6], np.float32), y=np.array([1, 200]))
    fails("forward", "--ckpt", ckpt, "--device", "cpu", "--input", tmp / "fw.npz", "--output", tmp / "fo.npz", says=["fw.npz", "'y'", "label 200"])
    assert not (tmp / "fo.npz").exists()
    fails("forward", "--ckpt", ckpt, "--device", "cpu", "--input", tmp / "fw.npz", "--output", tmp / "fo.npz", "--input-size", "16",
          says=["--input-size 16", "has 32"])  # (the message named a flag forward did not have)
    np.savez(tmp / "noise0.npz", noise=np.zeros((0, 1, 32, 32), np.float32))
    fails("sample", "--ckpt", ckpt, "--device", "cpu", "--steps", "2", "--init-noise", tmp / "noise0.npz", "--out", tmp / "g.png",
          says=["noise0.npz", "no rows"])
    for bad in ["a,b", "1.5", "99999999999999999999", "-3"]:
        fails("sample", "--ckpt", ckpt, "--device", "cpu", "--steps", "2", "--classes", bad, "--out", tmp / "g.png", says=["--classes"])
    assert not (tmp / "g.png").exists()

    # outputs: empty, a folder, a missing folder; refused before sampling or evaluating
    fails("sample", "--ckpt", ckpt, "--device", "cpu", "--steps", "2", "--out", "", says=["--out", "empty"])
    (tmp / "adir").mkdir()
    fails("sample", "--ckpt", ckpt, "--device", "cpu", "--steps", "2", "--out", tmp / "adir", says=["--out", "is a folder"])
    fails("sample", "--ckpt", ckpt, "--device", "cpu", "--steps", "2", "--num-samples", "2", "--npz", tmp / "nodir" / "f.npz",
          says=["--npz", "does not exist"])
    assert not (tmp / "nodir").exists()
    fails("eval", "--fmnist", "--classifier", tmp / "c.safetensors", "--sample", tmp / "s.npz", "--json", tmp / "nodir" / "m.json",
          says=["--json", "does not exist"])
    fails("eval", "--train-fmnist-classifier", "--epochs", "0", "--out", tmp / "c.safetensors", says=["--epochs", "got 0"])
    fails("eval", "--fmnist", "--classifier", tmp / "c.safetensors", "--sample", tmp / "s.npz", "--batch-size", "0",
          says=["--batch-size", "got 0"])
    torch.manual_seed(0)  # a classifier of random weights in the layout nala's FD-FMNIST reads (as test_metrics.py)
    net = torch.nn.ModuleDict({"conv1": torch.nn.Conv2d(1, 16, 3, padding=1), "conv2": torch.nn.Conv2d(16, 32, 3, padding=1),
                               "conv3": torch.nn.Conv2d(32, 64, 3, padding=1), "conv4": torch.nn.Conv2d(64, 64, 3, padding=1),
                               "fc1": torch.nn.Linear(1024, 256), "fc2": torch.nn.Linear(256, 10)})
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, tmp / "cls.safetensors",
              metadata={"recipe": "random weights (test)", "test_accuracy": "0"})
    np.savez(tmp / "empty.npz", arr_0=np.zeros((0, 32, 32, 3), np.uint8), arr_1=np.zeros(0, np.int64))
    fails("eval", "--fmnist", "--sample", tmp / "empty.npz", "--classifier", tmp / "cls.safetensors", "--device", "cpu",
          says=["empty.npz", "holds no images"])
    fails("extract-latents", "--data", tmp / "imgs", "--vae", tmp / "v.safetensors", "--out", tmp / "lat", "--image-size", "0",
          says=["--image-size", "got 0"])
    fails("convert", "--in", ckpt / "checkpoints" / "0000001" / "ema.safetensors", "--out", tmp / "c.safetensors", "--take", "foo",
          says=["--take", "'foo'"])
    fails("sample", "--ckpt", ckpt, "--device", "gpu", says=["--device 'gpu'"])
    # a required flag missing: said, not only the help text
    fails("forward", "--ckpt", ckpt, says=["needs --ckpt, --input and --output"])
    fails("convert", "--in", tmp / "c.safetensors", says=["needs --in and --out"])
    fails("extract-latents", "--data", tmp / "imgs", says=["needs --data, --vae and --out"])
    # --weights ema on a training checkpoint that holds only 'model': said, not silent
    torch.save({"model": load_file(ckpt / "checkpoints" / "0000001" / "ema.safetensors")}, tmp / "only_model.pt")
    p = run("nala", "convert", "--in", tmp / "only_model.pt", "--out", tmp / "om.safetensors")
    assert "has no 'ema' weights; using its 'model' weights" in p.stderr, p.stderr

    # training settings out of range: refused before the run folder is made
    for flags, says in [(["--model", "NaLaSiT-T/4", "--sample-steps", "1", "--sample-every", "1"], "--sample-steps must be at least 2"),
                        (["--max-nonfinite", "-1"], "--max-nonfinite"), (["--alpha", "-5"], "--alpha"), (["--lepe", "-3"], "--lepe"),
                        (["--sample-every", "-5"], "--sample-every")]:
        fails("train", *ENV_TINY, "--steps", "1", *flags, "--out", tmp / "bad", says=[says])
        assert not (tmp / "bad" / "config.json").exists(), flags
    # a data set smaller than one batch: refused before config.json binds the run folder to that batch
    fails("train", *ENV_TINY[:2], "--batch", "999999", *ENV_TINY[4:], "--steps", "1", "--out", tmp / "big", says=["smaller than one batch"])
    assert not (tmp / "big" / "config.json").exists()
    run("nala", "train", *ENV_TINY, "--steps", "1", "--out", tmp / "big")  # the corrected command runs there
    fails("train", *ENV_TINY, "--steps", "1", "--resume", tmp / "typo", says=["--resume", "holds no run"])
    assert not (tmp / "typo").exists()


def test_a_value_of_the_wrong_type_names_its_flag():
    """cxxopts' own message names the value alone ("Argument 'abc' failed to parse"): nala adds the flag,
    given as "--flag value" or "--flag=value". A number with more after it is refused (cxxopts read its
    number part)."""
    fails("sample", "--steps", "abc", says=["--steps: ", "abc"])
    fails("sample", "--ckpt", "x", "--seed=-x", says=["--seed: ", "-x"])
    fails("sample", "--ckpt", "x", "--seed", "-1", says=["--seed: ", "-1"])  # (unsigned; a value may begin with '-')
    fails("bench", "attention", "--reps", "many", says=["--reps: ", "many"])
    fails("sample", "--ckpt", "x", "--cfg-scale", "1.5x", says=["--cfg-scale: '1.5x' is not a number"])  # (read as 1.5 before)


def test_a_word_that_is_no_flag_is_refused():
    """`nala sample extra --ckpt F` went on without 'extra' (cxxopts keeps it aside): a mistyped or
    unquoted value was dropped silently. Every sub-command refuses it, naming it (convert takes two
    positional arguments, IN and OUT: a third is refused)."""
    for cmd in (["train"], ["sample"], ["eval"], ["extract-latents"], ["forward"], ["bench", "tail"], ["bench", "train"]):
        fails(*cmd, "stray", "--help", says=["unexpected argument 'stray'", "nala " + " ".join(cmd)])
    fails("convert", "in.pt", "out.safetensors", "stray", says=["unexpected argument 'stray'", "IN and OUT"])  # its two positional arguments, then one more
