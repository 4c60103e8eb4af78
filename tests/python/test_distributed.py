"""Data-parallel training on c10d with Gloo over loopback: two processes under torchrun train the
same as one process with the same global batch (losses and weights within floating-point
tolerance); a killed rank ends the job with a clear error, not a hang; a resume needs no shared
file system (rank 0 sends the checkpoint's state to the others); --grad-accum with several
processes trains as one process on the whole batch does."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
from safetensors.numpy import load_file

from conftest import BUILD, run

ARGS = ["train", "--preset", "fashion-mnist-tiny", "--batch", "16", "--steps", "6", "--log-every", "1", "--sample-every", "0",
        "--workers", "1", "--device", "cpu", "--seed", "5", "--ckpt-every", "6"]


def losses(d):
    return [json.loads(l)["loss"] for l in open(d / "metrics.jsonl")]


def torchrun():
    return [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--no-python"]


def test_two_processes_equal_one(tmp):
    run("nala", *ARGS, "--out", tmp / "one")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([*torchrun(), "--nproc-per-node", "2", "--master-port", "29651", str(BUILD / "nala"), *ARGS, "--out", str(tmp / "two")],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "on 2 process(es)" in p.stderr
    a, b = np.array(losses(tmp / "one")), np.array(losses(tmp / "two"))
    print("1 process:", a.round(6), "\n2 processes:", b.round(6))
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    wa = load_file(tmp / "one" / "checkpoints" / "0000006" / "model.safetensors")
    wb = load_file(tmp / "two" / "checkpoints" / "0000006" / "model.safetensors")
    worst = max(float(np.abs(wa[k] - wb[k]).max()) for k in wa)
    print("max |weight difference| after 6 steps:", worst)
    assert worst < 1e-4


def test_grad_accum_on_two_processes_equals_one(tmp):
    # each rank's 8 rows in 2 pieces of 4, each bucket all-reduced once, during the second piece's
    # backward (small buckets: several, started as they fill) or after it (--overlap-grads false)
    run("nala", *ARGS, "--out", tmp / "one")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    wa = load_file(tmp / "one" / "checkpoints" / "0000006" / "model.safetensors")
    for name, extra, port in (("overlap", ["--bucket-mb", "0.05"], "29659"), ("after", ["--overlap-grads", "false"], "29669")):
        p = subprocess.run([*torchrun(), "--nproc-per-node", "2", "--master-port", port, str(BUILD / "nala"), *ARGS, "--grad-accum", "2", *extra,
                            "--out", str(tmp / name)], capture_output=True, text=True, timeout=600, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "on 2 process(es) in 2 pieces a step" in p.stderr, p.stderr[-3000:]
        if name == "overlap":
            m = re.search(r"(\d+) gradient bucket\(s\) of about [0-9.]+ MiB, (\d+) of them all-reduced during the backward", p.stderr)
            assert m and int(m.group(1)) > 1 and int(m.group(2)) >= 1, p.stderr[-3000:]
        a, b = np.array(losses(tmp / "one")), np.array(losses(tmp / name))
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
        wb = load_file(tmp / name / "checkpoints" / "0000006" / "model.safetensors")
        worst = max(float(np.abs(wa[k] - wb[k]).max()) for k in wa)
        print(f"2 processes x 2 pieces ({name}): max |weight difference| after 6 steps:", worst)
        assert worst < 1e-4
    bad = subprocess.run([*torchrun(), "--nproc-per-node", "2", "--master-port", "29671", str(BUILD / "nala"), *ARGS, "--grad-accum", "16",
                          "--out", str(tmp / "bad")], capture_output=True, text=True, timeout=600, env=env)
    assert bad.returncode != 0 and "--grad-accum 16 does not divide each process's batch of 8" in bad.stderr, bad.stderr[-3000:]


def test_killed_rank_ends_the_job(tmp):
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1", MASTER_PORT="29653",
                   OMP_NUM_THREADS="1")
        args = [str(BUILD / "nala"), *ARGS, "--steps", "1000", "--out", str(tmp / "run"), "--dist-timeout", "30"]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.time() + 300
    while time.time() < deadline:
        m = tmp / "run" / "metrics.jsonl"
        if m.exists() and len(m.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    procs[1].send_signal(signal.SIGKILL)
    t0 = time.time()
    out, err = procs[0].communicate(timeout=120)
    took = time.time() - t0
    print(f"rank 0 ended {took:.1f} s after rank 1 was killed, exit code {procs[0].returncode}: {err.strip().splitlines()[-1]}")
    assert procs[0].returncode not in (0, None)
    assert "rank 0" in err and "another rank died or became unreachable" in err
    assert took < 60


def launch(rank, out, port, *extra):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               OMP_NUM_THREADS="1")
    return subprocess.Popen([str(BUILD / "nala"), *ARGS, *extra, "--out", str(out), "--dist-timeout", "60"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_resume_without_a_shared_file_system(tmp):
    """Rank 1 runs in a directory of its own (as on a node whose disk rank 0's checkpoints never
    reach): before, it would start from step 0 while rank 0 resumed from step 6."""
    run("nala", *ARGS, "--steps", "9", "--out", tmp / "one")
    for steps, port in (("6", 29655), ("9", 29657)):
        procs = [launch(0, tmp / "rank0", port, "--steps", steps), launch(1, tmp / f"rank1_{steps}", port, "--steps", steps)]
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, err[-3000:]
    a, b = np.array(losses(tmp / "one")), np.array(losses(tmp / "rank0"))
    print("1 process, 9 steps:", a.round(6), "\n2 processes, 6 steps then resumed to 9:", b.round(6))
    assert len(b) == 9
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    assert not (tmp / "rank1_9" / "checkpoints").exists()  # only rank 0 writes


def train_two(out, port, *extra):
    """Two ranks under one torchrun agent; returns its stderr."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([*torchrun(), "--nproc-per-node", "2", "--master-port", str(port), str(BUILD / "nala"), *ARGS, *extra,
                        "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stderr


