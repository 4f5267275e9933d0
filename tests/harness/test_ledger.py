"""The ledger: transitions, phase identity, scores, durability under kill -9."""
from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gates.summary import AccuracySummary, GateSummary
from harness import ledger as L
from harness.ledger import IllegalTransition, Ledger, LedgerError

from .sample import FixedClock

# The spec of legal moves, written out independently of the module's table on purpose.
SPEC = {
    "queued": {"running", "judging", "waiting", "not done", "abandoned", "crashed", "timed out",
               "interrupted"},
    "running": {"queued", "judging", "waiting", "not done", "abandoned", "crashed", "timed out",
                "interrupted"},
    "judging": {"queued", "waiting", "merged", "abandoned", "crashed", "timed out", "interrupted"},
    "waiting": {"queued", "running", "judging", "not done", "abandoned", "interrupted"},
    "merged": set(), "abandoned": set(), "not done": set(), "crashed": set(), "timed out": set(),
    "interrupted": set(),
}


def fresh(tmp: Path) -> Ledger:
    return Ledger(tmp / "runs" / "ledger.sqlite", clock=FixedClock())


def new(led: Ledger, phase_id: int, title: str = "t") -> int:
    return led.new_attempt(title=title, hypothesis="h", target="moe.experts", backend="tuner",
                           base_sha="b" * 40, phase_id=phase_id)


def test_states_and_table_match_the_spec():
    assert set(L.STATES) == set(SPEC)
    assert {s: set(v) for s, v in L.TRANSITIONS.items()} == SPEC
    assert L.STATES == (L.QUEUED, L.RUNNING, L.JUDGING, L.WAITING, L.MERGED, L.ABANDONED,
                        L.NOT_DONE, L.CRASHED, L.TIMED_OUT, L.INTERRUPTED)


def test_attempt_roundtrip_json_and_events(tmp_path):
    led = fresh(tmp_path)
    run = led.start_run("digest", "host-a", "note")
    tick = led.add_tick(run, ["moe.experts", {"target": "mla"}])
    p = led.phase({"buckets": [16, 32], "weights": [1, 2]})
    n = new(led, p)
    assert n == 1 and new(led, p) == 2
    a = led.attempt(n)
    assert (a.state, a.title, a.phase_id, a.tick_id, a.created_at) == ("queued", "t", p, None, a.updated_at)
    led.transition(n, "running", at="2026-02-01T00:00:00+00:00")
    led.update(n, commit_sha="c" * 40, tokens=1234, cost_usd=0.5, tick_id=tick,
               gate=GateSummary(scope_problems=(), accuracy=AccuracySummary("PASS bit-identical")))
    led.transition(n, "judging")
    led.transition(n, "merged", delta_ms=-0.3, ci_low=-0.4, ci_high=-0.2,
                   medians_a={"16": 10.0}, medians_b={"16": 9.7}, decision="merge",
                   at="2026-02-01T01:00:00+00:00")
    a = led.attempt(n)
    assert a.gate.accuracy.verdict == "PASS bit-identical" and a.gate.scope_problems == ()
    assert a.medians_b == {"16": 9.7} and a.delta_ms == -0.3 and a.tokens == 1234
    assert a.finished_at == "2026-02-01T01:00:00+00:00" and a.merged_sha == "c" * 40
    assert led.is_merged("c" * 40) and not led.is_merged("d" * 40)
    kinds = [(e.kind, e.data.get("to")) for e in led.events(n)]
    assert kinds == [("created", None), ("transition", "running"), ("update", None),
                     ("transition", "judging"), ("transition", "merged")]
    assert [e.kind for e in led.events() if e.attempt is None] == ["run", "tick", "phase"]
    assert led.ticks(run)[0].planned == ["moe.experts", {"target": "mla"}]
    assert led.usage() == {"attempts": 2, "tokens": 1234, "cost_usd": 0.5}
    assert led.usage(run) == {"attempts": 1, "tokens": 1234, "cost_usd": 0.5}
    assert [x.number for x in led.attempts("merged")] == [1]
    assert [x.number for x in led.in_flight()] == [2]
    assert [x.number for x in led.attempts(phase_id=p)] == [1, 2]


