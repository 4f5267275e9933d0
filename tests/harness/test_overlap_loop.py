"""A loop tick on one slot starts a batch's next member's tap side while the member before it is in
its scorer (harness/orchestrator.py ``Ahead``; the rule: gates/rules/overlap.py): real accuracy
sides on the CPU (small config), the scorer a stand-in that waits until the next member's side
is held. The held side imported no tree's module and made no CUDA context before its go; the
verdicts are those of members judged one after another; a crash or a halt in the first member's
judgment ends the prepared side with its folder and leaves no process."""
from __future__ import annotations

import json
import os
import time

import pytest

from gates.launch import held as H
from gates.rules.footprint import DiskShort
from harness import ledger as L
from harness.orchestrator import Orchestrator
from tests.gates.candidates import ONE_ROW_TAP, candidate, context, make_repo, tensors_left
from tests.harness.test_batch_loop import EDIT2
from tests.harness.test_faults import EDIT, faster, queued

pytestmark = pytest.mark.slow


class Watched:
    """Every hold a side reached (its report, pids) and every EarlySides prepared; the scorer
    stand-in waits (up to a minute) until a side is held, then answers ``answer(req)``."""

    def __init__(self, monkeypatch, answer):
        import gates.accuracy as acc

        self.holds, self.early, self.scored = [], [], []
        real_held, real_prepare = H.Hold.held, acc.prepare_early

        def held(hold, proc, report):
            self.holds.append(hold)
            return real_held(hold, proc, report)

        def prepare(*a, **k):
            e = real_prepare(*a, **k)
            self.early.append(e)
            return e

        def bench(req, progress=print, stores=None):
            deadline = time.monotonic() + 60
            while len(self.scored) == 0 and not self.holds and time.monotonic() < deadline:
                time.sleep(0.2)
            self.scored.append(req.rev)
            return answer(req)

        monkeypatch.setattr(H.Hold, "held", held)
        monkeypatch.setattr(acc, "prepare_early", prepare)
        monkeypatch.setattr("gates.scorer.run_bench", bench)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _tests(ctx, ns):
    return [json.loads((ctx.runs / "attempts" / str(n) / "judgment-1.json").read_text()) for n in ns]


def _two(tmp_path):
    repo = make_repo(tmp_path, ONE_ROW_TAP)
    shas = [candidate(repo, name, [edit]) for name, edit in (("s1", EDIT), ("s2", EDIT2))]
    ctx, _ = context(repo)
    return ctx, [queued(ctx, sha, f"cand {i}") for i, sha in enumerate(shas)]


def test_the_next_members_side_starts_held_beside_the_scorer_and_verdicts_stand(tmp_path, monkeypatch):
    from gates.rules.phases import JudgmentTimes
    from harness.terminal import phase_lines

    ctx, ns = _two(tmp_path)
    seen = Watched(monkeypatch, lambda req: faster(req.machine, req.scorer, -0.12))
    Orchestrator(ctx).tick(spawn=False)
    rows = [ctx.ledger.attempt(n) for n in ns]
    docs = _tests(ctx, ns)
    tests = [d["test"] for d in docs]
    # the verdicts of members judged one after another (tests/harness/test_batch_loop.py's)
    assert [t["verdict"] for t in tests] == ["PASS bit-identical"] * 2, [t["reasons"] for t in tests]
    assert [a.state for a in rows] == [L.ABANDONED] * 2
    assert tests[0]["a_dir"] == tests[1]["a_dir"] and tests[1]["a_cached"]
    assert tests[0]["early"] is None  # the first member: nothing ran before it
    early = tests[1]["early"]
    assert early["sides"] == ["B replay"] and early["of"] == f"#{ns[0]} scorer"
    # at its hold point the side had imported no module of kernels/ and made no CUDA context
    assert early["held"] == {"B early": {"kernels": False, "cuda": False, "triton": True}}
    t = tests[1]["timeline"]
    # it started while the first member's scorer ran and went on only after that scorer ended
    assert t["scorer_started"] <= t["b_early"] < t["b_held"] < t["scorer_done"] <= t["b_go"], t
    assert t["b_go"] <= t["b_released"], t
    beside = [b for b in docs[1]["times"]["beside"] if b["part"] == "B early"]
    assert beside and beside[0]["of"] == f"#{ns[0]} scorer" and beside[0]["spans"][0]["phase"] == "start"
    # kern show's lines: the early start, off the path, beside the first member's scorer
    lines = "\n".join(phase_lines(JudgmentTimes.of_judgment(docs[1]), True))
    assert "beside     B early      start" in lines and f"#{ns[0]} scorer" in lines, lines
    print(lines)
    assert tensors_left(tests) == []
    pids = [p for h in seen.holds for p in h.pids]
    assert pids and all(_gone(p) for p in pids)


@pytest.mark.parametrize("how", ["crash", "halt"])
def test_a_crash_or_halt_in_the_first_judgment_ends_the_prepared_side(tmp_path, monkeypatch, how):
    ctx, ns = _two(tmp_path)

    def answer(req):
        if len(seen.scored) == 1:  # the first member's scorer, once the next side is held
            if how == "halt":
                raise DiskShort("disk full: runs/ is short (a test)", "runs", 1, 0)
            raise RuntimeError("the scorer broke (a test)")
        return faster(req.machine, req.scorer, -0.12)

    seen = Watched(monkeypatch, answer)
    Orchestrator(ctx).tick(spawn=False)
    assert seen.early and seen.early[0] is not None and seen.holds
    pids = [p for h in seen.holds[:1] for p in h.pids]
    assert pids and all(_gone(p) for p in pids)
    assert not seen.early[0].b_dir.exists()  # its folder went with it
    first, second = (ctx.ledger.attempt(n) for n in ns)
    if how == "halt":  # the loop stops: the next member is left for the next loop
        assert first.state == L.QUEUED and second.state == L.QUEUED
    else:  # the next member is judged on sides of its own
        assert first.state == L.CRASHED and second.state == L.ABANDONED
        assert _tests(ctx, ns[1:])[0]["test"]["early"] is None
