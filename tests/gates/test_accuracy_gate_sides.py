"""``kern test`` on candidate commits whose side ends badly (CPU, small config, Triton
interpreter): the kernel raises, crashes the process, allocates more than the side may hold,
or never returns. Each is a FAIL naming how the candidate's side ended.

What these prove does not depend on the tap's sizes, so the tap is the smallest (one test row,
one bucket; test_accuracy_gate.py keeps the awkward sizes for what does). One repository, the
candidates two at a time (main recorded for each: every case touches moe.situ): the hang's side
runs to test.timeout_s while the other three are judged beside it, one after another. The hang
is judged on a hidden draw of its own (what it proves does not depend on its inputs), so main's
recording for it is its own: on the draw the others share, its judgment would hold that
recording's lock until its timeout and the others would wait for it (measured 2026-12-06: the
module's 158 s in CI were the hang's 90 s and then the three, one after another).
Each side's last words name its log; none of the recordings' tensors outlive the verdicts.
"""
from __future__ import annotations

import pytest

from gates.protocol import Hidden
from tests.gates.candidates import accuracy_verdicts, reasons, tensors_left

# slow: after the unit tests (.ci/run), on one of the two workers
pytestmark = pytest.mark.slow

CASES = {
    "hangs": [("kernels/k31/moe/situ.py", "    rows, inter = out.shape\n",
               "    rows, inter = out.shape\n    import time\n    while True:\n        time.sleep(1)\n")],
    "raises": [("kernels/k31/moe/situ.py", "    rows, inter = out.shape\n",
                "    rows, inter = out.shape\n    raise RuntimeError('situ kernel refused')\n")],
    "segfault": [("kernels/k31/moe/situ.py", "    rows, inter = out.shape\n",
                  "    rows, inter = out.shape\n    import ctypes; ctypes.string_at(0)\n")],
    # more than the side may hold: the CPU sides' cap (half the RAM) or the GPU itself refuses
    "oom": [("kernels/k31/moe/situ.py", "    rows, inter = out.shape\n",
             "    rows, inter = out.shape\n    import os\n"
             "    n = (torch.cuda.get_device_properties(out.device).total_memory * 2 if out.is_cuda\n"
             "         else os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') * 3 // 4)\n"
             "    torch.empty(n, dtype=torch.uint8, device=out.device)\n")],
}
# test.timeout_s: the hang's side runs until it; main's recording of this tap takes under 15 s
# on the idle CI machine (2026-12-03), so 90 s leaves it room on a loaded one
SETTINGS = {"profiles.cpu.test_rows": [1], "profiles.cpu.test_steps": 1, "profiles.cpu.buckets": [2],
            "profiles.cpu.weights": [1], "test.timeout_s": 90}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return accuracy_verdicts(tmp_path_factory.mktemp("gate-sides"), SETTINGS, CASES,
                             hidden={"hangs": Hidden(20261206)})


def test_kernel_that_raises_fails(verdicts):
    r = verdicts["raises"]
    assert r["verdict"] == "FAIL" and r["evidence"]["outcome_b"] == "error", reasons(r)


def test_kernel_that_crashes_the_process_fails(verdicts):
    r = verdicts["segfault"]
    assert r["verdict"] == "FAIL", reasons(r)
    assert r["evidence"]["outcome_b"].startswith("crash"), r["evidence"]["outcome_b"]


def test_kernel_that_allocates_more_than_the_side_may_hold_fails_naming_memory(verdicts):
    r = verdicts["oom"]
    assert r["verdict"] == "FAIL" and r["evidence"]["outcome_b"] == "out of memory", reasons(r)
    assert "candidate side ended: out of memory" in r["reasons"]


def test_kernel_that_never_returns_fails_by_timeout(verdicts):
    r = verdicts["hangs"]
    assert r["verdict"] == "FAIL" and r["evidence"]["outcome_b"] == "timeout", reasons(r)


def test_no_recording_outlives_a_side_that_ended_badly(verdicts):
    assert tensors_left(verdicts.values()) == []
    words = {n: r["last_words"] for n, r in verdicts.items()}
    assert all(len(w) == 1 and w[0]["side"] == "B replay" and w[0]["log"].endswith("result.log")
               for w in words.values()), words
