"""``kern doctor``: each decision over plain probe data, then the verb on a temporary
repository (no network, no GPU needed)."""
from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml

from gates.rules.footprint import JudgmentBytes
from harness import cli
from harness import ledger as L
from harness.cli import doctor as D
from tests.gates.candidates import make_repo

ROOT = Path(__file__).resolve().parents[2]
H200 = {"name": "NVIDIA H200", "total_bytes": 140 * D.GIB, "free_bytes": 139 * D.GIB}
SMI_ROW = {"index": "0", "name": "NVIDIA H200", "clocks.sm": "1980", "clocks.max.sm": "1980",
           "clocks.mem": "3201", "clocks_event_reasons.active": "0x0000000000000001",
           "persistence_mode": "Enabled", "temperature.gpu": "46"}
GPU = {"devices": [H200], "torch": "2.11.0+cu130", "cuda": "13.0", "visible": None}
NO_GPU = {"devices": [], "torch": "2.13.0+cpu", "cuda": None, "visible": None}


def test_gpu_visible_absent_or_hidden_from_torch():
    f = D.gpu_finding(GPU, {"present": True, "gpus": [SMI_ROW]})
    assert f.status == D.OK and "1 x NVIDIA H200 visible to torch 2.11.0+cu130" in f.text
    f = D.gpu_finding(NO_GPU, {"present": False})
    assert f.status == D.WARN and "cpu profile" in f.text and f.fix.startswith("operator:")
    f = D.gpu_finding({**NO_GPU, "visible": ""}, {"present": True, "gpus": [SMI_ROW]})
    assert f.status == D.FAIL and "nvidia-smi lists 1 GPU(s)" in f.text and "torch 2.13.0+cpu sees none" in f.text
    assert "CUDA_VISIBLE_DEVICES=)" in f.text and "CUDA build of torch" in f.fix


@pytest.mark.parametrize("reasons,persistence,status,words", [
    ("0x0000000000000001", "Enabled", D.OK, "not throttled, persistence on"),  # idle is normal
    ("0x0000000000000044", "Enabled", D.WARN, "GPU 0 throttled: software power cap, hardware thermal slowdown"),
    ("0x0000000000000000", "Disabled", D.WARN, "GPU 0 persistence mode off"),
])
def test_clocks_warn_on_throttling_and_persistence_off(reasons, persistence, status, words):
    row = {**SMI_ROW, "clocks_event_reasons.active": reasons, "persistence_mode": persistence}
    f = D.clock_finding(GPU, {"present": True, "gpus": [row]})
    assert f.status == status and words in f.text
    assert (status == D.OK) == (f.fix == "")


def test_clocks_without_nvidia_smi():
    assert D.clock_finding(GPU, {"present": False}).status == D.WARN
    assert D.clock_finding(NO_GPU, {"present": False}).status == D.OK
    assert D.throttle_reasons("0x8") == ["hardware slowdown"] and D.throttle_reasons("N/A") == []


def test_free_gpu_memory_against_the_profile():
    assert D.memory_finding(GPU, 90).status == D.OK
    low = {**GPU, "devices": [{**H200, "free_bytes": 40 * D.GIB}]}
    f = D.memory_finding(low, 90)
    assert f.status == D.FAIL and "40.0 GiB free, the gpu profile needs 90 GiB" in f.text
    assert D.memory_finding(GPU, None).status == D.WARN
    assert D.memory_finding(NO_GPU, 90).status == D.OK


def test_git_state():
    assert D.git_finding({"branch": "main", "has_main": True, "dirty": []}).status == D.OK
    assert D.git_finding({"error": "not a git repository"}).status == D.FAIL
    f = D.git_finding({"branch": "main", "has_main": False, "dirty": []})
    assert f.status == D.FAIL and "git branch main" in f.fix
    f = D.git_finding({"branch": None, "has_main": True, "dirty": [" M kernels/k31/moe/situ.py"]})
    assert f.status == D.WARN
    assert f.text == "1 uncommitted change(s) (kernels/k31/moe/situ.py); HEAD is detached, not 'main'"
    assert f.fix.startswith("operator: commit or stash them") and "git checkout main" in f.fix


