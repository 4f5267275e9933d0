"""Fault injection for tests: ``KERN_FAULT=<step>`` makes the orchestrator's own process
SIGKILL itself when it reaches that step, so a test can prove that a loop killed at any step
resumes with no lost row and no duplicate merge.

Inert unless the variable is set. A candidate can never reach it: only harness code (a
protected path) calls :func:`point`, gate subprocesses get a minimal environment without it
(``gates/launch/process.py``), and the orchestrator removes it from an agent's environment.
"""
from __future__ import annotations

import os
import signal

VARIABLE = "KERN_FAULT"
# in the order one merged attempt passes them (spawn belongs to the orchestrator's tick)
STEPS = ("spawn", "scope", "test", "bench", "decision", "merge", "ledger", "notes")


def point(step: str) -> None:
    """Die here, by SIGKILL and without cleanup, when ``KERN_FAULT`` names ``step``."""
    wanted = os.environ.get(VARIABLE)
    if not wanted:
        return
    if wanted not in STEPS:
        # a misspelt step would silently test nothing: the test's author must fix it
        raise ValueError(f"{VARIABLE}={wanted!r}: expected one of {', '.join(STEPS)}")
    if wanted == step:
        os.kill(os.getpid(), signal.SIGKILL)


def without(env: dict) -> dict:
    """``env`` minus the fault variable (for processes that must never inherit it)."""
    return {k: v for k, v in env.items() if k != VARIABLE}
