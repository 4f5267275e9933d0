"""What the sandbox stops (issue 30; gates/launch/sandbox.py, docs/sandbox.md): real candidate commits
whose kernel module, at import, reaches outside its side through the standard library and libc
(past the scope gate: through ``sys.modules``), run through the real gates (``kern test``'s
tap sides, ``kern bench``'s scorer side, ``kern step``'s step side). Each is asserted harmless
for its own reason:

 22  leak: reads secrets the test planted in the home, /etc and the ledger's folder, and sends
     what it read to its log, a file in its run folder, a world-readable temporary file and
     listeners the test runs on 127.0.0.1 (TCP and UDP). Harmless because nothing of the machine beyond the
     side's own files exists in its sandbox (each read: FileNotFoundError) and its network is
     an empty one (the listener hears nothing); the secrets appear nowhere the loop or a later
     agent reads (the repository, runs/, the home, the temporary file).
 23  main's recording through libc's ``open`` (the README's old "Not closed" item: the audit
     hook sees Python's opens only): at import the replay's folder for main's recording is
     empty (the gates link the recording in once every process of the side has imported its
     tree) and main's own folder is not in the sandbox, so the judgment's hidden input seed is
     read nowhere.
 24  writes outside its run folder: into the harness's gates/, the ledger's folder, the run
     folders beside its own, its own tree, the home and /tmp. Harmless because the first four
     are read-only or absent in its sandbox, and the home and /tmp it sees are its own, gone
     with it: no file appears outside.

CPU here (slow: the tap runs); ``test_the_gpu_is_kept_and_nothing_leaks_on_a_gpu`` runs on a
GPU (``pytest -m gpu tests/adversarial``): the same leak through kern test and kern bench, and
the sides there see the GPU.
"""
from __future__ import annotations

import dataclasses
import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from gates.accuracy import run_test
from gates.launch import sandbox
from gates.launch.step import run_step
from gates.protocol import Hidden
from gates.requests import Placement
from gates.rules import confinement
from gates.scorer import run_bench
from gates.spec import side_spec
from harness.pipeline import accuracy_request, bench_request
from tests.adversarial import hacks as H
from tests.gates.test_sandbox import Listener

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    sandbox.facts().namespaces != "" and sandbox.facts().landlock_abi < 4,
    reason="this machine allows no sandbox (kern doctor says why)")]

TOKEN = uuid.uuid4().hex[:16]
SECRET = f"kern-secret-value-{TOKEN}"
SEED = 1618033988  # the judgment's hidden input seed in case 23
CUDA = torch.cuda.is_available()


def planted(repo: Path) -> dict[str, Path]:
    """Where the test plants the secret: the home, /etc (when writable: CI runs as root) and
    the ledger's folder."""
    out = {"home": Path(os.path.expanduser(f"~/.kern-secret-{TOKEN}")),
           "ledger": repo / "runs" / f"kern-secret-{TOKEN}"}
    if os.access("/etc", os.W_OK):
        out["etc"] = Path(f"/etc/kern-secret-{TOKEN}")
    return out


def holding(roots, needle: str, skip=()) -> list[str]:
    """Every file under ``roots`` whose bytes hold ``needle`` (``skip``: the planted files)."""
    out, skip = [], {str(p) for p in skip}
    for root in map(Path, roots):
        files = [root] if root.is_file() else root.rglob("*") if root.is_dir() else []
        for p in files:
            if str(p) in skip or not p.is_file() or p.is_symlink():
                continue
            try:
                if needle.encode() in p.read_bytes():
                    out.append(str(p))
            except OSError:
                pass
    return out


def home_files() -> list[Path]:
    """The files right in the home (where a leak to the home would land; its folders hold
    Python, caches and other work, too much to read)."""
    return [p for p in Path.home().iterdir() if p.is_file()]


def said(log_text: str, word: str) -> dict:
    """The JSON the hack printed after ``word`` in a side's log."""
    for line in log_text.splitlines():
        if line.startswith(word + " {"):
            return json.loads(line[len(word) + 1:])
    raise AssertionError(f"the hack said no {word!r} line; log:\n{log_text[-1500:]}")


