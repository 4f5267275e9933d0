"""The offline backend: one change to the tree's declared tunables per attempt, no network.

Each op family declares ``TUNABLES = {"name": (value, (choices...))}`` as a literal dict in
``<tree>/<family>/tunables.py``. The tuner reads those files with :mod:`ast` (the candidate's
code is never imported: importing runs it), picks one tunable and one other declared choice
(:func:`choose_change`, pure), rewrites only that value's literal in the source and commits.

The ``tried`` lines it reads (``Brief.tried``, one line per earlier attempt on the target)::

    tunable NAME=VALUE: RESULT
    e.g.  tunable moe.experts.block_m=32: abandoned: slower (+0.21)
          tunable kda.core.mode='fused': merged

NAME is the tunable's full name; VALUE is the Python literal of the value tried (``32``,
``0.5``, ``'fused'``; a bare word such as ``fused`` reads as that string) without whitespace,
ending at the first ``:`` followed by a space or the end of the line; RESULT is free text.
Anything may precede ``tunable`` (a bullet, ``#12``), and lines of other shapes (other
backends' attempts) are ignored. Every result counts as tried: merged, abandoned, crashed or
still running alike, so two attempts briefed in the same tick should list each other as
``running`` to stay apart. :func:`format_tried` renders a line; the commit message
``tune: NAME OLD -> NEW`` carries NAME and NEW in the same literal form.

Order (deterministic given the seed): tunables of the target op first (names starting with
``TARGET.``), then the rest of its family (``FAMILY.``, the target's first component); never
other families. Within that, nearer choices of the current value first (index distance in the
declared choices); ties are broken by a seeded shuffle of names and of directions. The agent
seeds with ``seed + brief.attempt`` so attempts briefed together start from different tunables.
An empty target means every tunable of the tree.

``agent.tunables`` (kern.yaml, optional): glob patterns (``fnmatch``) in the order to try them,
default ``["*"]``. Within a tier, tunables matching an earlier pattern come first; a tunable
matching none is never changed. The demo (``harness/demo.py``) names its deliberate setting
first this way; a person can point the tuner at the tunables a platform reads (the interpreter
ignores ``num_warps`` and ``num_stages``) or keep it off others.
"""
from __future__ import annotations

import ast
import fnmatch
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..settings import Agent
from .base import Brief, Proposal
from .common import AgentConfigError, GitError, git
from .rules import allowed_edit


class TunablesError(ValueError):
    """A tunables file is not the literal dict the tuner (and the kernels) expect."""


@dataclass(frozen=True)
class Tunable:
    name: str
    value: object
    choices: tuple
    path: str  # relative to the worktree root
    span: tuple  # (lineno, col_offset, end_lineno, end_col_offset) of the value literal (ast)


@dataclass(frozen=True)
class Change:
    name: str
    old: object
    new: object

    @property
    def message(self) -> str:
        return f"tune: {self.name} {self.old!r} -> {self.new!r}"


# ---- the pure core ------------------------------------------------------------------------

TRIED_RE = re.compile(r"(?:^|\s)tunable\s+(?P<name>[^\s=]+)=(?P<value>\S+?):(?:\s|$)")


def format_tried(name: str, value, result: str) -> str:
    """One ``tried`` line in the format :func:`parse_tried` reads."""
    return f"tunable {name}={value!r}: {result}"


def _key(value) -> str:
    # repr keeps types apart (1 vs 1.0 vs True vs '1'), which == would not
    return repr(value)