def test_worktrees_left_by_finished_attempts():
    g = {"attempt_worktrees": [{"number": 3, "path": "/r/runs/worktrees/attempt-3"},
                               {"number": 4, "path": "/r/runs/worktrees/attempt-4"}], "prunable": []}
    assert D.worktree_finding(g, {3, 4}).status == D.OK
    f = D.worktree_finding(g, {4})
    assert f.status == D.WARN and f.text.endswith("left: attempt-3") and "git worktree remove" in f.fix
    f = D.worktree_finding({"attempt_worktrees": [], "prunable": ["/gone"]}, set())
    assert f.status == D.WARN and "git worktree prune" in f.fix


def test_disk_free_against_what_one_judgment_writes():
    need = JudgmentBytes(logits=1 * D.GIB, kept=24 * D.GIB, tap=28 * D.GIB, scorer=4 * D.GIB)
    assert need.need == int(28 * D.GIB * 1.1)  # the tap's peak and its margin
    ok = D.disk_finding({"path": "/r/runs", "free_bytes": 200 * D.GIB}, need)
    assert ok.status == D.OK and ok.text == "200.0 GiB free under /r/runs; one judgment writes up to 30.8 GiB"
    assert D.disk_finding({"path": "/r/runs", "free_bytes": 62 * D.GIB}, need).status == D.OK
    assert D.disk_finding({"path": "/r/runs", "free_bytes": 60 * D.GIB}, need).status == D.WARN
    f = D.disk_finding({"path": "/r/runs", "free_bytes": 10 * D.GIB}, need)
    assert f.status == D.FAIL and f.text.startswith("10.0 GiB free under /r/runs; one judgment writes "
                                                    "up to 30.8 GiB (tap 28.0 GiB: main's kept calls up "
                                                    "to 24.0 GiB")
    assert "environment: disk" in f.fix and f.fix.startswith("operator: ")


def test_the_disk_need_follows_the_configured_workload():
    """kern.yaml's own profiles: the GPU's full model may fill the snapshot budget, the CPU
    demo's small model keeps its measured recording_mb (8 MiB), so a CPU machine with a few
    GiB free is fine for the demo; a measured figure never goes past the budget."""
    from gates.rules.footprint import judgment_bytes

    from harness.settings import load

    g, c = load(ROOT / "kern.yaml").resolve(True), load(ROOT / "kern.yaml").resolve(False)
    gpu = judgment_bytes(g.machine, g.test, g.bench)
    cpu = judgment_bytes(c.machine, c.test, c.bench)
    assert gpu.kept == int(g.test.snapshot_budget_mb) << 20
    assert cpu.kept == 8 << 20 and cpu.need < 1 * D.GIB
    assert D.disk_finding({"path": "/r/runs", "free_bytes": 5 * D.GIB}, cpu).status == D.OK
    assert D.disk_finding({"path": "/r/runs", "free_bytes": 5 * D.GIB}, gpu).status == D.FAIL
    big = dataclasses.replace(c.machine, recording_mb=10 ** 6)
    assert judgment_bytes(big, c.test, c.bench).kept == gpu.kept


@pytest.mark.parametrize("probe,status,words", [
    ({"exists": True, "journal_mode": "wal", "integrity": "ok"}, D.OK, "WAL, writable"),
    ({"exists": False, "journal_mode": "wal"}, D.OK, "not created yet"),
    ({"exists": True, "journal_mode": "delete"}, D.FAIL, "not WAL"),
    ({"exists": True, "journal_mode": "wal", "locked": True}, D.WARN, "holds the write lock"),
    ({"exists": True, "journal_mode": "wal", "integrity": "*** page 3 is never used"}, D.FAIL, "page 3"),
    ({"exists": True, "error": "cannot open it as a kern-loop ledger"}, D.FAIL, "cannot open"),
])
def test_ledger(probe, status, words):
    f = D.ledger_finding({"path": "/r/runs/ledger.sqlite", **probe})
    assert f.status == status and words in f.text


