#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel durations (`ncu --csv --page raw --metrics gpu__time_duration.sum`)
by kernel name and prints the largest as a markdown table: where a run's GPU time goes, kernel by
kernel, so two implementations of the same step can be compared.

With `dram__bytes.sum` among the metrics it also sums each kernel's DRAM traffic and prints its
bandwidth floor: the bytes at --bandwidth GB/s (default 4,300: the device-to-device copy measured on
the H200, read and write counted, docs/benchmarks.md), the time no schedule of the same kernels'
traffic can beat. The floor of the step is then the GEMMs' and attention's measured time plus the
other kernels' floors: the roofline argument for what fusing or tuning the memory-bound kernels can
still win (the GEMMs and attention are taken as they run; they are near their own limits).

It also reads a Chrome trace (FILE.json: Kineto's, as torch.profiler's export_chrome_trace and nala's
NALA_PROFILE_TRACE write it, bench/timing.cpp). There the kernels ran as they do in a training run,
back to back at the clocks the run holds, not one at a time as under Nsight Compute, and the trace
also gives the timeline: the span from the first GPU event's start to the last one's end, the time
some kernel, copy or memset ran (the union of their intervals), and the idle time between them,
per step with --steps.

With --against B.csv (another ncu CSV) it then prints this run's time minus B's kernel by kernel, the
largest differences first, kernels matched by their names without leading namespaces (which Nsight
Compute abbreviates differently from run to run): where one model's step spends what another's does
not (NaLaDiT-S/2 against DiT-S/2: docs/benchmarks.md, forty-fifth session).

usage: python3 scripts/kernel_table.py ncu.csv|trace.json [--top 30] [--title T] [--bandwidth GB/s] [--steps K]
                                       [--against B.csv --against-title T]
"""
import argparse
import collections
import csv
import json
import re


def short(name):
    """The kernel's name without its trailing argument list, cut to 110 characters."""
    name = name.strip()
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = re.sub(r"^void ", "", name)
    return name[:110].replace("|", "/")


CATEGORIES = [  # first match wins; what torch.compile fuses is everything but GEMM and attention
    # attention first: cuDNN's sdpa kernels carry "wgmma" in their names; its backward's helper passes
    # (compute_dot_do_o, convert_dq_to_16bits) and NaLa's attention kernels (attention/cuda) count here
    ("attention", re.compile(r"sdpa|flash|fmha|compute_dot_do_o|convert_dq|onepass_|state_kernel|output_kernel|dq_kernel|dkv_kernel|"
                             r"reduce_chunks|softmax_(fwd|bwd)", re.I)),
    ("GEMM", re.compile(r"gemm|nvjet|sm90_xmma|cutlass|cublas|matmul|wgmma", re.I)),
    # nala's own row, column and block kernels (ops/cuda, attention/cuda: LePE, the norm-gate tail)
    ("fused (nala)", re.compile(r"^(nala::|ops::|attention::)")),
    ("fused (Triton)", re.compile(r"^triton_", re.I)),
    ("optimizer / EMA", re.compile(r"adam|foreach|multi_tensor|lerp", re.I)),
    ("normalization", re.compile(r"layer_?norm|group_?norm|batch_?norm", re.I)),
    ("reduction", re.compile(r"reduce|sum_|norm_kernel|softmax", re.I)),
    ("copy / cat / index", re.compile(r"copy|cat|index|gather|scatter|transpose|permute|fill", re.I)),
    ("element-wise", re.compile(r"elementwise|vectorized|unrolled|pointwise|gelu|silu|mul|add", re.I)),
]


def category(name):
    for c, rx in CATEGORIES:
        if rx.search(name):
            return c
    return "other"


