"""scripts/dev/lepe_in_attention_emulation.py, the float64 emulation of the one-pass kernels' LePE index
math (lepe_blocks_out's token blocks, lepe_rows_out's runs; the host's rank split and window size),
against torch's conv2d and its input gradient, forward and backward: CI's check of the block and run
paths' indexing, which the CUDA test (GatedTailKernels.LepeInAttentionEqualsTheTwoOperations) checks bit
for bit on the GPU. The script asserts every output within 1e-12 of conv2d, every window read inside the
staged rows and the block index by float reciprocal equal to the integer division; each path must be
taken by some case."""
import re
import subprocess
import sys

from conftest import SOURCE


def test_lepe_emulation_matches_conv2d():
    r = subprocess.run([sys.executable, str(SOURCE / "scripts" / "dev" / "lepe_in_attention_emulation.py")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if "max error" in l]
    assert len(lines) == 20, r.stdout
    paths = [tuple(int(x) for x in re.search(r"2x4/1x8/one-row/per-token (\d+)/(\d+)/(\d+)/(\d+)", l).groups()) for l in lines]
    for i, name in enumerate(["2 × 4 token blocks", "1 × 8 token blocks", "one-row runs", "per-token runs"]):
        assert any(p[i] > 0 for p in paths), f"no case took the {name}"
    assert all(float(re.search(r"max error (\S+)", l).group(1)) < 1e-12 for l in lines)


def test_lepe_mma_emulation_matches_conv2d():
    """scripts/dev/lepe_mma_emulation.py: LePE on the tensor cores (lepe_mma_out), its table, swizzled
    window, transposing loads, fragments and products emulated lane by lane against conv2d in float64 with
    the table's taps (hi + lo), ks 5 and 3, tiles of 4, 3 and 1 grid rows: within 1e-12, no byte read unwritten."""
    r = subprocess.run([sys.executable, str(SOURCE / "scripts" / "dev" / "lepe_mma_emulation.py")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if "max error" in l]
    assert len(lines) == 5, r.stdout
    assert all(float(re.search(r"max error (\S+)", l).group(1)) < 1e-12 for l in lines)
