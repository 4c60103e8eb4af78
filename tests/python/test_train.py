"""`nala train` end to end on the built-in Fashion-MNIST (tiny model, CPU): the loss falls; a
killed run resumed by re-running the same command reproduces the uninterrupted run's losses
exactly; a corrupt latest checkpoint is reported and the previous one used; a failed write
(file-size limit, as a full disk) loses nothing already saved; bad flags give clear errors; the
learning rate of every step under --lr-schedule / --lr-warmup / --lr-end equals torch.optim's
schedulers' (LinearLR warm-up, then CosineAnnealingLR or LinearLR), and a resume with other --steps
is refused where the rate decays over them; --grad-accum trains as the whole batch does."""
import json
import os
import resource
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import BUILD, run

FAST = ["--preset", "fashion-mnist-tiny", "--batch", "16", "--log-every", "1", "--sample-every", "0", "--workers", "1",
        "--device", "cpu", "--seed", "3"]


def losses(run_dir):
    out = {}
    with open(run_dir / "metrics.jsonl") as f:
        for line in f:
            j = json.loads(line)
            out[j["step"]] = j["loss"]
    return out


@pytest.mark.parametrize("model", ["NaLaDiT-T/4", "NaLaSiT-T/4"])  # DDPM and flow matching
def test_loss_falls(tmp, model):
    run("nala", "train", *FAST, "--model", model, "--steps", "100", "--ckpt-every", "100", "--log-every", "25", "--out", tmp / "r")
    L = losses(tmp / "r")
    print(model, "loss by step:", {k: round(v, 4) for k, v in L.items()})
    assert L[100] < 0.6 * L[25], L
    assert (tmp / "r" / "loss.png").stat().st_size > 1000
    assert (tmp / "r" / "checkpoints" / "0000100" / "ema.safetensors").exists()


def test_resume_reproduces_the_uninterrupted_run(tmp):
    run("nala", "train", *FAST, "--steps", "24", "--ckpt-every", "8", "--out", tmp / "a")
    # interrupted by a signal, then the same command again
    args = [str(BUILD / "nala"), "train", *FAST, "--steps", "24", "--ckpt-every", "4", "--out", str(tmp / "b")]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        m = tmp / "b" / "metrics.jsonl"
        if m.exists() and len(m.read_text().splitlines()) >= 6:
            break
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, err
    stopped = max(losses(tmp / "b"))
    assert 6 <= stopped < 24
    assert (tmp / "b" / "checkpoints" / f"{stopped:07d}" / "state.json").exists(), "no checkpoint written on SIGTERM"
    run("nala", "train", *FAST, "--steps", "24", "--ckpt-every", "4", "--out", tmp / "b")
    a, b = losses(tmp / "a"), losses(tmp / "b")
    assert sorted(a) == sorted(b) == list(range(1, 25))
    diffs = [abs(a[s] - b[s]) for s in a]
    print(f"stopped at step {stopped}; max |loss difference| over 24 steps: {max(diffs)}")
    assert max(diffs) == 0.0


