"""Main's compiled kernels (gates/launch/compiled.py) and every side's private Triton cache seeded from
them (gates/launch/sandbox.py): the pure decisions, side-like processes under every mechanism, and
real judgments whose kernel trees write into their Triton cache or compile a kernel."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gates.launch import compiled as C
from gates.launch import sandbox as S
from gates.launch.process import side_env
from gates.requests import Placement
from gates.rules import confinement
from gates.settings import MachineProfile, Target

TARGET = Target(tree="kernels/k31", seed=7, weight_sets=1)
PROFILE = MachineProfile(model="small", layout="tp2", context=96, test_context=80, buckets=(2, 4),
                         weights=(1, 1), test_rows=(1, 3, 17, 8), test_steps=1, rounds=1, replays=2)


def profile(**changed) -> MachineProfile:
    """PROFILE with ``changed`` keys (one weight per bucket where the buckets change)."""
    if "buckets" in changed:
        changed.setdefault("weights", (1,) * len(changed["buckets"]))
    return dataclasses.replace(PROFILE, **changed)


# --------------------------------------------------------------------------- pure
def test_the_compile_spec_covers_the_taps_and_the_scorers_builds():
    spec = C.compile_spec(TARGET, PROFILE)
    assert spec["rows"] == [1, 3, 17, 8, 2, 4] and spec["context"] == 80 and spec["steps"] == 1
    assert spec["more"] == [[96, [2, 4]]]  # the scorer's context differs: built again
    same = profile(test_context=96)
    assert C.compile_spec(TARGET, same)["more"] == []  # its buckets are among the tap's rows
    assert C.compile_spec(TARGET, PROFILE, "tp4", 2)["layout"] == "tp4"
    from gates.protocol import parse

    assert parse("compile", spec).more == [[96, [2, 4]]]  # a spec the side accepts


def test_the_key_is_the_content_not_the_place():
    spec = C.compile_spec(TARGET, PROFILE)
    k = C.cache_key("a" * 40, spec, False, "3.6.0")
    assert k == C.cache_key("a" * 40, json.loads(json.dumps(spec)), False, "3.6.0")
    others = {C.cache_key("b" * 40, spec, False, "3.6.0"), C.cache_key("a" * 40, spec, True, "3.6.0"),
              C.cache_key("a" * 40, spec, False, "3.9.0"),
              C.cache_key("a" * 40, C.compile_spec(TARGET, profile(buckets=(2, 8))), False, "3.6.0")}
    assert k not in others and len(others) == 4


def _made(key, commit, family="F", generation=0):
    return C.MadeCache(key, commit, family, generation)


def test_a_new_mains_compile_starts_on_its_nearest_ancestors_cache_of_its_family():
    made = [_made("k1", "c1"), _made("k2", "c2", generation=3), _made("k3", "c3", family="G"),
            _made("k4", "c4")]
    # c2 the nearest ancestor; c3 nearer but another spec/device/Triton; c4 not an ancestor
    assert C.seed_for(made, "F", {"c1": 5, "c2": 1, "c3": 0}).key == "k2"
    assert C.seed_for(made, "F", {"c1": 5}).key == "k1"
    assert C.seed_for(made, "F", {}) is None and C.seed_for([], "F", {"c1": 1}) is None
    # a chain holds SEED_CHAIN compiles (generations 0 ..): the next starts empty
    last = _made("k9", "c9", generation=C.SEED_CHAIN - 1)
    assert C.seed_for([last], "F", {"c9": 1}) is None
    assert C.seed_for([_made("k9", "c9", generation=C.SEED_CHAIN - 2)], "F", {"c9": 1}).key == "k9"
    # ties by key, whatever the list's order
    twins = [_made("kb", "cb"), _made("ka", "ca")]
    assert C.seed_for(twins, "F", {"ca": 2, "cb": 2}).key == "ka"
    assert C.seed_for(twins[::-1], "F", {"ca": 2, "cb": 2}).key == "ka"


def test_a_new_main_keeps_its_nearest_ancestors_caches_and_any_other_branchs():
    made = [_made(f"k{i}", f"c{i}", family="FG"[i % 2]) for i in range(12)]
    distance = {f"c{i}": 12 - i for i in range(11)}  # c11: not an ancestor (another branch)
    assert C.stale(made, distance, keep=8) == ["k0", "k1", "k2"]  # the three farthest, any family
    assert C.stale(made, distance, keep=11) == [] and C.stale([], distance) == []
    assert "k11" not in C.stale(made, distance, keep=0)


def test_the_family_is_the_key_less_the_source():
    spec = C.compile_spec(TARGET, PROFILE)
    assert C.family_key(spec, False, "3.6.0") == C.family_key(json.loads(json.dumps(spec)), False, "3.6.0")
    assert len({C.family_key(spec, False, "3.6.0"), C.family_key(spec, True, "3.6.0"),
                C.family_key(spec, False, "3.9.0"),
                C.family_key(C.compile_spec(TARGET, profile(buckets=(2, 8))), False, "3.6.0")}) == 4


def test_a_group_file_names_the_copies_and_nothing_outside_the_cache():
    """Triton's group files hold absolute paths: a copy's name its own files (else every
    lookup misses), and a member outside the cache (a side's planted path) is dropped."""
    text = json.dumps({"child_paths": {"k.json": "/srv/c/main/KEY/k.json", "k.cubin": "/srv/c/main/KEY/k.cubin",
                                       "evil": "/srv/repo/runs/ledger.sqlite", "up": "/srv/c/main/../x"}})
    got = json.loads(confinement.moved_group(text, "/srv/c/main", "/run/a/.sandbox-r/triton"))
    assert got == {"child_paths": {"k.json": "/run/a/.sandbox-r/triton/KEY/k.json",
                                   "k.cubin": "/run/a/.sandbox-r/triton/KEY/k.cubin"}}
    # known by its real path too (the shell resolves a linked cache folder)
    real = json.dumps({"child_paths": {"k.json": "/data/c/KEY/k.json", "evil": "/data/x"}})
    assert json.loads(confinement.moved_group(real, ("/srv/c/main", "/data/c"), "/b")) == \
        {"child_paths": {"k.json": "/b/KEY/k.json"}}
    assert confinement.moved_group("not json", "/a", "/b") is None
    assert confinement.moved_group(json.dumps({"child_paths": ["x"]}), "/a", "/b") is None


def test_mains_recording_shown_to_the_replay_holds_nothing_of_a_sides_private_folder(tmp_path):
    """A side killed before its sandbox removed its private folder leaves it in main's
    recording's folder: the replay is shown the recording, never that."""
    from gates.accuracy import show_recording

    a_dir = tmp_path / "a"
    (a_dir / ".sandbox-record" / "triton").mkdir(parents=True)
    (a_dir / ".sandbox-record" / "triton" / "planted").write_text("x")
    (a_dir / "rank1").mkdir()
    for name in ("record.json", "logits_a.pt", "record.log", "rank1/kept_a.pt"):
        (a_dir / name).write_text("main's")
    show_recording(a_dir, tmp_path / "seen", link=False)
    assert sorted(str(p.relative_to(tmp_path / "seen")) for p in (tmp_path / "seen").rglob("*") if p.is_file()) \
        == ["logits_a.pt", "rank1/kept_a.pt", "record.json"]


# --------------------------------------------------------------------------- real processes
SYSTEM_PYTHON = "/usr/bin/python3"
CACHE_PROBE = r"""
import json, os, sys
a = sys.argv
cache, mains = os.environ["TRITON_CACHE_DIR"], a[1]
seen = {}
for root, dirs, files in os.walk(cache):
    for f in files:
        p = os.path.join(root, f)
        seen[os.path.relpath(p, cache)] = open(p).read()
out = {"seen": seen}
for rel in list(seen):  # its copy is its own to change
    open(os.path.join(cache, rel), "a").write("+side")
open(os.path.join(cache, "planted-by-side"), "w").write("x")
try:  # main's compiled cache itself
    if mains:
        open(os.path.join(mains, "KEY", "k.cubin"), "a").write("+side")
        out["main"] = "wrote"
except OSError as e:
    out["main"] = type(e).__name__
print(json.dumps(out))
"""


def _mechanisms():
    f = S.facts()
    return [m for m, ok in (("namespaces", not f.namespaces), ("landlock", f.landlock_abi >= 4),
                            ("user", not f.user), ("off", True)) if ok]


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode() + (p.read_bytes() if p.is_file() else b"/"))
    return h.hexdigest()


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason=f"no {SYSTEM_PYTHON}")
@pytest.mark.parametrize("mechanism", _mechanisms())
def test_a_side_starts_on_a_private_copy_of_mains_compiled_cache_gone_when_it_ends(mechanism):
    """Under every mechanism (and off): a side's Triton cache holds main's compiled files,
    what it changes or adds there is its own and gone when it ends, the next side of the same
    name finds main's files as they were and nothing the first wrote; main's compiled cache
    is unreachable or unwritable to it and unchanged (off: the side has the user's rights,
    which reach main's cache as they reach the ledger; it is not tried there)."""
    base = Path(tempfile.mkdtemp(prefix="kern-compiled-", dir="/tmp"))
    base.chmod(0o711)  # the sandbox user reaches what it needs (pytest's tmp is root's alone)
    try:
        runs = base / "repo" / "runs"
        tree, run = runs / "worktrees" / "main", runs / "tap" / "a"
        (tree / "kernels").mkdir(parents=True)
        run.mkdir(parents=True)
        (base / "repo" / "kern.yaml").write_text("")
        mains = runs / "compiled" / "k"
        (mains / "KEY").mkdir(parents=True)
        (mains / "KEY" / "k.cubin").write_text("main's cubin")
        (mains / "KEY" / "__grp__k.json").write_text("{}")
        C.read_only(mains)
        (runs / "compiled").chmod(0o700)
        before = _digest(mains)
        cmd = [SYSTEM_PYTHON, "-c", CACHE_PROBE, str(mains) if mechanism != "off" else "",
               "gates.side.driver", "tap", "--tree", str(tree), "--out", str(run / "record.json")]
        got = []
        for _ in range(2):
            wrapped = S.wrap(cmd, Placement(sandbox=mechanism, seed=str(mains)))
            r = subprocess.run(wrapped, capture_output=True, text=True, timeout=120,
                               cwd=S.HARNESS_ROOT, env=side_env(Placement()))
            assert r.returncode == 0, r.stderr
            got.append(json.loads(r.stdout.strip().splitlines()[-1]))
            assert not (runs / "tap" / ".triton-a").exists()  # its private cache went with it
        for g in got:
            assert g["seen"] == {"KEY/k.cubin": "main's cubin", "KEY/__grp__k.json": "{}"}, g
        if mechanism != "off":
            assert got[0]["main"] in ("PermissionError", "FileNotFoundError"), got[0]
        assert _digest(mains) == before
    finally:
        C.remove(base / "repo" / "runs" / "compiled" / "k")
        shutil.rmtree(base, ignore_errors=True)