def _value_key(text: str) -> str:
    try:
        return _key(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _key(text)  # a bare word: the string itself


def parse_tried(lines: Iterable) -> set[tuple[str, str]]:
    """The (name, value key) pairs the ``tried`` lines show; other lines are ignored."""
    done = set()
    for line in lines or ():
        for m in TRIED_RE.finditer(str(line)):
            done.add((m["name"], _value_key(m["value"])))
    return done


def _tier(name: str, target: str) -> int | None:
    if not target:
        return 0
    if name == target or name.startswith(target + "."):
        return 0
    family = target.split(".")[0]
    if name.startswith(family + "."):
        return 1
    return None


def preference(name: str, patterns: Sequence[str]) -> int | None:
    """The index of the first pattern ``name`` matches, or None when it matches none."""
    for i, pat in enumerate(patterns):
        if fnmatch.fnmatchcase(name, pat):
            return i
    return None


def check_patterns(patterns) -> tuple[str, ...]:
    """``agent.tunables`` as a tuple of glob patterns, or an error naming what was found."""
    if patterns is None:
        return ("*",)
    if isinstance(patterns, str) or not isinstance(patterns, (list, tuple)) or not patterns \
            or not all(isinstance(p, str) and p for p in patterns):
        raise AgentConfigError(f"agent.tunables: expected a non-empty list of glob patterns such "
                               f"as [\"moe.experts.*\", \"*\"] (edit kern.yaml), found {patterns!r}")
    return tuple(patterns)


def candidates(tunables: Mapping[str, tuple], tried: Iterable, target: str, seed: int,
               prefer: Sequence[str] = ("*",)) -> list[Change]:
    """Every untried change for ``target`` in the order the tuner proposes them (``prefer``:
    ``agent.tunables``, see the module docstring)."""
    done = parse_tried(tried)
    target = (target or "").strip()
    rng = random.Random(seed)
    ranked = []
    # draw the tie-breakers for every tunable and choice before filtering, so one more tried
    # line removes one candidate and leaves the order of the others unchanged
    for name in sorted(tunables):
        value, choices = tunables[name]
        name_tie = rng.random()
        keys = [_key(c) for c in choices]
        ties = [rng.random() for _ in choices]
        tier = _tier(name, target)
        rank = preference(name, prefer)
        if tier is None or rank is None:
            continue
        here = keys.index(_key(value)) if _key(value) in keys else None
        seen = set()
        for i, (choice, k) in enumerate(zip(choices, keys)):
            if k == _key(value) or k in seen or (name, k) in done:
                seen.add(k)
                continue
            seen.add(k)
            dist = abs(i - here) if here is not None else i + 1
            ranked.append(((tier, rank, dist, name_tie, ties[i]), Change(name, value, choice)))
    ranked.sort(key=lambda r: r[0])
    return [c for _, c in ranked]


def choose_change(tunables: Mapping[str, tuple], tried: Iterable, target: str,
                  seed: int, prefer: Sequence[str] = ("*",)) -> Change | None:
    """The one change to propose, or None when nothing untried is left for ``target``.

    ``tunables`` maps name -> (current value, declared choices), as the TUNABLES dicts do;
    ``tried`` holds the brief's lines (format in the module docstring); ``prefer`` the
    ``agent.tunables`` patterns.
    """
    ranked = candidates(tunables, tried, target, seed, prefer)
    return ranked[0] if ranked else None


# ---- reading and rewriting the literal dicts ----------------------------------------------

def parse_tunables(source: str, path: str) -> dict[str, Tunable]:
    """The TUNABLES entries of one file, with where each value's literal sits."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise TunablesError(f"{path}:{e.lineno}: not valid Python ({e.msg})") from None
    node = None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TUNABLES"
                                                for t in stmt.targets):
            node = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                and stmt.target.id == "TUNABLES":
            node = stmt.value
    if node is None:
        raise TunablesError(f"{path}: expected a module-level `TUNABLES = {{...}}`, found none")
    if not isinstance(node, ast.Dict):
        raise TunablesError(f"{path}:{node.lineno}: expected TUNABLES to be a literal dict, "
                            f"found {type(node).__name__}")
    out: dict[str, Tunable] = {}
    for k, v in zip(node.keys, node.values):
        where = f"{path}:{(k or v).lineno}"
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            raise TunablesError(f"{where}: expected a string key, found "
                                f"{ast.unparse(k) if k else '**spread'}")
        if not (isinstance(v, (ast.Tuple, ast.List)) and len(v.elts) == 2):
            raise TunablesError(f"{where}: expected {k.value!r}: (value, (choices...)), "
                                f"found {ast.unparse(v)}")
        try:
            value = ast.literal_eval(v.elts[0])
            choices = ast.literal_eval(v.elts[1])
        except ValueError:
            raise TunablesError(f"{where}: expected literals in {k.value!r}: (value, (choices...)), "
                                f"found {ast.unparse(v)}") from None
        if not isinstance(choices, (tuple, list)) or not choices:
            raise TunablesError(f"{where}: expected a non-empty tuple of choices for {k.value!r}, "
                                f"found {choices!r}")
        if k.value in out:
            raise TunablesError(f"{where}: tunable {k.value!r} is declared twice")
        e = v.elts[0]
        out[k.value] = Tunable(k.value, value, tuple(choices), path,
                               (e.lineno, e.col_offset, e.end_lineno, e.end_col_offset))
    return out


def load_tree(worktree, tree: str = "kernels/k31") -> dict[str, Tunable]:
    """Every tunable of ``<worktree>/<tree>/*/tunables.py``; a name declared in two files is
    an error (the tuner could not know which one the kernels read)."""
    root = Path(worktree)
    merged: dict[str, Tunable] = {}
    for f in sorted((root / tree).glob("*/tunables.py")):
        rel = f.relative_to(root).as_posix()
        for name, t in parse_tunables(f.read_text(encoding="utf-8"), rel).items():
            if name in merged:
                raise TunablesError(f"tunable {name!r} is declared in both {merged[name].path} "
                                    f"and {rel}; expected one declaration")
            merged[name] = t
    return merged


def _literal(new, old_text: str) -> str:
    text = repr(new)
    if isinstance(new, str) and old_text.lstrip().startswith('"'):
        text = json.dumps(new)  # keep the file's double quotes
    if _key(ast.literal_eval(text)) != _key(new):
        raise TunablesError(f"cannot write {new!r} as a Python literal")
    return text


def apply_change(source: str, tunable: Tunable, new) -> str:
    """``source`` with only ``tunable``'s value literal replaced by ``new``; everything else
    (formatting, comments, the choices) byte for byte as it was."""
    raw = source.encode("utf-8")  # ast column offsets count UTF-8 bytes
    starts = [0]
    for line in raw.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    l0, c0, l1, c1 = tunable.span
    a, b = starts[l0 - 1] + c0, starts[l1 - 1] + c1
    old_text = raw[a:b].decode("utf-8")
    out = (raw[:a] + _literal(new, old_text).encode("utf-8") + raw[b:]).decode("utf-8")
    # the rewrite must change exactly that one value: checked, not assumed
    before = parse_tunables(source, tunable.path)
    after = parse_tunables(out, tunable.path)
    expect = {n: (t.value, t.choices) for n, t in before.items()}
    expect[tunable.name] = (new, tunable.choices)
    got = {n: (t.value, t.choices) for n, t in after.items()}
    if _key(got) != _key(expect):
        raise TunablesError(f"{tunable.path}: rewriting {tunable.name} changed more than its "
                            f"value; the file was left as it was")
    return out


# ---- the agent ----------------------------------------------------------------------------

class TunerAgent:
    name = "tuner"

    def __init__(self, settings: Agent, *, tree: str = "kernels/k31", seed: int = 0):
        self.settings = settings
        if not isinstance(tree, str) or not tree:
            raise AgentConfigError(f"tuner: expected tree= the kernel tree (kern.yaml "
                                   f"target.tree), found {tree!r}")
        self.tree = tree
        self.seed = int(seed)
        self.prefer = check_patterns(settings.tunables)

    def propose(self, brief: Brief, worktree) -> Proposal:
        worktree = Path(worktree)
        try:
            tunables = load_tree(worktree, self.tree)
        except TunablesError as e:
            return Proposal(kind="failed", reason=f"tuner cannot read the tunables: {e}")
        table = {n: (t.value, t.choices) for n, t in tunables.items()}
        change = choose_change(table, brief.tried, brief.target, self.seed + brief.attempt,
                               self.prefer)
        if change is None:
            only = "" if self.prefer == ("*",) else f" among agent.tunables {list(self.prefer)}"
            return Proposal(kind="declined", message=f"nothing left to tune for {brief.target}{only}",
                            estimate_ms=0)
        t = tunables[change.name]
        ok, why = allowed_edit(t.path, brief.editable, brief.protected)
        if not ok:
            return Proposal(kind="failed", reason=f"tuner may not edit {t.path}: {why} "
                                                  f"(fix editable/protected in kern.yaml)")
        path = worktree / t.path
        try:
            path.write_text(apply_change(path.read_text(encoding="utf-8"), t, change.new),
                            encoding="utf-8")
            git(worktree, "commit", "--no-verify", "-q", "-m", change.message, "--", t.path,
                backend=self.name)
        except (TunablesError, GitError) as e:
            return Proposal(kind="failed", reason=f"tuner could not apply {change.message!r}: {e}")
        return Proposal(kind="commit", message=change.message)
