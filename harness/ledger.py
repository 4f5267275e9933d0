"""The ledger: every run, tick, phase, attempt and score of the loop, in SQLite under ``runs/``.

One writer process (the orchestrator or ``kern try``) and any number of readers (``kern
status``, ``kern report``, a live view) share the file. WAL lets readers read while the writer
writes; every state change is one ``BEGIN IMMEDIATE … COMMIT`` so a process killed at any
point leaves either the whole change or none of it, and ``synchronous=FULL`` makes a commit
survive a power cut as well as a kill. ``events`` is an append-only log written in the same
transaction as the change it describes, so the log and the rows never disagree.

The ledger decides nothing about kernels; it enforces only its own invariants: state names,
legal transitions (a merged attempt never changes again), one merge per commit. Time never
comes from inside the logic: every write takes ``at=`` (an ISO-8601 string) or asks the
injectable ``clock``.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from gates.summary import GateSummary

SCHEMA_VERSION = 4
LEDGER_RELPATH = "runs/ledger.sqlite"  # under the repository (``kern --repo``)

QUEUED = "queued"
RUNNING = "running"
JUDGING = "judging"
MERGED = "merged"
ABANDONED = "abandoned"
NOT_DONE = "not done"  # an idea analysed and declined, with its estimate
WAITING = "waiting"  # depends on another attempt (``waiting_on``)
CRASHED = "crashed"
# the reason's start when an agent's process ended before writing any proposal
AGENT_DIED = "agent process ended without a proposal"
TIMED_OUT = "timed out"
# the user ended it before a verdict: Ctrl-C or SIGTERM to its ``kern try``, or ``kern cancel``
# (its reason says which); final, so no loop judges it again unasked (``kern try --again`` does)
INTERRUPTED = "interrupted"
STATES = (QUEUED, RUNNING, JUDGING, WAITING, MERGED, ABANDONED, NOT_DONE, CRASHED, TIMED_OUT,
          INTERRUPTED)
IN_FLIGHT = (QUEUED, RUNNING, JUDGING)
FINAL = (MERGED, ABANDONED, NOT_DONE, CRASHED, TIMED_OUT, INTERRUPTED)

# Reasons an attempt is abandoned (the merge rule: gates/rules/decision.py). Not enforced — a new gate may
# add its own — but the journey renders these with their numbers.
SLOWER = "slower"
WITHIN_NOISE = "within noise"
ACCURACY = "accuracy"
GUARD = "guard"
SCOPE = "scope"
CONFLICT = "conflict"
REASONS = (SLOWER, WITHIN_NOISE, ACCURACY, GUARD, SCOPE, CONFLICT)

# How a run of ``kern loop`` ended (the ``stop`` event's ``how``; ``kern status`` says it with the
# event's time). A run with no such event is still going, or its process was killed outright.
RUN_TICKS = "ticks reached"  # --ticks N (or --tick) ticks were run
RUN_BUDGET = "budget spent"  # kern.yaml's budgets (attempts, tokens, cost, wall hours)
RUN_IDLE = "idle"  # agents reported nothing left for loop.stop_after_idle_ticks ticks
RUN_INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM
RUN_HALTED = "halted"  # nothing more could be recorded (a full disk)
RUN_ENDS = (RUN_TICKS, RUN_BUDGET, RUN_IDLE, RUN_INTERRUPTED, RUN_HALTED)

# Legal moves. Back to ``queued`` from running/judging is how a restarted loop re-queues work
# its killed predecessor left in flight. Final states have no way out: a retry is a new attempt,
# so the journey never rewrites what it already told.
TRANSITIONS: dict[str, frozenset] = {
    QUEUED: frozenset({RUNNING, JUDGING, WAITING, NOT_DONE, ABANDONED, CRASHED, TIMED_OUT,
                       INTERRUPTED}),
    RUNNING: frozenset({QUEUED, JUDGING, WAITING, NOT_DONE, ABANDONED, CRASHED, TIMED_OUT,
                        INTERRUPTED}),
    JUDGING: frozenset({QUEUED, WAITING, MERGED, ABANDONED, CRASHED, TIMED_OUT, INTERRUPTED}),
    WAITING: frozenset({QUEUED, RUNNING, JUDGING, NOT_DONE, ABANDONED, INTERRUPTED}),
    **{s: frozenset() for s in FINAL},
}


class LedgerError(RuntimeError):
    """The ledger refused a change or cannot be read; the message says who must act."""


class IllegalTransition(LedgerError):
    def __init__(self, number: int, from_state: str, to_state: str, why: str = ""):
        self.number, self.from_state, self.to_state = number, from_state, to_state
        legal = ", ".join(sorted(TRANSITIONS.get(from_state, ()))) or "none (final)"
        super().__init__(
            f"attempt #{number}: illegal transition {from_state!r} → {to_state!r}"
            + (f" ({why})" if why else "")
            + f"; from {from_state!r} the legal states are: {legal}. The caller (the "
              f"orchestrator) must not ask for this; the ledger is unchanged.")


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Attempt:
    number: int
    title: str = ""
    hypothesis: str = ""
    target: str = ""
    backend: str = ""
    phase_id: int | None = None
    tick_id: int | None = None
    base_sha: str | None = None
    commit_sha: str | None = None
    state: str = QUEUED
    reason: str | None = None
    decision: str | None = None
    # what the judgment found, gate by gate up to the one that decided (JSON in its column)
    gate: GateSummary | None = None
    medians_a: dict | None = None
    medians_b: dict | None = None
    delta_ms: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    delta_pct: float | None = None
    estimate_ms: float | None = None
    waiting_on: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    created_at: str | None = None
    updated_at: str | None = None
    finished_at: str | None = None
    merged_sha: str | None = None
    # the judgment's hidden inputs (gates/rules/hidden.py ``Hidden.to_dict()``), recorded once the
    # decision is made: ``kern test/bench --replay-attempt N`` runs the gates with them again
    hidden: dict | None = None
    # where the last judgment ran (harness/farm.py): the host and its judging slot (``gpu0``,
    # ``gpu2-3``, ``cpu1``; on Ray the node's); None before slots were recorded or when no
    # gate process ran (a scope rejection, an agent that crashed)
    host: str | None = None
    slot: str | None = None
    # the attempt this one judges again because its node was lost mid-judgment (same commit)
    rerun_of: int | None = None
    # a trial merge (harness/trials.py): the attempts whose commits it combines, in order
    parts: list | None = None


@dataclass(frozen=True)
class Phase:
    id: int
    definition: dict
    digest: str
    started_at: str


@dataclass(frozen=True)
class Score:
    id: int
    phase_id: int
    sha: str
    score_ms: float
    medians: dict | None
    at: str


def mains(scores: Iterable[Score]) -> list[Score]:
    """Main's scores in the order recorded, without the rows of a commit main had already left:
    a judgment against an older main measures that main again (its A side), which says where
    main was, not where it is (pure; main only moves forward: 8339e6e measured after bb4e766
    merged on it is not main's score)."""
    out: list[Score] = []
    left: set[str] = set()
    for s in scores:
        if s.sha in left:
            continue
        if out and out[-1].sha != s.sha:
            left.add(out[-1].sha)
        out.append(s)
    return out


@dataclass(frozen=True)
class Run:
    id: int
    started_at: str
    config_digest: str
    host: str
    note: str


@dataclass(frozen=True)
class RunEnd:
    """How and when a run ended: ``how`` one of :data:`RUN_ENDS` (None in events written
    before it was recorded), ``reason`` in words."""
    run: int
    at: str
    how: str | None
    reason: str


@dataclass(frozen=True)
class Tick:
    id: int
    run_id: int
    at: str
    planned: list
    note: str


@dataclass(frozen=True)
class Event:
    id: int
    attempt: int | None
    at: str
    kind: str
    data: Any


ATTEMPT_COLUMNS = tuple(f.name for f in fields(Attempt))
_JSON_COLUMNS = frozenset({"gate", "medians_a", "medians_b", "hidden", "parts"})
# Set only by new_attempt/transition: ``update`` must not be a back door around the rules.
_MANAGED = frozenset({"number", "state", "created_at", "updated_at", "finished_at"})
UPDATABLE = tuple(c for c in ATTEMPT_COLUMNS if c not in _MANAGED)

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY, started_at TEXT NOT NULL, config_digest TEXT NOT NULL,
  host TEXT NOT NULL, note TEXT NOT NULL DEFAULT '');
