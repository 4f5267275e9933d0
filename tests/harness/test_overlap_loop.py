"""A loop tick on one slot starts the next judgment's tap sides (a batch's next member's, or the
next batch's first member's: its main's record side and its replay) while the judgment before it
is in its scorer (harness/orchestrator.py ``Ahead``; the rule: gates/rules/overlap.py): real accuracy
sides on the CPU (small config), the scorer a stand-in that waits until the next member's side
is held. The held side imported no tree's module and made no CUDA context before its go; the
verdicts are those of members judged one after another; a crash or a halt in the first member's
judgment ends the prepared side with its folder and leaves no process."""
from __future__ import annotations

import json
import time

import pytest

from gates.launch import held as H
from gates.rules.footprint import DiskShort
from harness import ledger as L
from harness.orchestrator import Orchestrator
from tests.gates.candidates import ONE_ROW_TAP, candidate, process_gone, context, make_repo, tensors_left
from tests.harness.test_batch_loop import EDIT2
from tests.harness.test_faults import COMBINE_EDIT, EDIT, faster, queued

pytestmark = pytest.mark.slow


class Watched:
    """Every hold a side reached (its report, pids), every EarlySides prepared and the request
    it was prepared for; the scorer stand-in waits (up to a minute) until ``sides`` sides are
    held (a tuple: the k-th scorer waits for its k-th count), then answers ``answer(req)``."""

    def __init__(self, monkeypatch, answer, sides=1):
        import gates.accuracy as acc

        self.holds, self.early, self.scored, self.prepared_for = [], [], [], []
        need = sides if isinstance(sides, tuple) else (sides,)
        real_held, real_prepare = H.Hold.held, acc.prepare_early

        def held(hold, proc, report):
            self.holds.append(hold)
            return real_held(hold, proc, report)

        def prepare(*a, **k):
            self.prepared_for.append(a[0])
            e = real_prepare(*a, **k)
            self.early.append(e)
            return e

        def bench(req, progress=print, stores=None):
            deadline = time.monotonic() + 60
            k = len(self.scored)  # the k-th scorer waits for need[k] holds (none past the list)
            while k < len(need) and len(self.holds) < need[k] and time.monotonic() < deadline:
                time.sleep(0.2)
            self.scored.append(req.rev)
            return answer(req)

        monkeypatch.setattr(H.Hold, "held", held)
        monkeypatch.setattr(acc, "prepare_early", prepare)
        monkeypatch.setattr("gates.scorer.run_bench", bench)


def _first_scorer_ends(how: str, scored):
    """A scorer stand-in: the first judgment's scorer (``scored()`` is 1: the next sides are
    held by then) ends in a crash or, ``how`` "halt", a full disk; later ones find a gain."""
    def answer(req):
        if scored() == 1:
            if how == "halt":
                raise DiskShort("disk full: runs/ is short (a test)", "runs", 1, 0)
            raise RuntimeError("the scorer broke (a test)")
        return faster(req.machine, req.scorer, -0.12)
    return answer


def _tests(ctx, ns):
    return [json.loads((ctx.runs / "attempts" / str(n) / "judgment-1.json").read_text()) for n in ns]


def _two(tmp_path, second=EDIT2, settings=None):
    repo = make_repo(tmp_path, {**ONE_ROW_TAP, **(settings or {})})
    shas = [candidate(repo, name, [edit]) for name, edit in (("s1", EDIT), ("s2", second))]
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
    assert pids and all(process_gone(p) for p in pids)


@pytest.mark.parametrize("how", ["crash", "halt"])
def test_a_crash_or_halt_in_the_first_judgment_ends_the_prepared_side(tmp_path, monkeypatch, how):
    ctx, ns = _two(tmp_path)

    seen = Watched(monkeypatch, _first_scorer_ends(how, lambda: len(seen.scored)))
    Orchestrator(ctx).tick(spawn=False)
    assert seen.early and seen.early[0] is not None and seen.holds
    pids = [p for h in seen.holds[:1] for p in h.pids]
    assert pids and all(process_gone(p) for p in pids)
    assert not seen.early[0].b_dir.exists()  # its folder went with it
    first, second = (ctx.ledger.attempt(n) for n in ns)
    if how == "halt":  # the loop stops: the next member is left for the next loop
        assert first.state == L.QUEUED and second.state == L.QUEUED
    else:  # the next member is judged on sides of its own
        assert first.state == L.CRASHED and second.state == L.ABANDONED
        assert _tests(ctx, ns[1:])[0]["test"]["early"] is None


