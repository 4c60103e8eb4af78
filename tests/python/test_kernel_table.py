"""scripts/kernel_table.py on a small Nsight Compute CSV written here: kernels are summed by name
and category (cuDNN's attention kernels, whose names carry "wgmma", count as attention, not GEMM;
nala's own kernels as fused), DRAM bytes in the CSV's unit, and the roofline line equals the
measured GEMM and attention time plus every other kernel's bytes at the floor bandwidth, recomputed
here from the rows; a CSV without dram__bytes.sum keeps the time-only table; an unknown byte unit
is a clear error; --against: two runs' kernels matched across the namespaces Nsight Compute abbreviates,
their differences against sums by hand. A Chrome trace: its kernels, copies and memsets summed per step and its timeline
(busy time, idle gaps) against a brute-force count on a 0.5 µs grid; the trace `nala bench` writes
with NALA_PROFILE_TRACE on the CPU (operators, no GPU events), and a missing folder as a clear error."""
import json
import os
import subprocess
import sys

import numpy as np

from conftest import BUILD, SOURCE

SCRIPT = SOURCE / "scripts" / "kernel_table.py"
sys.path.insert(0, str(SOURCE / "scripts"))
import kernel_table  # noqa: E402

# (kernel name as ncu writes it, MB of DRAM traffic, µs)
ROWS = [
    ("void nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN(int)", 600.0, 500.0),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0", 170.0, 300.0),
    ("void cudnn::fusion::compute_dot_do_o<1>(float*)", 190.0, 53.0),
    ("void nala::ops::cuda::<unnamed>::ln_modulate_bwd<float, __nv_bfloat16, 9>(const float*, int)", 2200.0, 551.0),
    ("void nala::ops::cuda::<unnamed>::ln_modulate_bwd<float, __nv_bfloat16, 9>(const float*, int)", 2200.0, 549.0),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char *, 1>>(int)", 1.0, 2.0),
]
BANDWIDTH = 4000.0  # GB/s, not the default: the option must reach the arithmetic


def write_csv(path, with_bytes=True, byte_unit="Mbyte", rows=ROWS):
    lines = ["==PROF== Connected to process 1", '"ID","Kernel Name","dram__bytes.sum","gpu__time_duration.sum"',
             f'"","","{byte_unit}","usecond"']
    for i, (name, mb, us) in enumerate(rows):
        lines.append(f'"{i}","{name}","{mb:,.1f}","{us:,.1f}"')
    if not with_bytes:
        lines = [l.replace(',"dram__bytes.sum"', "").replace(f',"{byte_unit}"', "") for l in lines]
        lines = lines[:3] + [f'"{i}","{name}","{us:,.1f}"' for i, (name, _, us) in enumerate(ROWS)]
    path.write_text("\n".join(lines) + "\n")


def table(path, *extra):
    p = subprocess.run([sys.executable, str(SCRIPT), str(path), "--top", "10", *map(str, extra)], capture_output=True, text=True,
                       timeout=60)
    return p


def test_categories_bytes_and_roofline(tmp_path):
    csv_path = tmp_path / "ncu.csv"
    write_csv(csv_path)
    p = table(csv_path, "--bandwidth", BANDWIDTH)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    cats = {}
    for name, mb, us in ROWS:
        c = kernel_table.category(kernel_table.short(name))
        t, b = cats.get(c, (0.0, 0.0))
        cats[c] = (t + us, b + mb * 1e6)
    assert set(cats) == {"GEMM", "attention", "fused (nala)", "copy / cat / index"}
    assert kernel_table.category(kernel_table.short(ROWS[1][0])) == "attention"  # not GEMM, despite "wgmma"
    # the category rows: ms and GB as summed here
    for c, (us, b) in cats.items():
        assert f"| {c} | {us / 1e3:.2f} |" in out, (c, out)
        assert f"| {b / 1e9:.2f} |" in out
    # the roofline: GEMM + attention as measured, the rest at BANDWIDTH
    fixed_ms = (cats["GEMM"][0] + cats["attention"][0]) / 1e3
    rest_b = cats["fused (nala)"][1] + cats["copy / cat / index"][1]
    floor_ms = rest_b / (BANDWIDTH * 1e9) * 1e3
    assert f"{fixed_ms:.2f} ms; every other kernel at its DRAM floor, {floor_ms:.2f} ms" in out, out
    assert f"**{fixed_ms + floor_ms:.2f} ms**" in out
    # the kernel rows: the two ln_modulate_bwd launches summed under one name
    assert "| nala::ops::cuda::<unnamed>::ln_modulate_bwd<float, __nv_bfloat16, 9> | 2 | 1.10 |" in out, out


