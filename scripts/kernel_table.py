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

usage: python3 scripts/kernel_table.py ncu.csv [--top 30] [--title T] [--bandwidth GB/s]
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
    print(f"### {title}: {sum(count.values())} kernels, {all_us / 1e3:.1f} ms of GPU time")
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
            print(f"| {k} | {count[k]} | {v * unit_us / 1e3:.2f} | {v * unit_us / all_us * 100:.1f} % |")
    else:
        print("| kernel | launches | total ms | share | DRAM GB | GB/s |\n|---|---|---|---|---|---|")
        for k, v in total.most_common(top):
            ms = v * unit_us / 1e3
            print(f"| {k} | {count[k]} | {ms:.2f} | {ms / (all_us / 1e3) * 100:.1f} % | {nbytes[k] / 1e9:.3f} | "
                  f"{nbytes[k] / 1e9 / (ms / 1e3) if ms > 0 else 0:,.0f} |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--title", default="")
    p.add_argument("--bandwidth", type=float, default=4300.0, help="GB/s of the DRAM floor (dram__bytes.sum)")
    a = p.parse_args()
    with open(a.csv) as f:
        lines = [l for l in f if l.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        raise SystemExit(f"{a.csv}: no ncu CSV rows")
    hdr = rows[0]
    ki, ti = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum")
    bi = hdr.index("dram__bytes.sum") if "dram__bytes.sum" in hdr else None
    unit = rows[1][ti] if len(rows) > 1 else "ns"
    byte_unit = rows[1][bi] if bi is not None and len(rows) > 1 else "byte"
    byte_scale = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(byte_unit)
    if bi is not None and byte_scale is None:
        raise SystemExit(f"{a.csv}: unknown unit of dram__bytes.sum: {byte_unit!r}")
    total, count, nbytes = collections.Counter(), collections.Counter(), collections.Counter()
    for r in rows[1:]:
        try:
            v = float(r[ti].replace(",", ""))
            b = float(r[bi].replace(",", "")) * byte_scale if bi is not None else 0.0
        except ValueError:
            continue  # the units row
        k = short(r[ki])
        total[k] += v
        count[k] += 1
        nbytes[k] += b
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1.0)
    print_tables(total, count, scale, a.title, a.top, nbytes if bi is not None else None, a.bandwidth)


if __name__ == "__main__":
    main()
