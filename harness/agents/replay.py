"""The replay backend: applies recorded patches from ``agent.replay_dir``, for tests and demos.

Which patch: the orchestrator passes ``index`` (constructor context, ``make_agent(...,
index=N)`` or ``"context": {"index": N}`` in run.py's settings file), the place in the folder's
patch files sorted by file name; past the end the backend declines with "nothing left to
replay". The orchestrator picks it with :func:`next_patches` over its ledger, where each replay
attempt's row records the patch it was handed: the first patch no attempt holds, so a patch
whose agent died before reading it goes to the next attempt (not a neighbour's patch, whatever
else is in flight).

Patch files (other files, and names starting with ``.``, are ignored):

- ``*.patch`` / ``*.diff`` / ``*.mbox`` / ``*.eml`` starting with ``From `` (``git format-patch``
  output): ``git am``; every message in it becomes a commit, so a two-message mbox makes the
  "committed twice" fault for tests. Author and subject come from the patch.
- other ``*.patch`` / ``*.diff``: ``git apply --index`` and one commit. Its subject is the
  first line of the text before the diff (``Subject: [PATCH] `` stripped), else
  ``replay: <file stem>``.
- ``*.json``: ``{"declined": "the idea", "estimate_ms": -0.4}`` gives a declined proposal;
  ``{"failed": "why"}`` a failed one (fault injection).

A queued patch written on top of earlier queued patches applies only once they are merged. Its
variant written onto the queue's base alone may sit in ``ONTO_MAIN/`` under the same file name:
when the patch itself does not apply (a predecessor was abandoned), the backend applies that
variant instead, as an agent re-briefed on today's main would. A patch whose lines another queued
patch NNN also edits may have a third variant, written onto main with NNN merged, in
``onto-NNN/`` (:func:`variants`: the order tried).

Which waiting patch goes first: by file name, unless the folder holds ``ORDER_FILE`` (one
patch file name a line, ``#`` comments): the waiting patches it lists go first, in its order,
then the rest by name. It ranks only what is handed out next; a patch's place (its ``index``,
and the patch of a row from before rows named theirs) stays its place in file-name order.

A patch names the target it was written for with a ``Target: <profile row>`` line before its
diff (a trailer of the commit message): the orchestrator then briefs that target for the
attempt that replays it (:func:`target_at`), and the ledger row records it.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..settings import Agent
from .base import Brief, Proposal
from .common import AgentConfigError, GitError, git, subject

PATCH_SUFFIXES = (".patch", ".diff", ".mbox", ".eml", ".json")
ONTO_MAIN = "onto-main"  # the subfolder of the patches' variants written onto the queue's base alone
ONTO_PREFIX = "onto-"  # onto-NNN/: variants written onto a main where queued patch NNN merged
ORDER_FILE = "ORDER"  # the orchestrator's ranking of the waiting patches (optional)


def patch_files(folder: Path) -> list[Path]:
    return sorted((p for p in Path(folder).iterdir()
                   if p.is_file() and not p.name.startswith(".") and p.suffix in PATCH_SUFFIXES),
                  key=lambda p: p.name)


def variants(patch: Path) -> list[Path]:
    """The files to try for a handed-out patch, in order: the patch, then its variant written
    onto the queue's base alone (``ONTO_MAIN/<same name>`` beside it), then its variants written
    onto a main where another queued patch merged (``onto-<that patch's number>/<same name>``,
    by folder name), each where there is one. Variants that overlap apply to different mains
    only (git am checks the context), so the first that applies is the one for this main."""
    others = sorted(d.name for d in patch.parent.glob(ONTO_PREFIX + "*")
                    if d.is_dir() and d.name != ONTO_MAIN)
    tried = [patch.parent / folder / patch.name for folder in (ONTO_MAIN, *others)]
    return [patch] + [p for p in tried if p.is_file()]


def diff_subject(text: str, stem: str) -> str:
    """The subject of a plain diff: the first line before the diff itself, if any."""
    for line in text.splitlines():
        if line.startswith(("diff ", "--- ", "Index: ")):
            break
        if line.strip():
            return re.sub(r"^Subject:\s*(\[[^\]]*\]\s*)?", "", line.strip()) or f"replay: {stem}"
    return f"replay: {stem}"


def patch_target(text: str) -> str | None:
    """Pure: the ``Target:`` line of a patch's header (before its first diff), or None."""
    for line in text.splitlines():
        if line.startswith(("diff ", "--- ", "Index: ")):
            break
        m = re.match(r"^\s*Target:\s*(\S.*?)\s*$", line)
        if m:
            return m.group(1)
    return None


def target_at(folder: Path, index: int) -> str | None:
    """The target that patch ``index`` of ``folder`` names (None: none named, or no such patch)."""
    files = patch_files(folder)
    if not 0 <= index < len(files) or files[index].suffix == ".json":
        return None
    return patch_target(files[index].read_text(encoding="utf-8", errors="replace"))


# A patch whose agent died before proposing is handed out again, up to this many deaths in all:
# an agent killed by its environment must not use a patch up, one killed by the patch itself
# must not stall the loop on it (kern.yaml's loop.stop_after_agent_crashes halts a streak).
DEATHS_PER_PATCH = 2


