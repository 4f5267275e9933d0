"""The thin shell every backend shares: minimal environments, subprocesses
with a wall-clock limit, git in the worktree, and where transcripts go."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..gitcmd import GitError  # noqa: F401 - the backends catch it from here
from ..gitcmd import git as run_git


class AgentConfigError(ValueError):
    """The agent settings (kern.yaml ``agent:``) or the orchestrator's context are wrong."""


# ---- environments -------------------------------------------------------------------------

BASE_ENV = ("PATH", "HOME", "LANG")
# What a quick test or quick bench needs besides the base: the interpreter on CPU, GPU
# selection, caches. Never API keys: the candidate code these run is the agent's own work.
TOOL_ENV = BASE_ENV + ("LC_ALL", "TMPDIR", "VIRTUAL_ENV", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
                       "LD_LIBRARY_PATH", "TRITON_CACHE_DIR", "TRITON_INTERPRET",
                       "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                       "NVSHMEM_DISABLE_NVLS")


def minimal_env(allow=(), extra: dict | None = None, source: dict | None = None) -> dict:
    """PATH, HOME, LANG and the names in ``allow`` taken from ``source`` (default: this
    process), then ``extra``. Everything else of the caller's environment stays out."""
    source = os.environ if source is None else source
    env = {k: source[k] for k in dict.fromkeys((*BASE_ENV, *allow)) if k in source}
    env.update(extra or {})
    return env


# ---- subprocesses -------------------------------------------------------------------------

@dataclass
class Ran:
    returncode: int | None
    timed_out: bool
    tail: str  # the last characters of stdout+stderr
    wall_s: float


_LIVE: set = set()  # children still running, so a SIGTERM to run.py can take them down too


def kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """End a child started with ``start_new_session`` and everything it spawned."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def kill_live() -> None:
    for proc in list(_LIVE):
        kill_group(proc, grace_s=2.0)


def read_tail(path: Path, chars: int) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 4 * chars))
        return f.read().decode("utf-8", "replace")[-chars:]


def run_limited(cmd, cwd, env: dict, timeout_s: float, stdin_text: str | None = None,
                log_path: Path | None = None, tail_chars: int = 4000) -> Ran:
    """Run ``cmd`` (a shell line, or an argv list) in its own process group with a wall-clock
    limit; stdout and stderr go to ``log_path`` (or a temporary file) and the tail comes back.
    On timeout the whole group is killed: an agent's children must not outlive it."""
    t0 = time.monotonic()
    temporary = log_path is None
    if not temporary:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        out = open(log_path, "wb")
    else:
        fd, tmp = tempfile.mkstemp(prefix="kern-agent-", suffix=".log")
        out, log_path = os.fdopen(fd, "wb"), Path(tmp)
    timed_out = False
    try:
        proc = subprocess.Popen(cmd, shell=isinstance(cmd, str), cwd=cwd, env=env,
                                stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        _LIVE.add(proc)
        try:
            proc.communicate(None if stdin_text is None else stdin_text.encode(),
                             timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        except BrokenPipeError:  # the child exited without reading its stdin: not our failure
            proc.wait()
        finally:
            _LIVE.discard(proc)
    finally:
        out.close()
    tail = read_tail(log_path, tail_chars)
    if temporary:
        log_path.unlink(missing_ok=True)
    return Ran(None if timed_out else proc.returncode, timed_out, tail, time.monotonic() - t0)


# ---- git ----------------------------------------------------------------------------------

def identity(backend: str) -> dict:
    # Agent commits carry the backend as author and committer, whatever the user's git config
    # says: the journey shows who made a change, and an unconfigured machine still commits.
    name, email = f"kern-loop {backend}", "kern-loop@localhost"
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def git(worktree, *args, backend: str = "agent", input_text: str | None = None) -> str:
    """Run git in ``worktree`` with a minimal environment that commits as ``backend``; raise
    :class:`GitError` naming the command, the exit status and git's own words."""
    return run_git(worktree, *args, env=minimal_env(extra=identity(backend)), input_text=input_text)


def head(worktree) -> str:
    return git(worktree, "rev-parse", "HEAD").strip()


def subject(worktree, rev: str = "HEAD") -> str:
    return git(worktree, "log", "-1", "--format=%s", rev).strip()


# ---- transcripts and final words ----------------------------------------------------------

def transcript_path(worktree, attempt: int, backend: str, suffix: str,
                    directory=None) -> Path:
    """Beside the worktree, never inside it: a transcript must not end up in the commit."""
    d = Path(directory) if directory else Path(worktree).absolute().parent
    d.mkdir(parents=True, exist_ok=True)
    return d / f"attempt-{attempt}.{backend}.{suffix}"


def final_declined(text: str) -> dict | None:
    """A CLI agent declines by ending its output with one JSON line
    ``{"declined": "the idea", "estimate_ms": -0.4}``; that dict, or None."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    if not lines or not lines[-1].startswith("{"):
        return None
    try:
        data = json.loads(lines[-1])
    except ValueError:
        return None
    if isinstance(data, dict) and isinstance(data.get("declined"), str):
        est = data.get("estimate_ms")
        return {"declined": data["declined"],
                "estimate_ms": float(est) if isinstance(est, (int, float)) and
                not isinstance(est, bool) else None}
    return None


# ---- the Claude Code CLI's own count -------------------------------------------------------

def cli_tokens(model_usage, usage) -> tuple[int, int]:
    """(input tokens with cache writes and reads, output tokens) of a Claude Code session's
    result, from its per-model counts (``modelUsage``: every request the CLI made, its own side
    requests included, as its ``total_cost_usd`` prices them) or, where it reports none, its
    ``usage`` (the main conversation only). A real CLI 2.1.332 session: 6000 input tokens in
    ``usage``, 6010 in ``modelUsage``, the cost of 6010."""
    if isinstance(model_usage, dict) and model_usage and all(isinstance(u, dict)
                                                             for u in model_usage.values()):
        n = lambda u, k: int(u.get(k) or 0)
        return (sum(n(u, "inputTokens") + n(u, "cacheCreationInputTokens")
                    + n(u, "cacheReadInputTokens") for u in model_usage.values()),
                sum(n(u, "outputTokens") for u in model_usage.values()))
    usage = usage if isinstance(usage, dict) else {}
    return (sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                 "cache_read_input_tokens")),
            int(usage.get("output_tokens") or 0))


def cli_result(log_path, chars: int = 1_000_000) -> dict | None:
    """The result of ``claude -p --output-format json`` (or the last line of
    ``--output-format stream-json``): the last line of the output log when it is a JSON object
    with ``"type": "result"``; else None."""
    lines = [ln for ln in read_tail(Path(log_path), chars).splitlines() if ln.strip()]
    if not lines or not lines[-1].lstrip().startswith("{"):
        return None
    try:
        data = json.loads(lines[-1])
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("type") == "result" else None
