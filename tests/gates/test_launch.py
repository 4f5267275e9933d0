"""What a candidate can do to a gate's side process, and what it can see there (CPU).

Pure: how a side's end is classified, the CPU sides' memory cap, the environment a side gets.
Real (slow): candidate trees that segfault, allocate more than the cap or never return inside
kern bench's sides, and that print their environment inside kern test's and kern bench's sides:
no API key, no fault-injection switch; one that hides the GPU at import ends its side on the
environment instead of being timed on the CPU. The candidates misbehave at import of ``kernels.k31``,
before any model is built, so each side costs little more than its interpreter's start.
"""
from __future__ import annotations

import dataclasses
import json
import re
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from gates.accuracy import run_test
from gates.launch import process as launch
from gates.requests import Placement
from gates.rules.scope import ScopeResult
from gates.scorer import run_bench
from harness import faults
from harness.pipeline import accuracy_request, bench_request
from harness.pipeline import decide_outcome
from harness.settings import load
from harness.terminal import scorer_report
from tests.gates.candidates import candidate, make_repo, side_dumps

SECRETS = {"ANTHROPIC_API_KEY": "sk-ant-kern-test-secret", "OPENAI_API_KEY": "sk-openai-kern-test",
           "GITHUB_TOKEN": "ghp_kerntestsecret", "AWS_SECRET_ACCESS_KEY": "aws-kern-test-secret",
           "HF_TOKEN": "hf_kerntestsecret", faults.VARIABLE: "notes"}
CPU_OOM = ("RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
           "allocate memory: you tried to allocate 70368744177664 bytes. Error code 12 (Cannot "
           "allocate memory)")