def print_tables(total, count, unit_us, title, top, nbytes=None, bandwidth=4300.0):
    """total/count: per kernel name; unit_us: microseconds per unit of `total`; nbytes: DRAM bytes
    per kernel name (or None); bandwidth: GB/s of the floor."""
    all_us = sum(total.values()) * unit_us
    cats, cat_bytes = collections.Counter(), collections.Counter()
    for k, v in total.items():
        cats[category(k)] += v
        if nbytes is not None:
            cat_bytes[category(k)] += nbytes[k]
    print(f"### {title}: {sum(count.values()):.4g} kernels, {all_us / 1e3:.1f} ms of GPU time")
    if nbytes is None:
        print("| category | total ms | share |\n|---|---|---|")
        for c, v in cats.most_common():
            print(f"| {c} | {v * unit_us / 1e3:.2f} | {v * unit_us / all_us * 100:.1f} % |")
    else:
        floor_ms = lambda b: b / (bandwidth * 1e9) * 1e3  # noqa: E731
        print(f"| category | total ms | share | DRAM GB | GB/s | floor ms at {bandwidth:,.0f} GB/s |\n|---|---|---|---|---|---|")
        for c, v in cats.most_common():
            ms = v * unit_us / 1e3
            print(f"| {c} | {ms:.2f} | {ms / (all_us / 1e3) * 100:.1f} % | {cat_bytes[c] / 1e9:.2f} | "
                  f"{cat_bytes[c] / 1e9 / (ms / 1e3) if ms > 0 else 0:,.0f} | {floor_ms(cat_bytes[c]):.2f} |")
        fixed = sum(v for c, v in cats.items() if c in ("GEMM", "attention")) * unit_us / 1e3
        rest = sum(b for c, b in cat_bytes.items() if c not in ("GEMM", "attention"))
        print(f"\nRoofline of the step: GEMM + attention as measured, {fixed:.2f} ms; every other kernel at its "
              f"DRAM floor, {floor_ms(rest):.2f} ms ({rest / 1e9:.2f} GB): **{fixed + floor_ms(rest):.2f} ms** against "
              f"{all_us / 1e3:.2f} ms measured.")
    print()
    if nbytes is None:
        print("| kernel | launches | total ms | share |\n|---|---|---|---|")
        for k, v in total.most_common(top):
            print(f"| {k} | {count[k]:.4g} | {v * unit_us / 1e3:.2f} | {v * unit_us / all_us * 100:.1f} % |")
    else:
        print("| kernel | launches | total ms | share | DRAM GB | GB/s |\n|---|---|---|---|---|---|")
        for k, v in total.most_common(top):
            ms = v * unit_us / 1e3
            print(f"| {k} | {count[k]:.4g} | {ms:.2f} | {ms / (all_us / 1e3) * 100:.1f} % | {nbytes[k] / 1e9:.3f} | "
                  f"{nbytes[k] / 1e9 / (ms / 1e3) if ms > 0 else 0:,.0f} |")


GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")  # a Chrome trace's device-side events


def trace_events(path):
    """(name, start µs, duration µs) of every kernel, copy and memset in a Chrome trace, in file order;
    kernels' names as short() gives them, copies' and memsets' as they are."""
    with open(path) as f:
        doc = json.load(f)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return [(short(e["name"]) if e["cat"] == "kernel" else e["name"].replace("|", "/"), float(e["ts"]), float(e.get("dur", 0.0)))
            for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES]


def timeline(events):
    """span, busy and the gaps of GPU events (name, start, duration): span from the first start to the
    last end; busy the length of the union of the intervals; gaps (µs, the event that ended last
    before it, the next event) where no event ran, in time order."""
    ev = sorted(events, key=lambda e: e[1])
    busy, gaps = 0.0, []
    run_start, run_end, run_last = ev[0][1], ev[0][1] + ev[0][2], ev[0][0]
    for name, s, d in ev[1:]:
        if s > run_end:
            busy += run_end - run_start
            gaps.append((s - run_end, run_last, name))
            run_start, run_end, run_last = s, s + d, name
        elif s + d >= run_end:
            run_end, run_last = s + d, name
    busy += run_end - run_start
    return run_end - ev[0][1], busy, gaps


def print_timeline(events, steps, big_gap_us=100.0):
    span, busy, gaps = timeline(events)
    idle = span - busy
    per = lambda us: f"{us / 1e3 / steps:.2f}"  # noqa: E731  ms per step
    print(f"Timeline, ms per step ({steps} step{'s' if steps != 1 else ''} in the trace): span {per(span)}, "
          f"a GPU event running {per(busy)}, idle {per(idle)} ({idle / span * 100 if span > 0 else 0:.1f} %) in "
          f"{len(gaps) / steps:.0f} gaps a step")
    big = sorted((g for g in gaps if g[0] >= big_gap_us), reverse=True)
    if big:
        print(f"Gaps of {big_gap_us:.0f} µs or more: {len(big)}, {sum(g[0] for g in big) / 1e3:.2f} ms in all; the largest:")
        print("| gap µs | after | before |\n|---|---|---|")
        for g, after, before in big[:5]:
            print(f"| {g:,.0f} | {after[:80]} | {before[:80]} |")
    small = [g[0] for g in gaps if g[0] < big_gap_us]
    if small:
        print(f"Gaps under {big_gap_us:.0f} µs: {len(small) / steps:.0f} a step, {sum(small) / 1e3 / steps:.2f} ms a step, "
              f"median {sorted(small)[len(small) // 2]:.1f} µs")


