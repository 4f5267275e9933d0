"""The hidden inputs reach a real side over its stdin, after the tree is imported, and nowhere
else (CPU, small model, Triton interpreter).

The candidate's ``kernels/k31/__init__.py`` (the first tree code a side runs) dumps to its log
what a kernel could read at import: its environment, its command line, the spec file the
command line names, and whatever is waiting on its stdin. The same commit is both sides of
``kern test`` and ``kern bench`` (so every side process dumps); each run is handed one
``Hidden``, and its sides' results show that they decoded its input seed and ran its extra
batch sizes, while no dump holds either.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from gates.accuracy import run_test
from harness.terminal import accuracy_report
from gates.scorer import run_bench
from harness.pipeline import accuracy_request, bench_request
from gates.protocol import Hidden
from harness.settings import load
from tests.gates.candidates import candidate, make_repo, side_dumps

pytestmark = pytest.mark.slow

DUMP = ("import json as _j, os as _o, sys as _s\n"
        "_argv = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "_spec = open(_argv[_argv.index(b'--spec') + 1].decode()).read()\n"
        "_o.set_blocking(0, False)\n"
        "try:\n    _waiting = _o.read(0, 1 << 16).decode()\nexcept BlockingIOError:\n    _waiting = None\n"
        "_o.set_blocking(0, True)\n"
        "_s.stderr.write('KERN-DUMP ' + _j.dumps({'env': dict(_o.environ), 'argv': [a.decode() for a in _argv],"
        " 'spec': _spec, 'stdin': _waiting}) + '\\n')\n_s.stderr.flush()\n")
SETTINGS = {"profiles.cpu.test_rows": [1, 8], "profiles.cpu.test_steps": 1, "profiles.cpu.buckets": [8],
            "profiles.cpu.weights": [1], "test.timeout_s": 400, "bench.timeout_s": 400}
HIDDEN = Hidden(2718281828, (5, 6))  # sizes 2..7 qualify; a seed no kern.yaml or path holds


def dumps(root) -> list[dict]:
    return side_dumps(root, "KERN-DUMP")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("channel"), SETTINGS)
    sha = candidate(repo, "dumps", [("kernels/k31/__init__.py", "", DUMP)])
    cuda = torch.cuda.is_available()
    cfg = load(repo / "kern.yaml").resolve(cuda)
    with ThreadPoolExecutor(2) as pool:
        test = pool.submit(run_test, accuracy_request(cfg, repo, sha, sha, repo / "runs", cuda,
                                                      hidden=HIDDEN))
        bench = pool.submit(run_bench, bench_request(cfg, repo, sha, sha, repo / "runs", cuda,
                                                     rounds=1, replays=1, hidden=HIDDEN),
                            progress=lambda m: None)
        return repo, test.result().report, bench.result().report


def test_the_sides_ran_the_hidden_inputs(ran):
    repo, test, bench = ran
    assert test["verdict"] == "PASS bit-identical", test["reasons"]
    assert test["rows"] == [1, 8, 5, 6] and test["spec"]["rows"] == [1, 8]
    record = json.loads((repo / "runs" / "tap").glob("*/record.json").__next__().read_text())
    assert record["workload"]["seed"] == HIDDEN.input_seed and record["rows"] == [1, 8, 5, 6]
    assert sorted(record["pass"]["runs"]) == ["r1", "r5", "r6", "r8"]
    assert test["evidence"]["logits"]["rows"] == 1 + 8 + 5 + 6  # one step at each size
    assert accuracy_report(test)[-2] == ("hidden     input seed 2718281828, extra batch sizes 5, 6 "
                                      "(drawn for this judgment)")
    assert bench["outcome"] == "ok", bench.get("error")
    assert bench["workload"]["seed"] == HIDDEN.input_seed and bench["hidden"] == HIDDEN.to_dict()


def test_no_side_could_read_them_at_import(ran):
    repo, _, _ = ran
    seen = dumps(repo / "runs")
    kinds = sorted({d["log"].split("/runs/")[1].split("/")[0] for d in seen})
    # A, B of each gate, and the compile side that made main's compiled cache (issue 34)
    assert kinds == ["bench", "compiled", "tap"] and len(seen) >= 5, [d["log"] for d in seen]
    for d in seen:
        assert "PATH" in d["env"] and "--spec" in d["argv"] and d["spec"], d["log"]  # the dump is real
        visible = json.dumps({k: d[k] for k in ("env", "argv", "spec")})
        assert str(HIDDEN.input_seed) not in visible, d["log"]
        assert d["stdin"] is None, (d["log"], d["stdin"])  # nothing was waiting on stdin yet
        spec = json.loads(d["spec"])
        assert not {"hidden", "input_seed", "extra_rows"} & set(spec), (d["log"], sorted(spec))
        assert spec["rows"] in ([1, 8], [8]), (d["log"], spec["rows"])  # the visible sizes alone
        assert spec["seed"] == 0  # kern.yaml's target seed: weights and caches
