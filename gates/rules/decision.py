"""The merge rule: what the gates' results decide for one attempt (pure).

One function, :func:`decide`, over the scope gate's answer, the accuracy gate's
:class:`~gates.results.AccuracyResult` and the scorer's :class:`~gates.results.BenchResult`
(with its re-measurement, when a large gain was measured again). First match wins:

    scope rejected                              abandoned   scope
    no accuracy result                          crashed     the accuracy gate did not run
    a side of a gate ran out of disk            crashed     environment: disk: ... (the
                                                operator's to fix, not the candidate's: the
                                                loop re-queues the attempt and stops)
    a side of a gate ended other than ok        :func:`side_ended` (the same for both gates:
                                                a timeout is its own state, a caught cheat
                                                is that gate's rejection, the rest a crash;
                                                main's own side failing is a crash)
    accuracy verdict not a PASS                 abandoned   accuracy
    a scorer check failed (the candidate's, or  abandoned   scorer check
      the re-measurement did not reproduce the
      gain), or its graph differs from eager
    the interval is slower / within the noise   abandoned   slower / within noise
    the guard does not hold                     abandoned   guard
    otherwise                                   merged

The states and reasons are the ledger's (harness/ledger.py spells the same words).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..results import DISK_FULL, NOT_RUN, OK, TAMPERED, TIMEOUT, BenchResult, AccuracyResult, LastWords

MERGED, ABANDONED, CRASHED, TIMED_OUT = "merged", "abandoned", "crashed", "timed out"
# which step of the rule decided: the ledger row records the gates up to that one
BY_SCOPE, BY_ACCURACY, BY_SCORER, BY_CHECKS, BY_SCORE = "scope", "accuracy", "scorer", "checks", "score"

# per gate: (name in a timeout's reason, the reason a caught cheat is rejected for, a crash's
# reason before the side's kind)
_GATES = {BY_ACCURACY: ("accuracy gate", "accuracy", "kern test: the candidate's side ended with "),
          BY_SCORER: ("scorer", "scorer check", "scorer: ")}


@dataclass(frozen=True)
class Decision:
    state: str  # merged | abandoned | crashed | timed out
    reason: str | None  # None when merged
    by: str  # the step of the rule that decided (BY_*)
    checks: tuple = ()  # BY_CHECKS: the failed checks, the re-measurement's last


def side_ended(gate: str, kind: str) -> Decision:
    """A side of ``gate`` (BY_ACCURACY, BY_SCORER) that ended with ``kind`` (not ok)."""
    name, rejected, crashed = _GATES[gate]
    if kind == TIMEOUT:
        return Decision(TIMED_OUT, f"{name} timeout", gate)
    if kind == TAMPERED:  # a cheat caught by the gate, not a crash
        return Decision(ABANDONED, rejected, gate)
    return Decision(CRASHED, f"{crashed}{kind}", gate)


DISK = "environment: disk"  # how a reason for a side that ran out of disk starts (gates/rules/footprint.py)


def disk_reason(gate: str, words: LastWords | None) -> str:
    """The reason of a judgment whose side ran out of disk: which side, the folder it wrote."""
    where = f" writing {words.log.rsplit('/', 1)[0]}" if words and words.log and "/" in words.log else ""
    side = f"{gate}'s {words.side}" if words else f"a side of the {gate}"
    return (f"{DISK}: {side} ran out of disk space{where}: the operator must free space on the "
            f"disk holding runs/, then judge it again")


def needs_reverify(bench: BenchResult | dict | None, pct: float) -> bool:
    """The scorer found a gain larger than ``pct`` % with every check clean: a large gain is
    merged only once an independent measurement reproduces it (gates/judging.py)."""
    if not bench:
        return False
    bench = BenchResult.of(bench)
    if bench.outcome != "ok" or bench.ab is None:
        return False
    return (bench.ab.classification == "faster" and not bench.b.failed_checks
            and bench.ab.delta_pct < -pct)


def reverify_check(bench: BenchResult) -> dict | None:
    """None when the re-measurement of a large gain (``bench.reverify``) reproduced it (it
    ran, its checks are clean and it also finds the candidate faster) or none ran, else the
    failed check that names what the second measurement found."""
    again = bench.reverify
    if again is None:
        return None
    first = bench.ab
    if again.outcome != OK:
        return {"check": "reverify", "why": f"the re-measurement of a {first.delta_pct:+.1f} % "
                f"gain did not finish ({again.outcome}: {again.error})"}
    ab, bad = again.ab, list(again.b.failed_checks)
    if bad or ab.classification != "faster":
        found = f"failed checks {[c.get('check') for c in bad]}" if bad else \
            f"{ab.delta_ms:+.2f} ms ({ab.delta_pct:+.1f} %) [{ab.low:+.2f}, {ab.high:+.2f}] {ab.classification}"
        return {"check": "reverify", "why": f"a {first.delta_pct:+.1f} % gain was not reproduced "
                f"by an independent re-measurement (fresh processes, alternating sides): {found}"}
    return None


def decide(scope_ok: bool, test: AccuracyResult | None, bench: BenchResult | None) -> Decision:
    """The merge rule (module docstring). ``bench``: None when the scorer did not run."""
    if not scope_ok:
        return Decision(ABANDONED, "scope", BY_SCOPE)
    if test is None:
        return Decision(CRASHED, "the accuracy gate did not run", BY_ACCURACY)
    if DISK_FULL in (test.outcome_a, test.outcome_b, test.outcome_noise):
        full = next((w for w in test.last_words if w.kind == DISK_FULL), None)
        return Decision(CRASHED, disk_reason("accuracy gate", full), BY_ACCURACY)
    if test.outcome_b == TIMEOUT:
        return side_ended(BY_ACCURACY, TIMEOUT)
    if test.outcome_a != OK:  # main's own side: the machine or main is broken, not the candidate
        return Decision(CRASHED, f"kern test: main's side ended with {test.outcome_a}", BY_ACCURACY)
    if test.outcome_b not in (None, OK, NOT_RUN):  # tampered, a segfault, out of memory, ...
        return side_ended(BY_ACCURACY, test.outcome_b)
    if not test.passed:
        return Decision(ABANDONED, "accuracy", BY_ACCURACY)
    if bench is not None and DISK_FULL in (bench.outcome, bench.reverify and bench.reverify.outcome):
        full = bench.last_words if bench.outcome == DISK_FULL else bench.reverify.last_words
        return Decision(CRASHED, disk_reason("scorer", full), BY_SCORER)
    if bench is None or bench.outcome != OK:
        return side_ended(BY_SCORER, NOT_RUN if bench is None else bench.outcome)
    again = reverify_check(bench)
    checks = tuple(bench.b.failed_checks) + ((again,) if again else ())
    if checks or not bench.b.graph_matches_eager:  # decided without a comparison (as before)
        return Decision(ABANDONED, "scorer check", BY_CHECKS, checks)
    if bench.ab is None:
        raise ValueError("the scorer's result has no comparison with main (it scored the "
                         "candidate alone): a bug of the caller, which must run it with a base")
    cls = bench.ab.classification
    if cls in ("slower", "within noise"):
        return Decision(ABANDONED, cls, BY_SCORE)
    if not bench.ab.guard_ok:
        return Decision(ABANDONED, "guard", BY_SCORE)
    return Decision(MERGED, None, BY_SCORE)
