"""nala's programs and libraries import no std::filesystem::remove_all. The torch wheel's
libtorch*.so export a static copy of libstdc++'s std::filesystem whose remove_all calls a weak
symbol no system libstdc++.so defines (recursive_directory_iterator::__erase); where the dynamic
linker binds a program's remove_all to that copy, the call jumps to address 0. That killed
`nala sample --npz` and checkpoint pruning on the GPU machine (SIGSEGV, exit 139); nala removes
folders with io::remove_tree (nftw) instead. The premise is checked too: if LibTorch ever stops
exporting the broken copy, this test says so and can go."""
import subprocess
from pathlib import Path

import torch

from conftest import BUILD

REMOVE_ALL = "_ZNSt10filesystem10remove_all"  # both overloads, any ABI tag


def dynamic_symbols(path, undefined):
    flag = "--undefined-only" if undefined else "--defined-only"
    out = subprocess.run(["nm", "-D", flag, str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def test_libtorch_exports_a_remove_all_that_needs_a_missing_weak_symbol():
    lib = Path(torch.__file__).parent / "lib" / "libtorch.so"
    assert any(s.startswith(REMOVE_ALL) for s in dynamic_symbols(lib, undefined=False)), "libtorch.so no longer exports remove_all"
    weak = subprocess.run(["nm", "-D", str(lib)], capture_output=True, text=True, check=True).stdout
    assert any(" w " in line and "recursive_directory_iterator7__erase" in line for line in weak.splitlines())


def test_no_nala_binary_imports_remove_all():
    binaries = [BUILD / "nala", BUILD / "nala_testtool", *sorted((BUILD / "lib").glob("libnala_*.so"))]
    assert len(binaries) >= 10, binaries
    offenders = {b.name: s for b in binaries for s in dynamic_symbols(b, undefined=True) if s.startswith(REMOVE_ALL)}
    assert not offenders, f"binaries that call std::filesystem::remove_all (use io::remove_tree): {offenders}"
