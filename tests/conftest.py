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
    from gates.interpreter import run_interpreted_kernels_fast

    run_interpreted_kernels_fast()  # as the gates' side processes run the kernels

import pytest

# One fresh seed per test session, drawn by the controller and inherited by pytest-xdist
# workers (they must collect the same parametrized test ids). Set KERN_TEST_SEED to replay.
os.environ.setdefault("KERN_TEST_SEED", str(int.from_bytes(os.urandom(4), "little")))
FRESH_SEED = int(os.environ["KERN_TEST_SEED"])


def pytest_report_header(config):
    return f"kern fresh test seed: KERN_TEST_SEED={FRESH_SEED}"


# The slow suite's modules that take longest on the CI machine, longest first (.ci/run hands
# modules to its two workers in collection order: --dist loadfile --no-loadscope-reorder). The
# longest starting first keeps the workers ending together: with xdist's own order (most tests
# first) test_loop.py, the longest, started late and one worker ran alone for its last ~5 min
# (2026-12-01, fresh clone of 4d47ae3: slowest setups test_loop 962 s, test_accuracy_gate 423 s,
# test_scorer_only 345 s, test_runtime_hacks 267 s; the demo's call 196 s). Since then the
# replay loop's one fixture (887 s idle on 2026-12-03) is three modules and the accuracy gate's
# two, measured with both workers busy and nothing else on the machine (2026-12-03):
# test_loop 240 s (its tuner test 207 s), test_loop_merge 209 s, test_loop_conflict 208 s,
# test_loop_rejects 120 s, test_accuracy_gate 101 s, test_accuracy_gate_sides 104 s (its
# hang's 90 s asleep: last). In b8e9172's CI run the demo's test took 159 s (its module has a
# simulation besides) and test_scorer_only's fixture 190 s. Every other module keeps its place
# after these.
# tests/test_ci_order.py holds each entry to an existing slow module.
LONGEST_FIRST = (
    "tests/harness/test_loop.py",
    "tests/harness/test_demo.py",
    "tests/harness/test_loop_merge.py",
    "tests/harness/test_loop_conflict.py",
    "tests/adversarial/test_scorer_only.py",
    "tests/gates/test_bench.py",
    "tests/adversarial/test_runtime_hacks.py",
    "tests/harness/test_loop_rejects.py",
    "tests/gates/test_accuracy_gate.py",
    "tests/gates/test_accuracy_gate_sides.py",
)


def longest_first(module_paths: list[str]) -> list[int]:
    """Pure: the order (indices into ``module_paths``) that runs LONGEST_FIRST's modules first,
    in its order, then every other in its own place (a stable sort)."""
    rank = {m: i for i, m in enumerate(LONGEST_FIRST)}
    return sorted(range(len(module_paths)), key=lambda i: rank.get(module_paths[i], len(rank)))


def pytest_collection_modifyitems(config, items):
    paths = [item.nodeid.split("::", 1)[0] for item in items]
    items[:] = [items[i] for i in longest_first(paths)]
    if _CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device():
    return "cuda" if _CUDA else "cpu"
