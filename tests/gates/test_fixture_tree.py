"""The gates' fixture kernel tree (``candidates.FIXTURE_KERNELS``) runs the working tree's model:
its protected kernel files are the working tree's, byte for byte, so only the editable
kernels (the loop's to change) may differ from main's."""
from __future__ import annotations

from pathlib import Path

import yaml

from gates.rules import scope
from tests.gates.candidates import FIXTURE_KERNELS, ROOT, fixture_kernels


def _files(tree: Path) -> dict[str, bytes]:
    return {p.relative_to(tree).as_posix(): p.read_bytes() for p in (tree / "kernels").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def test_the_fixture_trees_protected_kernel_files_are_the_working_trees(tmp_path):
    fixture_kernels(tmp_path)
    protected = yaml.safe_load((ROOT / "kern.yaml").read_text())["protected"]
    pinned = {p: b for p, b in _files(tmp_path).items() if scope.matches(p, protected)}
    live = {p: b for p, b in _files(ROOT).items() if scope.matches(p, protected)}
    assert "kernels/k31/model.py" in pinned and "kernels/k31/dispatch.py" in pinned
    stale = sorted(p for p in pinned.keys() | live.keys() if pinned.get(p) != live.get(p))
    assert not stale, (f"tests/gates/candidates.py FIXTURE_KERNELS ({FIXTURE_KERNELS[:10]}) has protected "
                       f"kernel files unlike the working tree's: {stale}; move the pin to a commit "
                       f"that holds today's (and update the tests' edits to its editable sources)")