@pytest.mark.parametrize("backend,probe,status,words", [
    ("anthropic", {"key": False}, D.FAIL, "no ANTHROPIC_API_KEY"),
    ("anthropic", {"key": True, "url": D.DEFAULT_API, "checked": False}, D.OK, "not contacted"),
    ("anthropic", {"key": True, "url": D.DEFAULT_API, "checked": True, "net_error": "timed out"},
     D.FAIL, "unreachable: timed out"),
    ("anthropic", {"key": True, "url": D.DEFAULT_API, "checked": True, "status": 200}, D.OK,
     "accepted it (HTTP 200)"),
    ("anthropic", {"key": True, "url": D.DEFAULT_API, "checked": True, "status": 401,
                   "message": "invalid x-api-key"}, D.FAIL, "refused the key (HTTP 401: invalid x-api-key)"),
    ("anthropic", {"key": True, "url": D.DEFAULT_API, "checked": True, "status": 404}, D.WARN,
     "answered HTTP 404"),
    ("claude-code", {"sdk": False}, D.FAIL, "not importable"),
    ("claude-code", {"sdk": True, "key": False}, D.FAIL, "importable; no ANTHROPIC_API_KEY"),
    ("claude-code", {"sdk": True, "key": True, "url": D.DEFAULT_API, "checked": True, "status": 200},
     D.OK, "importable; key present; https://api.anthropic.com accepted it"),
    ("command", {"command": "", "program": None}, D.FAIL, "agent.command is empty"),
    ("command", {"command": "aider --yes", "program": "aider", "found": None}, D.FAIL,
     "'aider' (of 'aider --yes') is not an executable on PATH"),
    ("command", {"command": "sh a.sh", "program": "sh", "found": "/bin/sh"}, D.OK, "sh is /bin/sh"),
    ("tuner", {}, D.OK, "offline"),
    ("replay", {}, D.OK, "offline"),
])
def test_agent_backend(backend, probe, status, words):
    f = D.agent_finding(backend, probe)
    assert f.status == status and words in f.text, f
    assert (status == D.OK) == (f.fix == "")


def test_command_program():
    assert D.command_program("exec sh /tmp/agent.sh") == "sh"
    assert D.command_program("FOO=1 env aider --yes") == "aider"
    assert D.command_program("/opt/bin/agent -q") == "/opt/bin/agent"
    assert D.command_program("") is None


def test_lines_give_each_fix_and_the_count():
    findings = [D.Finding("gpu", D.OK, "1 x H200"), D.Finding("disk", D.FAIL, "1 GiB free", "operator: free space")]
    assert D.lines(findings) == [
        "ok    gpu         1 x H200", "fail  disk        1 GiB free",
        "                  fix: operator: free space",
        "doctor: 1 ok, 0 warn, 1 fail — fix the failures before a long run"]


# --------------------------------------------------------------------------- the verb
def _repo(tmp_path: Path, agent: dict) -> Path:
    # test.snapshot_budget_mb: 1, so that the disk check passes on any CI machine
    return make_repo(tmp_path, {"test.snapshot_budget_mb": 1,
                                **{f"agent.{k}": v for k, v in agent.items()}}, tree=False)


