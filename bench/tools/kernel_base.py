"""The base of a whole-gain bench: an old main's kernel tree on today's protected model.

    python bench/tools/kernel_base.py REV [--onto HEAD] [--branch NAME]

``kern bench main --vs REV`` runs REV as a side under today's gates, and an old main carries
its own protected files (references, workload, contracts), which today's sides cannot run:
f52bebd's workload has no ``timed_inputs``, and 8339e6e, tried as a side, crashed its scorer
on that (bench/preflight.sh, 2026-12-05). This builds the commit that stands for REV instead:
ONTO's tree with every file kern.yaml makes editable and not protected taken from REV (and
such files that REV lacks removed). kern.yaml's globs are ONTO's, matched by the gates' own
rule (``gates.rules.scope.match``). The work tree and the index are not touched.

The commit is deterministic: author and committer ``kern-loop <kern@loop>`` at REV's
committer time, so the same ONTO and REV give the same SHA on every machine (the device
builds it in its clone; the result JSON names it). Prints that SHA; ``--branch`` also points
NAME at it. Exit 1, with the reason, when REV or ONTO is not a commit of this repository.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gates.rules.scope import matches  # noqa: E402
from harness.gitcmd import GitError, git, git_or_none  # noqa: E402

AUTHOR = ("kern-loop", "kern@loop")


def kernel_changes(old: dict[str, tuple[str, str]], new: dict[str, tuple[str, str]],
                   editable: list[str], protected: list[str]) -> list[tuple[str, tuple[str, str] | None]]:
    """Pure: what makes ``new``'s tree (path -> (mode, blob)) carry ``old``'s kernel files:
    each editable, unprotected path whose entry differs, with ``old``'s entry (None: remove
    it, ``old`` lacks it), sorted by path."""
    out = []
    for path in sorted(set(old) | set(new)):
        if not matches(path, editable) or matches(path, protected):
            continue
        if old.get(path) != new.get(path):
            out.append((path, old.get(path)))
    return out


def _tree(repo: Path, rev: str) -> dict[str, tuple[str, str]]:
    entries = {}
    for line in git(repo, "ls-tree", "-r", "-z", rev).split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            mode, kind, sha = meta.split()
            if kind == "blob":
                entries[path] = (mode, sha)
    return entries


def build(rev: str, onto: str, repo: Path = ROOT) -> str:
    """The commit standing for ``rev`` on ``onto`` in ``repo`` (module docstring); its SHA."""
    import yaml

    for r in (rev, onto):
        if git_or_none(repo, "cat-file", "-e", f"{r}^{{commit}}") is None:
            raise SystemExit(f"kernel_base: {r!r} is not a commit of {repo} (the user names one "
                             "main holds, such as f52bebd)")
    cfg = yaml.safe_load(git(repo, "show", f"{onto}:kern.yaml"))
    changes = kernel_changes(_tree(repo, rev), _tree(repo, onto), list(cfg["editable"]),
                             list(cfg["protected"]))
    when = git(repo, "log", "-1", "--format=%cI", rev).strip()
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(d) / "index"),
               "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1], "GIT_AUTHOR_DATE": when,
               "GIT_COMMITTER_NAME": AUTHOR[0], "GIT_COMMITTER_EMAIL": AUTHOR[1],
               "GIT_COMMITTER_DATE": when}
        git(repo, "read-tree", onto, env=env)
        lines = "".join(f"0 {'0' * 40}\t{p}\0" if e is None else f"{e[0]} {e[1]}\t{p}\0"
                        for p, e in changes)
        if lines:
            git(repo, "update-index", "-z", "--index-info", env=env, input_text=lines)
        tree = git(repo, "write-tree", env=env).strip()
        short_rev, short_onto = (git(repo, "rev-parse", "--short=7", r).strip() for r in (rev, onto))
        message = (f"bench: {short_rev}'s kernel tree on {short_onto}'s protected model\n\n"
                   f"{len(changes)} editable file(s) as {short_rev} has them "
                   f"(bench/tools/kernel_base.py):\n" + "".join(f"  {p}\n" for p, _ in changes))
        return git(repo, "commit-tree", tree, "-p", onto, "-m", message, env=env).strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python bench/tools/kernel_base.py f52bebd --branch kernels-of-f52bebd")
    ap.add_argument("rev", help="the old main whose kernel tree the commit carries")
    ap.add_argument("--onto", default="HEAD", help="whose protected model (default HEAD)")
    ap.add_argument("--branch", help="also point this branch at the commit")
    a = ap.parse_args(argv)
    try:
        sha = build(a.rev, a.onto)
    except GitError as e:
        raise SystemExit(f"kernel_base: {e}") from None
    if a.branch:
        git(ROOT, "update-ref", f"refs/heads/{a.branch}", sha)
    print(sha)
    return 0


if __name__ == "__main__":
    sys.exit(main())