def _verdicts(ctx, ns):
    return [(d["test"]["verdict"], d["test"]["reasons"], ctx.ledger.attempt(n).state)
            for n, d in zip(ns, _tests(ctx, ns))]


def test_across_batches_the_next_batchs_sides_start_held_beside_the_scorer(tmp_path, monkeypatch):
    """Two candidates touching different ops: two batches of one. The second's main record side
    and replay start held during the first's scorer, on its draw made then; its verdict, its
    row's draw and everything left behind are those of judging them one after another."""
    # one after another: nothing prepared (the same tick with kern.yaml's overlap off)
    with monkeypatch.context() as m:
        m.setattr("gates.scorer.run_bench", lambda req, progress=print, stores=None:
                  faster(req.machine, req.scorer, -0.12))
        ctx0, ns0 = _two(tmp_path / "alone", COMBINE_EDIT, {"test.start_beside_scorer": False})
        Orchestrator(ctx0).tick(spawn=False)
        alone = _verdicts(ctx0, ns0)
        assert [d["test"].get("early") for d in _tests(ctx0, ns0)] == [None, None]
    ctx, ns = _two(tmp_path / "overlap", COMBINE_EDIT)
    seen = Watched(monkeypatch, lambda req: faster(req.machine, req.scorer, -0.12), sides=2)
    Orchestrator(ctx).tick(spawn=False)
    assert _verdicts(ctx, ns) == alone and [v for v, _, _ in alone] == ["PASS bit-identical"] * 2
    docs = _tests(ctx, ns)
    tests = [d["test"] for d in docs]
    assert tests[0]["a_dir"] != tests[1]["a_dir"] and not tests[1]["a_cached"]  # two recordings
    early = tests[1]["early"]
    assert early["sides"] == ["A record", "B replay"] and early["of"] == f"#{ns[0]} scorer"
    clean = {"kernels": False, "cuda": False, "triton": True}
    assert early["held"] == {"A early": clean, "B early": clean}
    t = tests[1]["timeline"]
    for x in ("a", "b"):  # started in the first's scorer, went on only after its end
        assert t["scorer_started"] <= t[f"{x}_early"] < t[f"{x}_held"] < t["scorer_done"] <= t[f"{x}_go"], t
    assert t["a_go"] <= t["a_recorded"] and t["b_go"] <= t["b_released"], t
    # the draw made as it was prepared is the one it was judged on, in its row as a batch of
    # one's is (with its verdict); the first judgment's is another
    (req,) = seen.prepared_for
    rows = [ctx.ledger.attempt(n) for n in ns]
    assert rows[1].hidden == req.hidden.to_dict() and rows[0].hidden != rows[1].hidden
    parts = {b["part"] for b in docs[1]["times"]["beside"]}
    assert {"A early", "B early"} <= parts
    assert tensors_left(tests) == []
    pids = [p for h in seen.holds for p in h.pids]
    assert len(seen.holds) == 2 and all(process_gone(p) for p in pids)


@pytest.mark.parametrize("how", ["crash", "halt"])
def test_a_crash_or_halt_ends_the_next_batchs_prepared_sides(tmp_path, monkeypatch, how):
    ctx, ns = _two(tmp_path, COMBINE_EDIT)

    seen = Watched(monkeypatch, _first_scorer_ends(how, lambda: len(seen.scored)), sides=2)
    Orchestrator(ctx).tick(spawn=False)
    (early,) = seen.early
    assert early is not None and early.sides == ("A record", "B replay") and len(seen.holds) >= 2
    pids = [p for h in seen.holds[:2] for p in h.pids]
    assert pids and all(process_gone(p) for p in pids)
    assert not early.a_dir.exists() and not early.b_dir.exists()  # its folders went with them
    first, second = (ctx.ledger.attempt(n) for n in ns)
    if how == "halt":  # the loop stops: nothing judged the next, its draw never written
        assert first.state == L.QUEUED and second.state == L.QUEUED and second.hidden is None
        # runs/tap keeps the first judgment's folders alone: none of the next's, made early
        # (beside each folder a judgment held, an empty ``.use`` lock file stays: disk.Recordings)
        left = [p.name for p in (ctx.runs / "tap").iterdir() if p.is_dir()]
        mine = early.b_dir.name.split("-vs-")[0]
        assert left and not [x for x in left if x.startswith(mine) or x.startswith(early.a_dir.name)], left
    else:  # the next is judged on sides and a draw of its own
        assert first.state == L.CRASHED and second.state == L.ABANDONED
        doc = _tests(ctx, ns[1:])[0]
        assert doc["test"]["early"] is None
        assert second.hidden != seen.prepared_for[0].hidden.to_dict()