WRITE_OTHERS = r"""
import json, os, sys
out = {}
for name, path in (("own", os.environ["TRITON_CACHE_DIR"]), ("other's", sys.argv[1])):
    try:
        open(os.path.join(path, "planted"), "w").write("x")
        out[name] = "wrote"
    except OSError as e:
        out[name] = type(e).__name__
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.path.isdir("/var/tmp"), reason="no /var/tmp")
@pytest.mark.parametrize("mechanism,grouped", [("namespaces", False), ("namespaces", True), ("landlock", False)])
def test_a_side_cannot_write_the_cache_of_a_side_sharing_its_run_folder(mechanism, grouped):
    """The scorer's sides share a run folder and run at once: the candidate's bench side
    cannot write main's side's Triton cache (which main's side loads its kernels from), alone
    or in the group the store and bench sides share. (Its run folder lies outside /tmp and
    the home: beneath those, a namespace sandbox's landlock rules for its private /tmp and
    home reach a group's mounts, docs/sandbox.md.)"""
    f = S.facts()
    if (mechanism == "namespaces" and f.namespaces) or f.landlock_abi < 1:
        pytest.skip("needs namespaces and landlock" if mechanism == "namespaces" else "needs landlock")
    tmp_path = Path(tempfile.mkdtemp(prefix="kern-caches-", dir="/var/tmp"))
    trees = {k: tmp_path / f"tree{k}" for k in "AB"}
    for t in trees.values():
        (t / "kernels").mkdir(parents=True)
    work = tmp_path / "runs" / "bench" / "w"
    work.mkdir(parents=True)

    def side(code, k, *args):
        return [sys.executable, "-c", code, *args, "gates.side.driver", "bench", "--tree", str(trees[k]),
                "--out", str(work / f"side{k}.json")]

    import contextlib

    box = S.group("store", trees["A"], work / "store.json", peers=False,
                  more=[("bench", t, work / "side.json") for t in trees.values()]) if grouped else contextlib.nullcontext()
    place = Placement(sandbox=mechanism)
    with box as group:
        a = subprocess.Popen(S.wrap(side("import time; time.sleep(30)", "A"), place, group), cwd=S.HARNESS_ROOT,
                             env=side_env(place))
        try:
            mains = confinement.side_of(side("", "A"), None).triton_cache
            assert os.path.isdir(mains)
            r = subprocess.run(S.wrap(side(WRITE_OTHERS, "B", mains), place, group), capture_output=True, text=True,
                               timeout=60, cwd=S.HARNESS_ROOT, env=side_env(place))
        finally:
            a.kill()
            a.wait()
    try:
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout.strip().splitlines()[-1])
        # under namespaces main's cache is not even there (a group's member builds its own
        # root too); under landlock refused
        absent = mechanism == "namespaces"
        assert got == {"own": "wrote", "other's": "FileNotFoundError" if absent else "PermissionError"}, got
        assert not os.path.exists(os.path.join(mains, "planted"))
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_copy_is_new_files_and_leaves_links_out(tmp_path):
    """A copy, never a hard link (one inode: a write through it would change main's file);
    a symbolic link in a cache is not followed."""
    src = tmp_path / "main" / "KEY"
    src.mkdir(parents=True)
    (src / "k.cubin").write_text("main's")
    (tmp_path / "main" / "link").symlink_to("/etc/passwd")
    n = S.copy_cache(str(tmp_path / "main"), str(tmp_path / "copy"))
    assert n == len("main's") and sorted(p.name for p in (tmp_path / "copy").rglob("*")) == ["KEY", "k.cubin"]
    assert os.stat(tmp_path / "copy" / "KEY" / "k.cubin").st_ino != os.stat(src / "k.cubin").st_ino
    (tmp_path / "copy" / "KEY" / "k.cubin").write_text("a side's")
    assert (src / "k.cubin").read_text() == "main's"


# --------------------------------------------------------------------------- real judgments
# What a candidate's kernel tree does at import, in every side it runs in: report what its
# Triton cache holds, plant a file there naming the side's mode, and compile a small kernel
# for sm_90 through Triton itself (its compile listener says whether Triton's cache had it).
# The compile runs in a child without TRITON_INTERPRET (the interpreter's patched language
# does not compile), with the side's environment, so into the side's Triton cache.
COMPILE_PROBE = '''
import json
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction


def probe_kernel(out_ptr, n, N: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, N), tl.zeros([N], tl.float32) + n)


if __name__ == "__main__":
    hits = []
    triton.knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
    triton.compile(ASTSource(JITFunction(probe_kernel), {"out_ptr": "*fp32", "n": "fp32", "N": "constexpr"},
                             constexprs={"N": 64}), target=GPUTarget("cuda", 90, 32))
    print(json.dumps({"cache_hit": hits}))
'''
AT_IMPORT = '''import json as _j, os as _o, subprocess as _sp, sys as _s
_cache, _mode = _o.environ.get("TRITON_CACHE_DIR", ""), _s.argv[1]
_seen = sorted(_o.path.relpath(_o.path.join(r, f), _cache) for r, _, fs in _o.walk(_cache) for f in fs)
_env = {k: v for k, v in _o.environ.items() if k != "TRITON_INTERPRET"}
_got = _sp.run([_s.executable, _o.path.join(_o.path.dirname(__file__), "..", "..", "cache_probe.py")],
               env=_env, capture_output=True, text=True)
print("KERN-CACHE " + _j.dumps({"mode": _mode, "seen": _seen, "compile": _got.stdout.strip() or _got.stderr[-800:]}),
      file=_s.stderr, flush=True)
open(_o.path.join(_cache, "planted-by-" + _mode), "w").write("planted")


def moe_combine('''
SMALL = {"profiles.cpu.test_rows": [1], "profiles.cpu.test_steps": 1, "profiles.cpu.buckets": [2],
         "profiles.cpu.weights": [1], "test.timeout_s": 300}


def _reports(runs: Path, since: set) -> list[dict]:
    """Every KERN-CACHE line of the side logs written since ``since`` (log paths), with its log."""
    out = []
    for log in sorted(runs.rglob("*.log")):
        if log in since:
            continue
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("KERN-CACHE "):
                out.append({**json.loads(line[len("KERN-CACHE "):]), "log": str(log.relative_to(runs))})
    return out


def _hits(report: dict) -> list:
    return json.loads(report["compile"])["cache_hit"]


@pytest.mark.slow
def test_what_a_candidates_side_writes_in_its_triton_cache_no_later_side_reads(tmp_path):
    """A candidate whose kernel tree plants a file in its Triton cache at import, and compiles
    a kernel there: judged twice against main, its second side finds neither (and compiles
    the kernel again); once it is main, main's compiled cache is made from its source by a
    compile side (on a copy of the previous main's, itself a compile side's), and main's and the next candidate's sides start on a copy of it: they
    find the compile side's files (its kernel: Triton's cache hit, no compile) and nothing any
    judging side wrote."""
    from gates.accuracy import run_test
    from harness.pipeline import accuracy_request
    from harness.settings import load
    from tests.gates.candidates import candidate, make_repo

    import git

    repo = make_repo(tmp_path, SMALL)
    (repo / "kernels" / "cache_probe.py").write_text(COMPILE_PROBE)
    git.Repo(repo).git.add("-A")
    git.Repo(repo).git.commit("-m", "the probe's kernel (run as a script only)")
    planter = candidate(repo, "planter", [("kernels/k31/moe/combine.py", "def moe_combine(", AT_IMPORT)])
    cfg, runs = load(repo / "kern.yaml").resolve(False), repo / "runs"

    def judge(sha):
        seen = set(runs.rglob("*.log")) if runs.exists() else set()
        res = run_test(accuracy_request(cfg, repo, sha, "main", runs, False)).report
        assert res["verdict"].startswith("PASS"), res["reasons"]
        return res, _reports(runs, seen)

    first, got1 = judge(planter)
    assert first["compiled"]["kind"] == "made"  # main's, from main's tree (no probe there)
    assert [r["mode"] for r in got1] == ["tap"], got1  # the candidate's replay
    assert got1[0]["seen"] == [] and _hits(got1[0]) == [False]
    again, got2 = judge(planter)  # the same commit's later side
    assert again["compiled"]["kind"] == "cached"
    assert [r["mode"] for r in got2] == ["tap"] and got2[0]["seen"] == [], got2
    assert _hits(got2[0]) == [False]  # what its first side compiled is gone with that side

    git.Repo(repo).git.merge("--ff-only", planter)  # the planter merges (main is checked out)
    nxt = candidate(repo, "next", [("kernels/k31/moe/situ.py", "    rows, inter = out.shape\n",
                                    "    rows, inter = out.shape  # unchanged\n")])
    third, got3 = judge(nxt)
    assert third["compiled"]["kind"] == "made"
    by_mode = {}
    for r in got3:
        by_mode.setdefault(r["mode"], []).append(r)
    assert sorted(by_mode) == ["compile", "tap"] and len(by_mode["tap"]) == 2, got3  # main's A, the candidate's B
    assert by_mode["compile"][0]["seen"] == [] and _hits(by_mode["compile"][0]) == [False]
    compiled_files = sorted(str(p.relative_to(third["compiled"]["path"]))
                            for p in Path(third["compiled"]["path"]).rglob("*") if p.is_file())
    assert "planted-by-compile" in compiled_files and any(f.endswith(".cubin") for f in compiled_files)
    for r in by_mode["tap"]:  # main's side and the candidate's: main's compiled cache, nothing else
        assert r["seen"] == compiled_files, r
        assert _hits(r) == [True], r  # the unchanged kernel is not compiled again
    # kern step by hand on the candidate: it has no compiled cache of its own, so main's
    from harness import cli

    assert cli.main(["--repo", str(repo), "step", nxt, "--rows", "1", "--out", str(tmp_path / "step.json")]) == 0
    step = [r for r in _reports(tmp_path, set()) if r["mode"] == "run"]
    assert len(step) == 1 and step[0]["seen"] == compiled_files and _hits(step[0]) == [True], step
    # every side's own cache went with it: no file any side planted is left anywhere
    assert sorted(p.name for p in tmp_path.rglob("planted-by-*")) == ["planted-by-compile"]


@pytest.mark.slow
def test_a_merged_mains_compile_side_starts_on_the_previous_mains_compiled_cache(tmp_path, monkeypatch):
    """Main's kernel tree compiles a kernel at import (through Triton, sm_90). Its first
    compiled cache starts empty and compiles it; after a commit to another kernel, the new
    main's compile side starts on a copy of that cache (exactly its files) and finds the
    unchanged kernel there: Triton's cache hit, no compile. The record names the chain. A
    third main's install removes the caches of ancestors past the ones kept."""
    from harness.settings import load
    from tests.gates.candidates import make_repo

    import git

    repo = make_repo(tmp_path, SMALL)
    (repo / "kernels" / "cache_probe.py").write_text(COMPILE_PROBE)
    combine = repo / "kernels/k31/moe/combine.py"
    combine.write_text(combine.read_text().replace("def moe_combine(", AT_IMPORT, 1))
    g = git.Repo(repo).git
    g.add("-A")
    g.commit("-m", "main's tree compiles the probe's kernel at import")
    cfg, runs = load(repo / "kern.yaml").resolve(False), repo / "runs"

    def prepare():
        seen = set(runs.rglob("*.log")) if runs.exists() else set()
        got = C.prepare(repo, "main", runs, cfg.target, cfg.machine, False, 300,
                        Placement(sandbox=cfg.sandbox))
        assert got.kind == C.MADE, got
        reports = _reports(runs, seen)
        assert [r["mode"] for r in reports] == ["compile"], reports
        return got, reports[0]

    def files(cache):
        return sorted(str(p.relative_to(cache)) for p in Path(cache).rglob("*") if p.is_file())

    first, r1 = prepare()
    assert (first.seed, first.generation) == (None, 0)
    assert r1["seen"] == [] and _hits(r1) == [False]
    first_files = files(first.path)
    assert "planted-by-compile" in first_files and any(f.endswith(".cubin") for f in first_files)

    situ = repo / "kernels/k31/moe/situ.py"
    situ.write_text(situ.read_text() + "# a later main\n")
    g.commit("-am", "a later main")
    second, r2 = prepare()
    assert second.key != first.key and (second.seed, second.generation) == (first.key, 1)
    assert r2["seen"] == first_files  # a copy of the previous main's, nothing else
    assert _hits(r2) == [True]  # the unchanged kernel is not compiled again
    assert files(first.path) == first_files  # the seed itself untouched
    meta = json.loads((runs / "compiled" / f"{second.key}.json").read_text())
    assert (meta["seed"], meta["generation"]) == (first.key, 1)

    # a third main, keeping one ancestor's cache: the first main's goes (record, cache, side
    # folder), the second's stays and seeds it
    monkeypatch.setattr(C, "KEEP_ANCESTORS", 1)
    situ.write_text(situ.read_text() + "# a third main\n")
    g.commit("-am", "a third main")
    third, _ = prepare()
    assert (third.seed, third.generation) == (second.key, 2)
    left = sorted(p.name for p in (runs / "compiled").iterdir() if not p.name.endswith(".lock"))
    assert left == sorted([f"{k}{sfx}" for k in (second.key, third.key) for sfx in ("", ".json", "-side")])


def test_the_compile_modes_builds_run_every_row_of_each():
    """What the compile side does on a GPU (here its builds run on the interpreter, which
    compiles nothing): each build at its context, one step per row; none under the
    interpreter's own flag."""
    from gates.protocol import parse
    from gates.side.driver import compile_mode

    spec = C.compile_spec(TARGET, profile(test_rows=(1,), buckets=(2,)))
    opts = parse("compile", spec)
    got = compile_mode(opts, "cpu")
    assert [(b["context"], b["rows"]) for b in got["builds"]] == [(80, [1, 2]), (96, [2])]
    assert compile_mode(opts, "cpu", interpreted=True)["builds"] == []


def test_the_compile_side_launches_every_check_kernel_variant_a_tap_launches():
    """Main's compile side runs each batch size's step through the tap's own hooks
    (``tap.compile_checks``), so it launches the fused check kernel at every variant
    (``fingerprint.Variant``: its constexprs, MASKED, each pointer's 16-byte alignment) a tap
    pass of the same build launches, hidden batch sizes included (here 5 and 6), and a pinned
    pass's checks of a call with no recording too. On the CPU the interpreter compiles
    nothing: that these launches leave Triton's cache holding the kernels a tap side then
    loads (a cache hit, no compile) only a GPU shows."""
    from gates.protocol import parse
    from gates.side import tap
    from gates.side.driver import compile_mode
    from gates.side.session import Side, Spec

    spec = C.compile_spec(TARGET, profile(test_rows=(1, 3), buckets=(2,)))
    got = compile_mode(parse("compile", spec), "cpu")
    build = got["builds"][0]
    assert (build["context"], build["rows"]) == (80, [1, 3, 2])
    compiled = {tuple(sorted(v.items())) for v in build["check_variants"]}
    rows = [1, 3, 5, 6, 2]
    side = Side(Spec(model="small", layout="tp2", seed=TARGET.seed, weight_sets=TARGET.weight_sets,
                     context=80, steps=1, rows=rows), "cpu", input_seed=31337)
    out = tap.free_pass(side, rows, 1, side.model.state.snapshot(), set(), 0, {})
    tapped = {tuple(sorted(v.items())) for v in tap.variants_doc(out["check_variants"])}
    assert tapped and tapped <= compiled, sorted(tapped - compiled)
    # the pinned pass's checks of a call with no recording: state checked whole, counted
    assert compiled - tapped, "the compile side launched nothing beyond a free pass's checks"
