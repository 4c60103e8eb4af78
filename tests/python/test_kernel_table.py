"""scripts/kernel_table.py on a small Nsight Compute CSV written here: kernels are summed by name
and category (cuDNN's attention kernels, whose names carry "wgmma", count as attention, not GEMM;
nala's own kernels as fused), DRAM bytes in the CSV's unit, and the roofline line equals the
measured GEMM and attention time plus every other kernel's bytes at the floor bandwidth, recomputed
here from the rows; a CSV without dram__bytes.sum keeps the time-only table; an unknown byte unit
is a clear error."""
import subprocess
import sys

from conftest import SOURCE

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


def write_csv(path, with_bytes=True, byte_unit="Mbyte"):
    lines = ["==PROF== Connected to process 1", '"ID","Kernel Name","dram__bytes.sum","gpu__time_duration.sum"',
             f'"","","{byte_unit}","usecond"']
    for i, (name, mb, us) in enumerate(ROWS):
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
