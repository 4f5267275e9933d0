"""Which paths an agent may write, and resolving a path an agent names inside its worktree.

:func:`allowed_edit` is pure: a repository-relative POSIX path and the brief's globs in, a
decision and a sentence out. Globs match by the gates' own rule (``gates.rules.scope.match``,
where ``*`` also crosses ``/``), so a backend refuses at least what the scope gate would
reject later; the scope gate stays the authority (a backend's word is never
trusted), this only saves an attempt from being thrown away at the end.

:func:`resolve_in_tree` touches the filesystem only to follow symlinks: an agent may name a
path through a symlink or with ``..``, and what counts is where the bytes would land.
"""
from __future__ import annotations

import os
import posixpath
from pathlib import Path

from gates.rules.scope import match


class PathRefused(ValueError):
    """An agent named a path it may not use; the message is returned to the agent."""


def _norm(path: str) -> str:
    p = posixpath.normpath(path.replace(os.sep, "/"))
    return "" if p == "." else p


def allowed_edit(path: str, editable, protected) -> tuple[bool, str]:
    """May an agent write ``path`` (relative to the worktree root)? Protected wins over editable.

    Returns ``(allowed, why)``; ``why`` names the rule that decided, for the agent to read.
    """
    p = _norm(path)
    if not p or p.startswith("/") or p == ".." or p.startswith("../"):
        return False, f"{path!r} is outside the worktree (paths are relative to its root)"
    if ".git" in p.split("/"):
        return False, f"{p} is inside .git (git's own data; commits are made by finish)"
    g = match(p, protected)
    if g is not None:
        return False, f"{p} is protected (matches protected glob {g!r} of kern.yaml)"
    g = match(p, editable)
    if g is not None:
        return True, f"{p} matches editable glob {g!r}"
    globs = ", ".join(repr(g) for g in editable) or "none given"
    return False, f"{p} is outside the editable globs ({globs})"


def resolve_in_tree(worktree, path: str) -> tuple[Path, list[str]]:
    """The real path ``path`` names inside ``worktree``, and every relative name it goes by.

    Relative paths are taken against the worktree root; absolute ones must lie inside it.
    Returns ``(real, names)``: ``names`` holds the path as written (normalised) and as
    resolved through symlinks; an edit must be allowed under each of them. Raises
    :class:`PathRefused` when either form leaves the worktree.
    """
    if not isinstance(path, str) or not path.strip():
        raise PathRefused(f"expected a non-empty path relative to the worktree, found {path!r}")
    given = Path(worktree).absolute()
    root = given.resolve()
    raw = Path(path)
    candidate = raw if raw.is_absolute() else given / raw
    lexical = Path(os.path.normpath(candidate))
    real = candidate.resolve()  # follows symlinks, including one that points outside
    try:
        real_name = real.relative_to(root).as_posix()
    except ValueError:
        raise PathRefused(f"{path!r} resolves to {real}, outside the worktree {root}") from None
    written = None
    for base in (given, root):  # the worktree may itself be named through a symlink
        try:
            written = lexical.relative_to(base).as_posix()
            break
        except ValueError:
            continue
    if written is None:
        raise PathRefused(f"{path!r} leaves the worktree {given} as written")
    return real, list(dict.fromkeys((written, real_name)))


def edit_check(worktree, path: str, editable, protected) -> tuple[Path | None, str | None]:
    """Resolve ``path`` for writing: ``(real path, None)`` or ``(None, why it is refused)``."""
    try:
        real, names = resolve_in_tree(worktree, path)
    except PathRefused as e:
        return None, str(e)
    for name in names:
        ok, why = allowed_edit(name, editable, protected)
        if not ok:
            return None, why
    if real.is_dir():
        return None, f"{path!r} is a directory, expected a file"
    return real, None
