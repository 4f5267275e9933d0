"""The replay backend: applies recorded patches from ``agent.replay_dir``, for tests and demos.

Which patch: the orchestrator passes ``index`` (constructor context, ``make_agent(...,
index=N)`` or ``"context": {"index": N}`` in run.py's settings file) = how many replay attempts
this run made before this one, counting crashed and re-queued ones once (an agent that died
before proposing used its patch up too: the loop stops after a few of those, kern.yaml's
``loop.stop_after_agent_crashes``). Patch ``index`` of
the folder's patch files sorted by file name is applied; past the end the backend declines
with "nothing left to replay". The index is state the orchestrator owns (its ledger), not this
process: a re-queued attempt gets the same index and so the same patch.

Patch files (other files, and names starting with ``.``, are ignored):

- ``*.patch`` / ``*.diff`` / ``*.mbox`` / ``*.eml`` starting with ``From `` (``git format-patch``
  output): ``git am``; every message in it becomes a commit, so a two-message mbox makes the
  "committed twice" fault for tests. Author and subject come from the patch.
- other ``*.patch`` / ``*.diff``: ``git apply --index`` and one commit. Its subject is the
  first line of the text before the diff (``Subject: [PATCH] `` stripped), else
  ``replay: <file stem>``.
- ``*.json``: ``{"declined": "the idea", "estimate_ms": -0.4}`` gives a declined proposal;
  ``{"failed": "why"}`` a failed one (fault injection).

A patch names the target it was written for with a ``Target: <profile row>`` line before its
diff (a trailer of the commit message): the orchestrator then briefs that target for the
attempt that replays it (:func:`target_at`), and the ledger row records it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..settings import Agent
from .base import Brief, Proposal
from .common import AgentConfigError, GitError, git, subject

PATCH_SUFFIXES = (".patch", ".diff", ".mbox", ".eml", ".json")


def patch_files(folder: Path) -> list[Path]:
    return sorted((p for p in Path(folder).iterdir()
                   if p.is_file() and not p.name.startswith(".") and p.suffix in PATCH_SUFFIXES),
                  key=lambda p: p.name)


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
            raise AgentConfigError(f"replay: expected index= the number of earlier replay attempts "
                                   f"in this run (the orchestrator passes it), found {index!r}")
        self.folder, self.index = folder, index

    def propose(self, brief: Brief, worktree) -> Proposal:
        files = patch_files(self.folder)
        if self.index >= len(files):
            return Proposal(kind="declined", estimate_ms=0,
                            message=f"nothing left to replay ({len(files)} patches in "
                                    f"{self.folder}, this is replay attempt {self.index + 1})")
        patch = files[self.index]
        text = patch.read_text(encoding="utf-8", errors="replace")
        if patch.suffix == ".json":
            try:
                return json_proposal(json.loads(text), patch.name)
            except ValueError as e:
                return Proposal(kind="failed", reason=f"replay {patch.name}: not JSON ({e})")
        try:
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
        except GitError as e:
            return Proposal(kind="failed", reason=f"replay {patch.name} does not apply: {e}")
