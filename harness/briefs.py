"""The brief of one attempt: prompts/subagent.md rendered for a target from the profile of main,
the journey and kern.yaml. Pure: the loop's spawn and ``kern brief`` render the same text from
the same inputs, so a person or an outside agent reads exactly what a sub-agent would get."""
from __future__ import annotations

import re
import statistics
from pathlib import Path

from gates.settings import MachineProfile

from . import planning
from .agents.base import Brief
from .settings import Resolved

PROMPTS = Path(__file__).resolve().parent.parent / "prompts"


class BriefError(ValueError):
    """The brief cannot be written: no such target in the profile (the user named another)."""


def tried_lines(attempts: list, target: str) -> list[str]:
    """One line per earlier attempt on ``target`` (the tuner parses ``tunable NAME=VALUE``)."""
    from .journey import result

    out = []
    for a in attempts:
        if a.target != target:
            continue
        m = re.match(r"tune: (\S+) \S+ -> (\S+)", a.title or "")
        what = f"tunable {m.group(1)}={m.group(2)}" if m else (a.title or "(untitled)")
        out.append(f"{what}: {result(a)}")
    return out


def render(template: str, values: dict) -> str:
    class Missing(dict):
        def __missing__(self, key):
            return "{" + key + "}"

    return template.format_map(Missing(values))


def target_for(name: str, main_profile: dict, attempts: list) -> planning.OpTarget:
    """The planner's view of profile row ``name`` (even when the planner would skip it now),
    or :class:`BriefError` naming the rows there are."""
    ops = main_profile["ops"]
    if name not in ops:
        raise BriefError(f"no row {name!r} in the profile of main; its rows: {', '.join(sorted(ops))}")
    journey = [{"target": a.target, "state": a.state, "estimate_ms": a.estimate_ms} for a in attempts]
    return planning.target_of(name, ops, main_profile["step_ms"], journey)


def cycle_text(attempts: list) -> str:
    """How long judging one commit took lately: the median of the last ten judged attempts'
    created -> finished times, or 'a few minutes' before any was judged."""
    from datetime import datetime

    spans = []
    for a in attempts[::-1]:
        if a.created_at and a.finished_at and (a.medians_b or a.decision):
            try:
                t0 = datetime.fromisoformat(a.created_at)
                t1 = datetime.fromisoformat(a.finished_at)
            except ValueError:
                continue
            spans.append((t1 - t0).total_seconds())
        if len(spans) == 10:
            break
    if not spans:
        return "a few minutes"
    return f"about {statistics.median(spans) / 60:.0f} minutes (the median of the last {len(spans)} judged attempts)"


def quick_test(target: str) -> str:
    from kernels.k31 import contracts

    try:
        return f"python -m pytest -q {contracts.op(target).test}"
    except KeyError:
        return "python -m pytest -q tests/kernels"


def shapes_text(m: MachineProfile) -> str:
    """The brief's shapes line of machine profile ``m``."""
    return (f"model {m.model}, layout {m.layout} (rank 0's shapes), buckets {list(m.buckets)} rows, "
            f"context {m.context} tokens per request")


def ceiling_text(result: dict | None) -> str:
    """What the profile's floors divide bytes by, from a profile result (the side's JSON)."""
    result = result or {}
    ceiling, torch_sum = result.get("read_ceiling_Bps"), result.get("torch_sum_Bps")
    if ceiling:
        return (f"{ceiling / 1e12:.2f} TB/s, the card's read ceiling measured with the profile (the best "
                f"streaming read" + (f"; torch's sum read {torch_sum / 1e12:.2f} TB/s" if torch_sum else "") + ")")
    old = result.get("read_bandwidth_Bps")
    if old:  # profiles before 2026-12-03 measured torch's sum only
        return (f"{old / 1e12:.2f} TB/s, torch's sum measured with the profile: an under-read (a "
                f"streaming read kernel reaches ~13 % more on an H200), so this floor is generous")
    return "no measured bandwidth (a CPU profile: its floors mean nothing)"


def measured_on_gpu(result: dict) -> bool:
    """Whether a profile result was measured on a GPU (its shapes are kern.yaml's gpu profile)."""
    return (result.get("environment") or {}).get("device") == "cuda"


