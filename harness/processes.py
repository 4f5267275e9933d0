"""What the loop process does to other processes, and nothing it decides: the loop lock (one
``kern loop`` per repository), an attempt's agent process started in its own session with its
pid in ``agent.pid`` of the attempt's folder, read back, checked alive, ended. The
orchestrator (harness/orchestrator.py) decides when; this module only acts."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from gates.launch.process import harness_path

from . import faults

HARNESS_ROOT = Path(__file__).resolve().parent.parent
PID_FILE = "agent.pid"


class LoopLocked(RuntimeError):
    """Another kern loop holds this repository."""


def acquire_loop_lock(runs: Path):
    """One loop per repository: a second ``kern loop`` is refused, not queued."""
    runs.mkdir(parents=True, exist_ok=True)
    f = open(runs / "loop.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise LoopLocked(f"kern loop: {holder} already runs a loop on this repository "
                         f"(lock {runs / 'loop.lock'}); stop it first or wait") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {os.uname().nodename}")
    f.flush()
    return f


def loop_holder(runs: Path) -> str | None:
    """Who holds ``runs``' loop lock (``pid N on HOST``), or None when no loop runs. Reads
    only: a missing lock file is not created, and the lock is never held past the probe."""
    path = runs / "loop.lock"
    try:
        f = open(path)
    except OSError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return f.read().strip() or "another process"
        except OSError:
            return None
        fcntl.flock(f, fcntl.LOCK_UN)
    return None


def start_agent(d: Path, worktree: Path) -> int:
    """Start the agent of attempt folder ``d`` (its brief.json, settings.json there; its
    proposal.json and agent.log written there) on ``worktree``, in a session of its own so that
    :func:`end_agent` ends what it started; its pid goes to ``d/agent.pid``."""
    with open(d / "agent.log", "w") as log:
        # the agent may see API keys; gate subprocesses never do (gates/launch/process.py)
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.agents.run", "--brief", str(d / "brief.json"),
             "--worktree", str(worktree), "--settings", str(d / "settings.json"),
             "--out", str(d / "proposal.json")],
            cwd=HARNESS_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**faults.without(os.environ), "PYTHONPATH": harness_path()})
    (d / PID_FILE).write_text(str(proc.pid))
    return proc.pid


def agent_started(d: Path) -> float:
    """When the agent of attempt folder ``d`` started (its pid file's time; 0 when none)."""
    try:
        return (d / PID_FILE).stat().st_mtime
    except OSError:
        return 0.0


def agent_pid(d: Path) -> int | None:
    """The pid of attempt folder ``d``'s agent; None when it never started (or the file is torn)."""
    try:
        return int((d / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie child of this process does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def end_agent(pid: int) -> None:
    """End the agent's session ``pid`` (the agent and whatever it started): TERM, 2 s, KILL."""
    try:
        os.killpg(pid, signal.SIGTERM)
        time.sleep(2)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


JUDGE_FILE = "judge.pid"  # in an attempt's folder: the kern try process judging it


def mark_judge(d: Path) -> None:
    """This process (a ``kern try``) judges the attempt of folder ``d``: its pid and host go to
    ``d/judge.pid``, so that ``kern doctor``, ``kern cancel`` and a loop's resume can tell an
    attempt still being judged from one whose judge is gone."""
    d.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    (d / JUDGE_FILE).write_text(f"{pid} {os.uname().nodename} {started_at(pid)}\n")


def started_at(pid: int) -> str:
    """Process ``pid``'s start time in clock ticks since boot (/proc's; '-' where unknown): a
    pid with another start time is another process that reused the number."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "-"


def judge_of(d: Path) -> tuple[int, str, str] | None:
    """(pid, host, start time) of the kern try that judges attempt folder ``d``; None when
    none is recorded."""
    try:
        pid, host, start = ((d / JUDGE_FILE).read_text().split() + ["-"])[:3]
        return int(pid), host, start
    except (OSError, ValueError):
        return None


def judge_alive(d: Path) -> bool | None:
    """Whether the kern try judging attempt folder ``d`` still runs: None when none is
    recorded or it ran on another host (this one cannot tell)."""
    who = judge_of(d)
    if who is None or who[1] != os.uname().nodename:
        return None
    pid, _, start = who
    return alive(pid) and (start == "-" or started_at(pid) in (start, "-"))


def end_judge(d: Path, sig: int = signal.SIGTERM) -> bool:
    """Ask the kern try judging attempt folder ``d`` to stop (it records the attempt as
    interrupted); False when none runs on this host."""
    who = judge_of(d)
    if not judge_alive(d):
        return False
    try:
        os.kill(who[0], sig)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def signals_held():
    """SIGINT and SIGTERM wait for the end of the block (delivered then): a step that must not
    stop half-done (main moved and the ledger not yet told) finishes first. Only the main
    thread's signals; elsewhere the block runs as it is."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