CREATE TABLE ticks (
  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id), at TEXT NOT NULL,
  planned TEXT NOT NULL, note TEXT NOT NULL DEFAULT '');
CREATE TABLE phases (
  id INTEGER PRIMARY KEY, definition TEXT NOT NULL, digest TEXT NOT NULL UNIQUE,
  started_at TEXT NOT NULL);
CREATE TABLE attempts (
  number INTEGER PRIMARY KEY, title TEXT NOT NULL, hypothesis TEXT NOT NULL DEFAULT '',
  target TEXT NOT NULL DEFAULT '', backend TEXT NOT NULL DEFAULT '',
  phase_id INTEGER REFERENCES phases(id), tick_id INTEGER REFERENCES ticks(id),
  base_sha TEXT, commit_sha TEXT, state TEXT NOT NULL, reason TEXT, decision TEXT,
  gate TEXT, medians_a TEXT, medians_b TEXT, delta_ms REAL, ci_low REAL, ci_high REAL,
  delta_pct REAL, estimate_ms REAL, waiting_on INTEGER REFERENCES attempts(number),
  tokens INTEGER, cost_usd REAL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
  finished_at TEXT, merged_sha TEXT, hidden TEXT, host TEXT, slot TEXT,
  rerun_of INTEGER REFERENCES attempts(number), parts TEXT,
  CHECK (state IN ('queued','running','judging','waiting','merged','abandoned','not done',
                   'crashed','timed out','interrupted')));
CREATE INDEX attempts_state ON attempts(state);
CREATE INDEX attempts_phase ON attempts(phase_id);
-- nothing merges twice, whatever code path asks for it
CREATE UNIQUE INDEX attempts_merged_once ON attempts(commit_sha) WHERE state = 'merged';
CREATE TRIGGER attempts_merged_final BEFORE UPDATE ON attempts WHEN OLD.state = 'merged'
  BEGIN SELECT RAISE(ABORT, 'a merged attempt never changes'); END;
CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts
  BEGIN SELECT RAISE(ABORT, 'attempts are never deleted'); END;