def test_the_next_batch_of_two_is_prepared_then_its_second_member(tmp_path, monkeypatch):
    """A moe.combine edit (a batch of one), then two moe.situ edits (a batch of two): during the
    first's scorer the batch's first member's main record side and replay start held on the
    batch's draw, made then; the batch's recording is that side's, and during its scorer the
    second member's replay starts held against it."""
    repo = make_repo(tmp_path, ONE_ROW_TAP)
    shas = [candidate(repo, name, [edit]) for name, edit in (("c", COMBINE_EDIT), ("s1", EDIT), ("s2", EDIT2))]
    ctx, _ = context(repo)
    ns = [queued(ctx, sha, f"cand {i}") for i, sha in enumerate(shas)]
    seen = Watched(monkeypatch, lambda req: faster(req.machine, req.scorer, -0.12), sides=(2, 3))
    Orchestrator(ctx).tick(spawn=False)
    docs = _tests(ctx, ns)
    tests = [d["test"] for d in docs]
    assert [t["verdict"] for t in tests] == ["PASS bit-identical"] * 3, [t["reasons"] for t in tests]
    assert [ctx.ledger.attempt(n).state for n in ns] == [L.ABANDONED] * 3
    assert tests[0]["early"] is None
    assert tests[1]["early"]["sides"] == ["A record", "B replay"] and tests[1]["early"]["of"] == f"#{ns[0]} scorer"
    assert tests[2]["early"]["sides"] == ["B replay"] and tests[2]["early"]["of"] == f"#{ns[1]} scorer"
    # one recording for the batch, made by the side started early; one draw, made as it was
    # prepared, in both members' rows once the batch settled
    assert tests[1]["a_dir"] == tests[2]["a_dir"] and tests[2]["a_cached"] and not tests[1]["a_cached"]
    drawn = seen.prepared_for[0].hidden.to_dict()
    rows = [ctx.ledger.attempt(n) for n in ns]
    assert rows[1].hidden == rows[2].hidden == drawn != rows[0].hidden
    assert seen.prepared_for[1].hidden.to_dict() == drawn
    assert tensors_left(tests) == []
    pids = [p for h in seen.holds for p in h.pids]
    assert len(seen.holds) == 3 and all(process_gone(p) for p in pids)


def test_a_merge_keeps_the_next_batchs_prepared_sides_and_a_win_after_it_is_judged_again_alone(
        tmp_path, monkeypatch):
    """Both candidates win, two batches of one: the first merges; the second's prepared sides
    (on its own base, which the merge did not move) are the ones its first judgment runs on;
    it wins on a main that moved, so it is rebased and judged again on sides of its own."""
    ctx, ns = _two(tmp_path, COMBINE_EDIT)
    seen = Watched(monkeypatch, lambda req: faster(req.machine, req.scorer), sides=2)
    Orchestrator(ctx).tick(spawn=False)
    first, second = (ctx.ledger.attempt(n) for n in ns)
    assert first.state == L.MERGED and second.state == L.MERGED, (first.reason, second.reason)
    d = ctx.runs / "attempts" / str(ns[1])
    once, again = (json.loads((d / f"judgment-{i}.json").read_text())["test"] for i in (1, 2))
    assert once["early"]["sides"] == ["A record", "B replay"] and once["early"]["of"] == f"#{ns[0]} scorer"
    assert again["early"] is None  # the rebased commit against the new main: nothing prepared
    assert once["verdict"] == again["verdict"] == "PASS bit-identical"
    assert len(seen.early) == 1 and len(seen.holds) == 2
    assert all(process_gone(p) for h in seen.holds for p in h.pids)
