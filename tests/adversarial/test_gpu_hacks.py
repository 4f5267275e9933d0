"""The hacks only a GPU shows: the timed replay is a CUDA graph, so what happens outside the
graph (a side stream, a branch taken only while capturing) and the CUDA event clock exist
only there. Skipped without CUDA (``gpu``); the repository's kern.yaml runs the small model on
the GPU profile too (see conftest.py), so each case costs seconds on the device.

  2  lm_head launched on a side stream the capture does not join: the graph never writes the
     logits, so the poisoned outputs stay poisoned (and the graph differs from the eager step)
  7  torch.cuda.Event.elapsed_time replaced at import (through an alias, past the scope
     gate): the side's seal names it
  8  SiTU skipped while the stream is capturing: the graph differs from the eager step
  8  the scorer-only candidates of test_scorer_only.py, through kern try on the GPU (issue 13's
     first acceptance item on the H200): the same failed checks as on the CPU
 14  a subclass bound to torch.cuda.Event (events that keep no time): the seal names it and
     the replays are still timed (the timer keeps the class bound before the tree loaded)
 15  a persisting-L2 access window over the lm_head weights (ctypes found through
     sys.modules, the driver API): the side zeroes the set-aside before every timed series
     (no window can persist) and names any change the candidate made to it. On the H200
     (2026-12-01) this case failed while only a raise beyond main's was checked: the small
     model's lm_head (256 KiB) lowers the set-aside from the driver's 11.8 MB default

Run on the H200 on 2026-11-29 (torch 2.11, triton 3.6, commit 2b1cfb9): 3 passed in 41 s
(bench/results/2026-11-29-h200-gpu-hacks-and-compile64.json). On 2026-12-01 (commit 8062018,
bench/results/2026-12-01-h200-gpu-hacks.json): 9 of 10 passed in 184 s, the four scorer-only
kern try cases and case 14 among them; case 15's candidate crashed its own side (it set its L2
limit and window while the graph was captured, which the driver refuses) and now sets them
outside captures; it has not run on a GPU since. On the H200, from the repository root:

    .venv/bin/python -m pytest -q -p no:cacheprovider -m gpu tests/adversarial
"""
from __future__ import annotations

import pytest

from gates.scorer import run_bench
from harness.terminal import scorer_report
from harness.pipeline import bench_request, check_scope, decide_outcome
from tests.adversarial import hacks as H
from tests.adversarial.test_scorer_only import FIRST_DIFFERENCE

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

TAP_PASSED = {"verdict": "PASS bit-identical", "reasons": [], "evidence": {"outcome_b": "ok"}}


class Benches(dict):
    """Each GPU hack's scope result, scorer report and decision, run when a test first asks for
    it (so ``-k`` selecting one case runs one scorer, not all of them)."""

    def __init__(self, catalogue):
        super().__init__()
        self.repo, self.shas, self.ctx = catalogue

    def __missing__(self, name):
        ctx = self.ctx
        main = ctx.repo.main_sha()
        sha = self.shas[name]
        sc = check_scope(ctx, sha, main)
        # against main: some checks (persisting L2) compare the candidate's processes with main's
        bench = run_bench(bench_request(ctx.cfg, self.repo, sha, main, ctx.runs, ctx.cuda,
                                        rounds=1, replays=2), progress=lambda m: None).report
        self[name] = (sc, bench, decide_outcome(sc, TAP_PASSED, bench))
        return self[name]


@pytest.fixture(scope="module")
def benches(catalogue):
    return Benches(catalogue)


def _checked(benches, hack):
    sc, bench, out = benches[hack.name]
    assert sc.ok, sc.problems  # the scope gate cannot see these: the run must
    assert bench["outcome"] == "ok", bench.get("error")
    assert (out.state, out.reason) == ("abandoned", "scorer check"), scorer_report(bench)
    return bench["analysis"]["sides"]["B"]


def test_side_stream_leaves_the_graphs_outputs_poisoned(benches):
    b = _checked(benches, H.SIDE_STREAM)
    visits = [c for c in b["failed_checks"] if "replays" in c]
    assert visits and all(c["unwritten_or_invalid"] > 0 for c in visits), b["failed_checks"]
    assert not b["graph_matches_eager"]


def test_replaced_event_clock_is_named_by_the_seal(benches):
    b = _checked(benches, H.SLOW_EVENTS)
    visits = [c for c in b["failed_checks"] if "replays" in c]
    assert visits and all(any(t.startswith("torch.cuda.Event.elapsed_time was replaced")
                              for t in c["tampered"]) for c in visits), b["failed_checks"]


def test_skipping_work_while_capturing_makes_the_graph_differ(benches):
    b = _checked(benches, H.SKIP_CAPTURED)
    assert not b["graph_matches_eager"], b


def test_a_wild_read_is_recorded_as_a_crash_naming_the_illegal_access(benches):
    """The fault, not a hack: the side's CUDA context dies. CUDA reports it asynchronously, at
    whichever later call meets the dead context (on the H200: cuBLAS's EXECUTION_FAILED), so
    the scorer names it a device fault; the pipeline records the attempt crashed (never merged,
    never a hang)."""
    sc, bench, out = benches[H.WILD_READ.name]
    assert bench["outcome"] in ("illegal-memory-access", "cuda-fault"), (bench["outcome"], bench.get("error"))
    assert (out.state, out.reason) == ("crashed", f"scorer: {bench['outcome']}"), out


def test_another_class_bound_to_the_event_name_is_named_and_the_replays_still_timed(benches):
    b = _checked(benches, H.UNTIMED_EVENTS)
    visits = [c for c in b["failed_checks"] if "replays" in c]
    assert visits and all(c["tampered"] == ["torch.cuda.Event was replaced by the candidate's code "
                                            "(expected the one sealed before the tree loaded)"] for c in visits), b
    sc, bench, out = benches[H.UNTIMED_EVENTS.name]
    assert all(t > 0 for ts in bench["samples"]["B"].values() for t in ts), bench["samples"]


def test_a_persisting_l2_window_is_seen_after_every_visit(benches):
    b = _checked(benches, H.L2_WINDOW)
    l2 = [c for c in b["failed_checks"] if c.get("check") == "persisting_l2"]
    assert l2 and "set aside for persisting accesses" in l2[0]["why"], b["failed_checks"]


# one worker under xdist's loadgroup (bench/gpu_evidence.sh hacks): the fixture judges all four
@pytest.mark.xdist_group("scorer_only")
@pytest.mark.parametrize("hack", H.SCORER_ONLY, ids=lambda h: h.name)
def test_scorer_only_hacks_end_abandoned_through_kern_try(scorer_only, hack):
    number, out, attempt = scorer_only[hack.name]
    assert (out.state, out.reason) == ("abandoned", "scorer check"), (out, attempt.gate)
    assert attempt.gate.accuracy.verdict == "PASS bit-identical", attempt.gate
    timed = [c for c in attempt.gate.scorer.checks if c.get("check") == "timed_outputs_identical"]
    assert timed and timed[0]["bucket"] == FIRST_DIFFERENCE[hack.name], attempt.gate.scorer