def logs(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*.log")))


MECHANISMS = [m for m in confinement.MECHANISMS if m == "namespaces" and not sandbox.facts().namespaces
              or m == "landlock" and sandbox.facts().landlock_abi >= 4]
MISSING = {"FileNotFoundError", "PermissionError"}  # absent (namespaces) or refused (landlock)


@pytest.fixture(scope="module", params=MECHANISMS)
def judged(catalogue, request):
    """Cases 22-24 as the gates judge them on the catalogue's repository under each mechanism
    this machine allows (kern.yaml's ``sandbox``): kern test for each, kern bench and kern step
    for the leak. The secrets are planted first, the listener runs throughout, and everything
    planted is taken away again."""
    repo, _, ctx = catalogue
    cfg = dataclasses.replace(ctx.cfg, sandbox=request.param)
    listener = Listener()
    places = planted(repo)
    for p in places.values():
        p.write_text(SECRET)
    try:
        hacks = {h.case: h for h in H.sandbox_hacks(TOKEN, listener.port, listener.udp_port)}
        shas = {case: H.commit_hack(repo, h) for case, h in hacks.items()}  # the same commits each time
        main = ctx.repo.main_sha()

        def test(case, hidden=None):
            return run_test(accuracy_request(cfg, repo, shas[case], main, ctx.runs, ctx.cuda,
                                             hidden=hidden)).report

        def bench():
            return run_bench(bench_request(cfg, repo, shas[22], None, ctx.runs, ctx.cuda, rounds=1,
                                           replays=1), progress=lambda m: None).report

        def step():
            m = cfg.machine
            spec = side_spec(cfg.target, m, steps=1, rows=[m.buckets[0]], replays=1, layout=m.layout)
            out = repo / f"step-{TOKEN}-{request.param}.json"  # kern step --out: beside the repository's files
            return run_step(repo, shas[22], ctx.runs, spec, out, 300, Placement(sandbox=request.param)), out

        with ThreadPoolExecutor(2) as pool:
            jobs = {"test 22": pool.submit(test, 22), "test 23": pool.submit(test, 23, Hidden(SEED, ())),
                    "test 24": pool.submit(test, 24), "bench 22": pool.submit(bench),
                    "step 22": pool.submit(step)}
            out = {k: f.result() for k, f in jobs.items()}
    finally:
        listener.close()
        for p in places.values():
            p.unlink(missing_ok=True)
    return repo, request.param, out, listener.got, places


def test_a_leaked_secret_reaches_nothing_anyone_reads(judged):
    """Case 22 through kern test (main's tap side records, the candidate's replays), kern bench
    (the scorer's side) and kern step (a step side whose --out is beside the repository's
    files): every read of a planted secret found nothing; the log, the run folders, the
    temporary file and the listener hold no secret."""
    repo, mech, out, heard, places = judged
    test, bench, (step, step_out) = out["test 22"], out["bench 22"], out["step 22"]
    assert test["verdict"] == "PASS bit-identical", test["reasons"]  # an honest kernel otherwise
    assert bench["outcome"] == "ok", bench.get("error")
    assert step.ok, step.log_tail
    b_dir = Path(test["b_dir"])
    for where, text in (("kern test", logs(b_dir)), ("kern bench", logs(repo / "runs" / "bench")),
                        ("kern step", step.log_path.read_text())):
        got = said(text, "kern-leak")
        assert set(got) == {"etc", "home", "ledger"} and set(got.values()) <= MISSING, (where, got)
        assert "kern-leak socket sent" not in text, where
        assert "kern-leak datagram " in text, where
    assert heard == []  # the listeners (TCP, UDP) on the machine's 127.0.0.1
    assert not Path(f"/tmp/kern-leak-{TOKEN}.txt").exists()  # the sandbox's own /tmp went with it
    assert holding([repo, *home_files(), Path(f"/tmp/kern-leak-{TOKEN}.txt")], SECRET,
                   skip=places.values()) == []
    assert SECRET not in json.dumps(test) + json.dumps(bench, default=str)
    # the step's document came back where kern step asked; what else it wrote did not
    assert json.loads(step_out.read_text())["buckets"] and not (repo / "kern-said.txt").exists()


def test_mains_recording_through_libc_is_not_there_at_import(judged):
    """Case 23: the replay's libc opens of main's recording at import find nothing, and the
    judgment's hidden seed is in nothing the candidate's code wrote."""
    repo, mech, out, _, _ = judged
    test = out["test 23"]
    assert test["hidden"] == {"input_seed": SEED, "extra_rows": []}
    b_dir = Path(test["b_dir"])
    text = logs(b_dir)
    got = said(text, "kern-peek")
    # the folder it was told, and whatever runs/tap showed it: only its own run folder (and
    # the folder of its own Triton cache beside it)
    assert str(b_dir / "main" / "record.json") in got
    own = (b_dir, b_dir / "main", b_dir.parent / f".triton-{b_dir.name}")
    assert all(Path(t).parent in own for t in got), got
    assert set(got.values()) == {"No such file or directory"}, got
    assert test["verdict"] == "PASS bit-identical", test["reasons"]  # the replay still read it
    assert str(SEED) not in text and str(SEED) not in (b_dir / "kern-said.txt").read_text()
    assert not (b_dir / "main").exists()  # the links into the replay's folder are gone again


def test_writes_outside_the_run_folder_land_nowhere(judged):
    """Case 24: the writes into the harness and into its own tree failed (read-only there);
    the others went to folders only its sandbox had (its own /tmp, home and the empty parents
    of its mounts), gone with it: none of the files exists outside."""
    repo, mech, out, _, _ = judged
    test = out["test 24"]
    got = said(logs(Path(test["b_dir"])), "kern-plant")
    assert set(got) == {"harness", "ledger", "beside", "own tree", "home", "tmp"}, got
    assert {got["harness"], got["own tree"]} <= {"OSError", "PermissionError"}, got  # EROFS, EACCES
    outside = [Path(sandbox.HARNESS_ROOT, "gates", f"kern_planted_{TOKEN}.py"),
               repo / "runs" / f"kern-planted-{TOKEN}", repo / "runs" / "tap" / f"kern-planted-{TOKEN}",
               Path(os.path.expanduser(f"~/.kern-planted-{TOKEN}")), Path(f"/tmp/kern-planted-{TOKEN}")]
    assert [p for p in outside if p.exists()] == []
    assert holding([repo], "planted " + TOKEN[::-1]) == []
    assert test["verdict"] == "PASS bit-identical", test["reasons"]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_the_gpu_is_kept_and_nothing_leaks_on_a_gpu(judged):
    """On a GPU (``pytest -m gpu tests/adversarial``) the sandboxed sides still see the device
    (their results say cuda) and cases 22-24 end as on the CPU."""
    repo, mech, out, heard, places = judged
    assert out["test 22"]["environment"]["device"].startswith("cuda")
    assert out["bench 22"]["environment"]["device"].startswith("cuda")
    test_a_leaked_secret_reaches_nothing_anyone_reads(judged)
    test_mains_recording_through_libc_is_not_there_at_import(judged)
    test_writes_outside_the_run_folder_land_nowhere(judged)
