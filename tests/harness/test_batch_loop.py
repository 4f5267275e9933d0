"""A loop tick on one slot records main once per batch of frozen candidates (gates/rules/batch.py,
harness/orchestrator.py ``_judge_in_batches``): the bookkeeping, with the gates as stand-ins at
the shell boundary (tests/harness/test_faults.py's); a real batch's sides: tests/gates/test_batch_sides.py."""
from __future__ import annotations

import json

import pytest

from gates.accuracy import MainRecording
from harness import ledger as L
from harness.orchestrator import Orchestrator
from tests.gates.candidates import ONE_ROW_TAP, candidate, context, make_repo
from tests.harness.test_faults import COMBINE_EDIT, EDIT, SITU, Gates, faster, queued

EDIT2 = (SITU, "def moe_situ(", "# another comment\ndef moe_situ(")
EDIT3 = (SITU, "def moe_situ(", "# a third comment\ndef moe_situ(")


class Seen(Gates):
    """The stand-ins, remembering each accuracy gate's hidden inputs and shared recording; the
    scorer says B is 12 % slower (abandoned) unless its commit is in ``wins``."""

    def __init__(self, monkeypatch, wins=()):
        super().__init__(monkeypatch)
        self.tests, self.wins = [], set(wins)

    def run_test(self, req, progress=None, recording=None):
        self.tests.append((req.rev, req.hidden, recording))
        return super().run_test(req, progress)

    def run_bench(self, req, progress=print, stores=None):
        self.calls.append(("bench", req.rev, req.base))
        return faster(req.machine, req.scorer, 0.12 if req.rev in self.wins else -0.12)


def _hidden_after_last_verdict(led, batch):
    """Every member's draw was written after every member's final transition."""
    events = [e for n in batch for e in led.events(n)]
    last_final = max(e.id for e in events if e.kind == "transition" and e.data["to"] in L.FINAL)
    written = [e for e in events if e.kind == "hidden"]
    assert len(written) == len(batch) and min(e.id for e in written) > last_final
    # the final transitions themselves carry no draw
    assert not any("hidden" in e.data for e in events if e.kind == "transition")


