"""harness/processes.py: the loop lock and an agent's process, on real processes."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from harness.processes import (LoopLocked, acquire_loop_lock, agent_pid, agent_started, alive,
                               end_agent, start_agent)


def ended(pid: int) -> bool:
    """Gone, or a zombie waiting for an init that may never reap it (a container's)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_the_pid_file_names_a_process_until_it_is_ended(tmp_path):
    assert agent_pid(tmp_path) is None and agent_started(tmp_path) == 0.0  # never started
    (tmp_path / "agent.pid").write_text("12a")
    assert agent_pid(tmp_path) is None  # a torn file is no pid
    # an agent's session: the agent and a child it started, both ended by end_agent
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & echo $! > child; wait"], cwd=tmp_path,
                            start_new_session=True)
    (tmp_path / "agent.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 10
    # the shell's redirect creates the file before echo writes it: wait for the whole line
    while not (tmp_path / "child").is_file() or not (tmp_path / "child").read_text().endswith("\n"):
        assert time.monotonic() < deadline, "the shell never wrote its child's pid"
        time.sleep(0.05)
    child = int((tmp_path / "child").read_text())
    assert agent_pid(tmp_path) == proc.pid and alive(proc.pid) and alive(child)
    assert agent_started(tmp_path) == (tmp_path / "agent.pid").stat().st_mtime > 0
    end_agent(proc.pid)
    assert not alive(proc.pid)  # reaped: a zombie child of ours is not alive
    deadline = time.monotonic() + 10
    while not ended(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ended(child)
    assert not alive(0) and not alive(-1)
    end_agent(proc.pid)  # ending it again is harmless


def test_one_loop_per_repository(tmp_path):
    runs = tmp_path / "runs"
    holder = acquire_loop_lock(runs)
    try:
        with pytest.raises(LoopLocked, match=f"pid {os.getpid()} on .* already runs a loop"):
            acquire_loop_lock(runs)
    finally:
        holder.close()
    acquire_loop_lock(runs).close()  # released: the next loop takes it


def test_an_agent_imports_from_the_sites_its_loop_was_started_with(tmp_path, monkeypatch):
    # on the GPU machine the harness's dependencies come from carried wheels on PYTHONPATH
    # (bench/device_env.sh); an agent started without them ended at its first import
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "open(os.environ['MARK'], 'w').write(os.pathsep.join(sys.path))\n")
    mark = tmp_path / "mark"
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}")
    monkeypatch.setenv("MARK", str(mark))
    d = tmp_path / "attempt"
    d.mkdir()
    pid = start_agent(d, tmp_path)  # no brief: the agent ends with an error, after its start
    deadline = time.monotonic() + 60
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    assert mark.exists(), "the agent never started with the loop's PYTHONPATH entries"
    seen = mark.read_text().split(os.pathsep)
    assert str(site) in seen
    assert seen.index(str(Path(__file__).resolve().parents[2])) < seen.index(str(site))