def test_time_budget_logs_the_partial_window(tmp):
    # the demo's situation on a slow machine: --max-minutes ends the run before its first --log-every
    # steps; the stop still writes a metrics line (the mean loss of the steps since the last line),
    # loss.png and the TensorBoard scalars, all at the checkpoint's step
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    i = FAST.index("--log-every")
    args = FAST[:i] + FAST[i + 2:]
    p = run("nala", "train", *args, "--log-every", "100000", "--steps", "100000", "--max-minutes", "0.05", "--out", tmp / "r")
    assert "stopped early: time budget" in p.stdout, p.stdout
    ckpts = sorted((tmp / "r" / "checkpoints").iterdir())
    stopped = int(ckpts[-1].name)
    assert 0 < stopped < 100000
    lines = [json.loads(x) for x in (tmp / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [stopped] and np.isfinite(lines[0]["loss"]), lines
    assert (tmp / "r" / "loss.png").stat().st_size > 1000
    ea = EventAccumulator(str(tmp / "r" / "tb"), size_guidance={"scalars": 0})
    ea.Reload()
    assert [(e.step, np.float32(e.value)) for e in ea.Scalars("train/loss")] == [(stopped, np.float32(lines[0]["loss"]))]


def test_corrupt_latest_checkpoint_falls_back(tmp):
    run("nala", "train", *FAST, "--steps", "8", "--ckpt-every", "4", "--out", tmp / "r")
    latest = tmp / "r" / "checkpoints" / "0000008" / "model.safetensors"
    data = bytearray(latest.read_bytes())
    latest.write_bytes(bytes(data[: len(data) // 2]))
    p = run("nala", "train", *FAST, "--steps", "10", "--ckpt-every", "4", "--out", tmp / "r")
    assert "0000008" in p.stderr and "unreadable" in p.stderr
    assert "resuming from" in p.stderr and "0000004" in p.stderr
    assert max(losses(tmp / "r")) == 10


def test_unreadable_checkpoints_are_never_pruned(tmp):
    # the only checkpoint unreadable: refused (no restart from step 0 whose keep-last would delete it)
    run("nala", "train", *FAST, "--steps", "4", "--ckpt-every", "2", "--keep-last", "1", "--out", tmp / "a")
    only = tmp / "a" / "checkpoints" / "0000004" / "model.safetensors"
    only.write_bytes(only.read_bytes()[:100])
    p = run("nala", "train", *FAST, "--steps", "3", "--ckpt-every", "2", "--keep-last", "1", "--out", tmp / "a", check=False)
    assert p.returncode != 0 and "none of the 1 checkpoints" in p.stderr and "0000004" in p.stderr, p.stderr
    assert only.stat().st_size == 100 and sorted(x.name for x in (tmp / "a" / "checkpoints").iterdir()) == ["0000004"]
    # the latest unreadable, an earlier one loads: the latest is moved aside, and the run's new
    # checkpoints are kept by --keep-last (not deleted in favour of the unreadable later step)
    run("nala", "train", *FAST, "--steps", "8", "--ckpt-every", "2", "--keep-last", "2", "--out", tmp / "b")
    latest = tmp / "b" / "checkpoints" / "0000008" / "model.safetensors"
    latest.write_bytes(latest.read_bytes()[:100])
    p = run("nala", "train", *FAST, "--steps", "7", "--ckpt-every", "2", "--keep-last", "2", "--out", tmp / "b")
    assert "resuming from" in p.stderr and "0000006" in p.stderr and "moved the unreadable checkpoint" in p.stderr, p.stderr
    names = sorted(x.name for x in (tmp / "b" / "checkpoints").iterdir())
    assert names == ["0000006", "0000007", "0000008.unreadable"], names
    assert (tmp / "b" / "checkpoints" / "0000008.unreadable" / "model.safetensors").stat().st_size == 100


def test_failed_write_loses_nothing(tmp):
    run("nala", "train", *FAST, "--steps", "4", "--ckpt-every", "4", "--out", tmp / "r")
    good = tmp / "r" / "checkpoints" / "0000004"
    before = {f.name: f.read_bytes() for f in good.iterdir()}

    def limit():  # a "full disk": writes past 64 KiB fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    p = subprocess.run([str(BUILD / "nala"), "train", *FAST, "--steps", "8", "--ckpt-every", "8", "--out", str(tmp / "r")],
                       capture_output=True, text=True, preexec_fn=limit, timeout=600)
    assert p.returncode != 0
    assert "failed" in p.stderr, p.stderr
    after = {f.name: f.read_bytes() for f in good.iterdir()}
    assert after == before
    complete = [d.name for d in (tmp / "r" / "checkpoints").iterdir() if (d / "state.json").exists()]
    assert complete == ["0000004"], complete
    # and the run resumes from what was saved
    run("nala", "train", *FAST, "--steps", "8", "--ckpt-every", "8", "--out", tmp / "r")
    assert (tmp / "r" / "checkpoints" / "0000008" / "state.json").exists()


@pytest.mark.parametrize("flags,needle", [
    (["--batch", "0"], "--batch must be positive"),
    (["--lr", "-1"], "--lr must be positive"),
    (["--workers", "0"], "--workers must be positive, got 0"),
    (["--ema-decay", "1.5"], "--ema-decay must be in [0, 1)"),
    (["--precision", "fp8"], "--precision 'fp8'"),
    (["--model", "DiT-Q/2"], "unknown model 'DiT-Q/2'"),
    (["--preset", "nope"], "unknown preset 'nope'"),
    (["--data", "/nonexistent/folder"], "/nonexistent/folder"),
    (["--precision", "bf16"], "needs a CUDA device"),
    (["--lr-schedule", "step"], "--lr-schedule 'step' (known: constant, cosine, linear)"),
    (["--lr-warmup", "3"], "--lr-warmup must be in [0, --steps 2], got 3"),
    (["--lr-end", "1"], "--lr-end must be in [0, --lr"),
    (["--grad-accum", "3"], "--grad-accum must be a positive divisor of --batch 16, got 3"),
])
def test_invalid_config_values(tmp, flags, needle):
    p = run("nala", "train", *FAST, "--steps", "2", "--out", tmp / "r", *flags, check=False)
    assert p.returncode != 0 and needle in p.stderr, p.stderr


def test_a_bad_data_set_does_not_bind_the_run_directory(tmp):
    # a typo in --data fails before config.json is written, so the corrected command may use the same --out
    p = run("nala", "train", *FAST, "--steps", "2", "--out", tmp / "r", "--data", tmp / "typo", check=False)
    assert p.returncode != 0 and str(tmp / "typo") in p.stderr
    assert not (tmp / "r" / "config.json").exists()
    run("nala", "train", *FAST, "--steps", "2", "--out", tmp / "r")
    assert (tmp / "r" / "checkpoints" / "0000002" / "state.json").exists()


def test_resume_with_different_config_is_refused(tmp):
    run("nala", "train", *FAST, "--steps", "2", "--ckpt-every", "2", "--out", tmp / "r")
    p = run("nala", "train", *FAST, "--steps", "4", "--lr", "0.002", "--out", tmp / "r", check=False)
    assert p.returncode != 0 and "different configuration" in p.stderr


def torch_rates(schedule, lr, warmup, end, steps):
    """Every step's rate from torch.optim.lr_scheduler: LinearLR from lr / warmup up to lr over the
    warm-up, then CosineAnnealingLR or LinearLR down to `end` over the remaining steps."""
    import torch
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    after = {"cosine": lambda: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps - warmup, eta_min=end),
             "linear": lambda: torch.optim.lr_scheduler.LinearLR(opt, 1.0, end / lr, total_iters=steps - warmup),
             "constant": lambda: torch.optim.lr_scheduler.ConstantLR(opt, 1.0, total_iters=0)}[schedule]
    if warmup:
        first = torch.optim.lr_scheduler.LinearLR(opt, 1.0 / warmup, 1.0, total_iters=warmup - 1)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [first, after()], milestones=[warmup])
    else:
        sched = after()
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


@pytest.mark.parametrize("schedule,warmup", [("cosine", 3), ("linear", 0), ("constant", 4)])
def test_lr_schedule_equals_torch_schedulers(tmp, schedule, warmup):
    import warnings
    steps, lr, end = 12, 2e-3, 1e-4
    flags = ["--steps", steps, "--lr", lr, "--lr-schedule", schedule, "--lr-warmup", warmup, "--lr-end", end, "--ckpt-every", 5]
    run("nala", "train", *FAST, *flags, "--out", tmp / "a")
    got = {}
    for line in (tmp / "a" / "metrics.jsonl").read_text().splitlines():
        j = json.loads(line)
        got[j["step"]] = j["lr"]  # the rate of the step that ended at "step"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SequentialLR's deprecation notes
        want = torch_rates(schedule, lr, warmup, end, steps)
    assert sorted(got) == list(range(1, steps + 1))
    for k in range(steps):
        assert got[k + 1] == pytest.approx(want[k], rel=1e-9, abs=1e-15), (k, got[k + 1], want[k])
    if schedule != "constant":
        assert got[steps] < lr / 2  # it decayed
        # the decay is laid out over --steps: resuming a 7-step run with 12 would bend it, and is refused
        run("nala", "train", *FAST, flags[0], 7, *flags[2:], "--out", tmp / "r")
        p = run("nala", "train", *FAST, *flags, "--out", tmp / "r", check=False)
        assert p.returncode != 0 and "learning-rate schedule decays over them" in p.stderr, p.stderr


def test_grad_accum_trains_as_the_whole_batch(tmp):
    """--grad-accum 4: each step's 16 rows in 4 pieces of 4 give the losses and weights of the
    unsplit run, within float32 summation order."""
    from safetensors.numpy import load_file
    run("nala", "train", *FAST, "--steps", "6", "--ckpt-every", "6", "--out", tmp / "whole")
    p = run("nala", "train", *FAST, "--steps", "6", "--ckpt-every", "6", "--grad-accum", "4", "--out", tmp / "pieces")
    assert "in 4 pieces a step" in p.stderr, p.stderr
    a, b = losses(tmp / "whole"), losses(tmp / "pieces")
    assert sorted(a) == sorted(b) == list(range(1, 7))
    np.testing.assert_allclose([b[s] for s in a], [a[s] for s in a], rtol=1e-5)
    wa = load_file(tmp / "whole" / "checkpoints" / "0000006" / "model.safetensors")
    wb = load_file(tmp / "pieces" / "checkpoints" / "0000006" / "model.safetensors")
    worst = max(float(np.abs(wa[k] - wb[k]).max()) for k in wa)
    print("max |weight difference| after 6 steps:", worst)
    assert worst < 1e-5
