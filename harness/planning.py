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
class Target:
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


def plan(profile_ops: dict, step_ms: float, journey: list[dict], slots: int,
         busy: set[str] = frozenset(), decay: float = 0.6) -> list[Target]:
    """``profile_ops``: {row: {ms, floor_ms, free_ms}}; ``journey``: [{target, state, reason}];
    ``busy``: targets with an attempt in flight (never doubled up)."""
    if slots <= 0:
        return []
    stats: dict = {}
    for a in journey:
        s = stats.setdefault(a["target"], {"failed": 0, "exhausted": False})
        if a["state"] == "merged":
            s["failed"], s["exhausted"] = 0, False
        elif a["state"] == "not done" and (a.get("estimate_ms") or 0) == 0:
            s["exhausted"] = True
        elif a["state"] not in ("queued", "running", "judging", "waiting"):
            s["failed"] += 1
    out = []
    for name, row in profile_ops.items():
        st = stats.get(name, {"failed": 0, "exhausted": False})
        if name in busy or st["exhausted"]:
            continue
        h = headroom(row)
        if h <= 0:
            continue
        floor = row.get("floor_ms")
        out.append(Target(
            name=name, ms=row["ms"], floor_ms=floor, headroom_ms=h,
            share_pct=100.0 * row["ms"] / step_ms if step_ms else 0.0,
            roofline_pct=(100.0 * floor / row["ms"]) if floor and row["ms"] else None,
            priority=h * decay ** st["failed"], tried=st["failed"]))
    out.sort(key=lambda t: (-t.priority, t.name))
    return out[:slots]
