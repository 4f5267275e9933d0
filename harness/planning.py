"""Which targets to brief next: a pure function of the latest profile and the journey.

Each profile row (an op, or the dense projections) has measured time and its roofline floor;
its headroom is the time above the floor (the leave-one-out 'free' time when smaller, since
per-call events inflate small ops). Targets that the journey shows were tried lose priority
with every attempt that did not merge; a target whose agent said 'nothing left' is skipped
until something merges on it. Ties break by name, so the plan is deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpTarget:
    """One profile row (an op) the loop may brief an agent on, with what ranks it; not
    kern.yaml's ``target`` section (the tree and its seeds: ``harness/settings.py``'s ``Target``)."""

    name: str
    ms: float
    floor_ms: float | None
    headroom_ms: float
    share_pct: float
    roofline_pct: float | None
    priority: float
    tried: int


def headroom(row: dict) -> float:
    ms = row["ms"]
    if row.get("free_ms") is not None and 0 <= row["free_ms"] < ms:
        ms = row["free_ms"]
    return max(0.0, ms - (row.get("floor_ms") or 0.0))


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


def target_of(name: str, row: dict, step_ms: float, journey: list[dict], decay: float = 0.6) -> OpTarget:
    """Profile row ``name`` as a target, whatever its priority (``kern brief`` asks for any)."""
    st = journey_stats(journey).get(name, {"failed": 0, "exhausted": False})
    h = headroom(row)
    floor = row.get("floor_ms")
    return OpTarget(name=name, ms=row["ms"], floor_ms=floor, headroom_ms=h,
                    share_pct=100.0 * row["ms"] / step_ms if step_ms else 0.0,
                    roofline_pct=(100.0 * floor / row["ms"]) if floor and row["ms"] else None,
                    priority=h * decay ** st["failed"], tried=st["failed"])


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
    for name, row in profile_ops.items():
        if name in busy or stats.get(name, {}).get("exhausted") or (allowed is not None and name not in allowed):
            continue
        t = target_of(name, row, step_ms, journey, decay)
        if t.headroom_ms <= 0:
            continue
        out.append(t)
    out.sort(key=lambda t: (-t.priority, t.name))
    return out[:slots]


DENSE_ROW = "dense projections (cuBLAS)"  # the profile's one row for every dense projection


def row_of_change(touched: set[str] | None, families: dict[str, str]) -> str:
    """Pure: the profile row(s) a change's touched ops make up (``families``: op -> family;
    dense projections are one row), joined by ', '; '' when the change touches every op or
    none that can be told (the step, a shared helper)."""
    if not touched:
        return ""
    rows = {DENSE_ROW if families.get(op) == "dense" else op for op in touched}
    return ", ".join(sorted(rows))

