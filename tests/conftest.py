"""Test-wide setup: without a GPU, Triton kernels run in its interpreter on the CPU.

TRITON_INTERPRET must be set before triton is first imported, hence here at collection time.
"""
import os

try:
    import torch

    _CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a hard dependency
    _CUDA = False
if not _CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

# One fresh seed per test session, drawn by the controller and inherited by pytest-xdist
# workers (they must collect the same parametrized test ids). Set KERN_TEST_SEED to replay.
os.environ.setdefault("KERN_TEST_SEED", str(int.from_bytes(os.urandom(4), "little")))
FRESH_SEED = int(os.environ["KERN_TEST_SEED"])


def pytest_report_header(config):
    return f"kern fresh test seed: KERN_TEST_SEED={FRESH_SEED}"


def pytest_collection_modifyitems(config, items):
    if _CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device():
    return "cuda" if _CUDA else "cpu"