CREATE TABLE events (
  id INTEGER PRIMARY KEY, attempt INTEGER REFERENCES attempts(number), at TEXT NOT NULL,
  kind TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX events_attempt ON events(attempt);
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TABLE scores (
  id INTEGER PRIMARY KEY, phase_id INTEGER NOT NULL REFERENCES phases(id), sha TEXT NOT NULL,
  score_ms REAL NOT NULL, medians TEXT, at TEXT NOT NULL);
CREATE INDEX scores_phase ON scores(phase_id);
"""
# Upgrades from version v to v+1, applied in order inside one transaction on open.
_MIGRATIONS: dict[int, str] = {
    # 2: each attempt's hidden inputs (NULL for attempts judged before they were recorded)
    1: "ALTER TABLE attempts ADD COLUMN hidden TEXT;",
    # 3: the host and judging slot of each attempt's judgment (NULL for attempts judged before),
    # the attempt a re-run after a lost node judges again, and the parts of a trial merge
    2: "ALTER TABLE attempts ADD COLUMN host TEXT;\nALTER TABLE attempts ADD COLUMN slot TEXT;\n"
       "ALTER TABLE attempts ADD COLUMN rerun_of INTEGER REFERENCES attempts(number);\n"
       "ALTER TABLE attempts ADD COLUMN parts TEXT;",
    # 4: the state 'interrupted' (SQLite cannot change a CHECK in place: the table is rebuilt,
    # every row copied, its indexes and triggers made again; foreign keys are off meanwhile)
    3: """
CREATE TABLE attempts_v4 (
  number INTEGER PRIMARY KEY, title TEXT NOT NULL, hypothesis TEXT NOT NULL DEFAULT '',
  target TEXT NOT NULL DEFAULT '', backend TEXT NOT NULL DEFAULT '',
  phase_id INTEGER REFERENCES phases(id), tick_id INTEGER REFERENCES ticks(id),
  base_sha TEXT, commit_sha TEXT, state TEXT NOT NULL, reason TEXT, decision TEXT,
  gate TEXT, medians_a TEXT, medians_b TEXT, delta_ms REAL, ci_low REAL, ci_high REAL,
  delta_pct REAL, estimate_ms REAL, waiting_on INTEGER REFERENCES attempts(number),
  tokens INTEGER, cost_usd REAL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
  finished_at TEXT, merged_sha TEXT, hidden TEXT, host TEXT, slot TEXT,
  rerun_of INTEGER REFERENCES attempts(number), parts TEXT,
  CHECK (state IN ('queued','running','judging','waiting','merged','abandoned','not done',
                   'crashed','timed out','interrupted')));
INSERT INTO attempts_v4 SELECT number, title, hypothesis, target, backend, phase_id, tick_id,
  base_sha, commit_sha, state, reason, decision, gate, medians_a, medians_b, delta_ms, ci_low,
  ci_high, delta_pct, estimate_ms, waiting_on, tokens, cost_usd, created_at, updated_at,
  finished_at, merged_sha, hidden, host, slot, rerun_of, parts FROM attempts ORDER BY number;
DROP TABLE attempts;
ALTER TABLE attempts_v4 RENAME TO attempts;
CREATE INDEX attempts_state ON attempts(state);
CREATE INDEX attempts_phase ON attempts(phase_id);
CREATE UNIQUE INDEX attempts_merged_once ON attempts(commit_sha) WHERE state = 'merged';
CREATE TRIGGER attempts_merged_final BEFORE UPDATE ON attempts WHEN OLD.state = 'merged'
  BEGIN SELECT RAISE(ABORT, 'a merged attempt never changes'); END;
CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts
  BEGIN SELECT RAISE(ABORT, 'attempts are never deleted'); END;
""",
}


def utc_now() -> str:
    """The default clock: UTC, seconds, ISO-8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def default_path(repo: str | Path) -> Path:
    return Path(repo) / LEDGER_RELPATH


def canonical(definition: dict) -> str:
    """A phase definition's identity: key order never matters, nor 2 vs 2.0."""
    return _dumps(_normalize(definition))


def phase_digest(definition: dict) -> str:
    return hashlib.sha256(canonical(definition).encode()).hexdigest()


def _normalize(x):
    if isinstance(x, dict):
        return {str(k): _normalize(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_normalize(v) for v in x]
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def _json_default(o):
    if hasattr(o, "item") and callable(o.item):  # numpy / torch scalars
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"{type(o).__name__} is not JSON-serializable")


def _dumps(x) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=_json_default)


def _loads(s):
    return None if s is None else json.loads(s)