def test_merged_is_final_and_merges_once(tmp_path):
    led = fresh(tmp_path)
    p = led.phase({"buckets": [4]})
    a, b = new(led, p), new(led, p)
    for n in (a, b):
        led.transition(n, "running")
        led.transition(n, "judging", commit_sha="c" * 40)
    led.transition(a, "merged")
    with pytest.raises(IllegalTransition, match=r"attempt #1: illegal transition 'merged' → 'running'"):
        led.transition(a, "running")
    with pytest.raises(LedgerError, match="final"):
        led.update(a, tokens=1)
    with pytest.raises(IllegalTransition, match="already merged by #1"):
        led.transition(b, "merged")
    # the database itself refuses, whatever code path asks
    with pytest.raises(sqlite3.IntegrityError):
        led._db.execute("UPDATE attempts SET title='x' WHERE number=1")
    with pytest.raises(sqlite3.IntegrityError):
        led._db.execute("DELETE FROM events")
    assert led.attempt(b).state == "judging"


def test_rules_beyond_the_table(tmp_path):
    led = fresh(tmp_path)
    p = led.phase({"buckets": [4]})
    n = new(led, p)
    with pytest.raises(LedgerError, match=r"unknown state 'done'; expected one of"):
        led.transition(n, "done")
    with pytest.raises(IllegalTransition, match="abandoned needs a reason"):
        led.transition(n, "abandoned")
    with pytest.raises(IllegalTransition, match="waiting needs waiting_on"):
        led.transition(n, "waiting")
    with pytest.raises(IllegalTransition, match="waiting needs waiting_on"):
        led.transition(n, "waiting", waiting_on=n)
    with pytest.raises(LedgerError, match=r"unknown or managed field\(s\) \['state'\]"):
        led.update(n, state="merged")
    with pytest.raises(LedgerError, match="attempt #99 is not in the ledger"):
        led.attempt(99)
    with pytest.raises(LedgerError, match="attempt #99 is not in the ledger"):
        led.transition(99, "running")
    with pytest.raises(LedgerError, match="must name rows of the ledger"):
        led.new_attempt(title="x", hypothesis="", target="", backend="", base_sha=None, phase_id=42)
    led.transition(n, "running")
    led.transition(n, "judging")
    with pytest.raises(IllegalTransition, match="merged needs commit_sha"):
        led.transition(n, "merged")
    assert led.attempt(n).state == "judging"
    assert [e.data["to"] for e in led.events(n) if e.kind == "transition"] == ["running", "judging"]


def test_phase_identity(tmp_path):
    led = fresh(tmp_path)
    d1 = {"buckets": [16, 32], "weights": [1, 2], "context": 131072, "workload": {"seed": 0, "n": 3}}
    d1_reordered = {"workload": {"n": 3, "seed": 0}, "context": 131072, "weights": [1.0, 2.0],
                    "buckets": [16, 32]}
    assert led.current_phase() is None and led.current_phase_id() is None
    p1 = led.phase(d1)
    assert led.phase(d1_reordered) == p1
    assert led.current_phase() == d1
    p2 = led.phase({**d1, "context": 65536})
    assert p2 != p1 and led.current_phase()["context"] == 65536
    assert led.phase({**d1, "buckets": [32, 16]}) not in (p1, p2)  # bucket order is meaning
    assert led.phase(d1) == p1 and led.current_phase_id() == p1  # going back re-enters phase 1
    assert [p.id for p in led.phases()] == [1, 2, 3]
    with pytest.raises(LedgerError, match="expected a non-empty dict"):
        led.phase({})
    led.close()
    assert Ledger(tmp_path / "runs" / "ledger.sqlite").current_phase_id() == p1