def test_doctor_on_a_repository_reports_and_exits_by_the_worst(tmp_path, capsys):
    repo = _repo(tmp_path, {"backend": "command", "command": "exec no-such-agent-kern --yes"})
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(repo / "runs/worktrees/attempt-7")],
                   cwd=repo, check=True)  # a finished attempt's worktree, left behind
    assert cli.main(["--repo", str(repo), "doctor", "--json", "--offline"]) == 1
    out = json.loads(capsys.readouterr().out)
    got = {f["check"]: f for f in out["findings"]}
    assert out["ok"] is False
    assert list(got) == ["gpu", "clocks", "gpu memory", "git", "worktrees", "disk", "ledger",
                         "judging", "agent", "loop lock", "sandbox"]
    # CI machines allow the namespace sandbox (kern.yaml: sandbox auto)
    assert got["sandbox"]["status"] == D.OK and got["sandbox"]["text"].startswith("namespaces")
    assert got["agent"]["status"] == D.FAIL and "'no-such-agent-kern'" in got["agent"]["text"]
    assert got["worktrees"]["status"] == D.WARN and "attempt-7" in got["worktrees"]["text"]
    assert got["git"]["status"] == D.OK and got["disk"]["status"] == D.OK
    assert got["ledger"]["status"] == D.OK and "not created yet" in got["ledger"]["text"]
    # the ledger check wrote a scratch database and took it away again
    assert sorted(p.name for p in (repo / "runs").iterdir()) == ["worktrees"]
    # then: a tuner, a ledger whose attempt #7 still runs there, and a writer holding the lock
    (repo / "kern.yaml").write_text((repo / "kern.yaml").read_text().replace(
        "backend: command", "backend: tuner"))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "tuner"],
                   cwd=repo, check=True)
    with L.Ledger(L.default_path(repo)) as led:
        for n in range(7):
            led.new_attempt(title=f"#{n + 1}", hypothesis="", target="moe.situ", backend="tuner",
                            base_sha=None, phase_id=None)
        led.transition(7, L.RUNNING)
    writer = sqlite3.connect(str(L.default_path(repo)), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        assert cli.main(["--repo", str(repo), "doctor", "--offline"]) == 0
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    text = capsys.readouterr().out.splitlines()
    assert "ok    worktrees   no attempt worktree left over (1 in use)" in text
    assert any(line.startswith("warn  ledger") and "holds the write lock" in line for line in text)
    assert any(line.startswith("ok    agent       tuner backend") for line in text)
    assert text[-1].startswith("doctor: ") and text[-1].endswith("0 fail")


def test_sandbox_in_force_missing_or_off():
    f = D.sandbox_finding({"mode": "auto", "mechanism": "namespaces",
                           "described": "namespaces (user, mount, network, PID, IPC) + landlock ABI 7"})
    assert f.status == D.OK and "landlock ABI 7" in f.text and "sandbox: auto" in f.text
    f = D.sandbox_finding({"mode": "auto", "mechanism": None, "error": "sandbox: none available",
                           "fix": "operator: allow unprivileged user namespaces; or user: set "
                                  "`sandbox: off` in kern.yaml"})
    assert f.status == D.FAIL and "sandbox: off" in f.fix and f.fix.startswith("operator")
    f = D.sandbox_finding({"mode": "off", "mechanism": "off", "described": "off (kern.yaml sandbox: off)"})
    assert f.status == D.WARN and "sandbox: auto" in f.fix


def test_the_user_sandbox_warns_what_it_leaves_readable():
    """The weakest mechanism is in force but said to be so: file permissions only."""
    from gates.rules import confinement as S

    facts = S.Facts("unshare(user): Operation not permitted", 0, "")
    mech = S.choose("auto", facts)
    f = D.sandbox_finding({"mode": "auto", "mechanism": mech, "described": facts.describe(mech)})
    assert mech == "user" and f.status == D.WARN
    assert f.text.startswith("user nobody + seccomp (no network)") and "others may read stays readable" in f.text
    assert f.fix.startswith("operator:") and "landlock" in f.fix and "docs/sandbox.md" in f.fix


def test_doctor_help_says_what_it_checks(capsys):
    with pytest.raises(SystemExit):
        cli.main(["doctor", "--help"])
    words = " ".join(capsys.readouterr().out.split())
    for w in ("ok / warn / fail", "who acts", "WAL", "memory_gib", "--offline", "sandbox", "Exit 1"):
        assert w in words, w


# ---- issue 38: keys, a folder that is no repository, attempts nobody judges -------------------
from .messages_api import MessagesAPI, Script  # noqa: E402


@pytest.mark.parametrize("backend", ["anthropic", "claude-code"])
def test_doctor_checks_the_key_of_both_api_backends_against_the_api(backend, tmp_path, capsys,
                                                                    monkeypatch):
    """Present, then accepted by the (local) Messages API: a missing key and a refused one fail;
    --offline checks presence only. claude-code needs its SDK first (installed in the venv)."""
    pytest.importorskip("claude_agent_sdk") if backend == "claude-code" else None
    repo = _repo(tmp_path, {"backend": backend})
    with MessagesAPI(Script(turns=[]), key="sk-test-right") as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
            monkeypatch.delenv(var, raising=False)

        def agent(*flags):
            cli.main(["--repo", str(repo), "doctor", "--json", *flags])
            return {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}["agent"]

        f = agent()
        assert f["status"] == D.FAIL and "no ANTHROPIC_API_KEY" in f["text"]
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-wrong")
        f = agent()
        assert f["status"] == D.FAIL and "refused the key (HTTP 401: invalid x-api-key)" in f["text"]
        assert "export a valid ANTHROPIC_API_KEY" in f["fix"]
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-right")
        f = agent()
        assert f["status"] == D.OK and f"{api.url} accepted it (HTTP 200)" in f["text"]
        asked = [r for r in api.requests if r["path"] == "/v1/messages/count_tokens"]
        assert len(asked) == 2 and asked[-1]["headers"]["x-api-key"] == "sk-test-right"
        f = agent("--offline")
        assert f["status"] == D.OK and "not contacted (--offline)" in f["text"]
        assert len([r for r in api.requests if r["path"] == "/v1/messages/count_tokens"]) == 2
    with MessagesAPI(Script(turns=[])) as gone:
        url = gone.url
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)  # nobody listens there any more
    f = agent()
    assert f["status"] == D.FAIL and "unreachable" in f["text"]


