"""Fixtures of the kernel tests (the ``device`` fixture lives in tests/conftest.py)."""
import pytest

from kernels.k31 import platform


@pytest.fixture
def gpu_launch(monkeypatch):
    """Launch every kernel with the GPU's tunable-driven configuration, under the interpreter too.

    Without it the launchers pick few-program interpreter shapes (``platform.FEW_PROGRAMS``),
    which ignore most tunables; tests of tunable choices, and one plain case per op, use this so
    that CI (no GPU) also runs the grids, blocks and splits the H200 runs. On a GPU it changes
    nothing."""
    monkeypatch.setattr(platform, "FEW_PROGRAMS", False)
