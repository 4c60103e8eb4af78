"""SIGKILL at random moments never loses or corrupts work: a training run killed up to 10 times (at
least MIN_KILLS; some of the kills while a checkpoint is being written) and rerun each time ends with weights, optimizer
state equal to an uninterrupted run's and a metrics log (and TensorBoard files) with every step once; the same for `nala sample --num-samples` (an
identical .npz) and `nala extract-latents` (identical shards). Resumes with other settings are
refused, naming the setting."""
import hashlib
import json
import os
import subprocess
import time

import numpy as np
from PIL import Image
from safetensors.numpy import load_file

from conftest import BUILD, run
from test_tensorboard import check_equal_to_metrics
from test_vae import make_vae

KILLS = 10
MIN_KILLS = 2  # at least one resume of a resumed run; a fast machine finishes the small jobs in few kills
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def nala(*args, check=True):
    p = subprocess.run([str(BUILD / "nala"), *map(str, args)], capture_output=True, text=True, env=ENV, timeout=900)
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def kill_repeatedly(args, seed, leftovers=None, span=(0.3, 2.5), finished=None, progress=None):
    """Starts `nala args` and SIGKILLs it at random moments, KILLS times, then lets it finish.
    leftovers(): True while a write is visibly in progress; every other kill waits for one.
    Returns (kills, hits): how many kills landed before the run finished, and how many of them hit
    such a write. A run that finishes early ends the kills: callers require at least MIN_KILLS, so
    that the compared output really comes from resumed runs. finished(): True once the output is
    complete (a kill can land after it is in place, before the process exits: a finished .npz is
    not sampled again, so no further run is started). progress(): how many outputs are complete; where given,
    each run is killed once 1 to 3 more are (or, every other run, at a write in progress, as above) instead of
    at a random time: a job shorter than span (extract-latents' 16 shards take ≈ 0.3 s after ≈ 0.3 s of start-up)
    would otherwise finish before its second kill."""
    rng = np.random.default_rng(seed)
    kills = hits = 0
    while True:
        if finished and finished():
            return kills, hits
        p = subprocess.Popen([str(BUILD / "nala"), *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
        if kills == KILLS:
            _, err = p.communicate(timeout=900)
            assert p.returncode == 0, err[-3000:]
            return kills, hits
        deadline = time.time() + rng.uniform(*span)
        if progress:
            target = progress() + int(rng.integers(1, 4))
            aim = leftovers and kills % 2 == 1
            deadline += 60  # (a safety bound: the process ends or the outputs come first)
            while time.time() < deadline and p.poll() is None and progress() < target and not (aim and leftovers()):
                time.sleep(0.001)
        elif leftovers and kills % 2 == 1:  # aim at a write in progress
            deadline += 5
            while time.time() < deadline and p.poll() is None and not leftovers():
                time.sleep(0.001)
        else:
            while time.time() < deadline and p.poll() is None:
                time.sleep(0.005)
        if p.poll() is not None:  # finished before the kill: nothing left to interrupt
            assert p.returncode == 0, p.communicate()[1][-3000:]
            return kills, hits
        p.kill()
        p.communicate()
        kills += 1
        hits += bool(leftovers and leftovers())


def test_training_killed_ten_times_equals_uninterrupted(tmp):
    args = ["train", "--preset", "fashion-mnist-tiny", "--batch", "16", "--steps", "60", "--ckpt-every", "1", "--keep-last", "2",
            "--log-every", "5", "--sample-every", "0", "--workers", "1", "--device", "cpu"]
    nala(*args, "--out", tmp / "alone")
    ck = tmp / "killed" / "checkpoints"
    writing = lambda: ck.exists() and any(".tmp." in x.name or ".old." in x.name for x in ck.iterdir())
    kills, hits = kill_repeatedly([*args, "--out", tmp / "killed"], seed=1, leftovers=writing)
    print(f"{kills} kills, {hits} of them while a checkpoint was being written")
    assert kills >= MIN_KILLS and hits >= 1
    for name in ("model", "ema", "optimizer"):
        a = load_file(str(tmp / "alone" / "checkpoints" / "0000060" / f"{name}.safetensors"))
        b = load_file(str(ck / "0000060" / f"{name}.safetensors"))
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]), (name, k)
    # every log step once, in order (the first line after a resume averages the steps since the checkpoint)
    steps = lambda d: [j["step"] for j in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())]
    assert steps(tmp / "killed") == steps(tmp / "alone") == list(range(5, 61, 5))
    # the TensorBoard files say what metrics.jsonl says, each step once, whatever the kills cut
    check_equal_to_metrics(tmp / "killed")


