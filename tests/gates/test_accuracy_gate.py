"""``kern test`` on real candidate commits (CPU, small config, Triton interpreter).

One temporary repository; side A (main) is recorded once per touched-op set and reused; the
candidates run two at a time. Each case asserts the verdict and the reason the gate gives.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from gates.accuracy import AccuracyRequest, run_test
from harness.settings import load
from tests.gates.candidates import candidate, make_repo

# slow: run serially after the unit tests (.ci/run), so the A/B timings of the bench and
# loop tests never share the two cores with other interpreter processes
pytestmark = pytest.mark.slow

COMBINE = "kernels/k31/moe/combine.py"
CASES = {
    "identical": [(COMBINE, "def moe_combine(", "# a comment that changes no instruction\ndef moe_combine(")],
    # the same math re-associated: the scale goes inside the head sum (f32 bits change)
    "reordered": [("kernels/k31/mla/indexer.py", "logit = tl.sum(s * w[:, None], axis=0) * coef",
                   "logit = tl.sum(s * (w * coef)[:, None], axis=0)")],
    "dropped_decay": [("kernels/k31/kda/core.py", "s = s * decay[:, None, :]", "s = s  # decay dropped")],
    "topk_off_by_one": [("kernels/k31/mla/topk.py",
                         "n = tl.minimum(tl.load(ctx_ptr + row).to(tl.int32), cap)",
                         "n = tl.minimum(tl.load(ctx_ptr + row).to(tl.int32) - 1, cap)")],
    "skips_output": [(COMBINE, "mask=ok)", "mask=ok & (d < latent - 1))")],
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
    "hangs": [("kernels/k31/moe/situ.py", "    rows, inter = out.shape\n",
               "    rows, inter = out.shape\n    import time\n    while True:\n        time.sleep(1)\n")],
    "bucket_special_case": [(COMBINE, "    if rows == 0:\n        return\n",
                             "    rows = rows - rows % 8  # only whole groups of 8 rows\n"
                             "    if rows == 0:\n        return\n")],
}
# the tap also runs every bucket: one bucket among the test rows keeps it at these four sizes
SETTINGS = {"profiles.cpu.test_rows": [1, 3, 8, 17], "profiles.cpu.test_steps": 1,
            "profiles.cpu.buckets": [8], "profiles.cpu.weights": [1], "test.timeout_s": 150}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gate")
    repo = make_repo(tmp, SETTINGS)
    shas = {name: candidate(repo, name, edits) for name, edits in CASES.items()}
    settings = load(repo / "kern.yaml")
    prof = settings.profile(torch.cuda.is_available())

    def judge(sha):
        req = AccuracyRequest(repo, sha, "main", settings.data, prof, repo / "runs", torch.cuda.is_available())
        return run_test(req).report

    # record A once for the 'touches combine' set and once for 'touches everything', then the
    # candidates two at a time (the interpreter is CPU-bound; CI has two cores)
    out = {"identical": judge(shas["identical"])}
    with ThreadPoolExecutor(2) as pool:
        futures = {n: pool.submit(judge, s) for n, s in shas.items() if n != "identical"}
        out.update({n: f.result() for n, f in futures.items()})
    return out


def _why(res) -> str:
    return " | ".join(res["reasons"])


def test_identical_tree_is_bit_identical(verdicts):
    r = verdicts["identical"]
    assert r["verdict"] == "PASS bit-identical", _why(r)
    assert r["evidence"]["tap"]["calls"] > 100
    # a bit-identical candidate never pays for A's repeat and band passes
    assert r["evidence"]["outcome_noise"] == "not needed" and "noise" not in r["evidence"]


def test_reordered_reduction_passes_on_evidence_or_noise(verdicts):
    r = verdicts["reordered"]
    assert r["verdict"] in ("PASS logit evidence", "PASS within noise floor"), _why(r)
    local = r["evidence"]["local"]["ops"]
    assert "mla.index_logits" in local and local["mla.index_logits"]["differing"] > 0
    # A's noise passes ran exactly when the verdict without them was not a PASS
    if r["verdict"] == "PASS within noise floor":
        assert r["evidence"]["outcome_noise"] == "ok" and r["evidence"]["band"]["rows"] > 0
    else:
        assert r["evidence"]["outcome_noise"] == "not needed" and "band" not in r["evidence"]


def test_dropped_decay_fails_against_the_reference(verdicts):
    r = verdicts["dropped_decay"]
    assert r["verdict"] == "FAIL", _why(r)
    assert "kda.core" in _why(r)


def test_off_by_one_in_topk_fails(verdicts):
    r = verdicts["topk_off_by_one"]
    assert r["verdict"] == "FAIL", _why(r)
    assert "mla.topk" in _why(r)


def test_kernel_that_skips_part_of_its_output_fails(verdicts):
    r = verdicts["skips_output"]
    assert r["verdict"] == "FAIL", _why(r)
    assert "not fully written" in _why(r) and "moe.combine" in _why(r)


def test_kernel_that_raises_fails(verdicts):
    r = verdicts["raises"]
    assert r["verdict"] == "FAIL" and r["evidence"]["outcome_b"] == "error", _why(r)


def test_kernel_that_crashes_the_process_fails(verdicts):
    r = verdicts["segfault"]
    assert r["verdict"] == "FAIL", _why(r)
    assert r["evidence"]["outcome_b"].startswith("crash"), r["evidence"]["outcome_b"]


def test_kernel_that_allocates_more_than_the_side_may_hold_fails_naming_memory(verdicts):
    r = verdicts["oom"]
    assert r["verdict"] == "FAIL" and r["evidence"]["outcome_b"] == "out of memory", _why(r)
    assert "candidate side ended: out of memory" in r["reasons"]


def test_kernel_that_never_returns_fails_by_timeout(verdicts):
    r = verdicts["hangs"]
    assert r["verdict"] == "FAIL" and r["evidence"]["outcome_b"] == "timeout", _why(r)


def test_kernel_special_cased_to_bucket_sizes_fails_on_awkward_sizes(verdicts):
    r = verdicts["bucket_special_case"]
    assert r["verdict"] == "FAIL", _why(r)
    unwritten = r["evidence"]["tap"]["unwritten"]
    assert unwritten and all(" r8 " not in u for u in unwritten), unwritten
