"""The scope gate: what a candidate commit may touch. Pure functions over plain data.

A candidate must be exactly one commit on top of its base; every changed path must match an
editable glob and no protected glob; the change must stay under a size limit and add no
dependency (dependency files are protected). Globs follow ``fnmatch`` (``*`` crosses ``/``),
the same rule the agents' edit tools apply.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

MAX_CHANGED_LINES = 4000
MAX_FILES = 40


@dataclass(frozen=True)
class ScopeResult:
    ok: bool
    problems: list = field(default_factory=list)

    def reason(self) -> str:
        return "; ".join(self.problems[:4])


def matches(path: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatch(path, g) for g in globs)


def check(*, commits: int, paths: list[str], changed_lines: int, editable: list[str],
          protected: list[str]) -> ScopeResult:
    problems = []
    if commits == 0:
        problems.append("no commit: the agent finished without committing")
    elif commits > 1:
        problems.append(f"{commits} commits: an attempt must be exactly one commit")
    if not paths and commits:
        problems.append("the commit changes no file")
    for p in paths:
        if matches(p, protected):
            problems.append(f"{p} is protected")
        elif not matches(p, editable):
            problems.append(f"{p} is outside the editable globs {editable}")
    if len(paths) > MAX_FILES:
        problems.append(f"{len(paths)} files changed (limit {MAX_FILES})")
    if changed_lines > MAX_CHANGED_LINES:
        problems.append(f"{changed_lines} lines changed (limit {MAX_CHANGED_LINES})")
    return ScopeResult(not problems, problems)