def test_sampling_killed_ten_times_gives_the_same_npz(tmp):
    nala("train", "--preset", "fashion-mnist-tiny", "--batch", "16", "--steps", "2", "--sample-every", "0", "--device", "cpu", "--out", tmp / "r")
    args = lambda npz, steps=25: ["sample", "--ckpt", tmp / "r", "--sampler", "sde-euler", "--steps", steps, "--num-samples", "48",
                                  "--batch-size", "4", "--device", "cpu", "--npz", npz]
    nala(*args(tmp / "alone.npz"))
    parts = tmp / "killed.npz.parts"
    writing = lambda: parts.exists() and any(".tmp." in x.name for x in parts.iterdir())
    kills, hits = kill_repeatedly(args(tmp / "killed.npz"), seed=2, leftovers=writing, span=(0.3, 1.5),
                                  finished=lambda: (tmp / "killed.npz").exists())
    print(f"{kills} kills, {hits} of them while a batch was being written")
    assert kills >= MIN_KILLS
    a, b = np.load(tmp / "alone.npz"), np.load(tmp / "killed.npz")
    assert np.array_equal(a["arr_0"], b["arr_0"]) and np.array_equal(a["arr_1"], b["arr_1"])
    # an interrupted batch resumed with another setting is refused, naming it
    parts = tmp / "x.npz.parts"
    p = subprocess.Popen([str(BUILD / "nala"), *map(str, args(tmp / "x.npz"))], env=ENV, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not (parts.exists() and any(x.name.startswith("batch_") for x in parts.iterdir())):
        assert time.time() - t0 < 120 and p.poll() is None
        time.sleep(0.01)
    p.kill()
    p.communicate()
    r = nala(*args(tmp / "x.npz", steps=24), check=False)
    assert r.returncode != 0 and "steps: 25 before, 24 now" in r.stderr, r.stderr
    r = nala(*args(tmp / "x.npz"), "--dtype", "fp8", check=False)  # the same model dtype (fp32 on the CPU), its GEMMs in FP8
    assert r.returncode != 0 and "linear_gemm: (not recorded) before, fp8" in r.stderr, r.stderr


def test_extract_latents_killed_ten_times_gives_the_same_shards(tmp):
    rng = np.random.default_rng(0)
    for c in ("cat", "ant"):
        (tmp / "imgs" / c).mkdir(parents=True)
        for i in range(8):
            Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(tmp / "imgs" / c / f"{i}.png")
    _, vae = make_vae(tmp)
    args = lambda seed=3: ["extract-latents", "--data", tmp / "imgs", "--vae", vae, "--image-size", "32", "--shard-size", "1",
                           "--batch-size", "1", "--flip", "both", "--latent", "sample", "--seed", seed, "--device", "cpu"]
    nala(*args(), "--out", tmp / "alone")
    out = tmp / "killed"
    writing = lambda: out.exists() and any(".tmp." in x.name for x in out.iterdir())
    shards = lambda: len(list(out.glob("latents_*.safetensors"))) if out.exists() else 0
    kills, hits = kill_repeatedly([*args(), "--out", out], seed=3, leftovers=writing, progress=shards)
    print(f"{kills} kills, {hits} of them while a shard was being written")
    assert kills >= MIN_KILLS
    digest = lambda d: {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.glob("latents_*.safetensors"))}
    assert len(digest(tmp / "alone")) == 16 and digest(out) == digest(tmp / "alone")
    r = nala(*args(seed=4), "--out", out, check=False)
    assert r.returncode != 0 and "seed: 3 before, 4 now" in r.stderr, r.stderr
