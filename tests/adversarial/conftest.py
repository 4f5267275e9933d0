"""One repository per session for the whole catalogue: the tree, kern.yaml and the harness's
protected files on ``main``, and one branch per hack."""
from __future__ import annotations

import pytest
import torch

from harness import ledger as L
from harness.pipeline import Context
from harness.settings import load
from harness.worktrees import Repo
from tests.adversarial.hacks import BENCH_HACKS, GPU_HACKS, SCOPE_HACKS, TAP_HACKS, commit_hack, make_catalogue_repo

# The lightest settings that still prove each point: the tap runs one awkward size (1, odd)
# and the one bucket (2, a bench size), one step; the bench times that bucket.
SETTINGS = {"profiles.cpu.test_rows": [1], "profiles.cpu.buckets": [2], "profiles.cpu.weights": [1],
            "profiles.cpu.rounds": 1, "profiles.cpu.replays": 2, "test.timeout_s": 200,
            "bench.timeout_s": 300,
            # on a GPU the same small model (the catalogue's GPU cases are mechanics too)
            "profiles.gpu.model": "small", "profiles.gpu.layout": "tp2", "profiles.gpu.context": 96,
            "profiles.gpu.test_context": 80, "profiles.gpu.test_rows": [1], "profiles.gpu.buckets": [2],
            "profiles.gpu.weights": [1], "profiles.gpu.test_steps": 1, "profiles.gpu.rounds": 1,
            "profiles.gpu.replays": 2}


@pytest.fixture(scope="session")
def catalogue(tmp_path_factory):
    """(repo, {hack name: sha}, Context on the repo)."""
    repo = make_catalogue_repo(tmp_path_factory.mktemp("adversarial"), SETTINGS)
    shas = {}
    for h in SCOPE_HACKS + TAP_HACKS + BENCH_HACKS + GPU_HACKS:
        if h.name not in shas:
            shas[h.name] = commit_hack(repo, h)
    settings = load(repo / "kern.yaml")
    cuda = torch.cuda.is_available()
    ctx = Context(Repo(repo), settings.data, settings.profile(cuda), repo / "runs", cuda,
                  L.Ledger(L.default_path(repo)), progress=lambda m: None,
                  settings_digest=settings.digest)
    return repo, shas, ctx
