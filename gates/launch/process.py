"""The coordinator's launcher: one side (a revision's driver) in its own subprocess, with a
minimal environment and a wall-clock limit (several ranks: ``gates/launch/ranks.py``). A
crash, hang or illegal memory access of a candidate ends its process, never the caller's.

The hand-over: a side's spec file, argv and environment hold only what kern.yaml says; the
judgment's hidden inputs (``gates/rules/hidden.py``) reach it on its stdin, and only after it has
imported the candidate's tree: the side writes ``protocol.IMPORTED`` as its first line on stdout,
the coordinator answers with ``protocol.handover_line`` (run and tap modes: :func:`hand_over`,
then stdin closes; bench sides: inside their ``prepare`` request). So no
code of the candidate's import finds them in any file, argument, variable or pipe."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import disk, sandbox
from ..protocol import (EXPECTS_CUDA, IMPORTED, MEMORY_VARIABLE, STORE_QUIT, BenchCommand, Quit, handover_line,
                        parse as check_options, read_held, side_request)
from ..requests import Placement
from .after_import import AfterImport, Dialogue
from .held import Hold, began

HARNESS_ROOT = Path(__file__).resolve().parents[2]
# Variables a side may see. API keys and everything else of the user's environment stay out.
_PASS = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "CUDA_VISIBLE_DEVICES", "TRITON_CACHE_DIR",
         "TRITON_INTERPRET", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
         "NVSHMEM_DISABLE_NVLS", "CUDA_HOME", "LD_LIBRARY_PATH", "VIRTUAL_ENV")


def harness_path() -> str:
    """PYTHONPATH of a process that runs this harness's code: the harness first, then the caller's
    own entries (where the user runs the harness from carried wheels, its dependencies live
    there: a child without them cannot import the harness)."""
    return os.pathsep.join([str(HARNESS_ROOT)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the launcher's own teardown still applies


def popen_extra(place: Placement) -> dict:
    """Popen arguments of a side started at ``place``: one that dies with this process where
    the placement says so (a Ray worker's judging slot)."""
    return {"preexec_fn": _die_with_parent} if place.die_with_parent else {}


def side_env(place: Placement, extra: dict | None = None) -> dict:
    """A side's environment at ``place``: the variables of :data:`_PASS` the caller has, its
    slot's GPUs, its share of the machine's memory; nothing else of the caller's."""
    env = {k: os.environ[k] for k in _PASS if k in os.environ}
    if place.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = place.gpus
    env["PYTHONPATH"] = harness_path()
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONHASHSEED"] = "0"
    # multicast stays off everywhere (it can take shared GPUs out of service)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    env.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    cuda = _has_cuda()
    if not cuda:
        # what the side's driver sets anyway when it finds no GPU (gates/interpreter.py), said
        # here so that a side held at its hold point need not ask CUDA (gates/side/driver.py)
        env.setdefault("TRITON_INTERPRET", "1")
    if env.get("TRITON_INTERPRET") == "1" or not cuda:
        # CPU mode: one thread per side, so parallel sides do not oversubscribe the cores and
        # time each other's thread contention
        env.setdefault("OMP_NUM_THREADS", "1")
    elif cuda:
        # a side that finds no GPU where the gates see one must fail, not time the CPU
        env[EXPECTS_CUDA] = "1"
    limit = memory_limit(cuda, _physical_memory(), place.judgments)
    if limit:
        env[MEMORY_VARIABLE] = str(limit)
    env.update(extra or {})
    return env


def hand_over(proc: subprocess.Popen, hidden: dict | None, log) -> None:
    """The coordinator's half of the hand-over (run it in a thread): when ``proc`` says it
    imported the tree, write its hidden inputs as one line and close its stdin; a
    :class:`~gates.launch.after_import.Dialogue` keeps it open and answers the side's later requests.
    Anything else on its stdout (the driver sends the tree's prints to stderr; a write to fd 1
    is not one) goes to ``log``. Ends when the side closes its stdout."""
    sent = held = False
    talk = hidden if isinstance(hidden, Dialogue) else None
    for line in proc.stdout:
        if isinstance(hidden, Hold) and not held and not sent:
            # a held side's first line (gates/launch/held.py): answered with the go, or with
            # the end of its stdin when what was prepared is not needed
            report = read_held(line)
            if report is not None:
                held = True
                answer = hidden.held(proc, report)
                try:
                    if answer:
                        proc.stdin.write(answer)
                        proc.stdin.flush()
                    else:
                        proc.stdin.close()
                except (BrokenPipeError, OSError, ValueError):
                    pass
                continue
        if not sent and line.strip() == IMPORTED:
            try:
                proc.stdin.write(hidden.line(proc) if isinstance(hidden, (AfterImport, Dialogue))
                                 else handover_line(hidden))
                if talk is None or (isinstance(talk, Hold) and not talk.talks):
                    proc.stdin.close()
                else:
                    proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass  # the side ended; its exit status says how
            sent = True
            continue
        msg = side_request(line) if sent and talk is not None else None
        if msg is not None:
            answer = talk.heard(proc, msg)
            if answer:
                try:
                    proc.stdin.write(answer)
                    proc.stdin.flush()
                except (BrokenPipeError, OSError, ValueError):
                    pass
            continue
        try:
            log.write(f"(stdout) {line}")
            log.flush()
        except ValueError:  # the log was closed: the caller stopped waiting for this side
            pass
    try:
        proc.stdin.close()
    except (OSError, ValueError):
        pass


def start_hand_over(proc: subprocess.Popen, hidden: dict | None, log):
    import threading

    th = threading.Thread(target=hand_over, args=(proc, hidden, log), daemon=True)
    th.start()
    return th


def memory_limit(cuda: bool, physical_bytes: int, judgments: int = 1) -> int | None:
    """Pure: the address-space cap of one CPU side, or None. Two sides run at once (A and B)
    per judgment, and ``judgments`` judgments at once (one per CPU slot), so each side gets at
    most 1 / (2 x judgments) of the machine: a candidate's runaway allocation then fails in its
    own process ('out of memory') before the kernel's OOM killer picks a victim, possibly the
    orchestrator. None with CUDA: its driver reserves more address space than any RAM."""
    if cuda or physical_bytes <= 0:
        return None
    return physical_bytes // (2 * max(1, judgments))


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@dataclass
class SideOutcome:
    """How one side process ended (one process, or W ranks merged: ``gates/launch/ranks.py``)."""

    ok: bool
    kind: str  # "ok" | "crash" | "timeout" | "illegal-memory-access" | "out of memory" | "error"
    returncode: int | None
    wall_s: float
    result: dict | None
    log_tail: str
    log_path: Path
    held_s: float = 0.0  # a held side's seconds from its start to its go (not in ``wall_s``)


def classify(returncode: int | None, timed_out: bool, tail: str) -> str:
    """What ended a side: pure, from the exit status and the end of its log."""
    if timed_out:
        return "timeout"
    if returncode == 0:
        return "ok"
    named = _named(tail)
    if named:
        return named
    if returncode is not None and returncode < 0:
        return f"crash (signal {signal.Signals(-returncode).name})" if -returncode in \
            signal.valid_signals() else "crash"
    return "error" if "Traceback" in tail else "crash"


def reply_kind(error: str) -> str:
    """What an error means that a side caught itself and answered with (pure)."""
    return _named(error) or "error"


def _named(text: str) -> str | None:
    if "tamper: " in text:  # gates/side/tamper.py's refusals: the candidate broke a rule, not a part
        return "tampered"
    low = text.lower()
    if "illegal memory access" in low or "misaligned address" in low or "illegal address" in low:
        return "illegal-memory-access"
    # a kernel's fault is reported asynchronously, by whichever later CUDA call meets the dead
    # context (on the H200 a wild read in a Triton kernel surfaced as cuBLAS's
    # EXECUTION_FAILED): still the device failing under the candidate, not a Python error
    if "cuda error" in low or "cublas_status_execution_failed" in low \
            or "unspecified launch failure" in low:
        return "cuda-fault"
    # CUDA's words, torch's CPU allocator's (also under the side's address-space cap), Python's
    if "out of memory" in low or "can't allocate memory" in low or "cannot allocate memory" in low \
            or "memoryerror" in low:
        return "out of memory"
    return None


def run_side(mode: str, tree: Path, spec: dict, out: Path, timeout_s: float, place: Placement,
             progress=None, hidden: dict | None = None, stop=None,
             group: "sandbox.Group | None" = None) -> SideOutcome:
    """Run ``gates.side.driver MODE`` on ``tree`` once at ``place`` (run and tap modes); ``hidden``
    (``Hidden.to_dict()``, or None for none) is handed over once it has imported the tree.
    ``stop`` (a ``threading.Event``, or None): once set, the side is ended as timed out (the
    caller's own deadline for part of its work). ``hidden`` a :class:`~gates.launch.held.Hold`:
    the side starts held; its limit and wall count from its go. ``group``: the sandbox it joins
    (the model store's, whose weights it attaches to), in a root of its own (never a held
    side's: it was started before any lease, gates/rules/overlap.py ``tap_lease``)."""
    check_options(mode, spec)  # the side parses it again: a key no mode defines is a gate bug
    out.parent.mkdir(parents=True, exist_ok=True)
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec, indent=1))
    log_path = out.with_suffix(".log")
    cmd = [sys.executable, "-m", "gates.side.driver", mode, "--tree", str(tree), "--spec",
           str(spec_path), "--out", str(out)] + (["--hold"] if isinstance(hidden, Hold) else [])
    t0 = time.monotonic()
    timed_out = False
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(sandbox.wrap(cmd, place, group), cwd=HARNESS_ROOT, env=side_env(place),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf, text=True,
                                start_new_session=True, **popen_extra(place))
        handing = start_hand_over(proc, hidden, logf)
        last_progress = time.monotonic()
        try:
            while True:
                try:  # a stop event is seen within 0.2 s (an interrupted judgment ends its sides)
                    proc.wait(timeout=2.0 if stop is None else 0.2)
                    break
                except subprocess.TimeoutExpired:
                    start = began(t0, hidden)  # None: held, waiting for its go
                    if (start is not None and time.monotonic() - start > timeout_s) or \
                            (stop is not None and stop.is_set()):
                        timed_out = True
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                        break
                    if progress and start is not None and time.monotonic() - last_progress >= 2.0:
                        last_progress = time.monotonic()
                        progress(_last_line(log_path), time.monotonic() - start)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        handing.join(timeout=10)  # the side's last stray stdout lines reach its log
    start = began(t0, hidden)
    held_s = 0.0 if start is None else start - t0
    wall = time.monotonic() - (start if start is not None else t0)
    tail = log_path.read_text(errors="replace")[-4000:]
    kind, tail = disk.classified(classify(proc.returncode, timed_out, tail), tail, out.parent)
    result = None
    if kind == "ok" and out.exists():
        result = json.loads(out.read_text())
    elif kind == "ok":
        kind = "error"
    return SideOutcome(kind == "ok", kind, proc.returncode, wall, result, tail, log_path, held_s)


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""
    except OSError:
        return ""