def test_scores(tmp_path):
    led = fresh(tmp_path)
    p1, p2 = led.phase({"context": 1}), led.phase({"context": 2})
    assert led.main_score(p1) is None and led.latest_score(p1) is None
    led.record_score(p1, "a" * 40, 41.0, {"16": 30.0}, "2026-01-01T00:00:00+00:00")
    led.record_score(p1, "b" * 40, 40.5, None)
    led.record_score(p2, "b" * 40, 60.0, None)
    assert led.main_score(p1) == 40.5 and led.main_score(p2) == 60.0
    assert led.latest_score(p1).sha == "b" * 40
    assert [s.score_ms for s in led.scores(p1)] == [41.0, 40.5]
    assert led.scores()[0].medians == {"16": 30.0} and led.scores()[0].at == "2026-01-01T00:00:00+00:00"
    with pytest.raises(LedgerError, match="phase 9 is not in the ledger"):
        led.record_score(9, "c", 1.0, None)


def test_schema_versioned_and_foreign_files_refused(tmp_path):
    path = tmp_path / "l.sqlite"
    led = Ledger(path)
    assert led.schema_version() == L.SCHEMA_VERSION
    assert led._q("PRAGMA journal_mode")[0]["journal_mode"] == "wal"
    led._db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    led.close()
    with pytest.raises(LedgerError, match="schema version 99 was written by a newer kern-loop"):
        Ledger(path)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE x (y)")
    con.commit()
    con.close()
    with pytest.raises(LedgerError, match="not a kern-loop ledger"):
        Ledger(other)


def test_a_version_1_ledger_gains_the_hidden_inputs_column_and_keeps_its_rows(tmp_path):
    """Ledgers written before the hidden inputs were recorded open as they are: the upgrade
    adds the column (NULL for the old attempts, so a replay of them says none was recorded),
    in the same transaction as the version, and every row and merge rule stays."""
    path = tmp_path / "v1.sqlite"
    v1 = L._SCHEMA.replace(" hidden TEXT, host TEXT, slot TEXT,\n  rerun_of INTEGER REFERENCES attempts(number), parts TEXT,", "")
    assert v1 != L._SCHEMA  # the version 1 schema: today's without the columns
    con = sqlite3.connect(path)
    con.executescript(v1)
    con.execute("INSERT INTO meta(key, value) VALUES ('schema_version', '1')")
    con.execute("INSERT INTO attempts(number, title, state, created_at, updated_at, commit_sha) "
                "VALUES (1, 'old', 'merged', 't', 't', ?)", ("c" * 40,))
    con.commit()
    con.close()
    led = Ledger(path)
    assert led.schema_version() == 4 == L.SCHEMA_VERSION
    old = led.attempt(1)
    assert (old.title, old.state, old.hidden, old.slot) == ("old", "merged", None, None)
    with pytest.raises(sqlite3.IntegrityError, match="merged attempt never changes"):
        led._db.execute("UPDATE attempts SET hidden='{}' WHERE number=1")  # the triggers stay
    n = led.new_attempt(title="new", hypothesis="", target="", backend="tuner", base_sha=None,
                        phase_id=None)
    led.transition(n, "judging")
    led.transition(n, "abandoned", reason="accuracy", hidden={"input_seed": 7, "extra_rows": [5, 6]})
    assert led.attempt(n).hidden == {"input_seed": 7, "extra_rows": [5, 6]}
    led.close()
    assert Ledger(path).attempt(n).hidden["extra_rows"] == [5, 6]  # and it stays upgraded


