"""A side loads the revision's kernel tree (gates/side/tree.py): every module of ``kernels``
must come from the file its name puts it in, so a package's extended ``__path__`` cannot have
the gates import a candidate's file as the protected contracts (catalogue case 27's run-time
half; the scope gate refuses the spelling)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from gates.side.tree import misplaced

ROOT = Path(__file__).resolve().parents[2]
SHADOW = ("import os as _os\n\n"
          "__path__.insert(0, _os.path.join(_os.path.dirname(__file__), 'shadow'))\n")


def test_a_module_from_another_file_than_its_name_is_named(tmp_path):
    k = tmp_path / "kernels" / "k31"
    ok = {"kernels": str(tmp_path / "kernels/__init__.py"), "kernels.k31": str(k / "__init__.py"),
          "kernels.k31.contracts": str(k / "contracts.py")}
    assert misplaced(ok, tmp_path) == []
    moved = {**ok, "kernels.k31.contracts": str(k / "shadow" / "contracts.py")}
    (why,) = misplaced(moved, tmp_path)
    assert why.startswith(f"kernels.k31.contracts from {k / 'shadow' / 'contracts.py'} (expected {k / 'contracts.py'}")
    assert misplaced({**ok, "kernels.k31.x": None}, tmp_path)  # no file: not the tree's source


def _import_tree(root: Path) -> subprocess.CompletedProcess:
    code = ("import sys; from gates.side.tree import open_tree, import_tree; "
            f"open_tree({str(root)!r}); import_tree(); print('imported')")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"},
                          timeout=300)


def test_a_tree_that_extends_a_packages_path_is_refused_when_the_side_imports_it(tmp_path):
    shutil.copytree(ROOT / "kernels", tmp_path / "kernels")
    assert _import_tree(tmp_path).stdout.strip().endswith("imported")  # the tree as it is loads
    (tmp_path / "kernels/k31/__init__.py").write_text(SHADOW)
    (tmp_path / "kernels/k31/shadow").mkdir()
    shutil.copy(ROOT / "kernels/k31/contracts.py", tmp_path / "kernels/k31/shadow/contracts.py")
    r = _import_tree(tmp_path)
    assert r.returncode != 0 and "imported" not in r.stdout
    assert "TreeError: tree: " in r.stderr and "kernels.k31.contracts from" in r.stderr, r.stderr[-2000:]
    assert "shadow/contracts.py" in r.stderr