class Ledger:
    """The ledger at ``path`` (created with its parent folder if missing).

    Thread-safe within a process (one connection behind a lock); one writer process at a
    time by design, any number of reader processes. ``readonly``: a reader that never writes
    (SQLite's ``mode=ro``): it creates nothing, migrates nothing (an older ledger is read as it
    is) and opens a ledger this user may only read.
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], str] = utc_now,
                 busy_timeout_ms: int = 30_000, readonly: bool = False):
        self.path = Path(path)
        self.clock = clock
        self.readonly = readonly
        self._lock = threading.RLock()
        try:
            if readonly:
                self._db = self._open_readonly(busy_timeout_ms)
                self._check_readable()
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, one per state change.
            self._db = sqlite3.connect(str(self.path), isolation_level=None,
                                       check_same_thread=False, timeout=busy_timeout_ms / 1000)
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise LedgerError(f"ledger {self.path}: expected WAL journal mode, SQLite gave "
                                  f"{mode!r} (a network file system? keep runs/ on a local disk)")
            self._db.execute("PRAGMA synchronous = FULL")
            self._migrate()  # foreign keys off meanwhile: a migration may rebuild a table
            self._db.execute("PRAGMA foreign_keys = ON")
        except BaseException as e:
            if hasattr(self, "_db"):
                self._db.close()
            if isinstance(e, sqlite3.Error):
                raise LedgerError(explain(e, self.path, write=not readonly)) from None
            if isinstance(e, OSError) and not readonly:  # runs/ could not be made
                raise LedgerError(f"ledger {self.path}: cannot create its folder: {e.strerror} "
                                  f"(expected a folder this user can write; the user or operator "
                                  f"fixes its permissions)") from None
            raise

    def _open_readonly(self, busy_timeout_ms: int) -> sqlite3.Connection:
        if not self.path.is_file():
            raise LedgerError(f"ledger {self.path}: expected a file, found "
                              f"{'a folder' if self.path.is_dir() else 'nothing'} there")
        from urllib.parse import quote

        uri = "file:" + quote(str(self.path.resolve()))
        db = sqlite3.connect(uri + "?mode=ro", uri=True, isolation_level=None,
                             check_same_thread=False, timeout=busy_timeout_ms / 1000)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError as e:
            db.close()
            # A WAL ledger in a folder this user cannot write: SQLite cannot make its shared-
            # memory file. With no -wal file beside it no writer is at work (one would have
            # made it), so the file holds everything and is read as immutable.
            if Path(str(self.path) + "-wal").exists() or "readonly" not in str(e) and \
                    "unable to open" not in str(e):
                raise
        return sqlite3.connect(uri + "?immutable=1", uri=True, isolation_level=None,
                               check_same_thread=False)

    def _check_readable(self) -> None:
        """A reader's check of what it opened: a kern-loop ledger no newer than this code."""
        names = {r["name"] for r in self._q("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in names:
            raise LedgerError(f"ledger {self.path}: "
                              + ("the file is empty (no table): no loop wrote to it yet" if not names
                                 else f"the file holds tables ({', '.join(sorted(names))}) but no "
                                      f"'meta' table: it is not a kern-loop ledger"))
        version = self._version()
        if version > SCHEMA_VERSION:
            raise LedgerError(f"ledger {self.path}: schema version {version} was written by a "
                              f"newer kern-loop; this one reads up to {SCHEMA_VERSION} (upgrade "
                              f"kern-loop)")

    # ----------------------------------------------------------------- plumbing
    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _tx(self):
        return _Tx(self)

    def _q(self, sql: str, args=()) -> list[dict]:
        with self._lock:
            try:
                cur = self._db.execute(sql, args)
                cols = [d[0] for d in cur.description]
                return [dict(zip(cols, row)) for row in cur.fetchall()]
            except sqlite3.Error as e:  # a missing table, a damaged page: the file, not the caller
                raise LedgerError(explain(e, self.path, write=False)) from None

    def _version(self) -> int | None:
        if not self._q("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"):
            return None
        return int(self._q("SELECT value FROM meta WHERE key='schema_version'")[0]["value"])

    def _migrate(self) -> None:
        # Readers of an up-to-date ledger take no write lock at all.
        if self._version() == SCHEMA_VERSION:
            return
        with self._tx() as db:
            has_meta = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
            if not has_meta:
                others = db.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0]
                if others:
                    raise LedgerError(f"ledger {self.path}: the file holds tables but no 'meta' "
                                      f"table; it is not a kern-loop ledger, and kern-loop writes "
                                      f"nothing into it (the user checks what wrote it there)")
                db.executescript_in_tx(_SCHEMA)
                db.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                           (str(SCHEMA_VERSION),))
                return
            version = int(db.execute(
                "SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise LedgerError(f"ledger {self.path}: schema version {version} was written by a "
                                  f"newer kern-loop; this one reads up to {SCHEMA_VERSION} "
                                  f"(upgrade kern-loop)")
            for v in range(version, SCHEMA_VERSION):
                db.executescript_in_tx(_MIGRATIONS[v])
            if version != SCHEMA_VERSION:
                db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))

    def schema_version(self) -> int:
        return self._version() or 0

    def integrity(self) -> str:
        """``ok`` or SQLite's list of problems."""
        return "; ".join(r["integrity_check"] for r in self._q("PRAGMA integrity_check"))

    def _at(self, at: str | None) -> str:
        return at if at is not None else self.clock()

    @staticmethod
    def _event(db, attempt: int | None, at: str, kind: str, data) -> None:
        db.execute("INSERT INTO events(attempt, at, kind, data) VALUES (?,?,?,?)",
                   (attempt, at, kind, _dumps(data)))

    # ----------------------------------------------------------------- runs, ticks, phases
    def start_run(self, config_digest: str, host: str, note: str = "", *, at: str | None = None) -> int:
        at = self._at(at)
        with self._tx() as db:
            rid = db.execute("INSERT INTO runs(started_at, config_digest, host, note) VALUES (?,?,?,?)",
                             (at, config_digest, host, note)).lastrowid
            self._event(db, None, at, "run", {"run": rid, "config_digest": config_digest,
                                              "host": host, "note": note})
        return rid

    def add_tick(self, run_id: int, planned: list, note: str = "", *, at: str | None = None) -> int:
        at = self._at(at)
        with self._tx() as db:
            if not db.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone():
                raise LedgerError(f"add_tick: run {run_id} is not in the ledger {self.path} "
                                  f"(the caller must start_run first)")
            tid = db.execute("INSERT INTO ticks(run_id, at, planned, note) VALUES (?,?,?,?)",
                             (run_id, at, _dumps(list(planned)), note)).lastrowid
            self._event(db, None, at, "tick", {"tick": tid, "run": run_id, "planned": list(planned),
                                               "note": note})
        return tid

    def stop_run(self, run_id: int, reason: str, *, how: str, at: str | None = None) -> None:
        """Run ``run_id`` ended: ``how`` (one of :data:`RUN_ENDS`) and why in words. A run ends
        once; a second end is ignored (the first is what happened)."""
        if how not in RUN_ENDS:
            raise LedgerError(f"stop_run: unknown end {how!r}; expected one of "
                              f"{', '.join(repr(h) for h in RUN_ENDS)}")
        at = self._at(at)
        with self._tx() as db:
            ended = any(json.loads(d).get("run") == run_id for (d,) in db.execute(
                "SELECT data FROM events WHERE kind='stop' AND attempt IS NULL"))
            if not ended:
                self._event(db, None, at, "stop", {"run": run_id, "reason": reason, "how": how})

    def stops(self) -> dict[int, RunEnd]:
        """Run id -> how and when it ended (runs killed outright, or still going, have none)."""
        out = {}
        for r in self._q("SELECT at, data FROM events WHERE kind='stop' AND attempt IS NULL ORDER BY id"):
            d = json.loads(r["data"])
            out.setdefault(d["run"], RunEnd(d["run"], r["at"], d.get("how"), d.get("reason") or ""))
        return out

    def runs(self) -> list[Run]:
        return [Run(**r) for r in self._q("SELECT * FROM runs ORDER BY id")]

    def ticks(self, run_id: int | None = None) -> list[Tick]:
        rows = self._q("SELECT * FROM ticks" + (" WHERE run_id=?" if run_id is not None else "")
                       + " ORDER BY id", (run_id,) if run_id is not None else ())
        return [Tick(**{**r, "planned": _loads(r["planned"])}) for r in rows]

    def phase(self, definition: dict, *, at: str | None = None) -> int:
        """The id of the phase scored under ``definition`` (the same definition, in any key
        order, is the same phase) and make it the current one."""
        if not isinstance(definition, dict) or not definition:
            raise LedgerError(f"phase: expected a non-empty dict (buckets, weights, context, "
                              f"workload …), found {definition!r}")
        at = self._at(at)
        digest = phase_digest(definition)
        with self._tx() as db:
            row = db.execute("SELECT id FROM phases WHERE digest=?", (digest,)).fetchone()
            if row:
                pid = row[0]
            else:
                pid = db.execute("INSERT INTO phases(definition, digest, started_at) VALUES (?,?,?)",
                                 (canonical(definition), digest, at)).lastrowid
                self._event(db, None, at, "phase", {"phase": pid, "definition": _normalize(definition)})
            cur = db.execute("SELECT value FROM meta WHERE key='current_phase'").fetchone()
            if cur is None or int(cur[0]) != pid:
                db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('current_phase', ?)", (str(pid),))
                if row:  # re-entering an older definition is a change worth a log line
                    self._event(db, None, at, "phase", {"phase": pid, "reentered": True})
        return pid

    def current_phase_id(self) -> int | None:
        r = self._q("SELECT value FROM meta WHERE key='current_phase'")
        return int(r[0]["value"]) if r else None

    def current_phase(self) -> dict | None:
        """The definition of the phase last named by :meth:`phase`, or None before any."""
        pid = self.current_phase_id()
        return None if pid is None else self.phase_by_id(pid).definition

    def phase_by_id(self, phase_id: int) -> Phase:
        r = self._q("SELECT * FROM phases WHERE id=?", (phase_id,))
        if not r:
            raise LedgerError(f"phase {phase_id} is not in the ledger {self.path}")
        return Phase(**{**r[0], "definition": _loads(r[0]["definition"])})

    def phases(self) -> list[Phase]:
        return [Phase(**{**r, "definition": _loads(r["definition"])})
                for r in self._q("SELECT * FROM phases ORDER BY id")]

    # ----------------------------------------------------------------- attempts
    def new_attempt(self, *, title: str, hypothesis: str, target: str, backend: str,
                    base_sha: str | None, phase_id: int | None, tick_id: int | None = None,
                    source: str | None = None, at: str | None = None) -> int:
        """A queued attempt; ``source``: what its agent is handed beside the brief (the replay
        backend's patch file), kept in its 'created' event (:meth:`sources`)."""
        at = self._at(at)
        with self._tx() as db:
            try:
                n = db.execute(
                    "INSERT INTO attempts(title, hypothesis, target, backend, base_sha, phase_id, "
                    "tick_id, state, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (title, hypothesis, target, backend, base_sha, phase_id, tick_id, QUEUED, at, at)
                ).lastrowid
            except sqlite3.IntegrityError as e:
                raise LedgerError(f"new_attempt: phase_id {phase_id} / tick_id {tick_id} must name "
                                  f"rows of the ledger (the caller must create them first): {e}") from None
            self._event(db, n, at, "created", {"state": QUEUED, "title": title, "target": target,
                                               "backend": backend, "base_sha": base_sha,
                                               "phase_id": phase_id, "tick_id": tick_id,
                                               **({"source": source} if source is not None else {})})
        return n

    def sources(self) -> dict[int, str]:
        """Each attempt's ``source`` (:meth:`new_attempt`), for the attempts that were given one."""
        rows = self._q("SELECT attempt, data FROM events WHERE kind='created' ORDER BY id")
        return {r["attempt"]: d["source"] for r in rows
                if isinstance(d := _loads(r["data"]), dict) and isinstance(d.get("source"), str)}

    def update(self, number: int, *, at: str | None = None, **fields) -> None:
        """Record facts about an attempt without changing its state (e.g. its commit SHA,
        tokens so far). A final attempt is never changed."""
        if not fields:
            return
        fields = self._check_fields("update", number, fields)
        at = self._at(at)
        with self._tx() as db:
            state = self._state(db, number)
            if state in FINAL:
                raise LedgerError(f"attempt #{number}: update of {sorted(fields)} refused: the "
                                  f"attempt is {state!r}, which is final. The caller must record "
                                  f"these facts before (or with) the final transition.")
            self._write(db, number, at, fields)
            self._event(db, number, at, "update", fields)

    def record_hidden(self, number: int, hidden: dict, *, at: str | None = None) -> None:
        """Write the hidden draw an attempt was judged on, once, after its final transition: the
        one fact a final row takes later. A batch's draw (gates/rules/batch.py) is written down
        only once the batch's last verdict is made, when its earlier members' rows are final
        already. Refused where the row holds a draw (another's must not be overwritten)."""
        at = self._at(at)
        with self._tx() as db:
            row = db.execute("SELECT hidden FROM attempts WHERE number=?", (number,)).fetchone()
            if row is None:
                raise LedgerError(f"attempt #{number} is not in the ledger {self.path}")
            if row[0] is not None:
                raise LedgerError(f"attempt #{number}: its hidden draw is recorded already; a "
                                  f"batch's draw is written once, into rows without one")
            self._write(db, number, at, {"hidden": hidden})
            self._event(db, number, at, "hidden", {"hidden": hidden})

    def transition(self, number: int, state: str, *, reason: str | None = None,
                   at: str | None = None, **fields) -> None:
        """Move attempt ``number`` to ``state`` (and record ``fields``) in one transaction.

        ``reason`` (why it is in ``state`` now) replaces the previous one. Rules beyond the
        table: ``abandoned`` needs a reason; ``waiting`` needs ``waiting_on``
        (another attempt); ``merged`` needs a ``commit_sha`` not merged before (``merged_sha``
        defaults to it: main fast-forwards)."""
        if state not in STATES:
            raise LedgerError(f"attempt #{number}: unknown state {state!r}; expected one of "
                              f"{', '.join(repr(s) for s in STATES)}")
        fields = self._check_fields("transition", number, fields)
        at = self._at(at)
        with self._tx() as db:
            row = db.execute("SELECT state, commit_sha, waiting_on FROM attempts WHERE number=?",
                             (number,)).fetchone()
            if row is None:
                raise LedgerError(f"attempt #{number} is not in the ledger {self.path}")
            old, commit, waiting_on = row
            if state not in TRANSITIONS[old]:
                why = "final states never change" if old in FINAL else ""
                raise IllegalTransition(number, old, state, why)
            # ``reason`` says why the attempt is in its current state, so every transition
            # overwrites it (None when not given); the events keep the earlier ones.
            new = {**fields, "reason": reason}
            if state == ABANDONED and not reason:
                raise IllegalTransition(number, old, state, "abandoned needs a reason, e.g. "
                                        + ", ".join(REASONS))
            if state == WAITING:
                on = new.get("waiting_on", waiting_on)
                if on is None or on == number or not db.execute(
                        "SELECT 1 FROM attempts WHERE number=?", (on,)).fetchone():
                    raise IllegalTransition(number, old, state, f"waiting needs waiting_on = another "
                                            f"attempt of the ledger, found {on!r}")
            if state == MERGED:
                sha = new.get("commit_sha", commit)
                if not sha:
                    raise IllegalTransition(number, old, state, "merged needs commit_sha")
                other = db.execute("SELECT number FROM attempts WHERE state='merged' AND "
                                   "(commit_sha=? OR merged_sha=?)", (sha, sha)).fetchone()
                if other:
                    raise IllegalTransition(number, old, state,
                                            f"commit {sha[:12]} was already merged by #{other[0]}")
                new.setdefault("merged_sha", sha)
            if state in FINAL:
                new["finished_at"] = at
            new["state"] = state
            self._write(db, number, at, new)
            # the event carries every column written (defaults too), so the log alone replays it
            self._event(db, number, at, "transition",
                        {"from": old, "to": state, "reason": reason,
                         "fields": {k: v for k, v in new.items() if k not in ("state", "reason")}})

    def _check_fields(self, verb: str, number: int, fields: dict) -> dict:
        """``fields`` checked, as the columns (and the events) hold them."""
        bad = sorted(set(fields) - set(UPDATABLE))
        if bad:
            raise LedgerError(f"attempt #{number}: {verb} got unknown or managed field(s) {bad}; "
                              f"expected any of {', '.join(UPDATABLE)} (state and timestamps are "
                              f"set by new_attempt/transition)")
        gate = fields.get("gate")
        if gate is None:
            return fields
        if not isinstance(gate, GateSummary):  # a bug of the caller, not a state of the ledger
            raise TypeError(f"attempt #{number}: {verb}'s gate must be a gates.summary.GateSummary, "
                            f"found {type(gate).__name__}")
        return {**fields, "gate": gate.to_dict()}

    def _state(self, db, number: int) -> str:
        row = db.execute("SELECT state FROM attempts WHERE number=?", (number,)).fetchone()
        if row is None:
            raise LedgerError(f"attempt #{number} is not in the ledger {self.path}")
        return row[0]

    @staticmethod
    def _write(db, number: int, at: str, values: dict) -> None:
        values = {**values, "updated_at": at}
        cols = sorted(values)
        args = [_dumps(values[c]) if c in _JSON_COLUMNS and values[c] is not None else values[c]
                for c in cols]
        db.execute(f"UPDATE attempts SET {', '.join(f'{c}=?' for c in cols)} WHERE number=?",
                   (*args, number))

    @staticmethod
    def _attempt(r: dict) -> Attempt:
        a = {k: (_loads(v) if k in _JSON_COLUMNS else v) for k, v in r.items()}
        return Attempt(**{**a, "gate": GateSummary.from_dict(a.get("gate"))})

    def attempt(self, number: int) -> Attempt:
        r = self._q("SELECT * FROM attempts WHERE number=?", (number,))
        if not r:
            raise LedgerError(f"attempt #{number} is not in the ledger {self.path}")
        return self._attempt(r[0])

    def attempts(self, states: str | Iterable[str] | None = None,
                 phase_id: int | None = None) -> list[Attempt]:
        where, args = [], []
        if states is not None:
            states = [states] if isinstance(states, str) else list(states)
            unknown = [s for s in states if s not in STATES]
            if unknown:
                raise LedgerError(f"attempts: unknown state(s) {unknown}; expected any of {STATES}")
            where.append(f"state IN ({','.join('?' * len(states))})")
            args += states
        if phase_id is not None:
            where.append("phase_id=?")
            args.append(phase_id)
        sql = "SELECT * FROM attempts" + (" WHERE " + " AND ".join(where) if where else "")
        return [self._attempt(r) for r in self._q(sql + " ORDER BY number", args)]

    def in_flight(self) -> list[Attempt]:
        return self.attempts(IN_FLIGHT)

    def events(self, number: int | None = None) -> list[Event]:
        """The log of attempt ``number`` (None: every event, runs and phases included)."""
        rows = self._q("SELECT * FROM events" + (" WHERE attempt=?" if number is not None else "")
                       + " ORDER BY id", (number,) if number is not None else ())
        return [Event(**{**r, "data": _loads(r["data"])}) for r in rows]

    def of_commit(self, commit_sha: str) -> list[Attempt]:
        """Every attempt that judged (or is judging) commit ``commit_sha``, oldest first."""
        return [self._attempt(r) for r in self._q(
            "SELECT * FROM attempts WHERE commit_sha=? OR merged_sha=? ORDER BY number",
            (commit_sha, commit_sha))]

    def is_merged(self, commit_sha: str) -> bool:
        return bool(self._q("SELECT 1 FROM attempts WHERE state='merged' AND "
                            "(commit_sha=? OR merged_sha=?) LIMIT 1", (commit_sha, commit_sha)))

    def usage(self, run_id: int | None = None) -> dict:
        """Attempts, tokens and cost so far (of one run: its ticks' attempts) for budgets."""
        sql = ("SELECT count(*) AS attempts, coalesce(sum(tokens),0) AS tokens, "
               "coalesce(sum(cost_usd),0.0) AS cost_usd FROM attempts")
        if run_id is None:
            return self._q(sql)[0]
        return self._q(sql + " WHERE tick_id IN (SELECT id FROM ticks WHERE run_id=?)", (run_id,))[0]

    # ----------------------------------------------------------------- scores
    def record_score(self, phase_id: int, sha: str, score_ms: float, medians: dict | None,
                     at: str | None = None) -> int:
        """Main's score at ``sha`` (after a merge, or the baseline before any)."""
        at = self._at(at)
        with self._tx() as db:
            try:
                sid = db.execute("INSERT INTO scores(phase_id, sha, score_ms, medians, at) VALUES (?,?,?,?,?)",
                                 (phase_id, sha, float(score_ms),
                                  None if medians is None else _dumps(medians), at)).lastrowid
            except sqlite3.IntegrityError:
                raise LedgerError(f"record_score: phase {phase_id} is not in the ledger "
                                  f"(the caller must call phase(definition) first)") from None
            self._event(db, None, at, "score", {"phase": phase_id, "sha": sha, "score_ms": float(score_ms)})
        return sid

    def scores(self, phase_id: int | None = None) -> list[Score]:
        rows = self._q("SELECT * FROM scores" + (" WHERE phase_id=?" if phase_id is not None else "")
                       + " ORDER BY id", (phase_id,) if phase_id is not None else ())
        return [Score(**{**r, "medians": _loads(r["medians"])}) for r in rows]

    def latest_score(self, phase_id: int) -> Score | None:
        """Main's latest score in the phase (:func:`mains`: not an older main re-measured)."""
        ms = mains(self.scores(phase_id))
        return ms[-1] if ms else None

    def main_score(self, phase_id: int) -> float | None:
        s = self.latest_score(phase_id)
        return None if s is None else s.score_ms


