"""The hacks a commit shows: the real scope path (``pipeline.check_scope`` on the commit in a
git repository, then ``decide_outcome``) rejects each, for the reason asserted here. No gate
process starts: what the scope gate rejects never reaches one.

The runtime hacks of the catalogue pass this gate on purpose (they hide from its static
checks), so the slow tests exercise the run-time defenses and not this one.
"""
from __future__ import annotations

import pytest

from harness.pipeline import check_scope, decide_outcome
from tests.adversarial.hacks import (BENCH_HACKS, GPU_HACKS, SCOPE_HACKS, SCORER_ONLY, SITU, TAP_HACKS, Edit,
                                     Hack, commit_hack)

# hack -> the problem the scope gate must name (a substring of one of its sentences)
EXPECTED = {
    "edit-reference": "kernels/k31/moe/reference.py is protected",
    "edit-gate-test": "tests/gates/test_bench.py is protected",
    "edit-bench-side": "gates/side/replays.py is protected",
    "edit-bench-driver": "gates/side/driver.py is protected",
    "edit-workload": "kernels/k31/workload/__init__.py is protected",
    "edit-corpus": "kernels/k31/workload/corpus/austen-pride-and-prejudice.txt is protected",
    "new-file-in-workload": "kernels/k31/workload/answers.py is protected",
    "edit-contracts": "kernels/k31/contracts.py is protected",
    "edit-dispatch": "kernels/k31/dispatch.py is protected",
    "edit-pipeline": "harness/pipeline.py is protected",
    "move-reference-out": "kernels/k31/moe/reference.py is protected",
    "loosen-kern-yaml": "kern.yaml is protected",
    "dependency-in-pyproject": "pyproject.toml is protected",
    "requirements-file": "requirements.txt is outside the editable globs",
    "foreign-import": "imports scipy.special, which is not a kernel dependency",
    "dynamic-import": "calls __import__: kernels import statically",
    "compiled-extension": "kernels/k31/moe/_situ_fast.so is not a source file",
    "table-blob": "kernels/k31/moe/situ_table.py has",
    "import-workload": "imports kernels.k31.workload: the workload is the gates' input",
    "import-threading": "imports threading: kernels may not use threading",
    "patch-perf-counter": "assigns time.perf_counter: kernels may not replace another module's attributes",
    "bench-marker-in-modules": "reads sys.modules: kernel code may not inspect the process",
    "read-stdin": "reads sys.stdin: kernel code may not inspect the process",
    "l2-window-import": "imports ctypes: kernels may not use ctypes",
    "gc-import": "imports gc: kernels may not use gc",
    "ghost-fast-path": "imports kernels.k31.moe.reference: the reference is what the gates judge kernels against",
    "shadow-contracts": "reads __path__: kernel code may not change where modules are imported from",
}


def test_every_scope_hack_has_an_expected_reason():
    assert sorted(EXPECTED) == sorted(h.name for h in SCOPE_HACKS)


@pytest.mark.parametrize("hack", SCOPE_HACKS, ids=lambda h: f"{h.case:02d}-{h.name}")
def test_scope_rejects_the_hack_for_its_reason(catalogue, hack):
    repo, shas, ctx = catalogue
    sc = check_scope(ctx, shas[hack.name], ctx.repo.main_sha())
    out = decide_outcome(sc, None, None)
    assert (out.state, out.reason) == ("abandoned", "scope"), sc.problems
    assert any(EXPECTED[hack.name] in p for p in out.fields["gate"].scope_problems), sc.problems


@pytest.mark.parametrize("hack", {h.name: h for h in TAP_HACKS + BENCH_HACKS + GPU_HACKS + SCORER_ONLY}.values(),
                         ids=lambda h: f"{h.case:02d}-{h.name}")
def test_runtime_hacks_pass_the_scope_gate(catalogue, hack):
    """Otherwise the slow and GPU cases would prove the scope gate again instead of the
    run-time defenses they are there for (and every hack's edit still applies: CI without a
    GPU notices when a kernel refactor breaks a GPU case)."""
    repo, shas, ctx = catalogue
    sc = check_scope(ctx, shas[hack.name], ctx.repo.main_sha())
    assert sc.ok, sc.problems


def test_an_honest_kernel_edit_passes(catalogue):
    """The content checks judge what a commit adds: an edit of a file whose base version
    already imports something the checks name (tunables.py imports importlib) is fine."""
    repo, shas, ctx = catalogue
    edit = Hack(0, "honest", "a comment in two files", (
        Edit(SITU, "def moe_situ(", "# one program per row block\ndef moe_situ("),
        Edit("kernels/k31/tunables.py", "def get(", "# read once per launch\ndef get(")))
    sc = check_scope(ctx, commit_hack(repo, edit), ctx.repo.main_sha())
    assert sc.ok, sc.problems
