"""One repository per session for the whole catalogue: the tree, kern.yaml and the harness's
protected files on ``main``, and one branch per hack; and one more for the hacks that skip work
only in the scorer's timed replays, judged end to end by ``kern try``."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from harness import ledger as L
from harness.pipeline import Context, try_commit
from harness.settings import load
from harness.worktrees import Repo
from tests.adversarial.hacks import (BENCH_HACKS, GPU_HACKS, SCOPE_HACKS, SCORER_ONLY, TAP_HACKS,
                                     TIMED_BAND, commit_hack, make_catalogue_repo)
from tests.gates.candidates import GPU_SMALL

# The lightest settings that still prove each point: the tap runs one awkward size (1, odd)
# and the one bucket (2, a bench size), one step; the bench times that bucket.
SETTINGS = {"profiles.cpu.test_rows": [1], "profiles.cpu.buckets": [2], "profiles.cpu.weights": [1],
            "profiles.cpu.rounds": 1, "profiles.cpu.replays": 2, "test.timeout_s": 200,
            "bench.timeout_s": 300,
            **GPU_SMALL}  # on a GPU the same small model (the catalogue's GPU cases are mechanics too)


@pytest.fixture(scope="session")
def catalogue(tmp_path_factory):
    """(repo, {hack name: sha}, Context on the repo)."""
    repo = make_catalogue_repo(tmp_path_factory.mktemp("adversarial"), SETTINGS)
    shas = {}
    for h in SCOPE_HACKS + TAP_HACKS + BENCH_HACKS + GPU_HACKS + SCORER_ONLY:
        if h.name not in shas:
            shas[h.name] = commit_hack(repo, h)
    settings = load(repo / "kern.yaml")
    cuda = torch.cuda.is_available()
    ctx = Context(Repo(repo), settings.resolve(cuda), repo / "runs", cuda,
                  L.Ledger(L.default_path(repo)), progress=lambda m: None,
                  settings_digest=settings.digest)
    return repo, shas, ctx


# Two buckets: the scorer's reference check used to look at its first bucket only, and some of
# these hacks are active only at the others.
SCORER_SETTINGS = {**SETTINGS, "profiles.cpu.buckets": [2, 4], "profiles.cpu.weights": [1, 1],
                   "profiles.gpu.buckets": [2, 4], "profiles.gpu.weights": [1, 1]}


def _judged_through_kern_try(folder: Path, hacks) -> tuple[Path, dict]:
    """(repository, {hack name: (attempt number, Outcome, the ledger's Attempt)}): each of
    ``hacks`` through ``kern try`` (``pipeline.try_commit``) against main in one repository
    (attempt n of hack h keeps its judgment in ``runs-<h>/attempts/<n>/``). Each attempt has
    its own runs folder, so on the CPU two run at once (their slot locks apart); on a GPU one
    at a time (they would time each other)."""
    repo = make_catalogue_repo(folder, SCORER_SETTINGS)
    cuda = torch.cuda.is_available()
    shas = {h.name: commit_hack(repo, h) for h in hacks}
    settings = load(repo / "kern.yaml")
    ledger = L.Ledger(L.default_path(repo))

    def judge(name):
        ctx = Context(Repo(repo), settings.resolve(cuda), repo / f"runs-{name}", cuda,
                      ledger, progress=lambda m: None, settings_digest=settings.digest)
        number, out = try_commit(ctx, shas[name], title=name)
        return number, out, ledger.attempt(number)

    with ThreadPoolExecutor(1 if cuda else 2) as pool:
        jobs = {h.name: pool.submit(judge, h.name) for h in hacks}
        return repo, {name: f.result() for name, f in jobs.items()}


# one fixture per test file: under CI's `--dist loadfile` the files run in different workers,
# and a session fixture both used was judged in each (every hack twice)
@pytest.fixture(scope="session")
def scorer_only_judged(tmp_path_factory):
    """``SCORER_ONLY`` judged through kern try (:func:`_judged_through_kern_try`)."""
    return _judged_through_kern_try(tmp_path_factory.mktemp("scorer-only"), SCORER_ONLY)


@pytest.fixture(scope="session")
def timed_band_judged(tmp_path_factory):
    """``TIMED_BAND`` (the cpu profile's band candidates) judged through kern try; on the H200
    the band is judged at full size instead (bench/gpu_evidence.sh fairbar)."""
    return _judged_through_kern_try(tmp_path_factory.mktemp("timed-band"), TIMED_BAND)


@pytest.fixture(scope="session")
def scorer_only(scorer_only_judged):
    """{hack name: (attempt number, Outcome, the ledger's Attempt)} of ``scorer_only_judged``."""
    return scorer_only_judged[1]