def test_against_matches_kernels_across_namespaces(tmp_path):
    # run B: ln_modulate_bwd under the abbreviated namespace Nsight Compute writes in another run, once and
    # slower; no fill kernel; a kernel of its own (a model's attention where A's had another)
    rows_b = [ROWS[0], ROWS[1], ROWS[2],
              ("void nala::<unnamed>::ln_modulate_bwd<float, __nv_bfloat16, 9>(const float*, int)", 2200.0, 1500.0),
              ("void nala::attention::cuda::onepass_backward_kernel<64, 2, 1, 5, 1, 0>(nala::NalaKernelParams)", 500.0, 650.0)]
    a_path, b_path = tmp_path / "a.csv", tmp_path / "b.csv"
    write_csv(a_path)
    write_csv(b_path, rows=rows_b)
    p = table(a_path, "--title", "A", "--against", b_path, "--against-title", "B", "--top", "3")
    assert p.returncode == 0, p.stderr
    out = p.stdout.split("### A − B")[1]
    # expected, by hand: ln_modulate_bwd 1,100 µs (two launches) against 1,500 (one); onepass 0 against 650;
    # the fill 2 against 0; the GEMM and cuDNN's kernels equal
    sum_a, sum_b = sum(r[2] for r in ROWS), sum(r[2] for r in rows_b)
    assert f": {sum_a / 1e3:.2f} − {sum_b / 1e3:.2f} = {(sum_a - sum_b) / 1e3:+.2f} ms" in out, out
    assert "| onepass_backward_kernel<64, 2, 1, 5, 1, 0> | 0 | 0.00 | 1 | 0.65 | -0.65 |" in out, out
    assert "| ln_modulate_bwd<float, __nv_bfloat16, 9> | 2 | 1.10 | 1 | 1.50 | -0.40 |" in out, out
    assert "| vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char *, 1>> | 1 | 0.00 | 0 | 0.00 | +0.00 |" in out
    # the largest differences first, and the rows shown plus the others add up to the whole difference
    assert out.index("onepass_backward_kernel") < out.index("ln_modulate_bwd") < out.index("FillFunctor")
    assert f"The 3 rows shown: {(-650 - 400 + 2) / 1e3:+.2f} ms; the 3 others: {0:+.2f} ms." in out, out
    # kernels equal in both runs appear with a zero difference only past the larger ones
    assert "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN" not in out
    p = table(tmp_path / "trace.json", "--against", b_path)
    assert p.returncode != 0


def test_time_only_csv_and_bad_unit(tmp_path):
    plain = tmp_path / "plain.csv"
    write_csv(plain, with_bytes=False)
    p = table(plain)
    assert p.returncode == 0, p.stderr
    assert "| category | total ms | share |" in p.stdout and "Roofline" not in p.stdout
    bad = tmp_path / "bad.csv"
    write_csv(bad, byte_unit="Pbyte")
    p = table(bad)
    assert p.returncode != 0
    assert "bad.csv" in p.stderr and "Pbyte" in p.stderr


