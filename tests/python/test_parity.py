"""`nala forward`, `nala sample --init-noise` (DDIM and ODE Heun, guided) and `nala eval --fmnist`
give bit-identical outputs to the recorded ones (scripts/parity_fixtures.py; recorded from the
binary before the one-folder-a-layer layout), on inputs regenerated from a seeded generator. On a
machine whose ATen CPU kernels differ from the recording machine's (AVX2), as the GPU machine's
did, the outputs must agree within 1e-4 of their largest value instead."""
import subprocess
import sys

from conftest import BUILD, SOURCE


def test_outputs_bit_identical_to_recorded():
    p = subprocess.run([sys.executable, str(SOURCE / "scripts" / "parity_fixtures.py"), "check", str(BUILD)],
                       capture_output=True, text=True, timeout=1800)
    print(p.stdout, p.stderr)
    assert p.returncode == 0, p.stdout + p.stderr