def test_doctor_writes_nothing_in_a_folder_that_is_no_repository(tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "kern.yaml").write_text((ROOT / "kern.yaml").read_text())
    assert cli.main(["--repo", str(plain), "doctor", "--offline", "--json"]) == 1
    got = {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert got["git"]["status"] == D.FAIL
    assert got["ledger"]["status"] == D.WARN and "writes nothing outside one" in got["ledger"]["text"]
    assert sorted(p.name for p in plain.iterdir()) == ["kern.yaml"]  # no runs/


def test_doctor_names_attempts_left_judging_by_a_process_that_is_gone(tmp_path, capsys):
    """A kern try's attempt whose process died (its judge.pid names a pid that no longer runs),
    and a loop's attempt with no loop running: each named with what to do. One whose kern try
    still runs is fine."""
    import os
    import sys

    repo = _repo(tmp_path, {"backend": "tuner"})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with L.Ledger(L.default_path(repo)) as led:
        for n, backend in ((1, "manual"), (2, "tuner"), (3, "manual")):
            led.new_attempt(title=f"#{n}", hypothesis="", target="", backend=backend,
                            base_sha=None, phase_id=None)
            led.transition(n, L.JUDGING, commit_sha=f"{n}" * 40)
    host = os.uname().nodename
    for n, pid in ((1, dead.pid), (3, os.getpid())):
        d = repo / "runs" / "attempts" / str(n)
        d.mkdir(parents=True)
        from harness.processes import started_at
        (d / "judge.pid").write_text(f"{pid} {host} {started_at(pid)}\n")
    cli.main(["--repo", str(repo), "doctor", "--offline", "--json"])
    f = {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}["judging"]
    assert f["status"] == D.WARN
    assert "left judging by a kern try that is gone: #1 (since " in f["text"]
    assert "left judging by a kern loop that stopped: #2 (since " in f["text"]
    assert "#3" not in f["text"] and "kern cancel 1" in f["fix"]


def test_the_lock_probe_names_the_loop_that_holds_the_repository(tmp_path):
    """doctor asks processes.loop_holder, the one probe of the loop lock (kern status and kern
    cancel ask it too): a free or missing lock is not held, a loop's names its pid and host."""
    from harness.processes import acquire_loop_lock

    assert D._probe_lock(tmp_path) == {"held": False}
    lock = acquire_loop_lock(tmp_path)
    try:
        held = D._probe_lock(tmp_path)
        assert held == {"held": True, "holder": f"pid {os.getpid()} on {os.uname().nodename}"}
        assert D.lock_finding(held).status == D.WARN
    finally:
        lock.close()
    assert D._probe_lock(tmp_path) == {"held": False}