@dataclass(frozen=True)
class ReplayUse:
    """One replay attempt of the ledger, in attempt-number order: the patch file it was handed
    (None: a row from before rows recorded it, which was handed the patch at its place among
    the replay attempts) and whether its agent ended without a proposal (the patch unread)."""
    patch: str | None
    unread: bool


def next_patches(names: list[str], uses: list[ReplayUse], count: int,
                 order: list[str] = ()) -> list[int]:
    """Pure: the places in ``names`` (the folder's patch files, sorted) of the next ``count``
    patches to hand out: those no attempt holds (an attempt holds its patch unless its agent
    died unread) and fewer than DEATHS_PER_PATCH agents died on, those ``order`` lists first
    (in its order), then the rest lowest place first. Past the last patch: ``len(names)`` (the
    agent declines, nothing left)."""
    held, died = Counter(), Counter()
    for place, use in enumerate(uses):
        name = use.patch if use.patch is not None else (names[place] if place < len(names) else None)
        if name is not None:
            (died if use.unread else held)[name] += 1
    rank = {name: i for i, name in reversed(list(enumerate(order)))}
    free = sorted((i for i, name in enumerate(names) if not held[name] and died[name] < DEATHS_PER_PATCH),
                  key=lambda i: (rank.get(names[i], len(rank)), i))
    return (free + [len(names)] * count)[:count]


def queue_order(folder: Path) -> list[str]:
    """The patch file names ``folder/ORDER_FILE`` ranks first (none when there is no such file).
    A listed name with no patch file is the orchestrator's mistake: it says so."""
    path = Path(folder) / ORDER_FILE
    if not path.is_file():
        return []
    listed = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    listed = [name for name in listed if name]
    known = {p.name for p in patch_files(folder)}
    missing = [name for name in listed if name not in known]
    if missing:
        raise AgentConfigError(f"replay: {path} lists {', '.join(missing)}, which are not patch files "
                               f"in {folder}; expected names such as {sorted(known)[:2]} (operator: fix "
                               f"or remove the line)")
    return listed


def json_proposal(data, name: str) -> Proposal:
    if isinstance(data, dict) and isinstance(data.get("declined"), str):
        est = data.get("estimate_ms")
        if est is not None and (isinstance(est, bool) or not isinstance(est, (int, float))):
            return Proposal(kind="failed", reason=f"replay {name}: expected estimate_ms to be a "
                                                  f"number, found {est!r}")
        return Proposal(kind="declined", message=data["declined"],
                        estimate_ms=None if est is None else float(est))
    if isinstance(data, dict) and isinstance(data.get("failed"), str):
        return Proposal(kind="failed", reason=data["failed"])
    found = sorted(data) if isinstance(data, dict) else type(data).__name__
    return Proposal(kind="failed", reason=f"replay {name}: expected {{\"declined\": idea, "
                                          f"\"estimate_ms\": number}} or {{\"failed\": why}}, "
                                          f"found {found}")


class ReplayAgent:
    name = "replay"

    def __init__(self, settings: Agent, *, index: int | None = None, root=None):
        folder = Path(settings.replay_dir)
        if not str(folder).strip():
            raise AgentConfigError("agent.replay_dir: expected a folder of patches, found ''")
        if not folder.is_absolute():
            folder = Path(root or ".").absolute() / folder  # relative to the repository root
        if not folder.is_dir():
            raise AgentConfigError(f"agent.replay_dir: expected a folder, found nothing at {folder}")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise AgentConfigError(f"replay: expected index= the place of the patch to apply among "
                                   f"the folder's patches (the orchestrator passes it), found {index!r}")
        self.folder, self.index = folder, index

    def propose(self, brief: Brief, worktree) -> Proposal:
        files = patch_files(self.folder)
        if self.index >= len(files):
            return Proposal(kind="declined", estimate_ms=0,
                            message=f"nothing left to replay ({len(files)} patches in "
                                    f"{self.folder}, each handed out; asked for place {self.index + 1})")
        patch = files[self.index]
        if patch.suffix == ".json":
            try:
                return json_proposal(json.loads(patch.read_text(encoding="utf-8", errors="replace")),
                                     patch.name)
            except ValueError as e:
                return Proposal(kind="failed", reason=f"replay {patch.name}: not JSON ({e})")
        errors = []
        for tried in variants(patch):
            try:
                return self._apply(tried, worktree)
            except GitError as e:
                errors.append(f"{tried.relative_to(self.folder)}: {e}")
        return Proposal(kind="failed", reason=f"replay {patch.name} does not apply: "
                                              + "; ".join(errors))

    def _apply(self, patch: Path, worktree) -> Proposal:
        """One commit of ``patch`` in ``worktree``, or :class:`GitError` with the worktree as
        it was (a failed ``git am`` is aborted)."""
        text = patch.read_text(encoding="utf-8", errors="replace")
        if text.startswith("From "):
            try:
                git(worktree, "am", "-q", str(patch), backend=self.name)
            except GitError:
                try:
                    git(worktree, "am", "--abort", backend=self.name)
                except GitError:
                    pass
                raise
            return Proposal(kind="commit", message=subject(worktree))
        message = diff_subject(text, patch.stem)
        git(worktree, "apply", "--index", str(patch), backend=self.name)
        git(worktree, "commit", "--no-verify", "-q", "-m", message, backend=self.name)
        return Proposal(kind="commit", message=message)
