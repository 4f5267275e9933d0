"""``kern test`` on real candidate commits that change what a kernel computes (CPU, small
config, Triton interpreter): bit-identical, re-associated, wrong, partly unwritten, special-
cased to the bucket sizes. Candidates whose side raises, crashes, runs out of memory or hangs
are test_accuracy_gate_sides.py's (another module, so the two CI workers share them).

One temporary repository; the candidates run two at a time, each judgment recording main
(two at once on the same touched ops share one recording). Each case asserts the verdict and
the reason the gate gives; once all are judged no recording's tensors are left.
"""
from __future__ import annotations

import pytest

from tests.gates.candidates import accuracy_verdicts, reasons, tensors_left

# slow: after the unit tests (.ci/run), on one of the two workers
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
    "bucket_special_case": [(COMBINE, "    if rows == 0:\n        return\n",
                             "    rows = rows - rows % 8  # only whole groups of 8 rows\n"
                             "    if rows == 0:\n        return\n")],
}
# the tap also runs every bucket: one bucket among the test rows keeps it at these four sizes
SETTINGS = {"profiles.cpu.test_rows": [1, 3, 8, 17], "profiles.cpu.test_steps": 1,
            "profiles.cpu.buckets": [8], "profiles.cpu.weights": [1], "test.timeout_s": 150}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return accuracy_verdicts(tmp_path_factory.mktemp("gate"), SETTINGS, CASES)


def test_identical_tree_is_bit_identical(verdicts):
    r = verdicts["identical"]
    assert r["verdict"] == "PASS bit-identical", reasons(r)
    assert r["evidence"]["tap"]["calls"] > 100
    # a bit-identical candidate never pays for A's repeat and band passes
    assert r["evidence"]["outcome_noise"] == "not needed" and "noise" not in r["evidence"]


def test_reordered_reduction_passes_on_evidence_or_noise(verdicts):
    r = verdicts["reordered"]
    assert r["verdict"] in ("PASS logit evidence", "PASS within noise floor"), reasons(r)
    local = r["evidence"]["local"]["ops"]
    assert "mla.index_logits" in local and local["mla.index_logits"]["differing"] > 0
    # A's noise passes ran exactly when the verdict without them was not a PASS
    if r["verdict"] == "PASS within noise floor":
        assert r["evidence"]["outcome_noise"] == "ok" and r["evidence"]["band"]["rows"] > 0
    else:
        assert r["evidence"]["outcome_noise"] == "not needed" and "band" not in r["evidence"]


def test_dropped_decay_fails_against_the_reference(verdicts):
    r = verdicts["dropped_decay"]
    assert r["verdict"] == "FAIL", reasons(r)
    assert "kda.core" in reasons(r)


def test_off_by_one_in_topk_fails(verdicts):
    r = verdicts["topk_off_by_one"]
    assert r["verdict"] == "FAIL", reasons(r)
    assert "mla.topk" in reasons(r)


def test_kernel_that_skips_part_of_its_output_fails(verdicts):
    r = verdicts["skips_output"]
    assert r["verdict"] == "FAIL", reasons(r)
    assert "not fully written" in reasons(r) and "moe.combine" in reasons(r)


def test_kernel_special_cased_to_bucket_sizes_fails_on_awkward_sizes(verdicts):
    r = verdicts["bucket_special_case"]
    assert r["verdict"] == "FAIL", reasons(r)
    unwritten = r["evidence"]["tap"]["unwritten"]
    assert unwritten and all(" r8 " not in u for u in unwritten), unwritten


def test_no_recording_outlives_its_verdicts(verdicts):
    # PASS, FAIL with and without A's noise passes: main's recordings and the candidates' tensors
    assert tensors_left(verdicts.values()) == []