def test_overlapped_all_reduce_equals_the_one_after_the_backward(tmp):
    """Buckets all-reduced during the backward (small buckets, so there are many) give the same
    weights, bit for bit, as one all-reduce after the backward: the same sums of the same numbers."""
    err = train_two(tmp / "overlap", 29661, "--bucket-mb", "0.25")
    line = next(l for l in err.splitlines() if l.startswith("data parallel:"))
    print(line)
    n_buckets, n_started = [int(w) for w in line.replace("(s)", "").split() if w.isdigit()][:2]
    assert n_buckets >= 10 and n_started == n_buckets, line  # every bucket left before the backward ended
    err = train_two(tmp / "after", 29663, "--overlap-grads", "false")
    assert "after the backward (--overlap-grads false)" in err
    wa = load_file(tmp / "overlap" / "checkpoints" / "0000006" / "model.safetensors")
    wb = load_file(tmp / "after" / "checkpoints" / "0000006" / "model.safetensors")
    oa = load_file(tmp / "overlap" / "checkpoints" / "0000006" / "optimizer.safetensors")
    ob = load_file(tmp / "after" / "checkpoints" / "0000006" / "optimizer.safetensors")
    assert wa.keys() == wb.keys() and oa.keys() == ob.keys()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    for k in oa:
        np.testing.assert_array_equal(oa[k], ob[k], err_msg=k)
    assert losses(tmp / "overlap") == losses(tmp / "after")


def two_nodes(out, ports, *extra):
    """Two torchrun agents, --nnodes 2, one process each, on loopback: what two machines run."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([*torchrun(), "--nnodes", "2", "--node-rank", str(r), "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                               "--master-port", str(ports), str(BUILD / "nala"), *ARGS, *extra, "--out", str(out / f"node{r}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    return out / "node0"


def test_two_node_launch_trains_and_resumes(tmp):
    """torchrun --nnodes 2 --node-rank 0|1 on one machine: trains 6 steps, then resumes to 9, equal
    to one process training 9 steps."""
    run("nala", *ARGS, "--steps", "9", "--out", tmp / "one")
    two_nodes(tmp, 29665, "--steps", "6")
    node0 = two_nodes(tmp, 29667, "--steps", "9")
    a, b = np.array(losses(tmp / "one")), np.array(losses(node0))
    print("1 process, 9 steps:", a.round(6), "\n2 nodes, 6 steps then resumed to 9:", b.round(6))
    assert len(b) == 9
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    assert not (tmp / "node1" / "checkpoints").exists()  # only the global rank 0 writes
