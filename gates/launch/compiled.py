"""Main's compiled kernels: the Triton cache of the commit a judgment runs against, made from
that commit's source alone and only ever copied into sides.

Before a judgment's first side starts, :func:`prepare` looks for the base commit's compiled
cache, ``runs/compiled/<key>/``, and when there is none starts one ``compile`` side
(``gates.side.driver compile``: the model built and one eager step per batch size the gates'
sides run, through the tap's own hooks so its check kernels compile too, nothing judged, no
hidden input; sandboxed like any side, its Triton cache empty)
and installs what it compiled there: copied out of the side's folder as new files, read-only.
The key is the commit's ``kernels/`` tree (a side sees nothing else of its tree), the compile
side's spec, the device kind and Triton's version: the same source compiles to the same cache,
whichever worktree or repository holds it. Every side of the judgment, main's and the
candidate's, then starts with its own copy of it (``Placement.seeded``, gates/requests.py; copied by
``gates/launch/sandbox.py``'s :func:`fresh_cache`), so
unchanged kernels are not compiled again, and whatever a side writes into its copy is removed
with it: no side reads another's writes, and main's compiled cache is written by its compile
side alone (docs/sandbox.md: "Triton's cache").

Why copies and not a layered cache (Triton's ``TRITON_CACHE_MANAGER`` / ``knobs.cache.
manager_class``, in triton 3.6 and 3.9 alike): a manager class runs in the side's process, where
the candidate's code can replace it, so main's cache would still have to be unwritable there,
and under ``sandbox: off`` nothing is; Triton's FileCacheManager also creates its key folder
on every lookup, so a read-only layer needs a manager of ours whose details differ between
the two Triton versions. A copy is the same under every mechanism and version and costs
little: the small config's 24 kernels compiled for sm_90 are 7.3 MB in 192 files, copied in
8-25 ms on the CPU machine (2026-12-04).

A compile side starts on a copy of the compiled cache of main's nearest ancestor made the same
way (:func:`seed_for`: same spec, device kind and Triton), so after a merge only the kernels
whose source changed compile again (77 s from empty on the H200 at the full config, 12-05):
Triton keys each entry by the kernel's source, its callees' and its constants, the same key a
candidate's side relies on when it starts on main's cache. That cache was itself made by a
compile side from that ancestor's source; no judging side's file enters the chain. Every
:data:`SEED_CHAIN`-th main compiles from empty, so entries of kernels long gone do not ride on.

On the CPU the interpreter compiles nothing (no file appears in Triton's cache during a
small-config step), so the compile side there imports the tree and builds no model: its
cache holds only what the tree's import wrote.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import checkout, ranks, sandbox
from ..protocol import tap_rows
from ..requests import Placement
from ..rules import confinement
from ..settings import MachineProfile, Target
from ..spec import side_spec

# what the compile side does (gates/side/driver.py's compile_mode): a change that would
# compile other kernels raises it, so every main compiles again
COMPILE_PROTOCOL = 2  # 2: the tap's check kernels too (tap.compile_checks)
MADE, CACHED, FAILED, NONE = "made", "cached", "failed", "none"
# compiles seeded one from another before one starts empty again: bounds what the chain
# carries of kernels no main has any more (a few files a changed kernel) and how long any
# entry lives
SEED_CHAIN = 8
# installed caches of main's ancestors kept beside a new main's (the nearest; older ones are
# removed when it is installed): a judgment still running against a recent main finds its
# cache; one against an older main compiles it again. Bounds runs/compiled over a long loop
# (36.6 MB a main at the full config on the H200, 2026-12-06)
KEEP_ANCESTORS = 8


@dataclass(frozen=True)
class CompiledCache:
    """Main's compiled kernels as a judgment found them: ``kind`` :data:`MADE` (its compile
    side ran now, ``wall_s`` its seconds), :data:`CACHED` (made before: 0 s), :data:`FAILED`
    (the compile side ended badly: no seed, each side compiles for itself; ``detail`` says
    how, ``log`` where) or :data:`NONE` (a revision without a content key: the work tree)."""

    kind: str
    key: str | None = None
    path: str | None = None  # the cache every side's copy is made from; None: none
    wall_s: float = 0.0
    files: int = 0
    bytes: int = 0
    log: str | None = None
    detail: str = ""
    seed: str | None = None  # the key of the ancestor's cache its compile side started on
    generation: int = 0  # compiles since one started empty (0: this one did)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MadeCache:
    """An installed compiled cache as its record in ``runs/compiled/<key>.json`` names it."""

    key: str
    commit: str
    family: str  # :func:`family_key`: what must match for its files to serve another tree
    generation: int


def family_key(spec: dict, cuda: bool, triton_version: str) -> str:
    """Pure: :func:`cache_key` without the kernels tree: caches of one family differ only in
    the source they were compiled from."""
    return cache_key("", spec, cuda, triton_version)


def seed_for(made: list[MadeCache], family: str, distance: dict[str, int]) -> MadeCache | None:
    """Pure: the cache a new main's compile side starts on: of ``made``, those of ``family``
    whose commit is an ancestor (``distance``: commit -> commits between it and the new main,
    ancestors only) and whose chain may grow (generation below ``SEED_CHAIN - 1``); the nearest,
    ties by key. None: it starts empty."""
    fit = [m for m in made if m.family == family and m.commit in distance
           and m.generation + 1 < SEED_CHAIN]
    return min(fit, key=lambda m: (distance[m.commit], m.key), default=None)


def stale(made: list[MadeCache], distance: dict[str, int], keep: int = KEEP_ANCESTORS) -> list[str]:
    """Pure: the keys of ``made`` to remove once a new main's cache is installed: caches of
    its ancestors (``distance``) past the ``keep`` nearest (by distance, then key). Caches of
    commits that are not its ancestors (``kern bench REV`` of another branch) are kept."""
    ancestors = sorted((m for m in made if m.commit in distance), key=lambda m: (distance[m.commit], m.key))
    return sorted(m.key for m in ancestors[keep:])


def compile_spec(target: Target, machine: MachineProfile, layout: str | None = None,
                 world: int = 1) -> dict:
    """Pure: the compile side's spec: the tap's build (its context, every visible batch size)
    and, where the scorer's differs, the scorer's (the profile's context, the buckets). The
    hidden batch sizes a judgment adds are drawn later: their kernels compile in the sides."""
    tap = tap_rows(machine.test_rows, machine.buckets)
    more = [] if (machine.context == machine.test_context and set(machine.buckets) <= set(tap)) \
        else [[machine.context, list(machine.buckets)]]
    return side_spec(target, machine, context=machine.test_context, steps=1, rows=tap,
                     layout=layout or machine.layout, world=world, more=more)


def cache_key(kernels_tree: str, spec: dict, cuda: bool, triton_version: str) -> str:
    """Pure: the name of a compiled cache: everything that decides what it holds."""
    return hashlib.sha256(json.dumps(
        {"kernels": kernels_tree, "spec": spec, "cuda": cuda, "triton": triton_version,
         "protocol": COMPILE_PROTOCOL}, sort_keys=True).encode()).hexdigest()[:16]


def prepare(repo: Path, rev: str, runs: Path, target: Target, machine: MachineProfile, cuda: bool,
            timeout_s: float, place: Placement, progress=None, layout: str | None = None,
            world: int = 1) -> CompiledCache:
    """``rev``'s compiled cache, compiled now if there is none (one compile side at a time per
    key: concurrent judgments against one main wait for the first). Its compile side starts
    at ``place`` (the caller's sandbox and judging slot: a side like any other), on an empty
    Triton cache."""
    sha = checkout.resolve(repo, rev)
    tree = _kernels_tree(repo, sha)
    if tree is None:
        return CompiledCache(NONE, detail=f"{rev}: no committed kernels/ tree to key a compiled cache by")
    spec = compile_spec(target, machine, layout, world)
    key = cache_key(tree, spec, cuda, _triton_version())
    root = runs / "compiled"
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)  # the harness's alone (no side's sandbox shows it)
    dest, meta = root / key, root / f"{key}.json"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.is_dir() and meta.exists():
            m = json.loads(meta.read_text())
            return CompiledCache(CACHED, key, str(dest), 0.0, m["files"], m["bytes"], m.get("log"),
                                 seed=m.get("seed"), generation=m.get("generation", 0))
        family = family_key(spec, cuda, _triton_version())
        made = _made(root)
        distance = _ancestors(repo, sha, {m.commit for m in made})  # the seed's and the pruning's
        return _compile(repo, sha, runs, tree, spec, key, family, made, distance, timeout_s, place,
                        progress)


def existing(repo: Path, rev: str, runs: Path, target: Target, machine: MachineProfile, cuda: bool,
             layout: str | None = None, world: int = 1) -> str | None:
    """``rev``'s compiled cache where one was made before, else None (nothing is compiled:
    ``kern step`` and ``kern profile`` by hand start their side on it when it is there)."""
    sha = checkout.resolve(repo, rev)
    tree = _kernels_tree(repo, sha)
    if tree is None:
        return None
    key = cache_key(tree, compile_spec(target, machine, layout, world), cuda, _triton_version())
    dest = runs / "compiled" / key
    return str(dest) if dest.is_dir() and (runs / "compiled" / f"{key}.json").exists() else None


def _compile(repo, sha, runs, tree, spec, key, family, made: list[MadeCache], distance: dict[str, int],
             timeout_s, place: Placement, progress) -> CompiledCache:
    seed = seed_for(made, family, distance)
    root = runs / "compiled"
    work = root / f"{key}-side"  # the compile side's run folder: spec, log, result, its cache
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    worktree = checkout.checkout(repo, sha, runs)
    res = ranks.run("compile", worktree, spec, work / "compile.json", timeout_s,
                    place.seeded(root / seed.key if seed else None), progress)
    chain = {"seed": seed.key if seed else None, "generation": seed.generation + 1 if seed else 0}
    built = work / confinement.COMPILED_CACHE
    if not res.ok:
        shutil.rmtree(built, ignore_errors=True)
        last = [ln for ln in res.log_tail.strip().splitlines() if ln.strip()][-1:]
        return CompiledCache(FAILED, key, None, res.wall_s, log=str(res.log_path),
                             detail=f"the compile side of {sha[:12]} ended {res.kind}: "
                                    f"{last[0][:300] if last else '(no log)'}", **chain)
    partial = root / f"{key}.partial"
    remove(partial)
    dest = root / key
    size = sandbox.copy_cache(str(built), str(partial), str(dest))  # new files, the launcher's
    files = read_only(partial)
    remove(dest)  # one without its record: an install cut short
    os.replace(partial, dest)
    shutil.rmtree(built, ignore_errors=True)
    (root / f"{key}.json").write_text(json.dumps(
        {"key": key, "commit": sha, "kernels": tree, "spec": spec, "family": family, **chain,
         "wall_s": res.wall_s, "files": files, "bytes": size, "log": str(res.log_path),
         "result": res.result}, indent=1))
    for old in stale(made, distance, KEEP_ANCESTORS):  # made before this one: it is no ancestor
        (root / f"{old}.json").unlink(missing_ok=True)  # the record first: never a seed again
        remove(root / old)
        shutil.rmtree(root / f"{old}-side", ignore_errors=True)
    return CompiledCache(MADE, key, str(dest), res.wall_s, files, size, str(res.log_path), **chain)


def _made(root: Path) -> list[MadeCache]:
    """The installed caches' records that name their family (older records do not: never a
    seed). A record without its folder, or one that does not parse, is skipped."""
    out = []
    for meta in sorted(root.glob("*.json")):
        try:
            m = json.loads(meta.read_text())
            made = MadeCache(m["key"], m["commit"], m["family"], int(m.get("generation", 0)))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if meta.stem == made.key and (root / made.key).is_dir():
            out.append(made)
    return out


def _ancestors(repo: Path, sha: str, commits: set[str]) -> dict[str, int]:
    """Of ``commits``, those that are ancestors of ``sha`` (itself excluded), each with the
    number of commits from it to ``sha``."""
    import git

    g = git.Repo(repo).git
    out = {}
    for c in sorted(commits - {sha}):
        try:
            g.merge_base("--is-ancestor", c, sha)
            out[c] = int(g.rev_list("--count", f"{c}..{sha}"))
        except (git.GitCommandError, ValueError):
            continue  # not an ancestor, or a commit this repository no longer has
    return out


def remove(folder: Path) -> None:
    """Remove a compiled cache (:func:`read_only` made its folders unwritable, which stops
    ``shutil.rmtree`` of anyone but root)."""
    if not os.path.isdir(folder):
        return
    for root, dirs, _ in os.walk(folder):
        os.chmod(root, 0o755)
    shutil.rmtree(folder, ignore_errors=True)


def read_only(folder: Path) -> int:
    """Every file under ``folder`` 0444 and every folder 0555 (bottom up); returns the files."""
    n = 0
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            os.chmod(os.path.join(root, name), stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
            n += 1
        os.chmod(root, 0o555)
    return n


def _kernels_tree(repo: Path, sha: str) -> str | None:
    """The git tree id of ``sha``'s ``kernels/`` (None: the work tree, or none there)."""
    if sha == checkout.WORKTREE:
        return None
    import git

    try:
        return git.Repo(repo).git.rev_parse("--verify", f"{sha}:kernels")
    except git.GitCommandError:
        return None


def _triton_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton")
    except PackageNotFoundError:
        return "none"