def test_a_version_2_ledger_gains_host_and_slot_and_keeps_its_rows(tmp_path):
    """Ledgers written before judging slots (schema 2, with the hidden inputs) open as they
    are: the upgrade adds host and slot (NULL for the old attempts), the triggers stay, and a
    new attempt records where it was judged."""
    path = tmp_path / "v2.sqlite"
    v2 = L._SCHEMA.replace(" host TEXT, slot TEXT,\n  rerun_of INTEGER REFERENCES attempts(number), parts TEXT,", "")
    assert v2 != L._SCHEMA
    con = sqlite3.connect(path)
    con.executescript(v2)
    con.execute("INSERT INTO meta(key, value) VALUES ('schema_version', '2')")
    con.execute("INSERT INTO attempts(number, title, state, created_at, updated_at, commit_sha, hidden) "
                "VALUES (1, 'old', 'merged', 't', 't', ?, '{\"input_seed\": 3, \"extra_rows\": []}')",
                ("c" * 40,))
    con.commit()
    con.close()
    led = Ledger(path)
    assert led.schema_version() == 4 == L.SCHEMA_VERSION
    old = led.attempt(1)
    assert (old.state, old.hidden["input_seed"], old.host, old.slot) == ("merged", 3, None, None)
    with pytest.raises(sqlite3.IntegrityError, match="merged attempt never changes"):
        led._db.execute("UPDATE attempts SET slot='cpu0' WHERE number=1")
    n = led.new_attempt(title="new", hypothesis="", target="", backend="tuner", base_sha=None,
                        phase_id=None)
    led.transition(n, "judging")
    led.transition(n, "abandoned", reason="slower", host="node-a", slot="gpu2-3")
    m = led.new_attempt(title="again", hypothesis="", target="", backend="tuner", base_sha=None,
                        phase_id=None)
    led.update(m, rerun_of=n, parts=[1, n])
    led.close()
    again = Ledger(path)
    assert (again.attempt(n).host, again.attempt(n).slot) == ("node-a", "gpu2-3")
    assert again.attempt(m).rerun_of == n and again.attempt(1).rerun_of is None
    assert again.attempt(m).parts == [1, n] and again.attempt(1).parts is None


# the H200 journey's ledger as it stood in schema 3 (bench/journey/ledger.sqlite at f2d0bb7; the
# loop's next run wrote schema 4)
HISTORY = Path(__file__).resolve().parent / "golden" / "journey-ledger-v3.sqlite"


def test_the_real_history_a_version_3_ledger_gains_interrupted_and_keeps_every_row(tmp_path):
    """The H200 journey's ledger in schema 3 opens read-only as it is, and
    opened to write is rebuilt with the state 'interrupted': every row, event and score the
    same, the merge triggers and the unique merge index back, foreign keys intact."""
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(HISTORY.read_bytes())
    with Ledger(path, readonly=True) as r:
        assert r.schema_version() == 3  # a reader migrates nothing
        before = (r.attempts(), r.events(), r.scores(), r.phases(), r.runs())
    led = Ledger(path)
    assert led.schema_version() == 4
    assert (led.attempts(), led.events(), led.scores(), led.phases(), led.runs()) == before
    assert led.integrity() == "ok" and led._db.execute("PRAGMA foreign_key_check").fetchall() == []
    merged = next(a for a in before[0] if a.state == "merged")
    with pytest.raises(sqlite3.IntegrityError, match="merged attempt never changes"):
        led._db.execute("UPDATE attempts SET title='x' WHERE number=?", (merged.number,))
    with pytest.raises(sqlite3.IntegrityError, match="never deleted"):
        led._db.execute("DELETE FROM attempts WHERE number=?", (merged.number,))
    n = new(led, led.phases()[-1].id)
    led.transition(n, "judging", commit_sha=merged.commit_sha)
    led.transition(n, "interrupted", reason="SIGINT (Ctrl-C) to kern try while judging")
    with pytest.raises(IllegalTransition, match="final"):
        led.transition(n, "queued")
    assert [a.number for a in led.of_commit(merged.commit_sha)] == [merged.number, n]
    led.close()


def test_a_reader_opens_a_ledger_it_may_not_write_and_names_what_is_wrong_otherwise(tmp_path):
    """``readonly``: SQLite's mode=ro, nothing created; a missing table and a damaged file are
    told apart, and neither advice deletes anything (``.recover`` copies what can be read)."""
    with pytest.raises(LedgerError, match="found nothing there"):
        Ledger(tmp_path / "none.sqlite", readonly=True)
    assert not (tmp_path / "none.sqlite").exists()
    led = fresh(tmp_path)
    n = new(led, led.phase({"buckets": [4]}))
    led.close()
    path = tmp_path / "runs" / "ledger.sqlite"
    with Ledger(path, readonly=True) as r:
        assert r.attempt(n).title == "t"
        with pytest.raises(LedgerError, match="readonly|read-only|may not"):
            r.new_attempt(title="x", hypothesis="", target="", backend="", base_sha=None, phase_id=None)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE events")
    con.commit()
    con.close()
    with Ledger(path, readonly=True) as r:
        with pytest.raises(LedgerError, match="no such table: events.*lacks part of a kern-loop "
                                              "ledger.*\\.recover"):
            r.events(n)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database at all" * 200)
    for readonly in (True, False):
        with pytest.raises(LedgerError, match="is damaged.*\\.recover") as e:
            Ledger(junk, readonly=readonly).attempts()
        assert "aside" not in str(e.value) and "delete" not in str(e.value)