def test_one_draw_and_one_recording_per_run_of_one_main_and_shape(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    shas = [candidate(repo, name, [edit]) for name, edit in
            (("s1", EDIT), ("s2", EDIT2), ("c", COMBINE_EDIT))]
    ctx, _ = context(repo)
    ns = [queued(ctx, sha, f"cand {i}") for i, sha in enumerate(shas)]
    gates = Seen(monkeypatch)
    Orchestrator(ctx).tick(spawn=False)
    rows = [ctx.ledger.attempt(n) for n in ns]
    assert [a.state for a in rows] == [L.ABANDONED] * 3
    (r1, h1, rec1), (r2, h2, rec2), (r3, h3, rec3) = gates.tests
    assert (r1, r2, r3) == tuple(shas)
    # the two moe.situ edits: one draw, one recording object; the combine edit: on its own
    assert isinstance(rec1, MainRecording) and rec2 is rec1 and rec1.hidden == h1 == h2
    assert rec3 is None and h3 != h1  # a batch of one: the gates draw its own, as for kern try
    assert rows[0].hidden == rows[1].hidden == h1.to_dict()
    assert rows[2].hidden is not None and rows[2].hidden != rows[0].hidden
    _hidden_after_last_verdict(ctx.ledger, ns[:2])


def test_a_merge_ends_the_batch_and_the_rest_get_a_new_draw(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    shas = [candidate(repo, name, [edit]) for name, edit in
            (("s1", EDIT), ("s2", EDIT2), ("s3", EDIT3))]
    ctx, _ = context(repo)
    main0 = ctx.repo.main_sha()
    ns = [queued(ctx, sha, f"cand {i}") for i, sha in enumerate(shas)]
    gates = Seen(monkeypatch, wins={shas[0]})
    Orchestrator(ctx).tick(spawn=False)
    rows = [ctx.ledger.attempt(n) for n in ns]
    assert [a.state for a in rows] == [L.MERGED, L.ABANDONED, L.ABANDONED]
    (_, h1, rec1), (_, h2, rec2), (_, h3, rec3) = gates.tests
    assert rec2 is rec3 and rec2 is not rec1 and h2 == h3 != h1  # drawn again after the merge
    assert [a.hidden for a in rows] == [h1.to_dict(), h2.to_dict(), h2.to_dict()]
    assert all(base == main0 for _, _, base in gates.calls)  # each judged against the base it was made on
    # the merge settled the first batch: its draw went into the row with the merge's evidence
    assert [e.kind for e in ctx.ledger.events(ns[0]) if "hidden" in e.data] == ["update"]
    _hidden_after_last_verdict(ctx.ledger, ns[1:])


@pytest.mark.parametrize("settings", [{"sandbox": "off"}, {"test.record_once_per_batch": False}],
                         ids=["sandbox off", "record_once_per_batch off"])
def test_without_a_sandbox_or_with_batching_off_every_candidate_draws_its_own(tmp_path, monkeypatch, settings):
    repo = make_repo(tmp_path, settings)
    shas = [candidate(repo, name, [edit]) for name, edit in (("s1", EDIT), ("s2", EDIT2))]
    ctx, _ = context(repo)
    ns = [queued(ctx, sha, f"cand {i}") for i, sha in enumerate(shas)]
    gates = Seen(monkeypatch)
    Orchestrator(ctx).tick(spawn=False)
    assert [rec for _, _, rec in gates.tests] == [None, None]
    a1, a2 = (ctx.ledger.attempt(n) for n in ns)
    assert a1.hidden != a2.hidden


def test_a_batchs_draw_is_written_once_into_a_final_row(tmp_path):
    from harness.ledger import Ledger, LedgerError
    from tests.harness.sample import FixedClock

    led = Ledger(tmp_path / "ledger.sqlite", clock=FixedClock())
    phase = led.phase({"model": "test"})
    n = led.new_attempt(title="t", hypothesis="", target="moe.situ", backend="manual",
                        base_sha="b" * 40, phase_id=phase)
    led.transition(n, L.JUDGING, commit_sha="c" * 40)
    led.transition(n, L.ABANDONED, reason="accuracy")
    with pytest.raises(LedgerError, match="final"):  # any other fact of a final row: refused
        led.update(n, hidden={"input_seed": 1, "extra_rows": []})
    led.record_hidden(n, {"input_seed": 1, "extra_rows": []})
    assert led.attempt(n).hidden == {"input_seed": 1, "extra_rows": []}
    assert led.attempt(n).state == L.ABANDONED and led.events(n)[-1].kind == "hidden"
    with pytest.raises(LedgerError, match="recorded already"):
        led.record_hidden(n, {"input_seed": 2, "extra_rows": []})
    assert led.attempt(n).hidden["input_seed"] == 1


SMALL = ONE_ROW_TAP


@pytest.mark.slow
def test_a_loop_tick_judges_a_batch_on_real_sides_with_main_recorded_once(tmp_path, monkeypatch):
    """The loop's whole path (orchestrator, pipeline, gates.judging, the accuracy gate's real
    sides; the scorer a stand-in, slower): two moe.situ edits of one main, one recording."""
    from tests.gates.candidates import tensors_left

    repo = make_repo(tmp_path, SMALL)
    shas = [candidate(repo, name, [edit]) for name, edit in (("s1", EDIT), ("s2", EDIT2))]
    ctx, _ = context(repo)
    ns = [queued(ctx, sha, f"cand {i}") for i, sha in enumerate(shas)]
    monkeypatch.setattr("gates.scorer.run_bench",
                        lambda req, progress=print, stores=None: faster(req.machine, req.scorer, -0.12))
    Orchestrator(ctx).tick(spawn=False)
    rows = [ctx.ledger.attempt(n) for n in ns]
    tests = [json.loads((ctx.runs / "attempts" / str(n) / "judgment-1.json").read_text())["test"]
             for n in ns]
    assert [t["verdict"] for t in tests] == ["PASS bit-identical"] * 2, [t["reasons"] for t in tests]
    assert [a.state for a in rows] == [L.ABANDONED] * 2
    assert tests[0]["a_dir"] == tests[1]["a_dir"] and tests[0]["hidden"] == tests[1]["hidden"]
    assert not tests[0]["a_cached"] and tests[1]["a_cached"]  # main's side ran for the first only
    assert tests[0]["a_wall_s"] > 0 and tests[1]["a_wall_s"] == 0.0 and tests[1]["b_wall_s"] > 0
    assert rows[0].hidden == rows[1].hidden == tests[0]["hidden"]
    assert tensors_left(tests) == []