# --------------------------------------------------------------------------- pure
@pytest.mark.parametrize("returncode,timed_out,tail,kind", [
    (1, False, "Traceback (most recent call last):\n" + CPU_OOM, "out of memory"),
    (1, False, "Traceback (most recent call last):\nMemoryError", "out of memory"),
    (1, False, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out of memory"),
    (-signal.SIGSEGV, False, "", "crash (signal SIGSEGV)"),
    (-signal.SIGKILL, True, "", "timeout"),
    (1, False, "Traceback (most recent call last):\nValueError: bad", "error"),
    (1, False, "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx(",
     "cuda-fault"),  # the H200's words for a wild read in an earlier Triton kernel
    (1, False, "RuntimeError: CUDA error: an illegal memory access was encountered",
     "illegal-memory-access"),
    (0, False, "", "ok"),
])
def test_a_sides_end_is_named(returncode, timed_out, tail, kind):
    assert launch.classify(returncode, timed_out, tail) == kind


def test_an_error_a_side_answered_with_is_named():
    assert launch.reply_kind(CPU_OOM) == "out of memory"  # a bench side catches and answers
    assert launch.reply_kind("ValueError: bad bucket") == "error"


def test_cpu_sides_get_half_the_memory_and_cuda_sides_no_cap():
    assert launch.memory_limit(False, 8 << 30) == 4 << 30
    assert launch.memory_limit(True, 8 << 30) is None  # CUDA reserves more address space than RAM
    assert launch.memory_limit(False, 0) is None  # unknown RAM: no cap rather than a wrong one


def test_a_sides_environment_holds_no_secret(monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    env = launch.side_env(Placement())
    assert not set(SECRETS) & set(env) and not set(SECRETS.values()) & set(env.values())
    assert env["PATH"] and env["PYTHONHASHSEED"] == "0"


# --------------------------------------------------------------------------- real sides
# prepended to kernels/k31/__init__.py: the first candidate code a side runs
PRINT_ENV = ("import json as _j, os as _o, resource as _r, sys as _s\n"
             "_s.stderr.write('KERN-ENV ' + _j.dumps({'env': dict(_o.environ), "
             "'rlimit_as': _r.getrlimit(_r.RLIMIT_AS)}) + '\\n')\n_s.stderr.flush()\n")
INIT = "kernels/k31/__init__.py"
CANDIDATES = {
    "segfault": PRINT_ENV + "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    # three quarters of the machine: lazily allocated this would succeed; the cap refuses it
    "oom": PRINT_ENV + "import os, torch\ntorch.empty(os.sysconf('SC_PAGE_SIZE') * "
                       "os.sysconf('SC_PHYS_PAGES') * 3 // 4, dtype=torch.uint8)\n",
    "hang": PRINT_ENV + "import time\nwhile True:\n    time.sleep(1)\n",
}


def dumps(root) -> list[dict]:
    """Every environment a candidate printed in a side's log under ``root``."""
    return side_dumps(root, "KERN-ENV")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("sides"))
    shas = {name: candidate(repo, name, [(INIT, "", text)]) for name, text in CANDIDATES.items()}
    cuda = torch.cuda.is_available()
    cfg = load(repo / "kern.yaml").resolve(cuda)
    # the hanging side is given 3 s (any limit ends the same way); the others finish at once
    quick = dataclasses.replace(cfg, bench=dataclasses.replace(cfg.bench, timeout_s=3))

    def bench(name, cfg=cfg):
        return run_bench(bench_request(cfg, repo, shas[name], shas[name], repo / "runs", cuda),
                         progress=lambda m: None).report

    def test(name):
        return run_test(accuracy_request(cfg, repo, shas[name], shas[name], repo / "runs", cuda)).report

    with pytest.MonkeyPatch.context() as mp:  # what the orchestrator's own process may hold
        for k, v in SECRETS.items():
            mp.setenv(k, v)
        with ThreadPoolExecutor(2) as pool:
            jobs = {"bench segfault": pool.submit(bench, "segfault"),
                    "bench oom": pool.submit(bench, "oom"),
                    "bench hang": pool.submit(bench, "hang", quick),
                    "test segfault": pool.submit(test, "segfault")}
            return repo, {k: f.result() for k, f in jobs.items()}


def _pass():
    return {"verdict": "PASS bit-identical", "reasons": [], "evidence": {"outcome_a": "ok", "outcome_b": "ok"}}


@pytest.mark.slow
def test_a_segfault_in_the_scorer_is_a_recorded_crash(ran):
    res = ran[1]["bench segfault"]
    assert res["outcome"] == "crash (signal SIGSEGV)", res.get("error")
    assert scorer_report(res)[-1].startswith("FAILED     crash (signal SIGSEGV)")
    out = decide_outcome(ScopeResult(True), _pass(), res)
    assert (out.state, out.reason) == ("crashed", "scorer: crash (signal SIGSEGV)")


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the cap is for CPU sides")
def test_an_impossible_allocation_ends_the_side_out_of_memory_under_its_cap(ran):
    res = ran[1]["bench oom"]
    assert res["outcome"] == "out of memory", res.get("error")
    assert "can't allocate memory" in res["error"]
    out = decide_outcome(ScopeResult(True), _pass(), res)
    assert (out.state, out.reason) == ("crashed", "scorer: out of memory")
    cap = launch.memory_limit(False, launch._physical_memory())
    # every side ran under the cap, soft and hard alike: candidate code cannot lift it
    assert {tuple(d["rlimit_as"]) for d in dumps(ran[0] / "runs")} == {(cap, cap)}


@pytest.mark.slow
def test_a_side_that_never_returns_is_stopped_at_the_timeout(ran):
    res = ran[1]["bench hang"]
    assert res["outcome"] == "timeout" and "no answer within 3s" in res["error"], res.get("error")
    assert res["wall_s"] < 30
    out = decide_outcome(ScopeResult(True), _pass(), res)
    assert (out.state, out.reason) == ("timed out", "scorer timeout")


@pytest.mark.slow
def test_candidate_code_in_kern_test_and_kern_bench_sees_no_secret(ran):
    repo, res = ran
    assert res["test segfault"]["evidence"]["outcome_a"] == "crash (signal SIGSEGV)"
    seen = dumps(repo / "runs")
    where = {re.sub(r"^.*/runs/(\w+)/.*$", r"\1", d["log"]) for d in seen}
    # both gates' sides printed, and the compile side of each base (its code is a commit's too)
    assert where == {"tap", "bench", "compiled"}, [d["log"] for d in seen]
    for d in seen:
        env = d["env"]
        assert "PATH" in env, d["log"]  # the dump is real
        leaked = set(SECRETS) & set(env) | set(SECRETS.values()) & set(env.values())
        assert not leaked, f"{d['log']}: {leaked}"


@pytest.mark.slow
def test_a_candidate_that_hides_the_gpu_at_import_ends_its_side_on_the_environment(tmp_path, monkeypatch):
    """A side that finds no GPU where the gates see one fails instead of running on the CPU (a
    sandbox that hides the GPU, or a candidate that does at import, as this one). On the CPU the
    gates are told they see a GPU; on a GPU they do."""
    from gates.protocol import EXPECTS_CUDA

    repo = make_repo(tmp_path)
    sha = candidate(repo, "hide-gpu", [(INIT, "", "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = ''\n")])
    if not torch.cuda.is_available():
        real = launch.side_env
        monkeypatch.setattr(launch, "side_env", lambda place, extra=None: {**real(place, extra), EXPECTS_CUDA: "1"})
    cfg = load(repo / "kern.yaml").resolve(False)
    res = run_bench(bench_request(cfg, repo, sha, sha, repo / "runs", False),
                    progress=lambda m: None).report
    assert res["outcome"] != "ok"
    assert "the gates see a GPU but this side sees none (expected CUDA, got CPU)" in res["error"], res["error"]