class _Tx:
    """``with ledger._tx() as db``: BEGIN IMMEDIATE (take the write lock up front, so two
    writers queue on busy_timeout instead of failing on a lock upgrade) … COMMIT, or ROLLBACK
    on any error."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def __enter__(self):
        self.ledger._lock.acquire()
        try:
            self.ledger._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.ledger._lock.release()
            raise
        return _TxConn(self.ledger._db)

    def __exit__(self, typ, exc, tb):
        db = self.ledger._db
        try:
            if typ is None:
                try:
                    db.execute("COMMIT")
                except sqlite3.OperationalError as e:  # e.g. no room for the commit's pages
                    exc = e
            if exc is not None and db.in_transaction:
                db.execute("ROLLBACK")
        finally:
            self.ledger._lock.release()
        if isinstance(exc, sqlite3.IntegrityError) and "merged attempt never changes" in str(exc):
            raise LedgerError(f"the ledger refused to change a merged attempt: {exc}") from None
        if isinstance(exc, sqlite3.OperationalError) and disk_full(exc):
            raise LedgerError(f"ledger {self.ledger.path}: the disk is full ({exc}); this change was "
                              f"rolled back and everything recorded before it stands. The "
                              f"operator must free space on that disk, then start the loop "
                              f"again (it resumes).") from None
        if isinstance(exc, sqlite3.OperationalError):  # a read-only file, a table gone
            raise LedgerError(explain(exc, self.ledger.path, write=True)) from None
        if typ is None and exc is not None:
            raise exc
        return False


def _shown(path: Path) -> str:
    """``path`` as a person types it here: relative to the working folder when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def _mode(path: Path) -> str:
    try:
        st = path.stat()
    except OSError as e:
        return f"{path.name}: {e.strerror}"
    return f"{path.name or path} mode {st.st_mode & 0o777:04o} owner uid {st.st_uid}"


