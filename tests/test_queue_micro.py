"""bench/tools/queue_micro.py: which ops a queued patch changes, how the queue splits into one
op_bench process per family, and the queue applied as the replay backend would hand it out."""
from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given, strategies as st

from bench.tools import op_bench, queue_micro
from bench.tools.queue_micro import QueuedPatch
from kernels.k31 import contracts

ROOT = Path(__file__).resolve().parents[1]
FILES = {op: tuple(op_bench.op_files(s)) for op, s in contracts.OPS.items()}
FAMILY = {op: s.family for op, s in contracts.OPS.items()}


def test_changed_lines_reads_every_file_of_a_diff():
    diff = ("From x\nSubject: s\n\ndiff --git a/kernels/k31/moe/experts.py b/kernels/k31/moe/experts.py\n"
            "--- a/kernels/k31/moe/experts.py\n+++ b/kernels/k31/moe/experts.py\n@@ -1 +1 @@\n-x\n+y\n ctx\n"
            "diff --git a/kernels/k31/dense/tunables.py b/kernels/k31/dense/tunables.py\n")
    assert queue_micro.changed_lines(diff) == {"kernels/k31/moe/experts.py": "x\ny",
                                               "kernels/k31/dense/tunables.py": ""}


def changes(*paths, text=""):
    return {p: text for p in paths}


def test_ops_changed_by_source_and_by_the_knobs_a_tunables_diff_names():
    assert queue_micro.ops_changed(changes("kernels/k31/moe/experts.py"), FILES) == ("moe.experts",)
    assert queue_micro.ops_changed(changes("kernels/k31/moe/group.py"), FILES) == ("moe.experts",)
    named = changes("kernels/k31/mla/tunables.py", text='    "mla.index_logits.block_t": (64, (32, 64)),')
    assert queue_micro.ops_changed(named, FILES) == ("mla.index_logits",)
    assert queue_micro.ops_changed(changes("kernels/k31/mla/tunables.py", text="# a comment"), FILES) == (
        "mla.absorb", "mla.index_logits", "mla.prep", "mla.sparse_decode", "mla.topk", "mla.vup_gate")
    dense = queue_micro.ops_changed(changes("kernels/k31/dense/linear.py", "kernels/k31/dense/tunables.py",
                                            text='"dense.linear.max_k": (4608, (0,)),'), FILES)
    assert dense and all(FAMILY[op] == "dense" for op in dense)
    assert queue_micro.ops_changed(changes("README.md", "kernels/k31/config.py"), FILES) == ()


@given(st.lists(st.sampled_from(sorted({f for fs in FILES.values() for f in fs})), max_size=4),
       st.booleans())
def test_plan_runs_every_applied_patch_once_per_family_it_changes(rels, applied):
    q = [QueuedPatch("030-x.patch", "p" if applied else None, changes(*("kernels/k31/" + r for r in rels))),
         QueuedPatch("031-y.patch", "p", changes("kernels/k31/moe/experts.py"))]
    runs = queue_micro.plan(q, FILES, FAMILY)
    fams = [r.family for r in runs]
    assert len(fams) == len(set(fams))
    changed = {FAMILY[op] for op in queue_micro.ops_changed(q[0].changes, FILES)} if applied else set()
    assert {r.family for r in runs if "030-x.patch" in r.patches} == changed
    moe = next(r for r in runs if r.family == "moe")
    assert "031-y.patch" in moe.patches and "moe.experts" in moe.ops
    for r in runs:
        assert r.ops == ("dense",) or all(FAMILY[op] == r.family for op in r.ops)


def test_the_queue_applies_each_patch_or_its_onto_main_variant(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-B", "main"], check=True)
    names = ["008-moe.experts-single-scale-multiply.patch", "013-moe.experts-fc2-padding-rows-shared.patch"]
    q = queue_micro.apply_queue(repo, names, tmp_path / "work")
    assert [p.applied for p in q] == ["bench/journey/patches/" + names[0],
                                      "bench/journey/patches/onto-main/" + names[1]]
    assert all(p.paths == ("kernels/k31/moe/experts.py",) for p in q)
    for p in q:  # the worktree holds main plus that patch, nothing else
        wt = tmp_path / "work" / queue_micro.variant_name(p.name)
        changed = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=wt, capture_output=True,
                                 text=True, check=True).stdout.split()
        assert changed == ["kernels/k31/moe/experts.py"]


def _doc(ops: dict) -> dict:
    """An op_bench document: op -> rows -> variant -> (ms per step, check) or an error string."""
    return {"ops": {op: {rows: {"variants": {v: ({"error": x} if isinstance(x, str) else
                                                  {"ms_per_step": x[0], "check": x[1]})
                                             for v, x in vs.items()}}
                         for rows, vs in per.items()} for op, per in ops.items()}}


def test_the_summary_sums_each_patchs_ops_and_says_what_never_ran():
    same, differs = "bit-identical", "differs: rel_rms 1e-7, max ulp 3"
    queue = [QueuedPatch("030-a.patch", "p", changes("kernels/k31/moe/situ.py", "kernels/k31/moe/norm.py")),
             QueuedPatch("031-b.patch", "p", changes("kernels/k31/moe/experts.py")),
             QueuedPatch("032-c.patch", None, {}, "both failed"),
             QueuedPatch("033-d.patch", "p", changes("kernels/k31/kda/conv.py"))]
    families = {
        "moe": {"patches": ["030-a.patch", "031-b.patch"], "rc": 1, "op_bench": None, "alone": {
            "030-a.patch": {"op_bench": _doc({
                "moe.situ": {"16": {"main": (1.0, same), "p030": (0.75, same)}},
                "moe.latent_norm": {"16": {"main": (0.5, same), "p030": (0.25, same)}}})},
            "031-b.patch": {"op_bench": _doc({
                "moe.experts": {"16": {"main": (10.0, same), "p031": (10.5, differs)},
                                "64": {"main": (20.0, same), "p031": "RuntimeError: boom"}}})}}},
        "kda": {"patches": ["033-d.patch"], "rc": "timeout", "op_bench": None}}
    a, b, c, d = queue_micro.summarize(queue, families)
    assert (a.saved_ms, a.identical, a.errors) == ({"16": 0.5}, True, ())
    assert (b.saved_ms, b.identical) == ({"16": -0.5}, False)
    assert b.errors == ("moe.experts at 64 rows: RuntimeError: boom",)
    assert c.errors == ("did not apply: both failed",) and not c.saved_ms
    assert "no op of it was timed" in d.errors[0] and not d.identical
    table = queue_micro.summary_table([a, b, c, d])
    assert "+0.500" in table and "-0.500" in table and "did not apply" in table


def test_the_result_names_the_gpu_and_versions_its_op_bench_processes_ran_on():
    env = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "python": "3.12"}
    families = {"moe": {"patches": ["p"], "op_bench": None},  # its process wrote nothing
                "mla": {"patches": ["q"], "op_bench": {"environment": env}}}
    assert queue_micro.measured_on(families) == {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130",
                                                 "triton": "3.6.0"}
    assert all(v.startswith("not measured") for v in queue_micro.measured_on({"moe": families["moe"]}).values())