class SideError(RuntimeError):
    """A side process died, hung or answered with an error."""

    def __init__(self, kind: str, message: str, log_path: Path):
        super().__init__(message)
        self.kind, self.log_path = kind, log_path


class Interactive:
    """A side process driven by JSON lines (bench sides, the model store), started at
    ``place``; ``env``: its environment (a rank's; default :func:`side_env`), ``group``: the
    sandbox it joins (``sandbox.Group``: the scorer's store and its bench sides, a side's ranks)."""

    def __init__(self, mode: str, tree: Path, spec: dict, workdir: Path, name: str, place: Placement,
                 env: dict | None = None, group: "sandbox.Group | None" = None):
        import queue
        import threading

        check_options(mode, spec)
        workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        spec_path = workdir / f"{name}.spec.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "w")
        cmd = [sys.executable, "-m", "gates.side.driver", mode, "--tree", str(tree), "--spec",
               str(spec_path), "--out", str(workdir / f"{name}.json")]
        self.proc = subprocess.Popen(sandbox.wrap(cmd, place, group), cwd=HARNESS_ROOT,
                                     env=env or side_env(place), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     start_new_session=True, **popen_extra(place))
        self._lines: "queue.Queue[str | None]" = queue.Queue()

        def pump():
            for line in self.proc.stdout:
                self._lines.put(line)
            self._lines.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def read(self, timeout_s: float) -> dict:
        reply = self.poll(timeout_s)
        if reply is None:
            self.kill()
            raise SideError("timeout", f"{self.name}: no answer within {timeout_s:.0f}s",
                            self.log_path)
        return reply

    def wait_imported(self, timeout_s: float) -> None:
        """The side's first line: it imported the tree (``gates/launch/process.py`` hand-over); only
        then may it be sent what the tree must not see at import."""
        reply = self.read(timeout_s)
        if reply != json.loads(IMPORTED):
            self.kill()
            raise SideError("error", f"{self.name}: expected {IMPORTED} as the side's first line, "
                            f"got {json.dumps(reply)[:200]}", self.log_path)

    def poll(self, wait_s: float) -> dict | None:
        """The next reply, or None when none came within ``wait_s``; a process that ended
        raises :class:`SideError` saying how."""
        import queue

        try:
            line = self._lines.get(timeout=wait_s)
        except queue.Empty:
            return None
        if line is None:
            self.proc.wait()
            tail = self.log_path.read_text(errors="replace")[-3000:]
            kind = classify(self.proc.returncode, False, tail)
            raise SideError(kind, f"{self.name} ended ({kind}): {_last_words(tail)}", self.log_path)
        return json.loads(line)

    def note(self, line: str) -> None:
        """A line of the harness's in the process's log: the file's offset is the one the
        process writes at, so lines follow each other and none overwrites another."""
        try:
            self._log.write(line.rstrip("\n") + "\n")
            self._log.flush()
        except (OSError, ValueError):
            pass  # a log closed or full: the line is in the run's results too

    def send(self, obj: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the next read reports how the process ended

    def request(self, command: BenchCommand, timeout_s: float) -> dict:
        self.send(command.to_dict())
        reply = self.read(timeout_s)
        if not reply.get("ok", True):
            raise SideError(reply_kind(str(reply.get("error"))), f"{self.name}: {reply.get('error')}",
                            self.log_path)
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps(Quit().to_dict()) + f"\n{STORE_QUIT}\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def _last_words(tail: str) -> str:
    lines = [ln for ln in tail.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "(no output)"