def time_text(t: planning.OpTarget, step_ms: float, rows: int) -> str:
    """Pure: the brief's line on the target's time in the step, saying which column of the
    profile it came from (:func:`harness.planning.row_times`)."""
    rt, name = t.time, f"`{t.name}`"
    step = f"the {step_ms:.3f} ms step at {rows} rows"
    if rt is None:
        return f"{name} is not a row of the profile of main: no time was measured for it in {step}."
    events = f"its per-call events say {rt.event_ms:.3f} ms"
    if rt.basis == planning.NOISE:
        return (f"{name} has no measurable time in {step}: leaving it out saved {rt.free_ms:.3f} ms, "
                f"within the profile's noise (±{rt.noise_ms:.3f} ms, its most negative saving); "
                f"{events}, mostly launch overhead that the captured graph does not pay.")
    takes = f"{name} takes {'about ' if rt.basis == planning.SPLIT else ''}{t.ms:.3f} ms of {step} ({t.share_pct:.1f}% of the step)"
    if rt.basis == planning.FREE:
        return (f"{takes}: the profile's leave-one-out 'free' column (the step re-captured without it "
                f"is that much faster); {events}, which count launch overhead the graph does not pay.")
    if rt.basis == planning.EVENTS:
        return (f"{takes}: its per-call events (this profile has no leave-one-out column; the rows' "
                f"events sum to {rt.events_sum_ms:.3f} ms, within the step).")
    how = (f"each row {rt.floor_multiple:.2f}x its floor, never above its own events" if rt.floor_multiple
           else "this row has no floor, so it keeps its share of the summed events")
    return (f"{takes}, an estimate: this profile has no leave-one-out column and its per-call events "
            f"sum to {rt.events_sum_ms:.3f} ms, past the step (launch overhead), so the step's time is "
            f"split over the rows in proportion to their roofline floors ({how}; {events}).")


def make_brief(cfg: Resolved, t: planning.OpTarget, main_profile: dict, attempts: list, number: int, base: str,
               template: str | None = None, ceiling: str = "") -> Brief:
    """Attempt ``number``'s brief on target ``t``, briefed on main ``base``. ``cfg``: kern.yaml
    resolved for the machine the profile was measured on; ``main_profile``: the (op-time) profile
    of main ({rows, step_ms, ops});
    ``ceiling``: :func:`ceiling_text` of the profile's result."""
    tried = tried_lines(attempts, t.name)
    m = cfg.machine
    values = {
        "attempt": number, "target": t.name, "base_short": base[:10], "ms": f"{t.ms:.3f}",
        "step_ms": f"{main_profile['step_ms']:.3f}", "rows": main_profile["rows"], "share": f"{t.share_pct:.1f}",
        "floor": f"{t.floor_ms:.3f}" if t.floor_ms else "unknown",
        "roofline": f"{t.roofline_pct:.0f}%" if t.roofline_pct else "unknown",
        "headroom": f"{t.headroom_ms:.3f}", "shapes": shapes_text(m),
        "tried": "\n".join(f"- {x}" for x in tried) or "- nothing yet",
        "editable": ", ".join(cfg.editable), "protected": ", ".join(cfg.protected),
        "buckets": list(m.buckets), "weights": list(m.weights), "guard_pct": cfg.bench.guard_pct,
        "test_rows": ", ".join(map(str, m.test_rows)), "hidden_rows": cfg.test.hidden_rows,
        "time_line": time_text(t, main_profile["step_ms"], main_profile["rows"]),
        "cycle": cycle_text(attempts), "ceiling": ceiling or "the read ceiling measured with the profile", "quick_test": quick_test(t.name), "quick_bench": "kern step --rows 16",
    }
    text = render(template if template is not None else (PROMPTS / "subagent.md").read_text(), values)
    return Brief(attempt=number, target=t.name, text=text, share_pct=t.share_pct,
                 roofline_pct=t.roofline_pct, shapes=values["shapes"], tried=tried,
                 editable=list(cfg.editable), protected=list(cfg.protected),
                 quick_test=values["quick_test"], quick_bench=values["quick_bench"], base_sha=base)
