"""A side's lines with its coordinator after the hand-over: requests on the pipe the driver
kept as its stdout (the tree's prints go to the log), answers on fd 0.

fd 0 is read byte by byte from the descriptor (no buffer the candidate's code could have
filled), blocking whatever the tree set, and only while it is still the pipe the gates
opened (the seal, ``gates/side/tamper.py``): an answer that is gone means the candidate's
code read it first. The lines themselves are ``gates/protocol.py``'s.
"""
from __future__ import annotations

import json
import os

from .tamper import TamperError


def read_line(seal, what: str, eof_ok: bool = False) -> bytes:
    """One line the coordinator wrote on fd 0 (``what`` names it in errors); with ``eof_ok``
    the end of input reads as b"" (the coordinator closed the pipe: it wants nothing more)."""
    moved = seal.stdin_replaced() if seal is not None else None
    if moved:
        raise TamperError(f"tamper: {moved}")
    os.set_blocking(0, True)
    line = b""
    while not line.endswith(b"\n"):
        try:
            got = os.read(0, 1)
        except OSError as e:
            raise TamperError(f"tamper: the side's stdin cannot be read after the tree was imported "
                              f"({e}): the candidate's code closed or replaced it") from None
        if not got:
            if eof_ok and not line:
                return b""
            raise TamperError(
                f"tamper: {what} were not on this side's stdin after the tree was imported "
                f"(expected one JSON line, found {len(line)} byte(s) and the end of input): the "
                f"candidate's code read them first")
        line += got
    return line


class Channel:
    """This side's requests to the coordinator and its answers (one JSON line each)."""

    def __init__(self, out, seal):
        self.out, self.seal = out, seal

    def say(self, msg: dict) -> None:
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    def ask(self, msg: dict, what: str) -> dict:
        """Send request ``msg`` and read the coordinator's answer (``what``: its name)."""
        self.say(msg)
        return json.loads(read_line(self.seal, what))

    def wait(self, what: str) -> dict | None:
        """The coordinator's next line; None when it closed the pipe instead."""
        line = read_line(self.seal, what, eof_ok=True)
        return json.loads(line) if line else None
