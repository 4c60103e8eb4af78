"""Shared helpers for the Python oracle tests: where the build is, and how to run its programs."""
import os
import subprocess
from pathlib import Path

import pytest

BUILD = Path(os.environ.get("NALA_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
SOURCE = Path(os.environ.get("NALA_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def run(*args, check=True, timeout=900):
    """Runs a program of the build (nala or nala_testtool) and returns the CompletedProcess."""
    prog = str(BUILD / args[0])
    p = subprocess.run([prog, *map(str, args[1:])], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture
def tmp(tmp_path):
    return tmp_path
