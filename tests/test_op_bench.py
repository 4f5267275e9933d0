"""bench/tools/op_bench.py: which calls it takes, how it names a result, and one run of its
mechanics on the CPU (a candidate tree that changes an op is checked and timed beside main's;
one that does not is main)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from bench.tools import op_bench

ROOT = Path(__file__).resolve().parents[1]


@given(st.integers(0, 300), st.integers(1, 40))
def test_spread_takes_k_calls_first_and_last_included(n, k):
    idx = op_bench.spread(n, k)
    assert idx == sorted(set(idx)) and all(0 <= i < n for i in idx)
    assert len(idx) == min(n, k) or (k > 1 and len(idx) <= k)
    if n and k > 1:
        assert idx[0] == 0 and idx[-1] == n - 1


def test_variants_need_main_and_name_dir():
    with pytest.raises(SystemExit, match="main=DIR"):
        op_bench.parse_variants(["cand=/x"])
    with pytest.raises(SystemExit, match="NAME=DIR"):
        op_bench.parse_variants(["main"])
    assert op_bench.parse_variants(["main=/a", "c=/b"]) == {"main": Path("/a"), "c": Path("/b")}


def test_a_changed_op_is_checked_and_timed_beside_main(tmp_path):
    for name in ("main", "cand", "same"):
        (tmp_path / name).mkdir()
        tar = subprocess.run(["git", "archive", "HEAD", "kernels/k31"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tmp_path / name), "--strip-components=2"], input=tar.stdout, check=True)
    topk = tmp_path / "cand" / "mla" / "topk.py"
    topk.write_text(topk.read_text() + "\n# a candidate's change\n")
    out = tmp_path / "ops.json"
    r = subprocess.run([sys.executable, "bench/tools/op_bench.py", "--op", "mla.topk", "--op", "moe.experts", "--rows", "2",
                        "--calls", "2", "--variant", f"main={tmp_path / 'main'}", "--variant",
                        f"cand={tmp_path / 'cand'}", "--variant", f"same={tmp_path / 'same'}", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    entry = json.loads(out.read_text())["ops"]["mla.topk"]["2"]
    assert set(entry["variants"]) == {"main", "cand"}  # 'same' did not change the op
    assert all(v["check"] == "bit-identical" and v["ms_per_call"] > 0 for v in entry["variants"].values())
    assert entry["calls"] == 2 and entry["calls_in_step"] >= 2
    # the experts leave rows of other ranks' pairs unwritten by contract: main is main, not 'unwritten'
    experts = json.loads(out.read_text())["ops"]["moe.experts"]["2"]["variants"]
    assert set(experts) == {"main"} and experts["main"]["check"] == "bit-identical"


def test_a_tunables_only_candidate_changes_the_op(tmp_path):
    from kernels.k31 import contracts
    spec = contracts.OPS["moe.experts"]
    assert op_bench.op_files(spec) == ["moe/experts.py", "moe/group.py", "moe/tunables.py"]
    tar = subprocess.run(["git", "archive", "HEAD", "kernels/k31"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp_path), "--strip-components=2"], input=tar.stdout, check=True)
    assert not op_bench.sources_differ(spec, tmp_path)
    tun = tmp_path / "moe" / "tunables.py"
    tun.write_text(tun.read_text().replace('"moe.experts.fc2_k_tiles": (2,', '"moe.experts.fc2_k_tiles": (1,'))
    assert op_bench.sources_differ(spec, tmp_path)
    assert not op_bench.sources_differ(contracts.OPS["mla.topk"], tmp_path)


@pytest.mark.gpu
def test_a_captured_graph_keeps_the_tensors_it_writes_alive():
    """The graph of a closure outlives the caller's names for its tensors: replays after they are
    dropped and their memory could be reused still write the graph's own output."""
    import gc
    import weakref

    import torch

    from bench.tools.experts_bench import graph_of

    dev = torch.device("cuda")
    x, y = torch.arange(1 << 20, device=dev, dtype=torch.float32), torch.empty(1 << 20, device=dev)
    g = graph_of(lambda: torch.mul(x, 2, out=y), dev)
    alive = weakref.ref(y)
    del x, y
    gc.collect()
    others = [torch.full((1 << 20,), 7.0, device=dev) for _ in range(8)]  # what freed memory would hold
    g.replay()
    torch.cuda.synchronize()
    assert alive() is not None and torch.equal(alive(), torch.arange(1 << 20, device=dev, dtype=torch.float32) * 2)
    assert all(bool((o == 7).all()) for o in others)
