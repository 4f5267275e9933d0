"""Files a side must leave as they were: marks taken in the loop's process before the side
runs, compared after it ended (main's recording and tree, while the candidate's side replays
against them: ``gates/accuracy.py``)."""
from __future__ import annotations

from pathlib import Path


def file_marks(roots, ctime: bool = True) -> dict:
    """``{path: (inode, size, ctime_ns)}`` of each file in ``roots`` and of every file under
    each folder in it (``__pycache__`` aside: Python writes there on import). Any write,
    replacement or touch of a file changes its ctime, and user code cannot set a ctime back.
    ``ctime=False``: the mtime instead, for files a hard link elsewhere may be made to or
    removed from meanwhile (which changes the ctime alone)."""
    marks = {}
    for root in map(Path, roots):
        files = [root] if root.is_file() else sorted(root.rglob("*")) if root.exists() else []
        for p in files:
            if "__pycache__" in p.parts or not p.is_file():
                continue
            st = p.stat()
            marks[str(p)] = (st.st_ino, st.st_size, st.st_ctime_ns if ctime else st.st_mtime_ns)
    return marks


def changed_files(before: dict, after: dict) -> list[str]:
    """Pure: the files of ``before`` that changed or vanished by ``after`` (new files are
    someone else's, e.g. main's noise passes written beside its recording)."""
    return [p for p, m in before.items() if after.get(p) != m]
