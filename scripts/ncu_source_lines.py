#!/usr/bin/env python3
"""Per-source-line summary of Nsight Compute's source page (`ncu -i rep --page source --print-source
cuda,sass --csv`): stall samples and executed instructions summed per CUDA source line, the largest
first, with each line's two main stall reasons; where the report has them, a second table of the lines'
shared-memory wavefronts beside their ideal (bank conflicts). Prints markdown tables.

usage: python3 scripts/ncu_source_lines.py source.csv [--top 30]
"""
import argparse
import collections
import csv


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args()
    with open(a.csv) as f:
        rows = list(csv.reader(f))
    path, hdr = None, None
    lines = collections.defaultdict(lambda: {"samples": 0.0, "instr": 0.0, "text": "", "stalls": collections.Counter(), "wf": 0.0, "wf_ideal": 0.0})
    wf_cols = None  # (shared wavefronts, their ideal) column names, where the report has them
    for r in rows:
        if not r:
            continue
        if r[0] == "File Path":
            path = r[1].split("/")[-1]
            continue
        if r[0] == "Line No":
            hdr = r
            shared = [h for h in hdr if "wavefronts shared" in h.lower() and "excessive" not in h.lower()]
            wf_cols = (next((h for h in shared if "ideal" not in h.lower()), None), next((h for h in shared if "ideal" in h.lower()), None))
            continue
        if hdr is None or not r[0].isdigit():
            continue
        d = dict(zip(hdr, r))
        try:
            samples = float(d.get("Warp Stall Sampling (All Samples)") or 0)
            instr = float(d.get("Instructions Executed") or 0)
        except ValueError:
            continue
        if samples == 0 and instr == 0:
            continue
        e = lines[(path, int(r[0]))]
        e["samples"] += samples
        e["instr"] += instr
        e["text"] = r[1].strip()[:80].replace("|", "/")
        for key, col in zip(("wf", "wf_ideal"), wf_cols or (None, None)):
            try:
                e[key] += float(d.get(col) or 0) if col else 0.0
            except ValueError:
                pass
        for h, v in zip(hdr, r):
            if h.startswith("stall_") and "Not Issued" not in h:
                try:
                    e["stalls"][h[6:]] += float(v)
                except ValueError:
                    pass
    if not lines:
        raise SystemExit(f"{a.csv}: no source lines with samples")
    total_s = sum(e["samples"] for e in lines.values()) or 1.0
    total_i = sum(e["instr"] for e in lines.values()) or 1.0
    print(f"### {a.csv}: {total_s:.0f} stall samples, {total_i:.3g} warp instructions")
    # the whole kernel's stall reasons (e.g. no_instruction: instruction-cache misses of a large kernel)
    reasons = collections.Counter()
    for e in lines.values():
        reasons.update(e["stalls"])
    print("stall reasons, % of samples: " + ", ".join(f"{k} {v / total_s * 100:.1f}" for k, v in reasons.most_common(8)))
    print()
    print("| samples % | instructions % | line | source | main stalls |\n|---|---|---|---|---|")
    for (f, n), e in sorted(lines.items(), key=lambda kv: -kv[1]["samples"])[: a.top]:
        top = ", ".join(f"{k} {v / e['samples'] * 100:.0f}%" for k, v in e["stalls"].most_common(2)) if e["samples"] else ""
        print(f"| {e['samples'] / total_s * 100:.1f} | {e['instr'] / total_i * 100:.1f} | {f}:{n} | `{e['text']}` | {top} |")
    # shared-memory wavefronts per line (the LSU data pipe's load), with what perfect access would take
    total_w = sum(e["wf"] for e in lines.values())
    if total_w > 0:
        ideal_w = sum(e["wf_ideal"] for e in lines.values())
        print()
        print(f"shared-memory wavefronts: {total_w:.4g} (ideal {ideal_w:.4g}; columns {wf_cols})")
        print()
        print("| wavefronts % | wavefronts | ideal | instructions | line | source |\n|---|---|---|---|---|---|")
        for (f, n), e in sorted(lines.items(), key=lambda kv: -kv[1]["wf"])[: a.top]:
            if e["wf"] > 0:
                print(f"| {e['wf'] / total_w * 100:.1f} | {e['wf']:.4g} | {e['wf_ideal']:.4g} | {e['instr']:.4g} | {f}:{n} | `{e['text']}` |")


if __name__ == "__main__":
    main()
