"""Trial merges: near-misses that may add up.

Merged gains do not simply add, and attempts that ended ``within noise`` while measured
faster may together be a real gain. When a tick had nothing to judge, or a full trial's worth
of them waits, and a slot is free, the orchestrator forms a **trial merge** of up to
``loop.trial_merge_parts`` of the ``loop.trial_merge_recent`` latest such near-misses: their
commits picked one by one onto main (a part that conflicts with main or with the parts before
it is left out), squashed into one commit, and queued as an attempt of its own (backend
``trial``) whose ``parts`` column lists them (a near-miss takes part in one trial at most). It
is judged like any attempt (scope, accuracy, scorer, guard) and merges only on its own measured
gain.

:func:`near_misses` and :func:`pick_parts` decide (pure); :func:`form` is the git shell.
"""
from __future__ import annotations

from pathlib import Path

import git

from . import ledger as L

BACKEND = "trial"


def near_misses(attempts: list, phase_id: int | None, recent: int) -> list:
    """Pure: the attempts a trial may combine, best measured gain first: among the ``recent``
    latest attempts, those of phase ``phase_id`` abandoned ``within noise`` with a measured
    gain (delta < 0: all in the same direction) and a commit of their own, that are neither a
    trial nor a part of an earlier one (a near-miss is combined once: a trial that merged has
    it on main, one that did not has answered for it)."""
    used = {n for a in attempts for n in (a.parts or [])}
    latest = sorted(attempts, key=lambda a: a.number)[-recent:] if recent > 0 else []
    out = [a for a in latest
           if a.state == L.ABANDONED and a.reason == L.WITHIN_NOISE and a.phase_id == phase_id
           and a.delta_ms is not None and a.delta_ms < 0 and a.commit_sha
           and a.commit_sha != a.base_sha and a.backend != BACKEND and not a.parts
           and a.number not in used]
    return sorted(out, key=lambda a: (a.delta_ms, a.number))


def pick_parts(candidates: list, max_parts: int) -> list:
    """Pure: the near-misses to try together: the ``max_parts`` best (at least two), or []."""
    if max_parts < 2 or len(candidates) < 2:
        return []
    return candidates[:max_parts]


def due(spawn: bool, judged: int, in_flight_trials: int, free_slots: int, ready: int,
        max_parts: int) -> bool:
    """Pure: a tick forms a trial when it may start work (not a bounded run's last tick), no
    trial is already in flight, a slot is free, and it judged nothing or a full trial's worth
    of near-misses waits (``ready`` >= ``max_parts`` >= 2): an agent fast enough that every tick
    judges something (the replay backend over a long queue) would otherwise leave its
    near-misses apart until its queue ran dry."""
    if not (spawn and in_flight_trials == 0 and free_slots > 0):
        return False
    return judged == 0 or (max_parts >= 2 and ready >= max_parts)


def title(parts: list) -> str:
    return "trial merge of " + " + ".join(f"#{a.number}" for a in parts)


def hypothesis(parts: list) -> str:
    lines = [f"- #{a.number} {a.title}: {a.delta_ms:+.3f} ms [{a.ci_low:+.3f}, {a.ci_high:+.3f}] within noise"
             if a.ci_low is not None and a.ci_high is not None else
             f"- #{a.number} {a.title}: {a.delta_ms:+.3f} ms within noise" for a in parts]
    return "Near-misses measured faster, each within noise alone; together they may be a gain.\n" \
        + "\n".join(lines)


def form(repo, number: int, main_sha: str, parts: list, runs: Path) -> tuple[list, str | None]:
    """On attempt ``number``'s branch from ``main_sha``: pick each part's commit in turn (a
    part that does not apply is left out), then squash them into one commit. Returns (the parts
    applied, the commit) or (applied, None) when fewer than two applied."""
    wt = repo.open_attempt(number, main_sha, runs)
    g = git.Repo(wt).git
    who = {"GIT_AUTHOR_NAME": "kern-loop", "GIT_AUTHOR_EMAIL": "kern@loop",
           "GIT_COMMITTER_NAME": "kern-loop", "GIT_COMMITTER_EMAIL": "kern@loop"}
    with g.custom_environment(**who):
        return _pick_and_squash(g, main_sha, parts)


def _pick_and_squash(g, main_sha: str, parts: list) -> tuple[list, str | None]:
    applied = []
    for a in parts:
        try:
            g.cherry_pick("--allow-empty", a.commit_sha)
            applied.append(a)
        except git.GitCommandError:
            try:
                g.cherry_pick("--abort")
            except git.GitCommandError:
                pass
    if len(applied) < 2:
        return applied, None
    g.reset("--soft", main_sha)
    body = hypothesis(applied)
    g.commit("-q", "--allow-empty", "-m", f"{title(applied)}\n\n{body}")
    return applied, g.rev_parse("HEAD")
