"""What a side may see only once every process of it has imported its tree.

The hand-over (``gates/sides.py``) answers each process's ``{"imported": true}`` with its
hidden inputs. Given an :class:`AfterImport` instead of the hidden inputs, it first waits until
every process of the side has said so, runs the release once (the accuracy gate links main's
recording into the replay's folder: the candidate's import-time code finds nothing there, and
no sandbox of it ever shows main's own folder), and only then answers. A process that ends
meanwhile gets no answer (its launcher ends the others)."""
from __future__ import annotations

import json
import threading
import time
from typing import Callable


class Dialogue:
    """A hand-over that goes on after its first answer: the side's stdin stays open, and each
    later line of its stdout that is one of ``gates.protocol.SIDE_REQUESTS`` is given to
    :meth:`heard`, whose answer (a line, or None) is written back (``gates/launch.hand_over``).
    The lines are the gates' own words; the candidate's code can write the same ones to fd 1,
    so a request may only ever bring forward what its side would be shown anyway."""

    def line(self, proc) -> str:
        """The answer to ``proc``'s import line."""
        raise NotImplementedError

    def heard(self, proc, msg: dict) -> str | None:
        return None


class AfterImport:
    """The hidden inputs of a side of ``processes`` processes, handed over after ``release``."""

    def __init__(self, hidden: dict | None, processes: int, release: Callable[[], None]):
        self.hidden, self.processes, self.release = hidden, max(1, int(processes)), release
        self.error: BaseException | None = None  # what the release raised (the gate reports it)
        self.released_at: float | None = None  # time.monotonic() once the release ran (None: not yet)
        self._arrived = 0
        self._done = False
        self._cond = threading.Condition()

    def line(self, proc) -> str:
        """The answer to ``proc``'s import line: the hidden line once every process imported
        and the release ran; "" when ``proc`` ended first or the release failed."""
        with self._cond:
            self._arrived += 1
            if self._arrived == self.processes:
                try:
                    self.release()
                    self.released_at = time.monotonic()
                except BaseException as e:  # noqa: BLE001 - kept for the gate, which reports it
                    self.error = e
                self._done = True
                self._cond.notify_all()
            while not self._done:
                if proc.poll() is not None:
                    return ""
                self._cond.wait(0.2)
        return "" if self.error else json.dumps({"hidden": self.hidden}) + "\n"