def test_reader_sees_writer_commits(tmp_path):
    w = fresh(tmp_path)
    r = Ledger(tmp_path / "runs" / "ledger.sqlite")
    p = w.phase({"buckets": [4]})
    n = new(w, p)
    assert r.attempt(n).state == "queued"
    w.transition(n, "running")
    assert r.attempt(n).state == "running"


# --------------------------------------------------------------------------- property test
_OPS = st.lists(st.tuples(st.integers(0, 2), st.sampled_from(L.STATES + ("done",)), st.booleans()),
                max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS)
def test_random_transitions_follow_the_spec(ops):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "l.sqlite"
        led = Ledger(path, clock=FixedClock())
        p = led.phase({"buckets": [4]})
        nums = [new(led, p, f"a{i}") for i in range(3)]
        model = {n: "queued" for n in nums}
        log = {n: [] for n in nums}
        reasons = {n: None for n in nums}
        for k, (i, to, with_reason) in enumerate(ops):
            n = nums[i]
            frm = model[n]
            extra = {}
            if to == "waiting":
                extra["waiting_on"] = nums[(i + 1) % 3]
            if to == "merged":
                extra["commit_sha"] = f"sha{k}"
            legal = to in SPEC.get(frm, ()) and (to != "abandoned" or with_reason)
            if to == "done":
                with pytest.raises(LedgerError, match="unknown state"):
                    led.transition(n, to)
            elif legal:
                led.transition(n, to, reason="slower" if with_reason else None, **extra)
                model[n] = to
                log[n].append((frm, to))
                reasons[n] = "slower" if with_reason else None
            else:
                with pytest.raises(IllegalTransition) as err:
                    led.transition(n, to, reason="slower" if with_reason else None, **extra)
                assert f"#{n}" in str(err.value) and repr(frm) in str(err.value) and repr(to) in str(err.value)
            assert led.attempt(n).state == model[n]
        led.close()
        again = Ledger(path)  # persisted, not just cached
        assert again.integrity() == "ok"
        for n in nums:
            a = again.attempt(n)
            assert a.state == model[n] and a.reason == reasons[n]
            assert (a.finished_at is not None) == (a.state in L.FINAL)
            evs = [e for e in again.events(n) if e.kind == "transition"]
            assert [(e.data["from"], e.data["to"]) for e in evs] == log[n]
        again.close()


# --------------------------------------------------------------------------- kill -9
_WRITER = r"""
import sys
from gates.summary import AccuracySummary, GateSummary
from harness.ledger import Ledger
led = Ledger(sys.argv[1])
p = led.phase({"buckets": [16, 32, 64], "weights": [1, 2, 4]})
# multi-page rows: a kill lands inside page writes too
big = GateSummary(accuracy=AccuracySummary("FAIL", ("x" * 200,) * 40))
i = 0
while True:
    i += 1
    n = led.new_attempt(title=f"a{i}", hypothesis="h" * 500, target="t", backend="tuner",
                        base_sha="b" * 40, phase_id=p)
    print("new", n, flush=True)
    led.transition(n, "running")
    print("running", n, flush=True)
    led.update(n, commit_sha=f"{n:040d}", gate=big, tokens=n)
    print("update", n, flush=True)
    led.transition(n, "judging")
    print("judging", n, flush=True)
    if n % 3 == 0:
        led.transition(n, "abandoned", reason="slower", delta_ms=0.1)
        print("abandoned", n, flush=True)
    else:
        led.transition(n, "merged", delta_ms=-0.1)
        led.record_score(p, f"{n:040d}", 40.0 - n * 0.01, None)
        print("merged", n, flush=True)
"""
_ORDER = {"new": 0, "running": 1, "update": 1, "judging": 2, "abandoned": 3, "merged": 3}
_STATE_RANK = {"queued": 0, "running": 1, "judging": 2, "abandoned": 3, "merged": 3}


