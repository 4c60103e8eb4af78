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
    all_us = sum(total.values()) * scale
    print(f"### {a.title}: {sum(count.values())} kernels, {all_us / 1e3:.1f} ms of GPU time")
    print("| kernel | launches | total ms | share |\n|---|---|---|---|")
    for k, v in total.most_common(a.top):
        print(f"| {k} | {count[k]} | {v * scale / 1e3:.2f} | {v * scale / all_us * 100:.1f} % |")


if __name__ == "__main__":
    main()
