#!/usr/bin/env python3
"""Quality curves of training runs on Fashion-MNIST: evaluate every checkpoint of a run, then plot
FD-FMNIST (and the other metrics) against images seen and against training seconds, one line per
run, and print the final table with the mean and spread over seeds.

  experiment_curves.py eval RUN [RUN ...] --classifier C [--samples 5000] [--cfg-scale 1.5]
                                          [--nala build/nala] [--device cuda] [--batch-size 1000]
  experiment_curves.py plot RUN [RUN ...] --out DIR [--title TEXT]

eval: for each checkpoint RUN/checkpoints/STEP not yet evaluated, `nala sample` draws --samples
images with the family's fixed sampler (DiT / NaLaDiT: DPM-Solver++, 25 steps; SiT / NaLaSiT: Heun
ODE, 13 grid points; --dit-sampler / --sit-sampler change them), unguided and with --cfg-scale (not
with --unguided-only), and `nala eval --fmnist` measures them (the test split's features once a call and image size: --ref-cache); the
results go to RUN/evals/STEP_unguided.json and STEP_cfg<scale>.json (written to a temporary name,
then renamed: an interrupted eval leaves nothing half-written and is resumed by running it again).
RUN may also be a run of scripts/official_fmnist.py (the official DiT / SiT trainers): its EMA
weights are sampled by nala the same way.
plot: reads RUN/metrics.jsonl (images seen, steps per second of each logging window: training
seconds are the sum of the windows' step times) and RUN/evals/*.json; writes fd_vs_images.png,
fd_vs_seconds.png, metrics_vs_images.png and table.md to --out. Runs whose directory names differ
only by a trailing seed suffix (-s1, -s2, ...) are one model: the table gives their mean and half
their range; steps.md gives FD-FMNIST at every checkpoint all of a model's seeds reached (mean, min,
max over the seeds), and where a model has two seeds or more fd_seeds_vs_images.png draws each
model's mean curve with its min-max band.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SAMPLERS = {"sit": ["--sampler", "ode-heun", "--steps", "13"], "dit": ["--sampler", "dpm++", "--steps", "25"]}
METRICS = [("fd_fmnist", "FD-FMNIST"), ("precision_fmnist", "precision"), ("recall_fmnist", "recall"),
           ("is_fmnist", "IS-FMNIST"), ("class_accuracy", "class accuracy")]


def fail(msg):
    sys.exit(f"experiment_curves: {msg}")


def checkpoints(run):
    d = run / "checkpoints"
    if not d.is_dir():
        fail(f"{run} has no checkpoints/ folder (is it a `nala train --out` directory?)")
    out = []
    for c in sorted(d.iterdir()):
        state = c / "state.json"
        if c.is_dir() and state.is_file():
            s = json.loads(state.read_text())
            out.append((int(s["step"]), c, s))
    return out


def family(model_name):
    return "sit" if "SiT" in model_name else "dit"


def write_json_atomic(path, obj):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def run_cmd(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def evaluate(args):
    # the test split's classifier features, computed by the first `nala eval` of this call and
    # reused by the others (--ref-cache; they cost most of an evaluation on a CPU)
    with tempfile.TemporaryDirectory(prefix="nala-fmnist-ref-") as cache:
        evaluate_runs(args, Path(cache) / "reference_features.safetensors")


def evaluate_runs(args, ref_cache):
    modes = [("unguided", 1.0, [])] + ([] if args.unguided_only else [(f"cfg{args.cfg_scale:g}", args.cfg_scale, [])])
    samplers = {"dit": args.dit_sampler.split(), "sit": args.sit_sampler.split()}
    for run in map(Path, args.runs):
        evals = run / "evals"
        evals.mkdir(exist_ok=True)
        found = checkpoints(run)
        for step, ckpt, state in found:
            # --fp8-last: the last checkpoint also sampled with the linear layers in FP8 (same noise as "unguided")
            last = args.fp8_last and step == found[-1][0] and not (run / "official.json").is_file()
            for mode, scale, extra in modes + ([("unguided-fp8", 1.0, ["--dtype", "fp8"])] if last else []):
                dst = evals / f"{step:07d}_{mode}.json"
                if dst.exists():
                    continue
                with tempfile.TemporaryDirectory(dir=evals) as tmp:
                    npz, ev = Path(tmp) / "samples.npz", Path(tmp) / "eval.json"
                    sampler = samplers[family(state["model"])]
                    # a nala run, or the EMA weights of scripts/official_fmnist.py under their official names
                    source = (["--ckpt", ckpt] if not (run / "official.json").is_file() else
                              ["--model", state["model"], "--ckpt", ckpt / "ema.safetensors", "--vae", "none"])
                    run_cmd([args.nala, "sample", *source, *sampler, "--cfg-scale", scale,
                             "--num-samples", args.samples, "--batch-size", args.batch_size, "--seed", args.seed,
                             "--npz", npz, "--device", args.device, *extra])
                    run_cmd([args.nala, "eval", "--fmnist", "--sample", npz, "--classifier", args.classifier,
                             "--device", args.device, "--json", ev, "--ref-cache", ref_cache])
                    result = json.loads(ev.read_text())
                result.update({"step": step, "images_seen": state["images_seen"], "model": state["model"], "mode": mode,
                               "cfg_scale": scale, "samples": args.samples, "sampler": " ".join(sampler)})
                write_json_atomic(dst, result)
                print(f"{run.name} step {step} {mode}: FD-FMNIST {result['fd_fmnist']:.3f}", flush=True)


def read_run(run):
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        fail(f"{run} has no metrics.jsonl")
    seconds_at, total, prev = {}, 0.0, 0
    for line in metrics.read_text().splitlines():
        m = json.loads(line)
        step = int(m["step"])
        if m.get("steps_per_s", 0) > 0:
            total += (step - prev) / m["steps_per_s"]
        seconds_at[step] = total
        prev = step
    curves = {}
    for f in sorted((run / "evals").glob("*.json")) if (run / "evals").is_dir() else []:
        e = json.loads(f.read_text())
        step = int(e["step"])
        # training seconds at the checkpoint: the last logging window at or before it
        known = [s for s in seconds_at if s <= step]
        e["train_seconds"] = seconds_at[max(known)] if known else 0.0
        curves.setdefault(e["mode"], []).append(e)
    for v in curves.values():
        v.sort(key=lambda e: e["step"])
    if not curves:
        fail(f"{run} has no evaluations: run `experiment_curves.py eval {run} --classifier ...` first")
    return curves


def model_label(run):
    return re.sub(r"-s\d+$", "", run.name)


def plot(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    runs = {Path(r): read_run(Path(r)) for r in args.runs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    labels = sorted({model_label(r) for r in runs})
    colors = {lab: plt.get_cmap("tab10")(i % 10) for i, lab in enumerate(labels)}
    styles = {"unguided": "-"}   # guided: dashed; a one-checkpoint mode (unguided-fp8): a marker alone

    # 200k, not 200000: six-digit ticks ran into each other (2026-12-04)
    thousands = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:g}")

    def curve_plot(x_key, x_label, metric_keys, path):
        fig, axes = plt.subplots(1, len(metric_keys), figsize=(5.2 * len(metric_keys), 4), squeeze=False)
        for ax, (key, name) in zip(axes[0], metric_keys):
            for run, curves in runs.items():
                for mode, pts in sorted(curves.items()):
                    one = len(pts) == 1
                    ax.plot([p[x_key] for p in pts], [p[key] for p in pts], "" if one else styles.get(mode, "--"),
                            marker="x" if one else "o", ms=6 if one else 3,
                            color=colors[model_label(run)], label=f"{run.name} ({mode})")
            if key == "fd_fmnist":
                ax.set_yscale("log")   # FD falls over a decade between the first and last checkpoints
            ax.set_xlabel(x_label)
            ax.set_ylabel(name)
            ax.xaxis.set_major_formatter(thousands)
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        if args.title:
            fig.suptitle(args.title)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    curve_plot("images_seen", "images seen", METRICS[:1], out / "fd_vs_images.png")
    curve_plot("train_seconds", "training seconds (GPU)", METRICS[:1], out / "fd_vs_seconds.png")
    curve_plot("images_seen", "images seen", METRICS, out / "metrics_vs_images.png")

    # FD-FMNIST at every checkpoint that all of a model's seeds reached: mean, min, max over the seeds
    def seed_points(members, mode):
        per = [{p["step"]: p for p in c[mode]} for _, c in members if mode in c]
        steps = sorted(set.intersection(*(set(d) for d in per)))
        return [(step, [d[step] for d in per]) for step in steps]

    by_model = {lab: [(r, c) for r, c in runs.items() if model_label(r) == lab] for lab in labels}
    lines = ["| model | mode | step | images seen | seeds | FD-FMNIST mean | min | max |", "|---|---|---|---|---|---|---|---|"]
    for lab, members in by_model.items():
        for mode in sorted({m for _, c in members for m in c}):
            for step, pts in seed_points(members, mode):
                fd = [p["fd_fmnist"] for p in pts]
                lines.append(f"| {lab} | {mode} | {step} | {pts[0]['images_seen']} | {len(fd)} | {sum(fd) / len(fd):.3f} | {min(fd):.3f} | {max(fd):.3f} |")
    (out / "steps.md").write_text("\n".join(lines) + "\n")
    if any(len(m) > 1 for m in by_model.values()):
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for lab, members in by_model.items():
            for mode in sorted({m for _, c in members for m in c}):
                pts = seed_points(members, mode)
                if len(pts) < 2:
                    continue   # a one-checkpoint mode (unguided-fp8) is not a curve
                x = [p[0]["images_seen"] for _, p in pts]
                fd = [[q["fd_fmnist"] for q in p] for _, p in pts]
                ax.plot(x, [sum(v) / len(v) for v in fd], styles.get(mode, "--"), marker="o", ms=3, color=colors[lab],
                        label=f"{lab} ({mode}, {len(fd[0])} seeds)")
                ax.fill_between(x, [min(v) for v in fd], [max(v) for v in fd], color=colors[lab], alpha=0.15, lw=0)
        ax.set_yscale("log")
        ax.set_xlabel("images seen")
        ax.xaxis.set_major_formatter(thousands)
        ax.set_ylabel("FD-FMNIST (mean over seeds; band: min to max)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        if args.title:
            ax.set_title(args.title)
        fig.tight_layout()
        fig.savefig(out / "fd_seeds_vs_images.png", dpi=120)
        plt.close(fig)

    # the final table: the last evaluation of each run, grouped by model (seeds), mean ± half range
    rows = ["| model | mode | seeds | step | " + " | ".join(n for _, n in METRICS) + " |",
            "|---|---|---|---|" + "---|" * len(METRICS)]
    for lab in labels:
        members = [(r, c) for r, c in runs.items() if model_label(r) == lab]
        for mode in sorted({m for _, c in members for m in c}):
            finals = [c[mode][-1] for _, c in members if mode in c]
            cells = []
            for key, _ in METRICS:
                vals = [f[key] for f in finals]
                mean = sum(vals) / len(vals)
                half = (max(vals) - min(vals)) / 2
                cells.append(f"{mean:.3f}" + (f" ± {half:.3f}" if len(vals) > 1 else ""))
            steps = sorted({f["step"] for f in finals})
            rows.append(f"| {lab} | {mode} | {len(finals)} | {'/'.join(map(str, steps))} | " + " | ".join(cells) + " |")
    table = "\n".join(rows) + "\n"
    (out / "table.md").write_text(table)
    print(table, end="")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval", help="evaluate every checkpoint of the runs not yet evaluated")
    e.add_argument("runs", nargs="+")
    e.add_argument("--classifier", required=True)
    e.add_argument("--samples", type=int, default=5000)
    e.add_argument("--cfg-scale", type=float, default=1.5)
    e.add_argument("--unguided-only", action="store_true", help="no guided evaluation (the equal-time runs at 4,096 tokens)")
    e.add_argument("--batch-size", type=int, default=1000)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--device", default="cuda")
    e.add_argument("--nala", default=str(Path(__file__).resolve().parents[1] / "build" / "nala"))
    e.add_argument("--dit-sampler", default=" ".join(SAMPLERS["dit"]), help="sampler flags for DiT / NaLaDiT runs")
    e.add_argument("--fp8-last", action="store_true",
                   help="also sample each run's last checkpoint with --dtype fp8 (mode unguided-fp8; not official runs)")
    e.add_argument("--sit-sampler", default=" ".join(SAMPLERS["sit"]), help="sampler flags for SiT / NaLaSiT runs")
    q = sub.add_parser("plot", help="plot the curves and print the final table")
    q.add_argument("runs", nargs="+")
    q.add_argument("--out", required=True)
    q.add_argument("--title", default="")
    args = p.parse_args()
    if args.cmd == "eval":
        if not Path(args.classifier).is_file():
            fail(f"--classifier {args.classifier}: no such file")
        if args.cfg_scale <= 1.0 or not math.isfinite(args.cfg_scale):
            fail(f"--cfg-scale must be above 1 (the guided curve), got {args.cfg_scale}")
        evaluate(args)
    else:
        plot(args)


if __name__ == "__main__":
    main()