def main_trace(a):
    events = trace_events(a.csv)
    if not events:
        raise SystemExit(f"{a.csv}: no GPU events (categories {', '.join(GPU_CATEGORIES)}) in this trace")
    total, count = collections.Counter(), collections.Counter()
    for name, _, dur in events:
        total[name] += dur / a.steps
        count[name] += 1 / a.steps
    print_tables(total, count, 1.0, a.title, a.top)
    print()
    print_timeline(events, a.steps)


def read_ncu_csv(path):
    """An ncu CSV's kernels summed by name: (total µs, launches, DRAM bytes or None) per short name."""
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        raise SystemExit(f"{path}: no ncu CSV rows")
    hdr = rows[0]
    ki, ti = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum")
    bi = hdr.index("dram__bytes.sum") if "dram__bytes.sum" in hdr else None
    unit = rows[1][ti] if len(rows) > 1 else "ns"
    byte_unit = rows[1][bi] if bi is not None and len(rows) > 1 else "byte"
    byte_scale = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(byte_unit)
    if bi is not None and byte_scale is None:
        raise SystemExit(f"{path}: unknown unit of dram__bytes.sum: {byte_unit!r}")
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1.0)
    total, count, nbytes = collections.Counter(), collections.Counter(), collections.Counter()
    for r in rows[1:]:
        try:
            v = float(r[ti].replace(",", "")) * scale
            b = float(r[bi].replace(",", "")) * byte_scale if bi is not None else 0.0
        except ValueError:
            continue  # the units row
        k = short(r[ki])
        total[k] += v
        count[k] += 1
        nbytes[k] += b
    return total, count, nbytes if bi is not None else None


def base_name(name):
    """A kernel's name without its leading namespaces: Nsight Compute abbreviates nested namespaces
    differently from run to run (nala::ops::cuda::<unnamed>::k as ops::<unnamed>::k in one run,
    nala::<unnamed>::k in another), so two runs' kernels are matched by what follows them."""
    return re.sub(r"^(?:(?:[A-Za-z_]\w*|<unnamed>)::)+", "", name)


def print_difference(a, b, title_a, title_b, top):
    """Kernel by kernel, run a's time minus run b's (kernels matched by base_name), largest first."""
    def by_base(run):  # (time, launches) per base name
        total, count, _ = run
        t, n = collections.Counter(), collections.Counter()
        for k, v in total.items():
            t[base_name(k)] += v
            n[base_name(k)] += count[k]
        return t, n

    (da, na), (db, nb) = by_base(a), by_base(b)
    keys = sorted(set(da) | set(db), key=lambda k: (-abs(da[k] - db[k]), k))
    diff = (sum(da.values()) - sum(db.values())) / 1e3
    print(f"### {title_a} − {title_b}: {sum(da.values()) / 1e3:.2f} − {sum(db.values()) / 1e3:.2f} = {diff:+.2f} ms of GPU time")
    print(f"| kernel | {title_a} launches | {title_a} ms | {title_b} launches | {title_b} ms | difference ms |\n|---|---|---|---|---|---|")
    shown = 0.0
    for k in keys[:top]:
        shown += (da[k] - db[k]) / 1e3
        print(f"| {k} | {na[k]:.4g} | {da[k] / 1e3:.2f} | {nb[k]:.4g} | {db[k] / 1e3:.2f} | {(da[k] - db[k]) / 1e3:+.2f} |")
    print(f"\nThe {min(top, len(keys))} rows shown: {shown:+.2f} ms; the {max(0, len(keys) - top)} others: {diff - shown:+.2f} ms.")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv", help="Nsight Compute CSV, or a Chrome trace (.json)")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--title", default="")
    p.add_argument("--bandwidth", type=float, default=4300.0, help="GB/s of the DRAM floor (dram__bytes.sum)")
    p.add_argument("--steps", type=int, default=1, help="a trace's steps: its times and launches per step")
    p.add_argument("--against", help="a second ncu CSV: after the table, the first run's time minus this one's, kernel by kernel")
    p.add_argument("--against-title", default="against")
    a = p.parse_args()
    if a.steps < 1:
        raise SystemExit(f"--steps {a.steps}: must be at least 1")
    if a.csv.endswith(".json"):
        if a.against:
            raise SystemExit("--against compares two ncu CSVs, not a trace")
        return main_trace(a)
    run = read_ncu_csv(a.csv)
    total, count, nbytes = run
    print_tables(total, count, 1.0, a.title, a.top, nbytes, a.bandwidth)
    if a.against:
        print()
        print_difference(run, read_ncu_csv(a.against), a.title or "this run", a.against_title, a.top)


if __name__ == "__main__":
    main()