def _kill_writer(path: Path, delay: float) -> dict[int, str]:
    """Start the writer, kill -9 it after ``delay`` s, return what it acknowledged."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 30
    first = proc.stdout.readline()  # wait until it writes at all
    assert first.startswith("new"), proc.stderr.read()
    time.sleep(delay)
    assert time.monotonic() < deadline
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    acked: dict[int, str] = {}
    # a kill can land between the pieces print() writes ("merged", then " 12\n": measured, 120
    # of 200 kills of a plain print loop): only a line with its newline was acknowledged
    *complete, _partial = (first + out).split("\n")
    for line in complete:
        what, n = line.split()
        acked[int(n)] = what
    return acked


def test_kill_9_loses_nothing_committed(tmp_path):
    path = tmp_path / "runs" / "ledger.sqlite"
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    seen_attempts = seen_events = seen_scores = 0
    for cycle in range(4):
        delay = rng.uniform(0.05, 0.6)
        acked = _kill_writer(path, delay)
        led = Ledger(path)
        msg = f"cycle {cycle}, killed after {delay:.3f}s"
        assert led.integrity() == "ok", msg
        assert led._q("PRAGMA foreign_key_check") == [], msg
        atts = led.attempts()
        numbers = [a.number for a in atts]
        assert numbers == list(range(1, len(numbers) + 1)), msg
        for n, what in acked.items():  # every acknowledged write is there
            a = led.attempt(n)
            assert _STATE_RANK[a.state] >= _ORDER[what], f"{msg}: #{n} acked {what}, found {a.state}"
            if what == "update":
                assert a.commit_sha == f"{n:040d}" and a.gate.accuracy.reasons[0] == "x" * 200
        for a in atts:  # the log and the rows never disagree
            evs = led.events(a.number)
            assert evs[0].kind == "created", msg
            trans = [e.data["to"] for e in evs if e.kind == "transition"]
            assert (trans[-1] if trans else "queued") == a.state, msg
            if a.state == "merged":
                assert a.merged_sha == a.commit_sha == f"{a.number:040d}"
        n_events, n_scores = len(led.events()), len(led.scores())
        # counts are monotone across kills: nothing committed before is ever lost
        assert len(atts) >= seen_attempts and n_events >= seen_events and n_scores >= seen_scores, msg
        assert len(atts) > seen_attempts, f"{msg}: the writer made no progress"
        seen_attempts, seen_events, seen_scores = len(atts), n_events, n_scores
        # a restarted loop resumes: re-queue what the killed one left in flight
        for a in led.in_flight():
            if a.state != "queued":
                led.transition(a.number, "queued")
        assert all(a.state == "queued" for a in led.in_flight())
        led.close()


def _score(i: int, sha: str, ms: float) -> "L.Score":
    return L.Score(i, 1, sha, ms, None, f"2026-12-04T14:{i:02d}:00+00:00")


def test_an_older_main_measured_again_is_not_mains_score():
    """The 2026-12-04 H200 run: #8 merged bb4e766 on 8339e6e, then #9 (made on 8339e6e) measured
    8339e6e again as its A side; main's score is bb4e766's, not that re-measurement."""
    rows = [_score(1, "43da", 74.32), _score(2, "8339", 73.95), _score(3, "bb4e", 71.52),
            _score(4, "8339", 73.93)]
    assert [s.sha for s in L.mains(rows)] == ["43da", "8339", "bb4e"]


@given(st.lists(st.sampled_from("abcde"), max_size=30))
def test_mains_never_returns_to_a_commit_it_left(shas):
    out = [s.sha for s in L.mains([_score(i, sha, 1.0) for i, sha in enumerate(shas)])]
    changes = [x for i, x in enumerate(out) if i == 0 or out[i - 1] != x]
    # each commit is main once, in one stretch, in the order it was first measured
    assert changes == list(dict.fromkeys(shas))
