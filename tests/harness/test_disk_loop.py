"""A short disk and a side's last words as the loop, ``kern try``, ``kern show`` and the journey
see them (CPU). The gates are stand-ins at the shell boundary (``gates.accuracy.run_test``,
as in test_faults.py) returning what a real side's failure reports; the disk check before a
judgment is the real one, on a file system whose free space the test sets
(``gates.launch.disk.free_bytes``). What real sides do on a full disk is test_disk_sides.py's."""
from __future__ import annotations

import json

import pytest

from gates.events import SideEnded
from gates.launch import disk
from gates.results import DISK_FULL, LastWords
from harness import cli
from harness import ledger as L
from harness.journey import result
from harness.orchestrator import Orchestrator
from harness.pipeline import try_commit
from tests.gates.candidates import candidate, context, make_repo
from tests.harness.test_faults import EDIT, Gates, queued

KILLED = LastWords("B replay", "crash (signal SIGKILL)", ("tap: rows 17, step 0", "tap: saving logits"),
                   "/r/runs/tap/c-vs-m/result.log")
FULL = LastWords("A record", DISK_FULL, ("RuntimeError: [enforce fail at inline_container.cc:672] . "
                                         "unexpected pos 576 vs 534",
                                         "environment: disk: no space left on the disk holding /r/runs/tap/m-k "
                                         "(0 bytes free there after the side's write failed)"),
                 "/r/runs/tap/m-k/record.log")


def _ended(words: LastWords, verdict="FAIL"):
    """run_test's report when side ``words.side`` ended as ``words`` say."""
    a = words.kind if words.side.startswith("A") else "ok"
    b = words.kind if words.side.startswith("B") else ("not run" if a != "ok" else "ok")

    def run_test(req, progress=None, recording=None):
        return {"verdict": verdict, "reasons": [f"a side ended: {words.kind}"],
                "evidence": {"outcome_a": a, "outcome_b": b}, "last_words": [words.to_dict()]}
    return run_test


def kern(capsys, *args):
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def judged(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    sha = candidate(repo, "cand", [EDIT])
    ctx, settings = context(repo)
    seen = []
    ctx.progress = seen.append
    return repo, sha, ctx, settings, seen


def test_a_short_disk_requeues_the_attempt_and_stops_the_loop_before_any_side(judged, monkeypatch):
    repo, sha, ctx, settings, _ = judged
    n = queued(ctx, sha, "cand")
    gates = Gates(monkeypatch)
    stale = ctx.runs / "tap" / "m-old-failed-20261204-010203-000001"  # a killed run's recording
    stale.mkdir(parents=True)
    (stale / "kept_a.pt").write_text("x")
    (stale / "record.log").write_text("x")
    monkeypatch.setattr(disk, "free_bytes", lambda folder: 1000)
    rep = Orchestrator(ctx).tick(spawn=False)
    a = ctx.ledger.attempt(n)
    assert a.state == L.QUEUED and a.reason.startswith(f"environment: disk: {ctx.runs / 'tap'} has 1000 bytes free")
    assert "the operator must free space" in a.reason and rep.stop == a.reason
    assert gates.calls == []  # no gate, no side started
    assert not (stale / "kept_a.pt").exists() and (stale / "record.log").exists()


def test_kern_try_on_a_short_disk_ends_its_row_with_the_named_reason(judged, capsys, monkeypatch):
    repo, sha, ctx, _, _ = judged
    gates = Gates(monkeypatch)
    monkeypatch.setattr(disk, "free_bytes", lambda folder: 0)
    code, out, err = kern(capsys, "--repo", repo, "try", sha)
    assert code == 4 and err.splitlines()[-1].startswith("kern try: stopped: environment: disk: ")
    (a,) = L.Ledger(L.default_path(repo)).attempts()
    assert a.state == L.CRASHED and a.reason.startswith("environment: disk: ") and gates.calls == []


def test_a_side_that_ran_out_of_disk_requeues_and_its_last_words_reach_kern_show(judged, capsys, monkeypatch):
    repo, sha, ctx, settings, seen = judged
    n = queued(ctx, sha, "cand")
    monkeypatch.setattr("gates.accuracy.run_test", _ended(FULL, "INCONCLUSIVE"))
    rep = Orchestrator(ctx).tick(spawn=False)
    a = ctx.ledger.attempt(n)
    assert a.state == L.QUEUED and rep.stop == a.reason == (
        "environment: disk: accuracy gate's A record ran out of disk space writing /r/runs/tap/m-k: the "
        "operator must free space on the disk holding runs/, then judge it again")
    assert a.gate.last_words == FULL
    assert SideEnded("accuracy gate", "A record", DISK_FULL, FULL.last, FULL.log) in seen
    code, out, _ = kern(capsys, "--repo", repo, "show", n)
    lines = out.splitlines()
    i = lines.index(f"last words A record ended with disk full (log {FULL.log})")
    assert code == 0 and lines[i + 1:i + 3] == [f"             {ln}" for ln in FULL.lines]
    code, out, _ = kern(capsys, "--repo", repo, "show", n, "--json")
    assert json.loads(out)["last_words"] == [FULL.to_dict()]


def test_a_side_killed_mid_save_is_a_crash_with_its_last_words_everywhere(judged, capsys, monkeypatch):
    repo, sha, ctx, _, seen = judged
    monkeypatch.setattr("gates.accuracy.run_test", _ended(KILLED))
    number, out = try_commit(ctx, "cand")
    a = ctx.ledger.attempt(number)
    assert (a.state, a.reason) == (L.CRASHED, "kern test: the candidate's side ended with crash (signal SIGKILL)")
    assert a.gate.last_words == KILLED
    # the progress line, the journey's row, kern show (text and JSON)
    assert "accuracy gate: B replay ended with crash (signal SIGKILL): tap: saving logits (log " \
           "/r/runs/tap/c-vs-m/result.log)" in [str(e) for e in seen]
    assert result(a) == ("crashed (kern test: the candidate's side ended with crash (signal SIGKILL) · "
                         "B replay: tap: saving logits)")
    code, text, _ = kern(capsys, "--repo", repo, "show", number)
    assert code == 0 and f"last words B replay ended with crash (signal SIGKILL) (log {KILLED.log})" in text
    assert "             tap: saving logits" in text.splitlines()
    code, text, _ = kern(capsys, "--repo", repo, "show", number, "--json")
    assert json.loads(text)["last_words"] == [KILLED.to_dict()]
    # without the judgment file kern show reads them from the ledger row
    for p in (ctx.runs / "attempts" / str(number)).glob("judgment-*.json"):
        p.unlink()
    code, text, _ = kern(capsys, "--repo", repo, "show", number, "--json")
    assert json.loads(text)["last_words"] == [KILLED.to_dict()]
