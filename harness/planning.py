"""Which targets to brief next: a pure function of the latest profile and the journey.

Each profile row (an op, or the dense projections) has a time in the step and its roofline
floor; its headroom is the time above the floor. Which time (:func:`row_times`):

* a profile with the leave-one-out 'free' column: what removing the row saved (never above the
  row's own events). A saving within the profile's noise band (:func:`noise_ms`: a negative
  saving is impossible, so its size is the noise) is no measurable time: headroom 0, said why.
* a profile of per-call events only: the events overstate small ops by their launch overhead (an
  H200 step's rows sum to 2.7x the graph's time), so when they sum past the step, the step's time
  is split over the rows in proportion to their floors (every row the same multiple of its floor),
  a row never above its own events; rows without a floor take their share of the summed events.

Targets that the journey shows were tried lose priority with every attempt that did not merge;
a target whose agent said 'nothing left' is skipped until something merges on it. Ties break by
name, so the plan is deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass


FREE, NOISE, EVENTS, SPLIT = "free", "free, within noise", "events", "events split by floor"


@dataclass(frozen=True)
class RowTime:
    """One profile row's time in the step as the planner counts it, and where it came from:
    ``basis`` is :data:`FREE` (the leave-one-out saving), :data:`NOISE` (a saving within the
    noise band: no measurable time), :data:`EVENTS` (per-call events that fit in the step) or
    :data:`SPLIT` (events that did not: the step split by floor, see the module's docstring)."""

    name: str
    event_ms: float
    time_ms: float
    floor_ms: float | None
    headroom_ms: float
    basis: str
    free_ms: float | None = None
    noise_ms: float = 0.0
    events_sum_ms: float = 0.0  # every row's events together (against the step)
    floor_multiple: float | None = None  # SPLIT: each row's time over its floor


@dataclass(frozen=True)
class OpTarget:
    """One profile row (an op) the loop may brief an agent on, with what ranks it; not
    kern.yaml's ``target`` section (the tree and its seeds: ``harness/settings.py``'s ``Target``).
    ``ms`` is the row's time as counted (:class:`RowTime`), ``share_pct`` its share of the step."""

    name: str
    ms: float
    floor_ms: float | None
    headroom_ms: float
    share_pct: float
    roofline_pct: float | None
    priority: float
    tried: int
    time: RowTime | None = None  # None: not a row of the profile


def noise_ms(ops: dict) -> float:
    """Pure: the profile's noise band on the free column: removing a row cannot slow the step,
    so the most negative saving is how far any saving may be noise. 0 without a free column or
    a negative saving. (A saving above the row's own events is no measure of noise: leaving the
    router out also changes the experts' work downstream.)"""
    return max([0.0] + [-r["free_ms"] for r in ops.values() if r.get("free_ms") is not None])


def _split_by_floor(rows: dict, budget: float) -> float:
    """Pure: the multiple R with sum(min(ms, floor * R)) == ``budget`` over ``rows`` (name ->
    (ms, floor > 0)); the caller makes sure the events alone exceed the budget."""
    order = sorted(rows.values(), key=lambda mf: mf[0] / mf[1])
    capped = 0.0  # events of the rows already below floor * R
    for k, (ms, floor) in enumerate(order):
        rest = sum(f for _, f in order[k:])
        r = (budget - capped) / rest
        if r <= ms / floor:
            return r
        capped += ms
    raise ValueError(f"events {capped:.3f} ms do not exceed the budget {budget:.3f} ms")


def row_times(ops: dict, step_ms: float) -> dict[str, RowTime]:
    """Pure: every row's :class:`RowTime` in a profile's ``ops`` ({row: {ms, floor_ms, free_ms}})
    of a ``step_ms`` step, by the rule in the module's docstring."""
    total = sum(r["ms"] for r in ops.values())
    noise = noise_ms(ops)
    floor = {n: r.get("floor_ms") or 0.0 for n, r in ops.items()}
    times, multiple, basis, floored = {n: r["ms"] for n, r in ops.items()}, None, EVENTS, {}
    if total > step_ms > 0:  # the events overstate the step: split it
        basis = SPLIT
        floored = {n: (r["ms"], floor[n]) for n, r in ops.items() if floor[n] > 0 and r["ms"] > 0}
        for n in ops:
            if n not in floored:
                times[n] = ops[n]["ms"] * step_ms / total
        budget = step_ms * sum(ms for ms, _ in floored.values()) / total
        if floored:
            multiple = _split_by_floor(floored, budget)
            for n, (ms, f) in floored.items():
                times[n] = min(ms, f * multiple)
    out = {}
    for n, r in ops.items():
        free, b, t = r.get("free_ms"), basis, times[n]
        if free is not None:
            b, t = (FREE, min(free, r["ms"])) if free > noise else (NOISE, min(max(0.0, free), r["ms"]))
        head = 0.0 if b == NOISE else max(0.0, t - floor[n])
        out[n] = RowTime(name=n, event_ms=r["ms"], time_ms=t, floor_ms=r.get("floor_ms"), headroom_ms=head,
                         basis=b, free_ms=free, noise_ms=noise, events_sum_ms=total,
                         floor_multiple=multiple if b == SPLIT and n in floored else None)
    return out


def journey_stats(journey: list[dict]) -> dict:
    """Per target: attempts that did not merge since its last merge, and whether its agent
    said 'nothing left' (declined with estimate 0) since then."""
    stats: dict = {}
    for a in journey:
        s = stats.setdefault(a["target"], {"failed": 0, "exhausted": False})
        if a["state"] == "merged":
            s["failed"], s["exhausted"] = 0, False
        elif a["state"] == "not done" and (a.get("estimate_ms") or 0) == 0:
            s["exhausted"] = True
        elif a["state"] not in ("queued", "running", "judging", "waiting"):
            s["failed"] += 1
    return stats


def target_of(name: str, ops: dict, step_ms: float, journey: list[dict], decay: float = 0.6) -> OpTarget:
    """Profile row ``name`` of ``ops`` as a target, whatever its priority (``kern brief`` asks
    for any; a replayed patch may name a row the profile lacks: no time, no headroom)."""
    st = journey_stats(journey).get(name, {"failed": 0, "exhausted": False})
    rt = row_times(ops, step_ms).get(name)
    if rt is None:
        return OpTarget(name=name, ms=0.0, floor_ms=None, headroom_ms=0.0, share_pct=0.0,
                        roofline_pct=None, priority=0.0, tried=st["failed"])
    floor, t = rt.floor_ms, rt.time_ms
    return OpTarget(name=name, ms=t, floor_ms=floor, headroom_ms=rt.headroom_ms,
                    share_pct=100.0 * t / step_ms if step_ms else 0.0,
                    roofline_pct=(100.0 * floor / t) if floor and t > 0 else None,
                    priority=rt.headroom_ms * decay ** st["failed"], tried=st["failed"], time=rt)


def plan(profile_ops: dict, step_ms: float, journey: list[dict], slots: int,
         busy: set[str] = frozenset(), decay: float = 0.6,
         allowed: tuple[str, ...] | None = None) -> list[OpTarget]:
    """``profile_ops``: {row: {ms, floor_ms, free_ms}}; ``journey``: [{target, state, reason}];
    ``busy``: targets with an attempt in flight (never doubled up); ``allowed``: the rows the
    loop may brief (kern.yaml ``loop.targets``; None: every row)."""
    if slots <= 0:
        return []
    stats = journey_stats(journey)
    out = []
    for name in profile_ops:
        if name in busy or stats.get(name, {}).get("exhausted") or (allowed is not None and name not in allowed):
            continue
        t = target_of(name, profile_ops, step_ms, journey, decay)
        if t.headroom_ms <= 0:
            continue
        out.append(t)
    out.sort(key=lambda t: (-t.priority, t.name))
    return out[:slots]


def agents_broken(streak: int, limit: int, last_line: str) -> str | None:
    """Pure: why the loop must stop when ``streak`` agents in a row ended without a proposal
    (``limit`` of kern.yaml's loop.stop_after_agent_crashes, 0: never). Agents of different
    targets that all die before proposing point at their environment (a module the agent's
    process cannot import, a missing CLI), not at a target: each further start would only use up
    a brief (or a replay patch) on the same failure."""
    if limit <= 0 or streak < limit:
        return None
    return (f"environment: {streak} agents in a row ended without a proposal; the last one's "
            f"log ends: {last_line or '(empty)'}. Operator: run that agent by hand "
            "(python -m harness.agents.run, its attempt folder's settings) and mend its environment")


DENSE_ROW = "dense projections (cuBLAS)"  # the profile's one row for every dense projection


def row_of_change(touched: set[str] | None, families: dict[str, str]) -> str:
    """Pure: the profile row(s) a change's touched ops make up (``families``: op -> family;
    dense projections are one row), joined by ', '; '' when the change touches every op or
    none that can be told (the step, a shared helper)."""
    if not touched:
        return ""
    rows = {DENSE_ROW if families.get(op) == "dense" else op for op in touched}
    return ", ".join(sorted(rows))