def explain(e: sqlite3.Error, path: Path, write: bool) -> str:
    """What a SQLite error on the ledger at ``path`` means, and who acts (pure over the error
    and the file's permissions): a disk with no room, a file or folder this user may not read
    or write, a table the file lacks, or a damaged file. A damaged ledger is never to be
    deleted or replaced: weeks of history may be in it, and ``.recover`` gets back what can be
    read. ``write``: the caller meant to write."""
    import os

    text = str(e)
    name = getattr(e, "sqlite_errorname", "") or ""
    shown = _shown(path)
    if disk_full(e):
        return (f"ledger {path}: the disk is full ({text}); nothing more was written and "
                f"everything recorded before stands. The operator frees space on that disk.")
    if "READONLY" in name or "CANTOPEN" in name or "PERM" in name or "AUTH" in name \
            or "readonly" in text or "unable to open" in text:
        folder = path.parent
        need = "read and write" if write else "read"
        return (f"ledger {path}: this user (uid {os.getuid()}) may not {need} it ({text}): "
                f"expected the file {'and its folder ' if write else ''}{need}able by this user, "
                f"got {_mode(path)}, {_mode(folder)}. The user (or whoever owns {folder}) fixes "
                f"the permissions (chmod u+w, or run kern as the owner); the ledger itself is "
                f"intact" + ("" if write else " as far as kern can tell"))
    if "no such table" in text or "no such column" in text:
        return (f"ledger {path}: {text}: the file lacks part of a kern-loop ledger (a table "
                f"dropped or a file written by other software); nothing was changed. Keep it: "
                f"`sqlite3 {shown} .tables` shows what it holds, `sqlite3 {shown} .recover | "
                f"sqlite3 recovered.sqlite` copies every row it can read into a new file")
    if "CORRUPT" in name or "NOTADB" in name or "malformed" in text or "not a database" in text:
        return (f"ledger {path} is damaged: {text}. Nothing was changed; keep the file (it may "
                f"hold weeks of history). `sqlite3 {shown} .recover | sqlite3 recovered.sqlite` "
                f"copies every row SQLite can still read into a new file; `kern --repo DIR "
                f"status` reads a repository whose runs/ledger.sqlite is that copy")
    return f"ledger {path}: SQLite says {name or type(e).__name__}: {text}"


def disk_full(e: sqlite3.Error) -> bool:
    """SQLite's SQLITE_FULL: the disk (or the database's size limit) has no room."""
    return getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "is full" in str(e)


class _TxConn:
    """The connection inside a transaction; ``executescript`` would COMMIT first, so schema
    scripts are split and run statement by statement instead."""

    def __init__(self, db: sqlite3.Connection):
        self._db = db

    def execute(self, sql, args=()):
        return self._db.execute(sql, args)

    def executescript_in_tx(self, script: str) -> None:
        buf = ""
        for line in script.splitlines(keepends=True):
            if line.lstrip().startswith("--"):
                continue
            buf += line
            if sqlite3.complete_statement(buf):
                self._db.execute(buf)
                buf = ""
        if buf.strip():
            raise LedgerError(f"ledger schema: incomplete statement {buf!r}")
