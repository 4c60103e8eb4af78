"""One writer per output (flock on OUT/.nala.lock): a second `nala train` on a running run directory
is refused before it writes anything and the first run ends exactly as an undisturbed one; a
SIGKILLed holder leaves no stale lock; `nala sample --npz` and `nala extract-latents` refuse an
output another process holds."""
import fcntl
import os
import signal
import subprocess
import time

import numpy as np
from safetensors.numpy import load_file

from conftest import BUILD, run

TRAIN = ["train", "--preset", "fashion-mnist-tiny", "--batch", "16", "--log-every", "5", "--ckpt-every", "5", "--sample-every", "0",
         "--workers", "1", "--device", "cpu"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def start(*args):
    return subprocess.Popen([str(BUILD / "nala"), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def wait_for_holder(lock, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if lock.exists() and lock.read_text().strip() == str(proc.pid):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{lock} never named pid {proc.pid}")


def final_weights(run_dir):
    ck = sorted((run_dir / "checkpoints").iterdir())[-1]
    return ck.name, load_file(str(ck / "model.safetensors")), load_file(str(ck / "ema.safetensors"))


def test_second_trainer_is_refused_and_the_first_is_undisturbed(tmp):
    a = start(*TRAIN, "--steps", "30", "--out", tmp / "r")
    wait_for_holder(tmp / "r" / ".nala.lock", a)
    b = subprocess.run([str(BUILD / "nala"), *map(str, TRAIN), "--steps", "30", "--out", str(tmp / "r")], capture_output=True, text=True,
                       env=ENV, timeout=300)
    out_a, err_a = a.communicate(timeout=600)
    assert a.returncode == 0, err_a
    print(b.stderr)
    assert b.returncode != 0
    assert str(tmp / "r") in b.stderr and f"pid {a.pid}" in b.stderr
    alone = start(*TRAIN, "--steps", "30", "--out", tmp / "alone")  # the same environment (thread count) as the first run
    assert alone.wait(timeout=600) == 0, alone.communicate()
    steps = lambda d: [l for l in (d / "metrics.jsonl").read_text().splitlines()]
    losses = lambda d: [__import__("json").loads(l)["loss"] for l in steps(d)]
    assert len(steps(tmp / "r")) == 6 and losses(tmp / "r") == losses(tmp / "alone")
    na, ma, ea = final_weights(tmp / "r")
    nb, mb, eb = final_weights(tmp / "alone")
    assert na == nb == "0000030"
    for k in ma:
        assert np.array_equal(ma[k], mb[k]) and np.array_equal(ea[k], eb[k]), k


def test_sigkilled_holder_leaves_no_stale_lock(tmp):
    a = start(*TRAIN, "--steps", "100000", "--out", tmp / "r")
    wait_for_holder(tmp / "r" / ".nala.lock", a)
    ck = tmp / "r" / "checkpoints"
    # committed checkpoints only: a writer mid-write has NNNNNNN.tmp.PID (state.json included) beside them
    committed = lambda: [int(c.name) for c in ck.iterdir() if c.name.isdigit() and (c / "state.json").exists()] if ck.exists() else []
    t0 = time.time()
    while not committed():
        assert time.time() - t0 < 300 and a.poll() is None
        time.sleep(0.1)
    a.send_signal(signal.SIGKILL)
    a.wait()
    done = max(committed())
    # what a writer killed mid-write leaves behind: removed by the next holder of the lock
    (ck / "0099999.tmp.999999").mkdir()
    (ck / f"{done:07d}.old.999999").mkdir()
    (tmp / "r" / "config.json.tmp.999999").write_text("{")
    p = run("nala", *TRAIN, "--steps", str(done + 5), "--out", tmp / "r")
    assert not any(".tmp." in x.name or ".old." in x.name for x in list(ck.iterdir()) + list((tmp / "r").iterdir())), p.stderr
    assert f"resuming from" in p.stderr
    assert (tmp / "r" / "checkpoints" / f"{done + 5:07d}" / "state.json").exists()


def held(dirpath):
    """Holds dirpath/.nala.lock as another process would."""
    dirpath.mkdir(parents=True, exist_ok=True)
    f = open(dirpath / ".nala.lock", "w")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.write("4242\n")
    f.flush()
    return f


def test_sample_npz_and_extract_latents_refuse_a_held_output(tmp):
    run("nala", *TRAIN, "--steps", "2", "--out", tmp / "r")
    f = held(tmp / "s.npz.parts")
    p = run("nala", "sample", "--ckpt", tmp / "r" / "checkpoints" / "0000002", "--num-samples", "4", "--batch-size", "2", "--steps", "3",
            "--npz", tmp / "s.npz", "--device", "cpu", check=False)
    print(p.stderr)
    assert p.returncode != 0 and "pid 4242" in p.stderr and str(tmp / "s.npz") in p.stderr
    assert not (tmp / "s.npz").exists() and [x.name for x in (tmp / "s.npz.parts").iterdir()] == [".nala.lock"]
    f.close()  # released: the same command now runs
    run("nala", "sample", "--ckpt", tmp / "r" / "checkpoints" / "0000002", "--num-samples", "4", "--batch-size", "2", "--steps", "3",
        "--npz", tmp / "s.npz", "--device", "cpu")
    assert np.load(tmp / "s.npz")["arr_0"].shape == (4, 32, 32, 3)
    g = held(tmp / "lat")
    p = run("nala", "extract-latents", "--data", tmp / "imgs", "--vae", tmp / "vae.safetensors", "--image-size", "32", "--out", tmp / "lat",
            "--device", "cpu", check=False)
    print(p.stderr)
    assert p.returncode != 0 and "pid 4242" in p.stderr and "latent folder" in p.stderr
    assert [x.name for x in (tmp / "lat").iterdir()] == [".nala.lock"]
    g.close()
