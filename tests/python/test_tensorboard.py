"""`nala train`'s TensorBoard event files read back with TensorBoard's own reader (its event
accumulator) and, record by record, with TensorBoard's CRC-32C and protocol buffer classes: every
metrics.jsonl field is a scalar with the same steps and values (float32), the sample grids are
images of the grid PNG's size, a resumed run leaves each step once in the files, and
--tensorboard false writes none. The run killed at random moments is in test_sigkill.py."""
import json
import struct

import numpy as np
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from conftest import run

TRAIN = ["train", "--preset", "fashion-mnist-tiny", "--model", "DiT-T/4", "--batch", "8", "--log-every", "2", "--sample-every", "4",
         "--sample-steps", "2", "--workers", "1", "--device", "cpu"]


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def raw_events(tb_dir):
    """Every record of every event file, in TensorBoard's file order, CRCs checked; (file, Event)."""
    out = []
    for f in sorted(tb_dir.glob("events.out.tfevents.*")):
        b = f.read_bytes()
        i = 0
        while i < len(b):
            (n,) = struct.unpack_from("<Q", b, i)
            assert struct.unpack_from("<I", b, i + 8)[0] == masked_crc32c(b[i:i + 8]), f"{f.name}: length CRC at {i}"
            data = b[i + 12:i + 12 + n]
            assert struct.unpack_from("<I", b, i + 12 + n)[0] == masked_crc32c(data), f"{f.name}: data CRC at {i}"
            out.append((f.name, event_pb2.Event.FromString(data)))
            i += 12 + n + 4
    return out


def check_equal_to_metrics(run_dir):
    """The accumulator's scalars equal metrics.jsonl; the raw files hold each (tag, step) once."""
    lines = metrics(run_dir)
    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    keys = sorted({k for line in lines for k in line if k != "step"})
    assert sorted(acc.Tags()["scalars"]) == sorted(f"train/{k}" for k in keys)
    for k in keys:
        got = [(e.step, e.value) for e in acc.Scalars(f"train/{k}")]
        want = [(line["step"], np.float32(np.nan if line[k] is None else line[k])) for line in lines]
        assert [s for s, _ in got] == [s for s, _ in want], k
        np.testing.assert_array_equal(np.array([v for _, v in got], np.float32), np.array([v for _, v in want], np.float32), err_msg=k)
    seen = set()
    for name, e in raw_events(run_dir / "tb"):
        for v in e.summary.value:
            assert (v.tag, e.step) not in seen, f"{name}: {v.tag} at step {e.step} twice"
            seen.add((v.tag, e.step))
    return acc


def test_scalars_and_grids_equal_the_run_outputs(tmp):
    run("nala", *TRAIN, "--steps", "8", "--ckpt-every", "8", "--out", tmp / "r")
    acc = check_equal_to_metrics(tmp / "r")
    assert {"train/loss", "train/grad_norm", "train/lr", "train/img_per_s", "train/images_seen"} <= set(acc.Tags()["scalars"])
    images = acc.Images("samples/ema_grid")
    assert [e.step for e in images] == [4, 8]
    grid = Image.open(tmp / "r" / "samples" / "0000008.png")
    assert (images[-1].width, images[-1].height) == grid.size
    assert images[-1].encoded_image_string == (tmp / "r" / "samples" / "0000008.png").read_bytes()
    events = raw_events(tmp / "r" / "tb")
    assert events[0][1].file_version == "brain.Event:2"
    assert events[1][1].session_log.status == event_pb2.SessionLog.START and events[1][1].step == 1


def test_resume_drops_the_steps_after_the_checkpoint(tmp):
    # a run that logged past its last checkpoint (steps 5 and 6 after the checkpoint at 4), as a kill
    # would leave it: the rerun logs 5 and 6 again, and the files must hold them once
    r = tmp / "r"
    run("nala", *TRAIN, "--steps", "6", "--ckpt-every", "4", "--out", r)
    ck = r / "checkpoints"
    (ck / "0000006").rename(tmp / "later-checkpoint")  # as if killed before the step-6 checkpoint
    first = metrics(r)
    run("nala", *TRAIN, "--steps", "10", "--ckpt-every", "4", "--out", r)
    assert [m["step"] for m in metrics(r)] == [2, 4, 6, 8, 10]
    assert metrics(r)[:2] == first[:2]
    check_equal_to_metrics(r)
    files = sorted((r / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 2  # the first run's file (cut at step 4) and the resumed run's
    steps_first = {e.step for name, e in raw_events(r / "tb") if name == files[0].name and e.summary.value}
    assert max(steps_first) == 4


def test_cut_record_is_dropped_on_resume(tmp):
    r = tmp / "r"
    run("nala", *TRAIN, "--steps", "4", "--ckpt-every", "4", "--out", r)
    f = sorted((r / "tb").glob("events.out.tfevents.*"))[0]
    f.write_bytes(f.read_bytes() + struct.pack("<Q", 1000) + b"\x00\x01")  # half a record, as a kill mid-write leaves
    run("nala", *TRAIN, "--steps", "6", "--ckpt-every", "2", "--out", r)
    check_equal_to_metrics(r)  # raw_events would fail on the cut record


def test_tensorboard_false_writes_no_event_files(tmp):
    run("nala", *TRAIN, "--steps", "2", "--ckpt-every", "2", "--tensorboard", "false", "--out", tmp / "r")
    assert not (tmp / "r" / "tb").exists()
    assert (tmp / "r" / "metrics.jsonl").exists()