# (category, name, start µs, duration µs): two steps of four GPU events, one of them overlapping
# the previous one (a second stream), a copy and a memset; a CPU operator the timeline ignores
TRACE = [
    ("kernel", "void nala::ops::cuda::(anonymous namespace)::ln_modulate_bwd<float, __nv_bfloat16, 9>(float const*, int)", 0.0, 10.0),
    ("kernel", "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", 12.0, 8.0),
    ("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", 15.0, 15.0),
    ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 40.0, 5.0),
    ("kernel", "void nala::ops::cuda::(anonymous namespace)::ln_modulate_bwd<float, __nv_bfloat16, 9>(float const*, int)", 300.0, 10.0),
    ("kernel", "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", 310.0, 8.0),
    ("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", 311.0, 3.0),
    ("gpu_memset", "Memset (Device)", 330.5, 4.5),
    ("cpu_op", "aten::mm", 0.0, 500.0),
]


def write_trace(path):
    ev = [{"ph": "X", "cat": c, "name": n, "ts": t, "dur": d, "pid": 0, "tid": 7} for c, n, t, d in TRACE]
    path.write_text(json.dumps({"traceEvents": ev, "displayTimeUnit": "ms"}))


def test_chrome_trace_sums_and_timeline(tmp_path):
    path = tmp_path / "trace.json"
    write_trace(path)
    p = table(path, "--steps", 2)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    gpu = [(n, t, d) for c, n, t, d in TRACE if c != "cpu_op"]
    # per step: every event's time halved, launches halved
    assert f"### : {len(gpu) // 2} kernels, {sum(d for _, _, d in gpu) / 2 / 1e3:.1f} ms of GPU time" in out, out
    assert "| nala::ops::cuda::(anonymous namespace)::ln_modulate_bwd<float, __nv_bfloat16, 9> | 1 | 0.01 |" in out, out
    # the timeline, counted on a 0.5 µs grid
    t = np.arange(0.0, 400.0, 0.5) + 0.25
    on = np.zeros_like(t, dtype=bool)
    for _, s, d in gpu:
        on |= (t > s) & (t < s + d)
    first, last = min(s for _, s, _ in gpu), max(s + d for _, s, d in gpu)
    busy = on.sum() * 0.5
    idle = (last - first) - busy
    assert f"span {(last - first) / 2e3:.2f}, a GPU event running {busy / 2e3:.2f}, idle {idle / 2e3:.2f}" in out, out
    # gaps: 2 (after ln_modulate_bwd), 10 (before the copy), 255 (between the steps), 12.5 (before the memset)
    assert "Gaps of 100 µs or more: 1, 0.26 ms in all" in out, out
    assert "| 255 | Memcpy DtoD (Device -> Device) | nala::ops::cuda::(anonymous namespace)::ln_modulate_bwd<float, __nv_bfloat16, 9> |" in out, out
    assert "| Memcpy DtoD (Device -> Device) | 0.5 | 0.00 |" in out, out  # one copy in two steps
    assert "Gaps under 100 µs: 2 a step, 0.01 ms a step, median 10.0 µs" in out, out


def test_nala_bench_writes_a_trace(tmp_path):
    env = dict(os.environ, NALA_PROFILE_TRACE=str(tmp_path / "nala.json"), OMP_NUM_THREADS="1")
    args = [str(BUILD / "nala"), "bench", "train", "--device", "cpu", "--models", "DiT-S/8", "--batch", "2", "--image-size", "64",
            "--steps", "1", "--warmup", "0"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "profiler trace of the timed repeats" in p.stderr, p.stderr
    doc = json.loads((tmp_path / "nala.json").read_text())
    ops = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    assert "aten::mm" in ops or "aten::addmm" in ops, sorted(ops)[:40]  # the linear layers ran under the profiler
    assert not (tmp_path / "nala.json.tmp").exists()
    q = table(tmp_path / "nala.json")  # a CPU run's trace has no GPU events: said, not a table of nothing
    assert q.returncode != 0 and "no GPU events" in q.stderr, q.stdout + q.stderr
    env["NALA_PROFILE_TRACE"] = str(tmp_path / "missing" / "nala.json")
    p = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode != 0
    assert "NALA_PROFILE_TRACE=" in p.stdout + p.stderr and "does not exist" in p.stdout + p.stderr, p.stdout + p.stderr
