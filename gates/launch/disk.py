"""The disk a judgment writes on, as the shell sees it (the estimates and the rules are
gates/rules/footprint.py's, pure).

* Whether the folders a judgment writes have the room :func:`footprint.judgment_bytes` says
  plus a margin (:func:`check`: ``statvfs`` of each folder, ``DiskShort`` when short), before
  any side starts (``kern test``, ``kern try``, every judgment of ``kern loop``).
* Whether a side that failed ran out of disk (:func:`classified`: its folder's free space,
  measured here after it ended, and ``footprint.ran_out`` on its last words).
* The tap recordings (``runs/tap/<name>/``, :class:`Recordings`): main's recording is keyed by
  the judgment's hidden draw and never read again once its verdict is made, so its tensors
  (``*.pt``, GiBs per judgment at full size) are deleted then, the candidate's too; the
  documents and logs stay (``record.json``, ``result.json``, ``noise.json``, ``*.log``: what
  ``kern show`` and the judgment files point to). No report reads a ``*.pt`` afterwards: the
  verdict's numbers are in the judgment's report (``runs/attempts/<n>/judgment-<k>.json``),
  ``--replay-attempt`` records again from the ledger's hidden inputs.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..results import DISK_FULL, OK, TAMPERED, TIMEOUT
from ..rules.footprint import DiskShort, Space, disk_line, ran_out, short_message, shortfall


def copied(mode: str) -> bool:
    """Whether the replay is shown main's recording as copies under kern.yaml's ``sandbox``
    ``mode`` (landlock or user) rather than hard links or main's folder itself; True (the
    larger estimate) when no mechanism can be chosen here (the first side will say why)."""
    from . import sandbox
    from ..rules import confinement

    try:
        return sandbox.chosen(mode) in ("landlock", "user")
    except confinement.SandboxUnavailable:
        return True


def _existing(folder: Path) -> Path:
    p = folder
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(folder: Path) -> int | None:
    """Bytes an unprivileged write may still use on ``folder``'s file system (its nearest
    existing ancestor's); None when it cannot be read."""
    try:
        st = os.statvfs(_existing(folder))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def spaces(needs: dict[Path, int]) -> list[Space]:
    """The :class:`Space` of each folder (shell: ``stat`` and ``statvfs``)."""
    out = []
    for folder, need in needs.items():
        p = _existing(folder)
        out.append(Space(str(folder), int(need), os.stat(p).st_dev, free_bytes(p) or 0))
    return out


def check(needs: dict[Path, int], what: str = "one judgment") -> None:
    """Raise :class:`DiskShort` when a folder of ``needs`` ({folder: bytes written there at
    most}) lacks the room (:func:`shortfall`)."""
    s = shortfall(spaces(needs))
    if s is not None:
        raise DiskShort(short_message(s, what), s.folder, s.need, s.free)


def classified(kind: str, tail: str, folder: Path) -> tuple[str, str]:
    """(kind, tail) of a side that ended with ``kind`` after writing in ``folder`` (shell: its
    free space now): ``disk full``, its tail ending with :func:`disk_line`, when it ran out of
    disk (:func:`ran_out`); else as it was."""
    if kind in (OK, TIMEOUT, TAMPERED, DISK_FULL):
        return kind, tail
    free = free_bytes(folder)
    if not ran_out(tail, free):
        return kind, tail
    return DISK_FULL, tail.rstrip("\n") + "\n" + disk_line(folder, free)


# ------------------------------------------------------------------ the tap recordings
def _tensors(folder: Path) -> list[Path]:
    """Every ``*.pt`` file under ``folder``, symbolic links to folders not followed (a
    candidate's folder may hold one pointing anywhere)."""
    out = []
    for root, _dirs, files in os.walk(folder, followlinks=False):
        out += [Path(root) / f for f in files if f.endswith(".pt")]
    return out


def sweep(tap: Path) -> list[Path]:
    """Delete the tensors of every folder of ``tap`` that no live judgment holds (this
    judgment's own, once released, and any a killed run left behind). Returns them."""
    if not tap.is_dir():
        return []
    gone = []
    for d in sorted(p for p in tap.iterdir() if p.is_dir() and not p.is_symlink()):
        if not _tensors(d):
            continue
        fd = os.open(tap / f"{d.name}.use", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a judgment still reads or writes it
            for p in _tensors(d):
                p.unlink(missing_ok=True)
                gone.append(p)
        finally:
            os.close(fd)
    return gone


class Recordings:
    """The tap folders one judgment uses (``runs/tap/<name>``): each held by a shared lock on
    ``runs/tap/<name>.use`` (beside it: no candidate's sandbox shows it) from before the
    folder is made until :meth:`release`, so that no other judgment's :func:`sweep` deletes
    what this one still reads. Two judgments on the same recording (the same hidden inputs)
    both hold it: the last to finish deletes it."""

    def __init__(self, tap: Path):
        self.tap = tap
        self._fds: list[int] = []

    def hold(self, folder: Path) -> None:
        self.tap.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.tap / f"{folder.name}.use", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a sweep deletes a folder of that name
        self._fds.append(fd)

    def release(self) -> list[Path]:
        """Let every held folder go and delete the tensors no judgment holds (:func:`sweep`)."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        return sweep(self.tap)

    def __enter__(self) -> "Recordings":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
