#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel durations (`ncu --csv --page raw --metrics gpu__time_duration.sum`)
by kernel name and prints the largest as a markdown table: where a run's GPU time goes, kernel by
kernel, so two implementations of the same step can be compared.

usage: python3 scripts/kernel_table.py ncu.csv [--top 30] [--title T]
"""
import argparse
import collections
import csv
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


CATEGORIES = [  # first match wins; what torch.compile fuses is everything but the first two
    ("GEMM", re.compile(r"gemm|nvjet|sm90_xmma|cutlass|cublas|matmul|wgmma", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|nala|state_kernel|output_kernel|dq_kernel|dkv_kernel|reduce_chunks", re.I)),
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


def print_tables(total, count, unit_us, title, top):
    """total/count: per kernel name; unit_us: microseconds per unit of `total`."""
    all_us = sum(total.values()) * unit_us
    cats = collections.Counter()
    for k, v in total.items():
        cats[category(k)] += v
    print(f"### {title}: {sum(count.values())} kernels, {all_us / 1e3:.1f} ms of GPU time")
    print("| category | total ms | share |\n|---|---|---|")
    for c, v in cats.most_common():
        print(f"| {c} | {v * unit_us / 1e3:.2f} | {v * unit_us / all_us * 100:.1f} % |")
    print()
    print("| kernel | launches | total ms | share |\n|---|---|---|---|")
    for k, v in total.most_common(top):
        print(f"| {k} | {count[k]} | {v * unit_us / 1e3:.2f} | {v * unit_us / all_us * 100:.1f} % |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--title", default="")
    a = p.parse_args()
    with open(a.csv) as f:
        lines = [l for l in f if l.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        raise SystemExit(f"{a.csv}: no ncu CSV rows")
    hdr = rows[0]
    ki, ti = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum")
    unit = rows[1][ti] if len(rows) > 1 else "ns"
    total, count = collections.Counter(), collections.Counter()
    for r in rows[1:]:
        try:
            v = float(r[ti].replace(",", ""))
        except ValueError:
            continue  # the units row
        k = short(r[ki])
        total[k] += v
        count[k] += 1
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1.0)
    print_tables(total, count, scale, a.title, a.top)


if __name__ == "__main__":
    main()
