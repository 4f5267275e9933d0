"""A sandbox group's /dev/shm after a lease of the model store: what stays and what is swept
(pure; the listing and unlinking is gates/launch/sandbox.py's ``Group.sweep_shm``, the store's
report of what it maps, its raw /proc/self/maps lines, gates/side/store.py's release).

The model store's group lives across judgments, and every member shares its /dev/shm: a file a
candidate's side leaves there would be read by later judgments' sides. Once every side of a
lease has ended, every entry goes but the files the store process maps right now (torch's CUDA
IPC consumer counts, ``torch_<pid>_*``: the next lease's sides open them by name). The store
says which by (name, inode), read off its /proc/self/maps; an entry stays only where both
match. A name alone is no proof: a side that unlinks the store's file and makes one of the same
name gets another inode (the store's mapping keeps the old one alive, so no new file gets it);
a hard link to it has another name. Every ambiguity of the maps text (a name ending in
" (deleted)", an escaped newline) can only sweep more, never keep an entry that is not the
store's, since keeping needs the inode of a file the store maps.
"""
from __future__ import annotations

from dataclasses import dataclass

SHM = "/dev/shm/"
DELETED = " (deleted)"  # what the kernel appends to the path of a mapping whose file was unlinked
NAMES_RECORDED = 5  # the first few names a sweep's record carries (its count is exact)


@dataclass(frozen=True)
class ShmEntry:
    """One entry of a group's /dev/shm as the machine lists it (lstat: a link is no folder)."""

    name: str
    inode: int
    is_dir: bool


@dataclass(frozen=True)
class ShmSweep:
    """What a sweep did: the names ``removed``; the names ``left`` (it failed to remove them);
    ``mapped_known``: the store said which files it maps (where it did not, nothing was swept
    and the store is not kept: its group and /dev/shm end with it)."""

    removed: tuple[str, ...]
    left: tuple[str, ...] = ()
    mapped_known: bool = True

    @property
    def clean(self) -> bool:
        """Nothing but the store's own live files is left in the group's /dev/shm."""
        return self.mapped_known and not self.left

    def record(self) -> dict:
        """For a run's results (``store``'s ``shm_swept``): counts and the first few names."""
        return {"removed": len(self.removed), "names": [printable(n) for n in self.removed[:NAMES_RECORDED]],
                "left": [printable(n) for n in self.left[:NAMES_RECORDED]], "mapped_known": self.mapped_known}

    def line(self, lease: int) -> str:
        """The sweep, one line for the store's log."""
        if not self.mapped_known:
            return (f"harness: lease {lease}: the store did not say which /dev/shm files it maps: "
                    f"the group's /dev/shm is not swept, the store is not kept")
        names = ", ".join(printable(n) for n in self.removed[:NAMES_RECORDED])
        more = f" (+{len(self.removed) - NAMES_RECORDED} more)" if len(self.removed) > NAMES_RECORDED else ""
        left = f"; {len(self.left)} could not be removed: the store is not kept" if self.left else ""
        return (f"harness: lease {lease}: swept {len(self.removed)} entries of the group's /dev/shm"
                f"{': ' + names + more if names else ''}{left}")


def printable(name: str) -> str:
    """``name`` fit for a JSON record and a log line: ASCII, its control characters and
    undecodable bytes escaped as Python writes them, at most 100 characters (a member names its
    files as it likes)."""
    return ascii(name)[1:-1][:100]


def mapped(maps: str) -> frozenset[tuple[str, int]]:
    """The (name, inode) of every file directly in /dev/shm that a process maps, from its
    /proc/<pid>/maps text (``os.fsdecode`` of its bytes, so names compare with a listing's).
    Lines without a path, paths elsewhere or deeper than /dev/shm, and mappings of unlinked
    files (" (deleted)": the folder no longer holds them) give nothing. The kernel writes a
    newline of a path as ``\\012``; it is read back as one."""
    out = set()
    for line in maps.split("\n"):  # the kernel's lines (splitlines would cut a name at \x1e)
        parts = line.split(None, 5)  # range, perms, offset, device, inode, path (spaces kept)
        if len(parts) < 6 or not parts[5].startswith(SHM) or parts[5].endswith(DELETED):
            continue
        name = parts[5][len(SHM):].replace("\\012", "\n")
        try:
            inode = int(parts[4])
        except ValueError:
            continue
        if name and "/" not in name and inode > 0:
            out.add((name, inode))
    return frozenset(out)


def reported(value) -> frozenset[tuple[str, int]] | None:
    """The (name, inode) pairs of the store's release reply (``shm``: its /proc/self/maps
    lines under /dev/shm, read here by :func:`mapped`); None where it is not a list of lines
    (the store did not say what it maps)."""
    if not isinstance(value, list) or not all(isinstance(line, str) for line in value):
        return None
    return mapped("\n".join(value))


def swept(listing: list[ShmEntry], keep: frozenset[tuple[str, int]]) -> tuple[ShmEntry, ...]:
    """The entries of ``listing`` to remove: all but the files (never a folder: nothing maps
    one) whose name and inode are both a pair of ``keep``, in name order."""
    return tuple(sorted((e for e in listing if e.is_dir or (e.name, e.inode) not in keep),
                        key=lambda e: e.name))
